//! The words of a sync's Events: what a group of changes did (or, dry run,
//! would do) to a name, and what Route53 refused.

use crate::model::{Action, RecordSet};
use crate::plan::{ChangeGroup, ChangeKind};
use crate::report;
use crate::route53::Route53Error;

/// The values a name's record sets point at, as an Event shows them.
fn describe(records: &[RecordSet]) -> String {
    let mut values: Vec<String> = records.iter().map(RecordSet::shown_values).filter(|v| !v.is_empty()).collect();
    // An A and an AAAA ALIAS to one load balancer read the same.
    values.dedup();
    values.join(", ")
}

/// The Event of a group applied (or, dry run, planned); `zone` is the
/// syncer's `zone_note`.
pub(super) fn note(g: &ChangeGroup, dry_run: bool, zone: &str) -> (&'static str, String) {
    let name = format!("{}{zone}", g.name);
    let verb = match (g.kind, dry_run) {
        (ChangeKind::Created, false) => "created",
        (ChangeKind::Updated, false) => "updated",
        (ChangeKind::Deleted, false) => "deleted",
        (ChangeKind::Created, true) => "dry run: would create",
        (ChangeKind::Updated, true) => "dry run: would update",
        (ChangeKind::Deleted, true) => "dry run: would delete",
        (ChangeKind::Held, false) => "kept",
        (ChangeKind::Held, true) => "dry run: would keep",
        (ChangeKind::Released, false) => "released",
        (ChangeKind::Released, true) => "dry run: would release",
    };
    let reason = match (g.kind, dry_run) {
        (_, true) => report::DRY_RUN,
        (ChangeKind::Created, _) => report::CREATED,
        (ChangeKind::Updated, _) => report::UPDATED,
        (ChangeKind::Deleted, _) => report::DELETED,
        (ChangeKind::Held, _) => report::NAME_HELD,
        (ChangeKind::Released, _) => report::NAME_RELEASED,
    };
    let text = match g.kind {
        ChangeKind::Created => format!("{verb} dns {name} → {}", describe(&g.after)),
        ChangeKind::Updated => format!("{verb} dns {name} → {} (was {})", describe(&g.after), describe(&g.before)),
        ChangeKind::Deleted if g.before.is_empty() => format!("{verb} dns {name}"),
        ChangeKind::Deleted => format!("{verb} dns {name} → {}", describe(&g.before)),
        ChangeKind::Held => format!("{verb} dns {name}: no longer published by this Service"),
        ChangeKind::Released => format!("{verb} dns {name}: free for any Service"),
    };
    // The TXT this group writes marks the name freed: held for the namespace.
    let held = g.changes.iter().any(|c| {
        c.action == Action::Create && crate::registry::ownership_of(&c.record).is_some_and(|o| o.freed.is_some())
    });
    if held {
        return (reason, format!("{text}; the name is held for this namespace's Services for --handover-grace"));
    }
    (reason, text)
}

/// The Warning of a group Route53 refused; `zone` as in [`note`].
pub(super) fn refusal(g: &ChangeGroup, e: &Route53Error, zone: &str) -> String {
    let verb = match g.kind {
        ChangeKind::Created => "create",
        ChangeKind::Updated => "update",
        ChangeKind::Deleted => "delete",
        ChangeKind::Held => "hold",
        ChangeKind::Released => "release",
    };
    format!("could not {verb} dns {}{zone}: {}: {}; retried on its own with backoff", g.name, e.code, e.message)
}
