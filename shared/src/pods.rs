//! A projection of the Pods an operator watches, and the namespaces each
//! change touched: how pod-alert and pod-debugger keep their pod caches
//! small and trigger the rules of the namespaces whose pods changed.
//!
//! A pod's labels are its author's to write, as many as the API takes
//! (~12,000 in one pod fit): a view keeps only the label keys some live
//! selector of the operator references for that pod's namespace
//! ([`LabelKeys`]), at most
//! [`MAX_LABEL_BYTES`] of them. When a selector references a new key, the
//! pod watch lists again so every view gets it; until that list is done,
//! [`LabelKeys::covers`] says the views cannot be matched on that key yet.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tokio::sync::watch;

use crate::health::WatchHealth;
use crate::projection::{Slot, Writer, ns_key};
use crate::streaming_list::InitialList;

/// Labels a pod view keeps at most (keys and values); a pod with more of
/// the referenced ones is marked cut and matches no selector.
pub const MAX_LABEL_BYTES: usize = 4 << 10;
/// Pods per list page: a page of full Pods is held, parsed, before each
/// becomes its small view, and a pod's labels and managed fields can take
/// a megabyte.
pub const PAGE_SIZE: u32 = 10;
/// Re-lists for new label keys are at least this far apart.
const RELIST_GAP: Duration = Duration::from_secs(5);

/// The label keys the live selectors reference, by the namespace whose
/// pods they select (one tenant's selectors never change what is kept of
/// another's pods), shared by the pod watch (which re-lists when one is
/// new) and the views (which keep only them).
#[derive(Clone)]
pub struct LabelKeys {
    state: Arc<Mutex<KeysState>>,
    /// Only the objects of namespaces some rule reads are held
    /// ([`LabelKeys::only_wanted_namespaces`]).
    namespaced: bool,
    /// Bumped when a key is referenced that the last list did not keep.
    relist: watch::Sender<u64>,
}

/// The key a rule registers for its namespace ([`LabelKeys::set`]) when
/// its objects must be held whatever the rule's selector reads: no label
/// has an empty key.
pub const NAMESPACE_MARK: &str = "";

/// Keys by the namespace whose pods they select; `None`: every namespace.
/// Each key is allocated once and shared by every view that keeps it.
pub type Scoped = BTreeMap<Option<String>, BTreeSet<Arc<str>>>;

#[derive(Default)]
struct KeysState {
    wanted: Scoped,
    /// The keys every view holds: those wanted when the last complete list began.
    listed: Scoped,
}

fn contains(set: &Scoped, scope: &Option<String>, key: &str) -> bool {
    set.get(scope).is_some_and(|k| k.contains(key))
}

/// A pod's labels as a view keeps them: a sorted list, not a `BTreeMap`
/// (whose smallest node is ~550 bytes, per pod; issue 28), each key the
/// one [`LabelKeys`] holds and each value interned ([`crate::intern`]: a
/// Deployment's replicas share theirs) — an allocation per label per pod
/// saved twice.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodLabels {
    /// The referenced keys the pod has, sorted by key; `None` when they
    /// took more than [`MAX_LABEL_BYTES`]: none are kept, and no selector
    /// should match the pod on them ([`PodLabels::is_cut`]). 16 bytes, not
    /// a list and a flag's 24 (held per shape or per pod, issue 28).
    kept: Option<Box<[Label]>>,
}

/// A kept label: its key (shared with [`LabelKeys`]) and its value (interned).
pub type Label = (Arc<str>, Arc<str>);

impl Default for PodLabels {
    /// No label kept (not cut).
    fn default() -> Self {
        Self { kept: Some(Box::default()) }
    }
}

impl PodLabels {
    /// Labels over [`MAX_LABEL_BYTES`]: none kept, no selector matches.
    pub fn cut() -> Self {
        Self { kept: None }
    }

    /// Whether the labels were over [`MAX_LABEL_BYTES`] (none kept).
    pub fn is_cut(&self) -> bool {
        self.kept.is_none()
    }

    /// The referenced keys the pod has, sorted by key.
    pub fn labels(&self) -> &[Label] {
        self.kept.as_deref().unwrap_or_default()
    }

