#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::claims::tests::{claim_of, key};
use crate::claims::{Claim, ClaimSet, LiveRules, OwnerState, Rank, claimed_by, winner};
use crate::copy::{Content, Observed, Owner, Payload, RuleId, RuleRef, Source, SourceInfo};
use crate::crd::{LabelKey, LabelSelector, LabelValue, NamespaceGlob, NamespaceTargets};
use proptest::prelude::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn me() -> RuleRef {
    RuleRef { id: RuleId::new("team-a", "r"), uid: "uid-me".into() }
}

fn source(kind: SourceKind, name: &str, l: &[(&str, &str)], type_: Option<&str>) -> Arc<SourceInfo> {
    let full = Source::new(
        kind,
        "team-a",
        name,
        &labels(l),
        &BTreeMap::new(),
        Content { data: labels(&[("k", "v")]), type_: type_.map(str::to_string), ..Default::default() },
    );
    Arc::new(full.info())
}

fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: pairs.iter().map(|(k, v)| (LabelKey(k.to_string()), LabelValue(v.to_string()))).collect(),
        match_expressions: vec![],
    }
}

fn ns(l: &[(&str, &str)]) -> NamespaceInfo {
    NamespaceInfo { labels: labels(l), terminating: false }
}

fn observed(owner: Option<Owner>, hash: &str, payload: Payload) -> Observed {
    Observed {
        key: CopyKey { kind: SourceKind::ConfigMap, namespace: "b".into(), name: "cfg".into() },
        owner: owner.map(Owner::shared),
        annotated_hash: Some(hash.into()),
        managed_by_ours: true,
        uid: Some("u1".into()),
        resource_version: Some("7".into()),
        payload,
    }
}

fn mine() -> Option<Owner> {
    Some(Owner::new(Some(&me().id.label_value()), Some(&me().id), Some(&me().uid)))
}

fn ctx() -> CopyContext {
    CopyContext { on_conflict: OnConflict::Skip, prune: true, accepts_overwrite: false, claimed_by: None }
}

fn desired() -> Desired {
    Desired { hash: "h".into(), content_hash: "c".into(), type_: None }
}

/// The attack of the issue: `selector: {}` from team-a, a bootstrap token
/// and a service-account token among the sources, every namespace a target.
#[test]
fn a_namespace_user_cannot_reach_kube_system_nor_copy_cluster_credentials() {
    let rule = me();
    let sel =
        SourceSelection { selector: Some(Selector::new(&LabelSelector::default()).unwrap()), names: BTreeSet::new() };
    let targets = TargetFilter::default();
    let plan = RulePlan { rule: &rule, kind: SourceKind::Secret, sources: &sel, targets: &targets };
    let policy = Policy::new(
        Some("flotilla"),
        &["payments".to_string()],
        Consent::Label,
        DEFAULT_SECRET_TYPES.iter().map(|s| s.to_string()).collect(),
    );
    let namespaces: HashMap<String, NamespaceInfo> = [
        ("kube-system", ns(&[(ACCEPT_COPIES, "true")])),
        ("kube-public", ns(&[(ACCEPT_COPIES, "true")])),
        ("kube-node-lease", ns(&[])),
        ("flotilla", ns(&[(ACCEPT_COPIES, "true")])),
        ("payments", ns(&[(ACCEPT_COPIES, "true")])),
        ("team-a", ns(&[(ACCEPT_COPIES, "true")])),
        ("quiet", ns(&[])),
        ("team-b", ns(&[(ACCEPT_COPIES, "true")])),
        ("team-c", ns(&[(ACCEPT_COPIES, "team-x.team-a")])),
        ("team-d", ns(&[(ACCEPT_COPIES, "team-x_team-y")])),
    ]
    .into_iter()
    .map(|(n, i)| (n.to_string(), i))
    .collect();
    let t = target_namespaces(&plan, &namespaces, &policy);
    assert_eq!(t.accepted, ["team-b", "team-c"]);
    assert_eq!(t.protected, ["flotilla", "kube-node-lease", "kube-public", "kube-system", "payments"]);

    let sources = vec![
        source(SourceKind::Secret, "bootstrap-token-abcdef", &[], Some("bootstrap.kubernetes.io/token")),
        source(SourceKind::Secret, "sa-token", &[], Some(SA_TOKEN_TYPE)),
        source(SourceKind::Secret, "sh.helm.release.v1.x.v1", &[("owner", "helm")], Some("helm.sh/release.v1")),
        source(SourceKind::Secret, "creds", &[], Some("Opaque")),
        source(SourceKind::Secret, "odd", &[], Some("example.com/x")),
    ];
    let s = rule_sources(&plan, &sources, &policy);
    let copied: Vec<&str> = s.copied.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(copied, ["creds"]);
    let skipped: Vec<(&str, &str)> = s.skipped.iter().map(|(n, r)| (n.as_str(), r.reason())).collect();
    assert_eq!(
        skipped,
        [
            ("bootstrap-token-abcdef", "SecretTypeNotAllowed"),
            ("odd", "SecretTypeNotAllowed"),
            ("sa-token", "SecretTypeNotAllowed"),
            ("sh.helm.release.v1.x.v1", "SecretTypeNotAllowed"),
        ]
    );
    // Even listed in --secret-types, the cluster's credentials are never copied.
    let lax = Policy::new(None, &[], Consent::None, NEVER_COPIED_TYPES.iter().map(|s| s.to_string()).collect());
    assert!(lax.secret_types.is_empty());
    let keys = desired_copies(&name_copies(&s, &Naming::Same).unwrap(), &t, SourceKind::Secret);
    assert!(keys.keys().all(|k| &*k.name == "creds" && !k.namespace.starts_with("kube-")));
}

