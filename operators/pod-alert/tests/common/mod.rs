//! Helpers for pod-alert's tests: the operator process, a local Slack and
//! webhook receiver, a real Alertmanager on loopback, PodAlert objects.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_testenv::cluster::process::{OperatorProcess, free_port};
use flotilla_testenv::rbac::{Scope, account_with, rule};
use flotilla_testenv::under_test::UnderTest;
use flotilla_testenv::{TestEnv, wait_for};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

pub use pod_alert::crd::{PodAlert, PodAlertStatus};

/// Admits the tests' receivers (on loopback) past the sink address policy,
/// and lets Slack sinks post to them — as environment variables, which
/// every flag also reads (and a build without those flags ignores: the
/// attacks run against an older build too, see [`OPERATOR`]).
pub const LOOPBACK_SINKS: [(&str, &str); 2] = [("ALLOWED_SINK_CIDRS", "127.0.0.0/8"), ("SLACK_HOSTS", "127.0.0.1")];

/// The operator under test: this build's, or `POD_ALERT_TEST_BINARY` (to
/// run the same attacks against another build, e.g. the one before a fix).
pub const OPERATOR: UnderTest = UnderTest {
    name: "pod-alert",
    other_build: "POD_ALERT_TEST_BINARY",
    built: env!("CARGO_BIN_EXE_pod-alert"),
    crds: pod_alert::crds,
};

/// The operator, watching `namespace` only (tests share the node), with
/// the tests' receivers admitted ([`LOOPBACK_SINKS`]).
pub fn start_operator(env: &TestEnv, namespace: &str, extra: &[&str]) -> OperatorProcess {
    start_operator_as(&env.kubeconfig, namespace, extra, &LOOPBACK_SINKS)
}

/// The operator with `kubeconfig`'s identity and only the flags and
/// environment given.
pub fn start_operator_as(kubeconfig: &Path, namespace: &str, extra: &[&str], vars: &[(&str, &str)]) -> OperatorProcess {
    OPERATOR.start(kubeconfig, Some(namespace), extra, vars)
}

/// The rules the chart gives the operator with `watchNamespace` set (a Role
/// in that namespace; `charts/pod-alert/templates/_operator.tpl`, plus the
/// Events rule every chart adds).
pub fn chart_rules() -> Vec<PolicyRule> {
    vec![
        rule(&["flotilla.dev"], &["podalerts"], &["list", "watch"]),
        rule(&["flotilla.dev"], &["podalerts/status"], &["patch"]),
        rule(&[""], &["pods"], &["list", "watch"]),
        rule(&[""], &["pods/log"], &["get"]),
        rule(&[""], &["events"], &["list"]),
        rule(&[""], &["secrets"], &["get"]),
        rule(&["apps"], &["deployments", "statefulsets", "daemonsets"], &["list", "watch"]),
        rule(&["batch"], &["jobs", "cronjobs"], &["list", "watch"]),
        rule(&["events.k8s.io"], &["events"], &["create", "patch"]),
    ]
}

/// A kubeconfig of ServiceAccount `namespace/pod-alert` bound, in
/// `namespace`, to exactly the chart's rules.
pub async fn chart_rbac_kubeconfig(env: &TestEnv, namespace: &str) -> PathBuf {
    account_with(env, Scope::Namespace(namespace), "pod-alert", namespace, "pod-alert", chart_rules()).await
}

/// The operator as ServiceAccount `namespace/pod-alert` with the chart's
/// RBAC, watching `namespace`, with only the environment given.
pub async fn start_operator_with_chart_rbac(env: &TestEnv, namespace: &str, vars: &[(&str, &str)]) -> OperatorProcess {
    let kubeconfig = chart_rbac_kubeconfig(env, namespace).await;
    start_operator_as(&kubeconfig, namespace, &[], vars)
}

/// Deletes a test's namespace once it passed: the node is shared and holds
/// 110 pods, and crash loops left behind would fill it.
pub async fn delete_namespace(client: &kube::Client, ns: &str) {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = api.delete(ns, &Default::default()).await;
}

