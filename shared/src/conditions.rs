//! `metav1.Condition` semantics: one condition per type, `lastTransitionTime`
//! moves only when `status` changes, `observedGeneration` set, `Ready` always
//! present.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use schemars::Schema;

/// The condition every custom resource carries.
pub const READY: &str = "Ready";

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
