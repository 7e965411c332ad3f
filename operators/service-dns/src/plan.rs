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
//! * an owned name that nobody wants any more is deleted (policy `sync`).

use std::collections::{BTreeMap, BTreeSet};

use crate::desired::Claim;
use crate::hostname::{owned_name_of_txt, owner_txt_name};
use crate::model::{Action, Change, RecordSet, RecordType};
use crate::registry::{self, Ownership};

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

/// What a group of changes does to one name, for Events and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Created,
    Updated,
    Deleted,
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
            ConflictCause::OtherService(other) => {
                format!(
                    "dns name {} is already published for {other}; not publishing it for {}",
                    self.name, self.resource
                )
            }
            ConflictCause::Unowned(what) => {
                format!("dns name {} is taken by a record flotilla does not own ({what}); left untouched", self.name)
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
    // Records at each name, and the ownership TXTs.
    let mut at: BTreeMap<&str, Vec<&RecordSet>> = BTreeMap::new();
    let mut txt_at: BTreeMap<&str, &RecordSet> = BTreeMap::new();
    for r in current {
        if let Some(owned) = owned_name_of_txt(&r.name).filter(|_| r.rtype == RecordType::Txt) {
            txt_at.insert(owned, r);
        } else {
            at.entry(r.name.as_str()).or_default().push(r);
        }
    }
    let ownership = |name: &str| -> Option<(Ownership, &RecordSet)> {
        txt_at.get(name).and_then(|r| registry::ownership_of(r).map(|o| (o, *r)))
    };

    // Claimants of each name, with the records they want there.
    let mut wanted: BTreeMap<&str, Vec<(&Claim, Vec<&RecordSet>)>> = BTreeMap::new();
    for c in claims {
        let mut by_name: BTreeMap<&str, Vec<&RecordSet>> = BTreeMap::new();
        for r in &c.records {
            by_name.entry(r.name.as_str()).or_default().push(r);
        }
        for (name, records) in by_name {
            wanted.entry(name).or_default().push((c, records));
        }
    }

    let mut out = Plan::default();
    for (name, mut claimants) in wanted {
        let owned = ownership(name);
        let ours = owned.as_ref().filter(|(o, _)| o.owner == owner_id);
        // The holder named in our TXT keeps the name; then the oldest.
        claimants.sort_by(|(a, _), (b, _)| {
            let holds = |c: &Claim| ours.is_some_and(|(o, _)| o.resource == c.resource);
            holds(b).cmp(&holds(a)).then_with(|| a.order.cmp(&b.order))
        });
        let existing: Vec<&RecordSet> = at.get(name).cloned().unwrap_or_default();
        if let Some((o, _)) = ours.filter(|(o, _)| keep.contains(&o.resource))
            && !claimants.iter().any(|(c, _)| c.resource == o.resource)
        {
            for (c, _) in &claimants {
                out.conflicts.push(Conflict {
                    resource: c.resource.clone(),
                    name: name.to_string(),
                    cause: ConflictCause::OtherService(o.resource.clone()),
                });
            }
            out.managed_records += existing.iter().filter(|r| r.rtype.is_managed() && r.foreign.is_none()).count();
            continue;
        }
        let mut claimants = claimants.into_iter();
        let Some((winner, want)) = claimants.next() else { continue };
        for (loser, _) in claimants {
            out.conflicts.push(Conflict {
                resource: loser.resource.clone(),
                name: name.to_string(),
                cause: ConflictCause::OtherService(winner.resource.clone()),
            });
        }

        let taken_by = if let Some((o, _)) = owned.as_ref().filter(|(o, _)| o.owner != owner_id) {
            Some(format!("TXT {} says owner={}", owner_txt_name(name), o.owner))
        } else if ours.is_none() {
            let wants_cname = want.iter().any(|r| r.rtype == RecordType::Cname);
            if let Some(r) = existing.iter().find(|r| r.rtype.is_managed() || wants_cname || r.foreign.is_some()) {
                Some(format!("{} {}", r.foreign.as_deref().unwrap_or(r.rtype.as_str()), r.name))
            } else {
                txt_at.get(name).map(|r| format!("TXT {}", r.name))
            }
        } else {
            existing
                .iter()
                .find(|r| r.foreign.is_some() && r.rtype.is_managed())
                .map(|r| format!("{} {}", r.foreign.as_deref().unwrap_or(r.rtype.as_str()), r.name))
        };
        if let Some(what) = taken_by {
            out.conflicts.push(Conflict {
                resource: winner.resource.clone(),
                name: name.to_string(),
                cause: ConflictCause::Unowned(what),
            });
            continue;
        }

        let ttl = want.iter().map(|r| r.ttl).min().unwrap_or(300);
        let current_managed: BTreeMap<RecordType, &RecordSet> =
            existing.iter().filter(|r| r.rtype.is_managed() && r.foreign.is_none()).map(|r| (r.rtype, *r)).collect();
        let mut changes = Vec::new();
        // Stale types first (A → CNAME needs the A gone before the CNAME).
        if policy == Policy::Sync {
            for (t, r) in &current_managed {
                if !want.iter().any(|w| w.rtype == *t) {
                    changes.push(Change { action: Action::Delete, record: (*r).clone() });
                }
            }
        }
        for w in &want {
            match current_managed.get(&w.rtype) {
                None => changes.push(Change { action: Action::Create, record: (*w).clone() }),
                Some(cur) if cur.ttl != w.ttl || cur.values != w.values => {
                    if policy != Policy::CreateOnly {
                        changes.push(Change { action: Action::Upsert, record: (*w).clone() });
                    }
                }
                Some(_) => {}
            }
        }
        let txt = registry::txt_record(name, ttl, owner_id, &winner.resource);
        match ours {
            None => changes.push(Change { action: Action::Create, record: txt }),
            Some((o, _)) if o.resource != winner.resource && (!changes.is_empty() || policy != Policy::CreateOnly) => {
                changes.push(Change { action: Action::Upsert, record: txt })
            }
            Some(_) => {}
        }
        let after: Vec<RecordSet> = want.iter().map(|r| (*r).clone()).collect();
        out.managed_records += after.len();
        if changes.is_empty() {
            continue;
        }
        let before: Vec<RecordSet> = current_managed.values().map(|r| (*r).clone()).collect();
        let kind = if ours.is_none() || before.is_empty() { ChangeKind::Created } else { ChangeKind::Updated };
        out.groups.push(ChangeGroup {
            name: name.to_string(),
            resource: winner.resource.clone(),
            kind,
            changes,
            before,
            after,
        });
    }

    // Owned names nobody wants any more.
    let wanted_names: BTreeSet<&str> = claims.iter().flat_map(|c| c.records.iter().map(|r| r.name.as_str())).collect();
    for (name, txt) in &txt_at {
        if wanted_names.contains(name) {
            continue;
        }
        let Some(o) = registry::ownership_of(txt).filter(|o| o.owner == owner_id) else { continue };
        let before: Vec<RecordSet> = at
            .get(name)
            .map(|rs| rs.iter().filter(|r| r.rtype.is_managed() && r.foreign.is_none()).map(|r| (*r).clone()).collect())
            .unwrap_or_default();
        if policy != Policy::Sync || keep.contains(&o.resource) {
            out.managed_records += before.len();
            continue;
        }
        let mut changes: Vec<Change> =
            before.iter().map(|r| Change { action: Action::Delete, record: r.clone() }).collect();
        changes.push(Change { action: Action::Delete, record: (*txt).clone() });
        out.groups.push(ChangeGroup {
            name: name.to_string(),
            resource: o.resource,
            kind: ChangeKind::Deleted,
            changes,
            before,
            after: Vec::new(),
        });
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::batch::{Limits, batches};
    use proptest::prelude::*;

    const ME: &str = "me";

    fn a(name: &str, ip: &str) -> RecordSet {
        RecordSet::new(name, RecordType::A, 300, vec![ip.to_string()])
    }
    fn claim(resource: &str, order: i64, records: Vec<RecordSet>) -> Claim {
        Claim { resource: resource.into(), order: (order, resource.into()), records }
    }
    fn txt(name: &str, owner: &str, resource: &str) -> RecordSet {
        registry::txt_record(name, 300, owner, resource)
    }

    /// Applies a plan the way Route53 does (atomically per change, strictly:
    /// CREATE of an existing set and DELETE of a different one fail).
    pub(crate) fn apply(zone: &[RecordSet], plan: &Plan) -> Result<Vec<RecordSet>, String> {
        let mut z: BTreeMap<(String, RecordType), RecordSet> =
            zone.iter().map(|r| ((r.name.clone(), r.rtype), r.clone())).collect();
        for g in &plan.groups {
            for c in &g.changes {
                let key = (c.record.name.clone(), c.record.rtype);
                match c.action {
                    Action::Create => {
                        if z.insert(key, c.record.clone()).is_some() {
                            return Err(format!("CREATE of existing {key:?}", key = (&c.record.name, c.record.rtype)));
                        }
                    }
                    Action::Upsert => {
                        z.insert(key, c.record.clone());
                    }
                    Action::Delete => {
                        if z.remove(&key).as_ref() != Some(&c.record) {
                            return Err(format!("DELETE of missing or different {:?}", c.record));
                        }
                    }
                }
            }
        }
        Ok(z.into_values().collect())
    }

    #[test]
    fn seed_create_then_delete() {
        let zone = vec![];
        let claims =
            vec![claim("service/test/hello-world", 1, vec![a("kube-hello-world.vipmind.me", "10.108.222.86")])];
        let p = plan(&claims, &zone, ME, Policy::Sync);
        assert_eq!(p.groups.len(), 1);
        assert_eq!(p.groups[0].kind, ChangeKind::Created);
        let zone = apply(&zone, &p).unwrap();
        assert_eq!(zone.len(), 2);
        assert!(plan(&claims, &zone, ME, Policy::Sync).is_empty(), "unchanged zone: no writes");
        let p = plan(&[], &zone, ME, Policy::Sync);
        assert_eq!(p.groups[0].kind, ChangeKind::Deleted);
        assert_eq!(p.groups[0].resource, "service/test/hello-world");
        assert!(apply(&zone, &p).unwrap().is_empty());
        assert!(plan(&[], &zone, ME, Policy::UpsertOnly).is_empty());
    }

    #[test]
    fn unowned_record_is_a_conflict_and_untouched() {
        let zone = vec![a("x.z", "1.1.1.1")];
        let p = plan(&[claim("service/a/x", 1, vec![a("x.z", "2.2.2.2")])], &zone, ME, Policy::Sync);
        assert!(p.is_empty());
        assert!(matches!(p.conflicts[0].cause, ConflictCause::Unowned(_)));
        let zone = vec![a("x.z", "1.1.1.1"), txt("x.z", "other", "service/a/x")];
        let p = plan(&[claim("service/a/x", 1, vec![a("x.z", "2.2.2.2")])], &zone, ME, Policy::Sync);
        assert!(p.is_empty());
        assert_eq!(p.conflicts.len(), 1);
        assert!(plan(&[], &zone, ME, Policy::Sync).is_empty(), "another owner's names are never deleted");
    }

    #[test]
    fn older_service_wins_and_holder_keeps() {
        let claims = vec![
            claim("service/b/x", 2, vec![a("x.z", "2.2.2.2")]),
            claim("service/a/x", 1, vec![a("x.z", "1.1.1.1")]),
        ];
        let p = plan(&claims, &[], ME, Policy::Sync);
        assert_eq!(p.groups[0].resource, "service/a/x");
        assert_eq!(p.conflicts[0].resource, "service/b/x");
        // Once b holds it, b keeps it even though a is older.
        let zone = vec![a("x.z", "2.2.2.2"), txt("x.z", ME, "service/b/x")];
        let p = plan(&claims, &zone, ME, Policy::Sync);
        assert!(p.is_empty());
        assert_eq!(p.conflicts[0].resource, "service/a/x");
    }

    #[test]
    fn a_service_skipped_for_bad_input_keeps_its_records() {
        let zone = vec![a("x.z", "1.1.1.1"), txt("x.z", ME, "service/a/x")];
        let keep: BTreeSet<String> = ["service/a/x".to_string()].into();
        assert!(plan_keeping(&[], &keep, &zone, ME, Policy::Sync).is_empty());
        let other = vec![claim("service/b/y", 0, vec![a("x.z", "2.2.2.2")])];
        let p = plan_keeping(&other, &keep, &zone, ME, Policy::Sync);
        assert!(p.is_empty());
        assert_eq!(p.conflicts[0].resource, "service/b/y");
        // Without the keep, the records go.
        assert_eq!(plan(&[], &zone, ME, Policy::Sync).groups[0].kind, ChangeKind::Deleted);
    }

    #[test]
    fn policies() {
        let zone = vec![a("x.z", "1.1.1.1"), txt("x.z", ME, "service/a/x")];
        let moved = vec![claim("service/a/x", 1, vec![a("x.z", "9.9.9.9")])];
        assert_eq!(plan(&moved, &zone, ME, Policy::UpsertOnly).groups[0].kind, ChangeKind::Updated);
        assert!(plan(&moved, &zone, ME, Policy::CreateOnly).is_empty());
        let new = vec![claim("service/a/y", 1, vec![a("y.z", "9.9.9.9")])];
        let p = plan(&new, &zone, ME, Policy::CreateOnly);
        assert_eq!(p.groups.len(), 1);
        assert_eq!(p.groups[0].kind, ChangeKind::Created);
    }

    #[test]
    fn type_change_deletes_the_old_type_first() {
        let zone = vec![a("x.z", "1.1.1.1"), txt("x.z", ME, "service/a/x")];
        let cname = RecordSet::new("x.z", RecordType::Cname, 300, vec!["lb.example".into()]);
        let p = plan(&[claim("service/a/x", 1, vec![cname.clone()])], &zone, ME, Policy::Sync);
        assert_eq!(p.groups[0].changes[0].action, Action::Delete);
        let after = apply(&zone, &p).unwrap();
        assert!(after.contains(&cname));
    }

    // ---- property tests ----

    fn arb_name() -> impl Strategy<Value = String> {
        (0u8..8).prop_map(|i| format!("n{i}.z"))
    }
    fn arb_ip() -> impl Strategy<Value = String> {
        (0u8..4).prop_map(|i| format!("10.0.0.{i}"))
    }
    fn arb_type() -> impl Strategy<Value = RecordType> {
        prop_oneof![Just(RecordType::A), Just(RecordType::Aaaa), Just(RecordType::Cname)]
    }
    fn arb_record() -> impl Strategy<Value = RecordSet> {
        (arb_name(), arb_type(), arb_ip(), prop_oneof![Just(60i64), Just(300)]).prop_map(|(n, t, ip, ttl)| {
            let v = match t {
                RecordType::Aaaa => format!("fd00::{}", &ip[7..]),
                RecordType::Cname => format!("lb{}.example", &ip[7..]),
                _ => ip,
            };
            RecordSet::new(n, t, ttl, vec![v])
        })
    }
    fn arb_zone() -> impl Strategy<Value = Vec<RecordSet>> {
        // Records, and for some names an ownership TXT (ours, another
        // owner's, or a non-flotilla TXT).
        (proptest::collection::vec(arb_record(), 0..10), proptest::collection::vec((arb_name(), 0u8..4, 0u8..3), 0..6))
            .prop_map(|(records, txts)| {
                let mut z: BTreeMap<(String, RecordType), RecordSet> = BTreeMap::new();
                for r in records {
                    // A CNAME cannot share its name with anything.
                    let clash = z
                        .keys()
                        .any(|(n, t)| n == &r.name && (r.rtype == RecordType::Cname || *t == RecordType::Cname));
                    if !clash {
                        z.insert((r.name.clone(), r.rtype), r);
                    }
                }
                for (n, who, res) in txts {
                    let t = match who {
                        0 | 1 => txt(&n, ME, &format!("service/ns/s{res}")),
                        2 => txt(&n, "other", &format!("service/ns/s{res}")),
                        _ => RecordSet::new(owner_txt_name(&n), RecordType::Txt, 300, vec!["\"hello\"".into()]),
                    };
                    z.insert((t.name.clone(), RecordType::Txt), t);
                }
                z.into_values().collect()
            })
    }
    fn arb_claims() -> impl Strategy<Value = Vec<Claim>> {
        proptest::collection::vec((0u8..5, proptest::collection::vec(arb_record(), 1..3)), 0..6).prop_map(|cs| {
            let mut seen = BTreeSet::new();
            cs.into_iter()
                .filter(|(i, _)| seen.insert(*i))
                .map(|(i, records)| {
                    // One record per (name, type); a CNAME alone at its name.
                    let mut by: BTreeMap<(String, RecordType), RecordSet> = BTreeMap::new();
                    for r in records {
                        let clash = by
                            .keys()
                            .any(|(n, t)| n == &r.name && (r.rtype == RecordType::Cname || *t == RecordType::Cname));
                        if !clash {
                            by.insert((r.name.clone(), r.rtype), r);
                        }
                    }
                    claim(&format!("service/ns/s{i}"), i64::from(i % 3), by.into_values().collect())
                })
                .collect()
        })
    }

    fn owned_by_me(zone: &[RecordSet]) -> BTreeSet<String> {
        zone.iter()
            .filter(|r| registry::ownership_of(r).is_some_and(|o| o.owner == ME))
            .filter_map(|r| owned_name_of_txt(&r.name).map(str::to_string))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Applying the plan yields exactly the desired records we may own,
        /// leaves every record we do not own as it was, and is idempotent.
        #[test]
        fn sync_converges_and_never_touches_unowned(zone in arb_zone(), claims in arb_claims()) {
            let p = plan(&claims, &zone, ME, Policy::Sync);
            let after = apply(&zone, &p).map_err(TestCaseError::fail)?;
            let owned_before = owned_by_me(&zone);
            // Unowned records are untouched.
            for r in &zone {
                let name = owned_name_of_txt(&r.name).unwrap_or(&r.name);
                if !owned_before.contains(name) {
                    prop_assert!(after.contains(r), "unowned {r:?} changed");
                }
            }
            // Owned records after = what the (independently chosen) winners want.
            let mut expected: BTreeSet<RecordSet> = BTreeSet::new();
            let mut names: BTreeMap<&str, Vec<&Claim>> = BTreeMap::new();
            for c in &claims { for r in &c.records { names.entry(&r.name).or_default().push(c); } }
            for (name, mut cs) in names {
                cs.dedup_by(|a, b| a.resource == b.resource);
                let holder = zone.iter().find(|r| r.name == owner_txt_name(name)).and_then(registry::ownership_of);
                let attainable = match &holder {
                    Some(o) => o.owner == ME,
                    None => {
                        let wants_cname = cs.iter().any(|c| c.records.iter().any(|r| r.name == name && r.rtype == RecordType::Cname));
                        !zone.iter().any(|r| r.name == name && (r.rtype.is_managed() || wants_cname))
                            && !zone.iter().any(|r| r.name == owner_txt_name(name))
                    }
                };
                if !attainable { continue; }
                let winner = cs.iter().find(|c| holder.as_ref().is_some_and(|o| o.resource == c.resource))
                    .or_else(|| cs.iter().min_by(|a, b| a.order.cmp(&b.order)))
                    .copied();
                if let Some(w) = winner {
                    for r in w.records.iter().filter(|r| r.name == name) { expected.insert(r.clone()); }
                }
            }
            let owned_after = owned_by_me(&after);
            let got: BTreeSet<RecordSet> = after.iter()
                .filter(|r| r.rtype.is_managed() && owned_after.contains(&r.name))
                .cloned().collect();
            prop_assert_eq!(got, expected);
            // Idempotent: a second plan writes nothing.
            let again = plan(&claims, &after, ME, Policy::Sync);
            prop_assert!(again.is_empty(), "second plan not empty: {:?}", again.groups);
        }

        /// Names held by Services skipped for bad input are neither deleted
        /// nor handed over.
        #[test]
        fn kept_services_keep_their_names(zone in arb_zone(), claims in arb_claims(), kept in proptest::collection::btree_set(0u8..3, 0..3)) {
            let keep: BTreeSet<String> = kept.iter().map(|i| format!("service/ns/s{i}")).collect();
            let claims: Vec<Claim> = claims.into_iter().filter(|c| !keep.contains(&c.resource)).collect();
            let p = plan_keeping(&claims, &keep, &zone, ME, Policy::Sync);
            let after = apply(&zone, &p).map_err(TestCaseError::fail)?;
            for r in &zone {
                if let Some(o) = registry::ownership_of(r).filter(|o| o.owner == ME && keep.contains(&o.resource)) {
                    prop_assert!(after.contains(r), "TXT of kept {} changed", o.resource);
                    let name = owned_name_of_txt(&r.name).unwrap_or_default();
                    for held in zone.iter().filter(|x| x.name == name) {
                        prop_assert!(after.contains(held), "record of kept {} changed: {held:?}", o.resource);
                    }
                }
            }
        }

        #[test]
        fn restricted_policies_never_delete(zone in arb_zone(), claims in arb_claims()) {
            for policy in [Policy::UpsertOnly, Policy::CreateOnly] {
                let p = plan(&claims, &zone, ME, policy);
                for g in &p.groups {
                    for c in &g.changes {
                        prop_assert_ne!(c.action, Action::Delete);
                        if policy == Policy::CreateOnly && c.record.rtype != RecordType::Txt {
                            prop_assert_eq!(c.action, Action::Create);
                        }
                    }
                }
            }
        }

        /// Batches respect Route53's limits and keep each name's records
        /// with its TXT; together they are the whole plan, in order.
        #[test]
        fn batches_respect_limits(zone in arb_zone(), claims in arb_claims(), max_records in 2usize..12, max_chars in 60usize..400) {
            let p = plan(&claims, &zone, ME, Policy::Sync);
            let limits = Limits { max_records, max_chars };
            let bs = batches(&p.groups, limits);
            let mut flat = Vec::new();
            for b in &bs {
                let (recs, chars): (usize, usize) = b.iter().map(|g| (g.cost_records(), g.cost_chars())).fold((0, 0), |a, x| (a.0 + x.0, a.1 + x.1));
                prop_assert!(b.len() == 1 || (recs <= max_records && chars <= max_chars), "batch over limits: {recs} {chars}");
                prop_assert!(!b.is_empty());
                flat.extend(b.iter().cloned().cloned());
            }
            prop_assert_eq!(flat, p.groups);
        }
    }
}
