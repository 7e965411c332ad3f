//! The changes that make a name what the plan decided: published for its
//! winner (records, and the ownership TXT that guards them), held for
//! `--handover-grace`, or released.

use std::collections::BTreeMap;

use super::{ChangeGroup, ChangeKind, Policy, Rules};
use crate::desired::Claim;
use crate::model::{Action, Change, RecordSet, RecordType, Routing};
use crate::registry::{self, Ownership};

fn change(action: Action, record: &RecordSet) -> Change {
    Change { action, record: record.clone() }
}

/// `name` published for `winner` with `want` over our `current` records
/// (as far as the policy allows); `ours`: our TXT there and whose it says,
/// `adopted`: the external-dns TXTs taken over. `None`: nothing to change.
pub(super) fn publish(
    name: &str,
    winner: &Claim,
    want: &[&RecordSet],
    current: &BTreeMap<RecordType, &RecordSet>,
    ours: Option<(&Ownership, &RecordSet)>,
    adopted: Option<&[&RecordSet]>,
    rules: &Rules<'_>,
) -> Option<ChangeGroup> {
    let policy = rules.policy;
    // An ALIAS has no TTL (the target's applies): a name of ALIASes only
    // gets its TXT with Route53's customary 300 s.
    let ttl = want.iter().filter(|r| r.alias_target().is_none()).map(|r| r.ttl).min().unwrap_or(300);
    let mut changes = Vec::new();
    // Stale types first (A → CNAME needs the A gone before the CNAME).
    if policy == Policy::Sync {
        for (t, r) in current {
            if !want.iter().any(|w| w.rtype == *t) {
                changes.push(change(Action::Delete, r));
            }
        }
    }
    let mut replaces = false;
    for w in want {
        match current.get(&w.rtype) {
            None => changes.push(change(Action::Create, w)),
            // An address set becoming an ALIAS (or back): DELETE + CREATE in
            // the batch rather than an UPSERT, a replacement Route53 takes
            // whichever way it goes.
            // (Under a restricted policy, a conflict before this: see `policy_forbids`.)
            Some(cur) if cur.alias_target().is_some() != w.alias_target().is_some() => {
                if policy == Policy::Sync {
                    changes.push(change(Action::Delete, cur));
                    changes.push(change(Action::Create, w));
                    replaces = true;
                }
            }
            Some(cur) if cur.ttl != w.ttl || cur.values != w.values || cur.extra != w.extra => {
                if policy != Policy::CreateOnly {
                    changes.push(change(Action::Upsert, w));
                }
            }
            Some(_) => {}
        }
    }
    // A routing set's TXT is a set of the same identifier and policy (Route53
    // allows one policy per name and type); no health check decides it.
    let txt = registry::txt_record(name, ttl, rules.owner_id, &winner.resource);
    let txt = match want.first().and_then(|r| r.routing()) {
        Some(r) => {
            let txt = registry::txt_record(name, super::sets::SET_TXT_TTL, rules.owner_id, &winner.resource);
            txt.with_routing(Routing { health_check_id: None, ..r.clone() })
        }
        None => txt,
    };
    let upserts = replaces || changes.iter().any(|c| c.action == Action::Upsert);
    // The ownership TXT: created (and the adopted owner's removed), moved
    // to a new holder, or — beside an UPSERT — deleted and created
    // unchanged, so that the batch fails whole if it is no longer ours.
    let mut txt_changes = Vec::new();
    match ours {
        None => {
            for theirs in adopted.unwrap_or_default() {
                txt_changes.push(change(Action::Delete, theirs));
            }
            txt_changes.push(Change { action: Action::Create, record: txt });
        }
        Some((o, cur)) if o.resource != winner.resource && (!changes.is_empty() || policy != Policy::CreateOnly) => {
            txt_changes.push(change(Action::Delete, cur));
            txt_changes.push(Change { action: Action::Create, record: txt });
        }
        // Its holder (or the holder's namespace) is back within the grace: unmarked.
        Some((o, cur)) if o.freed.is_some() => {
            txt_changes.push(change(Action::Delete, cur));
            txt_changes.push(Change { action: Action::Create, record: txt });
        }
        // The set's policy changed (a weight, a failover role): its TXT follows.
        Some((_, cur)) if cur.routing() != txt.routing() => {
            txt_changes.push(change(Action::Delete, cur));
            txt_changes.push(Change { action: Action::Create, record: txt });
        }
        Some((_, cur)) if upserts => {
            txt_changes.push(change(Action::Delete, cur));
            txt_changes.push(change(Action::Create, cur));
        }
        Some(_) => {}
    }
    if changes.is_empty() && txt_changes.is_empty() {
        return None;
    }
    txt_changes.extend(changes);
    let before: Vec<RecordSet> = current.values().map(|r| (*r).clone()).collect();
    let kind = if before.is_empty() { ChangeKind::Created } else { ChangeKind::Updated };
    Some(ChangeGroup {
        name: name.to_string(),
        resource: winner.resource.clone(),
        kind,
        changes: txt_changes,
        before,
        after: want.iter().map(|r| (*r).clone()).collect(),
    })
}

/// A freed name of ours within the grace: its records deleted (policy
/// `sync`) and its TXT marked freed now, unless that is done already.
/// `None`: nothing to change.
pub(super) fn hold(
    name: &str,
    o: &Ownership,
    txt: &RecordSet,
    records: &[&RecordSet],
    rules: &Rules<'_>,
) -> Option<ChangeGroup> {
    let deleting = rules.policy == Policy::Sync && !records.is_empty();
    if o.freed.is_some() && !deleting {
        return None;
    }
    let mut changes: Vec<Change> = Vec::new();
    if deleting {
        changes.extend(records.iter().map(|r| change(Action::Delete, r)));
    }
    // The TXT: marked, or — beside deletes of a name marked already —
    // deleted and created unchanged, so that the batch fails whole if the
    // name is no longer ours.
    let marked = match o.freed {
        None => {
            let marked = registry::txt_record_freed(name, txt.ttl, rules.owner_id, &o.resource, rules.now);
            match txt.routing() {
                Some(r) => marked.with_routing(r.clone()),
                None => marked,
            }
        }
        Some(_) => txt.clone(),
    };
    changes.push(change(Action::Delete, txt));
    changes.push(Change { action: Action::Create, record: marked });
    let before: Vec<RecordSet> = if deleting { records.iter().map(|r| (*r).clone()).collect() } else { Vec::new() };
    Some(ChangeGroup {
        name: name.to_string(),
        resource: o.resource.clone(),
        kind: if deleting { ChangeKind::Deleted } else { ChangeKind::Held },
        changes,
        before,
        after: Vec::new(),
    })
}

/// An owned name nobody wants: its records and its TXT deleted.
pub(super) fn release(name: &str, o: Ownership, txt: &RecordSet, records: &[&RecordSet]) -> ChangeGroup {
    let mut changes: Vec<Change> = records.iter().map(|r| change(Action::Delete, r)).collect();
    changes.push(change(Action::Delete, txt));
    let before: Vec<RecordSet> = records.iter().map(|r| (*r).clone()).collect();
    let kind = if before.is_empty() { ChangeKind::Released } else { ChangeKind::Deleted };
    ChangeGroup { name: name.to_string(), resource: o.resource, kind, changes, before, after: Vec::new() }
}
