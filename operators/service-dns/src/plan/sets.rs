//! Routing sets in the plan. A name may hold several sets of one routing
//! policy (weighted, or a failover primary and secondary), each with its
//! own set identifier and its own ownership TXT (a set of the same
//! identifier): typically one per cluster. The plan splits the zone and
//! the claims by set identifier and plans each part as a zone of its own,
//! where the records of the other parts are foreign — in the way only when
//! Route53 would refuse them beside what the part writes (per name and
//! type: a set beside a record of no policy, two policies, two primaries; a
//! CNAME beside anything else), or when no flotilla TXT guards them (a
//! tenant cannot join a weighted group someone else runs by hand).
//!
//! One name has one holder among this cluster's Services, whatever sets
//! they ask for: a tenant cannot add its own set to a name another
//! namespace's Service publishes (and take a share of its traffic) by
//! picking another identifier — nor while the holder is gone and the name
//! held for its namespace (`--handover-grace`), nor while it is skipped for
//! bad input. The holder named in one of our TXTs keeps it, then the oldest.
//!
//! A holder moving its name to another set (or into or out of a policy)
//! moves it in one batch: the old set and its TXT deleted, the new ones
//! created, all or nothing (policy `sync`; the other policies cannot delete,
//! and the move is a conflict).
//!
//! Weighted sets of one name and type share one TTL in Route53 (it rewrites
//! all of them to the last one written), so a set joining a group takes the
//! group's TTL, and a set's ownership TXT has a fixed one.

use std::collections::{BTreeMap, BTreeSet};

use super::{Conflict, ConflictCause, Policy, Rules};
use crate::desired::Claim;
use crate::hostname::{owned_name_of_txt, owner_txt_name};
use crate::model::{RecordSet, RecordType, RoutingPolicy};
use crate::registry::{self, Ownership, namespace_of};

/// (name, set) pairs: the sets of names moving between parts.
type SetsAt<'a> = BTreeSet<(&'a str, Option<&'a str>)>;

/// The TTL of a routing set's ownership TXT: one for every set, so that
/// the TXTs' group is never rewritten by Route53.
pub(super) const SET_TXT_TTL: i64 = 300;

/// One part of the plan: the sets of one identifier (or the records of no
/// policy), with the zone as that part sees it.
pub(super) struct Part<'a> {
    pub claims: Vec<Claim>,
    /// Its own records.
    pub own: Vec<&'a RecordSet>,
    /// Other parts' records at the names it claims, as foreign where they
    /// are in its way.
    pub others: Vec<RecordSet>,
    /// Names whose holder moves them to another part: released at once.
    pub moving: BTreeSet<String>,
}

/// The parts, and the moves to make whole: (name, the Service releasing
/// it, the Service publishing it).
pub(super) struct Split<'a> {
    pub parts: Vec<Part<'a>>,
    pub moves: BTreeSet<(String, String, String)>,
}

/// Whether any claim or record is a routing set (else the plan is the
/// plain one, unchanged).
pub(super) fn any(claims: &[Claim], current: &[RecordSet]) -> bool {
    claims.iter().any(|c| c.records.iter().any(|r| r.routing().is_some()))
        || current.iter().any(|r| r.routing().is_some())
}

/// The set a record belongs to (`None`: no policy, or foreign).
fn set_of(r: &RecordSet) -> Option<&str> {
    r.set_id()
}

/// The set a claim asks for (all its records are of one set).
fn claim_set(c: &Claim) -> Option<&str> {
    c.records.first().and_then(set_of)
}

/// The hostname a record stands at: its own, or the one its ownership TXT guards.
fn host_of(r: &RecordSet) -> &str {
    match owned_name_of_txt(&r.name) {
        Some(owned) if r.rtype == RecordType::Txt => owned,
        _ => &r.name,
    }
}

/// Whether Route53 refuses records of types `a` and `b` at one name: a
/// CNAME is alone.
fn cname_clash(a: RecordType, b: RecordType) -> bool {
    a != b && (a == RecordType::Cname || b == RecordType::Cname)
}

/// A claimant of a name that a holder of ours keeps from it, and why: the
/// holder is gone but skipped for bad input (`keep`), or its name is held
/// for its namespace for `--handover-grace`.
fn kept_from(o: &Ownership, claimant: &Claim, keep: &BTreeSet<String>, rules: &Rules<'_>) -> Option<ConflictCause> {
    if keep.contains(&o.resource) {
        return Some(ConflictCause::OtherService(o.resource.clone()));
    }
    if rules.grace == 0 {
        return None;
    }
    super::conflicts::reserved(o, Some(claimant), rules).map(ConflictCause::Reserved)
}

