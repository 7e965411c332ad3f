//! What each watched workload says, projected from the object when its
//! watch sees it: held only while it says something ([`crate::held_store`]).
//! Bounded whatever the object's author writes: messages cut to
//! [`MAX_MESSAGE_BYTES`], labels to [`MAX_LABELS`] and
//! [`MAX_LABEL_BYTES`] in one allocation. Pure.

use std::sync::Arc;

use flotilla_shared::cron::Schedule;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::jiff::Timestamp;

use crate::held_store::Carry;
use crate::pod::{MAX_MESSAGE_BYTES, Stamp};

/// A workload's pod template labels, `key=value` pairs separated by NUL,
/// in one allocation; None when they are more than [`MAX_LABELS`] or
/// [`MAX_LABEL_BYTES`] (then no selector matches them, as a pod whose
/// labels are cut: `flotilla_shared::pods`).
pub type Labels = Option<Box<str>>;

/// The most labels, and label bytes, held per workload.
pub const MAX_LABELS: usize = 32;
pub const MAX_LABEL_BYTES: usize = 2048;

fn template_labels(t: Option<&PodTemplateSpec>) -> Labels {
    let labels = t.and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.as_ref());
    let Some(labels) = labels else { return Some(Box::default()) };
    let bytes: usize = labels.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    if labels.len() > MAX_LABELS || bytes > MAX_LABEL_BYTES {
        return None;
    }
    Some(labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("\0").into())
}

/// The value of label `key` in `labels`.
pub fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split('\0').find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v))
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

/// What a Deployment says: its rollout stopped (its Progressing
/// condition False with `ProgressDeadlineExceeded`), or nothing.
pub fn stalled(d: &Deployment) -> Option<Arc<Stalled>> {
    let conditions = d.status.as_ref()?.conditions.as_ref()?;
    let c = conditions.iter().find(|c| c.type_ == "Progressing")?;
    (c.status == "False" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")).then(|| {
        Arc::new(Stalled {
            labels: template_labels(d.spec.as_ref().map(|s| &s.template)),
            message: cut(c.message.as_deref().unwrap_or_default()),
            since: Stamp::of(c.last_transition_time.as_ref().or(c.last_update_time.as_ref())),
        })
    })
}

/// A StatefulSet's or DaemonSet's rollout not done, as held: how far it
/// got, and since when it has not moved. A new view of a rollout that got
/// as far (same generation, as many pods updated) carries the held view's
/// `since` ([`Carry`]): when it last progressed. A drop in available pods
/// or a change of the nodes a DaemonSet wants is not progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollout {
    pub labels: Labels,
    pub generation: i64,
    pub updated: i32,
    /// The pods wanted now.
    pub wanted: i32,
    /// When this progress was first seen.
    pub since: Stamp,
    /// First seen in the operator's first list: it may have been stuck
    /// long before ([`super::findings`] keeps an open incident open).
    pub from_start: bool,
}

impl Carry for Arc<Rollout> {
    fn carry(self, held: &Self) -> Self {
        if (self.generation, self.updated) != (held.generation, held.updated) {
            return self;
        }
        Arc::new(Rollout { since: held.since, from_start: held.from_start, ..(*self).clone() })
    }
}

impl Carry for Arc<Stalled> {}
impl Carry for Arc<Finished> {}

impl Rollout {
    pub fn describe(&self) -> String {
        format!("{} of {} pods updated", self.updated, self.wanted)
    }
}

/// A StatefulSet's rollout, while one is under way (its spec not yet
/// observed, or fewer pods updated than its partition asks); an OnDelete
/// StatefulSet never rolls out by itself.
pub fn statefulset_rollout(s: &StatefulSet, now: Timestamp, from_start: bool) -> Option<Arc<Rollout>> {
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
    let under_way = status.observed_generation.unwrap_or(0) < generation || updated < target;
    under_way.then(|| {
        let labels = template_labels(Some(&spec.template));
        Arc::new(Rollout { labels, generation, updated, wanted, since: Stamp::from(Some(now)), from_start })
    })
}

