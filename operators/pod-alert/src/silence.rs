//! Silences (maintenance windows): a PodAlert's `spec.silences` and the
//! `flotilla.dev/silence-until` annotation of pods, workloads and
//! namespaces. A silenced problem opens no incident and sends nothing
//! until the silence ends; then, if it is still there, it opens. Pure.

use std::sync::Arc;
use std::time::Duration;

use flotilla_shared::pods::PodLabels;
use flotilla_shared::selector::Selector;
use k8s_openapi::jiff::Timestamp;

use crate::crd::{Reason, Silence};
use crate::pod::{PodView, elapsed};
use crate::rules::Invalid;

/// The pod annotation that silences a pod's problems until its time.
pub const ANNOTATION: &str = "flotilla.dev/silence-until";
/// How far ahead a silence may end: one further is refused (not applied),
/// so that a forgotten silence cannot hide a workload for good.
pub const MAX_AHEAD: Duration = Duration::from_secs(7 * 24 * 3600);

/// One of spec.silences, checked.
#[derive(Debug, Clone)]
pub struct SilenceRule {
    /// Its place in spec.silences.
    pub index: usize,
    pub selector: Option<Selector>,
    /// Empty: every reason.
    pub reasons: Vec<Reason>,
    pub until: Timestamp,
    pub comment: String,
}

/// Where a silence stands at an evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Active,
    Ended,
    /// Ends more than [`MAX_AHEAD`] ahead: not applied.
    Refused,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Active => "Active",
            State::Ended => "Ended",
            State::Refused => "Refused",
        }
    }
}

/// The state of a silence ending at `until`, at `now`.
pub fn state(until: Timestamp, now: Timestamp) -> State {
    if until <= now {
        State::Ended
    } else if elapsed(now, until) > MAX_AHEAD {
        State::Refused
    } else {
        State::Active
    }
}

/// Objects whose `flotilla.dev/silence-until` annotation is a time (the
/// others are not held), by key (a namespace's name, a workload's
/// `<namespace>/<name>`), and that time.
pub type Silences = crate::held_store::Held<Timestamp>;

/// The namespaces' silences.
pub type NamespaceSilences = Silences;

/// The workload kinds whose annotation silences their pods' problems.
pub const WORKLOAD_KINDS: [&str; 5] = ["Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"];

/// The workloads' silences, per kind (of [`WORKLOAD_KINDS`]).
#[derive(Debug, Clone, Default)]
pub struct WorkloadSilences {
    pub by_kind: Vec<(&'static str, Arc<Silences>)>,
}

impl WorkloadSilences {
    /// The silence on `pod`'s workload, and the workload (`kind`, `name`):
    /// its own kind's, or — for a Job a CronJob started (named
    /// `<cronjob>-<digits>`, the CronJob controller's naming) — the
    /// CronJob's, so that a CronJob's annotation covers the runs it starts
    /// (of the Job's and the CronJob's, the one ending last).
    pub fn of(&self, pod: &PodView) -> Option<(&str, String, Timestamp)> {
        let w = pod.workload();
        self.of_workload(pod.namespace(), &w.kind, &w.name)
    }

