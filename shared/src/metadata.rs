//! Metadata-only views of an API: what kube-runtime 5 asks for instead of
//! its deprecated `metadata_watcher` — a `watcher` over
//! `Api<PartialObjectMeta<K>>`, which makes metadata-only requests (the
//! objects' labels, owners and versions; nothing of spec or status is
//! sent or held).

use kube::Resource;
use kube::api::Api;
use kube::core::{NamespaceResourceScope, PartialObjectMeta};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;

/// The metadata-only `Api` over the same objects as `api` (its namespace, or all).
pub fn metadata_api<K>(api: Api<K>) -> Api<PartialObjectMeta<K>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    let namespace = api.namespace().map(str::to_string);
    let client = api.into_client();
    match namespace {
        Some(ns) => Api::namespaced(client, &ns),
        None => Api::all(client),
    }
}

/// A watch of `api`'s objects' metadata only, its lists streamed where the
/// server can ([`crate::streaming_list`]: metadata can be 256 KiB an object).
pub fn metadata_watch<K>(
    api: Api<K>,
    wc: watcher::Config,
) -> impl futures::Stream<Item = watcher::Result<watcher::Event<PartialObjectMeta<K>>>> + Send + 'static
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    crate::streaming_list::watch(metadata_api(api), wc)
}
