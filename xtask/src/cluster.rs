//! `cargo xtask cluster up|down|status`: the one-node cluster (a control
//! plane plus containerd, kubelet, kube-proxy, CoreDNS; needs root) for
//! manual use, the demo and the tests. `up --control-plane-only` starts just a control
//! plane (no root needed, no pods run) in `target/flotilla-cluster/`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Subcommand;
use flotilla_testenv::cluster::node::{self, NodePaths, Up};
use flotilla_testenv::cluster::process::{pid_alive, terminate_pid};
use flotilla_testenv::{Assets, ControlPlane, Lifetime, Options};

use crate::util::{progress, root, runtime, say, setup};

#[derive(Subcommand)]
pub enum Action {
    /// Start the one-node cluster (or report the running one) and print how to use it.
    Up {
        /// Only a control plane (etcd, kube-apiserver, controller-manager, scheduler): no node, no root needed.
        #[arg(long)]
        control_plane_only: bool,
    },
    /// Stop every component and remove what the node made (mounts, network, iptables, cgroups).
    Down {
        /// Only the control plane started with `up --control-plane-only`; the one-node cluster is left alone.
        #[arg(long)]
        control_plane_only: bool,
    },
    /// Show whether each component runs. Exit code 1 when none is running.
    Status,
}

/// `target/flotilla-cluster` for `--control-plane-only`, or
/// `FLOTILLA_CLUSTER_DIR` (tests use it to run one beside a user's).
pub fn state_dir() -> PathBuf {
    match std::env::var_os("FLOTILLA_CLUSTER_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => root().join("target").join("flotilla-cluster"),
    }
}

fn pids_file() -> PathBuf {
    state_dir().join("pids")
}

/// `(component, pid)` pairs recorded by `up --control-plane-only`.
pub fn recorded_pids() -> Vec<(String, u32)> {
    std::fs::read_to_string(pids_file())
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (name, pid) = l.split_once(' ')?;
            Some((name.to_string(), pid.trim().parse().ok()?))
        })
        .collect()
}

pub fn run(action: Action) -> anyhow::Result<()> {
    match action {
        Action::Up { control_plane_only: true } => up_control_plane(),
        Action::Up { control_plane_only: false } => up_node("cargo xtask cluster up").map(|_| ()),
        Action::Down { control_plane_only: true } => {
            if recorded_pids().is_empty() {
                say("no control plane recorded; nothing to stop");
                Ok(())
            } else {
                down_control_plane()
            }
        }
        Action::Down { control_plane_only: false } => down(),
        Action::Status => status(),
    }
}

/// Brings the one-node cluster up (building what is missing); `Ok(true)`
/// when this call started it, `Ok(false)` when one was already running.
pub fn up_node(owner: &str) -> anyhow::Result<bool> {
    if !node::is_root() {
        bail!("{}", node::NodeError::NotRoot);
    }
    setup()?;
    if node::running(&NodePaths::default()).is_none() {
        say("starting the one-node cluster (control plane, containerd, kubelet, kube-proxy, CoreDNS)");
    }
    let up = node::up(owner, &progress).context("starting the one-node cluster")?;
    let started = matches!(up, Up::Started(_));
    let info = up.info();
    if started {
        say(&format!("the one-node cluster is up ({:.1} s)", info.start_seconds));
    } else {
        say(&format!("the one-node cluster is already running (started by {})", info.owner));
    }
    print_usage(&info.server, &info.kubeconfig, &NodePaths::default().logs());
    Ok(started)
}

fn up_control_plane() -> anyhow::Result<()> {
    let running = recorded_pids();
    if !running.is_empty() && running.iter().all(|(_, pid)| pid_alive(*pid)) {
        say("the control plane is already running");
        print_usage(&server(), &state_dir().join("kubeconfig"), &state_dir().join("logs"));
        return Ok(());
    }
    if !running.is_empty() {
        say("a previous control plane is partly down; stopping what is left first");
        down_control_plane()?;
    }
    let assets = setup()?;
    say("starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler on 127.0.0.1 (no node)");
    let options = Options { dir: state_dir(), lifetime: Lifetime::Detached };
    let cp = runtime()?.block_on(ControlPlane::start(&assets, &options)).context("starting the control plane")?;
    let pids: String = cp.pids().iter().map(|(n, p)| format!("{n} {p}\n")).collect();
    std::fs::write(pids_file(), pids).context("writing the pids file")?;
    std::fs::write(state_dir().join("server"), &cp.server).context("writing the server file")?;
    cp.detach();
    say("the control plane is up");
    print_usage(&server(), &state_dir().join("kubeconfig"), &state_dir().join("logs"));
    Ok(())
}

