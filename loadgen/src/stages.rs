//! Sending an arrival-rate profile (open model, k6's
//! ramping-arrival-rate): one scheduler sends request i at the time the
//! [`Schedule`] gives it, on any free connection of at most
//! `max_connections`; its latency counts from that scheduled time, not from
//! when it went out (no coordinated omission), unless it went out earlier
//! ([`crate::pace::sleep_until_due`]). A request due while every
//! connection is busy is counted as dropped, never sent late to make up.
//! The outcome covers the profile's length (or the deadline, if that comes
//! first): requests due after it are not sent, and requests still in
//! flight at the deadline count as not sent.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hdrhistogram::Histogram;
use tokio::sync::Semaphore;

use crate::progress::Live;
use crate::run::{Config, Outcome};
use crate::scenario::Tallies;
use crate::schedule::Schedule;
use crate::send::{Sender, Target};
use crate::summary::{ErrorKind, StageOutcome, Staged, histogram, record};

/// What the requests in flight report back.
struct Tally {
    stages: Vec<StageOutcome>,
    errors: BTreeMap<ErrorKind, u64>,
    /// Sent and neither answered nor failed yet (a stage counts its
    /// requests when they complete).
    in_flight: u64,
    /// Cut short by the deadline.
    cut: u64,
    /// Past the deadline: nothing more is recorded.
    closed: bool,
}

impl Tally {
    fn stage(&mut self, k: usize) -> Option<&mut StageOutcome> {
        self.stages.get_mut(k)
    }
}

fn lock(t: &Mutex<Tally>) -> std::sync::MutexGuard<'_, Tally> {
    // A panicking request task cannot leave the counts half-written.
    t.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn pop(idle: &Mutex<Vec<Sender>>) -> Option<Sender> {
    idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop()
}

fn push(idle: &Mutex<Vec<Sender>>, sender: Sender) {
    idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(sender);
}

/// Sends `cfg.stages` to `target`, each request on a free connection's
/// sender (its own connection, kept between requests).
pub(crate) async fn send(target: Arc<Target>, cfg: &Config, live: &Arc<Live>, tallies: &Arc<Tallies>) -> Outcome {
    let schedule = Schedule::new(&cfg.stages);
    let started = Instant::now();
    let hard_end = started + cfg.deadline;
    let window = schedule.length().min(cfg.deadline);
    let end = started + window;
    let connections = usize::try_from(cfg.max_connections.max(1)).unwrap_or(usize::MAX).min(Semaphore::MAX_PERMITS);
    let permits = Arc::new(Semaphore::new(connections));
    // One sender per connection: a permit taken is a sender free (each
    // opens its connection when first used).
    let idle: Arc<Mutex<Vec<Sender>>> = Arc::new(Mutex::new((0..connections).map(|_| target.sender()).collect()));
    let tally = Arc::new(Mutex::new(Tally {
        stages: (0..cfg.stages.len())
            .map(|_| StageOutcome { requests: 0, errors: 0, dropped: 0, histogram: histogram() })
            .collect(),
        errors: BTreeMap::new(),
        in_flight: 0,
        cut: 0,
        closed: false,
    }));
    let total = schedule.total();
    let mut not_sent = 0u64;
    // Requests dispatched, by when due and when sent: a dispatcher starved
    // of CPU sends late (dropped requests are the connections' limit, not
    // the runner's, and count apart).
    let pace = crate::pace::Pace::new(started, window);
    let mut picked = 0u64;
    for i in 0..total {
        // The operator's stop signal: the rest is not sent.
        if live.stopped() {
            not_sent = total - i;
            break;
        }
        let Some((at, k)) = schedule.due(i) else { break };
        let due = started + at;
        if due >= end {
            // The deadline came before the profile's end.
            not_sent = total - i;
            break;
        }
        live.idle_until(due).await;
        if live.stopped() {
            not_sent = total - i;
            break;
        }
        crate::pace::sleep_until_due(due).await;
        // Woken up to a tick early: a connection freed by `due` still
        // takes the request.
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                tokio::time::timeout_at(due.into(), permits.clone().acquire_owned()).await.ok().and_then(Result::ok)
            }
        };
        let Some(permit) = permit else {
            if let Some(s) = lock(&tally).stage(k) {
                s.dropped += 1;
            }
            live.dropped(1, Instant::now());
            continue;
        };
        let left = hard_end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            not_sent = total - i;
            break;
        }
        pace.due(due);
        pace.sent();
        let cut_by_end = left < cfg.timeout;
        let timeout = left.min(cfg.timeout);
        lock(&tally).in_flight += 1;
        let (target, idle, tally, live, tallies) =
            (target.clone(), idle.clone(), tally.clone(), live.clone(), tallies.clone());
        // The mix counts what is sent: a dropped request does not move it
        // on (else one request could be the one always dropped).
        let request = target.pick(picked);
        picked += 1;
        // From when it fell due; from now if that is earlier (the timer
        // wakes the scheduler up to a tick early).
        let start = due.min(Instant::now());
        tokio::spawn(async move {
            let mut sender = pop(&idle).unwrap_or_else(|| target.sender());
            let result = sender.send(timeout, request).await;
            let latency = start.elapsed();
            push(&idle, sender);
            let mut t = lock(&tally);
            if t.closed {
                return;
            }
            t.in_flight -= 1;
            let cut = matches!(result, Some(ErrorKind::Timeout) if cut_by_end && Instant::now() >= hard_end);
            match result {
                None => {
                    if let Some(s) = t.stage(k) {
                        s.requests += 1;
                        record(&mut s.histogram, latency);
                    }
                    tallies.record(i, request, None, latency);
                }
                Some(ErrorKind::Timeout) if cut => t.cut += 1,
                Some(kind) => {
                    tallies.record(i, request, Some(kind), latency);
                    *t.errors.entry(kind).or_default() += 1;
                    if let Some(s) = t.stage(k) {
                        s.requests += 1;
                        s.errors += 1;
                    }
                }
            }
            drop(t);
            // The live figures, outside the tally's lock.
            if !cut {
                live.add_one(result, latency, Instant::now());
            }
            drop(permit);
        });
    }
    // Every connection free again: nothing in flight. Or the deadline.
    let all = u32::try_from(connections).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout_at(hard_end.into(), permits.acquire_many(all)).await;
    let mut t = lock(&tally);
    t.closed = true;
    // In flight at the deadline, or cut short by it: sent, but neither
    // answered nor failed.
    let unfinished = t.in_flight + t.cut;
    let mut whole: Histogram<u64> = histogram();
    for s in &t.stages {
        let _ = whole.add(&s.histogram);
    }
    let sent: u64 = t.stages.iter().map(|s| s.requests).sum();
    let dropped = t.stages.iter().map(|s| s.dropped).sum();
    Outcome {
        requests: sent,
        errors: std::mem::take(&mut t.errors),
        not_sent: not_sent + unfinished,
        // Stopped: the time it ran.
        elapsed: if live.stopped() { started.elapsed().min(window) } else { window },
        histogram: whole,
        staged: Staged {
            dropped,
            stages: std::mem::take(&mut t.stages),
            strain: crate::pace::Strain { behind_seconds: pace.behind_seconds(window), throttled_ms: 0 },
            stopped: false,
            requests: Vec::new(),
        },
    }
}
