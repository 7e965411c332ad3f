//! `flotilla_config_copier_*` metrics. Gauges are per rule (a handful of
//! rules per cluster); counters are per action and result only.

use prometheus::{IntCounterVec, IntGaugeVec, Opts};

use crate::copy::RuleId;

#[derive(Clone)]
pub struct CopierMetrics {
    /// Copies in sync, per rule.
    pub copies_in_sync: IntGaugeVec,
    /// Copies wanted, per rule.
    pub copies_desired: IntGaugeVec,
    /// Conflicting targets, per rule.
    pub conflicts: IntGaugeVec,
    /// Sources, per rule.
    pub sources: IntGaugeVec,
    /// Copy writes by action (create, update, adopt, delete) and result (success, error, conflict).
    pub operations: IntCounterVec,
    /// API requests the reconciler issued, by verb (get, apply, patch, delete, list, status).
    pub api_requests: IntCounterVec,
}

pub const ACTIONS: [&str; 4] = ["create", "update", "adopt", "delete"];

impl CopierMetrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let rule = &["namespace", "rule"];
        let m = Self {
            copies_in_sync: IntGaugeVec::new(
                Opts::new("flotilla_config_copier_copies_in_sync", "Copies holding their source's current content"),
                rule,
            )?,
            copies_desired: IntGaugeVec::new(
                Opts::new("flotilla_config_copier_copies_desired", "Copies a rule wants (sources x target namespaces)"),
                rule,
            )?,
            conflicts: IntGaugeVec::new(
                Opts::new("flotilla_config_copier_conflicts", "Targets held by an object the rule does not own"),
                rule,
            )?,
            sources: IntGaugeVec::new(
                Opts::new("flotilla_config_copier_sources", "Source objects matching a rule's selector"),
                rule,
            )?,
            operations: IntCounterVec::new(
                Opts::new(
                    "flotilla_config_copier_copy_operations_total",
                    "Copy writes by action (create|update|adopt|delete) and result (success|error|conflict)",
                ),
                &["action", "result"],
            )?,
            api_requests: IntCounterVec::new(
                Opts::new(
                    "flotilla_config_copier_api_requests_total",
                    "Kubernetes API requests issued by reconciles, by verb",
                ),
                &["verb"],
            )?,
        };
        for a in ACTIONS {
            for r in ["success", "error"] {
                m.operations.with_label_values(&[a, r]);
            }
        }
        Ok(m)
    }

    /// Registers everything on the operator's registry.
    pub fn register(&self, registry: &flotilla_shared::Metrics) -> Result<(), prometheus::Error> {
        registry.register(self.copies_in_sync.clone())?;
        registry.register(self.copies_desired.clone())?;
        registry.register(self.conflicts.clone())?;
        registry.register(self.sources.clone())?;
        registry.register(self.operations.clone())?;
        registry.register(self.api_requests.clone())?;
        Ok(())
    }

    pub fn request(&self, verb: &str) {
        self.api_requests.with_label_values(&[verb]).inc();
    }

    pub fn set_rule(&self, rule: &RuleId, sources: usize, desired: usize, in_sync: usize, conflicts: usize) {
        let l = [rule.namespace.as_str(), rule.name.as_str()];
        let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        self.sources.with_label_values(&l).set(n(sources));
        self.copies_desired.with_label_values(&l).set(n(desired));
        self.copies_in_sync.with_label_values(&l).set(n(in_sync));
        self.conflicts.with_label_values(&l).set(n(conflicts));
    }

    pub fn forget_rule(&self, rule: &RuleId) {
        let l = [rule.namespace.as_str(), rule.name.as_str()];
        for g in [&self.sources, &self.copies_desired, &self.copies_in_sync, &self.conflicts] {
            let _ = g.remove_label_values(&l);
        }
    }
}
