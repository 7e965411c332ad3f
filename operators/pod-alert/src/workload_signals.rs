//! What workloads say of themselves (issue 32, kube-prometheus's
//! KubeDeploymentRolloutStuck, KubeStatefulSetUpdateNotRolledOut,
//! KubeDaemonSetRolloutStuck and KubeJobFailed): a Deployment whose rollout
//! stopped, a StatefulSet or DaemonSet whose rollout does not progress, a
//! Job that failed, a CronJob whose newest finished run failed or that
//! starts no run when one is due. Each object is projected when its watch
//! sees it ([`project`]) and held only while it has something to say
//! ([`crate::held_store`]: healthy Deployments, StatefulSets, DaemonSets
//! and running Jobs hold nothing; a CronJob holds its next run's time and
//! its labels). [`findings`] turns what is held into problems for the
//! PodAlerts that ask (`alerts.rollouts`, `alerts.jobs`), silenced as a
//! pod's problems are, and narrowed by the PodAlert's selector as its pods
//! are (matched against the workload's pod template labels). Pure.

use std::collections::BTreeMap;
use std::sync::Arc;

use flotilla_shared::intern::names;
use k8s_openapi::jiff::Timestamp;

use crate::crd::Reason;
use crate::held_store::{Held, in_namespace};
use crate::observe::{Findings, Key, Problem, Skip};
use crate::pod::{PodView, Stamp, State, Termination, Workload};
use crate::rules::Rules;
use crate::silence::{Refused, matching_workload};

pub mod project;
pub use project::{
    Failure, Finished, Labels, NextRun, Rollout, Stalled, daemonset_rollout, finished, next_run, stalled,
    statefulset_rollout,
};

/// Whether `rules`' selector selects a workload whose pods carry `labels`;
/// labels too many to hold match no selector, and are counted
/// (`LabelsTooLarge`, as pods' are).
fn selected(rules: &Rules, labels: &Labels, f: &mut Findings) -> bool {
    let Some(s) = rules.selector.as_ref() else { return true };
    match labels.as_deref() {
        Some(l) => s.matches_with(|k| project::label(l, k)),
        None => {
            *f.skipped.entry(Skip::LabelsTooLarge).or_default() += 1;
            false
        }
    }
}

/// The container of a Job's `pod` that failed (its current run or its
/// last one ended with a non-zero exit, or was OOM-killed), if one did.
pub fn failed_container(pod: &PodView) -> Option<&str> {
    let failed = |t: &Termination| t.exit_code != 0 || &*t.reason == "OOMKilled";
    pod.named_containers()
        .find(|(_, c)| {
            matches!(&*c.state(), State::Terminated(t) if failed(t)) || c.last_termination().is_some_and(failed)
        })
        .map(|(name, _)| &**name)
}

/// What the workload watches hold, shared with each reconcile.
#[derive(Debug, Default, Clone)]
pub struct HeldSignals {
    pub cronjobs: Arc<Held<Arc<NextRun>>>,
    pub deployments: Arc<Held<Arc<Stalled>>>,
    pub statefulsets: Arc<Held<Arc<Rollout>>>,
    pub daemonsets: Arc<Held<Arc<Rollout>>>,
    pub jobs: Arc<Held<Arc<Finished>>>,
}

/// Where a failed Job's log is: one of its pods and the container that
/// failed, when the pod cache still has one.
pub type FailedPod<'a> = &'a dyn Fn(&str, &str) -> Option<(String, String)>;

