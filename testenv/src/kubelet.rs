//! Pods no kubelet runs, their status written as one would: for tests on a
//! control plane without a node (RBAC proofs, a control plane of a test's
//! own) that need a pod in a given state.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Creates pod `name` in `ns` with `labels` and one container `app`, bound
/// to a node that does not exist, then writes its status as a kubelet
/// would: phase Running and `container_status`. Its log cannot be read
/// (no kubelet answers).
pub async fn pod_as_kubelet_writes_it(
    client: &kube::Client,
    ns: &str,
    name: &str,
    labels: Value,
    container_status: Value,
) -> Result<(), kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": "no-such-node", "containers": [{"name": "app", "image": "busybox"}]}
    }))
    .map_err(kube::Error::SerdeError)?;
    pods.create(&PostParams::default(), &p).await?;
    let status = json!({"status": {"phase": "Running", "containerStatuses": [container_status]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.map(|_| ())
}
