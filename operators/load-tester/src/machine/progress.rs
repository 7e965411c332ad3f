//! A run's progress while it is Executing: when the runners' logs are read
//! (at most every [`PROGRESS_EVERY`]), what `status.progress` then shows,
//! and with `thresholds.abortOnFail` whether the figures so far already
//! miss a threshold, which stops the runners. Pure.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use loadgen::progress::{MergedProgress, Progress as RunnerProgress};
use loadgen::summary::{Merged, Summary};

use crate::crd::{LoadTestSpec, Progress, Thresholds, Verdict};
use crate::results::{fmt, verdict};
use crate::runner::Runner;

use super::Step;

/// How often a run's progress is read (and status.progress written).
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Requests completed before abortOnFail judges anything.
pub const ABORT_AFTER: u64 = 100;
/// The longest `status.progress.message` (runners whose log could not be read).
const MAX_MESSAGE: usize = 1024;

/// The last lines of one runner's log, or why they could not be read.
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerLog {
    pub runner: String,
    pub log: Result<String, String>,
}

/// The current run's figures so far, as numbers (for the live metrics).
#[derive(Debug, Clone, PartialEq)]
pub struct Live {
    pub elapsed: Duration,
    pub requests: u64,
    pub errors: u64,
    /// Requests completed per second over the last 10 s.
    pub rate: f64,
    /// The last 10 s's answers' p99; None: no answer then.
    pub recent_p99: Option<Duration>,
}

/// The runners whose log is read: this run's, signalled, still running
/// (those that ended count with their summaries).
pub fn readable<'a>(mine: &[&'a Runner]) -> Vec<&'a Runner> {
    mine.iter().copied().filter(|r| r.signalled && r.running && r.terminated.is_none()).collect()
}

/// Whether the progress is due to be read at `now`.
pub fn due(step: &Step, now: Timestamp) -> bool {
    match step.status.progress.as_ref().and_then(|p| p.updated.as_ref()) {
        None => true,
        Some(t) => Duration::try_from(now.duration_since(t.0)).unwrap_or_default() >= PROGRESS_EVERY,
    }
}

/// Updates `status.progress` from the runners' logs; with abortOnFail and
/// a threshold missed, records why and asks every running runner to stop.
pub fn update(step: &mut Step, spec: &LoadTestSpec, logs: &[RunnerLog], mine: &[&Runner], now: Timestamp) {
    let mut merged = MergedProgress::empty();
    let mut unreadable = Vec::new();
    for l in logs {
        let found = match &l.log {
            Err(why) => Err(why.clone()),
            // No line yet: it has just started.
            Ok(text) => match RunnerProgress::last_in(text) {
                None => Ok(()),
                Some(Err(e)) => Err(e.to_string()),
                Some(Ok(p)) => merged.add(&p).map_err(|e| e.to_string()),
            },
        };
        if let Err(why) = found {
            unreadable.push(format!("{}: {why}", l.runner));
        }
    }
    // Runners that ended count with their summaries: the figures never
    // go back when one finishes before the others.
    for r in mine {
        let Some((0, _, summary)) = r.terminated.as_ref() else { continue };
        let added = Summary::parse(summary)
            .and_then(|s| RunnerProgress::of_summary(&s))
            .and_then(|p| merged.add(&p))
            .map_err(|e| e.to_string());
        if let Err(why) = added {
            unreadable.push(format!("{}: {why}", r.name));
        }
    }
    let mut message = unreadable.join("; ");
    if message.len() > MAX_MESSAGE {
        let cut = (0..=MAX_MESSAGE).rev().find(|i| message.is_char_boundary(*i)).unwrap_or(0);
        message.truncate(cut);
        message.push('…');
    }
    let previous = step.status.progress.take().unwrap_or_default();
    let answered = !merged.histogram.is_empty();
    let recent_p99 = (!merged.recent.is_empty()).then(|| Duration::from_micros(merged.recent.value_at_quantile(0.99)));
    let errors = merged.error_count();
    let mut progress = Progress {
        updated: Some(Time(now)),
        runners: i32::try_from(merged.runners).unwrap_or(i32::MAX),
        elapsed: fmt(merged.elapsed),
        requests: i64::try_from(merged.requests).unwrap_or(i64::MAX),
        errors: i64::try_from(errors).unwrap_or(i64::MAX),
        dropped: i64::try_from(merged.dropped).unwrap_or(i64::MAX),
        error_ratio: if merged.requests == 0 {
            String::new()
        } else {
            format!("{:.4}", errors as f64 / merged.requests as f64)
        },
        rate: format!("{:.1}", merged.recent_rate()),
        recent_p99: recent_p99.map(fmt).unwrap_or_default(),
        p99: if answered {
            fmt(Duration::from_micros(merged.histogram.value_at_quantile(0.99)))
        } else {
            String::new()
        },
        message,
        // Said once; the runners are told until they stop.
        aborted: previous.aborted,
        search_missed_at: previous.search_missed_at,
    };
    step.live = Some(Live {
        elapsed: merged.elapsed,
        requests: merged.requests,
        errors,
        rate: merged.recent_rate(),
        recent_p99,
    });
    // A capacity search ends at the first step whose held window misses.
    let search_over = match (spec.capacity(), spec.thresholds.as_ref()) {
        (Some(c), Some(t)) => crate::capacity::window_missed(
            c,
            t,
            // The step every runner has reached: one that started late
            // must not have its previous step blamed on this one.
            merged.shortest,
            merged.recent_window,
            &merged.recent,
            merged.recent_requests,
            merged.recent_dropped,
        ),
        _ => None,
    };
    if progress.aborted.is_empty()
        && let Some((rate, why)) = search_over
    {
        let why = format!("the step at {rate} requests/s: {why}");
        step.events.push((
            false,
            "CapacityReached",
            format!("run {}: {why}: the search ends, the runners are told to stop", step.status.run),
        ));
        progress.aborted = format!("capacity search over: {why}");
        progress.search_missed_at = Some(rate);
    }
    if progress.aborted.is_empty()
        && spec.capacity().is_none()
        && let Some(t) = spec.thresholds.as_ref().filter(|t| t.abort_on_fail)
        && let Some(why) = missed(t, merged)
    {
        step.events.push((
            true,
            "AbortedOnFail",
            format!(
                "run {}: {why} after {} requests: the runners are told to stop",
                step.status.run, progress.requests
            ),
        ));
        progress.aborted = why;
    }
    if !progress.aborted.is_empty() {
        // A runner not yet started is told to stop, not to start.
        step.signal.clear();
        step.stop = mine.iter().filter(|r| !r.stopping && r.terminated.is_none()).map(|r| r.name.clone()).collect();
    }
    step.status.progress = Some(progress);
}

