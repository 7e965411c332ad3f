//! A watch cache that keeps a small projection of each object instead of the
//! object itself.
//!
//! kube-runtime's reflector stores the full k8s-openapi struct: even with
//! every unused field emptied, a `Service` or `Pod` costs a kilobyte or more
//! of wide option-filled structs. An operator that reads five fields keeps
//! those five here, keyed by a string of its choosing, with the reflector's
//! semantics: a relist (`Init` … `InitDone`) replaces the contents at once,
//! so objects deleted while the watch was down disappear, and readiness is
//! the first complete list. [`Writer::feed`] runs a watch into a store and
//! tells its caller of each change and of every complete list (relists
//! included); [`Writer::run`] of the first list only.
//!
//! ```no_run
//! # async fn example(client: kube::Client) {
//! use flotilla_shared::projection;
//! use futures::StreamExt;
//! use k8s_openapi::api::core::v1::Service;
//! use kube::runtime::watcher;
//! use kube::{Api, ResourceExt};
//!
//! // Keep each Service's ClusterIP, keyed by namespace/name.
//! let (store, mut writer) = projection::store::<Option<String>>();
//! let watch = watcher(Api::<Service>::all(client), watcher::Config::default());
//! tokio::spawn(async move {
//!     let mut watch = std::pin::pin!(watch);
//!     while let Some(Ok(event)) = watch.next().await {
//!         writer.apply(event, |svc| {
//!             (format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any()), svc.spec.and_then(|s| s.cluster_ip))
//!         });
//!     }
//! });
//! if store.wait_until_ready().await.is_ok() {
//!     for ip in store.state() {
//!         println!("{ip:?}");
//!     }
//! }
//! # }
//! ```

use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError};

use kube::runtime::watcher;
use tokio::sync::watch;

mod slot;
pub use slot::{HasKey, Own, Pair, Slot};

struct State<S> {
    /// Ordered by key: a B-tree costs about what a hash set does per entry
    /// (8-byte slots, measured by `bench scale`), and a namespace's entries
    /// are one range instead of a scan of the whole cache.
    items: BTreeSet<S>,
    /// A relist in progress: the new contents, swapped in at `InitDone`.
    relist: Option<BTreeSet<S>>,
    /// Counts changes to `items`: equal generations, equal contents (a
    /// reader may keep what it built from them, [`Store::generation`]).
    generation: u64,
}

/// The read side; cheap to clone.
pub struct Store<T, S = Pair<T>> {
    state: Arc<Mutex<State<S>>>,
    ready: watch::Receiver<bool>,
    of: std::marker::PhantomData<fn() -> T>,
}

impl<T, S> Clone for Store<T, S> {
    fn clone(&self) -> Self {
        Self { state: self.state.clone(), ready: self.ready.clone(), of: std::marker::PhantomData }
    }
}

/// Keys made `<namespace>/<name>`, as the operators key namespaced objects
/// (a namespace name has no `/`, so its objects' keys are the range of
/// `<namespace>/`: [`Store::in_namespace`]).
pub mod ns_key;

/// The slots whose key starts with `prefix`: from the first key not below
/// it, while they start with it.
fn under<'a, T, S: Slot<T>>(items: &'a BTreeSet<S>, prefix: &'a str) -> impl Iterator<Item = &'a S> {
    items
        .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
        .take_while(move |s| Borrow::<str>::borrow(*s).starts_with(prefix))
}

/// The write side, fed with the watcher's events.
pub struct Writer<T, S = Pair<T>> {
    state: Arc<Mutex<State<S>>>,
    ready: watch::Sender<bool>,
    of: std::marker::PhantomData<fn() -> T>,
}

/// An empty store and its writer.
pub fn store<T>() -> (Store<T>, Writer<T>) {
    store_of()
}

/// An empty store of projections that hold their own key ([`HasKey`]).
pub fn keyed_store<T: HasKey>() -> (Store<T, Own<T>>, Writer<T, Own<T>>) {
    store_of()
}

fn store_of<T, S>() -> (Store<T, S>, Writer<T, S>) {
    let state = Arc::new(Mutex::new(State { items: BTreeSet::new(), relist: None, generation: 0 }));
    let (tx, rx) = watch::channel(false);
    let of = std::marker::PhantomData;
    (Store { state: state.clone(), ready: rx, of }, Writer { state, ready: tx, of })
}