fn server() -> String {
    std::fs::read_to_string(state_dir().join("server")).unwrap_or_default()
}

fn print_usage(server: &str, kubeconfig: &std::path::Path, logs: &std::path::Path) {
    eprintln!("    API server: {server}");
    eprintln!("    logs:       {}", logs.display());
    if let Ok(assets) = Assets::locate() {
        eprintln!("    kubectl:    {}", assets.bin("kubectl").display());
    }
    if let Ok(helm) = Assets::helm() {
        eprintln!("    helm:       {}", helm.display());
    }
    eprintln!("    stop with:  cargo xtask cluster down");
    // The one line on stdout, so `eval "$(cargo xtask cluster up)"` works.
    println!("export KUBECONFIG={}", kubeconfig.display());
}

fn down() -> anyhow::Result<()> {
    let had_control_plane = !recorded_pids().is_empty();
    if had_control_plane {
        down_control_plane()?;
    }
    let paths = NodePaths::default();
    let node_state = paths.state_file().exists();
    if !node::is_root() {
        if node_state {
            bail!("{}", node::NodeError::NotRoot);
        }
        if !had_control_plane {
            say("no cluster recorded; nothing to stop");
        }
        return Ok(());
    }
    if node_state || !node::cleanup::leftovers(&paths).is_clean() {
        say("stopping the one-node cluster");
        let left = node::down(&progress).context("stopping the one-node cluster")?;
        if !left.is_clean() {
            bail!("the one-node cluster left things behind: {left}");
        }
        say("the one-node cluster is down; nothing left (processes, mounts, network, iptables, cgroups)");
    } else if !had_control_plane {
        say("no cluster recorded; nothing to stop");
    }
    Ok(())
}

fn down_control_plane() -> anyhow::Result<()> {
    let pids = recorded_pids();
    for (name, pid) in pids.iter().rev() {
        if pid_alive(*pid) {
            say(&format!("stopping {name} (pid {pid})"));
            terminate_pid(*pid, Duration::from_secs(10));
        }
    }
    let left: Vec<String> = pids.iter().filter(|(_, p)| pid_alive(*p)).map(|(n, p)| format!("{n} (pid {p})")).collect();
    if !left.is_empty() {
        bail!("still running after SIGKILL: {}", left.join(", "));
    }
    let _ = std::fs::remove_file(pids_file());
    let _ = std::fs::remove_dir_all(state_dir().join("etcd-data"));
    say("the control plane is down; no process left");
    Ok(())
}

fn status() -> anyhow::Result<()> {
    let mut any = false;
    let mut all_up = true;
    let paths = NodePaths::default();
    if let Ok(text) = std::fs::read_to_string(paths.state_file())
        && let Ok(info) = serde_json::from_str::<node::ClusterInfo>(&text)
    {
        any = true;
        say(&format!("one-node cluster (started by {}):", info.owner));
        for (name, pid) in &info.pids {
            let alive = pid_alive(*pid);
            all_up &= alive;
            eprintln!("    {name:<24} pid {pid:<8} {}", if alive { "running" } else { "NOT RUNNING" });
        }
        if all_up {
            print_usage(&info.server, &info.kubeconfig, &paths.logs());
        }
    }
    let pids = recorded_pids();
    if !pids.is_empty() {
        any = true;
        say("control plane only:");
        for (name, pid) in &pids {
            let alive = pid_alive(*pid);
            all_up &= alive;
            eprintln!("    {name:<24} pid {pid:<8} {}", if alive { "running" } else { "NOT RUNNING" });
        }
        if pids.iter().all(|(_, p)| pid_alive(*p)) {
            print_usage(&server(), &state_dir().join("kubeconfig"), &state_dir().join("logs"));
        }
    }
    if !any {
        say("no cluster (start one with `cargo xtask cluster up`)");
        std::process::exit(1);
    }
    if all_up {
        Ok(())
    } else {
        bail!("some components are down: `cargo xtask cluster down && cargo xtask cluster up` restarts them")
    }
}
