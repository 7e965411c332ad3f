//! A request's reads: the source and the copy's place, whole (a source
//! is at most the API's object size limit, and reconciles of requests run
//! at most 8 at once, so at most that many are held).

use kube::api::{Api, DynamicObject};
use kube::{Client, Error};
use serde_json::Value;

use crate::cache::api_resource;
use crate::crd::SourceKind;

/// The object `name` in `namespace` as JSON, or None.
pub async fn read(client: &Client, kind: SourceKind, namespace: &str, name: &str) -> Result<Option<Value>, Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &api_resource(kind));
    match api.get_opt(name).await? {
        Some(o) => serde_json::to_value(o).map(Some).map_err(Error::SerdeError),
        None => Ok(None),
    }
}