/// Splits the claims and the zone by set; the claims that lose a name to
/// a Service of another set are in `conflicts`.
pub(super) fn split<'a>(
    claims: &[Claim],
    current: &'a [RecordSet],
    keep: &BTreeSet<String>,
    rules: &Rules<'_>,
    conflicts: &mut Vec<Conflict>,
) -> Split<'a> {
    // Our TXTs: which Service holds each name, in which set; and which
    // (name, set) any flotilla TXT guards.
    let mut holders: BTreeMap<&str, Vec<(Option<&str>, Ownership)>> = BTreeMap::new();
    let mut guarded: BTreeSet<(&str, &str)> = BTreeSet::new();
    for r in current {
        let (Some(host), Some(o)) = (owned_name_of_txt(&r.name), registry::ownership_of(r)) else { continue };
        if let Some(set) = set_of(r) {
            guarded.insert((host, set));
        }
        if o.owner == rules.owner_id {
            holders.entry(host).or_default().push((set_of(r), o));
        }
    }
    // Who wants each name, in which set.
    let mut wanted: BTreeMap<&str, Vec<(&Claim, Option<&str>)>> = BTreeMap::new();
    for c in claims {
        let names: BTreeSet<&str> = c.records.iter().map(|r| &*r.name).collect();
        for n in names {
            wanted.entry(n).or_default().push((c, claim_set(c)));
        }
    }
    let mut dropped: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut moving: BTreeMap<Option<&str>, BTreeSet<String>> = BTreeMap::new();
    // The old set of a name moving into a part: not in that part's way
    // (deleted in the same batch); or, when `--policy` cannot delete it, in
    // the way of a move it would otherwise let through.
    let mut hidden: BTreeMap<Option<&str>, SetsAt<'_>> = BTreeMap::new();
    let mut blocked: BTreeMap<Option<&str>, SetsAt<'_>> = BTreeMap::new();
    let mut moves = BTreeSet::new();
    for (name, claimants) in &wanted {
        let held = holders.get(name).map(Vec::as_slice).unwrap_or_default();
        let holder = claimants.iter().find(|(c, _)| held.iter().any(|(_, o)| o.resource == c.resource));
        // The holder keeps its name; a gone holder's namespace comes first
        // (as in `plan_name`); then the oldest.
        let gone = held.first().map(|(_, o)| o).filter(|_| holder.is_none());
        let other_ns = |c: &Claim| gone.is_some_and(|o| namespace_of(&c.resource) != namespace_of(&o.resource));
        let winner = holder.or_else(|| claimants.iter().min_by_key(|(c, _)| (other_ns(c), &c.order)));
        let Some((winner, winner_set)) = winner else { continue };
        let mut lose = |c: &Claim, cause: ConflictCause| {
            conflicts.push(Conflict { resource: c.resource.clone(), name: (*name).to_string(), cause });
        };
        // A holder present keeps the name from everyone, in every set (its
        // new set has no TXT yet when it moves); otherwise the other sets'
        // claimants lose, and the winner's set is decided by `plan_name`.
        for (c, set) in claimants {
            if c.resource != winner.resource && (holder.is_some() || set != winner_set) {
                lose(c, ConflictCause::OtherService(winner.resource.clone()));
                dropped.insert((&c.resource, name));
            }
        }
        // A gone holder keeps the name from another set's winner as it
        // would in its own set (`plan_name`): skipped for bad input, or held
        // for its namespace for --handover-grace.
        let mut kept = false;
        for (_, o) in held.iter().filter(|(hset, _)| holder.is_none() && hset != winner_set) {
            if let Some(cause) = kept_from(o, winner, keep, rules) {
                lose(winner, cause);
                dropped.insert((&winner.resource, name));
                kept = true;
            }
        }
        if kept {
            continue;
        }
        // The name moves to the winner's set: its holder's own move, or a
        // gone holder's name taken by its namespace (or after the grace).
        for (hset, o) in held.iter().filter(|(hset, _)| hset != winner_set) {
            moving.entry(*hset).or_default().insert((*name).to_string());
            if rules.policy == Policy::Sync {
                hidden.entry(*winner_set).or_default().insert((*name, *hset));
                moves.insert(((*name).to_string(), o.resource.clone(), winner.resource.clone()));
            } else {
                blocked.entry(*winner_set).or_default().insert((*name, *hset));
            }
        }
    }
    // The zone by set, and by name.
    let mut by_set: BTreeMap<Option<&str>, Vec<&RecordSet>> = BTreeMap::from([(None, Vec::new())]);
    let mut by_name: BTreeMap<&str, Vec<&RecordSet>> = BTreeMap::new();
    for r in current {
        by_set.entry(set_of(r)).or_default().push(r);
        by_name.entry(&r.name).or_default().push(r);
    }
    for c in claims {
        by_set.entry(claim_set(c)).or_default();
    }
    let mut claims_by_set: BTreeMap<Option<&str>, Vec<&Claim>> = BTreeMap::new();
    for c in claims {
        claims_by_set.entry(claim_set(c)).or_default().push(c);
    }
    let parts = by_set
        .into_iter()
        .map(|(set, own)| {
            let mut claims: Vec<Claim> = claims_by_set
                .get(&set)
                .into_iter()
                .flatten()
                .map(|c| Claim {
                    records: c
                        .records
                        .iter()
                        .filter(|r| !dropped.contains(&(c.resource.as_str(), &*r.name)))
                        .cloned()
                        .collect(),
                    ..(*c).clone()
                })
                .filter(|c| !c.records.is_empty())
                .collect();
            let none = BTreeSet::new();
            let hidden = hidden.get(&set).unwrap_or(&none);
            let blocked = blocked.get(&set).unwrap_or(&none);
            let others = others_in_view(set, &claims, &by_name, (hidden, blocked), &guarded);
            if set.is_some() {
                take_group_ttls(set, &mut claims, &by_name, hidden);
            }
            Part { claims, own, others, moving: moving.remove(&set).unwrap_or_default() }
        })
        .collect();
    Split { parts, moves }
}

