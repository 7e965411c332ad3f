//! Flags (each also read from its upper-snake-cased environment variable)
//! and their checks. A bad value exits 2 with one line naming the flag,
//! before the cluster or Route53 is touched.

use std::time::Duration;

use flotilla_shared::{CommonArgs, ConfigError, WatchNamespaceArgs};

use crate::desired::MAX_TTL;
use crate::extdns::ExternalDnsOwner;
use crate::grant::HostnameAnnotations;
use crate::hostname::{self, Template};
use crate::plan::Policy;

fn parse_duration(s: &str) -> Result<Duration, String> {
    flotilla_shared::duration::parse_flag(s)
}

/// service-dns: a Route53 record (A/AAAA, or CNAME for a load balancer) for
/// every Service, with a TXT ownership record beside it; kept right by a
/// level-triggered sync. AWS credentials and endpoint come from the standard
/// AWS chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE,
/// AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE for IRSA, …;
/// AWS_ENDPOINT_URL_ROUTE_53 or AWS_ENDPOINT_URL to override the endpoint).
#[derive(clap::Parser, Debug, Clone)]
// The last of a repeated flag wins (as with Go's flag package), so the
// chart's extraArgs can override a flag the chart sets — except
// --hosted-zone-id, a list: each adds a zone (the chart refuses it in
// extraArgs, so that it never adds a zone where an override was meant).
#[command(version, about, long_about = None, args_override_self = true)]
pub struct Args {
    /// Route53 hosted zone id (e.g. Z0123456789ABC). Either this or --domain-name. Repeat it (or
    /// give a comma-separated list) for several zones, e.g. a public and a private zone of one
    /// domain (split horizon): each name goes to every zone of the most specific domain holding it,
    /// or to those a Service names in flotilla.dev/zones; each zone is synced on its own, so once
    /// started one zone's failure never holds another's changes back (start-up reads each zone's
    /// name once).
    #[arg(long, env = "HOSTED_ZONE_ID", value_name = "ID", value_delimiter = ',')]
    pub hosted_zone_id: Vec<String>,

    /// The zone's domain ({domain} in the template: each zone's own, with several). Without
    /// --hosted-zone-id, the zone is the one hosted zone with exactly this name; with it, checked
    /// against every zone's name (with zones of different domains, leave it unset).
    #[arg(long, env = "DOMAIN_NAME", value_name = "DOMAIN")]
    pub domain_name: Option<String>,

    /// {prefix} in the hostname template.
    #[arg(long, env = "DOMAIN_PREFIX", default_value = "kube", value_name = "PREFIX")]
    pub domain_prefix: String,

    /// Hostname of a Service without a flotilla.dev/hostname annotation. Variables: {name}, {namespace},
    /// {prefix}, {domain}.
    #[arg(long, env = "HOSTNAME_TEMPLATE", default_value = "{prefix}-{name}.{domain}", value_name = "TEMPLATE")]
    pub hostname_template: String,

    /// Publish headless Services (clusterIP: None): an A/AAAA set of their ready endpoints' addresses,
    /// read from their EndpointSlices (and pod names with flotilla.dev/pod-records). Off: they are
    /// skipped with a DnsRecordSkipped Event and EndpointSlices are never read. On needs list/watch on
    /// endpointslices (discovery.k8s.io): the chart grants it with publishHeadless=true.
    #[arg(long, env = "PUBLISH_HEADLESS", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_name = "BOOL")]
    pub publish_headless: bool,

    /// Names of a headless Service's pods (with the Service annotation flotilla.dev/pod-records: "true"),
    /// one per endpoint with a hostname (a StatefulSet's pods). Variables: {hostname} and {name} (both
    /// required), {namespace}, {prefix}, {domain}.
    #[arg(long, env = "POD_HOSTNAME_TEMPLATE", default_value = "{hostname}.{name}.{domain}", value_name = "TEMPLATE")]
    pub pod_hostname_template: String,

    /// The most endpoint addresses a headless Service's record set holds, and the most pod names it gets:
    /// the lowest are published, the Service gets a TooManyEndpoints Warning (1 … 400).
    #[arg(long, env = "MAX_ENDPOINTS_PER_SERVICE", default_value_t = 100, value_name = "N")]
    pub max_endpoints_per_service: usize,

