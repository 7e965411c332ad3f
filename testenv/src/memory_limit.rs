//! A memory limit on a process, enforced as a container runtime enforces
//! a pod's `resources.limits.memory`: a cgroup whose limit the kernel keeps
//! by OOM-killing inside it. Tests start an operator in one with its
//! chart's limit to show what a tenant's objects cannot make it hold — the
//! operator killed is the failure, not a figure compared to a bound.
//!
//! cgroup v2 where its memory controller is enabled, else v1's memory
//! hierarchy (this machine has v1). Needs root, as the cluster's node does.
#![allow(unsafe_code)] // the pre_exec hook (std makes it unsafe)

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = "/sys/fs/cgroup";

/// One cgroup with a memory limit, removed when dropped (after its
/// processes are gone).
#[derive(Debug)]
pub struct MemoryLimit {
    dir: PathBuf,
    v2: bool,
    procs: CString,
}

impl MemoryLimit {
    /// A new cgroup `flotilla-<name>-<pid>` limited to `bytes`.
    pub fn new(name: &str, bytes: u64) -> Result<Self, String> {
        let v2 = std::fs::read_to_string(Path::new(ROOT).join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|x| x == "memory"));
        let parent = if v2 { PathBuf::from(ROOT) } else { Path::new(ROOT).join("memory") };
        if !parent.join("cgroup.procs").is_file() {
            return Err(format!(
                "no cgroup memory controller at {}: the memory-limit tests need Linux cgroups (v1 or v2) with \
                 the memory controller mounted, as a node's kubelet does, and root",
                parent.display()
            ));
        }
        if v2 {
            // The controller must be enabled for the parent's children.
            let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+memory");
        }
        let dir = parent.join(format!("flotilla-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).map_err(|e| format!("creating {}: {e} (run as root)", dir.display()))?;
        let limit_file = if v2 { "memory.max" } else { "memory.limit_in_bytes" };
        std::fs::write(dir.join(limit_file), bytes.to_string()).map_err(|e| {
            format!("setting {}/{limit_file}: {e} (is the memory controller enabled for this cgroup?)", dir.display())
        })?;
        // Nothing may be swapped out instead of killed (the files exist
        // where swap is accounted; without swap there is nothing to limit).
        let swap =
            if v2 { ("memory.swap.max", "0".to_string()) } else { ("memory.memsw.limit_in_bytes", bytes.to_string()) };
        if dir.join(swap.0).exists() {
            std::fs::write(dir.join(swap.0), swap.1)
                .map_err(|e| format!("setting {}/{}: {e}", dir.display(), swap.0))?;
        }
        let procs = CString::new(dir.join("cgroup.procs").into_os_string().into_encoded_bytes())
            .map_err(|e| format!("cgroup path: {e}"))?;
        Ok(Self { dir, v2, procs })
    }

    /// Makes `cmd`'s process join this cgroup before it runs its program,
    /// so everything it ever allocates counts against the limit.
    pub fn join_on_exec(&self, cmd: &mut Command) {
        let procs = self.procs.clone();
        // SAFETY: the hook opens, writes and closes one file by a path made
        // before the fork (no allocation), each an async-signal-safe call.
        unsafe {
            cmd.pre_exec(move || {
                use rustix::fs::{Mode, OFlags, open};
                let fd = open(procs.as_c_str(), OFlags::WRONLY, Mode::empty())?;
                rustix::io::write(&fd, b"0")?;
                Ok(())
            });
        }
    }

    /// How many times the kernel killed a process here for the limit.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.v2 { "memory.events" } else { "memory.oom_control" };
        let text = std::fs::read_to_string(self.dir.join(file)).unwrap_or_default();
        text.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
    }

    /// The most memory the cgroup's processes held (printed beside a
    /// result, never compared).
    pub fn peak_bytes(&self) -> Option<u64> {
        let file = if self.v2 { "memory.peak" } else { "memory.max_usage_in_bytes" };
        std::fs::read_to_string(self.dir.join(file)).ok()?.trim().parse().ok()
    }
}

