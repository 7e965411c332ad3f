//! The `LoadTest` and `SimpleDeployment` custom resources
//! (`flotilla.dev/v1alpha1`). Every field's doc comment is its `kubectl
//! explain` description; the schema rejects at admission what would fail
//! later (replicas 0 or over 500, an unknown method, a path without `/`).

use std::collections::BTreeMap;

use flotilla_shared::duration::GoDuration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod baseline;
mod bounds;
mod checks;
mod progress;
mod request;
mod runner;
mod scenario;
mod status;

pub use baseline::{Baseline, BaselineStatus, MaxRegression, Percent, SavedBaseline};
pub use checks::{Checks, MAX_BODY_CONTAINS};
pub use progress::Progress;
pub use request::{
    BodySource, CREDENTIAL_HEADERS, ConfigMapKeyRef, HeaderValue, HeaderValueSource, HttpHeader, Scheme, SecretKeyRef,
    TestTls, is_header_name,
};
pub use runner::{
    CAPACITY_RAMP, CapacitySpec, DEFAULT_MAX_CONNECTIONS, LoadSpec, LoadStage, MAX_CAPACITY_STEPS, RunnerResources,
    RunnerSpec,
};
pub use scenario::{MAX_REQUESTS, RequestResults, ScenarioRequest};
pub use status::{
    CapacityResult, Latency, LoadTestStatus, MAX_HISTORY, PinnedTarget, Results, RunSummary, StageLatency,
    StageResults, State, Verdict,
};

