//! The pod-alert part of `cargo xtask demo`: the seed's scenario from
//! `examples/pod-alert/`. A PodAlert in `default` watches its pods; a broken
//! pod appears in its status with its reason and log tail, and a webhook
//! receiver on the node's address (which the operator's pod reaches) prints
//! the notification.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_testenv::cluster::node::paths::NODE_IP;

use super::DemoEnv;

/// The receiver's port (the example Secret names it).
const PORT: u16 = 9095;

pub fn start(env: &DemoEnv) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + '_>> {
    Box::pin(run(env))
}

async fn run(env: &DemoEnv) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind((NODE_IP, PORT))
        .await
        .with_context(|| format!("listening on {NODE_IP}:{PORT}"))?;
    let mut notifications = crate::receiver::serve(listener);
    eprintln!("    webhook receiver on http://{NODE_IP}:{PORT}/hook");
    let examples = env.root.join("examples").join("pod-alert");
    for file in ["00-webhook-secret.yaml", "01-podalert.yaml", "02-broken-pod.yaml"] {
        eprintln!("    kubectl apply -f examples/pod-alert/{file}");
        env.kubectl(&["apply", "--server-side", "-f", &examples.join(file).display().to_string()])?;
    }
    let started = Instant::now();
    let (_, n) = tokio::time::timeout(Duration::from_secs(120), notifications.recv())
        .await
        .context("no notification within 120 s")?
        .context("the receiver stopped")?;
    eprintln!("    the webhook received, {:.1?} after the pod was created:", started.elapsed());
    let i = &n["incident"];
    eprintln!("      {} {}: {} — {}", n["event"], i["workload"], i["reason"], i["message"]);
    for line in i["logs"].as_str().unwrap_or("").lines() {
        eprintln!("      | {line}");
    }
    if i["workload"] != "Pod/broken" {
        bail!("expected the incident of Pod/broken, got {n}");
    }
    eprintln!("    kubectl get podalerts -n default");
    env.kubectl(&["get", "podalerts", "-n", "default"])?;
    eprintln!("    kubectl get podalert orchestr -n default -o jsonpath='{{.status.incidents[0]}}'");
    env.kubectl(&["get", "podalert", "orchestr", "-n", "default", "-o", "jsonpath={.status.incidents[0]}"])?;
    eprintln!();
    eprintln!("    kubectl explain podalert.spec.alerts");
    env.kubectl(&["explain", "podalert.spec.alerts"])
}
