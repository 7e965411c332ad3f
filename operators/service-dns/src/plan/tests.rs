use super::*;
use crate::extdns;
use crate::hostname::{owned_name_of_txt, owner_txt_name};
use crate::model::{self, Action, Alias};
use proptest::prelude::*;

pub(crate) const ME: &str = "me";

fn a(name: &str, ip: &str) -> RecordSet {
    RecordSet::new(name, RecordType::A, 300, vec![ip.to_string()])
}
fn claim(resource: &str, order: i64, records: Vec<RecordSet>) -> Claim {
    Claim { resource: resource.into(), order: (order, resource.into()), records }
}
fn txt(name: &str, owner: &str, resource: &str) -> RecordSet {
    registry::txt_record(name, 300, owner, resource)
}
fn txt_of(name: &str, owner: &str) -> RecordSet {
    txt(name, owner, "service/x/y")
}

/// Applies a plan the way Route53 does (atomically per change, strictly:
/// CREATE of an existing set and DELETE of a different one fail).
pub(crate) fn apply(zone: &[RecordSet], plan: &Plan) -> Result<Vec<RecordSet>, String> {
    let mut z: BTreeMap<(Box<str>, RecordType), RecordSet> =
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
        // A CNAME is alone at its name.
        for ((n, t), _) in z.iter().filter(|((_, t), _)| *t == RecordType::Cname) {
            if z.keys().any(|(m, u)| m == n && u != t) {
                return Err(format!("CNAME {n} beside another record"));
            }
        }
    }
    Ok(z.into_values().collect())
}

#[test]
fn seed_create_then_delete() {
    let zone = vec![];
    let claims = vec![claim("service/test/hello-world", 1, vec![a("kube-hello-world.vipmind.me", "10.108.222.86")])];
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
    let claims =
        vec![claim("service/b/x", 2, vec![a("x.z", "2.2.2.2")]), claim("service/a/x", 1, vec![a("x.z", "1.1.1.1")])];
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

fn cname(name: &str, target: &str) -> RecordSet {
    RecordSet::new(name, RecordType::Cname, 300, vec![target.to_string()])
}
fn other(name: &str, kind: &str, value: &str) -> RecordSet {
    RecordSet::new(name, RecordType::Other, 300, vec![value.to_string()]).into_foreign(kind)
}

#[test]
fn a_cname_is_alone_at_its_name() {
    // Our A at x.z, and someone's MX (or TXT) beside it: the Service
    // moving to a load balancer hostname cannot get its CNAME there.
    for beside in
        [other("x.z", "MX", "10 mail.z"), RecordSet::new("x.z", RecordType::Txt, 300, vec!["\"v=spf1\"".into()])]
    {
        let zone = vec![a("x.z", "1.1.1.1"), txt("x.z", ME, "service/a/x"), beside.clone()];
        let p = plan(&[claim("service/a/x", 1, vec![cname("x.z", "lb.example")])], &zone, ME, Policy::Sync);
        assert!(p.is_empty(), "{:?}", p.groups);
        assert!(matches!(&p.conflicts[0].cause, ConflictCause::Unowned(w) if w.contains("alone")), "{:?}", p.conflicts);
        // An A beside it is fine.
        let p = plan(&[claim("service/a/x", 1, vec![a("x.z", "2.2.2.2")])], &zone, ME, Policy::Sync);
        assert_eq!(p.groups.len(), 1);
        assert!(apply(&zone, &p).is_ok());
    }
}

#[test]
fn a_type_change_a_restricted_policy_cannot_make_is_a_conflict() {
    let zone = vec![a("x.z", "1.1.1.1"), txt("x.z", ME, "service/a/x")];
    for policy in [Policy::UpsertOnly, Policy::CreateOnly] {
        let p = plan(&[claim("service/a/x", 1, vec![cname("x.z", "lb.example")])], &zone, ME, policy);
        assert!(p.is_empty(), "{policy:?}: {:?}", p.groups);
        assert!(matches!(&p.conflicts[0].cause, ConflictCause::Policy(_)), "{:?}", p.conflicts);
        assert!(p.conflicts[0].message().contains("does not allow"), "{}", p.conflicts[0].message());
    }
    let p = plan(&[claim("service/a/x", 1, vec![cname("x.z", "lb.example")])], &zone, ME, Policy::Sync);
    assert!(apply(&zone, &p).is_ok());
}

#[test]
fn an_upsert_carries_our_unchanged_txt() {
    let zone = vec![a("x.z", "1.1.1.1"), txt("x.z", ME, "service/a/x")];
    let p = plan(&[claim("service/a/x", 1, vec![a("x.z", "2.2.2.2")])], &zone, ME, Policy::Sync);
    let actions: Vec<(Action, RecordType)> = p.groups[0].changes.iter().map(|c| (c.action, c.record.rtype)).collect();
    assert_eq!(
        actions,
        [(Action::Delete, RecordType::Txt), (Action::Create, RecordType::Txt), (Action::Upsert, RecordType::A)]
    );
    assert_eq!(apply(&zone, &p).unwrap().len(), 2);
    // Taken meanwhile (another owner's TXT): Route53 refuses the batch.
    let taken = vec![a("x.z", "1.1.1.1"), txt("x.z", "thief", "service/a/x")];
    assert!(apply(&taken, &p).is_err());
}

// ---- handover grace ----

const GRACE: i64 = 300;
const T0: i64 = 1_700_000_000;

fn at(now: i64) -> Rules<'static> {
    Rules { owner_id: ME, policy: Policy::Sync, adopt: None, grace: GRACE, now }
}
fn plan_at(claims: &[Claim], zone: &[RecordSet], now: i64) -> Plan {
    plan_with(claims, &BTreeSet::new(), zone, &at(now))
}
fn txt_at(zone: &[RecordSet], name: &str) -> Option<Ownership> {
    zone.iter().find(|r| *r.name == owner_txt_name(name)).and_then(registry::ownership_of)
}