/// Secret `name` with `data` as string data.
pub async fn secret(client: &kube::Client, ns: &str, name: &str, data: &[(&str, &str)]) {
    let data: serde_json::Map<String, Value> = data.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect();
    let s: Secret = serde_json::from_value(json!({"metadata": {"name": name}, "stringData": data})).unwrap();
    Api::<Secret>::namespaced(client.clone(), ns).create(&PostParams::default(), &s).await.unwrap();
}

/// A value of the operator's /metrics (the first series starting with
/// `series`), or None.
pub async fn metric(operator: &OperatorProcess, series: &str) -> Option<f64> {
    let text = reqwest::get(operator.metrics_url()).await.ok()?.text().await.ok()?;
    text.lines().find(|l| l.starts_with(series)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// An HTTP front of the API server for the operator, forwarding with
/// `kubeconfig`'s identity, that holds log reads while `release` is false
/// (each at most 9 s: the operator gives up a read after 10): what a slow
/// kubelet does, and what makes the gap between a cached pod view and its
/// log read wide enough to provoke a race. Every log read is recorded: its
/// path and query, and when it went on to the kubelet.
pub struct SlowLogs {
    /// A kubeconfig for the operator, pointing here.
    pub kubeconfig: PathBuf,
    pub log_reads: Arc<Mutex<Vec<(String, Instant)>>>,
}

impl SlowLogs {
    pub async fn start(env: &TestEnv, kubeconfig: &Path, release: tokio::sync::watch::Receiver<bool>) -> Self {
        let yaml = std::fs::read_to_string(kubeconfig).unwrap();
        let config = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        let config = kube::Config::from_custom_kubeconfig(config, &Default::default()).await.unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let log_reads: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
        let reads = log_reads.clone();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let (client, reads, mut release) = (client.clone(), reads.clone(), release.clone());
            async move {
                let (parts, body) = req.into_parts();
                if parts.uri.path().ends_with("/log") {
                    let _ = tokio::time::timeout(Duration::from_secs(9), release.wait_for(|r| *r)).await;
                    let read = format!("{}?{}", parts.uri.path(), parts.uri.query().unwrap_or_default());
                    reads.lock().unwrap().push((read, Instant::now()));
                }
                let body = axum::body::to_bytes(body, 16 << 20).await.unwrap_or_default();
                let mut out = http::Request::builder()
                    .method(parts.method.clone())
                    .uri(parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
                for (k, v) in &parts.headers {
                    if k != http::header::HOST && k != http::header::AUTHORIZATION {
                        out = out.header(k, v);
                    }
                }
                let out = out.body(kube::client::Body::from(body.to_vec())).unwrap();
                match client.send(out).await {
                    Ok(resp) => {
                        let (parts, body) = resp.into_parts();
                        axum::response::Response::from_parts(parts, axum::body::Body::new(body))
                    }
                    Err(e) => axum::response::Response::builder()
                        .status(502)
                        .body(axum::body::Body::from(e.to_string()))
                        .unwrap(),
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let path = env.dir.join(format!("kubeconfig-slow-logs-{}", addr.port()));
        let cfg = format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: p, cluster: {{server: \"http://{addr}\"}}}}]\nusers: [{{name: p, user: {{}}}}]\ncontexts: [{{name: p, context: {{cluster: p, user: p}}}}]\ncurrent-context: p\n"
        );
        std::fs::write(&path, cfg).unwrap();
        Self { kubeconfig: path, log_reads }
    }
}

/// Creates a PodAlert from raw JSON (untyped: the tests send what a user
/// could, valid or not, and the API server judges).
pub async fn create_podalert(client: &kube::Client, ns: &str, name: &str, spec: Value) -> Result<(), kube::Error> {
    use kube::Resource;
    let ar = kube::api::ApiResource::erase::<PodAlert>(&());
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let pa: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": PodAlert::api_version(&()), "kind": "PodAlert",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &pa).await.map(|_| ())
}

/// Waits until `name`'s status satisfies `check`, returning what it returns.
pub async fn wait_status<T>(
    client: &kube::Client,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&PodAlertStatus) -> Option<T>,
) -> T {
    let api: Api<PodAlert> = Api::namespaced(client.clone(), ns);
    flotilla_testenv::wait_object(&api, name, what, timeout, |a| a.status.as_ref().and_then(&check)).await
}

pub fn condition(s: &PodAlertStatus, t: &str) -> Option<(String, String, String)> {
    s.conditions.iter().find(|c| c.type_ == t).map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub body: Value,
    pub at: Instant,
    /// The status code it answered.
    pub answered: u16,
}

/// A local HTTP receiver standing in for Slack and webhook endpoints. The
/// first `throttle` requests to `/webhook` are answered 429 with
/// `Retry-After: 2`.
#[derive(Clone)]
pub struct Receiver {
    pub addr: SocketAddr,
    pub got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    pub async fn start(throttle: usize) -> Self {
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let g = got.clone();
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri, body: axum::body::Bytes| {
            let g = g.clone();
            async move {
                let mut list = g.lock().unwrap();
                let path = uri.path().to_string();
                let earlier = list.iter().filter(|r| r.path == path).count();
                let throttled = path == "/webhook" && earlier < throttle;
                let answered = if throttled {
                    429
                } else if path == "/gone" {
                    404
                } else {
                    200
                };
                list.push(Received {
                    path,
                    body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                    at: Instant::now(),
                    answered,
                });
                let status = axum::http::StatusCode::from_u16(answered).unwrap();
                if throttled {
                    (status, [(axum::http::header::RETRY_AFTER, "2")], "slow down").into_response_parts()
                } else if answered == 404 {
                    (status, [(axum::http::header::CONTENT_TYPE, "text/plain")], "no such hook; internal token hunter2")
                        .into_response_parts()
                } else {
                    (status, [(axum::http::header::CONTENT_TYPE, "text/plain")], "ok").into_response_parts()
                }
            }
        });
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, got }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// Accepted webhook documents for `event` about `workload`.
    pub fn webhook_events(&self, event: &str, workload: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.path == "/webhook" && r.answered == 200)
            .filter(|r| r.body["event"] == event && r.body["incident"]["workload"] == workload)
            .collect()
    }

    /// Accepted Slack messages whose text mentions `needle`.
    pub fn slack_messages(&self, needle: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.path == "/slack" && r.body["text"].as_str().is_some_and(|t| t.contains(needle)))
            .collect()
    }
}

trait IntoParts {
    fn into_response_parts(self) -> axum::response::Response;
}

impl<T: axum::response::IntoResponse> IntoParts for T {
    fn into_response_parts(self) -> axum::response::Response {
        self.into_response()
    }
}

/// A real Alertmanager (Debian's prometheus-alertmanager) on loopback.
pub struct Alertmanager {
    pub url: String,
    child: std::process::Child,
    _dir: PathBuf,
}

pub const ALERTMANAGER: &str = "/usr/bin/prometheus-alertmanager";

impl Alertmanager {
    pub async fn start() -> Self {
        assert!(
            std::path::Path::new(ALERTMANAGER).is_file(),
            "{ALERTMANAGER} is missing: `cargo xtask setup` installs Debian's prometheus-alertmanager"
        );
        let port = free_port().unwrap();
        let dir = std::env::temp_dir().join(format!("pod-alert-am-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("alertmanager.yml");
        std::fs::write(&config, "route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n").unwrap();
        let log = std::fs::File::create(dir.join("alertmanager.log")).unwrap();
        let child = std::process::Command::new(ALERTMANAGER)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let ready = format!("{url}/-/ready");
        wait_for("Alertmanager to be ready", Duration::from_secs(30), || {
            let ready = ready.clone();
            async move {
                let ok = reqwest::get(&ready).await.map(|r| r.status().is_success()).unwrap_or(false);
                Ok::<_, std::convert::Infallible>(ok.then_some(()))
            }
        })
        .await
        .unwrap();
        Self { url, child, _dir: dir }
    }

    /// Alertmanager's own view: `GET /api/v2/alerts`.
    pub async fn alerts(&self) -> Vec<Value> {
        let v: Value = reqwest::get(format!("{}/api/v2/alerts", self.url)).await.unwrap().json().await.unwrap();
        v.as_array().cloned().unwrap_or_default()
    }

    /// The alert for `workload`, if Alertmanager has it.
    pub async fn alert_for(&self, workload: &str) -> Option<Value> {
        self.alerts().await.into_iter().find(|a| a["labels"]["workload"] == workload)
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
