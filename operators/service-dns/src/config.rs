//! Flags (each also read from its upper-snake-cased environment variable)
//! and their checks. A bad value exits 2 with one line naming the flag,
//! before the cluster or Route53 is touched.

use std::time::Duration;

use flotilla_shared::{CommonArgs, ConfigError, WatchNamespaceArgs};

use crate::desired::MAX_TTL;
use crate::hostname::{self, Template};
use crate::plan::Policy;

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (expected e.g. 30s, 1m, 5m)"))
}

/// service-dns: a Route53 record (A/AAAA, or CNAME for a load balancer) for
/// every Service, with a TXT ownership record beside it; kept right by a
/// level-triggered sync. AWS credentials and endpoint come from the standard
/// AWS chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE,
/// AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE for IRSA, …;
/// AWS_ENDPOINT_URL_ROUTE_53 or AWS_ENDPOINT_URL to override the endpoint).
#[derive(clap::Parser, Debug, Clone)]
#[command(version, about, long_about = None)]
pub struct Args {
    /// Route53 hosted zone id (e.g. Z0123456789ABC). Either this or --domain-name.
    #[arg(long, env = "HOSTED_ZONE_ID", value_name = "ID")]
    pub hosted_zone_id: Option<String>,

    /// The zone's domain ({domain} in the template). Without --hosted-zone-id, the zone is the one
    /// hosted zone with exactly this name.
    #[arg(long, env = "DOMAIN_NAME", value_name = "DOMAIN")]
    pub domain_name: Option<String>,

    /// {prefix} in the hostname template.
    #[arg(long, env = "DOMAIN_PREFIX", default_value = "kube", value_name = "PREFIX")]
    pub domain_prefix: String,

    /// Hostname of a Service without a flotilla.dev/hostname annotation. Variables: {name}, {namespace},
    /// {prefix}, {domain}.
    #[arg(long, env = "HOSTNAME_TEMPLATE", default_value = "{prefix}-{name}.{domain}", value_name = "TEMPLATE")]
    pub hostname_template: String,

    /// TTL of the records, in seconds (a Service may set flotilla.dev/ttl).
    #[arg(long, env = "TTL", default_value_t = 300, value_name = "SECONDS")]
    pub ttl: i64,

    /// Written into every ownership TXT record; only records with our owner id are ever changed.
    /// Give each cluster sharing a zone its own.
    #[arg(long, env = "OWNER_ID", default_value = "default", value_name = "ID")]
    pub owner_id: String,

    /// sync: create, update and delete; upsert-only: never delete; create-only: never update nor delete.
    #[arg(long, env = "POLICY", value_enum, default_value_t = Policy::Sync)]
    pub policy: Policy,

    /// Full resync period (Service changes also trigger a sync, debounced).
    #[arg(long, env = "INTERVAL", default_value = "1m", value_parser = parse_duration, value_name = "DURATION")]
    pub interval: Duration,

    /// Log and report (as Events) the changes that would be made; change nothing.
    #[arg(long, env = "DRY_RUN", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_name = "BOOL")]
    pub dry_run: bool,

    /// Route53 requests per second, at most (Route53 allows 5 per account).
    #[arg(long = "route53-rps", env = "ROUTE53_RPS", default_value_t = 5.0, value_name = "N")]
    pub route53_rps: f64,

    /// Only Services matching this label selector (e.g. dns=public,tier!=internal).
    #[arg(long, env = "SERVICE_SELECTOR", value_name = "SELECTOR")]
    pub service_selector: Option<String>,

    /// How long to wait after a Service change for more changes before syncing.
    #[arg(long, env = "DEBOUNCE", default_value = "200ms", value_parser = parse_duration, value_name = "DURATION")]
    pub debounce: Duration,

    /// During a continuous stream of Service changes, how long a change may wait to be sent in a fuller
    /// Route53 request (full requests go at once; the stream's end is sent after --debounce).
    #[arg(long, env = "MAX_BATCH_DELAY", default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    pub max_batch_delay: Duration,

    /// How long to poll GetChange for INSYNC after a change before reporting it as submitted.
    #[arg(long, env = "INSYNC_TIMEOUT", default_value = "2m", value_parser = parse_duration, value_name = "DURATION")]
    pub insync_timeout: Duration,

    #[command(flatten)]
    pub namespace: WatchNamespaceArgs,

    #[command(flatten)]
    pub common: CommonArgs,
}

