//! The flags every operator shares (CONVENTIONS.md), as a clap struct an
//! operator flattens into its own. Every flag also reads the environment
//! variable named after it, upper-snake-cased (`--leader-elect` <->
//! `LEADER_ELECT`). Values are checked before the cluster is touched; a bad
//! one is one line on stderr naming the flag, and exit code 2.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{ArgAction, ValueEnum};

/// Exit code for bad configuration (as clap uses for bad flags).
pub const EXIT_BAD_CONFIG: i32 = 2;

/// A flag whose value is wrong; displayed as one line naming the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value for --{flag}: {message}")]
pub struct ConfigError {
    pub flag: &'static str,
    pub message: String,
}

impl ConfigError {
    pub fn new(flag: &'static str, message: impl Into<String>) -> Self {
        Self { flag, message: message.into() }
    }

    /// Prints `error: invalid value for --flag: …` and exits 2.
    pub fn exit(&self) -> ! {
        eprintln!("error: {self}");
        std::process::exit(EXIT_BAD_CONFIG)
    }
}

/// A size flag's value in bytes: `32Mi`, `512Ki`, `1Gi` or plain bytes.
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (n, unit) = if let Some(n) = s.strip_suffix("Gi") {
        (n, 1 << 30)
    } else if let Some(n) = s.strip_suffix("Mi") {
        (n, 1 << 20)
    } else if let Some(n) = s.strip_suffix("Ki") {
        (n, 1 << 10)
    } else {
        (s, 1)
    };
    n.parse::<usize>().ok()?.checked_mul(unit)
}

/// `--log-level`: the level logged when `RUST_LOG` is not set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogLevel {
    Error,
    Warn,
    #[default]
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    /// The `tracing` filter directive for this level.
    pub fn directive(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warn => "warn",
            Self::Info => "info",
            Self::Debug => "debug",
            Self::Trace => "trace",
        }
    }
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line (for log collectors).
    Json,
    /// Human-readable lines.
    Text,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::duration::parse_flag(s)
}

/// The common flags. Flatten into an operator's own `Parser`:
///
/// ```
/// #[derive(clap::Parser)]
/// struct Args {
///     #[command(flatten)]
///     common: flotilla_shared::CommonArgs,
/// }
/// ```
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Address for GET /metrics (Prometheus text format): HOST:PORT, or :PORT for every address (IPv4 and IPv6); "0" disables the endpoint.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = ":8080", value_name = "ADDR")]
    pub metrics_bind_address: String,

    /// Address for GET /healthz (process alive) and GET /readyz (caches synced and their watches not failing; leading, or standing by with the lease readable; unready while leading is suspended): HOST:PORT or :PORT; "0" disables.
    #[arg(long, env = "HEALTH_PROBE_BIND_ADDRESS", default_value = ":8081", value_name = "ADDR")]
    pub health_probe_bind_address: String,

    /// Elect a leader on a coordination.k8s.io Lease so that only one replica acts; standbys wait and stay ready.
    #[arg(long, env = "LEADER_ELECT", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set, value_name = "BOOL")]
    pub leader_elect: bool,

    /// Name of the Lease used for leader election [default: flotilla-<operator>].
    #[arg(long, env = "LEADER_ELECTION_ID", value_name = "NAME")]
    pub leader_election_id: Option<String>,

    /// Namespace of the Lease [default: the pod's namespace, else "default"].
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE", value_name = "NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// How long a standby waits after the last renewal before it takes the lease.
    #[arg(long, env = "LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    pub leader_elect_lease_duration: Duration,

    /// How long the leader keeps retrying a failed renewal before it stops all work (suspended); it resumes if it renews the lease before anyone else takes it, and exits 1 if someone did.
    #[arg(long, env = "LEADER_ELECT_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub leader_elect_renew_deadline: Duration,

    /// How often leader and standbys try to renew or acquire the lease.
    #[arg(long, env = "LEADER_ELECT_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub leader_elect_retry_period: Duration,

    /// How long in-flight reconciles may run after SIGTERM before the process exits anyway.
    #[arg(long, env = "GRACEFUL_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub graceful_shutdown_timeout: Duration,

    /// Log format [default: text on a terminal, json otherwise].
    #[arg(long, env = "LOG_FORMAT", value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,

    /// Least severe level logged. RUST_LOG, when set, wins (it also filters per module, e.g. info,kube=warn).
    #[arg(long, env = "LOG_LEVEL", value_enum, default_value_t = LogLevel::Info, value_name = "LEVEL")]
    pub log_level: LogLevel,

    /// Kubeconfig file(s), ':'-separated as kubectl reads KUBECONFIG [default: ~/.kube/config, else the in-cluster config].
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<String>,

    /// Kubeconfig context to use [default: the kubeconfig's current context].
    #[arg(long, env = "CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
}