#[test]
fn a_name_freed_by_one_namespace_is_not_handed_to_another_within_the_grace() {
    // a/login holds login.z; b/login (younger) waits.
    let held = vec![a("login.z", "10.0.0.1"), txt("login.z", ME, "service/a/login")];
    let b = claim("service/b/login", 5, vec![a("login.z", "10.0.0.2")]);
    let p = plan_at(std::slice::from_ref(&b), &held, T0);
    // a/login is gone: its record is deleted and the name held for namespace a.
    assert_eq!(p.groups.len(), 1, "{:?}", p.groups);
    assert_eq!((p.groups[0].kind, p.groups[0].resource.as_str()), (ChangeKind::Deleted, "service/a/login"));
    assert_eq!(p.conflicts[0].resource, "service/b/login");
    assert_eq!(p.conflicts[0].cause, ConflictCause::Reserved(T0 + GRACE));
    assert!(!p.conflicts[0].message().contains("service/a"), "{}", p.conflicts[0].message());
    let zone = apply(&held, &p).unwrap();
    assert!(!zone.iter().any(|r| &*r.name == "login.z"), "the stale record is gone: {zone:?}");
    let o = txt_at(&zone, "login.z").unwrap();
    assert_eq!((o.resource.as_str(), o.freed), ("service/a/login", Some(T0)));
    // Within the grace: nothing more, b still waits (and across a restart:
    // the time is in the TXT).
    for now in [T0, T0 + 1, T0 + GRACE - 1] {
        let p = plan_at(std::slice::from_ref(&b), &zone, now);
        assert!(p.groups.is_empty(), "{now}: {:?}", p.groups);
        assert_eq!(p.conflicts[0].cause, ConflictCause::Reserved(T0 + GRACE));
    }
    // The holder's namespace comes back (a helm reinstall: a new Service,
    // any name, in namespace a): it gets the name at once, before b, even
    // though b is older.
    let back = claim("service/a/login-v2", 9, vec![a("login.z", "10.0.0.3")]);
    let p = plan_at(&[b.clone(), back.clone()], &zone, T0 + 10);
    assert_eq!(p.groups.len(), 1);
    assert_eq!((p.groups[0].kind, p.groups[0].resource.as_str()), (ChangeKind::Created, "service/a/login-v2"));
    assert!(matches!(p.conflicts[0].cause, ConflictCause::OtherService(_)));
    let after = apply(&zone, &p).unwrap();
    let o = txt_at(&after, "login.z").unwrap();
    assert_eq!((o.resource.as_str(), o.freed), ("service/a/login-v2", None), "unmarked");
    assert!(after.contains(&a("login.z", "10.0.0.3")));
    // After the grace, b gets it.
    let p = plan_at(std::slice::from_ref(&b), &zone, T0 + GRACE);
    assert_eq!(p.groups.len(), 1);
    assert_eq!((p.groups[0].kind, p.groups[0].resource.as_str()), (ChangeKind::Created, "service/b/login"));
    let after = apply(&zone, &p).unwrap();
    assert_eq!(txt_at(&after, "login.z").unwrap().resource, "service/b/login");
    assert!(after.contains(&a("login.z", "10.0.0.2")));
    assert!(plan_at(std::slice::from_ref(&b), &after, T0 + GRACE).is_empty(), "converged");
}

