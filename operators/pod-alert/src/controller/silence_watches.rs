//! The watches keeping the namespaces' and workloads' silence annotations
//! ([`crate::annotation_silences`]), each waking the PodAlerts a change
//! concerns.

use std::sync::Arc;

use flotilla_shared::health::{Readiness, WatchHealth};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::{Resource, ResourceExt};
use tokio::task::JoinHandle;

use super::Data;
use crate::annotation_silences::SilenceStore;
use crate::crd::PodAlert;
use crate::silence::WORKLOAD_KINDS;

/// The stores: the namespaces' (not watched by an operator limited to one
/// namespace: a Role cannot grant Namespaces) and each workload kind's.
pub(super) fn stores(watch_namespace: Option<&str>) -> (SilenceStore, Vec<(&'static str, Arc<SilenceStore>)>) {
    let namespaces = if watch_namespace.is_none() { SilenceStore::watched() } else { SilenceStore::disabled() };
    let workloads = WORKLOAD_KINDS.iter().map(|kind| (*kind, Arc::new(SilenceStore::watched()))).collect();
    (namespaces, workloads)
}

/// Starts the watches the stores need.
pub(super) fn spawn(data: &Arc<Data>, readiness: &Readiness) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    if data.options.watch_namespace.is_none() {
        tasks.push(tokio::spawn(watch_namespaces(Arc::clone(data), readiness.watch("namespaces"))));
    }
    for (kind, store) in &data.workload_silences {
        let Some(plural) = plural(kind) else { continue };
        let (data, store, health) = (Arc::clone(data), Arc::clone(store), readiness.watch(plural));
        tasks.push(match *kind {
            "Deployment" => tokio::spawn(watch_workloads::<Deployment>(data, store, health, plural)),
            "StatefulSet" => tokio::spawn(watch_workloads::<StatefulSet>(data, store, health, plural)),
            "DaemonSet" => tokio::spawn(watch_workloads::<DaemonSet>(data, store, health, plural)),
            "Job" => tokio::spawn(watch_workloads::<Job>(data, store, health, plural)),
            _ => tokio::spawn(watch_workloads::<CronJob>(data, store, health, plural)),
        });
    }
    tasks
}

/// The resource of a workload kind of [`WORKLOAD_KINDS`].
fn plural(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "Deployment" => "deployments",
        "StatefulSet" => "statefulsets",
        "DaemonSet" => "daemonsets",
        "Job" => "jobs",
        "CronJob" => "cronjobs",
        _ => return None,
    })
}

/// Keeps the namespaces' silences and wakes the PodAlerts a change concerns:
/// those of the namespace and the cluster-wide ones (every PodAlert after a
/// complete list).
async fn watch_namespaces(data: Arc<Data>, health: WatchHealth) {
    let store = Arc::clone(&data.namespace_silences);
    let api: Api<PartialObjectMeta<Namespace>> = Api::all(data.ctx.client.clone());
    store
        .watch(
            api,
            "namespaces",
            health,
            |ns| ns.name_any(),
            |namespaces, listed| {
                let alerts = data.alerts.state();
                let touched = flotilla_shared::pods::Touched { namespaces, listed };
                data.note_touched(&alerts, touched);
                for alert in flotilla_shared::pods::concerned(&alerts, touched, |a: &PodAlert| data.everywhere(a)) {
                    let _ = data.trigger.unbounded_send(alert);
                }
            },
        )
        .await;
}

/// Keeps one workload kind's silences (in the watched namespace, or all)
/// and wakes the PodAlerts of the namespaces concerned: a workload's
/// annotation counts only for PodAlerts of its own namespace
/// ([`crate::silence::matching`]) — a cluster-wide one included, for the
/// pods of its own namespace, so its kept evaluation is told the namespace
/// changed (`note_touched`), as the pod watch tells it.
async fn watch_workloads<K>(data: Arc<Data>, store: Arc<SilenceStore>, health: WatchHealth, plural: &'static str)
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let client = data.ctx.client.clone();
    let api: Api<PartialObjectMeta<K>> = match &data.options.watch_namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let key = |o: &PartialObjectMeta<K>| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
    store
        .watch(api, plural, health, key, |keys, listed| {
            let mut namespaces: Vec<&str> = keys.iter().filter_map(|k| k.split_once('/')).map(|(ns, _)| ns).collect();
            namespaces.sort_unstable();
            namespaces.dedup();
            let alerts = data.alerts.state();
            let touched = flotilla_shared::pods::Touched { namespaces: &namespaces, listed };
            data.note_touched(&alerts, touched);
            for alert in flotilla_shared::pods::concerned(&alerts, touched, |_: &PodAlert| false) {
                let _ = data.trigger.unbounded_send(alert);
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    /// Every workload kind is watched: each has its resource, and the
    /// kinds `spawn` matches are the same.
    #[test]
    fn every_workload_kind_has_its_resource() {
        let plurals: Vec<_> = super::WORKLOAD_KINDS.iter().map(|k| super::plural(k)).collect();
        assert_eq!(
            plurals,
            [Some("deployments"), Some("statefulsets"), Some("daemonsets"), Some("jobs"), Some("cronjobs")]
        );
    }
}
