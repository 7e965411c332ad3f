//! The Namespace cache: each namespace's hostname grant
//! (`flotilla.dev/allowed-hostnames`, see [`crate::grant`]).
//!
//! A metadata-only watch (`PartialObjectMetadata`: no spec, no status), and
//! only the namespaces that carry the annotation are held, each as its
//! parsed grant: a cluster of 10,000 namespaces, few of them granted names,
//! costs a few entries, not 10,000. With `--watch-namespace` only that
//! Namespace is watched (a field selector, which RBAC can narrow to it).
//! A relist replaces the contents at once (a grant removed while the watch
//! was down is gone), and the first complete list is readiness: a sync never
//! plans from an unsynced cache, which would withdraw every granted name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;

use crate::grant::{ANNOTATION_ALLOWED_HOSTNAMES, Grant};

type Map = HashMap<String, Arc<Grant>>;

#[derive(Default)]
struct State {
    grants: Map,
    /// A relist in progress: swapped in at `InitDone`.
    relist: Option<Map>,
}

/// The read side: the grants of the namespaces that have one.
#[derive(Clone)]
pub struct Grants {
    state: Arc<Mutex<State>>,
    ready: watch::Receiver<bool>,
}

/// The write side, fed with the watch's events.
pub struct Writer {
    state: Arc<Mutex<State>>,
    ready: watch::Sender<bool>,
}

/// An empty cache and its writer.
pub fn cache() -> (Grants, Writer) {
    let state = Arc::new(Mutex::new(State::default()));
    let (tx, rx) = watch::channel(false);
    (Grants { state: state.clone(), ready: rx }, Writer { state, ready: tx })
}

