//! The client half of `cargo xtask bench load-tester`: loadgen against the
//! two reference senders, **wrk** (Debian's, C, closed model) and
//! **vegeta** (Go, open model: a constant rate), one after the other
//! against the same local server (`loadgen/examples/bench_server.rs`,
//! release, its own process on one worker thread), 2 client threads each.
//!
//! * Throughput: `/` answered at once, the same connections and duration
//!   for the three: requests/s, and requests per CPU-second of the client
//!   (its user + system time, read from /proc when it has exited) — the
//!   per-core figure, fair whatever else the machine runs. vegeta has no
//!   closed model: it runs at `-rate=0` (as fast as it can) with as many
//!   workers and connections as the others have connections.
//! * Latency accuracy: `/slow` answered after a known delay (60 % 1 ms,
//!   38 % 5 ms, 2 % 20 ms: the injected p99 is 20 ms), at a fixed
//!   open-model rate for loadgen and vegeta (wrk cannot pace a rate: it
//!   runs closed, at the connections that rate needs): each tool's p99
//!   beside the server's own measure of the same requests, and the error
//!   in %.
//!
//! The targets (issue 30) are printed beside the figures: loadgen at least
//! 0.8× wrk's requests per CPU-second and at least vegeta's, its p99
//! within 5 % of the server's.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use loadgen::summary::{Merged, Summary};

use super::super::Killed;
use crate::util::say;

const WRK: &str = "/usr/bin/wrk";

/// Connections of the throughput run.
const CONNECTIONS: u64 = 64;
/// The most connections (vegeta: workers) the open-model run may open.
const OPEN_CONNECTIONS: u64 = 64;
/// wrk's connections at `/slow`: closed, about what the rate keeps busy.
const WRK_SLOW_CONNECTIONS: u64 = 16;
/// The injected delay's p99 (`bench_server`'s `/slow`: 2 % take 20 ms).
const INJECTED_P99: Duration = Duration::from_millis(20);

/// Installs what the client runs need: wrk (Debian's package, as root),
/// vegeta (`go install`, cached like kwok).
pub fn tools() -> anyhow::Result<PathBuf> {
    flotilla_testenv::build::tools::install_missing(&[("wrk", WRK)], &crate::util::progress)
        .context("wrk, the reference client (Debian's package `wrk`)")?;
    flotilla_testenv::build::tools::VEGETA
        .ensure(&crate::util::progress)
        .context("vegeta, the open-model reference client (`cargo xtask setup` installs it)")
}

/// The benchmark's server: its own process, one worker thread; killed when
/// dropped.
struct Server {
    _process: Killed,
    url: String,
}

/// The server's own measure of its `/slow` answers: count and p99.
struct ServerTimes {
    count: u64,
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
        Ok(ServerTimes {
            count: v["count"].as_u64().unwrap_or(0),
            p99: Duration::from_micros(v["p99"].as_u64().unwrap_or(0)),
        })
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

/// One client's figures in one run.
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
    fn rate(&self) -> f64 {
        self.requests as f64 / self.secs.max(0.001)
    }

    fn per_cpu(&self) -> f64 {
        self.requests as f64 / self.cpu.as_secs_f64().max(0.01)
    }

