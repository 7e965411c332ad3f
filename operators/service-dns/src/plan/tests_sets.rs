//! The plan with routing sets: two clusters on one name, one holder per
//! name among a cluster's Services, moving a name between sets.

use super::*;
use crate::model::{Action, FailoverRole, Routing, RoutingPolicy};

const A: &str = "cluster-a";
const B: &str = "cluster-b";

fn weighted(id: &str, w: u8) -> Routing {
    Routing { set_id: id.into(), policy: RoutingPolicy::Weighted(w), health_check_id: None }
}
fn failover(id: &str, role: FailoverRole) -> Routing {
    Routing { set_id: id.into(), policy: RoutingPolicy::Failover(role), health_check_id: None }
}
fn a(name: &str, ip: &str, routing: Option<Routing>) -> RecordSet {
    let r = RecordSet::new(name, RecordType::A, 300, vec![ip.to_string()]);
    match routing {
        Some(ro) => r.with_routing(ro),
        None => r,
    }
}
fn claim(resource: &str, order: i64, records: Vec<RecordSet>) -> Claim {
    Claim { resource: resource.into(), order: (order, resource.into()), records }
}
fn rules(owner: &str) -> Rules<'_> {
    Rules { owner_id: owner, policy: Policy::Sync, adopt: None, grace: 0, now: 1_000 }
}
fn plan_for(owner: &str, claims: &[Claim], zone: &[RecordSet]) -> Plan {
    plan_with(claims, &BTreeSet::new(), zone, &rules(owner))
}

/// Applies a plan as Route53 does: a set is (name, type, identifier);
/// CREATE of an existing set and DELETE of a different one fail; a name and
/// type hold sets of one policy (with one primary at most) or one record of none.
fn apply(zone: &[RecordSet], plan: &Plan) -> Result<Vec<RecordSet>, String> {
    type Key = (Box<str>, RecordType, Option<Box<str>>);
    let key = |r: &RecordSet| -> Key { (r.name.clone(), r.rtype, r.set_id().map(Into::into)) };
    let mut z: BTreeMap<Key, RecordSet> = zone.iter().map(|r| (key(r), r.clone())).collect();
    for g in &plan.groups {
        for c in &g.changes {
            let k = key(&c.record);
            match c.action {
                Action::Create => {
                    if z.insert(k.clone(), c.record.clone()).is_some() {
                        return Err(format!("CREATE of existing {k:?}"));
                    }
                }
                Action::Upsert => {
                    z.insert(k, c.record.clone());
                }
                Action::Delete => {
                    if z.remove(&k).as_ref() != Some(&c.record) {
                        return Err(format!("DELETE of missing or different {:?}", c.record));
                    }
                }
            }
        }
        for r in z.values() {
            let clash = |o: &&RecordSet| o.name == r.name && o.rtype != r.rtype && r.rtype == RecordType::Cname;
            if let Some(o) = z.values().find(clash) {
                return Err(format!("CNAME {} beside {} {}", r.name, o.rtype, o.name));
            }
            for o in z.values().filter(|o| o.name == r.name && o.rtype == r.rtype && key(o) != key(r)) {
                let ok = match (r.routing(), o.routing()) {
                    (Some(x), Some(y)) => x.policy.coexists_with(y.policy),
                    _ => false,
                };
                if !ok {
                    return Err(format!(
                        "{} {} and {} {} side by side",
                        r.name,
                        r.shown_values(),
                        o.name,
                        o.shown_values()
                    ));
                }
            }
        }
    }
    Ok(z.into_values().collect())
}

/// The sets at a name (and their TXTs), as (name, set, owner of its TXT).
fn sets_at(zone: &[RecordSet], name: &str) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = zone
        .iter()
        .filter(|r| r.name.ends_with(name))
        .map(|r| (r.name.to_string(), r.set_id().map(str::to_string)))
        .collect();
    out.sort();
    out
}