impl<T, S: Slot<T>> Writer<T, S> {
    /// Applies one watcher event; `project` turns an object into its key and
    /// projection (for a deletion only the key is used).
    pub fn apply<K>(&mut self, event: watcher::Event<K>, project: impl Fn(K) -> (String, T)) {
        self.apply_with(event, project, |_, _| true);
    }

    /// The one place events are applied; `differ` decides what counts as a
    /// change for the report.
    fn apply_with<K>(
        &mut self,
        event: watcher::Event<K>,
        project: impl Fn(K) -> (String, T),
        differ: impl Fn(&T, &T) -> bool,
    ) -> Vec<Change<T>> {
        // A poisoned lock only means another thread panicked mid-update of a
        // map; the map itself is still a map.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut changes = Vec::new();
        match event {
            watcher::Event::Init => state.relist = Some(BTreeSet::new()),
            watcher::Event::InitApply(obj) => {
                let (key, value) = project(obj);
                // An object the list finds as it was keeps the projection
                // already held, shared rather than copied: a relist (after
                // an API server restart, say) then peaks at about one
                // projection per object, not two (issue 28).
                let held = state.items.get(key.as_str()).map(Slot::value).filter(|o| !differ(o, &value)).cloned();
                let value = held.unwrap_or_else(|| Arc::new(value));
                state.relist.get_or_insert_with(BTreeSet::new).replace(S::new(key, value));
            }
            watcher::Event::InitDone => {
                if let Some(items) = state.relist.take() {
                    state.generation += 1;
                    let old = std::mem::replace(&mut state.items, items);
                    for slot in &state.items {
                        let (key, new): (&str, _) = (slot.borrow(), slot.value());
                        match old.get(key).map(Slot::value) {
                            // A projection the relist kept is the same Arc.
                            Some(o) if Arc::ptr_eq(o, new) || !differ(o, new) => {}
                            o => changes.push(Change {
                                key: key.to_string(),
                                old: o.cloned(),
                                new: Some(Arc::clone(new)),
                            }),
                        }
                    }
                    for slot in old {
                        let key: &str = slot.borrow();
                        if !state.items.contains(key) {
                            changes.push(Change {
                                key: key.to_string(),
                                old: Some(Arc::clone(slot.value())),
                                new: None,
                            });
                        }
                    }
                }
                drop(state);
                self.ready.send_replace(true);
            }
            watcher::Event::Apply(obj) => {
                let (key, value) = project(obj);
                let new = Arc::new(value);
                state.generation += 1;
                let old = state.items.replace(S::new(key.clone(), Arc::clone(&new))).map(|s| Arc::clone(s.value()));
                if old.as_ref().is_none_or(|o| differ(o, &new)) {
                    changes.push(Change { key, old, new: Some(new) });
                }
            }
            watcher::Event::Delete(obj) => {
                let (key, _) = project(obj);
                if let Some(old) = state.items.take(key.as_str()) {
                    state.generation += 1;
                    changes.push(Change { key, old: Some(Arc::clone(old.value())), new: None });
                }
            }
        }
        changes
    }
}

/// A key whose projection changed (added: `old` is None; removed: `new` is None).
#[derive(Debug)]
pub struct Change<T> {
    pub key: String,
    pub old: Option<Arc<T>>,
    pub new: Option<Arc<T>>,
}

impl<T: PartialEq, S: Slot<T>> Writer<T, S> {
    /// [`Writer::apply`], reporting the keys whose projection changed: what
    /// a controller triggers work on. A relist reports, at `InitDone`, what
    /// it added, removed or changed; an unchanged object reports nothing.
    pub fn apply_changes<K>(&mut self, event: watcher::Event<K>, project: impl Fn(K) -> (String, T)) -> Vec<Change<T>> {
        self.apply_with(event, project, |a, b| a != b)
    }
}

/// What [`Writer::feed`] tells its callback after each event it applied.
#[derive(Debug)]
pub enum Fed<'a, T> {
    /// A complete list was applied: the first (the store is ready from
    /// now on) or a relist after a lost watch. `changes`: what it added,
    /// removed or changed. A caller that must look at everything again
    /// after a relist (objects deleted meanwhile count, and so may objects
    /// it skipped while the list was under way) does it here.
    Listed(&'a [Change<T>]),
    /// Any other event (a list's page in progress reports no change).
    Changed(&'a [Change<T>]),
}

impl<'a, T> Fed<'a, T> {
    /// The changes the event made, whichever it was.
    pub fn changes(&self) -> &'a [Change<T>] {
        match self {
            Fed::Listed(c) | Fed::Changed(c) => c,
        }
    }
}

