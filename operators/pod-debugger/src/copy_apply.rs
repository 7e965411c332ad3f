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
use crate::copy::{CopyOf, copy_pod, owned_by};
use crate::copy_plan::Stale;
use crate::crd::PodDebugger;
use crate::plan::{Decision, PodPlan};

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
    match api.create(&pp, &copy).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
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

/// Deletes the copies the plan says are stale; returns how many went.
pub(crate) async fn delete_copies(rule: &PodDebugger, ns: &str, stale: &[Stale], data: &Data) -> usize {
    let api: Api<Pod> = Api::namespaced(data.ctx.client.clone(), ns);
    let uid = rule.uid().unwrap_or_default();
    let mut deleted = 0;
    for s in stale {
        match delete_copy(&api, &uid, s).await {
            Ok(true) => {
                deleted += 1;
                data.metrics.copies.with_label_values(&["deleted"]).inc();
                tracing::info!(copy = %s.name, "debug copy deleted");
            }
            Ok(false) => {}
            Err(e) => {
                data.metrics.copies.with_label_values(&["error"]).inc();
                tracing::warn!(copy = %s.name, error = %e, "debug copy not deleted; retried at the next reconcile");
            }
        }
    }
    deleted
}

/// Deletes one copy if the API shows it ours; false when it is gone or
/// not ours (then it is never touched).
async fn delete_copy(api: &Api<Pod>, debugger_uid: &str, stale: &Stale) -> Result<bool, kube::Error> {
    let Some(pod) = api.get_opt(&stale.name).await? else { return Ok(false) };
    if pod.uid().as_deref() != Some(&*stale.uid.to_string()) || !owned_by(&pod, debugger_uid) {
        tracing::warn!(pod = %stale.name, "labelled as a debug copy of this PodDebugger but not owned by it: left alone");
        return Ok(false);
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions { uid: Some(stale.uid.to_string()), resource_version: None }),
        ..DeleteParams::default()
    };
    match api.delete(&stale.name, &dp).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}
