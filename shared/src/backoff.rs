//! Retry delays, from `backon` (the crate kube-runtime's own watcher
//! backoff is built on): the delay of every watch, and the per-object delay
//! after a failed reconcile.
//!
//! **Watches** (kube-runtime watchers and Controllers): 0.5 s doubling to
//! 2 s, each with up to as much again of jitter (backon's), reset by the
//! first event. kube-runtime's default (client-go's reflector numbers) goes
//! up to 30 s. After an API server restart that is paid twice: the first
//! retry is refused with 410 Expired (the new server's watch cache starts
//! at the current revision, so no older resourceVersion resumes), and only
//! the next one re-lists — measured, config-copier's caches were still
//! stale 30 s after the API server was back (`every_operator_rides_out_an_
//! api_server_restart` in e2e/tests/rbac.rs); with a 5 s cap, under load,
//! still 20–30 s. With 2 s the two attempts add at most 8 s to the new
//! server's own start. The cost: during an outage one request per watch
//! every 2–4 s — a few per second for an operator's handful of watches,
//! where a fleet of client-go clients is why client-go waits 30 s.
//!
//! **Failed reconciles** ([`ErrorBackoff`]): 1 s doubling to 5 min per
//! object, with jitter, forgotten at its next success — client-go's
//! per-item exponential rate limiter, so one object the API keeps refusing
//! never loops hot and never slows the others.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use kube::runtime::utils::Backoff;

const WATCH_FIRST: Duration = Duration::from_millis(500);
const WATCH_MAX: Duration = Duration::from_secs(2);

fn exponential(first: Duration, max: Duration) -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(first)
        .with_max_delay(max)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
}

/// See the module docs; `Default` starts at the first delay.
#[derive(Debug)]
pub struct WatchBackoff {
    delays: ExponentialBackoff,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self { delays: exponential(WATCH_FIRST, WATCH_MAX).build() }
    }
}

/// The backoff for `watcher(..).backoff(..)` and `Controller::trigger_backoff`.
pub fn watch_backoff() -> WatchBackoff {
    WatchBackoff::default()
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.delays.next()
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        *self = Self::default();
    }
}

/// Per-object retry delays after failures (see the module docs). Keys are
/// whatever names the object (`<namespace>/<name>`, a UID).
#[derive(Debug)]
pub struct ErrorBackoff {
    builder: ExponentialBuilder,
    delays: Mutex<HashMap<String, ExponentialBackoff>>,
}

impl Default for ErrorBackoff {
    /// 1 s doubling to 5 min.
    fn default() -> Self {
        Self::new(Duration::from_secs(1), Duration::from_secs(300))
    }
}

impl ErrorBackoff {
    pub fn new(first: Duration, max: Duration) -> Self {
        Self { builder: exponential(first, max), delays: Mutex::default() }
    }

    fn delays(&self) -> std::sync::MutexGuard<'_, HashMap<String, ExponentialBackoff>> {
        self.delays.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The delay before `key`'s next try, after one more failure.
    pub fn next(&self, key: &str) -> Duration {
        let mut delays = self.delays();
        let delays = delays.entry(key.to_string()).or_insert_with(|| self.builder.build());
        // Never `None`: built without a limit on the number of tries.
        delays.next().unwrap_or(Duration::from_secs(300))
    }

    /// `key` succeeded (or is gone): its next failure starts over.
    pub fn forget(&self, key: &str) {
        let mut delays = self.delays();
        if !delays.is_empty() {
            delays.remove(key);
        }
    }

    /// Keeps only the keys `keep` says are still live (the others' objects
    /// are gone).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.delays().retain(|k, _| keep(k));
    }

    /// How many objects have a failure to their name.
    pub fn failing(&self) -> usize {
        self.delays().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_double_to_two_seconds_with_jitter_and_reset() {
        let mut b = watch_backoff();
        let delays: Vec<Duration> = b.by_ref().take(6).collect();
        for (d, base) in delays.iter().zip([500, 1000, 2000, 2000, 2000, 2000]) {
            let base = Duration::from_millis(base);
            assert!(*d >= base && *d <= base * 2, "{d:?} vs {base:?}");
        }
        b.reset();
        assert!(b.next().is_some_and(|d| d <= Duration::from_secs(1)));
    }

    #[test]
    fn each_object_backs_off_on_its_own_and_starts_over_after_a_success() {
        let b = ErrorBackoff::default();
        let a: Vec<Duration> = (0..12).map(|_| b.next("ns/a")).collect();
        for (d, base) in a.iter().zip([1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]) {
            let base = Duration::from_secs(base);
            assert!(*d >= base && *d <= base * 2, "{d:?} vs {base:?}");
        }
        assert!(b.next("ns/b") <= Duration::from_secs(2), "another object starts at 1 s");
        assert_eq!(b.failing(), 2);
        b.forget("ns/a");
        assert!(b.next("ns/a") <= Duration::from_secs(2), "after a success: 1 s again");
    }
}
