//! `cargo xtask test`: every check, in order, with a summary.

use std::time::{Duration, Instant};

use crate::util::{cargo, run_cmd, say, setup};

type Step = (&'static str, fn() -> anyhow::Result<()>);

/// What needs no tool of `setup`: it runs beside setup's Go builds, which
/// wait on downloads and leave cores idle at times (setup alone took 9 to
/// 20 minutes cold; so does this lane).
fn rust_lane() -> Vec<Step> {
    vec![
        ("cargo fmt --check", || run_cmd(cargo().args(["fmt", "--all", "--", "--check"]))),
        ("cargo clippy -D warnings", || {
            run_cmd(cargo().args(["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"]))
        }),
        ("CRD files match the types", || crate::crds::run(true)),
        ("docs/reference/ matches crds/ and the chart READMEs", || crate::docs::run(true, false)),
        ("compile the tests", || run_cmd(cargo().args(["test", "--workspace", "--locked", "--no-run"]))),
        // What the test images carry: the Dockerfile's build in the dev
        // profile, on the tests' dependencies (images.rs says why).
        ("image binaries (the Dockerfile's build, dev profile)", || {
            crate::dist::build(&crate::dist::images()?, crate::dist::Profile::Dev).map(|_| ())
        }),
    ]
}

/// What needs setup's tools, after it.
fn after_setup() -> Vec<Step> {
    vec![
        ("chart dependencies and READMEs", || crate::charts::run(true)),
        ("images (dev-profile binaries)", || crate::images::run_with(&[], crate::dist::Profile::Dev)),
        // After the chart READMEs (copied into the site) and the binaries
        // (whose --help it reads) are fresh.
        ("documentation site: strict build, every flag, value and runbook", crate::docs::test),
        ("one-node cluster up", node_up),
        ("every test binary, side by side", crate::test_binaries::run),
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
    let left = flotilla_testenv::cluster::node::down(&crate::util::progress)?;
    if !left.is_clean() {
        anyhow::bail!("the one-node cluster left things on the machine: {left}");
    }
    say("the one-node cluster is down; nothing left on the machine");
    Ok(())
}

/// One step, timed; a failure is printed as it happens.
fn run_step((name, step): Step) -> (&'static str, Duration, Result<(), String>) {
    say(&format!("test: {name}"));
    let t = Instant::now();
    let r = step().map_err(|e| format!("{e:#}"));
    if let Err(e) = &r {
        eprintln!("    FAILED ({name}): {e}");
    }
    say(&format!("test: {name} took {:.0?}", t.elapsed()));
    (name, t.elapsed(), r)
}

pub fn run() -> anyhow::Result<()> {
    let started = Instant::now();
    let (setup, mut results) = std::thread::scope(|scope| {
        let setup = scope.spawn(|| run_step(("setup", || setup().map(|_| ()))));
        let rust: Vec<_> = rust_lane().into_iter().map(run_step).collect();
        let setup = setup.join().unwrap_or(("setup", Duration::ZERO, Err("setup panicked".to_string())));
        (setup, rust)
    });
    let setup_ok = setup.2.is_ok();
    results.insert(0, setup);
    // Without the tools, nothing after setup can mean anything.
    if setup_ok {
        results.extend(after_setup().into_iter().map(run_step));
    }
    say(&format!(
        "test summary ({:.0?} in all; setup ran beside the steps up to the tests' compilation):",
        started.elapsed()
    ));
    let mut failed = 0;
    for (name, took, r) in &results {
        let mark = if r.is_ok() { "ok  " } else { "FAIL" };
        eprintln!("    {mark} {name:<36} {took:>8.1?}");
        failed += usize::from(r.is_err());
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} steps failed", results.len());
    }
    Ok(())
}