/// `--watch-namespace`, for operators where a namespace scope applies.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct WatchNamespaceArgs {
    /// Only watch this namespace (empty: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE", value_name = "NAMESPACE")]
    pub watch_namespace: Option<String>,
}

impl WatchNamespaceArgs {
    /// The namespace to watch, or `None` for all.
    pub fn namespace(&self) -> Option<&str> {
        self.watch_namespace.as_deref().filter(|n| !n.is_empty())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(ns) = self.namespace() {
            check_dns_label(ns).map_err(|m| ConfigError::new("watch-namespace", m))?;
        }
        Ok(())
    }
}

/// An address flag: a socket address, or `None` for "0" (disabled). Go's
/// `:8080` (every address, as controller-runtime reads it) is `[::]:8080`:
/// an IPv6 socket that takes IPv4 too, and IPv4 alone where the node has no
/// IPv6 ([`crate::server::serve`] falls back), so that neither IPv4-only nor
/// IPv6-only clusters fail their probes.
pub fn parse_bind_address(flag: &'static str, value: &str) -> Result<Option<SocketAddr>, ConfigError> {
    if value == "0" {
        return Ok(None);
    }
    let bad = || {
        ConfigError::new(
            flag,
            format!("{value:?} is not HOST:PORT (e.g. :8080, 0.0.0.0:8080, [::1]:8080) or 0 to disable"),
        )
    };
    match value.strip_prefix(':') {
        Some(port) => {
            let port: u16 = port.parse().map_err(|_| bad())?;
            Ok(Some(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port))))
        }
        None => value.parse::<SocketAddr>().map(Some).map_err(|_| bad()),
    }
}

