//! `cargo xtask test`: every check, in order, with a summary.

use std::time::{Duration, Instant};

use crate::util::{cargo, run_cmd, say, setup};

type Step = (&'static str, fn() -> anyhow::Result<()>);

fn steps() -> Vec<Step> {
    vec![
        ("setup", || setup().map(|_| ())),
        ("cargo fmt --check", || run_cmd(cargo().args(["fmt", "--all", "--", "--check"]))),
        ("cargo clippy -D warnings", || {
            run_cmd(cargo().args(["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"]))
        }),
        ("CRD files match the types", || crate::crds::run(true)),
        ("chart dependencies and READMEs", || crate::charts::run(true)),
        ("release binaries and images", || crate::images::run(&[])),
        ("one-node cluster up", node_up),
        ("cargo test --workspace", || run_cmd(cargo().args(["test", "--workspace", "--locked", "--no-fail-fast"]))),
        ("one-node cluster down leaves nothing", node_down),
    ]
}

/// Whether `cargo xtask test` started the one-node cluster (then it stops it
/// again); a cluster the user already runs is used and left running.
static STARTED_NODE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Brings the one-node cluster up before the tests, so every test binary
/// that needs pods attaches to it instead of starting its own.
fn node_up() -> anyhow::Result<()> {
    let started = crate::cluster::up_node("cargo xtask test")?;
    STARTED_NODE.store(started, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// Stops the one-node cluster (when this run started it) and fails when
/// anything of it is left on the machine: processes, mounts, network
/// namespaces and links, iptables chains, cgroups.
fn node_down() -> anyhow::Result<()> {
    if !STARTED_NODE.load(std::sync::atomic::Ordering::SeqCst) {
        say("the one-node cluster was running before the tests: left running");
        return Ok(());
    }
    let left = flotilla_testenv::node::down(&crate::util::progress)?;
    if !left.is_clean() {
        anyhow::bail!("the one-node cluster left things on the machine: {left}");
    }
    say("the one-node cluster is down; nothing left on the machine");
    Ok(())
}

pub fn run_all(steps: Vec<Step>) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut results: Vec<(&str, Duration, Result<(), String>)> = Vec::new();
    for (name, step) in steps {
        say(&format!("test: {name}"));
        let t = Instant::now();
        let r = step().map_err(|e| format!("{e:#}"));
        if let Err(e) = &r {
            eprintln!("    FAILED: {e}");
        }
        results.push((name, t.elapsed(), r));
        // Without the tools, nothing after setup can mean anything.
        if name == "setup" && results.last().is_some_and(|r| r.2.is_err()) {
            break;
        }
    }
    say(&format!("test summary ({:.0?} in all):", started.elapsed()));
    let mut failed = 0;
    for (name, took, r) in &results {
        let mark = if r.is_ok() { "ok  " } else { "FAIL" };
        eprintln!("    {mark} {name:<28} {took:>8.1?}");
        failed += usize::from(r.is_err());
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} steps failed", results.len());
    }
    Ok(())
}

pub fn run() -> anyhow::Result<()> {
    run_all(steps())
}