impl<T: PartialEq, S: Slot<T>> Writer<T, S> {
    /// Feeds this writer from a watch until the stream ends, telling `on`
    /// after each event what it changed, and whether it completed a list
    /// ([`Fed::Listed`], after every complete list: the first and every
    /// relist). A failed watch call is logged and the stream polled again
    /// after a second (the watcher re-lists by itself).
    pub async fn feed<K, W>(mut self, watch: W, project: impl Fn(K) -> (String, T), mut on: impl FnMut(Fed<'_, T>))
    where
        W: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    {
        use futures::StreamExt;
        let mut watch = std::pin::pin!(watch);
        while let Some(event) = watch.next().await {
            let event = match event {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(error = %e, "watch failed; retrying");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    continue;
                }
            };
            let listed = matches!(event, watcher::Event::InitDone);
            let changes = self.apply_changes(event, &project);
            on(if listed { Fed::Listed(&changes) } else { Fed::Changed(&changes) });
            if listed {
                // A list decoded page after page of full objects and kept
                // only their projections: the pages' freed memory lies
                // between the projections, where glibc keeps it as RSS
                // until asked to give it back (memory per object, issue 28).
                drop(changes);
                crate::memory::release_free_memory();
            }
        }
    }

    /// [`Self::feed`] for a caller that only needs to know when the store
    /// first became ready: `synced` is called once, after the first
    /// complete list (before that event's changes are handed to
    /// `changed`); every event's changes go to `changed`.
    pub async fn run<K, W>(
        self,
        watch: W,
        project: impl Fn(K) -> (String, T),
        synced: impl FnOnce(),
        mut changed: impl FnMut(&[Change<T>]),
    ) where
        W: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    {
        let mut synced = Some(synced);
        self.feed(watch, project, |fed| {
            if let Fed::Listed(_) = fed
                && let Some(f) = synced.take()
            {
                f();
            }
            changed(fed.changes());
        })
        .await;
    }
}

impl<T: Clone, S: Slot<T>> Store<T, S> {
    /// Every projection made again in fresh allocations: the same keys and
    /// contents (the generation stays). The projections made during a
    /// burst of changes sit in the heap among the burst's other work, and
    /// once that is freed they pin pages the allocator cannot give back;
    /// made again after it, they fill the holes below and those pages can
    /// go (`memory::release_free_memory`). Readers holding projections keep
    /// theirs. Under the store's lock: a few milliseconds per 10,000.
    pub fn compact(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let fresh: BTreeSet<S> = state
            .items
            .iter()
            .map(|s| S::new(Borrow::<str>::borrow(s).to_string(), Arc::new(T::clone(s.value()))))
            .collect();
        state.items = fresh;
    }
}

impl<T, S: Slot<T>> Store<T, S> {
    /// How many times the contents changed: read it *before* reading the
    /// contents, and what was built from them stays valid while it is
    /// unchanged (built from contents at least that new).
    pub fn generation(&self) -> u64 {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).generation
    }