#[test]
fn two_clusters_publish_one_name_each_its_own_set() {
    let web = |ip: &str, set: Routing| vec![claim("service/shop/web", 1, vec![a("www.z", ip, Some(set))])];
    let (a_claims, b_claims) = (web("10.0.0.1", weighted("a", 50)), web("10.0.1.1", weighted("b", 50)));
    let zone = apply(&[], &plan_for(A, &a_claims, &[])).unwrap();
    let p = plan_for(B, &b_claims, &zone);
    assert!(p.conflicts.is_empty(), "{:?}", p.conflicts);
    let zone = apply(&zone, &p).unwrap();
    assert_eq!(
        sets_at(&zone, "www.z"),
        [
            ("_flotilla-owner.www.z".into(), Some("a".into())),
            ("_flotilla-owner.www.z".into(), Some("b".into())),
            ("www.z".into(), Some("a".into())),
            ("www.z".into(), Some("b".into())),
        ]
    );
    // Each converged: nothing to do for either.
    assert!(plan_for(A, &a_claims, &zone).is_empty());
    assert!(plan_for(B, &b_claims, &zone).is_empty());
    // A's weight changes: only A's set (and its TXT) change.
    let p = plan_for(A, &web("10.0.0.1", weighted("a", 0)), &zone);
    assert!(p.groups.iter().flat_map(|g| &g.changes).all(|c| c.record.set_id() == Some("a")), "{p:?}");
    let zone = apply(&zone, &p).unwrap();
    // A's Service goes: A's set goes, B's stays.
    let zone = apply(&zone, &plan_for(A, &[], &zone)).unwrap();
    assert_eq!(
        sets_at(&zone, "www.z"),
        [("_flotilla-owner.www.z".into(), Some("b".into())), ("www.z".into(), Some("b".into()))]
    );
    // And B never touches A's set, even when it wants nothing.
    let zone = apply(&zone, &plan_for(A, &a_claims, &zone)).unwrap();
    let p = plan_for(B, &[], &zone);
    assert!(p.groups.iter().flat_map(|g| &g.changes).all(|c| c.record.set_id() == Some("b")), "{p:?}");
}

#[test]
fn the_same_set_identifier_in_two_clusters_is_a_conflict() {
    let web = |ip: &str| vec![claim("service/shop/web", 1, vec![a("www.z", ip, Some(weighted("same", 1)))])];
    let zone = apply(&[], &plan_for(A, &web("10.0.0.1"), &[])).unwrap();
    let p = plan_for(B, &web("10.0.1.1"), &zone);
    assert!(p.is_empty());
    assert!(matches!(&p.conflicts[0].cause, ConflictCause::Unowned(w) if w.contains("owner=cluster-a")), "{p:?}");
}

#[test]
fn failover_takes_one_primary_and_one_secondary() {
    let web = |role| vec![claim("service/shop/web", 1, vec![a("www.z", "10.0.0.1", Some(failover("x", role)))])];
    let zone = apply(&[], &plan_for(A, &web(FailoverRole::Primary), &[])).unwrap();
    let web_b = |role| vec![claim("service/shop/web", 1, vec![a("www.z", "10.0.1.1", Some(failover("y", role)))])];
    // A second primary is in the way; a secondary stands beside it.
    let p = plan_for(B, &web_b(FailoverRole::Primary), &zone);
    assert!(p.is_empty() && matches!(p.conflicts[0].cause, ConflictCause::Unowned(_)), "{p:?}");
    let zone = apply(&zone, &plan_for(B, &web_b(FailoverRole::Secondary), &zone)).unwrap();
    assert_eq!(zone.iter().filter(|r| r.rtype == RecordType::A).count(), 2);
    // A weighted set where failover sets stand: in the way.
    let w = vec![claim("service/shop/web", 1, vec![a("www.z", "10.0.2.1", Some(weighted("z", 1)))])];
    assert!(matches!(plan_for("cluster-c", &w, &zone).conflicts[0].cause, ConflictCause::Unowned(_)));
}

#[test]
fn a_set_and_a_record_of_no_policy_are_in_each_others_way() {
    let plain = vec![claim("service/shop/web", 1, vec![a("www.z", "10.0.0.1", None)])];
    let zone = apply(&[], &plan_for(A, &plain, &[])).unwrap();
    let set = vec![claim("service/shop/web", 1, vec![a("www.z", "10.0.1.1", Some(weighted("b", 1)))])];
    let p = plan_for(B, &set, &zone);
    assert!(p.is_empty());
    assert!(matches!(&p.conflicts[0].cause, ConflictCause::Unowned(w) if w.contains("not a routing set")), "{p:?}");
    // And the other way round.
    let zone = apply(&[], &plan_for(B, &set, &[])).unwrap();
    let p = plan_for(A, &plain, &zone);
    assert!(p.is_empty());
    assert!(matches!(&p.conflicts[0].cause, ConflictCause::Unowned(w) if w.contains("set b")), "{p:?}");
}

