//! Two config-copier installations, each with `--watch-namespace`, on one
//! cluster: neither takes, overwrites or prunes the other's copies, even
//! with `onConflict: Overwrite` in a namespace that accepts overwrites.
//! And an installation whose RBAC withholds a kind says so on the rules
//! that need it; one under its chart's memory limit outlives a tenant's
//! bloated objects.
//! A test binary of its own: the other suites run one operator that
//! watches every namespace, which would handle these rules itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::cluster::process::OperatorProcess;
use flotilla_testenv::rbac::{self, Scope, account_with};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;

const RULE_LABEL: &str = "flotilla.dev/copy-rule";

fn installation(env: &flotilla_testenv::TestEnv, namespace: &str) -> OperatorProcess {
    OPERATOR.start(&env.kubeconfig, Some(namespace), &[], &[])
}

#[tokio::test]
async fn two_installations_never_take_each_others_copies() {
    let env = flotilla_testenv::shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let (a, b, dst) = (target("inst-a").await, target("inst-b").await, target("inst-dst").await);
    label_namespace(&client, &dst, "flotilla.dev/accept-overwrite", Some("true")).await;
    let op_a = installation(&env, &a);
    let op_b = installation(&env, &b);
    let logs = || format!("installation A:\n{}\ninstallation B:\n{}", op_a.logs(), op_b.logs());

    configmap(&client, &a, "cfg", &[("copy", "yes")], &[("k", "from-a")]).await;
    configmap(&client, &b, "cfg", &[("copy", "yes")], &[("k", "from-b")]).await;
    copy_rule(&client, &a, "r", "ConfigMap", &[&dst], json!({})).await;
    let holder = format!("{a}.r");
    let copies: Api<ConfigMap> = Api::namespaced(client.clone(), &dst);
    wait_cm(&client, &dst, "cfg", |c| data(c, "k") == Some("from-a")).await;

    // B's rule wants the same object and may overwrite: it reports A's copy
    // as another installation's and leaves it alone.
    copy_rule(&client, &b, "r", "ConfigMap", &[&dst], json!({"onConflict": "Overwrite"})).await;
    let r = wait_rule(&client, &b, "r", |r| r.status.as_ref().is_some_and(|s| s.conflicts == 1)).await;
    let c = &r.status.unwrap().conflicting[0];
    assert_eq!(c.reason, "OwnedByAnotherRule", "{}", logs());
    assert!(c.message.contains("another config-copier installation"), "{c:?}");
    let rv = copies.get("cfg").await.unwrap().metadata.resource_version;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let copy = copies.get("cfg").await.unwrap();
    assert_eq!(copy.metadata.resource_version, rv, "installation B wrote A's copy\n{}", logs());
    assert_eq!(label(&copy.metadata, RULE_LABEL), Some(holder.as_str()));

    // Deleting B's rule prunes only what B made: A's copy stays, A's rule Ready.
    Api::<CopyRule>::namespaced(client.clone(), &b).delete("r", &DeleteParams::default()).await.unwrap();
    flotilla_testenv::wait_for("B's rule to be deleted (its finalizer done)", T, || async {
        let gone = Api::<CopyRule>::namespaced(client.clone(), &b).get_opt("r").await.map_err(|e| e.to_string())?;
        Ok::<_, String>(gone.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    let copy = copies.get("cfg").await.unwrap();
    assert_eq!(data(&copy, "k"), Some("from-a"));
    assert_eq!(copy.metadata.resource_version, rv, "B's rule deletion touched A's copy");
    wait_rule(&client, &a, "r", |r| ready(r) == Some("True")).await;

    // A's own rule deleted: A still prunes its copy.
    Api::<CopyRule>::namespaced(client.clone(), &a).delete("r", &DeleteParams::default()).await.unwrap();
    wait_cm_gone(&client, &dst, "cfg").await;
    drop((op_a, op_b));
}

/// An installation whose RBAC withholds Secrets (an admin's choice or a
/// mistake): a Secret rule says why it waits — `Ready=False`,
/// `SourcesUnavailable`, naming the failing watch and the API server's
/// refusal, and whose it is to fix (the cluster admin's), and a Warning —
/// rather than waiting silently; a ConfigMap rule beside it copies, and is
/// deleted with its copies pruned (the Secrets the RBAC withholds neither
/// hold it back nor keep its finalizer), and so is a Secret rule (its copy
/// watch never listed: there are no copies it could have written); once the RBAC allows Secrets, the
/// watch's recovery wakes the Secret rule and it copies.
#[tokio::test]
async fn a_kind_the_rbac_withholds_is_named_on_the_rule() {
    let env = flotilla_testenv::shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let (ns, dst) = (target("rbac-src").await, target("rbac-dst").await);
    let role = format!("cc-test-{ns}");
    let mut without_secrets = rbac_rules();
    for r in &mut without_secrets {
        if let Some(resources) = &mut r.resources {
            resources.retain(|x| x != "secrets");
        }
    }
    let kubeconfig = account_with(&env, Scope::Cluster, &role, &ns, "config-copier", without_secrets).await;
    let op = OPERATOR.start(&kubeconfig, Some(&ns), &[], &[]);

    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    let secret = serde_json::from_value(json!({
        "metadata": {"name": "creds", "labels": {"copy": "yes"}},
        "stringData": {"k": "v"},
    }))
    .unwrap();
    secrets.create(&Default::default(), &secret).await.unwrap();
    copy_rule(&client, &ns, "s", "Secret", &[&dst], json!({})).await;
    let unavailable = |r: &CopyRule| condition(r, "Ready").is_some_and(|c| c.reason == "SourcesUnavailable");
    let r = flotilla_testenv::wait_for("the rule to say its sources are unavailable", T, || {
        let api = Api::<CopyRule>::namespaced(client.clone(), &ns);
        async move { Ok::<_, kube::Error>(api.get_opt("s").await?.filter(|r| unavailable(r))) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", op.logs()));
    let c = condition(&r, "Ready").unwrap();
    assert_eq!(c.status, "False");
    assert!(c.message.contains("secrets") && c.message.contains("forbidden"), "{c:?}");
    assert!(c.message.contains("a cluster admin grants"), "whose it is to fix: {c:?}");
    let event = wait_event(&client, &ns, "s", "SourcesUnavailable").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    // ConfigMaps are allowed: their rule is served meanwhile.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm = serde_json::from_value(
        json!({"metadata": {"name": "settings", "labels": {"copy": "yes"}}, "data": {"k": "v"}}),
    )
    .unwrap();
    cms.create(&Default::default(), &cm).await.unwrap();
    copy_rule(&client, &ns, "c", "ConfigMap", &[&dst], json!({})).await;
    wait_cm(&client, &dst, "settings", |c| c.data.as_ref().and_then(|d| d.get("k")).map(String::as_str) == Some("v"))
        .await;
    wait_rule(&client, &ns, "c", |r| ready(r) == Some("True")).await;
    Api::<CopyRule>::namespaced(client.clone(), &ns).delete("c", &DeleteParams::default()).await.unwrap();
    wait_cm_gone(&client, &dst, "settings").await;
    flotilla_testenv::wait_for("the ConfigMap rule gone (its finalizer removed)", T, || {
        let api = Api::<CopyRule>::namespaced(client.clone(), &ns);
        async move { Ok::<_, kube::Error>(api.get_opt("c").await?.is_none().then_some(())) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", op.logs()));

    // A Secret rule deleted while Secrets are withheld: the operator could
    // not have written its copies (its copy watch never listed), so the
    // prune's refusal for that kind does not keep the finalizer.
    copy_rule(&client, &ns, "s2", "Secret", &[&dst], json!({})).await;
    flotilla_testenv::wait_for("the second Secret rule to say its sources are unavailable", T, || {
        let api = Api::<CopyRule>::namespaced(client.clone(), &ns);
        async move { Ok::<_, kube::Error>(api.get_opt("s2").await?.filter(|r| unavailable(r))) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", op.logs()));
    Api::<CopyRule>::namespaced(client.clone(), &ns).delete("s2", &DeleteParams::default()).await.unwrap();
    flotilla_testenv::wait_for("the Secret rule gone while Secrets are withheld (its finalizer removed)", T, || {
        let api = Api::<CopyRule>::namespaced(client.clone(), &ns);
        async move { Ok::<_, kube::Error>(api.get_opt("s2").await?.is_none().then_some(())) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", op.logs()));

    // Granted: the rule copies without being touched.
    rbac::grant(&env, Scope::Cluster, &role, &ns, "config-copier", rbac_rules()).await;
    flotilla_testenv::wait_for("the Secret copied once the RBAC allows it", T, || {
        let api = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &dst);
        async move { Ok::<_, kube::Error>(api.get_opt("creds").await?.map(|_| ())) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", op.logs()));
    wait_rule(&client, &ns, "s", |r| ready(r) == Some("True")).await;

    Api::<CopyRule>::namespaced(client.clone(), &ns).delete("s", &DeleteParams::default()).await.unwrap();
    flotilla_testenv::wait_for("the copy pruned with its rule", T, || {
        let api = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &dst);
        async move { Ok::<_, kube::Error>(api.get_opt("creds").await?.is_none().then_some(())) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", op.logs()));
    drop(op);
    rbac::revoke_cluster(&env, &role).await;
}

/// A tenant with `edit` in any namespace cannot push the operator past its
/// chart's memory limit. 320 ConfigMaps with 250 KB of annotations each
/// (the API allows 256 KiB) are 80 MB of metadata. The CopyRequest
/// controller watched every ConfigMap's metadata with `resourceVersion=0`,
/// which the API server answers from its cache in one piece whatever the
/// page size: the body and its decoded objects, ~160 MB, and the operator
/// was OOM-killed under the chart's 128Mi at every start. Its lists now
/// stream, one object at a time. The tenant's namespace is not even one
/// this installation serves.
#[tokio::test]
async fn a_tenants_bloated_objects_cannot_push_it_past_the_charts_memory_limit() {
    use flotilla_testenv::memory_limit::{MemoryLimit, bloat, chart_limit};

    let env = flotilla_testenv::shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let tenant = env.namespace("bloat").await.unwrap();
    bloat(&Api::<ConfigMap>::namespaced(client.clone(), &tenant), 320, json!({"metadata": {}})).await.unwrap();

    let (src, dst) = (target("bloat-src").await, target("bloat-dst").await);
    configmap(&client, &src, "cfg", &[("copy", "yes")], &[("k", "v")]).await;
    let limit = MemoryLimit::new("config-copier-bloat", chart_limit("config-copier").unwrap()).unwrap();
    let mut op = OPERATOR.start_limited(&env.kubeconfig, Some(&src), &[], &[], Some(&limit));
    copy_rule(&client, &src, "r", "ConfigMap", &[&dst], json!({})).await;
    // The copy; then 20 s more (its lists begin at start, and an answer
    // in one piece took seconds to arrive and be decoded).
    let copies: Api<ConfigMap> = Api::namespaced(client.clone(), &dst);
    let peak = limit
        .outlived(&mut op, "copy", T, Duration::from_secs(20), || {
            let copies = copies.clone();
            async move { copies.get_opt("cfg").await.ok().flatten().is_some() }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("peak memory under the chart's limit: {peak:?} bytes");
    drop(op);
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client).delete(&tenant, &DeleteParams::default()).await;
}

/// Nor by its own custom resources: the cache held each CopyRule whole, and
/// a tenant's 560 CopyRules with 250 KB of annotations each (140 MB) held
/// the operator past the chart's 128Mi. The cache keeps only the operators'
/// own annotations (and no managedFields); the rules are served as any.
#[tokio::test]
async fn a_tenants_bloated_rules_are_not_held_whole() {
    use flotilla_testenv::memory_limit::{MemoryLimit, bloat, chart_limit};

    let env = flotilla_testenv::shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let (src, dst) = (target("bloat-rules").await, target("bloat-rules-dst").await);
    let rule = json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "CopyRule", "metadata": {},
        "spec": {"kind": "ConfigMap", "selector": {"matchLabels": {"copy": "nothing"}}, "namespaces": {"include": [dst]}}});
    bloat(&Api::<CopyRule>::namespaced(client.clone(), &src), 560, rule).await.unwrap();
    configmap(&client, &src, "cfg", &[("copy", "yes")], &[("k", "v")]).await;
    let limit = MemoryLimit::new("config-copier-bloat-rules", chart_limit("config-copier").unwrap()).unwrap();
    let mut op = OPERATOR.start_limited(&env.kubeconfig, Some(&src), &[], &[], Some(&limit));
    copy_rule(&client, &src, "r", "ConfigMap", &[&dst], json!({})).await;
    // As many rules reconciled as there are (the cache holds them all by
    // then: its list is done), then 20 s more.
    let metrics = op.metrics_url();
    let peak = limit
        .outlived(&mut op, "561 reconciles", Duration::from_secs(120), Duration::from_secs(20), || {
            let metrics = metrics.clone();
            async move {
                let Ok((200, text)) = get(&metrics).await else { return false };
                let line = r#"controller_runtime_reconcile_total{controller="copyrule",result="success"} "#;
                let done = text.lines().find_map(|l| l.strip_prefix(line)?.trim().parse::<f64>().ok());
                done.is_some_and(|n| n >= 561.0)
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let copies: Api<ConfigMap> = Api::namespaced(client.clone(), &dst);
    assert!(copies.get_opt("cfg").await.unwrap().is_some(), "the plain rule's copy\n{}", op.logs());
    eprintln!("peak memory under the chart's limit: {peak:?} bytes");
    // Cleanup, not a check: the rules' finalizers go with the operator's
    // help, else the namespace would stay Terminating, listed again and
    // again for the rest of this binary's run.
    let rules: Api<CopyRule> = Api::namespaced(client.clone(), &src);
    let _ = rules.delete_collection(&DeleteParams::default(), &Default::default()).await;
    let _ =
        flotilla_testenv::wait_for("the bloated rules gone", Duration::from_secs(120), || {
            let rules = rules.clone();
            async move {
                Ok::<_, kube::Error>(rules.list_metadata(&Default::default()).await?.items.is_empty().then_some(()))
            }
        })
        .await;
    drop(op);
    for ns in [&src, &dst] {
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
}

/// Nor through `rolloutOnChange`: a copy's change lists the target
/// namespace's workloads, which its tenant writes. 640 Deployments (no
/// replicas) whose pod templates carry 250 KB of annotations (one of them
/// the copy-hash mark) were one 160 MB answer, held whole while decoded,
/// and the operator was OOM-killed under the chart's 128Mi at the first
/// change of the copy; listed in pages, each workload's view still kept
/// its template's copy-hash whole. Now the lists go in pages and only the
/// consumers of the changed copy are kept, with marks no longer than the
/// operator's own; the consumer still rolls.
#[tokio::test]
async fn a_tenants_bloated_workloads_cannot_push_a_rollout_past_the_charts_memory_limit() {
    use flotilla_testenv::memory_limit::{BLOAT_BYTES, MemoryLimit, chart_limit};
    use futures::StreamExt;
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Patch, PatchParams, PostParams};

    let env = flotilla_testenv::shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let (src, dst) = (target("bloat-roll-src").await, target("bloat-roll-dst").await);
    label_namespace(&client, &dst, "flotilla.dev/accept-rollouts", Some("true")).await;
    let deployment = |name: &str, consumes: &str, hash: &str| -> Deployment {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {"flotilla.dev/copy-hash": hash}},
                "spec": {"containers": [{
                    "name": "app", "image": "busybox:latest", "envFrom": [{"configMapRef": {"name": consumes}}],
                }]},
            },
        }}))
        .unwrap()
    };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &dst);
    let blob = "x".repeat(BLOAT_BYTES);
    let made: Vec<_> = futures::stream::iter(0..640)
        .map(|i| {
            let d = deployment(&format!("bloat-{i:03}"), "something-else", &blob);
            let deployments = deployments.clone();
            async move { deployments.create(&PostParams::default(), &d).await.map(|_| ()) }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    assert!(made.iter().all(Result::is_ok), "{:?}", made.iter().find(|r| r.is_err()));
    deployments.create(&PostParams::default(), &deployment("app", "settings", "none yet")).await.unwrap();
    configmap(&client, &src, "settings", &[("copy", "yes")], &[("mode", "one")]).await;

    let limit = MemoryLimit::new("config-copier-bloat-roll", chart_limit("config-copier").unwrap()).unwrap();
    let vars = [("ENABLE_ROLLOUTS", "true")];
    let mut op = OPERATOR.start_limited(&env.kubeconfig, Some(&src), &[], &vars, Some(&limit));
    copy_rule(&client, &src, "roll", "ConfigMap", &[&dst], json!({"rolloutOnChange": true})).await;
    wait_cm(&client, &dst, "settings", |c| data(c, "mode") == Some("one")).await;
    // A change of the data: the workloads listed, the consumer rolled to
    // the copy's hash (its generation 2); then 20 s more.
    Api::<ConfigMap>::namespaced(client.clone(), &src)
        .patch("settings", &PatchParams::default(), &Patch::Merge(json!({"data": {"mode": "two"}})))
        .await
        .unwrap();
    let peak = limit
        .outlived(&mut op, "the consumer rolled", T, Duration::from_secs(20), || {
            let deployments = deployments.clone();
            async move { deployments.get("app").await.is_ok_and(|d| d.metadata.generation == Some(2)) }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("peak memory under the chart's limit: {peak:?} bytes");
    let app = deployments.get("app").await.unwrap();
    assert_eq!(app.metadata.generation, Some(2), "the consumer rolled once, not again in the 20 s after");
    let bloated = deployments.get("bloat-000").await.unwrap();
    assert_eq!(bloated.metadata.generation, Some(1), "a workload consuming nothing changed was rolled");
    drop(op);
    for ns in [&src, &dst] {
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
}
