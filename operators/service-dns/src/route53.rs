//! Route53: the zone's current records (ListResourceRecordSets, paginated),
//! change batches, GetChange polling; a client-side rate limit and jittered
//! retries on throttling. Credentials and endpoint come from the standard
//! AWS chain (env, profile, web identity/IRSA, container/instance metadata;
//! `AWS_ENDPOINT_URL_ROUTE_53` / `AWS_ENDPOINT_URL`).

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::Region;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_route53::Client;
use aws_sdk_route53::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_route53::types::{self as r53, ChangeStatus, RrType};
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::hostname::normalize;
use crate::metrics::DnsMetrics;
use crate::model::{Action, Alias, FailoverRole, RecordSet, RecordType, Routing, RoutingPolicy};
use crate::plan::ChangeGroup;

/// Attempts of one request when Route53 throttles.
const THROTTLE_ATTEMPTS: u32 = 6;

/// A failed Route53 request.
#[derive(Debug, Clone, thiserror::Error)]
#[error("route53 {operation}: {code}: {message}")]
pub struct Route53Error {
    pub operation: &'static str,
    /// Route53's error code (`InvalidChangeBatch`, `Throttling`, …) or
    /// `Unreachable` when no answer came.
    pub code: String,
    pub message: String,
    /// What a throttling answer's `Retry-After` header asked for.
    pub retry_after: Option<Duration>,
}

/// What a failed request means for what was in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Route53 read the request and refused its content (`InvalidChangeBatch`,
    /// `InvalidInput`): nothing in it was applied, and something in it is
    /// wrong — find out what by sending less.
    Refused,
    /// Route53 asked us to slow down (after our own retries).
    Throttled,
    /// No answer, a timeout, a server error, credentials: nothing says the
    /// content is wrong, and sending it in pieces would only multiply the
    /// wait. Back off with the whole of it.
    Unavailable,
}

impl Route53Error {
    pub fn new(operation: &'static str, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self { operation, code: code.into(), message: message.into(), retry_after: None }
    }

    fn from_sdk<E>(operation: &'static str, e: SdkError<E, HttpResponse>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let retry_after = e
            .raw_response()
            .and_then(|r| r.headers().get("retry-after"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| Duration::from_secs(s.min(300)));
        match e.code() {
            Some(code) => Self {
                operation,
                code: code.to_string(),
                message: e.message().unwrap_or_default().to_string(),
                retry_after,
            },
            None => Self {
                operation,
                code: "Unreachable".into(),
                message: DisplayErrorContext(&e).to_string(),
                retry_after,
            },
        }
    }

    pub fn is_throttling(&self) -> bool {
        matches!(self.code.as_str(), "Throttling" | "ThrottlingException" | "PriorRequestNotComplete")
    }

    pub fn kind(&self) -> FailureKind {
        match self.code.as_str() {
            "InvalidChangeBatch" | "InvalidInput" => FailureKind::Refused,
            _ if self.is_throttling() => FailureKind::Throttled,
            _ => FailureKind::Unavailable,
        }
    }
}

/// At most `rps` requests in any window, across every caller: a sliding
/// window of `ceil(rps)` requests per `ceil(rps)/rps` seconds (5 per second
/// by default). A lone request after a quiet spell goes at once — a
/// strict `1/rps` spacing would make the change that follows a GetChange
/// wait 200 ms for nothing.
#[derive(Debug)]
struct RateLimiter {
    window: Duration,
    /// When the last `ceil(rps)` requests went (or are booked to go).
    sent: Mutex<std::collections::VecDeque<Instant>>,
    size: usize,
}

impl RateLimiter {
    fn new(rps: f64) -> Self {
        let size = rps.ceil().max(1.0) as usize;
        Self { window: Duration::from_secs_f64(size as f64 / rps), sent: Mutex::new(Default::default()), size }
    }

    async fn acquire(&self) {
        let at = {
            let mut sent = self.sent.lock().await;
            let now = Instant::now();
            let at = if sent.len() < self.size {
                now
            } else {
                let oldest = sent.pop_front().unwrap_or(now);
                (oldest + self.window).max(now)
            };
            sent.push_back(at);
            at
        };
        tokio::time::sleep_until(at).await;
    }
}

/// A hosted zone found by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneInfo {
    pub id: String,
    /// Normalized (lowercase, no trailing dot).
    pub name: String,
}

