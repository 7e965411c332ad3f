//! `cargo xtask bench pod-alert`: figures for issue 11's benchmark on a
//! control plane: 2,000 pods (real Deployments, ReplicaSets and pods made by
//! kube-controller-manager, bound by the scheduler to a node object the
//! benchmark keeps alive), 200 of them crash-looping across 20 Deployments.
//! No node can host 2,000 pods, so the benchmark writes pod statuses as a
//! kubelet would, restarts rising every few seconds. Measured: notifications
//! sent (target 20: one per Deployment), the operator's peak RSS (target ≤ 40
//! MiB), and the time from the crash that crosses the restart threshold to
//! the webhook notification (target p50 ≤ 2 s; the grace for crashes is 0).
//!
//! Then the attack phase (issue 27), against the same operator: in a
//! namespace of its own, 64 single-pod Deployments crash-loop (64 incident
//! keys) under 40 PodAlerts asking for 1,000 lines and 64 KiB of log each,
//! and every log read (a stand-in kubelet, `kubelet.rs`) answers 64 KiB of
//! `"`; then 40 never-scheduled pods with 12,000 labels each. Measured: the
//! RSS after each, the peak, the log tail bytes held, the largest PodAlert
//! status. `POD_ALERT_BENCH_BINARY` runs another build (the one before a
//! fix, for its figures) instead of building this one.
//!
//! Scale knobs: `POD_ALERT_BENCH_PODS` (2000), `POD_ALERT_BENCH_CRASHING`
//! (20 Deployments), `POD_ALERT_BENCH_REPLICAS` (10 each).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use flotilla_testenv::{ControlPlane, Lifetime, Options};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::{Measured, env_usize, from_json, make_node_with_kubelet, wait};
use crate::util::{root, runtime, say, setup};

const NS: &str = "bench";
const NODE: &str = "bench-node";
/// Restart rounds written to every crashing pod, this far apart.
const ROUNDS: u32 = 5;
const ROUND_EVERY: Duration = Duration::from_secs(5);
/// The PodAlert's restartThreshold: round 3 crosses it.
const THRESHOLD: u32 = 3;

pub fn run() -> anyhow::Result<()> {
    let pods = env_usize("POD_ALERT_BENCH_PODS", 2000)?;
    let crashing = env_usize("POD_ALERT_BENCH_CRASHING", 20)?.max(1);
    let replicas = env_usize("POD_ALERT_BENCH_REPLICAS", 10)?.max(1);
    if crashing * replicas > pods {
        bail!("{crashing} x {replicas} crashing pods do not fit in {pods} pods");
    }
    let assets = setup()?;
    let binary = match std::env::var_os("POD_ALERT_BENCH_BINARY") {
        Some(b) => std::path::PathBuf::from(b),
        None => {
            say("building the release binaries (as the images are)");
            crate::dist::build_release()?.join("pod-alert")
        }
    };
    let rt = runtime()?;
    rt.block_on(async {
        let dir = root().join("target").join("flotilla-bench-pod-alert");
        let _ = std::fs::remove_dir_all(&dir);
        say("starting a control plane for the benchmark");
        let mut cp = ControlPlane::start(&assets, &Options { dir, lifetime: Lifetime::DieWithParent }).await?;
        let result = bench(&cp, &binary, pods, crashing, replicas).await;
        cp.stop();
        result
    })
}

fn deployment(name: &str, replicas: usize) -> anyhow::Result<Deployment> {
    from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "bench.invalid/app:1"}]}
            }
        }
    }))
}

/// A pod's status as a kubelet writes it: running and Ready, or crash-looping
/// after `restarts` restarts (the last one just now).
fn status(restarts: u32, pod: &str) -> Value {
    let now = Timestamp::now().to_string();
    let ready = if restarts == 0 { "True" } else { "False" };
    let (state, last) = if restarts == 0 {
        (json!({"running": {"startedAt": now}}), json!({}))
    } else {
        (
            json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting failed container"}}),
            json!({"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": now, "containerID": format!("bench://{pod}-{restarts}")}}),
        )
    };
    json!({"status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": now},
                       {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}],
        "containerStatuses": [{"name": "app", "image": "bench.invalid/app:1", "imageID": "", "ready": restarts == 0,
                               "restartCount": restarts, "state": state, "lastState": last}]
    }})
}

