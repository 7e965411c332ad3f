//! Helpers for the shared crate's integration tests: the toy operator as a
//! process, free ports, scraping its endpoints, installing its CRD.
#![allow(dead_code)]

#[path = "../../examples/toy_operator/widget.rs"]
pub mod widget;

use std::path::{Path, PathBuf};
use std::time::Duration;

use flotilla_testenv::cluster::process::OperatorProcess;
use flotilla_testenv::{TestEnv, wait_for};
use kube::CustomResourceExt;

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

/// A running toy operator (the shared test process type, plus HTTP checks).
pub struct Toy {
    process: OperatorProcess,
    pub health: String,
}

impl std::ops::Deref for Toy {
    type Target = OperatorProcess;
    fn deref(&self) -> &OperatorProcess {
        &self.process
    }
}

impl std::ops::DerefMut for Toy {
    fn deref_mut(&mut self) -> &mut OperatorProcess {
        &mut self.process
    }
}

impl Toy {
    /// Starts the toy with `kubeconfig` and extra flags, JSON logs.
    pub fn start(kubeconfig: &Path, extra: &[&str]) -> Toy {
        let mut args = vec!["--log-format=json".to_string()];
        args.extend(extra.iter().map(|a| a.to_string()));
        let process = OperatorProcess::start(&toy_binary(), kubeconfig, &args, &[]).expect("starting the toy operator");
        let health = process.health_url();
        Toy { process, health }
    }

    /// Waits for the process to exit, up to `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let logs = self.logs();
        let child = &mut self.process.child;
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
        metric_value(&get(&self.metrics_url()).await.ok()?.1, series)
    }

    pub async fn ready(&self) -> bool {
        matches!(get(&format!("{}/readyz", self.health)).await, Ok((200, _)))
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

/// Installs the Widget CRD and waits until it serves.
pub async fn install_widget_crd(env: &TestEnv) {
    flotilla_testenv::harness::install_crds(&env.client().await, &[widget::Widget::crd()])
        .await
        .expect("Widget CRD installed");
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
