//! What a LoadTest's step looks at beyond its runner pods (which a watch
//! holds, [`crate::runner_pods`]), read from the API when the state
//! machine asks for it ([`crate::machine::Need`]): the
//! target Service (every step of a running test) and, before a run's
//! first runner, whether it has a ready endpoint. Reads only.

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};

use crate::error::Error;
use crate::machine::{ServiceView, Target};

/// Whether `uid` owns `pod` (a same-named older object's pods are not its).
pub(crate) fn owned_by(pod: &Pod, uid: &str) -> bool {
    pod.metadata.owner_references.as_ref().is_some_and(|o| o.iter().any(|r| r.uid == uid))
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
        // Served from the API server's watch cache (resourceVersion 0):
        // a run's start need not reach etcd.
        let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={service}")).match_any();
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