/// Route53 for one zone.
#[derive(Clone)]
pub struct Route53 {
    client: Client,
    limiter: Arc<RateLimiter>,
    metrics: DnsMetrics,
}

impl Route53 {
    /// A client from the standard AWS configuration chain. Route53 is a
    /// global service: the region defaults to us-east-1 when none is set.
    pub async fn from_env(rps: f64, timeout: Duration, metrics: DnsMetrics) -> Self {
        let http =
            aws_smithy_http_client::Builder::new().tls_provider(Provider::Rustls(CryptoMode::Ring)).build_https();
        let config = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http)
            // Throttling is retried here with our own jittered backoff; the
            // SDK's retries would hide requests from the metrics and the limiter.
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .operation_attempt_timeout(timeout)
                    .build(),
            )
            .load()
            .await;
        let mut conf = aws_sdk_route53::config::Builder::from(&config);
        if config.region().is_none() {
            conf = conf.region(Region::new("us-east-1"));
        }
        Self { client: Client::from_conf(conf.build()), limiter: Arc::new(RateLimiter::new(rps)), metrics }
    }

    /// Runs one request under the rate limit, retrying throttling with
    /// jittered exponential backoff, counting every attempt.
    async fn call<T, E, F, Fut>(&self, operation: &'static str, f: F) -> Result<T, Route53Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let mut attempt = 0;
        loop {
            self.limiter.acquire().await;
            let sent = std::time::Instant::now();
            let answer = f().await;
            self.metrics.request_duration.with_label_values(&[operation]).observe(sent.elapsed().as_secs_f64());
            match answer {
                Ok(v) => {
                    self.metrics.requests.with_label_values(&[operation, "success"]).inc();
                    return Ok(v);
                }
                Err(e) => {
                    let e = Route53Error::from_sdk(operation, e);
                    attempt += 1;
                    if e.is_throttling() && attempt < THROTTLE_ATTEMPTS {
                        self.metrics.requests.with_label_values(&[operation, "throttled"]).inc();
                        // Route53's Retry-After, when it gives one, is a floor.
                        let backoff = jittered_backoff(attempt, Duration::from_millis(200), Duration::from_secs(10))
                            .max(e.retry_after.unwrap_or_default());
                        tracing::debug!(%operation, ?backoff, "route53 throttled; retrying");
                        tokio::time::sleep(backoff).await;
                        continue;
                    }
                    self.metrics.requests.with_label_values(&[operation, "error"]).inc();
                    return Err(e);
                }
            }
        }
    }

    /// The zones named exactly `domain`.
    pub async fn zones_named(&self, domain: &str) -> Result<Vec<ZoneInfo>, Route53Error> {
        let want = normalize(domain);
        let mut out = Vec::new();
        let (mut dns_name, mut zone_id): (Option<String>, Option<String>) = (Some(want.clone()), None);
        loop {
            let page = self
                .call("ListHostedZonesByName", || {
                    self.client
                        .list_hosted_zones_by_name()
                        .set_dns_name(dns_name.clone())
                        .set_hosted_zone_id(zone_id.clone())
                        .send()
                })
                .await?;
            let mut past = false;
            for z in page.hosted_zones() {
                if normalize(z.name()) == want {
                    out.push(ZoneInfo { id: short_zone_id(z.id()), name: want.clone() });
                } else {
                    past = true;
                }
            }
            if past || !page.is_truncated() {
                break;
            }
            dns_name = page.next_dns_name().map(str::to_string);
            zone_id = page.next_hosted_zone_id().map(str::to_string);
        }
        Ok(out)
    }

    /// The name of zone `id`.
    pub async fn zone_name(&self, id: &str) -> Result<String, Route53Error> {
        let out = self.call("GetHostedZone", || self.client.get_hosted_zone().id(id).send()).await?;
        Ok(out.hosted_zone().map(|z| normalize(z.name())).unwrap_or_default())
    }

    /// Every record set of the zone, following pagination.
    pub async fn list(&self, zone_id: &str) -> Result<Vec<RecordSet>, Route53Error> {
        let mut out = Listing::default();
        let mut start: Option<(String, RrType, Option<String>)> = None;
        loop {
            let page = self
                .call("ListResourceRecordSets", || {
                    let mut req = self.client.list_resource_record_sets().hosted_zone_id(zone_id).max_items(300);
                    if let Some((name, rtype, ident)) = &start {
                        req = req
                            .start_record_name(name)
                            .start_record_type(rtype.clone())
                            .set_start_record_identifier(ident.clone());
                    }
                    req.send()
                })
                .await?;
            out.add(page.resource_record_sets());
            match (page.is_truncated(), page.next_record_name(), page.next_record_type()) {
                (true, Some(name), Some(rtype)) => {
                    let next = (name.to_string(), rtype.clone(), page.next_record_identifier().map(str::to_string));
                    if start.as_ref() == Some(&next) {
                        break; // a server that does not advance: stop rather than loop
                    }
                    start = Some(next);
                }
                _ => break,
            }
        }
        Ok(out.done())
    }

    /// Sends one change batch; returns the change id.
    pub async fn change(&self, zone_id: &str, groups: &[&ChangeGroup]) -> Result<String, Route53Error> {
        let mut changes = Vec::new();
        for g in groups {
            for c in &g.changes {
                changes.push(
                    to_route53(c.action, &c.record)
                        .map_err(|m| Route53Error::new("ChangeResourceRecordSets", "InvalidInput", m))?,
                );
            }
        }
        let comment = match groups {
            [one] => format!("flotilla service-dns: {} for {}", one.name, one.resource),
            _ => format!("flotilla service-dns: {} names", groups.len()),
        };
        let batch = r53::ChangeBatch::builder()
            .set_changes(Some(changes))
            .comment(comment)
            .build()
            .map_err(|e| Route53Error::new("ChangeResourceRecordSets", "InvalidInput", e.to_string()))?;
        let out = self
            .call("ChangeResourceRecordSets", || {
                self.client.change_resource_record_sets().hosted_zone_id(zone_id).change_batch(batch.clone()).send()
            })
            .await?;
        Ok(out.change_info().map(|c| c.id().to_string()).unwrap_or_default())
    }

    /// One GetChange: `Ok(true)` when the change is INSYNC.
    pub async fn is_insync(&self, change_id: &str) -> Result<bool, Route53Error> {
        let out = self.call("GetChange", || self.client.get_change().id(change_id).send()).await?;
        Ok(out.change_info().map(|c| c.status()) == Some(&ChangeStatus::Insync))
    }

    /// The record sets at exactly `name` (one short ListResourceRecordSets
    /// from that name): how a name whose change was refused is read again
    /// without listing the whole zone.
    pub async fn records_at(&self, zone_id: &str, name: &str) -> Result<Vec<RecordSet>, Route53Error> {
        let page = self
            .call("ListResourceRecordSets", || {
                self.client
                    .list_resource_record_sets()
                    .hosted_zone_id(zone_id)
                    .start_record_name(format!("{name}."))
                    .max_items(100)
                    .send()
            })
            .await?;
        Ok(page.resource_record_sets().iter().map(from_route53).filter(|r| &*r.name == name).collect())
    }
}

