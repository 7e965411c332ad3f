//! What keeps a Service from a name it wins among Services: a name held
//! for another namespace during `--handover-grace`, a record flotilla
//! does not own, or a change `--policy` forbids.

use std::collections::BTreeMap;

use super::reading::{Zone, is_ours_managed};
use super::{Policy, Rules};
use crate::desired::Claim;
use crate::extdns::{self, ExternalDnsOwner};
use crate::hostname::owner_txt_name;
use crate::model::{RecordSet, RecordType};
use crate::registry::{Ownership, namespace_of};

/// A name of ours its holder `o` freed: held for the holder's namespace
/// until the grace runs out (`Some(until)`, Unix seconds) when `first`, the
/// claimant first in line (the holder's namespace first), is of another
/// namespace.
pub(super) fn reserved(o: &Ownership, first: Option<&Claim>, rules: &Rules<'_>) -> Option<i64> {
    let same_ns = first.is_some_and(|c| namespace_of(&c.resource) == namespace_of(&o.resource));
    let until = o.freed.unwrap_or(rules.now).saturating_add(rules.grace);
    (!same_ns && rules.now < until).then_some(until)
}

/// The external-dns TXTs that make `name` adoptable for `resource`: some
/// TXT of the adopted owner says that Service, and no other external-dns
/// TXT for the name says anything else (`None`: not adoptable).
pub(super) fn adoptable<'c>(
    adopt: &ExternalDnsOwner,
    name: &str,
    resource: &str,
    at: &BTreeMap<&str, Vec<&'c RecordSet>>,
) -> Option<Vec<&'c RecordSet>> {
    let mut theirs = Vec::new();
    for txt_name in adopt.txt_names(name) {
        for r in at.get(txt_name.as_str()).into_iter().flatten() {
            let Some(l) = extdns::labels_of(r) else { continue };
            if l.owner != adopt.owner || l.resource.as_deref() != Some(resource) {
                return None;
            }
            theirs.push(*r);
        }
    }
    (!theirs.is_empty()).then_some(theirs)
}

/// What at `name` is not ours and in the way of `want` (`None`: nothing):
/// another owner's TXT; on a name nobody owns (and not being adopted) any
/// address record, alias or TXT; on our own name a foreign address record,
/// or — for a CNAME, which must be alone — anything not ours. At the zone
/// apex, the zone's SOA and NS are not in the way.
pub(super) fn taken_by(
    name: &str,
    want: &[&RecordSet],
    zone: &Zone<'_>,
    owned: Option<&(Ownership, &RecordSet)>,
    adopted: Option<&[&RecordSet]>,
    owner_id: &str,
) -> Option<String> {
    let mut existing = zone.records(name);
    // The zone apex (the name with the SOA): the zone's own SOA and NS are
    // no one's claim, and an ALIAS may stand beside them.
    if existing.iter().any(|r| r.foreign() == Some("SOA")) {
        existing.retain(|r| !matches!(r.foreign(), Some("SOA" | "NS")));
    }
    let wants_cname = want.iter().any(|r| r.rtype == RecordType::Cname);
    let label = |r: &RecordSet| format!("{} {}", r.foreign().unwrap_or(r.rtype.as_str()), r.name);
    let ours = owned.is_some_and(|(o, _)| o.owner == owner_id);
    if let Some((o, _)) = owned.filter(|(o, _)| o.owner != owner_id) {
        return Some(format!("TXT {} says owner={}", owner_txt_name(name), o.owner));
    }
    if !ours && adopted.is_none() {
        return match existing.iter().find(|r| r.rtype.is_managed() || wants_cname || r.is_foreign()) {
            Some(r) => Some(label(r)),
            None => zone.txt_at.get(name).map(|r| format!("TXT {}", r.name)),
        };
    }
    // Ours (or being adopted): what is not ours at the name must not be
    // managed-type foreign, nor, for a CNAME, anything.
    let adopted_txts = adopted.unwrap_or_default();
    existing
        .iter()
        .filter(|r| !adopted_txts.contains(r))
        .find(|r| (r.is_foreign() && r.rtype.is_managed()) || (wants_cname && !is_ours_managed(r)))
        .map(|r| {
            if wants_cname && !(r.is_foreign() && r.rtype.is_managed()) {
                format!("{}; a CNAME must be alone at its name", label(r))
            } else {
                label(r)
            }
        })
}

/// A restricted policy cannot delete the type a CNAME replaces (or that
/// replaces a CNAME): Route53 would refuse the CREATE; nor replace an
/// address set by an ALIAS (or back). Why, if so.
pub(super) fn policy_forbids(
    want: &[&RecordSet],
    current: &BTreeMap<RecordType, &RecordSet>,
    policy: Policy,
) -> Option<String> {
    if policy == Policy::Sync {
        return None;
    }
    let wants_cname = want.iter().any(|r| r.rtype == RecordType::Cname);
    // An address set becoming an ALIAS or back is a DELETE and a CREATE.
    let replaced: Vec<RecordType> = want
        .iter()
        .filter(|w| current.get(&w.rtype).is_some_and(|c| c.alias_target().is_some() != w.alias_target().is_some()))
        .map(|w| w.rtype)
        .collect();
    if !replaced.is_empty() {
        let types = replaced.iter().map(|t| t.as_str()).collect::<Vec<_>>().join("/");
        return Some(format!(
            "{types} would have to be deleted and created again to switch between an address record and an ALIAS, \
             which --policy {} does not allow",
            policy.as_str()
        ));
    }
    let stale: Vec<RecordType> = current.keys().copied().filter(|t| !want.iter().any(|w| w.rtype == *t)).collect();
    if stale.is_empty() || !(wants_cname || stale.contains(&RecordType::Cname)) {
        return None;
    }
    let join = |ts: &[RecordType]| ts.iter().map(|t| t.as_str()).collect::<Vec<_>>().join("/");
    let wanted: Vec<RecordType> = want.iter().map(|w| w.rtype).collect();
    Some(format!(
        "{} would have to be deleted for {}, which --policy {} does not allow",
        join(&stale),
        join(&wanted),
        policy.as_str()
    ))
}