/// A DaemonSet's rollout, while one is under way (its spec not yet
/// observed, or fewer pods updated than scheduled); an OnDelete DaemonSet
/// never rolls out by itself.
pub fn daemonset_rollout(d: &DaemonSet, now: Timestamp, from_start: bool) -> Option<Arc<Rollout>> {
    let (spec, status) = (d.spec.as_ref()?, d.status.as_ref()?);
    if spec.update_strategy.as_ref().and_then(|u| u.type_.as_deref()) == Some("OnDelete") {
        return None;
    }
    let generation = d.metadata.generation.unwrap_or(0);
    let wanted = status.desired_number_scheduled;
    let updated = status.updated_number_scheduled.unwrap_or(0);
    let under_way = status.observed_generation.unwrap_or(0) < generation || updated < wanted;
    under_way.then(|| {
        let labels = template_labels(Some(&spec.template));
        Arc::new(Rollout { labels, generation, updated, wanted, since: Stamp::from(Some(now)), from_start })
    })
}

/// A CronJob, as held: when its next run is due ([`Stamp::NONE`] while
/// suspended), how late it may start, and when its last run succeeded. A
/// new view with the same last run and schedule carries the held view's
/// `seen`, `from_start` and `due` ([`Carry`]): a run is missed a grace
/// after it was first seen due, whatever else changed meanwhile.
#[derive(Debug, Clone, PartialEq)]
pub struct NextRun {
    /// Its Jobs' pods' labels (its job template's pod template's).
    pub labels: Labels,
    /// The run due after its last one (`status.lastScheduleTime`, or its
    /// creation), as its schedule says.
    pub after_last: Stamp,
    /// The run it is waiting for: `after_last`, or — with a
    /// startingDeadlineSeconds — the first its controller could still
    /// start when first seen (it skips older ones).
    pub due: Stamp,
    /// Seconds after `due` before the run is missed ([`MISSED_AFTER`], or
    /// the CronJob's startingDeadlineSeconds when shorter, at least 30).
    pub grace: u32,
    /// Its Jobs running, when its concurrencyPolicy is Forbid (the
    /// controller skips runs while one is).
    pub forbidden_by: u16,
    /// `status.lastSuccessfulTime`: a failed run before it is not its
    /// newest outcome, even when the successful run's Job is gone.
    pub last_success: Stamp,
    /// When this operator first saw it due then: a run is missed only a
    /// grace after both (a CronJob resumed after a suspension is due long
    /// ago, and its controller starts a run at once).
    pub seen: Stamp,
    /// First seen in the operator's first list.
    pub from_start: bool,
}

impl Carry for Arc<NextRun> {
    fn carry(self, held: &Self) -> Self {
        if self.after_last != held.after_last {
            return self;
        }
        Arc::new(NextRun { seen: held.seen, from_start: held.from_start, due: held.due, ..(*self).clone() })
    }
}

/// How late a CronJob's run may start before it is missed.
pub const MISSED_AFTER: std::time::Duration = std::time::Duration::from_secs(300);