#[test]
fn consent_none_opens_every_unprotected_namespace() {
    let rule = me();
    let sel =
        SourceSelection { selector: Some(Selector::new(&LabelSelector::default()).unwrap()), names: BTreeSet::new() };
    let targets = TargetFilter::default();
    let plan = RulePlan { rule: &rule, kind: SourceKind::ConfigMap, sources: &sel, targets: &targets };
    let policy = Policy { consent: Consent::None, ..Policy::default() };
    let namespaces: HashMap<String, NamespaceInfo> =
        [("kube-system", ns(&[])), ("quiet", ns(&[])), ("team-a", ns(&[]))]
            .into_iter()
            .map(|(n, i)| (n.to_string(), i))
            .collect();
    assert_eq!(target_namespaces(&plan, &namespaces, &policy).accepted, ["quiet"]);
}

#[test]
fn default_exclusions_are_lifted_by_naming_but_secret_types_are_not() {
    let rule = me();
    let helm = (*source(SourceKind::ConfigMap, "release", &[("owner", "helm")], None)).clone();
    assert!(helm.helm_release, "owner=helm");
    let mut cert = (*source(SourceKind::Secret, "tls", &[], Some("kubernetes.io/tls"))).clone();
    cert.controller = Some("Certificate/web".into());
    let root = source(SourceKind::ConfigMap, "kube-root-ca.crt", &[], None);
    let policy = Policy::default();
    assert_eq!(admit_source(&helm, false, &policy), Err(SkipReason::HelmRelease));
    assert_eq!(admit_source(&root, false, &policy), Err(SkipReason::KubeRootCa));
    assert!(matches!(admit_source(&cert, false, &policy), Err(SkipReason::ControlledByAnotherController(_))));
    assert_eq!(admit_source(&cert, true, &policy), Ok(()));
    assert_eq!(admit_source(&root, true, &policy), Ok(()));
    let token = source(SourceKind::Secret, "t", &[], Some("bootstrap.kubernetes.io/token"));
    assert!(admit_source(&token, true, &policy).is_err());

    // Selection by names alone, or names or labels (the source watch
    // selects; the planner takes what it holds, named ones unexcluded).
    let sel = SourceSelection { selector: None, names: ["tls".to_string()].into() };
    let share = labels(&[("share", "yes")]);
    assert!(sel.selects("tls", &BTreeMap::new()));
    assert!(!sel.selects("other", &share));
    let kept = |pairs: &[(&str, &str)]| flotilla_shared::pods::PodLabels::from_pairs(pairs.iter().copied());
    assert!(sel.selects_kept("tls", &kept(&[])) && !sel.selects_kept("other", &kept(&[("share", "yes")])));
    let both =
        SourceSelection { selector: Some(Selector::new(&selector(&[("share", "yes")])).unwrap()), ..sel.clone() };
    assert!(both.selects("other", &share) && both.selects("tls", &BTreeMap::new()));
    assert!(both.selects_kept("other", &kept(&[("share", "yes")])) && both.selects_kept("tls", &kept(&[])));
    assert!(!both.selects_kept("other", &kept(&[("share", "no")])));
    let targets = TargetFilter::default();
    let plan = RulePlan { rule: &rule, kind: SourceKind::Secret, sources: &sel, targets: &targets };
    let all = vec![Arc::new(cert), source(SourceKind::Secret, "other", &[("share", "yes")], Some("Opaque"))];
    let s = rule_sources(&plan, &all, &policy);
    assert_eq!(s.copied.len(), 2, "tls is named: copied although controlled");
    let plan = RulePlan { sources: &both, ..plan };
    assert_eq!(rule_sources(&plan, &all, &policy).copied.len(), 2);
    let unnamed = SourceSelection { selector: both.selector.clone(), names: BTreeSet::new() };
    let plan = RulePlan { sources: &unnamed, ..plan };
    assert_eq!(rule_sources(&plan, &all, &policy).skipped.len(), 1, "tls unnamed: skipped as controlled");
}

