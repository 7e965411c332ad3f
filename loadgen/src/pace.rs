//! Whether this runner kept up: in an open model, how many seconds its
//! requests went out below 95 % of those due so far (counted per second of
//! the run, cumulatively, so a request crossing a second's boundary late is
//! not a miss) — counting only requests whose connection was free when they
//! fell due, since one still waiting for an answer is the server's
//! slowness, not the runner's; and how long its CPU was throttled by its
//! cgroup's limit. A runner that could not keep up is reported, so a slow
//! runner is never mistaken for a slow server.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Seconds of a run tracked at most (a run lasts at most 24 h).
const MAX_SECONDS: usize = 86_401;

/// A runner's strain, as its summary carries it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Strain {
    /// Seconds in which the requests sent so far were below 95 % of those
    /// due so far (open model only).
    #[serde(rename = "behindS", default, skip_serializing_if = "is_zero32")]
    pub behind_seconds: u32,
    /// Time the cgroup's CPU limit held the runner back, in milliseconds.
    #[serde(rename = "throttledMs", default, skip_serializing_if = "is_zero64")]
    pub throttled_ms: u64,
}

fn is_zero32(n: &u32) -> bool {
    *n == 0
}
fn is_zero64(n: &u64) -> bool {
    *n == 0
}

impl Strain {
    /// Why the runner could not keep up over a run of `elapsed`, if it
    /// could not: behind for more than 5 s, or throttled for more than
    /// 5 % of the run (and at least 500 ms).
    pub fn saturated(&self, elapsed: Duration) -> Option<String> {
        let mut why = Vec::new();
        if self.behind_seconds > 5 {
            why.push(format!("below 95 % of its rate for {} s", self.behind_seconds));
        }
        let throttled = Duration::from_millis(self.throttled_ms);
        if throttled >= Duration::from_millis(500) && throttled.as_secs_f64() > elapsed.as_secs_f64() * 0.05 {
            why.push(format!("CPU throttled for {:.1} s of {:.1} s", throttled.as_secs_f64(), elapsed.as_secs_f64()));
        }
        (!why.is_empty()).then(|| why.join(", "))
    }
}

/// Requests due and sent, per second of the run.
pub struct Pace {
    started: Instant,
    due: Vec<AtomicU32>,
    sent: Vec<AtomicU32>,
}

impl Pace {
    /// For a run that started at `started` and lasts at most `window`.
    pub fn new(started: Instant, window: Duration) -> Self {
        let secs = usize::try_from(window.as_secs()).unwrap_or(MAX_SECONDS).saturating_add(2).min(MAX_SECONDS);
        let zeros = || (0..secs).map(|_| AtomicU32::new(0)).collect();
        Self { started, due: zeros(), sent: zeros() }
    }

