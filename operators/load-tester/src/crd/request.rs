//! What a LoadTest's request carries beside its shape: header values and
//! where they come from, a body from a Secret, and TLS for https targets.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Header names that carry credentials: refused as literal values by the
/// chart's admission policy (lower case).
pub const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "proxy-authorization", "cookie"];

/// Whether `name` is an HTTP token (what a header name must be).
pub fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The source of a request body.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BodySource {
    /// A key of a Secret in the LoadTest's namespace.
    pub secret_key_ref: SecretKeyRef,
}

/// A header value: one line, at most 4096 characters.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(transparent)]
pub struct HeaderValue(#[schemars(length(max = 4096), pattern(r"^[^\x00-\x08\x0A-\x1F\x7F]*$"))] pub String);

/// A request header: its value written here, or read from a Secret.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.value) != has(self.valueFrom)")
    .message("exactly one of value and valueFrom"))]
pub struct HttpHeader {
    /// The header's name, an HTTP token (e.g. Authorization).
    #[schemars(length(min = 1, max = 256), pattern(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"))]
    pub name: String,
    /// The value as written (one line). Whoever may read the LoadTest or
    /// its runner pods reads it: not for credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<HeaderValue>,
    /// Where the value comes from instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<HeaderValueSource>,
}

/// The source of a header value.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderValueSource {
    /// A key of a Secret in the LoadTest's namespace. The runners read it
    /// from a mounted file (one trailing newline dropped); a missing Secret
    /// or key keeps them from starting (StartTimeout; `kubectl describe
    /// pod` shows the FailedMount). With the chart's admission policy, only
    /// a user who may get that Secret may name it.
    pub secret_key_ref: SecretKeyRef,
}

/// The URL scheme the runners send with.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Scheme {
    #[default]
    #[serde(rename = "http")]
    Http,
    #[serde(rename = "https")]
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// How an https Service's certificate is checked.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!has(self.caConfigMapRef) || !has(self.insecureSkipVerify) || !self.insecureSkipVerify")
    .message("caConfigMapRef and insecureSkipVerify are mutually exclusive"))]
pub struct TestTls {
    /// A key of a ConfigMap in this namespace holding the PEM certificates
    /// (a CA bundle, e.g. cert-manager's ca.crt) the Service's certificate
    /// must chain to, trusted instead of the built-in roots; mounted into
    /// the runner pods. A missing ConfigMap or key keeps the runners from
    /// starting (StartTimeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_config_map_ref: Option<ConfigMapKeyRef>,
    /// Accept any certificate and any name: the load is encrypted, the
    /// server not authenticated (a test server's self-signed certificate).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_verify: bool,
}

/// A key of a ConfigMap in the LoadTest's namespace (the suite's one shape).
pub type ConfigMapKeyRef = flotilla_shared::key_ref::KeyRef;

/// A key of a Secret in the LoadTest's namespace (the suite's one shape).
pub type SecretKeyRef = flotilla_shared::key_ref::KeyRef;
