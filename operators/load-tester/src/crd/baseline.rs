//! `spec.baseline` and `status.baseline`: a run compared with another
//! LoadTest's last finished run (or this one's previous run).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a run is compared with, and how much worse it may be.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Baseline {
    /// A LoadTest of this namespace whose last run Finished with results
    /// and a verdict other than Failed (a regression never becomes the
    /// baseline): the baseline, read (pinned in status.baseline) when each run starts.
    /// A run saved on that LoadTest with the annotation
    /// flotilla.dev/save-baseline (status.savedBaseline) is the baseline
    /// instead, until another is saved.
    /// This LoadTest's own name compares each run with its previous one
    /// (with spec.schedule: a nightly regression check). No such run: the
    /// run is not compared (status.baseline.message says why).
    #[schemars(
        length(min = 1, max = 253),
        pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub load_test_ref: String,
    /// How much worse than the baseline a run may be before its verdict
    /// is Failed (BaselineRegressed). Omitted figures are compared and
    /// shown (status.baseline.deltas), never judged.
    #[serde(default)]
    pub max_regression: MaxRegression,
}

/// Regression limits: latencies as a percentage above the baseline's
/// ("10%"), the error ratio as percentage points above it ("0.5%": from
/// 0.1 % to 0.6 % of requests failing).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaxRegression {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50: Option<Percent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p90: Option<Percent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99: Option<Percent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_ratio: Option<Percent>,
}

/// A percentage, e.g. "10%" or "0.5%" (0-10000).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(transparent)]
pub struct Percent(#[schemars(length(min = 2, max = 10), pattern(r"^[0-9]{1,5}(\.[0-9]{1,3})?%$"))] pub String);

impl MaxRegression {
    /// Whether any figure is judged.
    pub fn any(&self) -> bool {
        [&self.p50, &self.p90, &self.p99, &self.error_ratio].iter().any(|l| l.is_some())
    }
}

impl Percent {
    /// The number before the `%` (the schema makes it one).
    pub fn value(&self) -> Option<f64> {
        self.0.strip_suffix('%')?.parse().ok().filter(|v: &f64| v.is_finite() && *v >= 0.0)
    }
}

/// The baseline a run is compared with, pinned when it started, and the
/// comparison once it finished.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BaselineStatus {
    /// The LoadTest compared with.
    pub load_test_ref: String,
    /// Its run compared with (0: none could be).
    #[serde(default)]
    pub run: i64,
    /// Why nothing is compared, or what regressed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The baseline's figures, as its results show them (p50, p90, p99,
    /// errorRatio).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub figures: BTreeMap<String, String>,
    /// The baseline's latency percentiles in microseconds (what the
    /// comparison uses).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub micros: BTreeMap<String, i64>,
    /// Once the run finished: each figure's change against the baseline,
    /// e.g. "p99": "+12.5%", "errorRatio": "+0.10 points".
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub deltas: BTreeMap<String, String>,
    /// When the baseline is a run saved with flotilla.dev/save-baseline:
    /// when it was saved (absent: the LoadTest's last finished run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_at: Option<Time>,
}

/// A run of this LoadTest saved as its baseline with the annotation
/// flotilla.dev/save-baseline (any new value saves the last run, or the
/// current one once it ends): what a LoadTest naming this one in
/// spec.baseline compares with, instead of its last finished run, until
/// another is saved.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SavedBaseline {
    /// The annotation's value last acted on (saved or refused; one over
    /// 253 characters as its digest).
    pub token: String,
    /// The run saved (0: none could be).
    #[serde(default)]
    pub run: i64,
    /// When it was saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_at: Option<Time>,
    /// What the saved run lacks (no latencies: only errors are compared).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Why the last value saved nothing (only a Finished run whose
    /// verdict is not Failed can be saved); the run saved before stays.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub refused: String,
    /// The saved run's figures (p50, p90, p99, errorRatio).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub figures: BTreeMap<String, String>,
    /// Its latency percentiles in microseconds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub micros: BTreeMap<String, i64>,
}
