//! When a LoadTest's next run starts — first sight, a spec change, a new
//! rerun annotation, or with `spec.schedule` the times it names — and the
//! history of the runs that ended or were replaced before they ended. Pure.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::{Limits, Step};
use crate::crd::{LoadTestStatus, MAX_HISTORY, RunSummary, State, Verdict};
use crate::schedule::Schedule;

/// What asks for a run: the spec's generation and the rerun annotation's
/// value (a change of either starts a new run), or with a schedule the
/// times it names after the last run started (after the LoadTest was
/// created, before the first).
pub struct Wanted<'a> {
    /// The LoadTest's name (a baseline naming it is its previous run).
    pub name: &'a str,
    pub generation: i64,
    pub rerun: &'a str,
    pub created: Option<Timestamp>,
    /// The flotilla.dev/save-baseline annotation's value ([`crate::baseline::save`]).
    pub save_baseline: &'a str,
}

/// Why a new run starts now, if one does.
pub(super) fn new_run_why(limits: &Limits, wanted: &Wanted<'_>, s: &LoadTestStatus, now: Timestamp) -> Option<String> {
    let (generation, rerun) = (wanted.generation, wanted.rerun);
    if !rerun.is_empty() && rerun != s.rerun {
        return Some(format!("flotilla.dev/rerun is {rerun:?}"));
    }
    match &limits.schedule {
        None if s.run == 0 => Some("created".to_string()),
        None if s.run_generation != generation => Some("the spec changed".to_string()),
        None => None,
        // A run still going is the spec it started with: a change restarts
        // it, as without a schedule (a change between runs waits for the
        // next time).
        Some(_) if s.run > 0 && !s.state.is_terminal() && s.run_generation != generation => {
            Some(format!("the spec changed during run {}", s.run))
        }
        // A scheduled time starts a run only once the current one ended.
        Some(schedule) => next_scheduled(schedule, s, wanted.created)
            .filter(|at| *at <= now && (s.run == 0 || s.state.is_terminal()))
            .map(|at| format!("scheduled at {at} by {:?}", schedule.line())),
    }
}

/// The first time the schedule names after the last run started, the
/// LoadTest was created, or this schedule line was first seen (a schedule
/// added or changed starts no run for a time already past).
fn next_scheduled(schedule: &Schedule, s: &LoadTestStatus, created: Option<Timestamp>) -> Option<Timestamp> {
    let started = s.start_time.as_ref().map(|t| t.0).filter(|_| s.run > 0);
    let seen = s.schedule_since.as_ref().map(|t| t.0);
    let last = [started, seen, created].into_iter().flatten().max()?;
    schedule.next_after(last)
}

/// Keeps in status which schedule line the times are counted for, and
/// since when (a LoadTest seen for the first time: since it was created);
/// without a schedule, nothing of one.
pub(super) fn note_schedule(s: &mut LoadTestStatus, limits: &Limits, created: Option<Timestamp>, now: Timestamp) {
    match &limits.schedule {
        Some(schedule) if s.schedule != schedule.line() => {
            let first_sight = s.run == 0 && s.schedule.is_empty();
            s.schedule = schedule.line().to_string();
            s.schedule_since = Some(Time(created.filter(|_| first_sight).unwrap_or(now)));
        }
        Some(_) => {}
        None => (s.schedule, s.schedule_since, s.next_run_time) = (String::new(), None, None),
    }
}

/// Sums up the run of `status` in its history once it has ended (once per
/// run; the oldest go past [`MAX_HISTORY`]).
pub fn record_ended(status: &mut LoadTestStatus) {
    if status.state.is_terminal() {
        record(status, RunSummary::of(status));
    }
}

/// Keeps `summary` of the status's run, once.
fn record(status: &mut LoadTestStatus, summary: RunSummary) {
    // Run 0 never ran (a spec found invalid before its first run).
    if status.run == 0 || status.history.last().is_some_and(|h| h.run == status.run) {
        return;
    }
    status.history.push(summary);
    let extra = status.history.len().saturating_sub(MAX_HISTORY);
    status.history.drain(..extra);
}

/// Sums up a run replaced before it ended (a rerun, or a spec edited
/// while it ran) as it was then, with the reason `Superseded`: the
/// history shows every run that started, not only those that ended.
pub(super) fn record_superseded(status: &mut LoadTestStatus, now: Timestamp) {
    if status.state.is_terminal() {
        return;
    }
    let mut summary = RunSummary::of(status);
    (summary.verdict, summary.reason) = (Verdict::None, "Superseded".into());
    summary.completion_time = Some(Time(now));
    record(status, summary);
}

/// With a schedule and no new run now: when the next starts, said in
/// status and looked at then; before the first run, the test waits for it.
pub(super) fn wait_for_schedule(step: &mut Step, wanted: &Wanted<'_>, schedule: &Schedule, now: Timestamp) -> bool {
    let s = &mut step.status;
    let next = next_scheduled(schedule, s, wanted.created);
    s.next_run_time = next.map(Time);
    if let Some(at) = next {
        let wait = Duration::try_from(at.duration_since(now)).unwrap_or_default().max(Duration::from_secs(1));
        step.requeue = Some(step.requeue.map_or(wait, |r| r.min(wait)));
    }
    if s.run > 0 {
        return false;
    }
    // Never ran: nothing of a run to show (a spec found invalid before is
    // valid now, or it would not be stepped).
    (s.state, s.reason, s.message) = (State::Pending, String::new(), String::new());
    let message = match next {
        Some(at) => format!("the first run starts at {at} (schedule {:?}, UTC)", schedule.line()),
        None => format!("schedule {:?} names no time ahead: no run starts until flotilla.dev/rerun", schedule.line()),
    };
    step.waiting = Some(("Scheduled", message));
    true
}