/// Runs `replicas` coordinated loadgen pods against a Service of this
/// namespace and reports one merged result: the runners' latency
/// histograms are added bucket by bucket, never averaged.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = kube::core::Rule::new(
    "duration(self.deadline) <= duration('24h') && duration(self.startTimeout) <= duration('1h')"
).message("deadline is at most 24h and startTimeout at most 1h"))]
#[x_kube(validation = kube::core::Rule::new(
    "!(has(self.load) && has(self.load.duration) && has(self.test.repeat))"
).message("load.duration and test.repeat are mutually exclusive: a run lasts a time or sends a count"))]
#[x_kube(validation = kube::core::Rule::new(
    "!(has(self.load) && has(self.load.stages) && (has(self.test.repeat) || (has(self.rate) && self.rate != 0)))"
).message("load.stages is mutually exclusive with test.repeat and rate: the stages set the rate and the length"))]
#[x_kube(validation = kube::core::Rule::new(
    "!(has(self.load) && has(self.load.capacity) && (has(self.test.repeat) || (has(self.rate) && self.rate != 0)))"
).message("load.capacity is mutually exclusive with test.repeat and rate: the steps set the rate and the length"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.load) || !has(self.load.capacity) || (has(self.thresholds) && (has(self.thresholds.maxErrorRatio) || has(self.thresholds.p50) || has(self.thresholds.p90) || has(self.thresholds.p99) || has(self.thresholds.maxLatency)))"
).message("load.capacity needs a threshold to search against: thresholds.maxErrorRatio, p50, p90, p99 or maxLatency"))]
#[kube(
    group = "flotilla.dev",
    version = "v1alpha1",
    kind = "LoadTest",
    doc = "Runs N coordinated load-generating pods against a Service and merges their results (state Pending, Executing, Finished or Failed).",
    namespaced,
    status = "LoadTestStatus",
    shortname = "lt",
    shortname = "ld",
    category = "flotilla",
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state","description":"Pending, Executing, Finished or Failed"}"#,
    printcolumn = r#"{"name":"Verdict","type":"string","jsonPath":".status.verdict","description":"Passed, Failed or None (no thresholds)"}"#,
    printcolumn = r#"{"name":"Run","type":"integer","jsonPath":".status.run"}"#,
    printcolumn = r#"{"name":"Children","type":"integer","jsonPath":".status.children","description":"runner pods of the current run"}"#,
    printcolumn = r#"{"name":"Requests","type":"integer","jsonPath":".status.results.requests"}"#,
    printcolumn = r#"{"name":"P99","type":"string","jsonPath":".status.results.latency.p99"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Next","type":"date","priority":1,"jsonPath":".status.nextRunTime","description":"with spec.schedule: when the next run starts"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message","description":"the Ready condition's message (kubectl get -o wide)"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct LoadTestSpec {
    /// Runner pods (1-500), each sending test.repeat requests on each of
    /// test.concurrency connections (or sending for load.duration).
    #[schemars(range(min = 1, max = 500))]
    pub replicas: i32,
    /// What each runner sends, and where.
    pub test: TestSpec,
    /// Requests per second per runner (open model: latencies count from the
    /// scheduled time, so a slow server cannot hide its queueing); 0 (the
    /// default) sends each request as soon as the previous one on its
    /// connection is answered.
    #[serde(default)]
    #[schemars(range(min = 0, max = 100000))]
    pub rate: i32,
    /// The verdict: Passed when every threshold holds on the merged
    /// results, else Failed. Omitted: verdict None.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thresholds: Option<Thresholds>,
    /// The whole run, from its start (Go duration, default 10m, at most
    /// 24h); past it the run is Failed (DeadlineExceeded). With
    /// load.duration, at least startTimeout + duration + 1m.
    #[serde(default = "default_deadline")]
    #[schemars(default = "default_deadline")]
    pub deadline: GoDuration,
    /// How long the runners may take to all be Running (Go duration,
    /// default 2m); past it the run is Failed (StartTimeout, or
    /// RunnerFailed naming a runner the scheduler still cannot place).
    #[serde(default = "default_start_timeout")]
    #[schemars(default = "default_start_timeout")]
    pub start_timeout: GoDuration,
    /// When the runner pods are deleted after the run: Always, OnSuccess
    /// (the default: deleted when the run Finished with a verdict other
    /// than Failed; a failed run's pods stay for `kubectl logs`) or Never.
    /// The results stay in status either way.
    #[serde(default)]
    #[schemars(default = "Cleanup::default")]
    pub cleanup: Cleanup,
    /// The runners' image. Omitted: the operator's --loadgen-image (the
    /// suite's loadgen of the same version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
    /// How long the load lasts: load.duration, an arrival-rate profile
    /// (load.stages), or a capacity search (load.capacity). Omitted: each
    /// connection sends test.repeat requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadSpec>,
    /// Where the runner pods run and what they may use. Omitted: requests =
    /// limits = 500m CPU and 256Mi memory (Guaranteed QoS), spread over the
    /// nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<RunnerSpec>,
    /// Runs the test on a schedule: a standard 5-field cron line (minute,
    /// hour, day of month, month, day of week; or @hourly, @daily,
    /// @weekly, @monthly, @yearly), in UTC, e.g. "0 3 * * *". With a
    /// schedule a run starts only at each time it names (or on a new
    /// flotilla.dev/rerun), not when the LoadTest is created or changed
    /// between runs: a change applies from the next run (one while a run
    /// goes on restarts it, as without a schedule). A time that comes while a run is
    /// still going starts the next run when it ends (missed times are
    /// made up by one run, not several). status.nextRunTime says when;
    /// status.history keeps the last 10 runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 100),
        pattern(r"^\s*(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+(\s+\S+){4})\s*$")
    )]
    pub schedule: Option<String>,
    /// Compares each finished run with a baseline run (another LoadTest's,
    /// or this one's previous): the deltas are in status.baseline, and a
    /// regression past maxRegression fails the verdict (BaselineRegressed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
}

impl LoadTestSpec {
    /// The runner settings, defaults filled in.
    pub fn runner(&self) -> RunnerSpec {
        self.runner.clone().unwrap_or_default()
    }