/// Where the zone comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZoneSource {
    /// `--hosted-zone-id` (and maybe `--domain-name`, else looked up).
    Id { id: String, domain: Option<String> },
    /// `--domain-name` only: the one zone with that name.
    Domain(String),
}

/// The checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub zone: ZoneSource,
    pub prefix: String,
    pub template: Template,
    pub ttl: i64,
    pub owner_id: String,
    pub policy: Policy,
    pub interval: Duration,
    pub dry_run: bool,
    pub route53_rps: f64,
    pub service_selector: Option<String>,
    pub watch_namespace: Option<String>,
    pub debounce: Duration,
    pub max_batch_delay: Duration,
    pub insync_timeout: Duration,
}

impl Args {
    pub fn validate(&self) -> Result<Config, ConfigError> {
        self.namespace.validate()?;
        let domain = self.domain_name.as_deref().map(hostname::normalize).filter(|d| !d.is_empty());
        if let Some(d) = &domain {
            check_domain(d).map_err(|m| ConfigError::new("domain-name", m))?;
        }
        let zone = match (self.hosted_zone_id.as_deref().map(str::trim).filter(|s| !s.is_empty()), domain.clone()) {
            (Some(id), domain) => {
                let id = crate::route53::short_zone_id(id);
                if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
                    return Err(ConfigError::new("hosted-zone-id", format!("{id:?} is not a hosted zone id")));
                }
                ZoneSource::Id { id, domain }
            }
            (None, Some(d)) => ZoneSource::Domain(d),
            (None, None) => {
                return Err(ConfigError::new(
                    "hosted-zone-id",
                    "set --hosted-zone-id (HOSTED_ZONE_ID) or --domain-name (DOMAIN_NAME)",
                ));
            }
        };
        let template = Template::parse(&self.hostname_template)
            .map_err(|e| ConfigError::new("hostname-template", e.to_string()))?;
        if !self.domain_prefix.is_empty() {
            flotilla_shared::config::check_dns_label(&self.domain_prefix)
                .map_err(|m| ConfigError::new("domain-prefix", m))?;
        }
        // The template must give valid names for ordinary Services.
        if let Some(d) = &domain {
            let sample = template.render(hostname::Vars {
                name: "my-service",
                namespace: "default",
                prefix: &self.domain_prefix,
                domain: d,
            });
            hostname::validate(&sample, d).map_err(|e| {
                ConfigError::new("hostname-template", format!("gives {sample:?} for Service default/my-service: {e}"))
            })?;
        }
        if !(0..=MAX_TTL).contains(&self.ttl) {
            return Err(ConfigError::new("ttl", format!("{} is not in 0..={MAX_TTL}", self.ttl)));
        }
        let owner_ok = !self.owner_id.is_empty()
            && self.owner_id.len() <= 63
            && self.owner_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
        if !owner_ok {
            return Err(ConfigError::new(
                "owner-id",
                format!("{:?} must be 1-63 letters, digits, '-', '_' or '.'", self.owner_id),
            ));
        }
        if self.interval < Duration::from_secs(1) {
            return Err(ConfigError::new("interval", "must be at least 1s"));
        }
        if !(self.route53_rps.is_finite() && self.route53_rps > 0.0 && self.route53_rps <= 1000.0) {
            return Err(ConfigError::new("route53-rps", format!("{} is not in (0, 1000]", self.route53_rps)));
        }
        let service_selector = self.service_selector.as_deref().map(str::trim).filter(|s| !s.is_empty());
        if let Some(sel) = service_selector {
            check_selector(sel).map_err(|m| ConfigError::new("service-selector", m))?;
        }
        if self.debounce > Duration::from_secs(60) {
            return Err(ConfigError::new("debounce", "must be at most 1m"));
        }
        if self.max_batch_delay < self.debounce || self.max_batch_delay > Duration::from_secs(600) {
            return Err(ConfigError::new(
                "max-batch-delay",
                format!("must be between --debounce ({:?}) and 10m", self.debounce),
            ));
        }
        Ok(Config {
            zone,
            prefix: self.domain_prefix.clone(),
            template,
            ttl: self.ttl,
            owner_id: self.owner_id.clone(),
            policy: self.policy,
            interval: self.interval,
            dry_run: self.dry_run,
            route53_rps: self.route53_rps,
            service_selector: service_selector.map(str::to_string),
            watch_namespace: self.namespace.namespace().map(str::to_string),
            debounce: self.debounce,
            max_batch_delay: self.max_batch_delay,
            insync_timeout: self.insync_timeout,
        })
    }
}

