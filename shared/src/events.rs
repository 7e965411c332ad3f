//! Kubernetes Events (events.k8s.io/v1) on the object concerned, reported as
//! `flotilla-<operator>` by the pod that acted. The events API aggregates
//! repeats (kube's recorder keeps a series count), and publishing never blocks
//! a reconcile: events are sent in the background and a failure is logged.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// How long one event may take before it is given up (and logged).
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);
/// The API's limit on `note`.
const MAX_NOTE: usize = 1024;

/// Publishes events for one operator. Cheap to clone.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    /// `operator` is e.g. `config-copier`; `instance` the pod's name.
    pub fn new(client: Client, operator: &str, instance: &str) -> Self {
        let reporter = Reporter { controller: format!("flotilla-{operator}"), instance: Some(instance.to_string()) };
        Self { recorder: Recorder::new(client, reporter) }
    }

    /// A `Normal` event: something the operator did.
    pub fn normal(&self, on: &ObjectReference, reason: &str, action: &str, note: impl Into<String>) {
        self.publish(on, EventType::Normal, reason, action, note.into());
    }

    /// A `Warning` event: something refused or failed.
    pub fn warning(&self, on: &ObjectReference, reason: &str, action: &str, note: impl Into<String>) {
        self.publish(on, EventType::Warning, reason, action, note.into());
    }

    fn publish(&self, on: &ObjectReference, type_: EventType, reason: &str, action: &str, mut note: String) {
        if note.len() > MAX_NOTE {
            let mut cut = MAX_NOTE - 3;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push_str("...");
        }
        let event =
            Event { type_, reason: reason.to_string(), note: Some(note), action: action.to_string(), secondary: None };
        let recorder = self.recorder.clone();
        let on = on.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(PUBLISH_TIMEOUT, recorder.publish(&event, &on)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, reason = %event.reason, object = ?on.name, "could not publish an event")
                }
                Err(_) => tracing::warn!(reason = %event.reason, object = ?on.name, "publishing an event timed out"),
            }
        });
    }
}
