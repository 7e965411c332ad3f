//! Prometheus metrics. Controller metrics keep controller-runtime's names and
//! labels so existing dashboards and alerts work; the shared runtime records
//! them around every reconcile, so no operator counts by hand. Operators
//! register their own `flotilla_<operator>_…` metrics on the same registry.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::workqueue::{QueueHandles, QueueMirror};
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// controller-runtime's `reconcile_time_seconds` buckets.
const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5,
    1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
];

/// client-go's `workqueue_work_duration_seconds` buckets: 10 ns × 10^0..11.
const WORK_BUCKETS: &[f64] = &[1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0];

/// The labels of every `workqueue_*` family: controller-runtime (0.15 on)
/// sets both `controller` and `name` to the controller's name.
const WORKQUEUE_LABELS: &[&str] = &["controller", "name"];

/// Values of `controller_runtime_reconcile_total`'s `result` label.
pub const RESULTS: [&str; 4] = ["success", "error", "requeue", "requeue_after"];

/// The registry and the suite-wide metrics.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    reconcile_total: IntCounterVec,
    reconcile_errors: IntCounterVec,
    reconcile_panics: IntCounterVec,
    terminal_errors: IntCounterVec,
    reconcile_time: HistogramVec,
    active_workers: IntGaugeVec,
    max_concurrent: IntGaugeVec,
    leader_status: IntGaugeVec,
    rest_requests: IntCounterVec,
    work: WorkMetrics,
}

