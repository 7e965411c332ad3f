//! Pods no kubelet runs, their status written as one would: for tests on a
//! control plane without a node (RBAC proofs, a control plane of a test's
//! own) that need a pod in a given state.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The Node such pods are bound to: an object only, no kubelet behind it,
/// tainted so that the scheduler places nothing else there. A pod bound to
/// a Node that does not exist is deleted by the pod garbage collector after
/// 40 s: an RBAC round on a loaded CI machine took longer than that and
/// read `pods "p-0" not found` until its timeout.
pub const NODE: &str = "flotilla-no-kubelet";

/// Creates [`NODE`] unless it exists.
async fn ensure_node(client: &kube::Client) -> Result<(), kube::Error> {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": NODE, "labels": {"flotilla.dev/no-kubelet": "true"}},
        "spec": {"taints": [{"key": "flotilla.dev/no-kubelet", "effect": "NoSchedule"}]}
    }))
    .map_err(kube::Error::SerdeError)?;
    match Api::<Node>::all(client.clone()).create(&PostParams::default(), &node).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates pod `name` in `ns` with `labels` and one container `app`, bound
/// to [`NODE`], then writes its status as a kubelet would: phase Running
/// and `container_status`. Its log cannot be read (no kubelet answers). It
/// tolerates every taint: the node lifecycle controller taints a Node that
/// never reports as unreachable, and would evict it.
pub async fn pod_as_kubelet_writes_it(
    client: &kube::Client,
    ns: &str,
    name: &str,
    labels: Value,
    container_status: Value,
) -> Result<(), kube::Error> {
    ensure_node(client).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": NODE, "tolerations": [{"operator": "Exists"}], "containers": [{"name": "app", "image": "busybox"}]}
    }))
    .map_err(kube::Error::SerdeError)?;
    pods.create(&PostParams::default(), &p).await?;
    let status = json!({"status": {"phase": "Running", "containerStatuses": [container_status]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.map(|_| ())
}
