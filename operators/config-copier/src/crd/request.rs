//! The `CopyRequest` custom resource (`flotilla.dev/v1alpha1`): a pull,
//! with consent on both sides. The request's author asks for a copy in the
//! request's own namespace; the source's namespace consents per object by
//! annotation ([`crate::request::ALLOW_PULL_TO`]). Every field's doc
//! comment is its `kubectl explain` description.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ObjectName, SourceKind};

/// Asks for a copy of one ConfigMap or Secret of another namespace in this
/// request's namespace, kept in sync with its source.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = kube::core::Rule::new("self == oldSelf")
    .message("spec is immutable: delete the CopyRequest and create another to pull something else"))]
#[kube(
    group = "flotilla.dev",
    version = "v1alpha1",
    kind = "CopyRequest",
    doc = "A request, in the namespace that wants it, for a copy of a ConfigMap or Secret of another namespace whose owner allows it (annotation flotilla.dev/allow-pull-to).",
    namespaced,
    status = "CopyRequestStatus",
    shortname = "cq",
    category = "flotilla",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.source.kind"}"#,
    printcolumn = r#"{"name":"Source-Namespace","type":"string","jsonPath":".spec.source.namespace"}"#,
    printcolumn = r#"{"name":"Source","type":"string","jsonPath":".spec.source.name"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message","description":"the Ready condition's message (kubectl get -o wide)"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CopyRequestSpec {
    /// The object to copy. It is copied only while it carries the
    /// annotation flotilla.dev/allow-pull-to with a namespace glob matching
    /// this request's namespace; never from or into kube-system,
    /// kube-public, kube-node-lease, the operator's namespace or the
    /// operator's --protected-namespaces. Immutable.
    pub source: PullSource,
    /// The copy's name in this namespace. Omitted: the source's name. An
    /// object of that name this request did not make is never overwritten
    /// (Ready=False, Conflict). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<ObjectName>,
}

/// Which object a request copies.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullSource {
    /// ConfigMap or Secret.
    pub kind: SourceKind,
    /// The source's namespace.
    pub namespace: NamespaceName,
    /// The source's name.
    pub name: ObjectName,
}

/// A namespace's name (a DNS label).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
#[serde(transparent)]
pub struct NamespaceName(
    #[schemars(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))] pub String,
);

/// What config-copier observed and did for this request.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopyRequestStatus {
    /// The request generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready: True while the copy exists with the source's current content;
    /// False with reason NotAllowed (the source does not exist, or does not
    /// allow this namespace: the two are told apart to nobody), Conflict,
    /// InvalidSpec, SecretTypeNotAllowed, SourceTooLarge or WriteFailed.
    #[serde(default)]
    #[schemars(schema_with = "flotilla_shared::conditions::schema")]
    pub conditions: Vec<Condition>,
    /// The copy's name in this namespace, while it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<String>,
}
