//! `cargo xtask bench load-tester`: figures for issue 13's benchmark.
//!
//! 1. **loadgen against wrk** (Debian's `wrk`, a standard HTTP benchmark
//!    tool), one after the other against the same local server
//!    (`loadgen/examples/bench_server.rs`, release, one worker thread):
//!    * throughput: `/` answered at once, 64 connections, 2 threads each
//!      side, 10 s: requests/s, and requests per CPU-second of the client
//!      (its user + system time, read from /proc when it has exited) — the
//!      per-core figure, fair whatever else the machine runs;
//!    * latency accuracy: `/slow` answered after a known delay (60 % 1 ms,
//!      38 % 5 ms, 2 % 20 ms), 16 connections, 10 s: each tool's p50/p90/p99
//!      beside the server's own measure of the same requests, so what a tool
//!      adds on top of the server's time is visible.
//! 2. **the operator with 100 LoadTests** on a control plane: each with 2
//!    runners, bound to a node object the benchmark keeps alive, statuses
//!    written as a kubelet would (Running; then, once signalled, exited 0
//!    with a realistic summary): the time until every run is Finished, the
//!    reconciles, and the operator's RSS idle, during and at its peak.
//!
//! Scale knobs: `LOAD_TESTER_BENCH_SECONDS` (10, each client phase),
//! `LOAD_TESTER_BENCH_TESTS` (100), `LOAD_TESTER_BENCH_REPLICAS` (2).

use std::path::Path;
use std::process::{Command, Stdio};
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
use loadgen::summary::{Merged, Summary, histogram, record};
use serde_json::json;

use super::{Killed, Measured, env_usize, from_json, make_node, wait};
use crate::util::{cargo, root, run_cmd, runtime, say, setup};

const NS: &str = "bench";
const NODE: &str = "bench-node";
const WRK: &str = "/usr/bin/wrk";

pub fn run() -> anyhow::Result<()> {
    let seconds = env_usize("LOAD_TESTER_BENCH_SECONDS", 10)?.max(1) as u64;
    let tests = env_usize("LOAD_TESTER_BENCH_TESTS", 100)?.max(1);
    let replicas = env_usize("LOAD_TESTER_BENCH_REPLICAS", 2)?.max(1);
    let assets = setup()?;
    // Only this benchmark needs wrk: installed here (as root), not by setup.
    flotilla_testenv::build::tools::install_missing(&[("wrk", WRK)], &crate::util::progress)
        .context("wrk, the reference client (Debian's package `wrk`)")?;
    say("building loadgen, the benchmark's server and load-tester (release)");
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
    let release = crate::dist::build_release()?;
    let rt = runtime()?;
    let clients = clients(&release, seconds)?;
    let operator = rt.block_on(async {
        let dir = root().join("target").join("flotilla-bench-load-tester");
        let _ = std::fs::remove_dir_all(&dir);
        say("starting a control plane for the operator part");
        let mut cp = ControlPlane::start(&assets, &Options { dir, lifetime: Lifetime::DieWithParent }).await?;
        let result = operator(&cp, &release.join("load-tester"), tests, replicas).await;
        cp.stop();
        result
    })?;
    say("load-tester benchmark");
    print!("{clients}{operator}");
    Ok(())
}

// --- 1. loadgen against wrk --------------------------------------------

/// The benchmark's server (`loadgen/examples/bench_server.rs`, release):
/// its own process, one worker thread; killed when dropped.
struct Server {
    _process: Killed,
    url: String,
}

/// The server's own measure of its `/slow` answers: count, p50, p90, p99.
struct ServerTimes {
    count: u64,
    p50: Duration,
    p90: Duration,
    p99: Duration,
}

impl Server {
    fn start(binary: &Path) -> anyhow::Result<Self> {
        let mut process = Killed(
            Command::new(binary)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .with_context(|| format!("starting {}", binary.display()))?,
        );
        let mut line = String::new();
        let out = process.0.stdout.take().context("the server's stdout")?;
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)?;
        let url = line.trim().to_string();
        if !url.starts_with("http://") {
            bail!("the benchmark server printed {url:?}, not its URL");
        }
        Ok(Self { _process: process, url })
    }

    fn get(&self, path: &str) -> anyhow::Result<String> {
        use std::io::{Read, Write};
        let host = self.url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(host)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        Ok(text.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default())
    }

    fn times(&self) -> anyhow::Result<ServerTimes> {
        let v: serde_json::Value = serde_json::from_str(&self.get("/stats")?).context("the server's /stats")?;
        let us = |k: &str| Duration::from_micros(v[k].as_u64().unwrap_or(0));
        Ok(ServerTimes { count: v["count"].as_u64().unwrap_or(0), p50: us("p50"), p90: us("p90"), p99: us("p99") })
    }
}

