//! `spec.rolloutOnChange` against a real control plane (issue 31): the
//! operator runs with `--enable-rollouts` (ENABLE_ROLLOUTS) and the RBAC the
//! chart adds with `rollouts.enabled` — a test binary of its own, so that
//! the other tests' operator keeps the default (no workload access).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::rbac;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const COPY_HASH: &str = "flotilla.dev/copy-hash";

/// A one-replica Deployment whose container takes `envFrom` the ConfigMap `consumes`.
async fn deployment(client: &Client, ns: &str, name: &str, consumes: &str) {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "app", "image": "busybox:latest",
                    "envFrom": [{"configMapRef": {"name": consumes}}],
                }]},
            },
        },
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), ns).create(&PostParams::default(), &d).await.unwrap();
}

/// [`setup`] with the operator as the chart runs it with
/// `rollouts.enabled`: `--enable-rollouts` and list/patch on workloads
/// (every test of this binary asks the same; the first one starts it).
async fn setup_with_rollouts(prefix: &str) -> (Client, String) {
    OPERATOR_ENV.lock().unwrap().push(("ENABLE_ROLLOUTS", "true".to_string()));
    OPERATOR_EXTRA_RULES.lock().unwrap().push(rbac::rule(
        &["apps"],
        &["deployments", "statefulsets", "daemonsets"],
        &["list", "patch"],
    ));
    setup(prefix).await
}

/// `(metadata.generation, the pod template's copy hash)`.
async fn rolled(client: &Client, ns: &str, name: &str) -> (i64, Option<String>) {
    let d = Api::<Deployment>::namespaced(client.clone(), ns).get(name).await.unwrap();
    let hash =
        d.spec.and_then(|s| s.template.metadata).and_then(|m| m.annotations).and_then(|a| a.get(COPY_HASH).cloned());
    (d.metadata.generation.unwrap_or_default(), hash)
}

async fn wait_generation(client: &Client, ns: &str, name: &str, generation: i64) -> Option<String> {
    let mut last = (0, None);
    for _ in 0..200 {
        last = rolled(client, ns, name).await;
        if last.0 == generation {
            return last.1;
        }
        assert!(last.0 < generation, "{ns}/{name} rolled more than once: {last:?}\n{}", log_tail());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{ns}/{name} never reached generation {generation}: {last:?}\n{}", log_tail());
}

async fn set_data(client: &Client, ns: &str, name: &str, value: &str) {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(json!({"data": {"mode": value}})))
        .await
        .unwrap();
}

/// A changed copy rolls the Deployment consuming it once per change, in a
/// namespace that accepts rollouts only; a resync or a change that leaves
/// the data as it was rolls nothing; an unrelated Deployment and one in a
/// namespace without `accept-rollouts` are never touched.
#[tokio::test]
async fn a_changed_copy_rolls_its_consumers_once_where_the_namespace_accepts_rollouts() {
    let (client, src) = setup_with_rollouts("roll-src").await;
    let accepting = target("roll-yes").await;
    label_namespace(&client, &accepting, "flotilla.dev/accept-rollouts", Some("true")).await;
    let refusing = target("roll-no").await;
    configmap(&client, &src, "settings", &[("copy", "yes")], &[("mode", "one")]).await;
    deployment(&client, &accepting, "app", "settings").await;
    deployment(&client, &accepting, "unrelated", "something-else").await;
    deployment(&client, &refusing, "app", "settings").await;

    copy_rule(&client, &src, "roll", "ConfigMap", &[&accepting, &refusing], json!({"rolloutOnChange": true})).await;
    let r = wait_rule(&client, &src, "roll", |r| {
        ready(r) == Some("True") && condition(r, "RolloutOnChange").is_some_and(|c| c.reason == "SomeNamespacesRefuse")
    })
    .await;
    let c = condition(&r, "RolloutOnChange").unwrap();
    assert!(c.message.contains("1 of 2 target namespaces"), "{c:?}");
    for ns in [&accepting, &refusing] {
        wait_cm(&client, ns, "settings", |c| data(c, "mode") == Some("one")).await;
    }
    // The first copy is a creation: nothing rolls.
    assert_eq!(rolled(&client, &accepting, "app").await, (1, None), "a copy's creation rolls nothing");

    // A change of the data: the consumer rolls once, to the copy's data hash.
    set_data(&client, &src, "settings", "two").await;
    wait_cm(&client, &accepting, "settings", |c| data(c, "mode") == Some("two")).await;
    let first = wait_generation(&client, &accepting, "app", 2).await.expect("a copy hash");
    assert!(first.starts_with("sha256:"), "{first}");
    wait_event(&client, &src, "roll", "RolledOut").await;

    // A resync and a change that leaves the data as it was (a label: the
    // copy is updated, its data hash is the same): nothing rolls.
    Api::<ConfigMap>::namespaced(client.clone(), &src)
        .patch("settings", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"tier": "x"}}})))
        .await
        .unwrap();
    wait_cm(&client, &accepting, "settings", |c| label(&c.metadata, "tier") == Some("x")).await;
    Api::<CopyRule>::namespaced(client.clone(), &src)
        .patch("roll", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"resync": "1"}}})))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(rolled(&client, &accepting, "app").await, (2, Some(first.clone())), "same data, no roll");

    // Another change: exactly one more roll, to another hash.
    set_data(&client, &src, "settings", "three").await;
    let second = wait_generation(&client, &accepting, "app", 3).await.expect("a copy hash");
    assert_ne!(second, first);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(rolled(&client, &accepting, "app").await.0, 3, "one change, one roll");

    // Never touched: a Deployment consuming something else, and the
    // consumer in the namespace without accept-rollouts (its copy follows).
    assert_eq!(rolled(&client, &accepting, "unrelated").await, (1, None));
    wait_cm(&client, &refusing, "settings", |c| data(c, "mode") == Some("three")).await;
    assert_eq!(rolled(&client, &refusing, "app").await, (1, None), "no accept-rollouts: left alone");

    Api::<CopyRule>::namespaced(client.clone(), &src).delete("roll", &DeleteParams::default()).await.unwrap();
    wait_cm_gone(&client, &accepting, "settings").await;
}

