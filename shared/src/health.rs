//! Readiness: ready when every controller's cache has synced, while leading
//! or while standing by healthily (the lease is reachable) under leader
//! election — a standby's caches are warm, its reconciles wait for the lease
//! (`operator.rs`); work registered as the leader's
//! ([`Readiness::register_leader_work`]) counts only once leading. Never
//! ready while starting or shutting down, and never while a watch
//! that feeds a cache is failing (the cache is stale: the API server is
//! gone, or the operator may no longer watch).
//!
//! A failed watch is seen at once (its stream yields the error). That it
//! has resumed is not: after a reconnect the watcher says nothing until an
//! object changes. So a watch counts as resumed when it has an event again,
//! or when the API server answered a request made after its last error and
//! no new error came for [`RESUMED_AFTER`] — longer than the longest retry
//! delay (`backoff.rs`), so a watch still failing would have failed again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::runtime::watcher::Event;

/// See the module docs.
pub const RESUMED_AFTER: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Starting,
    Standby {
        healthy: bool,
    },
    Active,
    /// Leading, but the lease was not renewed in time (see `leader.rs`).
    Suspended,
    ShuttingDown,
}

/// Shared readiness state, cheap to clone.
#[derive(Debug, Clone)]
pub struct Readiness {
    inner: Arc<Mutex<State>>,
    /// `failing.len()`, read without the lock on every watch event.
    failing: Arc<AtomicUsize>,
}

#[derive(Debug)]
struct State {
    mode: Mode,
    controllers: BTreeMap<String, Gate>,
    failing: BTreeMap<String, Failing>,
    /// When the last request that the API server answered was sent.
    api_answered: Option<Instant>,
}

/// Something readiness waits for.
#[derive(Debug, Clone, Copy)]
struct Gate {
    synced: bool,
    /// Only the leader does it (a first sync): a standby does not wait.
    leader_only: bool,
}

/// A watch whose last attempt failed.
#[derive(Debug, Clone)]
struct Failing {
    since: Instant,
    last: Instant,
    /// The last error, as the API server or the client said it.
    error: String,
}

impl Default for Readiness {
    fn default() -> Self {
        let state =
            State { mode: Mode::Starting, controllers: BTreeMap::new(), failing: BTreeMap::new(), api_answered: None };
        Self { inner: Arc::new(Mutex::new(state)), failing: Arc::default() }
    }
}

