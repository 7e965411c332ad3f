//! A scenario: `spec.test.requests`, several weighted requests instead of
//! one, each with its own checks and its own figures in
//! `status.results.byRequest`.

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::request::{BodySource, HeaderValue, HttpHeader};
use super::{Checks, Method};

/// The most requests a scenario holds.
pub const MAX_REQUESTS: usize = 8;

/// One request of test.requests.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!has(self.bodyFrom) || !has(self.body) || self.body == ''")
    .message("body and bodyFrom are mutually exclusive"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.checks) || !has(self.checks.bodyContains) || self.method != 'HEAD'")
    .message("checks.bodyContains is not for method HEAD: its answers have no body"))]
pub struct ScenarioRequest {
    /// Its name in status.results.byRequest: a DNS label, unique among
    /// the requests.
    #[schemars(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
    /// Its share of the requests, 1-100 (default 1): with weights 8 and 2,
    /// 8 of every 10 requests a runner sends are this one, interleaved the
    /// same way on every runner and in every load shape.
    #[serde(default = "default_weight")]
    #[schemars(default = "default_weight", range(min = 1, max = 100))]
    pub weight: i32,
    /// HTTP method (default GET).
    #[serde(default)]
    #[schemars(default = "Method::default")]
    pub method: Method,
    /// The path and query, starting with / (default /).
    #[serde(default = "default_path")]
    #[schemars(default = "default_path", length(min = 1, max = 2048), pattern(r"^/[^\s]*$"))]
    pub path: String,
    /// Headers with literal values, sent after test.headers and
    /// test.httpHeaders (a name in both is sent twice). As test.headers:
    /// single lines, names HTTP tokens, not for credentials.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 8))]
    pub headers: BTreeMap<String, HeaderValue>,
    /// Headers with a literal value or one read from a key of a Secret in
    /// this namespace (valueFrom.secretKeyRef: mounted into the runner
    /// pods as a file, never in their environment nor in status).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub http_headers: Vec<HttpHeader>,
    /// Request body (at most 16384 characters; a larger one, or one
    /// holding credentials, goes in bodyFrom).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 16384))]
    pub body: String,
    /// The request body from a key of a Secret in this namespace, as
    /// test.bodyFrom (not with body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_from: Option<BodySource>,
    /// What this request's answers must show; omitted: test.checks, if
    /// set, else only the status class counts (4xx and 5xx are errors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<Checks>,
}

fn default_weight() -> i32 {
    1
}

fn default_path() -> String {
    "/".into()
}

/// One request of a scenario, every runner's share merged.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestResults {
    /// The request's name (test.requests[].name).
    pub name: String,
    /// Its requests answered or failed.
    pub requests: i64,
    /// Its failed requests by kind (as results.errors).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, i64>,
    /// Its failed requests over its requests, as a decimal string.
    pub error_ratio: String,
    /// Latencies of its answers without error (p50, p90, p99); omitted
    /// when none passed or a runner's summary had no room for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<super::StageLatency>,
}