/// client-go's `workqueue_*` metrics (labels `controller` and `name`, both
/// the controller's name, as controller-runtime sets them): the
/// processing side from the reconciles themselves, the queue side (`depth`,
/// `adds_total`, `queue_duration_seconds`) from a mirror of kube-runtime's
/// scheduler (`workqueue.rs`).
#[derive(Clone)]
struct WorkMetrics {
    depth: IntGaugeVec,
    adds: IntCounterVec,
    queue_duration: HistogramVec,
    /// The queue mirrors by controller, refreshed at scrape time.
    queues: Arc<Mutex<HashMap<String, Arc<QueueMirror>>>>,
    duration: HistogramVec,
    retries: IntCounterVec,
    unfinished: GaugeVec,
    longest: GaugeVec,
    /// The reconciles running now, per controller (the two gauges are
    /// computed from them at scrape time, as client-go updates them).
    running: Arc<Mutex<HashMap<String, Arc<Running>>>>,
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
        // controller-runtime counts a reconcile that returned a
        // `TerminalError` (not requeued). Ours: an error the operator's type
        // says retrying cannot fix (`ReconcileError::is_terminal`), and a
        // panic (a bug; its retries only repeat it). Both also count in
        // `reconcile_errors_total`.
        let terminal_errors = IntCounterVec::new(
            Opts::new(
                "controller_runtime_terminal_reconcile_errors_total",
                "Total number of terminal reconciliation errors per controller",
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
        let max_concurrent = IntGaugeVec::new(
            Opts::new(
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller (0: no limit)",
            ),
            &["controller"],
        )?;
        let rest_requests = crate::rest_client::requests_total()?;
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
        registry.register(Box::new(terminal_errors.clone()))?;
        registry.register(Box::new(reconcile_time.clone()))?;
        registry.register(Box::new(active_workers.clone()))?;
        registry.register(Box::new(max_concurrent.clone()))?;
        registry.register(Box::new(leader_status.clone()))?;
        registry.register(Box::new(rest_requests.clone()))?;
        let work = WorkMetrics {
            depth: IntGaugeVec::new(Opts::new("workqueue_depth", "Current depth of workqueue"), WORKQUEUE_LABELS)?,
            adds: IntCounterVec::new(
                Opts::new("workqueue_adds_total", "Total number of adds handled by workqueue"),
                WORKQUEUE_LABELS,
            )?,
            queue_duration: HistogramVec::new(
                HistogramOpts::new(
                    "workqueue_queue_duration_seconds",
                    "How long in seconds an item stays in workqueue before being requested.",
                )
                .buckets(WORK_BUCKETS.to_vec()),
                WORKQUEUE_LABELS,
            )?,
            queues: Arc::default(),
            duration: HistogramVec::new(
                HistogramOpts::new(
                    "workqueue_work_duration_seconds",
                    "How long in seconds processing an item from workqueue takes.",
                )
                .buckets(WORK_BUCKETS.to_vec()),
                WORKQUEUE_LABELS,
            )?,
            retries: IntCounterVec::new(
                Opts::new("workqueue_retries_total", "Total number of retries handled by workqueue"),
                WORKQUEUE_LABELS,
            )?,
            unfinished: GaugeVec::new(
                Opts::new(
                    "workqueue_unfinished_work_seconds",
                    "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
                ),
                WORKQUEUE_LABELS,
            )?,
            longest: GaugeVec::new(
                Opts::new(
                    "workqueue_longest_running_processor_seconds",
                    "How many seconds has the longest running processor for workqueue been running.",
                ),
                WORKQUEUE_LABELS,
            )?,
            running: Arc::default(),
        };
        registry.register(Box::new(work.depth.clone()))?;
        registry.register(Box::new(work.adds.clone()))?;
        registry.register(Box::new(work.queue_duration.clone()))?;
        registry.register(Box::new(work.duration.clone()))?;
        registry.register(Box::new(work.retries.clone()))?;
        registry.register(Box::new(work.unfinished.clone()))?;
        registry.register(Box::new(work.longest.clone()))?;
        #[cfg(target_os = "linux")]
        registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))?;
        Ok(Self {
            registry,
            reconcile_total,
            reconcile_errors,
            reconcile_panics,
            terminal_errors,
            reconcile_time,
            active_workers,
            max_concurrent,
            leader_status,
            rest_requests,
            work,
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

    /// `rest_client_requests_total`, for the kube client's counting layer
    /// ([`crate::rest_client`]).
    pub fn rest_client_requests(&self) -> IntCounterVec {
        self.rest_requests.clone()
    }

    /// The handles of one controller, every `result` pre-created at 0 so
    /// rate() and absent() behave from the first scrape.
    pub fn controller(&self, name: &str) -> ControllerMetrics {
        for result in RESULTS {
            self.reconcile_total.with_label_values(&[name, result]);
        }
        let running = match self.work.running.lock() {
            Ok(mut r) => r.entry(name.to_string()).or_default().clone(),
            Err(poisoned) => poisoned.into_inner().entry(name.to_string()).or_default().clone(),
        };
        self.work.unfinished.with_label_values(&[name, name]);
        self.work.longest.with_label_values(&[name, name]);
        ControllerMetrics {
            work_duration: self.work.duration.with_label_values(&[name, name]),
            retries: self.work.retries.with_label_values(&[name, name]),
            running,
            success: self.reconcile_total.with_label_values(&[name, "success"]),
            error: self.reconcile_total.with_label_values(&[name, "error"]),
            requeue_after: self.reconcile_total.with_label_values(&[name, "requeue_after"]),
            errors: self.reconcile_errors.with_label_values(&[name]),
            panics: self.reconcile_panics.with_label_values(&[name]),
            terminal: self.terminal_errors.with_label_values(&[name]),
            time: self.reconcile_time.with_label_values(&[name]),
            active: self.active_workers.with_label_values(&[name]),
            max_concurrent: self.max_concurrent.with_label_values(&[name]),
        }
    }

    /// The queue mirror of controller `name` (the `workqueue_depth`,
    /// `workqueue_adds_total` and `workqueue_queue_duration_seconds` of
    /// label `name`); the same one for the same name.
    pub fn queue(&self, name: &str) -> Arc<QueueMirror> {
        let mut queues = self.work.queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        queues
            .entry(name.to_string())
            .or_insert_with(|| {
                let handles = QueueHandles {
                    depth: self.work.depth.with_label_values(&[name, name]),
                    adds: self.work.adds.with_label_values(&[name, name]),
                    queue_duration: self.work.queue_duration.with_label_values(&[name, name]),
                };
                Arc::new(QueueMirror::new(handles))
            })
            .clone()
    }

    /// `leader_election_master_status{name}`.
    pub fn leader_status(&self, lease: &str) -> IntGauge {
        self.leader_status.with_label_values(&[lease])
    }

    /// The Prometheus text exposition of everything registered.
    pub fn encode(&self) -> String {
        self.work.refresh(Instant::now());
        let mut buf = Vec::new();
        if let Err(e) = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            tracing::error!(error = %e, "encoding metrics");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

impl WorkMetrics {
    /// Sets the queue mirrors' depth, and the in-progress gauges from the
    /// reconciles running at `now`.
    fn refresh(&self, now: Instant) {
        let queues: Vec<Arc<QueueMirror>> =
            self.queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner).values().cloned().collect();
        for q in queues {
            q.refresh(now);
        }
        let running: Vec<(String, Arc<Running>)> = match self.running.lock() {
            Ok(r) => r.iter().map(|(n, r)| (n.clone(), r.clone())).collect(),
            Err(_) => return,
        };
        for (name, r) in running {
            let (unfinished, longest) = r.in_progress(now);
            self.unfinished.with_label_values(&[&name, &name]).set(unfinished);
            self.longest.with_label_values(&[&name, &name]).set(longest);
        }
    }
}

/// The start times of one controller's running reconciles.
#[derive(Default)]
pub struct Running {
    next: AtomicU64,
    started: Mutex<HashMap<u64, Instant>>,
}

impl Running {
    /// Records a reconcile started now until the guard drops.
    pub fn start(self: &Arc<Self>) -> RunningGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut s) = self.started.lock() {
            s.insert(id, Instant::now());
        }
        RunningGuard { running: self.clone(), id }
    }

    /// Seconds of work in progress (summed) and of the longest running.
    fn in_progress(&self, now: Instant) -> (f64, f64) {
        let Ok(s) = self.started.lock() else { return (0.0, 0.0) };
        s.values().fold((0.0, 0.0), |(sum, max), t| {
            let secs = now.saturating_duration_since(*t).as_secs_f64();
            (sum + secs, f64::max(max, secs))
        })
    }
}

/// See [`Running::start`].
pub struct RunningGuard {
    running: Arc<Running>,
    id: u64,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        if let Ok(mut s) = self.running.started.lock() {
            s.remove(&self.id);
        }
    }
}

