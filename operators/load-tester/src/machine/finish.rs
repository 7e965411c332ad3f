//! A run whose runners all ended: their summaries merged, judged against
//! the thresholds (a capacity search's steps each on its own, a run
//! stopped by abortOnFail failed), the baseline compared, Finished. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::crd::{LoadTestSpec, State, Verdict};
use crate::results::{merge, verdict};
use crate::runner::Runner;

use super::progress::RunnerLog;
use super::{Step, fail};

/// Merges the runners' summaries (`done`: every runner, exited 0; the
/// fuller ones in `logs` where they agree) into the results and the verdict.
pub(super) fn finished(step: &mut Step, spec: &LoadTestSpec, done: &[&&Runner], logs: &[RunnerLog], now: Timestamp) {
    let messages: Vec<(String, String)> = done
        .iter()
        .filter_map(|r| {
            r.terminated.as_ref().map(|(_, _, m)| (r.name.clone(), super::fuller::summary_of(&r.name, m, logs)))
        })
        .collect();
    let stages = spec.stages();
    let names: Vec<String> = spec.test.requests.iter().map(|r| r.name.clone()).collect();
    match merge(&messages, &stages, &names) {
        Err(e) => fail(step, now, "BadSummary", e),
        Ok((merged, results)) => {
            let s = &mut step.status;
            // The thresholds judge, and the baseline too when pinned.
            let aborted = s.progress.as_ref().map(|p| p.aborted.clone()).filter(|a| !a.is_empty());
            // What a stopped run did not send is no failure of its own.
            let judged = match aborted {
                Some(_) => loadgen::summary::Merged { not_sent: 0, ..merged.clone() },
                None => merged.clone(),
            };
            // A capacity search's whole-run figures mix its steps: only
            // the baseline judges them (the steps are judged below).
            let thresholds = match spec.capacity() {
                Some(_) => (Verdict::Passed, String::new()),
                None => verdict(&judged, spec.thresholds.as_ref()),
            };
            let max = spec.baseline.as_ref().map(|b| &b.max_regression);
            let (mut v, mut reason, mut why) = crate::baseline::judge(thresholds, s.baseline.as_mut(), max, &merged);
            let mut results = results;
            if let (Some(c), Some(t)) = (spec.capacity(), spec.thresholds.as_ref()) {
                // A capacity search: each step judged on its own; the
                // whole run's figures mix the steps and are not.
                let live = s.progress.as_ref().and_then(|p| {
                    // "capacity search over: the step at R requests/s: <why>"
                    let why = p.aborted.splitn(3, ": ").nth(2).unwrap_or(p.aborted.as_str());
                    p.search_missed_at.map(|at| (at, why))
                });
                let found = crate::capacity::result(c, t, &merged, live);
                let (cv, creason, cwhy) = crate::capacity::verdict_of(&found);
                (v, reason, why) = match reason {
                    // A baseline's regression still fails it.
                    "BaselineRegressed" => (Verdict::Failed, reason, format!("{cwhy}; {why}")),
                    _ => (cv, creason, cwhy),
                };
                results.capacity = Some(found);
            } else if let Some(aborted) = aborted {
                // Stopped early (abortOnFail): failed, whatever the rest says.
                (v, reason) = (Verdict::Failed, "AbortedOnFail");
                why = format!("stopped early, {aborted}; at the end: {why}");
            }
            s.state = State::Finished;
            s.verdict = v;
            s.completion_time = Some(Time(now));
            s.reason = reason.into();
            s.message = format!(
                "{} requests, {} errors, p99 {}: {why}",
                results.requests,
                merged.error_count(),
                results.latency.p99
            );
            let note = format!("run {} finished, verdict {v:?}: {}", s.run, s.message);
            if !results.saturated.is_empty() {
                let who = results.saturated.join("; ");
                step.events.push((true, "RunnerSaturated", format!("run {}: runners could not keep up: {who}", s.run)));
            }
            s.results = Some(results);
            step.events.push((v == Verdict::Failed, "Finished", note));
        }
    }
}
