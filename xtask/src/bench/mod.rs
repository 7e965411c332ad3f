//! `cargo xtask bench <operator>`: benchmarks that print figures against the
//! local control plane (and emulators). Not tests: nothing here asserts a time.

mod config_copier;
mod pod_alert;
mod service_dns;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;

/// How long a benchmark waits for anything.
const TIMEOUT: Duration = Duration::from_secs(600);

/// Polls `check` every 250 ms until it says true, for at most [`TIMEOUT`].
async fn wait<F, Fut>(what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let started = std::time::Instant::now();
    loop {
        if check().await.unwrap_or(false) {
            return Ok(());
        }
        if started.elapsed() > TIMEOUT {
            anyhow::bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A number from the environment (a benchmark's scale knob), or `default`.
fn env_usize(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(v) => v.parse().with_context(|| format!("{name}={v:?} is not a number")),
        Err(_) => Ok(default),
    }
}

/// An operator process under measurement: its memory from /proc, its
/// metrics scraped; killed when dropped.
struct Measured {
    child: Child,
    metrics: String,
}

impl Drop for Measured {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Measured {
    /// Starts `binary` with free loopback metrics/health ports, JSON logs
    /// into `log`, and `env`.
    fn start(binary: &Path, args: &[String], env: &[(&str, &str)], log: &Path) -> anyhow::Result<Self> {
        let (mp, hp) = (flotilla_testenv::process::free_port()?, flotilla_testenv::process::free_port()?);
        let child = Command::new(binary)
            .arg(format!("--metrics-bind-address=127.0.0.1:{mp}"))
            .arg(format!("--health-probe-bind-address=127.0.0.1:{hp}"))
            .arg("--log-format=json")
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).with_context(|| log.display().to_string())?)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Self { child, metrics: format!("127.0.0.1:{mp}") })
    }

    /// A `/proc/<pid>/status` field in KiB (`VmRSS:`, `VmHWM:`).
    fn status_kib(&self, field: &str) -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// The sum of a metric's series on /metrics; `name` may carry labels to
    /// pick one series.
    fn metric_sum(&self, name: &str) -> anyhow::Result<f64> {
        let mut s = TcpStream::connect(&self.metrics)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(s, "GET /metrics HTTP/1.0\r\nHost: {}\r\n\r\n", self.metrics)?;
        let mut body = String::new();
        s.read_to_string(&mut body)?;
        Ok(body
            .lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            // An empty f64 sum is -0.0; + 0.0 makes "no series" print as 0.
            .sum::<f64>()
            + 0.0)
    }
}

pub fn run(operator: &str) -> anyhow::Result<()> {
    match operator {
        "service-dns" => service_dns::run(),
        "config-copier" => config_copier::run(),
        "pod-alert" => pod_alert::run(),
        other => anyhow::bail!("no benchmark named {other:?}; known: service-dns, config-copier, pod-alert"),
    }
}