#[test]
fn a_rule_over_its_byte_budget_is_refused_with_its_figures() {
    let rule = me();
    let sel =
        SourceSelection { selector: Some(Selector::new(&LabelSelector::default()).unwrap()), names: BTreeSet::new() };
    let targets = TargetFilter::default();
    let plan = RulePlan { rule: &rule, kind: SourceKind::Secret, sources: &sel, targets: &targets };
    let sized = |name: &str, size: u64, type_: &str| {
        let mut s = (*source(SourceKind::Secret, name, &[], Some(type_))).clone();
        s.size = size;
        Arc::new(s)
    };
    // 60 Secrets of 700 KB (933,336 bytes base64) and a large token, which is skipped and not counted.
    let mut all: Vec<Arc<SourceInfo>> = (0..60).map(|i| sized(&format!("s-{i:02}"), 933_336, "Opaque")).collect();
    all.push(sized("token", 50 << 20, SA_TOKEN_TYPE));
    let s = rule_sources(&plan, &all, &Policy::default());
    assert_eq!(s.bytes(), 60 * 933_336);
    let why = sources_too_large(&s, 16 << 20).expect("over 16 MiB");
    assert!(why.contains("60 sources") && why.contains("53.4 MiB") && why.contains("16.0 MiB"), "{why}");
    assert_eq!(sources_too_large(&s, 64 << 20), None);
    // Exactly at the limit fits.
    assert_eq!(sources_too_large(&s, 60 * 933_336), None);
}

#[test]
fn protected_namespaces_are_never_touched() {
    let policy = Policy::new(Some("flotilla"), &["payments".to_string()], Consent::None, BTreeSet::new());
    for ns in ["kube-system", "kube-public", "kube-node-lease", "flotilla", "payments"] {
        assert!(!policy.may_touch(ns), "{ns}");
    }
    assert!(policy.may_touch("team-b"));
}

#[test]
fn helm_owner_and_stripped_labels_are_not_copied() {
    let src = Source::new(
        SourceKind::ConfigMap,
        "team-a",
        "cfg",
        &labels(&[
            ("owner", "helm"),
            ("keep", "1"),
            ("example.com/tool", "x"),
            ("app.kubernetes.io/managed-by", "Helm"),
        ]),
        &BTreeMap::new(),
        Content::default(),
    )
    .stripped(&crate::copy::StripLabels(vec!["example.com/".into()]));
    assert_eq!(src.labels, labels(&[("keep", "1")]));
}

#[test]
fn decisions_for_one_copy() {
    let d = desired();
    let o = |owner, hash: &str, p| observed(owner, hash, p);
    let mine_ok = o(mine(), "h", Payload::Trusted);
    assert_eq!(decide(Some(&d), Some((&mine_ok, &Ownership::Mine)), &ctx()), Action::InSync);
    assert_eq!(decide(Some(&d), None, &ctx()), Action::Create);
    assert_eq!(decide(None, None, &ctx()), Action::Nothing);
    // Source changed; copy edited; marks broken; changed unexplained.
    let stale = o(mine(), "old", Payload::Trusted);
    assert!(matches!(decide(Some(&d), Some((&stale, &Ownership::Mine)), &ctx()), Action::Update { .. }));
    let edited = o(mine(), "h", Payload::Edited);
    assert!(matches!(decide(Some(&d), Some((&edited, &Ownership::Mine)), &ctx()), Action::Update { .. }));
    let mut relabelled = mine_ok.clone();
    relabelled.managed_by_ours = false;
    assert!(matches!(decide(Some(&d), Some((&relabelled, &Ownership::Mine)), &ctx()), Action::Update { .. }));
    let unexplained = o(mine(), "h", Payload::Unexplained);
    assert_eq!(decide(Some(&d), Some((&unexplained, &Ownership::Mine)), &ctx()), Action::Read);
    let read_ok = o(mine(), "h", Payload::read("c", None));
    assert_eq!(decide(Some(&d), Some((&read_ok, &Ownership::Mine)), &ctx()), Action::InSync);
    let read_bad = o(mine(), "h", Payload::read("x", None));
    assert_eq!(
        decide(Some(&d), Some((&read_bad, &Ownership::Mine)), &ctx()),
        Action::Update { resource_version: Some("7".into()) }
    );
    // Unwanted: pruned with its uid and version, or kept.
    assert_eq!(
        decide(None, Some((&mine_ok, &Ownership::Mine)), &ctx()),
        Action::Delete { uid: Some("u1".into()), resource_version: Some("7".into()) }
    );
    assert_eq!(decide(None, Some((&mine_ok, &Ownership::Mine)), &CopyContext { prune: false, ..ctx() }), Action::Keep);
    // Unowned: Skip, or Overwrite without the namespace's accept-overwrite, leave it.
    let theirs = o(None, "x", Payload::Trusted);
    let unowned = Ownership::Unowned;
    assert_eq!(decide(Some(&d), Some((&theirs, &unowned)), &ctx()), Action::Conflict(ConflictReason::NotOwned));
    let overwrite = CopyContext { on_conflict: OnConflict::Overwrite, ..ctx() };
    assert_eq!(decide(Some(&d), Some((&theirs, &unowned)), &overwrite), Action::Conflict(ConflictReason::NotOwned));
    let consented = CopyContext { accepts_overwrite: true, ..overwrite };
    assert!(matches!(decide(Some(&d), Some((&theirs, &unowned)), &consented), Action::Adopt { .. }));
    assert_eq!(decide(None, Some((&theirs, &unowned)), &consented), Action::Nothing);
}

