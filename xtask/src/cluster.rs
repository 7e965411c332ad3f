//! `cargo xtask cluster up|down|status`: a background control plane for
//! manual use. State lives in `target/flotilla-cluster/`: the kubeconfig, the
//! PKI, etcd's data, each component's log and a `pids` file.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Subcommand;
use flotilla_testenv::process::{pid_alive, terminate_pid};
use flotilla_testenv::{Assets, ControlPlane, Lifetime, Options};

use crate::util::{root, runtime, say, setup};

#[derive(Subcommand)]
pub enum Action {
    /// Start (or report the running) control plane and print how to use it.
    Up,
    /// Stop every component; leaves no process behind.
    Down,
    /// Show whether each component runs. Exit code 1 when none is running.
    Status,
}

/// `target/flotilla-cluster`, or `FLOTILLA_CLUSTER_DIR` (tests use it to run
/// a cluster of their own beside a user's).
pub fn state_dir() -> PathBuf {
    match std::env::var_os("FLOTILLA_CLUSTER_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => root().join("target").join("flotilla-cluster"),
    }
}

fn pids_file() -> PathBuf {
    state_dir().join("pids")
}

/// `(component, pid)` pairs recorded by `up`.
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
        Action::Up => up(),
        Action::Down => down(),
        Action::Status => status(),
    }
}

fn up() -> anyhow::Result<()> {
    let running = recorded_pids();
    if !running.is_empty() && running.iter().all(|(_, pid)| pid_alive(*pid)) {
        say("the cluster is already running");
        print_usage();
        return Ok(());
    }
    if !running.is_empty() {
        say("a previous cluster is partly down; stopping what is left first");
        down()?;
    }
    let assets = setup()?;
    say("starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler on 127.0.0.1");
    let options = Options { dir: state_dir(), lifetime: Lifetime::Detached };
    let cp = runtime()?.block_on(ControlPlane::start(&assets, &options)).context("starting the cluster")?;
    let pids: String = cp.pids().iter().map(|(n, p)| format!("{n} {p}\n")).collect();
    std::fs::write(pids_file(), pids).context("writing the pids file")?;
    std::fs::write(state_dir().join("server"), &cp.server).context("writing the server file")?;
    cp.detach();
    say("the cluster is up");
    print_usage();
    Ok(())
}

fn print_usage() {
    let kubeconfig = state_dir().join("kubeconfig");
    let server = std::fs::read_to_string(state_dir().join("server")).unwrap_or_default();
    eprintln!("    API server: {server}");
    eprintln!("    logs:       {}", state_dir().join("logs").display());
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
    let pids = recorded_pids();
    if pids.is_empty() {
        say("no cluster recorded; nothing to stop");
        return Ok(());
    }
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
    say("the cluster is down; no process left");
    Ok(())
}

fn status() -> anyhow::Result<()> {
    let pids = recorded_pids();
    if pids.is_empty() {
        say("no cluster (start one with `cargo xtask cluster up`)");
        std::process::exit(1);
    }
    for (name, pid) in &pids {
        let state = if pid_alive(*pid) { "running" } else { "NOT RUNNING" };
        eprintln!("    {name:<24} pid {pid:<8} {state}");
    }
    if pids.iter().all(|(_, p)| pid_alive(*p)) {
        print_usage();
        Ok(())
    } else {
        bail!("some components are down: `cargo xtask cluster down && cargo xtask cluster up` restarts them")
    }
}
