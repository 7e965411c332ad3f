//! Helpers shared by the xtask commands.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use flotilla_testenv::Assets;

/// The workspace root (xtask lives one level below it).
pub fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// `==> message`, for progress lines a person reads.
pub fn say(msg: &str) {
    eprintln!("==> {msg}");
}

pub fn progress(line: &str) {
    eprintln!("    {line}");
}

/// Builds whatever is missing.
pub fn setup() -> anyhow::Result<Assets> {
    let started = Instant::now();
    say("setup: checking tools (control plane, node, kubectl, helm, Debian packages, MkDocs)");
    let assets = flotilla_testenv::build::assets::ensure_all(&progress).context("building the test tools")?;
    flotilla_testenv::build::tools::ensure_all(&progress).context("installing the packaging tools")?;
    flotilla_testenv::build::node_assets::ensure(&progress)
        .context("building the node's tools (containerd, CoreDNS)")?;
    flotilla_testenv::aws::moto::ensure(&progress).context("installing moto (the Route53 emulator)")?;
    crate::docs::venv::ensure(&root()).context("installing the documentation site's tools (MkDocs)")?;
    say(&format!("setup: done in {:.0?}", started.elapsed()));
    Ok(assets)
}

/// The benchmarks' own tools (kwok, vegeta): `cargo xtask setup` installs them,
/// `cargo xtask test` (which runs [`setup`]) does not need them.
pub fn setup_bench_tools() -> anyhow::Result<()> {
    flotilla_testenv::build::tools::ensure_bench_tools(&progress)
        .context("installing the benchmarks' tools (kwok, vegeta)")
}

/// Runs a command in the workspace root, inheriting stdio.
pub fn run_cmd(cmd: &mut Command) -> anyhow::Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd.current_dir(root()).status().with_context(|| format!("running {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}

pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// A tokio runtime for the async parts.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting tokio")
}

pub use flotilla_e2e::operators;