    /// The value of label `key`, if kept.
    pub fn get(&self, key: &str) -> Option<&str> {
        let labels = self.labels();
        labels.binary_search_by(|(k, _)| (**k).cmp(key)).ok().and_then(|i| labels.get(i)).map(|(_, v)| &**v)
    }

    /// Whether `selector` matches these labels (never, when they were cut).
    pub fn matched_by(&self, selector: &crate::selector::Selector) -> bool {
        !self.is_cut() && selector.matches_with(|k| self.get(k))
    }

    /// Labels as a view keeps them, from `pairs` (for tests and fixtures).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut labels: Vec<(Arc<str>, Arc<str>)> = pairs.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        labels.sort();
        labels.dedup_by(|a, b| a.0 == b.0);
        PodLabels { kept: Some(labels.into_boxed_slice()) }
    }
}

impl Default for LabelKeys {
    fn default() -> Self {
        Self::new()
    }
}

impl LabelKeys {
    pub fn new() -> Self {
        Self { state: Arc::default(), namespaced: false, relist: watch::Sender::new(0) }
    }

    /// Keys whose watch holds only the objects of namespaces a rule reads
    /// (one that registered a key there, [`NAMESPACE_MARK`] at least) or of
    /// every namespace when a rule reads them all: a cluster of 10,000
    /// namespaces with rules in 40 holds those 40's pods (issue 28). A
    /// namespace newly read starts a new list, as a new key does.
    pub fn only_wanted_namespaces() -> Self {
        Self { namespaced: true, ..Self::new() }
    }

    /// Whether objects of `namespace` are held.
    pub fn wants(&self, namespace: &str) -> bool {
        if !self.namespaced {
            return true;
        }
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.wanted.contains_key(&None) || st.wanted.contains_key(&Some(namespace.to_string()))
    }

    /// The keys the live selectors reference now: (the namespace whose pods
    /// the selector reads, or None for every namespace; key). Returns true
    /// when one is new to the views: the pod watch lists again (a key no
    /// longer referenced costs nothing until then).
    pub fn set(&self, keys: impl IntoIterator<Item = (Option<String>, String)>) -> bool {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // A key already held is shared, not allocated again.
        let held: BTreeSet<Arc<str>> = st.wanted.values().chain(st.listed.values()).flatten().cloned().collect();
        let mut wanted = Scoped::new();
        for (scope, key) in keys {
            let key = held.get(key.as_str()).cloned().unwrap_or_else(|| Arc::from(key));
            wanted.entry(scope).or_default().insert(key);
        }
        let new = wanted.iter().any(|(scope, keys)| keys.iter().any(|k| !contains(&st.listed, scope, k)));
        let changed = wanted != st.wanted;
        st.wanted = wanted;
        drop(st);
        if new && changed {
            self.relist.send_modify(|n| *n += 1);
        }
        new
    }

    /// Whether every view of `namespace`'s pods (None: of every namespace)
    /// holds `keys` (a list that began after they were referenced is complete).
    pub fn covers<'a>(&self, namespace: Option<&str>, mut keys: impl Iterator<Item = &'a str>) -> bool {
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let scope = namespace.map(str::to_string);
        keys.all(|k| contains(&st.listed, &scope, k))
    }

    /// Whether a rule reads `key` of `namespace`'s pods (or of every
    /// namespace's): for marks ([`NAMESPACE_MARK`]-like keys no label has)
    /// that ask views to keep more than labels.
    pub fn wanted_in(&self, namespace: &str, key: &str) -> bool {
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        contains(&st.wanted, &None, key) || contains(&st.wanted, &Some(namespace.to_string()), key)
    }

    /// What a view of a pod in `namespace` keeps of `labels`.
    pub fn keep(&self, namespace: &str, labels: Option<&BTreeMap<String, String>>) -> PodLabels {
        let Some(labels) = labels else { return PodLabels::default() };
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let empty = BTreeSet::new();
        let everywhere = st.wanted.get(&None).unwrap_or(&empty);
        let here = st.wanted.get(&Some(namespace.to_string())).unwrap_or(&empty);
        let mut kept = Vec::new();
        let mut bytes = 0;
        for key in everywhere.union(here) {
            let Some((k, v)) = labels.get_key_value(&**key) else { continue };
            bytes += k.len() + v.len();
            if bytes > MAX_LABEL_BYTES {
                return PodLabels::cut();
            }
            kept.push((Arc::clone(key), crate::intern::names().get(v)));
        }
        kept.sort();
        PodLabels { kept: Some(kept.into_boxed_slice()) }
    }

    fn wanted(&self) -> Scoped {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).wanted.clone()
    }

    fn listed(&self, keys: Scoped) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).listed = keys;
    }
}

