//! A reconcile's sinks: the workers that match the spec, the Secrets they
//! read, notifications handed to them (within the namespace's rate limit),
//! Alertmanager's schedule, and the sinks' state for the status.

use std::sync::PoisonError;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};

use crate::controller::{Data, SECRET_CHECK_EVERY, State, condition};
use crate::crd::{PodAlert, SinkStatus};
use crate::delivery::{Payload, Target, read_secret};
use crate::incident::{Change, Transition};
use crate::notify::{IncidentView, Notification, alertmanager_alerts};
use crate::pod::elapsed;
use crate::rules::Rules;
use crate::status::{self, Summary};
use crate::throttle::Release;

/// Starts, replaces or stops sink workers to match the spec.
pub(crate) async fn sync_sinks(alert: &PodAlert, ns: &str, st: &mut State, data: &Data) {
    let s = &alert.spec.sinks;
    let wanted: [(&'static str, Option<Target>, &'static str, bool); 3] = [
        (
            "slack",
            s.slack
                .as_ref()
                .map(|x| Target::Secret { namespace: ns.to_string(), secret: x.webhook_secret_ref.clone() }),
            "",
            false,
        ),
        (
            "webhook",
            s.webhook.as_ref().map(|x| Target::Secret { namespace: ns.to_string(), secret: x.url_secret_ref.clone() }),
            "",
            false,
        ),
        ("alertmanager", s.alertmanager.as_ref().map(|x| Target::Url(x.url.clone())), "/api/v2/alerts", true),
    ];
    for (name, target, path, coalesce) in wanted {
        match target {
            None => {
                st.sinks.remove(name);
                st.held.remove(name);
            }
            Some(t) => {
                if st.sinks.get(name).is_none_or(|s| s.target != t) {
                    let sink = data.delivery.start(name, t, path, coalesce, data.trigger_for(alert));
                    st.sinks.insert(name, sink);
                    if name == "alertmanager" {
                        st.alertmanager.reset();
                    }
                }
            }
        }
    }
}

/// Checks that the sinks' Secrets exist and hold a usable URL (at most once
/// a minute each), so a misconfiguration shows before the first incident.
pub(crate) async fn check_sink_secrets(
    alert: &PodAlert,
    ns: &str,
    st: &mut State,
    summary: &mut Summary,
    data: &Data,
    now: Timestamp,
) {
    let s = &alert.spec.sinks;
    let refs = [
        ("slack", s.slack.as_ref().map(|x| &x.webhook_secret_ref)),
        ("webhook", s.webhook.as_ref().map(|x| &x.url_secret_ref)),
    ];
    let rules = &data.delivery.rules;
    if let Some(Err(e)) = s.alertmanager.as_ref().map(|am| crate::delivery::check_url(&am.url, false, rules)) {
        summary.sink_problems.push(("alertmanager".into(), e));
    }
    for (sink, r) in refs {
        let Some(r) = r else { continue };
        let fresh = st.secret_checks.get(r).is_some_and(|(at, _)| elapsed(*at, now) < SECRET_CHECK_EVERY);
        if !fresh {
            let result = match read_secret(&data.ctx.client, ns, r).await {
                Ok(url) => crate::delivery::check_url(&url, sink == "slack", rules)
                    .map(|_| ())
                    .map_err(|e| format!("Secret {}/{} key {}: {e}", ns, r.name, r.key)),
                Err(f) => Err(f.message),
            };
            st.secret_checks.insert(r.clone(), (now, result));
        }
        if let Some((_, Err(e))) = st.secret_checks.get(r) {
            let was = condition(&st.conditions, status::SINKS_HEALTHY);
            if !was.is_some_and(|c| c.message.contains(e.as_str())) {
                tracing::warn!(podalert = %alert.name_any(), sink, error = %e, "sink misconfigured");
                data.ctx.events.warning(
                    &alert.object_ref(&()),
                    "SinkMisconfigured",
                    "Validate",
                    format!("{sink}: {e}"),
                );
            }
            summary.sink_problems.push((sink.to_string(), e.clone()));
        }
    }
    st.secret_checks.retain(|k, _| refs.iter().any(|(_, r)| *r == Some(k)));
}

/// The document `n` is for `sink`, rendered when it is sent.
fn payload(sink: &str, n: Notification) -> Payload {
    if sink == "slack" { Payload::new(move || n.slack()) } else { Payload::new(move || n.webhook()) }
}

