//! The reconcilers' errors, each with a short label for metrics and logs.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the object has no namespace")]
    NoNamespace,
    #[error("{0}: {1}")]
    Kube(&'static str, #[source] kube::Error),
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::NoNamespace => "no_namespace",
            Error::Kube(what, _) => what,
        }
    }
}
