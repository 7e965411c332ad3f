//! `pod-alert`: the PodAlert operator's process.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use flotilla_shared::{AdmissionPolicyArgs, CommonArgs, ConfigError, Operator, WatchNamespaceArgs};
use pod_alert::address::Policy;
use pod_alert::controller::{self, Options};
use pod_alert::delivery::SinkRules;

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
    /// The PodAlert policy: while it is missing, allNamespaces is refused.
    #[command(flatten)]
    admission: AdmissionPolicyArgs,
    /// Namespaces whose PodAlerts may set allNamespaces: true (comma-separated).
    /// Default: the operator's own namespace. Pod logs can hold secrets: a
    /// PodAlert elsewhere that asks for every namespace is refused.
    #[arg(long, env = "CLUSTER_SCOPE_NAMESPACES", value_delimiter = ',', value_name = "NS,...")]
    cluster_scope_namespaces: Option<Vec<String>>,
    /// Timeout of one request to a sink (Slack, webhook, Alertmanager), 1s-60s.
    #[arg(long, env = "SINK_TIMEOUT", default_value = "10s", value_name = "DURATION", value_parser = flotilla_shared::duration::parse_flag)]
    sink_timeout: Duration,
    /// Address ranges sinks may send to although the default refuses them
    /// (comma-separated CIDRs, e.g. 10.96.0.0/12 for an in-cluster
    /// Alertmanager). Refused by default: loopback, 0.0.0.0/8 and ::,
    /// RFC 1918, 100.64.0.0/10, fc00::/7, link-local, multicast, broadcast
    /// and 240.0.0.0/4, in every spelling and behind host names.
    #[arg(long, env = "ALLOWED_SINK_CIDRS", value_delimiter = ',', value_name = "CIDR,...")]
    allowed_sink_cidrs: Vec<String>,
    /// Hosts a Slack sink's webhook URL may post to (comma-separated, exact
    /// names).
    #[arg(
        long,
        env = "SLACK_HOSTS",
        value_delimiter = ',',
        default_value = "hooks.slack.com",
        value_name = "HOST,..."
    )]
    slack_hosts: Vec<String>,
    /// Hosts a Teams sink may post to (comma-separated; a name with a
    /// leading dot admits the hosts under it): where the organisation's
    /// Workflows webhooks live.
    #[arg(
        long,
        env = "TEAMS_HOSTS",
        value_delimiter = ',',
        default_value = pod_alert::delivery::DEFAULT_TEAMS_HOSTS,
        value_name = "HOST,..."
    )]
    teams_hosts: Vec<String>,
    /// Where PagerDuty sinks send (PagerDuty's Events API v2; EU accounts:
    /// https://events.eu.pagerduty.com/v2/enqueue). Checked against the
    /// address policy like every sink.
    #[arg(long, env = "PAGERDUTY_URL", default_value = pod_alert::delivery::DEFAULT_PAGERDUTY_URL, value_name = "URL")]
    pagerduty_url: String,
    /// Slack's Web API, where Slack sinks with a bot token
    /// (sinks.slack.botTokenSecretRef) post: <URL>/chat.postMessage and
    /// <URL>/chat.update. The token is sent nowhere else, whatever a
    /// PodAlert says. Checked against the address policy like every sink.
    #[arg(long, env = "SLACK_API_URL", default_value = pod_alert::delivery::DEFAULT_SLACK_API_URL, value_name = "URL")]
    slack_api_url: String,
    /// Bytes of log tails the operator holds, all namespaces (e.g. 32Mi,
    /// 512Ki; 1Mi-1Gi); each namespace holding tails gets a fair share.
    #[arg(long, env = "MAX_LOG_BYTES", default_value = "32Mi", value_name = "SIZE")]
    max_log_bytes: String,
    /// PodAlerts evaluated per namespace (the oldest); the rest are
    /// Ready=False TooManyPodAlerts. 1-1000.
    #[arg(long, env = "MAX_PODALERTS_PER_NAMESPACE", default_value_t = 20, value_name = "N")]
    max_podalerts_per_namespace: usize,
    /// Slack, webhook and Alertmanager notifications per minute per
    /// namespace (0: no limit). Over it they wait, several going out as one
    /// summary.
    #[arg(long, env = "MAX_NOTIFICATIONS_PER_MINUTE_PER_NAMESPACE", default_value_t = 60, value_name = "N")]
    max_notifications_per_minute_per_namespace: u32,
    /// Name in every notification of an incident (Slack, webhook
    /// `incident.debugCommand`, Alertmanager `debug_command`) the `kubectl`
    /// line that creates a PodDebugger for its pod, ending in 1h (for a
    /// crash loop, one making a debug copy of the pod: pod-debugger's
    /// --debug-copies). Turn on where pod-debugger is installed: pod-alert
    /// does not check.
    #[arg(long, env = "DEBUG_HINT")]
    debug_hint: bool,
    /// Print the PodAlert CRD as YAML and exit.
    #[arg(long)]
    print_crd: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.print_crd {
        return flotilla_shared::crd::print(&pod_alert::crds());
    }
    if let Err(e) = args.watch.validate().and_then(|()| args.admission.validate()) {
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
    let addresses = match Policy::parse(&args.allowed_sink_cidrs) {
        Ok(p) => p,
        Err(e) => ConfigError::new("allowed-sink-cidrs", e).exit(),
    };
    let slack_hosts: Vec<String> = args
        .slack_hosts
        .iter()
        .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect();
    if let Some(bad) = slack_hosts.iter().find(|h| url::Host::parse(h).is_err() || h.contains('/')) {
        ConfigError::new("slack-hosts", format!("{bad:?} is not a host name")).exit();
    }
    let teams_hosts: Vec<String> = args
        .teams_hosts
        .iter()
        .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect();
    if let Some(bad) =
        teams_hosts.iter().find(|h| url::Host::parse(h.trim_start_matches('.')).is_err() || h.contains('/'))
    {
        ConfigError::new("teams-hosts", format!("{bad:?} is not a host name (or .suffix)")).exit();
    }
    let probe = SinkRules { addresses: Arc::new(addresses.clone()), ..SinkRules::default() };
    if let Err(e) = pod_alert::delivery::check_url(&args.pagerduty_url, "pagerduty", &probe) {
        ConfigError::new("pagerduty-url", e).exit();
    }
    if let Err(e) = pod_alert::delivery::check_url(&args.slack_api_url, "slack-api", &probe) {
        ConfigError::new("slack-api-url", e).exit();
    }
    let Some(max_log_bytes) =
        flotilla_shared::config::parse_size(&args.max_log_bytes).filter(|b| (1 << 20..=1 << 30).contains(b))
    else {
        ConfigError::new("max-log-bytes", format!("{:?} is not a size between 1Mi and 1Gi", args.max_log_bytes)).exit()
    };
    if !(1..=1000).contains(&args.max_podalerts_per_namespace) {
        ConfigError::new(
            "max-podalerts-per-namespace",
            format!("{} is not between 1 and 1000", args.max_podalerts_per_namespace),
        )
        .exit();
    }
    let options = Options {
        watch_namespace: args.watch.namespace().map(str::to_string),
        cluster_scope,
        sink_timeout: args.sink_timeout,
        retry: pod_alert::delivery::Retry::default(),
        sink_rules: SinkRules {
            addresses: Arc::new(addresses),
            slack_hosts: Arc::new(slack_hosts),
            teams_hosts: Arc::new(teams_hosts),
            pagerduty_url: args.pagerduty_url.trim().into(),
            slack_api_url: args.slack_api_url.trim().into(),
        },
        max_log_bytes,
        max_per_namespace: args.max_podalerts_per_namespace,
        notifications_per_minute: args.max_notifications_per_minute_per_namespace,
        admission: args.admission,
        debug_hint: args.debug_hint,
    };
    Operator::new("pod-alert", &args.common).run(move |ctx| controller::run(ctx, options))
}
