//! What workloads say of themselves (issue 32, kube-prometheus's
//! KubeDeploymentRolloutStuck and KubeJobFailed): a Deployment whose
//! rollout stopped, a Job that failed, a CronJob whose newest finished run
//! failed. Each Deployment and Job is projected when its watch sees it
//! ([`stalled`], [`finished`]) and held only while it has something to say
//! ([`crate::held_store`]): a cluster of healthy Deployments and running
//! Jobs holds nothing. [`findings`] turns what is held into problems for
//! the PodAlerts that ask (`alerts.rollouts`, `alerts.jobs`), silenced as
//! a pod's problems are, and narrowed by the PodAlert's selector as its
//! pods are (matched against the workload's pod template labels). Pure.

use std::collections::BTreeMap;

use flotilla_shared::intern::names;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::jiff::Timestamp;

use crate::crd::Reason;
use crate::held_store::Held;
use crate::observe::{Findings, Key, Problem, Skip};
use crate::pod::{MAX_MESSAGE_BYTES, PodView, Stamp, State, Termination, Workload};
use crate::rules::Rules;
use crate::silence::{Refused, matching_workload};

/// A Deployment whose rollout stopped, as held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stalled {
    /// Its pods' labels (its pod template's), for the PodAlert's selector.
    pub labels: Labels,
    /// The Progressing condition's message.
    pub message: Box<str>,
    /// When it stopped (the condition's transition).
    pub since: Stamp,
}

/// A StatefulSet's or DaemonSet's rollout not done, as held: how far it
/// got, and since when it has not moved. Two views of one rollout that got
/// as far are equal whatever their `since`, so the store keeps the first
/// ([`crate::held_store`]): the time it last progressed.
#[derive(Debug, Clone)]
pub struct Rollout {
    /// Its pods' labels (its pod template's), for the PodAlert's selector.
    pub labels: Labels,
    /// The spec's generation, and the pods updated, available and wanted:
    /// a change of any is progress.
    pub progress: (i64, i32, i32, i32),
    /// When this progress was first seen.
    pub since: Stamp,
}

impl PartialEq for Rollout {
    fn eq(&self, other: &Self) -> bool {
        (&self.labels, self.progress) == (&other.labels, other.progress)
    }
}

impl Rollout {
    fn describe(&self) -> String {
        let (_, updated, available, wanted) = self.progress;
        format!("{updated} of {wanted} pods updated, {available} available")
    }
}

/// A StatefulSet's rollout, while one is under way (its spec not yet
/// observed, or fewer pods updated than its partition asks); an OnDelete
/// StatefulSet never rolls out by itself.
pub fn statefulset_rollout(s: &StatefulSet, now: Timestamp) -> Option<Rollout> {
    let (spec, status) = (s.spec.as_ref()?, s.status.as_ref()?);
    let strategy = spec.update_strategy.as_ref();
    if strategy.and_then(|u| u.type_.as_deref()) == Some("OnDelete") {
        return None;
    }
    let wanted = spec.replicas.unwrap_or(1);
    let partition = strategy.and_then(|u| u.rolling_update.as_ref()).and_then(|r| r.partition).unwrap_or(0);
    let target = (wanted - partition.clamp(0, wanted)).max(0);
    let generation = s.metadata.generation.unwrap_or(0);
    let updated = status.updated_replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(status.ready_replicas.unwrap_or(0));
    let under_way = status.observed_generation.unwrap_or(0) < generation || updated < target;
    under_way.then(|| Rollout {
        labels: template_labels(Some(&spec.template)),
        progress: (generation, updated, available, wanted),
        since: Stamp::from(Some(now)),
    })
}

