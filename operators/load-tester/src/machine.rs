//! The LoadTest state machine: from the spec, the last status, the runner
//! pods as they are and the target Service as it is, the next status and
//! what to do (create, signal, delete). Pure; the controller only carries
//! the actions out.
//!
//! ```text
//!  (new run: first sight, spec change, flotilla.dev/rerun — a rerun waits
//!   out --min-rerun-interval since the last start: RerunTooSoon)
//!        │  old runs' pods deleted, run += 1
//!        ▼
//!     Pending ──all runners Running──▶ Executing ──all exit 0──▶ Finished (verdict)
//!        │  Service missing / not a cluster IP /        │
//!        │  no ready endpoints, no room for the         │ runner fails, deadline,
//!        │  runners (TooManyRunners) past startTimeout, │ Service changed
//!        │  runner cannot start, start timeout,         │
//!        │  Service changed                             │
//!        └──────────────────────▶ Failed ◀──────────────┘
//! ```
//! A Failed run is never retried by itself. With `spec.schedule` a run
//! starts only at the times the schedule names (once the current run has
//! ended) or on a new rerun annotation — not on creation or a spec change
//! ([`crate::schedule`]). Every ended run is summed up in `status.history`.
//!
//! | file | what it holds |
//! | --- | --- |
//! | `machine/step.rs` | a step's inputs and outputs (`Seen`, `Need`, `Step`) |
//! | `machine/runs.rs` | when a run starts, and the history |
//! | `machine/limits.rs` | the operator's bounds on a run |
//! | `machine/target.rs` | the target Service pinned and watched |
//! | `machine/finish.rs` | a run whose runners all ended: merged, judged, Finished |
//! | `machine/fuller.rs` | the fuller summaries in ended runners' logs, taken where they agree |
//! | `machine/progress.rs` | a run's progress while Executing, abortOnFail |

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::crd::{Cleanup, LoadTestSpec, LoadTestStatus, State, Verdict};
use crate::runner::{Runner, Window};

mod finish;
mod fuller;
mod limits;
mod progress;
mod runs;
mod step;
mod target;
pub use limits::{DURATION_SLACK, Limits};
pub use progress::{Live, PROGRESS_EVERY, RunnerLog};
pub use runs::{Wanted, record_ended};
use runs::{new_run_why, note_schedule, record_superseded, wait_for_schedule};
pub use step::{Need, Seen, Step};
pub use target::{ServiceView, Target};
use target::{changed, pin};

/// Waiting reasons with which a runner never starts.
const CANNOT_START: [&str; 6] = [
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// How often a run waiting for room in its namespace looks again (the
/// other tests' pods going away does not wake it).
pub const ROOM_RECHECK: Duration = Duration::from_secs(5);

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

/// Whether the Ready condition of `old` already has `reason` (a wait that
/// goes on is said once, not on every look).
fn already(old: Option<&LoadTestStatus>, reason: &str) -> bool {
    old.is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.reason == reason))
}

/// One step: the run's, then the baseline saved if asked.
pub fn step(
    spec: &LoadTestSpec,
    limits: &Limits,
    wanted: &Wanted<'_>,
    old: Option<&LoadTestStatus>,
    seen: &Seen<'_>,
    now: Timestamp,
) -> Step {
    // A run that has ended is saved before a new run (asked in the same
    // edit) replaces it in status; the status is copied only then.
    let mut before = old.filter(|o| crate::baseline::pending(o, wanted.save_baseline)).cloned();
    let early = before.as_mut().and_then(|o| crate::baseline::save(wanted.name, o, wanted.save_baseline, now));
    let mut step = run_step(spec, limits, wanted, before.as_ref().or(old), seen, now);
    step.events.extend(early);
    // Not while the step waits for something to look at: it is made again.
    if step.needs.is_none()
        && let Some(event) = crate::baseline::save(wanted.name, &mut step.status, wanted.save_baseline, now)
    {
        step.events.push(event);
    }
    step
}

/// The run's step.
fn run_step(
    spec: &LoadTestSpec,
    limits: &Limits,
    wanted: &Wanted<'_>,
    old: Option<&LoadTestStatus>,
    seen: &Seen<'_>,
    now: Timestamp,
) -> Step {
    let (generation, rerun) = (wanted.generation, wanted.rerun);
    let mut step = Step { status: old.cloned().unwrap_or_default(), ..Step::default() };
    let s = &mut step.status;
    note_schedule(s, limits, wanted.created, now);
    if let Some(why) = new_run_why(limits, wanted, s, now) {
        // A rerun (not the first run) waits until --min-rerun-interval has
        // passed since the last start: a stream of spec edits or rerun
        // annotations cannot churn pods. The current run goes on meanwhile.
        let last = since(s.start_time.as_ref(), now);
        if s.run > 0 && last < limits.min_rerun_interval {
            let wait = limits.min_rerun_interval - last;
            let at = s.start_time.as_ref().map_or(now, |t| t.0.checked_add(limits.min_rerun_interval).unwrap_or(t.0));
            let message = format!(
                "run {} ({why}) starts at {at}: --min-rerun-interval ({:?}) after run {} started",
                s.run + 1,
                limits.min_rerun_interval,
                s.run
            );
            if !already(old, "RerunTooSoon") {
                step.events.push((true, "RerunTooSoon", message.clone()));
            }
            step.waiting = Some(("RerunTooSoon", message));
            current_run(&mut step, spec, limits, seen, now);
            record_ended(&mut step.status);
            step.requeue = Some(step.requeue.map_or(wait, |r| r.min(wait)));
            return step;
        }
        // The baseline is pinned as the run starts: this test's previous
        // run (still in status), or another's, looked at first.
        let baseline = match &spec.baseline {
            None => None,
            Some(b) if b.load_test_ref == wanted.name => Some(crate::baseline::offered(wanted.name, Some(s))),
            Some(_) => match seen.baseline {
                Some(pinned) => Some(pinned.clone()),
                None => {
                    step.needs = Some(Need::Baseline);
                    return step;
                }
            },
        };
        // The ended run is in the history even if no step saw it end (an
        // operator before history, a status written by the refusal path);
        // one still going is replaced, and said so.
        record_ended(s);
        record_superseded(s, now);
        *s = LoadTestStatus {
            observed_generation: s.observed_generation,
            conditions: s.conditions.clone(),
            run: s.run + 1,
            run_generation: generation,
            rerun: rerun.to_string(),
            start_time: Some(Time(now)),
            history: std::mem::take(&mut s.history),
            schedule: std::mem::take(&mut s.schedule),
            schedule_since: s.schedule_since.take(),
            baseline,
            saved_baseline: s.saved_baseline.take(),
            next_run_time: limits.schedule.as_ref().and_then(|sch| sch.next_after(now)).map(Time),
            ..LoadTestStatus::default()
        };
        step.events.push((false, "RunStarted", format!("run {} started ({why})", step.status.run)));
    } else if let Some(schedule) = &limits.schedule
        && wait_for_schedule(&mut step, wanted, schedule, now)
    {
        return step;
    }
    current_run(&mut step, spec, limits, seen, now);
    record_ended(&mut step.status);
    step
}