/// The problems the held workloads of `scope` (a namespace, or all) give
/// `rules` (none unless it asks for rollouts or jobs), silenced as a pod's
/// are ([`matching_workload`]). `open` says whether an incident of a key is
/// open: a rollout or a CronJob first seen in the operator's first list may
/// have been stuck long before, and its restored incident stays open
/// rather than resolve and open again a timeout later.
pub fn findings(
    held: &HeldSignals,
    rules: &Rules,
    scope: Option<&str>,
    open: &dyn Fn(&Key) -> bool,
    failed_pod: FailedPod<'_>,
    now: Timestamp,
) -> Findings {
    let mut f = Findings { silence_counts: vec![0; rules.silences.len()], ..Findings::default() };
    let mut found = Vec::new();
    let recheck = |f: &mut Findings, at: Timestamp| f.recheck_at = Some(f.recheck_at.map_or(at, |r| r.min(at)));
    let HeldSignals { cronjobs, deployments, statefulsets, daemonsets, jobs } = held;
    if rules.rollouts {
        for (key, s) in in_namespace(deployments, scope) {
            let Some((ns, name)) = key.split_once('/').filter(|_| selected(rules, &s.labels, &mut f)) else { continue };
            let message = format!("rollout stopped: {}", s.message);
            found.push(problem(ns, "Deployment", name, Reason::RolloutStuck, message, s.since, now, None));
        }
        let wanted = rules.selects_reason(Reason::RolloutStuck);
        for (kind, rollouts) in [("StatefulSet", statefulsets), ("DaemonSet", daemonsets)] {
            for (key, r) in in_namespace(rollouts, scope) {
                let Some((ns, name)) = key.split_once('/').filter(|_| selected(rules, &r.labels, &mut f)) else {
                    continue;
                };
                let since = r.since.get().unwrap_or(now);
                let stuck_at = crate::pod::after(since, rules.rollout_timeout);
                let p = || {
                    let timeout = flotilla_shared::duration::format(rules.rollout_timeout);
                    let message = format!("rollout not progressing for {timeout}: {}", r.describe());
                    problem(ns, kind, name, Reason::RolloutStuck, message, r.since, now, None)
                };
                if stuck_at <= now {
                    found.push(p());
                } else if r.from_start && open(&p().key) {
                    // Stuck before this operator started, as its restored
                    // incident says: it stays open.
                    found.push(p());
                } else if wanted {
                    recheck(&mut f, stuck_at);
                }
            }
        }
    }
    if rules.jobs {
        // A CronJob's runs: its newest finished one decides, unless it
        // succeeded since (its Job may be gone: successfulJobsHistoryLimit).
        // (The newest is chosen among all its runs, then selected: an old
        // run whose labels match is not the newest.)
        let mut newest: BTreeMap<(&str, &str), (&str, &Finished)> = BTreeMap::new();
        for (key, j) in in_namespace(jobs, scope) {
            let Some((ns, name)) = key.split_once('/') else { continue };
            match (&j.cronjob, &j.failure) {
                (Some(cronjob), _) => {
                    let slot = newest.entry((ns, cronjob)).or_insert((name, j));
                    if (j.created, name) > (slot.1.created, slot.0) {
                        *slot = (name, j);
                    }
                }
                (None, Some(failure)) if selected(rules, &j.labels, &mut f) => {
                    found.push(job_problem(ns, "Job", name, name, failure, failed_pod, now));
                }
                _ => {}
            }
        }
        for ((ns, cronjob), (job, j)) in newest {
            let Some(failure) = &j.failure else { continue };
            if !selected(rules, &j.labels, &mut f) {
                continue;
            }
            let failed_at = failure.at.get().or(j.created.get());
            let succeeded_since = cronjobs
                .get(format!("{ns}/{cronjob}").as_str())
                .and_then(|c| c.last_success.get())
                .is_some_and(|ok| failed_at.is_some_and(|at| ok > at));
            if !succeeded_since {
                found.push(job_problem(ns, "CronJob", cronjob, job, failure, failed_pod, now));
            }
        }
        let wanted = rules.selects_reason(Reason::MissedSchedule);
        for (key, c) in in_namespace(cronjobs, scope) {
            let Some((ns, name)) = key.split_once('/').filter(|_| selected(rules, &c.labels, &mut f)) else { continue };
            let Some(due) = c.due.get() else { continue };
            let grace = std::time::Duration::from_secs(u64::from(c.grace));
            let p = || {
                let mut message = format!("no run started for the one due at {due}");
                if c.forbidden_by > 0 {
                    let s = if c.forbidden_by == 1 { "" } else { "s" };
                    message.push_str(&format!(
                        " (concurrencyPolicy Forbid, {} Job{s} of it still running)",
                        c.forbidden_by
                    ));
                }
                problem(ns, "CronJob", name, Reason::MissedSchedule, message, c.due, now, None)
            };
            let from = c.seen.get().map_or(due, |seen| seen.max(due));
            let missed_at = crate::pod::after(from, grace);
            if missed_at <= now {
                found.push(p());
            } else if c.from_start
                && c.after_last.get().is_some_and(|d| crate::pod::after(d, grace) <= now)
                && open(&p().key)
            {
                // Missed before this operator started, as its restored
                // incident says.
                found.push(p());
            } else if wanted {
                // Looked at again then, unless a run starts before (its
                // status changes: the watch wakes the PodAlert).
                recheck(&mut f, missed_at);
            }
        }
    }
    for p in found {
        if !rules.selects_reason(p.key.reason) {
            *f.skipped.entry(Skip::ReasonNotSelected).or_default() += 1;
            continue;
        }
        let mut refused = Refused::default();
        let w = &p.key.workload;
        let silencing = matching_workload(
            &rules.silences,
            &rules.namespace,
            &rules.namespace_silences,
            &rules.workload_silences,
            (&p.key.namespace, &w.kind, &w.name),
            p.key.reason,
            now,
            &mut f.silence_counts,
            &mut refused,
        );
        if let Some(w) = refused.workload {
            f.refused_workloads.insert(w);
        }
        if refused.namespace {
            f.refused_namespaces.insert(p.key.namespace.clone());
        }
        if let Some(s) = silencing {
            *f.skipped.entry(Skip::Silenced).or_default() += 1;
            // Looked at again when the silence ends.
            f.recheck_at = Some(f.recheck_at.map_or(s.until, |r| r.min(s.until)));
            let slot = f.silenced.entry(p.key.clone()).or_insert_with(|| s.clone());
            if s.until > slot.until {
                *slot = s;
            }
        }
        f.problems.push(p);
    }
    f.problems.sort_by(|a, b| (&a.key, &a.pod).cmp(&(&b.key, &b.pod)));
    f
}

