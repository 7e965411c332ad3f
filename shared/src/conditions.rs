//! `metav1.Condition` semantics: one condition per type, `lastTransitionTime`
//! moves only when `status` changes, `observedGeneration` set, `Ready` always
//! present, and kstatus's `Stalled` derived from `Ready` ([`Conditions::stall_on`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use schemars::Schema;

/// The condition every custom resource carries.
pub const READY: &str = "Ready";

/// kstatus's (and Flux's) `Stalled`: present, `True`, while the object
/// cannot progress until someone edits it; absent otherwise. Set by
/// [`Conditions::stall_on`], never by hand.
pub const STALLED: &str = "Stalled";

/// The `Ready=False` reason of a spec the operator cannot use (the runtime
/// check behind the schema's): every operator's, so [`Conditions::stall_on`]
/// lists it with the operator's own.
pub const INVALID_SPEC: &str = "InvalidSpec";

/// A condition's `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

impl From<bool> for Status {
    fn from(b: bool) -> Self {
        if b { Status::True } else { Status::False }
    }
}

/// Builds a resource's conditions from the ones it has now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conditions {
    items: Vec<Condition>,
    generation: Option<i64>,
}

/// The API's limit on `message`.
const MAX_MESSAGE: usize = 32_768;

impl Conditions {
    /// Starts from the object's current conditions (keeping their
    /// `lastTransitionTime`s) for an object at `generation`.
    pub fn new(existing: Option<&[Condition]>, generation: Option<i64>) -> Self {
        Self { items: existing.map(<[Condition]>::to_vec).unwrap_or_default(), generation }
    }

    /// Sets a condition now.
    pub fn set(
        &mut self,
        type_: &str,
        status: impl Into<Status>,
        reason: &str,
        message: impl Into<String>,
    ) -> &mut Self {
        self.set_at(type_, status.into(), reason, message.into(), Timestamp::now())
    }

    /// Sets a condition, as of `now` (for tests).
    pub fn set_at(
        &mut self,
        type_: &str,
        status: Status,
        reason: &str,
        mut message: String,
        now: Timestamp,
    ) -> &mut Self {
        if message.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE - 3;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str("...");
        }
        let status = status.as_str().to_string();
        match self.items.iter_mut().find(|c| c.type_ == type_) {
            Some(c) => {
                if c.status != status {
                    c.last_transition_time = Time(now);
                }
                c.status = status;
                c.reason = reason.to_string();
                c.message = message;
                c.observed_generation = self.generation;
            }
            None => self.items.push(Condition {
                type_: type_.to_string(),
                status,
                reason: reason.to_string(),
                message,
                last_transition_time: Time(now),
                observed_generation: self.generation,
            }),
        }
        self
    }

    pub fn get(&self, type_: &str) -> Option<&Condition> {
        self.items.iter().find(|c| c.type_ == type_)
    }

    /// Removes condition `type_` (server-side apply drops it from the
    /// object once the operator no longer sends it).
    pub fn remove(&mut self, type_: &str) -> &mut Self {
        self.items.retain(|c| c.type_ != type_);
        self
    }

    /// kstatus's `Stalled`, from `Ready`: while `Ready` is `False` for one
    /// of `spec_reasons` — the operator's reasons for a spec it cannot use
    /// or is configured never to honour, which no retry and no wait will
    /// change, only an edit of the object (or of the operator's flags) —
    /// `Stalled` is `True` with `Ready`'s reason and message; otherwise it
    /// is removed. Call it once `Ready` is set for this reconcile, before
    /// [`Conditions::into_vec`]; its `lastTransitionTime` is kept while it
    /// stays stalled, whatever the reason.
    pub fn stall_on(&mut self, spec_reasons: &[&str]) -> &mut Self {
        let stalled = self
            .get(READY)
            .filter(|r| r.status == Status::False.as_str() && spec_reasons.contains(&r.reason.as_str()))
            .map(|r| (r.reason.clone(), r.message.clone()));
        match stalled {
            Some((reason, message)) => self.set(STALLED, Status::True, &reason, message),
            None => self.remove(STALLED),
        }
    }

    /// The conditions to write: `Ready` is added as `Unknown` if nobody set it.
    pub fn into_vec(mut self) -> Vec<Condition> {
        if self.get(READY).is_none() {
            self.set(READY, Status::Unknown, "Reconciling", "not reconciled yet");
        }
        self.items
    }
}

/// Whether `conditions` already say that `type_` is `reason` with `message`.
/// The Event for a refusal or failure is published when its condition is
/// first set, not at every reconcile that finds it again: `if
/// !already_said(..) { events.warning(..) }`.
pub fn already_said(conditions: Option<&[Condition]>, type_: &str, reason: &str, message: &str) -> bool {
    conditions.into_iter().flatten().any(|c| c.type_ == type_ && c.reason == reason && c.message == message)
}