#[test]
fn the_same_service_back_within_the_grace_gets_its_name_unmarked() {
    let zone = vec![txt_freed("login.z", "service/a/login", T0)];
    let again = claim("service/a/login", 1, vec![a("login.z", "10.0.0.7")]);
    let p = plan_at(std::slice::from_ref(&again), &zone, T0 + 5);
    assert_eq!(p.groups[0].kind, ChangeKind::Created);
    let after = apply(&zone, &p).unwrap();
    assert_eq!(txt_at(&after, "login.z").unwrap().freed, None);
    assert!(plan_at(&[again], &after, T0 + 5).is_empty());
}

fn txt_freed(name: &str, resource: &str, at: i64) -> RecordSet {
    registry::txt_record_freed(name, 300, ME, resource, at)
}

#[test]
fn a_freed_name_nobody_wants_is_held_then_released() {
    let zone = vec![a("old.z", "10.0.0.1"), txt("old.z", ME, "service/a/old")];
    let p = plan_at(&[], &zone, T0);
    assert_eq!(p.groups[0].kind, ChangeKind::Deleted);
    let zone = apply(&zone, &p).unwrap();
    assert_eq!(zone, vec![txt_freed("old.z", "service/a/old", T0)]);
    assert!(plan_at(&[], &zone, T0 + GRACE - 1).is_empty());
    let p = plan_at(&[], &zone, T0 + GRACE);
    assert_eq!(p.groups[0].kind, ChangeKind::Released);
    assert!(apply(&zone, &p).unwrap().is_empty());
    // Without a grace: deleted at once, TXT and all.
    let zone = vec![a("old.z", "10.0.0.1"), txt("old.z", ME, "service/a/old")];
    assert!(apply(&zone, &plan(&[], &zone, ME, Policy::Sync)).unwrap().is_empty());
}

#[test]
fn a_restarted_operator_starts_a_fresh_grace_for_a_name_freed_while_it_was_down() {
    // Freed while nobody ran: no mark in the zone. The first plan marks
    // it now, whatever the time: b waits a whole grace from now.
    let zone = vec![a("login.z", "10.0.0.1"), txt("login.z", ME, "service/a/login")];
    let b = claim("service/b/login", 5, vec![a("login.z", "10.0.0.2")]);
    let later = T0 + 10 * GRACE;
    let p = plan_at(std::slice::from_ref(&b), &zone, later);
    assert_eq!(p.conflicts[0].cause, ConflictCause::Reserved(later + GRACE));
    let zone = apply(&zone, &p).unwrap();
    assert_eq!(txt_at(&zone, "login.z").unwrap().freed, Some(later));
}