/// Whether two bind addresses would take the same port: the same address,
/// or one of them every address.
fn same_listener(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// RFC 1123 label: what namespace names must be.
pub fn check_dns_label(value: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if ok { Ok(()) } else { Err(format!("{value:?} is not a valid name (lowercase letters, digits, '-', at most 63)")) }
}

/// RFC 1123 subdomain: what most object names must be.
pub fn check_dns_subdomain(value: &str) -> Result<(), String> {
    let ok = !value.is_empty() && value.len() <= 253 && value.split('.').all(|label| check_dns_label(label).is_ok());
    if ok { Ok(()) } else { Err(format!("{value:?} is not a valid name (lowercase DNS subdomain, at most 253)")) }
}

/// Leader-election timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Default for LeaseTimings {
    /// controller-runtime's defaults: 15 s, 10 s, 2 s.
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// The checked form of [`CommonArgs`].
#[derive(Debug, Clone)]
pub struct CommonConfig {
    pub metrics_address: Option<SocketAddr>,
    pub health_address: Option<SocketAddr>,
    pub leader_elect: bool,
    pub lease_name: String,
    pub lease_namespace: String,
    pub lease_timings: LeaseTimings,
    pub graceful_shutdown_timeout: Duration,
    pub log_format: LogFormat,
    pub log_level: LogLevel,
    /// `--kubeconfig` paths (empty: kube's default search).
    pub kubeconfig: Vec<std::path::PathBuf>,
    pub context: Option<String>,
}

impl CommonArgs {
    /// Checks every value; `operator` names the defaults (`flotilla-<operator>`).
    pub fn validate(&self, operator: &str) -> Result<CommonConfig, ConfigError> {
        let metrics_address = parse_bind_address("metrics-bind-address", &self.metrics_bind_address)?;
        let health_address = parse_bind_address("health-probe-bind-address", &self.health_probe_bind_address)?;
        if let (Some(m), Some(h)) = (metrics_address, health_address)
            && m.port() != 0
            && same_listener(m, h)
        {
            return Err(ConfigError::new(
                "health-probe-bind-address",
                format!("{h} is also --metrics-bind-address; use two different ports"),
            ));
        }
        let lease_name = self.leader_election_id.clone().unwrap_or_else(|| format!("flotilla-{operator}"));
        check_dns_subdomain(&lease_name).map_err(|m| ConfigError::new("leader-election-id", m))?;
        let lease_namespace = match &self.leader_election_namespace {
            Some(ns) if !ns.is_empty() => ns.clone(),
            _ => pod_namespace().unwrap_or_else(|| "default".to_string()),
        };
        check_dns_label(&lease_namespace).map_err(|m| ConfigError::new("leader-election-namespace", m))?;
        let t = LeaseTimings {
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        };
        // Bounded, so that no `Instant + Duration` can overflow at run time.
        let hour = Duration::from_secs(3600);
        for (flag, value) in [
            ("leader-elect-lease-duration", t.lease_duration),
            ("leader-elect-renew-deadline", t.renew_deadline),
            ("leader-elect-retry-period", t.retry_period),
            ("graceful-shutdown-timeout", self.graceful_shutdown_timeout),
        ] {
            if value > hour {
                return Err(ConfigError::new(flag, format!("{} is longer than 1h", crate::duration::format(value))));
            }
        }
        if t.retry_period.is_zero() {
            return Err(ConfigError::new("leader-elect-retry-period", "must be more than 0"));
        }
        // client-go's rules: lease > renew deadline > 1.2 × retry period.
        if t.lease_duration <= t.renew_deadline {
            return Err(ConfigError::new(
                "leader-elect-lease-duration",
                format!(
                    "{} must be longer than --leader-elect-renew-deadline ({})",
                    crate::duration::format(t.lease_duration),
                    crate::duration::format(t.renew_deadline)
                ),
            ));
        }
        if t.renew_deadline.as_secs_f64() <= 1.2 * t.retry_period.as_secs_f64() {
            return Err(ConfigError::new(
                "leader-elect-renew-deadline",
                format!(
                    "{} must be longer than 1.2 × --leader-elect-retry-period ({})",
                    crate::duration::format(t.renew_deadline),
                    crate::duration::format(t.retry_period)
                ),
            ));
        }
        Ok(CommonConfig {
            metrics_address,
            health_address,
            leader_elect: self.leader_elect,
            lease_name,
            lease_namespace,
            lease_timings: t,
            graceful_shutdown_timeout: self.graceful_shutdown_timeout,
            log_format: self.log_format.unwrap_or_else(default_log_format),
            log_level: self.log_level,
            kubeconfig: self
                .kubeconfig
                .iter()
                .flat_map(|k| std::env::split_paths(k).collect::<Vec<_>>())
                .filter(|p| !p.as_os_str().is_empty())
                .collect(),
            context: self.context.clone().filter(|c| !c.is_empty()),
        })
    }
}

fn default_log_format() -> LogFormat {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() { LogFormat::Text } else { LogFormat::Json }
}

/// Namespaces no Flotilla operator ever acts in, whatever a custom resource
/// asks (the operator's own namespace is added by each operator).
pub const ALWAYS_PROTECTED_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// The pod's namespace: `POD_NAMESPACE`, else the mounted ServiceAccount's.
pub fn pod_namespace() -> Option<String> {
    std::env::var("POD_NAMESPACE")
        .ok()
        .or_else(|| std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod size_tests {
    use super::parse_size;

    #[test]
    fn sizes_with_binary_suffixes() {
        assert_eq!(parse_size("32Mi"), Some(32 << 20));
        assert_eq!(parse_size("512Ki"), Some(512 << 10));
        assert_eq!(parse_size("1Gi"), Some(1 << 30));
        assert_eq!(parse_size("1000"), Some(1000));
        assert_eq!(parse_size("32M"), None);
        assert_eq!(parse_size("-1Mi"), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Args {
        #[command(flatten)]
        common: CommonArgs,
    }

    fn parse(args: &[&str]) -> Result<CommonConfig, ConfigError> {
        let mut all = vec!["op"];
        all.extend_from_slice(args);
        match Args::try_parse_from(all) {
            Ok(a) => a.common.validate("toy"),
            Err(e) => panic!("clap rejected {args:?}: {e}"),
        }
    }

    #[test]
    fn defaults_follow_controller_runtime() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.metrics_address, Some("[::]:8080".parse().unwrap()));
        assert_eq!(c.health_address, Some("[::]:8081".parse().unwrap()));
        assert!(!c.leader_elect);
        assert_eq!(c.lease_name, "flotilla-toy");
        assert_eq!(c.lease_timings, LeaseTimings::default());
        assert_eq!(c.log_level, LogLevel::Info);
    }

    #[test]
    fn log_level_takes_the_usual_names() {
        assert_eq!(parse(&["--log-level=debug"]).unwrap().log_level, LogLevel::Debug);
        assert_eq!(parse(&["--log-level", "warn"]).unwrap().log_level, LogLevel::Warn);
        assert!(Args::try_parse_from(["op", "--log-level=loud"]).is_err());
    }

    #[test]
    fn leader_elect_takes_go_style_bool_forms() {
        assert!(parse(&["--leader-elect"]).unwrap().leader_elect);
        assert!(parse(&["--leader-elect=true"]).unwrap().leader_elect);
        assert!(!parse(&["--leader-elect=false"]).unwrap().leader_elect);
    }

    #[test]
    fn go_style_port_only_addresses_mean_every_address() {
        let c = parse(&["--metrics-bind-address=:9090", "--health-probe-bind-address=127.0.0.1:9091"]).unwrap();
        assert_eq!(c.metrics_address, Some("[::]:9090".parse().unwrap()));
        assert_eq!(c.health_address, Some("127.0.0.1:9091".parse().unwrap()));
        assert_eq!(
            parse(&["--metrics-bind-address=[::1]:9090"]).unwrap().metrics_address,
            Some("[::1]:9090".parse().unwrap())
        );
        for bad in [":", ":http", ":70000", "8080"] {
            assert_eq!(
                parse(&[&format!("--metrics-bind-address={bad}")]).unwrap_err().flag,
                "metrics-bind-address",
                "{bad}"
            );
        }
        // One port for both, however it is spelled, is refused.
        for (m, h) in [(":9000", ":9000"), (":9000", "127.0.0.1:9000"), ("0.0.0.0:9000", ":9000")] {
            let e = parse(&[&format!("--metrics-bind-address={m}"), &format!("--health-probe-bind-address={h}")]);
            assert_eq!(e.unwrap_err().flag, "health-probe-bind-address", "{m} {h}");
        }
        assert!(
            parse(&["--metrics-bind-address=127.0.0.1:9000", "--health-probe-bind-address=127.0.0.2:9000"]).is_ok()
        );
        assert!(parse(&["--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"]).is_ok());
    }

    #[test]
    fn zero_disables_an_endpoint() {
        assert_eq!(parse(&["--metrics-bind-address=0"]).unwrap().metrics_address, None);
    }

    #[test]
    fn durations_are_bounded() {
        for flag in [
            "leader-elect-lease-duration",
            "leader-elect-renew-deadline",
            "leader-elect-retry-period",
            "graceful-shutdown-timeout",
        ] {
            let e = Args::try_parse_from(["op", &format!("--{flag}=2h")]).unwrap().common.validate("toy");
            assert_eq!(e.unwrap_err().flag, flag);
        }
    }

    #[test]
    fn bad_values_name_their_flag() {
        let e = parse(&["--metrics-bind-address=nope"]).unwrap_err();
        assert_eq!(e.flag, "metrics-bind-address");
        let e = parse(&["--leader-elect-lease-duration=5s"]).unwrap_err();
        assert_eq!(e.flag, "leader-elect-lease-duration");
        let e = parse(&["--leader-elect-retry-period=9s"]).unwrap_err();
        assert_eq!(e.flag, "leader-elect-renew-deadline");
        let e = parse(&["--leader-election-id=Not_Valid"]).unwrap_err();
        assert_eq!(e.flag, "leader-election-id");
        let e = parse(&["--metrics-bind-address=127.0.0.1:9000", "--health-probe-bind-address=127.0.0.1:9000"])
            .unwrap_err();
        assert_eq!(e.flag, "health-probe-bind-address");
        assert!(e.to_string().starts_with("invalid value for --health-probe-bind-address: "));
    }

    #[test]
    fn durations_parse_like_go() {
        let c = parse(&[
            "--leader-elect-retry-period=500ms",
            "--leader-elect-renew-deadline=2s",
            "--leader-elect-lease-duration=1m",
        ])
        .unwrap();
        assert_eq!(c.lease_timings.retry_period, Duration::from_millis(500));
        assert_eq!(c.lease_timings.lease_duration, Duration::from_secs(60));
    }

    #[test]
    fn names_are_checked() {
        assert!(check_dns_label("team-a").is_ok());
        assert!(check_dns_label("Team").is_err());
        assert!(check_dns_label(&"a".repeat(64)).is_err());
        assert!(check_dns_subdomain("flotilla-toy.example").is_ok());
        assert!(check_dns_subdomain("a..b").is_err());
    }
}
