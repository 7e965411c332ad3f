//! `flotilla_load_tester_*` metrics.

use prometheus::{IntCounterVec, Opts};

#[derive(Clone)]
pub struct LoadMetrics {
    /// Runs ended, by state (Finished, Failed) and verdict.
    pub runs: IntCounterVec,
    /// Requests the runners sent, by result (ok, or the error kind).
    pub requests: IntCounterVec,
}

impl LoadMetrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let m = Self {
            runs: IntCounterVec::new(
                Opts::new(
                    "flotilla_load_tester_runs_total",
                    "LoadTest runs ended, by state (Finished|Failed) and verdict (Passed|Failed|None)",
                ),
                &["state", "verdict"],
            )?,
            requests: IntCounterVec::new(
                Opts::new(
                    "flotilla_load_tester_requests_total",
                    "Requests sent by finished runs' runners, by result (ok|http5xx|http4xx|timeout|connect|other|check)",
                ),
                &["result"],
            )?,
        };
        for (s, v) in [("Finished", "Passed"), ("Finished", "Failed"), ("Finished", "None"), ("Failed", "None")] {
            m.runs.with_label_values(&[s, v]);
        }
        for r in ["ok", "http5xx", "http4xx", "timeout", "connect", "other", "check"] {
            m.requests.with_label_values(&[r]);
        }
        Ok(m)
    }

    pub fn register(&self, registry: &flotilla_shared::Metrics) -> Result<(), prometheus::Error> {
        registry.register(self.runs.clone())?;
        registry.register(self.requests.clone())?;
        Ok(())
    }
}
