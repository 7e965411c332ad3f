//! `load-tester`: the LoadTest and SimpleDeployment operator's process.

use std::time::Duration;

use clap::Parser;
use flotilla_shared::{AdmissionPolicyArgs, CommonArgs, ConfigError, Operator, WatchNamespaceArgs};
use load_tester::controller::{self, Options};

/// The loadgen image of this version, as the chart names it by default.
const DEFAULT_LOADGEN_IMAGE: &str = concat!("ghcr.io/flotilla-dev/flotilla-loadgen:", env!("CARGO_PKG_VERSION"));

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = flotilla_shared::duration::parse_flag(s)?;
    if d > Duration::from_secs(24 * 3600) {
        return Err("at most 24h".into());
    }
    Ok(d)
}

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
    /// The LoadTest policy: while it is missing, no pod runs a LoadTest's or SimpleDeployment's own image
    /// and no runner gets a header from a Secret.
    #[command(flatten)]
    admission: AdmissionPolicyArgs,
    /// The runners' image, unless a LoadTest sets spec.image.
    #[arg(long, env = "LOADGEN_IMAGE", default_value = DEFAULT_LOADGEN_IMAGE, value_name = "IMAGE")]
    loadgen_image: String,
    /// The cluster's DNS domain (the kubelet's clusterDomain). Runners send
    /// Host <service>.<namespace>.svc.<domain> to the Service's cluster IP,
    /// never resolving a name.
    #[arg(long, env = "CLUSTER_DOMAIN", default_value = "cluster.local", value_name = "DOMAIN")]
    cluster_domain: String,
    /// A LoadTest's next run (a spec change or a new flotilla.dev/rerun)
    /// starts no sooner than this after its last run started; meanwhile
    /// Ready=False RerunTooSoon (0s: at once).
    #[arg(long, env = "MIN_RERUN_INTERVAL", default_value = "30s", value_name = "DURATION", value_parser = parse_interval)]
    min_rerun_interval: Duration,
    /// Runner pods of one namespace at once, every LoadTest's together
    /// (those done not counted). A run that would pass it waits for room
    /// (Ready=False TooManyRunners) until its startTimeout; one with more
    /// replicas than this fails at once.
    #[arg(long, env = "MAX_RUNNERS_PER_NAMESPACE", default_value_t = 500, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_runners_per_namespace: u32,
    /// Print the CRDs as YAML and exit.
    #[arg(long)]
    print_crd: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.print_crd {
        return flotilla_shared::crd::print(&load_tester::crds());
    }
    if let Err(e) = args.watch.validate().and_then(|()| args.admission.validate()) {
        e.exit();
    }
    if args.loadgen_image.trim().is_empty() || args.loadgen_image.contains(char::is_whitespace) {
        ConfigError::new("loadgen-image", format!("{:?} is not an image reference", args.loadgen_image)).exit();
    }
    let cluster_domain = args.cluster_domain.trim_end_matches('.').to_string();
    if let Err(e) = flotilla_shared::config::check_dns_subdomain(&cluster_domain) {
        ConfigError::new("cluster-domain", e).exit();
    }
    let options = Options {
        watch_namespace: args.watch.namespace().map(str::to_string),
        loadgen_image: args.loadgen_image,
        cluster_domain,
        min_rerun_interval: args.min_rerun_interval,
        max_runners_per_namespace: usize::try_from(args.max_runners_per_namespace).unwrap_or(usize::MAX),
        admission: args.admission,
    };
    Operator::new("load-tester", &args.common).run(move |ctx| controller::run(ctx, options))
}
