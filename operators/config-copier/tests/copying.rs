//! config-copier against a real control plane: the operator binary runs as a
//! ServiceAccount limited to the RBAC rules it documents; each behaviour of
//! the issue is one test. Tests share the cluster and the operator, so each
//! works in namespaces (and on object names) of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use flotilla_testenv::shared;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const RULE_LABEL: &str = "flotilla.dev/copy-rule";

/// The seed's scenario: a rule in `default`, a labelled ConfigMap copied to
/// every namespace that accepts copies, existing or created afterwards
/// (never to a protected one like kube-public), then a source update
/// propagated to every copy.
#[tokio::test]
async fn seed_scenario_copies_to_every_namespace_and_propagates_updates() {
    let (client, existing) = setup("seed").await;
    let name = format!("seed-{}", rand_suffix());
    configmap(&client, "default", &name, &[("copyrator", "true")], &[("greeting", "hello")]).await;
    configmap(&client, "default", &format!("{name}-unlabelled"), &[], &[("x", "y")]).await;
    rule(&client, "default", &name, json!({"kind": "ConfigMap", "selector": {"matchLabels": {"copyrator": "true"}}}))
        .await
        .unwrap();

    let copy = wait_cm(&client, &existing, &name, |c| data(c, "greeting") == Some("hello")).await;
    assert_eq!(label(&copy.metadata, "copyrator"), Some("true"), "source labels are copied");
    assert_eq!(label(&copy.metadata, RULE_LABEL), Some(format!("default.{name}").as_str()));
    assert_eq!(label(&copy.metadata, "app.kubernetes.io/managed-by"), Some("flotilla-config-copier"));
    let ann = copy.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(ann.get("flotilla.dev/source").map(String::as_str), Some(format!("default/{name}").as_str()));
    assert!(ann.get("flotilla.dev/content-hash").is_some_and(|h| h.starts_with("sha256:")));
    assert_cm_absent(&client, &existing, &format!("{name}-unlabelled")).await;
    assert_cm_absent(&client, "kube-public", &name).await;

    // A namespace created afterwards gets its copy.
    let later = target("seed-later").await;
    wait_cm(&client, &later, &name, |c| data(c, "greeting") == Some("hello")).await;

    // The source changes: every copy follows.
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .patch(&name, &PatchParams::default(), &Patch::Merge(json!({"data": {"greeting": "bonjour"}})))
        .await
        .unwrap();
    for ns in [existing.as_str(), later.as_str()] {
        wait_cm(&client, ns, &name, |c| data(c, "greeting") == Some("bonjour")).await;
    }
    let r = wait_rule(&client, "default", &name, |r| ready(r) == Some("True")).await;
    let st = r.status.unwrap();
    assert_eq!(st.sources, 1);
    assert!(st.copies >= 2 && st.copies == st.desired, "{st:?}");
    assert!(st.last_sync_time.is_some());
    assert!(st.protected_namespaces.iter().any(|n| n == "kube-public"), "{st:?}");

    // Clean up: the rule's deletion prunes its copies everywhere.
    Api::<CopyRule>::namespaced(client.clone(), "default").delete(&name, &DeleteParams::default()).await.unwrap();
    wait_cm_gone(&client, &later, &name).await;
    wait_cm_gone(&client, &existing, &name).await;
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), "default").get_opt(&name).await.unwrap().is_some(),
        "the source stays"
    );
}

/// Secrets: data and type are copied.
#[tokio::test]
async fn secrets_are_copied_with_their_type() {
    let (client, src) = setup("secret-src").await;
    let dst = target("secret-dst").await;
    let secret = Secret {
        metadata: meta("creds", &[("share", "yes")]),
        type_: Some("kubernetes.io/basic-auth".into()),
        data: Some(BTreeMap::from([("password".to_string(), ByteString(b"s3cr3t".to_vec()))])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), &src).create(&PostParams::default(), &secret).await.unwrap();
    rule(
        &client,
        &src,
        "secrets",
        json!({"kind": "Secret", "selector": {"matchLabels": {"share": "yes"}}, "namespaces": {"include": [dst]}}),
    )
    .await
    .unwrap();
    let copy = wait_secret(&client, &dst, "creds", |_| true).await;
    assert_eq!(copy.type_.as_deref(), Some("kubernetes.io/basic-auth"));
    assert_eq!(copy.data.unwrap().get("password").map(|b| b.0.clone()), Some(b"s3cr3t".to_vec()));
    assert_eq!(label(&copy.metadata, RULE_LABEL), Some(format!("{src}.secrets").as_str()));
    wait_rule(&client, &src, "secrets", |r| r.status.as_ref().is_some_and(|s| s.copies == 1 && s.sources == 1)).await;
}

