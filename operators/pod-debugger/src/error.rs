//! The reconciler's errors, each with a short label for metrics and logs.

/// Why a reconcile failed (retried with backoff, never in a hot loop).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the PodDebugger has no namespace")]
    NoNamespace,
    #[error("reading namespace {0}: {1}")]
    Namespace(String, #[source] kube::Error),
    #[error("writing the PodDebugger status: {0}")]
    Status(#[source] kube::Error),
}

impl Error {
    /// A stable, low-cardinality label for this error.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::NoNamespace => "no_namespace",
            Error::Namespace(..) => "namespace",
            Error::Status(_) => "status",
        }
    }
}

/// An object without a namespace stays so: terminal. A failed request may
/// pass on the next try.
impl flotilla_shared::ReconcileError for Error {
    fn is_terminal(&self) -> bool {
        match self {
            Error::NoNamespace => true,
            Error::Namespace(..) | Error::Status(_) => false,
        }
    }
}
