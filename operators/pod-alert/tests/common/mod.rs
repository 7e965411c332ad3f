//! Helpers for pod-alert's tests: the operator process, a local Slack and
//! webhook receiver, a real Alertmanager on loopback, PodAlert objects.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_testenv::process::{OperatorProcess, free_port};
use flotilla_testenv::{TestEnv, wait_for};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

pub use pod_alert::crd::{PodAlert, PodAlertStatus};

/// The operator, watching `namespace` only (tests share the node).
pub fn start_operator(env: &TestEnv, namespace: &str, extra: &[&str]) -> OperatorProcess {
    let mut args = vec![format!("--watch-namespace={namespace}"), "--log-format=text".to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    OperatorProcess::start(&PathBuf::from(env!("CARGO_BIN_EXE_pod-alert")), &env.kubeconfig, &args, &[]).unwrap()
}

pub async fn install_crd(env: &TestEnv) {
    flotilla_testenv::harness::install_crds(&env.client().await, &pod_alert::crds()).await.unwrap();
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
                let answered = if throttled { 429 } else { 200 };
                list.push(Received {
                    path,
                    body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                    at: Instant::now(),
                    answered,
                });
                let status = axum::http::StatusCode::from_u16(answered).unwrap();
                if throttled {
                    (status, [(axum::http::header::RETRY_AFTER, "2")], "slow down").into_response_parts()
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
