//! The workloads of one target namespace, read for `rolloutOnChange`:
//! listed only when a copy there changed (never watched), each kept as
//! what it consumes and the hash it last rolled for ([`Workload`]).

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::plan::rollouts::{COPY_HASH, Workload, WorkloadKind, references};

/// Lists the Deployments, StatefulSets and DaemonSets of `namespace`.
pub async fn list_workloads(client: &Client, namespace: &str) -> Result<Vec<Workload>, kube::Error> {
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
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .iter()
        .filter_map(|w| {
            let t = template(w)?;
            Some(Workload {
                kind,
                name: w.name_any(),
                copy_hash: t.metadata.as_ref().and_then(|m| m.annotations.as_ref()?.get(COPY_HASH).cloned()),
                refs: t.spec.as_ref().map(references).unwrap_or_default(),
            })
        })
        .collect())
}