/// A tenant cannot add its own set to a name another namespace's Service
/// publishes (and take a share of its traffic) by picking another identifier.
#[test]
fn one_holder_per_name_whatever_the_sets() {
    let owner_svc = claim("service/shop/web", 1, vec![a("www.z", "10.0.0.1", Some(weighted("a", 100)))]);
    let zone = apply(&[], &plan_for(A, std::slice::from_ref(&owner_svc), &[])).unwrap();
    let thief = claim("service/evil/x", 0, vec![a("www.z", "6.6.6.6", Some(weighted("evil", 255)))]);
    let p = plan_for(A, &[owner_svc.clone(), thief.clone()], &zone);
    assert!(p.is_empty(), "{p:?}");
    assert_eq!(p.conflicts.len(), 1);
    assert_eq!(p.conflicts[0].resource, "service/evil/x");
    assert_eq!(p.conflicts[0].cause, ConflictCause::OtherService("service/shop/web".into()));
    // Nobody holds it yet: the oldest gets it, whatever its set.
    let p = plan_for(A, &[owner_svc, thief], &[]);
    let written: BTreeSet<Option<&str>> = p.groups.iter().flat_map(|g| &g.changes).map(|c| c.record.set_id()).collect();
    assert_eq!(written, BTreeSet::from([Some("evil")]), "the older (order 0) Service");
    assert_eq!(p.conflicts[0].resource, "service/shop/web");
}

/// A Service moving its name into a set, to another set and back out: one
/// group each time, the old deleted and the new created in one batch.
#[test]
fn a_name_moves_into_a_set_and_back_in_one_batch() {
    let plain = vec![claim("service/shop/web", 1, vec![a("www.z", "10.0.0.1", None)])];
    let set = |id: &str| vec![claim("service/shop/web", 1, vec![a("www.z", "10.0.0.1", Some(weighted(id, 1)))])];
    let graced = |claims: &[Claim], zone: &[RecordSet]| {
        plan_with(claims, &BTreeSet::new(), zone, &Rules { grace: 600, ..rules(A) })
    };
    let mut zone = apply(&[], &graced(&plain, &[])).unwrap();
    for (claims, id) in [(set("a"), Some("a")), (set("b"), Some("b")), (plain.clone(), None)] {
        let p = graced(&claims, &zone);
        assert_eq!(p.groups.len(), 1, "{p:?}");
        assert_eq!(p.groups[0].kind, ChangeKind::Updated, "one batch: {p:?}");
        assert!(p.conflicts.is_empty(), "{:?}", p.conflicts);
        zone = apply(&zone, &p).unwrap();
        assert!(zone.iter().all(|r| r.set_id() == id) && zone.len() == 2, "{zone:?}");
        assert!(graced(&claims, &zone).is_empty(), "converged");
    }
}

/// A move the new set cannot make (in another cluster's way) keeps the old.
#[test]
fn a_move_that_cannot_be_made_keeps_the_old_set() {
    let other = apply(
        &[],
        &plan_for(
            B,
            &[claim("service/x/y", 1, vec![a("www.z", "10.9.9.9", Some(failover("p", FailoverRole::Primary)))])],
            &[],
        ),
    )
    .unwrap();
    let mine = |routing| vec![claim("service/shop/web", 1, vec![a("www.z", "10.0.0.1", routing)])];
    let zone = apply(&other, &plan_for(A, &mine(Some(failover("s", FailoverRole::Secondary))), &other)).unwrap();
    // Secondary → primary: another cluster's primary is in the way.
    let p = plan_for(A, &mine(Some(failover("s2", FailoverRole::Primary))), &zone);
    assert!(p.groups.is_empty(), "the old set stays: {p:?}");
    assert!(matches!(p.conflicts[0].cause, ConflictCause::Unowned(_)), "{p:?}");
}

