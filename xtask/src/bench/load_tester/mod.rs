//! `cargo xtask bench load-tester`: figures for issues 13 and 30.
//!
//! 1. **loadgen against wrk and vegeta** ([`clients`]): throughput per
//!    CPU-second on the same loopback server, and the p99 each reports at
//!    a fixed open-model rate against a known injected delay.
//! 2. **the operator with 100 LoadTests** on a control plane: each with 2
//!    runners, bound to a node object the benchmark keeps alive, statuses
//!    written as a kubelet would (Running; then, once signalled, exited 0
//!    with a realistic summary): the time until every run is Finished, the
//!    reconciles, and the operator's RSS idle, during and at its peak.
//!
//! Scale knobs: `LOAD_TESTER_BENCH_SECONDS` (10, each client run),
//! `LOAD_TESTER_BENCH_RATE` (1000 requests/s, the open-model run),
//! `LOAD_TESTER_BENCH_TESTS` (100), `LOAD_TESTER_BENCH_REPLICAS` (2);
//! `LOAD_TESTER_BENCH_PART=clients` or `operator` runs only that part.

mod clients;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_testenv::{ControlPlane, Lifetime, Options};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use loadgen::summary::{Summary, histogram, record};
use serde_json::json;

use super::{Measured, env_usize, from_json, make_node, wait};
use crate::util::{cargo, root, run_cmd, runtime, say, setup};

const NS: &str = "bench";
const NODE: &str = "bench-node";

pub fn run() -> anyhow::Result<()> {
    let seconds = env_usize("LOAD_TESTER_BENCH_SECONDS", 10)?.max(1) as u64;
    let rate = env_usize("LOAD_TESTER_BENCH_RATE", 1000)?.max(1) as f64;
    let tests = env_usize("LOAD_TESTER_BENCH_TESTS", 100)?.max(1);
    let replicas = env_usize("LOAD_TESTER_BENCH_REPLICAS", 2)?.max(1);
    let part = std::env::var("LOAD_TESTER_BENCH_PART").unwrap_or_default();
    let (with_clients, with_operator) = match part.as_str() {
        "" => (true, true),
        "clients" => (true, false),
        "operator" => (false, true),
        other => bail!("LOAD_TESTER_BENCH_PART={other:?}: clients or operator (unset: both)"),
    };
    if with_clients {
        // Only this benchmark needs wrk: installed here (as root), not by setup.
        let vegeta = clients::tools()?;
        say("building loadgen and the benchmark's server (release)");
        run_cmd(cargo().args([
            "build",
            "--release",
            "--locked",
            "-p",
            "loadgen",
            "--bin",
            "loadgen",
            "--example",
            "bench_server",
        ]))?;
        let release = crate::dist::target_dir().join("release");
        let dir = root().join("target").join("flotilla-bench-load-tester-clients");
        let clients = clients::run(&release, &vegeta, &dir, seconds, rate)?;
        // Shown now, not lost if the operator part fails.
        say("load-tester benchmark: the clients");
        print!("{clients}");
    }
    if with_operator {
        let assets = setup()?;
        say("building load-tester (release)");
        run_cmd(cargo().args(["build", "--release", "--locked", "-p", "load-tester", "--bin", "load-tester"]))?;
        let release = crate::dist::target_dir().join("release");
        let rt = runtime()?;
        let operator = rt.block_on(async {
            let dir = root().join("target").join("flotilla-bench-load-tester");
            let _ = std::fs::remove_dir_all(&dir);
            say("starting a control plane for the operator part");
            let mut cp = ControlPlane::start(&assets, &Options { dir, lifetime: Lifetime::DieWithParent }).await?;
            let result = operator(&cp, &release.join("load-tester"), tests, replicas).await;
            cp.stop();
            result
        })?;
        say("load-tester benchmark: the operator");
        print!("{operator}");
    }
    Ok(())
}

// --- 2. the operator with many LoadTests -------------------------------

/// A runner's summary as a real run would leave it: 20,000 requests with
/// latencies spread over 1-300 ms.
fn runner_summary() -> anyhow::Result<String> {
    let mut h = histogram();
    for i in 0..20_000u64 {
        // A skewed spread: most fast, a long tail.
        let us = 1_000 + (i * i) % 300_000 / (1 + i % 7);
        record(&mut h, Duration::from_micros(us));
    }
    Ok(Summary::to_message(20_000, Default::default(), 0, Duration::from_secs(60), &h)?)
}

