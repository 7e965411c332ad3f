//! The load: `concurrency` workers, each sending `repeat` requests one
//! after another on a kept-alive connection (closed model), or — with a
//! rate — requests on a fixed schedule shared by the workers (open model),
//! each latency measured from its scheduled time so a slow server cannot
//! hide its queueing (coordinated omission; from when it went out when
//! that was earlier: [`crate::pace::sleep_until_due`]). Bounded by a per-request
//! timeout and the run's deadline. With a duration, the workers send until
//! it is over instead of a count, and the outcome covers exactly that
//! period.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::progress::Live;
use crate::scenario::Tallies;
use crate::send::Target;
use crate::summary::{ErrorKind, histogram, record};

/// What to send.
#[derive(Debug, Clone)]
pub struct Config {
    pub url: String,
    pub method: reqwest::Method,
    pub headers: Vec<(String, String)>,
    /// Headers whose values are secrets: marked sensitive, so no debug
    /// output of a request shows them.
    pub secret_headers: Vec<(String, String)>,
    /// Connect here (the URL's port) instead of resolving the URL's host.
    pub connect_to: Option<std::net::IpAddr>,
    /// Sent as is (bytes: a body from a file need not be text).
    pub body: Vec<u8>,
    /// Requests per worker.
    pub repeat: u64,
    /// Workers (connections).
    pub concurrency: u64,
    /// Per request.
    pub timeout: Duration,
    /// Requests per second for the whole runner; 0: as fast as answers come.
    pub rate: f64,
    /// The whole run.
    pub deadline: Duration,
    /// Send for this long instead of `repeat` requests per worker (ends
    /// sooner if `deadline` does).
    pub duration: Option<Duration>,
    /// An arrival-rate profile instead of all the above (see
    /// [`crate::stages`]); empty: none.
    pub stages: Vec<crate::schedule::Stage>,
    /// Connections a profile may use at once.
    pub max_connections: u64,
    /// How `https://` targets are trusted.
    pub tls: crate::send::Tls,
    /// HTTP/2: offered over TLS (the server chooses, by ALPN), spoken from
    /// the start to an `http://` target (h2c). Otherwise HTTP/1.1 only.
    pub http2: bool,
    /// What an answer must show to count as a success (default: not a 4xx
    /// or 5xx).
    pub checks: crate::check::Checks,
    /// Several weighted requests instead of the one above (`method`,
    /// `body` and `checks` then unused; the run's `headers` go first in
    /// each): see [`crate::scenario`]. Empty: the one request.
    pub scenario: Vec<crate::scenario::Variant>,
    /// Print a progress line this often ([`crate::progress`]); None: never.
    pub progress_every: Option<Duration>,
    /// The start file, watched for the operator's stop signal during the
    /// run; None: not watched.
    pub stop_file: Option<std::path::PathBuf>,
}

/// What a run measured.
#[derive(Debug)]
pub struct Outcome {
    pub requests: u64,
    pub errors: BTreeMap<ErrorKind, u64>,
    pub not_sent: u64,
    pub elapsed: Duration,
    /// Latencies of the requests that were answered without error.
    pub histogram: Histogram<u64>,
    /// An arrival-rate profile's dropped requests and stages, whether the
    /// runner kept up, whether the operator stopped it.
    pub staged: crate::summary::Staged,
}

/// How often a worker adds what it measured to the live figures.
const FLUSH: Duration = Duration::from_secs(1);

/// Runs the load and returns what it measured; meanwhile reports progress
/// and watches for the stop signal, as configured.
pub async fn run(cfg: Config) -> Result<Outcome, crate::send::BuildError> {
    // The client and the request, built once; each worker its own sender.
    let target = Arc::new(Target::new(&cfg)?);
    let live = Arc::new(Live::new(Instant::now()));
    let reporter = cfg.progress_every.map(|every| tokio::spawn(crate::progress::report(live.clone(), every)));
    let watcher = cfg.stop_file.clone().map(|f| tokio::spawn(crate::progress::watch_stop(live.clone(), f)));
    // A scenario's figures per request (none kept for a single request).
    let tallies = Arc::new(Tallies::new(if cfg.scenario.is_empty() { 0 } else { target.len() }));
    let mut outcome = if cfg.stages.is_empty() {
        workers(target, cfg, &live, &tallies).await
    } else {
        crate::stages::send(target, &cfg, &live, &tallies).await
    };
    outcome.staged.requests = tallies.outcomes();
    for task in reporter.into_iter().chain(watcher) {
        task.abort();
    }
    outcome.staged.stopped = live.stopped();
    Ok(outcome)
}

/// Adds a worker's measurements since its last flush to the live figures.
fn flush(
    live: &Live,
    local: &mut Histogram<u64>,
    completed: &mut u64,
    errors: &mut BTreeMap<ErrorKind, u64>,
    now: Instant,
) {
    live.add(local, std::mem::take(completed), &std::mem::take(errors), now);
    local.reset();
}

