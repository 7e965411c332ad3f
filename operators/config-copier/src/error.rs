//! The reconciler's errors, each with a short label for metrics and logs.

/// Why a reconcile failed (it is retried after a pause, never in a hot loop).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the CopyRule has no namespace")]
    NoNamespace,
    #[error("writing the CopyRule status: {0}")]
    Status(#[source] kube::Error),
    #[error("listing copies to prune: {0}")]
    List(#[source] kube::Error),
    #[error("reading a source: {0}")]
    Read(#[source] kube::Error),
    #[error("{failed} copy write(s) failed, first: {first}")]
    Writes { failed: usize, first: String },
    #[error("writing a CopyRequest's copy: {0}")]
    Request(#[source] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// A stable, low-cardinality label for this error.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::NoNamespace => "no_namespace",
            Error::Status(_) => "status",
            Error::List(_) => "list",
            Error::Read(_) => "read",
            Error::Writes { .. } => "writes",
            Error::Request(_) => "request",
            Error::Finalizer(_) => "finalizer",
        }
    }
}

/// A CopyRule without a namespace stays so: terminal. The rest are
/// requests that may pass on the next try.
impl flotilla_shared::ReconcileError for Error {
    fn is_terminal(&self) -> bool {
        match self {
            Error::NoNamespace => true,
            Error::Finalizer(e) => match e.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e) | kube::runtime::finalizer::Error::CleanupFailed(e) => {
                    e.is_terminal()
                }
                _ => false,
            },
            Error::Status(_) | Error::List(_) | Error::Read(_) | Error::Request(_) | Error::Writes { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::ReconcileError;

    #[test]
    fn only_what_no_retry_fixes_is_terminal() {
        assert!(Error::NoNamespace.is_terminal());
        let inner = kube::runtime::finalizer::Error::ApplyFailed(Error::NoNamespace);
        assert!(Error::Finalizer(Box::new(inner)).is_terminal());
        assert!(!Error::Writes { failed: 1, first: "x".into() }.is_terminal());
        let inner = kube::runtime::finalizer::Error::CleanupFailed(Error::Writes { failed: 1, first: "x".into() });
        assert!(!Error::Finalizer(Box::new(inner)).is_terminal());
    }
}
