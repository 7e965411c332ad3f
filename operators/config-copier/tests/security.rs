//! Issue 14's attacks against a real control plane, each as a test that now
//! fails to do harm: the rule author is untrusted, the namespace owner and
//! the cluster admin decide. The operator runs with its default flags
//! (`--target-consent=label`) as a ServiceAccount with exactly its RBAC.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use flotilla_testenv::{shared, wait_for};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const RULE_LABEL: &str = "flotilla.dev/copy-rule";

async fn secret(client: &Client, ns: &str, name: &str, type_: &str, labels: &[(&str, &str)]) {
    let s = Secret {
        metadata: meta(name, labels),
        type_: Some(type_.into()),
        data: Some(BTreeMap::from([
            ("token-id".to_string(), ByteString(b"abcdef".to_vec())),
            ("token-secret".to_string(), ByteString(b"0123456789abcdef".to_vec())),
        ])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), ns).create(&PostParams::default(), &s).await.unwrap();
}

async fn delete_rule(client: &Client, ns: &str, name: &str) {
    let _ = Api::<CopyRule>::namespaced(client.clone(), ns).delete(name, &DeleteParams::default()).await;
}

/// `selector: {}` and no target list from a plain namespace, with a
/// bootstrap-token Secret among the sources: nothing reaches kube-system
/// (even labelled to accept copies), the token is skipped and says why.
#[tokio::test]
async fn a_bootstrap_token_never_reaches_kube_system() {
    let (client, src) = setup("attack-src").await;
    let dst = target("attack-dst").await;
    label_namespace(&client, "kube-system", ACCEPT, Some("true")).await;
    secret(&client, &src, "bootstrap-token-abcdef", "bootstrap.kubernetes.io/token", &[]).await;
    secret(&client, &src, "plain", "Opaque", &[]).await;
    rule(&client, &src, "all", json!({"kind": "Secret", "selector": {}})).await.unwrap();

    wait_secret(&client, &dst, "plain", |_| true).await;
    let r = wait_rule(&client, &src, "all", |r| r.status.as_ref().is_some_and(|s| !s.skipped.is_empty())).await;
    let st = r.status.unwrap();
    assert!(st.protected_namespaces.iter().any(|n| n == "kube-system"), "{st:?}");
    let skipped = st.skipped.iter().find(|s| s.name == "bootstrap-token-abcdef").expect("listed as skipped");
    assert_eq!(skipped.reason, "SecretTypeNotAllowed");
    let in_kube_system = Api::<Secret>::namespaced(client.clone(), "kube-system");
    for name in ["bootstrap-token-abcdef", "plain"] {
        assert!(in_kube_system.get_opt(name).await.unwrap().is_none(), "{name} reached kube-system");
    }
    let anywhere = Api::<Secret>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{RULE_LABEL}={src}.all")))
        .await
        .unwrap();
    assert!(
        anywhere.items.iter().all(|s| s.metadata.name.as_deref() == Some("plain")),
        "only the Opaque one is copied"
    );
    label_namespace(&client, "kube-system", ACCEPT, None).await;
    delete_rule(&client, &src, "all").await;
}

