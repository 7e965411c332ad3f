//! A store of the few objects of a kind that say something, kept from a
//! watch: the silence annotations ([`crate::annotation_silences`]) and the
//! workload signals ([`crate::workload_signals`]). Each object is projected
//! to `Option<T>` and only the `Some` are held, so a cluster of 50,000
//! healthy Deployments holds nothing. One watch may feed several stores
//! ([`watch_feeds`]): a Deployment's silence and its stalled rollout come
//! from one list and one watch.
//!
//! Until a store's first list is complete it is not listed, and PodAlerts
//! wait for it (a restart must not notify what a silence covers), unless
//! the list is refused (RBAC without the kind): then they go on without it,
//! and the log says so.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use flotilla_shared::health::WatchHealth;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};

/// What a store holds: the objects with something to say, by key
/// (`<namespace>/<name>`, or a namespace's name), ordered so a namespace's
/// are one range ([`in_namespace`]). Keys are shared and values small or
/// behind an `Arc`: a change made while a reconcile holds a snapshot
/// copies the map's nodes and reference counts, not its entries.
pub type Held<T> = BTreeMap<Arc<str>, T>;

/// The held objects of `namespace` (keys `<namespace>/<name>`), or all.
pub fn in_namespace<'a, T>(
    held: &'a Held<T>,
    namespace: Option<&str>,
) -> Box<dyn Iterator<Item = (&'a str, &'a T)> + 'a> {
    match namespace {
        None => Box::new(held.iter().map(|(k, v)| (&**k, v))),
        Some(ns) => {
            let from: Arc<str> = Arc::from(format!("{ns}/"));
            let prefix = from.clone();
            Box::new(held.range(from..).map(|(k, v)| (&**k, v)).take_while(move |(k, _)| k.starts_with(&*prefix)))
        }
    }
}

/// What a new view of an object keeps of the one held: a rollout's
/// `since` while it has not progressed, a CronJob's `seen` while its last
/// run is the same. Most views keep nothing.
pub trait Carry: Clone + PartialEq {
    /// `self`, the new view, with what it continues of `held`.
    fn carry(self, _held: &Self) -> Self {
        self
    }
}

impl Carry for k8s_openapi::jiff::Timestamp {}

/// One kind's held objects as last listed and watched.
pub struct HeldStore<T> {
    current: RwLock<Arc<Held<T>>>,
    /// A list completed, or the kind is refused: nothing to wait for.
    listed: AtomicBool,
    /// A list completed (not only refused).
    has_listed: AtomicBool,
}

impl<T> HeldStore<T> {
    /// A store a watch fills; not listed until its first list is.
    pub fn watched() -> Self {
        Self {
            current: RwLock::new(Arc::new(Held::new())),
            listed: AtomicBool::new(false),
            has_listed: AtomicBool::new(false),
        }
    }

    /// Not watched: nothing held, nothing to wait for.
    pub fn disabled() -> Self {
        Self {
            current: RwLock::new(Arc::new(Held::new())),
            listed: AtomicBool::new(true),
            has_listed: AtomicBool::new(false),
        }
    }

    /// What is held now (shared, not copied).
    pub fn snapshot(&self) -> Arc<Held<T>> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether a complete list has been seen (or the kind is refused).
    pub fn is_listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// Whether a list completed (what it holds since came from a watch).
    pub fn has_listed(&self) -> bool {
        self.has_listed.load(Ordering::Acquire)
    }
}

/// One store fed by a watch of `O`: its projection and its list in
/// progress.
pub trait Feed<O> {
    /// Folds one event in; the keys whose value changed, and whether a list
    /// completed.
    fn feed(&mut self, event: &Event<O>) -> Changed;
    /// The kind is refused: the store counts as listed (held: nothing).
    fn refused(&mut self);
}

/// A store and the projection that fills it.
pub struct Feeder<'a, O, T, P> {
    store: &'a HeldStore<T>,
    pending: Option<Held<T>>,
    project: P,
    _of: std::marker::PhantomData<fn(&O)>,
}

