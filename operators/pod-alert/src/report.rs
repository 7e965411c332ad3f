//! What a PodAlert's reconcile tells: its status (written only when it
//! says something new, condition times aside), the Warnings of a refusal
//! and of held notifications, and the metrics (firing incidents,
//! notifications held back, log tail bytes).

use std::collections::BTreeMap;

use flotilla_shared::conditions::already_said;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;

use crate::controller::{Data, State, condition};
use crate::crd::{PodAlert, PodAlertStatus, Reason};
use crate::error::Error;
use crate::sinks::sink_statuses;
use crate::status::{self, Summary};

/// What a status says, condition times aside: equal fingerprints, no write.
fn fingerprint(s: &PodAlertStatus) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut s = s.clone();
    for c in &mut s.conditions {
        c.last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH);
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_vec(&s).unwrap_or_default().hash(&mut h);
    h.finish()
}

/// A PodAlert not evaluated: a Warning once per reason and message.
pub(crate) fn refused(oref: &ObjectReference, st: &State, data: &Data, reason: &str, message: &str) {
    if !already_said(Some(&st.conditions), "Ready", reason, message) {
        data.ctx.events.warning(oref, reason, "Validate", format!("PodAlert not evaluated: {message}"));
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
    let print = fingerprint(&new);
    if st.written != Some(print) {
        let api: Api<PodAlert> = Api::namespaced(data.ctx.client.clone(), ns);
        flotilla_shared::apply_status(&api, &alert.name_any(), &data.ctx.field_manager, &new)
            .await
            .map_err(Error::Status)?;
        st.written = Some(print);
        st.conditions = new.conditions;
    }
    Ok(())
}
