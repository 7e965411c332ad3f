//! What a LoadTest's step looks at, read from the API when the state
//! machine asks for it ([`crate::machine::Need`]): the test's runner pods,
//! the target Service (and its endpoints), the namespace's other runner
//! pods. Reads only.

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};

use crate::error::Error;
use crate::machine::{ServiceView, Target};
use crate::runner::{self, LOADTEST_LABEL, Runner};

/// Whether `uid` owns `pod` (a same-named older object's pods are not its).
pub(crate) fn owned_by(pod: &Pod, uid: &str) -> bool {
    pod.metadata.owner_references.as_ref().is_some_and(|o| o.iter().any(|r| r.uid == uid))
}

/// The runner pods of the LoadTest `name` (`uid`): only those it owns (a
/// same-named older test's are not its).
pub async fn runners(pods: &Api<Pod>, name: &str, uid: &str) -> Result<Vec<Runner>, Error> {
    let listed = pods
        .list(&ListParams::default().labels(&format!("{LOADTEST_LABEL}={}", runner::label_value(name))))
        .await
        .map_err(|e| Error::Kube("pods", e))?;
    Ok(listed.items.iter().filter(|p| owned_by(p, uid)).map(runner::view).collect())
}

/// The Service as it is (its type, cluster IP, UID) and, with
/// `endpoints`, whether it has a ready endpoint.
pub async fn check_target(
    client: &kube::Client,
    ns: &str,
    service: &str,
    host: String,
    endpoints: bool,
) -> Result<Target, Error> {
    let svcs: Api<Service> = Api::namespaced(client.clone(), ns);
    let Some(svc) = svcs.get_opt(service).await.map_err(|e| Error::Kube("service", e))? else {
        return Ok(Target::Missing);
    };
    let spec = svc.spec.unwrap_or_default();
    let type_ = spec.type_.unwrap_or_else(|| "ClusterIP".into());
    // ExternalName names a host anywhere; "None" is a headless Service.
    let cluster_ip = spec.cluster_ip.filter(|ip| !ip.is_empty() && ip != "None" && type_ != "ExternalName");
    let ready = if endpoints {
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
        let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
        let list = slices.list(&lp).await.map_err(|e| Error::Kube("endpointslices", e))?;
        Some(
            list.items
                .iter()
                .flat_map(|s| s.endpoints.iter().flatten())
                .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true)),
        )
    } else {
        None
    };
    Ok(Target::Seen(ServiceView { uid: svc.metadata.uid.unwrap_or_default(), type_, cluster_ip, ready, host }))
}

/// Runner pods in the namespace (every LoadTest's, by label) that may run
/// and are not of run `run` of the test `uid`: what a new run's runners
/// come on top of. Pods that are done (Succeeded, Failed) hold no node.
/// Metadata only, the done ones left out by the API server: a namespace's
/// hundreds of runner pods are not read whole at each run's start.
pub async fn others_in_namespace(pods: &Api<Pod>, uid: &str, run: i64) -> Result<usize, Error> {
    let lp = ListParams::default().labels(LOADTEST_LABEL).fields("status.phase!=Succeeded,status.phase!=Failed");
    let list = pods.list_metadata(&lp).await.map_err(|e| Error::Kube("pods", e))?;
    Ok(list
        .items
        .iter()
        .filter(|p| {
            let ours = p.metadata.owner_references.as_ref().is_some_and(|o| o.iter().any(|r| r.uid == uid));
            let this_run = p.metadata.labels.as_ref().and_then(|l| l.get(runner::RUN_LABEL)) == Some(&run.to_string());
            !(ours && this_run)
        })
        .count())
}