impl<'a, O, T, P: Fn(&O) -> (String, Option<T>)> Feeder<'a, O, T, P> {
    pub fn new(store: &'a HeldStore<T>, project: P) -> Self {
        Self { store, pending: None, project, _of: std::marker::PhantomData }
    }
}

impl<O, T: Carry, P: Fn(&O) -> (String, Option<T>)> Feed<O> for Feeder<'_, O, T, P> {
    fn feed(&mut self, event: &Event<O>) -> Changed {
        // In place: the map is copied only while a reconcile holds a
        // snapshot of it (`Arc::make_mut`), not at every change.
        let out = {
            let mut current = self.store.current.write().unwrap_or_else(PoisonError::into_inner);
            fold(&mut current, &mut self.pending, event, &self.project)
        };
        if out.listed {
            self.store.has_listed.store(true, Ordering::Release);
            self.store.listed.store(true, Ordering::Release);
        }
        out
    }

    fn refused(&mut self) {
        self.store.listed.store(true, Ordering::Release);
    }
}

/// Watches `api` (the `plural` kind, listed as `cfg` says) until the
/// stream ends, feeding every event to each of `feeds`, and calls
/// `changed` with the keys whose held value came, went or changed in any of
/// them (sorted), and `true` when a list completed.
pub async fn watch_feeds<O>(
    api: Api<O>,
    cfg: watcher::Config,
    plural: &str,
    health: WatchHealth,
    feeds: &mut [&mut (dyn Feed<O> + Send)],
    mut changed: impl FnMut(&[&str], bool),
) where
    O: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    O::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let mut events = std::pin::pin!(health.watcher(api, cfg));
    let singular = plural.strip_suffix('s').unwrap_or(plural);
    let mut listed_once = false;
    while let Some(event) = events.next().await {
        // The watcher retries with the suite's back-off; readiness reports
        // the failure, the log says why (RBAC: `forbidden`).
        let event = match event {
            Ok(e) => e,
            Err(e) if forbidden(&e) && !listed_once => {
                // RBAC without the kind (an admin's own ClusterRole from
                // before this watch): PodAlerts go on without what it would
                // say rather than alert on nothing; the watch keeps trying
                // and readiness reports it.
                let signals = if feeds.len() > 1 { " and signals" } else { "" };
                tracing::warn!(error = %e, "{singular} watch refused: {singular} silences{signals} are not applied until the operator may list and watch {plural}");
                listed_once = true;
                for f in feeds.iter_mut() {
                    f.refused();
                }
                changed(&[], true);
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "{singular} watch failed; retrying");
                continue;
            }
        };
        let mut keys = Vec::new();
        let mut listed = false;
        for f in feeds.iter_mut() {
            let out = f.feed(&event);
            keys.extend(out.keys);
            listed |= out.listed;
        }
        if listed {
            listed_once = true;
            health.synced();
        }
        if keys.is_empty() && !listed {
            continue;
        }
        keys.sort();
        keys.dedup();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        changed(&keys, listed);
    }
}

/// The page size the whole objects' watches ask for where the API server
/// does not stream lists ([`flotilla_shared::streaming_list`], one object
/// at a time; its fallback pages hold at most 50). A list with
/// `resourceVersion=0` is one unpaginated answer: 2,000 Deployments decoded
/// at once raised pod-alert's re-list peak by 26 MiB (issue 28).
pub const PAGE: u32 = 100;

/// Whether the API server refused the watch (403).
fn forbidden(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 403,
        _ => false,
    }
}

/// What one watch event changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changed {
    /// Keys whose held value changed, sorted.
    pub keys: Vec<String>,
    /// A list completed.
    pub listed: bool,
}

