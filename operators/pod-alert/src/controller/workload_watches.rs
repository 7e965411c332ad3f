//! The watches keeping the namespaces' and workloads' silence annotations
//! ([`crate::annotation_silences`]) and what the workloads say of
//! themselves ([`crate::workload_signals`]): one watch per workload kind,
//! of the whole objects (their status is read), feeds both; each change
//! wakes the PodAlerts it concerns.

use std::sync::Arc;

use flotilla_shared::health::{Readiness, WatchHealth};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::{Resource, ResourceExt};
use tokio::task::JoinHandle;

use super::Data;
use crate::annotation_silences::{SilenceStore, silence_until};
use crate::crd::PodAlert;
use crate::held_store::{Carry, Feed, Feeder, HeldStore, namespaced_key, watch_feeds};
use crate::silence::ANNOTATION;
use crate::silence::WORKLOAD_KINDS;
use crate::workload_signals::{self, Finished, HeldSignals, NextRun, Rollout, Stalled};

/// What the workload watches hold besides silences.
#[derive(Clone)]
pub(crate) struct Signals {
    pub(crate) cronjobs: Arc<HeldStore<Arc<NextRun>>>,
    pub(crate) deployments: Arc<HeldStore<Arc<Stalled>>>,
    pub(crate) statefulsets: Arc<HeldStore<Arc<Rollout>>>,
    pub(crate) daemonsets: Arc<HeldStore<Arc<Rollout>>>,
    pub(crate) jobs: Arc<HeldStore<Arc<Finished>>>,
}

impl Signals {
    pub(crate) fn watched() -> Self {
        Self {
            cronjobs: Arc::new(HeldStore::watched()),
            deployments: Arc::new(HeldStore::watched()),
            statefulsets: Arc::new(HeldStore::watched()),
            daemonsets: Arc::new(HeldStore::watched()),
            jobs: Arc::new(HeldStore::watched()),
        }
    }

    pub(super) fn is_listed(&self) -> bool {
        self.cronjobs.is_listed()
            && self.deployments.is_listed()
            && self.statefulsets.is_listed()
            && self.daemonsets.is_listed()
            && self.jobs.is_listed()
    }

    pub(super) fn snapshot(&self) -> HeldSignals {
        HeldSignals {
            cronjobs: self.cronjobs.snapshot(),
            deployments: self.deployments.snapshot(),
            statefulsets: self.statefulsets.snapshot(),
            daemonsets: self.daemonsets.snapshot(),
            jobs: self.jobs.snapshot(),
        }
    }
}

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
            "Deployment" => {
                let signals = Arc::clone(&data.signals.deployments);
                let signal = |d: &_, _, _| workload_signals::stalled(d);
                tokio::spawn(watch_with_signals(data, store, signals, signal, health, plural))
            }
            "StatefulSet" => {
                let signals = Arc::clone(&data.signals.statefulsets);
                let signal = workload_signals::statefulset_rollout;
                tokio::spawn(watch_with_signals(data, store, signals, signal, health, plural))
            }
            "DaemonSet" => {
                let signals = Arc::clone(&data.signals.daemonsets);
                let signal = workload_signals::daemonset_rollout;
                tokio::spawn(watch_with_signals(data, store, signals, signal, health, plural))
            }
            "Job" => {
                let signals = Arc::clone(&data.signals.jobs);
                let signal = |j: &_, _, _| workload_signals::finished(j);
                tokio::spawn(watch_with_signals(data, store, signals, signal, health, plural))
            }
            _ => {
                let signals = Arc::clone(&data.signals.cronjobs);
                let signal = workload_signals::next_run;
                tokio::spawn(watch_with_signals(data, store, signals, signal, health, plural))
            }
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

/// Keeps one workload kind's silences and what its objects say
/// (`signal`), from one watch of the whole objects (in the watched
/// namespace, or all), and wakes the PodAlerts a change concerns: those of
/// its namespace — a workload's annotation counts only for PodAlerts of its
/// own namespace ([`crate::silence::matching`]), a cluster-wide one
/// included, for the pods of its own namespace, so its kept evaluation is
/// told the namespace changed (`note_touched`), as the pod watch tells it —
/// and the cluster-wide ones that ask for signals (they read every
/// namespace's at each reconcile).
async fn watch_with_signals<K, T>(
    data: Arc<Data>,
    silences: Arc<SilenceStore>,
    signals: Arc<HeldStore<T>>,
    signal: fn(&K, Timestamp, bool) -> Option<T>,
    health: WatchHealth,
    plural: &'static str,
) where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    T: Carry + Send + Sync,
{
    let client = data.ctx.client.clone();
    let api: Api<K> = match &data.options.watch_namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let silence = |o: &K| {
        let key = namespaced_key(o);
        let until = silence_until(plural, &key, o.annotations().get(ANNOTATION).map(String::as_str));
        (key, until)
    };
    let mut a = Feeder::new(&*silences, silence);
    // Before the first list completes, what is seen was there before this
    // process (`from_start`); a refused kind has listed nothing.
    let project = |o: &K| (namespaced_key(o), signal(o, Timestamp::now(), !signals.has_listed()));
    let mut b = Feeder::new(&*signals, project);
    let mut feeds: [&mut (dyn Feed<K> + Send); 2] = [&mut a, &mut b];
    let cfg = kube::runtime::watcher::Config::default().page_size(crate::held_store::PAGE);
    // A silence annotation never concerns a cluster-wide PodAlert's
    // signals, but one change may be both: they are woken alike.
    watch_feeds(api, cfg, plural, health, &mut feeds, |keys, listed| wake(&data, keys, listed, true)).await;
}

/// Wakes the PodAlerts concerned by a change of the workloads `keys`
/// (`<namespace>/<name>`): those of their namespaces (a cluster-wide one's
/// kept evaluation is told the namespaces changed), every one after a list,
/// and — `signals` — the cluster-wide ones.
fn wake(data: &Data, keys: &[&str], listed: bool, signals: bool) {
    let mut namespaces: Vec<&str> = keys.iter().filter_map(|k| k.split_once('/')).map(|(ns, _)| ns).collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    let alerts = data.alerts.state();
    let touched = flotilla_shared::pods::Touched { namespaces: &namespaces, listed };
    data.note_touched(&alerts, touched);
    let everywhere = |a: &PodAlert| {
        let asks = a.spec.alerts.as_ref().is_some_and(|r| r.rollouts || r.jobs);
        signals && asks && data.everywhere(a)
    };
    for alert in flotilla_shared::pods::concerned(&alerts, touched, everywhere) {
        let _ = data.trigger.unbounded_send(alert);
    }
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
