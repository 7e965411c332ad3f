//! The queue side of client-go's `workqueue_*` metrics — `workqueue_depth`,
//! `workqueue_adds_total`, `workqueue_queue_duration_seconds` — for a
//! kube-runtime controller.
//!
//! kube-runtime's scheduler keeps what waits in it to itself
//! (kube-rs/kube#1917). Everything that enters or leaves it passes through
//! code of ours, though ([`crate::controller::Controller`]): the triggers
//! (watch events, `reconcile_on`) on their way in, each reconcile's
//! requeue `Action`, a reconcile starting, an object gone before its turn.
//! [`QueueMirror`] applies the scheduler's own rules (kube-runtime 5,
//! `scheduler.rs`) to those, so what it reports is what the scheduler holds:
//!
//! - one entry per object; a request for an object already waiting keeps
//!   the earlier time, and moves it to the request's time plus the debounce
//!   when the request is not later (the debounce restarts);
//! - an entry falls due at its time; it waits while its object is being
//!   reconciled, and for a free worker (`concurrency`);
//! - it leaves when its reconcile starts, or when the object is gone.
//!
//! client-go's meaning of each metric is kept: `depth` counts what is due
//! and waits for a worker (not what is scheduled for later, not an object
//! whose reconcile is running); `adds_total` counts entries as they fall
//! due (a requeue is counted when its time comes, as `AddAfter` does);
//! `queue_duration_seconds` is how long an entry waited for a worker once
//! due (or once its object's running reconcile finished).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus::{Histogram, IntCounter, IntGauge};

/// The scheduler's view of one controller (see the module docs). Keys are
/// `<namespace>/<name>` (empty namespace for cluster-scoped kinds).
pub struct QueueMirror {
    debounce: Duration,
    state: Mutex<State>,
    handles: QueueHandles,
}

/// One controller's queue metrics.
#[derive(Clone)]
pub struct QueueHandles {
    pub depth: IntGauge,
    pub adds: IntCounter,
    pub queue_duration: Histogram,
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    running: HashSet<String>,
}

struct Entry {
    /// When the scheduler lets it out (the request's time plus debounce).
    run_at: Instant,
    /// When its object's running reconcile finished, if that was after
    /// `run_at`: it waited for that, not for a worker, until then.
    freed_at: Option<Instant>,
    /// Counted in `adds_total` (once due).
    counted: bool,
}

impl Entry {
    /// When it started waiting for a worker.
    fn waiting_since(&self) -> Instant {
        self.freed_at.map_or(self.run_at, |f| f.max(self.run_at))
    }
}

