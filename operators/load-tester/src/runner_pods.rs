//! Every LoadTest's runner pods, held by one watch (by label) as the small
//! views the state machine reads ([`Runner`]), so a reconcile reads them
//! from memory: no LIST of pods per reconcile or per run (issue 28: "no
//! LIST after start-up other than a re-list after a watch error"). A
//! changed runner wakes the LoadTest that owns it, as `owns` would.
//!
//! What a cache cannot know is what was created a moment ago and not yet
//! seen: the namespace's room ([`Rooms`]) keeps those pods' names reserved
//! until the watch shows them (or [`RESERVED_FOR`] has passed, for a
//! creation that failed), and counts a name once whether it is seen,
//! reserved, or both.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flotilla_shared::health::WatchHealth;
use flotilla_shared::projection::{self, Fed};
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::crd::LoadTest;
use crate::runner::{self, LOADTEST_LABEL, Runner};

/// How long a name made by a run stays reserved after its creation call
/// ended without the watch having shown the pod (a watch delivers within
/// milliseconds; a failed creation's name is forgotten after this).
pub const RESERVED_FOR: Duration = Duration::from_secs(30);

/// A runner pod as held.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub namespace: Box<str>,
    /// The owning LoadTest (controller ownerReference), if any.
    pub owner: Option<(Box<str>, Box<str>)>,
    /// Done pods (Succeeded, Failed) hold no node: no room counted.
    pub done: bool,
    pub runner: Runner,
}

impl Held {
    fn of(pod: Pod) -> (String, Self) {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let owner = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.kind == "LoadTest")
            .map(|r| (Box::from(r.name.as_str()), Box::from(r.uid.as_str())));
        let runner = runner::view(&pod);
        let done = matches!(runner.phase.as_str(), "Succeeded" | "Failed");
        let key = format!("{namespace}/{}", runner.name);
        (key, Self { namespace: namespace.into(), owner, done, runner })
    }

    fn owned_by(&self, uid: &str) -> bool {
        self.owner.as_ref().is_some_and(|(_, u)| &**u == uid)
    }
}

/// The read side: what a reconcile looks at.
#[derive(Clone)]
pub struct RunnerPods {
    store: projection::Store<Held>,
}

impl RunnerPods {
    /// Watches `pods` (every LoadTest's runners, by label) into the store,
    /// waking each changed runner's LoadTest through `wake`. Runs until
    /// the watch ends.
    pub fn start(
        pods: Api<Pod>,
        health: WatchHealth,
        wake: UnboundedSender<ObjectRef<LoadTest>>,
    ) -> (Self, impl std::future::Future<Output = ()>) {
        let (store, writer) = projection::store::<Held>();
        let watch = health.watcher(pods, watcher::Config::default().labels(LOADTEST_LABEL));
        let feeding = async move {
            writer
                .feed(watch, Held::of, |fed| {
                    if let Fed::Listed(_) = fed {
                        health.synced();
                    }
                    for change in fed.changes() {
                        for held in [&change.old, &change.new].into_iter().flatten() {
                            if let Some((name, _)) = &held.owner {
                                let _ = wake.unbounded_send(ObjectRef::new(name).within(&held.namespace));
                            }
                        }
                    }
                })
                .await;
        };
        (Self { store }, feeding)
    }

    /// Waits for the first complete list (a reconcile before it would see
    /// no runners and count no room).
    pub async fn ready(&self) -> Result<(), projection::WriterDropped> {
        self.store.wait_until_ready().await
    }

    /// The runner pods in `ns` that the LoadTest `uid` owns (a same-named
    /// older test's are not its).
    pub fn of_test(&self, ns: &str, uid: &str) -> Vec<Runner> {
        self.store.select(|_, h| (&*h.namespace == ns && h.owned_by(uid)).then(|| h.runner.clone()))
    }

    /// Names of the runner pods in `ns` (every LoadTest's, by label) that
    /// may run and are not of run `run` of the test `uid`: what a new
    /// run's runners come on top of.
    fn others(&self, ns: &str, uid: &str, run: i64) -> HashSet<String> {
        self.store
            .select(|_, h| {
                let this_run = h.owned_by(uid) && h.runner.run == run;
                (&*h.namespace == ns && !h.done && !this_run).then(|| h.runner.name.clone())
            })
            .into_iter()
            .collect()
    }

    fn seen(&self, ns: &str, name: &str) -> bool {
        self.store.get(&format!("{ns}/{name}")).is_some()
    }
}

/// A name reserved in its namespace's room.
#[derive(Debug)]
struct Reserved {
    uid: String,
    run: i64,
    /// Unset while its run is still making it.
    until: Option<Instant>,
}

/// A namespace's room for runner pods.
#[derive(Default)]
pub struct Room {
    /// Runs are counted one at a time.
    pub counting: Arc<tokio::sync::Mutex<()>>,
    reserved: Mutex<HashMap<String, Reserved>>,
}