/// Folds one watch event into `current`, as kube's reflector does: a list
/// (`Init`, `InitApply`…, `InitDone`) is gathered in `pending` and then
/// replaces `current` at once, so what ended while the watch was down ends.
/// A new value carries what it continues of the held one ([`Carry`]); one
/// then equal to it is no change.
fn fold<O, T: Carry>(
    current: &mut Arc<Held<T>>,
    pending: &mut Option<Held<T>>,
    event: &Event<O>,
    project: impl Fn(&O) -> (String, Option<T>),
) -> Changed {
    let mut set = |name: String, value: Option<T>| {
        let value = match (value, current.get(name.as_str())) {
            (Some(v), Some(held)) => Some(v.carry(held)),
            (v, _) => v,
        };
        if current.get(name.as_str()) == value.as_ref() {
            return None;
        }
        let map = Arc::make_mut(current);
        match value {
            Some(v) => map.insert(Arc::from(name.as_str()), v),
            None => map.remove(name.as_str()),
        };
        Some(name)
    };
    match event {
        Event::Init => {
            *pending = Some(Held::new());
            Changed::default()
        }
        Event::InitApply(o) => {
            if let (Some(p), (name, Some(value))) = (pending.as_mut(), project(o)) {
                p.insert(Arc::from(name), value);
            }
            Changed::default()
        }
        Event::InitDone => {
            let new: Held<T> = pending
                .take()
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| match current.get(&k) {
                    Some(held) => (k, v.carry(held)),
                    None => (k, v),
                })
                .collect();
            let mut keys: Vec<String> = current
                .iter()
                .filter(|(k, v)| new.get(*k) != Some(*v))
                .map(|(k, _)| k.to_string())
                .chain(new.iter().filter(|(k, v)| current.get(*k) != Some(*v)).map(|(k, _)| k.to_string()))
                .collect();
            keys.sort();
            keys.dedup();
            *current = Arc::new(new);
            Changed { keys, listed: true }
        }
        Event::Apply(o) => {
            let (name, value) = project(o);
            Changed { keys: set(name, value).into_iter().collect(), listed: false }
        }
        Event::Delete(o) => {
            let (name, _) = project(o);
            Changed { keys: set(name, None).into_iter().collect(), listed: false }
        }
    }
}