#[test]
fn restricted_policies_hold_without_deleting() {
    let zone = vec![a("login.z", "10.0.0.1"), txt("login.z", ME, "service/a/login")];
    let b = claim("service/b/login", 5, vec![a("login.z", "10.0.0.2")]);
    let rules = Rules { policy: Policy::UpsertOnly, ..at(T0) };
    let p = plan_with(std::slice::from_ref(&b), &BTreeSet::new(), &zone, &rules);
    assert_eq!(p.groups[0].kind, ChangeKind::Held);
    let zone = apply(&zone, &p).unwrap();
    assert!(zone.contains(&a("login.z", "10.0.0.1")), "upsert-only never deletes");
    let rules = Rules { policy: Policy::UpsertOnly, ..at(T0 + GRACE) };
    let p = plan_with(&[b], &BTreeSet::new(), &zone, &rules);
    assert_eq!(p.groups[0].resource, "service/b/login");
    assert!(apply(&zone, &p).unwrap().contains(&a("login.z", "10.0.0.2")));
}

fn ext_owner(prefix: &str) -> ExternalDnsOwner {
    ExternalDnsOwner { owner: "ext".into(), prefix: prefix.into(), suffix: String::new() }
}
fn ext_txt(name: &str, owner: &str, resource: &str) -> RecordSet {
    RecordSet::new(name, RecordType::Txt, 300, vec![extdns::txt_value(owner, resource)])
}

#[test]
fn external_dns_records_of_the_adopted_owner_are_taken_over() {
    // external-dns's newer (typed) and older TXT names, as it writes them.
    let zone = vec![
        a("web.z", "1.1.1.1"),
        ext_txt("a-web.z", "ext", "service/ns/web"),
        ext_txt("web.z", "ext", "service/ns/web"),
        a("other.z", "3.3.3.3"),
        ext_txt("a-other.z", "ext", "service/ns/other"),
    ];
    let claims = vec![
        claim("service/ns/web", 1, vec![a("web.z", "2.2.2.2")]),
        claim("service/ns/someone", 1, vec![a("other.z", "4.4.4.4")]),
    ];
    let adopt = ext_owner("");
    let rules = Rules { owner_id: ME, policy: Policy::Sync, adopt: Some(&adopt), grace: 0, now: 0 };
    let p = plan_with(&claims, &BTreeSet::new(), &zone, &rules);
    assert_eq!(p.groups.len(), 1, "{:?}", p.groups);
    let g = &p.groups[0];
    assert_eq!(g.name, "web.z");
    assert_eq!(g.kind, ChangeKind::Updated);
    let after = apply(&zone, &p).unwrap();
    assert!(after.contains(&a("web.z", "2.2.2.2")));
    assert!(after.contains(&txt("web.z", ME, "service/ns/web")));
    assert!(
        !after.iter().any(|r| &*r.name == "a-web.z" || (&*r.name == "web.z" && r.rtype == RecordType::Txt)),
        "theirs removed: {after:?}"
    );
    // Another Service's name stays theirs.
    assert!(matches!(p.conflicts[0].cause, ConflictCause::Unowned(_)));
    assert!(after.contains(&ext_txt("a-other.z", "ext", "service/ns/other")));
    // Converged: nothing more.
    assert!(plan_with(&claims, &BTreeSet::new(), &after, &rules).groups.is_empty());
    // Without the flag, or for another owner, the name is taken.
    assert!(plan(&claims, &zone, ME, Policy::Sync).groups.is_empty());
    let stranger = ExternalDnsOwner { owner: "stranger".into(), ..adopt.clone() };
    let rules = Rules { adopt: Some(&stranger), ..rules };
    assert!(plan_with(&claims, &BTreeSet::new(), &zone, &rules).groups.is_empty());
}