    /// How long the load lasts, checked: `load.duration`, or the total of
    /// `load.stages`; None for a count (test.repeat).
    pub fn duration(&self) -> Result<Option<std::time::Duration>, String> {
        let Some(load) = self.load.as_ref() else { return Ok(None) };
        if let Some(d) = load.duration.as_ref() {
            return d.get().map(Some).map_err(|e| format!("load.duration: {e}"));
        }
        if let Some(c) = load.capacity.as_ref() {
            c.stages()?;
        }
        let profile = load.profile();
        if profile.is_empty() {
            return Ok(None);
        }
        let mut total = std::time::Duration::ZERO;
        for (k, s) in profile.iter().enumerate() {
            total = total.saturating_add(s.duration.get().map_err(|e| format!("load.stages[{k}].duration: {e}"))?);
        }
        Ok(Some(total))
    }

    /// The arrival-rate profile: `load.stages`, or `load.capacity`'s steps;
    /// empty without them.
    pub fn stages(&self) -> Vec<LoadStage> {
        self.load.as_ref().map(LoadSpec::profile).unwrap_or_default()
    }

    /// `load.capacity`, if this run is a capacity search.
    pub fn capacity(&self) -> Option<&CapacitySpec> {
        self.load.as_ref().and_then(|l| l.capacity.as_ref())
    }
}

fn default_deadline() -> GoDuration {
    GoDuration::new("10m")
}
fn default_start_timeout() -> GoDuration {
    GoDuration::new("2m")
}
fn default_port() -> i32 {
    80
}
/// Requests per connection when test.repeat is omitted.
pub const DEFAULT_REPEAT: i32 = 10;
fn default_concurrency() -> i32 {
    1
}
fn default_timeout() -> GoDuration {
    GoDuration::new("5s")
}

/// The requests.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!has(self.bodyFrom) || !has(self.body) || self.body == ''")
    .message("body and bodyFrom are mutually exclusive"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.tls) || self.scheme == 'https'")
    .message("tls is only for scheme https"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.checks) || !has(self.checks.bodyContains) || self.method != 'HEAD'")
    .message("checks.bodyContains is not for method HEAD: its answers have no body"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.requests) || ((!has(self.body) || self.body == '') && !has(self.bodyFrom))")
    .message("with requests, each request has its own body: test.body and test.bodyFrom are not used"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.requests) || !has(self.checks) || !has(self.checks.bodyContains) || self.requests.all(r, r.method != 'HEAD' || has(r.checks))")
    .message("test.checks.bodyContains is the default of every request without checks: a HEAD request's answers have no body, give it checks of its own"))]
