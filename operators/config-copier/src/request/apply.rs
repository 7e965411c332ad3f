//! A request's writes, and nothing else; each proves ownership on the
//! server: a create fails (409) rather than overwrite, a patch carries the
//! resourceVersion the decision saw, a delete its uid and resourceVersion.
//! A 409 is no error: the object changed since it was read, and the
//! change's watch event brings the next reconcile.

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, Error};
use serde_json::Value;

use super::marks::merge_patch;
use super::plan::Act;
use crate::cache::api_resource;
use crate::crd::SourceKind;

/// How a write went.
#[derive(Debug)]
pub enum Wrote {
    Nothing,
    Created,
    Updated,
    Deleted,
    /// 409 or 404: the object is not what the decision saw; decided again
    /// on the watch event that follows.
    Stale,
}

fn is_status(e: &Error, code: u16) -> bool {
    matches!(e, Error::Api(s) if s.code == code)
}

/// Carries out `act` for the copy `name` in `namespace`: `desired` is the
/// copy's manifest, `current` the object as read (for an update).
pub async fn write(
    client: &Client,
    field_manager: &str,
    (kind, namespace, name): (SourceKind, &str, &str),
    act: Act,
    desired: Option<&Value>,
    current: Option<&Value>,
) -> Result<Wrote, Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &api_resource(kind));
    let deleting = matches!(act, Act::Delete { .. });
    let result = match (act, desired) {
        (Act::Create, Some(d)) => {
            let obj: DynamicObject = serde_json::from_value(d.clone()).map_err(Error::SerdeError)?;
            let pp = PostParams { dry_run: false, field_manager: Some(field_manager.to_string()) };
            api.create(&pp, &obj).await.map(|_| Wrote::Created)
        }
        (Act::Update { resource_version }, Some(d)) => {
            let patch = merge_patch(current.unwrap_or(&Value::Null), d, resource_version.as_deref());
            let pp = PatchParams { field_manager: Some(field_manager.to_string()), ..Default::default() };
            api.patch(name, &pp, &Patch::Merge(&patch)).await.map(|_| Wrote::Updated)
        }
        (Act::Delete { uid, resource_version }, _) => {
            let dp =
                DeleteParams { preconditions: Some(Preconditions { uid, resource_version }), ..Default::default() };
            api.delete(name, &dp).await.map(|_| Wrote::Deleted)
        }
        _ => Ok(Wrote::Nothing),
    };
    match result {
        // Gone already: as good as deleted.
        Err(e) if deleting && is_status(&e, 404) => Ok(Wrote::Deleted),
        Err(e) if is_status(&e, 409) || is_status(&e, 404) => Ok(Wrote::Stale),
        other => other,
    }
}