/// A rollout the API refuses (here a cluster policy denying Deployment
/// updates in the target namespace) is said in status and tried again at
/// the rule's retry, though the copy is in sync by then: once the policy
/// is lifted the consumer rolls, once, to the copy's data hash.
#[tokio::test]
async fn a_refused_rollout_is_tried_again_until_it_lands() {
    let (client, src) = setup_with_rollouts("retry-src").await;
    let dst = target("retry-dst").await;
    label_namespace(&client, &dst, "flotilla.dev/accept-rollouts", Some("true")).await;
    configmap(&client, &src, "settings", &[("copy", "yes")], &[("mode", "one")]).await;
    deployment(&client, &dst, "app", "settings").await;
    copy_rule(&client, &src, "roll", "ConfigMap", &[&dst], json!({"rolloutOnChange": true})).await;
    wait_cm(&client, &dst, "settings", |c| data(c, "mode") == Some("one")).await;
    wait_rule(&client, &src, "roll", |r| ready(r) == Some("True")).await;

    let policy = format!("deny-rollouts-{dst}");
    deny_in_namespace(&client, &policy, &dst, "apps", "deployments", "UPDATE").await;
    let deployments = Api::<Deployment>::namespaced(client.clone(), &dst);
    flotilla_testenv::wait_for("the update-denying policy to be enforced", T, || async {
        let probe = json!({"metadata": {"labels": {"probe": rand_suffix()}}});
        match deployments.patch("app", &PatchParams::default(), &Patch::Merge(&probe)).await {
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => Ok::<_, kube::Error>(Some(())),
            Ok(_) => Ok(None),
            Err(e) => Err(e),
        }
    })
    .await
    .unwrap();

    set_data(&client, &src, "settings", "two").await;
    wait_cm(&client, &dst, "settings", |c| data(c, "mode") == Some("two")).await;
    let r = wait_rule(&client, &src, "roll", |r| {
        condition(r, "Ready").is_some_and(|c| c.reason == "SyncFailed" && c.message.contains("rolling"))
    })
    .await;
    assert!(condition(&r, "Ready").unwrap().message.contains(&format!("{dst}/Deployment/app")), "{r:?}");
    assert_eq!(rolled(&client, &dst, "app").await, (1, None), "refused: not rolled");

    // Lifted: the retry (1 s doubling, a few seconds in by now) rolls it.
    remove_deny_policy(&client, &policy).await;
    let hash = wait_generation(&client, &dst, "app", 2).await.expect("a copy hash");
    assert!(hash.starts_with("sha256:"), "{hash}");
    wait_rule(&client, &src, "roll", |r| ready(r) == Some("True")).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(rolled(&client, &dst, "app").await, (2, Some(hash)), "rolled once");

    Api::<CopyRule>::namespaced(client.clone(), &src).delete("roll", &DeleteParams::default()).await.unwrap();
    wait_cm_gone(&client, &dst, "settings").await;
}