pub struct TestSpec {
    /// HTTP method (default GET).
    #[serde(default)]
    #[schemars(default = "Method::default")]
    pub method: Method,
    /// The Service, in this namespace. When the run starts it must have a
    /// cluster IP (type ClusterIP, NodePort or LoadBalancer; not
    /// ExternalName, not headless) and ready endpoints; the runners then
    /// connect to that cluster IP, never through DNS, and send
    /// <scheme>://<serviceName>.<namespace>.svc.<cluster domain>:<port><path>
    /// (that Host). A change of the Service's type or cluster IP during the
    /// run, or its deletion, fails the run (TargetChanged).
    #[schemars(length(min = 1, max = 63), pattern(r"^[a-z]([-a-z0-9]*[a-z0-9])?$"))]
    pub service_name: String,
    /// http (default) or https. With https the runners check the
    /// Service's certificate against tls.caConfigMapRef, or accept any with
    /// tls.insecureSkipVerify; without either, against the public roots
    /// built into the runner (which an in-cluster Service's certificate
    /// rarely chains to: every request then fails as a connect error). The
    /// certificate must name <serviceName>.<namespace>.svc.<cluster
    /// domain>, the host the runners send to.
    #[serde(default)]
    #[schemars(default = "Scheme::default")]
    pub scheme: Scheme,
    /// With scheme https: how the Service's certificate is checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TestTls>,
    /// HTTP/2: offered over https (the server picks, by ALPN), spoken from
    /// the start over http (h2c, which the Service must speak). Default
    /// false: HTTP/1.1 only. With HTTP/2 a runner's requests share its
    /// connections as streams: concurrency (or load.maxConnections) bounds
    /// the requests in flight, not the TCP connections, and the server's
    /// stream limit may queue them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub http2: bool,
    /// The Service port (default 80).
    #[serde(default = "default_port")]
    #[schemars(default = "default_port", range(min = 1, max = 65535))]
    pub port: i32,
    /// The path, starting with / (default /).
    #[serde(default = "default_path")]
    #[schemars(default = "default_path", length(min = 1, max = 2048), pattern(r"^/[^\s]*$"))]
    pub path: String,
    /// Requests per connection (1-1000000, default 10). Not with
    /// load.duration (no default in the schema, so that admission can tell
    /// the two apart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000000))]
    pub repeat: Option<i32>,
    /// Connections per runner (1-1000, default 1).
    #[serde(default = "default_concurrency")]
    #[schemars(default = "default_concurrency", range(min = 1, max = 1000))]
    pub concurrency: i32,
    /// Timeout of one request (Go duration, default 5s): a request without
    /// an answer by then is an error of kind timeout (unless the run's end
    /// cuts it short first: then it counts as not sent).
    #[serde(default = "default_timeout")]
    #[schemars(default = "default_timeout")]
    pub timeout: GoDuration,
    /// Request headers with literal values: single lines (checked at
    /// admission); names must be HTTP tokens (a LoadTest with another name
    /// fails with InvalidSpec). The values are visible to whoever reads the
    /// LoadTest or its runner pods: credentials go in httpHeaders with
    /// valueFrom (the chart's admission policy refuses a literal
    /// Authorization, Proxy-Authorization or Cookie header).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub headers: BTreeMap<String, HeaderValue>,
    /// Request headers, each with a literal value or one read from a key
    /// of a Secret in this namespace (valueFrom.secretKeyRef: mounted into
    /// the runner pods as a file, never in their environment nor in
    /// status). A name also in headers is sent twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub http_headers: Vec<HttpHeader>,
    /// Request body. Whoever may read the LoadTest or its runner pods
    /// reads it: a body holding credentials goes in bodyFrom.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 65536))]
    pub body: String,
    /// The request body from a key of a Secret in this namespace instead
    /// (not with body): mounted into the runner pods as a file and sent as
    /// its bytes exactly (at most 1 MiB, a Secret's limit), never in their
    /// environment nor in status. A missing Secret or key keeps the runners
    /// from starting (StartTimeout; `kubectl describe pod` shows the
    /// FailedMount). With the chart's admission policy, only a user who
    /// may get that Secret may name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_from: Option<BodySource>,
    /// What each answer must show to count as a success: its status
    /// (statusCodes) and a substring of its body (bodyContains). Omitted:
    /// only the status class counts (4xx and 5xx are errors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<Checks>,
    /// A scenario: 1-8 requests sent in turn by weight instead of the one
    /// request above (method and path are then not used; headers and
    /// httpHeaders go in every request, first; checks is the default of a
    /// request without its own; body and bodyFrom are refused). Each
    /// request's figures are in status.results.byRequest; the thresholds
    /// judge them all together.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 8), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub requests: Vec<ScenarioRequest>,
}

impl TestSpec {
    /// Requests per connection, the default filled in.
    pub fn repeat(&self) -> i32 {
        self.repeat.unwrap_or(DEFAULT_REPEAT)
    }
}

fn default_path() -> String {
    "/".into()
}

/// HTTP methods.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Method {
    #[default]
    GET,
    HEAD,
    POST,
    PUT,
    PATCH,
    DELETE,
    OPTIONS,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::GET => "GET",
            Method::HEAD => "HEAD",
            Method::POST => "POST",
            Method::PUT => "PUT",
            Method::PATCH => "PATCH",
            Method::DELETE => "DELETE",
            Method::OPTIONS => "OPTIONS",
        }
    }
}