/// A Secret's type is immutable: when the source comes back with another
/// type, the copy is replaced (prune: false keeps the copy in between, so
/// the in-place update path is what is exercised).
#[tokio::test]
async fn secret_type_change_replaces_the_copy() {
    let (client, src) = setup("stype-src").await;
    let dst = target("stype-dst").await;
    let secret = |type_: &str| Secret {
        metadata: meta("creds", &[("share", "yes")]),
        type_: Some(type_.into()),
        string_data: Some(BTreeMap::from([("password".to_string(), type_.to_string())])),
        ..Default::default()
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), &src);
    api.create(&PostParams::default(), &secret("Opaque")).await.unwrap();
    rule(
        &client,
        &src,
        "r",
        json!({"kind": "Secret", "selector": {"matchLabels": {"share": "yes"}}, "namespaces": {"include": [dst]}, "prune": false}),
    )
    .await
    .unwrap();
    let first = wait_secret(&client, &dst, "creds", |s| s.type_.as_deref() == Some("Opaque")).await;
    api.delete("creds", &DeleteParams::default()).await.unwrap();
    wait_rule(&client, &src, "r", |r| r.status.as_ref().is_some_and(|s| s.sources == 0)).await;
    api.create(&PostParams::default(), &secret("kubernetes.io/basic-auth")).await.unwrap();
    let second = wait_secret(&client, &dst, "creds", |s| s.type_.as_deref() == Some("kubernetes.io/basic-auth")).await;
    assert_ne!(first.metadata.uid, second.metadata.uid, "replaced, not updated in place");
    assert_eq!(second.data.unwrap().get("password").map(|b| b.0.clone()), Some(b"kubernetes.io/basic-auth".to_vec()));
    assert_eq!(label(&second.metadata, RULE_LABEL), Some(format!("{src}.r").as_str()));
}

async fn simple_rule(client: &Client, src: &str, dst: &str, name: &str) {
    configmap(client, src, "cfg", &[("copy", "yes")], &[("k", "v")]).await;
    rule(
        client,
        src,
        name,
        json!({"kind": "ConfigMap", "selector": {"matchLabels": {"copy": "yes"}}, "namespaces": {"include": [dst]}}),
    )
    .await
    .unwrap();
    wait_cm(client, dst, "cfg", |c| data(c, "k") == Some("v")).await;
}

/// A copy edited by hand (a value changed, a key added) is restored.
#[tokio::test]
async fn drift_repair_after_an_edit() {
    let (client, src) = setup("edit-src").await;
    let dst = target("edit-dst").await;
    simple_rule(&client, &src, &dst, "r").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &dst);
    api.patch("cfg", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "hacked", "extra": "x"}})))
        .await
        .unwrap();
    let restored = wait_cm(&client, &dst, "cfg", |c| data(c, "k") == Some("v") && data(c, "extra").is_none()).await;
    assert_eq!(label(&restored.metadata, RULE_LABEL), Some(format!("{src}.r").as_str()));
}

/// A copy deleted by hand comes back.
#[tokio::test]
async fn drift_repair_after_a_delete() {
    let (client, src) = setup("del-src").await;
    let dst = target("del-dst").await;
    simple_rule(&client, &src, &dst, "r").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &dst);
    let uid = api.get("cfg").await.unwrap().metadata.uid;
    api.delete("cfg", &DeleteParams::default()).await.unwrap();
    let back = wait_cm(&client, &dst, "cfg", |c| c.metadata.uid != uid).await;
    assert_eq!(data(&back, "k"), Some("v"));
}

