//! The namespaces' `flotilla.dev/silence-until` annotations: a maintenance
//! window an admin sets on a whole namespace ([`crate::silence`] applies
//! it). Namespaces are watched metadata-only and only those carrying a
//! time are held: a cluster of 10,000 namespaces with no silence holds
//! nothing. Until the first list is complete no PodAlert evaluates (a
//! restart must not notify what a namespace silences), unless the list is
//! refused (RBAC without `namespaces`): then they go on without namespace
//! silences. An operator limited to one namespace (`--watch-namespace`)
//! does not watch them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use flotilla_shared::health::WatchHealth;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};

use crate::silence::{ANNOTATION, NamespaceSilences, parse_annotation};

/// The namespaces' silences as last listed and watched.
pub struct NamespaceSilenceStore {
    current: RwLock<Arc<NamespaceSilences>>,
    listed: AtomicBool,
}

impl NamespaceSilenceStore {
    /// A store the watch fills; not listed until its first list is.
    pub fn watched() -> Self {
        Self { current: RwLock::default(), listed: AtomicBool::new(false) }
    }

    /// No namespace watch (the operator sees one namespace): no silence,
    /// nothing to wait for.
    pub fn disabled() -> Self {
        Self { current: RwLock::default(), listed: AtomicBool::new(true) }
    }

    /// The silences now (shared, not copied).
    pub fn snapshot(&self) -> Arc<NamespaceSilences> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether a complete list has been seen.
    pub fn is_listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// Watches namespaces until the stream ends, calling `changed` with the
    /// namespaces whose silence came, went or moved (sorted), and `true`
    /// when a list completed (every PodAlert may go on).
    pub async fn watch(&self, client: Client, health: WatchHealth, mut changed: impl FnMut(&[&str], bool)) {
        let api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
        let cfg = watcher::Config::default().any_semantic();
        let mut events = std::pin::pin!(health.watcher(api, cfg));
        let mut pending = None;
        while let Some(event) = events.next().await {
            // The watcher retries with the suite's back-off; readiness
            // reports the failure, the log says why (RBAC: `forbidden`).
            let event = match event {
                Ok(e) => e,
                Err(e) if forbidden(&e) && !self.is_listed() => {
                    // RBAC without `namespaces` (an admin's own ClusterRole
                    // from before this watch): PodAlerts go on without
                    // namespace silences rather than alert on nothing; the
                    // watch keeps trying and readiness reports it.
                    tracing::warn!(error = %e, "namespace watch refused: namespace silences are not applied until the operator may list and watch namespaces");
                    self.listed.store(true, Ordering::Release);
                    changed(&[], true);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "namespace watch failed; retrying");
                    continue;
                }
            };
            let mut current = self.snapshot();
            let out = fold(&mut current, &mut pending, event, project);
            if out.listed {
                health.synced();
            }
            if out.namespaces.is_empty() && !out.listed {
                continue;
            }
            *self.current.write().unwrap_or_else(PoisonError::into_inner) = current;
            if out.listed {
                self.listed.store(true, Ordering::Release);
            }
            let names: Vec<&str> = out.namespaces.iter().map(String::as_str).collect();
            changed(&names, out.listed);
        }
    }
}

/// Whether the API server refused the watch (403).
fn forbidden(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 403,
        _ => false,
    }
}

/// A namespace's name and its silence's end, when its annotation is a time.
fn project(ns: &PartialObjectMeta<Namespace>) -> (String, Option<Timestamp>) {
    let name = ns.name_any();
    let value = ns.annotations().get(ANNOTATION);
    let until = value.and_then(|v| parse_annotation(v));
    if let (Some(v), None) = (value, until) {
        tracing::warn!(namespace = %name, value = %v, "{ANNOTATION} is not an RFC 3339 time: ignored");
    }
    (name, until)
}

/// What one watch event changed.
#[derive(Debug, Default, PartialEq, Eq)]
struct Changed {
    /// Namespaces whose silence changed, sorted.
    namespaces: Vec<String>,
    /// A list completed.
    listed: bool,
}