/// A DaemonSet's rollout, while one is under way (its spec not yet
/// observed, or fewer pods updated than scheduled); an OnDelete DaemonSet
/// never rolls out by itself.
pub fn daemonset_rollout(d: &DaemonSet, now: Timestamp) -> Option<Rollout> {
    let (spec, status) = (d.spec.as_ref()?, d.status.as_ref()?);
    if spec.update_strategy.as_ref().and_then(|u| u.type_.as_deref()) == Some("OnDelete") {
        return None;
    }
    let generation = d.metadata.generation.unwrap_or(0);
    let wanted = status.desired_number_scheduled;
    let updated = status.updated_number_scheduled.unwrap_or(0);
    let available = status.number_available.unwrap_or(0);
    let under_way = status.observed_generation.unwrap_or(0) < generation || updated < wanted;
    under_way.then(|| Rollout {
        labels: template_labels(Some(&spec.template)),
        progress: (generation, updated, available, wanted),
        since: Stamp::from(Some(now)),
    })
}

/// A CronJob that is not suspended, as held: when its next run is due
/// after the last one it started (computed once, from its status), and
/// how late it may start. Two views with the same due run are equal
/// whatever their `seen`, so the store keeps the first: when this operator
/// first saw that last run.
#[derive(Debug, Clone)]
pub struct NextRun {
    /// Its Jobs' pods' labels (its job template's pod template's).
    pub labels: Labels,
    pub due: Stamp,
    /// Seconds after `due` before the run is missed ([`MISSED_AFTER`], or
    /// the CronJob's startingDeadlineSeconds when shorter, at least 30).
    pub grace: u32,
    /// Its Jobs running, when its concurrencyPolicy is Forbid (the
    /// controller skips runs while one is).
    pub forbidden_by: u16,
    /// When this operator first saw it due then: a run is missed only a
    /// grace after both (a CronJob resumed after a long suspension is due
    /// long ago, and its controller starts a run at once).
    pub seen: Stamp,
}

impl PartialEq for NextRun {
    fn eq(&self, o: &Self) -> bool {
        (&self.labels, self.due, self.grace, self.forbidden_by) == (&o.labels, o.due, o.grace, o.forbidden_by)
    }
}

/// How late a CronJob's run may start before it is missed.
pub const MISSED_AFTER: std::time::Duration = std::time::Duration::from_secs(300);

/// What a CronJob says: when its next run is due, unless suspended (or its
/// schedule or time zone cannot be read: the API server checks both).
pub fn next_run(c: &CronJob, now: Timestamp) -> Option<NextRun> {
    let spec = &c.spec;
    if spec.suspend == Some(true) {
        return None;
    }
    let tz = match spec.time_zone.as_deref() {
        None => jiff::tz::TimeZone::UTC,
        Some(name) => jiff::tz::TimeZone::get(name).ok()?,
    };
    let schedule = flotilla_shared::cron::Schedule::parse(&spec.schedule).ok()?;
    let status = c.status.as_ref();
    let last = status.and_then(|s| s.last_schedule_time.as_ref()).or(c.metadata.creation_timestamp.as_ref())?;
    let due = schedule.next_after_in(last.0, &tz)?;
    let max = u32::try_from(MISSED_AFTER.as_secs()).unwrap_or(u32::MAX);
    let grace =
        spec.starting_deadline_seconds.map_or(max, |d| u32::try_from(d.clamp(30, i64::from(max))).unwrap_or(max));
    let running = status.and_then(|s| s.active.as_ref()).map_or(0, Vec::len);
    let forbid = spec.concurrency_policy.as_deref() == Some("Forbid");
    Some(NextRun {
        labels: template_labels(spec.job_template.spec.as_ref().map(|s| &s.template)),
        due: Stamp::from(Some(due)),
        grace,
        forbidden_by: if forbid { u16::try_from(running).unwrap_or(u16::MAX) } else { 0 },
        seen: Stamp::from(Some(now)),
    })
}

/// A Job that ended, as held: a failed one, or a CronJob's run (its
/// newest finished run says whether the CronJob is failing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// Its pods' labels (its pod template's), for the PodAlert's selector.
    pub labels: Labels,
    /// The CronJob that started it (its controller), when one did.
    pub cronjob: Option<Box<str>>,
    pub created: Stamp,
    /// Why it failed; None: it completed.
    pub failure: Option<Box<Failure>>,
}

