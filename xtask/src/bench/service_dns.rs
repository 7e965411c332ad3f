//! `cargo xtask bench service-dns`: the figures, on a control plane
//! and a moto server of its own, with the operator binary as a process:
//!
//! 1. latency: Services created one at a time (default 200); for each, the
//!    time from the create call until its A record exists in the zone
//!    (p50/p99, debounce included);
//! 2. burst: Services created at once (default 5,000): time until the
//!    operator manages all of them, and how many ChangeResourceRecordSets
//!    (and other Route53) calls it took; then the same Services "all at
//!    once" for a fresh operator on a new, empty zone of the same name (time,
//!    calls); then a restart against the converged zone (time to its first
//!    sync, write calls: should be 0);
//! 3. peak RSS (VmHWM) of the operator.
//!
//! `SERVICE_DNS_BENCH_LATENCY` and `SERVICE_DNS_BENCH_SERVICES` pick a
//! smaller scale for a quick run; `SERVICE_DNS_BENCH_PROFILE=debug` uses the
//! debug binary instead of building the release one. Nothing here asserts a
//! time: it prints.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_testenv::moto::{MotoServer, route53};
use flotilla_testenv::{ControlPlane, Lifetime, Options};
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use super::{Measured, env_usize};
use crate::util::{cargo, root, run_cmd, runtime, say, setup};

const DOMAIN: &str = "bench.example";
const TIMEOUT: Duration = Duration::from_secs(900);

fn start_operator(
    binary: &Path,
    kubeconfig: &Path,
    endpoint: &str,
    zone: &str,
    log: &Path,
) -> anyhow::Result<Measured> {
    let kubeconfig = kubeconfig.display().to_string();
    let args = [format!("--hosted-zone-id={zone}"), format!("--domain-name={DOMAIN}")];
    let env = [
        ("KUBECONFIG", kubeconfig.as_str()),
        ("AWS_ENDPOINT_URL_ROUTE_53", endpoint),
        ("AWS_ACCESS_KEY_ID", "bench"),
        ("AWS_SECRET_ACCESS_KEY", "bench"),
        ("AWS_REGION", "us-east-1"),
        ("RUST_LOG", "info"),
    ];
    Measured::start(binary, &args, &env, log)
}

/// The value of one series in /metrics (0 when absent).
fn metric(op: &Measured, series: &str) -> f64 {
    op.metric_sum(series).unwrap_or(0.0)
}

const WRITES: &str =
    "flotilla_service_dns_route53_requests_total{operation=\"ChangeResourceRecordSets\",result=\"success\"}";
const LISTS: &str =
    "flotilla_service_dns_route53_requests_total{operation=\"ListResourceRecordSets\",result=\"success\"}";
/// Seconds the Route53 endpoint (here moto) spent answering, all operations.
const ROUTE53_SECONDS: &str = "flotilla_service_dns_route53_request_duration_seconds_sum";
const MANAGED: &str = "flotilla_service_dns_managed_records";
const SYNCS: &str = "controller_runtime_reconcile_total{controller=\"service-dns\",result=\"success\"}";

