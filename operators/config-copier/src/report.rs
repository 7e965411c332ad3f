//! What a rule's sync did, told: the copies' outcomes counted into the
//! status summary ([`tally`]), and the Events — conflicts not reported
//! before (however many there are, at most [`MAX_EVENTS`] a reconcile),
//! adoptions, what was written, the first failure ([`events`]).

use flotilla_shared::events::Events;
use k8s_openapi::api::core::v1::ObjectReference;

use crate::cache::Caches;
use crate::converge::Outcome;
use crate::copy::{CopyKey, RuleId};
use crate::crd::{ConflictEntry, SourceKind};
use crate::plan::{ACCEPT_OVERWRITE, ConflictReason};
use crate::status::Summary;

/// Events of one kind per reconcile, at most.
pub const MAX_EVENTS: usize = 5;

/// What the writes of one reconcile did.
#[derive(Debug, Default, PartialEq)]
pub struct Written {
    pub created: usize,
    pub updated: usize,
    pub deleted: usize,
    pub adopted: Vec<CopyKey>,
}

impl Written {
    pub fn total(&self) -> usize {
        self.created + self.updated + self.deleted + self.adopted.len()
    }
}

/// A target left alone, as the status lists it.
pub fn conflict_entry(key: &CopyKey, reason: &ConflictReason) -> ConflictEntry {
    let message = match reason {
        ConflictReason::NotOwned => format!(
            "{key} exists and was not created by this rule (onConflict: Overwrite adopts it only where the namespace is labelled {ACCEPT_OVERWRITE}=true)"
        ),
        ConflictReason::OwnedByAnotherRule(r) => format!("copied by CopyRule {r}"),
        ConflictReason::OwnedByAnotherInstallation(r) => {
            format!("copied by CopyRule {r}, of another config-copier installation")
        }
        ConflictReason::ClaimedByAnotherRule(r) => format!("CopyRule {r} wants it too and is older"),
    };
    ConflictEntry {
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        reason: reason.reason().to_string(),
        message,
    }
}

/// A failed write as the status and the Warning say it.
pub fn failure(key: &CopyKey, action: &str, error: &str) -> String {
    format!("{action} {key}: {error}")
}

/// Counts `outcomes` into `summary`; returns what was written.
pub fn tally(outcomes: Vec<Outcome>, summary: &mut Summary) -> Written {
    let mut written = Written::default();
    for o in outcomes {
        match o {
            Outcome::InSync => summary.in_sync += 1,
            Outcome::Nothing | Outcome::Kept => {}
            Outcome::Created => {
                written.created += 1;
                summary.in_sync += 1;
            }
            Outcome::Updated => {
                written.updated += 1;
                summary.in_sync += 1;
            }
            Outcome::Adopted(k) => {
                written.adopted.push(k);
                summary.in_sync += 1;
            }
            Outcome::Deleted => written.deleted += 1,
            Outcome::Conflict { key, reason } => summary.conflicts.push(conflict_entry(&key, &reason)),
            Outcome::Failed { key, action, error } => summary.failures.push(failure(&key, action, &error)),
        }
    }
    written
}

/// The Events of one sync of rule `id` (`on`).
pub fn events(
    recorder: &Events,
    on: &ObjectReference,
    caches: &Caches,
    id: &RuleId,
    kind: SourceKind,
    summary: &Summary,
    written: &Written,
) {
    let current = summary.conflicts.iter().map(|c| (c.namespace.clone(), c.name.clone())).collect();
    let new = caches.new_conflicts(id, current);
    for c in summary.conflicts.iter().filter(|c| new.contains(&(c.namespace.clone(), c.name.clone()))).take(MAX_EVENTS)
    {
        recorder.warning(
            on,
            "Conflict",
            "Copy",
            format!("{} {}/{} left alone ({}): {}", kind.as_str(), c.namespace, c.name, c.reason, c.message),
        );
    }
    if new.len() > MAX_EVENTS {
        recorder.warning(
            on,
            "Conflict",
            "Copy",
            format!("{} more targets left alone; see status.conflicting", new.len() - MAX_EVENTS),
        );
    }
    for k in written.adopted.iter().take(MAX_EVENTS) {
        recorder.normal(
            on,
            "Adopted",
            "Copy",
            format!("{k} had no ownership marks and was adopted (onConflict: Overwrite)"),
        );
    }
    if written.total() > 0 {
        let Written { created, updated, deleted, .. } = written;
        recorder.normal(
            on,
            "Synced",
            "Copy",
            format!("created {created}, updated {updated}, deleted {deleted} {} cop(ies)", kind.as_str()),
        );
    }
    if let Some(first) = summary.failures.first() {
        recorder.warning(on, "SyncFailed", "Copy", first.clone());
    }
}
