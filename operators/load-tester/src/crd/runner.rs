//! How a LoadTest's load runs: for a fixed time or as an arrival-rate
//! profile (`spec.load`), and where
//! and with what its runner pods run (`spec.runner`).

use std::collections::BTreeMap;

use flotilla_shared::duration::GoDuration;
use k8s_openapi::api::core::v1::{Affinity, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::bounds;

/// How long the load lasts: a fixed time, or an arrival-rate profile.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.duration) || (duration(self.duration) >= duration('1s') && duration(self.duration) <= duration('24h'))"
).message("load.duration is 1s to 24h"))]
#[x_kube(validation = kube::core::Rule::new("!(has(self.duration) && has(self.stages))")
    .message("load.duration and load.stages are mutually exclusive: stages set their own length"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.maxConnections) || has(self.stages) || has(self.capacity)")
    .message("load.maxConnections bounds the connections of load.stages or load.capacity: set it with them only"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.capacity) || !(has(self.duration) || has(self.stages))")
    .message("load.capacity sets its own steps and length: not with load.duration or load.stages"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.stages) || self.stages.map(s, duration(s.duration)).sum() <= duration('24h')"
).message("load.stages last at most 24h in all"))]
pub struct LoadSpec {
    /// Send for this long (Go duration, 1s to 24h, e.g. 2m) instead of
    /// test.repeat requests (not both): each runner keeps
    /// test.concurrency connections busy (or its rate, when set) from the
    /// start signal until then, and its results cover exactly that period
    /// (requests still unanswered at its end count neither as sent nor as
    /// not sent). The run's deadline is then at least startTimeout +
    /// duration + 1m, whatever deadline says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<GoDuration>,
    /// An open-model arrival-rate profile for the whole test (1-32 stages,
    /// instead of test.repeat, load.duration and rate), as k6's
    /// ramping-arrival-rate executor: each stage ramps linearly from the
    /// previous stage's rate (the first from 0) to its own over its
    /// duration, e.g. [{duration: 30s, rate: 100}, {duration: 2m, rate:
    /// 100}, {duration: 30s, rate: 0}]. Each stage's rate is split evenly
    /// over the runners (the remainder spread, so the runners' rates add up
    /// to it exactly). Requests go out at their scheduled times (within
    /// the runner's 1 ms timer tick) whatever the answers do, and each
    /// latency counts from its scheduled time, or from when it went out if
    /// that was earlier (no coordinated omission). The results add each stage's figures. The
    /// run's deadline is then at least startTimeout + the stages' total +
    /// 1m.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 32))]
    pub stages: Vec<LoadStage>,
    /// Connections each runner may have open at once for stages (1-10000,
    /// default 100). A request due while all are busy is not sent and is
    /// counted as dropped (in the results and per stage), never sent late:
    /// raise it when the server's latency times the rate is near it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_connections: Option<i32>,
    /// A capacity search (instead of test.repeat, rate, load.duration and
    /// load.stages; needs thresholds): the rate for the whole test starts
    /// at `start` and rises by `step` every `stepDuration` up to `max` (an
    /// open model, as stages: each step ramps up in 1 s, then holds), and
    /// the search ends at the first step whose own figures miss a
    /// threshold. status.results.capacity gives the highest rate that
    /// passed, and what stopped it. See CapacitySpec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacitySpec>,
}

/// A capacity search: the rate raised step by step until a threshold fails.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("self.max >= self.start").message("capacity.max is at least capacity.start"))]
#[x_kube(validation = kube::core::Rule::new("self.max - self.start < 100 * self.step")
    .message("capacity: at most 100 steps from start to max (raise step)"))]
#[x_kube(validation = kube::core::Rule::new(
    "duration(self.stepDuration) >= duration('30s') && duration(self.stepDuration) <= duration('10m')"
).message("capacity.stepDuration is 30s to 10m: each step holds its rate long enough for its last 10 s to be read at least twice"))]
pub struct CapacitySpec {
    /// The first step's rate, requests per second for the whole test (1-100000).
    #[schemars(range(min = 1, max = 100000))]
    pub start: i32,
    /// How much each step adds (1-100000).
    #[schemars(range(min = 1, max = 100000))]
    pub step: i32,
    /// How long each step lasts (Go duration, 30s to 10m): a 1 s ramp,
    /// then the rate held. Judged on what was answered while it held (and,
    /// while the search runs, on its last 10 s at each progress read from
    /// 11 s into the step: at least 3 reads a step).
    pub step_duration: GoDuration,
    /// The last step's rate at most (1-100000; at most 100 steps from start).
    #[schemars(range(min = 1, max = 100000))]
    pub max: i32,
}

/// Steps of a capacity search at most (two stages each: a ramp and a hold;
/// a runner's termination message has room for the figures of about 16,
/// the rest reach the operator through its log: loadgen's `more`).
pub const MAX_CAPACITY_STEPS: i32 = 100;
/// How long a capacity step ramps to its rate.
pub const CAPACITY_RAMP: &str = "1s";

impl CapacitySpec {
    /// Each step's rate, in order.
    pub fn rates(&self) -> Vec<i32> {
        let step = self.step.max(1);
        (0..MAX_CAPACITY_STEPS)
            .map(|k| self.start.saturating_add(k.saturating_mul(step)))
            .take_while(|r| *r <= self.max)
            .collect()
    }

