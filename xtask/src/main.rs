//! `cargo xtask`: the one entry point a newcomer needs.

mod bench;
mod chart_annotations;
mod charts;
mod cluster;
mod crds;
mod demo;
mod dist;
mod docs;
mod images;
mod receiver;
mod test;
mod test_binaries;
mod util;
mod values_schema;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Flotilla developer tasks", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build/install every tool the tests, demo and benchmarks need (control plane, kubectl, helm, kwok, vegeta). Idempotent.
    Setup,
    /// THE test command: setup if needed, fmt, clippy, every test, drift checks. Non-zero on any failure.
    Test,
    /// The one-node cluster (control plane + containerd, kubelet, kube-proxy, CoreDNS; needs root) for manual use.
    Cluster {
        #[command(subcommand)]
        action: cluster::Action,
    },
    /// Cluster, CRDs, every operator and the seeds' scenarios, until Ctrl-C.
    Demo,
    /// Write crds/<plural>.<group>.yaml from the Rust types (--check: fail if they differ).
    Crds {
        #[arg(long)]
        check: bool,
    },
    /// Build chart dependencies and write the charts' README values tables (--check: fail if they differ).
    Charts {
        #[arg(long)]
        check: bool,
    },
    /// The documentation site: generate docs/reference/, build into target/site with `mkdocs build --strict` (--check: fail if the generated pages are stale, no venv needed; --serve: serve it locally).
    Docs {
        #[arg(long, conflicts_with = "serve")]
        check: bool,
        #[arg(long)]
        serve: bool,
    },
    /// Build the release binary of every operator with the Dockerfile's command; check its libraries; print sizes.
    Dist,
    /// OCI images (operators and loadgen from their release binaries, pause, CoreDNS, toolbox) without Docker; loads them into a running one-node cluster. Names (e.g. `loadgen`): only those, plus the node's own.
    Images { only: Vec<String> },
    /// Benchmarks that print figures: `cargo xtask bench service-dns|config-copier|pod-alert|pod-alert-evaluation|pod-debugger|load-tester`, and `cargo xtask bench scale [small|large]` (every operator against simulated nodes).
    Bench { operator: String, preset: Option<String> },
    /// Package every chart for release tag vX.Y.Z (must be the Cargo.toml workspace version): versions, appVersions and subchart versions all X.Y.Z. Helm: $HELM, else the one `cargo xtask setup` builds.
    PackageCharts {
        tag: String,
        #[arg(long, default_value = "dist")]
        out: std::path::PathBuf,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Setup => util::setup().and_then(|_| util::setup_bench_tools()),
        Command::Test => test::run(),
        Command::Cluster { action } => cluster::run(action),
        Command::Demo => demo::run(),
        Command::Crds { check } => crds::run(check),
        Command::Charts { check } => charts::run(check),
        Command::Docs { check, serve } => docs::run(check, serve),
        Command::Dist => dist::run(),
        Command::Images { only } => images::run(&only),
        Command::Bench { operator, preset } => bench::run(&operator, preset.as_deref()),
        Command::PackageCharts { tag, out } => package_charts(&tag, &out),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn package_charts(tag: &str, out: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    let version = flotilla_e2e::release::release_version(tag)?;
    let helm = match std::env::var_os("HELM") {
        Some(h) => std::path::PathBuf::from(h),
        None => flotilla_testenv::Assets::helm().context("helm: set HELM, or run `cargo xtask setup`")?,
    };
    for p in flotilla_e2e::release::package_charts(&helm, &version, out)? {
        println!("{}", p.display());
    }
    Ok(())
}
