//! A Namespace's and a workload's `flotilla.dev/silence-until` annotation
//! (an admin's, a team's maintenance window), on a control plane of the
//! test's own: the operator
//! runs cluster-wide (it watches Namespaces only then), which on a shared
//! cluster would take other tests' PodAlerts. No node runs the pods: each
//! is bound to a Node object no kubelet runs and its status written as a
//! kubelet would (a crash loop); the log read fails for want of a kubelet.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::{Assets, ControlPlane, Lifetime, Options, TestEnv};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use pod_alert::crd::IncidentStatus;
use serde_json::json;

const T: Duration = Duration::from_secs(60);
const ANNOTATION: &str = "flotilla.dev/silence-until";

/// A crash-looping pod `name` in `ns`, as its kubelet would report it.
async fn crash_looping(client: &kube::Client, ns: &str, name: &str) {
    let now = Timestamp::now().to_string();
    let status = json!({
        "name": "app", "image": "busybox", "imageID": "", "ready": false, "restartCount": 3,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": now, "containerID": format!("containerd://{name}")}}
    });
    flotilla_testenv::kubelet::pod_as_kubelet_writes_it(client, ns, name, json!({"app": name}), status).await.unwrap();
}

async fn annotate(client: &kube::Client, ns: &str, value: Option<String>) {
    let patch = json!({"metadata": {"annotations": {ANNOTATION: value}}});
    Api::<Namespace>::all(client.clone()).patch(ns, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

fn incident<'a>(s: &'a PodAlertStatus, workload: &str) -> Option<&'a IncidentStatus> {
    s.incidents.iter().find(|i| i.workload == workload)
}

/// The namespace's silence covers its own PodAlert and the platform's
/// cluster-wide one (a pod's annotation covers only the first); removing
/// the annotation ends it at once (the namespace watch wakes them, well
/// before the 5-minute resync); one ending more than 7 days ahead is
/// refused with a Warning, and its namespace alerts.
#[tokio::test]
async fn a_namespaces_annotation_silences_it_for_every_podalert_until_removed() {
    let assets = Assets::locate().unwrap();
    let dir = std::env::temp_dir().join(format!("flotilla-pa-ns-silence-{}", std::process::id()));
    let cp = ControlPlane::start(&assets, &Options { dir, lifetime: Lifetime::DieWithParent }).await.unwrap();
    let env = TestEnv::of(&cp);
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let (shop, far, platform) = (
        env.namespace("shop").await.unwrap(),
        env.namespace("far").await.unwrap(),
        env.namespace("platform").await.unwrap(),
    );
    let until = Timestamp::from_second(Timestamp::now().as_second() + 3600).unwrap();
    let ten_days = Timestamp::from_second(Timestamp::now().as_second() + 10 * 86_400).unwrap();
    annotate(&client, &shop, Some(until.to_string())).await;
    annotate(&client, &far, Some(ten_days.to_string())).await;
    crash_looping(&client, &shop, "web").await;
    crash_looping(&client, &far, "api").await;
    let alert = json!({"alerts": {"checkRunningPods": true, "restartThreshold": 1}});
    create_podalert(&client, &shop, "team", alert.clone()).await.unwrap();
    let mut everywhere = alert.clone();
    everywhere["allNamespaces"] = json!(true);
    create_podalert(&client, &platform, "everything", everywhere).await.unwrap();
    let scope = format!("--cluster-scope-namespaces={platform}");
    let operator = OPERATOR.start(&env.kubeconfig, None, &[&scope], &LOOPBACK_SINKS);

    let by = format!("namespace {shop} annotation {ANNOTATION}");
    for (ns, name) in [(&shop, "team"), (&platform, "everything")] {
        let s = wait_status(&client, ns, name, "the shop's crash loop silenced", T, |s| {
            incident(s, "Pod/web").filter(|i| i.state == "Silenced").cloned()
        })
        .await;
        assert_eq!(s.silenced_by, by, "{name}");
        assert_eq!(s.silenced_until.as_ref().map(|t| t.0), Some(until), "{name}");
        assert!(!s.notified, "{name}: nothing sent for a silenced incident");
    }
    // Ten days ahead: refused, said so, and the namespace alerts.
    wait_status(&client, &platform, "everything", "far's crash loop firing", T, |s| {
        incident(s, "Pod/api").filter(|i| i.state == "Firing").map(|_| ())
    })
    .await;
    flotilla_testenv::wait_event(&client, &platform, "everything", "Warning", "SilenceRefused", T).await;

    // The admin removes the annotation: both open, without waiting for a resync.
    annotate(&client, &shop, None).await;
    for (ns, name) in [(&shop, "team"), (&platform, "everything")] {
        wait_status(&client, ns, name, "the shop's crash loop firing once unsilenced", Duration::from_secs(30), |s| {
            incident(s, "Pod/web").filter(|i| i.state == "Firing" && i.notified).map(|_| ())
        })
        .await;
    }

    // A crash loop starting later in a namespace nothing named yet: the
    // cluster-wide PodAlert reads that namespace again for the pod change
    // alone (its kept evaluation, issue 28), well before the 5-minute
    // resync or the 10-minute full pass.
    let late = env.namespace("late").await.unwrap();
    crash_looping(&client, &late, "batch").await;
    wait_status(
        &client,
        &platform,
        "everything",
        "a later namespace's crash loop firing",
        Duration::from_secs(30),
        |s| incident(s, "Pod/batch").filter(|i| i.state == "Firing").map(|_| ()),
    )
    .await;
    let logs = operator.logs();
    drop(operator);
    assert!(!logs.contains("panicked"), "{logs}");
    assert!(!logs.contains("namespace watch"), "{logs}");

    // An admin's own RBAC from before the watch (no `namespaces`): the
    // PodAlerts still alert — without namespace silences, and saying so —
    // rather than wait for a list that is refused.
    let kubeconfig = flotilla_testenv::rbac::account_with(
        &env,
        flotilla_testenv::rbac::Scope::Cluster,
        "pa-without-namespaces",
        &platform,
        "pod-alert",
        chart_rules(),
    )
    .await;
    annotate(&client, &shop, Some(until.to_string())).await;
    crash_looping(&client, &shop, "cart").await;
    let operator = OPERATOR.start(&kubeconfig, None, &[&scope], &LOOPBACK_SINKS);
    wait_status(&client, &shop, "team", "the cart's crash loop firing, unsilenced", T, |s| {
        incident(s, "Pod/cart").filter(|i| i.state == "Firing" && i.notified).map(|_| ())
    })
    .await;
    let logs = operator.logs();
    assert!(logs.contains("namespace silences are not applied"), "{logs}");
}