/// `<namespace>/<name>` of a namespaced object.
pub fn namespaced_key(o: &impl ResourceExt) -> String {
    format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    type Ns = (&'static str, Option<&'static str>);

    fn project(o: &Ns) -> (String, Option<Timestamp>) {
        (o.0.to_string(), o.1.map(|t| t.parse().unwrap()))
    }

    fn run(current: &mut Arc<Held<Timestamp>>, pending: &mut Option<Held<Timestamp>>, e: Event<Ns>) -> Changed {
        fold(current, pending, &e, project)
    }

    const T1: &str = "2026-11-28T10:00:00Z";
    const T2: &str = "2026-11-28T11:00:00Z";

    #[test]
    fn only_objects_with_a_value_are_held_and_a_relist_replaces_them() {
        let (mut current, mut pending) = (Arc::default(), None);
        assert_eq!(run(&mut current, &mut pending, Event::Init), Changed::default());
        run(&mut current, &mut pending, Event::InitApply(("a", Some(T1))));
        run(&mut current, &mut pending, Event::InitApply(("b", None)));
        assert!(current.is_empty(), "nothing applied before the list completes");
        let done = run(&mut current, &mut pending, Event::InitDone);
        assert_eq!(done, Changed { keys: vec!["a".into()], listed: true });
        assert_eq!(current.len(), 1, "b has nothing to say: not held");
        // A change, the same again (no wake), a removal.
        let moved = run(&mut current, &mut pending, Event::Apply(("a", Some(T2))));
        assert_eq!(moved.keys, ["a"]);
        assert!(run(&mut current, &mut pending, Event::Apply(("a", Some(T2)))).keys.is_empty());
        assert!(run(&mut current, &mut pending, Event::Apply(("b", None))).keys.is_empty());
        assert_eq!(run(&mut current, &mut pending, Event::Apply(("c", Some(T1)))).keys, ["c"]);
        assert_eq!(run(&mut current, &mut pending, Event::Delete(("c", Some(T1)))).keys, ["c"]);
        // A relist after the watch was down: a's value was removed, d's added.
        run(&mut current, &mut pending, Event::Init);
        run(&mut current, &mut pending, Event::InitApply(("a", None)));
        run(&mut current, &mut pending, Event::InitApply(("d", Some(T1))));
        assert_eq!(current.len(), 1, "the old contents stand until the list completes");
        let relisted = run(&mut current, &mut pending, Event::InitDone);
        assert_eq!(relisted, Changed { keys: vec!["a".into(), "d".into()], listed: true });
        assert_eq!(current.keys().map(|k| &**k).collect::<Vec<_>>(), ["d"]);
    }

    impl Carry for u32 {}
    impl Carry for u8 {}

    /// A new view carries what it continues of the held one (what a
    /// rollout's `since` needs), through a relist too.
    #[test]
    fn a_new_value_carries_what_it_continues() {
        #[derive(Debug, Clone, PartialEq)]
        struct Since(u32, &'static str);
        impl Carry for Since {
            fn carry(self, held: &Self) -> Self {
                if self.0 == held.0 { Since(self.0, held.1) } else { self }
            }
        }
        let project = |o: &(&'static str, u32, &'static str)| (o.0.to_string(), Some(Since(o.1, o.2)));
        let (mut current, mut pending) = (Arc::default(), None);
        fold(&mut current, &mut pending, &Event::Apply(("a", 1, "first")), project);
        assert!(fold(&mut current, &mut pending, &Event::Apply(("a", 1, "second")), project).keys.is_empty());
        fold(&mut current, &mut pending, &Event::Init, project);
        fold(&mut current, &mut pending, &Event::InitApply(("a", 1, "relisted")), project);
        assert!(fold(&mut current, &mut pending, &Event::InitDone, project).keys.is_empty());
        assert_eq!(current.get("a").map(|s| s.1), Some("first"));
        assert_eq!(fold(&mut current, &mut pending, &Event::Apply(("a", 2, "moved")), project).keys, ["a"]);
        assert_eq!(current.get("a").map(|s| s.1), Some("moved"));
    }

    /// A namespace's keys are one range: none of another namespace whose
    /// name starts alike.
    #[test]
    fn a_namespaces_objects_are_one_range() {
        let held: Held<u8> = ["a/x", "a/y", "ab/z", "b/w"].into_iter().map(|k| (Arc::from(k), 1)).collect();
        let keys = |ns| in_namespace(&held, ns).map(|(k, _)| k.to_string()).collect::<Vec<_>>();
        assert_eq!(keys(Some("a")), ["a/x", "a/y"]);
        assert_eq!(keys(Some("c")), Vec::<String>::new());
        assert_eq!(keys(None).len(), 4);
    }

    /// One watch feeds two stores: each holds its own projection, and a
    /// change in either is reported once.
    #[test]
    fn one_watch_feeds_several_stores() {
        let (silences, signals) = (HeldStore::<Timestamp>::watched(), HeldStore::<u32>::watched());
        let mut a = Feeder::new(&silences, project);
        let mut b = Feeder::new(&signals, |o: &Ns| (o.0.to_string(), o.1.is_none().then_some(7)));
        let mut feeds: [&mut dyn Feed<Ns>; 2] = [&mut a, &mut b];
        for e in [Event::Init, Event::InitApply(("x", Some(T1))), Event::InitApply(("y", None))] {
            for f in feeds.iter_mut() {
                f.feed(&e);
            }
        }
        assert!(!silences.is_listed() && !signals.is_listed());
        let outs: Vec<Changed> = feeds.iter_mut().map(|f| f.feed(&Event::InitDone)).collect();
        assert_eq!(outs[0].keys, ["x"]);
        assert_eq!(outs[1].keys, ["y"]);
        assert!(silences.is_listed() && signals.is_listed());
        assert_eq!(silences.snapshot().len(), 1);
        assert_eq!(signals.snapshot().get("y"), Some(&7));
        let none = HeldStore::<u32>::watched();
        Feeder::new(&none, |o: &Ns| (o.0.to_string(), None)).refused();
        assert!(none.is_listed(), "a refused kind holds nothing and waits for nothing");
        assert!(!none.has_listed(), "but it listed nothing");
        assert!(silences.has_listed() && signals.has_listed());
    }
}
