//! `pod-debugger`: the PodDebugger operator's process.

use std::collections::BTreeSet;

use clap::Parser;
use flotilla_shared::{AdmissionPolicyArgs, CommonArgs, ConfigError, Operator, WatchNamespaceArgs};
use pod_debugger::controller::{self, Options};
use pod_debugger::images::ImagePolicy;

#[derive(Parser)]
// The last of a repeated flag wins (as with Go's flag package), so the
// chart's extraArgs can override a flag the chart sets.
#[command(
    version,
    args_override_self = true,
    about = "Flotilla pod-debugger: PodDebuggers add an ephemeral debug container to the running pods that match a label, once, or make debug copies of crash-looping ones, within Pod Security and an image allow-list"
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    watch: WatchNamespaceArgs,
    /// The PodDebugger policy: while it is missing, every PodDebugger is refused.
    #[command(flatten)]
    admission: AdmissionPolicyArgs,
    /// Images a PodDebugger may run (comma-separated globs: '*' matches a
    /// run of characters within one path segment, never '/'; '**' any run
    /// across segments; '?' one character). Whoever may create a PodDebugger
    /// runs its image inside the namespace's pods: narrow this to your own
    /// registry. Default: busybox, busybox:*, **/busybox:* and the test
    /// toolbox localhost/flotilla/toolbox:*.
    #[arg(long, env = "ALLOWED_IMAGES", value_delimiter = ',', value_name = "GLOB,...")]
    allowed_images: Option<Vec<String>>,
    /// Namespaces whose PodDebuggers are refused, besides kube-system,
    /// kube-public, kube-node-lease and the operator's own (comma-separated).
    #[arg(long, env = "PROTECTED_NAMESPACES", value_delimiter = ',', value_name = "NS,...")]
    protected_namespaces: Vec<String>,
    /// Debug container additions in flight per PodDebugger (1-64).
    #[arg(long, env = "INJECT_CONCURRENCY", default_value_t = 16, value_name = "N")]
    inject_concurrency: usize,
    /// Let PodDebuggers in mode copy make debug copies of crash-looping
    /// pods. A copy is a new pod, created by the operator: this needs create
    /// and delete on pods (the chart grants them with debugCopies.enabled).
    /// Off: those PodDebuggers are refused (CopiesDisabled).
    #[arg(long, env = "DEBUG_COPIES")]
    debug_copies: bool,
    /// Print the PodDebugger CRD as YAML and exit.
    #[arg(long)]
    print_crd: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.print_crd {
        return flotilla_shared::crd::print(&pod_debugger::crds());
    }
    if let Err(e) = args.watch.validate().and_then(|()| args.admission.validate()) {
        e.exit();
    }
    let images = match args.allowed_images {
        Some(globs) => ImagePolicy::new(globs).unwrap_or_else(|e| ConfigError::new("allowed-images", e).exit()),
        None => ImagePolicy::default_list(),
    };
    if !(1..=64).contains(&args.inject_concurrency) {
        ConfigError::new("inject-concurrency", format!("{} is not between 1 and 64", args.inject_concurrency)).exit();
    }
    let mut protected: BTreeSet<String> =
        flotilla_shared::config::ALWAYS_PROTECTED_NAMESPACES.iter().map(|s| s.to_string()).collect();
    protected.extend(flotilla_shared::config::pod_namespace());
    for ns in args.protected_namespaces.into_iter().filter(|n| !n.is_empty()) {
        if let Err(e) = flotilla_shared::config::check_dns_label(&ns) {
            ConfigError::new("protected-namespaces", format!("{ns:?}: {e}")).exit();
        }
        protected.insert(ns);
    }
    let options = Options {
        watch_namespace: args.watch.namespace().map(str::to_string),
        images,
        protected,
        concurrency: args.inject_concurrency,
        admission: args.admission,
        copies: args.debug_copies,
    };
    Operator::new("pod-debugger", &args.common).run(move |ctx| controller::run(ctx, options))
}
