//! Silences (maintenance windows): a PodAlert's `spec.silences` and the
//! `flotilla.dev/silence-until` annotation of pods and of namespaces. A
//! silenced problem opens no incident and sends nothing until the silence
//! ends; then, if it is still there, it opens. Pure.

use std::collections::HashMap;
use std::time::Duration;

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

/// The namespaces whose `flotilla.dev/silence-until` annotation is a time
/// (the others are not held), and that time.
pub type NamespaceSilences = HashMap<Box<str>, Timestamp>;

/// Silence annotations [`matching`] found ending more than [`MAX_AHEAD`]
/// ahead (not applied): the pod's, the namespace's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refused {
    pub pod: bool,
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

    fn covers(&self, pod: &PodView, reason: Reason) -> bool {
        (self.reasons.is_empty() || self.reasons.contains(&reason))
            && self.selector.as_ref().is_none_or(|s| pod.labels().matched_by(s))
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
/// team's alerts, never a cluster-wide PodAlert's. A namespace's
/// annotation counts for every PodAlert, cluster-wide ones too: only who
/// may edit the Namespace object sets it (a cluster admin; `edit` in the
/// namespace cannot). One further than [`MAX_AHEAD`] silences nothing
/// (`refused` says whose).
#[allow(clippy::too_many_arguments)]
pub fn matching(
    silences: &[SilenceRule],
    own: &str,
    namespaces: &NamespaceSilences,
    pod: &PodView,
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
    for s in silences.iter().filter(|s| state(s.until, now) == State::Active && s.covers(pod, reason)) {
        if let Some(c) = counts.get_mut(s.index) {
            *c += 1;
        }
        keep(Silencing { by: s.describe(), until: s.until });
    }
    if let Some(until) = pod.silence_until().filter(|_| pod.namespace() == own) {
        match state(until, now) {
            State::Active => keep(Silencing { by: format!("pod {} annotation {ANNOTATION}", pod.name()), until }),
            State::Refused => refused.pod = true,
            State::Ended => {}
        }
    }
    if let Some(&until) = namespaces.get(pod.namespace()) {
        match state(until, now) {
            State::Active => {
                keep(Silencing { by: format!("namespace {} annotation {ANNOTATION}", pod.namespace()), until });
            }
            State::Refused => refused.namespace = true,
            State::Ended => {}
        }
    }
    best
}

/// The soonest time after `now` at which a silence that could cover `pod`
/// ends or comes within [`MAX_AHEAD`] (from refused to active): when
/// [`matching`] may answer otherwise for the same pod.
pub fn changes_at(
    silences: &[SilenceRule],
    own: &str,
    namespaces: &NamespaceSilences,
    pod: &PodView,
    now: Timestamp,
) -> Option<Timestamp> {
    let annotation = pod.silence_until().filter(|_| pod.namespace() == own);
    let namespace = namespaces.get(pod.namespace()).copied();
    silences
        .iter()
        .map(|s| s.until)
        .chain(annotation)
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
}
