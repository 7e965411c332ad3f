//! What the operator reports of a LoadTest's runs: the status, its state
//! and verdict, the pinned target and the merged results.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A run's state.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum State {
    /// Runners are being created and started.
    #[default]
    Pending,
    /// Every runner is running and sending.
    Executing,
    /// Every runner finished; results merged.
    Finished,
    /// The run failed; reason and message say why. Never re-run by itself
    /// (only at spec.schedule's next time, with one).
    Failed,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "Pending",
            State::Executing => "Executing",
            State::Finished => "Finished",
            State::Failed => "Failed",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, State::Finished | State::Failed)
    }
}

/// The thresholds' judgement.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Verdict {
    Passed,
    Failed,
    /// Not judged (no thresholds, or the run did not finish).
    #[default]
    None,
}

/// The current run.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadTestStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready: the current run finished and passed (or finished without
    /// thresholds); False with the failure's reason otherwise.
    #[serde(default)]
    #[schemars(schema_with = "flotilla_shared::conditions::schema")]
    pub conditions: Vec<Condition>,
    /// Pending, Executing, Finished or Failed.
    #[serde(default)]
    pub state: State,
    /// Passed, Failed or None.
    #[serde(default)]
    pub verdict: Verdict,
    /// The run number: 1, then one more on each spec change or
    /// flotilla.dev/rerun annotation. Runner pods are <test>-r<run>-<i>.
    #[serde(default)]
    pub run: i64,
    /// The generation the current run is for.
    #[serde(default)]
    pub run_generation: i64,
    /// The flotilla.dev/rerun value the current run honoured.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rerun: String,
    /// Runner pods of the current run that exist.
    #[serde(default)]
    pub children: i32,
    /// When the current run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// The Service the current run's runners send to, as it was when they
    /// were created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<PinnedTarget>,
    /// When the runners were told to start sending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executing_time: Option<Time>,
    /// When it finished or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Why it failed (ServiceNotFound, TargetNotClusterIP,
    /// NoReadyEndpoints, TargetChanged, TooManyRunners, RunnerFailed,
    /// RunnerLost, StartTimeout, DeadlineExceeded, BadSummary, CreateFailed,
    /// InvalidSpec), or the verdict's reason (ThresholdsMet,
    /// ThresholdsMissed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The current run so far, while it is Executing (see Progress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<super::Progress>,
    /// The merged results of a finished run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<Results>,
    /// With spec.baseline: what the current run is compared with, and
    /// once it finished the comparison.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<super::BaselineStatus>,
    /// A run saved as this LoadTest's baseline (flotilla.dev/save-baseline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_baseline: Option<super::SavedBaseline>,
    /// With spec.schedule: the line the run times are counted for, and
    /// since when (a schedule added or changed starts no run for a time
    /// already past).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub schedule: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_since: Option<Time>,
    /// With spec.schedule: when the next run starts (a time already past
    /// while a run still goes on: the next starts when it ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run_time: Option<Time>,
    /// The last runs that ended, or were replaced by a rerun or a spec
    /// edit before they ended (reason Superseded), at most 10, oldest
    /// first, so a scheduled test shows its trend.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub history: Vec<RunSummary>,
}

/// What a capacity search found.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityResult {
    /// The highest step's rate (requests/s for the whole test) whose own
    /// figures met every threshold, with every step below it; 0: not even
    /// the first.
    pub rate: i32,
    /// Steps that passed, of `planned`.
    pub steps: i32,
    pub planned: i32,
    /// The first step that missed, and what it missed; empty when every
    /// step up to load.capacity.max passed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub limited_by: String,
}

/// Runs kept in status.history.
pub const MAX_HISTORY: usize = 10;

/// One ended run, in short.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub run: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Finished or Failed; for a run replaced before it ended, the state
    /// it was in then.
    pub state: State,
    /// Passed, Failed or None.
    pub verdict: Verdict,
    /// The run's reason (ThresholdsMet, ThresholdsMissed, why it failed,
    /// or Superseded: replaced by a rerun or a spec edit before it ended).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Requests sent (a finished run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<i64>,
    /// Failed requests over requests sent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error_ratio: String,
    /// Requests per second achieved.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rps: String,
    /// The merged 99th-percentile latency.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub p99: String,
}

