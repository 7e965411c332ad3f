//! A PodAlert's writes, and nothing else: the sink workers started,
//! replaced or stopped as [`crate::sinks::worker_changes`] decided, and the
//! documents of the [`Outbox`] handed to them (each worker delivers on its
//! own, with its retries: [`crate::delivery`]). What each means for the
//! status, Events and metrics is [`crate::report`]'s.

use crate::controller::{Data, State};
use crate::sinks::{Outbox, WorkerChange};

/// Starts and stops the sink workers; a started one calls `wake` when its
/// delivery state changes.
pub(crate) fn workers(
    changes: Vec<WorkerChange>,
    wake: impl Fn() + Clone + Send + Sync + 'static,
    st: &mut State,
    data: &Data,
) {
    for change in changes {
        match change {
            WorkerChange::Start { name, target, path, coalesce } => {
                let sink = data.delivery.start(name, target, path, coalesce, wake.clone());
                st.sinks.insert(name, sink);
            }
            WorkerChange::Stop(name) => {
                // Dropping a sink ends its worker.
                st.sinks.remove(name);
            }
        }
    }
}

/// Hands each document to its sink's worker, in the order decided.
pub(crate) fn send(out: &mut Outbox, st: &State, data: &Data) {
    for (name, payload) in out.sends.drain(..) {
        if let Some(sink) = st.sinks.get(name) {
            sink.send(payload, &data.metrics, name);
        }
    }
}