    /// Publish an AWS load balancer's hostname (flotilla.dev/target: load-balancer, a *.elb.amazonaws.com
    /// name) as a Route53 ALIAS (A, and AAAA for a dualstack load balancer) to the load balancer's
    /// hosted zone, rather than a CNAME: what a zone apex needs, and free to query. A Service may say
    /// flotilla.dev/alias: "false" (or "true"); off, every load balancer hostname is a CNAME as before.
    #[arg(long, env = "ALIAS_LOAD_BALANCERS", default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_name = "BOOL")]
    pub alias_load_balancers: bool,

    /// TTL of the records, in seconds (a Service may set flotilla.dev/ttl). At most --max-ttl.
    #[arg(long, env = "TTL", default_value_t = 300, value_name = "SECONDS")]
    pub ttl: i64,

    /// The largest TTL a Service may ask for with flotilla.dev/ttl: larger ones are published with this
    /// one and get a TTLClamped Warning (a week-long TTL keeps a wrong answer in resolvers for a week).
    #[arg(long, env = "MAX_TTL", default_value_t = 86_400, value_name = "SECONDS")]
    pub max_ttl: i64,

    /// What a Service's flotilla.dev/hostname (and external-dns's hostname alias) may name.
    /// namespace-allowed: only names its Namespace's flotilla.dev/allowed-hostnames annotation grants
    /// (exact names or *.sub.domain subtrees; only who may edit Namespaces can set it), others get a
    /// HostnameNotAllowed Warning; any: any name in the zone(s) — trusts every Service author with the
    /// whole zone (e.g. a login page's name, and a certificate for it); off: the annotation is ignored,
    /// every Service gets its --hostname-template name. Template names never need a grant.
    #[arg(long, env = "HOSTNAME_ANNOTATIONS", value_enum, default_value_t = HostnameAnnotations::NamespaceAllowed)]
    pub hostname_annotations: HostnameAnnotations,

    /// The most names one Service may ask for with flotilla.dev/hostname: one with more publishes none of
    /// them and gets a TooManyHostnames Warning (Route53 holds 10,000 records per zone, for everyone).
    #[arg(long, env = "MAX_HOSTNAMES_PER_SERVICE", default_value_t = 10, value_name = "N")]
    pub max_hostnames_per_service: usize,

    /// How long a name a Service stopped publishing (deleted, its annotation or grant changed) is kept for
    /// its namespace: a Service of another namespace waiting for it gets it only after this, so that a
    /// helm reinstall or an Argo replace gets its name back instead of a squatter. 0 hands it over at once.
    #[arg(long, env = "HANDOVER_GRACE", default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub handover_grace: Duration,

    /// Written into every ownership TXT record; only records with our owner id are ever changed.
    /// Default: derived from the cluster (<first 8 hex digits of the kube-system namespace UID>, plus a hash of
    /// --watch-namespace/--service-selector when set), logged at start. Pin one to keep it across
    /// clusters (e.g. a rebuilt cluster taking over a zone).
    #[arg(long, env = "OWNER_ID", value_name = "ID")]
    pub owner_id: Option<String>,

    /// Take over the records this external-dns owner (its --txt-owner-id) published for the same
    /// Service: our TXT is written and external-dns's removed in the same atomic change. Everything
    /// else external-dns owns is left alone.
    #[arg(long, env = "ADOPT_EXTERNAL_DNS_OWNER", value_name = "ID")]
    pub adopt_external_dns_owner: Option<String>,

    /// The adopted external-dns's --txt-prefix (may hold %{record_type}).
    #[arg(long, env = "ADOPT_EXTERNAL_DNS_TXT_PREFIX", default_value = "", value_name = "PREFIX")]
    pub adopt_external_dns_txt_prefix: String,

    /// The adopted external-dns's --txt-suffix (may hold %{record_type}).
    #[arg(long, env = "ADOPT_EXTERNAL_DNS_TXT_SUFFIX", default_value = "", value_name = "SUFFIX")]
    pub adopt_external_dns_txt_suffix: String,

    /// sync: create, update and delete; upsert-only: never delete; create-only: never update nor delete.
    #[arg(long, env = "POLICY", value_enum, default_value_t = Policy::Sync)]
    pub policy: Policy,