    /// The search as an arrival-rate profile: per step, a 1 s ramp to its
    /// rate, then the rate held for the rest of stepDuration.
    pub fn stages(&self) -> Result<Vec<LoadStage>, String> {
        let d = self.step_duration.get().map_err(|e| format!("load.capacity.stepDuration: {e}"))?;
        let hold = d.saturating_sub(std::time::Duration::from_secs(1));
        let hold = GoDuration::new(&format!("{}ms", hold.as_millis()));
        Ok(self
            .rates()
            .into_iter()
            .flat_map(|rate| {
                [
                    LoadStage { duration: GoDuration::new(CAPACITY_RAMP), rate },
                    LoadStage { duration: hold.clone(), rate },
                ]
            })
            .collect())
    }
}

/// What loadgen allows a runner when load.maxConnections is omitted.
pub const DEFAULT_MAX_CONNECTIONS: i32 = 100;

impl LoadSpec {
    /// The arrival-rate profile: load.stages, or load.capacity's steps
    /// (empty for neither, or a capacity whose stepDuration is unreadable).
    pub fn profile(&self) -> Vec<LoadStage> {
        match &self.capacity {
            Some(c) => c.stages().unwrap_or_default(),
            None => self.stages.clone(),
        }
    }

    /// Connections per runner for stages, the default filled in.
    pub fn max_connections(&self) -> i32 {
        self.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS)
    }
}

/// One stage of an arrival-rate profile.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "duration(self.duration) >= duration('1s') && duration(self.duration) <= duration('24h')"
).message("a stage's duration is 1s to 24h"))]
pub struct LoadStage {
    /// How long the stage lasts (Go duration, 1s to 24h).
    pub duration: GoDuration,
    /// The rate reached at the stage's end, in requests per second for the
    /// whole test (0-100000): the stage ramps linearly to it from the
    /// previous stage's rate (the first stage from 0); equal rates hold it.
    #[schemars(range(min = 0, max = 100000))]
    pub rate: i32,
}

/// The runner pods' resources and placement.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(POD_AFFINITY_OWN_NAMESPACE)
    .message("runner.affinity: pod (anti-)affinity terms select pods of this namespace only (no namespaces, no namespaceSelector)"))]
pub struct RunnerSpec {
    /// The loadgen container's requests and limits. Omitted: requests =
    /// limits = 500m CPU and 256Mi memory, so runners are Guaranteed QoS (the
    /// last pods evicted, their CPU not shared). Given: used as written
    /// (Kubernetes sets a missing request to its limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<RunnerResources>,
    /// Node labels the runners' nodes must have (the pod's nodeSelector; at
    /// most 32).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "bounds::node_selector")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the runners tolerate (the pod's tolerations; at most 32).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "bounds::tolerations")]
    pub tolerations: Vec<Toleration>,
    /// The runners' affinity (the pod's affinity: node affinity, pod
    /// affinity and anti-affinity; each list at most 32 long). Pod
    /// (anti-)affinity terms select pods of this namespace only: no
    /// namespaces, no namespaceSelector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "bounds::affinity")]
    pub affinity: Option<Affinity>,
    /// Spread the run's runners over the nodes (default true): at most one
    /// per node while the nodes allow it (a topology spread constraint on
    /// kubernetes.io/hostname, maxSkew 1, whenUnsatisfiable
    /// ScheduleAnyway: with fewer nodes than runners they still schedule).
    /// One node's CPU and network then do not cap the whole load.
    #[serde(default = "yes")]
    #[schemars(default = "yes")]
    pub spread: bool,
}

/// Pod (anti-)affinity terms may not name other namespaces: whether a
/// runner schedules would tell the LoadTest's author which pods exist
/// where they cannot look.
const POD_AFFINITY_OWN_NAMESPACE: &str = "!has(self.affinity) || ((!has(self.affinity.podAffinity) || ((!has(self.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution) || \
      self.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution.all(t, !has(t.namespaces) && !has(t.namespaceSelector))) && \
    (!has(self.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution) || \
      self.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution.all(t, \
        !has(t.podAffinityTerm.namespaces) && !has(t.podAffinityTerm.namespaceSelector))))) && \
    (!has(self.affinity.podAntiAffinity) || ((!has(self.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution) || \
      self.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution.all(t, !has(t.namespaces) && !has(t.namespaceSelector))) && \
    (!has(self.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution) || \
      self.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution.all(t, \
        !has(t.podAffinityTerm.namespaces) && !has(t.podAffinityTerm.namespaceSelector))))))";

fn yes() -> bool {
    true
}

impl Default for RunnerSpec {
    fn default() -> Self {
        RunnerSpec {
            resources: None,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            affinity: None,
            spread: true,
        }
    }
}

/// Requests and limits of the loadgen container.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.requests) || self.requests.all(k, isQuantity(string(self.requests[k])))"
).message("requests must be quantities (e.g. 500m, 256Mi)"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.limits) || self.limits.all(k, isQuantity(string(self.limits[k])))"
).message("limits must be quantities (e.g. 500m, 256Mi)"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.requests) || !has(self.limits) || self.requests.all(k, !(k in self.limits) || \
     !isQuantity(string(self.requests[k])) || !isQuantity(string(self.limits[k])) || \
     quantity(string(self.limits[k])).compareTo(quantity(string(self.requests[k]))) >= 0)"
).message("each limit is at least its request"))]
pub struct RunnerResources {
    /// What the scheduler reserves for a runner, by resource name (cpu,
    /// memory, ...; at most 8).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "bounds::quantities")]
    pub requests: BTreeMap<String, Quantity>,
    /// What a runner may use at most, by resource name; each at least its
    /// request (at most 8).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "bounds::quantities")]
    pub limits: BTreeMap<String, Quantity>,
}