impl Room {
    /// Runner pods in the room's namespace `ns` besides run `run` of
    /// `uid`: those the cache shows may run, and those other runs made or
    /// are making that it does not show yet (each name once).
    pub fn others(&self, pods: &RunnerPods, ns: &str, uid: &str, run: i64, now: Instant) -> usize {
        let mut names = pods.others(ns, uid, run);
        let mut reserved = self.reserved.lock().unwrap_or_else(PoisonError::into_inner);
        reserved.retain(|name, r| r.until.is_none_or(|t| now < t) && !(r.until.is_some() && pods.seen(ns, name)));
        names.extend(reserved.iter().filter(|(_, r)| !(r.uid == uid && r.run == run)).map(|(n, _)| n.clone()));
        names.len()
    }

    /// Reserves `names` for run `run` of `uid` until the returned guard is
    /// dropped, then for [`RESERVED_FOR`] or until the cache shows them.
    pub fn reserve(self: &Arc<Self>, uid: &str, run: i64, names: Vec<String>) -> Reservation {
        let mut reserved = self.reserved.lock().unwrap_or_else(PoisonError::into_inner);
        for name in &names {
            reserved.insert(name.clone(), Reserved { uid: uid.to_string(), run, until: None });
        }
        Reservation { room: Arc::clone(self), names }
    }

    /// Whether nothing is reserved (the room may be forgotten when nobody
    /// holds it either).
    pub fn is_idle(&self) -> bool {
        self.reserved.lock().unwrap_or_else(PoisonError::into_inner).is_empty()
    }
}

/// Names of a run being made, reserved in their namespace's [`Room`].
pub struct Reservation {
    room: Arc<Room>,
    names: Vec<String>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let until = Instant::now() + RESERVED_FOR;
        let mut reserved = self.room.reserved.lock().unwrap_or_else(PoisonError::into_inner);
        for name in &self.names {
            if let Some(r) = reserved.get_mut(name) {
                r.until = Some(until);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, uid: &str, run: i64, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "namespace": ns, "name": name,
                "labels": {LOADTEST_LABEL: "t", runner::RUN_LABEL: run.to_string()},
                "ownerReferences": [{"apiVersion": "flotilla.dev/v1alpha1", "kind": "LoadTest", "name": "t", "uid": uid}],
            },
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    fn pods_of(list: Vec<Pod>) -> RunnerPods {
        let (store, mut writer) = projection::store::<Held>();
        writer.apply(watcher::Event::Init, Held::of);
        for p in list {
            writer.apply(watcher::Event::InitApply(p), Held::of);
        }
        writer.apply(watcher::Event::<Pod>::InitDone, Held::of);
        RunnerPods { store }
    }

    #[test]
    fn a_tests_runners_are_those_it_owns_in_its_namespace() {
        let pods = pods_of(vec![
            pod("a", "t-1-0", "u1", 1, "Running"),
            pod("a", "t-0-0", "old", 1, "Running"),
            pod("b", "t-1-0", "u1", 1, "Running"),
        ]);
        let mine = pods.of_test("a", "u1");
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].name, "t-1-0");
    }

    #[test]
    fn others_leave_out_done_pods_and_this_run() {
        let pods = pods_of(vec![
            pod("a", "mine-0", "u1", 2, "Running"),
            pod("a", "mine-old-0", "u1", 1, "Running"),
            pod("a", "theirs-0", "u2", 1, "Pending"),
            pod("a", "theirs-1", "u2", 1, "Succeeded"),
            pod("b", "far-0", "u3", 1, "Running"),
        ]);
        let room = Arc::new(Room::default());
        assert_eq!(
            room.others(&pods, "a", "u1", 2, Instant::now()),
            2,
            "the older run's and the other test's live pod"
        );
    }

    #[test]
    fn a_name_made_but_not_yet_seen_counts_once_until_seen_or_expired() {
        let room = Arc::new(Room::default());
        let empty = pods_of(vec![]);
        let now = Instant::now();
        let guard = room.reserve("u2", 1, vec!["theirs-0".into(), "theirs-1".into()]);
        assert_eq!(room.others(&empty, "a", "u1", 1, now), 2, "being made");
        assert_eq!(room.others(&empty, "a", "u2", 1, now), 0, "a run does not wait for itself");
        drop(guard);
        assert_eq!(room.others(&empty, "a", "u1", 1, now), 2, "made, not yet seen");
        let seen = pods_of(vec![pod("a", "theirs-0", "u2", 1, "Running")]);
        assert_eq!(room.others(&seen, "a", "u1", 1, now), 2, "seen and reserved: once each");
        assert_eq!(
            room.others(&seen, "a", "u1", 1, now + RESERVED_FOR + Duration::from_secs(1)),
            1,
            "a failed creation is forgotten"
        );
        assert!(room.is_idle());
    }
}
