//! `flotilla_pod_alert_*` metrics. Labels are low-cardinality: namespaces
//! and reasons, sinks and results, causes; never pods or workloads.

use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Opts};

use crate::crd::Reason;

#[derive(Clone)]
pub struct AlertMetrics {
    /// Incidents firing, by namespace and reason.
    pub firing: IntGaugeVec,
    /// Notifications by sink and result (success, error, dropped).
    pub notifications: IntCounterVec,
    /// Problems and notifications held back, by cause.
    pub suppressed: IntCounterVec,
    /// Log tail reads by result (success, unavailable).
    pub log_reads: IntCounterVec,
    /// Pods in the cache.
    pub pods_cached: IntGauge,
    /// Bytes of log tails held (one per incident key, within --max-log-bytes).
    pub log_tail_bytes: IntGauge,
}

/// The sinks, for pre-created label sets.
pub const SINKS: [&str; 6] = ["events", "slack", "webhook", "alertmanager", "teams", "pagerduty"];

impl AlertMetrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let m = Self {
            firing: IntGaugeVec::new(
                Opts::new("flotilla_pod_alert_incidents_firing", "Incidents firing (notified, not resolved)"),
                &["namespace", "reason"],
            )?,
            notifications: IntCounterVec::new(
                Opts::new(
                    "flotilla_pod_alert_notifications_total",
                    "Notifications by sink (events|slack|webhook|alertmanager|teams|pagerduty) and result (success|error|dropped|held|summarized)",
                ),
                &["sink", "result"],
            )?,
            suppressed: IntCounterVec::new(
                Opts::new(
                    "flotilla_pod_alert_suppressed_total",
                    "Problems and notifications held back, by cause (Cooldown, LogPattern, RecoveredInGrace, AlreadyNotified, Completed, Terminating, ...)",
                ),
                &["cause"],
            )?,
            log_reads: IntCounterVec::new(
                Opts::new(
                    "flotilla_pod_alert_log_reads_total",
                    "Container log tails read, by result (success|unavailable)",
                ),
                &["result"],
            )?,
            pods_cached: IntGauge::new("flotilla_pod_alert_pods_cached", "Pods in the operator's cache")?,
            log_tail_bytes: IntGauge::new(
                "flotilla_pod_alert_log_tail_bytes",
                "Bytes of log tails held: one per incident key, shared by every PodAlert, within --max-log-bytes",
            )?,
        };
        for s in SINKS {
            for r in ["success", "error", "dropped", "held", "summarized"] {
                m.notifications.with_label_values(&[s, r]);
            }
        }
        for r in ["success", "unavailable"] {
            m.log_reads.with_label_values(&[r]);
        }
        Ok(m)
    }

    pub fn register(&self, registry: &flotilla_shared::Metrics) -> Result<(), prometheus::Error> {
        registry.register(self.firing.clone())?;
        registry.register(self.notifications.clone())?;
        registry.register(self.suppressed.clone())?;
        registry.register(self.log_reads.clone())?;
        registry.register(self.pods_cached.clone())?;
        registry.register(self.log_tail_bytes.clone())?;
        Ok(())
    }

    pub fn notified(&self, sink: &str, result: &str) {
        self.notifications.with_label_values(&[sink, result]).inc();
    }

    pub fn suppressed(&self, cause: &str, n: u64) {
        if n > 0 {
            self.suppressed.with_label_values(&[cause]).inc_by(n);
        }
    }

    pub fn set_firing(&self, namespace: &str, reason: Reason, n: usize) {
        self.firing.with_label_values(&[namespace, reason.as_str()]).set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}
