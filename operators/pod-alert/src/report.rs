//! What a PodAlert's reconcile tells: its status (written only when it
//! says something new, condition times aside), the incidents' Events (the
//! `events` sink), the Warnings of a refusal, of a misconfigured sink and
//! of held notifications, and the metrics (firing incidents, notifications
//! held, dropped or summarized, log tail bytes).

use std::collections::BTreeMap;

use flotilla_shared::conditions::already_said;
use flotilla_shared::status::apply_status_if_new;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Api;
use kube::{Resource, ResourceExt};

use crate::controller::{Data, State, condition};
use crate::crd::{PodAlert, Reason, SinkStatus};
use crate::error::Error;
use crate::incident::Change;
use crate::sinks::Outbox;
use crate::status::{self, Summary};

/// A PodAlert not evaluated: a Warning once per reason and message.
pub(crate) fn refused(oref: &ObjectReference, st: &State, data: &Data, reason: &str, message: &str) {
    if !already_said(Some(&st.conditions), "Ready", reason, message) {
        data.ctx.events.warning(oref, reason, "Validate", format!("PodAlert not evaluated: {message}"));
    }
}

/// The incidents' transitions as Events, and the notifications not sent
/// now counted (sent ones are counted by their workers).
pub(crate) fn deliveries(oref: &ObjectReference, out: &Outbox, data: &Data) {
    for n in &out.events {
        match n.change {
            Change::Resolved => data.ctx.events.normal(oref, n.event_reason(), "Notify", n.event_note()),
            _ => data.ctx.events.warning(oref, n.event_reason(), "Notify", n.event_note()),
        }
        data.metrics.notified("events", "success");
    }
    for (sink, outcome, n) in &out.not_sent {
        data.metrics.notifications.with_label_values(&[sink, outcome]).inc_by(*n);
    }
}

/// A sink's Secret that does not hold a usable URL: a Warning when the
/// problem is new (the last status did not name it).
pub(crate) fn sink_misconfigured(alert: &PodAlert, st: &State, data: &Data, problems: &[(&'static str, String)]) {
    let was = condition(&st.conditions, status::SINKS_HEALTHY);
    for (sink, e) in problems {
        if !was.is_some_and(|c| c.message.contains(e.as_str())) {
            tracing::warn!(podalert = %alert.name_any(), sink, error = %e, "sink misconfigured");
            data.ctx.events.warning(&alert.object_ref(&()), "SinkMisconfigured", "Validate", format!("{sink}: {e}"));
        }
    }
}

/// Notifications wait for the namespace's rate limit: a Warning when that
/// begins; the Throttled condition's message.
pub(crate) fn throttled(oref: &ObjectReference, ns: &str, waiting: usize, st: &State, data: &Data) -> String {
    if condition(&st.conditions, status::THROTTLED).is_none_or(|c| c.status != "True") {
        data.ctx.events.warning(
            oref,
            "NotificationsThrottled",
            "Notify",
            format!(
                "notifications wait for namespace {ns}'s rate limit; they go out as it allows, several as one summary"
            ),
        );
    }
    format!(
        "{waiting} notifications wait for namespace {ns}'s rate limit ({} per minute, --max-notifications-per-minute-per-namespace); when several wait for a sink they go out as one summary",
        data.options.notifications_per_minute
    )
}

/// The metrics and the status of one reconcile.
pub(crate) async fn report(
    alert: &PodAlert,
    ns: &str,
    st: &mut State,
    mut summary: Summary,
    data: &Data,
) -> Result<(), Error> {
    let uid = alert.uid().unwrap_or_default();
    // Sinks' delivery state, and held-back counts into the metric.
    summary.sinks = sink_statuses(alert, st);
    for (cause, total) in &st.book.held_back {
        let before = st.counted.get(cause).copied().unwrap_or(0);
        data.metrics.suppressed(cause, u64::try_from(total - before).unwrap_or(0));
    }
    st.counted = st.book.held_back.clone();
    let mut counts: BTreeMap<(String, Reason), usize> = BTreeMap::new();
    for i in st.book.incidents.values().filter(|i| i.phase.is_open()) {
        *counts.entry((i.key.namespace.clone(), i.key.reason)).or_default() += 1;
    }
    data.set_firing(&uid, counts);
    data.metrics.log_tail_bytes.set(i64::try_from(data.tails.held()).unwrap_or(i64::MAX));

    let new = status::build(Some(&st.conditions), alert.metadata.generation, &st.book, &summary);
    let api: Api<PodAlert> = Api::namespaced(data.ctx.client.clone(), ns);
    if apply_status_if_new(&api, &alert.name_any(), &data.ctx.field_manager, &mut st.written, &new)
        .await
        .map_err(Error::Status)?
    {
        st.conditions = new.conditions;
    }
    Ok(())
}

/// The sinks' delivery state, for the status.
fn sink_statuses(alert: &PodAlert, st: &State) -> Vec<SinkStatus> {
    let mut out = Vec::new();
    if alert.spec.sinks.events {
        out.push(SinkStatus { name: "events".into(), healthy: true, ..Default::default() });
    }
    for (name, sink) in &st.sinks {
        out.push(sink.state().to_status(name));
    }
    out
}
