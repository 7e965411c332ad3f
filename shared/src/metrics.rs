//! Prometheus metrics. Controller metrics keep controller-runtime's names and
//! labels so existing dashboards and alerts work; the shared runtime records
//! them around every reconcile, so no operator counts by hand. Operators
//! register their own `flotilla_<operator>_…` metrics on the same registry.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// controller-runtime's `reconcile_time_seconds` buckets.
const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5,
    1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
];

/// Values of `controller_runtime_reconcile_total`'s `result` label.
pub const RESULTS: [&str; 4] = ["success", "error", "requeue", "requeue_after"];

/// The registry and the suite-wide metrics.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    reconcile_total: IntCounterVec,
    reconcile_errors: IntCounterVec,
    reconcile_panics: IntCounterVec,
    reconcile_time: HistogramVec,
    active_workers: IntGaugeVec,
    leader_status: IntGaugeVec,
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let reconcile_total = IntCounterVec::new(
            Opts::new("controller_runtime_reconcile_total", "Total number of reconciliations per controller"),
            &["controller", "result"],
        )?;
        let reconcile_errors = IntCounterVec::new(
            Opts::new(
                "controller_runtime_reconcile_errors_total",
                "Total number of reconciliation errors per controller",
            ),
            &["controller"],
        )?;
        let reconcile_panics = IntCounterVec::new(
            Opts::new(
                "controller_runtime_reconcile_panics_total",
                "Total number of reconciliation panics per controller",
            ),
            &["controller"],
        )?;
        let reconcile_time = HistogramVec::new(
            HistogramOpts::new(
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
            )
            .buckets(RECONCILE_BUCKETS.to_vec()),
            &["controller"],
        )?;
        let active_workers = IntGaugeVec::new(
            Opts::new("controller_runtime_active_workers", "Number of currently used workers per controller"),
            &["controller"],
        )?;
        let leader_status = IntGaugeVec::new(
            Opts::new(
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
            ),
            &["name"],
        )?;
        registry.register(Box::new(reconcile_total.clone()))?;
        registry.register(Box::new(reconcile_errors.clone()))?;
        registry.register(Box::new(reconcile_panics.clone()))?;
        registry.register(Box::new(reconcile_time.clone()))?;
        registry.register(Box::new(active_workers.clone()))?;
        registry.register(Box::new(leader_status.clone()))?;
        #[cfg(target_os = "linux")]
        registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))?;
        Ok(Self {
            registry,
            reconcile_total,
            reconcile_errors,
            reconcile_panics,
            reconcile_time,
            active_workers,
            leader_status,
        })
    }

    /// Registers an operator's own metric.
    pub fn register<C: prometheus::core::Collector + Clone + 'static>(
        &self,
        collector: C,
    ) -> Result<C, prometheus::Error> {
        self.registry.register(Box::new(collector.clone()))?;
        Ok(collector)
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The handles of one controller, every `result` pre-created at 0 so
    /// rate() and absent() behave from the first scrape.
    pub fn controller(&self, name: &str) -> ControllerMetrics {
        for result in RESULTS {
            self.reconcile_total.with_label_values(&[name, result]);
        }
        ControllerMetrics {
            success: self.reconcile_total.with_label_values(&[name, "success"]),
            error: self.reconcile_total.with_label_values(&[name, "error"]),
            requeue_after: self.reconcile_total.with_label_values(&[name, "requeue_after"]),
            errors: self.reconcile_errors.with_label_values(&[name]),
            panics: self.reconcile_panics.with_label_values(&[name]),
            time: self.reconcile_time.with_label_values(&[name]),
            active: self.active_workers.with_label_values(&[name]),
        }
    }

    /// `leader_election_master_status{name}`.
    pub fn leader_status(&self, lease: &str) -> IntGauge {
        self.leader_status.with_label_values(&[lease])
    }

    /// The Prometheus text exposition of everything registered.
    pub fn encode(&self) -> String {
        let mut buf = Vec::new();
        if let Err(e) = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            tracing::error!(error = %e, "encoding metrics");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// One controller's reconcile metrics.
#[derive(Clone)]
pub struct ControllerMetrics {
    pub success: IntCounter,
    pub error: IntCounter,
    pub requeue_after: IntCounter,
    pub errors: IntCounter,
    pub panics: IntCounter,
    pub time: prometheus::Histogram,
    pub active: IntGauge,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_result_exists_from_the_start() {
        let m = Metrics::new().unwrap();
        m.controller("widget");
        let text = m.encode();
        for r in RESULTS {
            assert!(
                text.contains(&format!("controller_runtime_reconcile_total{{controller=\"widget\",result=\"{r}\"}} 0")),
                "{r}: {text}"
            );
        }
        assert!(text.contains("process_resident_memory_bytes"), "{text}");
    }
}
