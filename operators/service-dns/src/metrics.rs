//! `flotilla_service_dns_*` metrics.

use prometheus::{Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts};

/// The operator's own metrics (the shared reconcile metrics are recorded
/// around each sync under `controller="service-dns"`).
#[derive(Clone)]
pub struct DnsMetrics {
    /// Address record sets (A/AAAA/CNAME) owned by this operator in the zone.
    pub managed_records: IntGauge,
    /// Route53 API requests by `operation` and `result` (success|error|throttled).
    pub requests: IntCounterVec,
    /// Time Route53 took to answer, by `operation` (rate-limit waits excluded).
    pub request_duration: HistogramVec,
    /// Record changes applied, by `action` (create|upsert|delete).
    pub changes: IntCounterVec,
    /// Conflicts newly seen (a name wanted twice, or taken by a record we do not own).
    pub conflicts_total: IntCounter,
    /// Conflicts at the last sync.
    pub conflicts: IntGauge,
    /// Unix time of the last sync that ended without error.
    pub last_success: Gauge,
    /// Duration of a sync (list, plan, apply, wait for INSYNC).
    pub sync_duration: Histogram,
    /// Syncs that failed (Route53 unavailable or throttling).
    pub sync_errors: IntCounter,
    /// Names Route53 refused, waiting out their own backoff.
    pub quarantined: IntGauge,
}

impl DnsMetrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let p = "flotilla_service_dns_";
        Ok(Self {
            managed_records: IntGauge::new(
                format!("{p}managed_records"),
                "Address record sets (A/AAAA/CNAME) owned by this operator in the zone",
            )?,
            requests: IntCounterVec::new(
                Opts::new(format!("{p}route53_requests_total"), "Route53 API requests by operation and result"),
                &["operation", "result"],
            )?,
            request_duration: HistogramVec::new(
                HistogramOpts::new(
                    format!("{p}route53_request_duration_seconds"),
                    "Time Route53 took to answer a request, by operation (rate-limit waits excluded)",
                )
                .buckets(vec![0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
                &["operation"],
            )?,
            changes: IntCounterVec::new(
                Opts::new(format!("{p}route53_changes_total"), "Record set changes applied, by action"),
                &["action"],
            )?,
            conflicts_total: IntCounter::new(
                format!("{p}conflicts_total"),
                "Conflicts newly detected: a name wanted by two Services, or taken by a record not owned",
            )?,
            conflicts: IntGauge::new(format!("{p}conflicts"), "Conflicts at the last sync")?,
            last_success: Gauge::new(
                format!("{p}last_successful_sync_timestamp_seconds"),
                "Unix time of the last sync that ended without error",
            )?,
            sync_duration: Histogram::with_opts(
                HistogramOpts::new(format!("{p}sync_duration_seconds"), "Duration of one sync")
                    .buckets(vec![0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0]),
            )?,
            sync_errors: IntCounter::new(format!("{p}sync_errors_total"), "Syncs that ended with an error")?,
            quarantined: IntGauge::new(
                format!("{p}quarantined_names"),
                "Names Route53 refused, each retried alone with its own backoff",
            )?,
        })
    }

    /// Registers everything on the operator's registry.
    pub fn register(&self, m: &flotilla_shared::Metrics) -> Result<(), prometheus::Error> {
        m.register(self.managed_records.clone())?;
        m.register(self.requests.clone())?;
        m.register(self.request_duration.clone())?;
        m.register(self.changes.clone())?;
        m.register(self.conflicts_total.clone())?;
        m.register(self.conflicts.clone())?;
        m.register(self.last_success.clone())?;
        m.register(self.sync_duration.clone())?;
        m.register(self.sync_errors.clone())?;
        m.register(self.quarantined.clone())?;
        for action in ["create", "upsert", "delete"] {
            self.changes.with_label_values(&[action]);
        }
        Ok(())
    }
}
