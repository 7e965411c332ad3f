//! A PodAlert's maintenance windows (`spec.silences`), as the CRD has them.

use flotilla_shared::selector::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Reason;

/// A maintenance window over some of the PodAlert's pods.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Silence {
    /// The pods silenced, by label (among those the PodAlert watches).
    /// Omitted: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// The reasons silenced. Omitted or empty: all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub reasons: Vec<Reason>,
    /// When the silence ends (RFC 3339, e.g. 2026-11-28T06:00:00Z): at most
    /// 7 days ahead.
    pub until: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    /// Why, shown in status beside what it silences (e.g. a change ticket).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 256))]
    pub comment: String,
}
