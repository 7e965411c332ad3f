//! What a LoadTest shows while its run goes on: `status.progress`, merged
//! from the runners' progress lines at most every 5 s.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The current run so far, from every runner's last progress line merged
/// (histograms bucket by bucket). Updated at most every 5 s while
/// Executing; the results replace it when the run ends (it stays, as last
/// seen, until the next run starts).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// When the runners' logs were last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated: Option<Time>,
    /// Runners whose progress this holds (of the run's replicas).
    pub runners: i32,
    /// Since the start signal (the longest runner's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub elapsed: String,
    /// Requests completed (answered or failed) so far.
    pub requests: i64,
    /// Of them, failed.
    pub errors: i64,
    /// Requests dropped so far (arrival-rate profiles: every connection busy).
    #[serde(default)]
    pub dropped: i64,
    /// Failed over completed so far.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error_ratio: String,
    /// Requests completed per second over the last 10 s.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rate: String,
    /// The 99th-percentile latency of the answers of the last 10 s.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub recent_p99: String,
    /// The 99th-percentile latency of every answer so far.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub p99: String,
    /// Runners whose progress could not be read, and why (their share is
    /// missing from the figures).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// With thresholds.abortOnFail: the threshold the figures so far
    /// missed, for which the runners were told to stop.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub aborted: String,
    /// A capacity search ended live: the rate of the step whose last 10 s
    /// missed a threshold (that step fails the search whatever its final
    /// figures show).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_missed_at: Option<i32>,
}