    /// Every projection, in the order of their keys.
    pub fn state(&self) -> Vec<Arc<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).items.iter().map(|s| Arc::clone(s.value())).collect()
    }

    /// Every key with its projection, in the order of their keys.
    pub fn entries(&self) -> Vec<(String, Arc<T>)> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.items.iter().map(|s| (Borrow::<str>::borrow(s).to_string(), Arc::clone(s.value()))).collect()
    }

    /// What `f` makes of each projection it keeps, under one lock, without
    /// cloning the others (a scan of a large store by a small filter).
    pub fn select<R>(&self, mut f: impl FnMut(&str, &T) -> Option<R>) -> Vec<R> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.items.iter().filter_map(|s| f(Borrow::<str>::borrow(s), s.value())).collect()
    }

    /// The projections `keep` accepts, under one lock: a reconcile that
    /// reads one namespace's pods of a cache of 150,000 clones those, not
    /// every pointer of the cache.
    pub fn matching(&self, mut keep: impl FnMut(&T) -> bool) -> Vec<Arc<T>> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.items.iter().filter(|s| keep(s.value())).map(|s| Arc::clone(s.value())).collect()
    }

    /// [`Self::matching`] among the keys that start with `prefix` alone
    /// (`"namespace/"` for keys made `namespace/name`): a range of the
    /// ordered keys, so a namespace's reconcile costs its own entries, not
    /// the cluster's.
    pub fn matching_under(&self, prefix: &str, mut keep: impl FnMut(&T) -> bool) -> Vec<Arc<T>> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        under(&state.items, prefix).filter(|s| keep(s.value())).map(|s| Arc::clone(s.value())).collect()
    }

    /// [`Self::matching`] among the objects of `namespace` alone, for keys
    /// made by [`ns_key::of`].
    pub fn in_namespace(&self, namespace: &str, keep: impl FnMut(&T) -> bool) -> Vec<Arc<T>> {
        self.matching_under(&format!("{namespace}/"), keep)
    }

    /// [`Self::select`] among the keys that start with `prefix` alone.
    pub fn select_under<R>(&self, prefix: &str, mut f: impl FnMut(&str, &T) -> Option<R>) -> Vec<R> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        under(&state.items, prefix).filter_map(|s| f(Borrow::<str>::borrow(s), s.value())).collect()
    }

    /// The projection under `key`.
    pub fn get(&self, key: &str) -> Option<Arc<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).items.get(key).map(|s| Arc::clone(s.value()))
    }

    pub fn len(&self) -> usize {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the first complete list has been applied.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits for the first complete list; `Err` when the writer is gone
    /// before that.
    pub async fn wait_until_ready(&self) -> Result<(), WriterDropped> {
        let mut rx = self.ready.clone();
        rx.wait_for(|ready| *ready).await.map(|_| ()).map_err(|_| WriterDropped)
    }
}

/// The writer was dropped before the store became ready.
#[derive(Debug, thiserror::Error)]
#[error("the watch feeding this store ended before its first complete list")]
pub struct WriterDropped;

#[cfg(test)]
mod tests {
    use super::*;

    use watcher::Event;

    fn project(s: &'static str) -> (String, usize) {
        (s.to_string(), s.len())
    }

    #[tokio::test]
    async fn relist_replaces_and_readiness_follows_the_first_list() {
        let (store, mut w) = store::<usize>();
        assert!(!store.is_ready());
        w.apply(Event::Init, project);
        w.apply(Event::InitApply("a"), project);
        w.apply(Event::InitApply("bb"), project);
        assert!(store.is_empty(), "a list in progress is not visible");
        w.apply(Event::InitDone, project);
        store.wait_until_ready().await.unwrap();
        assert_eq!(store.len(), 2);
        w.apply(Event::Apply("ccc"), project);
        w.apply(Event::Delete("a"), project);
        assert_eq!(store.get("ccc").as_deref(), Some(&3));
        assert!(store.get("a").is_none());
        // A relist (after a lost watch) drops what was deleted meanwhile.
        w.apply(Event::Init, project);
        w.apply(Event::InitApply("bb"), project);
        assert_eq!(store.len(), 2, "the old contents stay until the relist is done");
        w.apply(Event::InitDone, project);
        let mut keys: Vec<usize> = store.state().iter().map(|v| **v).collect();
        keys.sort();
        assert_eq!(keys, vec![2]);
    }

    #[test]
    fn compacting_keeps_the_keys_contents_and_generation_in_fresh_allocations() {
        let (store, mut w) = store::<usize>();
        for e in [Event::Init, Event::InitApply("bb"), Event::InitApply("a"), Event::InitDone] {
            w.apply(e, project);
        }
        let (before, generation) = (store.entries(), store.generation());
        store.compact();
        let after = store.entries();
        assert_eq!(store.generation(), generation, "the contents did not change");
        assert_eq!(after.iter().map(|(k, v)| (k.as_str(), **v)).collect::<Vec<_>>(), vec![("a", 1), ("bb", 2)]);
        assert!(before.iter().zip(&after).all(|((_, b), (_, a))| !Arc::ptr_eq(b, a)), "made again");
        assert_eq!(store.get("bb").as_deref(), Some(&2), "found by key as before");
    }

