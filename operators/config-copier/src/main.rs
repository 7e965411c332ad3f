//! `config-copier`: the CopyRule operator's process.

use clap::Parser;
use config_copier::controller::{self, Options};
use flotilla_shared::{CommonArgs, ConfigError, Operator, WatchNamespaceArgs};

#[derive(Parser)]
#[command(
    version,
    about = "Flotilla config-copier: CopyRules copy ConfigMaps and Secrets into namespaces and keep them in sync"
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    watch: WatchNamespaceArgs,
    /// Copy writes in flight per reconcile (1-256).
    #[arg(long, env = "COPY_CONCURRENCY", default_value_t = 32, value_name = "N")]
    copy_concurrency: usize,
    /// Print the CopyRule CRD as YAML and exit.
    #[arg(long)]
    print_crd: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.print_crd {
        return match serde_yaml_crd() {
            Ok(yaml) => {
                print!("{yaml}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    if let Err(e) = args.watch.validate() {
        e.exit();
    }
    if !(1..=256).contains(&args.copy_concurrency) {
        ConfigError::new("copy-concurrency", format!("{} is not between 1 and 256", args.copy_concurrency)).exit();
    }
    let options =
        Options { watch_namespace: args.watch.namespace().map(str::to_string), concurrency: args.copy_concurrency };
    Operator::new("config-copier", &args.common).run(move |ctx| controller::run(ctx, options))
}

fn serde_yaml_crd() -> Result<String, flotilla_shared::crd::CrdError> {
    config_copier::crds().iter().map(flotilla_shared::crd::render).collect()
}
