//! Helpers for the shared crate's integration tests: the toy operator as a
//! process, free ports, scraping its endpoints, installing its CRD.
#![allow(dead_code)]

#[path = "../../examples/toy_operator/widget.rs"]
pub mod widget;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use flotilla_testenv::{TestEnv, wait_for};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::{Api, CustomResourceExt};

pub const T: Duration = Duration::from_secs(30);

/// The toy operator example binary, built by `cargo test` next to the test binaries.
pub fn toy_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test> -> target/<profile>/examples/toy_operator
    let path = exe.parent().and_then(Path::parent).map(|d| d.join("examples").join("toy_operator")).unwrap_or_default();
    assert!(
        path.is_file(),
        "{} is missing: it is built by `cargo test -p flotilla-shared` (all targets) or `cargo build -p flotilla-shared --example toy_operator`",
        path.display()
    );
    path
}

pub fn free_port() -> u16 {
    flotilla_testenv::process::free_port().expect("a free port")
}

/// A running toy operator.
pub struct Toy {
    pub child: Child,
    pub metrics: String,
    pub health: String,
    pub log: PathBuf,
}

impl Toy {
    /// Starts the toy with `kubeconfig` and extra flags; logs go to a file.
    pub fn start(kubeconfig: &Path, extra: &[&str]) -> Toy {
        let (mp, hp) = (free_port(), free_port());
        let log = std::env::temp_dir().join(format!("toy-{}-{mp}.log", std::process::id()));
        let out = std::fs::File::create(&log).expect("log file");
        let child = Command::new(toy_binary())
            .arg(format!("--metrics-bind-address=127.0.0.1:{mp}"))
            .arg(format!("--health-probe-bind-address=127.0.0.1:{hp}"))
            .arg("--log-format=json")
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("spawning the toy operator");
        Toy { child, metrics: format!("http://127.0.0.1:{mp}/metrics"), health: format!("http://127.0.0.1:{hp}"), log }
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid")
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the process to exit, up to `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let logs = self.logs();
        let child = &mut self.child;
        match wait_for("the toy operator to exit", timeout, || {
            let r = child.try_wait().map_err(|e| e.to_string());
            async move { r }
        })
        .await
        {
            Ok(status) => status,
            Err(e) => panic!("{e}\nlogs:\n{logs}"),
        }
    }

    pub async fn metric(&self, series: &str) -> Option<f64> {
        metric_value(&get(&self.metrics).await.ok()?.1, series)
    }

    pub async fn ready(&self) -> bool {
        matches!(get(&format!("{}/readyz", self.health)).await, Ok((200, _)))
    }
}

impl Drop for Toy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// `(status, body)` of a GET.
pub async fn get(url: &str) -> Result<(u16, String), reqwest::Error> {
    let r = reqwest::Client::new().get(url).timeout(Duration::from_secs(5)).send().await?;
    let code = r.status().as_u16();
    Ok((code, r.text().await?))
}

/// The value of one series (`name{labels}` exactly as exposed) in a scrape.
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')).and_then(|v| v.trim().parse().ok())
    })
}

/// Installs the Widget CRD (once per control plane) and waits until it serves.
pub async fn install_widget_crd(env: &TestEnv) {
    let api: Api<CustomResourceDefinition> = Api::all(env.client().await);
    let crd = widget::Widget::crd();
    match api.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("installing the Widget CRD: {e}"),
    }
    let name = crd.metadata.name.clone().unwrap_or_default();
    wait_for("the Widget CRD to be established", T, || {
        let api = api.clone();
        let name = name.clone();
        async move {
            let crd = api.get(&name).await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok::<_, kube::Error>(established.then_some(()))
        }
    })
    .await
    .expect("CRD established");
    // The discovery cache of a fresh client needs the new API; give it a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
}

pub fn widget(name: &str, spec: serde_json::Value) -> widget::Widget {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "toy.flotilla.dev/v1alpha1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("widget")
}
