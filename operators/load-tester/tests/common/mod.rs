//! Helpers for load-tester's tests: the operator process (with the admin's
//! rights, or as the chart's ServiceAccount with exactly the chart's RBAC),
//! objects sent untyped (as a user could), waits on status, and a capture
//! server that logs what each request carried.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_testenv::TestEnv;
use flotilla_testenv::cluster::node::images::TOOLBOX_IMAGE;
use flotilla_testenv::cluster::process::OperatorProcess;
use flotilla_testenv::under_test::UnderTest;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[allow(unused_imports)]
pub use load_tester::crd::{LoadTest, LoadTestStatus, SimpleDeployment};

/// The operator under test: this build's, or `LOAD_TESTER_TEST_BINARY` (to
/// run the same tests against another build, e.g. the one before a fix).
pub const OPERATOR: UnderTest = UnderTest {
    name: "load-tester",
    other_build: "LOAD_TESTER_TEST_BINARY",
    built: env!("CARGO_BIN_EXE_load-tester"),
    crds: load_tester::crds,
};

/// The operator, watching `namespace` only (tests run side by side).
pub fn start_operator(env: &TestEnv, namespace: &str) -> OperatorProcess {
    OPERATOR.start(&env.kubeconfig, Some(namespace), &[], &[])
}

/// The operator as the chart runs it, watching `namespace`: the chart's
/// ServiceAccount, Role and RoleBinding (rendered by helm with
/// `watchNamespace` set, applied as they are) and the binary run with that
/// account's token, so it has exactly the chart's rights. `vars`: flags as
/// environment variables.
pub async fn start_operator_with_chart_rbac(env: &TestEnv, namespace: &str, vars: &[(&str, &str)]) -> OperatorProcess {
    flotilla_e2e::build_chart_dependencies().unwrap();
    let chart = flotilla_e2e::charts_dir().join("load-tester").display().to_string();
    let rendered = flotilla_e2e::helm_ok(
        None,
        &[
            "template",
            "lt",
            &chart,
            "--namespace",
            namespace,
            "--set",
            &format!("watchNamespace={namespace}"),
            "--set",
            "leaderElection.enabled=false",
            "--show-only",
            "templates/resources.yaml",
        ],
    )
    .unwrap();
    let admin = env.client().await;
    let mut account = None;
    for doc in flotilla_e2e::yaml_documents(&rendered).unwrap() {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let (group, version, plural) = match kind.as_str() {
            "ServiceAccount" => ("", "v1", "serviceaccounts"),
            "Role" => ("rbac.authorization.k8s.io", "v1", "roles"),
            "RoleBinding" => ("rbac.authorization.k8s.io", "v1", "rolebindings"),
            _ => continue,
        };
        if kind == "RoleBinding" {
            account = doc["subjects"][0]["name"].as_str().map(str::to_string);
        }
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, &kind), plural);
        let obj: DynamicObject = serde_json::from_value(doc).unwrap();
        let name = obj.metadata.name.clone().unwrap();
        Api::<DynamicObject>::namespaced_with(admin.clone(), namespace, &ar)
            .patch(&name, &PatchParams::apply("tests").force(), &Patch::Apply(&obj))
            .await
            .unwrap();
    }
    let account = account.expect("the chart binds a ServiceAccount");
    let kubeconfig = env.service_account_kubeconfig(namespace, &account).await.unwrap();
    OPERATOR.start(&kubeconfig, Some(namespace), &[], vars)
}

