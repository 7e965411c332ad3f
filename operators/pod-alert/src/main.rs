//! `pod-alert`: the PodAlert operator's process.

use std::time::Duration;

use clap::Parser;
use flotilla_shared::{CommonArgs, ConfigError, Operator, WatchNamespaceArgs};
use pod_alert::controller::{self, Options};

#[derive(Parser)]
// The last of a repeated flag wins (as with Go's flag package), so the
// chart's extraArgs can override a flag the chart sets.
#[command(
    version,
    args_override_self = true,
    about = "Flotilla pod-alert: PodAlerts turn unhealthy pods into incidents with their logs, sent to status, Events, Slack, webhooks and Alertmanager"
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    watch: WatchNamespaceArgs,
    /// Namespaces whose PodAlerts may set allNamespaces: true (comma-separated).
    /// Default: the operator's own namespace. Pod logs can hold secrets: a
    /// PodAlert elsewhere that asks for every namespace is refused.
    #[arg(long, env = "CLUSTER_SCOPE_NAMESPACES", value_delimiter = ',', value_name = "NS,...")]
    cluster_scope_namespaces: Option<Vec<String>>,
    /// Timeout of one request to a sink (Slack, webhook, Alertmanager), 1s-60s.
    #[arg(long, env = "SINK_TIMEOUT", default_value = "10s", value_name = "DURATION", value_parser = humantime::parse_duration)]
    sink_timeout: Duration,
    /// Print the PodAlert CRD as YAML and exit.
    #[arg(long)]
    print_crd: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.print_crd {
        return flotilla_shared::crd::print(&pod_alert::crds());
    }
    if let Err(e) = args.watch.validate() {
        e.exit();
    }
    if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&args.sink_timeout) {
        ConfigError::new("sink-timeout", format!("{:?} is not between 1s and 60s", args.sink_timeout)).exit();
    }
    let cluster_scope: Vec<String> = match args.cluster_scope_namespaces {
        Some(list) => list.into_iter().filter(|n| !n.is_empty()).collect(),
        None => flotilla_shared::config::pod_namespace().into_iter().collect(),
    };
    for ns in &cluster_scope {
        if let Err(e) = flotilla_shared::config::check_dns_label(ns) {
            ConfigError::new("cluster-scope-namespaces", format!("{ns:?}: {e}")).exit();
        }
    }
    let options = Options {
        watch_namespace: args.watch.namespace().map(str::to_string),
        cluster_scope,
        sink_timeout: args.sink_timeout,
        retry: pod_alert::delivery::Retry::default(),
    };
    Operator::new("pod-alert", &args.common).run(move |ctx| controller::run(ctx, options))
}
