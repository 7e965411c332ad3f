//! The writes of a reconcile: a dry run of the first addition (a spec the
//! API would refuse is refused as a whole, before any pod is touched), then
//! the additions a few at a time. What each answer means for the pod (its
//! decision, the Events, the metrics) is `report::additions`'.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};

use crate::container::{ephemeral_container, patch};
use crate::controller::{Data, Refused, RuleState};
use crate::crd::PodDebugger;
use crate::plan::{Decision, PodPlan};
use crate::security::Level;

/// A dry-run refusal is tried again after this long (or on a spec change).
pub(crate) const DRY_RUN_RETRY: Duration = Duration::from_secs(300);

/// The last dry run of one container spec at one Pod Security level.
pub(crate) struct DryRun {
    container: String,
    level: Level,
    result: Result<(), String>,
    at: Instant,
}

/// Tries the first addition with dryRun=All (once per container spec and
/// Pod Security level): a spec the API would reject is refused as a whole
/// before any pod is touched. Returns the refusal, if any.
pub(crate) async fn dry_run(
    rule: &PodDebugger,
    ns: &str,
    container: &str,
    level: Level,
    plans: &[PodPlan],
    st: &mut RuleState,
    data: &Data,
) -> Option<Refused> {
    let now = Instant::now();
    let fresh = st.dry_run.as_ref().filter(|d| {
        d.container == container
            && d.level == level
            && (d.result.is_ok() || now.saturating_duration_since(d.at) < DRY_RUN_RETRY)
    });
    if let Some(d) = fresh {
        return d.result.as_ref().err().map(|e| ("DryRunRejected", e.clone()));
    }
    let first = plans.iter().find(|p| matches!(p.decision, Decision::Add { .. }))?;
    let pod = first.pod.as_str();
    let api: Api<Pod> = Api::namespaced(data.ctx.client.clone(), ns);
    let result = match add_container(&api, data, rule, container, first, true).await {
        Ok(_) => Ok(()),
        // The spec itself is refused (Pod Security, validation, a webhook).
        Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403 | 422) => {
            data.metrics.injections.with_label_values(&["dry_run_rejected"]).inc();
            Err(format!("a dry run of {container} on pod {pod} was refused: {}", s.message))
        }
        // The pod went away, a conflict, a transport error: nothing learnt
        // about the spec; the real additions report their own failures.
        Err(e) => {
            tracing::debug!(error = %e, pod, "dry run inconclusive");
            return None;
        }
    };
    let refusal = result.as_ref().err().map(|e| ("DryRunRejected", e.clone()));
    st.dry_run = Some(DryRun { container: container.to_string(), level, result, at: now });
    refusal
}

/// The one write to a pod: `container` added to the plan's pod (its UID
/// checked by the patch; its target, deadline and mounts the plan's `Add`),
/// or a dry run of that. A plan that is no `Add` writes nothing.
pub(crate) async fn add_container(
    api: &Api<Pod>,
    data: &Data,
    rule: &PodDebugger,
    container: &str,
    plan: &PodPlan,
    dry_run: bool,
) -> Result<(), kube::Error> {
    let Decision::Add { target, deadline, mounts } = &plan.decision else { return Ok(()) };
    let c = ephemeral_container(&rule.spec, container, target, *deadline, mounts);
    let body = patch(&c, &plan.uid.to_string());
    let pp = PatchParams { dry_run, field_manager: Some(data.ctx.field_manager.clone()), ..Default::default() };
    api.patch_ephemeral_containers(&plan.pod, &pp, &Patch::Strategic(&body)).await.map(|_| ())
}

/// What one addition came to: the plan's index of the pod, its target
/// container, and the API's answer.
pub(crate) type Added = (usize, String, Result<(), kube::Error>);

/// Adds the container to every pod the plan says, a few at a time; the
/// answers go to `report::additions`.
pub(crate) async fn add(rule: &PodDebugger, ns: &str, container: &str, plans: &[PodPlan], data: &Data) -> Vec<Added> {
    let api: Api<Pod> = Api::namespaced(data.ctx.client.clone(), ns);
    let jobs: Vec<(usize, String)> = plans
        .iter()
        .enumerate()
        .filter_map(|(i, p)| match &p.decision {
            Decision::Add { target, .. } => Some((i, target.clone())),
            _ => None,
        })
        .collect();
    futures::stream::iter(jobs)
        .map(|(i, target)| {
            let api = &api;
            async move {
                let r = add_container(api, data, rule, container, &plans[i], false).await;
                (i, target, r)
            }
        })
        .buffer_unordered(data.options.concurrency.max(1))
        .collect()
        .await
}
