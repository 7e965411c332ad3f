//! The toy operator's custom resource: `Widget` in `toy.flotilla.dev`.
//! Shared by the example and the crate's tests.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A widget the toy operator reconciles.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "toy.flotilla.dev",
    version = "v1alpha1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct WidgetSpec {
    /// Text echoed into the Ready condition.
    #[serde(default)]
    pub message: String,
    /// Seconds each reconcile takes (to test graceful shutdown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 600))]
    pub sleep_seconds: Option<i32>,
    /// Make every reconcile fail (to test error metrics).
    #[serde(default)]
    pub fail: bool,
    /// Make every reconcile panic (to test that a panic is caught).
    #[serde(default)]
    pub panic: bool,
}

/// What the toy operator observed.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WidgetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    #[schemars(schema_with = "flotilla_shared::conditions::schema")]
    pub conditions: Vec<Condition>,
}