/// The thresholds the figures so far miss (minRate aside), once enough
/// requests completed.
fn missed(t: &Thresholds, m: MergedProgress) -> Option<String> {
    if m.requests < ABORT_AFTER {
        return None;
    }
    let so_far = Merged {
        runners: m.runners,
        requests: m.requests,
        errors: m.errors,
        elapsed: m.elapsed,
        histogram: m.histogram,
        dropped: m.dropped,
        ..Merged::empty()
    };
    let judged = Thresholds { min_rate: None, ..t.clone() };
    match verdict(&so_far, Some(&judged)) {
        (Verdict::Failed, why) => Some(why),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeMap;
    use std::time::Instant;

    use super::*;
    use crate::crd::{LoadTestStatus, State};
    use loadgen::progress::Live as Counts;
    use loadgen::summary::{ErrorKind, histogram, record};

    fn log(answered_ms: &[u64], failed: u64) -> String {
        let t0 = Instant::now();
        let live = Counts::new(t0);
        let mut h = histogram();
        for ms in answered_ms {
            record(&mut h, Duration::from_millis(*ms));
        }
        let errors = if failed > 0 { BTreeMap::from([(ErrorKind::Http5xx, failed)]) } else { BTreeMap::new() };
        live.add(&h, answered_ms.len() as u64 + failed, &errors, t0);
        format!("started\n{}\n", live.snapshot(t0 + Duration::from_secs(5)).unwrap().to_line().unwrap())
    }

    fn runner(name: &str) -> Runner {
        Runner { name: name.into(), run: 1, signalled: true, running: true, ..Runner::default() }
    }

    fn executing() -> Step {
        Step { status: LoadTestStatus { run: 1, state: State::Executing, ..Default::default() }, ..Step::default() }
    }

    fn spec(thresholds: serde_json::Value) -> LoadTestSpec {
        serde_json::from_value(
            serde_json::json!({"replicas": 2, "test": {"serviceName": "web"}, "thresholds": thresholds}),
        )
        .unwrap()
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn progress_merges_every_runner_and_names_those_unreadable() {
        let (a, b, c) = (runner("t-r1-0"), runner("t-r1-1"), runner("t-r1-2"));
        let logs = vec![
            RunnerLog { runner: a.name.clone(), log: Ok(log(&[10; 60], 0)) },
            RunnerLog { runner: b.name.clone(), log: Ok(log(&[20; 30], 10)) },
            RunnerLog { runner: c.name.clone(), log: Err("the kubelet did not answer".into()) },
        ];
        let mut step = executing();
        update(&mut step, &spec(serde_json::json!({"p99": "1ms"})), &logs, &[&a, &b, &c], t(0));
        let p = step.status.progress.clone().unwrap();
        assert_eq!((p.runners, p.requests, p.errors, p.error_ratio.as_str()), (2, 100, 10, "0.1000"));
        // 100 requests in the 5 s the runners have run (the window so far).
        assert_eq!((p.rate.as_str(), p.aborted.as_str()), ("20.0", ""), "{p:?}");
        assert!(p.p99.starts_with("20."), "{}", p.p99);
        assert_eq!(p.message, "t-r1-2: the kubelet did not answer");
        assert!(step.stop.is_empty() && step.events.is_empty(), "no abortOnFail: nothing stops");
        let live = step.live.clone().unwrap();
        assert_eq!((live.requests, live.errors), (100, 10));
        // Read again 5 s later, not sooner.
        assert!(!due(&step, t(4)) && due(&step, t(5)));
    }

    #[test]
    fn abort_on_fail_stops_every_runner_once_a_threshold_is_missed_after_100_requests() {
        let (a, b) = (runner("t-r1-0"), runner("t-r1-1"));
        let abort = spec(serde_json::json!({"maxErrorRatio": 0.01, "minRate": 1e6, "abortOnFail": true}));
        let failing = |n| vec![RunnerLog { runner: a.name.clone(), log: Ok(log(&[5; 40], n)) }];
        // 50 requests, 10 failed: too few to judge.
        let mut step = executing();
        update(&mut step, &abort, &failing(10), &[&a, &b], t(0));
        assert_eq!(step.status.progress.as_ref().unwrap().aborted, "");
        // minRate alone is never judged early.
        let mut step = executing();
        update(&mut step, &abort, &failing(0), &[&a, &b], t(0));
        update(&mut step, &abort, &[RunnerLog { runner: a.name.clone(), log: Ok(log(&[5; 200], 0)) }], &[&a], t(5));
        assert!(step.stop.is_empty(), "{:?}", step.status.progress);
        // 160 requests, 120 failed: stopped, said once, asked until stopped.
        let mut step = executing();
        update(&mut step, &abort, &failing(120), &[&a, &b], t(0));
        let why = step.status.progress.as_ref().unwrap().aborted.clone();
        assert!(why.starts_with("error ratio 0.7500"), "{why}");
        assert_eq!(step.stop, vec![a.name.clone(), b.name.clone()]);
        assert_eq!(step.events.len(), 1);
        let stopping = Runner { stopping: true, ..a.clone() };
        let mut next = Step { status: step.status.clone(), ..Step::default() };
        update(&mut next, &abort, &failing(0), &[&stopping, &b], t(5));
        assert_eq!(next.status.progress.unwrap().aborted, why);
        assert_eq!((next.stop, next.events.len()), (vec![b.name.clone()], 0));
        // A latency threshold too.
        let slow = spec(serde_json::json!({"maxLatency": "100ms", "abortOnFail": true}));
        let mut step = executing();
        let logs = vec![RunnerLog { runner: a.name.clone(), log: Ok(log(&[[5].repeat(120), vec![900]].concat(), 0)) }];
        update(&mut step, &slow, &logs, &[&a], t(0));
        assert!(step.status.progress.unwrap().aborted.starts_with("max latency 900"));
    }

    #[test]
    fn a_runner_that_finished_counts_with_its_summary() {
        let a = runner("t-r1-0");
        let mut h = histogram();
        for _ in 0..30 {
            record(&mut h, Duration::from_millis(4));
        }
        let errors = BTreeMap::from([(ErrorKind::Timeout, 2)]);
        let summary = loadgen::summary::Summary::to_message(32, errors, 0, Duration::from_secs(9), &h).unwrap();
        let done = Runner { running: false, terminated: Some((0, "Completed".into(), summary)), ..runner("t-r1-1") };
        let logs = vec![RunnerLog { runner: a.name.clone(), log: Ok(log(&[5; 10], 0)) }];
        let mut step = executing();
        update(&mut step, &spec(serde_json::json!({})), &logs, &[&a, &done], t(0));
        let p = step.status.progress.unwrap();
        assert_eq!((p.runners, p.requests, p.errors, p.elapsed.as_str()), (2, 42, 2, "9.00s"), "{p:?}");
    }

    #[test]
    fn a_forged_progress_line_is_named_not_merged() {
        let a = runner("t-r1-0");
        let line = format!(
            "{}{{\"elapsedMs\":1,\"requests\":5,\"hist\":\"AAAA\",\"recentRequests\":1,\"recent\":\"AAAA\",\"recentMs\":1}}",
            loadgen::progress::PROGRESS_PREFIX
        );
        let mut step = executing();
        update(
            &mut step,
            &spec(serde_json::json!({})),
            &[RunnerLog { runner: a.name.clone(), log: Ok(line) }],
            &[&a],
            t(0),
        );
        let p = step.status.progress.unwrap();
        assert_eq!((p.runners, p.requests), (0, 0));
        assert!(p.message.starts_with("t-r1-0: "), "{}", p.message);
    }
}