/// JSON schema for a `conditions` field: a list keyed by `type`, so server-side
/// apply merges conditions from different field managers instead of replacing
/// the whole list. Use with `#[schemars(schema_with = "flotilla_shared::conditions::schema")]`.
pub fn schema(generator: &mut schemars::SchemaGenerator) -> Schema {
    let mut s = generator.subschema_for::<Vec<Condition>>();
    s.insert("x-kubernetes-list-type".into(), "map".into());
    s.insert("x-kubernetes-list-map-keys".into(), serde_json::json!(["type"]));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let mut c = Conditions::new(None, Some(1));
        c.set_at(READY, Status::True, "Synced", "ok".into(), at(100));
        let first = c.clone().into_vec();
        let mut c = Conditions::new(Some(&first), Some(2));
        c.set_at(READY, Status::True, "StillSynced", "still ok".into(), at(200));
        let ready = c.get(READY).unwrap();
        assert_eq!(ready.last_transition_time.0, at(100));
        assert_eq!(ready.reason, "StillSynced");
        assert_eq!(ready.observed_generation, Some(2));
        c.set_at(READY, Status::False, "Broken", "no".into(), at(300));
        assert_eq!(c.get(READY).unwrap().last_transition_time.0, at(300));
    }

    #[test]
    fn one_condition_per_type_and_ready_always_present() {
        let mut c = Conditions::new(None, None);
        c.set("Degraded", false, "Fine", "");
        c.set("Degraded", true, "Bad", "x");
        let v = c.into_vec();
        assert_eq!(v.iter().filter(|c| c.type_ == "Degraded").count(), 1);
        assert_eq!(v.iter().find(|c| c.type_ == READY).map(|c| c.status.as_str()), Some("Unknown"));
    }

    #[test]
    fn long_messages_are_cut_to_the_api_limit() {
        let mut c = Conditions::new(None, None);
        c.set(READY, true, "Ok", "é".repeat(40_000));
        assert!(c.get(READY).unwrap().message.len() <= MAX_MESSAGE);
    }

    #[test]
    fn an_unusable_spec_stalls_and_an_edit_that_fixes_it_clears_stalled() {
        let reasons = [INVALID_SPEC, "NoAlertSet"];
        let mut c = Conditions::new(None, Some(1));
        c.set_at(READY, Status::False, "NoAlertSet", "an alert must be set".into(), at(100));
        c.stall_on(&reasons);
        let stalled = c.get(STALLED).unwrap();
        assert_eq!(
            (stalled.status.as_str(), stalled.reason.as_str(), stalled.message.as_str()),
            ("True", "NoAlertSet", "an alert must be set")
        );
        let written = c.into_vec();
        let since = written.iter().find(|c| c.type_ == STALLED).unwrap().last_transition_time.clone();

        // Still unusable, for another reason: still stalled since then.
        let mut c = Conditions::new(Some(&written), Some(2));
        c.set(READY, false, INVALID_SPEC, "selector: bad key");
        c.stall_on(&reasons);
        let stalled = c.get(STALLED).unwrap();
        assert_eq!((stalled.reason.as_str(), stalled.message.as_str()), (INVALID_SPEC, "selector: bad key"));
        assert_eq!(stalled.last_transition_time, since);
        assert_eq!(stalled.observed_generation, Some(2));
        let written = c.into_vec();

        // Fixed: Ready, and Stalled gone.
        let mut c = Conditions::new(Some(&written), Some(3));
        c.set(READY, true, "Synced", "ok");
        c.stall_on(&reasons);
        assert!(c.get(STALLED).is_none());
        assert!(!c.into_vec().iter().any(|c| c.type_ == STALLED));
    }

    #[test]
    fn only_a_spec_reason_with_ready_false_stalls() {
        let stalls = |status: Status, reason: &str| {
            let mut c = Conditions::new(None, None);
            c.set(READY, status, reason, "m");
            c.stall_on(&[INVALID_SPEC]);
            c.get(STALLED).is_some()
        };
        assert!(stalls(Status::False, INVALID_SPEC));
        // Waiting helps: a failed write, a missing policy, a conflict.
        assert!(!stalls(Status::False, "SyncFailed"));
        assert!(!stalls(Status::False, "AdmissionPolicyMissing"));
        // A reason alone is not enough: Ready must say False.
        assert!(!stalls(Status::True, INVALID_SPEC));
        assert!(!stalls(Status::Unknown, INVALID_SPEC));
        // No Ready at all (set by `into_vec` later): not stalled.
        let mut c = Conditions::new(None, None);
        c.stall_on(&[INVALID_SPEC]);
        assert!(c.get(STALLED).is_none());
    }

    #[test]
    fn already_said_matches_type_reason_and_message() {
        let mut c = Conditions::new(None, None);
        c.set("Ready", false, "Refused", "no");
        let list = c.into_vec();
        assert!(already_said(Some(&list), "Ready", "Refused", "no"));
        assert!(!already_said(Some(&list), "Ready", "Refused", "other message"));
        assert!(!already_said(Some(&list), "Ready", "Other", "no"));
        assert!(!already_said(None, "Ready", "Refused", "no"));
    }
}