#[test]
fn ownership_follows_the_uid() {
    let me = me();
    let live = |_: &str| OwnerState::Live { uid: "uid-other".into(), loses_to_us: false };
    // Label edited away: our annotations with our UID still say ours.
    let by_annotation = Owner::new(None, Some(&me.id), Some(&me.uid));
    assert_eq!(ownership(Some(&by_annotation), &me, live), Ownership::Mine);
    // A copy from before UIDs were written.
    let legacy = Owner::new(Some(&me.id.label_value()), None, None);
    assert_eq!(ownership(Some(&legacy), &me, live), Ownership::Mine);
    let other = Owner::new(Some("team-b.r"), Some(&RuleId::new("team-b", "r")), Some("uid-other"));
    assert_eq!(
        ownership(Some(&other), &me, live),
        Ownership::OtherRule { rule: "team-b/r".into(), loses_to_us: false }
    );
    assert_eq!(
        ownership(Some(&other), &me, |_| OwnerState::OutOfScope),
        Ownership::OtherInstallation("team-b/r".into())
    );
    assert_eq!(ownership(Some(&other), &me, |_| OwnerState::Gone), Ownership::Unowned);
    // A live rule of that name, but another incarnation.
    let recreated = |_: &str| OwnerState::Live { uid: "uid-new".into(), loses_to_us: false };
    assert_eq!(ownership(Some(&other), &me, recreated), Ownership::Unowned);
    assert_eq!(ownership(None, &me, live), Ownership::Unowned);
}

#[test]
fn two_rules_one_name_the_oldest_wins_and_the_other_hands_off() {
    let key = CopyKey { kind: SourceKind::ConfigMap, namespace: "b".into(), name: "cfg".into() };
    let claim = |created: &str, ns: &str, name: &str| Claim {
        rank: Rank { created: Some(created.into()), rule: RuleId::new(ns, name) },
        kind: SourceKind::ConfigMap,
        names: [Arc::from("cfg")].into(),
        namespaces: [Arc::from("b")].into(),
    };
    let claims = [
        claim("2026-01-02T00:00:00Z", "a", "young"),
        claim("2026-01-01T00:00:00Z", "z", "old"),
        claim("2026-01-01T00:00:00Z", "y", "old"),
    ];
    assert_eq!(winner(&key, &claims), Some(&RuleId::new("y", "old")), "oldest, then namespace/name");
    // The loser keeps its copy in place (the winner takes it over) and reports the claim.
    let d = desired();
    let lost = CopyContext { claimed_by: Some(RuleId::new("y", "old")), ..ctx() };
    let ours = observed(mine(), "h", Payload::Trusted);
    assert_eq!(decide(Some(&d), Some((&ours, &Ownership::Mine)), &lost), Action::Keep);
    assert!(matches!(decide(Some(&d), None, &lost), Action::Conflict(ConflictReason::ClaimedByAnotherRule(_))));
    // The winner takes a losing rule's copy over, never a winning one's.
    let loser = Ownership::OtherRule { rule: "a/young".into(), loses_to_us: true };
    assert!(matches!(decide(Some(&d), Some((&ours, &loser)), &ctx()), Action::Update { .. }));
    let holder = Ownership::OtherRule { rule: "y/old".into(), loses_to_us: false };
    assert!(matches!(decide(Some(&d), Some((&ours, &holder)), &ctx()), Action::Conflict(_)));
}

#[test]
fn only_a_type_change_replaces_a_copy_after_a_422() {
    let d = Desired { type_: Some("kubernetes.io/tls".into()), ..desired() };
    let same = observed(mine(), "h", Payload::read("x", Some("kubernetes.io/tls")));
    let other = observed(mine(), "h", Payload::read("x", Some("Opaque")));
    let secret = SourceKind::Secret;
    let after = |o: &Observed, w: &Ownership| after_invalid(secret, Some((o, w)), &d);
    assert_eq!(after(&same, &Ownership::Mine), AfterInvalid::Refused, "immutable or a policy: never delete");
    assert!(matches!(after(&other, &Ownership::Mine), AfterInvalid::Replace { .. }));
    assert_eq!(after(&other, &Ownership::Unowned), AfterInvalid::Refused);
    assert_eq!(after(&observed(mine(), "h", Payload::Trusted), &Ownership::Mine), AfterInvalid::Refused);
    assert_eq!(after_invalid(SourceKind::ConfigMap, Some((&other, &Ownership::Mine)), &d), AfterInvalid::Refused);
    assert_eq!(after_invalid(secret, None, &d), AfterInvalid::Create, "gone meanwhile");
}

