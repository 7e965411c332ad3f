#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::crd::SourceKind;

fn info(kind: SourceKind, type_: Option<&str>, size: u64) -> SourceInfo {
    SourceInfo {
        kind,
        namespace: "team-a".into(),
        name: "ca".into(),
        resource_version: Some("7".into()),
        size,
        type_: type_.map(str::to_string),
        hash: "sha256:h".into(),
        content_hash: "sha256:c".into(),
        controller: None,
        helm_release: false,
    }
}

fn ask(namespace: &'static str) -> Ask<'static> {
    Ask { namespace, kind: "ConfigMap", source_namespace: "team-a", source_name: "ca", copy_name: "ca" }
}

fn found(allow: Option<&str>) -> SourceSeen {
    SourceSeen::Found {
        allow_pull_to: allow.map(str::to_string),
        info: Box::new(info(SourceKind::ConfigMap, None, 10)),
    }
}

fn mine(in_sync: bool) -> TargetSeen {
    TargetSeen::Mine { in_sync, type_: None, uid: Some("u".into()), resource_version: Some("3".into()) }
}

fn policy() -> Policy {
    Policy::new(
        Some("flotilla-system"),
        &["vault".to_string()],
        crate::plan::Consent::Label,
        crate::plan::DEFAULT_SECRET_TYPES.iter().map(|s| s.to_string()).collect(),
    )
}

#[test]
fn globs_of_the_annotation() {
    assert!(allows(Some("app-*"), "app-1"));
    assert!(allows(Some(" other , app-? "), "app-1"));
    assert!(allows(Some("*"), "anything"));
    assert!(!allows(Some("app-?"), "app-12"));
    assert!(!allows(None, "app-1"));
    assert!(!allows(Some(""), "app-1"));
    assert!(!allows(Some(",,"), "app-1"));
    // An invalid glob (uppercase, a slash, a regex) admits nothing, not everything.
    assert!(!allows(Some("App-1"), "app-1"));
    assert!(!allows(Some("app-.*"), "app-1"));
    assert!(!allows(Some("a/b"), "a/b"));
    // Only the first globs count.
    let many = std::iter::repeat_n("x", MAX_ALLOW_GLOBS).chain(["app-1"]).collect::<Vec<_>>().join(",");
    assert!(!allows(Some(&many), "app-1"));
}

#[test]
fn an_allowed_source_is_copied_and_kept_in_sync() {
    let p = policy();
    let d = decide(&ask("app-1"), &found(Some("app-*")), &TargetSeen::Absent, &p, 1024);
    assert_eq!(d.act, Act::Create);
    assert!(d.verdict.ready);
    let d = decide(&ask("app-1"), &found(Some("app-*")), &mine(true), &p, 1024);
    assert_eq!(d.act, Act::Nothing);
    let d = decide(&ask("app-1"), &found(Some("app-*")), &mine(false), &p, 1024);
    assert_eq!(d.act, Act::Update { resource_version: Some("3".into()) });
}

#[test]
fn absent_protected_and_not_allowed_sources_read_the_same() {
    let p = policy();
    let absent = decide(&ask("app-1"), &SourceSeen::Unavailable, &TargetSeen::Absent, &p, 1024);
    let not_allowed = decide(&ask("app-1"), &found(Some("other-*")), &TargetSeen::Absent, &p, 1024);
    let unannotated = decide(&ask("app-1"), &found(None), &TargetSeen::Absent, &p, 1024);
    let protected = Ask { source_namespace: "kube-system", ..ask("app-1") };
    let in_protected = decide(&protected, &found(Some("*")), &TargetSeen::Absent, &p, 1024);
    assert_eq!(absent, not_allowed);
    assert_eq!(absent, unannotated);
    assert_eq!(absent.verdict.reason, NOT_ALLOWED);
    assert_eq!(absent.act, Act::Nothing);
    assert_eq!(in_protected.verdict.reason, NOT_ALLOWED);
    assert_eq!(in_protected.act, Act::Nothing, "a protected namespace's object is never copied, whatever it says");
    assert!(!may_read_source(&p, &protected));
    assert!(!may_read_source(&p, &Ask { source_namespace: "vault", ..ask("app-1") }));
    assert!(!may_read_source(&p, &Ask { source_namespace: "flotilla-system", ..ask("app-1") }));
    assert!(may_read_source(&p, &ask("app-1")));
}

#[test]
fn a_withdrawn_permission_or_a_gone_source_prunes_our_copy_only() {
    let p = policy();
    for source in [SourceSeen::Unavailable, found(None), found(Some("other"))] {
        let d = decide(&ask("app-1"), &source, &mine(true), &p, 1024);
        assert_eq!(d.act, Act::Delete { uid: Some("u".into()), resource_version: Some("3".into()) });
        assert_eq!(d.verdict.reason, NOT_ALLOWED);
        let d = decide(&ask("app-1"), &source, &TargetSeen::NotOurs, &p, 1024);
        assert_eq!(d.act, Act::Nothing, "never an object not ours");
    }
}

#[test]
fn an_object_not_ours_is_a_conflict_and_left_alone() {
    let d = decide(&ask("app-1"), &found(Some("*")), &TargetSeen::NotOurs, &policy(), 1024);
    assert_eq!(d.act, Act::Nothing);
    assert_eq!(d.verdict.reason, CONFLICT);
    assert!(!d.verdict.ready);
}

#[test]
fn nothing_is_done_in_a_protected_namespace() {
    let p = policy();
    for ns in ["kube-system", "vault", "flotilla-system"] {
        let d = decide(&ask(ns), &found(Some("*")), &mine(false), &p, 1024);
        assert_eq!(d.act, Act::Nothing, "{ns}");
        assert_eq!(d.verdict.reason, PROTECTED_NAMESPACE);
    }
}

#[test]
fn secret_types_and_sizes_are_bounded_once_allowed() {
    let p = policy();
    let token = SourceSeen::Found {
        allow_pull_to: Some("*".into()),
        info: Box::new(info(SourceKind::Secret, Some("kubernetes.io/service-account-token"), 10)),
    };
    let d = decide(&ask("app-1"), &token, &mine(true), &p, 1024);
    assert_eq!(d.verdict.reason, "SecretTypeNotAllowed");
    assert!(matches!(d.act, Act::Delete { .. }));
    let big =
        SourceSeen::Found { allow_pull_to: Some("*".into()), info: Box::new(info(SourceKind::ConfigMap, None, 4096)) };
    let d = decide(&ask("app-1"), &big, &mine(false), &p, 1024);
    assert_eq!((d.act, d.verdict.reason), (Act::Nothing, SOURCE_TOO_LARGE));
}

#[test]
fn a_secret_whose_type_changed_is_made_again() {
    let src = SourceSeen::Found {
        allow_pull_to: Some("*".into()),
        info: Box::new(info(SourceKind::Secret, Some("Opaque"), 1)),
    };
    let old = TargetSeen::Mine {
        in_sync: false,
        type_: Some("kubernetes.io/tls".into()),
        uid: Some("u".into()),
        resource_version: Some("3".into()),
    };
    let d = decide(&ask("app-1"), &src, &old, &policy(), 1024);
    assert!(matches!(d.act, Act::Delete { .. }));
    assert!(d.verdict.ready);
}

#[test]
fn the_oldest_requests_of_a_namespace_are_served() {
    let all = [(Some(10), "b"), (Some(10), "a"), (None, "z"), (Some(5), "c")];
    // Ranked by creation (none first), then name.
    assert_eq!(older_than((None, "z"), all), 0);
    assert_eq!(older_than((Some(5), "c"), all), 1);
    assert_eq!(older_than((Some(10), "a"), all), 2);
    assert_eq!(older_than((Some(10), "b"), all), 3);
    assert_eq!(over_limit("team-b", 2, 3), None);
    let refused = over_limit("team-b", 3, 3).expect("the fourth is refused");
    assert!(!refused.ready);
    assert_eq!(refused.reason, TOO_MANY_REQUESTS);
    assert!(refused.message.contains("more than 3 CopyRequests"), "{}", refused.message);
    assert!(refused.message.contains("--max-requests-per-namespace"), "{}", refused.message);
    // The same message wherever it stands in the queue: one Warning while it waits.
    assert_eq!(over_limit("team-b", 7, 3).map(|v| v.message), Some(refused.message.clone()));
}

proptest::proptest! {
    /// Whatever the requests, exactly `min(max, n)` are served and they are
    /// the oldest: ranks are a permutation of 0..n.
    #[test]
    fn exactly_the_limit_is_served(times in proptest::collection::vec(proptest::option::of(0i64..5), 0..40), max in 1usize..10) {
        let names: Vec<String> = (0..times.len()).map(|i| format!("r{i}")).collect();
        let all: Vec<Place<'_>> = times.iter().copied().zip(names.iter().map(String::as_str)).collect();
        let mut ranks: Vec<usize> = all.iter().map(|me| older_than(*me, all.iter().copied())).collect();
        let served = ranks.iter().filter(|r| over_limit("ns", **r, max).is_none()).count();
        proptest::prop_assert_eq!(served, max.min(all.len()));
        ranks.sort_unstable();
        proptest::prop_assert_eq!(ranks, (0..all.len()).collect::<Vec<_>>());
    }
}