/// What one event of a watch fed by [`watch_labelled`] changed: whom to wake.
#[derive(Debug, Clone, Copy)]
pub struct Touched<'a> {
    /// The namespaces whose objects' views changed (sorted, without
    /// repeats; empty when nothing did).
    pub namespaces: &'a [&'a str],
    /// The event completed a list (the first, or one for new label keys)
    /// and its keys are now marked listed: every rule that waited for the
    /// views ([`LabelKeys::covers`]) may go on. Rules wait for this instead
    /// of polling: 903 PodAlerts polling every second through a 20,000-pod
    /// first list made 45,963 reconciles in 6 minutes (issue 28).
    pub listed: bool,
}

/// Feeds `writer` with `view` of each Pod `api` lists and watches (keyed
/// `<namespace>/<name>`), marks `health` synced after the first list, and
/// after each event hands `changed` what it touched ([`Touched`]). When `keys`
/// gains a key the views lack, the watch starts over with a new list (at
/// most every few seconds), whose completion replaces every view.
///
/// Lists by streaming ([`crate::streaming_list`]: one Pod held at a time),
/// or where the server does not stream, in pages of [`PAGE_SIZE`]: a page
/// of full Pods is what peaks memory at start, and each becomes its small
/// view at once.
pub async fn watch_pods<T: PartialEq, S: Slot<T>>(
    api: Api<Pod>,
    writer: Writer<T, S>,
    view: impl Fn(&Pod) -> T,
    keys: LabelKeys,
    health: WatchHealth,
    changed: impl FnMut(Touched<'_>),
) {
    let config = watcher::Config::default().page_size(PAGE_SIZE);
    watch_labelled(api, config, writer, view, keys, health, changed).await;
}

/// [`watch_pods`] for any namespaced kind whose views keep the label keys
/// `keys` says (config-copier's sources: metadata only), with the watch
/// settings `config`.
#[allow(clippy::too_many_arguments)]
pub async fn watch_labelled<K, T: PartialEq, S: Slot<T>>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<T, S>,
    view: impl Fn(&K) -> T,
    keys: LabelKeys,
    health: WatchHealth,
    mut changed: impl FnMut(Touched<'_>),
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default + Clone + Eq + std::hash::Hash,
{
    let started: Option<Instant> = None;
    let wants = keys.clone();
    // The keys a finished list read, marked listed only once the store
    // holds that list (after the writer applied its InitDone): marked
    // before, a rule could read views still without its new key for a
    // moment and select nothing (and prune).
    let finished: Arc<Mutex<Option<Scoped>>> = Arc::default();
    let finished_list = Arc::clone(&finished);
    let marks = keys.clone();
    // Lists stream when the server allows it ([`InitialList`]).
    let initial = Arc::new(InitialList::default());
    let watches = futures::stream::unfold((started, keys.relist.subscribe()), move |(last, mut relist)| {
        let (api, keys, finished) = (api.clone(), keys.clone(), Arc::clone(&finished_list));
        let initial = Arc::clone(&initial);
        let config = initial.config(&config);
        async move {
            if let Some(last) = last {
                tokio::time::sleep(RELIST_GAP.saturating_sub(last.elapsed())).await;
                if relist.has_changed().unwrap_or(false) {
                    tracing::info!("listing again: a selector references a label key the views lack");
                }
            }
            relist.borrow_and_update();
            let listing = keys.wanted();
            // The watch ends when a new key wants a new list — once this
            // one is complete: cut short, a list of 20,000 pods would start
            // over each time a rule with a new key arrives (a GitOps sync
            // creating hundreds), and no rule would be served until they
            // stopped — or when the server refused to stream it (the next
            // one is paginated).
            let refused = Arc::new(tokio::sync::Notify::new());
            let (complete, mut completed) = watch::channel(false);
            let until = {
                let (mut relist, refused) = (relist.clone(), Arc::clone(&refused));
                async move {
                    let new_key = async {
                        let _ = relist.changed().await;
                        let _ = completed.wait_for(|done| *done).await;
                    };
                    tokio::select! {
                        () = new_key => {}
                        () = refused.notified() => {}
                    }
                }
            };
            let watch = watcher(api, config)
                .inspect(move |e| match e {
                    Ok(watcher::Event::InitDone) => {
                        *finished.lock().unwrap_or_else(PoisonError::into_inner) = Some(listing.clone());
                        complete.send_replace(true);
                    }
                    Err(e) if initial.refused(e) => refused.notify_one(),
                    _ => {}
                })
                .take_until(until);
            Some((watch, (Some(Instant::now()), relist)))
        }
    })
    .flatten();
    // Objects of namespaces no rule reads are not held: listed ones are
    // skipped, a changed one is dropped (it was held while one did).
    let watches = watches.filter_map(move |e| {
        let e = match e {
            Ok(watcher::Event::InitApply(o)) if !wants.wants(o.meta().namespace.as_deref().unwrap_or_default()) => None,
            Ok(watcher::Event::Apply(o)) if !wants.wants(o.meta().namespace.as_deref().unwrap_or_default()) => {
                Some(Ok(watcher::Event::Delete(o)))
            }
            other => Some(other),
        };
        std::future::ready(e)
    });
    let watch = health.track(watches);
    let project = |o: K| (ns_key::of(&o.namespace().unwrap_or_default(), &o.name_any()), view(&o));
    let applied = move |changes: &[crate::projection::Change<T>]| {
        let listing = finished.lock().unwrap_or_else(PoisonError::into_inner).take();
        let listed = listing.is_some();
        if let Some(listing) = listing {
            marks.listed(listing);
        }
        changed(Touched { namespaces: &touched_namespaces(changes), listed });
    };
    writer.run(watch, project, move || health.synced(), applied).await;
}

/// The namespaces (sorted, without repeats) of changes keyed `<namespace>/<name>`.
fn touched_namespaces<T>(changes: &[crate::projection::Change<T>]) -> Vec<&str> {
    let mut out: Vec<&str> = changes.iter().map(|c| ns_key::namespace(&c.key)).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Waits until `store` holds its first complete list; false when its
/// writer is gone first. kube-runtime 5's readiness is a oneshot with one
/// waker slot that the controller's own wait can take over: waiting again
/// after a short timeout registers anew (see `controller.rs`).
pub async fn rules_listed<K>(store: &kube::runtime::reflector::Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        match tokio::time::timeout(Duration::from_millis(200), store.wait_until_ready()).await {
            Ok(Ok(())) => return true,
            Ok(Err(_)) => return false,
            Err(_) => continue,
        }
    }
}

/// The rules (namespaced objects of an operator) that a change of the pods
/// (as `watch_pods` hands it) concerns: every rule when it completed a
/// list (those waiting for it go on; lists are rare), else those in one of
/// the namespaces touched, and those `everywhere` says look at every
/// namespace.
pub fn concerned<'a, K>(
    rules: &'a [std::sync::Arc<K>],
    touched: Touched<'a>,
    everywhere: impl Fn(&K) -> bool + 'a,
) -> impl Iterator<Item = kube::runtime::reflector::ObjectRef<K>> + 'a
where
    K: kube::Resource<DynamicType = ()> + 'a,
{
    rules
        .iter()
        .filter(move |rule| {
            touched.listed
                || everywhere(rule)
                || touched.namespaces.binary_search(&rule.meta().namespace.as_deref().unwrap_or_default()).is_ok()
        })
        .map(|rule| kube::runtime::reflector::ObjectRef::from_obj(rule.as_ref()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::sync::Arc;

    #[test]
    fn only_namespaces_a_rule_reads_are_wanted() {
        let keys = LabelKeys::only_wanted_namespaces();
        assert!(!keys.wants("team-a"), "no rule: nothing held");
        assert!(keys.set([(Some("team-a".to_string()), NAMESPACE_MARK.to_string())]), "a new namespace lists again");
        assert!(keys.wants("team-a") && !keys.wants("team-b"));
        assert!(!keys.covers(Some("team-a"), [NAMESPACE_MARK].into_iter()), "not listed with it yet");
        keys.set([(None, "app".to_string())]);
        assert!(keys.wants("team-b"), "a rule over every namespace wants them all");
        assert!(LabelKeys::new().wants("anything"), "the default holds every namespace");
    }

    fn rule(ns: &str, name: &str) -> Arc<ConfigMap> {
        let mut cm = ConfigMap::default();
        cm.metadata.namespace = Some(ns.into());
        cm.metadata.name = Some(name.into());
        Arc::new(cm)
    }

    fn labels(n: usize) -> BTreeMap<String, String> {
        (0..n).map(|i| (format!("label-{i:05}"), "v".to_string())).collect()
    }

    fn k(scope: Option<&str>, key: &str) -> (Option<String>, String) {
        (scope.map(str::to_string), key.to_string())
    }

    #[test]
    fn a_view_keeps_only_the_referenced_keys_of_its_namespace() {
        let keys = LabelKeys::new();
        let many = labels(12_000);
        assert_eq!(keys.keep("a", Some(&many)), PodLabels::default(), "nothing referenced, nothing kept");
        assert!(keys.set([k(Some("a"), "label-00007"), k(Some("a"), "tier"), k(None, "label-00009")]), "a re-list");
        let kept = keys.keep("a", Some(&many));
        let both = |ks: &[&str]| PodLabels::from_pairs(ks.iter().map(|k| (*k, "v")));
        assert_eq!(kept, both(&["label-00007", "label-00009"]));
        assert_eq!(kept.get("label-00009"), Some("v"));
        assert_eq!(kept.get("label-00008"), None);
        assert!(!kept.is_cut());
        // Another namespace's selectors keep nothing of this one's pods.
        assert_eq!(keys.keep("b", Some(&many)), both(&["label-00009"]));
        // Until a list has run with them, the views may lack them.
        assert!(!keys.covers(Some("a"), ["tier"].into_iter()));
        keys.listed(keys.wanted());
        assert!(keys.covers(Some("a"), ["tier", "label-00007"].into_iter()));
        assert!(!keys.covers(Some("b"), ["tier"].into_iter()));
        assert!(keys.covers(None, ["label-00009"].into_iter()));
        assert!(!keys.set([k(Some("a"), "tier")]), "a key dropped needs no re-list");
        assert!(keys.keep("a", Some(&many)).labels().is_empty());
        // More referenced bytes than a view keeps: cut, none kept.
        keys.set(many.keys().map(|key| k(Some("a"), key)));
        let cut = keys.keep("a", Some(&many));
        assert!(cut.is_cut() && cut.labels().is_empty());
        assert!(!keys.keep("b", Some(&many)).is_cut());
        assert_eq!(keys.keep("a", None), PodLabels::default());
    }

    #[test]
    fn touched_namespaces_lists_each_namespace_once_including_removals() {
        use crate::projection::Change;
        let c = |key: &str, new: Option<u8>, old: Option<u8>| Change {
            key: key.to_string(),
            new: new.map(std::sync::Arc::new),
            old: old.map(std::sync::Arc::new),
        };
        let changes =
            [c("b/x", Some(1), None), c("a/y", Some(1), Some(2)), c("c/z", None, Some(1)), c("b/w", Some(1), None)];
        assert_eq!(touched_namespaces(&changes), ["a", "b", "c"]);
    }

    #[test]
    fn the_rules_of_the_touched_namespaces_and_those_of_every_namespace() {
        let rules = [rule("a", "r1"), rule("b", "r2"), rule("c", "everywhere"), rule("d", "r4")];
        let names = |namespaces: &[&str], listed: bool| -> Vec<String> {
            let touched = Touched { namespaces, listed };
            concerned(&rules, touched, |r: &ConfigMap| r.metadata.name.as_deref() == Some("everywhere"))
                .map(|r| r.name)
                .collect()
        };
        assert_eq!(names(&["a", "d"], false), ["r1", "everywhere", "r4"]);
        assert_eq!(names(&["b"], false), ["r2", "everywhere"]);
        assert_eq!(names(&[], false), ["everywhere"]);
        // A completed list wakes every rule: those waiting for it go on.
        assert_eq!(names(&[], true), ["r1", "r2", "everywhere", "r4"]);
    }
}
