//! Helpers for load-tester's tests: the operator process, objects sent
//! untyped (as a user could), waits on status.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use flotilla_testenv::process::OperatorProcess;
use flotilla_testenv::{TestEnv, wait_for};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[allow(unused_imports)]
pub use load_tester::crd::{LoadTest, LoadTestStatus, SimpleDeployment};

/// The operator, watching `namespace` only (tests run side by side).
pub fn start_operator(env: &TestEnv, namespace: &str) -> OperatorProcess {
    let args = vec![format!("--watch-namespace={namespace}"), "--log-format=text".to_string()];
    OperatorProcess::start(&PathBuf::from(env!("CARGO_BIN_EXE_load-tester")), &env.kubeconfig, &args, &[]).unwrap()
}

pub async fn install_crds(env: &TestEnv) {
    flotilla_testenv::harness::install_crds(&env.client().await, &load_tester::crds()).await.unwrap();
}

pub fn api(client: &kube::Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("flotilla.dev", "v1alpha1", kind));
    Api::namespaced_with(client.clone(), ns, &ar)
}

pub async fn create(client: &kube::Client, ns: &str, kind: &str, name: &str, spec: Value) -> Result<(), kube::Error> {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    api(client, ns, kind).create(&PostParams::default(), &obj).await.map(|_| ())
}

pub async fn patch_spec(client: &kube::Client, ns: &str, kind: &str, name: &str, spec: Value) {
    api(client, ns, kind).patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": spec}))).await.unwrap();
}

/// Waits until the LoadTest's status satisfies `check`.
pub async fn wait_test<T>(
    client: &kube::Client,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&LoadTestStatus) -> Option<T>,
) -> T {
    let api: Api<LoadTest> = Api::namespaced(client.clone(), ns);
    let check = &check;
    let r = wait_for(what, timeout, || {
        let api = api.clone();
        async move { Ok::<_, kube::Error>(api.get(name).await?.status.as_ref().and_then(check)) }
    })
    .await;
    match r {
        Ok(v) => v,
        Err(e) => {
            let s = api.get(name).await.ok().and_then(|t| t.status);
            panic!("{e}; status now: {}", serde_json::to_string_pretty(&s).unwrap_or_default())
        }
    }
}

/// Events on `name`, as (type, reason, note).
pub async fn events_about(client: &kube::Client, ns: &str, name: &str) -> Vec<(String, String, String)> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}