#[test]
fn adoption_follows_the_external_dns_prefix_and_refuses_mixed_owners() {
    let zone = vec![cname("web.z", "lb.example"), ext_txt("reg.cname-web.z", "ext", "service/ns/web")];
    let claims = vec![claim("service/ns/web", 1, vec![cname("web.z", "lb.example")])];
    let adopt = ext_owner("reg.");
    let rules = Rules { owner_id: ME, policy: Policy::Sync, adopt: Some(&adopt), grace: 0, now: 0 };
    let p = plan_with(&claims, &BTreeSet::new(), &zone, &rules);
    assert_eq!(p.groups.len(), 1, "{:?}", p.conflicts);
    let after = apply(&zone, &p).unwrap();
    assert_eq!(after, vec![txt("web.z", ME, "service/ns/web"), cname("web.z", "lb.example")]);
    // A second external-dns TXT for the name saying another owner: left alone.
    let mut mixed = zone.clone();
    mixed.push(ext_txt("reg.web.z", "other", "service/ns/web"));
    assert!(plan_with(&claims, &BTreeSet::new(), &mixed, &rules).groups.is_empty());
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
/// Records flotilla never writes: an alias, a routing-policy set, a
/// plain TXT at a managed name, an MX.
fn arb_foreign() -> impl Strategy<Value = RecordSet> {
    (arb_name(), 0u8..4).prop_map(|(n, kind)| {
        let (rtype, values, foreign) = match kind {
            // An ALIAS nobody owns: an address record like any other.
            0 => {
                let target = Alias {
                    zone_id: "Z35SXDOTRQ7X7K".into(),
                    dns_name: "lb.example".into(),
                    evaluate_target_health: true,
                };
                return RecordSet::alias(n, RecordType::A, target);
            }
            1 => (RecordType::A, vec!["10.9.9.9".to_string()], Some("A set blue")),
            2 => (RecordType::Txt, vec!["\"v=spf1 -all\"".to_string()], None),
            _ => (RecordType::Other, vec!["10 mail.example".to_string()], Some("MX")),
        };
        let r = RecordSet::new(n, rtype, 300, values);
        match foreign {
            Some(f) => r.into_foreign(f),
            None => r,
        }
    })
}
pub(crate) fn arb_zone() -> impl Strategy<Value = Vec<RecordSet>> {
    // Records, foreign records, and for some names an ownership TXT
    // (ours, another owner's, or a non-flotilla TXT).
    (
        proptest::collection::vec(arb_record(), 0..10),
        proptest::collection::vec(arb_foreign(), 0..4),
        proptest::collection::vec((arb_name(), 0u8..4, 0u8..3), 0..6),
    )
        .prop_map(|(records, foreign, txts)| {
            let mut z: BTreeMap<(Box<str>, RecordType), RecordSet> = BTreeMap::new();
            for r in foreign.into_iter().chain(records) {
                // A CNAME cannot share its name with anything.
                let clash =
                    z.keys().any(|(n, t)| n == &r.name && (r.rtype == RecordType::Cname || *t == RecordType::Cname));
                if !clash {
                    z.entry((r.name.clone(), r.rtype)).or_insert(r);
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
pub(crate) fn arb_claims() -> impl Strategy<Value = Vec<Claim>> {
    proptest::collection::vec((0u8..5, proptest::collection::vec(arb_record(), 1..3)), 0..6).prop_map(|cs| {
        let mut seen = BTreeSet::new();
        cs.into_iter()
            .filter(|(i, _)| seen.insert(*i))
            .map(|(i, records)| {
                // One record per (name, type); a CNAME alone at its name.
                let mut by: BTreeMap<(Box<str>, RecordType), RecordSet> = BTreeMap::new();
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
        // Unowned records are untouched, and so is every foreign record
        // (alias, routing policy, MX, a TXT not ours) even at a name we own.
        for r in &zone {
            let name = owned_name_of_txt(&r.name).unwrap_or(&r.name);
            let never_ours = r.is_foreign() || (r.rtype == RecordType::Txt && owned_name_of_txt(&r.name).is_none());
            if !owned_before.contains(name) || never_ours {
                prop_assert!(after.contains(r), "unowned {r:?} changed");
            }
        }
        // Owned records after = what the (independently chosen) winners want.
        let mut expected: BTreeSet<RecordSet> = BTreeSet::new();
        let mut names: BTreeMap<&str, Vec<&Claim>> = BTreeMap::new();
        for c in &claims { for r in &c.records { names.entry(&r.name).or_default().push(c); } }
        for (name, mut cs) in names {
            cs.dedup_by(|a, b| a.resource == b.resource);
            let holder = zone.iter().find(|r| *r.name == owner_txt_name(name)).and_then(registry::ownership_of);
            let Some(w) = cs.iter().find(|c| holder.as_ref().is_some_and(|o| o.owner == ME && o.resource == c.resource))
                .or_else(|| cs.iter().min_by(|a, b| a.order.cmp(&b.order)))
                .copied() else { continue };
            let wants_cname = w.records.iter().any(|r| &*r.name == name && r.rtype == RecordType::Cname);
            let at_name = || zone.iter().filter(|r| &*r.name == name);
            let attainable = match &holder {
                Some(o) => o.owner == ME && !at_name().any(|r| {
                    let ours = r.rtype.is_managed() && !r.is_foreign();
                    (r.is_foreign() && r.rtype.is_managed()) || (wants_cname && !ours)
                }),
                None => {
                    !at_name().any(|r| r.rtype.is_managed() || wants_cname || r.is_foreign())
                        && !zone.iter().any(|r| *r.name == owner_txt_name(name))
                }
            };
            if !attainable {
                // A name of ours in conflict (a CNAME beside someone's
                // record) keeps what it has.
                if holder.as_ref().is_some_and(|o| o.owner == ME) {
                    expected.extend(at_name().filter(|r| r.rtype.is_managed() && !r.is_foreign()).cloned());
                }
                continue;
            }
            for r in w.records.iter().filter(|r| &*r.name == name) { expected.insert(r.clone()); }
        }
        let owned_after = owned_by_me(&after);
        let got: BTreeSet<RecordSet> = after.iter()
            .filter(|r| r.rtype.is_managed() && !r.is_foreign() && owned_after.contains(&*r.name))
            .cloned().collect();
        prop_assert_eq!(got, expected);
        // Idempotent: a second plan writes nothing.
        let again = plan(&claims, &after, ME, Policy::Sync);
        prop_assert!(again.is_empty(), "second plan not empty: {:?}", again.groups);
    }

    /// With a grace: records not ours are never touched; a name ours is
    /// never handed to another namespace's Service before the grace has
    /// run from its mark; planning again at the same time changes
    /// nothing; and once the grace is over everything settles.
    #[test]
    fn the_grace_is_kept_and_settles(zone in arb_zone(), claims in arb_claims(), spread in proptest::bool::ANY) {
        // Claims of two namespaces.
        let claims: Vec<Claim> = claims.into_iter().map(|mut c| {
            if spread && c.resource.ends_with(['1', '3']) {
                c.resource = c.resource.replace("service/ns/", "service/other/");
                c.order.1 = c.resource.clone();
            }
            c
        }).collect();
        let p = plan_at(&claims, &zone, T0);
        let after = apply(&zone, &p).map_err(TestCaseError::fail)?;
        let owned_before = owned_by_me(&zone);
        for r in &zone {
            let name = owned_name_of_txt(&r.name).unwrap_or(&r.name);
            if !owned_before.contains(name) {
                prop_assert!(after.contains(r), "unowned {r:?} changed");
            }
        }
        for r in zone.iter().filter(|r| registry::ownership_of(r).is_some_and(|o| o.owner == ME)) {
            let (Some(before), Some(name)) = (registry::ownership_of(r), owned_name_of_txt(&r.name)) else { continue };
            let still = claims.iter().any(|c| c.resource == before.resource && c.records.iter().any(|x| &*x.name == name));
            if still {
                continue;
            }
            if let Some(now) = txt_at(&after, name) {
                let same_ns = namespace_of(&now.resource) == namespace_of(&before.resource);
                prop_assert!(same_ns, "{name}: handed from {} to {} within the grace", before.resource, now.resource);
            }
        }
        prop_assert!(plan_at(&claims, &after, T0).is_empty(), "not idempotent");
        let later = apply(&after, &plan_at(&claims, &after, T0 + GRACE)).map_err(TestCaseError::fail)?;
        let settled = plan_at(&claims, &later, T0 + GRACE);
        prop_assert!(settled.is_empty(), "not settled after the grace: {:?}", settled.groups);
        // Nothing wanted keeps a TXT of ours once the grace is over.
        let wanted: BTreeSet<&str> = claims.iter().flat_map(|c| c.records.iter().map(|r| &*r.name)).collect();
        for name in owned_by_me(&later) {
            prop_assert!(wanted.contains(name.as_str()), "{name} still held after the grace");
        }
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
                for held in zone.iter().filter(|x| &*x.name == name) {
                    prop_assert!(after.contains(held), "record of kept {} changed: {held:?}", o.resource);
                }
            }
        }
    }

    /// Restricted policies never delete an address record (a TXT is
    /// deleted only to be created again in the same batch), and what
    /// they send Route53 accepts.
    #[test]
    fn restricted_policies_never_delete(zone in arb_zone(), claims in arb_claims()) {
        for policy in [Policy::UpsertOnly, Policy::CreateOnly] {
            let p = plan(&claims, &zone, ME, policy);
            for g in &p.groups {
                for c in &g.changes {
                    if c.record.rtype == RecordType::Txt {
                        if c.action == Action::Delete {
                            prop_assert!(g.changes.iter().any(|d| d.action == Action::Create && d.record.name == c.record.name));
                        }
                        continue;
                    }
                    prop_assert_ne!(c.action, Action::Delete);
                    if policy == Policy::CreateOnly {
                        prop_assert_eq!(c.action, Action::Create);
                    }
                }
            }
            apply(&zone, &p).map_err(TestCaseError::fail)?;
        }
    }

    /// Every UPSERT is guarded by our unchanged TXT in the same group:
    /// had someone else taken the name, the whole group is refused.
    #[test]
    fn upserts_are_guarded(zone in arb_zone(), claims in arb_claims()) {
        let p = plan(&claims, &zone, ME, Policy::Sync);
        for g in p.groups.iter().filter(|g| g.changes.iter().any(|c| c.action == Action::Upsert)) {
            let txt = owner_txt_name(&g.name);
            let guard = g.changes.iter().find(|c| c.action == Action::Delete && *c.record.name == txt);
            prop_assert!(guard.is_some(), "unguarded UPSERT: {:?}", g.changes);
            // Someone takes the name: the group no longer applies.
            let taken: Vec<RecordSet> = zone.iter().map(|r| if *r.name == txt { txt_of(&g.name, "thief") } else { r.clone() }).collect();
            let one = Plan { groups: vec![g.clone()], ..Plan::default() };
            prop_assert!(apply(&taken, &one).is_err(), "a taken name was overwritten");
        }
    }
}

fn elb_alias(name: &str, rtype: RecordType) -> RecordSet {
    let target = Alias {
        zone_id: "Z35SXDOTRQ7X7K".into(),
        dns_name: "web-01.us-east-1.elb.amazonaws.com".into(),
        evaluate_target_health: true,
    };
    RecordSet::alias(name, rtype, target)
}

/// CNAME → ALIAS and plain A → ALIAS: one batch each, the old set gone
/// and the ALIAS created (no UPSERT across the two kinds), our TXT guarding
/// the replacement; the same ALIAS again is no change.
#[test]
fn a_name_becomes_an_alias_in_one_batch() {
    let me = "service/a/web";
    let alias = elb_alias("x.z", RecordType::A);
    let cname_zone = vec![cname("x.z", "web-01.us-east-1.elb.amazonaws.com"), txt("x.z", ME, me)];
    let p = plan(&[claim(me, 1, vec![alias.clone()])], &cname_zone, ME, Policy::Sync);
    assert_eq!(p.groups.len(), 1);
    let after = apply(&cname_zone, &p).unwrap();
    assert!(after.contains(&alias) && !after.iter().any(|r| r.rtype == RecordType::Cname), "{after:?}");
    assert!(plan(&[claim(me, 1, vec![alias.clone()])], &after, ME, Policy::Sync).is_empty(), "in sync");
    // Back to the CNAME (flotilla.dev/alias: "false").
    let back =
        plan(&[claim(me, 1, vec![cname("x.z", "web-01.us-east-1.elb.amazonaws.com")])], &after, ME, Policy::Sync);
    assert_eq!(apply(&after, &back).unwrap(), cname_zone.iter().cloned().rev().collect::<Vec<_>>());

    let a_zone = vec![a("x.z", "10.0.0.1"), txt("x.z", ME, me)];
    let p = plan(&[claim(me, 1, vec![alias.clone()])], &a_zone, ME, Policy::Sync);
    let actions: Vec<(Action, RecordType)> = p.groups[0].changes.iter().map(|c| (c.action, c.record.rtype)).collect();
    assert_eq!(
        actions,
        [
            (Action::Delete, RecordType::Txt),
            (Action::Create, RecordType::Txt),
            (Action::Delete, RecordType::A),
            (Action::Create, RecordType::A)
        ]
    );
    assert!(apply(&a_zone, &p).unwrap().contains(&alias));
    assert!(plan(&[claim(me, 1, vec![alias.clone()])], &a_zone, ME, Policy::CreateOnly).is_empty());
    // Another target (or EvaluateTargetHealth): an UPSERT of the ALIAS.
    let mut moved = elb_alias("x.z", RecordType::A);
    if let Some(model::Extra::Alias(t)) = moved.extra.as_deref_mut() {
        t.evaluate_target_health = false;
    }
    let p = plan(&[claim(me, 1, vec![moved.clone()])], &after, ME, Policy::Sync);
    assert!(p.groups[0].changes.iter().any(|c| c.action == Action::Upsert && c.record == moved));
}

/// The zone apex holds the zone's SOA and NS: they do not make it taken
/// for an ALIAS, and they are never touched.
#[test]
fn the_apex_takes_an_alias_beside_the_zones_soa_and_ns() {
    let soa = other("z", "SOA", "ns-1.awsdns. hostmaster. 1 7200 900 1209600 86400");
    let zone = vec![soa.clone(), other("z", "NS", "ns-1.awsdns.")];
    let want = vec![elb_alias("z", RecordType::A), elb_alias("z", RecordType::Aaaa)];
    let p = plan(&[claim("service/a/web", 1, want.clone())], &zone, ME, Policy::Sync);
    assert!(p.conflicts.is_empty(), "{:?}", p.conflicts);
    let touched: Vec<&RecordSet> = p.groups.iter().flat_map(|g| &g.changes).map(|c| &c.record).collect();
    assert!(touched.iter().all(|r| r.rtype != RecordType::Other), "{touched:?}");
    // (The model of Route53 here keys by name and type: the SOA alone.)
    let after = apply(std::slice::from_ref(&soa), &p).unwrap();
    for r in want.iter().chain([&soa]) {
        assert!(after.contains(r), "{r:?} in {after:?}");
    }
    // Gone when nobody wants it: the ALIASes and the TXT, not the SOA.
    assert_eq!(apply(&after, &plan(&[], &after, ME, Policy::Sync)).unwrap(), [soa]);
    // Addresses at the apex, likewise.
    let p = plan(&[claim("service/a/web", 1, vec![a("z", "10.0.0.1")])], &zone, ME, Policy::Sync);
    assert!(p.conflicts.is_empty() && p.groups.len() == 1, "{p:?}");
    // NS alone (a delegation, not the apex) still makes a name taken.
    let delegated = vec![other("sub.z", "NS", "ns-2.elsewhere.")];
    let p = plan(&[claim("service/a/web", 1, vec![elb_alias("sub.z", RecordType::A)])], &delegated, ME, Policy::Sync);
    assert_eq!(p.conflicts.len(), 1);
}

/// external-dns publishes AWS load balancers as ALIASes: adopted as they
/// are (the same target: only the TXTs change hands), no longer "taken".
#[test]
fn an_external_dns_alias_is_adopted_unchanged() {
    let alias = elb_alias("web.z", RecordType::A);
    let zone = vec![alias.clone(), ext_txt("a-web.z", "ext", "service/ns/web")];
    let claims = vec![claim("service/ns/web", 1, vec![alias.clone()])];
    let adopt = ext_owner("");
    let rules = Rules { owner_id: ME, policy: Policy::Sync, adopt: Some(&adopt), grace: 0, now: 0 };
    let p = plan_with(&claims, &BTreeSet::new(), &zone, &rules);
    assert!(p.conflicts.is_empty(), "{:?}", p.conflicts);
    assert!(p.groups[0].changes.iter().all(|c| c.record.rtype == RecordType::Txt), "{:?}", p.groups);
    let after = apply(&zone, &p).unwrap();
    assert!(after.contains(&alias) && after.contains(&txt("web.z", ME, "service/ns/web")));
}
