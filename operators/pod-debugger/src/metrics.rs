//! `flotilla_pod_debugger_*` metrics. Labels are low-cardinality: results
//! and reasons, never pods or rules.

use prometheus::{IntCounterVec, IntGauge, Opts};

#[derive(Clone)]
pub struct DebuggerMetrics {
    /// Debug container additions by result.
    pub injections: IntCounterVec,
    /// Debug copies (mode: copy) by result.
    pub copies: IntCounterVec,
    /// PodDebuggers refused as a whole, by reason (counted when the refusal
    /// starts).
    pub refusals: IntCounterVec,
    /// Pods in the cache.
    pub pods_cached: IntGauge,
}

/// Results of an addition: added; rejected (the API refused it, e.g. Pod
/// Security or a changed pod); error (transport, timeout); dry_run_rejected
/// (the dry run refused the spec, no pod was touched).
pub const RESULTS: [&str; 4] = ["added", "rejected", "error", "dry_run_rejected"];
/// Results of a debug copy: created; rejected (the API refused it);
/// error (transport, timeout, or the pod changed); deleted (at the expiry,
/// or left by a PodDebugger switched to mode inject).
pub const COPY_RESULTS: [&str; 4] = ["created", "rejected", "error", "deleted"];
/// Reasons a whole PodDebugger is refused.
pub const REFUSALS: [&str; 6] =
    ["InvalidSpec", "ImageNotAllowed", "ProfileForbidden", "DryRunRejected", "ProtectedNamespace", "CopiesDisabled"];

impl DebuggerMetrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let m = Self {
            injections: IntCounterVec::new(
                Opts::new(
                    "flotilla_pod_debugger_injections_total",
                    "Debug container additions by result (added|rejected|error|dry_run_rejected)",
                ),
                &["result"],
            )?,
            copies: IntCounterVec::new(
                Opts::new(
                    "flotilla_pod_debugger_copies_total",
                    "Debug copies of crash-looping pods by result (created|rejected|error|deleted)",
                ),
                &["result"],
            )?,
            refusals: IntCounterVec::new(
                Opts::new(
                    "flotilla_pod_debugger_refusals_total",
                    "PodDebuggers refused as a whole, by reason (InvalidSpec|ImageNotAllowed|ProfileForbidden|DryRunRejected|ProtectedNamespace|CopiesDisabled)",
                ),
                &["reason"],
            )?,
            pods_cached: IntGauge::new("flotilla_pod_debugger_pods_cached", "Pods in the operator's cache")?,
        };
        for r in RESULTS {
            m.injections.with_label_values(&[r]);
        }
        for r in COPY_RESULTS {
            m.copies.with_label_values(&[r]);
        }
        for r in REFUSALS {
            m.refusals.with_label_values(&[r]);
        }
        Ok(m)
    }

    pub fn register(&self, metrics: &flotilla_shared::Metrics) -> Result<(), prometheus::Error> {
        metrics.register(self.injections.clone())?;
        metrics.register(self.copies.clone())?;
        metrics.register(self.refusals.clone())?;
        metrics.register(self.pods_cached.clone())?;
        Ok(())
    }
}
