//! How a worker retries: exponential backoff within a number of attempts
//! and an age, and the sink's `Retry-After` honoured (within a bound).

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::Failure;

/// Retry policy of a worker.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub first: Duration,
    pub max_delay: Duration,
    pub attempts: u32,
    pub max_age: Duration,
    /// Retry-After values above this are cut to it.
    pub max_retry_after: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            first: Duration::from_secs(1),
            max_delay: Duration::from_secs(300),
            attempts: 8,
            max_age: Duration::from_secs(1800),
            max_retry_after: Duration::from_secs(600),
        }
    }
}

/// Parses `Retry-After`: seconds, or an HTTP date.
pub fn parse_retry_after(value: &str, now: Timestamp) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = k8s_openapi::jiff::fmt::rfc2822::parse(v).ok()?.timestamp();
    Some(crate::pod::elapsed(now, at))
}

/// The wait before attempt `n` (1-based retry number) after `failure`.
pub fn delay(retry: &Retry, n: u32, failure: &Failure) -> Duration {
    if let Some(ra) = failure.retry_after {
        return ra.min(retry.max_retry_after);
    }
    let exp = retry.first.saturating_mul(2u32.saturating_pow(n.saturating_sub(1)));
    exp.min(retry.max_delay)
}
