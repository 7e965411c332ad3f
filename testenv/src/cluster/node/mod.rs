//! The one-node cluster: the control plane plus a real node — containerd,
//! the kubelet, kube-proxy and CoreDNS — so pods run, log, exec, crash,
//! reach each other through Services by DNS name, and charts install for
//! real.
//!
//! There is one per machine (the kubelet's ports, kube-proxy's iptables
//! chains and the bridge are machine-wide). Whoever brings it up (`cargo
//! xtask cluster up`, `cargo xtask test`, or a test binary when none runs)
//! owns it; everyone else attaches to it. Its components run detached and
//! are recorded in `/run/flotilla-cluster/state.json`; transitions (up,
//! down) hold a file lock, so a second `up` while one runs reports the
//! running cluster instead of breaking it, and an `up` after a crash cleans
//! the stale state first.
//!
//! It needs root (network namespaces, mounts, iptables, cgroups).

pub mod cleanup;
pub mod config;
pub mod images;
pub mod network;
pub mod paths;
pub mod pressure;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use serde::{Deserialize, Serialize};

use crate::build::assets::{Assets, fmt_elapsed};
use crate::build::node_assets::NodeAssets;
use crate::cluster::control_plane::{ControlPlane, Options};
use crate::cluster::kubeconfig::{self, Credentials};
use crate::cluster::process::{Lifetime, Process, pid_alive, terminate_pid};
pub use cleanup::Leftovers;
pub use paths::NodePaths;
use paths::{NODE_IP, NODE_NAME};

/// How long the node may take to register Ready and run CoreDNS.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(
        "the one-node cluster needs root (it creates a bridge, network namespaces, mounts, iptables rules and \
         cgroups): run as root, e.g. `sudo -E cargo xtask cluster up`"
    )]
    NotRoot,
    #[error(transparent)]
    Assets(#[from] crate::build::assets::AssetsError),
    #[error(transparent)]
    Network(#[from] network::NetworkError),
    #[error(transparent)]
    ControlPlane(#[from] crate::cluster::control_plane::StartError),
    #[error(transparent)]
    Image(#[from] crate::build::images::ImageError),
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("the node did not become ready: {reason}\n{logs}")]
    NotReady { reason: String, logs: String },
    #[error(
        "the node reports {conditions}: its kubelet schedules no pod until that ends ({space}). Free disk space \
         (an old Cargo target directory is the usual culprit), then `cargo xtask cluster down` and up again"
    )]
    Pressure { conditions: String, space: String },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NodeError {
    let what = what.into();
    move |source| NodeError::Io { what, source }
}

/// What a running one-node cluster is, recorded in `state.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClusterInfo {
    /// Who brought it up (`cargo xtask cluster up`, a test binary …).
    pub owner: String,
    pub owner_pid: u32,
    pub server: String,
    pub kubeconfig: PathBuf,
    pub ca_pem: String,
    /// Admin kubeconfig's directory, for files tests write beside it.
    pub dir: PathBuf,
    /// (component, pid) in start order.
    pub pids: Vec<(String, u32)>,
    /// How long the start took, in seconds.
    pub start_seconds: f64,
}

impl ClusterInfo {
    /// Whether every recorded component still runs.
    pub fn alive(&self) -> bool {
        !self.pids.is_empty() && self.pids.iter().all(|(_, p)| pid_alive(*p))
    }
}

/// The outcome of [`up`].
#[derive(Debug)]
pub enum Up {
    Started(ClusterInfo),
    AlreadyRunning(ClusterInfo),
}

impl Up {
    pub fn info(&self) -> &ClusterInfo {
        match self {
            Up::Started(i) | Up::AlreadyRunning(i) => i,
        }
    }
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

/// The transition lock (held only while bringing the cluster up or down).
fn lock(paths: &NodePaths, progress: &dyn Fn(&str)) -> Result<std::fs::File, NodeError> {
    std::fs::create_dir_all(&paths.run).map_err(io(format!("creating {}", paths.run.display())))?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(paths.lock_file())
        .map_err(io("opening the cluster lock"))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            progress("another process is starting or stopping the one-node cluster; waiting for it");
            file.lock().map_err(io("waiting for the cluster lock"))?;
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io("taking the cluster lock")(e)),
    }
    Ok(file)
}

/// The running cluster, if there is one and all its components live.
pub fn running(paths: &NodePaths) -> Option<ClusterInfo> {
    let text = std::fs::read_to_string(paths.state_file()).ok()?;
    let info: ClusterInfo = serde_json::from_str(&text).ok()?;
    info.alive().then_some(info)
}

