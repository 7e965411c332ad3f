//! `cargo xtask bench pod-debugger`: figures for issue 12's benchmark on a
//! control plane: 1,000 pods matching one PodDebugger appear at once, bound
//! to a node object the benchmark keeps alive, their statuses written
//! Running as a kubelet would. Measured: the time until every pod has the
//! debug container (from the first status write), each pod's latency from
//! its own Running write, the API calls per pod (the API server's own
//! `apiserver_request_total` for `pods/ephemeralcontainers` PATCH, dry runs
//! counted apart; target 1), and the operator's peak RSS (target ≤ 30 MiB).
//!
//! Then the attack phase (issue 27): 40 never-scheduled pods with 12,000
//! labels each, in a namespace of their own; measured: the RSS after, and
//! the peak. `POD_DEBUGGER_BENCH_BINARY` runs another build instead of
//! building this one.
//!
//! Scale knob: `POD_DEBUGGER_BENCH_PODS` (1000), plus
//! `POD_DEBUGGER_BENCH_OTHERS` (1000 non-matching pods cached alongside).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use flotilla_testenv::cluster::control_plane::http_get;
use flotilla_testenv::{ControlPlane, Lifetime, Options};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;

use super::{Measured, env_usize, from_json, make_node, wait};
use crate::util::{root, runtime, say, setup};

const NS: &str = "bench";
const NODE: &str = "bench-node";

pub fn run() -> anyhow::Result<()> {
    let matching = env_usize("POD_DEBUGGER_BENCH_PODS", 1000)?.max(1);
    let others = env_usize("POD_DEBUGGER_BENCH_OTHERS", 1000)?;
    let assets = setup()?;
    let binary = match std::env::var_os("POD_DEBUGGER_BENCH_BINARY") {
        Some(b) => std::path::PathBuf::from(b),
        None => {
            say("building the release binaries (as the images are)");
            crate::dist::build_release()?.join("pod-debugger")
        }
    };
    let rt = runtime()?;
    rt.block_on(async {
        let dir = root().join("target").join("flotilla-bench-pod-debugger");
        let _ = std::fs::remove_dir_all(&dir);
        say("starting a control plane for the benchmark");
        let mut cp = ControlPlane::start(&assets, &Options { dir, lifetime: Lifetime::DieWithParent }).await?;
        let result = bench(&cp, &binary, matching, others).await;
        cp.stop();
        result
    })
}

fn pct(sorted: &[Duration], p: usize) -> Duration {
    sorted.get((sorted.len() * p).div_ceil(100).saturating_sub(1)).copied().unwrap_or_default()
}

/// `pods/ephemeralcontainers` PATCH requests the API server served:
/// (real, dry run).
async fn ephemeral_patches(client: &Client) -> anyhow::Result<(f64, f64)> {
    let text = client.request_text(http_get("/metrics")).await.context("the API server's /metrics")?;
    let (mut real, mut dry) = (0.0, 0.0);
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        if !(line.contains("subresource=\"ephemeralcontainers\"") && line.contains("verb=\"PATCH\"")) {
            continue;
        }
        let v: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        if line.contains("dry_run=\"All\"") {
            dry += v;
        } else {
            real += v;
        }
    }
    Ok((real, dry))
}

fn pod(name: &str, app: &str) -> anyhow::Result<Pod> {
    from_json(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "bench.invalid/app:1"}]}
    }))
}

