//! The workloads of one target namespace, read for `rolloutOnChange`:
//! listed only when a copy there changed (never watched), each kept only
//! if it consumes one of the changed copies, as what it consumes of them
//! and the hash it last rolled for ([`Workload`]).
//!
//! The namespace's tenant writes these objects, and each can be ~1.5 MB
//! (etcd's bound; annotations alone 256 KiB): a list answered in one piece
//! is held whole while it is decoded. 640 Deployments with 250 KB of
//! pod-template annotations were a 160 MB answer, and the operator was
//! killed under the chart's 128Mi at the first copy change
//! (`tests/installations.rs`). So the lists go in pages
//! ([`flotilla_shared::paged_list`]), one namespace's at a time in the
//! whole process (the caller's `listing` permit), and what is
//! kept of a workload is bounded too ([`view`]): the peak is one page,
//! whatever the tenant writes.

use std::collections::BTreeSet;

use flotilla_shared::paged_list::list_kept;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;

use crate::crd::SourceKind;
use crate::plan::rollouts::{COPY_HASH, Workload, WorkloadKind, references};

/// The copy hash the operator writes: `sha256:` and 64 hex digits. A
/// longer annotation is not one it wrote, and is read as absent.
const HASH_LEN: usize = "sha256:".len() + 64;

/// The ConfigMaps and Secrets changed in one namespace.
pub type Changed = BTreeSet<(SourceKind, String)>;

/// The Deployments, StatefulSets and DaemonSets of `namespace` that
/// consume one of the `changed` copies ([`view`]), listed under a permit
/// of `listing` (one permit for the whole process: the reconciles run
/// eight at once, rollouts follow copy changes, seldom, and one page is
/// then the peak).
pub async fn list_workloads(
    client: &Client,
    listing: &Semaphore,
    namespace: &str,
    changed: &Changed,
) -> Result<Vec<Workload>, kube::Error> {
    // Never closed, so acquiring cannot fail; were it to, listing without
    // the permit is still bounded by the page.
    let _permit = listing.acquire().await.ok();
    let mut out = list::<Deployment>(client, namespace, WorkloadKind::Deployment, changed, |d| {
        d.spec.as_ref().map(|s| &s.template)
    })
    .await?;
    out.extend(
        list::<StatefulSet>(client, namespace, WorkloadKind::StatefulSet, changed, |s| {
            s.spec.as_ref().map(|s| &s.template)
        })
        .await?,
    );
    out.extend(
        list::<DaemonSet>(client, namespace, WorkloadKind::DaemonSet, changed, |d| {
            d.spec.as_ref().map(|s| &s.template)
        })
        .await?,
    );
    Ok(out)
}

/// What is kept of one workload: nothing unless its pod template consumes
/// one of the `changed` copies; then its name, those of its references,
/// and its copy hash if it is one the operator could have written. So a
/// tenant's workloads cost a few hundred bytes each, whatever they carry.
pub fn view(kind: WorkloadKind, name: String, template: &PodTemplateSpec, changed: &Changed) -> Option<Workload> {
    let refs: BTreeSet<(SourceKind, String)> = template
        .spec
        .as_ref()
        .map(references)
        .unwrap_or_default()
        .into_iter()
        .filter(|r| changed.contains(r))
        .collect();
    if refs.is_empty() {
        return None;
    }
    let copy_hash = template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref()?.get(COPY_HASH))
        .filter(|h| h.len() <= HASH_LEN)
        .cloned();
    Some(Workload { kind, name, copy_hash, refs })
}

async fn list<K>(
    client: &Client,
    namespace: &str,
    kind: WorkloadKind,
    changed: &Changed,
    template: fn(&K) -> Option<&PodTemplateSpec>,
) -> Result<Vec<Workload>, kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    list_kept(
        &ListParams::default(),
        |p| {
            let api = api.clone();
            async move { api.list(&p).await }
        },
        |w: K| view(kind, w.name_any(), template(&w)?, changed),
    )
    .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn template(hash: &str, consumes: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({
            "metadata": {"annotations": {COPY_HASH: hash}},
            "spec": {"containers": [{"name": "app", "image": "x", "envFrom": [
                {"configMapRef": {"name": consumes}}, {"secretRef": {"name": "other"}}
            ]}]},
        }))
        .unwrap()
    }

    fn changed(names: &[&str]) -> Changed {
        names.iter().map(|n| (SourceKind::ConfigMap, n.to_string())).collect()
    }

    #[test]
    fn a_workload_consuming_no_changed_copy_is_not_kept() {
        let t = template(&"x".repeat(250_000), "something-else");
        assert_eq!(view(WorkloadKind::Deployment, "big".into(), &t, &changed(&["settings"])), None);
        // A Secret of the changed ConfigMap's name is another object.
        let secret_of_that_name: Changed = [(SourceKind::Secret, "something-else".to_string())].into();
        assert_eq!(view(WorkloadKind::Deployment, "big".into(), &t, &secret_of_that_name), None);
    }

    #[test]
    fn a_consumer_keeps_only_its_changed_references_and_a_hash_the_operator_could_write() {
        let ours = format!("sha256:{}", "a".repeat(64));
        let w = view(WorkloadKind::Deployment, "app".into(), &template(&ours, "settings"), &changed(&["settings"]))
            .unwrap();
        assert_eq!(w.copy_hash.as_deref(), Some(ours.as_str()));
        assert_eq!(w.refs, changed(&["settings"]), "the Secret it also reads is not one that changed");
        // An annotation no hash of ours: read as absent (the workload rolls).
        let long = template(&"x".repeat(250_000), "settings");
        let w = view(WorkloadKind::Deployment, "app".into(), &long, &changed(&["settings"])).unwrap();
        assert_eq!(w.copy_hash, None);
    }
}
