//! Helpers for pod-debugger's tests: the operator process, PodDebugger
//! objects sent untyped (as a user could), waits on status and pods.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_testenv::cluster::process::OperatorProcess;
use flotilla_testenv::under_test::UnderTest;
use flotilla_testenv::{TestEnv, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

pub use pod_debugger::crd::{PodDebugger, PodDebuggerStatus};

/// The operator under test: this build's, or `POD_DEBUGGER_TEST_BINARY`
/// (to run the same test against another build, e.g. the one before a fix).
pub const OPERATOR: UnderTest = UnderTest {
    name: "pod-debugger",
    other_build: "POD_DEBUGGER_TEST_BINARY",
    built: env!("CARGO_BIN_EXE_pod-debugger"),
    crds: pod_debugger::crds,
};

/// The operator, cluster-wide (its tests' pods are on the shared node),
/// with `extra` flags.
pub fn start_operator(env: &TestEnv, extra: &[&str]) -> OperatorProcess {
    OPERATOR.start(&env.kubeconfig, None, extra, &[])
}

fn api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::erase::<PodDebugger>(&());
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Creates a PodDebugger from raw JSON; the API server judges it.
pub async fn create_debugger(client: &kube::Client, ns: &str, name: &str, spec: Value) -> Result<(), kube::Error> {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "PodDebugger",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    api(client, ns).create(&PostParams::default(), &obj).await.map(|_| ())
}

/// Merges `spec` into the PodDebugger's spec.
pub async fn patch_debugger(client: &kube::Client, ns: &str, name: &str, spec: Value) {
    api(client, ns).patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": spec}))).await.unwrap();
}

/// Waits until `name`'s status satisfies `check`, returning what it returns.
pub async fn wait_status<T>(
    client: &kube::Client,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&PodDebuggerStatus) -> Option<T>,
) -> T {
    let api: Api<PodDebugger> = Api::namespaced(client.clone(), ns);
    flotilla_testenv::wait_object(&api, name, what, timeout, |d| d.status.as_ref().and_then(&check)).await
}

/// The Ready condition: (status, reason, message).
pub fn ready(s: &PodDebuggerStatus) -> (String, String, String) {
    s.conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        .unwrap_or_default()
}

/// The names of a pod's ephemeral containers.
pub async fn ephemeral_names(pods: &Api<Pod>, pod: &str) -> Vec<String> {
    let p = pods.get(pod).await.unwrap();
    p.spec.and_then(|s| s.ephemeral_containers).unwrap_or_default().into_iter().map(|c| c.name).collect()
}

/// Waits until `container` runs in `pod` (its state in ephemeralContainerStatuses).
pub async fn wait_debug_running(pods: &Api<Pod>, pod: &str, container: &str, timeout: Duration) {
    let r = wait_for(&format!("{container} to run in {pod}"), timeout, || async {
        let p = pods.get(pod).await?;
        let running = p
            .status
            .and_then(|s| s.ephemeral_container_statuses)
            .unwrap_or_default()
            .iter()
            .any(|c| c.name == container && c.state.as_ref().is_some_and(|s| s.running.is_some()));
        Ok::<_, kube::Error>(running.then_some(()))
    })
    .await;
    if let Err(e) = r {
        let p = pods.get(pod).await.ok().and_then(|p| p.status);
        panic!("{e}; pod status: {}", serde_json::to_string_pretty(&p).unwrap_or_default());
    }
}

#[allow(unused_imports)]
pub use flotilla_testenv::events_about;

/// A metric's value in the operator's /metrics (0 when absent).
pub async fn metric(operator: &OperatorProcess, line_prefix: &str) -> f64 {
    let text = reqwest::get(operator.metrics_url()).await.unwrap().text().await.unwrap();
    text.lines()
        .find(|l| l.starts_with(line_prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}