async fn bench(cp: &ControlPlane, binary: &std::path::Path, matching: usize, others: usize) -> anyhow::Result<()> {
    let client = cp.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in pod_debugger::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(&crd)).await?;
    }
    let namespace: Namespace = from_json(json!({"metadata": {"name": NS}}))?;
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await?;
    let heartbeat = make_node(&client, NODE).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    // Non-matching pods, cached by the operator alongside (realistic
    // clusters have more pods than a rule matches).
    let started = Instant::now();
    let others_made = futures::stream::iter((0..others).map(|i| {
        let pods = pods.clone();
        async move {
            pods.create(&PostParams::default(), &pod(&format!("other-{i:04}"), "other")?)
                .await
                .map(|_| ())
                .context("a pod")
        }
    }))
    .buffer_unordered(32)
    .collect::<Vec<_>>()
    .await;
    others_made.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    eprintln!("    {others} non-matching pods created in {:.1?}", started.elapsed());

    // The operator and its PodDebugger, before the matching pods exist.
    let log = cp.dir.join("pod-debugger.log");
    let kubeconfig = cp.kubeconfig.display().to_string();
    let env = [("KUBECONFIG", kubeconfig.as_str()), ("RUST_LOG", "warn")];
    let op = Measured::start(binary, &[], &env, &log)?;
    wait("the operator to serve metrics", || async { Ok(op.metric_sum("process_resident_memory_bytes").is_ok()) })
        .await?;
    let debuggers = super::dynamic_api::<pod_debugger::crd::PodDebugger>(&client, NS);
    let pd: kube::api::DynamicObject = from_json(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "PodDebugger", "metadata": {"name": "payment"},
        "spec": {"selector": {"matchLabels": {"app": "payment"}}, "image": "busybox:1.37"}
    }))?;
    debuggers.create(&PostParams::default(), &pd).await?;
    wait("the PodDebugger to be reconciled", || async {
        let d = debuggers.get("payment").await?;
        Ok(d.data["status"]["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Ready")))
    })
    .await?;
    let idle_rss = op.status_kib("VmRSS:").unwrap_or(0);
    let (patches_before, dry_before) = ephemeral_patches(&client).await?;

    // The matching pods, created Pending, then all made Running at once.
    let names: Vec<String> = (0..matching).map(|i| format!("payment-{i:04}")).collect();
    let made = futures::stream::iter(names.iter().map(|n| {
        let (pods, n) = (pods.clone(), n.clone());
        async move { pods.create(&PostParams::default(), &pod(&n, "payment")?).await.map(|_| ()).context("a pod") }
    }))
    .buffer_unordered(32)
    .collect::<Vec<_>>()
    .await;
    made.into_iter().collect::<anyhow::Result<Vec<()>>>()?;

    // A watch records when each pod first shows the debug container.
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let watch = {
        let (seen, pods) = (seen.clone(), pods.clone());
        tokio::spawn(async move {
            let mut w = std::pin::pin!(watcher(pods, watcher::Config::default()));
            while let Some(ev) = w.next().await {
                let list = match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => vec![p],
                    _ => continue,
                };
                for p in list {
                    let has =
                        p.spec.as_ref().and_then(|s| s.ephemeral_containers.as_ref()).is_some_and(|e| !e.is_empty());
                    if has && let (Some(name), Ok(mut seen)) = (p.metadata.name.clone(), seen.lock()) {
                        seen.entry(name).or_insert_with(Instant::now);
                    }
                }
            }
        })
    };
    say(&format!("writing {matching} pod statuses Running, as a kubelet would"));
    let running_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let started = Instant::now();
    let written = futures::stream::iter(names.iter().map(|n| {
        let (pods, n, running_at) = (pods.clone(), n.clone(), running_at.clone());
        async move {
            let now = Timestamp::now().to_string();
            let status = json!({"status": {"phase": "Running", "containerStatuses": [{
                "name": "app", "image": "bench.invalid/app:1", "imageID": "", "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": now}}}]}});
            pods.patch_status(&n, &PatchParams::default(), &Patch::Merge(&status)).await.context("a pod status")?;
            if let Ok(mut r) = running_at.lock() {
                r.insert(n, Instant::now());
            }
            Ok::<_, anyhow::Error>(())
        }
    }))
    .buffer_unordered(32)
    .collect::<Vec<_>>()
    .await;
    written.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    let writes_took = started.elapsed();
    wait("every matching pod to have the debug container", || async {
        Ok(seen.lock().map(|s| s.len()).unwrap_or(0) >= matching)
    })
    .await?;
    let all_took = started.elapsed();
    wait("status.injected to count them all", || async {
        let d = debuggers.get("payment").await?;
        Ok(d.data["status"]["injected"].as_u64() == Some(matching as u64))
    })
    .await?;
    let status_took = started.elapsed();
    // Anything more the operator would do, it does now.
    tokio::time::sleep(Duration::from_secs(5)).await;
    watch.abort();
    let (patches, dry) = ephemeral_patches(&client).await?;
    let (patches, dry) = (patches - patches_before, dry - dry_before);
    let mut latencies: Vec<Duration> = {
        let (seen, running) = (
            seen.lock().map(|s| s.clone()).unwrap_or_default(),
            running_at.lock().map(|r| r.clone()).unwrap_or_default(),
        );
        names.iter().filter_map(|n| Some(seen.get(n)?.saturating_duration_since(*running.get(n)?))).collect()
    };
    latencies.sort();
    let reconciles = op.metric_sum("controller_runtime_reconcile_total").unwrap_or(f64::NAN);
    let added = op.metric_sum("flotilla_pod_debugger_injections_total{result=\"added\"}").unwrap_or(f64::NAN);
    let (rss, hwm) = (op.status_kib("VmRSS:").unwrap_or(0), op.status_kib("VmHWM:").unwrap_or(0));

    say("attack: 40 pods with 12,000 labels each");
    let attack: Namespace = from_json(json!({"metadata": {"name": "attack-labels"}}))?;
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &attack).await?;
    let cached = op.metric_sum("flotilla_pod_debugger_pods_cached").unwrap_or(0.0);
    super::many_label_pods(&client, "attack-labels", 40, 12_000).await?;
    wait("the labelled pods cached", || async {
        Ok(op.metric_sum("flotilla_pod_debugger_pods_cached")? >= cached + 40.0)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (attack_rss, attack_hwm) = (op.status_kib("VmRSS:").unwrap_or(0), op.status_kib("VmHWM:").unwrap_or(0));
    heartbeat.abort();

    say("pod-debugger benchmark");
    println!("matching pods                       {matching} (and {others} other pods cached)");
    println!("status writes (Running)             {:.1} s for all", writes_took.as_secs_f64());
    println!(
        "first Running -> all have it        {:.1} s (status.injected = {matching} at {:.1} s)",
        all_took.as_secs_f64(),
        status_took.as_secs_f64()
    );
    println!(
        "pod Running -> its container        p50 {:.2} s, p99 {:.2} s, max {:.2} s",
        pct(&latencies, 50).as_secs_f64(),
        pct(&latencies, 99).as_secs_f64(),
        latencies.last().copied().unwrap_or_default().as_secs_f64()
    );
    println!(
        "ephemeralcontainers PATCH per pod   {:.3} ({patches} real + {dry} dry run for {matching} pods; target 1)",
        (patches + dry) / matching as f64
    );
    println!("additions counted by the operator   {added}");
    println!("reconciles                          {reconciles}");
    println!("RSS idle (with {others} pods cached)   {:.1} MiB", idle_rss as f64 / 1024.0);
    println!(
        "RSS now / peak (VmHWM)              {:.1} MiB / {:.1} MiB (target peak <= 30 MiB)",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    say("pod-debugger attack phase (issue 27)");
    println!("40 pods x 12,000 labels: RSS after   {:.1} MiB", attack_rss as f64 / 1024.0);
    println!("RSS peak (VmHWM), whole run         {:.1} MiB (target < 100 MiB)", attack_hwm as f64 / 1024.0);
    Ok(())
}