/// A Deployment's annotation silences its pods for the PodAlerts of its
/// namespace — the platform team's cluster-wide one too, for the pods of
/// its own namespace — and removing it opens them within seconds: the pod
/// here never changes (its status written once), so only the workload
/// watch can wake them (the resync is 5 minutes).
#[tokio::test]
async fn a_deployments_annotation_silences_its_pods_until_removed() {
    let assets = Assets::locate().unwrap();
    let dir = std::env::temp_dir().join(format!("flotilla-pa-wl-silence-{}", std::process::id()));
    let cp = ControlPlane::start(&assets, &Options { dir, lifetime: Lifetime::DieWithParent }).await.unwrap();
    let env = TestEnv::of(&cp);
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let platform = env.namespace("platform").await.unwrap();
    let until = Timestamp::from_second(Timestamp::now().as_second() + 3600).unwrap();
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "batch", "annotations": {ANNOTATION: until.to_string()}},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "batch"}},
                 "template": {"metadata": {"labels": {"app": "batch"}},
                              "spec": {"containers": [{"name": "app", "image": "busybox"}]}}}
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &platform);
    let uid = deployments.create(&Default::default(), &deployment).await.unwrap().metadata.uid.unwrap();
    // Its pod, as the kubelet would report it, owned by the Deployment
    // itself (no ReplicaSet: with none, the garbage collector keeps it).
    crash_looping(&client, &platform, "batch-1").await;
    let owner = json!({"metadata": {"ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "batch", "uid": uid, "controller": true}
    ]}});
    let pods: Api<Pod> = Api::namespaced(client.clone(), &platform);
    pods.patch("batch-1", &PatchParams::default(), &Patch::Merge(&owner)).await.unwrap();
    let alert = json!({"alerts": {"checkRunningPods": true, "restartThreshold": 1}});
    create_podalert(&client, &platform, "team", alert.clone()).await.unwrap();
    let mut everywhere = alert;
    everywhere["allNamespaces"] = json!(true);
    create_podalert(&client, &platform, "everything", everywhere).await.unwrap();
    let scope = format!("--cluster-scope-namespaces={platform}");
    let operator = OPERATOR.start(&env.kubeconfig, None, &[&scope], &LOOPBACK_SINKS);

    for name in ["team", "everything"] {
        let s = wait_status(&client, &platform, name, "batch silenced by its Deployment", T, |s| {
            incident(s, "Deployment/batch").filter(|i| i.state == "Silenced").cloned()
        })
        .await;
        assert_eq!(s.silenced_by, format!("deployment batch annotation {ANNOTATION}"), "{name}");
        assert_eq!(s.silenced_until.as_ref().map(|t| t.0), Some(until), "{name}");
    }
    let patch = json!({"metadata": {"annotations": {ANNOTATION: null}}});
    deployments.patch("batch", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    for name in ["team", "everything"] {
        wait_status(
            &client,
            &platform,
            name,
            "batch firing once its Deployment is unannotated",
            Duration::from_secs(20),
            |s| incident(s, "Deployment/batch").filter(|i| i.state == "Firing").map(|_| ()),
        )
        .await;
    }
    let logs = operator.logs();
    assert!(!logs.contains("panicked"), "{logs}");
}