/// A zone name: LDH labels, at least two of them.
pub fn check_domain(d: &str) -> Result<(), String> {
    let labels_ok = d.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    });
    if labels_ok && d.contains('.') && d.len() <= 200 {
        Ok(())
    } else {
        Err(format!("{d:?} is not a domain name (e.g. example.com)"))
    }
}

/// A label selector's syntax, as far as it can be checked offline:
/// `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`.
pub fn check_selector(sel: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("{sel:?} is not a label selector: {why}"));
    // Split on commas outside parentheses.
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in sel.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&sel[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return bad("unbalanced parentheses");
        }
    }
    if depth != 0 {
        return bad("unbalanced parentheses");
    }
    terms.push(&sel[start..]);
    let key_ok = |k: &str| {
        let k = k.trim();
        !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
    };
    let value_ok = |v: &str| v.trim().bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    for t in terms {
        let t = t.trim();
        let ok = if let Some((k, v)) = t.split_once("!=") {
            key_ok(k) && value_ok(v)
        } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
            key_ok(k) && value_ok(v)
        } else if let Some(k) = t.strip_prefix('!') {
            key_ok(k)
        } else if let Some((k, set)) = t.split_once(" notin ").or_else(|| t.split_once(" in ")) {
            let set = set.trim();
            key_ok(k) && set.starts_with('(') && set.ends_with(')') && set[1..set.len() - 1].split(',').all(value_ok)
        } else {
            key_ok(t)
        };
        if !ok {
            return bad(&format!("bad term {t:?}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<Config, ConfigError> {
        let mut all = vec!["service-dns"];
        all.extend_from_slice(args);
        Args::try_parse_from(all).map_err(|e| ConfigError::new("clap", e.to_string()))?.validate()
    }

    #[test]
    fn seed_configuration() {
        let c = parse(&["--hosted-zone-id=/hostedzone/Z123", "--domain-name=VipMind.me."]).unwrap();
        assert_eq!(c.zone, ZoneSource::Id { id: "Z123".into(), domain: Some("vipmind.me".into()) });
        assert_eq!(c.prefix, "kube");
        assert_eq!(c.ttl, 300);
        assert_eq!(c.policy, Policy::Sync);
        assert_eq!(c.interval, Duration::from_secs(60));
        assert!(!c.dry_run);
    }

    #[test]
    fn bad_values_name_their_flag() {
        assert_eq!(parse(&[]).unwrap_err().flag, "hosted-zone-id");
        assert_eq!(parse(&["--domain-name=not a domain"]).unwrap_err().flag, "domain-name");
        assert_eq!(
            parse(&["--domain-name=a.b", "--hostname-template={nam}.{domain}"]).unwrap_err().flag,
            "hostname-template"
        );
        assert_eq!(
            parse(&["--domain-name=a.b", "--hostname-template={name}.other.org"]).unwrap_err().flag,
            "hostname-template"
        );
        assert_eq!(parse(&["--domain-name=a.b", "--ttl=-5"]).unwrap_err().flag, "ttl");
        assert_eq!(parse(&["--domain-name=a.b", "--owner-id=a,b"]).unwrap_err().flag, "owner-id");
        assert_eq!(parse(&["--domain-name=a.b", "--route53-rps=0"]).unwrap_err().flag, "route53-rps");
        assert_eq!(parse(&["--domain-name=a.b", "--service-selector=a=(b"]).unwrap_err().flag, "service-selector");
        assert_eq!(parse(&["--domain-name=a.b", "--domain-prefix=Kube_"]).unwrap_err().flag, "domain-prefix");
        assert_eq!(parse(&["--domain-name=a.b", "--watch-namespace=Bad"]).unwrap_err().flag, "watch-namespace");
        assert_eq!(
            parse(&["--domain-name=a.b", "--debounce=2s", "--max-batch-delay=1s"]).unwrap_err().flag,
            "max-batch-delay"
        );
        assert_eq!(parse(&["--domain-name=a.b", "--max-batch-delay=1h"]).unwrap_err().flag, "max-batch-delay");
    }

    #[test]
    fn selectors() {
        for ok in ["dns=public", "a=b,c!=d", "app in (x, y),!legacy", "tier notin (a),k", "example.com/dns==yes"] {
            assert!(check_selector(ok).is_ok(), "{ok}");
        }
        for bad in ["a=(b", "a in x", "=b", "a=b c"] {
            assert!(check_selector(bad).is_err(), "{bad}");
        }
    }
}
