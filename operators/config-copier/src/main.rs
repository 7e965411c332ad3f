//! `config-copier`: the CopyRule operator's process.

use clap::Parser;
use config_copier::controller::{self, Options};
use config_copier::copy::StripLabels;
use config_copier::plan::{Consent, DEFAULT_SECRET_TYPES, NEVER_COPIED_TYPES, Policy};
use flotilla_shared::{AdmissionPolicyArgs, CommonArgs, ConfigError, Operator, WatchNamespaceArgs};

#[derive(Parser)]
// The last of a repeated flag wins (as with Go's flag package), so the
// chart's extraArgs can override a flag the chart sets.
#[command(
    version,
    args_override_self = true,
    about = "Flotilla config-copier: CopyRules copy ConfigMaps and Secrets into namespaces and keep them in sync"
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    watch: WatchNamespaceArgs,
    /// The CopyRule policy: while it is missing, Overwrite and target lists that are not explicit names are refused.
    #[command(flatten)]
    admission: AdmissionPolicyArgs,
    /// Copy writes in flight per reconcile (1-256).
    #[arg(long, env = "COPY_CONCURRENCY", default_value_t = 32, value_name = "N")]
    copy_concurrency: usize,
    /// Namespaces that never receive copies, besides kube-system,
    /// kube-public, kube-node-lease and the operator's own (comma-separated).
    #[arg(long, env = "PROTECTED_NAMESPACES", value_delimiter = ',', value_name = "NS,...")]
    protected_namespaces: Vec<String>,
    /// `label`: only namespaces labelled flotilla.dev/accept-copies receive
    /// copies. `none`: every unprotected namespace does — every CopyRule
    /// author can then write into every unprotected namespace.
    #[arg(long, env = "TARGET_CONSENT", default_value = "label", value_name = "label|none")]
    target_consent: String,
    /// Secret types that are copied (comma-separated). Service-account
    /// tokens, bootstrap tokens and Helm release records never are.
    #[arg(long, env = "SECRET_TYPES", value_delimiter = ',', default_values_t = DEFAULT_SECRET_TYPES.map(String::from), value_name = "TYPE,...")]
    secret_types: Vec<String>,
    /// Labels never copied, besides Helm's owner=helm, app.kubernetes.io/managed-by
    /// and other tools' tracking labels (comma-separated; `prefix/` or `prefix*` match many).
    #[arg(long, env = "STRIP_LABELS", value_delimiter = ',', value_name = "KEY,...")]
    strip_labels: Vec<String>,
    /// Bytes of sources' payload read or written at once, all rules together
    /// (e.g. 16Mi, 512Ki; 64Ki-4Gi): what bounds memory, whatever the rules
    /// select. A source larger than this is still copied, alone.
    #[arg(long, env = "MAX_BYTES_IN_FLIGHT", default_value = "16Mi", value_name = "SIZE")]
    max_bytes_in_flight: String,
    /// Bytes one rule's sources may hold together (data, base64 for Secrets,
    /// labels and annotations; e.g. 16Mi; 1Ki-1Ti). A rule selecting more
    /// is Ready=False SourcesTooLarge and copies nothing.
    #[arg(long, env = "MAX_RULE_SOURCE_BYTES", default_value = "16Mi", value_name = "SIZE")]
    max_rule_source_bytes: String,
    /// CopyRequests served per namespace (1-10000): past it, the oldest this
    /// many are served and the others wait, Ready=False TooManyRequests, so
    /// one namespace's requests cannot take the operator's reads and writes
    /// from the others'.
    #[arg(long, env = "MAX_REQUESTS_PER_NAMESPACE", default_value_t = 100, value_name = "N")]
    max_requests_per_namespace: usize,
    /// Let CopyRules with rolloutOnChange roll the Deployments, StatefulSets
    /// and DaemonSets consuming a changed copy (needs list and patch on them;
    /// the chart grants it with rollouts.enabled).
    #[arg(long, env = "ENABLE_ROLLOUTS")]
    enable_rollouts: bool,
    /// Print the CopyRule CRD as YAML and exit.
    #[arg(long)]
    print_crd: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.print_crd {
        return flotilla_shared::crd::print(&config_copier::crds());
    }
    if let Err(e) = args.watch.validate().and_then(|()| args.admission.validate()) {
        e.exit();
    }
    if !(1..=256).contains(&args.copy_concurrency) {
        ConfigError::new("copy-concurrency", format!("{} is not between 1 and 256", args.copy_concurrency)).exit();
    }
    if !(1..=10_000).contains(&args.max_requests_per_namespace) {
        ConfigError::new(
            "max-requests-per-namespace",
            format!("{} is not between 1 and 10000", args.max_requests_per_namespace),
        )
        .exit();
    }
    let consent = match args.target_consent.as_str() {
        "label" => Consent::Label,
        "none" => Consent::None,
        other => ConfigError::new("target-consent", format!("{other:?} is neither label nor none")).exit(),
    };
    for t in &args.secret_types {
        if NEVER_COPIED_TYPES.contains(&t.as_str()) {
            ConfigError::new("secret-types", format!("{t} is never copied")).exit();
        }
    }
    for ns in &args.protected_namespaces {
        if let Err(e) = flotilla_shared::config::check_dns_label(ns) {
            ConfigError::new("protected-namespaces", format!("{ns:?}: {e}")).exit();
        }
    }
    let Some(max_kib) =
        parse_kib(&args.max_bytes_in_flight).filter(|k| (64..=1 << 22).contains(k)).and_then(|k| u32::try_from(k).ok())
    else {
        ConfigError::new(
            "max-bytes-in-flight",
            format!("{:?} is not a size between 64Ki and 4Gi", args.max_bytes_in_flight),
        )
        .exit()
    };
    let Some(max_rule_kib) = parse_kib(&args.max_rule_source_bytes).filter(|k| (1..=1 << 30).contains(k)) else {
        ConfigError::new(
            "max-rule-source-bytes",
            format!("{:?} is not a size between 1Ki and 1Ti", args.max_rule_source_bytes),
        )
        .exit()
    };
    let policy = Policy::new(
        flotilla_shared::config::pod_namespace().as_deref(),
        &args.protected_namespaces,
        consent,
        args.secret_types.iter().filter(|t| !t.is_empty()).cloned().collect(),
    );
    let options = Options {
        watch_namespace: args.watch.namespace().map(str::to_string),
        concurrency: args.copy_concurrency,
        max_kib_in_flight: max_kib,
        max_rule_source_bytes: max_rule_kib * 1024,
        max_requests_per_namespace: args.max_requests_per_namespace,
        policy,
        strip: StripLabels(args.strip_labels.into_iter().filter(|l| !l.is_empty()).collect()),
        admission: args.admission,
        enable_rollouts: args.enable_rollouts,
    };
    Operator::new("config-copier", &args.common).run(move |ctx| controller::run(ctx, options))
}

/// `1Gi`, `16Mi`, `512Ki` or plain bytes, in KiB.
fn parse_kib(s: &str) -> Option<u64> {
    let (n, unit) = if let Some(n) = s.strip_suffix("Gi") {
        (n, 1 << 20)
    } else if let Some(n) = s.strip_suffix("Mi") {
        (n, 1024)
    } else if let Some(n) = s.strip_suffix("Ki") {
        (n, 1)
    } else {
        return s.parse::<u64>().ok().map(|b| b / 1024);
    };
    n.parse::<u64>().ok()?.checked_mul(unit)
}
