//! `kubectl flotilla`: a kubectl plugin (any executable named
//! `kubectl-flotilla` on the PATH) for the objects Flotilla's operators
//! serve. It reads what the operators wrote — conditions, status, Events —
//! with the user's own kubeconfig and rights; it changes nothing but the
//! rerun annotation of a LoadTest.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod chart;
mod client;
mod kinds;
mod rerun;
mod results;
mod status;
mod table;
mod why;

/// Flotilla's objects from the command line (CopyRule, CopyRequest,
/// PodAlert, PodDebugger, LoadTest, SimpleDeployment).
#[derive(Parser, Debug)]
#[command(name = "kubectl flotilla", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context (default: its current context).
    #[arg(long, global = true)]
    context: Option<String>,
    /// The namespace (default: the context's, else "default").
    #[arg(short, long, global = true)]
    namespace: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Every Flotilla object of the namespace (or of every namespace, -A):
    /// Ready or not, with the Ready condition's reason and message.
    Status {
        /// Every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Only the objects that are not Ready.
        #[arg(long)]
        not_ready: bool,
    },
    /// Starts a LoadTest again (sets its flotilla.dev/rerun annotation; the
    /// operator waits out its --min-rerun-interval since the last start).
    Rerun {
        /// The LoadTest's name.
        name: String,
    },
    /// A LoadTest's merged results: counts, errors, percentiles, the latency
    /// histogram drawn as a chart, and per-stage figures and baseline
    /// deltas when the run has them.
    Results {
        /// The LoadTest's name.
        name: String,
    },
    /// Why an object is (not) Ready: its conditions, its last Warning
    /// Events, and the rest of what the operator reports of it.
    Why {
        /// KIND/NAME: a kind, its plural or short name (loadtest/smoke,
        /// pa/crashes, copyrules/team-config).
        object: String,
        /// Warning Events shown at most (the newest).
        #[arg(long, default_value_t = 10)]
        events: usize,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let (client, default_ns) = client::connect(cli.kubeconfig.as_deref(), cli.context.as_deref()).await?;
    let ns = cli.namespace.unwrap_or(default_ns);
    let mut out = std::io::stdout().lock();
    match cli.command {
        Command::Status { all_namespaces, not_ready } => {
            let scope = if all_namespaces { None } else { Some(ns.as_str()) };
            let rows = status::collect(&client, scope, not_ready).await?;
            status::print(&mut out, &rows, scope.is_none())?;
        }
        Command::Rerun { name } => rerun::rerun(&client, &ns, &name, &mut out).await?,
        Command::Results { name } => results::show(&client, &ns, &name, &mut out).await?,
        Command::Why { object, events } => why::explain(&client, &ns, &object, events, &mut out).await?,
    }
    Ok(ExitCode::SUCCESS)
}
