//! `cargo xtask bench <operator>`: benchmarks that print figures against the
//! local control plane (and emulators). Not tests: nothing here asserts a time.

mod config_copier;
mod kubelet;
mod load_tester;
mod pod_alert;
mod pod_alert_evaluation;
mod pod_debugger;
mod scale;
mod service_dns;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

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

/// A process a benchmark started: killed and reaped when dropped, on every
/// way out (an error included).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An operator process under measurement: its memory from /proc, its
/// metrics scraped; killed when dropped.
struct Measured {
    child: Killed,
    metrics: String,
}

impl Measured {
    /// Starts `binary` with free loopback metrics/health ports, JSON logs
    /// into `log`, and `env`.
    fn start(binary: &Path, args: &[String], env: &[(&str, &str)], log: &Path) -> anyhow::Result<Self> {
        let (mp, hp) =
            (flotilla_testenv::cluster::process::free_port()?, flotilla_testenv::cluster::process::free_port()?);
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
        Ok(Self { child: Killed(child), metrics: format!("127.0.0.1:{mp}") })
    }

    /// Whether (and how) the process has exited.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.0.try_wait().ok().flatten()
    }

    /// A `/proc/<pid>/status` field in KiB (`VmRSS:`, `VmHWM:`).
    fn status_kib(&self, field: &str) -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.child.0.id())).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// The sum of a metric's series on /metrics; `name` may carry labels to
    /// pick one series, or the first of them (`x{controller="a"`) for all
    /// that start so.
    fn metric_sum(&self, name: &str) -> anyhow::Result<f64> {
        let mut s = TcpStream::connect(&self.metrics)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(s, "GET /metrics HTTP/1.0\r\nHost: {}\r\n\r\n", self.metrics)?;
        let mut body = String::new();
        s.read_to_string(&mut body)?;
        Ok(body
            .lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ', ',', '}']))
            .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            // An empty f64 sum is -0.0; + 0.0 makes "no series" print as 0.
            .sum::<f64>()
            + 0.0)
    }
}

pub(super) fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> anyhow::Result<T> {
    serde_json::from_value(v).context("a benchmark object")
}

/// The node the scheduler binds every pod to, kept Ready by heartbeats.
pub(super) async fn make_node(client: &Client, name: &str) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    make_node_with_kubelet(client, name, 1).await
}

/// Pods with `labels` labels each (short keys, `label-00000`…), never
/// scheduled (a node selector no node has): what a user with create-pods
/// rights can make every pod cache hold.
/// A namespaced API of our custom resource `K` as dynamic objects (the
/// benches write them from JSON, as a user's manifest would be).
pub(super) fn dynamic_api<K: kube::Resource<DynamicType = ()>>(
    client: &Client,
    ns: &str,
) -> Api<kube::api::DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &kube::api::ApiResource::erase::<K>(&()))
}

pub(super) async fn many_label_pods(client: &Client, ns: &str, pods: usize, labels: usize) -> anyhow::Result<()> {
    let map: serde_json::Map<String, Value> =
        (0..labels).map(|i| (format!("label-{i:05}"), Value::from("x"))).collect();
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    for i in 0..pods {
        let pod = from_json(json!({
            "metadata": {"name": format!("labels-{i:03}"), "labels": map},
            "spec": {"nodeSelector": {"flotilla.dev/no-such-node": "x"}, "containers": [{"name": "app", "image": "bench.invalid/app:1"}]}
        }))?;
        api.create(&PostParams::default(), &pod).await?;
    }
    Ok(())
}

/// [`make_node`] whose kubelet (for logs, exec) answers on 127.0.0.2:`port`
/// ([`kubelet::serve`]; port 1: nothing, log reads fail at once).
pub(super) async fn make_node_with_kubelet(
    client: &Client,
    name: &str,
    port: u16,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = from_json(json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}))?;
    nodes.create(&PostParams::default(), &node).await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease: Lease =
        from_json(json!({"metadata": {"name": name}, "spec": {"holderIdentity": name, "leaseDurationSeconds": 40}}))?;
    leases.create(&PostParams::default(), &lease).await?;
    let beat = move |now: String| {
        json!({"status": {
            "capacity": {"pods": "5000", "cpu": "1000", "memory": "4Ti"},
            "allocatable": {"pods": "5000", "cpu": "1000", "memory": "4Ti"},
            // Nothing listens there: log reads fail at once ("logs unavailable").
            "addresses": [{"type": "InternalIP", "address": "127.0.0.2"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "benchmark",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}]
        }})
    };
    nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(beat(Timestamp::now().to_string()))).await?;
    let (nodes, leases, name) = (nodes.clone(), leases.clone(), name.to_string());
    Ok(tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(10)).await;
            let now = Timestamp::now();
            let _ = nodes.patch_status(&name, &PatchParams::default(), &Patch::Merge(beat(now.to_string()))).await;
            let renew = json!({"spec": {"renewTime": now.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}});
            let _ = leases.patch(&name, &PatchParams::default(), &Patch::Merge(renew)).await;
        }
    }))
}

/// `name` is an operator, or `scale` with a preset (`small` when none).
pub fn run(name: &str, preset: Option<&str>) -> anyhow::Result<()> {
    if name != "scale" && preset.is_some() {
        anyhow::bail!("only `bench scale` takes a preset (small or large)");
    }
    match name {
        "scale" => scale::run(preset.unwrap_or("small")),
        "service-dns" => service_dns::run(),
        "config-copier" => config_copier::run(),
        "pod-alert" => pod_alert::run(),
        "pod-alert-evaluation" => pod_alert_evaluation::run(),
        "pod-debugger" => pod_debugger::run(),
        "load-tester" => load_tester::run(),
        other => {
            anyhow::bail!(
                "no benchmark named {other:?}; known: service-dns, config-copier, pod-alert, pod-alert-evaluation, pod-debugger, load-tester, scale [small|large]"
            )
        }
    }
}
