//! The LoadTest state machine: from the spec, the last status and the
//! runner pods as they are, the next status and what to do (create,
//! signal, delete). Pure; the controller only carries the actions out.
//!
//! ```text
//!  (new run: first sight, spec change, flotilla.dev/rerun)
//!        │  old runs' pods deleted, run += 1
//!        ▼
//!     Pending ──all runners Running──▶ Executing ──all exit 0──▶ Finished (verdict)
//!        │  Service missing / no ready endpoints        │
//!        │  runner cannot start, start timeout          │ runner fails, deadline
//!        └──────────────────────▶ Failed ◀──────────────┘
//! ```
//! A Failed run is never retried by itself.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::crd::{Cleanup, LoadTestSpec, LoadTestStatus, State, Verdict};
use crate::results::{merge, verdict};
use crate::runner::Runner;

/// Whether the target Service can take load (checked before a run starts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Ready,
    Missing,
    NoReadyEndpoints,
    /// Not looked at (not needed in this state).
    Unchecked,
}

/// What the controller must do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    pub status: LoadTestStatus,
    /// Runner indices of the current run to create.
    pub create: Vec<usize>,
    /// Runner pods to give the start signal.
    pub signal: Vec<String>,
    /// Runner pods to delete.
    pub delete: Vec<String>,
    /// Events: (warning, reason, note).
    pub events: Vec<(bool, &'static str, String)>,
    /// Look again at the latest then.
    pub requeue: Option<Duration>,
    /// The controller must check the target and step again.
    pub needs_target: bool,
}

/// Waiting reasons with which a runner never starts.
const CANNOT_START: [&str; 6] = [
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
];

fn since(t: Option<&Time>, now: Timestamp) -> Duration {
    t.map(|t| Duration::try_from(now.duration_since(t.0)).unwrap_or_default()).unwrap_or_default()
}

fn fail(step: &mut Step, now: Timestamp, reason: &'static str, message: String) {
    step.status.state = State::Failed;
    step.status.verdict = Verdict::None;
    step.status.completion_time = Some(Time(now));
    step.status.reason = reason.to_string();
    step.status.message = message.clone();
    step.events.push((true, reason, format!("run {} failed: {message}", step.status.run)));
}

/// Durations the spec holds, checked.
pub struct Limits {
    pub deadline: Duration,
    pub start_timeout: Duration,
}

/// What asks for a run: the spec's generation and the rerun annotation's
/// value. A change of either starts a new run.
pub struct Wanted<'a> {
    pub generation: i64,
    pub rerun: &'a str,
}

/// One step.
pub fn step(
    spec: &LoadTestSpec,
    limits: &Limits,
    wanted: &Wanted<'_>,
    old: Option<&LoadTestStatus>,
    runners: &[Runner],
    target: &Target,
    now: Timestamp,
) -> Step {
    let (generation, rerun) = (wanted.generation, wanted.rerun);
    let mut step = Step { status: old.cloned().unwrap_or_default(), ..Step::default() };
    let s = &mut step.status;
    let new_run = s.run == 0 || s.run_generation != generation || (!rerun.is_empty() && rerun != s.rerun);
    if new_run {
        let why = if s.run == 0 {
            "created".to_string()
        } else if s.run_generation != generation {
            "the spec changed".to_string()
        } else {
            format!("flotilla.dev/rerun is {rerun:?}")
        };
        *s = LoadTestStatus {
            observed_generation: s.observed_generation,
            conditions: s.conditions.clone(),
            run: s.run + 1,
            run_generation: generation,
            rerun: rerun.to_string(),
            start_time: Some(Time(now)),
            ..LoadTestStatus::default()
        };
        step.events.push((false, "RunStarted", format!("run {} started ({why})", step.status.run)));
    }
    let run = step.status.run;
    // Pods of other runs go, whatever the state.
    step.delete.extend(runners.iter().filter(|r| r.run != run && !r.terminating).map(|r| r.name.clone()));
    let mine: Vec<&Runner> = runners.iter().filter(|r| r.run == run).collect();
    step.status.children = i32::try_from(mine.len()).unwrap_or(i32::MAX);
    let replicas = usize::try_from(spec.replicas.max(1)).unwrap_or(1);

    match step.status.state {
        State::Pending => pending(&mut step, spec, limits, &mine, replicas, target, now),
        State::Executing => executing(&mut step, spec, limits, &mine, replicas, now),
        State::Finished | State::Failed => {}
    }
    if step.status.state.is_terminal() {
        let clean = match spec.cleanup {
            Cleanup::Always => true,
            Cleanup::OnSuccess => step.status.state == State::Finished && step.status.verdict != Verdict::Failed,
            Cleanup::Never => false,
        };
        // A failed run's runners stop at once, whatever the policy keeps:
        // those running (sending, or waiting for the signal) are deleted,
        // and those the scheduler never placed (no logs; left Pending they
        // would keep an autoscaler adding nodes for a dead run); those that
        // ended or could not start stay for `kubectl logs` and `describe`.
        let failed = step.status.state == State::Failed;
        for r in &mine {
            if !r.terminating && (clean || (failed && (r.running || r.unschedulable.is_some()))) {
                step.delete.push(r.name.clone());
            }
        }
    }
    step.delete.sort();
    step.delete.dedup();
    step
}