#[test]
fn a_rules_copies_are_grouped_by_the_source_their_writes_read() {
    let src = source(SourceKind::ConfigMap, "cfg", &[("copy", "yes")], None);
    let key = |ns: &str, name: &str| CopyKey { kind: SourceKind::ConfigMap, namespace: ns.into(), name: name.into() };
    let facts = |k: CopyKey, source: Option<Arc<SourceInfo>>, observed: Option<(Observed, Ownership)>| CopyFacts {
        key: k,
        source,
        observed,
        ctx: ctx(),
    };
    let in_sync = observed(mine(), &src.hash, Payload::read(&src.content_hash, None));
    let stale = observed(mine(), "old", Payload::Trusted);
    let foreign = observed(None, "x", Payload::Trusted);
    let plan = plan_copies([
        facts(key("b", "cfg"), Some(src.clone()), None),
        facts(key("c", "cfg"), Some(src.clone()), Some((stale.clone(), Ownership::Mine))),
        facts(key("d", "cfg"), Some(src.clone()), Some((in_sync, Ownership::Mine))),
        facts(key("e", "cfg"), Some(src.clone()), Some((foreign, Ownership::Unowned))),
        facts(key("f", "gone"), None, Some((stale, Ownership::Mine))),
    ]);
    assert_eq!(plan.in_sync, 1);
    let writes: Vec<(&str, &Action)> = plan.by_source["cfg"].iter().map(|j| (&*j.key.namespace, &j.action)).collect();
    assert!(matches!(writes.as_slice(), [("b", Action::Create), ("c", Action::Update { .. })]), "{writes:?}");
    let apart: Vec<(&str, &Action)> = plan.without_payload.iter().map(|j| (&*j.key.namespace, &j.action)).collect();
    assert!(
        matches!(apart.as_slice(), [("e", Action::Conflict(ConflictReason::NotOwned)), ("f", Action::Delete { .. })]),
        "{apart:?}"
    );
    assert_eq!(plan.jobs(), 4);
}

#[test]
fn namespace_selector_and_globs() {
    let rule = me();
    let sel = SourceSelection::default();
    let targets = TargetFilter::new(Some(&NamespaceTargets {
        selector: Some(selector(&[("team", "a")])),
        include: vec![NamespaceGlob("team-*".into())],
        exclude: vec![NamespaceGlob("team-x*".into())],
    }))
    .unwrap();
    let plan = RulePlan { rule: &rule, kind: SourceKind::ConfigMap, sources: &sel, targets: &targets };
    let namespaces: HashMap<String, NamespaceInfo> = [
        ("team-1", ns(&[("team", "a"), (ACCEPT_COPIES, "true")])),
        ("team-2", ns(&[("team", "b"), (ACCEPT_COPIES, "true")])),
        ("team-x1", ns(&[("team", "a"), (ACCEPT_COPIES, "true")])),
        ("other", ns(&[("team", "a"), (ACCEPT_COPIES, "true")])),
    ]
    .into_iter()
    .map(|(n, i)| (n.to_string(), i))
    .collect();
    assert_eq!(target_namespaces(&plan, &namespaces, &Policy::default()).accepted, ["team-1"]);
}

fn arb_owner() -> impl Strategy<Value = (Option<Owner>, OwnerState)> {
    let me = me();
    prop_oneof![
        Just((None, OwnerState::Gone)),
        Just((Some(Owner::new(Some(&me.id.label_value()), Some(&me.id), Some(&me.uid))), OwnerState::Gone)),
        Just((Some(Owner::new(None, Some(&me.id), Some(&me.uid))), OwnerState::Gone)),
        any::<bool>().prop_map(|loses| (
            Some(Owner::new(Some("team-b.r"), Some(&RuleId::new("team-b", "r")), Some("ub"))),
            OwnerState::Live { uid: "ub".into(), loses_to_us: loses }
        )),
        Just((Some(Owner::new(Some("team-b.r"), None, None)), OwnerState::OutOfScope)),
        Just((Some(Owner::new(Some("team-b.r"), None, Some("old"))), OwnerState::Gone)),
    ]
}

fn arb_payload() -> impl Strategy<Value = Payload> {
    prop_oneof![
        Just(Payload::Trusted),
        Just(Payload::Edited),
        Just(Payload::Unexplained),
        (any::<bool>(), proptest::option::of("[ab]"))
            .prop_map(|(ok, t)| Payload::read(if ok { "c" } else { "x" }, t.as_deref())),
    ]
}

