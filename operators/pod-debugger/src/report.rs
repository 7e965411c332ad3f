//! What a PodDebugger's reconcile tells: what each addition came to (the
//! pod's decision, Events, metrics), a refusal as a Warning (once per
//! reason and message) and counted in the metrics, and the status, from the
//! plan or the refusal, written only when it changed.

use std::time::Instant;

use flotilla_shared::conditions::already_said;
use flotilla_shared::status::apply_status_if_changed;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Api;
use kube::{Resource, ResourceExt};

use crate::apply::Added;
use crate::controller::{Data, RuleState};
use crate::copy::copy_name;
use crate::copy_plan::COPY_KEY;
use crate::crd::PodDebugger;
use crate::error::Error;
use crate::plan::{Decision, Expiry, PodPlan, Refusal};
use crate::status::{self, Outcome};

/// Reports one reconcile of `rule`: refused (why), or what its plans did.
pub(crate) async fn report(
    rule: &PodDebugger,
    ns: &str,
    container: &str,
    expiry: Expiry,
    outcome: Outcome<'_>,
    data: &Data,
) -> Result<(), Error> {
    let name = rule.name_any();
    let said = |reason: &str, message: &str| {
        already_said(rule.status.as_ref().map(|s| s.conditions.as_slice()), "Ready", reason, message)
    };
    if let Outcome::Refused { reason, message } = &outcome {
        if !said(reason, message) {
            tracing::warn!(poddebugger = %name, reason, message = %message, "refused");
            let note = format!("no debug container added: {message}");
            data.ctx.events.warning(&rule.object_ref(&()), reason, "Validate", note);
            data.metrics.refusals.with_label_values(&[reason]).inc();
        }
    } else if let Expiry::Expired { at } = expiry {
        // Expiry is the end its author asked for, not a failure: a Normal
        // Event, once (the condition says it was told).
        let message = status::expired_message(at);
        if !said("Expired", &message) {
            tracing::info!(poddebugger = %name, expired_at = %at, "expired");
            data.ctx.events.normal(&rule.object_ref(&()), "Expired", "Expire", message);
        }
    }
    let new = status::build(rule.status.as_ref(), rule.metadata.generation, container, expiry, outcome);
    let api: Api<PodDebugger> = Api::namespaced(data.ctx.client.clone(), ns);
    apply_status_if_changed(&api, &name, &data.ctx.field_manager, rule.status.as_ref(), &new)
        .await
        .map_err(Error::Status)?;
    Ok(())
}

/// What the additions' answers mean: each pod's decision turns Added (an
/// Event on the pod, one on the PodDebugger naming the first few) or
/// Refused (retried with backoff; a Warning on the first refusal), and the
/// metrics count them.
pub(crate) fn additions(
    rule: &PodDebugger,
    ns: &str,
    container: &str,
    plans: &mut [PodPlan],
    results: Vec<Added>,
    st: &mut RuleState,
    data: &Data,
) {
    let oref = &rule.object_ref(&());
    let now = Instant::now();
    let mut added = Vec::new();
    for (i, target, result) in results {
        let p = &mut plans[i];
        let key = (p.uid.clone(), container.to_string());
        match result {
            Ok(()) => {
                data.metrics.injections.with_label_values(&["added"]).inc();
                st.memory.added.insert(key.clone(), now);
                st.memory.refused.remove(&key);
                let note = format!("added debug container {container} ({}) targeting {target}", rule.spec.image);
                let pod_ref = ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    namespace: Some(ns.to_string()),
                    name: Some(p.pod.clone()),
                    uid: Some(p.uid.to_string()),
                    ..ObjectReference::default()
                };
                data.ctx.events.normal(&pod_ref, "DebugContainerAdded", "AddEphemeralContainer", note);
                tracing::info!(pod = %p.pod, container, target = %target, "debug container added");
                added.push(p.pod.clone());
                p.decision = Decision::Added;
            }
            Err(e) => {
                let (label, message, first) = refused(p, key, &e, st, now);
                data.metrics.injections.with_label_values(&[label]).inc();
                if first {
                    data.ctx.events.warning(
                        oref,
                        "InjectionFailed",
                        "AddEphemeralContainer",
                        format!("pod {}: {container} not added: {message}", p.pod),
                    );
                }
                tracing::warn!(pod = %p.pod, container, error = %message, "debug container not added");
            }
        }
    }
    if !added.is_empty() {
        added.sort();
        let shown: Vec<&str> = added.iter().take(5).map(String::as_str).collect();
        let more = if added.len() > 5 { format!(" and {} more", added.len() - 5) } else { String::new() };
        data.ctx.events.normal(
            oref,
            "DebugContainerAdded",
            "AddEphemeralContainer",
            format!(
                "added {container} ({}) to {} pod(s): {}{more}; kubectl exec -it <pod> -c {container} -- sh",
                rule.spec.image,
                added.len(),
                shown.join(", ")
            ),
        );
    }
}

