//! What a controller reconciles and what triggers it: the builder half of
//! kube-runtime's `Controller` (`new`, `owns`, `reconcile_on`, debounce,
//! concurrency), built from kube-runtime's own public parts (`reflector`,
//! `watcher`, `trigger_self`, `trigger_owners`) so that
//! [`Context::run_controller`](crate::Context::run_controller) can run it
//! with `applier` and see every request that enters the scheduler — which
//! is what its `workqueue_depth`, `workqueue_adds_total` and
//! `workqueue_queue_duration_seconds` are made of (`workqueue.rs`).
//! kube-runtime's own builder keeps its trigger streams private.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::controller::{ReconcileRequest, trigger_owners, trigger_self};
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

/// The annotations a cached resource keeps: the operators' own.
pub const OWN_ANNOTATIONS: &str = "flotilla.dev/";
/// Bytes (keys and values) a cached resource keeps of those annotations,
/// and of its labels, each in key order: ours are a few names and times.
pub const MAX_KEPT_METADATA_BYTES: usize = 8192;

/// What the cache keeps of a resource's metadata: no `managedFields` (an
/// entry per writer and field), only [`OWN_ANNOTATIONS`], and of those and
/// of the labels no more than [`MAX_KEPT_METADATA_BYTES`] each. The author
/// of a custom resource may give it 256 KiB of annotations (and labels
/// without a total bound), and the cache held every resource whole: a
/// tenant's few hundred such CopyRules or LoadTests held the operator past
/// its chart's memory limit. What is cut is only ever the author's own
/// resource's. Nothing reads the rest from the cache, and nothing writes a
/// cached object back (status by server-side apply, finalizers by JSON
/// patch).
pub fn trim_metadata(meta: &mut kube::core::ObjectMeta) {
    meta.managed_fields = None;
    let within = |budget: &mut usize, k: &String, v: &mut String| {
        let size = k.len() + v.len();
        let keep = size <= *budget;
        *budget = budget.saturating_sub(size);
        keep
    };
    if let Some(annotations) = meta.annotations.as_mut() {
        let mut budget = MAX_KEPT_METADATA_BYTES;
        annotations.retain(|k, v| k.starts_with(OWN_ANNOTATIONS) && within(&mut budget, k, v));
    }
    if let Some(labels) = meta.labels.as_mut() {
        let mut budget = MAX_KEPT_METADATA_BYTES;
        labels.retain(|k, v| within(&mut budget, k, v));
    }
}

/// A trigger stream, as kube-runtime's `Controller` keeps them.
pub(crate) type Trigger<K> = BoxStream<'static, Result<ReconcileRequest<K>, watcher::Error>>;

/// A controller for kind `K`, to hand to
/// [`Context::run_controller`](crate::Context::run_controller). Same
/// semantics as kube-runtime's `Controller` of the same calls.
pub struct Controller<K: Resource<DynamicType = ()> + Clone + 'static> {
    pub(crate) triggers: Vec<Trigger<K>>,
    pub(crate) reader: Store<K>,
    pub(crate) changes: StoreChanges,
    pub(crate) debounce: Duration,
    pub(crate) concurrency: u16,
}

impl<K> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    /// Watches `api` with `wc` into the cache ([`Controller::store`]); every
    /// object applied (created, changed, or listed) is reconciled. Lists
    /// stream where the server can ([`crate::streaming_list`]); what a
    /// tenant could make large and no reconcile reads is not cached
    /// ([`trim_metadata`]).
    pub fn new(api: Api<K>, wc: watcher::Config) -> Self {
        Self::new_modified(api, wc, |_| {})
    }

    /// As [`Controller::new`], with `modify` applied to each object before
    /// it is cached or reconciled: what the operator never reads (a status
    /// it writes itself, and may only need once) is not held.
    pub fn new_modified(api: Api<K>, wc: watcher::Config, mut modify: impl FnMut(&mut K) + Send + 'static) -> Self {
        let (reader, writer) = reflector::store();
        let changes = StoreChanges::default();
        let trimmed = move |o: &mut K| {
            trim_metadata(o.meta_mut());
            modify(o);
        };
        let events = changes.counting(reflector(writer, crate::streaming_list::watch(api, wc).modify(trimmed)));
        let own = trigger_self(events.applied_objects(), ()).boxed();
        Self { triggers: vec![own], reader, changes, debounce: Duration::ZERO, concurrency: 0 }
    }

    /// Reconciles the `K` owners (by ownerReferences) of the `Child`
    /// objects `api` and `wc` select whenever one changes or is deleted
    /// (a metadata-only watch: nothing of them is cached).
    #[must_use]
    pub fn owns<Child>(mut self, api: Api<Child>, wc: watcher::Config) -> Self
    where
        Child: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + 'static,
    {
        let children = crate::metadata::metadata_watch(api, wc).touched_objects();
        self.triggers.push(trigger_owners(children, (), ()).boxed());
        self
    }

    /// Reconciles every object `trigger` names.
    #[must_use]
    pub fn reconcile_on(mut self, trigger: impl Stream<Item = ObjectRef<K>> + Send + 'static) -> Self {
        self.triggers.push(trigger.map(|obj_ref| Ok(ReconcileRequest::from(obj_ref))).boxed());
        self
    }

    /// Reconciles every cached object each time `signal` yields (a change
    /// that concerns them all: an admission policy gone or back, say).
    #[must_use]
    pub fn reconcile_all_on(self, signal: impl Stream<Item = ()> + Send + 'static) -> Self {
        let store = self.reader.clone();
        let every = signal.flat_map(move |()| {
            futures::stream::iter(store.state().iter().map(|o| ObjectRef::from_obj(&**o)).collect::<Vec<_>>())
        });
        self.reconcile_on(every)
    }

    /// An object's reconcile starts only after `debounce` without a new
    /// request for it — but never later than
    /// [`MAX_TRIGGER_DELAY`](crate::debounce::MAX_TRIGGER_DELAY) after the
    /// first, however the triggers keep coming (`debounce.rs`; kube-runtime's
    /// `Config::debounce` has no such bound).
    #[must_use]
    pub fn debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    /// At most `n` reconciles at once (0: no limit; kube-runtime's
    /// `Config::concurrency`).
    #[must_use]
    pub fn concurrency(mut self, n: u16) -> Self {
        self.concurrency = n;
        self
    }

    /// The cache of `K` the watch fills.
    pub fn store(&self) -> Store<K> {
        self.reader.clone()
    }

    /// Counts the cache's changes ([`StoreChanges`]).
    pub fn store_changes(&self) -> StoreChanges {
        self.changes.clone()
    }
}