/// A namespace that did not consent gets nothing, and the rule's status and
/// Events do not say what is there.
#[tokio::test]
async fn a_namespace_without_consent_gets_nothing_and_is_not_revealed() {
    let (client, src) = setup("consent-src").await;
    let yes = target("consent-yes").await;
    let no = shared().namespace("consent-no").await.unwrap();
    // Something of that name exists in the non-consenting namespace.
    configmap(&client, &no, "cfg", &[], &[("k", "theirs")]).await;
    configmap(&client, &src, "cfg", &[("copy", "yes")], &[("k", "ours")]).await;
    rule(
        &client,
        &src,
        "r",
        json!({"kind": "ConfigMap", "selector": {"matchLabels": {"copy": "yes"}}, "namespaces": {"include": [yes, no]}}),
    )
    .await
    .unwrap();
    wait_cm(&client, &yes, "cfg", |c| data(c, "k") == Some("ours")).await;
    let r = wait_rule(&client, &src, "r", |r| ready(r) == Some("True")).await;
    let status = serde_json::to_string(&r.status).unwrap();
    assert!(!status.contains(&no), "status reveals {no}: {status}");
    assert_eq!(r.status.as_ref().unwrap().namespaces, 1);
    let theirs = Api::<ConfigMap>::namespaced(client.clone(), &no).get("cfg").await.unwrap();
    assert_eq!(data(&theirs, "k"), Some("theirs"));
    // Events go out in the background: wait for the sync's own Event (the
    // copy to `yes`) before looking at what the Events say.
    wait_event(&client, &src, "r", "Synced").await;
    let events = Api::<Event>::namespaced(client.clone(), &src).list(&ListParams::default()).await.unwrap();
    let on_rule: Vec<&Event> =
        events.items.iter().filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("r")).collect();
    assert!(!on_rule.is_empty());
    for e in on_rule {
        assert!(!e.note.as_deref().unwrap_or("").contains(&no), "an Event reveals {no}: {:?}", e.note);
    }
    // Consent given: the namespace is a target now, and its own cfg is
    // reported as a conflict (NotOwned) and still left alone.
    label_namespace(&client, &no, ACCEPT, Some(&src)).await;
    let r = wait_rule(&client, &src, "r", |r| r.status.as_ref().is_some_and(|s| s.conflicts == 1)).await;
    assert_eq!(r.status.unwrap().conflicting[0].reason, "NotOwned", "consenting: the conflict is reported");
    let theirs = Api::<ConfigMap>::namespaced(client.clone(), &no).get("cfg").await.unwrap();
    assert_eq!(data(&theirs, "k"), Some("theirs"));
}

/// `onConflict: Overwrite` without the namespace's accept-overwrite adopts
/// nothing (and deleting the rule then deletes nothing of theirs).
#[tokio::test]
async fn overwrite_without_consent_adopts_nothing() {
    let (client, src) = setup("ovr-src").await;
    let dst = target("ovr-dst").await;
    configmap(&client, &dst, "coredns", &[], &[("Corefile", "theirs")]).await;
    configmap(&client, &src, "coredns", &[("copy", "yes")], &[("Corefile", "ours")]).await;
    copy_rule(&client, &src, "r", "ConfigMap", &[&dst], json!({"onConflict": "Overwrite"})).await;
    let r = wait_rule(&client, &src, "r", |r| r.status.as_ref().is_some_and(|s| s.conflicts == 1)).await;
    assert_eq!(r.status.unwrap().conflicting[0].reason, "NotOwned");
    let theirs = Api::<ConfigMap>::namespaced(client.clone(), &dst).get("coredns").await.unwrap();
    assert_eq!(data(&theirs, "Corefile"), Some("theirs"));
    assert_eq!(label(&theirs.metadata, RULE_LABEL), None);
    delete_rule(&client, &src, "r").await;
    flotilla_testenv::wait_for("the rule to go", T, || {
        let api = Api::<CopyRule>::namespaced(client.clone(), &src);
        async move { Ok::<_, kube::Error>(api.get_opt("r").await?.is_none().then_some(())) }
    })
    .await
    .unwrap();
    assert!(Api::<ConfigMap>::namespaced(client.clone(), &dst).get_opt("coredns").await.unwrap().is_some());
}

/// A copy whose managed-by label is rewritten, or whose ownership label is
/// removed, is still ours (index and annotations) and is repaired.
#[tokio::test]
async fn a_relabelled_copy_is_still_ours_and_repaired() {
    let (client, src) = setup("relbl-src").await;
    let dst = target("relbl-dst").await;
    configmap(&client, &src, "cfg", &[("copy", "yes")], &[("k", "v")]).await;
    copy_rule(&client, &src, "r", "ConfigMap", &[&dst], json!({})).await;
    wait_cm(&client, &dst, "cfg", |_| true).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &dst);
    let managed = "app.kubernetes.io/managed-by";
    api.patch("cfg", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {managed: "Helm"}}})))
        .await
        .unwrap();
    wait_cm(&client, &dst, "cfg", |c| label(&c.metadata, managed) == Some("flotilla-config-copier")).await;
    api.patch(
        "cfg",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {RULE_LABEL: null}}, "data": {"k": "hacked"}})),
    )
    .await
    .unwrap();
    // Left the label-selected watch: the next reconcile (touch the source) finds it by name.
    Api::<ConfigMap>::namespaced(client.clone(), &src)
        .patch("cfg", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"touched": "1"}}})))
        .await
        .unwrap();
    let back = wait_cm(&client, &dst, "cfg", |c| {
        label(&c.metadata, RULE_LABEL) == Some(format!("{src}.r").as_str()) && data(c, "k") == Some("v")
    })
    .await;
    assert_eq!(label(&back.metadata, managed), Some("flotilla-config-copier"));
}

