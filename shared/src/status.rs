//! Writing a custom resource's status with server-side apply on the status
//! subresource: the operator owns exactly the fields it sends, and fields
//! written by other managers survive.

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Applies `status` to `name`'s status subresource as `field_manager`
/// (`flotilla-<operator>`). `status` is the whole status this operator owns:
/// fields it owned and no longer sends are removed, as apply semantics say.
pub async fn apply_status<K, S>(api: &Api<K>, name: &str, field_manager: &str, status: &S) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + std::fmt::Debug,
    S: Serialize,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(name, &PatchParams::apply(field_manager).force(), &Patch::Apply(&patch)).await
}