/// How many watch events the cache of a [`Controller`] has applied: read
/// it *before* reading the cache, and what was built from the cache stays
/// valid while it is unchanged. What every reconcile derives from all the
/// cached objects (pod-alert's PodAlerts served per namespace) is then
/// derived once per change, not once per reconcile (issue 28: 37 % of
/// pod-alert's CPU with 500 PodAlerts); [`crate::FromSpecs`] goes further,
/// past changes that leave every spec as it was (status writes).
#[derive(Debug, Clone, Default)]
pub struct StoreChanges(Arc<AtomicU64>);

impl StoreChanges {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// One change more (tests that fill a store by hand).
    #[cfg(test)]
    pub(crate) fn bump(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    /// `events` (a reflector's: each is in the cache when it is yielded),
    /// counted as they pass.
    fn counting<S: Stream>(&self, events: S) -> impl Stream<Item = S::Item> + use<S> {
        let counter = Arc::clone(&self.0);
        events.inspect(move |_| {
            counter.fetch_add(1, Ordering::AcqRel);
        })
    }
}

/// The key of an object in the queue mirror: `<namespace>/<name>`.
pub(crate) fn queue_key(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn store_changes_count_each_event_as_it_has_passed() {
        let changes = StoreChanges::default();
        let seen = changes.clone();
        let mut events = std::pin::pin!(changes.counting(futures::stream::iter(["a", "b", "c"])));
        assert_eq!(seen.get(), 0);
        // Counted once the event is yielded: a reflector's is in its cache then.
        assert_eq!(events.next().await, Some("a"));
        assert_eq!(seen.get(), 1);
        let rest: Vec<_> = events.collect().await;
        assert_eq!((rest.len(), seen.get()), (2, 3));
    }

    #[test]
    fn the_cache_keeps_only_our_annotations_and_no_managed_fields() {
        let many: serde_json::Map<String, serde_json::Value> =
            (0..62).map(|i| (format!("flotilla.dev/a{i:02}"), "x".repeat(4000).into())).collect();
        let mut annotations = many.clone();
        annotations.insert("flotilla.dev/rerun".into(), "2026-11-29T17:00:00Z".into());
        annotations.insert("kubectl.kubernetes.io/last-applied-configuration".into(), "x".repeat(250_000).into());
        let labels: serde_json::Map<String, serde_json::Value> =
            (0..4000).map(|i| (format!("l{i:04}"), "y".repeat(60).into())).collect();
        let mut meta: kube::core::ObjectMeta = serde_json::from_value(serde_json::json!({
            "name": "t",
            "labels": labels,
            "annotations": annotations,
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {}}],
        }))
        .unwrap_or_default();
        trim_metadata(&mut meta);
        assert_eq!(meta.managed_fields, None);
        let size =
            |m: &std::collections::BTreeMap<String, String>| m.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        let (kept_a, kept_l) = (meta.annotations.unwrap_or_default(), meta.labels.unwrap_or_default());
        assert!(kept_a.keys().all(|k| k.starts_with(OWN_ANNOTATIONS)), "{:?}", kept_a.keys());
        assert!(size(&kept_a) <= MAX_KEPT_METADATA_BYTES && size(&kept_l) <= MAX_KEPT_METADATA_BYTES);
        assert!(!kept_l.is_empty() && kept_a.len() == 2, "{} kept", kept_a.len());

        // A resource with a few of ours and a few labels keeps them all.
        let mut small: kube::core::ObjectMeta = serde_json::from_value(serde_json::json!({
            "name": "t", "labels": {"team": "a"},
            "annotations": {"flotilla.dev/rerun": "1", "flotilla.dev/save-baseline": "v2", "other": "z"},
        }))
        .unwrap_or_default();
        trim_metadata(&mut small);
        assert_eq!(small.annotations.unwrap_or_default().len(), 2);
        assert_eq!(small.labels.unwrap_or_default().len(), 1);
    }
}
