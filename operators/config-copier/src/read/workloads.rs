//! The workloads of one target namespace, read for `rolloutOnChange`:
//! listed only when a copy there changed (never watched), each kept as
//! what it consumes and the hash it last rolled for ([`Workload`]).
//!
//! The namespace's tenant writes these objects, and each can be ~1.5 MB
//! (etcd's bound; annotations alone 256 KiB): a list answered in one piece
//! is held whole while it is decoded. 320 Deployments with 250 KB of
//! annotations were an 80 MB answer and as much again decoded, and the
//! operator was killed under the chart's 128Mi at the first copy change
//! (`tests/rollouts.rs`). So the lists go in pages of [`PAGE`], one
//! namespace's at a time in the whole process ([`LISTING`]), and only the
//! views are kept: the peak is one page, whatever the tenant writes.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;

use crate::plan::rollouts::{COPY_HASH, Workload, WorkloadKind, references};

/// Objects per list page: at most ~15 MB held while a page is decoded.
pub const PAGE: u32 = 10;

/// One list at a time across the process's reconciles (eight run at once):
/// rollouts follow copy changes, seldom, and one page is the peak.
static LISTING: Semaphore = Semaphore::const_new(1);

/// Lists the Deployments, StatefulSets and DaemonSets of `namespace`.
pub async fn list_workloads(client: &Client, namespace: &str) -> Result<Vec<Workload>, kube::Error> {
    // Never closed, so acquiring cannot fail; were it to, listing without
    // the permit is still bounded by the page.
    let _permit = LISTING.acquire().await.ok();
    let mut out =
        list::<Deployment>(client, namespace, WorkloadKind::Deployment, |d| d.spec.as_ref().map(|s| &s.template))
            .await?;
    out.extend(
        list::<StatefulSet>(client, namespace, WorkloadKind::StatefulSet, |s| s.spec.as_ref().map(|s| &s.template))
            .await?,
    );
    out.extend(
        list::<DaemonSet>(client, namespace, WorkloadKind::DaemonSet, |d| d.spec.as_ref().map(|s| &s.template)).await?,
    );
    Ok(out)
}

async fn list<K>(
    client: &Client,
    namespace: &str,
    kind: WorkloadKind,
    template: fn(&K) -> Option<&PodTemplateSpec>,
) -> Result<Vec<Workload>, kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let mut params = ListParams::default().limit(PAGE);
    let mut out = Vec::new();
    loop {
        let page = api.list(&params).await?;
        out.extend(page.items.iter().filter_map(|w| {
            let t = template(w)?;
            Some(Workload {
                kind,
                name: w.name_any(),
                copy_hash: t.metadata.as_ref().and_then(|m| m.annotations.as_ref()?.get(COPY_HASH).cloned()),
                refs: t.spec.as_ref().map(references).unwrap_or_default(),
            })
        }));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => params = params.continue_token(&next),
            None => return Ok(out),
        }
    }
}
