//! Why a sink's attempt failed, as much as its author may be told: a class
//! of [`super::CLASSES`] for a request (never the URL, an address or the
//! OS's error text), or a Secret's problem; the detail goes to the log.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::address::{REFUSED, RefusedByPolicy};
use crate::crd::SecretKeyRef;

use super::{TIMEOUT, UNREACHABLE};

/// Why one attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// For the PodAlert's status and Events: one of [`CLASSES`] for a
    /// request that was attempted, or a configuration problem (a Secret
    /// missing) — never the URL (a Slack webhook URL is itself the
    /// credential), an address, the OS's error text, nor the response's body
    /// (the sink may be a service the author cannot reach).
    pub message: String,
    pub retryable: bool,
    pub retry_after: Option<Duration>,
}

impl Failure {
    pub(super) fn refused() -> Self {
        Self { message: REFUSED.into(), retryable: false, retry_after: None }
    }
}

/// The class of a failed request: whether the policy refused it (a name
/// that resolves only to refused addresses), it timed out, or anything else
/// kept it from an answer. Nothing of the error's own text.
pub fn class(e: &reqwest::Error) -> &'static str {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<RefusedByPolicy>().is_some() {
            return REFUSED;
        }
        source = s.source();
    }
    if e.is_timeout() { TIMEOUT } else { UNREACHABLE }
}

/// A request that got no answer, as its class; the log keeps the detail
/// for the admin (without the URL).
pub(super) fn request_failure(name: &str, e: reqwest::Error) -> Failure {
    let class = class(&e);
    let e = e.without_url();
    let detail = flotilla_shared::context::DisplayChain(&e);
    tracing::info!(sink = name, error = %detail, class, "a sink request failed");
    Failure { message: class.to_string(), retryable: class != REFUSED, retry_after: None }
}

/// Reads a sink URL from a Secret key (get only: the operator never lists
/// or watches Secrets).
pub async fn read_secret(client: &kube::Client, namespace: &str, r: &SecretKeyRef) -> Result<String, Failure> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = match api.get_opt(&r.name).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return Err(Failure {
                message: format!("Secret {namespace}/{} not found", r.name),
                retryable: true,
                retry_after: None,
            });
        }
        Err(e) => {
            tracing::warn!(secret = %r.name, error = %e, "reading a sink Secret");
            return Err(Failure {
                message: format!("Secret {namespace}/{} could not be read", r.name),
                retryable: true,
                retry_after: None,
            });
        }
    };
    let value =
        secret.data.as_ref().and_then(|d| d.get(&r.key)).map(|b| String::from_utf8_lossy(&b.0).trim().to_string());
    match value {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(Failure {
            message: format!("Secret {namespace}/{} has no key {:?}", r.name, r.key),
            retryable: false,
            retry_after: None,
        }),
    }
}