/// Brings the one-node cluster up, or reports the one already running.
pub fn up(owner: &str, progress: &dyn Fn(&str)) -> Result<Up, NodeError> {
    if !is_root() {
        return Err(NodeError::NotRoot);
    }
    let paths = NodePaths::default();
    let _lock = lock(&paths, progress)?;
    if let Some(info) = running(&paths) {
        return Ok(Up::AlreadyRunning(info));
    }
    let assets = Assets::locate()?;
    let node_assets = NodeAssets::locate()?;
    if paths.state_file().exists() || !cleanup::leftovers(&paths).is_clean() {
        progress("cleaning up what a previous one-node cluster left (it was not stopped cleanly)");
        let left = cleanup::clean(&paths, Some(&assets.bin("kube-proxy")), progress);
        if !left.is_clean() {
            progress(&format!("still there after cleanup (continuing): {left}"));
        }
    }
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(io("starting a tokio runtime"))?;
    match rt.block_on(start(&paths, &assets, &node_assets, owner, progress)) {
        Ok(info) => {
            let json = serde_json::to_string_pretty(&info).unwrap_or_default();
            std::fs::write(paths.state_file(), json).map_err(io("writing state.json"))?;
            Ok(Up::Started(info))
        }
        Err(e) => {
            progress("start failed; removing what was started");
            cleanup::clean(&paths, Some(&assets.bin("kube-proxy")), progress);
            Err(e)
        }
    }
}

/// Stops the cluster and removes everything it made; returns what is still
/// on the machine (empty when the cleanup was complete).
pub fn down(progress: &dyn Fn(&str)) -> Result<Leftovers, NodeError> {
    let paths = NodePaths::default();
    if !is_root() {
        return Err(NodeError::NotRoot);
    }
    let _lock = lock(&paths, progress)?;
    if let Ok(text) = std::fs::read_to_string(paths.state_file())
        && let Ok(info) = serde_json::from_str::<ClusterInfo>(&text)
    {
        // The kubelet first, so it does not restart containers being removed.
        for (name, pid) in info.pids.iter().rev() {
            if pid_alive(*pid) {
                progress(&format!("stopping {name} (pid {pid})"));
                terminate_pid(*pid, Duration::from_secs(10));
            }
        }
    }
    let kube_proxy = Assets::locate().ok().map(|a| a.bin("kube-proxy"));
    Ok(cleanup::clean(&paths, kube_proxy.as_deref(), progress))
}

fn spawn(
    name: &str,
    bin: &Path,
    args: &[String],
    logs: &Path,
    pids: &mut Vec<(String, u32)>,
) -> Result<Process, NodeError> {
    let p =
        Process::spawn(name, bin, args, logs, Lifetime::Detached).map_err(io(format!("starting {}", bin.display())))?;
    pids.push((name.to_string(), p.child.id()));
    Ok(p)
}

fn write(path: &Path, text: &str) -> Result<(), NodeError> {
    std::fs::write(path, text).map_err(io(format!("writing {}", path.display())))
}