/// Namespace label selector, include globs and exclude globs (applied last).
#[tokio::test]
async fn namespace_selector_and_globs_choose_the_targets() {
    let (client, src) = setup("glob-src").await;
    let p = format!("glob{}", rand_suffix());
    let yes = namespace(&client, &format!("{p}-team-1"), &[("team", "a")]).await;
    let wrong_label = namespace(&client, &format!("{p}-team-2"), &[("team", "b")]).await;
    let excluded = namespace(&client, &format!("{p}-team-old"), &[("team", "a")]).await;
    let not_included = namespace(&client, &format!("{p}-other"), &[("team", "a")]).await;
    configmap(&client, &src, "cfg", &[("copy", "yes")], &[("k", "v")]).await;
    rule(
        &client,
        &src,
        "r",
        json!({"kind": "ConfigMap", "selector": {"matchLabels": {"copy": "yes"}},
               "namespaces": {"selector": {"matchLabels": {"team": "a"}}, "include": [format!("{p}-team-*")], "exclude": ["*-old"]}}),
    )
    .await
    .unwrap();
    wait_cm(&client, &yes, "cfg", |_| true).await;
    wait_rule(&client, &src, "r", |r| r.status.as_ref().is_some_and(|s| s.namespaces == 1 && s.copies == 1)).await;
    for ns in [&wrong_label, &excluded, &not_included] {
        assert_cm_absent(&client, ns, "cfg").await;
    }
}

/// Relabelling a namespace adds or prunes its copies.
#[tokio::test]
async fn namespace_relabel_adds_and_prunes_copies() {
    let (client, src) = setup("relabel-src").await;
    let p = format!("relabel{}", rand_suffix());
    let dst = namespace(&client, &format!("{p}-ns"), &[]).await;
    configmap(&client, &src, "cfg", &[("copy", "yes")], &[("k", "v")]).await;
    rule(
        &client,
        &src,
        "r",
        json!({"kind": "ConfigMap", "selector": {"matchLabels": {"copy": "yes"}},
               "namespaces": {"selector": {"matchLabels": {p.clone(): "in"}}}}),
    )
    .await
    .unwrap();
    wait_rule(&client, &src, "r", |r| ready(r) == Some("True")).await;
    assert_cm_absent(&client, &dst, "cfg").await;
    label_namespace(&client, &dst, &p, Some("in")).await;
    wait_cm(&client, &dst, "cfg", |_| true).await;
    label_namespace(&client, &dst, &p, None).await;
    wait_cm_gone(&client, &dst, "cfg").await;
}

/// A deleted source's copies are pruned; so are those of a source that no
/// longer matches the selector.
#[tokio::test]
async fn source_deleted_or_unlabelled_prunes_its_copies() {
    let (client, src) = setup("srcdel-src").await;
    let dst = target("srcdel-dst").await;
    configmap(&client, &src, "one", &[("copy", "yes")], &[("k", "1")]).await;
    configmap(&client, &src, "two", &[("copy", "yes")], &[("k", "2")]).await;
    rule(
        &client,
        &src,
        "r",
        json!({"kind": "ConfigMap", "selector": {"matchLabels": {"copy": "yes"}}, "namespaces": {"include": [dst]}}),
    )
    .await
    .unwrap();
    wait_cm(&client, &dst, "one", |_| true).await;
    wait_cm(&client, &dst, "two", |_| true).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &src);
    api.delete("one", &DeleteParams::default()).await.unwrap();
    wait_cm_gone(&client, &dst, "one").await;
    api.patch("two", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"copy": null}}})))
        .await
        .unwrap();
    wait_cm_gone(&client, &dst, "two").await;
    wait_rule(&client, &src, "r", |r| r.status.as_ref().is_some_and(|s| s.sources == 0 && s.copies == 0)).await;
}

/// With `prune: false`, copies of a deleted source stay.
#[tokio::test]
async fn prune_false_keeps_copies() {
    let (client, src) = setup("keep-src").await;
    let dst = target("keep-dst").await;
    configmap(&client, &src, "cfg", &[("copy", "yes")], &[("k", "v")]).await;
    rule(
        &client,
        &src,
        "r",
        json!({"kind": "ConfigMap", "selector": {"matchLabels": {"copy": "yes"}}, "namespaces": {"include": [dst]}, "prune": false}),
    )
    .await
    .unwrap();
    wait_cm(&client, &dst, "cfg", |_| true).await;
    Api::<ConfigMap>::namespaced(client.clone(), &src).delete("cfg", &DeleteParams::default()).await.unwrap();
    wait_rule(&client, &src, "r", |r| r.status.as_ref().is_some_and(|s| s.sources == 0)).await;
    assert!(Api::<ConfigMap>::namespaced(client.clone(), &dst).get_opt("cfg").await.unwrap().is_some());
}