    /// The silence on the workload `kind`/`name` of `namespace`, as [`Self::of`].
    pub fn of_workload(&self, namespace: &str, kind: &str, name: &str) -> Option<(&str, String, Timestamp)> {
        let get = |kind: &str, name: &str| {
            let (kind, map) = self.by_kind.iter().find(|(k, _)| *k == kind)?;
            let until = map.get(format!("{namespace}/{name}").as_str())?;
            Some((*kind, name.to_string(), *until))
        };
        let own = get(kind, name);
        let cronjob = name.rsplit_once('-').and_then(|(cronjob, run)| {
            let started = kind == "Job" && !run.is_empty() && run.bytes().all(|b| b.is_ascii_digit());
            started.then(|| get("CronJob", cronjob)).flatten()
        });
        match (own, cronjob) {
            (Some(a), Some(b)) => Some(if b.2 > a.2 { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

/// Silence annotations [`matching`] found ending more than [`MAX_AHEAD`]
/// ahead (not applied): the pod's, its workload's, the namespace's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refused {
    pub pod: bool,
    /// `Kind/name` of the workload.
    pub workload: Option<String>,
    pub namespace: bool,
}

/// What silences a problem, for status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Silencing {
    /// "spec.silences[N] (comment)" or "pod <name> annotation …".
    pub by: String,
    pub until: Timestamp,
}

impl SilenceRule {
    /// Checks `spec.silences` (the schema bounds their count and sizes; a
    /// selector stored before a schema change is the spec's error).
    pub fn all(silences: &[Silence]) -> Result<Vec<SilenceRule>, Invalid> {
        silences
            .iter()
            .enumerate()
            .map(|(index, s)| {
                let selector = s
                    .selector
                    .as_ref()
                    .map(Selector::new)
                    .transpose()
                    .map_err(|e| Invalid::Spec(format!("silences[{index}].selector: {e}")))?;
                Ok(SilenceRule {
                    index,
                    selector,
                    reasons: s.reasons.clone(),
                    until: s.until.0,
                    comment: s.comment.clone(),
                })
            })
            .collect()
    }

    /// Whether it covers `reason` for an object with `labels` (a
    /// workload's problem has none: a silence with a selector, which
    /// selects pods, does not cover it).
    fn covers(&self, labels: Option<&PodLabels>, reason: Reason) -> bool {
        (self.reasons.is_empty() || self.reasons.contains(&reason))
            && self.selector.as_ref().is_none_or(|s| labels.is_some_and(|l| l.matched_by(s)))
    }

    fn describe(&self) -> String {
        if self.comment.is_empty() {
            format!("spec.silences[{}]", self.index)
        } else {
            format!("spec.silences[{}] ({})", self.index, self.comment)
        }
    }
}

/// The silence (the one ending last) covering a problem of `pod` with
/// `reason` at `now`, if any; `counts[i]` counts the problems
/// spec.silences[i] covers. A pod's annotation counts only for a PodAlert
/// of its own namespace (`own`): the pod's author may mute their own
/// team's alerts, never a cluster-wide PodAlert's; so does a workload's
/// (its author is the same team). A namespace's
/// annotation counts for every PodAlert, cluster-wide ones too: only who
/// may edit the Namespace object sets it (a cluster admin; `edit` in the
/// namespace cannot). One further than [`MAX_AHEAD`] silences nothing
/// (`refused` says whose).
#[allow(clippy::too_many_arguments)]
pub fn matching(
    silences: &[SilenceRule],
    own: &str,
    namespaces: &NamespaceSilences,
    workloads: &WorkloadSilences,
    pod: &PodView,
    reason: Reason,
    now: Timestamp,
    counts: &mut [u32],
    refused: &mut Refused,
) -> Option<Silencing> {
    let subject = Subject {
        namespace: pod.namespace(),
        labels: Some(pod.labels()),
        pod: Some((pod.name(), pod.silence_until())),
        workload: workloads.of(pod),
    };
    subject.matching(silences, own, namespaces, reason, now, counts, refused)
}

/// [`matching`] for a workload's own problem (a stalled rollout, a failed
/// Job): its annotation (a CronJob's for the Jobs it starts), its
/// namespace's, and the spec.silences without a selector.
#[allow(clippy::too_many_arguments)]
pub fn matching_workload(
    silences: &[SilenceRule],
    own: &str,
    namespaces: &NamespaceSilences,
    workloads: &WorkloadSilences,
    (namespace, kind, name): (&str, &str, &str),
    reason: Reason,
    now: Timestamp,
    counts: &mut [u32],
    refused: &mut Refused,
) -> Option<Silencing> {
    let subject =
        Subject { namespace, labels: None, pod: None, workload: workloads.of_workload(namespace, kind, name) };
    subject.matching(silences, own, namespaces, reason, now, counts, refused)
}

/// What a problem's silences are read from.
struct Subject<'a> {
    namespace: &'a str,
    /// A pod's kept labels (none for a workload's problem).
    labels: Option<&'a PodLabels>,
    /// A pod's name and its annotation's time.
    pod: Option<(&'a str, Option<Timestamp>)>,
    /// The workload's annotation: kind, name, time.
    workload: Option<(&'a str, String, Timestamp)>,
}

impl Subject<'_> {
    #[allow(clippy::too_many_arguments)]
    fn matching(
        self,
        silences: &[SilenceRule],
        own: &str,
        namespaces: &NamespaceSilences,
        reason: Reason,
        now: Timestamp,
        counts: &mut [u32],
        refused: &mut Refused,
    ) -> Option<Silencing> {
        let mut best: Option<Silencing> = None;
        let mut keep = |s: Silencing| {
            if best.as_ref().is_none_or(|b| s.until > b.until) {
                best = Some(s);
            }
        };
        for s in silences.iter().filter(|s| state(s.until, now) == State::Active && s.covers(self.labels, reason)) {
            if let Some(c) = counts.get_mut(s.index) {
                *c += 1;
            }
            keep(Silencing { by: s.describe(), until: s.until });
        }
        let mine = self.namespace == own;
        if let Some((name, Some(until))) = self.pod.filter(|_| mine) {
            match state(until, now) {
                State::Active => keep(Silencing { by: format!("pod {name} annotation {ANNOTATION}"), until }),
                State::Refused => refused.pod = true,
                State::Ended => {}
            }
        }
        if let Some((kind, name, until)) = self.workload.filter(|_| mine) {
            match state(until, now) {
                State::Active => {
                    let by = format!("{} {name} annotation {ANNOTATION}", kind.to_ascii_lowercase());
                    keep(Silencing { by, until });
                }
                State::Refused => refused.workload = Some(format!("{kind}/{name}")),
                State::Ended => {}
            }
        }
        if let Some(&until) = namespaces.get(self.namespace) {
            match state(until, now) {
                State::Active => {
                    keep(Silencing { by: format!("namespace {} annotation {ANNOTATION}", self.namespace), until });
                }
                State::Refused => refused.namespace = true,
                State::Ended => {}
            }
        }
        best
    }
}

/// The soonest time after `now` at which a silence that could cover `pod`
/// ends or comes within [`MAX_AHEAD`] (from refused to active): when
/// [`matching`] may answer otherwise for the same pod.
pub fn changes_at(
    silences: &[SilenceRule],
    own: &str,
    namespaces: &NamespaceSilences,
    workloads: &WorkloadSilences,
    pod: &PodView,
    now: Timestamp,
) -> Option<Timestamp> {
    let annotation = pod.silence_until().filter(|_| pod.namespace() == own);
    let workload = workloads.of(pod).filter(|_| pod.namespace() == own).map(|(_, _, until)| until);
    let namespace = namespaces.get(pod.namespace()).copied();
    silences
        .iter()
        .map(|s| s.until)
        .chain(annotation)
        .chain(workload)
        .chain(namespace)
        .flat_map(|until| [crate::pod::before(until, MAX_AHEAD), until])
        .filter(|&at| at > now)
        .min()
}

/// The annotation's time, if it is one (RFC 3339).
pub fn parse_annotation(value: &str) -> Option<Timestamp> {
    value.trim().parse::<Timestamp>().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_silence_is_active_until_it_ends_and_refused_past_seven_days() {
        let now = at("2026-11-27T12:00:00Z");
        assert_eq!(state(at("2026-11-27T13:00:00Z"), now), State::Active);
        assert_eq!(state(at("2026-12-04T12:00:00Z"), now), State::Active, "exactly 7 days");
        assert_eq!(state(at("2026-12-04T12:00:01Z"), now), State::Refused);
        assert_eq!(state(now, now), State::Ended);
        assert_eq!(state(at("2026-11-26T12:00:00Z"), now), State::Ended);
    }

    #[test]
    fn the_annotation_is_an_rfc3339_time() {
        assert_eq!(parse_annotation("2026-11-28T06:00:00Z"), Some(at("2026-11-28T06:00:00Z")));
        assert_eq!(parse_annotation(" 2026-11-28T07:00:00+01:00 "), Some(at("2026-11-28T06:00:00Z")));
        for bad in ["", "tomorrow", "2026-11-28", "1764309600"] {
            assert_eq!(parse_annotation(bad), None, "{bad:?}");
        }
    }
    /// A workload's annotation silences its pods for the PodAlerts of its
    /// namespace only (never a cluster-wide one of another namespace); a
    /// CronJob's covers the Jobs it started; past 7 days it is refused.
    #[test]
    fn a_workloads_annotation_silences_its_pods_in_its_own_namespace() {
        use crate::observe::tests::{pod, t};
        use crate::pod::{Shape, Workload};
        let now = t(0);
        let of = |kind: &str, name: &str| {
            let mut p = pod(&format!("{name}-1"), name);
            p.shape =
                Shape { workload: Workload { kind: kind.into(), name: name.into() }, ..(*p.shape).clone() }.share();
            p
        };
        let map = |entries: &[(&str, i64)]| -> Arc<Silences> {
            Arc::new(entries.iter().map(|(k, s)| (Arc::from(*k), t(*s))).collect())
        };
        let workloads = WorkloadSilences {
            by_kind: vec![
                ("Deployment", map(&[("a/web", 600), ("b/api", 600), ("a/far", 8 * 86_400)])),
                ("CronJob", map(&[("a/nightly", 900)])),
            ],
        };
        let none = Silences::new();
        let check = |own: &str, p: &PodView| {
            let mut refused = Refused::default();
            let got = matching(&[], own, &none, &workloads, p, Reason::CrashLoopBackOff, now, &mut [], &mut refused);
            (got, refused)
        };
        let web = of("Deployment", "web");
        let by = "deployment web annotation flotilla.dev/silence-until".to_string();
        assert_eq!(check("a", &web).0, Some(Silencing { by, until: t(600) }));
        assert_eq!(changes_at(&[], "a", &none, &workloads, &web, now), Some(t(600)));
        assert_eq!(check("platform", &web).0, None, "a cluster-wide PodAlert is not muted by a tenant");
        assert_eq!(changes_at(&[], "platform", &none, &workloads, &web, now), None);
        // `b/api` is another namespace's Deployment; a StatefulSet `web` is not the Deployment.
        assert_eq!(check("a", &of("Deployment", "api")).0, None);
        assert_eq!(check("a", &of("StatefulSet", "web")).0, None);
        // A CronJob's run (`<cronjob>-<digits>`), and what is not one.
        let by = "cronjob nightly annotation flotilla.dev/silence-until".to_string();
        assert_eq!(check("a", &of("Job", "nightly-29412345")).0, Some(Silencing { by, until: t(900) }));
        for not_a_run in ["nightly-x1", "nightly", "nightly-", "other-29412345"] {
            assert_eq!(check("a", &of("Job", not_a_run)).0, None, "{not_a_run}");
        }
        // Eight days ahead: refused, and said whose.
        let (got, refused) = check("a", &of("Deployment", "far"));
        assert_eq!(got, None);
        assert_eq!(refused.workload.as_deref(), Some("Deployment/far"));
    }
}