/// Writes statuses with some concurrency, as many kubelets would.
async fn write_statuses(pods: &Api<Pod>, items: Vec<(String, u32)>) -> anyhow::Result<()> {
    let results: Vec<Result<Pod, kube::Error>> =
        futures::stream::iter(items)
            .map(|(name, restarts)| {
                let pods = pods.clone();
                async move {
                    pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(status(restarts, &name))).await
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
    for r in results {
        r?;
    }
    Ok(())
}

/// A webhook receiver: every request's arrival time and JSON body.
type Received = Arc<Mutex<Vec<(Instant, Value)>>>;

async fn receiver() -> anyhow::Result<(String, Received)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let mut rx = crate::receiver::serve(listener);
    let got: Received = Arc::default();
    let g = got.clone();
    tokio::spawn(async move {
        while let Some(item) = rx.recv().await {
            if let Ok(mut list) = g.lock() {
                list.push(item);
            }
        }
    });
    Ok((url, got))
}

fn pct(sorted: &[Duration], p: usize) -> Duration {
    sorted.get((sorted.len() * p).div_ceil(100).saturating_sub(1)).copied().unwrap_or_default()
}

async fn bench(
    cp: &ControlPlane,
    binary: &std::path::Path,
    total: usize,
    crashing: usize,
    replicas: usize,
) -> anyhow::Result<()> {
    let client = cp.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in pod_alert::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(&crd)).await?;
    }
    let namespace: Namespace = from_json(json!({"metadata": {"name": NS}}))?;
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await?;
    // Every log read answers this: 64 KiB of quotes (doubled by JSON escaping).
    let log = format!("starting\n{}\n", "\"".repeat(65536));
    let kubelet = super::kubelet::serve("127.0.0.2:0", log).await?;
    let heartbeat = make_node_with_kubelet(&client, NODE, kubelet).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The workloads: crashing Deployments and healthy ones of at most 100.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let crash_names: Vec<String> = (0..crashing).map(|i| format!("crash-{i:02}")).collect();
    for name in &crash_names {
        deployments.create(&PostParams::default(), &deployment(name, replicas)?).await?;
    }
    let mut healthy = total - crashing * replicas;
    let mut i = 0;
    while healthy > 0 {
        let n = healthy.min(100);
        deployments.create(&PostParams::default(), &deployment(&format!("healthy-{i:02}"), n)?).await?;
        healthy -= n;
        i += 1;
    }
    say(&format!("waiting for kube-controller-manager and the scheduler to make and bind {total} pods"));
    let started = Instant::now();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    wait("every pod bound to the benchmark node", || async {
        let list = pods.list_metadata(&ListParams::default()).await?;
        let n = list.items.len();
        if n < total {
            return Ok(false);
        }
        let bound = pods.list(&ListParams::default().fields(&format!("spec.nodeName={NODE}"))).await?.items.len();
        Ok(bound >= total)
    })
    .await?;
    eprintln!("    {total} pods bound in {:.1?}", started.elapsed());

    // Every pod starts Running and Ready.
    let all = pods.list(&ListParams::default()).await?.items;
    let mut crash_pods: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut items = Vec::new();
    for p in &all {
        let name = p.metadata.name.clone().unwrap_or_default();
        let app = p.metadata.labels.as_ref().and_then(|l| l.get("app")).cloned().unwrap_or_default();
        if crash_names.contains(&app) {
            crash_pods.entry(app).or_default().push(name.clone());
        }
        items.push((name, 0));
    }
    let started = Instant::now();
    write_statuses(&pods, items).await?;
    eprintln!("    {} pod statuses written in {:.1?}", all.len(), started.elapsed());

    // The operator and its PodAlert, sending to a local webhook.
    let (url, received) = receiver().await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    secrets
        .create(&PostParams::default(), &from_json(json!({"metadata": {"name": "hook"}, "stringData": {"url": url}}))?)
        .await?;
    let log = cp.dir.join("pod-alert.log");
    let kubeconfig = cp.kubeconfig.display().to_string();
    // The receiver is on loopback, which sinks may reach only when admitted
    // (an environment variable: a build without the flag ignores it).
    let env = [("KUBECONFIG", kubeconfig.as_str()), ("RUST_LOG", "warn"), ("ALLOWED_SINK_CIDRS", "127.0.0.0/8")];
    let op = Measured::start(binary, &[], &env, &log)?;
    wait("the operator to serve metrics", || async { Ok(op.metric_sum("process_resident_memory_bytes").is_ok()) })
        .await?;
    let alerts = super::dynamic_api::<pod_alert::crd::PodAlert>(&client, NS);
    let pa: kube::api::DynamicObject = from_json(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "PodAlert", "metadata": {"name": "bench"},
        "spec": {"alerts": {"checkRunningPods": true, "restartThreshold": THRESHOLD}, "sinks": {"webhook": {"urlSecretRef": {"name": "hook", "key": "url"}}}}
    }))?;
    alerts.create(&PostParams::default(), &pa).await?;
    wait("the PodAlert to be evaluated", || async {
        let a = alerts.get("bench").await?;
        let msg = a.data["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned())
            .and_then(|c| c["message"].as_str().map(String::from))
            .unwrap_or_default();
        Ok(msg.starts_with(&format!("{total} pods checked")))
    })
    .await?;
    let idle_rss = op.status_kib("VmRSS:").unwrap_or(0);

    // Crash rounds: every crashing pod restarts once per round.
    let mut crossed: BTreeMap<String, Instant> = BTreeMap::new();
    let started = Instant::now();
    for round in 1..=ROUNDS {
        let round_start = Instant::now();
        for (deployment, names) in &crash_pods {
            if round == THRESHOLD {
                crossed.insert(format!("Deployment/{deployment}"), Instant::now());
            }
            write_statuses(&pods, names.iter().map(|n| (n.clone(), round)).collect()).await?;
        }
        tokio::time::sleep(ROUND_EVERY.saturating_sub(round_start.elapsed())).await;
    }
    let want = crash_pods.len();
    let opened = |r: &Received| r.lock().map(|l| l.iter().filter(|(_, b)| b["event"] == "opened").count()).unwrap_or(0);
    wait("one notification per crashing Deployment", || async { Ok(opened(&received) >= want) }).await?;
    // Anything more that would come, comes now.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let crash_time = started.elapsed();

    let got = received.lock().map(|l| l.clone()).unwrap_or_default();
    let mut by_event: BTreeMap<String, usize> = BTreeMap::new();
    let mut latencies = Vec::new();
    for (at, body) in &got {
        *by_event.entry(body["event"].as_str().unwrap_or("?").to_string()).or_default() += 1;
        let crossed_at = body["incident"]["workload"].as_str().and_then(|w| crossed.get(w));
        if let Some(t) = crossed_at.filter(|_| body["event"] == "opened") {
            latencies.push(at.saturating_duration_since(*t));
        }
    }
    latencies.sort();
    let reconciles = op.metric_sum("controller_runtime_reconcile_total").unwrap_or(f64::NAN);
    let (rss, hwm) = (op.status_kib("VmRSS:").unwrap_or(0), op.status_kib("VmHWM:").unwrap_or(0));
    let attack = attack(&client, &op).await;
    heartbeat.abort();

    say("pod-alert benchmark");
    println!("pods                                {total}");
    println!("crashing                            {} pods in {want} Deployments", want * replicas);
    println!("crash rounds                        {ROUNDS}, {:.0?} apart ({:.1?} in all)", ROUND_EVERY, crash_time);
    println!("notifications sent                  {} (target {want}: one per Deployment) {by_event:?}", got.len());
    println!(
        "threshold crash -> notification     p50 {:.2} s, p99 {:.2} s, max {:.2} s ({} measured)",
        pct(&latencies, 50).as_secs_f64(),
        pct(&latencies, 99).as_secs_f64(),
        latencies.last().copied().unwrap_or_default().as_secs_f64(),
        latencies.len()
    );
    println!("reconciles                          {reconciles}");
    println!("RSS idle ({total} pods cached)       {:.1} MiB", idle_rss as f64 / 1024.0);
    println!(
        "RSS now / peak (VmHWM)              {:.1} MiB / {:.1} MiB (target peak <= 40 MiB)",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    let a = attack?;
    say("pod-alert attack phase (issue 27)");
    println!("log tails: 64 crash loops x 40 PodAlerts asking 1,000 lines / 64 KiB of quotes each");
    println!("  log reads                         {}", a.log_reads);
    println!(
        "  log tail bytes held (gauge)       {}",
        a.tail_bytes.map_or("(no such metric)".into(), |b| format!("{:.1} MiB", b / 1048576.0))
    );
    println!("  PodAlerts evaluated / refused     {} / {} (TooManyPodAlerts)", a.served, a.refused);
    println!("  largest PodAlert status           {:.1} KiB", a.largest_status as f64 / 1024.0);
    println!("  RSS after                         {:.1} MiB", a.rss_tails as f64 / 1024.0);
    println!("labels: 40 pods x 12,000 labels (never scheduled)");
    println!("  RSS after                         {:.1} MiB", a.rss_labels as f64 / 1024.0);
    println!("RSS peak (VmHWM), whole run         {:.1} MiB (target < 100 MiB)", a.hwm as f64 / 1024.0);
    println!("operator still running              {}", a.alive);
    Ok(())
}

/// The attack phase's figures.
struct Attack {
    log_reads: f64,
    tail_bytes: Option<f64>,
    served: usize,
    refused: usize,
    largest_status: usize,
    rss_tails: u64,
    rss_labels: u64,
    hwm: u64,
    alive: bool,
}

/// Waits until the metric `name` has not changed for 15 s (at most 5 min).
async fn settle(op: &Measured, name: &str) -> f64 {
    let mut last = (f64::NAN, Instant::now());
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(300) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = op.metric_sum(name).unwrap_or(f64::NAN);
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() >= Duration::from_secs(15) {
            break;
        }
    }
    last.0
}