impl Readiness {
    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut guard = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    }

    /// Waiting for the lease; `healthy` = the last attempt reached the API.
    pub fn set_standby(&self, healthy: bool) {
        self.with(|s| {
            if s.mode != Mode::ShuttingDown {
                s.mode = Mode::Standby { healthy };
            }
        });
    }

    /// Running controllers (leading, or no leader election).
    pub fn set_active(&self) {
        self.with(|s| {
            if s.mode != Mode::ShuttingDown {
                s.mode = Mode::Active;
            }
        });
    }

    /// A leader whose lease was not renewed in time: it acts no more
    /// until it is (`leader.rs`).
    pub fn set_suspended(&self) {
        self.with(|s| {
            if s.mode != Mode::ShuttingDown {
                s.mode = Mode::Suspended;
            }
        });
    }

    pub fn set_shutting_down(&self) {
        self.with(|s| s.mode = Mode::ShuttingDown);
    }

    /// A controller whose cache is not synced yet.
    pub fn register(&self, controller: &str) {
        self.with(|s| s.controllers.insert(controller.to_string(), Gate { synced: false, leader_only: false }));
    }

    /// Work only the leader does (a first sync); a standby is ready without it.
    pub fn register_leader_work(&self, name: &str) {
        self.with(|s| s.controllers.insert(name.to_string(), Gate { synced: false, leader_only: true }));
    }

    pub fn set_synced(&self, controller: &str) {
        self.with(|s| {
            if let Some(g) = s.controllers.get_mut(controller) {
                g.synced = true;
            } else {
                s.controllers.insert(controller.to_string(), Gate { synced: true, leader_only: false });
            }
        });
    }

    /// A cache fed by one watch: registered now (not synced), with a
    /// handle to mark it synced and to track its watch's failures.
    pub fn watch(&self, name: &str) -> WatchHealth {
        self.register(name);
        WatchHealth { readiness: self.clone(), name: Arc::from(name) }
    }

    /// The watch feeding `name`'s cache failed with `error` (it is retried).
    pub fn watch_failed(&self, name: &str, error: &str) {
        self.watch_failed_at(name, error, Instant::now());
    }

    fn watch_failed_at(&self, name: &str, error: &str, now: Instant) {
        self.with(|s| {
            s.failing
                .entry(name.to_string())
                .and_modify(|f| {
                    f.last = now;
                    readable(error).clone_into(&mut f.error);
                })
                .or_insert_with(|| Failing { since: now, last: now, error: readable(error).to_string() });
            self.failing.store(s.failing.len(), Ordering::Relaxed);
        });
    }

    /// The last error of the watch feeding `name`'s cache, while it fails.
    pub fn watch_error(&self, name: &str) -> Option<String> {
        if self.failing.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.with(|s| s.failing.get(name).map(|f| f.error.clone()))
    }

    /// The watch feeding `name`'s cache delivered an event: it is flowing.
    pub fn watch_event(&self, name: &str) {
        if self.failing.load(Ordering::Relaxed) == 0 {
            return;
        }
        if let Some(outage) = self.with(|s| self.resume(s, name, Instant::now())) {
            tracing::info!(watch = name, outage = ?outage, "watch resumed");
        }
    }

    fn resume(&self, s: &mut State, name: &str, now: Instant) -> Option<Duration> {
        let failing = s.failing.remove(name)?;
        self.failing.store(s.failing.len(), Ordering::Relaxed);
        Some(now.saturating_duration_since(failing.since))
    }

    /// Whether some watch is failing (then the API server is probed).
    pub fn any_watch_failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed) > 0
    }

    /// A request sent at `sent` was answered by the API server.
    pub fn api_answered(&self, sent: Instant) {
        self.with(|s| s.api_answered = Some(s.api_answered.map_or(sent, |a| a.max(sent))));
    }

    /// Forgets the failures of watches that have resumed (see the module
    /// docs); returns their names and how long each was failing.
    pub fn resumed_watches(&self) -> Vec<(String, Duration)> {
        self.resumed_watches_at(Instant::now())
    }

    fn resumed_watches_at(&self, now: Instant) -> Vec<(String, Duration)> {
        self.with(|s| {
            let Some(answered) = s.api_answered else { return Vec::new() };
            let resumed: Vec<String> = s
                .failing
                .iter()
                .filter(|(_, f)| answered >= f.last && now.saturating_duration_since(f.last) >= RESUMED_AFTER)
                .map(|(n, _)| n.clone())
                .collect();
            resumed.into_iter().filter_map(|n| self.resume(s, &n, now).map(|d| (n, d))).collect()
        })
    }

    /// `Ok` when ready, else why not.
    pub fn check(&self) -> Result<(), String> {
        self.check_at(Instant::now())
    }

    fn check_at(&self, now: Instant) -> Result<(), String> {
        self.with(|s| {
            let leading = match s.mode {
                Mode::Starting => return Err("starting".into()),
                Mode::ShuttingDown => return Err("shutting down".into()),
                Mode::Standby { healthy: false } => {
                    return Err("standing by, but the leader-election lease cannot be read".into());
                }
                Mode::Suspended => {
                    let suspended = "leading suspended: the leader-election lease could not be renewed in time";
                    return Err(match stale(s, now) {
                        Some(stale) => format!("{suspended}; {stale}"),
                        None => suspended.into(),
                    });
                }
                Mode::Standby { healthy: true } => false,
                Mode::Active => true,
            };
            let gates: Vec<(&String, &Gate)> =
                s.controllers.iter().filter(|(_, g)| leading || !g.leader_only).collect();
            if gates.is_empty() {
                return Err("no controller started yet".into());
            }
            let waiting: Vec<&str> = gates.iter().filter(|(_, g)| !g.synced).map(|(n, _)| n.as_str()).collect();
            if !waiting.is_empty() {
                return Err(format!("caches not synced: {}", waiting.join(", ")));
            }
            match stale(s, now) {
                Some(stale) => Err(stale),
                None => Ok(()),
            }
        })
    }
}

/// An error as a person reads it: kube's API errors end with the whole
/// `Status` object in Rust's debug notation, which repeats the message.
fn readable(error: &str) -> &str {
    error.split_once(" (Status {").map_or(error, |(head, _)| head)
}

/// Which caches are stale (their watch failing), if any.
fn stale(s: &State, now: Instant) -> Option<String> {
    if s.failing.is_empty() {
        return None;
    }
    let failing: Vec<String> = s
        .failing
        .iter()
        .map(|(n, f)| format!("{n} (failing for {}s)", now.saturating_duration_since(f.since).as_secs()))
        .collect();
    Some(format!("caches stale, watch failing: {}", failing.join(", ")))
}

