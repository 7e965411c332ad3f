//! The queue side of client-go's `workqueue_*` metrics — `workqueue_depth`,
//! `workqueue_adds_total`, `workqueue_queue_duration_seconds` — for a
//! kube-runtime controller.
//!
//! kube-runtime's scheduler keeps what waits in it to itself
//! (kube-rs/kube#1917). Everything that enters or leaves it passes through
//! code of ours, though ([`crate::controller::Controller`] and
//! [`crate::Context::run_controller`]): the triggers (watch events,
//! `reconcile_on`) on their way in, each reconcile's requeue `Action`, a
//! reconcile starting, an object gone before its turn. [`QueueMirror`]
//! applies the scheduler's own rules (kube-runtime 5, `scheduler.rs`) to
//! those, so what it reports is what the scheduler holds:
//!
//! - one entry per object; a request for an object already waiting keeps
//!   the earlier of the two times (the scheduler runs with no debounce of
//!   its own: triggers are debounced before they reach it, `debounce.rs`,
//!   so a trigger the mirror sees is due at once);
//! - an entry falls due at its time; it waits while its object is being
//!   reconciled, and for a free worker (`concurrency`);
//! - it leaves when its reconcile starts, or when the object is gone.
//!
//! The metrics keep client-go's meanings (`workqueue/queue.go`, `metrics.go`),
//! with "added" meaning "fallen due" (requeues are client-go's `AddAfter`,
//! counted when the delay is over):
//! `depth` counts what is due and not yet started — an object changed while
//! its reconcile runs included, as client-go counts a dirty item being
//! processed; `adds_total` counts entries as they fall due;
//! `queue_duration_seconds` is from falling due to the reconcile starting
//! (or to the scheduler dropping it, the object gone).
//!
//! A replica that does not lead (standing by, or suspended) works on
//! nothing: it reports an empty queue and counts nothing, and once it leads
//! what waited counts as added then.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use prometheus::{Histogram, IntCounter, IntGauge};

/// kube-runtime's scheduler caps a requeue at about six months from now
/// (`max_schedule_time`); so does the mirror.
const MAX_SCHEDULE: Duration = Duration::from_secs(86_400 * 30 * 6);

/// The scheduler's view of one controller (see the module docs). Keys are
/// `<namespace>/<name>` (empty namespace for cluster-scoped kinds).
pub struct QueueMirror {
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
    /// Since when this replica leads (`None`: it does not).
    leading_since: Option<Instant>,
}

struct Entry {
    /// When the scheduler lets it out.
    run_at: Instant,
    /// Counted in `adds_total` (once due, while leading).
    counted: bool,
}

impl QueueMirror {
    pub fn new(handles: QueueHandles) -> Self {
        Self { state: Mutex::default(), handles }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether this replica leads, from `now` on.
    pub fn set_leading(&self, leading: bool, now: Instant) {
        let mut state = self.state();
        state.leading_since = match (leading, state.leading_since) {
            (true, Some(since)) => Some(since),
            (true, None) => Some(now),
            (false, _) => None,
        };
    }

    /// A request to reconcile `key` at `run_at`: a trigger (now) or a
    /// requeue (when the reconcile finished, plus its `requeue_after`).
    pub fn request(&self, key: &str, run_at: Instant) {
        let mut state = self.state();
        match state.entries.get_mut(key) {
            // Not later than what waits: it moves to this request's time,
            // as the scheduler's `reset_at` does. One already counted stays
            // counted (client-go counts a repeated `Add` of what waits once).
            Some(e) if e.run_at >= run_at => e.run_at = run_at,
            // Later than what waits: nothing changes.
            Some(_) => {}
            None => {
                state.entries.insert(key.to_string(), Entry { run_at, counted: false });
            }
        }
    }

    /// A requeue `after` from `now` (the scheduler's cap applied).
    pub fn requeue(&self, key: &str, now: Instant, after: Duration) {
        self.request(key, now + after.min(MAX_SCHEDULE));
    }

    /// `key`'s entry leaves the queue at `now`: its reconcile starts, or
    /// (`object_gone`) the scheduler let it out with its object no longer
    /// in the cache.
    pub fn taken(&self, key: &str, now: Instant) {
        let mut state = self.state();
        // Not leading (a race with `set_leading`): it waited from now.
        let since = state.leading_since.unwrap_or(now);
        if let Some(e) = state.entries.remove(key) {
            if !e.counted {
                self.handles.adds.inc();
            }
            let due = e.run_at.max(since);
            self.handles.queue_duration.observe(now.saturating_duration_since(due).as_secs_f64());
        }
    }

    /// `key` left the scheduler without a reconcile, its object gone
    /// (deleted before its turn). `leading` is the replica's leadership as
    /// the caller sees it now (the mirror's own may lag a moment behind): a
    /// standby counts nothing, so an object created and deleted while it
    /// stands by was never added.
    pub fn dropped(&self, key: &str, now: Instant, leading: bool) {
        if leading {
            self.taken(key, now);
        } else {
            self.state().entries.remove(key);
        }
    }

    /// Sets `workqueue_depth` and counts the entries fallen due since the
    /// last look; called at scrape time.
    pub fn refresh(&self, now: Instant) {
        let mut state = self.state();
        if state.leading_since.is_none() {
            self.handles.depth.set(0);
            return;
        }
        let mut depth = 0i64;
        for e in state.entries.values_mut().filter(|e| e.run_at <= now) {
            depth += 1;
            if !e.counted {
                e.counted = true;
                self.handles.adds.inc();
            }
        }
        self.handles.depth.set(depth);
    }

    /// How many entries wait, due or not.
    pub fn scheduled(&self) -> usize {
        self.state().entries.len()
    }
}

/// A reconcile between its start and its end, for the queue mirror: the
/// entry leaves at the start, and the requeue comes back at the end.
pub struct InQueue {
    mirror: Arc<QueueMirror>,
    key: String,
}

impl InQueue {
    /// The reconcile of `key` starts now.
    pub fn start(mirror: Arc<QueueMirror>, key: String) -> Self {
        mirror.taken(&key, Instant::now());
        Self { mirror, key }
    }