/// A failed Job's problem, as the Job's or its CronJob's (`kind`/`name`).
fn job_problem(
    ns: &str,
    kind: &str,
    name: &str,
    job: &str,
    failure: &Failure,
    failed_pod: FailedPod<'_>,
    now: Timestamp,
) -> Problem {
    let mut message = format!("{}: {}", failure.reason, failure.message);
    if kind == "CronJob" {
        message = format!("last run {job} failed: {message}");
    }
    let mut p = problem(ns, kind, name, Reason::JobFailed, message, failure.at, now, Some(failure.uid.to_string()));
    if let Some((pod, container)) = failed_pod(ns, job) {
        (p.pod, p.log_container) = (pod, Some(container));
    }
    p
}

#[allow(clippy::too_many_arguments)]
fn problem(
    ns: &str,
    kind: &str,
    name: &str,
    reason: Reason,
    message: String,
    since: Stamp,
    now: Timestamp,
    incarnation: Option<String>,
) -> Problem {
    Problem {
        key: Key {
            namespace: ns.to_string(),
            workload: Workload { kind: names().get(kind), name: names().get(name) },
            container: String::new(),
            reason,
        },
        pod: String::new(),
        message,
        restarts: 0,
        since: since.get().unwrap_or(now),
        incarnation,
        previous_logs: false,
        log_container: None,
    }
}

#[cfg(test)]
mod tests;