    /// Full resync period (Service changes also trigger a sync, debounced).
    #[arg(long, env = "INTERVAL", default_value = "1m", value_parser = parse_duration, value_name = "DURATION")]
    pub interval: Duration,

    /// Log and report (as Events) the changes that would be made; change nothing.
    #[arg(long, env = "DRY_RUN", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_name = "BOOL")]
    pub dry_run: bool,

    /// Route53 requests per second, at most. Route53 allows 5 per second for the whole AWS account,
    /// shared with everything else using it there (cert-manager's DNS-01 challenges, Terraform, other
    /// clusters' service-dns): 2 leaves them room. Requests are batched, so this rarely limits a sync.
    #[arg(long = "route53-rps", env = "ROUTE53_RPS", default_value_t = 2.0, value_name = "N")]
    pub route53_rps: f64,

    /// Only Services matching this label selector (e.g. dns=public,tier!=internal).
    #[arg(long, env = "SERVICE_SELECTOR", value_name = "SELECTOR")]
    pub service_selector: Option<String>,

    /// Quiet time, during a stream of Service changes, before the changes gathered are synced (at most 1m).
    /// A change on an idle operator (no sync for this long) is synced at once.
    #[arg(long, env = "DEBOUNCE", default_value = "200ms", value_parser = parse_duration, value_name = "DURATION")]
    pub debounce: Duration,

    /// During a continuous stream of Service changes, how long a change may wait to be sent in a fuller
    /// Route53 request (full requests go at once; the stream's end is sent after --debounce).
    #[arg(long, env = "MAX_BATCH_DELAY", default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    pub max_batch_delay: Duration,

    /// How long to poll GetChange for INSYNC after a change before reporting it as submitted
    /// (in the background: the sync goes on meanwhile).
    #[arg(long, env = "INSYNC_TIMEOUT", default_value = "2m", value_parser = parse_duration, value_name = "DURATION")]
    pub insync_timeout: Duration,

    /// How long one Route53 request may take before it counts as failed (Route53 unreachable).
    #[arg(long, env = "ROUTE53_TIMEOUT", default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub route53_timeout: Duration,

    #[command(flatten)]
    pub namespace: WatchNamespaceArgs,

    #[command(flatten)]
    pub common: CommonArgs,
}

/// The largest `--max-hostnames-per-service`: a Service's names share one
/// sync's requests with everyone's.
pub const MAX_HOSTNAMES: usize = 1000;

/// The largest `--max-endpoints-per-service`: a record set's values are
/// counted twice in an UPSERT, and a request holds 1,000 (with its TXT).
pub const MAX_ENDPOINTS: usize = 400;

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
    /// Every zone, in the order given (at least one).
    pub zones: Vec<ZoneSource>,
    pub prefix: String,
    pub template: Template,
    pub ttl: i64,
    pub max_ttl: i64,
    pub hostname_annotations: HostnameAnnotations,
    pub max_hostnames: usize,
    /// `--publish-headless`: headless Services published (and EndpointSlices watched).
    pub publish_headless: bool,
    pub pod_template: Template,
    pub max_endpoints: usize,
    /// `--alias-load-balancers`.
    pub alias_load_balancers: bool,
    pub handover_grace: Duration,
    /// `None`: derive it from the cluster at start.
    pub owner_id: Option<String>,
    pub adopt: Option<ExternalDnsOwner>,
    pub policy: Policy,
    pub interval: Duration,
    pub dry_run: bool,
    pub route53_rps: f64,
    pub service_selector: Option<String>,
    pub watch_namespace: Option<String>,
    pub debounce: Duration,
    pub max_batch_delay: Duration,
    pub insync_timeout: Duration,
    pub route53_timeout: Duration,
}

/// 1-63 letters, digits, `-`, `_` or `.`.
fn check_owner_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 63
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok { Ok(()) } else { Err(format!("{id:?} must be 1-63 letters, digits, '-', '_' or '.'")) }
}

/// A duration flag within `[min, max]`: an unbounded one (`400000000000y`)
/// would overflow `Instant + Duration` and panic at run time.
fn check_duration(flag: &'static str, value: Duration, min: Duration, max: Duration) -> Result<(), ConfigError> {
    if value < min || value > max {
        return Err(ConfigError::new(
            flag,
            format!(
                "{} is not between {} and {}",
                flotilla_shared::duration::format(value),
                flotilla_shared::duration::format(min),
                flotilla_shared::duration::format(max)
            ),
        ));
    }
    Ok(())
}