/// The last lines of each component's log, for a failure message.
fn logs_of(processes: &mut [Process]) -> String {
    processes
        .iter_mut()
        .map(|p| {
            let state = p.exited().map(|s| format!(" — exited: {s}")).unwrap_or_default();
            format!("--- {} ({}){state}, last lines:\n{}", p.name, p.log.display(), p.log_tail(20))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

async fn wait<F, Fut>(what: &str, processes: &mut [Process], started: Instant, mut check: F) -> Result<(), NodeError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, String>>,
{
    loop {
        if let Some(dead) = processes.iter_mut().find_map(|p| p.exited().map(|s| format!("{} exited ({s})", p.name))) {
            return Err(NodeError::NotReady { reason: dead, logs: logs_of(processes) });
        }
        let last = match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => "not yet".to_string(),
            Err(e) => e,
        };
        if started.elapsed() > READY_TIMEOUT {
            return Err(NodeError::NotReady {
                reason: format!("timed out after {READY_TIMEOUT:?} waiting for {what} (last: {last})"),
                logs: logs_of(processes),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn start(
    paths: &NodePaths,
    assets: &Assets,
    node_assets: &NodeAssets,
    owner: &str,
    progress: &dyn Fn(&str),
) -> Result<ClusterInfo, NodeError> {
    let started = Instant::now();
    for dir in [paths.node_dir(), paths.logs(), paths.cni_conf_dir(), paths.kubelet_root(), paths.containerd_state()] {
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    }
    let logs = paths.logs();
    progress(&format!("network: bridge {} at {NODE_IP}, egress guard", paths::BRIDGE));
    network::setup()?;

    progress("control plane: etcd, kube-apiserver (on the node's address), controller-manager, scheduler");
    let cp_options = Options { dir: paths.control_plane(), lifetime: Lifetime::Detached };
    let cp = ControlPlane::start_for_node(assets, &cp_options, NODE_IP).await?;
    let mut pids = cp.pids();
    let (server, kubeconfig_path, ca_pem, pki) =
        (cp.server.clone(), cp.kubeconfig.clone(), cp.pki.ca_cert_pem.clone(), cp.pki.clone());
    cp.detach();
    let client = kubeconfig::client_from_yaml(
        &std::fs::read_to_string(&kubeconfig_path).map_err(io("reading the admin kubeconfig"))?,
    )
    .await
    .map_err(|e| NodeError::NotReady { reason: format!("admin client: {e:#}"), logs: String::new() })?;

    let node_dir = paths.node_dir();
    let kubelet_kubeconfig = node_dir.join("kubelet.kubeconfig");
    write(
        &kubelet_kubeconfig,
        &kubeconfig::render(
            "kubelet",
            &server,
            &ca_pem,
            Credentials::ClientCert { cert_pem: &pki.node_cert_pem, key_pem: &pki.node_key_pem },
        ),
    )?;
    let proxy_kubeconfig = node_dir.join("kube-proxy.kubeconfig");
    write(
        &proxy_kubeconfig,
        &kubeconfig::render(
            "kube-proxy",
            &server,
            &ca_pem,
            Credentials::ClientCert { cert_pem: &pki.kube_proxy_cert_pem, key_pem: &pki.kube_proxy_key_pem },
        ),
    )?;
    let registry_default = paths.registry_config_dir().join("_default");
    std::fs::create_dir_all(&registry_default).map_err(io("creating the registry config"))?;
    write(&registry_default.join("hosts.toml"), config::REGISTRY_HOSTS_TOML)?;
    let containerd_config = node_dir.join("containerd.toml");
    write(&containerd_config, &config::containerd_toml(paths))?;
    write(&paths.cni_conf_dir().join("10-flotilla.conflist"), &config::cni_conflist(paths))?;
    let kubelet_config = node_dir.join("kubelet.yaml");
    write(&kubelet_config, &config::kubelet_config(paths, &pki.ca_cert))?;
    let proxy_config = node_dir.join("kube-proxy.yaml");
    write(&proxy_config, &config::kube_proxy_config(&proxy_kubeconfig))?;

    let mut processes = Vec::new();
    progress("containerd");
    // containerd finds its shim on PATH.
    let path = format!("{}:{}", node_assets.dir.display(), std::env::var("PATH").unwrap_or_default());
    let containerd = spawn_with_path(
        "containerd",
        &node_assets.bin("containerd"),
        &[format!("--config={}", containerd_config.display())],
        &logs,
        &path,
        &mut pids,
    )?;
    processes.push(containerd);
    let socket = paths.containerd_socket();
    let ctr = node_assets.bin("ctr");
    wait("containerd's socket", &mut processes, started, || {
        let (ctr, socket) = (ctr.clone(), socket.clone());
        async move {
            Ok(std::process::Command::new(&ctr)
                .arg("--address")
                .arg(&socket)
                .arg("version")
                .output()
                .is_ok_and(|o| o.status.success()))
        }
    })
    .await?;

    progress("images: building the node's own (pause, CoreDNS, toolbox) and importing every built image");
    images::build_system_images(node_assets)?;
    let archives = images::archives();
    images::import(&ctr, &socket, &archives)?;
    progress(&format!("  imported {} images", archives.len()));

    progress("kubelet and kube-proxy");
    let kubelet_args = vec![
        format!("--config={}", kubelet_config.display()),
        format!("--kubeconfig={}", kubelet_kubeconfig.display()),
        format!("--root-dir={}", paths.kubelet_root().display()),
        format!("--cert-dir={}", node_dir.join("kubelet-pki").display()),
        format!("--hostname-override={NODE_NAME}"),
        format!("--node-ip={NODE_IP}"),
        "--v=1".into(),
    ];
    processes.push(spawn("kubelet", &assets.bin("kubelet"), &kubelet_args, &logs, &mut pids)?);
    let proxy_args = vec![format!("--config={}", proxy_config.display()), "--v=1".into()];
    processes.push(spawn("kube-proxy", &assets.bin("kube-proxy"), &proxy_args, &logs, &mut pids)?);

    let nodes: Api<Node> = Api::all(client.clone());
    wait("the node to register Ready", &mut processes, started, || {
        let nodes = nodes.clone();
        async move {
            let node = nodes.get_opt(NODE_NAME).await.map_err(|e| e.to_string())?;
            Ok(node
                .and_then(|n| n.status)
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True"))
        }
    })
    .await?;
    progress(&format!("  node {NODE_NAME} Ready after {}", fmt_elapsed(started.elapsed())));

    progress("CoreDNS (kube-system/coredns behind the kube-dns Service); offline image pull policy");
    let manifest = node_dir.join("cluster-addons.yaml");
    write(
        &manifest,
        &format!(
            "{}{}",
            config::offline_images_policy(),
            config::coredns_manifest(&crate::build::node_assets::coredns_image())
        ),
    )?;
    let out = std::process::Command::new(assets.bin("kubectl"))
        .arg(format!("--kubeconfig={}", kubeconfig_path.display()))
        .args(["apply", "--server-side", "--field-manager=flotilla-testenv", "-f"])
        .arg(&manifest)
        .output()
        .map_err(io("running kubectl apply"))?;
    if !out.status.success() {
        return Err(NodeError::NotReady {
            reason: format!("applying CoreDNS: {}", String::from_utf8_lossy(&out.stderr)),
            logs: logs_of(&mut processes),
        });
    }
    // The policy is in force once a dry-run pod comes back mutated.
    let probe: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "flotilla-policy-probe"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))
    .map_err(|e| NodeError::NotReady { reason: e.to_string(), logs: String::new() })?;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    wait("the offline image policy", &mut processes, started, || {
        let (pods, probe) = (pods.clone(), probe.clone());
        async move {
            let params = kube::api::PostParams { dry_run: true, ..Default::default() };
            let p = pods.create(&params, &probe).await.map_err(|e| e.to_string())?;
            let policy = p.spec.and_then(|s| s.containers.into_iter().next()).and_then(|c| c.image_pull_policy);
            Ok(policy.as_deref() == Some("IfNotPresent"))
        }
    })
    .await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "kube-system");
    // A node under pressure never runs CoreDNS: stop waiting and say why.
    let pressed = std::sync::Mutex::new(Vec::new());
    wait("CoreDNS to be ready", &mut processes, started, || {
        let (deployments, nodes, pressed) = (deployments.clone(), nodes.clone(), &pressed);
        async move {
            if let Some(node) = nodes.get_opt(NODE_NAME).await.map_err(|e| e.to_string())? {
                let found = pressure::pressures(&node);
                if !found.is_empty() {
                    if let Ok(mut p) = pressed.lock() {
                        *p = found;
                    }
                    return Ok(true);
                }
            }
            let d = deployments.get("coredns").await.map_err(|e| e.to_string())?;
            Ok(d.status.and_then(|s| s.ready_replicas).unwrap_or(0) >= 1)
        }
    })
    .await?;
    let pressed = pressed.into_inner().unwrap_or_default();
    if !pressed.is_empty() {
        return Err(NodeError::Pressure {
            conditions: pressed.join(", "),
            space: pressure::describe_free_space(&paths.kubelet_root()),
        });
    }
    let elapsed = started.elapsed();
    progress(&format!("one-node cluster ready in {}", fmt_elapsed(elapsed)));
    // The processes outlive this call (dropping a Process does not stop
    // it); `down` stops them by pid.
    drop(processes);
    Ok(ClusterInfo {
        owner: owner.to_string(),
        owner_pid: std::process::id(),
        server,
        dir: kubeconfig_path.parent().map(Path::to_path_buf).unwrap_or_default(),
        kubeconfig: kubeconfig_path,
        ca_pem,
        pids,
        start_seconds: elapsed.as_secs_f64(),
    })
}

fn spawn_with_path(
    name: &str,
    bin: &Path,
    args: &[String],
    logs: &Path,
    path: &str,
    pids: &mut Vec<(String, u32)>,
) -> Result<Process, NodeError> {
    let p = Process::spawn_with_env(name, bin, args, logs, Lifetime::Detached, &[("PATH", path)])
        .map_err(io(format!("starting {}", bin.display())))?;
    pids.push((name.to_string(), p.child.id()));
    Ok(p)
}
