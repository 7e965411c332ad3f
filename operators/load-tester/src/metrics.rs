//! `flotilla_load_tester_*` metrics: runs and requests counted when runs
//! end, and the live figures of each run while it is Executing (labelled
//! by LoadTest; a run's series go when it ends).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts};

use crate::machine::Live;

#[derive(Clone)]
pub struct LoadMetrics {
    /// Runs ended, by state (Finished, Failed) and verdict.
    pub runs: IntCounterVec,
    /// Requests the runners sent, by result (ok, or the error kind).
    pub requests: IntCounterVec,
    /// The current run's requests completed so far.
    progress_requests: IntGaugeVec,
    /// The current run's failed requests so far.
    progress_errors: IntGaugeVec,
    /// Requests completed per second over the last 10 s.
    progress_rate: GaugeVec,
    /// The p99 latency of the last 10 s's answers (absent when none).
    progress_p99: GaugeVec,
    /// Since the start signal.
    progress_elapsed: GaugeVec,
    /// The LoadTests (namespace, name) with live series.
    live_tests: Arc<Mutex<BTreeSet<(String, String)>>>,
}

const LIVE_LABELS: [&str; 2] = ["namespace", "loadtest"];

impl LoadMetrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let live = |name: &str, help: &str| Opts::new(name, help);
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
            progress_requests: IntGaugeVec::new(
                live(
                    "flotilla_load_tester_progress_requests",
                    "Requests completed so far by the runners of a LoadTest's current run (updated every 5 s while Executing)",
                ),
                &LIVE_LABELS,
            )?,
            progress_errors: IntGaugeVec::new(
                live("flotilla_load_tester_progress_errors", "Failed requests so far in a LoadTest's current run"),
                &LIVE_LABELS,
            )?,
            progress_rate: GaugeVec::new(
                live(
                    "flotilla_load_tester_progress_rate",
                    "Requests completed per second over the last 10 s by a LoadTest's current run",
                ),
                &LIVE_LABELS,
            )?,
            progress_p99: GaugeVec::new(
                live(
                    "flotilla_load_tester_progress_p99_seconds",
                    "The 99th-percentile latency of the last 10 s's answers in a LoadTest's current run",
                ),
                &LIVE_LABELS,
            )?,
            progress_elapsed: GaugeVec::new(
                live(
                    "flotilla_load_tester_progress_elapsed_seconds",
                    "Time since a LoadTest's current run started sending",
                ),
                &LIVE_LABELS,
            )?,
            live_tests: Arc::default(),
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
        registry.register(self.progress_requests.clone())?;
        registry.register(self.progress_errors.clone())?;
        registry.register(self.progress_rate.clone())?;
        registry.register(self.progress_p99.clone())?;
        registry.register(self.progress_elapsed.clone())?;
        Ok(())
    }

    /// A run's live figures, as its progress was just read.
    pub fn live(&self, namespace: &str, name: &str, live: &Live) {
        self.tests().insert((namespace.to_string(), name.to_string()));
        let l = [namespace, name];
        self.progress_requests.with_label_values(&l).set(i64::try_from(live.requests).unwrap_or(i64::MAX));
        self.progress_errors.with_label_values(&l).set(i64::try_from(live.errors).unwrap_or(i64::MAX));
        self.progress_rate.with_label_values(&l).set(live.rate);
        self.progress_elapsed.with_label_values(&l).set(live.elapsed.as_secs_f64());
        match live.recent_p99 {
            Some(p99) => self.progress_p99.with_label_values(&l).set(p99.as_secs_f64()),
            None => {
                let _ = self.progress_p99.remove_label_values(&l);
            }
        }
    }

    /// A LoadTest not Executing (its run ended, or it is gone): no live series.
    pub fn forget(&self, namespace: &str, name: &str) {
        if !self.tests().remove(&(namespace.to_string(), name.to_string())) {
            return;
        }
        let l = [namespace, name];
        let _ = self.progress_requests.remove_label_values(&l);
        let _ = self.progress_errors.remove_label_values(&l);
        let _ = self.progress_rate.remove_label_values(&l);
        let _ = self.progress_p99.remove_label_values(&l);
        let _ = self.progress_elapsed.remove_label_values(&l);
    }
}

impl LoadMetrics {
    fn tests(&self) -> std::sync::MutexGuard<'_, BTreeSet<(String, String)>> {
        self.live_tests.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Forgets the live series of LoadTests `live` does not hold (deleted
    /// while Executing: no reconcile says their run ended).
    pub fn forget_all_but(&self, live: &std::collections::HashSet<(String, String)>) {
        let gone: Vec<(String, String)> = self.tests().iter().filter(|k| !live.contains(*k)).cloned().collect();
        for (ns, name) in gone {
            self.forget(&ns, &name);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_runs_live_series_are_set_and_go_when_it_ends() {
        let m = LoadMetrics::new().unwrap();
        let live = Live { elapsed: Duration::from_secs(12), requests: 500, errors: 5, rate: 41.5, recent_p99: None };
        m.live("shop", "checkout", &live);
        assert_eq!(m.progress_requests.with_label_values(&["shop", "checkout"]).get(), 500);
        assert!(m.progress_p99.remove_label_values(&["shop", "checkout"]).is_err(), "no answer: no p99");
        m.live("shop", "checkout", &Live { recent_p99: Some(Duration::from_millis(20)), ..live });
        m.forget_all_but(&[("shop".to_string(), "checkout".to_string())].into_iter().collect());
        assert_eq!(m.progress_requests.with_label_values(&["shop", "checkout"]).get(), 500, "still there");
        m.forget_all_but(&Default::default());
        assert!(m.progress_requests.remove_label_values(&["shop", "checkout"]).is_err());
        assert!(m.progress_p99.remove_label_values(&["shop", "checkout"]).is_err());
    }
}