/// Deleting the rule prunes its copies (finalizer), and the rule goes.
#[tokio::test]
async fn rule_delete_prunes_its_copies() {
    let (client, src) = setup("ruledel-src").await;
    let dst = target("ruledel-dst").await;
    simple_rule(&client, &src, &dst, "r").await;
    let rules: Api<CopyRule> = Api::namespaced(client.clone(), &src);
    let r = rules.get("r").await.unwrap();
    assert_eq!(r.metadata.finalizers.as_deref(), Some(&["flotilla.dev/config-copier".to_string()][..]));
    rules.delete("r", &DeleteParams::default()).await.unwrap();
    wait_cm_gone(&client, &dst, "cfg").await;
    flotilla_testenv::wait_for("the rule to be gone", T, || {
        let rules = rules.clone();
        async move { Ok::<_, kube::Error>(rules.get_opt("r").await?.is_none().then_some(())) }
    })
    .await
    .unwrap();
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), &src).get_opt("cfg").await.unwrap().is_some(),
        "the source stays"
    );
}

/// A rule spec change converges: switching kind prunes the old copies and
/// makes the new ones.
#[tokio::test]
async fn rule_spec_change_converges() {
    let (client, src) = setup("spec-src").await;
    let dst = target("spec-dst").await;
    simple_rule(&client, &src, &dst, "r").await;
    let secret = Secret {
        metadata: meta("cfg", &[("copy", "yes")]),
        string_data: Some(BTreeMap::from([("s".to_string(), "x".to_string())])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), &src).create(&PostParams::default(), &secret).await.unwrap();
    Api::<CopyRule>::namespaced(client.clone(), &src)
        .patch("r", &PatchParams::default(), &Patch::Merge(json!({"spec": {"kind": "Secret"}})))
        .await
        .unwrap();
    wait_secret(&client, &dst, "cfg", |s| s.data.as_ref().is_some_and(|d| d.contains_key("s"))).await;
    wait_cm_gone(&client, &dst, "cfg").await;
    let r = wait_rule(&client, &src, "r", |r| {
        r.status.as_ref().is_some_and(|s| s.observed_generation == r.metadata.generation && s.copies == 1)
    })
    .await;
    assert_eq!(ready(&r), Some("True"));
}

/// onConflict Skip: an object the rule does not own is left alone, listed in
/// status, counted, and reported with a Warning Event.
#[tokio::test]
async fn conflict_with_skip_leaves_the_object_alone() {
    let (client, src) = setup("skip-src").await;
    let dst = target("skip-dst").await;
    configmap(&client, &dst, "cfg", &[], &[("k", "theirs")]).await;
    configmap(&client, &src, "cfg", &[("copy", "yes")], &[("k", "ours")]).await;
    rule(
        &client,
        &src,
        "r",
        json!({"kind": "ConfigMap", "selector": {"matchLabels": {"copy": "yes"}}, "namespaces": {"include": [dst]}}),
    )
    .await
    .unwrap();
    let r = wait_rule(&client, &src, "r", |r| r.status.as_ref().is_some_and(|s| s.conflicts == 1)).await;
    let st = r.status.as_ref().unwrap();
    assert_eq!(st.conflicting.len(), 1);
    assert_eq!((st.conflicting[0].namespace.as_str(), st.conflicting[0].name.as_str()), (dst.as_str(), "cfg"));
    assert_eq!(st.conflicting[0].reason, "NotOwned");
    assert_eq!(ready(&r), Some("False"));
    assert_eq!(condition(&r, "Ready").unwrap().reason, "Conflicts");
    assert_eq!(condition(&r, "Conflicting").unwrap().status, "True");
    wait_event(&client, &src, "r", "Conflict").await;
    let theirs = Api::<ConfigMap>::namespaced(client.clone(), &dst).get("cfg").await.unwrap();
    assert_eq!(data(&theirs, "k"), Some("theirs"));
    assert_eq!(label(&theirs.metadata, RULE_LABEL), None);

    // Once the object in the way is gone, the rule can place its copy (rechecked periodically
    // or on the next event: touch the source).
    Api::<ConfigMap>::namespaced(client.clone(), &dst).delete("cfg", &DeleteParams::default()).await.unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &src)
        .patch("cfg", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"touched": "1"}}})))
        .await
        .unwrap();
    wait_cm(&client, &dst, "cfg", |c| data(c, "k") == Some("ours")).await;
    wait_rule(&client, &src, "r", |r| r.status.as_ref().is_some_and(|s| s.conflicts == 0) && ready(r) == Some("True"))
        .await;
}