/// A gone holder (its name held for `--handover-grace`, or its Service
/// skipped for bad input) keeps its name from another namespace's Service
/// asking for it in another set.
#[test]
fn a_gone_holder_keeps_its_name_from_other_sets() {
    let holder = vec![claim("service/shop/web", 1, vec![a("www.z", "10.0.0.1", Some(weighted("a", 1)))])];
    let graced = |claims: &[Claim], keep: &BTreeSet<String>, zone: &[RecordSet]| {
        plan_with(claims, keep, zone, &Rules { grace: 600, ..rules(A) })
    };
    let none = BTreeSet::new();
    let zone = apply(&[], &graced(&holder, &none, &[])).unwrap();
    let thief = vec![claim("service/evil/x", 0, vec![a("www.z", "6.6.6.6", Some(weighted("b", 255)))])];
    // Skipped for bad input: kept.
    let kept = BTreeSet::from(["service/shop/web".to_string()]);
    let p = graced(&thief, &kept, &zone);
    assert!(p.groups.is_empty(), "{p:?}");
    assert_eq!(p.conflicts[0].cause, ConflictCause::OtherService("service/shop/web".into()));
    // Deleted: held for its namespace; the thief waits out the grace.
    let p = graced(&thief, &none, &zone);
    assert!(p.groups.iter().all(|g| g.resource == "service/shop/web"), "only the holder's hold: {p:?}");
    assert!(p.conflicts.iter().any(|c| matches!(c.cause, ConflictCause::Reserved(_))), "{p:?}");
    // The holder's own namespace gets it at once.
    let sibling = vec![claim("service/shop/api", 2, vec![a("www.z", "10.0.0.2", Some(weighted("c", 1)))])];
    let p = graced(&sibling, &none, &zone);
    assert!(p.conflicts.is_empty(), "{p:?}");
}

/// A weighted group someone runs without flotilla is not joined; a CNAME
/// set never stands beside another type's sets; the sets' TXTs follow the
/// same rules.
#[test]
fn what_a_set_may_stand_beside() {
    let hand = vec![a("www.z", "10.9.9.9", Some(weighted("terraform", 1)))];
    let mine = |rtype: RecordType, routing| {
        let r = RecordSet::new(
            "www.z",
            rtype,
            300,
            vec![if rtype == RecordType::Cname { "lb.example".into() } else { "fd00::1".into() }],
        );
        vec![claim("service/shop/web", 1, vec![r.with_routing(routing)])]
    };
    let p = plan_for(A, &mine(RecordType::A, weighted("a", 1)), &hand);
    assert!(p.groups.is_empty());
    assert!(matches!(&p.conflicts[0].cause, ConflictCause::Unowned(w) if w.contains("no flotilla owner")), "{p:?}");
    // Another cluster's guarded weighted A: a CNAME set is in its way, a failover AAAA is not.
    let zone =
        apply(&[], &plan_for(B, &[claim("service/x/y", 1, vec![a("www.z", "10.0.1.1", Some(weighted("b", 1)))])], &[]))
            .unwrap();
    let p = plan_for(A, &mine(RecordType::Cname, weighted("a", 1)), &zone);
    assert!(p.groups.is_empty() && matches!(p.conflicts[0].cause, ConflictCause::Unowned(_)), "{p:?}");
    // A failover AAAA could stand beside a weighted A, but its TXT (a
    // failover TXT) not beside the other cluster's weighted TXT.
    let p = plan_for(A, &mine(RecordType::Aaaa, failover("a", FailoverRole::Primary)), &zone);
    assert!(p.groups.is_empty(), "{p:?}");
    assert!(matches!(&p.conflicts[0].cause, ConflictCause::Unowned(w) if w.starts_with("TXT")), "{p:?}");
    // A weighted AAAA stands beside it.
    let p = plan_for(A, &mine(RecordType::Aaaa, weighted("a", 1)), &zone);
    assert!(p.conflicts.is_empty(), "{p:?}");
    apply(&zone, &p).unwrap();
}

/// Route53 keeps one TTL per weighted group: a set joining takes the
/// group's, and every set's TXT has the same fixed one.
#[test]
fn a_weighted_set_takes_its_groups_ttl() {
    let at = |ttl: i64, id: &str| {
        let r = RecordSet::new("www.z", RecordType::A, ttl, vec!["10.0.0.1".into()]).with_routing(weighted(id, 1));
        vec![claim("service/shop/web", 1, vec![r])]
    };
    let zone = apply(&[], &plan_for(B, &at(60, "b"), &[])).unwrap();
    let p = plan_for(A, &at(300, "a"), &zone);
    let zone = apply(&zone, &p).unwrap();
    let ttls: BTreeSet<(RecordType, i64)> = zone.iter().map(|r| (r.rtype, r.ttl)).collect();
    assert_eq!(ttls, BTreeSet::from([(RecordType::A, 60), (RecordType::Txt, sets::SET_TXT_TTL)]), "{zone:?}");
    assert!(plan_for(A, &at(300, "a"), &zone).is_empty(), "converged at the group's TTL");
    assert!(plan_for(B, &at(60, "b"), &zone).is_empty());
}