/// Other parts' records at the names `claims` (of the part of `set`) write:
/// foreign records as they are; a record of no policy of the same type (or
/// a CNAME clash) as foreign where a set is wanted; another set as foreign
/// where its policy cannot stand beside the wanted one at that type, where
/// it clashes with a CNAME, or where no flotilla TXT guards it; plain TXTs
/// and other records at the name as they are. `moved`: the old set of a
/// name moving here, left out (deleted in the same batch), and the one a
/// restricted `--policy` cannot delete, in the way.
fn others_in_view(
    set: Option<&str>,
    claims: &[Claim],
    by_name: &BTreeMap<&str, Vec<&RecordSet>>,
    moved: (&SetsAt<'_>, &SetsAt<'_>),
    guarded: &BTreeSet<(&str, &str)>,
) -> Vec<RecordSet> {
    let (hidden, blocked) = moved;
    // What the part writes at each exact name: (type, policy), its TXTs too.
    let mut writes: BTreeMap<String, Vec<(RecordType, Option<RoutingPolicy>)>> = BTreeMap::new();
    for r in claims.iter().flat_map(|c| c.records.iter()) {
        let policy = r.routing().map(|ro| ro.policy);
        writes.entry(r.name.to_string()).or_default().push((r.rtype, policy));
        writes.entry(owner_txt_name(&r.name)).or_default().push((RecordType::Txt, policy));
    }
    let mut out = Vec::new();
    for (name, wants) in &writes {
        for r in by_name.get(name.as_str()).into_iter().flatten().copied() {
            if set_of(r) == set {
                continue; // its own: in `own`
            }
            if r.is_foreign() {
                out.push(r.clone());
                continue;
            }
            let ours_type = r.rtype.is_managed() || owned_name_of_txt(&r.name).is_some();
            let foreign = |why: String| r.clone().into_foreign(format!("{} {} ({why})", r.rtype, r.name));
            if ours_type && hidden.contains(&(host_of(r), set_of(r))) {
                continue;
            }
            if ours_type && blocked.contains(&(host_of(r), set_of(r))) {
                out.push(foreign("its set before, which --policy does not let this operator delete".into()));
                continue;
            }
            let clash = |t: RecordType| t == r.rtype || cname_clash(t, r.rtype);
            match r.routing() {
                // Another set: in the way of a record of no policy, of a
                // policy it cannot stand beside, of a CNAME; or unguarded.
                Some(ro) => {
                    let in_way = wants.iter().any(|(t, p)| match p {
                        None => clash(*t),
                        Some(p) => cname_clash(*t, r.rtype) || (*t == r.rtype && !p.coexists_with(ro.policy)),
                    });
                    let guarded = set_of(r).is_some_and(|s| guarded.contains(&(host_of(r), s)));
                    if in_way {
                        out.push(foreign(ro.to_string()));
                    } else if !guarded {
                        out.push(foreign(format!("{ro}, no flotilla owner")));
                    }
                }
                // A record of no policy (or its TXT) where a set is wanted.
                None if ours_type => {
                    if wants.iter().any(|(t, _)| clash(*t)) {
                        out.push(foreign("not a routing set".to_string()));
                    }
                }
                // A plain TXT (or other record) at the name: as it is.
                None => out.push(r.clone()),
            }
        }
    }
    out
}

/// A weighted set joining a group of its name and type takes the group's
/// TTL (another guarded set's), which Route53 would otherwise rewrite.
fn take_group_ttls(
    set: Option<&str>,
    claims: &mut [Claim],
    by_name: &BTreeMap<&str, Vec<&RecordSet>>,
    hidden: &SetsAt<'_>,
) {
    for r in claims.iter_mut().flat_map(|c| c.records.iter_mut()) {
        let Some(RoutingPolicy::Weighted(_)) = r.routing().map(|ro| ro.policy) else { continue };
        if r.alias_target().is_some() {
            continue;
        }
        let group = by_name.get(&*r.name).into_iter().flatten().find(|o| {
            o.rtype == r.rtype
                && set_of(o) != set
                && o.alias_target().is_none()
                && matches!(o.routing().map(|ro| ro.policy), Some(RoutingPolicy::Weighted(_)))
                && !hidden.contains(&(host_of(o), set_of(o)))
        });
        if let Some(g) = group {
            r.ttl = g.ttl;
        }
    }
}