    #[test]
    fn the_contents_read_in_the_order_of_their_keys() {
        // Callers look a key up in what `state` returned by binary search
        // (service-dns's UIDs of a sync's Services).
        let (store, mut w) = store::<usize>();
        for e in [Event::Init, Event::InitApply("ccc"), Event::InitApply("a"), Event::InitApply("bb"), Event::InitDone]
        {
            w.apply(e, project);
        }
        assert_eq!(store.state().iter().map(|v| **v).collect::<Vec<_>>(), vec![1, 2, 3]);
        let keys: Vec<String> = store.entries().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec!["a", "bb", "ccc"]);
    }

    #[test]
    fn the_generation_moves_with_every_change_of_the_contents_only() {
        let (store, mut w) = store::<usize>();
        let g0 = store.generation();
        w.apply(Event::Init, project);
        w.apply(Event::InitApply("a"), project);
        assert_eq!(store.generation(), g0, "a list in progress is not the contents");
        w.apply(Event::InitDone, project);
        let g1 = store.generation();
        assert!(g1 > g0);
        w.apply(Event::Apply("bb"), project);
        let g2 = store.generation();
        assert!(g2 > g1);
        w.apply(Event::Delete("zz"), project);
        assert_eq!(store.generation(), g2, "deleting what is not held changes nothing");
        w.apply(Event::Delete("bb"), project);
        assert!(store.generation() > g2);
    }

    #[test]
    fn changes_are_reported_once_including_across_a_relist() {
        let (_store, mut w) = store::<usize>();
        let keys = |c: Vec<Change<usize>>| -> Vec<(String, Option<usize>, Option<usize>)> {
            let mut v: Vec<_> = c.into_iter().map(|c| (c.key, c.old.map(|o| *o), c.new.map(|n| *n))).collect();
            v.sort();
            v
        };
        assert!(w.apply_changes(Event::Init, project).is_empty());
        assert!(w.apply_changes(Event::InitApply("a"), project).is_empty());
        assert_eq!(keys(w.apply_changes(Event::InitDone, project)), [("a".to_string(), None, Some(1))]);
        assert!(w.apply_changes(Event::Apply("a"), project).is_empty(), "unchanged");
        assert_eq!(keys(w.apply_changes(Event::Apply("bb"), project)), [("bb".to_string(), None, Some(2))]);
        w.apply_changes(Event::Init, project);
        w.apply_changes(Event::InitApply("bb"), project);
        w.apply_changes(Event::InitApply("ccc"), project);
        assert_eq!(
            keys(w.apply_changes(Event::InitDone, project)),
            [("a".to_string(), Some(1), None), ("ccc".to_string(), None, Some(3))]
        );
        assert_eq!(keys(w.apply_changes(Event::Delete("bb"), project)), [("bb".to_string(), Some(2), None)]);
    }

    /// A relist holds one projection per unchanged object, the one already
    /// held (the same allocation), and a new one only where it changed.
    #[test]
    fn a_relist_shares_what_it_finds_unchanged() {
        let (store, mut w) = store::<(usize, &'static str)>();
        let version = std::sync::Mutex::new(1);
        let project = |s: &'static str| (s.to_string(), (*version.lock().unwrap(), s));
        for e in [Event::Init, Event::InitApply("x"), Event::InitApply("y"), Event::InitDone] {
            w.apply_changes(e, project);
        }
        let before = (store.get("x").unwrap(), store.get("y").unwrap());
        w.apply_changes(Event::Init, project);
        w.apply_changes(Event::InitApply("x"), project);
        *version.lock().unwrap() = 2;
        w.apply_changes(Event::InitApply("y"), project);
        let changed = w.apply_changes(Event::InitDone, project);
        let after = (store.get("x").unwrap(), store.get("y").unwrap());
        assert!(Arc::ptr_eq(&before.0, &after.0), "unchanged: the projection already held");
        assert!(!Arc::ptr_eq(&before.1, &after.1));
        assert_eq!(*after.1, (2, "y"));
        assert_eq!(changed.iter().map(|c| c.key.as_str()).collect::<Vec<_>>(), ["y"]);
        // `apply` compares nothing: every listed object gets its new projection.
        for e in [Event::Init, Event::InitApply("x"), Event::InitDone] {
            w.apply(e, project);
        }
        assert!(!Arc::ptr_eq(&after.0, &store.get("x").unwrap()));
    }

    /// What a callback saw: `L` a complete list, `C` another event, with
    /// the keys changed.
    fn seen(fed: &Fed<'_, usize>) -> String {
        let (tag, changes) = match fed {
            Fed::Listed(c) => ("L", c),
            Fed::Changed(c) => ("C", c),
        };
        let mut keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
        keys.sort_unstable();
        format!("{tag}{keys:?}")
    }

    fn a_list_an_event_and_a_relist() -> impl futures::Stream<Item = Result<Event<&'static str>, watcher::Error>> {
        futures::stream::iter(
            [
                Event::Init,
                Event::InitApply("a"),
                Event::InitDone,
                Event::Apply("bb"),
                Event::Init,
                Event::InitApply("bb"),
                Event::InitDone,
            ]
            .map(Ok),
        )
    }

    #[tokio::test]
    async fn feed_tells_every_complete_list_the_relist_included() {
        let (store, w) = store::<usize>();
        let mut log = Vec::new();
        w.feed(a_list_an_event_and_a_relist(), project, |fed| log.push(seen(&fed))).await;
        assert_eq!(log, ["C[]", "C[]", "L[\"a\"]", "C[\"bb\"]", "C[]", "C[]", "L[\"a\"]"]);
        assert_eq!(store.len(), 1);
    }

    #[tokio::test]
    async fn run_tells_synced_once_and_every_change() {
        let (_store, w) = store::<usize>();
        let synced = std::cell::Cell::new(0);
        let mut changed = Vec::new();
        w.run(
            a_list_an_event_and_a_relist(),
            project,
            || synced.set(synced.get() + 1),
            |c: &[Change<usize>]| changed.extend(c.iter().map(|c| c.key.clone())),
        )
        .await;
        assert_eq!(synced.get(), 1, "the relist is not a first sync");
        assert_eq!(changed, ["a", "bb", "a"]);
    }

    /// A projection holding its key, as pod views do.
    struct Named {
        key: String,
        len: usize,
    }

    impl HasKey for Named {
        fn key(&self) -> &str {
            &self.key
        }
    }

    #[test]
    fn a_keyed_store_is_looked_up_by_the_projections_own_key() {
        let (store, mut w) = keyed_store::<Named>();
        let project = |s: &'static str| (s.to_string(), Named { key: s.to_string(), len: s.len() });
        w.apply(Event::Init, project);
        w.apply(Event::InitApply("a"), project);
        w.apply(Event::InitApply("bb"), project);
        w.apply(Event::InitDone, project);
        assert_eq!(store.get("bb").map(|n| n.len), Some(2));
        w.apply(Event::Apply("bb"), project);
        assert_eq!(store.len(), 2, "replaced, not added");
        w.apply(Event::Delete("a"), project);
        assert!(store.get("a").is_none());
        let mut keys: Vec<String> = store.entries().into_iter().map(|(k, _)| k).collect();
        keys.sort();
        assert_eq!(keys, ["bb"]);
        assert_eq!(store.select(|k, n| (n.len == 2).then(|| k.to_string())), ["bb"]);
        assert_eq!(store.matching(|n| n.len == 2).len(), 1);
        // A relist drops what went missing, by the projection's key.
        w.apply(Event::Init, project);
        w.apply(Event::InitApply("ccc"), project);
        w.apply(Event::InitDone, project);
        assert_eq!(store.state().iter().map(|n| n.key.as_str()).collect::<Vec<_>>(), ["ccc"]);
    }

    proptest::proptest! {
        /// A prefix's range is exactly the keys a full scan with
        /// `starts_with` keeps: neighbours that sort just before or after
        /// it (`ns`, `ns-a/x`, `ns0/x`, `ns/`) neither leak in nor hide
        /// a key of the prefix.
        #[test]
        fn a_prefix_range_is_a_filtered_scan(
            keys in proptest::collection::btree_set("[a-c]{0,2}[-/0]?[a-c/]{0,3}", 0..40),
            prefix in "[a-c]{0,2}[-/0]?",
        ) {
            let (store, mut w) = keyed_store::<Named>();
            let project = |s: String| (s.clone(), Named { len: s.len(), key: s });
            for k in &keys {
                w.apply(Event::Apply(k.clone()), project);
            }
            let mut ranged: Vec<String> = store.matching_under(&prefix, |_| true).iter().map(|n| n.key.clone()).collect();
            let scanned: Vec<String> = keys.iter().filter(|k| k.starts_with(prefix.as_str())).cloned().collect();
            ranged.sort();
            proptest::prop_assert_eq!(&ranged, &scanned);
            let selected = store.select_under(&prefix, |k, n| (n.len % 2 == 0).then(|| k.to_string()));
            let even: Vec<String> = scanned.iter().filter(|k| k.len() % 2 == 0).cloned().collect();
            proptest::prop_assert_eq!(selected, even, "select_under visits the range in key order");
        }
    }

    #[tokio::test]
    async fn a_writer_dropped_before_ready_is_an_error() {
        let (store, w) = store::<usize>();
        drop(w);
        assert!(store.wait_until_ready().await.is_err());
    }
}