/// A cache that is complete and grants nothing (`--hostname-annotations`
/// `any` or `off`: Namespaces are not read).
pub fn none() -> Grants {
    let (grants, writer) = cache();
    writer.ready.send_replace(true);
    grants
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // A poisoned lock only means a panic mid-insert elsewhere; the map is a map.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A namespace's name and its grant, if it has the annotation. Entries that
/// are not names are logged here (and named in the Warning of a Service
/// they would have concerned, see `desired`).
fn grant_of(ns: &PartialObjectMeta<Namespace>) -> (String, Option<Grant>) {
    let grant = ns.annotations().get(ANNOTATION_ALLOWED_HOSTNAMES).map(|v| Grant::parse(v));
    let name = ns.name_any();
    if let Some(bad) = grant.as_ref().map(Grant::bad_entries).filter(|b| !b.is_empty()) {
        tracing::warn!(namespace = %name, entries = ?bad, "{ANNOTATION_ALLOWED_HOSTNAMES}: entries that are not names are ignored");
    }
    (name, grant)
}

impl Writer {
    /// Applies one watch event; whether any namespace's grant changed.
    pub fn apply(&mut self, event: watcher::Event<PartialObjectMeta<Namespace>>) -> bool {
        let mut state = lock(&self.state);
        let changed = match event {
            watcher::Event::Init => {
                state.relist = Some(Map::new());
                false
            }
            watcher::Event::InitApply(ns) => {
                if let (name, Some(grant)) = grant_of(&ns) {
                    state.relist.get_or_insert_with(Map::new).insert(name, Arc::new(grant));
                }
                false
            }
            watcher::Event::InitDone => {
                let fresh = state.relist.take().unwrap_or_default();
                let changed = fresh != state.grants;
                state.grants = fresh;
                drop(state);
                self.ready.send_replace(true);
                return changed;
            }
            watcher::Event::Apply(ns) => match grant_of(&ns) {
                (name, Some(grant)) => {
                    let grant = Arc::new(grant);
                    state.grants.insert(name, grant.clone()).is_none_or(|old| old != grant)
                }
                (name, None) => state.grants.remove(&name).is_some(),
            },
            watcher::Event::Delete(ns) => state.grants.remove(&ns.name_any()).is_some(),
        };
        if changed {
            let held = state.grants.len();
            tracing::debug!(namespaces_with_grants = held, "a namespace's hostname grant changed");
        }
        changed
    }
}

impl Grants {
    /// The grants as of now (the namespaces that have one).
    pub fn snapshot(&self) -> Map {
        lock(&self.state).grants.clone()
    }

    /// Waits for the first complete list; `Err` when the writer is gone first.
    pub async fn wait_until_ready(&self) -> Result<(), watch::error::RecvError> {
        let mut ready = self.ready.clone();
        ready.wait_for(|r| *r).await.map(|_| ())
    }
}

/// The metadata watch of the Namespaces whose grants matter: all, or the
/// one `--watch-namespace` names. (An `Api` of `PartialObjectMeta` asks for
/// `PartialObjectMetadata`: no spec, no status on the wire.)
pub fn api_and_config(
    client: Client,
    watch_namespace: Option<&str>,
) -> (Api<PartialObjectMeta<Namespace>>, watcher::Config) {
    let api = Api::all(client);
    let wc = watcher::Config::default();
    match watch_namespace {
        Some(ns) => (api, wc.fields(&format!("metadata.name={ns}"))),
        None => (api, wc),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn ns(name: &str, grant: Option<&str>) -> PartialObjectMeta<Namespace> {
        let mut meta = ObjectMeta { name: Some(name.into()), ..Default::default() };
        let mut annotations = std::collections::BTreeMap::from([("other".to_string(), "x".repeat(1000))]);
        if let Some(g) = grant {
            annotations.insert(ANNOTATION_ALLOWED_HOSTNAMES.into(), g.into());
        }
        meta.annotations = Some(annotations);
        PartialObjectMeta { types: None, metadata: meta, _phantom: Default::default() }
    }

    #[test]
    fn only_namespaces_with_a_grant_are_held_and_changes_are_reported() {
        let (grants, mut w) = cache();
        assert!(!*grants.ready.borrow());
        assert!(!w.apply(watcher::Event::Init));
        for i in 0..1000 {
            w.apply(watcher::Event::InitApply(ns(&format!("plain-{i}"), None)));
        }
        w.apply(watcher::Event::InitApply(ns("team-a", Some("*.a.example.com"))));
        assert!(w.apply(watcher::Event::InitDone), "the first list brings a grant");
        assert!(*grants.ready.borrow());
        let now = grants.snapshot();
        assert_eq!(now.len(), 1, "1,000 namespaces without a grant hold nothing");
        assert!(now["team-a"].allows("x.a.example.com"));

        assert!(!w.apply(watcher::Event::Apply(ns("team-a", Some("*.a.example.com")))), "unchanged");
        assert!(!w.apply(watcher::Event::Apply(ns("plain-1", None))), "unchanged: still none");
        assert!(w.apply(watcher::Event::Apply(ns("team-b", Some("b.example.com")))), "a grant added");
        assert!(w.apply(watcher::Event::Apply(ns("team-a", Some("x.example.com")))), "a grant changed");
        assert!(w.apply(watcher::Event::Apply(ns("team-a", None))), "a grant removed");
        assert!(w.apply(watcher::Event::Delete(ns("team-b", Some("b.example.com")))), "a namespace deleted");
        assert!(grants.snapshot().is_empty());

        // A relist replaces the contents (a grant removed while the watch was down).
        w.apply(watcher::Event::Apply(ns("team-c", Some("c.example.com"))));
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(ns("team-c", None)));
        assert!(w.apply(watcher::Event::InitDone));
        assert!(grants.snapshot().is_empty());
        assert!(!w.apply(watcher::Event::Init) && !w.apply(watcher::Event::InitDone), "same again: no change");
    }

    #[test]
    fn without_a_watch_the_cache_is_complete_and_empty() {
        let g = none();
        assert!(*g.ready.borrow());
        assert!(g.snapshot().is_empty());
    }
}