/// `/hostedzone/Z123` → `Z123`.
pub fn short_zone_id(id: &str) -> String {
    id.rsplit('/').next().unwrap_or(id).to_string()
}

/// Exponential backoff with full jitter: uniform in [base, min(cap, base·2^attempt)].
/// Ours, not `backon`'s (which `shared::backoff` uses): a pure function of
/// the attempt number, so that what remembers failures — a name's count in
/// the quarantine, the sync loop's — keeps only a number, not a live
/// iterator per name.
pub fn jittered_backoff(attempt: u32, base: Duration, cap: Duration) -> Duration {
    let ceiling = base.saturating_mul(1u32 << attempt.min(16)).min(cap);
    let span = ceiling.saturating_sub(base).as_millis() as u64;
    base + Duration::from_millis(if span == 0 { 0 } else { rand::random::<u64>() % (span + 1) })
}

fn canonical_ip(v: &str) -> String {
    v.parse::<IpAddr>().map(|ip| ip.to_string()).unwrap_or_else(|_| v.to_string())
}

/// A listing read page by page into the zone copy (heap_budget.rs builds
/// the copy it measures through this too).
#[derive(Default)]
pub(crate) struct Listing(Vec<RecordSet>);

impl Listing {
    pub(crate) fn add(&mut self, page: &[r53::ResourceRecordSet]) {
        self.0.extend(page.iter().map(from_route53));
    }