/// Folds one watch event into `current`, as kube's reflector does: a list
/// (`Init`, `InitApply`…, `InitDone`) is gathered in `pending` and then
/// replaces `current` at once, so a silence removed while the watch was
/// down ends.
fn fold<K>(
    current: &mut Arc<NamespaceSilences>,
    pending: &mut Option<NamespaceSilences>,
    event: Event<K>,
    project: impl Fn(&K) -> (String, Option<Timestamp>),
) -> Changed {
    let mut set = |name: String, until: Option<Timestamp>| {
        if current.get(name.as_str()).copied() == until {
            return None;
        }
        let map = Arc::make_mut(current);
        match until {
            Some(t) => map.insert(name.clone().into_boxed_str(), t),
            None => map.remove(name.as_str()),
        };
        Some(name)
    };
    match event {
        Event::Init => {
            *pending = Some(NamespaceSilences::new());
            Changed::default()
        }
        Event::InitApply(o) => {
            if let (Some(p), (name, Some(until))) = (pending.as_mut(), project(&o)) {
                p.insert(name.into_boxed_str(), until);
            }
            Changed::default()
        }
        Event::InitDone => {
            let new = pending.take().unwrap_or_default();
            let mut namespaces: Vec<String> = current
                .iter()
                .filter(|(k, v)| new.get(*k) != Some(*v))
                .map(|(k, _)| k.to_string())
                .chain(new.iter().filter(|(k, v)| current.get(*k) != Some(*v)).map(|(k, _)| k.to_string()))
                .collect();
            namespaces.sort();
            namespaces.dedup();
            *current = Arc::new(new);
            Changed { namespaces, listed: true }
        }
        Event::Apply(o) => {
            let (name, until) = project(&o);
            Changed { namespaces: set(name, until).into_iter().collect(), listed: false }
        }
        Event::Delete(o) => {
            let (name, _) = project(&o);
            Changed { namespaces: set(name, None).into_iter().collect(), listed: false }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    type Ns = (&'static str, Option<&'static str>);

    fn project(o: &Ns) -> (String, Option<Timestamp>) {
        (o.0.to_string(), o.1.map(|t| t.parse().unwrap()))
    }

    fn run(current: &mut Arc<NamespaceSilences>, pending: &mut Option<NamespaceSilences>, e: Event<Ns>) -> Changed {
        fold(current, pending, e, project)
    }

    const T1: &str = "2026-11-28T10:00:00Z";
    const T2: &str = "2026-11-28T11:00:00Z";

    #[test]
    fn only_silenced_namespaces_are_held_and_a_relist_replaces_them() {
        let (mut current, mut pending) = (Arc::default(), None);
        assert_eq!(run(&mut current, &mut pending, Event::Init), Changed::default());
        run(&mut current, &mut pending, Event::InitApply(("a", Some(T1))));
        run(&mut current, &mut pending, Event::InitApply(("b", None)));
        assert!(current.is_empty(), "nothing applied before the list completes");
        let done = run(&mut current, &mut pending, Event::InitDone);
        assert_eq!(done, Changed { namespaces: vec!["a".into()], listed: true });
        assert_eq!(current.len(), 1, "namespace b has no silence: not held");
        // A change, the same again (no wake), a removal.
        let moved = run(&mut current, &mut pending, Event::Apply(("a", Some(T2))));
        assert_eq!(moved.namespaces, ["a"]);
        assert!(run(&mut current, &mut pending, Event::Apply(("a", Some(T2)))).namespaces.is_empty());
        assert!(run(&mut current, &mut pending, Event::Apply(("b", None))).namespaces.is_empty());
        assert_eq!(run(&mut current, &mut pending, Event::Apply(("c", Some(T1)))).namespaces, ["c"]);
        assert_eq!(run(&mut current, &mut pending, Event::Delete(("c", Some(T1)))).namespaces, ["c"]);
        // A relist after the watch was down: a's silence was removed, d's added.
        run(&mut current, &mut pending, Event::Init);
        run(&mut current, &mut pending, Event::InitApply(("a", None)));
        run(&mut current, &mut pending, Event::InitApply(("d", Some(T1))));
        assert_eq!(current.len(), 1, "the old contents stand until the list completes");
        let relisted = run(&mut current, &mut pending, Event::InitDone);
        assert_eq!(relisted, Changed { namespaces: vec!["a".into(), "d".into()], listed: true });
        assert_eq!(current.keys().map(|k| &**k).collect::<Vec<_>>(), ["d"]);
    }
}