/// One controller's reconcile metrics.
#[derive(Clone)]
pub struct ControllerMetrics {
    /// `workqueue_work_duration_seconds{name}`.
    pub work_duration: prometheus::Histogram,
    /// `workqueue_retries_total{name}`: requeues after an error or a panic.
    pub retries: IntCounter,
    /// Running reconciles (`workqueue_unfinished_work_seconds`,
    /// `workqueue_longest_running_processor_seconds`).
    pub running: Arc<Running>,
    pub success: IntCounter,
    pub error: IntCounter,
    pub requeue_after: IntCounter,
    pub errors: IntCounter,
    pub panics: IntCounter,
    /// `controller_runtime_terminal_reconcile_errors_total{controller}`.
    pub terminal: IntCounter,
    pub time: prometheus::Histogram,
    /// `controller_runtime_active_workers{controller}`: reconciles running.
    pub active: IntGauge,
    /// `controller_runtime_max_concurrent_reconciles{controller}`.
    pub max_concurrent: IntGauge,
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
        for family in [
            "workqueue_unfinished_work_seconds",
            "workqueue_longest_running_processor_seconds",
            "workqueue_retries_total",
        ] {
            assert!(text.contains(&format!("{family}{{controller=\"widget\",name=\"widget\"}} 0")), "{family}: {text}");
        }
        for family in [
            "controller_runtime_terminal_reconcile_errors_total",
            "controller_runtime_active_workers",
            "controller_runtime_max_concurrent_reconciles",
        ] {
            assert!(text.contains(&format!("{family}{{controller=\"widget\"}} 0")), "{family}: {text}");
        }
    }

    #[test]
    fn every_workqueue_family_carries_controller_and_name() {
        let m = Metrics::new().unwrap();
        let c = m.controller("widget");
        c.work_duration.observe(0.1);
        let q = m.queue("widget");
        q.set_leading(true, Instant::now());
        q.request("ns/a", Instant::now());
        let text = m.encode();
        let families: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("workqueue_"))
            .map(|l| l.split(['{', ' ']).next().unwrap_or_default())
            .collect();
        assert!(families.len() >= 7, "{text}");
        for line in text.lines().filter(|l| l.starts_with("workqueue_")) {
            assert!(line.contains("controller=\"widget\"") && line.contains("name=\"widget\""), "{line}");
        }
    }

    #[test]
    fn work_in_progress_is_summed_and_its_longest_reported() {
        let m = Metrics::new().unwrap();
        let c = m.controller("widget");
        let first = c.running.start();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let second = c.running.start();
        let now = Instant::now();
        let (sum, longest) = c.running.in_progress(now);
        assert!(longest >= 0.02 && sum >= longest && sum < longest * 2.0, "sum {sum}, longest {longest}");
        drop(first);
        let (_, longest_after) = c.running.in_progress(now);
        assert!(longest_after < longest, "the longest one finished: {longest_after} < {longest}");
        drop(second);
        assert_eq!(c.running.in_progress(Instant::now()), (0.0, 0.0));
        assert!(
            m.encode().contains("workqueue_longest_running_processor_seconds{controller=\"widget\",name=\"widget\"} 0")
        );
    }
}