/// How a Job failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The Failed condition's reason (`BackoffLimitExceeded`,
    /// `DeadlineExceeded`, …) and message.
    pub reason: Box<str>,
    pub message: Box<str>,
    pub at: Stamp,
    /// The Job's UID: each failed Job is notified once.
    pub uid: Box<str>,
}

/// A workload's pod template labels; None when they are more than
/// [`MAX_LABEL_BYTES`] (then no selector matches them, as a pod whose
/// labels are cut: `flotilla_shared::pods`).
pub type Labels = Option<Box<BTreeMap<String, String>>>;

/// The most label bytes held per workload.
pub const MAX_LABEL_BYTES: usize = 4096;

fn template_labels(t: Option<&PodTemplateSpec>) -> Labels {
    let labels = t.and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.clone()).unwrap_or_default();
    let bytes: usize = labels.iter().map(|(k, v)| k.len() + v.len()).sum();
    (bytes <= MAX_LABEL_BYTES).then(|| Box::new(labels))
}

/// Whether `rules`' selector selects a workload whose pods carry `labels`.
fn selected(rules: &Rules, labels: &Labels) -> bool {
    rules.selector.as_ref().is_none_or(|s| labels.as_ref().is_some_and(|l| s.matches(l)))
}

/// At most [`MAX_MESSAGE_BYTES`] of `s` (a condition's message is the
/// object author's to write).
fn cut(s: &str) -> Box<str> {
    let mut end = s.len().min(MAX_MESSAGE_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].into()
}

/// What a Deployment says: its rollout stopped (its Progressing
/// condition False with `ProgressDeadlineExceeded`), or nothing.
pub fn stalled(d: &Deployment) -> Option<Stalled> {
    let conditions = d.status.as_ref()?.conditions.as_ref()?;
    let c = conditions.iter().find(|c| c.type_ == "Progressing")?;
    (c.status == "False" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")).then(|| Stalled {
        labels: template_labels(d.spec.as_ref().map(|s| &s.template)),
        message: cut(c.message.as_deref().unwrap_or_default()),
        since: Stamp::of(c.last_transition_time.as_ref().or(c.last_update_time.as_ref())),
    })
}

/// What a Job says: that it failed, or — for a CronJob's run — that it
/// completed; a running Job (or a completed one no CronJob started) says
/// nothing.
pub fn finished(j: &Job) -> Option<Finished> {
    let conditions = j.status.as_ref()?.conditions.as_ref()?;
    let is = |t: &str| conditions.iter().find(|c| c.type_ == t && c.status == "True");
    let cronjob = j
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == "CronJob")
        .map(|o| Box::from(o.name.as_str()));
    let failure = is("Failed").map(|c| {
        Box::new(Failure {
            reason: cut(c.reason.as_deref().unwrap_or("Failed")),
            message: cut(c.message.as_deref().unwrap_or_default()),
            at: Stamp::of(c.last_transition_time.as_ref()),
            uid: j.metadata.uid.as_deref().unwrap_or_default().into(),
        })
    });
    if failure.is_none() && (cronjob.is_none() || is("Complete").is_none()) {
        return None;
    }
    Some(Finished {
        labels: template_labels(j.spec.as_ref().map(|s| &s.template)),
        cronjob,
        created: Stamp::of(j.metadata.creation_timestamp.as_ref()),
        failure,
    })
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
    pub cronjobs: std::sync::Arc<Held<NextRun>>,
    pub deployments: std::sync::Arc<Held<Stalled>>,
    pub statefulsets: std::sync::Arc<Held<Rollout>>,
    pub daemonsets: std::sync::Arc<Held<Rollout>>,
    pub jobs: std::sync::Arc<Held<Finished>>,
}

/// Where a failed Job's log is: one of its pods and the container that
/// failed, when the pod cache still has one.
pub type FailedPod<'a> = &'a dyn Fn(&str, &str) -> Option<(String, String)>;

