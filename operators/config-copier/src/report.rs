//! What a rule's sync did, told: the copies' outcomes counted into the
//! status summary ([`tally`]), their operations into
//! `flotilla_config_copier_copy_operations_total` ([`count_operations`],
//! the one place they are counted), and the Events — conflicts not
//! reported before (however many there are, at most [`MAX_EVENTS`] a
//! reconcile), adoptions, what was written, the first failure ([`events`]);
//! and the status ([`write_status`]).

use flotilla_shared::events::Events;
use flotilla_shared::status::{apply_status, apply_status_if_changed};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client, ResourceExt};

use crate::apply::Op;
use crate::claims::ConflictId;
use crate::copy::CopyKey;
use crate::crd::{ConflictEntry, CopyRule, SourceKind};
use crate::error::Error;
use crate::metrics::CopierMetrics;
use crate::plan::{ACCEPT_OVERWRITE, ConflictReason};
use crate::status::{self, Summary};

/// What happened to one copy.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Nothing,
    InSync,
    Created,
    /// An existing copy rewritten; `data_hash`: its data's hash now (for
    /// `rolloutOnChange`).
    Updated {
        key: CopyKey,
        data_hash: String,
    },
    Adopted(CopyKey),
    Deleted,
    Kept,
    Conflict {
        key: CopyKey,
        reason: ConflictReason,
    },
    Failed {
        key: CopyKey,
        action: &'static str,
        error: String,
    },
}

/// One copy carried out: what came of it, and the operations it took.
#[derive(Debug)]
pub struct Carried {
    pub outcome: Outcome,
    pub ops: Vec<Op>,
}

/// Counts the operations the copies took.
pub fn count_operations(metrics: &CopierMetrics, carried: &[Carried]) {
    for op in carried.iter().flat_map(|c| &c.ops) {
        metrics.operations.with_label_values(&[op.what, op.result]).inc();
    }
}

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
        namespace: key.namespace.to_string(),
        name: key.name.to_string(),
        reason: reason.reason().to_string(),
        message,
    }
}

/// A failed write as the status and the Warning say it.
pub fn failure(key: &CopyKey, action: &str, error: &str) -> String {
    format!("{action} {key}: {error}")
}

/// Counts `outcomes` into `summary`; returns what was written.
pub fn tally(outcomes: impl IntoIterator<Item = Outcome>, summary: &mut Summary) -> Written {
    let mut written = Written::default();
    for o in outcomes {
        match o {
            Outcome::InSync => summary.in_sync += 1,
            Outcome::Nothing | Outcome::Kept => {}
            Outcome::Created => {
                written.created += 1;
                summary.in_sync += 1;
            }
            Outcome::Updated { .. } => {
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

/// The targets left alone in `summary`, as [`events`] is told which are new.
pub fn conflicts(summary: &Summary) -> std::collections::BTreeSet<ConflictId> {
    summary.conflicts.iter().map(|c| (c.namespace.clone(), c.name.clone())).collect()
}

/// The Events of one sync of a rule (`on`); `new`: the conflicts not
/// reported before ([`crate::claims::Claims::new_conflicts`]).
pub fn events(
    recorder: &Events,
    on: &ObjectReference,
    kind: SourceKind,
    summary: &Summary,
    written: &Written,
    new: &[ConflictId],
) {
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

/// Writes `rule`'s status from `summary` when it says something new
/// (shared `apply_status_if_changed`: times alone are no news), or when
/// copies were written (`wrote`: `lastSyncTime` tells when the rule last
/// changed a copy).
pub async fn write_status(
    client: &Client,
    field_manager: &str,
    metrics: &CopierMetrics,
    rule: &CopyRule,
    summary: &Summary,
    wrote: bool,
) -> Result<(), Error> {
    let previous = rule.status.as_ref();
    let mut new = status::build(previous, rule.metadata.generation, summary);
    new.last_sync_time = Some(Time(Timestamp::now()));
    let ns = rule.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<CopyRule> = Api::namespaced(client.clone(), &ns);
    let name = rule.name_any();
    let result = if wrote {
        apply_status(&api, &name, field_manager, &new).await.map(|_| true)
    } else {
        apply_status_if_changed(&api, &name, field_manager, previous, &new).await
    };
    // A request was sent unless the status was left as it was.
    if !matches!(result, Ok(false)) {
        metrics.request("status");
    }
    result.map(|_| ()).map_err(Error::Status)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_operations_of_every_copy_are_counted_once() {
        let metrics = CopierMetrics::new().unwrap();
        let key = CopyKey { kind: SourceKind::ConfigMap, namespace: "b".into(), name: "cfg".into() };
        let carried = [
            // A 409, read again, then updated.
            Carried {
                outcome: Outcome::Updated { key: key.clone(), data_hash: "h".into() },
                ops: vec![Op::new("update", "success")],
            },
            // A Secret replaced: deleted, then created.
            Carried {
                outcome: Outcome::Created,
                ops: vec![Op::new("delete", "success"), Op::new("create", "success")],
            },
            Carried {
                outcome: Outcome::Conflict { key: key.clone(), reason: ConflictReason::NotOwned },
                ops: vec![Op::new("create", "conflict")],
            },
            Carried { outcome: Outcome::InSync, ops: vec![] },
        ];
        count_operations(&metrics, &carried);
        let n = |what, result| metrics.operations.with_label_values(&[what, result]).get();
        assert_eq!(
            (n("update", "success"), n("delete", "success"), n("create", "success"), n("create", "conflict")),
            (1, 1, 1, 1)
        );
        let mut summary = Summary::default();
        let written = tally(carried.into_iter().map(|c| c.outcome), &mut summary);
        assert_eq!((written.created, written.updated, summary.in_sync, summary.conflicts.len()), (1, 1, 3, 1));
    }
}
