//! The `flotilla.dev/silence-until` annotations of objects pod-alert reads
//! for nothing else: namespaces (a maintenance window an admin sets on a
//! whole namespace) and workloads (Deployments, StatefulSets, DaemonSets,
//! Jobs, CronJobs: their team's). [`crate::silence`] applies them.
//!
//! Each kind is watched metadata-only and only the objects carrying a time
//! are held: a cluster of 10,000 namespaces and 50,000 Deployments with no
//! silence holds nothing. Until a kind's first list is complete no PodAlert
//! evaluates (a restart must not notify what a silence covers), unless the
//! list is refused (RBAC without the kind): then they go on without those
//! silences, and the log says so. An operator limited to one namespace
//! (`--watch-namespace`) does not watch namespaces (a Role cannot grant
//! them) and watches workloads in its namespace only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use flotilla_shared::health::WatchHealth;
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};

use crate::silence::{ANNOTATION, Silences, parse_annotation};

/// One kind's silences as last listed and watched, by key (a namespace's
/// name, or a workload's `<namespace>/<name>`).
pub struct SilenceStore {
    current: RwLock<Arc<Silences>>,
    listed: AtomicBool,
}

impl SilenceStore {
    /// A store the watch fills; not listed until its first list is.
    pub fn watched() -> Self {
        Self { current: RwLock::default(), listed: AtomicBool::new(false) }
    }

    /// Not watched: no silence, nothing to wait for.
    pub fn disabled() -> Self {
        Self { current: RwLock::default(), listed: AtomicBool::new(true) }
    }

    /// The silences now (shared, not copied).
    pub fn snapshot(&self) -> Arc<Silences> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether a complete list has been seen.
    pub fn is_listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// Watches `api` (the `plural` kind) until the stream ends, keying each
    /// object by `key`, and calls `changed` with the keys whose silence
    /// came, went or moved (sorted), and `true` when a list completed
    /// (every PodAlert may go on).
    pub async fn watch<K>(
        &self,
        api: Api<PartialObjectMeta<K>>,
        plural: &str,
        health: WatchHealth,
        key: impl Fn(&PartialObjectMeta<K>) -> String,
        mut changed: impl FnMut(&[&str], bool),
    ) where
        K: Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    {
        let cfg = watcher::Config::default().any_semantic();
        let mut events = std::pin::pin!(health.watcher(api, cfg));
        let mut pending = None;
        let project = |o: &PartialObjectMeta<K>| {
            let key = key(o);
            let value = o.annotations().get(ANNOTATION);
            let until = value.and_then(|v| parse_annotation(v));
            if let (Some(v), None) = (value, until) {
                tracing::warn!(object = %key, kind = plural, value = %v, "{ANNOTATION} is not an RFC 3339 time: ignored");
            }
            (key, until)
        };
        let singular = plural.strip_suffix('s').unwrap_or(plural);
        while let Some(event) = events.next().await {
            // The watcher retries with the suite's back-off; readiness
            // reports the failure, the log says why (RBAC: `forbidden`).
            let event = match event {
                Ok(e) => e,
                Err(e) if forbidden(&e) && !self.is_listed() => {
                    // RBAC without the kind (an admin's own ClusterRole
                    // from before this watch): PodAlerts go on without its
                    // silences rather than alert on nothing; the watch
                    // keeps trying and readiness reports it.
                    tracing::warn!(error = %e, "{singular} watch refused: {singular} silences are not applied until the operator may list and watch {plural}");
                    self.listed.store(true, Ordering::Release);
                    changed(&[], true);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "{singular} watch failed; retrying");
                    continue;
                }
            };
            let mut current = self.snapshot();
            let out = fold(&mut current, &mut pending, event, project);
            if out.listed {
                health.synced();
            }
            if out.keys.is_empty() && !out.listed {
                continue;
            }
            *self.current.write().unwrap_or_else(PoisonError::into_inner) = current;
            if out.listed {
                self.listed.store(true, Ordering::Release);
            }
            let keys: Vec<&str> = out.keys.iter().map(String::as_str).collect();
            changed(&keys, out.listed);
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

/// What one watch event changed.
#[derive(Debug, Default, PartialEq, Eq)]
struct Changed {
    /// Keys whose silence changed, sorted.
    keys: Vec<String>,
    /// A list completed.
    listed: bool,
}

/// Folds one watch event into `current`, as kube's reflector does: a list
/// (`Init`, `InitApply`…, `InitDone`) is gathered in `pending` and then
/// replaces `current` at once, so a silence removed while the watch was
/// down ends.
fn fold<K>(
    current: &mut Arc<Silences>,
    pending: &mut Option<Silences>,
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
            *pending = Some(Silences::new());
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
            let (name, until) = project(&o);
            Changed { keys: set(name, until).into_iter().collect(), listed: false }
        }
        Event::Delete(o) => {
            let (name, _) = project(&o);
            Changed { keys: set(name, None).into_iter().collect(), listed: false }
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

    fn run(current: &mut Arc<Silences>, pending: &mut Option<Silences>, e: Event<Ns>) -> Changed {
        fold(current, pending, e, project)
    }

    const T1: &str = "2026-11-28T10:00:00Z";
    const T2: &str = "2026-11-28T11:00:00Z";

    #[test]
    fn only_silenced_objects_are_held_and_a_relist_replaces_them() {
        let (mut current, mut pending) = (Arc::default(), None);
        assert_eq!(run(&mut current, &mut pending, Event::Init), Changed::default());
        run(&mut current, &mut pending, Event::InitApply(("a", Some(T1))));
        run(&mut current, &mut pending, Event::InitApply(("b", None)));
        assert!(current.is_empty(), "nothing applied before the list completes");
        let done = run(&mut current, &mut pending, Event::InitDone);
        assert_eq!(done, Changed { keys: vec!["a".into()], listed: true });
        assert_eq!(current.len(), 1, "namespace b has no silence: not held");
        // A change, the same again (no wake), a removal.
        let moved = run(&mut current, &mut pending, Event::Apply(("a", Some(T2))));
        assert_eq!(moved.keys, ["a"]);
        assert!(run(&mut current, &mut pending, Event::Apply(("a", Some(T2)))).keys.is_empty());
        assert!(run(&mut current, &mut pending, Event::Apply(("b", None))).keys.is_empty());
        assert_eq!(run(&mut current, &mut pending, Event::Apply(("c", Some(T1)))).keys, ["c"]);
        assert_eq!(run(&mut current, &mut pending, Event::Delete(("c", Some(T1)))).keys, ["c"]);
        // A relist after the watch was down: a's silence was removed, d's added.
        run(&mut current, &mut pending, Event::Init);
        run(&mut current, &mut pending, Event::InitApply(("a", None)));
        run(&mut current, &mut pending, Event::InitApply(("d", Some(T1))));
        assert_eq!(current.len(), 1, "the old contents stand until the list completes");
        let relisted = run(&mut current, &mut pending, Event::InitDone);
        assert_eq!(relisted, Changed { keys: vec!["a".into(), "d".into()], listed: true });
        assert_eq!(current.keys().map(|k| &**k).collect::<Vec<_>>(), ["d"]);
    }
}
