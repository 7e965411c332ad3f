//! Routing sets in the plan. A name may hold several sets of one routing
//! policy (weighted, or a failover primary and secondary), each with its
//! own set identifier and its own ownership TXT (a set of the same
//! identifier): typically one per cluster. The plan splits the zone and
//! the claims by set identifier and plans each part as a zone of its own,
//! where the sets of the other parts are foreign — in the way only when
//! Route53 would refuse them side by side (a set beside a record of no
//! policy, two policies at one name, two primaries).
//!
//! One name has one holder among this cluster's Services, whatever sets
//! they ask for: a tenant cannot add its own set to a name another
//! namespace's Service publishes (and take a share of its traffic) by
//! picking another identifier. The holder named in one of our TXTs keeps
//! it, then the oldest.
//!
//! A name whose holder moves it to another set (or into or out of a
//! policy) is released from the old set at once (no `--handover-grace`:
//! it stays with its holder) and published in the new one at the next sync,
//! once Route53 no longer has the old set in the way.

use std::collections::{BTreeMap, BTreeSet};

use super::{Conflict, ConflictCause};
use crate::desired::Claim;
use crate::hostname::owned_name_of_txt;
use crate::model::{RecordSet, RecordType, RoutingPolicy};
use crate::registry;

/// One part of the plan: the sets of one identifier (or the records of no
/// policy), with the zone as that part sees it.
pub(super) struct Part {
    pub claims: Vec<Claim>,
    pub current: Vec<RecordSet>,
    /// Names whose holder wants them in another part: released at once.
    pub moving: BTreeSet<String>,
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

/// The hostname a record stands at: its own, or the one its ownership TXT guards.
fn host_of(r: &RecordSet) -> &str {
    match owned_name_of_txt(&r.name) {
        Some(owned) if r.rtype == RecordType::Txt => owned,
        _ => &r.name,
    }
}

/// Splits the claims and the zone by set; the claims that lose a name to
/// a Service of another set are in `conflicts`.
pub(super) fn split(
    claims: &[Claim],
    current: &[RecordSet],
    owner_id: &str,
    conflicts: &mut Vec<Conflict>,
) -> Vec<Part> {
    // Our TXTs: which Service holds each name, in which set.
    let mut holders: BTreeMap<&str, Vec<(Option<&str>, String)>> = BTreeMap::new();
    for r in current {
        if let (Some(host), Some(o)) = (owned_name_of_txt(&r.name), registry::ownership_of(r))
            && o.owner == owner_id
        {
            holders.entry(host).or_default().push((set_of(r), o.resource));
        }
    }
    // Who wants each name, in which set.
    let mut wanted: BTreeMap<&str, Vec<(&Claim, Option<&str>)>> = BTreeMap::new();
    for c in claims {
        let set = c.records.first().and_then(set_of);
        let names: BTreeSet<&str> = c.records.iter().map(|r| &*r.name).collect();
        for n in names {
            wanted.entry(n).or_default().push((c, set));
        }
    }
    // One holder per name across the sets; those of other sets lose it.
    let mut dropped: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut moving: BTreeMap<Option<&str>, BTreeSet<String>> = BTreeMap::new();
    for (name, claimants) in &wanted {
        let held = holders.get(name).map(Vec::as_slice).unwrap_or_default();
        let winner = claimants
            .iter()
            .find(|(c, _)| held.iter().any(|(_, r)| *r == c.resource))
            .or_else(|| claimants.iter().min_by(|(a, _), (b, _)| a.order.cmp(&b.order)));
        let Some((winner, winner_set)) = winner else { continue };
        for (c, set) in claimants {
            if set != winner_set && c.resource != winner.resource {
                conflicts.push(Conflict {
                    resource: c.resource.clone(),
                    name: (*name).to_string(),
                    cause: ConflictCause::OtherService(winner.resource.clone()),
                });
                dropped.insert((&c.resource, name));
            }
        }
        for (set, resource) in held {
            if *resource == winner.resource && set != winner_set {
                moving.entry(*set).or_default().insert((*name).to_string());
            }
        }
    }
    // The parts: every set wanted or present, and the records of no policy.
    let mut sets: BTreeSet<Option<&str>> = BTreeSet::from([None]);
    sets.extend(claims.iter().map(|c| c.records.first().and_then(set_of)));
    sets.extend(current.iter().map(set_of));
    sets.into_iter()
        .map(|set| {
            let claims: Vec<Claim> = claims
                .iter()
                .filter(|c| c.records.first().and_then(set_of) == set)
                .map(|c| Claim {
                    records: c
                        .records
                        .iter()
                        .filter(|r| !dropped.contains(&(c.resource.as_str(), &*r.name)))
                        .cloned()
                        .collect(),
                    ..c.clone()
                })
                .filter(|c| !c.records.is_empty())
                .collect();
            let current = view(set, &claims, current);
            Part { claims, current, moving: moving.remove(&set).unwrap_or_default() }
        })
        .collect()
}

/// The zone as the part of `set` sees it: its own sets as they are; at a
/// name it claims, the records of other parts in its way as foreign (a set
/// beside a record of no policy, or beside a set of a policy Route53 would
/// not put beside it), the rest of the zone as it is. Other parts' records
/// at a name it only releases are left out: they are not its to judge, and
/// another set's TXT must not stand where its own is read.
fn view(set: Option<&str>, claims: &[Claim], current: &[RecordSet]) -> Vec<RecordSet> {
    // The names this part claims, with the policy it writes there.
    let claimed: BTreeMap<&str, Option<RoutingPolicy>> =
        claims.iter().flat_map(|c| c.records.iter()).map(|r| (&*r.name, r.routing().map(|ro| ro.policy))).collect();
    let mut out = Vec::new();
    for r in current {
        if set_of(r) == set || r.is_foreign() {
            out.push(r.clone());
            continue;
        }
        let Some(ours) = claimed.get(host_of(r)) else {
            // Another part's record at a name this part only releases; a
            // plain TXT or record of no policy at a name nobody claims here.
            if r.routing().is_none() && !r.rtype.is_managed() && owned_name_of_txt(&r.name).is_none() {
                out.push(r.clone());
            }
            continue;
        };
        let foreign = |why: String| r.clone().into_foreign(format!("{} {} ({why})", r.rtype, r.name));
        match (ours, r.routing()) {
            // A set where a record of no policy is wanted.
            (None, Some(ro)) => out.push(foreign(ro.to_string())),
            // A record of no policy (or its TXT) where a set is wanted.
            (Some(_), None) if r.rtype.is_managed() || owned_name_of_txt(&r.name).is_some() => {
                out.push(foreign("not a routing set".to_string()));
            }
            (Some(p), Some(ro)) if !p.coexists_with(ro.policy) => out.push(foreign(ro.to_string())),
            // Another set of a policy that stands beside ours; or a plain
            // TXT (or other record) at the name.
            (Some(_), Some(_)) => {}
            (_, None) => out.push(r.clone()),
        }
    }
    out
}
