//! `flotilla_service_dns_*` metrics.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus::{Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts};

/// One zone's share of the gauges (see [`DnsMetrics::zone`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ZoneFigures {
    pub managed_records: i64,
    pub conflicts: i64,
    pub quarantined: i64,
    /// Unix time of its last sync that ended without error (0: none yet).
    pub last_success: f64,
}

/// The operator's own metrics (the shared reconcile metrics are recorded
/// around each sync under `controller="service-dns"`).
#[derive(Clone)]
pub struct DnsMetrics {
    /// Address record sets (A/AAAA/CNAME) owned by this operator in the
    /// zones (with several, the gauges add up the zones — the last success
    /// is the stalest zone's — so that a dashboard and the chart's alerts
    /// read the same series with one zone or many).
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
    zones: Arc<Mutex<BTreeMap<String, ZoneFigures>>>,
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
            zones: Arc::default(),
        })
    }

    /// Changes one zone's figures and sets the gauges from every zone's:
    /// the sums, and the stalest last success (0 until every zone synced).
    pub fn zone(&self, id: &str, change: impl FnOnce(&mut ZoneFigures)) {
        let mut zones = self.zones.lock().unwrap_or_else(PoisonError::into_inner);
        change(zones.entry(id.to_string()).or_default());
        let sum = |f: fn(&ZoneFigures) -> i64| zones.values().map(f).sum::<i64>();
        self.managed_records.set(sum(|z| z.managed_records));
        self.conflicts.set(sum(|z| z.conflicts));
        self.quarantined.set(sum(|z| z.quarantined));
        self.last_success.set(zones.values().map(|z| z.last_success).fold(f64::INFINITY, f64::min));
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

#[cfg(test)]
mod tests {
    /// Several zones: the gauges add them up, the last success is the
    /// stalest zone's (0 while one has not synced yet).
    #[test]
    fn the_gauges_add_up_the_zones() {
        let m = super::DnsMetrics::new().unwrap_or_else(|e| panic!("{e}"));
        m.zone("ZPUB", |z| (z.managed_records, z.conflicts, z.last_success) = (3, 1, 100.0));
        m.zone("ZPRIV", |_| {});
        assert_eq!((m.managed_records.get(), m.conflicts.get(), m.last_success.get()), (3, 1, 0.0));
        m.zone("ZPRIV", |z| (z.managed_records, z.quarantined, z.last_success) = (2, 4, 90.0));
        assert_eq!((m.managed_records.get(), m.quarantined.get(), m.last_success.get()), (5, 4, 90.0));
        m.zone("ZPRIV", |z| z.last_success = 120.0);
        assert_eq!(m.last_success.get(), 100.0);
    }
}
