//! What is wrong with the pods right now: each pod in a PodAlert's scope
//! becomes problems (keyed by workload, container and reason) or skips
//! (counted by cause). Level-based and pure: the same pods give the same
//! findings however many updates led to them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use flotilla_shared::uid::Uid;
use k8s_openapi::jiff::Timestamp;
use smallvec::SmallVec;

use crate::crd::Reason;
use crate::pod::{ContainerView, PodView, Stamp, State, Termination, Workload, elapsed};
use crate::rules::Rules;
use crate::silence::{self, Refused, Silencing, matching};

/// An incident's identity: a Deployment's ten crashing pods are one incident.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub namespace: String,
    pub workload: Workload,
    /// Empty for pod-level reasons.
    pub container: String,
    pub reason: Reason,
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.workload)?;
        if !self.container.is_empty() {
            write!(f, " container {}", self.container)?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// One pod's problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub key: Key,
    pub pod: String,
    pub message: String,
    pub restarts: u32,
    /// When the problem started (grace periods count from here).
    pub since: Timestamp,
    /// The terminated container's ID for reasons that are events (a crash,
    /// an OOM kill, an exit): each is notified once.
    pub incarnation: Option<String>,
    /// Whether the log worth reading is the previous run's (the crashed run
    /// when a new one is running), else the newest run's.
    pub previous_logs: bool,
    /// The container whose log shows the problem when the key names none:
    /// a failed Job's pod's ([`crate::workload_signals`]).
    pub log_container: Option<String>,
}

/// Why a pod or container was not evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Skip {
    Completed,
    Terminating,
    SchedulingGated,
    IgnoredContainer,
    IgnoredPod,
    ReasonNotSelected,
    /// A problem a silence covers (still a problem: it opens when the
    /// silence ends).
    Silenced,
    /// A workload whose labels are too many to hold, with a selector to
    /// match (pods' are counted by the cache: `Outcome::cut`).
    LabelsTooLarge,
}

impl Skip {
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::Completed => "Completed",
            Skip::Terminating => "Terminating",
            Skip::SchedulingGated => "SchedulingGated",
            Skip::IgnoredContainer => "IgnoredContainer",
            Skip::IgnoredPod => "IgnoredPod",
            Skip::ReasonNotSelected => "ReasonNotSelected",
            Skip::Silenced => "Silenced",
            Skip::LabelsTooLarge => "LabelsTooLarge",
        }
    }
}

/// Restart counts seen over time, per container incarnation (pod UID and
/// container), to count restarts within the window: the API only gives a
/// lifetime count.
#[derive(Debug, Clone, Default)]
pub struct RestartHistory {
    /// (when seen, count) to the second; a container that no longer
    /// restarts has one, held inline (a `Vec`'s first allocation was ~110
    /// bytes per restarted container, issue 28).
    samples: HashMap<Incarnation, SmallVec<[(Stamp, u32); 1]>>,
}

/// A container of a pod: its pod's UID and its name.
type Incarnation = (Uid, Arc<str>);

impl RestartHistory {
    /// Records `count` for a container and returns its restarts within
    /// `window`: the count now minus the count at the window's start. A
    /// container first seen within the window counts all its restarts (the
    /// operator may just have started; its last crash is recent anyway).
    ///
    /// A container that never restarted has none to count and is not
    /// recorded (its baseline would be 0 anyway): recording every container
    /// of every pod cost a PodAlert over 10,000 pods ~6 MB (issue 28).
    fn restarts_within(
        &mut self,
        uid: &Uid,
        container: &Arc<str>,
        count: u32,
        now: Timestamp,
        window: Duration,
    ) -> u32 {
        if count == 0 {
            return 0;
        }
        let samples = self.samples.entry((uid.clone(), Arc::clone(container))).or_default();
        if samples.last().is_none_or(|&(_, c)| c != count) {
            samples.push((Stamp::from(Some(now)), count));
        }
        let age = |t: Stamp| t.get().map_or(Duration::MAX, |t| elapsed(t, now));
        // Keep the newest sample at or before the window's start as baseline.
        let start_idx = samples.iter().rposition(|&(t, _)| age(t) >= window);
        if let Some(i) = start_idx.filter(|&i| i > 0) {
            samples.drain(..i);
            // Back inline once a crash loop has ended.
            samples.shrink_to_fit();
        }
        let baseline = match samples.first() {
            Some(&(t, c)) if age(t) >= window => c,
            _ => 0,
        };
        count.saturating_sub(baseline)
    }