/// What a CronJob says: when its next run is due (none while suspended, or
/// when its schedule or time zone cannot be read: the API server checks
/// both). With a `startingDeadlineSeconds`, runs due longer ago than that
/// the controller will never start (it skips them): the next is the one
/// after `now` less the deadline.
pub fn next_run(c: &CronJob, now: Timestamp, from_start: bool) -> Option<Arc<NextRun>> {
    let spec = &c.spec;
    let status = c.status.as_ref();
    let last_success = Stamp::of(status.and_then(|s| s.last_successful_time.as_ref()));
    let labels = template_labels(spec.job_template.spec.as_ref().map(|s| &s.template));
    let max = u32::try_from(MISSED_AFTER.as_secs()).unwrap_or(u32::MAX);
    let grace =
        spec.starting_deadline_seconds.map_or(max, |d| u32::try_from(d.clamp(30, i64::from(max))).unwrap_or(max));
    let (after_last, due) = match (spec.suspend != Some(true)).then(|| due(c, now)).flatten() {
        Some((after_last, due)) => (Stamp::from(Some(after_last)), Stamp::from(Some(due))),
        None => (Stamp::NONE, Stamp::NONE),
    };
    let running = status.and_then(|s| s.active.as_ref()).map_or(0, Vec::len);
    let forbid = spec.concurrency_policy.as_deref() == Some("Forbid");
    Some(Arc::new(NextRun {
        labels,
        after_last,
        due,
        grace,
        forbidden_by: if forbid { u16::try_from(running).unwrap_or(u16::MAX) } else { 0 },
        last_success,
        seen: Stamp::from(Some(now)),
        from_start,
    }))
}

/// The run due after the last one, and the first its controller could
/// still start at `now`.
fn due(c: &CronJob, now: Timestamp) -> Option<(Timestamp, Timestamp)> {
    let spec = &c.spec;
    let tz = match spec.time_zone.as_deref() {
        None => jiff::tz::TimeZone::UTC,
        Some(name) => jiff::tz::TimeZone::get(name).ok()?,
    };
    let schedule = Schedule::parse(&spec.schedule).ok()?;
    let status = c.status.as_ref();
    let last = status.and_then(|s| s.last_schedule_time.as_ref()).or(c.metadata.creation_timestamp.as_ref())?.0;
    let after_last = schedule.next_after_in(last, &tz)?;
    let Some(deadline) = spec.starting_deadline_seconds else { return Some((after_last, after_last)) };
    let earliest = crate::pod::before(now, std::time::Duration::from_secs(u64::try_from(deadline).unwrap_or(0)));
    let startable = if earliest > last { schedule.next_after_in(earliest, &tz)? } else { after_last };
    Some((after_last, startable))
}

/// A Job that ended, as held: a failed one, or a CronJob's run (its
/// newest finished run says whether the CronJob is failing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub labels: Labels,
    /// The CronJob that started it (its controller), when one did.
    pub cronjob: Option<Box<str>>,
    pub created: Stamp,
    /// Why it failed; None: it completed.
    pub failure: Option<Failure>,
}

/// How a Job failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The Failed condition's reason (`BackoffLimitExceeded`,
    /// `DeadlineExceeded`, …) and message.
    pub reason: Box<str>,
    pub message: Box<str>,
    pub at: Stamp,
    /// The Job's UID (an incident's incarnation).
    pub uid: Box<str>,
}

/// What a Job says: that it failed, or — for a CronJob's run — that it
/// completed; a running Job (or a completed one no CronJob started) says
/// nothing.
pub fn finished(j: &Job) -> Option<Arc<Finished>> {
    let conditions = j.status.as_ref()?.conditions.as_ref()?;
    let is = |t: &str| conditions.iter().find(|c| c.type_ == t && c.status == "True");
    let cronjob = j
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == "CronJob")
        .map(|o| Box::from(o.name.as_str()));
    let failure = is("Failed").map(|c| Failure {
        reason: cut(c.reason.as_deref().unwrap_or("Failed")),
        message: cut(c.message.as_deref().unwrap_or_default()),
        at: Stamp::of(c.last_transition_time.as_ref()),
        uid: j.metadata.uid.as_deref().unwrap_or_default().into(),
    });
    if failure.is_none() && (cronjob.is_none() || is("Complete").is_none()) {
        return None;
    }
    Some(Arc::new(Finished {
        labels: template_labels(j.spec.as_ref().map(|s| &s.template)),
        cronjob,
        created: Stamp::of(j.metadata.creation_timestamp.as_ref()),
        failure,
    }))
}
