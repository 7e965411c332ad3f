//! The pure heart of service-dns: desired records (claims of Services) and
//! the zone's current records in, the changes and conflicts out.
//!
//! Rules:
//! * a name is ours when `_flotilla-owner.<name>` holds a flotilla TXT with
//!   our owner id; only then are its A/AAAA/CNAME records changed or deleted;
//! * a name with any A/AAAA/CNAME record (or, for a CNAME, any record at all)
//!   and no ownership TXT, or with another owner's TXT, is taken: conflict;
//! * a name wanted by several Services goes to the one named in its TXT,
//!   else the oldest; the others are in conflict;
//! * an owned name that nobody wants any more is deleted (policy `sync`);
//! * a CNAME is alone at its name: a CNAME wish beside any other record
//!   (someone's TXT or MX, or one of ours a restricted policy cannot
//!   delete) is a conflict, never a request Route53 would refuse;
//! * every UPSERT travels with a DELETE + CREATE of our unchanged ownership
//!   TXT: Route53 applies a batch whole or not at all, so the write is
//!   refused if the name stopped being ours since we last listed the zone;
//! * with `--adopt-external-dns-owner`, a name whose records that
//!   external-dns owner published for the same Service is taken over: our
//!   TXT created and theirs deleted in the same batch;
//! * a name its holder stopped publishing (the Service deleted, its
//!   annotation or its namespace's grant changed) goes at once to a Service
//!   of the holder's namespace; a Service of another namespace gets it only
//!   `--handover-grace` after it was freed. Meanwhile its records are deleted
//!   (policy `sync`) and its TXT stays, marked `freed=<when>`, so that the
//!   grace outlives a restart; a restarted operator that finds a freed name
//!   not yet marked starts the grace then. When the grace ends with nobody
//!   waiting, the TXT goes. The time is an input (`Rules::now`), never read here.

use std::collections::{BTreeMap, BTreeSet};

use crate::desired::Claim;
use crate::extdns::ExternalDnsOwner;
use crate::model::{Change, RecordSet, RecordType};
use crate::registry::{self, Ownership, namespace_of};

mod changes;
mod conflicts;
mod reading;
mod sets;
#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod tests_sets;

use reading::{Claimant, Zone, is_ours_managed};

/// `--policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Policy {
    /// Create, update and delete.
    #[default]
    Sync,
    /// Create and update, never delete.
    UpsertOnly,
    /// Create only: never update nor delete.
    CreateOnly,
}

impl Policy {
    /// The flag's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Sync => "sync",
            Policy::UpsertOnly => "upsert-only",
            Policy::CreateOnly => "create-only",
        }
    }
}

/// What a group of changes does to one name, for Events and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Created,
    Updated,
    Deleted,
    /// A freed name's TXT marked: the name is held for its namespace for
    /// `--handover-grace` (its records, if any are left, stay).
    Held,
    /// Only the ownership TXT of a name held for `--handover-grace` goes:
    /// the name is free.
    Released,
}

/// The changes to one hostname: its records and its ownership TXT. A group
/// is never split across two Route53 requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeGroup {
    pub name: String,
    /// The Service concerned (`service/<ns>/<name>`).
    pub resource: String,
    pub kind: ChangeKind,
    pub changes: Vec<Change>,
    /// The address records before (for Updated/Deleted) and after.
    pub before: Vec<RecordSet>,
    pub after: Vec<RecordSet>,
}

impl ChangeGroup {
    pub fn cost_records(&self) -> usize {
        self.changes.iter().map(Change::cost_records).sum()
    }
    pub fn cost_chars(&self) -> usize {
        self.changes.iter().map(Change::cost_chars).sum()
    }
}

/// Why a Service does not get a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConflictCause {
    /// Another Service holds (or is first in line for) it.
    OtherService(String),
    /// A record we do not own is there.
    Unowned(String),
    /// The change needs a delete `--policy` does not allow (A ↔ CNAME).
    Policy(String),
    /// Freed by a Service of another namespace: held for that namespace
    /// until then (Unix seconds, `--handover-grace`).
    Reserved(i64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub resource: String,
    pub name: String,
    pub cause: ConflictCause,
}

