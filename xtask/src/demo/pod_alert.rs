//! The pod-alert part of `cargo xtask demo`: the seed's scenario from
//! `examples/pod-alert/`. A PodAlert in `default` watches its pods; a broken
//! pod appears in its status with its reason and log tail, and a webhook
//! receiver on the node's address (which the operator's pod reaches) prints
//! the notification.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_testenv::node::paths::NODE_IP;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::DemoEnv;

/// The receiver's port (the example Secret names it).
const PORT: u16 = 9095;

pub fn start(env: &DemoEnv) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + '_>> {
    Box::pin(run(env))
}

/// Prints every request's JSON body, one notification at a time.
async fn receiver() -> anyhow::Result<tokio::sync::mpsc::Receiver<serde_json::Value>> {
    let listener = tokio::net::TcpListener::bind((NODE_IP, PORT))
        .await
        .with_context(|| format!("listening on {NODE_IP}:{PORT}"))?;
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 16384];
                while let Ok(n) = sock.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    let Some(end) = text.find("\r\n\r\n") else { continue };
                    let len = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string())
                        })
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    if buf.len() < end + 4 + len {
                        continue;
                    }
                    if let Ok(v) = serde_json::from_slice(&buf[end + 4..end + 4 + len]) {
                        let _ = tx.send(v).await;
                    }
                    let _ =
                        sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok").await;
                    break;
                }
            });
        }
    });
    Ok(rx)
}

async fn run(env: &DemoEnv) -> anyhow::Result<()> {
    let mut notifications = receiver().await?;
    eprintln!("    webhook receiver on http://{NODE_IP}:{PORT}/hook");
    let examples = env.root.join("examples").join("pod-alert");
    for file in ["00-webhook-secret.yaml", "01-podalert.yaml", "02-broken-pod.yaml"] {
        eprintln!("    kubectl apply -f examples/pod-alert/{file}");
        env.kubectl(&["apply", "--server-side", "-f", &examples.join(file).display().to_string()])?;
    }
    let started = Instant::now();
    let n = tokio::time::timeout(Duration::from_secs(120), notifications.recv())
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