impl Args {
    pub fn validate(&self) -> Result<Config, ConfigError> {
        self.namespace.validate()?;
        let domain = self.domain_name.as_deref().map(hostname::normalize).filter(|d| !d.is_empty());
        if let Some(d) = &domain {
            check_domain(d).map_err(|m| ConfigError::new("domain-name", m))?;
        }
        let ids: Vec<&str> = self.hosted_zone_id.iter().map(|s| s.trim()).filter(|s| !s.is_empty()).collect();
        let zones = match (ids.as_slice(), domain.clone()) {
            ([], Some(d)) => vec![ZoneSource::Domain(d)],
            ([], None) => {
                return Err(ConfigError::new(
                    "hosted-zone-id",
                    "set --hosted-zone-id (HOSTED_ZONE_ID) or --domain-name (DOMAIN_NAME)",
                ));
            }
            (ids, domain) => {
                let mut zones: Vec<ZoneSource> = Vec::with_capacity(ids.len());
                for id in ids {
                    let id = crate::route53::short_zone_id(id);
                    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
                        return Err(ConfigError::new("hosted-zone-id", format!("{id:?} is not a hosted zone id")));
                    }
                    if zones.iter().any(|z| matches!(z, ZoneSource::Id { id: other, .. } if *other == id)) {
                        return Err(ConfigError::new("hosted-zone-id", format!("{id} is given twice")));
                    }
                    zones.push(ZoneSource::Id { id, domain: domain.clone() });
                }
                zones
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
        let pod_template = Template::parse_pod(&self.pod_hostname_template)
            .map_err(|e| ConfigError::new("pod-hostname-template", e.to_string()))?;
        if let Some(d) = &domain {
            let vars = hostname::Vars { name: "web", namespace: "default", prefix: &self.domain_prefix, domain: d };
            let sample = pod_template.render_pod(vars, "web-0");
            hostname::validate(&sample, d).map_err(|e| {
                ConfigError::new(
                    "pod-hostname-template",
                    format!("gives {sample:?} for pod web-0 of Service default/web: {e}"),
                )
            })?;
        }
        if !(1..=MAX_ENDPOINTS).contains(&self.max_endpoints_per_service) {
            return Err(ConfigError::new(
                "max-endpoints-per-service",
                format!("{} is not in 1..={MAX_ENDPOINTS}", self.max_endpoints_per_service),
            ));
        }
        if !(0..=MAX_TTL).contains(&self.max_ttl) {
            return Err(ConfigError::new("max-ttl", format!("{} is not in 0..={MAX_TTL}", self.max_ttl)));
        }
        if !(0..=self.max_ttl).contains(&self.ttl) {
            return Err(ConfigError::new("ttl", format!("{} is not in 0..={} (--max-ttl)", self.ttl, self.max_ttl)));
        }
        if !(1..=MAX_HOSTNAMES).contains(&self.max_hostnames_per_service) {
            return Err(ConfigError::new(
                "max-hostnames-per-service",
                format!("{} is not in 1..={MAX_HOSTNAMES}", self.max_hostnames_per_service),
            ));
        }
        let owner_id = self.owner_id.as_deref().map(str::trim).filter(|s| !s.is_empty());
        if let Some(id) = owner_id {
            check_owner_id(id).map_err(|m| ConfigError::new("owner-id", m))?;
        }
        let adopt = match self.adopt_external_dns_owner.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            Some(id) => {
                check_owner_id(id).map_err(|m| ConfigError::new("adopt-external-dns-owner", m))?;
                Some(ExternalDnsOwner {
                    owner: id.to_string(),
                    prefix: self.adopt_external_dns_txt_prefix.trim().to_ascii_lowercase(),
                    suffix: self.adopt_external_dns_txt_suffix.trim().to_ascii_lowercase(),
                })
            }
            None => None,
        };
        let (sec, min, hour, day) =
            (Duration::from_secs(1), Duration::from_secs(60), Duration::from_secs(3600), Duration::from_secs(86_400));
        check_duration("interval", self.interval, sec, day)?;
        check_duration("debounce", self.debounce, Duration::ZERO, min)?;
        check_duration("insync-timeout", self.insync_timeout, Duration::ZERO, hour)?;
        check_duration("route53-timeout", self.route53_timeout, sec, 10 * min)?;
        check_duration("handover-grace", self.handover_grace, Duration::ZERO, day)?;
        if !(self.route53_rps.is_finite() && self.route53_rps > 0.0 && self.route53_rps <= 1000.0) {
            return Err(ConfigError::new("route53-rps", format!("{} is not in (0, 1000]", self.route53_rps)));
        }
        let service_selector = self.service_selector.as_deref().map(str::trim).filter(|s| !s.is_empty());
        if let Some(sel) = service_selector {
            check_selector(sel).map_err(|m| ConfigError::new("service-selector", m))?;
        }
        if self.max_batch_delay < self.debounce || self.max_batch_delay > Duration::from_secs(600) {
            return Err(ConfigError::new(
                "max-batch-delay",
                format!("must be between --debounce ({:?}) and 10m", self.debounce),
            ));
        }
        Ok(Config {
            zones,
            prefix: self.domain_prefix.clone(),
            template,
            ttl: self.ttl,
            max_ttl: self.max_ttl,
            hostname_annotations: self.hostname_annotations,
            max_hostnames: self.max_hostnames_per_service,
            publish_headless: self.publish_headless,
            pod_template,
            max_endpoints: self.max_endpoints_per_service,
            alias_load_balancers: self.alias_load_balancers,
            handover_grace: self.handover_grace,
            owner_id: owner_id.map(str::to_string),
            adopt,
            policy: self.policy,
            interval: self.interval,
            dry_run: self.dry_run,
            route53_rps: self.route53_rps,
            service_selector: service_selector.map(str::to_string),
            watch_namespace: self.namespace.namespace().map(str::to_string),
            debounce: self.debounce,
            max_batch_delay: self.max_batch_delay,
            insync_timeout: self.insync_timeout,
            route53_timeout: self.route53_timeout,
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
        assert_eq!(c.zones, [ZoneSource::Id { id: "Z123".into(), domain: Some("vipmind.me".into()) }]);
        assert_eq!(c.prefix, "kube");
        assert_eq!(c.ttl, 300);
        assert_eq!(c.policy, Policy::Sync);
        assert_eq!(c.interval, Duration::from_secs(60));
        assert!(!c.dry_run);
    }

    /// Several zones: repeated or comma-separated, in the order given; the
    /// domain, when given, checked against each; one given twice is refused.
    #[test]
    fn several_zones() {
        let id = |id: &str, domain: Option<&str>| ZoneSource::Id { id: id.into(), domain: domain.map(Into::into) };
        let c = parse(&["--hosted-zone-id=ZPUB", "--hosted-zone-id=/hostedzone/ZPRIV"]).unwrap();
        assert_eq!(c.zones, [id("ZPUB", None), id("ZPRIV", None)]);
        let c = parse(&["--hosted-zone-id=ZPUB,ZPRIV", "--domain-name=example.com"]).unwrap();
        assert_eq!(c.zones, [id("ZPUB", Some("example.com")), id("ZPRIV", Some("example.com"))]);
        let e = parse(&["--hosted-zone-id=ZPUB,ZORG,ZPUB"]).unwrap_err();
        assert_eq!(e.flag, "hosted-zone-id");
        assert!(e.message.contains("ZPUB is given twice"), "{}", e.message);
        assert_eq!(parse(&["--hosted-zone-id=ZPUB,Z-2"]).unwrap_err().flag, "hosted-zone-id");
    }

    #[test]
    fn safe_defaults() {
        let c = parse(&["--domain-name=a.b"]).unwrap();
        assert_eq!(c.hostname_annotations, HostnameAnnotations::NamespaceAllowed);
        assert_eq!(c.max_hostnames, 10);
        assert_eq!(c.max_ttl, 86_400);
        assert_eq!(c.handover_grace, Duration::from_secs(300));
        assert_eq!(c.route53_rps, 2.0, "5 is the whole AWS account's limit");
        assert!(!c.publish_headless, "headless Services are opt-in (issue 31)");
        assert!(parse(&["--domain-name=a.b", "--publish-headless"]).unwrap().publish_headless);
        assert!(c.alias_load_balancers, "AWS load balancers are ALIASed by default (issue 31)");
        assert!(!parse(&["--domain-name=a.b", "--alias-load-balancers=false"]).unwrap().alias_load_balancers);
        assert!(!parse(&["--domain-name=a.b", "--publish-headless=false"]).unwrap().publish_headless);
        let c = parse(&["--domain-name=a.b", "--hostname-annotations=any", "--handover-grace=0s"]).unwrap();
        assert_eq!(c.hostname_annotations, HostnameAnnotations::Any);
        assert_eq!(c.handover_grace, Duration::ZERO);
        use clap::CommandFactory;
        let help = Args::command().render_long_help().to_string();
        assert!(help.contains("whole AWS account"), "--route53-rps says why its default is 2:\n{help}");
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
        for bad in ["{hostname}.{domain}", "{hostname}.{name}.other.org", "{hostname}.{nme}.{domain}"] {
            let arg = format!("--pod-hostname-template={bad}");
            assert_eq!(parse(&["--domain-name=a.b", &arg]).unwrap_err().flag, "pod-hostname-template", "{bad}");
        }
        for bad in ["0", "401"] {
            let arg = format!("--max-endpoints-per-service={bad}");
            assert_eq!(parse(&["--domain-name=a.b", &arg]).unwrap_err().flag, "max-endpoints-per-service", "{bad}");
        }
        assert_eq!(
            parse(&["--domain-name=a.b", "--pod-hostname-template={hostname}-{name}.{namespace}.{domain}"])
                .unwrap()
                .max_endpoints,
            100
        );
        assert_eq!(parse(&["--domain-name=a.b", "--ttl=-5"]).unwrap_err().flag, "ttl");
        assert_eq!(parse(&["--domain-name=a.b", "--ttl=90000"]).unwrap_err().flag, "ttl", "above --max-ttl");
        assert!(parse(&["--domain-name=a.b", "--ttl=90000", "--max-ttl=90000"]).is_ok());
        assert_eq!(parse(&["--domain-name=a.b", "--max-ttl=-1"]).unwrap_err().flag, "max-ttl");
        assert_eq!(parse(&["--domain-name=a.b", "--max-ttl=2147483648"]).unwrap_err().flag, "max-ttl");
        assert!(parse(&["--domain-name=a.b", "--max-ttl=soon"]).is_err());
        assert_eq!(
            parse(&["--domain-name=a.b", "--max-hostnames-per-service=0"]).unwrap_err().flag,
            "max-hostnames-per-service"
        );
        assert_eq!(
            parse(&["--domain-name=a.b", "--max-hostnames-per-service=1001"]).unwrap_err().flag,
            "max-hostnames-per-service"
        );
        assert!(parse(&["--domain-name=a.b", "--hostname-annotations=some"]).is_err());
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
        assert_eq!(
            parse(&["--domain-name=a.b", "--adopt-external-dns-owner=a b"]).unwrap_err().flag,
            "adopt-external-dns-owner"
        );
    }

    #[test]
    fn every_duration_is_bounded() {
        for flag in ["interval", "debounce", "max-batch-delay", "insync-timeout", "route53-timeout", "handover-grace"] {
            let e = parse(&["--domain-name=a.b", &format!("--{flag}=999999999h")]).unwrap_err();
            assert_eq!(e.flag, flag, "{e:?}");
            let e = parse(&["--domain-name=a.b", &format!("--{flag}=72h")]).unwrap_err();
            assert_eq!(e.flag, flag, "{e:?}");
        }
        assert_eq!(parse(&["--domain-name=a.b", "--interval=500ms"]).unwrap_err().flag, "interval");
    }

    #[test]
    fn owner_id_is_derived_unless_given() {
        assert_eq!(parse(&["--domain-name=a.b"]).unwrap().owner_id, None);
        assert_eq!(parse(&["--domain-name=a.b", "--owner-id="]).unwrap().owner_id, None);
        assert_eq!(parse(&["--domain-name=a.b", "--owner-id=blue"]).unwrap().owner_id.as_deref(), Some("blue"));
        let c = parse(&[
            "--domain-name=a.b",
            "--adopt-external-dns-owner=ext",
            "--adopt-external-dns-txt-prefix=TXT.%{record_type}-",
        ])
        .unwrap();
        assert_eq!(
            c.adopt,
            Some(ExternalDnsOwner { owner: "ext".into(), prefix: "txt.%{record_type}-".into(), suffix: String::new() })
        );
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