/// What the copies' answers mean (mode copy): each pod's decision turns
/// Added (an Event on the PodDebugger naming the copies) or Refused
/// (retried with back-off; a Warning on the first refusal).
pub(crate) fn copies(
    rule: &PodDebugger,
    container: &str,
    plans: &mut [PodPlan],
    results: Vec<Added>,
    st: &mut RuleState,
    data: &Data,
) {
    let oref = &rule.object_ref(&());
    let now = Instant::now();
    let uid = rule.uid().unwrap_or_default();
    let mut made = Vec::new();
    for (i, target, result) in results {
        let p = &mut plans[i];
        let key = (p.uid.clone(), COPY_KEY.to_string());
        match result {
            Ok(()) => {
                data.metrics.copies.with_label_values(&["created"]).inc();
                st.memory.added.insert(key.clone(), now);
                st.memory.refused.remove(&key);
                let copy = copy_name(&p.pod, &uid, &p.uid.to_string());
                tracing::info!(pod = %p.pod, copy = %copy, target = %target, "debug copy made");
                made.push(format!("{copy} (of {}, {target} held by spec.copy.command)", p.pod));
                p.decision = Decision::Added;
            }
            Err(e) => {
                let (label, message, first) = refused(p, key, &e, st, now);
                data.metrics.copies.with_label_values(&[label]).inc();
                if first {
                    data.ctx.events.warning(
                        oref,
                        "CopyFailed",
                        "CopyPod",
                        format!("pod {}: no debug copy made: {message}", p.pod),
                    );
                }
                tracing::warn!(pod = %p.pod, error = %message, "debug copy not made");
            }
        }
    }
    if !made.is_empty() {
        made.sort();
        data.ctx.events.normal(
            oref,
            "DebugCopyCreated",
            "CopyPod",
            format!("made {}; kubectl exec -it <copy> -c {container} -- sh", made.join(", ")),
        );
    }
}

/// A write (an addition or a copy) the API refused: the pod's decision
/// turns Refused, retried with back-off (remembered under `key`). Returns
/// the metric's result label, the message, and whether it is the first
/// refusal (the one told as a Warning).
fn refused(
    p: &mut PodPlan,
    key: (flotilla_shared::uid::Uid, String),
    e: &kube::Error,
    st: &mut RuleState,
    now: Instant,
) -> (&'static str, String, bool) {
    let (label, message) = match e {
        kube::Error::Api(s) => ("rejected", s.message.clone()),
        other => ("error", other.to_string()),
    };
    let refusal = Refusal::after(st.memory.refused.get(&key), message.clone(), now);
    let first = refusal.attempts == 1;
    p.decision = Decision::Refused { message: message.clone(), retry_at: refusal.retry_at };
    st.memory.refused.insert(key, refusal);
    (label, message, first)
}