/// A client's run: what it printed, and its CPU time.
struct ClientRun {
    stdout: String,
    cpu: Duration,
}

/// Runs `cmd` to its end (killed past `limit`) and reads its user + system
/// CPU time from /proc/<pid>/stat while it is a zombie (exited, not yet
/// reaped: the kernel keeps its accounting, every thread's included, until
/// then).
fn run_measured(mut cmd: Command, limit: Duration) -> anyhow::Result<ClientRun> {
    let started = Instant::now();
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().context("starting a client")?;
    let mut out = child.stdout.take().context("the client's stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let stat_path = format!("/proc/{}/stat", child.id());
    // CLK_TCK is 100 on Linux for user space (USER_HZ).
    let ticks = |stat: &str| -> Option<u64> {
        let rest = stat.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        // After the name: state is field 3, utime 14, stime 15 (1-based).
        Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
    };
    let cpu = loop {
        let stat = std::fs::read_to_string(&stat_path).context("reading the client's /proc stat")?;
        let state = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next()).unwrap_or("");
        if state == "Z" {
            break ticks(&stat).context("parsing /proc stat")?;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the client ran past {limit:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let status = child.wait()?;
    let stdout = reader.join().unwrap_or_default();
    if !status.success() {
        bail!("the client failed ({status}):\n{stdout}");
    }
    Ok(ClientRun { stdout, cpu: Duration::from_millis(cpu * 10) })
}

/// One client's figures in one phase.
struct Figures {
    requests: u64,
    errors: u64,
    secs: f64,
    cpu: Duration,
    p50: Duration,
    p90: Duration,
    p99: Duration,
}

impl Figures {
    fn line(&self, who: &str) -> String {
        let per_cpu = self.requests as f64 / self.cpu.as_secs_f64().max(0.01);
        format!(
            "  {who:<8} {:>9.0} req/s  {:>9.0} req per CPU-second ({:.1} CPU-s)  p50 {:>7.2} ms  p90 {:>7.2} ms  p99 {:>7.2} ms  errors {}\n",
            self.requests as f64 / self.secs.max(0.001),
            per_cpu,
            self.cpu.as_secs_f64(),
            ms(self.p50),
            ms(self.p90),
            ms(self.p99),
            self.errors,
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// How long past its own duration a client may run before it is killed.
const CLIENT_SLACK: Duration = Duration::from_secs(60);

fn loadgen(binary: &Path, url: &str, connections: u64, seconds: u64) -> anyhow::Result<Figures> {
    let mut cmd = Command::new(binary);
    cmd.args(["--url", url, "--concurrency", &connections.to_string(), "--repeat", "1000000000"])
        .args(["--deadline", &format!("{seconds}s"), "--timeout", "5s"])
        // The summary is read from stdout, where loadgen prints it too.
        .args(["--termination-log", "/dev/null"])
        .env("TOKIO_WORKER_THREADS", "2");
    let run = run_measured(cmd, Duration::from_secs(seconds) + CLIENT_SLACK)?;
    let line = run.stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    let merged = Merged::of(&[Summary::parse(line).with_context(|| format!("loadgen's summary: {line:?}"))?])?;
    Ok(Figures {
        requests: merged.requests,
        errors: merged.error_count(),
        secs: merged.elapsed.as_secs_f64(),
        cpu: run.cpu,
        p50: merged.quantile(0.50),
        p90: merged.quantile(0.90),
        p99: merged.quantile(0.99),
    })
}

/// wrk's duration text (`635.91us`, `1.38ms`, `2.01s`).
fn wrk_duration(s: &str) -> Option<Duration> {
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic())?);
    let v: f64 = num.parse().ok()?;
    let secs = match unit {
        "us" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

/// wrk's `--latency` report: requests, seconds, errors and percentiles.
fn parse_wrk(out: &str) -> Option<(u64, f64, u64, Duration, Duration, Duration)> {
    let pct =
        |p: &str| out.lines().map(str::trim).find_map(|l| l.strip_prefix(p)).and_then(|rest| wrk_duration(rest.trim()));
    let total = out.lines().find(|l| l.contains(" requests in "))?;
    let mut words = total.split_whitespace();
    let requests: u64 = words.next()?.parse().ok()?;
    let secs = wrk_duration(words.nth(2)?.trim_end_matches(','))?.as_secs_f64();
    // "Non-2xx or 3xx responses: N" and "Socket errors: connect N, read N, write N, timeout N".
    let mut errors = 0u64;
    for l in out.lines().map(str::trim) {
        if let Some(n) = l.strip_prefix("Non-2xx or 3xx responses:") {
            errors += n.trim().parse::<u64>().unwrap_or(0);
        }
        if let Some(rest) = l.strip_prefix("Socket errors:") {
            errors += rest.split(',').filter_map(|p| p.split_whitespace().nth(1)?.parse::<u64>().ok()).sum::<u64>();
        }
    }
    Some((requests, secs, errors, pct("50%")?, pct("90%")?, pct("99%")?))
}

fn wrk(url: &str, connections: u64, seconds: u64) -> anyhow::Result<Figures> {
    let mut cmd = Command::new(WRK);
    cmd.args(["-t2", &format!("-c{connections}"), &format!("-d{seconds}s"), "--latency", url]);
    let run = run_measured(cmd, Duration::from_secs(seconds) + CLIENT_SLACK)?;
    let (requests, secs, errors, p50, p90, p99) =
        parse_wrk(&run.stdout).with_context(|| format!("reading wrk's report:\n{}", run.stdout))?;
    Ok(Figures { requests, errors, secs, cpu: run.cpu, p50, p90, p99 })
}

fn clients(release: &Path, seconds: u64) -> anyhow::Result<String> {
    let server = Server::start(&release.join("examples").join("bench_server"))?;
    let loadgen_binary = release.join("loadgen");
    let mut report = format!(
        "loadgen vs wrk ({} cores; the server its own process on one worker thread; {seconds} s each; 2 client threads each)\n",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    say("throughput: 64 connections to an instant answer");
    report.push_str("throughput: 64 connections, `/` answered at once\n");
    let fast = format!("{}/", server.url);
    report.push_str(&loadgen(&loadgen_binary, &fast, 64, seconds)?.line("loadgen"));
    report.push_str(&wrk(&fast, 64, seconds)?.line("wrk"));

    say("latency: 16 connections to a known delay (60% 1 ms, 38% 5 ms, 2% 20 ms)");
    report.push_str("latency accuracy: 16 connections, `/slow` (60 % 1 ms, 38 % 5 ms, 2 % 20 ms)\n");
    let slow = format!("{}/slow", server.url);
    for who in ["loadgen", "wrk"] {
        server.get("/reset")?;
        let figures =
            if who == "loadgen" { loadgen(&loadgen_binary, &slow, 16, seconds)? } else { wrk(&slow, 16, seconds)? };
        let truth = server.times()?;
        report.push_str(&figures.line(who));
        report.push_str(&format!(
            "  {:<8} the server's own time, same {} requests: p50 {:>7.2} ms  p90 {:>7.2} ms  p99 {:>7.2} ms  (the client's p99 is {:+.2} ms off)\n",
            "",
            truth.count,
            ms(truth.p50),
            ms(truth.p90),
            ms(truth.p99),
            ms(figures.p99) - ms(truth.p99),
        ));
    }
    Ok(report)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_reports_are_read() {
        let out = "Running 10s test @ http://127.0.0.1:1/\n  2 threads and 64 connections\n  Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency   635.91us  100.00us   2.00ms   90.00%\n  Latency Distribution\n     50%  635.91us\n     75%  712.43us\n     90%  800.21us\n     99%    1.38ms\n  123456 requests in 10.00s, 11.11MB read\n  Socket errors: connect 0, read 2, write 0, timeout 1\n  Non-2xx or 3xx responses: 4\nRequests/sec:  12345.67\nTransfer/sec:      1.11MB\n";
        let (requests, secs, errors, p50, p90, p99) = parse_wrk(out).expect("a report");
        assert_eq!((requests, errors), (123_456, 7));
        assert!((secs - 10.0).abs() < 1e-9);
        assert_eq!(p50, Duration::from_nanos(635_910));
        assert_eq!(p90, Duration::from_nanos(800_210));
        assert_eq!(p99, Duration::from_micros(1_380));
    }
}