/// A 422 that is not a type change (the copy was made immutable by hand)
/// deletes nothing: a failure in status, a Warning, a retry with backoff.
#[tokio::test]
async fn a_422_on_an_immutable_copy_deletes_nothing() {
    let (client, src) = setup("imm-src").await;
    let dst = target("imm-dst").await;
    secret(&client, &src, "creds", "Opaque", &[("copy", "yes")]).await;
    copy_rule(&client, &src, "r", "Secret", &[&dst], json!({})).await;
    let first = wait_secret(&client, &dst, "creds", |_| true).await;
    Api::<Secret>::namespaced(client.clone(), &dst)
        .patch("creds", &PatchParams::default(), &Patch::Merge(json!({"immutable": true})))
        .await
        .unwrap();
    Api::<Secret>::namespaced(client.clone(), &src)
        .patch("creds", &PatchParams::default(), &Patch::Merge(json!({"stringData": {"token-secret": "rotated"}})))
        .await
        .unwrap();
    let r = wait_rule(&client, &src, "r", |r| {
        condition(r, "Ready").is_some_and(|c| c.reason == "SyncFailed" && c.message.contains("creds"))
    })
    .await;
    assert_eq!(ready(&r), Some("False"));
    wait_event(&client, &src, "r", "SyncFailed").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = Api::<Secret>::namespaced(client.clone(), &dst).get("creds").await.unwrap();
    assert_eq!(now.metadata.uid, first.metadata.uid, "the copy was not deleted and recreated");
}

/// Two rules want the same name in one namespace: the older wins, whatever
/// the order of names or of reconciles, and nobody flip-flops.
#[tokio::test]
async fn two_rules_one_name_the_older_wins_without_flip_flop() {
    let (client, src) = setup("race-src").await;
    let dst = target("race-dst").await;
    configmap(&client, &src, "cfg", &[("a", "1"), ("b", "1")], &[("k", "v")]).await;
    let spec = |label: &str| json!({"kind": "ConfigMap", "selector": {"matchLabels": {label: "1"}}, "namespaces": {"include": [dst.clone()]}});
    // "zz" is older although "aa" sorts first by name.
    rule(&client, &src, "zz", spec("a")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    rule(&client, &src, "aa", spec("b")).await.unwrap();
    let holder = format!("{src}.zz");
    wait_cm(&client, &dst, "cfg", |c| label(&c.metadata, RULE_LABEL) == Some(holder.as_str())).await;
    let r = wait_rule(&client, &src, "aa", |r| r.status.as_ref().is_some_and(|s| s.conflicts == 1)).await;
    assert_eq!(r.status.unwrap().conflicting[0].reason, "ClaimedByAnotherRule");
    // Its Warning says the same: conflicts are warned about once, and a
    // decision taken against the older rule's fresh copy with the claims as
    // planned (both rules woken by one list) once said OwnedByAnotherRule.
    wait_event(&client, &src, "aa", "Conflict").await;
    let warnings: Vec<String> = Api::<Event>::namespaced(client.clone(), &src)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("aa"))
        .filter(|e| e.reason.as_deref() == Some("Conflict"))
        .filter_map(|e| e.note)
        .collect();
    assert!(warnings.iter().all(|n| n.contains("ClaimedByAnotherRule")), "{warnings:?}");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &dst);
    let rv = api.get("cfg").await.unwrap().metadata.resource_version;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let later = api.get("cfg").await.unwrap();
    assert_eq!(later.metadata.resource_version, rv, "no flip-flop");
    assert_eq!(label(&later.metadata, RULE_LABEL), Some(holder.as_str()));
    // A new namespace: still the older rule's.
    let fresh = target("race-new").await;
    for name in ["zz", "aa"] {
        Api::<CopyRule>::namespaced(client.clone(), &src)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"namespaces": {"include": [dst.clone(), fresh.clone()]}}})),
            )
            .await
            .unwrap();
    }
    wait_cm(&client, &fresh, "cfg", |c| label(&c.metadata, RULE_LABEL) == Some(holder.as_str())).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let c = Api::<ConfigMap>::namespaced(client.clone(), &fresh).get("cfg").await.unwrap();
    assert_eq!(label(&c.metadata, RULE_LABEL), Some(holder.as_str()));
}