impl Conflict {
    pub fn message(&self) -> String {
        match &self.cause {
            // Which Service holds it is another namespace's business: the
            // operator's log says (`sync`), the Event does not.
            ConflictCause::OtherService(_) => {
                format!(
                    "dns name {} is already published by another Service; not publishing it for {}",
                    self.name, self.resource
                )
            }
            ConflictCause::Reserved(until) => {
                let until = k8s_openapi::jiff::Timestamp::from_second(*until)
                    .map(|t| t.to_string())
                    .unwrap_or_else(|_| until.to_string());
                format!(
                    "dns name {} was published by another Service until recently and is held for that Service's \
                     namespace until {until} (--handover-grace); not publishing it for {} before then",
                    self.name, self.resource
                )
            }
            ConflictCause::Unowned(what) => {
                format!("dns name {} is taken by a record flotilla does not own ({what}); left untouched", self.name)
            }
            ConflictCause::Policy(what) => {
                format!("dns name {} cannot be changed: {what}; left as it is", self.name)
            }
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub groups: Vec<ChangeGroup>,
    pub conflicts: Vec<Conflict>,
    /// Address record sets we own once the plan is applied.
    pub managed_records: usize,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

/// What the plan follows besides desired and current state.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    pub owner_id: &'a str,
    pub policy: Policy,
    /// `--adopt-external-dns-owner` (with its TXT naming).
    pub adopt: Option<&'a ExternalDnsOwner>,
    /// `--handover-grace`, in seconds (0: a freed name is handed over, or
    /// deleted, at once).
    pub grace: i64,
    /// Now, in Unix seconds: when a name freed by this plan is marked freed,
    /// and what a mark's age is measured against.
    pub now: i64,
}

/// Computes the changes that make `current` hold exactly the claimed records
/// we may hold (as far as `policy` allows), touching nothing we do not own.
pub fn plan(claims: &[Claim], current: &[RecordSet], owner_id: &str, policy: Policy) -> Plan {
    plan_keeping(claims, &BTreeSet::new(), current, owner_id, policy)
}

/// [`plan`], where the names held by the Services in `keep` (skipped for
/// bad input) stay as they are: neither deleted nor handed to another.
pub fn plan_keeping(
    claims: &[Claim],
    keep: &BTreeSet<String>,
    current: &[RecordSet],
    owner_id: &str,
    policy: Policy,
) -> Plan {
    plan_with(claims, keep, current, &Rules { owner_id, policy, adopt: None, grace: 0, now: 0 })
}

/// [`plan`] with every rule: each wanted name decided on its own
/// ([`plan_name`]), then the owned names nobody wants any more
/// ([`release_unwanted`]).
///
/// With routing sets (weighted, failover), each set is planned as a zone of
/// its own ([`sets`]); without, the zone is one part.
pub fn plan_with(claims: &[Claim], keep: &BTreeSet<String>, current: &[RecordSet], rules: &Rules<'_>) -> Plan {
    let mut out = Plan::default();
    if !sets::any(claims, current) {
        plan_part(claims, keep, Zone::read(current), &BTreeSet::new(), rules, &mut out);
        return out;
    }
    let split = sets::split(claims, current, keep, rules, &mut out.conflicts);
    for part in &split.parts {
        let zone = Zone::read(part.own.iter().copied().chain(part.others.iter()));
        plan_part(&part.claims, keep, zone, &part.moving, rules, &mut out);
    }
    merge_moves(&split.moves, &mut out);
    out
}

/// One part of the zone (all of it, or one routing set's): each wanted
/// name, then the owned names nobody wants any more.
fn plan_part(
    claims: &[Claim],
    keep: &BTreeSet<String>,
    zone: Zone<'_>,
    moving: &BTreeSet<String>,
    rules: &Rules<'_>,
    out: &mut Plan,
) {
    for (name, claimants) in reading::claimants_by_name(claims) {
        plan_name(name, claimants, &zone, keep, rules, out);
    }
    release_unwanted(claims, &zone, keep, moving, rules, out);
}

/// A name its holder moves to another routing set (or into or out of a
/// policy) goes in one group: the old set's deletes, then the new set's
/// creates, so that Route53 applies both or neither. When the new set is
/// not created (a conflict there), the old one stays.
fn merge_moves(moves: &BTreeSet<(String, String, String)>, out: &mut Plan) {
    for (name, from, to) in moves {
        let of = |resource: &str, kind: fn(ChangeKind) -> bool| {
            out.groups.iter().position(|g| g.name == *name && g.resource == resource && kind(g.kind))
        };
        let release = of(from, |k| matches!(k, ChangeKind::Deleted | ChangeKind::Released));
        let create = of(to, |k| k == ChangeKind::Created);
        match (release, create) {
            (Some(r), Some(c)) => {
                let created = out.groups.remove(c);
                let r = if c < r { r - 1 } else { r };
                let g = &mut out.groups[r];
                g.changes.extend(created.changes);
                g.kind = ChangeKind::Updated;
                g.resource = created.resource;
                g.after = created.after;
            }
            // Not created for a conflict there: the old set stays. (Without
            // a conflict the new set exists already: the old one goes.)
            (Some(r), None) if out.conflicts.iter().any(|c| c.name == *name && c.resource == *to) => {
                out.groups.remove(r);
            }
            _ => {}
        }
    }
}

/// One name some Services want: who gets it, what is in the way, and the
/// changes that publish it.
fn plan_name<'c>(
    name: &str,
    mut claimants: Vec<Claimant<'c>>,
    zone: &Zone<'_>,
    keep: &BTreeSet<String>,
    rules: &Rules<'_>,
    out: &mut Plan,
) {
    let owned = zone.ownership(name);
    let ours = owned.as_ref().filter(|(o, _)| o.owner == rules.owner_id);
    // The holder named in our TXT keeps the name; then the oldest.
    claimants.sort_by(|(a, _), (b, _)| {
        let holds = |c: &Claim| ours.is_some_and(|(o, _)| o.resource == c.resource);
        holds(b).cmp(&holds(a)).then_with(|| a.order.cmp(&b.order))
    });
    let existing = zone.records(name);
    let holder_absent = |o: &Ownership| !claimants.iter().any(|(c, _)| c.resource == o.resource);
    // Held by a Service skipped for bad input: it keeps the name.
    if let Some((o, _)) = ours.filter(|(o, _)| keep.contains(&o.resource) && holder_absent(o)) {
        for (c, _) in &claimants {
            out.conflicts.push(conflict(c, name, ConflictCause::OtherService(o.resource.clone())));
        }
        out.managed_records += existing.iter().filter(|r| is_ours_managed(r)).count();
        return;
    }
    // A freed name: the holder's namespace first; another namespace's
    // Service only once the grace has run out.
    if let Some((o, txt)) = ours.filter(|(o, _)| rules.grace > 0 && holder_absent(o)) {
        let holder_ns = namespace_of(&o.resource);
        // Stable: the oldest of the holder's namespace, then the others, oldest first.
        claimants.sort_by_key(|(c, _)| namespace_of(&c.resource) != holder_ns);
        if let Some(until) = conflicts::reserved(o, claimants.first().map(|(c, _)| *c), rules) {
            for (c, _) in &claimants {
                out.conflicts.push(conflict(c, name, ConflictCause::Reserved(until)));
            }
            let held: Vec<&RecordSet> = existing.iter().copied().filter(|r| is_ours_managed(r)).collect();
            out.groups.extend(changes::hold(name, o, txt, &held, rules));
            if rules.policy != Policy::Sync {
                out.managed_records += held.len();
            }
            return;
        }
    }
    let mut claimants = claimants.into_iter();
    let Some((winner, want)) = claimants.next() else { return };
    for (loser, _) in claimants {
        out.conflicts.push(conflict(loser, name, ConflictCause::OtherService(winner.resource.clone())));
    }
    let adopted = match (rules.adopt, &owned) {
        (Some(adopt), None) if !zone.txt_at.contains_key(name) => {
            conflicts::adoptable(adopt, name, &winner.resource, &zone.at)
        }
        _ => None,
    };
    let taken = conflicts::taken_by(name, &want, zone, owned.as_ref(), adopted.as_deref(), rules.owner_id);
    if let Some(what) = taken {
        out.conflicts.push(conflict(winner, name, ConflictCause::Unowned(what)));
        return;
    }
    let current: BTreeMap<RecordType, &RecordSet> =
        existing.iter().filter(|r| is_ours_managed(r)).map(|r| (r.rtype, *r)).collect();
    if let Some(why) = conflicts::policy_forbids(&want, &current, rules.policy) {
        out.conflicts.push(conflict(winner, name, ConflictCause::Policy(why)));
        out.managed_records += current.len();
        return;
    }
    out.managed_records += want.len();
    let txt = ours.map(|(o, r)| (o, *r));
    out.groups.extend(changes::publish(name, winner, &want, &current, txt, adopted.as_deref(), rules));
}

fn conflict(c: &Claim, name: &str, cause: ConflictCause) -> Conflict {
    Conflict { resource: c.resource.clone(), name: name.to_string(), cause }
}

/// Owned names nobody wants any more: deleted (policy `sync`, unless held
/// by a Service skipped for bad input), or held for `--handover-grace` —
/// unless `moving`: its holder wants it in another routing set.
fn release_unwanted(
    claims: &[Claim],
    zone: &Zone<'_>,
    keep: &BTreeSet<String>,
    moving: &BTreeSet<String>,
    rules: &Rules<'_>,
    out: &mut Plan,
) {
    let wanted_names: BTreeSet<&str> = claims.iter().flat_map(|c| c.records.iter().map(|r| &*r.name)).collect();
    for (name, txt) in &zone.txt_at {
        if wanted_names.contains(name) {
            continue;
        }
        let Some(o) = registry::ownership_of(txt).filter(|o| o.owner == rules.owner_id) else { continue };
        let before: Vec<&RecordSet> = zone.records(name).into_iter().filter(|r| is_ours_managed(r)).collect();
        if rules.policy != Policy::Sync || keep.contains(&o.resource) {
            out.managed_records += before.len();
            continue;
        }
        let expired = o.freed.is_some_and(|t| rules.now >= t.saturating_add(rules.grace));
        if rules.grace > 0 && !expired && !moving.contains(*name) {
            out.groups.extend(changes::hold(name, &o, txt, &before, rules));
            continue;
        }
        out.groups.push(changes::release(name, o, txt, &before));
    }
}