    /// The records listed, without the spare capacity their growth left
    /// (up to as much again as they hold; 22 B a Service at 2,000
    /// Services): the copy is kept until the next listing.
    pub(crate) fn done(mut self) -> Vec<RecordSet> {
        self.0.shrink_to_fit();
        self.0
    }
}

/// Route53's record set in our model. An ALIAS is an address record like
/// any other; a weighted or failover set is ours to write too (with its
/// set identifier); other routing policies and other types are foreign:
/// never written, only in the way.
pub fn from_route53(r: &r53::ResourceRecordSet) -> RecordSet {
    let name = normalize(r.name());
    let ttl = r.ttl().unwrap_or(0);
    let raw: Vec<String> = r.resource_records().iter().map(|v| v.value().to_string()).collect();
    let (rtype, values) = match r.r#type() {
        RrType::A => (RecordType::A, raw.iter().map(|v| canonical_ip(v)).collect()),
        RrType::Aaaa => (RecordType::Aaaa, raw.iter().map(|v| canonical_ip(v)).collect()),
        RrType::Cname => (RecordType::Cname, raw.iter().map(|v| normalize(v)).collect()),
        RrType::Txt => (RecordType::Txt, raw),
        _ => (RecordType::Other, raw),
    };
    let alias = r.alias_target().map(|target| Alias {
        zone_id: short_zone_id(target.hosted_zone_id()).into(),
        dns_name: normalize(target.dns_name()).into(),
        evaluate_target_health: target.evaluate_target_health(),
    });
    let routing = r.set_identifier().map(|id| (id, routing_of(r)));
    let plain = RecordSet::new(name.clone(), rtype, ttl, values);
    let rname = r.r#type().as_str();
    match (rtype, alias, routing) {
        (RecordType::Other, _, _) => plain.into_foreign(rname),
        // Latency, geolocation, multivalue …: not ours to write.
        (_, _, Some((id, None))) => plain.into_foreign(format!("{rname} set {id}")),
        // An alias of another type (a CNAME or TXT alias to a record of the
        // zone): never ours to write.
        (RecordType::Cname | RecordType::Txt, Some(_), _) => plain.into_foreign(format!("{rname} alias")),
        (_, Some(a), None) => RecordSet::alias(name, rtype, a),
        (_, Some(a), Some((_, Some(routing)))) => RecordSet::alias(name, rtype, a).with_routing(routing),
        (_, None, Some((_, Some(routing)))) => plain.with_routing(routing),
        (_, None, None) => plain,
    }
}

/// A weighted or failover set's policy (`None`: another policy, or none).
fn routing_of(r: &r53::ResourceRecordSet) -> Option<Routing> {
    let other = r.region().is_some()
        || r.geo_location().is_some()
        || r.multi_value_answer().is_some()
        || r.cidr_routing_config().is_some()
        || r.geo_proximity_location().is_some()
        || r.traffic_policy_instance_id().is_some();
    let policy = match (r.weight(), r.failover()) {
        _ if other => return None,
        (Some(w), None) => RoutingPolicy::Weighted(u8::try_from(w).ok()?),
        (None, Some(r53::ResourceRecordSetFailover::Primary)) => RoutingPolicy::Failover(FailoverRole::Primary),
        (None, Some(r53::ResourceRecordSetFailover::Secondary)) => RoutingPolicy::Failover(FailoverRole::Secondary),
        _ => return None,
    };
    Some(Routing { set_id: r.set_identifier()?.into(), policy, health_check_id: r.health_check_id().map(Into::into) })
}