proptest! {
    /// Whatever is observed and whatever the namespace says: nothing this
    /// rule does not own is written unless it is a losing rule's copy or
    /// the rule says Overwrite and the namespace accepts overwrites; only
    /// our own copies are ever deleted, and never one still wanted; a
    /// wanted copy of ours is never left to a foreign object.
    #[test]
    fn ownership_is_never_lost_and_nothing_unowned_is_written_without_consent(
        (owner, state) in arb_owner(),
        payload in arb_payload(),
        wanted in any::<bool>(),
        present in any::<bool>(),
        overwrite in any::<bool>(),
        accepts_overwrite in any::<bool>(),
        prune in any::<bool>(),
        claimed in any::<bool>(),
        managed_by_ours in any::<bool>(),
        hash_ok in any::<bool>(),
    ) {
        let me = me();
        let d = desired();
        let mut o = observed(owner.clone(), if hash_ok { "h" } else { "old" }, payload);
        o.managed_by_ours = managed_by_ours;
        let own = ownership(owner.as_ref(), &me, |_| state.clone());
        let c = CopyContext {
            on_conflict: if overwrite { OnConflict::Overwrite } else { OnConflict::Skip },
            prune,
            accepts_overwrite,
            claimed_by: claimed.then(|| RuleId::new("team-0", "older")),
        };
        let action = decide(wanted.then_some(&d), present.then_some((&o, &own)), &c);
        if present && action.writes() {
            match &own {
                Ownership::Mine => {}
                Ownership::OtherRule { loses_to_us: true, .. } => prop_assert!(!claimed),
                Ownership::Unowned => {
                    let adopt = matches!(action, Action::Adopt { .. });
                    prop_assert!(overwrite && accepts_overwrite && adopt);
                }
                other => prop_assert!(false, "wrote over {other:?}: {action:?}"),
            }
        }
        if let Action::Delete { uid, .. } = &action {
            prop_assert!(present && own == Ownership::Mine && !wanted && prune);
            prop_assert_eq!(uid, &o.uid.as_ref().map(ToString::to_string));
        }
        if let Action::Adopt { .. } = action {
            prop_assert!(own == Ownership::Unowned);
        }
        // A wanted copy of ours that is not right is repaired (or read first), unless a better rule wants it.
        if present && wanted && own == Ownership::Mine && !claimed {
            let repairs = matches!(action, Action::InSync | Action::Update { .. } | Action::Read);
            prop_assert!(repairs, "{:?}", action);
            if action == Action::InSync {
                prop_assert!(managed_by_ours && hash_ok && o.owner.as_ref().is_some_and(|w| w.label.is_some()));
            }
        }
        if !present && wanted {
            let creates = matches!(action, Action::Create | Action::Conflict(ConflictReason::ClaimedByAnotherRule(_)));
            prop_assert!(creates, "{:?}", action);
        }
    }

    /// Targets are always consenting, unprotected, not terminating and not
    /// the rule's own namespace; protected ones are reported, others never.
    #[test]
    fn targets_are_consenting_and_unprotected(
        items in proptest::collection::vec(("[a-d]{1,2}|kube-system|kube-public|flotilla", proptest::option::of("true|team-a|x.team-a|other"), proptest::bool::weighted(0.1)), 0..10),
        consent_none in any::<bool>(),
    ) {
        let rule = me();
        let sel = SourceSelection::default();
        let targets = TargetFilter::default();
        let plan = RulePlan { rule: &rule, kind: SourceKind::ConfigMap, sources: &sel, targets: &targets };
        let policy = Policy::new(Some("flotilla"), &[], if consent_none { Consent::None } else { Consent::Label }, BTreeSet::new());
        let mut namespaces: HashMap<String, NamespaceInfo> = items.iter().map(|(n, accept, term)| {
            let l = accept.as_ref().map(|a| labels(&[(ACCEPT_COPIES, a)])).unwrap_or_default();
            (n.clone(), NamespaceInfo { labels: l, terminating: *term })
        }).collect();
        namespaces.insert("team-a".into(), ns(&[(ACCEPT_COPIES, "true")]));
        let t = target_namespaces(&plan, &namespaces, &policy);
        for n in &t.accepted {
            let info = &namespaces[*n];
            prop_assert!(!info.terminating && *n != "team-a" && !policy.protected.contains(*n));
            prop_assert!(consent_none || info.accepts_from("team-a", Consent::Label));
        }
        for n in &t.protected {
            prop_assert!(policy.protected.contains(*n));
        }
        prop_assert_eq!(t.accepted.len() + t.protected.len(),
            namespaces.iter().filter(|(n, i)| !i.terminating && n.as_str() != "team-a"
                && (policy.protected.contains(n.as_str()) || consent_none || i.accepts_from("team-a", Consent::Label))).count());
    }
}

