//! What the runtime asks of a reconciler's error type: whether retrying can
//! fix it. A terminal error is one no retry will: the object itself is
//! wrong (a namespaced kind read without a namespace, say) — counted in
//! `controller_runtime_terminal_reconcile_errors_total`, the Flotilla
//! reading of controller-runtime's `TerminalError`. A spec the operator
//! cannot use is not an error at all here: the reconcile succeeds with
//! `Ready=False` and `Stalled=True` ([`crate::conditions`]).

/// A reconciler's error, as [`crate::Context::run_controller`] counts it.
pub trait ReconcileError: std::error::Error {
    /// True when retrying cannot fix this error (the error policy may still
    /// retry it, slowly). False by default: a failed request, a conflict, a
    /// timeout may all pass.
    fn is_terminal(&self) -> bool {
        false
    }
}