/// `spec.names` copies a cert-manager-style Secret: no labels, controlled
/// by another controller (which a selector alone skips).
#[tokio::test]
async fn names_copy_a_cert_manager_style_secret() {
    let (client, src) = setup("names-src").await;
    let dst = target("names-dst").await;
    let owner = ConfigMap { metadata: meta("certificate-stand-in", &[]), ..Default::default() };
    let owner =
        Api::<ConfigMap>::namespaced(client.clone(), &src).create(&PostParams::default(), &owner).await.unwrap();
    let tls: Secret = serde_json::from_value(json!({
        "metadata": {"name": "web-tls", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "certificate-stand-in",
            "uid": owner.metadata.uid, "controller": true}]},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": "CERT", "tls.key": "KEY"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &src).create(&PostParams::default(), &tls).await.unwrap();
    rule(
        &client,
        &src,
        "by-label",
        json!({"kind": "Secret", "selector": {}, "namespaces": {"include": [dst.clone()]}}),
    )
    .await
    .unwrap();
    let r = wait_rule(&client, &src, "by-label", |r| r.status.as_ref().is_some_and(|s| !s.skipped.is_empty())).await;
    assert_eq!(r.status.unwrap().skipped[0].reason, "ControlledByAnotherController");
    delete_rule(&client, &src, "by-label").await;
    rule(
        &client,
        &src,
        "by-name",
        json!({"kind": "Secret", "names": ["web-tls"], "namespaces": {"include": [dst.clone()]}}),
    )
    .await
    .unwrap();
    let copy = wait_secret(&client, &dst, "web-tls", |_| true).await;
    assert_eq!(copy.type_.as_deref(), Some("kubernetes.io/tls"));
    assert!(copy.metadata.owner_references.is_none(), "the controller's reference is not copied");
    // Neither names nor selector: refused at admission.
    match raw_rule(&client, &src, "nothing", json!({"kind": "Secret"})).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 422),
        other => panic!("accepted: {other:?}"),
    }
}