/// When the current run's runners stop sending (Unix seconds): before the
/// LoadTest's deadline by a grace (a tenth of it, at most 10 s), so every
/// runner has written its summary when the deadline comes.
pub fn runners_end(status: &LoadTestStatus, limits: &Limits) -> i64 {
    let start = status.start_time.as_ref().map_or(0, |t| t.0.as_second());
    let grace = (limits.deadline / 10).min(Duration::from_secs(10));
    start.saturating_add(i64::try_from(limits.deadline.saturating_sub(grace).as_secs()).unwrap_or(i64::MAX))
}

/// The run failed after its status was written because the API refused a
/// runner (quota, a policy, validation): Failed with the API's answer.
pub fn creation_refused(status: &mut LoadTestStatus, now: Timestamp, message: String) -> (bool, &'static str, String) {
    status.state = State::Failed;
    status.verdict = Verdict::None;
    status.completion_time = Some(Time(now));
    status.reason = "CreateFailed".into();
    status.message = message.clone();
    (true, "CreateFailed", format!("run {} failed: {message}", status.run))
}

fn runner_problem(r: &Runner) -> Option<String> {
    if let Some((reason, message)) = r.waiting.as_ref().filter(|(reason, _)| CANNOT_START.contains(&reason.as_str())) {
        return Some(format!("runner {}: {reason}: {message}", r.name));
    }
    if let Some((code, reason, message)) = r.terminated.as_ref().filter(|(code, ..)| *code != 0) {
        let tail: String = message.chars().rev().take(300).collect::<Vec<_>>().into_iter().rev().collect();
        return Some(format!("runner {}: {reason} (exit code {code}) {tail}", r.name).trim_end().to_string());
    }
    if r.phase == "Failed" {
        return Some(format!("runner {}: the pod failed", r.name));
    }
    None
}

fn pending(
    step: &mut Step,
    spec: &LoadTestSpec,
    limits: &Limits,
    mine: &[&Runner],
    replicas: usize,
    target: &Target,
    now: Timestamp,
) {
    if mine.is_empty() {
        // Before the first runner: can the target take load at all?
        let svc = &spec.test.service_name;
        match target {
            Target::Unchecked => {
                step.needs_target = true;
                return;
            }
            Target::Missing => {
                return fail(step, now, "ServiceNotFound", format!("Service {svc} does not exist in this namespace"));
            }
            Target::NoReadyEndpoints => {
                return fail(step, now, "NoReadyEndpoints", format!("Service {svc} has no ready endpoints"));
            }
            Target::Ready => {}
        }
    }
    if let Some(problem) = mine.iter().find_map(|r| runner_problem(r)) {
        return fail(step, now, "RunnerFailed", problem);
    }
    let present: Vec<usize> = mine.iter().filter_map(|r| r.index).collect();
    step.create = (0..replicas).filter(|i| !present.contains(i)).collect();
    let running = mine.iter().filter(|r| r.running && r.index.is_some_and(|i| i < replicas)).count();
    if step.create.is_empty() && running >= replicas {
        step.signal = mine.iter().filter(|r| !r.signalled).map(|r| r.name.clone()).collect();
        step.status.state = State::Executing;
        step.status.executing_time = Some(Time(now));
        step.events.push((
            false,
            "Executing",
            format!("run {}: all {replicas} runners running, start signal given", step.status.run),
        ));
        step.requeue = Some(limits.deadline.saturating_sub(since(step.status.start_time.as_ref(), now)));
        return;
    }
    let waited = since(step.status.start_time.as_ref(), now);
    if waited >= limits.start_timeout {
        // Unschedulable is not fatal before the timeout (an autoscaler may
        // add a node, a new node loses its not-ready taint); past it, it is
        // the runner failure to report.
        if let Some((name, msg)) = unschedulable(mine) {
            let timeout = limits.start_timeout;
            return fail(
                step,
                now,
                "RunnerFailed",
                format!("runner {name}: still Unschedulable at startTimeout ({timeout:?}): {msg}"),
            );
        }
        return fail(
            step,
            now,
            "StartTimeout",
            format!("{running} of {replicas} runners running after {:?} (startTimeout)", limits.start_timeout),
        );
    }
    // Why the run waits, while it does (kubectl get -o yaml, describe).
    step.status.message = match unschedulable(mine) {
        Some((name, msg)) => format!("runner {name}: Unschedulable (waiting up to startTimeout): {msg}"),
        None => String::new(),
    };
    step.requeue = Some(limits.start_timeout - waited);
}