impl Drop for MemoryLimit {
    fn drop(&mut self) {
        // Removable once empty: a killed process leaves it at once, a
        // stopped one after its parent reaped it.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// A process a test started: whether it has exited, and its log.
pub trait Started {
    fn exited(&mut self) -> Option<std::process::ExitStatus>;
    fn logs(&self) -> String;
}

impl Started for crate::cluster::process::OperatorProcess {
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        crate::cluster::process::OperatorProcess::exited(self)
    }
    fn logs(&self) -> String {
        crate::cluster::process::OperatorProcess::logs(self)
    }
}

impl MemoryLimit {
    /// Polls until `done` holds, then `hold` longer: `Err` as soon as `op`
    /// exits or the kernel kills in this cgroup (with its log), or when
    /// `done` does not hold within `timeout`. `Ok` with the peak bytes.
    pub async fn outlived<F, Fut>(
        &self,
        op: &mut impl Started,
        what: &str,
        timeout: std::time::Duration,
        hold: std::time::Duration,
        mut done: F,
    ) -> Result<Option<u64>, String>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let started = std::time::Instant::now();
        let mut since: Option<std::time::Instant> = None;
        while since.is_none_or(|at| at.elapsed() < hold) {
            if op.exited().is_some() || self.oom_kills() > 0 {
                return Err(format!(
                    "the operator exited ({:?}), OOM-killed {} time(s) under its limit (peak {:?} bytes)\n{}",
                    op.exited(),
                    self.oom_kills(),
                    self.peak_bytes(),
                    op.logs()
                ));
            }
            if since.is_none() && done().await {
                since = Some(std::time::Instant::now());
            }
            if since.is_none() && started.elapsed() > timeout {
                return Err(format!("no {what} after {timeout:?}\n{}", op.logs()));
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        Ok(self.peak_bytes())
    }
}

impl MemoryLimit {
    /// [`MemoryLimit::outlived`] until `op` answers `/readyz` and its
    /// gauge `series` (on `/metrics`) reaches `at_least` — its cache holds
    /// what the test made — then `hold` longer.
    pub async fn outlived_holding(
        &self,
        op: &mut crate::cluster::process::OperatorProcess,
        series: &str,
        at_least: f64,
        timeout: std::time::Duration,
        hold: std::time::Duration,
    ) -> Result<Option<u64>, String> {
        let (ready, metrics) = (op.health_url() + "/readyz", op.metrics_url());
        let what = format!("readiness with {series} at {at_least}");
        self.outlived(op, &what, timeout, hold, || {
            let (ready, metrics) = (ready.clone(), metrics.clone());
            async move {
                get_ok(&ready).await.is_some()
                    && get_ok(&metrics).await.and_then(|text| gauge(&text, series)).is_some_and(|v| v >= at_least)
            }
        })
        .await
    }
}

/// The body of a plain-HTTP GET of `url` (an operator's own endpoints on
/// loopback) when it answers 2xx within 5 s (an operator that accepts and
/// never answers must not keep [`MemoryLimit::outlived`] from its checks).
async fn get_ok(url: &str) -> Option<String> {
    tokio::time::timeout(std::time::Duration::from_secs(5), get(url)).await.ok().flatten()
}

async fn get(url: &str) -> Option<String> {
    use http_body_util::BodyExt;
    let uri: http::Uri = url.parse().ok()?;
    let stream = tokio::net::TcpStream::connect((uri.host()?, uri.port_u16()?)).await.ok()?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.ok()?;
    tokio::spawn(conn);
    let req = http::Request::get(uri.path())
        .header(http::header::HOST, uri.authority()?.as_str())
        .body(http_body_util::Empty::<hyper::body::Bytes>::new())
        .ok()?;
    let resp = sender.send_request(req).await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    String::from_utf8(resp.into_body().collect().await.ok()?.to_bytes().to_vec()).ok()
}

/// The value of `series` (name and labels as written, e.g.
/// `flotilla_pod_alert_pods_cached`) in a Prometheus text exposition.
fn gauge(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Annotation bytes [`bloat`] puts on each object: near the API's bound of
/// 256 KiB of annotations an object, as a tenant may.
pub const BLOAT_BYTES: usize = 250_000;

/// What a tenant with `edit` in `api`'s namespace can make every watch of
/// the kind carry: `count` objects `bloat-000`… made from `object` (the
/// kind's JSON without a name), each with [`BLOAT_BYTES`] of annotations.
pub async fn bloat<K>(api: &kube::Api<K>, count: usize, object: serde_json::Value) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    use futures::StreamExt;
    let blob = "x".repeat(BLOAT_BYTES);
    let made: Vec<Result<K, String>> = futures::stream::iter(0..count)
        .map(|i| {
            let mut o = object.clone();
            o["metadata"]["name"] = format!("bloat-{i:03}").into();
            o["metadata"]["annotations"]["tenant.example/blob"] = blob.as_str().into();
            async move {
                let o: K = serde_json::from_value(o).map_err(|e| e.to_string())?;
                api.create(&Default::default(), &o).await.map_err(|e| e.to_string())
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    made.into_iter().find_map(Result::err).map_or(Ok(()), Err)
}

/// `resources.limits.memory` of `charts/<operator>/values.yaml`, in bytes:
/// the limit a default install runs the operator with.
pub fn chart_limit(operator: &str) -> Result<u64, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("charts").join(operator).join("values.yaml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let values: serde_json::Value =
        serde_saphyr::from_str(&text).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let quantity = values
        .pointer("/resources/limits/memory")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| format!("{} sets no resources.limits.memory", path.display()))?;
    bytes(quantity).ok_or_else(|| format!("{}: memory limit {quantity:?} is not a quantity", path.display()))
}

/// A memory quantity (`128Mi`, `1Gi`, `500M`, `1000000`) in bytes.
fn bytes(q: &str) -> Option<u64> {
    let split = q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len());
    let (n, unit) = q.split_at(split);
    let factor: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        _ => return None,
    };
    n.parse::<u64>().ok()?.checked_mul(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(bytes("128Mi"), Some(128 << 20));
        assert_eq!(bytes("1Gi"), Some(1 << 30));
        assert_eq!(bytes("500M"), Some(500_000_000));
        assert_eq!(bytes("4096"), Some(4096));
        assert_eq!(bytes("1.5Gi"), None);
        assert_eq!(bytes("Mi"), None);
    }

    #[test]
    fn a_gauge_is_read_by_its_whole_name() {
        let text = "# HELP x_cached Pods\nx_cached_total 7\nx_cached 320\n";
        assert_eq!(gauge(text, "x_cached"), Some(320.0));
        assert_eq!(gauge(text, "x_cached_total"), Some(7.0));
        assert_eq!(gauge(text, "x_missing"), None);
    }

    #[test]
    fn every_chart_sets_a_limit() {
        for op in ["service-dns", "config-copier", "pod-alert", "pod-debugger", "load-tester"] {
            assert!(chart_limit(op).is_ok_and(|b| b >= 32 << 20), "{op}: {:?}", chart_limit(op));
        }
    }
}
