//! `cargo xtask bench service-dns`: the figures, on a control plane
//! and a moto server of its own, with the operator binary as a process:
//!
//! 1. latency: Services created one at a time on an idle operator (default
//!    200, each [`IDLE_PAUSE`] after the previous record appeared); for each,
//!    the time from the create call until its A record exists in the zone
//!    (p50/p99). Then the same (default 100 each) through the
//!    Route53-faithful proxy with INSYNC delayed 30 s, and with 1 % of the
//!    names always refused (their latency is not counted: they never get a
//!    record) — neither may slow the others;
//! 2. burst: Services created at once (default 5,000): time until the
//!    operator manages all of them, and how many ChangeResourceRecordSets
//!    (and other Route53) calls it took; then the same Services "all at
//!    once" for a fresh operator on a new, empty zone of the same name (time,
//!    calls); then a restart against the converged zone (time to its first
//!    sync, write calls: should be 0);
//! 3. peak RSS (VmHWM) of the operator.
//!
//! `SERVICE_DNS_BENCH_LATENCY`, `SERVICE_DNS_BENCH_FAULT_LATENCY` and
//! `SERVICE_DNS_BENCH_SERVICES` pick a
//! smaller scale for a quick run; `SERVICE_DNS_BENCH_PROFILE=debug` uses the
//! debug binary instead of building the release one, and
//! `SERVICE_DNS_BENCH_BINARY=<path>` another build altogether;
//! `SERVICE_DNS_BENCH_LOG` is the operators' `RUST_LOG` (default `info`;
//! `service_dns=debug` logs every sync's requests). Nothing here asserts a
//! time: it prints.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_testenv::aws::moto::{MotoServer, route53};
use flotilla_testenv::aws::route53_proxy::Route53Proxy;
use flotilla_testenv::{ControlPlane, Lifetime, Options};
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use super::{Measured, env_usize};
use crate::util::{cargo, root, run_cmd, runtime, say, setup};

const DOMAIN: &str = "bench.example";
const TIMEOUT: Duration = Duration::from_secs(900);
/// How long the latency runs leave the operator alone between two Services:
/// each is created on an idle operator (nothing pending, and its Route53
/// request budget — a change and its GetChange — not used up).
const IDLE_PAUSE: Duration = Duration::from_millis(500);

fn start_operator(
    binary: &Path,
    kubeconfig: &Path,
    endpoint: &str,
    zone: &str,
    log: &Path,
) -> anyhow::Result<Measured> {
    start_operator_with(binary, kubeconfig, endpoint, zone, log, &[])
}

fn start_operator_with(
    binary: &Path,
    kubeconfig: &Path,
    endpoint: &str,
    zone: &str,
    log: &Path,
    extra: &[String],
) -> anyhow::Result<Measured> {
    let kubeconfig = kubeconfig.display().to_string();
    // SERVICE_DNS_BENCH_LOG=service_dns=debug shows each sync's requests.
    let log_filter = std::env::var("SERVICE_DNS_BENCH_LOG").unwrap_or_else(|_| "info".into());
    let mut args = vec![format!("--hosted-zone-id={zone}"), format!("--domain-name={DOMAIN}")];
    args.extend_from_slice(extra);
    let env = [
        ("KUBECONFIG", kubeconfig.as_str()),
        ("AWS_ENDPOINT_URL_ROUTE_53", endpoint),
        ("AWS_ACCESS_KEY_ID", "bench"),
        ("AWS_SECRET_ACCESS_KEY", "bench"),
        ("AWS_REGION", "us-east-1"),
        ("RUST_LOG", log_filter.as_str()),
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
    // Another build of the operator (e.g. an older commit, for before/after figures).
    if let Some(bin) = std::env::var_os("SERVICE_DNS_BENCH_BINARY") {
        return Ok(PathBuf::from(bin));
    }
    let profile = std::env::var("SERVICE_DNS_BENCH_PROFILE").unwrap_or_else(|_| "release".into());
    match profile.as_str() {
        "release" => {
            say("building the release binaries (as the images are)");
            crate::dist::build_release()?;
        }
        "debug" => {
            say("building service-dns (debug)");
            run_cmd(cargo().args(["build", "--locked", "-p", "service-dns", "--bin", "service-dns"]))?;
        }
        other => bail!("SERVICE_DNS_BENCH_PROFILE={other:?}: release or debug"),
    }
    Ok(crate::dist::target_dir().join(profile).join("service-dns"))
}

pub fn run() -> anyhow::Result<()> {
    let latency_n = env_usize("SERVICE_DNS_BENCH_LATENCY", 200)?;
    let fault_n = env_usize("SERVICE_DNS_BENCH_FAULT_LATENCY", 100)?;
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
        let client =
            flotilla_testenv::cluster::kubeconfig::client_from_yaml(&std::fs::read_to_string(&cp.kubeconfig)?).await?;
        let result = bench(&client, &binary, &cp.kubeconfig, &moto.endpoint, &zone, &dir, latency_n, burst_n).await;
        let faults = match result {
            Ok(()) => faulty_route53(&client, &binary, &cp.kubeconfig, &moto.endpoint, &dir, fault_n).await,
            Err(e) => Err(e),
        };
        let result = faults;
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

    // 1. Latency, one at a time on an idle operator.
    say(&format!("latency: {latency_n} Services, one at a time"));
    let latencies = idle_latency(client, "bench-latency", "lat", endpoint, zone, latency_n, &HashSet::new()).await?;
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
    println!(
        "  latency, {latency_n} Services one at a time on an idle operator (create call -> A record in the zone, {IDLE_PAUSE:?} apart):"
    );
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
        "  targets (issues): idle p50 <= 100 ms (p99 <= 300 ms), {burst_n} Services <= 30 s with <= 15 ChangeResourceRecordSets, RSS <= 40 MiB"
    );
    Ok(())
}