/// The current run's step.
fn current_run(step: &mut Step, spec: &LoadTestSpec, limits: &Limits, seen: &Seen<'_>, now: Timestamp) {
    let run = step.status.run;
    // Pods of other runs go, whatever the state.
    step.delete.extend(seen.runners.iter().filter(|r| r.run != run && !r.terminating).map(|r| r.name.clone()));
    let mine: Vec<&Runner> = seen.runners.iter().filter(|r| r.run == run).collect();
    step.status.children = i32::try_from(mine.len()).unwrap_or(i32::MAX);
    let replicas = usize::try_from(spec.replicas.max(1)).unwrap_or(1);

    match step.status.state {
        State::Pending => pending(step, spec, limits, &mine, replicas, seen, now),
        State::Executing => executing(step, spec, limits, &mine, replicas, seen, now),
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
}

/// When the current run's runners must be done: they stop sending (Unix
/// seconds) before the run's deadline by a grace (a tenth of it, at least
/// 5 s — a quarter of a deadline under 20 s — and at most 10 s), so every
/// runner has written its summary, and the kubelet reported it ended, when
/// the deadline comes. A tenth alone left 2 s of a 20 s deadline: a busy
/// node's kubelet reports a container's end seconds late.
pub fn runners_window(status: &LoadTestStatus, limits: &Limits) -> Window {
    let start = status.start_time.as_ref().map_or(0, |t| t.0.as_second());
    let deadline = limits.run_deadline();
    let floor = Duration::from_secs(5).min(deadline / 4);
    let grace = (deadline / 10).max(floor).min(Duration::from_secs(10));
    Window {
        end_at: start.saturating_add(i64::try_from(deadline.saturating_sub(grace).as_secs()).unwrap_or(i64::MAX)),
        deadline,
    }
}

/// The run failed after its status was written because the API refused a
/// runner (quota, a policy, validation): Failed with the API's answer.
pub fn creation_refused(status: &mut LoadTestStatus, now: Timestamp, message: String) -> (bool, &'static str, String) {
    status.state = State::Failed;
    status.verdict = Verdict::None;
    status.completion_time = Some(Time(now));
    status.reason = "CreateFailed".into();
    status.message = message.clone();
    record_ended(status);
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
    seen: &Seen<'_>,
    now: Timestamp,
) {
    let svc = &spec.test.service_name;
    match (&step.status.target, seen.target) {
        (_, Target::Unchecked) => {
            // Before the first runner: can the target take load at all?
            // After: is it still the one the runners were made for?
            let endpoints = step.status.target.is_none();
            step.needs = Some(Need::Target { endpoints });
            return;
        }
        (Some(pinned), target) => {
            if let Some(why) = changed(pinned, target, svc) {
                return fail(step, now, "TargetChanged", why);
            }
        }
        (None, Target::Missing) => {
            return fail(step, now, "ServiceNotFound", format!("Service {svc} does not exist in this namespace"));
        }
        (None, Target::Seen(view)) => {
            let Some(pinned) = pin(view) else {
                let what = if view.type_ == "ExternalName" { "an ExternalName Service" } else { "headless" };
                return fail(
                    step,
                    now,
                    "TargetNotClusterIP",
                    format!("Service {svc} is {what}: runners send only to a Service's cluster IP"),
                );
            };
            if view.ready == Some(false) {
                return fail(step, now, "NoReadyEndpoints", format!("Service {svc} has no ready endpoints"));
            }
            step.status.target = Some(pinned);
        }
    }
    if let Some(problem) = mine.iter().find_map(|r| runner_problem(r)) {
        return fail(step, now, "RunnerFailed", problem);
    }
    let present: Vec<usize> = mine.iter().filter_map(|r| r.index).collect();
    let create: Vec<usize> = (0..replicas).filter(|i| !present.contains(i)).collect();
    let waited = since(step.status.start_time.as_ref(), now);
    if !create.is_empty() {
        // Room in the namespace for every runner of the run, or none is
        // made: a run started in part would hold pods while it waits.
        let max = limits.max_runners_per_namespace;
        if replicas > max {
            return fail(
                step,
                now,
                "TooManyRunners",
                format!("{replicas} runners are more than --max-runners-per-namespace ({max})"),
            );
        }
        let Some(others) = seen.others_in_namespace else {
            step.needs = Some(Need::Room);
            return;
        };
        if others + replicas > max {
            let message = format!(
                "{others} runner pods of other runs in this namespace leave no room for {replicas} more \
                 (--max-runners-per-namespace {max}); waiting, at most until startTimeout ({:?})",
                limits.start_timeout
            );
            if waited >= limits.start_timeout {
                return fail(step, now, "TooManyRunners", message);
            }
            if !already(Some(&step.status), "TooManyRunners") {
                step.events.push((true, "TooManyRunners", message.clone()));
            }
            step.status.message = message.clone();
            step.waiting = Some(("TooManyRunners", message));
            step.requeue = Some(ROOM_RECHECK.min(limits.start_timeout - waited));
            return;
        }
        step.create = create;
    }
    let running = mine.iter().filter(|r| r.running && r.index.is_some_and(|i| i < replicas)).count();
    if step.create.is_empty() && running >= replicas {
        step.signal = mine.iter().filter(|r| !r.signalled).map(|r| r.name.clone()).collect();
        step.status.state = State::Executing;
        step.status.executing_time = Some(Time(now));
        step.status.message = String::new();
        step.events.push((
            false,
            "Executing",
            format!("run {}: all {replicas} runners running, start signal given", step.status.run),
        ));
        step.requeue = Some(limits.run_deadline().saturating_sub(waited));
        return;
    }
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

fn executing(
    step: &mut Step,
    spec: &LoadTestSpec,
    limits: &Limits,
    mine: &[&Runner],
    replicas: usize,
    seen: &Seen<'_>,
    now: Timestamp,
) {
    let target = seen.target;
    // The Service must still be the one the runners connect to: a type
    // or cluster IP change (or a Service made again) stops the run before
    // its traffic reaches what the address now means.
    if let Some(pinned) = step.status.target.clone() {
        if *target == Target::Unchecked {
            step.needs = Some(Need::Target { endpoints: false });
            return;
        }
        if let Some(why) = changed(&pinned, target, &spec.test.service_name) {
            return fail(step, now, "TargetChanged", why);
        }
    }
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
        // What a termination message had no room for is in its runner's log.
        let fuller = fuller::with_more(&done);
        match seen.progress {
            None if !fuller.is_empty() => step.needs = Some(Need::Summaries(fuller)),
            logs => finish::finished(step, spec, &done, logs.unwrap_or_default(), now),
        }
        return;
    }
    let elapsed = since(step.status.start_time.as_ref(), now);
    let deadline = limits.run_deadline();
    if elapsed >= deadline {
        return fail(
            step,
            now,
            "DeadlineExceeded",
            format!("{} of {replicas} runners done after {deadline:?} (deadline)", done.len()),
        );
    }
    // A signal that did not land last time is given again.
    step.signal = mine.iter().filter(|r| !r.signalled && r.terminated.is_none()).map(|r| r.name.clone()).collect();
    // The progress so far, read at most every PROGRESS_EVERY.
    let readable = progress::readable(mine);
    if !readable.is_empty() && progress::due(step, now) {
        match seen.progress {
            None => {
                step.needs = Some(Need::Progress(readable.iter().map(|r| r.name.clone()).collect()));
                return;
            }
            Some(logs) => progress::update(step, spec, logs, mine, now),
        }
    }
    step.requeue = Some((deadline - elapsed).min(PROGRESS_EVERY));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::MAX_HISTORY;
    use crate::schedule::Schedule;
    use serde_json::json;

    fn spec(replicas: i32) -> LoadTestSpec {
        serde_json::from_value(json!({"replicas": replicas, "test": {"serviceName": "nginx"}}))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    const L: Limits = Limits {
        deadline: Duration::from_secs(600),
        duration: None,
        start_timeout: Duration::from_secs(120),
        min_rerun_interval: Duration::ZERO,
        max_runners_per_namespace: 500,
        schedule: None,
    };

    fn web() -> ServiceView {
        ServiceView {
            uid: "u-1".into(),
            type_: "ClusterIP".into(),
            cluster_ip: Some("10.96.0.20".into()),
            ready: Some(true),
            host: "nginx.shop.svc.cluster.local".into(),
        }
    }

    fn ready() -> Target {
        Target::Seen(web())
    }

    /// A step with `L`, the namespace otherwise empty.
    fn go(
        s: &LoadTestSpec,
        generation: i64,
        rerun: &str,
        old: Option<&LoadTestStatus>,
        runners: &[Runner],
        target: Target,
        now: Timestamp,
    ) -> Step {
        let seen = Seen { runners, target: &target, others_in_namespace: Some(0), baseline: None, progress: None };
        step(s, &L, &Wanted { name: "t", generation, rerun, created: None, save_baseline: "" }, old, &seen, now)
    }

    /// A step of generation 1 with `limits`, the target ready.
    fn go_with(
        s: &LoadTestSpec,
        limits: &Limits,
        old: Option<&LoadTestStatus>,
        runners: &[Runner],
        now: Timestamp,
    ) -> Step {
        let seen = Seen { runners, target: &ready(), others_in_namespace: Some(0), baseline: None, progress: None };
        step(
            s,
            limits,
            &Wanted { name: "t", generation: 1, rerun: "", created: None, save_baseline: "" },
            old,
            &seen,
            now,
        )
    }

    fn runner(run: i64, i: usize) -> Runner {
        Runner { name: format!("t-r{run}-{i}"), run, index: Some(i), phase: "Pending".into(), ..Runner::default() }
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn a_new_test_checks_its_target_then_creates_every_runner() {
        let s = spec(3);
        let unchecked = Target::Unchecked;
        let look = |old: Option<&LoadTestStatus>, target: &Target, room: Option<usize>| {
            step(
                &s,
                &L,
                &Wanted { name: "t", generation: 1, rerun: "", created: None, save_baseline: "" },
                old,
                &Seen { runners: &[], target, others_in_namespace: room, baseline: None, progress: None },
                t(0),
            )
        };
        let first = look(None, &unchecked, None);
        assert_eq!(first.needs, Some(Need::Target { endpoints: true }));
        assert!(first.create.is_empty());
        assert_eq!((first.status.run, first.status.state), (1, State::Pending));
        // The target is fine: the namespace's runners are counted next.
        let counted = look(Some(&first.status), &ready(), None);
        assert_eq!((counted.needs, counted.create.len()), (Some(Need::Room), 0));
        let made = look(Some(&first.status), &ready(), Some(0));
        assert_eq!(made.create, [0, 1, 2]);
        let pinned = made.status.target.clone().unwrap_or_default();
        assert_eq!((pinned.cluster_ip.as_str(), pinned.host.as_str()), ("10.96.0.20", "nginx.shop.svc.cluster.local"));
        let missing = go(&s, 1, "", Some(&first.status), &[], Target::Missing, t(0));
        assert_eq!((missing.status.state, missing.status.reason.as_str()), (State::Failed, "ServiceNotFound"));
        let none =
            go(&s, 1, "", Some(&first.status), &[], Target::Seen(ServiceView { ready: Some(false), ..web() }), t(0));
        assert_eq!(none.status.reason, "NoReadyEndpoints");
    }

    #[test]
    fn only_a_service_with_a_cluster_ip_is_a_target() {
        let s = spec(1);
        let external = ServiceView { type_: "ExternalName".into(), cluster_ip: None, ready: None, ..web() };
        let st = go(&s, 1, "", None, &[], Target::Seen(external), t(0));
        assert_eq!((st.status.state, st.status.reason.as_str()), (State::Failed, "TargetNotClusterIP"));
        assert!(st.status.message.contains("ExternalName"), "{}", st.status.message);
        assert!(st.create.is_empty());
        let headless = ServiceView { cluster_ip: None, ..web() };
        let st = go(&s, 1, "", None, &[], Target::Seen(headless), t(0));
        assert_eq!(st.status.reason, "TargetNotClusterIP");
        assert!(st.status.message.contains("headless"), "{}", st.status.message);
        let node_port = ServiceView { type_: "NodePort".into(), ..web() };
        assert_eq!(go(&s, 1, "", None, &[], Target::Seen(node_port), t(0)).create, [0]);
    }

    #[test]
    fn a_target_that_changes_fails_the_run_and_stops_the_runners() {
        let s = spec(2);
        let pending = go(&s, 1, "", None, &[], ready(), t(0)).status;
        let mut rs = vec![runner(1, 0), runner(1, 1)];
        for r in &mut rs {
            r.running = true;
        }
        let executing = go(&s, 1, "", Some(&pending), &rs, ready(), t(2)).status;
        assert_eq!(executing.state, State::Executing);
        for r in &mut rs {
            r.signalled = true;
        }
        // Executing looks at the Service on every step.
        let seen = Seen {
            runners: &rs,
            target: &Target::Unchecked,
            others_in_namespace: None,
            baseline: None,
            progress: None,
        };
        let look = step(
            &s,
            &L,
            &Wanted { name: "t", generation: 1, rerun: "", created: None, save_baseline: "" },
            Some(&executing),
            &seen,
            t(3),
        );
        assert_eq!(look.needs, Some(Need::Target { endpoints: false }));
        let same = go(&s, 1, "", Some(&executing), &rs, ready(), t(3));
        assert_eq!((same.status.state, same.delete.len()), (State::Executing, 0));
        let changes = [
            (
                Target::Seen(ServiceView { type_: "ExternalName".into(), cluster_ip: None, ..web() }),
                "changed type from ClusterIP to ExternalName",
            ),
            (
                Target::Seen(ServiceView { cluster_ip: Some("10.96.0.99".into()), ..web() }),
                "changed cluster IP from 10.96.0.20 to 10.96.0.99",
            ),
            (Target::Seen(ServiceView { uid: "u-2".into(), ..web() }), "deleted and made again"),
            (Target::Missing, "was deleted"),
        ];
        for (target, why) in changes {
            let st = go(&s, 1, "", Some(&executing), &rs, target, t(4));
            assert_eq!((st.status.state, st.status.reason.as_str()), (State::Failed, "TargetChanged"));
            assert!(st.status.message.contains(why), "{}", st.status.message);
            assert_eq!(st.delete, ["t-r1-0", "t-r1-1"], "the runners stop");
        }
        // Also while the runners start (they were made for the old address).
        let st =
            go(&s, 1, "", Some(&pending), &rs[..1], Target::Seen(ServiceView { uid: "u-2".into(), ..web() }), t(1));
        assert_eq!(st.status.reason, "TargetChanged");
    }

    #[test]
    fn a_rerun_sooner_than_the_interval_waits_and_the_current_run_goes_on() {
        let s = spec(1);
        let l = Limits { min_rerun_interval: Duration::from_secs(30), ..L };
        let at = |old: &LoadTestStatus, generation: i64, rerun: &str, runners: &[Runner], now: i64| {
            let seen = Seen { runners, target: &ready(), others_in_namespace: Some(0), baseline: None, progress: None };
            step(
                &s,
                &l,
                &Wanted { name: "t", generation, rerun, created: None, save_baseline: "" },
                Some(old),
                &seen,
                t(now),
            )
        };
        let first = step(
            &s,
            &l,
            &Wanted { name: "t", generation: 1, rerun: "", created: None, save_baseline: "" },
            None,
            &Seen { runners: &[], target: &ready(), others_in_namespace: Some(0), baseline: None, progress: None },
            t(0),
        );
        assert_eq!(first.status.run, 1, "the first run never waits");
        let mut rs = vec![runner(1, 0)];
        rs[0].running = true;
        // A rerun 10 s after the start: run 1 goes on (it becomes
        // Executing), run 2 waits 20 s more.
        let wait = at(&first.status, 1, "again", &rs, 10);
        assert_eq!((wait.status.run, wait.status.state), (1, State::Executing));
        assert_eq!(wait.signal, ["t-r1-0"]);
        assert_eq!(wait.requeue, Some(Duration::from_secs(20)));
        let (reason, message) = wait.waiting.clone().unwrap_or_default();
        assert_eq!(reason, "RerunTooSoon");
        assert!(message.contains("run 2") && message.contains("30s"), "{message}");
        assert!(wait.events.iter().any(|(w, r, _)| *w && *r == "RerunTooSoon"));
        // Said once: the next look with that condition in place is quiet.
        let mut said = wait.status.clone();
        said.conditions = vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: "RerunTooSoon".into(),
            message,
            last_transition_time: Time(t(10)),
            observed_generation: Some(1),
        }];
        rs[0].signalled = true;
        let again = at(&said, 2, "again", &rs, 25);
        assert_eq!((again.status.run, again.requeue), (1, Some(Duration::from_secs(5))));
        assert!(again.events.iter().all(|(_, r, _)| *r != "RerunTooSoon"), "{:?}", again.events);
        // At the interval, run 2 starts and run 1's pods go.
        let started = at(&said, 2, "again", &rs, 30);
        assert_eq!((started.status.run, started.status.state), (2, State::Pending));
        assert!(started.waiting.is_none());
        assert_eq!(started.delete, ["t-r1-0"]);
    }

    #[test]
    fn runners_wait_for_room_in_their_namespace_and_too_many_fail_at_once() {
        let s = spec(3);
        let l = Limits { max_runners_per_namespace: 4, ..L };
        let at = |old: Option<&LoadTestStatus>, others: usize, runners: &[Runner], now: i64| {
            let seen =
                Seen { runners, target: &ready(), others_in_namespace: Some(others), baseline: None, progress: None };
            step(
                &s,
                &l,
                &Wanted { name: "t", generation: 1, rerun: "", created: None, save_baseline: "" },
                old,
                &seen,
                t(now),
            )
        };
        let full = at(None, 2, &[], 0);
        assert_eq!((full.status.state, full.create.len()), (State::Pending, 0), "none made: all or nothing");
        assert_eq!(full.waiting.as_ref().map(|w| w.0), Some("TooManyRunners"));
        assert!(full.status.message.contains("2 runner pods of other runs"), "{}", full.status.message);
        assert_eq!(full.requeue, Some(ROOM_RECHECK));
        assert!(full.events.iter().any(|(w, r, _)| *w && *r == "TooManyRunners"));
        let room = at(Some(&full.status), 1, &[], 30);
        assert_eq!(room.create, [0, 1, 2]);
        let late = at(Some(&full.status), 2, &[], 120);
        assert_eq!((late.status.state, late.status.reason.as_str()), (State::Failed, "TooManyRunners"));
        // More runners than the bound itself: failed at once, nothing to wait for.
        let l1 = Limits { max_runners_per_namespace: 2, ..L };
        let seen = Seen { runners: &[], target: &ready(), others_in_namespace: None, baseline: None, progress: None };
        let st = step(
            &s,
            &l1,
            &Wanted { name: "t", generation: 1, rerun: "", created: None, save_baseline: "" },
            None,
            &seen,
            t(0),
        );
        assert_eq!((st.status.state, st.status.reason.as_str()), (State::Failed, "TooManyRunners"));
        assert!(st.status.message.contains("--max-runners-per-namespace (2)"), "{}", st.status.message);
    }

    #[test]
    fn runners_start_together_once_all_run_and_results_are_merged() {
        let s = spec(2);
        let pending = go(&s, 1, "", None, &[], ready(), t(0)).status;
        let mut rs = vec![runner(1, 0), runner(1, 1)];
        rs[0].running = true;
        let st = go(&s, 1, "", Some(&pending), &rs, ready(), t(5));
        assert_eq!(st.status.state, State::Pending);
        assert!(st.signal.is_empty(), "no signal until every runner runs");
        rs[1].running = true;
        let st = go(&s, 1, "", Some(&pending), &rs, ready(), t(6));
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
        let done = go(&s, 1, "", Some(&executing), &rs, ready(), t(9));
        assert_eq!((done.status.state, done.status.verdict), (State::Finished, Verdict::None));
        assert_eq!(done.status.results.as_ref().map(|r| r.requests), Some(20));
        // OnSuccess: the runners go, the results stay.
        assert_eq!(done.delete, ["t-r1-0", "t-r1-1"]);
    }

    /// A step of test `t` (run 1) given the runners' logs it asked for.
    fn with_logs(s: &LoadTestSpec, st: &LoadTestStatus, rs: &[Runner], logs: &[RunnerLog], now: Timestamp) -> Step {
        let seen =
            Seen { runners: rs, target: &ready(), others_in_namespace: Some(0), baseline: None, progress: Some(logs) };
        let wanted = Wanted { name: "t", generation: 1, rerun: "", created: None, save_baseline: "" };
        step(s, &L, &wanted, Some(st), &seen, now)
    }

    /// While the runners send, their logs are asked for every 5 s (not
    /// sooner) and become status.progress; a run stopped by abortOnFail
    /// ends Finished, verdict Failed, reason AbortedOnFail.
    #[test]
    fn an_executing_run_reads_its_progress_every_5_s_and_an_aborted_one_fails() {
        let s = spec(1);
        let pending = go(&s, 1, "", None, &[], ready(), t(0)).status;
        let mut rs = vec![runner(1, 0)];
        rs[0].running = true;
        let executing = go(&s, 1, "", Some(&pending), &rs, ready(), t(1)).status;
        rs[0].signalled = true;
        let asks = go(&s, 1, "", Some(&executing), &rs, ready(), t(2));
        assert_eq!(asks.needs, Some(Need::Progress(vec!["t-r1-0".into()])));
        let logs = [RunnerLog { runner: "t-r1-0".into(), log: Err("no kubelet".into()) }];
        let read = with_logs(&s, &executing, &rs, &logs, t(2));
        let progress = read.status.progress.clone().unwrap_or_default();
        assert_eq!(progress.message, "t-r1-0: no kubelet");
        assert_eq!(read.requeue, Some(PROGRESS_EVERY));
        // Not again within 5 s.
        let soon = go(&s, 1, "", Some(&read.status), &rs, ready(), t(6));
        assert_eq!((soon.needs, soon.status.progress.as_ref()), (None, Some(&progress)));
        assert!(matches!(go(&s, 1, "", Some(&read.status), &rs, ready(), t(7)).needs, Some(Need::Progress(_))));
        // Aborted: whatever the thresholds say at the end, it failed.
        let mut aborted = read.status.clone();
        if let Some(p) = aborted.progress.as_mut() {
            p.aborted = "error ratio 0.5000 (60 of 120) > 0.01".into();
        }
        let mut h = loadgen::summary::histogram();
        loadgen::summary::record(&mut h, Duration::from_millis(3));
        let msg = loadgen::summary::Summary::to_message(1, Default::default(), 9, Duration::from_secs(1), &h)
            .unwrap_or_default();
        rs[0].running = false;
        rs[0].terminated = Some((0, "Completed".into(), msg));
        let done = go(&s, 1, "", Some(&aborted), &rs, ready(), t(9)).status;
        assert_eq!(
            (done.state, done.verdict, done.reason.as_str()),
            (State::Finished, Verdict::Failed, "AbortedOnFail")
        );
        assert!(done.message.contains("stopped early, error ratio 0.5000"), "{}", done.message);
    }

    /// A runner whose termination message left something out (`more`):
    /// once every runner ended, its log is asked for, and its fuller
    /// summary gives the stage its percentiles; a log that could not be read
    /// leaves the message's figures (the percentiles unknown, not wrong).
    #[test]
    fn a_message_with_more_asks_for_the_log_and_merges_its_fuller_summary() {
        let s: LoadTestSpec = serde_json::from_value(json!({"replicas": 1, "test": {"serviceName": "nginx"},
            "load": {"stages": (0..32).map(|_| json!({"duration": "1s", "rate": 10})).collect::<Vec<_>>()}}))
        .unwrap_or_else(|e| panic!("{e}"));
        // 32 stages of spread latencies: no room for their histograms.
        let stages: Vec<loadgen::summary::StageOutcome> = (0..32u64)
            .map(|k| {
                let mut h = loadgen::summary::histogram();
                for v in 1..150u64 {
                    loadgen::summary::record(&mut h, Duration::from_micros(v * v * 13 + k));
                }
                loadgen::summary::StageOutcome { requests: 149, errors: 0, dropped: 0, histogram: h }
            })
            .collect();
        let mut whole = loadgen::summary::histogram();
        for st in &stages {
            whole.add(&st.histogram).unwrap_or_default();
        }
        let staged = loadgen::summary::Staged { stages, ..Default::default() };
        let (msg, full) = loadgen::summary::Summary::to_message_and_full(
            32 * 149,
            Default::default(),
            0,
            Duration::from_secs(32),
            &whole,
            &staged,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let full = full.unwrap_or_else(|| panic!("the message held everything: {msg}"));
        let pending = go(&s, 1, "", None, &[], ready(), t(0)).status;
        let mut r = Runner { running: true, ..runner(1, 0) };
        let executing = go(&s, 1, "", Some(&pending), std::slice::from_ref(&r), ready(), t(1)).status;
        (r.running, r.signalled, r.terminated) = (false, true, Some((0, "Completed".into(), msg)));
        let rs = [r];
        let asks = go(&s, 1, "", Some(&executing), &rs, ready(), t(40));
        assert_eq!((asks.needs, asks.status.state), (Some(Need::Summaries(vec!["t-r1-0".into()])), State::Executing));
        let with = |log: Result<String, String>| {
            with_logs(&s, &executing, &rs, &[RunnerLog { runner: "t-r1-0".into(), log }], t(40)).status
        };
        let read = with(Ok(format!("{}{full}\n", loadgen::summary::FULL_PREFIX)));
        assert_eq!(read.state, State::Finished);
        let stages = read.results.map(|r| r.stages).unwrap_or_default();
        assert!(stages.len() == 32 && stages.iter().all(|st| st.latency.is_some()), "{stages:?}");
        let unread = with(Err("no kubelet".into()));
        assert_eq!(unread.state, State::Finished);
        let stages = unread.results.map(|r| r.stages).unwrap_or_default();
        assert_eq!(stages.iter().map(|st| st.requests).sum::<i64>(), 32 * 149, "the counts stay");
        assert!(stages.iter().any(|st| st.latency.is_none()), "{stages:?}");
    }

    /// A capacity search ends with its capacity in the results and a
    /// verdict of its own (the whole run's figures mix the steps); a step
    /// ended live fails though its final figures pass.
    #[test]
    fn a_capacity_search_finishes_with_the_highest_step_that_passed() {
        let s: LoadTestSpec = serde_json::from_value(json!({"replicas": 1, "test": {"serviceName": "nginx"},
            "load": {"capacity": {"start": 10, "step": 10, "stepDuration": "30s", "max": 30}},
            "thresholds": {"p99": "10ms"}}))
        .unwrap_or_else(|e| panic!("{e}"));
        let stage = |ms: u64, n: u64| {
            let mut h = loadgen::summary::histogram();
            for _ in 0..n {
                loadgen::summary::record(&mut h, Duration::from_millis(ms));
            }
            loadgen::summary::StageOutcome { requests: n, errors: 0, dropped: 0, histogram: h }
        };
        // Ramps fast; the holds at 10 and 20/s fast, at 30/s slow.
        let stages = vec![stage(1, 5), stage(2, 190), stage(1, 15), stage(3, 380), stage(1, 25), stage(50, 570)];
        let mut whole = loadgen::summary::histogram();
        for st in &stages {
            whole.add(&st.histogram).unwrap_or_default();
        }
        let staged = loadgen::summary::Staged { stages, ..Default::default() };
        let msg = loadgen::summary::Summary::to_message_staged(
            1185,
            Default::default(),
            0,
            Duration::from_secs(60),
            &whole,
            &staged,
        )
        .unwrap_or_default();
        let pending = go(&s, 1, "", None, &[], ready(), t(0)).status;
        let mut runner = Runner { running: true, ..runner(1, 0) };
        let executing = go(&s, 1, "", Some(&pending), std::slice::from_ref(&runner), ready(), t(1)).status;
        assert_eq!(executing.state, State::Executing);
        runner.running = false;
        runner.signalled = true;
        runner.terminated = Some((0, "Completed".into(), msg));
        let done = go(&s, 1, "", Some(&executing), std::slice::from_ref(&runner), ready(), t(90)).status;
        assert_eq!(
            (done.state, done.verdict, done.reason.as_str()),
            (State::Finished, Verdict::Passed, "CapacityFound")
        );
        let found = done.results.and_then(|r| r.capacity).unwrap_or_default();
        assert_eq!((found.rate, found.steps, found.planned), (20, 2, 3), "{found:?}");
        assert!(found.limited_by.starts_with("the step at 30 requests/s: p99 50"), "{found:?}");
        // Ended live at 20/s: that step fails, whatever its figures say.
        let live = crate::crd::Progress {
            aborted: "capacity search over: the step at 20 requests/s: p99 12.0ms > 10.0ms".into(),
            search_missed_at: Some(20),
            ..Default::default()
        };
        let stopped = LoadTestStatus { progress: Some(live), ..executing };
        let done = go(&s, 1, "", Some(&stopped), &[runner], ready(), t(90)).status;
        let found = done.results.and_then(|r| r.capacity).unwrap_or_default();
        assert_eq!((found.rate, found.steps), (10, 1), "{found:?}");
        assert_eq!(found.limited_by, "the step at 20 requests/s: p99 12.0ms > 10.0ms (its last 10 s)");
    }

    #[test]
    fn a_runner_that_cannot_start_fails_the_run_with_its_reason_and_keeps_the_pods() {
        let s = spec(2);
        let pending = go(&s, 1, "", None, &[], ready(), t(0)).status;
        let mut rs = vec![runner(1, 0), runner(1, 1)];
        rs[1].waiting = Some(("ImagePullBackOff".into(), "not found".into()));
        let st = go(&s, 1, "", Some(&pending), &rs, ready(), t(3));
        assert_eq!((st.status.state, st.status.reason.as_str()), (State::Failed, "RunnerFailed"));
        assert!(st.status.message.contains("t-r1-1: ImagePullBackOff"), "{}", st.status.message);
        assert!(st.delete.is_empty(), "OnSuccess keeps a failed run's pods");
        // Terminal: nothing more happens, even much later.
        let later = go(&s, 1, "", Some(&st.status), &rs, ready(), t(3000));
        assert_eq!(later.status, st.status);
        assert!(later.create.is_empty() && later.events.is_empty());
    }

    #[test]
    fn start_timeout_and_deadline_fail_the_run() {
        let s = spec(1);
        let pending = go(&s, 1, "", None, &[], ready(), t(0)).status;
        let rs = vec![runner(1, 0)];
        let st = go(&s, 1, "", Some(&pending), &rs, ready(), t(60));
        assert_eq!((st.status.state, st.requeue), (State::Pending, Some(Duration::from_secs(60))));
        let mut rs = rs;
        rs[0].unschedulable = Some("0/3 nodes are available: 3 Insufficient cpu.".into());
        let st = go(&s, 1, "", Some(&pending), &rs, ready(), t(60));
        assert_eq!(st.status.state, State::Pending, "unschedulable waits: an autoscaler may add a node");
        assert!(st.status.message.contains("t-r1-0: Unschedulable (waiting"), "{}", st.status.message);
        assert!(st.delete.is_empty());
        let st = go(&s, 1, "", Some(&pending), &rs, ready(), t(121));
        assert_eq!(st.status.reason, "RunnerFailed", "past startTimeout, unschedulable is the runner's failure");
        assert_eq!(
            st.status.message,
            "runner t-r1-0: still Unschedulable at startTimeout (120s): 0/3 nodes are available: 3 Insufficient cpu."
        );
        assert_eq!(st.delete, ["t-r1-0"], "a runner never placed has no logs to keep: it goes");
        rs[0].unschedulable = None;
        let st = go(&s, 1, "", Some(&pending), &rs, ready(), t(121));
        assert_eq!(st.status.reason, "StartTimeout");
        let mut running = rs.clone();
        running[0].running = true;
        let exec = go(&s, 1, "", Some(&pending), &running, ready(), t(10)).status;
        running[0].signalled = true;
        let st = go(&s, 1, "", Some(&exec), &running, ready(), t(601));
        assert_eq!(st.status.reason, "DeadlineExceeded");
        assert_eq!(st.delete, ["t-r1-0"], "a runner past the deadline is stopped");
    }

    #[test]
    fn a_spec_change_or_rerun_starts_a_new_run_and_removes_the_old_pods() {
        let s = spec(1);
        let mut done = go(&s, 1, "", None, &[], ready(), t(0)).status;
        done.state = State::Finished;
        let old = vec![runner(1, 0)];
        let same = go(&s, 1, "", Some(&done), &old, ready(), t(5));
        assert_eq!(same.status.run, 1);
        let changed = go(&s, 2, "", Some(&done), &old, ready(), t(5));
        assert_eq!((changed.status.run, changed.status.state), (2, State::Pending));
        assert_eq!(changed.delete, ["t-r1-0"]);
        assert_eq!(changed.create, [0], "the new run looks at its target anew");
        let rerun = go(&s, 1, "again", Some(&done), &old, ready(), t(5));
        assert_eq!(rerun.status.run, 2);
        assert!(rerun.events.iter().any(|(_, r, n)| *r == "RunStarted" && n.contains("again")));
    }

    /// A step of a test scheduled by `line`, created at t(10), generation
    /// `generation`, the target ready.
    fn scheduled(line: &str, generation: i64, rerun: &str, old: Option<&LoadTestStatus>, now: Timestamp) -> Step {
        let limits = Limits { schedule: Some(Schedule::parse(line).unwrap()), ..L };
        let seen =
            Seen { runners: &[], target: &ready(), others_in_namespace: Some(0), baseline: None, progress: None };
        step(
            &spec(1),
            &limits,
            &Wanted { name: "t", generation, rerun, created: Some(t(10)), save_baseline: "" },
            old,
            &seen,
            now,
        )
    }

    /// `st` as a run that finished at `at`.
    fn finished(mut st: LoadTestStatus, at: Timestamp) -> LoadTestStatus {
        (st.state, st.verdict, st.reason) = (State::Finished, Verdict::Passed, "ThresholdsMet".into());
        st.completion_time = Some(Time(at));
        st
    }

    #[test]
    fn a_scheduled_test_waits_for_its_first_time_and_a_spec_change_starts_nothing() {
        // t(0) is a multiple of 5 minutes: the first time after the
        // creation (t(10)) is t(300).
        let first = scheduled("*/5 * * * *", 1, "", None, t(10));
        assert_eq!(first.status.run, 0);
        assert_eq!((first.create.len(), first.needs), (0, None), "nothing runs before the time");
        assert_eq!(first.status.next_run_time, Some(Time(t(300))));
        assert_eq!(first.requeue, Some(Duration::from_secs(290)));
        let (reason, message) = first.waiting.clone().unwrap();
        assert_eq!(reason, "Scheduled");
        assert!(message.contains("*/5 * * * *"), "{message}");
        let edited = scheduled("*/5 * * * *", 2, "", Some(&first.status), t(100));
        assert_eq!((edited.status.run, edited.waiting.as_ref().map(|w| w.0)), (0, Some("Scheduled")));
        let due = scheduled("*/5 * * * *", 2, "", Some(&edited.status), t(300));
        assert_eq!((due.status.run, due.status.run_generation, due.create.as_slice()), (1, 2, &[0][..]));
        assert!(
            due.events.iter().any(|(_, r, n)| *r == "RunStarted" && n.contains("scheduled at")),
            "{:?}",
            due.events
        );
        assert_eq!(due.status.next_run_time, Some(Time(t(600))));
        // A spec edited while the run goes on restarts it with the edit
        // (its runners, its verdict are that spec's), as without a schedule.
        let running = scheduled("*/5 * * * *", 3, "", Some(&due.status), t(310));
        assert_eq!((running.status.run, running.status.run_generation), (2, 3));
        assert!(running.events.iter().any(|(_, r, n)| *r == "RunStarted" && n.contains("during run 1")));
        // The replaced run is in the history, as it was then.
        let h = running.status.history.last().cloned().unwrap_or_default();
        assert_eq!(
            (h.run, h.state, h.verdict, h.reason.as_str(), h.completion_time),
            (1, due.status.state, Verdict::None, "Superseded", Some(Time(t(310))))
        );
        assert_ne!(h.state, State::Finished);
        // Once it ended, an edit waits for the next time.
        let ended = finished(running.status, t(320));
        let edited = scheduled("*/5 * * * *", 4, "", Some(&ended), t(330));
        assert_eq!(edited.status.run, 2);
    }

    #[test]
    fn a_schedule_added_or_changed_starts_no_run_for_a_time_already_past() {
        let run1 = finished(scheduled("*/5 * * * *", 1, "", None, t(300)).status, t(330));
        assert_eq!(run1.schedule, "*/5 * * * *");
        // At t(1000), every 10 minutes: t(600) is past, but it was not
        // this schedule's time; the next is t(1200).
        let changed = scheduled("*/10 * * * *", 1, "", Some(&run1), t(1000));
        assert_eq!(changed.status.run, 1);
        assert_eq!(changed.status.next_run_time, Some(Time(t(1200))));
        assert_eq!(scheduled("*/10 * * * *", 1, "", Some(&changed.status), t(1200)).status.run, 2);
        // Without a schedule any more: nothing of one is said.
        let seen =
            Seen { runners: &[], target: &ready(), others_in_namespace: Some(0), baseline: None, progress: None };
        let wanted = Wanted { name: "t", generation: 1, rerun: "", created: Some(t(10)), save_baseline: "" };
        let plain = step(&spec(1), &L, &wanted, Some(&changed.status), &seen, t(1300)).status;
        assert_eq!((plain.run, plain.next_run_time, plain.schedule.as_str()), (1, None, ""));
    }

    #[test]
    fn a_scheduled_test_runs_again_at_each_time_and_keeps_its_history() {
        let run1 = scheduled("*/5 * * * *", 1, "", None, t(300)).status;
        let done = finished(run1, t(330));
        let idle = scheduled("*/5 * * * *", 1, "", Some(&done), t(400));
        assert_eq!(idle.status.run, 1);
        assert_eq!(idle.waiting, None, "a finished run is not waiting for anything");
        assert_eq!(idle.status.next_run_time, Some(Time(t(600))));
        assert_eq!(idle.requeue, Some(Duration::from_secs(200)));
        assert_eq!(idle.status.history.len(), 1);
        let h = &idle.status.history[0];
        assert_eq!(
            (h.run, h.state, h.verdict, h.reason.as_str()),
            (1, State::Finished, Verdict::Passed, "ThresholdsMet")
        );
        assert_eq!((h.start_time.clone(), h.completion_time.clone()), (Some(Time(t(300))), Some(Time(t(330)))));
        let again = scheduled("*/5 * * * *", 1, "", Some(&idle.status), t(600));
        assert_eq!(again.status.run, 2);
        assert_eq!(again.status.history, idle.status.history, "the history goes on through a new run");
    }

    #[test]
    fn a_time_passed_during_a_run_starts_one_run_when_it_ends() {
        let run1 = scheduled("*/5 * * * *", 1, "", None, t(300)).status;
        let mut executing = run1.clone();
        executing.state = State::Executing;
        // t(600) and t(900) come while it sends: nothing new starts.
        let busy = scheduled("*/5 * * * *", 1, "", Some(&executing), t(950));
        assert_eq!(busy.status.run, 1);
        let ended = finished(executing, t(960));
        let catch_up = scheduled("*/5 * * * *", 1, "", Some(&ended), t(961));
        assert_eq!(catch_up.status.run, 2, "made up by one run");
        assert_eq!(catch_up.status.next_run_time, Some(Time(t(1200))));
        let later = scheduled("*/5 * * * *", 1, "", Some(&catch_up.status), t(970));
        assert_eq!(later.status.run, 2, "not by several");
    }

    #[test]
    fn a_rerun_starts_a_scheduled_test_at_once_and_the_history_keeps_ten_runs() {
        let now = scheduled("@daily", 1, "go", None, t(20));
        assert_eq!(now.status.run, 1);
        let mut st = now.status;
        for i in 2..=13 {
            st = finished(st, t(i * 10));
            st = scheduled("@daily", 1, &format!("go-{i}"), Some(&st), t(i * 10 + 1)).status;
            assert_eq!(st.run, i);
        }
        assert_eq!(st.history.len(), MAX_HISTORY);
        assert_eq!(st.history.first().map(|h| h.run), Some(3));
        assert_eq!(st.history.last().map(|h| h.run), Some(12));
    }

    #[test]
    fn an_unscheduled_test_records_its_ended_runs_too() {
        let s = spec(1);
        let done = finished(go(&s, 1, "", None, &[], ready(), t(0)).status, t(5));
        let seen = go(&s, 1, "", Some(&done), &[], ready(), t(6));
        assert_eq!(seen.status.history.len(), 1);
        assert_eq!(seen.status.next_run_time, None);
        let again = go(&s, 1, "", Some(&seen.status), &[], ready(), t(7));
        assert_eq!(again.status.history.len(), 1, "once per run");
    }

    #[test]
    fn save_baseline_saves_a_finished_run_once_and_a_baseline_naming_the_test_compares_with_it() {
        let mut own = spec(1);
        own.baseline = Some(crate::crd::Baseline {
            load_test_ref: "t".into(),
            max_regression: crate::crd::MaxRegression::default(),
        });
        let seen =
            Seen { runners: &[], target: &ready(), others_in_namespace: Some(0), baseline: None, progress: None };
        let at = |rerun: &str, save: &str, old: Option<&LoadTestStatus>, now: Timestamp| {
            let wanted = Wanted { name: "t", generation: 1, rerun, created: None, save_baseline: save };
            step(&own, &L, &wanted, old, &seen, now)
        };
        let with_results = |mut st: LoadTestStatus, ratio: &str| {
            st.results = Some(crate::crd::Results { error_ratio: ratio.into(), ..crate::crd::Results::default() });
            st
        };
        // Asked while run 1 goes on: saved once it ends, not before.
        let going = at("", "v1", None, t(0));
        assert_eq!((going.status.run, going.status.saved_baseline.clone()), (1, None));
        let done = with_results(finished(going.status, t(5)), "0.001000");
        let saved = at("", "v1", Some(&done), t(6));
        let kept = saved.status.saved_baseline.clone().unwrap_or_default();
        assert_eq!((kept.token.as_str(), kept.run, kept.saved_at.clone()), ("v1", 1, Some(Time(t(6)))));
        assert_eq!(kept.figures.get("errorRatio").map(String::as_str), Some("0.001000"));
        assert!(saved.events.iter().any(|(warn, r, m)| !warn && *r == "BaselineSaved" && m.contains("run 1")));
        // The same value again: nothing more.
        let again = at("", "v1", Some(&saved.status), t(7));
        assert!(again.events.iter().all(|(_, r, _)| !r.starts_with("Baseline")), "{:?}", again.events);
        // Run 2 (a rerun) compares with the saved run, and keeps it.
        let run2 = at("r2", "v1", Some(&again.status), t(40));
        assert_eq!(run2.status.run, 2);
        let pinned = run2.status.baseline.clone().unwrap_or_default();
        assert_eq!((pinned.run, pinned.saved_at.clone()), (1, Some(Time(t(6)))));
        assert_eq!(run2.status.saved_baseline, Some(kept.clone()));
        // A failed run is never saved: a Warning, and run 1 stays.
        let mut failed = with_results(finished(run2.status, t(45)), "0.500000");
        failed.verdict = Verdict::Failed;
        let refused = at("r2", "v2", Some(&failed), t(46));
        let still = refused.status.saved_baseline.clone().unwrap_or_default();
        assert_eq!((still.token.as_str(), still.run, still.saved_at.clone()), ("v2", 1, Some(Time(t(6)))));
        assert!(still.refused.contains("verdict Failed"), "{}", still.refused);
        // Another LoadTest pinning it does not read the refusal.
        let message = crate::baseline::offered("t", Some(&refused.status)).message;
        assert!(!message.contains("saved nothing"), "{message}");
        // Saved and rerun in one edit: the run that ended is saved.
        let both = at("r3", "v3", Some(&with_results(finished(refused.status.clone(), t(50)), "0.000000")), t(90));
        assert_eq!(both.status.run, 3);
        assert_eq!(both.status.saved_baseline.as_ref().map(|b| b.run), Some(2));
        // A huge value is kept as a digest.
        let long = "x".repeat(300_000);
        let digested = at("r3", &long, Some(&both.status), t(91));
        assert!(digested.status.saved_baseline.unwrap().token.len() < 100);
        assert!(
            refused.events.iter().any(|(warn, r, m)| *warn && *r == "BaselineNotSaved" && m.contains("run 1 stays"))
        );
        // Another LoadTest naming this one is offered the saved run.
        let offered = crate::baseline::offered("t", Some(&refused.status));
        assert_eq!((offered.load_test_ref.as_str(), offered.run), ("t", 1));
        // Without a saved run: the last finished one.
        let plain = crate::baseline::offered("t", Some(&done));
        assert_eq!((plain.run, plain.saved_at), (1, None));
    }

    #[test]
    fn a_run_pins_its_baseline_when_it_starts() {
        let with = |reference: &str| {
            let mut s = spec(1);
            s.baseline = Some(crate::crd::Baseline {
                load_test_ref: reference.into(),
                max_regression: crate::crd::MaxRegression::default(),
            });
            s
        };
        // Its own name: the previous run, still in status when the next starts.
        let own = with("t");
        let first = go(&own, 1, "", None, &[], ready(), t(0)).status;
        assert_eq!(first.baseline.as_ref().map(|b| b.run), Some(0), "no previous run: {first:?}");
        let mut done = finished(first, t(5));
        done.results = Some(crate::crd::Results { error_ratio: "0.000000".into(), ..crate::crd::Results::default() });
        let second = go(&own, 1, "again", Some(&done), &[], ready(), t(40)).status;
        assert_eq!(second.run, 2);
        let b = second.baseline.unwrap();
        assert_eq!((b.load_test_ref.as_str(), b.run), ("t", 1));
        assert_eq!(b.figures.get("errorRatio").map(String::as_str), Some("0.000000"));

        // Another LoadTest: looked at (the controller reads its cache), then pinned.
        let other = with("golden");
        let ask = go(&other, 1, "", None, &[], ready(), t(0));
        assert_eq!((ask.needs, ask.status.run), (Some(Need::Baseline), 0));
        let golden = crate::crd::BaselineStatus { load_test_ref: "golden".into(), run: 9, ..Default::default() };
        let seen = Seen {
            runners: &[],
            target: &ready(),
            others_in_namespace: Some(0),
            baseline: Some(&golden),
            progress: None,
        };
        let wanted = Wanted { name: "t", generation: 1, rerun: "", created: None, save_baseline: "" };
        let started = step(&other, &L, &wanted, None, &seen, t(0));
        assert_eq!((started.status.run, started.status.baseline), (1, Some(golden)));
    }

    #[test]
    fn a_runner_exiting_non_zero_fails_the_run() {
        let s = spec(2);
        let pending = go(&s, 1, "", None, &[], ready(), t(0)).status;
        let mut rs = vec![runner(1, 0), runner(1, 1)];
        for r in &mut rs {
            r.running = true;
        }
        let exec = go(&s, 1, "", Some(&pending), &rs, ready(), t(1)).status;
        rs[0].running = false;
        rs[0].terminated = Some((137, "OOMKilled".into(), String::new()));
        let st = go(&s, 1, "", Some(&exec), &rs, ready(), t(2));
        assert_eq!(st.status.reason, "RunnerFailed");
        assert!(st.status.message.contains("OOMKilled (exit code 137)"), "{}", st.status.message);
        // The other runner stops sending; the failed one stays for its logs.
        assert_eq!(st.delete, ["t-r1-1"]);
    }

    #[test]
    fn runners_end_before_the_deadline_by_a_grace() {
        let s = spec(1);
        let st = go(&s, 1, "", None, &[], ready(), t(0)).status;
        // 600 s deadline: the runners stop at 590 s.
        assert_eq!(runners_window(&st, &L).end_at, 1_800_000_000 + 590);
        assert_eq!(runners_window(&st, &L).deadline, Duration::from_secs(600));
        // 10 s: a quarter (2.5 s), not a tenth; 20 s: 5 s; 60 s: 6 s.
        let limits = |secs| Limits { deadline: Duration::from_secs(secs), start_timeout: Duration::from_secs(5), ..L };
        assert_eq!(runners_window(&st, &limits(10)).end_at, 1_800_000_000 + 7);
        assert_eq!(runners_window(&st, &limits(20)).end_at, 1_800_000_000 + 15);
        assert_eq!(runners_window(&st, &limits(60)).end_at, 1_800_000_000 + 54);
    }

    #[test]
    fn a_fixed_time_run_is_not_timed_out_before_its_duration_plus_start_up() {
        // 15 minutes of load with the default 10m deadline and a 2m
        // startTimeout: the deadline that holds is 2m + 15m + the slack.
        let s = spec(1);
        let l = Limits { duration: Some(Duration::from_secs(900)), start_timeout: Duration::from_secs(120), ..L };
        assert_eq!(l.run_deadline(), Duration::from_secs(120 + 900) + DURATION_SLACK);
        let pending = go_with(&s, &l, None, &[], t(0)).status;
        // The slowest start the run allows: every runner Running at 120 s.
        let mut rs = vec![runner(1, 0)];
        rs[0].running = true;
        let exec = go_with(&s, &l, Some(&pending), &rs, t(120));
        assert_eq!(exec.status.state, State::Executing);
        assert_eq!(exec.requeue, Some(l.run_deadline() - Duration::from_secs(120)));
        rs[0].signalled = true;
        // Sending for the whole 900 s and writing the summary: not failed.
        let late = go_with(&s, &l, Some(&exec.status), &rs, t(120 + 900 + 30));
        assert_eq!(late.status.state, State::Executing, "{}", late.status.message);
        // The runners were told to stop after their 900 s, not at spec.deadline.
        let window = runners_window(&pending, &l);
        assert!(window.end_at >= 1_800_000_000 + 120 + 900, "{window:?}");
        assert_eq!(window.deadline, l.run_deadline());
        // Past it, the run is timed out as any other.
        let over = go_with(&s, &l, Some(&exec.status), &rs, t(120 + 900 + 60));
        assert_eq!(over.status.reason, "DeadlineExceeded");
        // A deadline longer than that is kept; without a duration, as ever.
        let short = Limits { duration: Some(Duration::from_secs(10)), ..L };
        assert_eq!(short.run_deadline(), L.deadline);
        assert_eq!(L.run_deadline(), L.deadline);
    }
}