/// The closed model, or a fixed rate: `concurrency` workers.
async fn workers(target: Arc<Target>, cfg: Config, live: &Arc<Live>, tallies: &Arc<Tallies>) -> Outcome {
    // A fixed-time run has no count: the workers go on until its end.
    let total = match cfg.duration {
        Some(_) => u64::MAX,
        None => cfg.repeat.saturating_mul(cfg.concurrency),
    };
    let started = Instant::now();
    let window = cfg.duration.map_or(cfg.deadline, |d| d.min(cfg.deadline));
    let end = started + window;
    let fixed_time = cfg.duration.is_some();
    let next = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    // Open model: when requests went out, against the rate.
    let pace = (cfg.rate > 0.0).then(|| Arc::new(crate::pace::Pace::new(started, window)));
    let cfg = Arc::new(cfg);
    let mut workers = Vec::new();
    for worker in 0..cfg.concurrency {
        let (mut sender, cfg, next, sent, live, pace, tallies) =
            (target.sender(), cfg.clone(), next.clone(), sent.clone(), live.clone(), pace.clone(), tallies.clone());
        let target = target.clone();
        workers.push(tokio::spawn(async move {
            // Since the last flush to `live`.
            let mut local = histogram();
            let mut errors: BTreeMap<ErrorKind, u64> = BTreeMap::new();
            let mut completed = 0u64;
            let mut flush_at = Instant::now() + FLUSH;
            let mut free_at_due = false;
            loop {
                if live.stopped() {
                    break;
                }
                let now = Instant::now();
                if now >= flush_at {
                    flush(&live, &mut local, &mut completed, &mut errors, now);
                    flush_at = now + FLUSH;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                // Open model: request i is due at start + i/rate, and its
                // latency counts from then, not from when it went out.
                let due = if cfg.rate > 0.0 {
                    let due = started + Duration::from_secs_f64(i as f64 / cfg.rate);
                    if due >= end {
                        break;
                    }
                    // Only a request whose connection was free when it fell
                    // due tells whether the runner keeps up: one whose
                    // connection was still waiting for an answer is the
                    // server's slowness (its latency counts from `due`).
                    if let Some(p) = pace.as_ref().filter(|_| Instant::now() <= due) {
                        p.due(due);
                        free_at_due = true;
                    }
                    // What completed is not held back for a long wait.
                    if completed > 0 && due > Instant::now() + FLUSH {
                        flush(&live, &mut local, &mut completed, &mut errors, Instant::now());
                    }
                    live.idle_until(due).await;
                    if live.stopped() {
                        break;
                    }
                    crate::pace::sleep_until_due(due).await;
                    // From when it fell due; from when it went out if that
                    // was earlier (the timer wakes it up to a tick early).
                    due.min(Instant::now())
                } else {
                    Instant::now()
                };
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                // The run's end bounds the request when it comes first.
                let cut_by_end = left < cfg.timeout;
                sent.fetch_add(1, Ordering::Relaxed);
                if let Some(p) = pace.as_ref().filter(|_| std::mem::take(&mut free_at_due)) {
                    p.sent();
                }
                let k = target.pick(i);
                let result = sender.send(left.min(cfg.timeout), k).await;
                // A fixed-time run counts only what completed within its
                // period: an answer (or failure) after its end is dropped.
                if fixed_time && Instant::now() > end {
                    sent.fetch_sub(1, Ordering::Relaxed);
                    break;
                }
                match result {
                    None => {
                        let latency = due.elapsed();
                        record(&mut local, latency);
                        tallies.record(worker, k, None, latency);
                        completed += 1;
                    }
                    // Cut short by the run's end, not by its own timeout:
                    // no answer and no failure to count (as wrk does), so
                    // it is one more not sent.
                    Some(ErrorKind::Timeout) if cut_by_end && Instant::now() >= end => {
                        sent.fetch_sub(1, Ordering::Relaxed);
                    }
                    Some(kind) => {
                        *errors.entry(kind).or_default() += 1;
                        tallies.record(worker, k, Some(kind), Duration::ZERO);
                        completed += 1;
                    }
                }
            }
            flush(&live, &mut local, &mut completed, &mut errors, Instant::now());
        }));
    }
    for w in workers {
        let _ = w.await;
    }
    // A fixed-time run reports its period, not the moment its last worker
    // noticed the end.
    let elapsed = if fixed_time { started.elapsed().min(window) } else { started.elapsed() };
    let requests = sent.load(Ordering::Relaxed);
    Outcome {
        requests,
        errors: live.errors(),
        // Nothing was planned beyond the period: none is "not sent".
        not_sent: if fixed_time { 0 } else { total.saturating_sub(requests) },
        elapsed,
        histogram: live.total(),
        staged: crate::summary::Staged {
            strain: crate::pace::Strain {
                behind_seconds: pace.map_or(0, |p| p.behind_seconds(elapsed)),
                throttled_ms: 0,
            },
            ..Default::default()
        },
    }
}