#[test]
fn guarded_powers_are_the_admission_policys() {
    use crate::crd::CopyRuleSpec;
    let spec = |on_conflict, include: &[&str]| {
        let mut s: CopyRuleSpec = serde_json::from_value(serde_json::json!({"kind": "ConfigMap", "selector": {}}))
            .unwrap_or_else(|e| panic!("{e}"));
        s.on_conflict = on_conflict;
        s.namespaces = (!include.is_empty()).then(|| NamespaceTargets {
            include: include.iter().map(|n| NamespaceGlob((*n).to_string())).collect(),
            ..Default::default()
        });
        s
    };
    assert_eq!(guarded_power(&spec(OnConflict::Skip, &["team-a", "team-b"])), None);
    assert_eq!(guarded_power(&spec(OnConflict::Overwrite, &["team-a"])), Some("onConflict: Overwrite"));
    for open in [&[][..], &["team-*"][..], &["team-?"][..]] {
        assert!(guarded_power(&spec(OnConflict::Skip, open)).is_some(), "{open:?}");
    }
}

#[test]
fn copy_facts_are_the_wanted_copies_and_our_own_outside_protected_namespaces() {
    let src = source(SourceKind::ConfigMap, "cfg", &[("copy", "yes")], None);
    let at = |k: CopyKey, owner: Option<Owner>| Observed { key: k, ..observed(owner, "h", Payload::Trusted) };
    let copies: BTreeMap<CopyKey, Observed> = [
        at(key("b", "cfg"), mine()),
        at(key("c", "cfg"), None),
        at(key("d", "old"), mine()),
        at(key("kube-system", "cfg"), mine()),
        at(key("e", "other"), None),
    ]
    .into_iter()
    .map(|o| (o.key.clone(), o))
    .collect();
    let desired: BTreeMap<CopyKey, Arc<SourceInfo>> =
        ["b", "c", "f"].iter().map(|ns| (key(ns, "cfg"), Arc::clone(&src))).collect();
    let older = RuleId::new("team-0", "older");
    let claims: ClaimSet = [
        (me().id, claim_of(&me().id, "2026-01-02T00:00:00Z", &["b", "c", "f"])),
        (older.clone(), claim_of(&older, "2026-01-01T00:00:00Z", &["f"])),
    ]
    .into();
    let namespaces: HashMap<String, NamespaceInfo> =
        [("c".to_string(), ns(&[(ACCEPT_OVERWRITE, "true")])), ("b".to_string(), ns(&[]))].into();
    let me = me();
    let rules = LiveRules::new();
    let seen = Seen { me: &me, copies: &copies, rules: &rules, scope: None, claims: &claims, namespaces: &namespaces };
    let facts: Vec<CopyFacts> = copy_facts(desired, &seen, &Policy::default(), OnConflict::Overwrite, true).collect();
    let summary: Vec<_> = facts
        .iter()
        .map(|f| {
            (
                &*f.key.namespace,
                &*f.key.name,
                f.source.is_some(),
                f.observed.as_ref().map(|(_, w)| w),
                f.ctx.accepts_overwrite,
                f.ctx.claimed_by.as_ref(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("b", "cfg", true, Some(&Ownership::Mine), false, None),
            ("c", "cfg", true, Some(&Ownership::Unowned), true, None),
            ("d", "old", false, Some(&Ownership::Mine), false, None),
            ("f", "cfg", true, None, false, Some(&older)),
        ],
        "kube-system's planted copy and e's unrelated object are not decided on"
    );
    assert!(facts.iter().all(|f| f.ctx.prune && f.ctx.on_conflict == OnConflict::Overwrite));
}

fn arb_naming() -> impl Strategy<Value = Naming> {
    prop_oneof![
        Just(Naming::Same),
        ("(a-|b-|a\\.)?", "(-a|-b)?").prop_map(|(prefix, suffix)| Naming::Affixed { prefix, suffix }),
        "[a-c]".prop_map(Naming::Fixed),
    ]
}

proptest! {
    /// A rule whose copies were named by `old` and are now named by `new`
    /// (sources whose names may run into each other's copies' names:
    /// `b` prefixed `a-` is the `a-b` of before) deletes exactly its old
    /// copies no name wants any more, creates exactly the new names
    /// nothing holds, and never deletes an object that is not its own,
    /// under an old name or not; with `prune: false` it deletes nothing.
    #[test]
    fn a_rename_prunes_exactly_the_old_copies_and_makes_the_new(
        sources_ in proptest::collection::btree_set("[a-c](-[a-c])?", 1..5),
        old in arb_naming(),
        new in arb_naming(),
        foreign in proptest::option::of("[a-c](-[a-c])?"),
        prune in any::<bool>(),
    ) {
        let list: Vec<&str> = sources_.iter().map(String::as_str).collect();
        let infos = RuleSources {
            copied: list.iter().map(|n| source(SourceKind::ConfigMap, n, &[], None)).collect(),
            skipped: vec![],
        };
        let targets = Targets { accepted: vec!["b", "c"], protected: vec![] };
        let keys = |naming: &Naming| -> Option<BTreeSet<CopyKey>> {
            let named = name_copies(&infos, naming).ok()?;
            Some(desired_copies(&named, &targets, SourceKind::ConfigMap).into_keys().collect())
        };
        // What the old naming made (an ambiguous old naming made nothing).
        let before = keys(&old).unwrap_or_default();
        let mut copies: BTreeMap<CopyKey, Observed> = before
            .iter()
            .map(|k| (k.clone(), Observed { key: k.clone(), ..observed(mine(), "h", Payload::Trusted) }))
            .collect();
        // An object not ours where no copy of ours is (a name the new naming may want).
        let foreign_key = foreign.map(|f| key("b", &f)).filter(|k| !copies.contains_key(k));
        if let Some(k) = &foreign_key {
            copies.insert(k.clone(), Observed { key: k.clone(), ..observed(None, "h", Payload::Trusted) });
        }
        let Ok(named) = name_copies(&infos, &new) else {
            // One name for several sources: the controller decides nothing (status says why).
            prop_assert!(matches!(new, Naming::Fixed(_)) && list.len() > 1);
            return Ok(());
        };
        let after: BTreeSet<CopyKey> = desired_copies(&named, &targets, SourceKind::ConfigMap).into_keys().collect();
        let me = me();
        let (rules, claims, namespaces) = (LiveRules::new(), ClaimSet::new(), HashMap::new());
        let seen = Seen { me: &me, copies: &copies, rules: &rules, scope: None, claims: &claims, namespaces: &namespaces };
        let desired = desired_copies(&named, &targets, SourceKind::ConfigMap);
        let plan = plan_copies(copy_facts(desired, &seen, &Policy::default(), OnConflict::Skip, prune));
        let jobs: Vec<&Job> = plan.by_source.values().flatten().chain(&plan.without_payload).collect();
        let deleted: BTreeSet<CopyKey> =
            jobs.iter().filter(|j| matches!(j.action, Action::Delete { .. })).map(|j| j.key.clone()).collect();
        let created: BTreeSet<CopyKey> =
            jobs.iter().filter(|j| j.action == Action::Create).map(|j| j.key.clone()).collect();
        let gone: BTreeSet<CopyKey> = before.difference(&after).cloned().collect();
        prop_assert_eq!(&deleted, &if prune { gone.clone() } else { BTreeSet::new() });
        let fresh: BTreeSet<CopyKey> =
            after.iter().filter(|k| !copies.contains_key(*k)).cloned().collect();
        prop_assert_eq!(created, fresh);
        if let Some(k) = &foreign_key {
            prop_assert!(!deleted.contains(k), "deleted {} which is not ours", k);
        }
        // Every copy kept under a name still wanted is written (its content is its new source's).
        for k in before.intersection(&after) {
            prop_assert!(jobs.iter().any(|j| &j.key == k && matches!(j.action, Action::Update { .. })), "{}", k);
        }
    }
}

/// Two rules in two namespaces both copy a `ca-crt` into one namespace:
/// under their own prefixes they want different objects, and neither is
/// claimed by the other; without, the older wins the one name.
#[test]
fn prefixed_copies_of_one_source_name_from_two_rules_do_not_collide() {
    let (a, b) = (
        RuleRef { id: RuleId::new("team-a", "ca"), uid: "ua".into() },
        RuleRef { id: RuleId::new("team-b", "ca"), uid: "ub".into() },
    );
    let (sel, targets) = (SourceSelection::default(), TargetFilter::default());
    let t = Targets { accepted: vec!["apps"], protected: vec![] };
    let claim_with = |rule: &RuleRef, created: &str, naming: &Naming| {
        let plan = RulePlan { rule, kind: SourceKind::ConfigMap, sources: &sel, targets: &targets };
        let src = RuleSources { copied: vec![source(SourceKind::ConfigMap, "ca-crt", &[], None)], skipped: vec![] };
        let named = name_copies(&src, naming).unwrap();
        Arc::new(claim(&plan, Some(created.into()), &named, &t))
    };
    let prefix = |p: &str| Naming::Affixed { prefix: p.into(), suffix: String::new() };
    let claims: ClaimSet = [
        (a.id.clone(), claim_with(&a, "2026-01-01T00:00:00Z", &prefix("team-a-"))),
        (b.id.clone(), claim_with(&b, "2026-01-02T00:00:00Z", &prefix("team-b-"))),
    ]
    .into();
    assert_eq!(claimed_by(&claims, &b.id, &key("apps", "team-b-ca-crt")), None);
    assert_eq!(claimed_by(&claims, &a.id, &key("apps", "team-a-ca-crt")), None);
    assert!(!claims[&a.id].wants(&key("apps", "ca-crt")), "a claim names the copies, not the sources");
    let same: ClaimSet = [
        (a.id.clone(), claim_with(&a, "2026-01-01T00:00:00Z", &Naming::Same)),
        (b.id.clone(), claim_with(&b, "2026-01-02T00:00:00Z", &Naming::Same)),
    ]
    .into();
    assert_eq!(claimed_by(&same, &b.id, &key("apps", "ca-crt")), Some(a.id.clone()), "the collision of before");
}