/// onConflict Overwrite: the object is adopted, and an Event says so.
#[tokio::test]
async fn conflict_with_overwrite_adopts_the_object() {
    let (client, src) = setup("adopt-src").await;
    let dst = target("adopt-dst").await;
    label_namespace(&client, &dst, "flotilla.dev/accept-overwrite", Some("true")).await;
    configmap(&client, &dst, "cfg", &[("mine", "yes")], &[("k", "theirs"), ("old", "x")]).await;
    configmap(&client, &src, "cfg", &[("copy", "yes")], &[("k", "ours")]).await;
    rule(
        &client,
        &src,
        "r",
        json!({"kind": "ConfigMap", "selector": {"matchLabels": {"copy": "yes"}}, "namespaces": {"include": [dst]}, "onConflict": "Overwrite"}),
    )
    .await
    .unwrap();
    let adopted = wait_cm(&client, &dst, "cfg", |c| data(c, "k") == Some("ours") && data(c, "old").is_none()).await;
    assert_eq!(label(&adopted.metadata, RULE_LABEL), Some(format!("{src}.r").as_str()));
    wait_event(&client, &src, "r", "Adopted").await;
    let r = wait_rule(&client, &src, "r", |r| ready(r) == Some("True")).await;
    assert_eq!(r.status.unwrap().conflicts, 0);
}

/// Two rules claiming one target: the first keeps it, the second reports
/// the conflict (even with Overwrite).
#[tokio::test]
async fn two_rules_one_target_first_keeps_it() {
    let (client, src) = setup("two-src").await;
    let dst = target("two-dst").await;
    configmap(&client, &src, "cfg", &[("a", "1"), ("b", "1")], &[("k", "v")]).await;
    rule(
        &client,
        &src,
        "first",
        json!({"kind": "ConfigMap", "selector": {"matchLabels": {"a": "1"}}, "namespaces": {"include": [dst]}}),
    )
    .await
    .unwrap();
    wait_cm(&client, &dst, "cfg", |c| label(&c.metadata, RULE_LABEL) == Some(format!("{src}.first").as_str())).await;
    rule(
        &client,
        &src,
        "second",
        json!({"kind": "ConfigMap", "selector": {"matchLabels": {"b": "1"}}, "namespaces": {"include": [dst]}, "onConflict": "Overwrite"}),
    )
    .await
    .unwrap();
    let r = wait_rule(&client, &src, "second", |r| r.status.as_ref().is_some_and(|s| s.conflicts == 1)).await;
    let st = r.status.unwrap();
    assert_eq!(st.conflicting[0].reason, "ClaimedByAnotherRule");
    assert!(st.conflicting[0].message.contains(&format!("{src}/first")), "{:?}", st.conflicting);
    let copy = Api::<ConfigMap>::namespaced(client.clone(), &dst).get("cfg").await.unwrap();
    assert_eq!(label(&copy.metadata, RULE_LABEL), Some(format!("{src}.first").as_str()));
    wait_rule(&client, &src, "first", |r| ready(r) == Some("True")).await;
}