/// Sends each transition to the Events sink, and to Slack and the webhook
/// as the namespace's rate limit allows (the rest wait, in order).
pub(crate) fn notify(
    alert: &PodAlert,
    rules: &Rules,
    oref: &ObjectReference,
    transitions: &[Transition],
    st: &mut State,
    data: &Data,
    now: Timestamp,
) {
    let podalert = (alert.namespace().unwrap_or_default(), alert.name_any());
    let ns = podalert.0.clone();
    for t in transitions {
        let Some(inc) = st.book.incidents.get(&t.key) else { continue };
        let n = Notification {
            podalert: podalert.clone(),
            change: t.change.clone(),
            incident: IncidentView::of(inc, rules.tail_lines, rules.max_bytes),
            at: now,
        };
        if alert.spec.sinks.events {
            match t.change {
                Change::Resolved => data.ctx.events.normal(oref, n.event_reason(), "Notify", n.event_note()),
                _ => data.ctx.events.warning(oref, n.event_reason(), "Notify", n.event_note()),
            }
            data.metrics.notified("events", "success");
        }
        for name in ["slack", "webhook"] {
            let Some(sink) = st.sinks.get(name) else { continue };
            let held = st.held.entry(name).or_default();
            let token =
                held.is_empty() && data.limiter.lock().unwrap_or_else(PoisonError::into_inner).try_take(&ns, now);
            if token {
                sink.send(payload(name, n.clone()), &data.metrics, name);
            } else if held.hold(n.clone()) {
                data.metrics.notified(name, "held");
            } else {
                data.metrics.notified(name, "dropped");
            }
        }
    }
}

/// Sends what waits for the rate limit as tokens allow: each alone when the
/// tokens cover them, else the oldest alone or all as one summary. Returns,
/// while some still wait, when to look again and how many wait.
pub(crate) fn release_held(
    alert: &PodAlert,
    ns: &str,
    st: &mut State,
    data: &Data,
    now: Timestamp,
) -> Option<(Timestamp, usize)> {
    let podalert = (ns.to_string(), alert.name_any());
    let mut limiter = data.limiter.lock().unwrap_or_else(PoisonError::into_inner);
    for (name, held) in st.held.iter_mut() {
        let Some(sink) = st.sinks.get(name) else { continue };
        while !held.is_empty() {
            let tokens = limiter.available(ns, now);
            if !limiter.try_take(ns, now) {
                break;
            }
            match held.release(tokens) {
                Some(Release::One(n)) => {
                    sink.send(payload(name, *n), &data.metrics, name);
                }
                Some(Release::Summary(all, more)) => {
                    data.metrics.notifications.with_label_values(&[name, "summarized"]).inc_by(all.len() as u64);
                    let body = if *name == "slack" {
                        crate::throttle::slack_summary(&podalert, &all, more)
                    } else {
                        crate::throttle::webhook_summary(&podalert, &all, more, now)
                    };
                    sink.send(body, &data.metrics, name);
                }
                None => break,
            }
        }
    }
    st.held.retain(|_, h| !h.is_empty());
    let waiting: usize = st.held.values().map(|h| h.waiting.len() + h.overflow).sum();
    (waiting > 0).then(|| (limiter.next_token(ns, now), waiting))
}

/// Sends Alertmanager the full list of alerts when something changed or a
/// minute passed; returns when to send again (None: nothing to tell). A
/// change takes a token of the namespace's rate limit; without one it goes
/// with the minute's re-send.
pub(crate) fn push_alertmanager(
    alert: &PodAlert,
    ns: &str,
    rules: &Rules,
    st: &mut State,
    data: &Data,
    changed: bool,
    now: Timestamp,
) -> Option<Timestamp> {
    let sink = st.sinks.get("alertmanager")?;
    let incidents = st.book.for_alertmanager(now);
    let changed = changed
        && (st.alertmanager.is_due(now)
            || data.limiter.lock().unwrap_or_else(PoisonError::into_inner).try_take(ns, now));
    let (send, next) = st.alertmanager.tick(!incidents.is_empty(), changed, now);
    if send {
        let body = alertmanager_alerts((ns, &alert.name_any()), &incidents, (rules.tail_lines, rules.max_bytes), now);
        sink.send(body, &data.metrics, "alertmanager");
    }
    next
}

pub(crate) fn sink_statuses(alert: &PodAlert, st: &State) -> Vec<SinkStatus> {
    let mut out = Vec::new();
    if alert.spec.sinks.events {
        out.push(SinkStatus { name: "events".into(), healthy: true, ..Default::default() });
    }
    for (name, sink) in &st.sinks {
        out.push(sink.state().to_status(name));
    }
    out
}