/// What a passing run must show, judged on the runners' merged results
/// (one histogram fed every request; percentiles are never averaged).
/// Every threshold set must hold; a latency threshold with no request
/// answered fails.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Thresholds {
    /// Failed requests over requests sent, at most (0-1, e.g. 0.01).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub max_error_ratio: Option<f64>,
    /// The merged median latency, at most (Go duration, e.g. 50ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50: Option<GoDuration>,
    /// The merged 90th-percentile latency, at most (Go duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p90: Option<GoDuration>,
    /// The merged 99th-percentile latency, at most (Go duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99: Option<GoDuration>,
    /// The slowest answered request, at most (Go duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_latency: Option<GoDuration>,
    /// The achieved rate, at least: requests sent by every runner over the
    /// longest runner's time, in requests/s (`status.results.rps`;
    /// 0-10000000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 10000000.0))]
    pub min_rate: Option<f64>,
    /// Stop the run as soon as the figures so far miss a threshold: every
    /// 5 s, once at least 100 requests have completed, the runners'
    /// progress merged is judged against every threshold but minRate (the
    /// achieved rate is known only at the end); the first miss tells every
    /// runner to stop, and the run ends Finished with verdict Failed,
    /// reason AbortedOnFail, and the results of what was sent. Percentiles
    /// are those of the answers so far (as k6's abortOnFail judges them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abort_on_fail: bool,
}

/// When runner pods are deleted.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Cleanup {
    Always,
    #[default]
    OnSuccess,
    Never,
}

/// Keeps exactly one pod that prints a line and sleeps `sleepytime`
/// seconds (seed 004's first example); the pod is recreated if deleted.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "flotilla.dev",
    version = "v1alpha1",
    kind = "SimpleDeployment",
    doc = "Keeps exactly one pod that prints a line and sleeps spec.sleepytime seconds.",
    namespaced,
    status = "SimpleDeploymentStatus",
    shortname = "sd",
    shortname = "simdep",
    category = "flotilla",
    printcolumn = r#"{"name":"Children","type":"string","jsonPath":".status.child","description":"The child pod created by the operator."}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.childPhase"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message","description":"the Ready condition's message (kubectl get -o wide)"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SimpleDeploymentSpec {
    /// Seconds the pod sleeps after printing (a string of digits, as the
    /// seed has it; default "0").
    #[serde(default = "default_sleepytime")]
    #[schemars(default = "default_sleepytime", length(min = 1, max = 7), pattern(r"^[0-9]+$"))]
    pub sleepytime: String,
    /// The pod's image (it needs sh, echo and sleep). Omitted: busybox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
}

fn default_sleepytime() -> String {
    "0".into()
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SimpleDeploymentStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready: the child pod exists and is ours.
    #[serde(default)]
    #[schemars(schema_with = "flotilla_shared::conditions::schema")]
    pub conditions: Vec<Condition>,
    /// The child pod's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub child: String,
    /// Its phase.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub child_phase: String,
}

/// What only the LoadTest admission policy lets the right people ask for
/// (None: nothing): the runners running another image than the operator's
/// (whoever sets it runs code as pods of the namespace), and a header or
/// body from a Secret (its value is sent where the LoadTest says).
pub fn guarded_power(spec: &LoadTestSpec) -> Option<&'static str> {
    if spec.image.is_some() {
        Some("spec.image")
    } else if spec.test.http_headers.iter().any(|h| h.value_from.is_some()) {
        Some("a header from a Secret (httpHeaders[].valueFrom)")
    } else if spec.test.body_from.is_some() {
        Some("a body from a Secret (test.bodyFrom)")
    } else {
        None
    }
}

impl flotilla_shared::status::ReportedStatus for SimpleDeploymentStatus {
    fn conditions_mut(&mut self) -> &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
        &mut self.conditions
    }
}
