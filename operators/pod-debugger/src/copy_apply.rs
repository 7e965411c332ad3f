//! The writes of mode copy: a copy created per `Copy` decision (from the
//! source pod as the API has it now), and copies deleted, each only after
//! the API shows it owned by this PodDebugger (labels alone can be written
//! by anyone who may label pods), with its UID as a precondition.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};

use crate::apply::Added;
use crate::controller::Data;
use crate::copy::{COPY_OF, CopyOf, copy_pod, owned_by};
use crate::copy_plan::Stale;
use crate::crd::PodDebugger;
use crate::plan::{Decision, Memory, PodPlan};

/// Makes the copy of every pod the plan says, a few at a time; the
/// answers go to `report::copies`.
pub(crate) async fn make_copies(
    rule: &PodDebugger,
    ns: &str,
    container: &str,
    plans: &[PodPlan],
    data: &Data,
) -> Vec<Added> {
    let api: Api<Pod> = Api::namespaced(data.ctx.client.clone(), ns);
    let jobs: Vec<(usize, String)> = plans
        .iter()
        .enumerate()
        .filter_map(|(i, p)| match &p.decision {
            Decision::Copy { target, .. } => Some((i, target.clone())),
            _ => None,
        })
        .collect();
    futures::stream::iter(jobs)
        .map(|(i, target)| {
            let api = &api;
            async move { (i, target, make_copy(api, data, rule, container, &plans[i]).await) }
        })
        .buffer_unordered(data.options.concurrency.max(1))
        .collect()
        .await
}

/// One copy: the source read (it must still be the pod planned for), the
/// copy built and created. One that exists already is made.
async fn make_copy(
    api: &Api<Pod>,
    data: &Data,
    rule: &PodDebugger,
    container: &str,
    plan: &PodPlan,
) -> Result<(), kube::Error> {
    let Decision::Copy { target, deadline, mounts } = &plan.decision else { return Ok(()) };
    let source = api.get(&plan.pod).await?;
    if source.uid().as_deref() != Some(&*plan.uid.to_string()) {
        return Err(gone(&plan.pod));
    }
    let uid = rule.uid().unwrap_or_default();
    let name = rule.name_any();
    let of = CopyOf {
        spec: &rule.spec,
        debugger_name: &name,
        debugger_uid: &uid,
        container,
        target,
        deadline: *deadline,
        mounts,
    };
    let Some(copy) = copy_pod(&source, &of) else { return Err(gone(&plan.pod)) };
    let pp = PostParams { field_manager: Some(data.ctx.field_manager.clone()), ..Default::default() };
    let name = copy.metadata.name.clone().unwrap_or_default();
    match api.create(&pp, &copy).await {
        Ok(_) => Ok(()),
        // Made already (an answer lost), or a pod of that name that is not
        // this copy (deleted and not yet gone, or made by someone who
        // computed the name): only the first is the copy.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = api.get_opt(&name).await?;
            let source_uid = plan.uid.to_string();
            let ours = existing.is_some_and(|p| {
                owned_by(&p, &uid)
                    && p.metadata.deletion_timestamp.is_none()
                    && p.metadata.labels.as_ref().and_then(|l| l.get(COPY_OF)).map(String::as_str) == Some(&*source_uid)
            });
            if ours {
                Ok(())
            } else {
                Err(kube::Error::Api(
                    kube::core::Status::failure(
                        &format!(
                            "a pod named {name} exists and is not this PodDebugger's copy of {} (or is being deleted)",
                            plan.pod
                        ),
                        "AlreadyExists",
                    )
                    .with_code(409)
                    .boxed(),
                ))
            }
        }
        Err(e) => Err(e),
    }
}

/// The pod planned for was replaced (another UID) or lost its target.
fn gone(pod: &str) -> kube::Error {
    kube::Error::Api(
        kube::core::Status::failure(&format!("pod {pod} changed since it was planned for"), "Conflict")
            .with_code(409)
            .boxed(),
    )
}

/// Fetches each pod labelled as the PodDebugger's copy not seen before,
/// remembering whether it is its own (owner reference and label) or not;
/// a fetch that fails is tried at the next reconcile.
pub(crate) async fn verify_copies(rule: &PodDebugger, ns: &str, labelled: &[Stale], memory: &mut Memory, data: &Data) {
    let api: Api<Pod> = Api::namespaced(data.ctx.client.clone(), ns);
    let uid = rule.uid().unwrap_or_default();
    for s in labelled {
        match api.get_opt(&s.name).await {
            Ok(Some(p)) if p.uid().as_deref() == Some(&*s.uid.to_string()) => {
                if owned_by(&p, &uid) {
                    memory.ours.insert(s.uid.clone());
                } else {
                    tracing::warn!(pod = %s.name, "labelled as a debug copy of this PodDebugger but not owned by it: not counted");
                    memory.not_ours.insert(s.uid.clone());
                }
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(pod = %s.name, error = %e, "debug copy not verified; tried again later"),
        }
    }
}

/// What a deletion came to.
enum Deletion {
    Deleted,
    /// Already gone.
    Gone,
    /// Labelled as a copy, not owned by the PodDebugger: left alone.
    NotOurs,
}

/// Deletes the copies the plan says are stale; returns how many went.
/// Pods found not to be its own are remembered, and never fetched again.
pub(crate) async fn delete_copies(
    rule: &PodDebugger,
    ns: &str,
    stale: &[Stale],
    memory: &mut Memory,
    data: &Data,
) -> usize {
    let api: Api<Pod> = Api::namespaced(data.ctx.client.clone(), ns);
    let uid = rule.uid().unwrap_or_default();
    let mut deleted = 0;
    for s in stale {
        match delete_copy(&api, &uid, s).await {
            Ok(Deletion::Deleted) => {
                deleted += 1;
                data.metrics.copies.with_label_values(&["deleted"]).inc();
                tracing::info!(copy = %s.name, "debug copy deleted");
            }
            Ok(Deletion::Gone) => {}
            Ok(Deletion::NotOurs) => {
                tracing::warn!(pod = %s.name, "labelled as a debug copy of this PodDebugger but not owned by it: left alone");
                memory.not_ours.insert(s.uid.clone());
            }
            Err(e) => {
                data.metrics.copies.with_label_values(&["error"]).inc();
                tracing::warn!(copy = %s.name, error = %e, "debug copy not deleted; retried at the next reconcile");
            }
        }
    }
    deleted
}

/// Deletes one copy if the API shows it ours (never touched otherwise).
async fn delete_copy(api: &Api<Pod>, debugger_uid: &str, stale: &Stale) -> Result<Deletion, kube::Error> {
    let Some(pod) = api.get_opt(&stale.name).await? else { return Ok(Deletion::Gone) };
    if pod.uid().as_deref() != Some(&*stale.uid.to_string()) {
        return Ok(Deletion::Gone);
    }
    if !owned_by(&pod, debugger_uid) {
        return Ok(Deletion::NotOurs);
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions { uid: Some(stale.uid.to_string()), resource_version: None }),
        ..DeleteParams::default()
    };
    match api.delete(&stale.name, &dp).await {
        Ok(_) => Ok(Deletion::Deleted),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Deletion::Gone),
        Err(e) => Err(e),
    }
}