/// One cache's readiness: see [`Readiness::watch`].
#[derive(Debug, Clone)]
pub struct WatchHealth {
    readiness: Readiness,
    name: Arc<str>,
}

impl WatchHealth {
    /// The cache's name, as readiness reports it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cache holds a complete list.
    pub fn synced(&self) {
        self.readiness.set_synced(&self.name);
    }

    /// A watch of `api` feeding this cache: kube's watcher with the suite's
    /// retry delays (`backoff.rs`), its errors and events recorded, its
    /// lists streamed where the server can ([`crate::streaming_list`]: one
    /// object held at a time, not a whole answer).
    pub fn watcher<K>(
        &self,
        api: kube::Api<K>,
        cfg: kube::runtime::watcher::Config,
    ) -> impl Stream<Item = Result<kube::runtime::watcher::Event<K>, kube::runtime::watcher::Error>> + use<K>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        use kube::runtime::WatchStreamExt;
        self.track(crate::streaming_list::watch(api, cfg).backoff(crate::backoff::watch_backoff()))
    }

    /// `watch`, passed through, its errors and events recorded. `Init` is
    /// not an event of the kind: kube's watcher yields it before each list
    /// attempt, so a list refused again and again (RBAC) would look resumed.
    pub fn track<S, K, E>(&self, watch: S) -> impl Stream<Item = Result<Event<K>, E>> + use<S, K, E>
    where
        S: Stream<Item = Result<Event<K>, E>>,
        E: std::fmt::Display,
    {
        let this = self.clone();
        watch.inspect(move |item| match item {
            Ok(Event::Init) => {}
            Ok(_) => this.readiness.watch_event(&this.name),
            Err(e) => this.readiness.watch_failed(&this.name, &e.to_string()),
        })
    }

    /// The watch's last error while it fails (for a status condition that
    /// says why its cache is not ready).
    pub fn error(&self) -> Option<String> {
        self.readiness.watch_error(&self.name)
    }
}

