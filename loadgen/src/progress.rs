//! Live progress while a run goes on, and the operator's stop signal.
//!
//! The workers add what they measured to a [`Live`] at most once a second
//! (their own histogram, then reset: no second histogram per connection);
//! every `--progress-every` a line goes to stdout, `PROGRESS_PREFIX` then
//! a [`Progress`] as JSON: the counts so far, the histogram of every
//! answer so far and that of the last [`RECENT`] alone. The operator reads
//! the last such line of each runner's log, merges them (histograms bucket
//! by bucket) into `status.progress`, and with `thresholds.abortOnFail`
//! judges them; to stop a run it sets the start annotation to "stop",
//! which the runner reads from the same downward-API file as "go"
//! ([`watch_stop`]) and ends as if its time were up.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::summary::{ErrorKind, SummaryError, decode, encode_at, histogram};

/// What starts a progress line in a runner's log.
pub const PROGRESS_PREFIX: &str = "flotilla-progress ";
/// The window whose latencies `recent` holds.
pub const RECENT: Duration = Duration::from_secs(10);
/// A progress line is at most this long (the operator reads no more).
pub const MAX_LINE: usize = 16 * 1024;

/// One runner's progress, as its log line holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// Since the start signal, in milliseconds.
    pub elapsed_ms: u64,
    /// Requests completed (answered or failed) so far.
    pub requests: u64,
    /// Of them, failed, by kind.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<ErrorKind, u64>,
    /// Requests dropped so far (every connection busy when due).
    #[serde(default)]
    pub dropped: u64,
    /// Every answer's latency so far (as a summary's `hist`).
    pub hist: String,
    /// Requests completed within the last `recentMs`.
    pub recent_requests: u64,
    /// The latencies of the answers of the last `recentMs`.
    pub recent: String,
    /// The recent window's length (shorter at the start).
    pub recent_ms: u64,
    /// Requests dropped within the last `recentMs`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recent_dropped: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Progress {
    /// The log line (without its newline).
    pub fn to_line(&self) -> Result<String, SummaryError> {
        Ok(format!("{PROGRESS_PREFIX}{}", serde_json::to_string(self)?))
    }

    /// The progress of the last progress line of `log`, if any line is one
    /// (other lines — warnings, the final summary — are skipped; a line
    /// past [`MAX_LINE`] is not read).
    pub fn last_in(log: &str) -> Option<Result<Progress, SummaryError>> {
        // The newest line that parses; a newer one cut short (the read's
        // byte limit) or garbled does not hide it. Its error if none does.
        let mut first_error = None;
        for json in log.lines().rev().filter(|l| l.len() <= MAX_LINE).filter_map(|l| l.strip_prefix(PROGRESS_PREFIX)) {
            match serde_json::from_str(json) {
                Ok(p) => return Some(Ok(p)),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map(|e| Err(e.into()))
    }

    /// A finished runner's summary as its final progress (nothing recent).
    pub fn of_summary(s: &crate::summary::Summary) -> Result<Progress, SummaryError> {
        Ok(Progress {
            elapsed_ms: s.elapsed_ms,
            requests: s.requests,
            errors: s.errors.clone(),
            dropped: s.dropped,
            hist: s.hist.clone(),
            recent_requests: 0,
            recent: encode_at(&histogram(), 3)?,
            recent_ms: 0,
            recent_dropped: 0,
        })
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().fold(0u64, |a, b| a.saturating_add(*b))
    }
}

/// Several runners' progress merged.
#[derive(Debug, Clone)]
pub struct MergedProgress {
    pub runners: usize,
    /// The longest runner's.
    pub elapsed: Duration,
    /// The shortest runner's (one that started late is still behind).
    pub shortest: Duration,
    pub requests: u64,
    pub errors: BTreeMap<ErrorKind, u64>,
    pub dropped: u64,
    pub histogram: Histogram<u64>,
    pub recent_requests: u64,
    pub recent: Histogram<u64>,
    /// The longest runner's recent window.
    pub recent_window: Duration,
    pub recent_dropped: u64,
}

impl MergedProgress {
    /// Nothing merged yet.
    pub fn empty() -> Self {
        MergedProgress {
            runners: 0,
            elapsed: Duration::ZERO,
            shortest: Duration::ZERO,
            requests: 0,
            errors: BTreeMap::new(),
            dropped: 0,
            histogram: histogram(),
            recent_requests: 0,
            recent: histogram(),
            recent_window: Duration::ZERO,
            recent_dropped: 0,
        }
    }

    /// Merges runners' progress.
    pub fn of(all: &[Progress]) -> Result<Self, SummaryError> {
        let mut m = Self::empty();
        for p in all {
            m.add(p)?;
        }
        Ok(m)
    }

    /// Adds one runner's progress, whole or not at all: its histograms are
    /// checked as a summary's are (they come from a pod's log, which
    /// anyone who may exec into the pod can write to).
    pub fn add(&mut self, p: &Progress) -> Result<(), SummaryError> {
        let (hist, recent) = (decode(&p.hist)?, decode(&p.recent)?);
        let histogram = |e| SummaryError::Histogram(format!("{e:?}"));
        let mut whole = self.histogram.clone();
        whole.add(hist).map_err(histogram)?;
        self.recent.add(recent).map_err(histogram)?;
        self.histogram = whole;
        let elapsed = Duration::from_millis(p.elapsed_ms);
        self.shortest = if self.runners == 0 { elapsed } else { self.shortest.min(elapsed) };
        self.runners += 1;
        self.elapsed = self.elapsed.max(elapsed);
        self.requests = self.requests.saturating_add(p.requests);
        for (k, n) in &p.errors {
            let e = self.errors.entry(*k).or_default();
            *e = e.saturating_add(*n);
        }
        self.dropped = self.dropped.saturating_add(p.dropped);
        self.recent_requests = self.recent_requests.saturating_add(p.recent_requests);
        self.recent_window = self.recent_window.max(Duration::from_millis(p.recent_ms));
        self.recent_dropped = self.recent_dropped.saturating_add(p.recent_dropped);
        Ok(())
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// Requests completed per second over the recent window.
    pub fn recent_rate(&self) -> f64 {
        let secs = self.recent_window.as_secs_f64();
        if secs > 0.0 { self.recent_requests as f64 / secs } else { 0.0 }
    }
}

/// One second's share of the recent window.
struct Slot {
    second: u64,
    requests: u64,
    dropped: u64,
    histogram: Histogram<u64>,
}

struct Inner {
    requests: u64,
    errors: BTreeMap<ErrorKind, u64>,
    dropped: u64,
    total: Histogram<u64>,
    /// The last seconds' answers, oldest first (at most RECENT of them).
    slots: VecDeque<Slot>,
}

impl Inner {
    /// The recent window's slot of `second` (or of the newest second, if
    /// a worker's clock lags another's), made if need be; slots out of the
    /// window go, the last one's histogram reused.
    fn slot(&mut self, second: u64) -> Option<&mut Slot> {
        let second = self.slots.back().map_or(second, |s| s.second.max(second));
        if self.slots.back().is_none_or(|s| s.second != second) {
            let window = RECENT.as_secs();
            let mut reuse = None;
            while self.slots.front().is_some_and(|s| s.second + window <= second) {
                reuse = self.slots.pop_front().map(|s| s.histogram);
            }
            let mut h = reuse.unwrap_or_else(histogram);
            h.reset();
            self.slots.push_back(Slot { second, requests: 0, dropped: 0, histogram: h });
        }
        self.slots.back_mut()
    }
}

/// What the workers measured so far, shared with the progress reporter.
pub struct Live {
    started: Instant,
    inner: Mutex<Inner>,
    stop: AtomicBool,
}

impl Live {
    pub fn new(started: Instant) -> Self {
        Live {
            started,
            inner: Mutex::new(Inner {
                requests: 0,
                errors: BTreeMap::new(),
                dropped: 0,
                total: histogram(),
                slots: VecDeque::new(),
            }),
            stop: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Counts are added whole under the lock: a panicking holder leaves
        // nothing half-written.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn second(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.started).as_secs()
    }

    /// Adds a worker's measurements (answers in `h`; `requests` completed,
    /// failures by kind among them) at `now`.
    pub fn add(&self, h: &Histogram<u64>, requests: u64, errors: &BTreeMap<ErrorKind, u64>, now: Instant) {
        let second = self.second(now);
        let mut inner = self.lock();
        let _ = inner.total.add(h);
        inner.requests = inner.requests.saturating_add(requests);
        for (k, n) in errors {
            let e = inner.errors.entry(*k).or_default();
            *e = e.saturating_add(*n);
        }
        if let Some(slot) = inner.slot(second) {
            slot.requests = slot.requests.saturating_add(requests);
            let _ = slot.histogram.add(h);
        }
    }

    /// Adds one completed request (`None`: answered in `latency`; else
    /// failed with that kind): recorded in place, a constant cost.
    pub fn add_one(&self, result: Option<ErrorKind>, latency: Duration, now: Instant) {
        let second = self.second(now);
        let mut inner = self.lock();
        inner.requests = inner.requests.saturating_add(1);
        match result {
            None => crate::summary::record(&mut inner.total, latency),
            Some(kind) => *inner.errors.entry(kind).or_default() += 1,
        }
        if let Some(slot) = inner.slot(second) {
            slot.requests = slot.requests.saturating_add(1);
            if result.is_none() {
                crate::summary::record(&mut slot.histogram, latency);
            }
        }
    }

    /// Counts requests dropped (every connection busy) at `now`.
    pub fn dropped(&self, n: u64, now: Instant) {
        let second = self.second(now);
        let mut inner = self.lock();
        inner.dropped = inner.dropped.saturating_add(n);
        if let Some(slot) = inner.slot(second) {
            slot.dropped = slot.dropped.saturating_add(n);
        }
    }

    /// Failures so far, by kind.
    pub fn errors(&self) -> BTreeMap<ErrorKind, u64> {
        self.lock().errors.clone()
    }

    /// Every answer's latency so far.
    pub fn total(&self) -> Histogram<u64> {
        self.lock().total.clone()
    }

    /// The progress at `now`, as one line of at most [`MAX_LINE`] bytes:
    /// the histograms lose precision (3 → 2 → 1 significant digits) only
    /// if they must.
    pub fn line(&self, now: Instant) -> Result<String, SummaryError> {
        for digits in [3, 2, 1] {
            let line = self.snapshot_at(now, digits)?.to_line()?;
            if line.len() <= MAX_LINE {
                return Ok(line);
            }
        }
        Err(SummaryError::TooLarge)
    }

    /// The progress at `now`.
    pub fn snapshot(&self, now: Instant) -> Result<Progress, SummaryError> {
        self.snapshot_at(now, 3)
    }

    fn snapshot_at(&self, now: Instant, digits: u8) -> Result<Progress, SummaryError> {
        let second = self.second(now);
        let inner = self.lock();
        let window = RECENT.as_secs();
        let mut recent = histogram();
        let (mut recent_requests, mut recent_dropped) = (0u64, 0u64);
        for s in inner.slots.iter().filter(|s| s.second + window > second) {
            let _ = recent.add(&s.histogram);
            recent_requests = recent_requests.saturating_add(s.requests);
            recent_dropped = recent_dropped.saturating_add(s.dropped);
        }
        let elapsed = now.saturating_duration_since(self.started);
        Ok(Progress {
            elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            requests: inner.requests,
            errors: inner.errors.clone(),
            dropped: inner.dropped,
            hist: encode_at(&inner.total, digits)?,
            recent_requests,
            recent: encode_at(&recent, digits)?,
            recent_ms: u64::try_from(elapsed.min(RECENT).as_millis()).unwrap_or(u64::MAX),
            recent_dropped,
        })
    }

    /// Whether the operator asked the run to stop.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Sleeps until shortly before `due` (the caller's precise wait does
    /// the rest), waking at least every 250 ms to see the stop signal: a
    /// slow rate or a stage at rate 0 cannot hold a stopped run.
    pub async fn idle_until(&self, due: Instant) {
        const STEP: Duration = Duration::from_millis(250);
        while !self.stopped() {
            let left = due.saturating_duration_since(Instant::now());
            if left <= STEP {
                return;
            }
            tokio::time::sleep(STEP).await;
        }
    }
}

/// Prints a progress line every `every` until the task is dropped.
pub async fn report(live: std::sync::Arc<Live>, every: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match live.line(Instant::now()) {
            Ok(line) => println!("{line}"),
            Err(e) => eprintln!("warning: progress not reported: {e}"),
        }
    }
}

/// Watches the start file for "stop" (the operator's stop signal) until
/// the task is dropped.
pub async fn watch_stop(live: std::sync::Arc<Live>, file: std::path::PathBuf) {
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if tokio::fs::read_to_string(&file).await.is_ok_and(|s| s.trim() == "stop") {
            eprintln!("stop signal: ending the run");
            live.stop();
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::summary::record;

    fn answers(ms: &[u64]) -> Histogram<u64> {
        let mut h = histogram();
        for m in ms {
            record(&mut h, Duration::from_millis(*m));
        }
        h
    }

    #[test]
    fn the_recent_window_holds_the_last_ten_seconds_and_the_total_everything() {
        let t0 = Instant::now();
        let live = Live::new(t0);
        live.add(&answers(&[500]), 1, &BTreeMap::new(), t0);
        let errors = BTreeMap::from([(ErrorKind::Http5xx, 2)]);
        live.add(&answers(&[10, 10]), 4, &errors, t0 + Duration::from_secs(12));
        let p = live.snapshot(t0 + Duration::from_secs(15)).unwrap();
        assert_eq!((p.requests, p.error_count(), p.recent_requests, p.recent_ms), (5, 2, 4, 10_000));
        let m = MergedProgress::of(&[p]).unwrap();
        assert_eq!((m.histogram.len(), m.recent.len()), (3, 2));
        assert!(m.recent.max() < 20_000, "the 500 ms answer is older than the window");
        assert!((m.recent_rate() - 0.4).abs() < 1e-9);
    }

    #[test]
    fn slots_are_reused_and_bounded() {
        let t0 = Instant::now();
        let live = Live::new(t0);
        for s in 0..100 {
            live.add(&answers(&[1]), 1, &BTreeMap::new(), t0 + Duration::from_secs(s));
        }
        assert!(live.lock().slots.len() <= 10);
        live.dropped(3, t0 + Duration::from_secs(99));
        let p = live.snapshot(t0 + Duration::from_secs(99)).unwrap();
        assert_eq!((p.requests, p.recent_requests, p.dropped, p.recent_dropped), (100, 10, 3, 3));
        assert_eq!(live.snapshot(t0 + Duration::from_secs(120)).unwrap().recent_dropped, 0);
    }

    #[test]
    fn the_last_progress_line_of_a_log_is_read_and_others_skipped() {
        let live = Live::new(Instant::now());
        live.add_one(None, Duration::from_millis(3), Instant::now());
        live.add_one(Some(ErrorKind::Timeout), Duration::ZERO, Instant::now());
        let line = live.snapshot(Instant::now()).unwrap().to_line().unwrap();
        let log = format!("started after 1s\n{PROGRESS_PREFIX}{{\"bad\":1}}\n{line}\nwarning: something\n");
        let p = Progress::last_in(&log).unwrap().unwrap();
        assert_eq!((p.requests, p.error_count()), (2, 1));
        // A newer line cut short does not hide it.
        let cut = format!("{log}{}", &line[..line.len() / 2]);
        assert_eq!(Progress::last_in(&cut).unwrap().unwrap(), p);
        assert!(Progress::last_in("no progress here\n").is_none());
        assert!(Progress::last_in(&format!("{PROGRESS_PREFIX}{{\"bad\":1}}")).unwrap().is_err());
    }

    #[test]
    fn a_line_too_long_at_three_digits_loses_precision_not_its_place() {
        let t0 = Instant::now();
        let live = Live::new(t0);
        // Latencies spread over the whole range: every bucket its own count.
        let mut h = histogram();
        let mut x: u64 = 1;
        for i in 0..200_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            h.saturating_record_n(1 + (x >> 20) % 600_000_000, 1 + i % 7);
        }
        live.add(&h, 200_000, &BTreeMap::new(), t0);
        let full = live.snapshot(t0).unwrap().to_line().unwrap();
        assert!(full.len() > MAX_LINE, "the fixture fits at 3 digits: {}", full.len());
        let line = live.line(t0).unwrap();
        assert!(line.len() <= MAX_LINE);
        let p = Progress::last_in(&line).unwrap().unwrap();
        assert_eq!(MergedProgress::of(&[p]).unwrap().histogram.len(), h.len());
    }

    #[test]
    fn a_forged_histogram_is_refused_when_merged() {
        let live = Live::new(Instant::now());
        let mut p = live.snapshot(Instant::now()).unwrap();
        p.hist = "AAAA".into();
        assert!(MergedProgress::of(&[p]).is_err());
    }
}