/// The problems the held workloads of the namespaces `in_scope` keeps give
/// `rules` (none unless it asks for rollouts or jobs), silenced as a pod's
/// are ([`matching_workload`]).
pub fn findings(
    held: &HeldSignals,
    rules: &Rules,
    in_scope: &dyn Fn(&str) -> bool,
    failed_pod: FailedPod<'_>,
    now: Timestamp,
) -> Findings {
    let mut f = Findings { silence_counts: vec![0; rules.silences.len()], ..Findings::default() };
    let mut found = Vec::new();
    let HeldSignals { cronjobs, deployments, statefulsets, daemonsets, jobs } = held;
    if rules.rollouts {
        for (kind, rollouts) in [("StatefulSet", statefulsets), ("DaemonSet", daemonsets)] {
            for (key, r) in rollouts.iter() {
                let Some((ns, name)) = key.split_once('/').filter(|(ns, _)| in_scope(ns)) else { continue };
                if !selected(rules, &r.labels) {
                    continue;
                }
                let since = r.since.get().unwrap_or(now);
                let stuck_at = crate::pod::after(since, rules.rollout_timeout);
                if stuck_at > now {
                    // Looked at again when it would be stuck.
                    f.recheck_at = Some(f.recheck_at.map_or(stuck_at, |at| at.min(stuck_at)));
                    continue;
                }
                let message = format!(
                    "rollout not progressing for {}: {}",
                    flotilla_shared::duration::format(rules.rollout_timeout),
                    r.describe()
                );
                found.push(problem(ns, kind, name, Reason::RolloutStuck, message, r.since, now, None));
            }
        }
        for (key, s) in deployments.iter() {
            let Some((ns, name)) = key.split_once('/').filter(|(ns, _)| in_scope(ns)) else { continue };
            if !selected(rules, &s.labels) {
                continue;
            }
            let message = format!("rollout stopped: {}", s.message);
            found.push(problem(ns, "Deployment", name, Reason::RolloutStuck, message, s.since, now, None));
        }
    }
    if rules.jobs {
        // A CronJob's runs: its newest finished one decides.
        let mut newest: BTreeMap<(&str, &str), (&str, &Finished)> = BTreeMap::new();
        for (key, j) in jobs.iter() {
            let Some((ns, name)) = key.split_once('/').filter(|(ns, _)| in_scope(ns)) else { continue };
            if !selected(rules, &j.labels) {
                continue;
            }
            match (&j.cronjob, &j.failure) {
                (Some(cronjob), _) => {
                    let slot = newest.entry((ns, cronjob)).or_insert((name, j));
                    if (j.created, name) > (slot.1.created, slot.0) {
                        *slot = (name, j);
                    }
                }
                (None, Some(failure)) => {
                    found.push(job_problem(ns, "Job", name, name, failure, failed_pod, now));
                }
                (None, None) => {}
            }
        }
        for ((ns, cronjob), (job, j)) in newest {
            if let Some(failure) = &j.failure {
                found.push(job_problem(ns, "CronJob", cronjob, job, failure, failed_pod, now));
            }
        }
        for (key, c) in cronjobs.iter() {
            let Some((ns, name)) = key.split_once('/').filter(|(ns, _)| in_scope(ns)) else { continue };
            let Some(due) = c.due.get().filter(|_| selected(rules, &c.labels)) else { continue };
            let from = c.seen.get().map_or(due, |seen| seen.max(due));
            let missed_at = crate::pod::after(from, std::time::Duration::from_secs(u64::from(c.grace)));
            if missed_at > now {
                // Looked at again then, unless a run starts before (its
                // status changes: the watch wakes the PodAlert).
                f.recheck_at = Some(f.recheck_at.map_or(missed_at, |at| at.min(missed_at)));
                continue;
            }
            let mut message = format!("no run started for the one due at {due}");
            if c.forbidden_by > 0 {
                message.push_str(&format!(
                    " (concurrencyPolicy Forbid, {} Job{} of it still running)",
                    c.forbidden_by,
                    if c.forbidden_by == 1 { "" } else { "s" }
                ));
            }
            found.push(problem(ns, "CronJob", name, Reason::MissedSchedule, message, c.due, now, None));
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
