//! The retry delay of every watch (kube-runtime watchers and Controllers):
//! 0.5 s doubling to 2 s, with up to 50 % jitter, reset by the first event.
//!
//! kube-runtime's default (client-go's reflector numbers) goes up to 30 s.
//! After an API server restart that is paid twice: the first retry is
//! refused with 410 Expired (the new server's watch cache starts at the
//! current revision, so no older resourceVersion resumes), and only the
//! next one re-lists — measured, config-copier's caches were still stale
//! 30 s after the API server was back (`every_operator_rides_out_an_api_
//! server_restart` in e2e/tests/rbac.rs); with a 5 s cap, under load, still
//! 20–30 s. With 2 s the two attempts add at most 6 s to the new server's
//! own start. The cost: during an outage one request per watch every 2–3 s
//! — a few per second for an operator's handful of watches, where a fleet
//! of client-go clients is why client-go waits 30 s.

use std::time::Duration;

use kube::runtime::utils::Backoff;

const FIRST: Duration = Duration::from_millis(500);
const MAX: Duration = Duration::from_secs(2);

/// See the module docs; `Default` starts at the first delay.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self { next: FIRST }
    }
}

/// The backoff for `watcher(..).backoff(..)` and `Controller::trigger_backoff`.
pub fn watch_backoff() -> WatchBackoff {
    WatchBackoff::default()
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let base = self.next;
        self.next = (self.next * 2).min(MAX);
        Some(base.mul_f64(1.0 + rand::random::<f64>() * 0.5))
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_two_seconds_with_jitter_and_resets() {
        let mut b = watch_backoff();
        let delays: Vec<Duration> = b.by_ref().take(6).collect();
        for (d, base) in delays.iter().zip([500, 1000, 2000, 2000, 2000, 2000]) {
            let base = Duration::from_millis(base);
            assert!(*d >= base && *d <= base.mul_f64(1.5), "{d:?} vs {base:?}");
        }
        b.reset();
        assert!(b.next().is_some_and(|d| d < Duration::from_millis(750)));
    }
}