/// A denied delete keeps the finalizer (status says so, retried with
/// backoff), and `prune: false` is the escape.
#[tokio::test]
async fn a_stuck_finalizer_has_a_tested_escape() {
    let (client, src) = setup("fin-src").await;
    let dst = target("fin-dst").await;
    configmap(&client, &src, "cfg", &[("copy", "yes")], &[("k", "v")]).await;
    copy_rule(&client, &src, "r", "ConfigMap", &[&dst], json!({})).await;
    wait_cm(&client, &dst, "cfg", |_| true).await;
    deny_configmap_deletes(&client, &dst).await;
    let rules: Api<CopyRule> = Api::namespaced(client.clone(), &src);
    rules.delete("r", &DeleteParams::default()).await.unwrap();
    let r = wait_rule(&client, &src, "r", |r| condition(r, "Ready").is_some_and(|c| c.reason == "PruneFailed")).await;
    assert!(r.metadata.deletion_timestamp.is_some());
    wait_event(&client, &src, "r", "PruneFailed").await;
    rules.patch("r", &PatchParams::default(), &Patch::Merge(json!({"spec": {"prune": false}}))).await.unwrap();
    flotilla_testenv::wait_for("the rule to go", T, || {
        let rules = rules.clone();
        async move { Ok::<_, kube::Error>(rules.get_opt("r").await?.is_none().then_some(())) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", log_tail()));
    assert!(Api::<ConfigMap>::namespaced(client.clone(), &dst).get_opt("cfg").await.unwrap().is_some());
}

/// A ValidatingAdmissionPolicy refusing every ConfigMap delete in `ns`.
async fn deny_configmap_deletes(client: &Client, ns: &str) {
    deny_in_namespace(client, &format!("deny-deletes-{ns}"), ns, "", "configmaps", "DELETE").await;
    // The policy is enforced once the API server has loaded it: wait for a denied delete.
    flotilla_testenv::wait_for("the delete-denying policy to be enforced", T, || async {
        let probe = format!("probe-{}", rand_suffix());
        configmap(client, ns, &probe, &[], &[]).await;
        match Api::<ConfigMap>::namespaced(client.clone(), ns).delete(&probe, &DeleteParams::default()).await {
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => Ok::<_, kube::Error>(Some(())),
            Ok(_) => Ok(None),
            Err(e) => Err(e),
        }
    })
    .await
    .unwrap();
}

/// Sum of the `Conflict` Warnings about `rule`, counting each Event's series.
async fn conflict_warnings(client: &Client, ns: &str, rule: &str) -> i32 {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(rule))
        .filter(|e| e.reason.as_deref() == Some("Conflict"))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

/// More than 20 conflicts (more than status lists and more than one
/// reconcile reports as Events): the Warnings are sent once, not again at
/// every reconcile of the rule.
#[tokio::test]
async fn many_conflicts_are_warned_about_once() {
    let (client, src) = setup("noisy-src").await;
    let mut targets = Vec::new();
    for _ in 0..24 {
        let dst = target("noisy-dst").await;
        configmap(&client, &dst, "cfg", &[], &[("k", "theirs")]).await;
        targets.push(dst);
    }
    configmap(&client, &src, "cfg", &[("copy", "yes")], &[("k", "ours")]).await;
    let refs: Vec<&str> = targets.iter().map(String::as_str).collect();
    copy_rule(&client, &src, "r", "ConfigMap", &refs, json!({})).await;
    let r = wait_rule(&client, &src, "r", |r| r.status.as_ref().is_some_and(|s| s.conflicts == 24)).await;
    assert_eq!(r.status.unwrap().conflicting.len(), 20, "status lists at most 20");
    // Five conflicts by name and one "19 more" (the Event publisher is asynchronous).
    wait_for("the first Conflict Warnings", T, || async {
        Ok::<_, String>((conflict_warnings(&client, &src, "r").await == 6).then_some(()))
    })
    .await
    .unwrap();

    // Three more reconciles, each seen through observedGeneration (a spec
    // change that leaves the conflicts as they are).
    let rules: Api<CopyRule> = Api::namespaced(client.clone(), &src);
    for prune in [false, true, false] {
        let r =
            rules.patch("r", &PatchParams::default(), &Patch::Merge(json!({"spec": {"prune": prune}}))).await.unwrap();
        let generation = r.metadata.generation;
        wait_rule(&client, &src, "r", |r| {
            r.status.as_ref().is_some_and(|s| s.observed_generation == generation && s.conflicts == 24)
        })
        .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(conflict_warnings(&client, &src, "r").await, 6, "Conflict Warnings repeated by later reconciles");
}

/// A Secret of `bytes` random-looking bytes (700 KB as in issue 27).
async fn big_secret(client: &Client, ns: &str, name: &str, bytes: usize) {
    let payload: Vec<u8> = (0..bytes).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let s = Secret {
        metadata: meta(name, &[]),
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([("blob".to_string(), ByteString(payload))])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), ns).create(&PostParams::default(), &s).await.unwrap();
}

/// Issue 27: `selector: {}` over a namespace of large Secrets made the
/// operator hold every payload (and OOM at the chart's 128Mi, again at every
/// start). Now a rule whose sources exceed `--max-rule-source-bytes` (16Mi)
/// is `Ready=False SourcesTooLarge` with a Warning and copies nothing, while
/// another rule over the same namespace copies on; once the sources fit,
/// the rule copies. (Memory itself is the bench's: `cargo xtask bench
/// config-copier`, attack phase.)
#[tokio::test]
async fn sources_over_the_rule_budget_are_refused_and_other_rules_go_on() {
    let (client, src) = setup("budget-src").await;
    let (dst, dst2) = (target("budget-dst").await, target("budget-one").await);
    // 24 x 700 KB: 22.4 MB as held (base64), over 16 MiB.
    for i in 0..24 {
        big_secret(&client, &src, &format!("big-{i:02}"), 700_000).await;
    }
    rule(&client, &src, "all", json!({"kind": "Secret", "selector": {}, "namespaces": {"include": [dst.clone()]}}))
        .await
        .unwrap();
    rule(
        &client,
        &src,
        "one",
        json!({"kind": "Secret", "names": ["big-00"], "namespaces": {"include": [dst2.clone()]}}),
    )
    .await
    .unwrap();

    let r =
        wait_rule(&client, &src, "all", |r| condition(r, "Ready").is_some_and(|c| c.reason == "SourcesTooLarge")).await;
    let c = condition(&r, "Ready").unwrap();
    assert_eq!(c.status, "False");
    assert!(c.message.contains("24 sources") && c.message.contains("--max-rule-source-bytes"), "{}", c.message);
    wait_event(&client, &src, "all", "SourcesTooLarge").await;
    // The other rule copies its one source meanwhile.
    let copy = wait_secret(&client, &dst2, "big-00", |_| true).await;
    assert_eq!(copy.data.as_ref().and_then(|d| d.get("blob")).map(|b| b.0.len()), Some(700_000));
    wait_rule(&client, &src, "one", |r| ready(r) == Some("True")).await;
    let copies = Api::<Secret>::all(client.clone())
        .list_metadata(&ListParams::default().labels(&format!("{RULE_LABEL}={src}.all")))
        .await
        .unwrap();
    assert!(copies.items.is_empty(), "a rule over its budget copied {} Secrets", copies.items.len());

    // Down to 14 (13.1 MB): it fits, and copies.
    for i in 14..24 {
        Api::<Secret>::namespaced(client.clone(), &src)
            .delete(&format!("big-{i:02}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    wait_rule(&client, &src, "all", |r| ready(r) == Some("True") && r.status.as_ref().is_some_and(|s| s.copies == 14))
        .await;
    wait_secret(&client, &dst, "big-13", |_| true).await;
    for name in ["all", "one"] {
        delete_rule(&client, &src, name).await;
    }
}

/// Objects marked as a rule's copies in protected namespaces (kube-system,
/// the operator's own) were planted there — config-copier never writes
/// there. Neither a reconcile (pruning what the rule does not want) nor the
/// rule's deletion (its finalizer prunes its copies) deletes them.
#[tokio::test]
async fn copies_planted_in_protected_namespaces_are_never_pruned() {
    let (client, src) = setup("plant-src").await;
    let dst = target("plant-dst").await;
    configmap(&client, &src, "cfg", &[("copy", "yes")], &[("k", "v1")]).await;
    copy_rule(&client, &src, "r", "ConfigMap", &[&dst], json!({})).await;
    wait_cm(&client, &dst, "cfg", |c| data(c, "k") == Some("v1")).await;
    let uid = Api::<CopyRule>::namespaced(client.clone(), &src).get("r").await.unwrap().metadata.uid.unwrap();

    let planted = format!("planted-{}", rand_suffix());
    for ns in ["kube-system", OPERATOR_NAMESPACE] {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {
                "name": planted,
                "labels": {RULE_LABEL: format!("{src}.r"), "app.kubernetes.io/managed-by": "flotilla-config-copier"},
                "annotations": {
                    "flotilla.dev/copy-rule": format!("{src}/r"),
                    "flotilla.dev/copy-rule-uid": uid,
                    "flotilla.dev/source": format!("{src}/{planted}"),
                }
            },
            "data": {"k": "important"}
        }))
        .unwrap();
        Api::<ConfigMap>::namespaced(client.clone(), ns).create(&PostParams::default(), &cm).await.unwrap();
    }
    let survives = |why: &'static str| {
        let (client, planted) = (client.clone(), planted.clone());
        async move {
            for ns in ["kube-system", OPERATOR_NAMESPACE] {
                let there = Api::<ConfigMap>::namespaced(client.clone(), ns).get_opt(&planted).await.unwrap();
                assert!(there.is_some(), "{ns}/{planted} was deleted {why}\n{}", log_tail());
            }
        }
    };
    // A reconcile after the planting: the source changes, the copy follows.
    Api::<ConfigMap>::namespaced(client.clone(), &src)
        .patch("cfg", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v2"}})))
        .await
        .unwrap();
    wait_cm(&client, &dst, "cfg", |c| data(c, "k") == Some("v2")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    survives("by a reconcile").await;

    // The rule deleted: its real copy is pruned, the planted ones stay.
    delete_rule(&client, &src, "r").await;
    wait_cm_gone(&client, &dst, "cfg").await;
    wait_for("the rule to go", T, || {
        let api = Api::<CopyRule>::namespaced(client.clone(), &src);
        async move { Ok::<_, kube::Error>(api.get_opt("r").await?.is_none().then_some(())) }
    })
    .await
    .unwrap();
    survives("by the rule's deletion").await;
    for ns in ["kube-system", OPERATOR_NAMESPACE] {
        let _ = Api::<ConfigMap>::namespaced(client.clone(), ns).delete(&planted, &DeleteParams::default()).await;
    }
}
