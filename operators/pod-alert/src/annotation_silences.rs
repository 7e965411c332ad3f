//! The `flotilla.dev/silence-until` annotations of objects pod-alert reads
//! for nothing else: namespaces (a maintenance window an admin sets on a
//! whole namespace) and workloads (Deployments, StatefulSets, DaemonSets,
//! Jobs, CronJobs: their team's). [`crate::silence`] applies them.
//!
//! Only the objects carrying a time are held ([`crate::held_store`]): a
//! cluster of 10,000 namespaces and 50,000 Deployments with no silence
//! holds nothing. Namespaces are watched metadata-only; a workload kind's
//! one watch also feeds its signals ([`crate::workload_signals`]). Until a
//! kind's first list is complete no PodAlert evaluates (a restart must not
//! notify what a silence covers), unless the list is refused (RBAC without
//! the kind): then they go on without those silences, and the log says so.
//! An operator limited to one namespace (`--watch-namespace`) does not
//! watch namespaces (a Role cannot grant them) and watches workloads in its
//! namespace only.

use flotilla_shared::health::WatchHealth;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::{Resource, ResourceExt};

use crate::held_store::{Feed, Feeder, HeldStore, watch_feeds};
use crate::silence::{ANNOTATION, parse_annotation};

/// One kind's silences as last listed and watched, by key (a namespace's
/// name, or a workload's `<namespace>/<name>`): only the objects with a
/// time are held.
pub type SilenceStore = HeldStore<Timestamp>;

/// The time `value` (the object's annotation) silences until, when it is
/// one; a value that is not is ignored, and the log says so.
pub fn silence_until(kind: &str, key: &str, value: Option<&str>) -> Option<Timestamp> {
    let until = value.and_then(parse_annotation);
    if let (Some(v), None) = (value, until) {
        tracing::warn!(object = %key, kind, value = %v, "{ANNOTATION} is not an RFC 3339 time: ignored");
    }
    until
}

impl SilenceStore {
    /// Watches `api` (the `plural` kind, metadata only) until the stream
    /// ends, keying each object by `key`, and calls `changed` with the keys
    /// whose silence came, went or moved (sorted), and `true` when a list
    /// completed (every PodAlert may go on).
    pub async fn watch<K>(
        &self,
        api: Api<PartialObjectMeta<K>>,
        plural: &'static str,
        health: WatchHealth,
        key: impl Fn(&PartialObjectMeta<K>) -> String + Sync,
        changed: impl FnMut(&[&str], bool),
    ) where
        K: Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    {
        let project = |o: &PartialObjectMeta<K>| {
            let key = key(o);
            let until = silence_until(plural, &key, o.annotations().get(ANNOTATION).map(String::as_str));
            (key, until)
        };
        let mut feeds: [&mut (dyn Feed<PartialObjectMeta<K>> + Send); 1] = [&mut Feeder::new(self, project)];
        // Metadata only, streamed (`WatchHealth::watcher`).
        let cfg = kube::runtime::watcher::Config::default();
        watch_feeds(api, cfg, plural, health, &mut feeds, changed).await;
    }
}