    /// It finished with `action` (`None`: an error, whose requeue the error
    /// policy requests).
    pub fn finish(self, action: Option<&Action>) {
        if let Some(after) = action.and_then(requeue_after) {
            self.mirror.requeue(&self.key, Instant::now(), after);
        }
    }
}

/// An `Action`'s `requeue_after`: kube-runtime 5 keeps the field private,
/// so it is read from the `Debug` form (`Action { requeue_after:
/// Some(1.5s) }`), exactly, and accepted only if `Action::requeue` of it is
/// that same action. `None` for `await_change` and for a form not
/// understood — then the requeue is not mirrored; the tests below pin the
/// form, so a kube-runtime that changes it fails there.
pub fn requeue_after(action: &Action) -> Option<Duration> {
    let debug = format!("{action:?}");
    let inner = debug.strip_prefix("Action { requeue_after: Some(")?.strip_suffix(") }")?;
    let duration = parse_debug_duration(inner)?;
    (Action::requeue(duration) == *action).then_some(duration)
}

/// `Duration`'s `Debug` form (`1.5s`, `250ms`, `7µs`, `1ns`) back to it.
fn parse_debug_duration(text: &str) -> Option<Duration> {
    let (number, unit_ns): (&str, u128) = [("ns", 1), ("µs", 1_000), ("ms", 1_000_000), ("s", 1_000_000_000)]
        .into_iter()
        .find_map(|(suffix, unit)| text.strip_suffix(suffix).map(|n| (n, unit)))?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let whole: u128 = whole.parse().ok()?;
    let mut nanos = whole.checked_mul(unit_ns)?;
    if !fraction.is_empty() {
        let digits = u32::try_from(fraction.len()).ok()?;
        let scale = 10u128.checked_pow(digits)?;
        let fraction: u128 = fraction.parse().ok()?;
        nanos = nanos.checked_add(fraction.checked_mul(unit_ns)? / scale)?;
    }
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    let sub = u32::try_from(nanos % 1_000_000_000).ok()?;
    Some(Duration::new(secs, sub))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_requeue_of_an_action_is_read_exactly() {
        for d in [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_micros(7),
            Duration::new(0, 1_234_567),
            Duration::from_millis(500),
            Duration::from_millis(1500),
            Duration::from_secs(300),
            Duration::from_secs(86_400 * 365),
            Duration::new(2, 1),
            Duration::MAX,
        ] {
            assert_eq!(requeue_after(&Action::requeue(d)), Some(d), "{d:?}");
        }
        assert_eq!(requeue_after(&Action::await_change()), None);
    }

    fn mirror() -> QueueMirror {
        let handles = QueueHandles {
            depth: IntGauge::new("d", "d").unwrap(),
            adds: IntCounter::new("a", "a").unwrap(),
            queue_duration: Histogram::with_opts(prometheus::HistogramOpts::new("q", "q")).unwrap(),
        };
        let q = QueueMirror::new(handles);
        q.set_leading(true, Instant::now());
        q
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn waited(q: &QueueMirror) -> (u64, f64) {
        (q.handles.queue_duration.get_sample_count(), q.handles.queue_duration.get_sample_sum())
    }

    #[test]
    fn a_trigger_is_due_at_once_and_counted_once() {
        let q = mirror();
        let t0 = Instant::now();
        q.request("ns/a", t0);
        q.request("ns/a", t0 + ms(1)); // same object: one entry
        q.request("ns/b", t0 + ms(1));
        q.refresh(t0 + ms(2));
        assert_eq!(q.handles.depth.get(), 2);
        assert_eq!(q.handles.adds.get(), 2);
        q.refresh(t0 + ms(3));
        assert_eq!(q.handles.adds.get(), 2, "counted once");
        q.taken("ns/a", t0 + ms(10));
        q.refresh(t0 + ms(10));
        assert_eq!(q.handles.depth.get(), 1);
        let (count, sum) = waited(&q);
        assert_eq!(count, 1);
        assert!((sum - 0.010).abs() < 1e-6, "waited from t0 to t0+10ms: {sum}");
    }

    #[test]
    fn a_requeue_is_not_in_the_queue_before_its_time() {
        let q = mirror();
        let t0 = Instant::now();
        q.requeue("ns/a", t0, Duration::from_secs(300));
        q.refresh(t0);
        assert_eq!((q.handles.depth.get(), q.handles.adds.get()), (0, 0), "scheduled for later: not added yet");
        assert_eq!(q.scheduled(), 1);
        // A watch event meanwhile is earlier: it wins.
        q.request("ns/a", t0 + ms(5));
        q.refresh(t0 + ms(5));
        assert_eq!((q.handles.depth.get(), q.handles.adds.get()), (1, 1));
        // And a requeue later than what is due changes nothing.
        q.requeue("ns/a", t0 + ms(6), Duration::from_secs(600));
        q.refresh(t0 + ms(6));
        assert_eq!((q.handles.depth.get(), q.handles.adds.get()), (1, 1));
        // A requeue beyond the scheduler's cap is capped, not lost.
        q.requeue("ns/b", t0, Duration::MAX);
        assert_eq!(q.scheduled(), 2);
    }

    #[test]
    fn an_object_changed_while_reconciled_is_depth_and_waits_for_it() {
        let q = mirror();
        let t0 = Instant::now();
        q.request("ns/a", t0);
        q.taken("ns/a", t0);
        q.request("ns/a", t0 + ms(10)); // changed while reconciled
        q.refresh(t0 + ms(20));
        assert_eq!(q.handles.depth.get(), 1, "client-go: a dirty item being processed counts");
        assert_eq!(q.handles.adds.get(), 2);
        // Its reconcile finishes at 100 ms; the next starts at 130 ms.
        q.taken("ns/a", t0 + ms(130));
        assert!((waited(&q).1 - 0.120).abs() < 1e-6, "waited from the change, as client-go measures");
    }

    #[test]
    fn an_object_gone_before_its_turn_leaves_the_queue() {
        let q = mirror();
        let t0 = Instant::now();
        q.request("ns/a", t0);
        q.taken("ns/a", t0 + ms(1));
        q.refresh(t0 + ms(2));
        assert_eq!((q.handles.depth.get(), q.handles.adds.get(), q.scheduled()), (0, 1, 0));
        assert_eq!(waited(&q).0, 1);
    }

    #[test]
    fn depth_counts_what_waits_for_a_worker() {
        let q = mirror();
        let t0 = Instant::now();
        for i in 0..10 {
            q.request(&format!("ns/o{i}"), t0);
        }
        for i in 0..4 {
            q.taken(&format!("ns/o{i}"), t0 + ms(1)); // 4 workers busy
        }
        q.refresh(t0 + ms(2));
        assert_eq!(q.handles.depth.get(), 6);
        assert_eq!(q.handles.adds.get(), 10);
    }

    #[test]
    fn a_replica_that_does_not_lead_reports_an_empty_queue() {
        let q = mirror();
        let t0 = Instant::now();
        q.set_leading(false, t0);
        for i in 0..10 {
            q.request(&format!("ns/o{i}"), t0);
        }
        q.refresh(t0 + Duration::from_secs(3600));
        assert_eq!((q.handles.depth.get(), q.handles.adds.get()), (0, 0), "a standby works on nothing");
        // It leads after an hour: what waited is added now, and waited from now.
        let led = t0 + Duration::from_secs(3600);
        q.set_leading(true, led);
        q.refresh(led);
        assert_eq!((q.handles.depth.get(), q.handles.adds.get()), (10, 10));
        q.taken("ns/o0", led + ms(5));
        assert!((waited(&q).1 - 0.005).abs() < 1e-6, "not the hour it stood by: {}", waited(&q).1);
        // A second `set_leading(true)` keeps the first time.
        q.set_leading(true, led + ms(100));
        q.taken("ns/o1", led + ms(200));
        assert!((waited(&q).1 - 0.205).abs() < 1e-6);
    }

    #[test]
    fn what_leaves_a_standbys_queue_is_not_counted() {
        // An object created and deleted while standing by: the scheduler
        // lets its entry out (object gone) before this replica ever leads.
        let q = mirror();
        let t0 = Instant::now();
        q.set_leading(false, t0);
        q.request("ns/gone", t0);
        q.dropped("ns/gone", t0 + ms(50), false);
        q.refresh(t0 + ms(60));
        assert_eq!((q.handles.depth.get(), q.handles.adds.get(), q.scheduled()), (0, 0, 0));
        assert_eq!(waited(&q).0, 0, "no queue time observed for a standby");
        // Leading, the same is an add that waited until dropped.
        q.set_leading(true, t0 + ms(100));
        q.request("ns/gone", t0 + ms(100));
        q.dropped("ns/gone", t0 + ms(110), true);
        assert_eq!((q.handles.adds.get(), waited(&q).0), (1, 1));
    }
}
