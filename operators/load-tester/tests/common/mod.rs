//! Helpers for load-tester's tests: the operator process, objects sent
//! untyped (as a user could), waits on status.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use flotilla_testenv::TestEnv;
use flotilla_testenv::process::OperatorProcess;
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
    flotilla_testenv::wait_object(&api, name, what, timeout, |t| t.status.as_ref().and_then(&check)).await
}

#[allow(unused_imports)]
pub use flotilla_testenv::events_about;