fn service(name: &str) -> Service {
    Service {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: Some(k8s_openapi::api::core::v1::ServiceSpec {
            selector: Some([("app".to_string(), name.to_string())].into()),
            ports: Some(vec![k8s_openapi::api::core::v1::ServicePort { port: 80, ..Default::default() }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn binary() -> anyhow::Result<PathBuf> {
    let profile = std::env::var("SERVICE_DNS_BENCH_PROFILE").unwrap_or_else(|_| "release".into());
    match profile.as_str() {
        "release" => {
            say("building service-dns (release)");
            run_cmd(cargo().args(["build", "--release", "--locked", "-p", "service-dns", "--bin", "service-dns"]))?;
        }
        "debug" => {
            say("building service-dns (debug)");
            run_cmd(cargo().args(["build", "--locked", "-p", "service-dns", "--bin", "service-dns"]))?;
        }
        other => bail!("SERVICE_DNS_BENCH_PROFILE={other:?}: release or debug"),
    }
    Ok(root().join("target").join(profile).join("service-dns"))
}

pub fn run() -> anyhow::Result<()> {
    let latency_n = env_usize("SERVICE_DNS_BENCH_LATENCY", 200)?;
    let burst_n = env_usize("SERVICE_DNS_BENCH_SERVICES", 5000)?;
    let assets = setup()?;
    let binary = binary()?;
    let rt = runtime()?;
    rt.block_on(async {
        let dir = root().join("target").join("flotilla-bench-service-dns");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        say("starting a control plane and moto");
        let mut cp = ControlPlane::start(&assets, &Options { dir: dir.join("cp"), lifetime: Lifetime::DieWithParent })
            .await
            .context("starting the control plane")?;
        let mut moto = MotoServer::start(&dir, Lifetime::DieWithParent).context("starting moto")?;
        let zone = route53::create_hosted_zone(&moto.endpoint, DOMAIN)?;
        let client = flotilla_testenv::kubeconfig::client_from_yaml(&std::fs::read_to_string(&cp.kubeconfig)?).await?;
        let result = bench(&client, &binary, &cp.kubeconfig, &moto.endpoint, &zone, &dir, latency_n, burst_n).await;
        moto.stop();
        cp.stop();
        result
    })
}

#[allow(clippy::too_many_arguments)]
async fn bench(
    client: &Client,
    binary: &Path,
    kubeconfig: &Path,
    endpoint: &str,
    zone: &str,
    dir: &Path,
    latency_n: usize,
    burst_n: usize,
) -> anyhow::Result<()> {
    let op = start_operator(binary, kubeconfig, endpoint, zone, &dir.join("service-dns.log"))?;
    // Wait for the first sync (the cluster's own `kubernetes` Service).
    let started = Instant::now();
    while metric(&op, SYNCS) < 1.0 {
        if started.elapsed() > Duration::from_secs(60) {
            bail!("service-dns did not sync within 60s; see {}", dir.join("service-dns.log").display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let base_managed = metric(&op, MANAGED);

    // 1. Latency, one at a time.
    say(&format!("latency: {latency_n} Services, one at a time"));
    create_namespace(client, "bench-latency").await?;
    let api: Api<Service> = Api::namespaced(client.clone(), "bench-latency");
    let mut latencies = Vec::with_capacity(latency_n);
    for i in 0..latency_n {
        let name = format!("lat-{i:04}");
        let record = format!("kube-{name}.{DOMAIN}");
        let t0 = Instant::now();
        api.create(&PostParams::default(), &service(&name)).await.with_context(|| format!("creating {name}"))?;
        loop {
            if route53::find(endpoint, zone, &record, "A")?.is_some() {
                break;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!("{record} did not appear within 60s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        latencies.push(t0.elapsed());
    }
    latencies.sort();
    let p50 = percentile(&latencies, 50.0);
    let p99 = percentile(&latencies, 99.0);
    let writes_after_latency = metric(&op, WRITES);

    // 2. Burst: N Services at once.
    say(&format!("burst: {burst_n} Services created at once"));
    create_namespace(client, "bench-burst").await?;
    let api: Api<Service> = Api::namespaced(client.clone(), "bench-burst");
    let (w0, l0, s0) = (metric(&op, WRITES), metric(&op, LISTS), metric(&op, ROUTE53_SECONDS));
    let target = base_managed + latency_n as f64 + burst_n as f64;
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let workers = 16usize;
    for w in 0..workers {
        let api = api.clone();
        tasks.spawn(async move {
            let mut i = w;
            while i < burst_n {
                let name = format!("svc-{i:05}");
                api.create(&PostParams::default(), &service(&name))
                    .await
                    .with_context(|| format!("creating {name}"))?;
                i += workers;
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("a create task")??;
    }
    let created_in = t0.elapsed();
    loop {
        if metric(&op, MANAGED) >= target {
            break;
        }
        if t0.elapsed() > TIMEOUT {
            bail!("not converged after {TIMEOUT:?}: {} of {target} records", metric(&op, MANAGED));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let converged_in = t0.elapsed();
    let (writes, lists) = (metric(&op, WRITES) - w0, metric(&op, LISTS) - l0);
    let r53_secs = metric(&op, ROUTE53_SECONDS) - s0;
    // Check the zone itself, not only the operator's word.
    let sets = route53::list_record_sets(endpoint, zone)?;
    let burst_records = sets.iter().filter(|(n, t, _)| t == "A" && n.starts_with("kube-svc-")).count();
    let rss_kib = op.status_kib("VmHWM:");
    drop(op);

    // 2b. The same Services all at once from the operator's point of view:
    // a fresh operator on a new, empty zone of the same name.
    say(&format!("all at once: a new operator, {} Services, an empty zone", target as usize));
    let zone2 = route53::create_hosted_zone(endpoint, DOMAIN)?;
    let op = start_operator(binary, kubeconfig, endpoint, &zone2, &dir.join("service-dns-cold.log"))?;
    let t2 = Instant::now();
    loop {
        if metric(&op, MANAGED) >= target {
            break;
        }
        if t2.elapsed() > TIMEOUT {
            bail!("cold start not converged after {TIMEOUT:?}: {} of {target} records", metric(&op, MANAGED));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cold_in = t2.elapsed();
    let (cold_writes, cold_lists) = (metric(&op, WRITES), metric(&op, LISTS));
    let cold_r53_secs = metric(&op, ROUTE53_SECONDS);
    let cold_records = route53::list_record_sets(endpoint, &zone2)?.iter().filter(|(_, t, _)| t == "A").count();
    let cold_rss = op.status_kib("VmHWM:");
    drop(op);

    // 3. Restart against the converged zone.
    say("restart against the converged zone");
    let op = start_operator(binary, kubeconfig, endpoint, zone, &dir.join("service-dns-restart.log"))?;
    let t1 = Instant::now();
    while metric(&op, SYNCS) < 1.0 {
        if t1.elapsed() > Duration::from_secs(300) {
            bail!("restarted service-dns did not sync within 300s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let restart_sync = t1.elapsed();
    let restart_writes = metric(&op, WRITES);
    let restart_rss = op.status_kib("VmHWM:");
    drop(op);

    println!();
    println!("service-dns benchmark (moto on loopback, local control plane, 2 cores shared)");
    println!("  latency, {latency_n} Services one at a time (create call -> A record in the zone, debounce included):");
    println!(
        "    p50 {:>8.0?}   p99 {:>8.0?}   min {:>8.0?}   max {:>8.0?}",
        p50,
        p99,
        latencies[0],
        latencies[latencies.len() - 1]
    );
    println!("    ChangeResourceRecordSets calls: {writes_after_latency}");
    println!("  burst, {burst_n} Services created at once ({workers} concurrent creates):");
    println!("    created in {created_in:.1?}; all {burst_n} managed {converged_in:.1?} after the first create");
    println!("    Route53 calls during the burst: ChangeResourceRecordSets {writes}, ListResourceRecordSets {lists}");
    println!("    time the Route53 endpoint (moto) took to answer them: {r53_secs:.1} s");
    println!("    A records of the burst found in the zone: {burst_records} of {burst_n}");
    let mib = |k: Option<u64>| k.map(|k| format!("{:.1} MiB", k as f64 / 1024.0)).unwrap_or_else(|| "n/a".into());
    println!(
        "  all at once ({} Services, fresh operator, empty zone): converged in {cold_in:.1?} (process start included)",
        target as usize
    );
    println!(
        "    ChangeResourceRecordSets {cold_writes}, ListResourceRecordSets {cold_lists}, A records in the zone {cold_records}, peak RSS {}",
        mib(cold_rss)
    );
    println!("    of which the Route53 endpoint (moto) answering: {cold_r53_secs:.1} s");
    println!(
        "  restart against the converged zone: first sync in {restart_sync:.1?}, ChangeResourceRecordSets {restart_writes}"
    );
    println!(
        "  peak RSS (VmHWM): {} during the run, {} after a restart with {burst_n} Services",
        mib(rss_kib),
        mib(restart_rss)
    );
    println!(
        "  targets (issue): p50 <= 1.5 s, {burst_n} Services <= 30 s with <= 15 ChangeResourceRecordSets, RSS <= 40 MiB"
    );
    Ok(())
}

async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let ns = Namespace { metadata: ObjectMeta { name: Some(name.into()), ..Default::default() }, ..Default::default() };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}