impl RunSummary {
    /// The summary of `status`'s run (which ended).
    pub fn of(status: &LoadTestStatus) -> Self {
        let results = status.results.as_ref();
        RunSummary {
            run: status.run,
            start_time: status.start_time.clone(),
            completion_time: status.completion_time.clone(),
            state: status.state,
            verdict: status.verdict,
            reason: status.reason.clone(),
            requests: results.map(|r| r.requests),
            error_ratio: results.map(|r| r.error_ratio.clone()).unwrap_or_default(),
            rps: results.map(|r| r.rps.clone()).unwrap_or_default(),
            p99: results.map(|r| r.latency.p99.clone()).unwrap_or_default(),
        }
    }
}

/// The Service a run sends to, pinned when its runners are created.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PinnedTarget {
    /// The Service's UID (a Service deleted and made again is another).
    pub uid: String,
    /// Its type then (ClusterIP, NodePort or LoadBalancer).
    #[serde(rename = "type")]
    pub type_: String,
    /// The cluster IP the runners connect to.
    #[serde(rename = "clusterIP")]
    pub cluster_ip: String,
    /// The Host they send: <service>.<namespace>.svc.<cluster domain>.
    pub host: String,
}

/// Every runner's requests, merged.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Results {
    /// Runners whose summaries were merged.
    pub runners: i32,
    /// Requests sent.
    pub requests: i64,
    /// Failed requests by kind: http5xx, http4xx (answers of that class,
    /// when test.checks.statusCodes is not set), check (answers that
    /// failed test.checks), timeout, connect, other.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, i64>,
    /// Requests not sent because the deadline came first, or cut short by
    /// it (in flight at the end: neither answered nor failed).
    #[serde(default)]
    pub not_sent: i64,
    /// How long the runners sent: the longest runner's time from its start
    /// signal to its last answer (e.g. 10.00s; with load.duration, that
    /// duration).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub elapsed: String,
    /// Failed requests over requests sent, as a decimal string.
    pub error_ratio: String,
    /// Requests per second over the longest runner's wall time.
    pub rps: String,
    /// Latencies of the answered requests, from the merged histogram.
    pub latency: Latency,
    /// The merged histogram (HdrHistogram V2 + deflate, base64), for
    /// tools that want more than these percentiles.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub histogram: String,
    /// With load.stages: requests not sent because every one of a runner's
    /// load.maxConnections was busy when they were due.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped: i64,
    /// With load.stages: each stage's figures, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageResults>,
    /// With test.requests: each request's figures, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_request: Vec<super::RequestResults>,
    /// A capacity search's outcome (load.capacity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityResult>,
    /// Runners that could not keep up, and why (below 95 % of their rate
    /// for more than 5 s, or CPU-throttled for more than 5 % of the run):
    /// their share of the latencies may be the runner's, not the server's.
    /// Also the RunnerSaturated condition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub saturated: Vec<String>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// One stage of load.stages, every runner's share merged.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StageResults {
    /// The stage's duration, as the spec gives it.
    pub duration: String,
    /// The rate it ramps to (requests/s, the whole test).
    pub rate: i32,
    /// Requests sent whose scheduled time fell in the stage.
    pub requests: i64,
    /// Requests sent per second of the stage, e.g. 99.8 (a ramp's average
    /// is half way between its two rates).
    pub achieved_rate: String,
    /// Of its requests, failed.
    #[serde(default)]
    pub errors: i64,
    /// Not sent: every connection was busy when they were due.
    #[serde(default)]
    pub dropped: i64,
    /// Latencies of its answered requests (p50, p90, p99), from the
    /// runners' stage histograms merged; omitted when none was answered or
    /// a runner's summary had no room for the stage's histogram.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<StageLatency>,
}

/// A stage's percentiles, e.g. "12.4ms".
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct StageLatency {
    pub p50: String,
    pub p90: String,
    pub p99: String,
}

/// Percentiles of the merged histogram, e.g. "12.4ms".
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Latency {
    pub p50: String,
    pub p90: String,
    pub p99: String,
    pub max: String,
}

impl flotilla_shared::status::ReportedStatus for LoadTestStatus {
    fn conditions_mut(&mut self) -> &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
        &mut self.conditions
    }
}