    fn slot<'a>(&self, of: &'a [AtomicU32], at: Instant) -> Option<&'a AtomicU32> {
        of.get(usize::try_from(at.saturating_duration_since(self.started).as_secs()).unwrap_or(usize::MAX))
    }

    /// A request was due at `at` (sent or not).
    pub fn due(&self, at: Instant) {
        if let Some(n) = self.slot(&self.due, at) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request went out now.
    pub fn sent(&self) {
        if let Some(n) = self.slot(&self.sent, Instant::now()) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whole seconds of the first `elapsed` at whose end fewer than 95 %
    /// of the requests due so far (as [`Pace::due`] counted them) had gone
    /// out (one request of slack for the jitter at a second's boundary).
    pub fn behind_seconds(&self, elapsed: Duration) -> u32 {
        let mut due = 0u64;
        self.behind(elapsed, |s| {
            due += u64::from(self.due.get(s).map_or(0, |n| n.load(Ordering::Relaxed)));
            due
        })
    }

    /// Seconds at whose end the requests sent so far were below 95 % of
    /// `due_by(second)` (cumulative, called for each second in order).
    fn behind(&self, elapsed: Duration, mut due_by: impl FnMut(usize) -> u64) -> u32 {
        let whole = usize::try_from(elapsed.as_secs()).unwrap_or(usize::MAX).min(self.sent.len());
        let (mut sent, mut behind) = (0u64, 0u32);
        for s in 0..whole {
            sent += u64::from(self.sent[s].load(Ordering::Relaxed));
            if (sent as f64) < due_by(s) as f64 * 0.95 - 1.0 {
                behind += 1;
            }
        }
        behind
    }
}

/// CPU time this process's cgroup has been throttled so far (cgroup v2's
/// `throttled_usec`, or v1's `throttled_time`); None outside a cgroup with
/// a CPU limit's accounting.
pub fn throttled() -> Option<Duration> {
    let v2 = std::fs::read_to_string("/sys/fs/cgroup/cpu.stat").ok().and_then(|s| field(&s, "throttled_usec"));
    if let Some(us) = v2 {
        return Some(Duration::from_micros(us));
    }
    ["/sys/fs/cgroup/cpu,cpuacct/cpu.stat", "/sys/fs/cgroup/cpu/cpu.stat"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok().and_then(|s| field(&s, "throttled_time")))
        .map(Duration::from_nanos)
}

fn field(stat: &str, name: &str) -> Option<u64> {
    stat.lines().find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
}

/// The timer's resolution: tokio's timer wheel ticks in milliseconds.
pub const TICK: Duration = Duration::from_millis(1);

/// Waits for a request's scheduled time, waking up to one [`TICK`] early
/// rather than late. tokio rounds a deadline up to its next tick, so a
/// sleep until `due` wakes 0-1 ms after it, and a latency counted from
/// `due` would carry that delay — the runner's, not the server's (at 1000
/// requests/s against a 20 ms p99 it put loadgen's p99 1.1 ms, 5 %, above
/// the server's own, `cargo xtask bench load-tester`). The callers count
/// from the earlier of `due` and when the request went out: a request
/// sent late still counts from `due` (no coordinated omission), one sent
/// early from when it went out.
pub async fn sleep_until_due(due: Instant) {
    tokio::time::sleep_until(due.checked_sub(TICK).unwrap_or(due).into()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runner_behind_its_schedule_is_counted_per_second_and_jitter_is_not() {
        let t0 = Instant::now() - Duration::from_secs(10);
        let pace = Pace::new(t0, Duration::from_secs(10));
        // 100 a second due; the first 3 s all sent, then half.
        for s in 0..10u64 {
            for _ in 0..100 {
                pace.due(t0 + Duration::from_secs(s));
            }
            let n = if s < 3 { 100 } else { 50 };
            for _ in 0..n {
                pace.sent[usize::try_from(s).unwrap()].fetch_add(1, Ordering::Relaxed);
            }
        }
        assert_eq!(pace.behind_seconds(Duration::from_secs(10)), 7);

        // One request a second crossing into the next second: not behind.
        let pace = Pace::new(t0, Duration::from_secs(10));
        for s in 0..10usize {
            pace.due[s].store(10, Ordering::Relaxed);
            pace.sent[s].store(if s == 0 { 9 } else { 10 }, Ordering::Relaxed);
        }
        assert_eq!(pace.behind_seconds(Duration::from_secs(10)), 0);
    }

    #[test]
    fn saturation_needs_more_than_5_s_behind_or_5_percent_throttled() {
        let ten = Duration::from_secs(10);
        assert_eq!(Strain { behind_seconds: 5, throttled_ms: 400 }.saturated(ten), None);
        assert_eq!(Strain { behind_seconds: 0, throttled_ms: 499 }.saturated(Duration::from_secs(1)), None);
        let why = Strain { behind_seconds: 6, throttled_ms: 9_000 }.saturated(ten).unwrap();
        assert_eq!(why, "below 95 % of its rate for 6 s, CPU throttled for 9.0 s of 10.0 s");
        assert_eq!(field("usage_usec 5\nthrottled_usec 1234\n", "throttled_usec"), Some(1234));
        assert_eq!(field("nr_throttled 3\n", "throttled_usec"), None);
    }
}