    /// When this container's count within `window` next drops without a
    /// new restart (a sample leaves the window): None when it cannot.
    fn next_change(&self, uid: &Uid, container: &Arc<str>, now: Timestamp, window: Duration) -> Option<Timestamp> {
        let samples = self.samples.get(&(uid.clone(), Arc::clone(container)))?;
        samples.iter().filter_map(|&(t, _)| Some(crate::pod::after(t.get()?, window))).filter(|&at| at > now).min()
    }

    /// Forgets containers of pods not seen in the last evaluation.
    fn retain_pods(&mut self, seen: &std::collections::HashSet<&Uid>) {
        self.samples.retain(|(uid, _), _| seen.contains(uid));
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

/// The findings of one evaluation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    pub problems: Vec<Problem>,
    pub skipped: BTreeMap<Skip, u32>,
    /// The keys a silence covers (some problem of the key is silenced),
    /// with the silence ending last: no incident of theirs opens or
    /// escalates while it lasts.
    pub silenced: BTreeMap<Key, Silencing>,
    /// Problems each of spec.silences covered.
    pub silence_counts: Vec<u32>,
    /// Pods whose silence annotation ends more than 7 days ahead (not applied).
    pub refused_annotations: std::collections::BTreeSet<String>,
    /// Workloads (`Kind/name`) whose silence annotation ends more than 7
    /// days ahead (not applied).
    pub refused_workloads: std::collections::BTreeSet<String>,
    /// Namespaces (of problems found) whose silence annotation ends more
    /// than 7 days ahead (not applied).
    pub refused_namespaces: std::collections::BTreeSet<String>,
    /// The soonest time at which the same pods may be found otherwise: a
    /// crash leaving the restart window, a silence ending or coming within
    /// seven days. None: only a change of the pods or rules changes them
    /// (what lets [`crate::evaluation`] keep a namespace's findings).
    pub recheck_at: Option<Timestamp>,
}

impl Findings {
    /// Whether it says nothing at all.
    pub fn is_empty(&self) -> bool {
        self.problems.is_empty() && self.skipped.is_empty() && self.silenced.is_empty() && self.recheck_at.is_none()
    }