async fn attack(client: &kube::Client, op: &Measured) -> anyhow::Result<Attack> {
    const ATTACK: &str = "attack";
    const LABELS: &str = "attack-labels";
    for ns in [ATTACK, LABELS] {
        let namespace: Namespace = from_json(json!({"metadata": {"name": ns}}))?;
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await?;
    }
    say("attack: 64 crash loops under 40 PodAlerts, 64 KiB of quotes per log read");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ATTACK);
    for i in 0..64 {
        deployments.create(&PostParams::default(), &deployment(&format!("t-{i:02}"), 1)?).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ATTACK);
    wait("the 64 attack pods bound", || async {
        Ok(pods.list(&ListParams::default().fields(&format!("spec.nodeName={NODE}"))).await?.items.len() >= 64)
    })
    .await?;
    let names: Vec<String> =
        pods.list(&ListParams::default()).await?.items.into_iter().filter_map(|p| p.metadata.name).collect();
    write_statuses(&pods, names.iter().map(|n| (n.clone(), 2)).collect()).await?;
    let alerts = super::dynamic_api::<pod_alert::crd::PodAlert>(client, ATTACK);
    for i in 0..40 {
        let pa: kube::api::DynamicObject = from_json(json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "PodAlert", "metadata": {"name": format!("a-{i:02}")},
            "spec": {"alerts": {"checkRunningPods": true, "restartThreshold": 1}, "logs": {"tailLines": 1000, "maxBytes": 65536}}
        }))?;
        alerts.create(&PostParams::default(), &pa).await?;
    }
    let log_reads = settle(op, "flotilla_pod_alert_log_reads_total").await;
    let rss_tails = op.status_kib("VmRSS:").unwrap_or(0);
    // An absent metric sums to 0 (a build without it).
    let tail_bytes = op.metric_sum("flotilla_pod_alert_log_tail_bytes").ok().filter(|v| *v > 0.0);
    let list = alerts.list(&ListParams::default()).await?.items;
    let refused = list
        .iter()
        .filter(|a| {
            a.data["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["reason"] == "TooManyPodAlerts"))
        })
        .count();
    let served = list.len() - refused;
    let largest_status =
        list.iter().map(|a| serde_json::to_vec(&a.data["status"]).map(|v| v.len()).unwrap_or(0)).max().unwrap_or(0);

    say("attack: 40 pods with 12,000 labels each");
    // pod-alert holds only the pods of namespaces a PodAlert reads: one
    // there, its selector reading one of the 12,000 keys.
    let label_alerts = super::dynamic_api::<pod_alert::crd::PodAlert>(client, LABELS);
    let pa: kube::api::DynamicObject = from_json(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "PodAlert", "metadata": {"name": "labels"},
        "spec": {"alerts": {"checkRunningPods": true}, "selector": {"matchLabels": {"label-00000": "x"}}}
    }))?;
    label_alerts.create(&PostParams::default(), &pa).await?;
    let want = op.metric_sum("flotilla_pod_alert_pods_cached").unwrap_or(0.0) + 40.0;
    super::many_label_pods(client, LABELS, 40, 12_000).await?;
    wait("the labelled pods cached", || async { Ok(op.metric_sum("flotilla_pod_alert_pods_cached")? >= want) }).await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let rss_labels = op.status_kib("VmRSS:").unwrap_or(0);
    let hwm = op.status_kib("VmHWM:").unwrap_or(0);
    let alive = op.metric_sum("process_resident_memory_bytes").is_ok();
    Ok(Attack { log_reads, tail_bytes, served, refused, largest_status, rss_tails, rss_labels, hwm, alive })
}