impl QueueMirror {
    pub fn new(debounce: Duration, handles: QueueHandles) -> Self {
        Self { debounce, state: Mutex::default(), handles }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A request to reconcile `key` at `run_at`: a trigger (now) or a
    /// requeue (when the reconcile finished, plus its `requeue_after`).
    pub fn request(&self, key: &str, run_at: Instant) {
        let next = run_at.checked_add(self.debounce).unwrap_or(run_at);
        let mut state = self.state();
        match state.entries.get_mut(key) {
            // Not later than what waits: it moves to this request's time
            // (debounce included), as the scheduler's `reset_at` does. One
            // already counted stays counted (client-go counts a repeated
            // `Add` of what waits once).
            Some(e) if e.run_at >= run_at => e.run_at = next,
            // Later than what waits (or what is due and held while its
            // object is reconciled): nothing changes.
            Some(_) => {}
            None => {
                state.entries.insert(key.to_string(), Entry { run_at: next, freed_at: None, counted: false });
            }
        }
    }

    /// `key`'s reconcile starts: its entry leaves the queue.
    pub fn started(&self, key: &str, now: Instant) {
        let mut state = self.state();
        state.running.insert(key.to_string());
        if let Some(e) = state.entries.remove(key) {
            if !e.counted {
                self.handles.adds.inc();
            }
            self.handles.queue_duration.observe(now.saturating_duration_since(e.waiting_since()).as_secs_f64());
        }
    }

    /// `key`'s reconcile finished (before its requeue is requested).
    pub fn finished(&self, key: &str, now: Instant) {
        let mut state = self.state();
        state.running.remove(key);
        if let Some(e) = state.entries.get_mut(key)
            && e.run_at < now
        {
            e.freed_at = Some(now);
        }
    }

    /// `key`'s turn came but its object was gone from the cache: the
    /// scheduler let it out without a reconcile.
    pub fn forget(&self, key: &str, now: Instant) {
        let mut state = self.state();
        if let Some(e) = state.entries.remove(key)
            && !e.counted
            && e.run_at <= now
        {
            self.handles.adds.inc();
        }
    }

    /// Sets `workqueue_depth` and counts the entries fallen due since the
    /// last look; called at scrape time.
    pub fn refresh(&self, now: Instant) {
        let mut state = self.state();
        let State { entries, running } = &mut *state;
        let mut depth = 0i64;
        for (key, e) in entries.iter_mut() {
            if e.run_at > now {
                continue;
            }
            if !e.counted {
                e.counted = true;
                self.handles.adds.inc();
            }
            if !running.contains(key) {
                depth += 1;
            }
        }
        self.handles.depth.set(depth);
    }

    /// How many entries wait, due or not (for tests and logs).
    pub fn scheduled(&self) -> usize {
        self.state().entries.len()
    }
}

/// An `Action`'s `requeue_after`, read from its `Debug` form
/// (`Action { requeue_after: Some(1.5s) }`): kube-runtime 5 keeps the field
/// private. `None` for `await_change`, and for a form not understood — then
/// the requeue is simply not mirrored; the test below pins the form, so a
/// kube-runtime that changes it fails here rather than in production.
pub fn requeue_after(action: &kube::runtime::controller::Action) -> Option<Duration> {
    let debug = format!("{action:?}");
    let inner = debug.strip_prefix("Action { requeue_after: Some(")?.strip_suffix(") }")?;
    let (number, unit) = [("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)]
        .into_iter()
        .find_map(|(suffix, unit)| inner.strip_suffix(suffix).map(|n| (n, unit)))?;
    let value: f64 = number.parse().ok()?;
    Duration::try_from_secs_f64(value * unit).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::controller::Action;

    #[test]
    fn the_requeue_of_an_action_is_read() {
        for d in [
            Duration::from_nanos(1),
            Duration::from_micros(7),
            Duration::from_millis(500),
            Duration::from_millis(1500),
            Duration::from_secs(300),
            Duration::from_secs(86_400 * 365),
            Duration::new(2, 1),
        ] {
            let got = requeue_after(&Action::requeue(d)).unwrap_or_else(|| panic!("{d:?} not read"));
            let diff = got.abs_diff(d);
            assert!(diff <= d / 1_000_000 + Duration::from_nanos(1), "{d:?} read as {got:?}");
        }
        assert_eq!(requeue_after(&Action::await_change()), None);
        assert_eq!(requeue_after(&Action::requeue(Duration::MAX)), None, "beyond f64 seconds: not mirrored, no panic");
    }

    fn mirror(debounce_ms: u64) -> QueueMirror {
        let handles = QueueHandles {
            depth: IntGauge::new("d", "d").unwrap(),
            adds: IntCounter::new("a", "a").unwrap(),
            queue_duration: Histogram::with_opts(prometheus::HistogramOpts::new("q", "q")).unwrap(),
        };
        QueueMirror::new(Duration::from_millis(debounce_ms), handles)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_trigger_is_due_at_once_and_counted_once() {
        let q = mirror(0);
        let t0 = Instant::now();
        q.request("ns/a", t0);
        q.request("ns/a", t0 + ms(1)); // same object: one entry
        q.request("ns/b", t0 + ms(1));
        q.refresh(t0 + ms(2));
        assert_eq!(q.handles.depth.get(), 2);
        assert_eq!(q.handles.adds.get(), 2);
        q.refresh(t0 + ms(3));
        assert_eq!(q.handles.adds.get(), 2, "counted once");
        q.started("ns/a", t0 + ms(10));
        q.refresh(t0 + ms(10));
        assert_eq!(q.handles.depth.get(), 1);
        assert_eq!(q.handles.queue_duration.get_sample_count(), 1);
        assert!((q.handles.queue_duration.get_sample_sum() - 0.010).abs() < 1e-6, "waited from t0 to t0+10ms");
    }

    #[test]
    fn a_requeue_is_not_in_the_queue_before_its_time() {
        let q = mirror(0);
        let t0 = Instant::now();
        q.request("ns/a", t0 + Duration::from_secs(300));
        q.refresh(t0);
        assert_eq!((q.handles.depth.get(), q.handles.adds.get()), (0, 0), "scheduled for later: not added yet");
        assert_eq!(q.scheduled(), 1);
        // A watch event meanwhile is earlier: it wins.
        q.request("ns/a", t0 + ms(5));
        q.refresh(t0 + ms(5));
        assert_eq!((q.handles.depth.get(), q.handles.adds.get()), (1, 1));
        // And a requeue later than what is due changes nothing.
        q.request("ns/a", t0 + Duration::from_secs(600));
        q.refresh(t0 + ms(6));
        assert_eq!((q.handles.depth.get(), q.handles.adds.get()), (1, 1));
    }

    #[test]
    fn debounce_restarts_with_every_request() {
        let q = mirror(500);
        let t0 = Instant::now();
        q.request("ns/a", t0);
        q.request("ns/a", t0 + ms(400)); // before the first is due: pushed to 900
        q.refresh(t0 + ms(600));
        assert_eq!(q.handles.depth.get(), 0, "still debouncing");
        q.refresh(t0 + ms(900));
        assert_eq!(q.handles.depth.get(), 1);
    }

    #[test]
    fn an_object_being_reconciled_waits_and_is_not_depth() {
        let q = mirror(0);
        let t0 = Instant::now();
        q.request("ns/a", t0);
        q.started("ns/a", t0);
        q.request("ns/a", t0 + ms(10)); // changed while reconciled
        q.refresh(t0 + ms(20));
        assert_eq!(q.handles.depth.get(), 0, "client-go: dirty while processing is not in the queue");
        assert_eq!(q.handles.adds.get(), 2);
        q.finished("ns/a", t0 + ms(100));
        q.refresh(t0 + ms(100));
        assert_eq!(q.handles.depth.get(), 1, "back in the queue once the reconcile is done");
        q.started("ns/a", t0 + ms(130));
        // Waited 30 ms for a worker (not the 120 ms since the event).
        assert!((q.handles.queue_duration.get_sample_sum() - 0.030).abs() < 1e-6);
    }

    #[test]
    fn an_object_gone_before_its_turn_leaves_the_queue() {
        let q = mirror(0);
        let t0 = Instant::now();
        q.request("ns/a", t0);
        q.forget("ns/a", t0 + ms(1));
        q.refresh(t0 + ms(2));
        assert_eq!((q.handles.depth.get(), q.handles.adds.get(), q.scheduled()), (0, 1, 0));
        assert_eq!(q.handles.queue_duration.get_sample_count(), 0);
    }

    #[test]
    fn depth_counts_what_waits_for_a_worker() {
        let q = mirror(0);
        let t0 = Instant::now();
        for i in 0..10 {
            q.request(&format!("ns/o{i}"), t0);
        }
        for i in 0..4 {
            q.started(&format!("ns/o{i}"), t0 + ms(1)); // 4 workers busy
        }
        q.refresh(t0 + ms(2));
        assert_eq!(q.handles.depth.get(), 6);
        assert_eq!(q.handles.adds.get(), 10);
    }
}
