//! A reconcile's deliveries, decided: which sink workers the spec wants,
//! whether their Secrets hold a usable URL or key (read at most once a
//! minute), the Slack threads a worker posted learned into the incidents,
//! which documents go to which sink now — within the namespace's rate
//! limit, the rest held in order or summarized — and Alertmanager's
//! schedule. Nothing here sends or starts anything: [`crate::apply`] starts
//! the workers and hands them the [`Outbox`], [`crate::report`] tells its
//! Events and counts it.

use std::collections::{BTreeSet, HashMap};
use std::sync::PoisonError;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::controller::{Data, SECRET_CHECK_EVERY, State};
use crate::crd::{PodAlert, SecretKeyRef, SlackSink, SlackThread};
use crate::delivery::{Learned, Payload, Target, Threading, read_secret};
use crate::incident::{Book, Change, Incident, Transition};
use crate::notify::{IncidentView, Notification, alertmanager_alerts};
use crate::pod::elapsed;
use crate::rules::Rules;
use crate::status::Summary;
use crate::throttle::Release;

/// A sink worker to start (or to replace, its target changed) or to stop.
pub(crate) enum WorkerChange {
    Start { name: &'static str, target: Target, path: &'static str, coalesce: bool },
    Stop(&'static str),
}

/// What one reconcile hands its sinks, in the order decided.
#[derive(Default)]
pub(crate) struct Outbox {
    /// Documents for the sink workers.
    pub(crate) sends: Vec<(&'static str, Payload)>,
    /// Transitions told as Events (the `events` sink).
    pub(crate) events: Vec<Notification>,
    /// Notifications not sent now: (sink, "held" | "dropped" | "summarized", how many).
    pub(crate) not_sent: Vec<(&'static str, &'static str, u64)>,
}

/// The sink workers the spec wants, by name.
pub(crate) fn wanted(alert: &PodAlert) -> BTreeSet<&'static str> {
    let s = &alert.spec.sinks;
    [
        ("slack", s.slack.as_ref().is_some_and(|x| slack_target(x, "").is_some())),
        ("webhook", s.webhook.is_some()),
        ("alertmanager", s.alertmanager.is_some()),
        ("teams", s.teams.is_some()),
        ("pagerduty", s.pagerduty.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect()
}

/// The workers to start, replace or stop so that they match the spec; a
/// stopped sink's held notifications go with it, and a new Alertmanager
/// target starts its schedule over.
pub(crate) fn worker_changes(alert: &PodAlert, ns: &str, st: &mut State) -> Vec<WorkerChange> {
    let s = &alert.spec.sinks;
    let secret = |r: &crate::crd::SecretKeyRef| Target::Secret { namespace: ns.to_string(), secret: r.clone() };
    let wanted: [(&'static str, Option<Target>, &'static str, bool); 5] = [
        ("slack", s.slack.as_ref().and_then(|x| slack_target(x, ns)), "", false),
        (
            "webhook",
            s.webhook.as_ref().map(|x| Target::Secret { namespace: ns.to_string(), secret: x.url_secret_ref.clone() }),
            "",
            false,
        ),
        ("alertmanager", s.alertmanager.as_ref().map(|x| Target::Url(x.url.clone())), "/api/v2/alerts", true),
        ("teams", s.teams.as_ref().map(|x| secret(&x.webhook_secret_ref)), "", false),
        (
            "pagerduty",
            s.pagerduty
                .as_ref()
                .map(|x| Target::RoutingKey { namespace: ns.to_string(), secret: x.routing_key_secret_ref.clone() }),
            "",
            false,
        ),
    ];
    let mut changes = Vec::new();
    for (name, target, path, coalesce) in wanted {
        match target {
            None => {
                st.held.remove(name);
                if st.sinks.contains_key(name) {
                    changes.push(WorkerChange::Stop(name));
                }
            }
            Some(target) => {
                if st.sinks.get(name).is_none_or(|s| s.target != target) {
                    if name == "alertmanager" {
                        st.alertmanager.reset();
                    }
                    // A first start (threads from status) or another
                    // channel or token: a thread posted with other ones
                    // is not replied to; the next transition starts one.
                    if name == "slack" {
                        forget_foreign_threads(alert, st);
                    }
                    changes.push(WorkerChange::Start { name, target, path, coalesce });
                }
            }
        }
    }
    changes
}

/// The channel (as the spec names it) and token Secret key of the
/// PodAlert's Slack sink with a bot token.
fn slack_bot(alert: &PodAlert) -> Option<(&str, &SecretKeyRef)> {
    let x = alert.spec.sinks.slack.as_ref().filter(|x| x.webhook_secret_ref.is_none())?;
    Some((x.channel.as_deref()?, x.bot_token_secret_ref.as_ref()?))
}

/// Whether `thread` was posted by the PodAlert's current Slack sink.
fn current_thread(alert: &PodAlert, thread: &SlackThread) -> bool {
    slack_bot(alert).is_some_and(|(channel, token)| thread.posted_with(channel, token))
}

/// Drops the incidents' threads that the current Slack sink did not post
/// (status written before a channel or token change, or before threads
/// said what posted them).
fn forget_foreign_threads(alert: &PodAlert, st: &mut State) {
    for i in st.book.incidents.values_mut() {
        if i.slack_thread.as_ref().is_some_and(|t| !current_thread(alert, t)) {
            i.slack_thread = None;
        }
    }
}

/// Where a Slack sink posts: its webhook, or Slack's Web API with its bot
/// token and channel (the schema admits exactly one of the two).
fn slack_target(x: &SlackSink, ns: &str) -> Option<Target> {
    let namespace = ns.to_string();
    match (&x.webhook_secret_ref, &x.bot_token_secret_ref, &x.channel) {
        (Some(secret), _, _) => Some(Target::Secret { namespace, secret: secret.clone() }),
        (None, Some(token), Some(channel)) => {
            Some(Target::SlackBot { namespace, token: token.clone(), channel: channel.clone() })
        }
        _ => None,
    }
}

/// What a sink's Secret key must hold.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Holds {
    Url,
    RoutingKey,
    BotToken,
}

/// Reads the sinks' Secrets (at most once a minute each) and checks that
/// they hold a usable URL, so a misconfiguration shows before the first
/// incident: each problem goes into the summary; the Secrets' problems are
/// also returned, for their Warnings.
pub(crate) async fn check_sink_secrets(
    alert: &PodAlert,
    ns: &str,
    st: &mut State,
    summary: &mut Summary,
    data: &Data,
    now: Timestamp,
) -> Vec<(&'static str, String)> {
    let s = &alert.spec.sinks;
    let slack_bot = s.slack.as_ref().filter(|x| x.webhook_secret_ref.is_none());
    let refs = [
        ("slack", s.slack.as_ref().and_then(|x| x.webhook_secret_ref.as_ref()), Holds::Url),
        ("slack", slack_bot.and_then(|x| x.bot_token_secret_ref.as_ref()), Holds::BotToken),
        ("webhook", s.webhook.as_ref().map(|x| &x.url_secret_ref), Holds::Url),
        ("teams", s.teams.as_ref().map(|x| &x.webhook_secret_ref), Holds::Url),
        ("pagerduty", s.pagerduty.as_ref().map(|x| &x.routing_key_secret_ref), Holds::RoutingKey),
    ];
    let rules = &data.delivery.rules;
    if let Some(Err(e)) = s.alertmanager.as_ref().map(|am| crate::delivery::check_url(&am.url, "alertmanager", rules)) {
        summary.sink_problems.push(("alertmanager".into(), e));
    }
    let mut problems = Vec::new();
    for (sink, r, holds) in refs {
        let Some(r) = r else { continue };
        let fresh = st.secret_checks.get(r).is_some_and(|(at, _)| elapsed(*at, now) < SECRET_CHECK_EVERY);
        if !fresh {
            let result = match read_secret(&data.ctx.client, ns, r).await {
                // PagerDuty's Secret holds the routing key, a Slack bot's
                // its token; the URL is the admin's.
                Ok(key) if holds == Holds::RoutingKey => crate::delivery::check_routing_key(&key)
                    .map_err(|e| format!("Secret {}/{} key {}: {e}", ns, r.name, r.key)),
                Ok(token) if holds == Holds::BotToken => crate::delivery::check_bot_token(&token)
                    .map_err(|e| format!("Secret {}/{} key {}: {e}", ns, r.name, r.key)),
                Ok(url) => crate::delivery::check_url(&url, sink, rules)
                    .map(|_| ())
                    .map_err(|e| format!("Secret {}/{} key {}: {e}", ns, r.name, r.key)),
                Err(f) => Err(f.message),
            };
            st.secret_checks.insert(r.clone(), (now, result));
        }
        if let Some((_, Err(e))) = st.secret_checks.get(r) {
            summary.sink_problems.push((sink.to_string(), e.clone()));
            problems.push((sink, e.clone()));
        }
    }
    st.secret_checks.retain(|k, _| refs.iter().any(|(_, r, _)| *r == Some(k)));
    problems
}

/// The Slack threads the worker posted (a bot token's sink), into their
/// incidents, so that status keeps them across a restart; the worker
/// forgets the threads of incidents the book no longer holds. A thread is
/// taken only for the incident's current opening (one that resolved and
/// opened again starts a new thread) and from the current sink (the
/// worker may still be the one of a channel or token just changed); a
/// thread the worker found gone is forgotten.
pub(crate) fn learn_threads(alert: &PodAlert, st: &mut State) {
    let Some(threads) = st.sinks.get("slack").map(|s| s.threads.clone()) else { return };
    let learned = threads.snapshot();
    if learned.is_empty() {
        return;
    }
    let ids = take_threads(alert, &mut st.book, learned);
    threads.retain(|id| ids.contains_key(id));
}

/// [`learn_threads`]' decisions: what the worker learned, into the book's
/// incidents. Returns the incidents by id.
fn take_threads(
    alert: &PodAlert,
    book: &mut Book,
    learned: Vec<(String, Learned)>,
) -> HashMap<String, crate::observe::Key> {
    let ids: HashMap<String, crate::observe::Key> = book.incidents.keys().map(|k| (k.to_string(), k.clone())).collect();
    for (id, learned) in learned {
        let Some(i) = ids.get(&id).and_then(|k| book.incidents.get_mut(k)) else { continue };
        if i.last_opened != learned.opening {
            continue;
        }
        match learned.thread {
            Some(t) if current_thread(alert, &t) => i.slack_thread = Some(t),
            Some(_) => {}
            None => i.slack_thread = None,
        }
    }
    ids
}

/// The thread a Slack notification of `inc` belongs to. A notification
/// older than its incident's opening (held by the rate limit while the
/// incident resolved and opened again) is about another incarnation: it
/// knows no thread, and posts a message of its own.
fn threading(n: &Notification, inc: Option<&Incident>) -> Threading {
    let current = inc.filter(|i| i.last_opened.is_none_or(|opened| opened <= n.at));
    Threading {
        // The incident key's Display, as `learn_threads` finds it.
        incident: n.incident.title(),
        opening: current.and_then(|i| i.last_opened),
        opens: matches!(n.change, Change::Opened { .. }),
        known: current.and_then(|i| i.slack_thread.clone()),
    }
}

/// The document `n` is for `sink`, rendered when it is sent; a Slack
/// message says which incident's thread it belongs to (`inc`: the
/// incident as the book holds it now), used with a bot token.
fn payload(sink: &str, n: Notification, alert: &PodAlert, inc: Option<&Incident>) -> Payload {
    match sink {
        "slack" => {
            let threading = threading(&n, inc);
            Payload::new(move || n.slack()).in_thread(threading)
        }
        "teams" => Payload::new(move || n.teams()),
        "pagerduty" => {
            let severity = alert.spec.sinks.pagerduty.as_ref().map(|p| p.severity).unwrap_or_default();
            Payload::new(move || n.pagerduty(severity.as_str()))
        }
        _ => Payload::new(move || n.webhook()),
    }
}

/// The sinks a person reads, held to the namespace's rate limit.
const LIMITED: [&str; 3] = ["slack", "webhook", "teams"];

/// Each transition for the Events sink; for Slack, Teams and the webhook as
/// the namespace's rate limit allows (the rest wait, in order); for
/// PagerDuty each at once: PagerDuty deduplicates by incident, and a
/// summary or a dropped document would leave its incident open (the sink's
/// queue is bounded like the others').
pub(crate) fn notify(
    alert: &PodAlert,
    rules: &Rules,
    transitions: &[Transition],
    st: &mut State,
    data: &Data,
    now: Timestamp,
    out: &mut Outbox,
) {
    let podalert = (alert.namespace().unwrap_or_default(), alert.name_any());
    let ns = podalert.0.clone();
    let live = wanted(alert);
    for t in transitions {
        let Some(inc) = st.book.incidents.get(&t.key) else { continue };
        let n = Notification {
            podalert: podalert.clone(),
            change: t.change.clone(),
            incident: IncidentView::of(inc, rules.tail_lines, rules.max_bytes)
                .with_events(inc, rules.events)
                .with_runbook(rules.runbook.as_deref())
                .with_debug_hint(inc, data.options.debug_hint),
            at: now,
        };
        if live.contains("pagerduty") {
            out.sends.push(("pagerduty", payload("pagerduty", n.clone(), alert, None)));
        }
        for name in LIMITED {
            if !live.contains(name) {
                continue;
            }
            let held = st.held.entry(name).or_default();
            let token =
                held.is_empty() && data.limiter.lock().unwrap_or_else(PoisonError::into_inner).try_take(&ns, now);
            if token {
                out.sends.push((name, payload(name, n.clone(), alert, Some(inc))));
            } else if held.hold(n.clone()) {
                out.not_sent.push((name, "held", 1));
            } else {
                out.not_sent.push((name, "dropped", 1));
            }
        }
        if alert.spec.sinks.events {
            out.events.push(n);
        }
    }
}

/// What waits for the rate limit, released as tokens allow: each alone when
/// the tokens cover them, else the oldest alone or all as one summary.
/// Returns, while some still wait, when to look again and how many wait.
pub(crate) fn release_held(
    alert: &PodAlert,
    ns: &str,
    st: &mut State,
    data: &Data,
    now: Timestamp,
    out: &mut Outbox,
) -> Option<(Timestamp, usize)> {
    let podalert = (ns.to_string(), alert.name_any());
    let live = wanted(alert);
    let mut limiter = data.limiter.lock().unwrap_or_else(PoisonError::into_inner);
    for (name, held) in st.held.iter_mut() {
        if !live.contains(name) {
            continue;
        }
        while !held.is_empty() {
            let tokens = limiter.available(ns, now);
            if !limiter.try_take(ns, now) {
                break;
            }
            match held.release(tokens) {
                Some(Release::One(n)) => {
                    let id = n.incident.title();
                    let inc = st.book.incidents.values().find(|i| i.key.to_string() == id);
                    out.sends.push((name, payload(name, *n, alert, inc)));
                }
                Some(Release::Summary(all, more)) => {
                    out.not_sent.push((name, "summarized", all.len() as u64));
                    let body = if *name == "slack" {
                        crate::throttle::slack_summary(&podalert, &all, more)
                    } else if *name == "teams" {
                        crate::throttle::teams_summary(&podalert, &all, more)
                    } else {
                        crate::throttle::webhook_summary(&podalert, &all, more, now)
                    };
                    out.sends.push((name, body.into()));
                }
                None => break,
            }
        }
    }
    st.held.retain(|_, h| !h.is_empty());
    let waiting: usize = st.held.values().map(|h| h.waiting.len() + h.overflow).sum();
    (waiting > 0).then(|| (limiter.next_token(ns, now), waiting))
}

/// Alertmanager's full list of alerts, when something changed or a minute
/// passed; returns when to send again (None: nothing to tell). A change
/// takes a token of the namespace's rate limit; without one it goes with
/// the minute's re-send.
#[allow(clippy::too_many_arguments)]
pub(crate) fn push_alertmanager(
    alert: &PodAlert,
    ns: &str,
    rules: &Rules,
    st: &mut State,
    data: &Data,
    changed: bool,
    now: Timestamp,
    out: &mut Outbox,
) -> Option<Timestamp> {
    if !wanted(alert).contains("alertmanager") {
        return None;
    }
    let incidents = st.book.for_alertmanager(now);
    let changed = changed
        && (st.alertmanager.is_due(now)
            || data.limiter.lock().unwrap_or_else(PoisonError::into_inner).try_take(ns, now));
    let (send, next) = st.alertmanager.tick(!incidents.is_empty(), changed, now);
    if send {
        let limits = (rules.tail_lines, rules.max_bytes, rules.events);
        let body = alertmanager_alerts(
            (ns, &alert.name_any()),
            &incidents,
            limits,
            rules.runbook.as_deref(),
            data.options.debug_hint,
            now,
        );
        out.sends.push(("alertmanager", body.into()));
    }
    next
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::delivery::{Calls, choose};
    use crate::notify::IncidentView;
    use crate::observe::tests::{crashing, pod, rules, t};
    use crate::observe::{RestartHistory, evaluate};

    fn token() -> SecretKeyRef {
        SecretKeyRef { name: "slack-bot".into(), key: "token".into() }
    }

    fn alert(channel: &str, token: &SecretKeyRef) -> PodAlert {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "PodAlert",
            "metadata": {"name": "threads", "namespace": "a"},
            "spec": {"sinks": {"slack": {"botTokenSecretRef": token, "channel": channel}}},
        }))
        .unwrap()
    }

    /// A thread as the worker learns it: posted with `channel` and `token`.
    fn posted(ts: &str, channel: &str, token: &SecretKeyRef) -> SlackThread {
        SlackThread {
            channel: "C0123456789".into(),
            ts: ts.into(),
            spec_channel: Some(channel.into()),
            bot_token_secret_ref: Some(token.clone()),
        }
    }

    fn note(book: &Book, change: Change, at: i64) -> Notification {
        let inc = book.incidents.values().next().unwrap();
        Notification {
            podalert: ("a".into(), "threads".into()),
            change,
            incident: IncidentView::of(inc, 10, 1000),
            at: t(at),
        }
    }

    /// An incident that resolves and opens again is a new thread: what the
    /// worker learned of the first opening is neither taken into the book
    /// (status) nor replied to, and a notification of the first opening
    /// released after the second is not sent into the second's thread.
    #[test]
    fn a_reopened_incident_starts_a_new_thread() {
        let r =
            rules(serde_json::json!({"cooldown": "1m", "alerts": {"checkRunningPods": true, "resolveAfter": "1m"}}));
        let alert = alert("#alerts", &token());
        let token = token();
        let bot = crate::delivery::Bot { namespace: "a", token: &token, channel: "#alerts" };
        let mut book = Book::default();
        let mut history = RestartHistory::default();
        let mut step = |book: &mut Book, pods: &[crate::pod::PodView], now: i64| {
            let f = evaluate(pods.iter(), &r, &mut history, t(now));
            book.step(&f, &r, t(now))
        };

        // Opened: it posts, and the worker learns the thread for this opening.
        let ts = step(&mut book, &[crashing(pod("w", "web"), 3, 0, "Error")], 1);
        assert!(matches!(ts[..], [Transition { change: Change::Opened { .. }, .. }]), "{ts:?}");
        let first = threading(&note(&book, Change::Opened { replaces: None }, 1), book.incidents.values().next());
        assert!(first.opens && first.opening == Some(t(1)));
        let id = first.incident.clone();
        let old = Learned { opening: first.opening, thread: Some(posted("1.1", "#alerts", &token)) };
        take_threads(&alert, &mut book, vec![(id.clone(), old.clone())]);
        assert_eq!(book.incidents.values().next().unwrap().slack_thread, old.thread);

        // Resolved: a reply in that thread.
        step(&mut book, &[pod("w", "web")], 601);
        let ts = step(&mut book, &[pod("w", "web")], 662);
        assert_eq!(ts[0].change, Change::Resolved);
        let resolved = note(&book, Change::Resolved, 662);
        let thread = threading(&resolved, book.incidents.values().next());
        assert_eq!(choose(Some(&thread), Some(old.clone()), &bot), Calls::Reply(posted("1.1", "#alerts", &token)));

        // Open again: a new opening, no thread yet, and the first opening's
        // thread (still held by the worker) is not taken back.
        let ts = step(&mut book, &[crashing(pod("w", "web"), 9, 1800, "Error")], 1801);
        assert!(matches!(ts[..], [Transition { change: Change::Opened { .. }, .. }]), "{ts:?}");
        take_threads(&alert, &mut book, vec![(id.clone(), old.clone())]);
        let inc = book.incidents.values().next().unwrap();
        assert_eq!((inc.slack_thread.as_ref(), inc.last_opened), (None, Some(t(1801))));

        // Its opening was not posted (summarized, failed): its escalation is
        // a new message, not a reply in the old thread.
        let escalated = threading(&note(&book, Change::Escalated { level: 10 }, 1900), Some(inc));
        assert_eq!((escalated.opening, escalated.known.as_ref()), (Some(t(1801)), None));
        assert_eq!(choose(Some(&escalated), Some(old.clone()), &bot), Calls::Post);

        // Once the new opening is posted, its thread is the one taken.
        let new = Learned { opening: Some(t(1801)), thread: Some(posted("2.2", "#alerts", &token)) };
        take_threads(&alert, &mut book, vec![(id, new.clone())]);
        let inc = book.incidents.values().next().unwrap();
        assert_eq!(inc.slack_thread, new.thread);

        // The first opening's resolve, held by the rate limit and released
        // after the second opening: no thread of the second one.
        let late = threading(&resolved, Some(inc));
        assert_eq!((late.opening, late.known.as_ref()), (None, None));
        assert_eq!(choose(Some(&late), Some(new), &bot), Calls::Post);
    }

    /// Threads restored from status (a first start) or kept while the sink
    /// changed are reused only if the current sink posted them: same
    /// channel (as the spec names it) and same token Secret key.
    #[test]
    fn threads_of_another_channel_or_token_are_dropped() {
        let r = rules(serde_json::json!({}));
        let mut base = Book::default();
        let f = evaluate([crashing(pod("w", "web"), 3, 0, "Error")].iter(), &r, &mut RestartHistory::default(), t(1));
        base.step(&f, &r, t(1));
        let kept = |alert: &PodAlert, thread: SlackThread| {
            let mut st = State { book: base.clone(), ..State::default() };
            st.book.incidents.values_mut().for_each(|i| i.slack_thread = Some(thread.clone()));
            // The first start's worker: status threads are checked then.
            let changes = worker_changes(alert, "a", &mut st);
            assert!(changes.iter().any(|c| matches!(c, WorkerChange::Start { name: "slack", .. })));
            st.book.incidents.values().next().unwrap().slack_thread.is_some()
        };
        let token = token();
        let other_key = SecretKeyRef { name: "slack-bot".into(), key: "other".into() };
        let other_secret = SecretKeyRef { name: "other-bot".into(), key: "token".into() };
        let current = alert("#alerts", &token);
        assert!(kept(&current, posted("1.1", "#alerts", &token)));
        assert!(!kept(&current, posted("1.1", "#alerts-old", &token)), "another channel");
        assert!(!kept(&current, posted("1.1", "#alerts", &other_key)), "another key");
        assert!(!kept(&current, posted("1.1", "#alerts", &other_secret)), "another Secret");
        // Recorded before threads said what posted them: not reused.
        let legacy = SlackThread { channel: "C0123456789".into(), ts: "1.1".into(), ..SlackThread::default() };
        assert!(!kept(&current, legacy));
        // A webhook sink replies in no thread.
        let webhook: PodAlert = serde_json::from_value(serde_json::json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "PodAlert",
            "metadata": {"name": "threads", "namespace": "a"},
            "spec": {"sinks": {"slack": {"webhookSecretRef": {"name": "hook", "key": "url"}}}},
        }))
        .unwrap();
        assert!(!kept(&webhook, posted("1.1", "#alerts", &token)));

        // What the old worker (another channel) learned after the change is
        // not taken into the book either.
        let mut book = base.clone();
        let (id, opening) = book.incidents.values().next().map(|i| (i.key.to_string(), i.last_opened)).unwrap();
        let stale = Learned { opening, thread: Some(posted("1.1", "#alerts-old", &token)) };
        take_threads(&current, &mut book, vec![(id.clone(), stale)]);
        assert_eq!(book.incidents.values().next().unwrap().slack_thread, None);
        // A thread the worker found gone is forgotten.
        book.incidents.values_mut().for_each(|i| i.slack_thread = Some(posted("1.1", "#alerts", &token)));
        take_threads(&current, &mut book, vec![(id, Learned { opening, thread: None })]);
        assert_eq!(book.incidents.values().next().unwrap().slack_thread, None);
    }
}
