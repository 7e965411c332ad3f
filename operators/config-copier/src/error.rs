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
            Error::Finalizer(_) => "finalizer",
        }
    }
}
