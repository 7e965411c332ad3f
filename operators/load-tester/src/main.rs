//! `load-tester`: the LoadTest and SimpleDeployment operator's process.

use clap::Parser;
use flotilla_shared::{CommonArgs, ConfigError, Operator, WatchNamespaceArgs};
use load_tester::controller::{self, Options};

/// The loadgen image of this version, as the chart names it by default.
const DEFAULT_LOADGEN_IMAGE: &str = concat!("ghcr.io/flotilla-dev/flotilla-loadgen:", env!("CARGO_PKG_VERSION"));

#[derive(Parser)]
// The last of a repeated flag wins (as with Go's flag package), so the
// chart's extraArgs can override a flag the chart sets.
#[command(
    version,
    args_override_self = true,
    about = "Flotilla load-tester: LoadTests run coordinated loadgen pods against a Service and merge their results; SimpleDeployments keep one pod"
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    watch: WatchNamespaceArgs,
    /// The runners' image, unless a LoadTest sets spec.image.
    #[arg(long, env = "LOADGEN_IMAGE", default_value = DEFAULT_LOADGEN_IMAGE, value_name = "IMAGE")]
    loadgen_image: String,
    /// Print the CRDs as YAML and exit.
    #[arg(long)]
    print_crd: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.print_crd {
        return flotilla_shared::crd::print(&load_tester::crds());
    }
    if let Err(e) = args.watch.validate() {
        e.exit();
    }
    if args.loadgen_image.trim().is_empty() || args.loadgen_image.contains(char::is_whitespace) {
        ConfigError::new("loadgen-image", format!("{:?} is not an image reference", args.loadgen_image)).exit();
    }
    let options =
        Options { watch_namespace: args.watch.namespace().map(str::to_string), loadgen_image: args.loadgen_image };
    Operator::new("load-tester", &args.common).run(move |ctx| controller::run(ctx, options))
}