pub(crate) fn to_route53(action: Action, r: &RecordSet) -> Result<r53::Change, String> {
    let rtype = match r.rtype {
        RecordType::A => RrType::A,
        RecordType::Aaaa => RrType::Aaaa,
        RecordType::Cname => RrType::Cname,
        RecordType::Txt => RrType::Txt,
        RecordType::Other => return Err(format!("refusing to write a foreign record {}", r.name)),
    };
    if r.is_foreign() {
        return Err(format!("refusing to write a foreign record {}", r.name));
    }
    let set = r53::ResourceRecordSet::builder().name(format!("{}.", r.name)).r#type(rtype);
    let set = match r.alias_target() {
        // An ALIAS has neither TTL nor values (Route53 refuses either).
        Some(a) => set.alias_target(
            r53::AliasTarget::builder()
                .hosted_zone_id(&*a.zone_id)
                .dns_name(format!("{}.", a.dns_name))
                .evaluate_target_health(a.evaluate_target_health)
                .build()
                .map_err(|e| e.to_string())?,
        ),
        None => {
            let mut records = Vec::new();
            for v in &r.values {
                records.push(r53::ResourceRecord::builder().value(&**v).build().map_err(|e| e.to_string())?);
            }
            set.ttl(r.ttl).set_resource_records(Some(records))
        }
    };
    let set = match r.routing() {
        None => set,
        Some(routing) => {
            let set = set
                .set_identifier(&*routing.set_id)
                .set_health_check_id(routing.health_check_id.as_deref().map(str::to_string));
            match routing.policy {
                RoutingPolicy::Weighted(w) => set.weight(i64::from(w)),
                RoutingPolicy::Failover(FailoverRole::Primary) => set.failover(r53::ResourceRecordSetFailover::Primary),
                RoutingPolicy::Failover(FailoverRole::Secondary) => {
                    set.failover(r53::ResourceRecordSetFailover::Secondary)
                }
            }
        }
    };
    let set = set.build().map_err(|e| e.to_string())?;
    let action = match action {
        Action::Create => r53::ChangeAction::Create,
        Action::Upsert => r53::ChangeAction::Upsert,
        Action::Delete => r53::ChangeAction::Delete,
    };
    r53::Change::builder().action(action).resource_record_set(set).build().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_classified() {
        let e = |code: &str| Route53Error::new("ChangeResourceRecordSets", code, "");
        assert_eq!(e("InvalidChangeBatch").kind(), FailureKind::Refused);
        assert_eq!(e("InvalidInput").kind(), FailureKind::Refused);
        assert_eq!(e("Throttling").kind(), FailureKind::Throttled);
        assert_eq!(e("PriorRequestNotComplete").kind(), FailureKind::Throttled);
        assert_eq!(e("Unreachable").kind(), FailureKind::Unavailable);
        assert_eq!(e("ServiceUnavailable").kind(), FailureKind::Unavailable);
        assert_eq!(e("AccessDenied").kind(), FailureKind::Unavailable);
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_limit_lets_a_lone_request_go_at_once() {
        let l = RateLimiter::new(5.0);
        let t0 = Instant::now();
        for _ in 0..5 {
            l.acquire().await;
        }
        assert_eq!(t0.elapsed(), Duration::ZERO, "5 in a quiet second go at once");
        l.acquire().await;
        assert_eq!(t0.elapsed(), Duration::from_secs(1), "the 6th waits for the window");
        let half = RateLimiter::new(0.5);
        half.acquire().await;
        half.acquire().await;
        assert_eq!(t0.elapsed(), Duration::from_secs(3), "0.5 rps: one per 2 s");
    }

    #[test]
    fn backoff_stays_in_bounds() {
        for attempt in 0..40 {
            let b = jittered_backoff(attempt, Duration::from_millis(200), Duration::from_secs(10));
            assert!(b >= Duration::from_millis(200) && b <= Duration::from_secs(10), "{b:?}");
        }
    }

    #[test]
    fn zone_ids() {
        assert_eq!(short_zone_id("/hostedzone/Z123"), "Z123");
        assert_eq!(short_zone_id("Z123"), "Z123");
    }

    #[test]
    fn foreign_records_are_marked() {
        let alias = r53::ResourceRecordSet::builder()
            .name("x.example.com.")
            .r#type(RrType::A)
            .alias_target(
                r53::AliasTarget::builder()
                    .hosted_zone_id("Z1")
                    .dns_name("lb.example")
                    .evaluate_target_health(false)
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap();
        let r = from_route53(&alias);
        assert_eq!(&*r.name, "x.example.com");
        assert!(!r.is_foreign(), "an ALIAS is an address record like any other");
        assert_eq!(r.alias_target().map(|a| &*a.dns_name), Some("lb.example"));

        let weighted = r53::ResourceRecordSet::builder()
            .name("x.example.com.")
            .r#type(RrType::A)
            .set_identifier("blue")
            .weight(10)
            .ttl(60)
            .resource_records(r53::ResourceRecord::builder().value("10.0.0.1").build().unwrap())
            .build()
            .unwrap();
        let r = from_route53(&weighted);
        assert!(!r.is_foreign(), "a weighted set is ours to write");
        assert_eq!(r.set_id(), Some("blue"));
        assert_eq!(r.routing().map(|r| r.policy), Some(RoutingPolicy::Weighted(10)));

        let latency = r53::ResourceRecordSet::builder()
            .name("x.example.com.")
            .r#type(RrType::A)
            .set_identifier("eu")
            .region(r53::ResourceRecordSetRegion::EuWest1)
            .ttl(60)
            .resource_records(r53::ResourceRecord::builder().value("10.0.0.1").build().unwrap())
            .build()
            .unwrap();
        let r = from_route53(&latency);
        assert_eq!(r.foreign(), Some("A set eu"));
        assert!(to_route53(Action::Delete, &r).is_err());
    }

    /// A routing set is written and read back as the same set: its set
    /// identifier, policy and health check, an ALIAS kept one.
    #[test]
    fn a_routing_set_round_trips() {
        let failover = Routing {
            set_id: "cluster-a".into(),
            policy: RoutingPolicy::Failover(FailoverRole::Primary),
            health_check_id: Some("0f6f2c3e-8a1b-4f7e-9c1d-2b3a4c5d6e7f".into()),
        };
        let weighted = Routing { set_id: "b".into(), policy: RoutingPolicy::Weighted(0), health_check_id: None };
        let target = Alias {
            zone_id: "Z26RNL4JYFTOTI".into(),
            dns_name: "web-0123.elb.us-east-1.amazonaws.com".into(),
            evaluate_target_health: false,
        };
        for want in [
            RecordSet::new("www.example.com", RecordType::A, 60, vec!["10.0.0.1".into()]).with_routing(failover),
            RecordSet::alias("www.example.com", RecordType::A, target).with_routing(weighted.clone()),
            RecordSet::new("_flotilla-owner.www.example.com", RecordType::Txt, 60, vec!["\"x\"".into()])
                .with_routing(weighted),
        ] {
            let change = to_route53(Action::Upsert, &want).unwrap();
            let set = change.resource_record_set().unwrap();
            assert_eq!(from_route53(set), want);
        }
    }

    /// What is written is read back as the same record set: an ALIAS has
    /// no TTL nor values, and its target's name is compared normalized.
    #[test]
    fn an_alias_round_trips() {
        let target = Alias {
            zone_id: "Z26RNL4JYFTOTI".into(),
            dns_name: "web-0123.elb.us-east-1.amazonaws.com".into(),
            evaluate_target_health: true,
        };
        let want = RecordSet::alias("example.com", RecordType::Aaaa, target);
        let change = to_route53(Action::Create, &want).unwrap();
        let set = change.resource_record_set().unwrap();
        assert_eq!(set.ttl(), None);
        assert!(set.resource_records().is_empty());
        assert_eq!(set.alias_target().map(|a| a.dns_name()), Some("web-0123.elb.us-east-1.amazonaws.com."));
        assert_eq!(from_route53(set), want);
    }
}