/// Without any set in the zone or the claims, the plan is the plain one.
#[test]
fn no_sets_no_change() {
    let claims = vec![claim("service/shop/web", 1, vec![a("www.z", "10.0.0.1", None)])];
    assert!(!sets::any(&claims, &[]));
    let p = plan_for(A, &claims, &[]);
    assert_eq!(p.groups.len(), 1);
    assert!(p.groups[0].changes.iter().all(|c| c.record.routing().is_none()));
}

/// A holder moving its name to the set an older tenant waits on keeps it.
#[test]
fn a_holder_moving_into_a_waiting_tenants_set_keeps_its_name() {
    let web = |id: &str| claim("service/shop/web", 1, vec![a("www.z", "10.0.0.1", Some(weighted(id, 1)))]);
    let evil = claim("service/evil/x", 0, vec![a("www.z", "6.6.6.6", Some(weighted("b", 255)))]);
    let zone = apply(&[], &plan_for(A, &[web("a")], &[])).unwrap();
    for plain_first in [false, true] {
        let (zone, claims) = if plain_first {
            let plain = claim("service/shop/web", 1, vec![a("www.z", "10.0.0.1", None)]);
            (apply(&[], &plan_for(A, &[plain], &[])).unwrap(), vec![web("b"), evil.clone()])
        } else {
            (zone.clone(), vec![web("b"), evil.clone()])
        };
        let p = plan_for(A, &claims, &zone);
        assert_eq!(p.conflicts.len(), 1, "{p:?}");
        assert_eq!(p.conflicts[0].resource, "service/evil/x");
        assert_eq!(p.groups.len(), 1, "{p:?}");
        assert_eq!(p.groups[0].resource, "service/shop/web");
        let zone = apply(&zone, &p).unwrap();
        assert!(zone.iter().all(|r| r.set_id() == Some("b")) && zone.len() == 2, "{zone:?}");
        assert!(
            registry::ownership_of(zone.iter().find(|r| r.rtype == RecordType::Txt).unwrap())
                .is_some_and(|o| o.resource == "service/shop/web")
        );
    }
}

/// A gone holder's namespace comes first in every set, and takes the name
/// in one batch; an older Service of another namespace waits.
#[test]
fn a_gone_holders_namespace_comes_first_across_sets() {
    let graced = |claims: &[Claim], zone: &[RecordSet]| {
        plan_with(claims, &BTreeSet::new(), zone, &Rules { grace: 600, ..rules(A) })
    };
    let zone =
        apply(&[], &graced(&[claim("service/shop/web", 1, vec![a("www.z", "10.0.0.1", Some(weighted("a", 1)))])], &[]))
            .unwrap();
    let evil = claim("service/evil/x", 0, vec![a("www.z", "6.6.6.6", Some(weighted("b", 255)))]);
    let sibling = claim("service/shop/api", 2, vec![a("www.z", "10.0.0.2", None)]);
    let p = graced(&[evil, sibling], &zone);
    assert_eq!(p.conflicts.len(), 1, "{p:?}");
    assert_eq!(p.conflicts[0].resource, "service/evil/x");
    assert_eq!(p.groups.len(), 1, "one batch: {p:?}");
    assert_eq!(p.groups[0].resource, "service/shop/api");
    let zone = apply(&zone, &p).unwrap();
    assert!(zone.iter().all(|r| r.set_id().is_none()) && zone.len() == 2, "{zone:?}");
}

/// Under a policy that cannot delete, a move is a conflict: the old set
/// stays, and no second set is added beside it.
#[test]
fn a_restricted_policy_does_not_move_a_name() {
    let web = |id: &str| vec![claim("service/shop/web", 1, vec![a("www.z", "10.0.0.1", Some(weighted(id, 1)))])];
    let zone = apply(&[], &plan_for(A, &web("a"), &[])).unwrap();
    let upsert_only = Rules { policy: Policy::UpsertOnly, ..rules(A) };
    let p = plan_with(&web("b"), &BTreeSet::new(), &zone, &upsert_only);
    assert!(p.groups.is_empty(), "{p:?}");
    assert!(matches!(&p.conflicts[0].cause, ConflictCause::Unowned(w) if w.contains("--policy")), "{p:?}");
}