/// While a watch is failing, asks the API server for its version every
/// second (the answer is what tells a resumed watch from a silent one, see
/// the module docs), until `stop`.
pub(crate) async fn probe_while_failing(
    readiness: Readiness,
    client: kube::Client,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = stop.cancelled() => return,
        }
        if !readiness.any_watch_failing() {
            continue;
        }
        let sent = Instant::now();
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(2), client.apiserver_version()).await {
            readiness.api_answered(sent);
        }
        for (watch, outage) in readiness.resumed_watches() {
            tracing::info!(watch, outage = ?outage, "watch resumed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle() {
        let r = Readiness::default();
        assert!(r.check().is_err());
        r.set_standby(false);
        assert!(r.check().is_err());
        r.set_standby(true);
        assert_eq!(r.check(), Err("no controller started yet".into()));
        // A standby's caches are warm: it waits for them, not for the
        // leader's work (nor is that work alone a started cache).
        r.register_leader_work("first-sync");
        assert_eq!(r.check(), Err("no controller started yet".into()));
        r.register("a");
        assert_eq!(r.check(), Err("caches not synced: a".into()));
        r.set_synced("a");
        assert_eq!(r.check(), Ok(()));
        r.set_active();
        assert_eq!(r.check(), Err("caches not synced: first-sync".into()));
        r.set_synced("first-sync");
        r.register("b");
        assert_eq!(r.check(), Err("caches not synced: b".into()));
        r.set_synced("b");
        assert!(r.check().is_ok());
        r.set_shutting_down();
        r.set_active();
        assert_eq!(r.check(), Err("shutting down".into()));
    }

    fn ready_with(watches: &[&str]) -> Readiness {
        let r = Readiness::default();
        r.set_active();
        for w in watches {
            r.watch(w).synced();
        }
        assert_eq!(r.check(), Ok(()));
        r
    }

    #[test]
    fn a_failing_watch_makes_its_cache_stale_until_an_event() {
        let r = ready_with(&["pods", "namespaces"]);
        let t0 = Instant::now();
        r.watch_failed_at("pods", "forbidden", t0);
        r.watch_failed_at("pods", "forbidden", t0 + Duration::from_secs(3));
        assert!(r.any_watch_failing());
        assert_eq!(
            r.check_at(t0 + Duration::from_secs(4)),
            Err("caches stale, watch failing: pods (failing for 4s)".into())
        );
        r.watch_event("namespaces");
        assert!(r.check().is_err(), "another watch's event says nothing about this one");
        r.watch_event("pods");
        assert!(!r.any_watch_failing());
        assert_eq!(r.check(), Ok(()));
    }

    #[test]
    fn a_suspended_leader_is_unready_and_says_which_caches_are_stale_too() {
        let r = ready_with(&["pods"]);
        r.set_suspended();
        assert_eq!(r.check(), Err("leading suspended: the leader-election lease could not be renewed in time".into()));
        let t0 = Instant::now();
        r.watch_failed_at("pods", "forbidden", t0);
        assert_eq!(
            r.check_at(t0 + Duration::from_secs(2)),
            Err("leading suspended: the leader-election lease could not be renewed in time; caches stale, watch failing: pods (failing for 2s)".into())
        );
        r.watch_event("pods");
        r.set_active();
        assert_eq!(r.check(), Ok(()));
    }

    #[test]
    fn a_silent_watch_resumes_once_the_api_answered_after_its_last_error_and_it_stayed_quiet() {
        let r = ready_with(&["services"]);
        let t0 = Instant::now();
        r.watch_failed_at("services", "forbidden", t0);
        // The API server answered, but before the last error: still down.
        r.api_answered(t0 - Duration::from_secs(1));
        assert!(r.resumed_watches_at(t0 + RESUMED_AFTER * 2).is_empty());
        // Answered after it, but the watch may still be waiting to retry.
        r.api_answered(t0 + Duration::from_secs(1));
        assert!(r.resumed_watches_at(t0 + RESUMED_AFTER - Duration::from_millis(1)).is_empty());
        assert!(r.check().is_err());
        // Failed again meanwhile (e.g. forbidden): not resumed.
        r.watch_failed_at("services", "forbidden", t0 + Duration::from_secs(2));
        assert!(r.resumed_watches_at(t0 + RESUMED_AFTER + Duration::from_secs(1)).is_empty());
        // Answered after the last error, and quiet for RESUMED_AFTER.
        r.api_answered(t0 + Duration::from_secs(3));
        let resumed = r.resumed_watches_at(t0 + Duration::from_secs(2) + RESUMED_AFTER);
        assert_eq!(resumed, vec![("services".to_string(), Duration::from_secs(2) + RESUMED_AFTER)]);
        assert_eq!(r.check(), Ok(()));
    }

    #[test]
    fn a_tracked_stream_records_errors_and_events() {
        let r = Readiness::default();
        r.set_active();
        let health = r.watch("copies");
        assert!(r.check().is_err(), "registered unsynced");
        health.synced();
        assert_eq!(r.check(), Ok(()));
        let items: Vec<Result<Event<u8>, &str>> = vec![Ok(Event::Apply(1)), Err("gone"), Err("gone")];
        let out: Vec<_> = futures::executor::block_on(health.track(futures::stream::iter(items.clone())).collect());
        assert_eq!(format!("{out:?}"), format!("{items:?}"), "passed through unchanged");
        assert!(r.check().unwrap_err().starts_with("caches stale, watch failing: copies"));
        assert_eq!(health.error().as_deref(), Some("gone"), "the last error is kept while it fails");
        // A retry's Init, then refused again: still failing.
        let retry: [Result<Event<u8>, &str>; 2] = [Ok(Event::Init), Err("forbidden")];
        let _: Vec<_> = futures::executor::block_on(health.track(futures::stream::iter(retry)).collect());
        assert_eq!(health.error().as_deref(), Some("forbidden"));
        let api = [Err("ApiError: secrets is forbidden: Forbidden (Status { status: Some(Failure), code: 403 })")];
        let _: Vec<_> = futures::executor::block_on(
            health.track(futures::stream::iter(api.map(|e: Result<Event<u8>, &str>| e))).collect(),
        );
        assert_eq!(health.error().as_deref(), Some("ApiError: secrets is forbidden: Forbidden"), "no debug dump");
        let retry: [Result<Event<u8>, &str>; 1] = [Ok(Event::Init)];
        let _: Vec<_> = futures::executor::block_on(health.track(futures::stream::iter(retry)).collect());
        assert!(r.check().is_err(), "a list begun is not a watch resumed");
        let _: Vec<_> = futures::executor::block_on(
            health.track(futures::stream::iter([Ok::<Event<u8>, &str>(Event::InitDone)])).collect(),
        );
        assert_eq!(r.check(), Ok(()));
        assert_eq!(health.error(), None, "forgotten once it flows");
    }
}
