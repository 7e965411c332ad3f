//! The reconcilers' errors, each with a short label for metrics and logs.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the object has no namespace")]
    NoNamespace,
    /// The watch feeding a cache ended (the process is stopping).
    #[error("the {0} cache is gone")]
    CacheGone(&'static str),
    #[error("{0}: {1}")]
    Kube(&'static str, #[source] kube::Error),
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::NoNamespace => "no_namespace",
            Error::CacheGone(_) => "cache_gone",
            Error::Kube(what, _) => what,
        }
    }
}

/// An object without a namespace stays so: terminal. A failed request may
/// pass on the next try; a cache gone is the process stopping, not the
/// object's fault.
impl flotilla_shared::ReconcileError for Error {
    fn is_terminal(&self) -> bool {
        match self {
            Error::NoNamespace => true,
            Error::CacheGone(_) | Error::Kube(..) => false,
        }
    }
}