/// Plays the kubelet for every runner pod bound to the benchmark's node:
/// Running once bound; exited 0 with `summary` once signalled.
async fn kubelet(pods: Api<Pod>, summary: String) {
    let mut running = std::collections::HashSet::new();
    let mut done = std::collections::HashSet::new();
    loop {
        let Ok(list) = pods.list(&ListParams::default()).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        let mut writes = Vec::new();
        for p in list.items {
            let Some(name) = p.metadata.name.clone() else { continue };
            let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            let go =
                p.metadata.annotations.as_ref().and_then(|a| a.get("flotilla.dev/start")).is_some_and(|v| v == "go");
            if p.metadata.deletion_timestamp.is_some() || done.contains(&name) {
                continue;
            }
            let now = Timestamp::now().to_string();
            if go {
                writes.push((
                    name,
                    true,
                    json!({"status": {"phase": "Succeeded", "containerStatuses": [{
                    "name": "loadgen", "image": "loadgen", "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": summary}}}]}}),
                ));
            } else if bound && !running.contains(&name) {
                writes.push((name, false, json!({"status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}],
                    "containerStatuses": [{"name": "loadgen", "image": "loadgen", "imageID": "", "ready": true, "restartCount": 0,
                                           "state": {"running": {"startedAt": now}}}]}})));
            }
        }
        // A write that failed is tried again on the next round.
        let written = futures::stream::iter(writes.into_iter().map(|(name, finished, status)| {
            let pods = pods.clone();
            async move {
                let ok = pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await.is_ok();
                (name, finished, ok)
            }
        }))
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
        for (name, finished, _) in written.into_iter().filter(|w| w.2) {
            if finished {
                done.insert(name);
            } else {
                running.insert(name);
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn operator(cp: &ControlPlane, binary: &Path, tests: usize, replicas: usize) -> anyhow::Result<String> {
    let client: Client = cp.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in load_tester::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(&crd)).await?;
    }
    let lt_resource = ApiResource::erase::<load_tester::crd::LoadTest>(&());
    wait("the LoadTest CRD to be served", || async {
        Ok(Api::<DynamicObject>::namespaced_with(client.clone(), NS, &lt_resource)
            .list(&ListParams::default().limit(1))
            .await
            .is_ok())
    })
    .await?;
    let namespace: Namespace = from_json(json!({"metadata": {"name": NS}}))?;
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await?;
    let heartbeat = make_node(&client, NODE).await?;
    let service: Service = from_json(json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}))?;
    Api::<Service>::namespaced(client.clone(), NS).create(&PostParams::default(), &service).await?;
    let slice: EndpointSlice = from_json(json!({
        "metadata": {"name": "web", "labels": {"kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": "bench"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}],
        "ports": [{"port": 80}]
    }))?;
    Api::<EndpointSlice>::namespaced(client.clone(), NS).create(&PostParams::default(), &slice).await?;

    let log = cp.dir.join("load-tester.log");
    let kubeconfig = cp.kubeconfig.display().to_string();
    let env = [("KUBECONFIG", kubeconfig.as_str()), ("RUST_LOG", "warn")];
    let op = Measured::start(binary, &["--loadgen-image=bench.invalid/loadgen:1".to_string()], &env, &log)?;
    wait("the operator to serve metrics", || async { Ok(op.metric_sum("process_resident_memory_bytes").is_ok()) })
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_rss = op.status_kib("VmRSS:").unwrap_or(0);

    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let kubelet = tokio::spawn(kubelet(pods, runner_summary()?));
    let lts = Api::<DynamicObject>::namespaced_with(client.clone(), NS, &lt_resource);
    say(&format!("creating {tests} LoadTests of {replicas} runners each"));
    let started = Instant::now();
    let made = futures::stream::iter((0..tests).map(|i| {
        let lts = lts.clone();
        async move {
            let lt: DynamicObject = from_json(json!({
                "apiVersion": "flotilla.dev/v1alpha1", "kind": "LoadTest", "metadata": {"name": format!("lt-{i:03}")},
                "spec": {"replicas": replicas, "cleanup": "Never", "test": {"serviceName": "web", "repeat": 100}}
            }))?;
            lts.create(&PostParams::default(), &lt).await.map(|_| ()).context("a LoadTest")
        }
    }))
    .buffer_unordered(16)
    .collect::<Vec<_>>()
    .await;
    made.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    let (mut peak_during, mut last_report) = (0, Instant::now());
    loop {
        peak_during = peak_during.max(op.status_kib("VmRSS:").unwrap_or(0));
        let list = lts.list(&ListParams::default()).await?;
        let state = |t: &DynamicObject| t.data["status"]["state"].as_str().unwrap_or("").to_string();
        if let Some(t) = list.items.iter().find(|t| state(t) == "Failed") {
            bail!("{} failed: {}", t.metadata.name.clone().unwrap_or_default(), t.data["status"]["message"]);
        }
        let finished = list
            .items
            .iter()
            .filter(|t| state(t) == "Finished" && t.data["status"]["results"]["runners"] == replicas)
            .count();
        if finished == tests {
            break;
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!("    {finished} of {tests} LoadTests Finished after {:.0?}", started.elapsed());
        }
        if started.elapsed() > super::TIMEOUT {
            bail!("timed out: {finished} of {tests} LoadTests Finished");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let all_took = started.elapsed();
    // Anything more the operator would do, it does now.
    tokio::time::sleep(Duration::from_secs(5)).await;
    kubelet.abort();
    let reconciles = op.metric_sum("controller_runtime_reconcile_total{controller=\"loadtest\"").unwrap_or(f64::NAN);
    let (rss, hwm) = (op.status_kib("VmRSS:").unwrap_or(0), op.status_kib("VmHWM:").unwrap_or(0));
    heartbeat.abort();
    let mib = |k: u64| k as f64 / 1024.0;
    Ok(format!(
        "operator: {tests} LoadTests x {replicas} runners ({} runner pods; summaries of {} bytes each)\n\
         \x20 created -> all Finished           {:.1} s (the kubelet stand-in polls every 0.3 s)\n\
         \x20 loadtest reconciles                {reconciles} ({:.1} per LoadTest)\n\
         \x20 RSS idle / peak during / now      {:.1} / {:.1} / {:.1} MiB (VmHWM {:.1} MiB)\n",
        tests * replicas,
        runner_summary()?.len(),
        all_took.as_secs_f64(),
        reconciles / tests as f64,
        mib(idle_rss),
        mib(peak_during),
        mib(rss),
        mib(hwm),
    ))
}