/// A capture server: busybox httpd on :8080 in pod `name` (labels
/// `app=<name>`); `/cgi-bin/capture` answers 200 and logs one line per
/// request to the pod's log: `hit host=<Host> auth=<Authorization>
/// key=<X-Api-Key> body=<the request's body>`; `/cgi-bin/slow` answers
/// 200 after 200 ms. `dns`: the pod's hostname and subdomain.
pub async fn capture_pod(client: &kube::Client, ns: &str, name: &str, dns: Option<(&str, &str)>) {
    let script = r#"mkdir -p /www/cgi-bin && echo ok > /www/index.html
printf '#!/bin/sh\necho "hit host=$HTTP_HOST auth=$HTTP_AUTHORIZATION key=$HTTP_X_API_KEY body=$(head -c ${CONTENT_LENGTH:-0})" >&2\necho "Content-Type: text/plain"\necho\necho ok\n' > /www/cgi-bin/capture
printf '#!/bin/sh\nusleep 200000\necho "Content-Type: text/plain"\necho\necho ok\n' > /www/cgi-bin/slow
chmod +x /www/cgi-bin/capture /www/cgi-bin/slow
exec httpd -f -p 8080 -h /www"#;
    let mut spec = json!({"terminationGracePeriodSeconds": 1, "containers": [{
        "name": "httpd", "image": TOOLBOX_IMAGE, "command": ["sh", "-c", script],
        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
    }]});
    if let Some((hostname, subdomain)) = dns {
        spec["hostname"] = json!(hostname);
        spec["subdomain"] = json!(subdomain);
    }
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": name}}, "spec": spec})).unwrap();
    Api::<Pod>::namespaced(client.clone(), ns).create(&PostParams::default(), &pod).await.unwrap();
}

/// A Service `name` on port 8080 selecting `app=<app>`; headless with
/// `headless`.
pub async fn service(client: &kube::Client, ns: &str, name: &str, app: &str, headless: bool) {
    let mut spec = json!({"selector": {"app": app}, "ports": [{"port": 8080, "targetPort": 8080}]});
    if headless {
        spec["clusterIP"] = json!("None");
    }
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    Api::<Service>::namespaced(client.clone(), ns).create(&PostParams::default(), &svc).await.unwrap();
}

/// Waits until Service `svc` has a ready endpoint (with `hostname`, if given).
pub async fn wait_ready_endpoint(client: &kube::Client, ns: &str, svc: &str, hostname: Option<&str>) {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    flotilla_testenv::wait_for(
        &format!("a ready endpoint of Service {ns}/{svc}"),
        Duration::from_secs(180),
        || async {
            let list = slices.list(&ListParams::default().labels(&format!("kubernetes.io/service-name={svc}"))).await?;
            let ready = list.items.iter().flat_map(|s| s.endpoints.iter().flatten()).any(|e| {
                e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false)
                    && hostname.is_none_or(|h| e.hostname.as_deref() == Some(h))
            });
            Ok::<_, kube::Error>(ready.then_some(()))
        },
    )
    .await
    .unwrap();
}

/// A namespace `<prefix>-…` with the capture server behind Service `web`
/// (an endpoint ready), the CRDs installed and the operator watching it.
#[allow(dead_code)]
pub async fn capture_namespace(env: &TestEnv, prefix: &str) -> (kube::Client, String, OperatorProcess) {
    OPERATOR.install_crds(env).await;
    let client = env.client().await;
    let ns = env.namespace(prefix).await.unwrap();
    capture_pod(&client, &ns, "web", None).await;
    service(&client, &ns, "web", "web", false).await;
    wait_ready_endpoint(&client, &ns, "web", None).await;
    let operator = start_operator(env, &ns);
    (client, ns, operator)
}

/// The LoadTest's status once its current run ended (3 minutes at most).
#[allow(dead_code)]
pub async fn wait_ended(client: &kube::Client, ns: &str, name: &str) -> LoadTestStatus {
    let what = format!("{name}'s run to end");
    wait_test(client, ns, name, &what, Duration::from_secs(180), |s| s.state.is_terminal().then(|| s.clone())).await
}

/// The `hit ...` lines of a capture pod's log.
pub fn hits(env: &TestEnv, ns: &str, pod: &str) -> Vec<String> {
    let log = env.kubectl(&["logs", "-n", ns, pod]).unwrap_or_default();
    log.lines().filter(|l| l.starts_with("hit ")).map(str::to_string).collect()
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

/// `spec` with runner pods as small as before spec.runner existed (50m CPU
/// and 16Mi requested, a 128Mi memory limit): the tests' many runners share
/// one 2-CPU node, where the default (500m each) would leave some of them
/// Unschedulable. The tests of that default give none.
pub fn small(mut spec: Value) -> Value {
    spec["runner"] =
        json!({"resources": {"requests": {"cpu": "50m", "memory": "16Mi"}, "limits": {"memory": "128Mi"}}});
    spec
}

#[allow(dead_code)]
pub async fn runner_pods(client: &kube::Client, ns: &str, test: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("flotilla.dev/loadtest={test}"));
    pods.list(&lp).await.unwrap().items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}
