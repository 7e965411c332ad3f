//! `AdmissionGuard` against the real API: the guarded powers are refused
//! while the policy or its binding is missing or does not deny, and come
//! back (with a change signalled) once both are in place; an API server
//! outage is not taken for a missing policy.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use flotilla_shared::AdmissionGuard;
use flotilla_testenv::{Assets, ControlPlane, Lifetime, Options, shared, wait_for};
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn policy(name: &str, failure: &str) -> ValidatingAdmissionPolicy {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": failure,
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["flotilla.dev"], "apiVersions": ["*"],
                "operations": ["CREATE"], "resources": ["widgets"]
            }]},
            "validations": [{"expression": "true"}]
        }
    }))
    .unwrap()
}

fn binding(name: &str, policy: &str, action: &str) -> ValidatingAdmissionPolicyBinding {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"policyName": policy, "validationActions": [action]}
    }))
    .unwrap()
}

#[tokio::test]
async fn guarded_powers_are_refused_until_the_policy_and_a_denying_binding_exist() {
    let env = shared();
    let client = env.client().await;
    let name = format!("guard-{:08x}", rand::random::<u32>());
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let gauge = prometheus::IntGauge::new("in_place", "test").unwrap();
    let shutdown = CancellationToken::new();
    let period = Duration::from_millis(200);
    let guard = AdmissionGuard::start(client.clone(), name.clone(), gauge.clone(), shutdown.clone(), period).await;
    let mut changes = Box::pin(guard.changes());

    let why = guard.check().unwrap_err();
    assert!(why.contains(&name) && why.contains("no ValidatingAdmissionPolicy"), "{why}");
    assert_eq!(gauge.get(), 0);

    // A policy that lets requests through when it fails is no guard.
    policies.create(&PostParams::default(), &policy(&name, "Ignore")).await.unwrap();
    let refused = |what: &'static str| {
        let guard = guard.clone();
        async move {
            wait_for(what, Duration::from_secs(10), || async {
                Ok::<_, String>(guard.check().err().filter(|w| w.contains(what)).map(|_| ()))
            })
            .await
            .unwrap();
        }
    };
    refused("failurePolicy is Ignore").await;
    policies.delete(&name, &DeleteParams::default()).await.unwrap();
    policies.create(&PostParams::default(), &policy(&name, "Fail")).await.unwrap();
    refused("no ValidatingAdmissionPolicyBinding").await;
    // A binding that only warns or audits does not deny.
    bindings.create(&PostParams::default(), &binding(&name, &name, "Warn")).await.unwrap();
    refused("does not deny").await;
    bindings.delete(&name, &DeleteParams::default()).await.unwrap();
    bindings.create(&PostParams::default(), &binding(&name, &name, "Deny")).await.unwrap();

    // In place: allowed, the change signalled, the gauge 1.
    tokio::time::timeout(Duration::from_secs(10), changes.next()).await.unwrap();
    assert_eq!(guard.check(), Ok(()));
    assert_eq!(gauge.get(), 1);

    // Deleted again: refused again, and signalled.
    bindings.delete(&name, &DeleteParams::default()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), changes.next()).await.unwrap();
    assert!(guard.check().is_err());
    assert_eq!(gauge.get(), 0);
    shutdown.cancel();
    policies.delete(&name, &DeleteParams::default()).await.unwrap();
}

/// Before 6bbe0cc an unreachable API server read as "no policy": every
/// guarded power (pod-alert's `allNamespaces`, …) was refused for the
/// length of an outage and its label keys dropped, the pod watch listing
/// again after it. The verdict in place is now kept until the API answers.
#[tokio::test]
async fn the_verdict_in_place_is_kept_through_an_api_server_outage() {
    let assets = Assets::locate().unwrap();
    let dir = std::env::temp_dir().join(format!("flotilla-guard-outage-{}", std::process::id()));
    let mut cp =
        ControlPlane::start(&assets, &Options { dir: dir.clone(), lifetime: Lifetime::DieWithParent }).await.unwrap();
    let client = cp.client().await.unwrap();
    let name = "guard-outage".to_string();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    policies.create(&PostParams::default(), &policy(&name, "Fail")).await.unwrap();
    bindings.create(&PostParams::default(), &binding(&name, &name, "Deny")).await.unwrap();
    let gauge = prometheus::IntGauge::new("in_place", "test").unwrap();
    let shutdown = CancellationToken::new();
    let period = Duration::from_millis(200);
    let guard = AdmissionGuard::start(client.clone(), name.clone(), gauge.clone(), shutdown.clone(), period).await;
    assert_eq!(guard.check(), Ok(()));
    let mut changes = Box::pin(guard.changes());

    cp.stop_api_server();
    // Twenty checks and more against a closed port.
    for _ in 0..20 {
        tokio::time::sleep(period).await;
        assert_eq!(guard.check(), Ok(()), "the API server is down, the policy is not gone");
        assert_eq!(gauge.get(), 1);
    }
    cp.start_api_server().await.unwrap();
    tokio::time::sleep(period * 5).await;
    assert_eq!(guard.check(), Ok(()));
    assert!(
        tokio::time::timeout(Duration::from_millis(100), changes.next()).await.is_err(),
        "no change was signalled: nothing changed"
    );

    // And the guard still reads: the binding deleted after the outage is seen.
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(cp.client().await.unwrap());
    bindings.delete(&name, &DeleteParams::default()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), changes.next()).await.unwrap();
    assert!(guard.check().is_err());
    shutdown.cancel();
    cp.stop();
    let _ = std::fs::remove_dir_all(dir);
}