/// The first runner the scheduler cannot place, and its message.
fn unschedulable<'a>(mine: &[&'a Runner]) -> Option<(&'a str, &'a str)> {
    mine.iter().find_map(|r| Some((r.name.as_str(), r.unschedulable.as_deref()?)))
}

fn executing(step: &mut Step, spec: &LoadTestSpec, limits: &Limits, mine: &[&Runner], replicas: usize, now: Timestamp) {
    if let Some(problem) = mine.iter().find_map(|r| runner_problem(r)) {
        return fail(step, now, "RunnerFailed", problem);
    }
    if mine.len() < replicas {
        return fail(
            step,
            now,
            "RunnerLost",
            format!("{} of {replicas} runner pods exist: a runner was deleted during the run", mine.len()),
        );
    }
    let done: Vec<&&Runner> = mine.iter().filter(|r| r.terminated.as_ref().is_some_and(|(c, ..)| *c == 0)).collect();
    if done.len() >= replicas {
        let messages: Vec<(String, String)> =
            done.iter().filter_map(|r| r.terminated.as_ref().map(|(_, _, m)| (r.name.clone(), m.clone()))).collect();
        match merge(&messages) {
            Err(e) => fail(step, now, "BadSummary", e),
            Ok((merged, results)) => {
                let (v, why) = verdict(&merged, spec.thresholds.as_ref());
                let s = &mut step.status;
                s.state = State::Finished;
                s.verdict = v;
                s.completion_time = Some(Time(now));
                s.reason = match v {
                    Verdict::Failed => "ThresholdsMissed".into(),
                    Verdict::Passed => "ThresholdsMet".into(),
                    Verdict::None => "Finished".into(),
                };
                s.message = format!(
                    "{} requests, {} errors, p99 {}: {why}",
                    results.requests,
                    merged.error_count(),
                    results.latency.p99
                );
                let note = format!("run {} finished, verdict {v:?}: {}", s.run, s.message);
                s.results = Some(results);
                step.events.push((v == Verdict::Failed, "Finished", note));
            }
        }
        return;
    }
    let elapsed = since(step.status.start_time.as_ref(), now);
    if elapsed >= limits.deadline {
        return fail(
            step,
            now,
            "DeadlineExceeded",
            format!("{} of {replicas} runners done after {:?} (deadline)", done.len(), limits.deadline),
        );
    }
    // A signal that did not land last time is given again.
    step.signal = mine.iter().filter(|r| !r.signalled && r.terminated.is_none()).map(|r| r.name.clone()).collect();
    step.requeue = Some(limits.deadline - elapsed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(replicas: i32) -> LoadTestSpec {
        serde_json::from_value(json!({"replicas": replicas, "test": {"serviceName": "nginx"}}))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    const L: Limits = Limits { deadline: Duration::from_secs(600), start_timeout: Duration::from_secs(120) };

    fn runner(run: i64, i: usize) -> Runner {
        Runner { name: format!("t-r{run}-{i}"), run, index: Some(i), phase: "Pending".into(), ..Runner::default() }
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn a_new_test_checks_its_target_then_creates_every_runner() {
        let s = spec(3);
        let first = step(&s, &L, &Wanted { generation: 1, rerun: "" }, None, &[], &Target::Unchecked, t(0));
        assert!(first.needs_target && first.create.is_empty());
        assert_eq!((first.status.run, first.status.state), (1, State::Pending));
        let go = step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&first.status), &[], &Target::Ready, t(0));
        assert_eq!(go.create, [0, 1, 2]);
        let missing =
            step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&first.status), &[], &Target::Missing, t(0));
        assert_eq!((missing.status.state, missing.status.reason.as_str()), (State::Failed, "ServiceNotFound"));
        let none = step(
            &s,
            &L,
            &Wanted { generation: 1, rerun: "" },
            Some(&first.status),
            &[],
            &Target::NoReadyEndpoints,
            t(0),
        );
        assert_eq!(none.status.reason, "NoReadyEndpoints");
    }

    #[test]
    fn runners_start_together_once_all_run_and_results_are_merged() {
        let s = spec(2);
        let pending = step(&s, &L, &Wanted { generation: 1, rerun: "" }, None, &[], &Target::Ready, t(0)).status;
        let mut rs = vec![runner(1, 0), runner(1, 1)];
        rs[0].running = true;
        let st = step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&pending), &rs, &Target::Unchecked, t(5));
        assert_eq!(st.status.state, State::Pending);
        assert!(st.signal.is_empty(), "no signal until every runner runs");
        rs[1].running = true;
        let st = step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&pending), &rs, &Target::Unchecked, t(6));
        assert_eq!(st.status.state, State::Executing);
        assert_eq!(st.signal, ["t-r1-0", "t-r1-1"]);
        let executing = st.status;
        let msg = loadgen::summary::Summary::to_message(10, Default::default(), 0, Duration::from_secs(1), &{
            let mut h = loadgen::summary::histogram();
            for _ in 0..10 {
                loadgen::summary::record(&mut h, Duration::from_millis(3));
            }
            h
        })
        .unwrap_or_default();
        for r in &mut rs {
            r.running = false;
            r.signalled = true;
            r.terminated = Some((0, "Completed".into(), msg.clone()));
        }
        let done = step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&executing), &rs, &Target::Unchecked, t(9));
        assert_eq!((done.status.state, done.status.verdict), (State::Finished, Verdict::None));
        assert_eq!(done.status.results.as_ref().map(|r| r.requests), Some(20));
        // OnSuccess: the runners go, the results stay.
        assert_eq!(done.delete, ["t-r1-0", "t-r1-1"]);
    }

    #[test]
    fn a_runner_that_cannot_start_fails_the_run_with_its_reason_and_keeps_the_pods() {
        let s = spec(2);
        let pending = step(&s, &L, &Wanted { generation: 1, rerun: "" }, None, &[], &Target::Ready, t(0)).status;
        let mut rs = vec![runner(1, 0), runner(1, 1)];
        rs[1].waiting = Some(("ImagePullBackOff".into(), "not found".into()));
        let st = step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&pending), &rs, &Target::Unchecked, t(3));
        assert_eq!((st.status.state, st.status.reason.as_str()), (State::Failed, "RunnerFailed"));
        assert!(st.status.message.contains("t-r1-1: ImagePullBackOff"), "{}", st.status.message);
        assert!(st.delete.is_empty(), "OnSuccess keeps a failed run's pods");
        // Terminal: nothing more happens, even much later.
        let later =
            step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&st.status), &rs, &Target::Unchecked, t(3000));
        assert_eq!(later.status, st.status);
        assert!(later.create.is_empty() && later.events.is_empty());
    }

    #[test]
    fn start_timeout_and_deadline_fail_the_run() {
        let s = spec(1);
        let pending = step(&s, &L, &Wanted { generation: 1, rerun: "" }, None, &[], &Target::Ready, t(0)).status;
        let rs = vec![runner(1, 0)];
        let st = step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&pending), &rs, &Target::Unchecked, t(60));
        assert_eq!((st.status.state, st.requeue), (State::Pending, Some(Duration::from_secs(60))));
        let mut rs = rs;
        rs[0].unschedulable = Some("0/3 nodes are available: 3 Insufficient cpu.".into());
        let st = step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&pending), &rs, &Target::Unchecked, t(60));
        assert_eq!(st.status.state, State::Pending, "unschedulable waits: an autoscaler may add a node");
        assert!(st.status.message.contains("t-r1-0: Unschedulable (waiting"), "{}", st.status.message);
        assert!(st.delete.is_empty());
        let st = step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&pending), &rs, &Target::Unchecked, t(121));
        assert_eq!(st.status.reason, "RunnerFailed", "past startTimeout, unschedulable is the runner's failure");
        assert_eq!(
            st.status.message,
            "runner t-r1-0: still Unschedulable at startTimeout (120s): 0/3 nodes are available: 3 Insufficient cpu."
        );
        assert_eq!(st.delete, ["t-r1-0"], "a runner never placed has no logs to keep: it goes");
        rs[0].unschedulable = None;
        let st = step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&pending), &rs, &Target::Unchecked, t(121));
        assert_eq!(st.status.reason, "StartTimeout");
        let mut running = rs.clone();
        running[0].running = true;
        let exec =
            step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&pending), &running, &Target::Unchecked, t(10))
                .status;
        running[0].signalled = true;
        let st = step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&exec), &running, &Target::Unchecked, t(601));
        assert_eq!(st.status.reason, "DeadlineExceeded");
        assert_eq!(st.delete, ["t-r1-0"], "a runner past the deadline is stopped");
    }

    #[test]
    fn a_spec_change_or_rerun_starts_a_new_run_and_removes_the_old_pods() {
        let s = spec(1);
        let mut done = step(&s, &L, &Wanted { generation: 1, rerun: "" }, None, &[], &Target::Ready, t(0)).status;
        done.state = State::Finished;
        let old = vec![runner(1, 0)];
        let same = step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&done), &old, &Target::Unchecked, t(5));
        assert_eq!(same.status.run, 1);
        let changed = step(&s, &L, &Wanted { generation: 2, rerun: "" }, Some(&done), &old, &Target::Unchecked, t(5));
        assert_eq!((changed.status.run, changed.status.state), (2, State::Pending));
        assert_eq!(changed.delete, ["t-r1-0"]);
        assert!(changed.needs_target);
        let rerun =
            step(&s, &L, &Wanted { generation: 1, rerun: "again" }, Some(&done), &old, &Target::Unchecked, t(5));
        assert_eq!(rerun.status.run, 2);
        assert!(rerun.events.iter().any(|(_, r, n)| *r == "RunStarted" && n.contains("again")));
    }

    #[test]
    fn a_runner_exiting_non_zero_fails_the_run() {
        let s = spec(2);
        let pending = step(&s, &L, &Wanted { generation: 1, rerun: "" }, None, &[], &Target::Ready, t(0)).status;
        let mut rs = vec![runner(1, 0), runner(1, 1)];
        for r in &mut rs {
            r.running = true;
        }
        let exec =
            step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&pending), &rs, &Target::Unchecked, t(1)).status;
        rs[0].running = false;
        rs[0].terminated = Some((137, "OOMKilled".into(), String::new()));
        let st = step(&s, &L, &Wanted { generation: 1, rerun: "" }, Some(&exec), &rs, &Target::Unchecked, t(2));
        assert_eq!(st.status.reason, "RunnerFailed");
        assert!(st.status.message.contains("OOMKilled (exit code 137)"), "{}", st.status.message);
        // The other runner stops sending; the failed one stays for its logs.
        assert_eq!(st.delete, ["t-r1-1"]);
    }

    #[test]
    fn runners_end_before_the_deadline_by_a_grace() {
        let s = spec(1);
        let st = step(&s, &L, &Wanted { generation: 1, rerun: "" }, None, &[], &Target::Ready, t(0)).status;
        // 600 s deadline: the runners stop at 590 s.
        assert_eq!(runners_end(&st, &L), 1_800_000_000 + 590);
        let short = Limits { deadline: Duration::from_secs(10), start_timeout: Duration::from_secs(5) };
        assert_eq!(runners_end(&st, &short), 1_800_000_000 + 9);
    }
}