    /// These findings and `other`'s (the same PodAlert's: its silences
    /// counted in both): the pods' with the workloads'
    /// ([`crate::workload_signals`]).
    pub fn merged(&self, other: &Findings) -> Findings {
        let mut f = self.clone();
        f.problems.extend(other.problems.iter().cloned());
        f.problems.sort_by(|a, b| (&a.key, &a.pod).cmp(&(&b.key, &b.pod)));
        for (k, n) in &other.skipped {
            *f.skipped.entry(*k).or_default() += n;
        }
        for (k, s) in &other.silenced {
            f.silenced.entry(k.clone()).or_insert_with(|| s.clone());
        }
        for (i, n) in other.silence_counts.iter().enumerate() {
            match f.silence_counts.get_mut(i) {
                Some(c) => *c += n,
                None => f.silence_counts.push(*n),
            }
        }
        f.refused_annotations.extend(other.refused_annotations.iter().cloned());
        f.refused_workloads.extend(other.refused_workloads.iter().cloned());
        f.refused_namespaces.extend(other.refused_namespaces.iter().cloned());
        f.recheck_at = match (f.recheck_at, other.recheck_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        f
    }

    /// Notes that the findings may change at `at` (when still ahead).
    fn may_change_at(&mut self, at: Option<Timestamp>, now: Timestamp) {
        if let Some(at) = at.filter(|&at| at > now) {
            self.recheck_at = Some(self.recheck_at.map_or(at, |r| r.min(at)));
        }
    }
}

fn waiting_reason(reason: &str) -> Option<Reason> {
    Some(match reason {
        // The kubelet alternates ErrImagePull (an attempt failed) and
        // ImagePullBackOff (waiting to retry): one problem, one key.
        "ImagePullBackOff" | "ErrImagePull" | "RegistryUnavailable" => Reason::ImagePullBackOff,
        // Pulls that can never succeed as written.
        "InvalidImageName" | "ErrImageNeverPull" => Reason::ErrImagePull,
        "CreateContainerConfigError" => Reason::CreateContainerConfigError,
        "CreateContainerError" | "RunContainerError" | "PreCreateHookError" | "PreStartHookError" => {
            Reason::CreateContainerError
        }
        _ => return None,
    })
}

fn failed(t: &Termination) -> bool {
    t.exit_code != 0 || &*t.reason == "OOMKilled"
}

fn describe(t: &Termination) -> String {
    let reason = if t.reason.is_empty() { "terminated" } else { &t.reason };
    format!("{reason}, exit code {}", t.exit_code)
}

/// Evaluates `pods` (already narrowed to the PodAlert's scope and selector).
pub fn evaluate<'a>(
    pods: impl IntoIterator<Item = &'a PodView>,
    rules: &Rules,
    history: &mut RestartHistory,
    now: Timestamp,
) -> Findings {
    let mut f = Findings { silence_counts: vec![0; rules.silences.len()], ..Findings::default() };
    let mut seen = std::collections::HashSet::new();
    for pod in pods {
        seen.insert(&pod.uid);
        evaluate_pod(pod, rules, history, now, &mut f);
    }
    history.retain_pods(&seen);
    f.problems.sort_by(|a, b| (&a.key, &a.pod).cmp(&(&b.key, &b.pod)));
    f
}

fn skip(f: &mut Findings, why: Skip) {
    *f.skipped.entry(why).or_default() += 1;
}

fn evaluate_pod(pod: &PodView, rules: &Rules, history: &mut RestartHistory, now: Timestamp, f: &mut Findings) {
    if rules.ignores_pod(pod.name()) {
        return skip(f, Skip::IgnoredPod);
    }
    if pod.deleting {
        return skip(f, Skip::Terminating);
    }
    if pod.phase == "Succeeded" {
        return skip(f, Skip::Completed);
    }
    if pod.scheduling_gated {
        return skip(f, Skip::SchedulingGated);
    }
    let created = pod.created.get().unwrap_or(now);
    let mut found = Vec::new();
    if pod.phase == "Failed" && pod.reason() == "Evicted" {
        let message = pod.message().to_string();
        found.push(problem(pod, "", Reason::Evicted, message, 0, created, Some(pod.uid.to_string()), false));
    }
    if let Some((reason, message)) = pod.unschedulable().filter(|_| pod.phase == "Pending") {
        found.push(problem(pod, "", Reason::Pending, format!("{reason}: {message}"), 0, created, None, false));
    }
    let restarts_allowed = pod.restart_policy() != "Never";
    for (name, c) in pod.named_containers() {
        if rules.ignores_container(name) {
            skip(f, Skip::IgnoredContainer);
            continue;
        }
        if let Some(p) = container_problem(pod, name, c, rules, history, now, restarts_allowed) {
            if matches!(p.key.reason, Reason::CrashLoopBackOff | Reason::OOMKilled) {
                // A crash is a problem while recent and counted in the window.
                let left = c.last_termination().and_then(|t| t.finished_at.get());
                f.may_change_at(left.map(|at| crate::pod::after(at, rules.restart_window)), now);
                f.may_change_at(history.next_change(&pod.uid, name, now, rules.restart_window), now);
            }
            found.push(p);
        } else if matches!(&*c.state(), State::Terminated(t) if !failed(t)) && !c.init() {
            skip(f, Skip::Completed);
        }
    }
    // A pod still Pending without a more precise reason (containers being
    // created, volumes not mounted) is stuck once it has been so for long.
    if pod.phase == "Pending" && found.is_empty() && !pod.containers.iter().any(|c| c.restart_count() > 0) {
        let waiting: Vec<String> = pod
            .named_containers()
            .filter_map(|(name, c)| match &*c.state() {
                State::Waiting(w) if !w.reason.is_empty() => Some(format!("{name}: {}", w.reason)),
                _ => None,
            })
            .collect();
        let message = if waiting.is_empty() { "pod not started".to_string() } else { waiting.join(", ") };
        found.push(problem(pod, "", Reason::Pending, message, 0, created, None, false));
    }
    if !found.is_empty() {
        let changes = silence::changes_at(
            &rules.silences,
            &rules.namespace,
            &rules.namespace_silences,
            &rules.workload_silences,
            pod,
            now,
        );
        f.may_change_at(changes, now);
    }
    for p in found {
        if !rules.selects_reason(p.key.reason) {
            skip(f, Skip::ReasonNotSelected);
            continue;
        }
        let mut refused = Refused::default();
        let silencing = matching(
            &rules.silences,
            &rules.namespace,
            &rules.namespace_silences,
            &rules.workload_silences,
            pod,
            p.key.reason,
            now,
            &mut f.silence_counts,
            &mut refused,
        );
        if refused.pod {
            f.refused_annotations.insert(pod.name().to_string());
        }
        if let Some(w) = refused.workload {
            f.refused_workloads.insert(w);
        }
        if refused.namespace {
            f.refused_namespaces.insert(pod.namespace().to_string());
        }
        if let Some(s) = silencing {
            skip(f, Skip::Silenced);
            // A key is silenced until the last of its problems' silences.
            match f.silenced.get_mut(&p.key) {
                Some(held) if held.until >= s.until => {}
                _ => {
                    f.silenced.insert(p.key.clone(), s);
                }
            }
        }
        f.problems.push(p);
    }
}

#[allow(clippy::too_many_arguments)]
fn problem(
    pod: &PodView,
    container: &str,
    reason: Reason,
    message: String,
    restarts: u32,
    since: Timestamp,
    incarnation: Option<String>,
    previous_logs: bool,
) -> Problem {
    Problem {
        key: Key {
            namespace: pod.namespace().to_string(),
            workload: pod.workload().clone(),
            container: container.to_string(),
            reason,
        },
        pod: pod.name().to_string(),
        message,
        restarts,
        since,
        incarnation,
        previous_logs,
        log_container: None,
    }
}

fn container_problem(
    pod: &PodView,
    name: &Arc<str>,
    c: &ContainerView,
    rules: &Rules,
    history: &mut RestartHistory,
    now: Timestamp,
    restarts_allowed: bool,
) -> Option<Problem> {
    let created = pod.created.get().unwrap_or(now);
    let recent = |t: &Termination| t.finished_at.get().is_none_or(|at| elapsed(at, now) < rules.restart_window);
    // Crashes (the container restarts): the last termination tells.
    if restarts_allowed {
        let in_window = history.restarts_within(&pod.uid, name, c.restart_count(), now, rules.restart_window);
        if let Some(last) = c.last_termination().filter(|t| failed(t) && recent(t)) {
            let oom = &*last.reason == "OOMKilled";
            if in_window >= rules.restart_threshold || oom {
                let reason = if oom { Reason::OOMKilled } else { Reason::CrashLoopBackOff };
                let message = format!("{} restarts, last: {}", c.restart_count(), describe(last));
                let since = last.finished_at.get().unwrap_or(now);
                let incarnation = Some(last.container_id.to_string()).filter(|s| !s.is_empty());
                // Decided again when the log is read (the container may
                // restart meanwhile); this is the fallback.
                let previous = c.state().crashed_run_is_previous();
                return Some(problem(pod, name, reason, message, c.restart_count(), since, incarnation, previous));
            }
        }
    }
    match &*c.state() {
        State::Waiting(w) => {
            let (reason, message) = (&w.reason, &w.message);
            let r = waiting_reason(reason)?;
            let since = c.last_termination().and_then(|t| t.finished_at.get()).unwrap_or(created);
            let message = if message.is_empty() { reason.to_string() } else { format!("{reason}: {message}") };
            Some(problem(pod, name, r, message, c.restart_count(), since, None, false))
        }
        // A container that does not restart and failed (or an OOM kill
        // the kubelet reports before restarting).
        State::Terminated(t) if failed(t) && (!restarts_allowed || &*t.reason == "OOMKilled") => {
            let reason = if &*t.reason == "OOMKilled" { Reason::OOMKilled } else { Reason::Error };
            let since = t.finished_at.get().unwrap_or(now);
            let incarnation = Some(if t.container_id.is_empty() {
                format!("{}/{}/{}", pod.uid, name, c.restart_count())
            } else {
                t.container_id.to_string()
            });
            Some(problem(pod, name, reason, describe(t), c.restart_count(), since, incarnation, false))
        }
        State::Running { started_at } if !c.ready() && !c.init() && pod.phase == "Running" => {
            let since = [pod.not_ready_since().get(), started_at.get()].into_iter().flatten().max().unwrap_or(created);
            let message = "running but not Ready (readiness probe failing)".to_string();
            Some(problem(pod, name, Reason::NotReady, message, c.restart_count(), since, None, false))
        }
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests;
