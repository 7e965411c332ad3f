//! The write that rolls a workload for `rolloutOnChange`: a merge patch of
//! its pod template's `flotilla.dev/copy-hash` annotation and nothing
//! else ([`crate::plan::rollouts::patch`]).

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};

use crate::plan::rollouts::{WorkloadKind, patch};

/// Sets the pod template's copy hash of workload `kind`/`name` in `namespace` to `hash`.
pub async fn roll(
    client: &Client,
    field_manager: &str,
    namespace: &str,
    kind: WorkloadKind,
    name: &str,
    hash: &str,
) -> Result<(), kube::Error> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("apps", "v1", kind.as_str()), kind.plural());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let pp = PatchParams { field_manager: Some(field_manager.to_string()), ..Default::default() };
    api.patch_metadata(name, &pp, &Patch::Merge(&patch(hash))).await.map(|_| ())
}