    fn line(&self, who: &str) -> String {
        format!(
            "  {who:<8} {:>9.0} req/s  {:>9.0} req per CPU-second ({:.1} CPU-s)  p50 {:>7.2} ms  p90 {:>7.2} ms  p99 {:>7.2} ms  errors {}\n",
            self.rate(),
            self.per_cpu(),
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

/// loadgen for `seconds`: closed model (`rate` 0) on `connections`, or
/// open model at `rate` requests/s with at most `connections`.
fn loadgen(binary: &Path, url: &str, connections: u64, rate: f64, seconds: u64) -> anyhow::Result<Figures> {
    let mut cmd = Command::new(binary);
    cmd.args(["--url", url, "--concurrency", &connections.to_string(), "--rate", &rate.to_string()])
        .args(["--duration", &format!("{seconds}s"), "--timeout", "5s"])
        // The summary is read from stdout, where loadgen prints it too.
        .args(["--termination-log", "/dev/null"])
        .env("TOKIO_WORKER_THREADS", "2");
    let run = run_measured(cmd, Duration::from_secs(seconds) + CLIENT_SLACK)?;
    // The fuller summary when the termination message had to lose
    // precision (a wide histogram), else the message (its last line).
    let lines: Vec<&str> = run.stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    let full = lines.iter().rev().find_map(|l| l.strip_prefix(loadgen::summary::FULL_PREFIX));
    let line = full.or(lines.last().copied()).unwrap_or_default();
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

/// `vegeta report -type=json`: requests, attack seconds, errors (answers
/// not 2xx/3xx and failures) and percentiles.
fn parse_vegeta(json: &str) -> Option<(u64, f64, u64, Duration, Duration, Duration)> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let requests = v["requests"].as_u64()?;
    let ns = |x: &serde_json::Value| x.as_u64().map(Duration::from_nanos);
    let secs = ns(&v["duration"])?.as_secs_f64();
    let ok = (v["success"].as_f64()? * requests as f64).round() as u64;
    let l = &v["latencies"];
    Some((requests, secs, requests.saturating_sub(ok), ns(&l["50th"])?, ns(&l["90th"])?, ns(&l["99th"])?))
}

/// vegeta for `seconds` with at most `workers` workers (each one request at
/// a time, so at most that many connections): `rate` 0 sends as fast as
/// they go, else that many requests/s. Only the attack is measured; the
/// report is read from its results file afterwards.
fn vegeta(binary: &Path, dir: &Path, url: &str, workers: u64, rate: f64, seconds: u64) -> anyhow::Result<Figures> {
    std::fs::create_dir_all(dir)?;
    let (targets, results) = (dir.join("targets"), dir.join("results.bin"));
    std::fs::write(&targets, format!("GET {url}\n"))?;
    let rate = if rate > 0.0 { format!("{rate}/1s") } else { "0".to_string() };
    let mut cmd = Command::new(binary);
    cmd.args(["attack", &format!("-rate={rate}"), &format!("-duration={seconds}s"), "-timeout=5s"])
        .arg(format!("-max-workers={workers}"))
        .arg(format!("-max-connections={workers}"))
        // Bodies are read, not kept in the results (loadgen and wrk keep none).
        .arg("-max-body=0")
        .arg(format!("-targets={}", targets.display()))
        .arg(format!("-output={}", results.display()))
        .env("GOMAXPROCS", "2");
    if rate == "0" {
        // Every worker from the start, as the others open every connection.
        cmd.arg(format!("-workers={workers}"));
    }
    let run = run_measured(cmd, Duration::from_secs(seconds) + CLIENT_SLACK)?;
    let out = Command::new(binary).args(["report", "-type=json"]).arg(&results).output()?;
    let report = String::from_utf8_lossy(&out.stdout);
    let (requests, secs, errors, p50, p90, p99) =
        parse_vegeta(&report).with_context(|| format!("reading vegeta's report: {report}"))?;
    let _ = std::fs::remove_file(&results);
    Ok(Figures { requests, errors, secs, cpu: run.cpu, p50, p90, p99 })
}

fn verdict(pass: bool) -> &'static str {
    if pass { "met" } else { "MISSED" }
}

/// Runs every client and returns the report.
pub fn run(release: &Path, vegeta_binary: &Path, dir: &Path, seconds: u64, rate: f64) -> anyhow::Result<String> {
    let server = Server::start(&release.join("examples").join("bench_server"))?;
    let lg = release.join("loadgen");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut report = format!(
        "loadgen vs wrk and vegeta ({} cores, load average {}; the server its own process on one worker thread; {seconds} s each; 2 client threads each)\n",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    );
    say(&format!("throughput: {CONNECTIONS} connections to an instant answer"));
    report.push_str(&format!(
        "throughput: `/` answered at once, {CONNECTIONS} connections \
         (loadgen: --concurrency {CONNECTIONS}; wrk: -c{CONNECTIONS} -t2; \
         vegeta, open model only: -rate=0 -workers={CONNECTIONS} -max-workers={CONNECTIONS} -max-connections={CONNECTIONS}, as fast as its workers go)\n"
    ));
    let fast = format!("{}/", server.url);
    let l = loadgen(&lg, &fast, CONNECTIONS, 0.0, seconds)?;
    let w = wrk(&fast, CONNECTIONS, seconds)?;
    let v = vegeta(vegeta_binary, dir, &fast, CONNECTIONS, 0.0, seconds)?;
    report.push_str(&l.line("loadgen"));
    report.push_str(&w.line("wrk"));
    report.push_str(&v.line("vegeta"));
    let (vs_wrk, vs_vegeta) = (l.per_cpu() / w.per_cpu().max(1.0), l.per_cpu() / v.per_cpu().max(1.0));
    report.push_str(&format!(
        "  loadgen per CPU-second: {vs_wrk:.2}x wrk's (target >= 0.8: {}), {vs_vegeta:.2}x vegeta's (target >= 1.0: {})\n",
        verdict(vs_wrk >= 0.8),
        verdict(vs_vegeta >= 1.0),
    ));

    say(&format!("latency: {rate} requests/s to a known delay (60% 1 ms, 38% 5 ms, 2% 20 ms)"));
    report.push_str(&format!(
        "latency accuracy: `/slow` (60 % 1 ms, 38 % 5 ms, 2 % 20 ms: injected p99 {:.0} ms), open model at {rate} requests/s \
         (loadgen: --rate {rate} --concurrency {OPEN_CONNECTIONS}; vegeta: -rate={rate}/1s -max-workers={OPEN_CONNECTIONS}; \
         wrk cannot pace a rate: closed, -c{WRK_SLOW_CONNECTIONS})\n",
        ms(INJECTED_P99)
    ));
    let slow = format!("{}/slow", server.url);
    for who in ["loadgen", "vegeta", "wrk"] {
        server.get("/reset")?;
        let figures = match who {
            "loadgen" => loadgen(&lg, &slow, OPEN_CONNECTIONS, rate, seconds)?,
            "vegeta" => vegeta(vegeta_binary, dir, &slow, OPEN_CONNECTIONS, rate, seconds)?,
            _ => wrk(&slow, WRK_SLOW_CONNECTIONS, seconds)?,
        };
        let truth = server.times()?;
        let error = (ms(figures.p99) - ms(truth.p99)) / ms(truth.p99).max(0.001) * 100.0;
        report.push_str(&figures.line(who));
        let target = if who == "loadgen" {
            format!(" (target within 5 %: {})", verdict(error.abs() <= 5.0))
        } else {
            String::new()
        };
        report.push_str(&format!(
            "  {:<8} the server's own p99 for the same {} requests {:>7.2} ms: the client's p99 is {:+.2} ms, {error:+.1} % off{target}\n",
            "",
            truth.count,
            ms(truth.p99),
            ms(figures.p99) - ms(truth.p99),
        ));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
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

    #[test]
    fn vegeta_reports_are_read() {
        let out = r#"{"latencies":{"total":201953829870,"mean":3276237,"50th":2797400,"90th":6198196,"95th":7559872,"99th":11603491,"max":26816163,"min":46127},"bytes_in":{"total":123284,"mean":2},"bytes_out":{"total":0,"mean":0},"earliest":"2026-11-27T11:46:38.599728752Z","latest":"2026-11-27T11:46:43.596259383Z","end":"2026-11-27T11:46:43.597997483Z","duration":4996530631,"wait":1738100,"requests":61642,"rate":12336.96,"throughput":12332.67,"success":0.75,"status_codes":{"200":46232,"500":15410},"errors":["500 Internal Server Error"]}"#;
        let (requests, secs, errors, p50, p90, p99) = parse_vegeta(out).expect("a report");
        assert_eq!((requests, errors), (61_642, 15_410));
        assert!((secs - 4.996530631).abs() < 1e-9);
        assert_eq!(p50, Duration::from_nanos(2_797_400));
        assert_eq!(p90, Duration::from_nanos(6_198_196));
        assert_eq!(p99, Duration::from_nanos(11_603_491));
    }
}