/// Services `<prefix>-NNNN` created one at a time in namespace `ns`, each
/// [`IDLE_PAUSE`] after the previous record appeared; the sorted create →
/// A record times of those not in `skip` (names that never get a record).
async fn idle_latency(
    client: &Client,
    ns: &str,
    prefix: &str,
    moto: &str,
    zone: &str,
    n: usize,
    skip: &HashSet<usize>,
) -> anyhow::Result<Vec<Duration>> {
    create_namespace(client, ns).await?;
    let api: Api<Service> = Api::namespaced(client.clone(), ns);
    let mut latencies = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("{prefix}-{i:04}");
        let record = format!("kube-{name}.{DOMAIN}");
        tokio::time::sleep(IDLE_PAUSE).await;
        let t0 = Instant::now();
        api.create(&PostParams::default(), &service(&name)).await.with_context(|| format!("creating {name}"))?;
        if skip.contains(&i) {
            continue;
        }
        loop {
            if route53::find(moto, zone, &record, "A")?.is_some() {
                break;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!("{record} did not appear within 60s");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        latencies.push(t0.elapsed());
    }
    latencies.sort();
    Ok(latencies)
}

/// The idle latency through the Route53-faithful proxy: INSYNC delayed
/// 30 s, then 1 % of the names always refused. Each run has its own zone,
/// namespace and operator (watching only that namespace).
async fn faulty_route53(
    client: &Client,
    binary: &Path,
    kubeconfig: &Path,
    moto: &str,
    dir: &Path,
    n: usize,
) -> anyhow::Result<()> {
    let mut lines = Vec::new();
    for run in ["insync-delayed", "one-percent-failing"] {
        let proxy = Route53Proxy::start(moto)?;
        let zone = route53::create_hosted_zone(moto, DOMAIN)?;
        let ns = format!("bench-{run}");
        let prefix = if run == "insync-delayed" { "slow" } else { "fail" };
        let failing: HashSet<usize> = if run == "insync-delayed" {
            proxy.faults().set_insync_delay(Duration::from_secs(30));
            HashSet::new()
        } else {
            let failing: HashSet<usize> = (0..n).filter(|i| i % 100 == 50).collect();
            for i in &failing {
                proxy.faults().fail_name(&format!("kube-{prefix}-{i:04}.{DOMAIN}"));
            }
            failing
        };
        say(&format!("latency through the Route53 proxy, {run}: {n} Services one at a time"));
        let op = start_operator_with(
            binary,
            kubeconfig,
            &proxy.endpoint,
            &zone,
            &dir.join(format!("service-dns-{run}.log")),
            &[format!("--watch-namespace={ns}")],
        )?;
        let started = Instant::now();
        while metric(&op, SYNCS) < 1.0 {
            if started.elapsed() > Duration::from_secs(60) {
                bail!("service-dns ({run}) did not sync within 60s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let l = idle_latency(client, &ns, prefix, moto, &zone, n, &failing).await?;
        let stats = proxy.faults().stats();
        lines.push(format!(
            "  {run} ({} of {n} names refused): p50 {:>6.0?}  p99 {:>6.0?}  max {:>6.0?}; ChangeResourceRecordSets {} ({} refused), GetChange {}, full listings {}",
            failing.len(),
            percentile(&l, 50.0),
            percentile(&l, 99.0),
            l.last().copied().unwrap_or_default(),
            stats.change_requests,
            stats.changes_refused,
            stats.get_changes,
            stats.listings
        ));
        drop(op);
    }
    println!("  idle latency through the Route53-faithful proxy (INSYNC delayed 30 s; 1 % of names always refused):");
    for l in lines {
        println!("{l}");
    }
    println!("  target (issue): idle p50 <= 100 ms and p99 <= 300 ms, also in both runs above");
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