/// Admission rejects bad rules: unknown kind, bad selectors, bad globs.
#[tokio::test]
async fn invalid_rules_are_rejected_at_admission() {
    let env = shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("invalid").await.unwrap();
    let bad = [
        ("kind", json!({"kind": "Deployment", "selector": {}})),
        ("no-selector", json!({"kind": "ConfigMap"})),
        (
            "in-no-values",
            json!({"kind": "ConfigMap", "selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}),
        ),
        (
            "exists-values",
            json!({"kind": "ConfigMap", "selector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}}),
        ),
        (
            "bad-operator",
            json!({"kind": "ConfigMap", "selector": {"matchExpressions": [{"key": "a", "operator": "Like"}]}}),
        ),
        ("bad-key", json!({"kind": "ConfigMap", "selector": {"matchLabels": {"not a key": "x"}}})),
        ("bad-value", json!({"kind": "ConfigMap", "selector": {"matchLabels": {"a": "-x-"}}})),
        ("bad-glob", json!({"kind": "ConfigMap", "selector": {}, "namespaces": {"include": ["Team_A"]}})),
        (
            "bad-ns-selector",
            json!({"kind": "ConfigMap", "selector": {}, "namespaces": {"selector": {"matchExpressions": [{"key": "a", "operator": "NotIn"}]}}}),
        ),
        ("bad-on-conflict", json!({"kind": "ConfigMap", "selector": {}, "onConflict": "Replace"})),
    ];
    for (name, spec) in bad {
        match raw_rule(&client, &ns, name, spec.clone()).await {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 422, "{name}: {s:?}"),
            other => panic!("{name}: {spec} was not rejected: {other:?}"),
        }
    }
    // And a good one passes, with defaults filled in.
    let ok = raw_rule(
        &client,
        &ns,
        "good",
        json!({"kind": "Secret", "selector": {"matchLabels": {"example.com/share": "yes"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}}),
    )
    .await
    .unwrap();
    assert_eq!(ok["spec"]["onConflict"], "Skip");
    assert_eq!(ok["spec"]["prune"], true);
}

/// A rule in namespace X copies only X's objects: a matching object in Y is
/// never read or copied, and the spec has no field that could name Y.
#[tokio::test]
async fn a_rule_cannot_copy_from_another_namespace() {
    let (client, x) = setup("xns-x").await;
    let y = target("xns-y").await;
    let dst = target("xns-dst").await;
    let secret = Secret {
        metadata: meta("stolen", &[("share", "yes")]),
        string_data: Some(BTreeMap::from([("password".to_string(), "hunter2".to_string())])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), &y).create(&PostParams::default(), &secret).await.unwrap();
    let own = Secret { metadata: meta("own", &[("share", "yes")]), ..Default::default() };
    Api::<Secret>::namespaced(client.clone(), &x).create(&PostParams::default(), &own).await.unwrap();

    // No field names another namespace: strict validation refuses one.
    match raw_rule(
        &client,
        &x,
        "sneaky",
        json!({"kind": "Secret", "selector": {"matchLabels": {"share": "yes"}}, "sourceNamespace": y}),
    )
    .await
    {
        Err(kube::Error::Api(s)) => assert!(s.message.contains("sourceNamespace"), "{s:?}"),
        other => panic!("an unknown field was accepted: {other:?}"),
    }
    rule(&client, &x, "r", json!({"kind": "Secret", "selector": {"matchLabels": {"share": "yes"}}, "namespaces": {"include": [dst.clone(), y.clone()]}}))
        .await
        .unwrap();
    wait_secret(&client, &dst, "own", |_| true).await;
    let r = wait_rule(&client, &x, "r", |r| ready(r) == Some("True")).await;
    assert_eq!(r.status.unwrap().sources, 1);
    assert!(Api::<Secret>::namespaced(client.clone(), &dst).get_opt("stolen").await.unwrap().is_none());
}

/// A terminating namespace is skipped (no copy attempted, no failure).
#[tokio::test]
async fn terminating_namespaces_are_skipped() {
    let (client, src) = setup("term-src").await;
    let p = format!("term{}", rand_suffix());
    let dst = namespace(&client, &format!("{p}-ns"), &[]).await;
    // Hold the namespace in Terminating with a finalizer on an object in it.
    let held = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("held".into()),
            finalizers: Some(vec!["example.com/hold".into()]),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), &dst).create(&PostParams::default(), &held).await.unwrap();
    Api::<Namespace>::all(client.clone()).delete(&dst, &DeleteParams::default()).await.unwrap();
    configmap(&client, &src, "cfg", &[("copy", "yes")], &[("k", "v")]).await;
    rule(&client, &src, "r", json!({"kind": "ConfigMap", "selector": {"matchLabels": {"copy": "yes"}}, "namespaces": {"include": [format!("{p}-*")]}}))
        .await
        .unwrap();
    let r = wait_rule(&client, &src, "r", |r| ready(r).is_some() && r.status.as_ref().is_some_and(|s| s.sources == 1))
        .await;
    assert_eq!(ready(&r), Some("True"), "{:?}", r.status);
    assert_eq!(r.status.unwrap().namespaces, 0);
    assert_cm_absent(&client, &dst, "cfg").await;
    // Release the namespace.
    Api::<ConfigMap>::namespaced(client.clone(), &dst)
        .patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// The binary exposes its own metrics next to controller-runtime's.
#[tokio::test]
async fn metrics_are_exposed() {
    let (client, src) = setup("metrics-src").await;
    let dst = target("metrics-dst").await;
    simple_rule(&client, &src, &dst, "r").await;
    wait_rule(&client, &src, "r", |r| ready(r) == Some("True")).await;
    let running = operator(&shared()).await;
    let series = [
        format!("flotilla_config_copier_copies_in_sync{{namespace=\"{src}\",rule=\"r\"}} 1"),
        format!("flotilla_config_copier_conflicts{{namespace=\"{src}\",rule=\"r\"}} 0"),
    ];
    flotilla_testenv::wait_for("the rule's metrics", T, || {
        let url = running.metrics.clone();
        let series = series.clone();
        async move {
            let (_, body) = get(&url).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(series.iter().all(|s| body.lines().any(|l| l == s)).then_some(body))
        }
    })
    .await
    .unwrap();
    let (_, body) = get(&running.metrics).await.unwrap();
    for needle in [
        "flotilla_config_copier_copy_operations_total{action=\"create\",result=\"success\"}",
        "flotilla_config_copier_api_requests_total{verb=\"create\"}",
        "controller_runtime_reconcile_total{controller=\"copyrule\",result=\"success\"}",
        "process_resident_memory_bytes",
    ] {
        assert!(body.contains(needle), "{needle} missing from /metrics");
    }
}

/// A bad flag: one line naming it on stderr, exit 2, before touching a cluster.
#[test]
fn bad_flags_exit_2() {
    let out = std::process::Command::new(OPERATOR.binary())
        .arg("--copy-concurrency=0")
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--copy-concurrency"), "{stderr}");
    let out = std::process::Command::new(OPERATOR.binary()).env("COPY_CONCURRENCY", "1000").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = std::process::Command::new(OPERATOR.binary()).arg("--watch-namespace=Bad_NS").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Labels and annotations follow the source: added ones appear on the copies,
/// removed ones disappear; a label someone else put on a copy stays.
#[tokio::test]
async fn source_labels_and_annotations_follow_the_source() {
    let (client, src) = setup("marks-src").await;
    let dst = target("marks-dst").await;
    configmap(&client, &src, "cfg", &[("copy", "yes"), ("tier", "gold")], &[("k", "v")]).await;
    let sources: Api<ConfigMap> = Api::namespaced(client.clone(), &src);
    sources
        .patch("cfg", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"note": "hi"}}})))
        .await
        .unwrap();
    rule(
        &client,
        &src,
        "r",
        json!({"kind": "ConfigMap", "selector": {"matchLabels": {"copy": "yes"}}, "namespaces": {"include": [dst]}}),
    )
    .await
    .unwrap();
    let note = |c: &ConfigMap| c.metadata.annotations.as_ref().and_then(|a| a.get("note")).cloned();
    wait_cm(&client, &dst, "cfg", |c| label(&c.metadata, "tier") == Some("gold") && note(c).as_deref() == Some("hi"))
        .await;
    // Someone else labels the copy.
    Api::<ConfigMap>::namespaced(client.clone(), &dst)
        .patch(
            "cfg",
            &PatchParams::apply("someone-else"),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "labels": {"theirs": "x"}}
            })),
        )
        .await
        .unwrap();
    sources
        .patch(
            "cfg",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": null, "fresh": "1"}, "annotations": {"note": null}}})),
        )
        .await
        .unwrap();
    let copy = wait_cm(&client, &dst, "cfg", |c| {
        label(&c.metadata, "fresh") == Some("1") && label(&c.metadata, "tier").is_none() && note(c).is_none()
    })
    .await;
    assert_eq!(label(&copy.metadata, "theirs"), Some("x"), "another manager's label stays");
    assert_eq!(label(&copy.metadata, RULE_LABEL), Some(format!("{src}.r").as_str()));
}
