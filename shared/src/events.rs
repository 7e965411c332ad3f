//! Kubernetes Events (events.k8s.io/v1) on the object concerned, reported as
//! `flotilla-<operator>` by the pod that acted.
//!
//! Repeats are aggregated, not spammed: an Event identical to one published
//! in the last few minutes (same object, type, reason, action *and* message)
//! bumps that Event's `series.count` instead of creating another. The message
//! is part of the identity on purpose: kube-runtime's `Recorder` leaves it out,
//! so a second "updated dns a.example" after "updated dns b.example" would only
//! bump the first Event's count and the user would never see the new message.
//! What was published is remembered for that by a hash, at most a few
//! thousand (`events::recent`).
//!
//! Publishing never blocks a reconcile: Events are sent in the background
//! with a timeout, and a failure is logged. The queue in front of the
//! sender is bounded ([`QUEUE`]): while the API server is down, the oldest
//! Events are dropped (counted in `flotilla_events_dropped_total`), not
//! kept until memory runs out.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use prometheus::IntCounter;

mod recent;

/// How long one Event may take before it is given up (and logged).
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);
/// The API's limit on `note`.
const MAX_NOTE: usize = 1024;
/// Events waiting to be sent, at most; beyond, the oldest are dropped.
/// Large enough for a normal burst (5,000 Services published at once send
/// 5,000 Events), bounded for an API server that stays down.
pub const QUEUE: usize = 8192;

/// What makes two Events the same Event.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    kind: String,
    name: String,
    uid: String,
    warning: bool,
    reason: String,
    action: String,
    note: String,
}

/// Publishes events for one operator. Cheap to clone: clones share one
/// background worker, which sends Events in order (so repeats aggregate
/// reliably, and a burst never opens a request per Event at once).
#[derive(Clone)]
pub struct Events {
    queue: crate::drop_oldest::Sender<(ObjectReference, Key)>,
    dropped: IntCounter,
}

fn dropped_counter() -> IntCounter {
    // The name and help are constants: this cannot fail.
    IntCounter::new("flotilla_events_dropped_total", "Events dropped because the queue to the API server was full")
        .unwrap_or_else(|_| unreachable!("a valid counter"))
}

/// The background worker's state.
struct Sender {
    client: Client,
    controller: String,
    instance: String,
    published: recent::Recent,
}

fn cut(mut note: String) -> String {
    if note.len() > MAX_NOTE {
        let mut at = MAX_NOTE - 3;
        while !note.is_char_boundary(at) {
            at -= 1;
        }
        note.truncate(at);
        note.push_str("...");
    }
    note
}

/// The object's name, cut so that `<name>.<16 hex>` stays a valid name.
fn event_name_prefix(name: &str) -> &str {
    let name = if name.is_empty() { "flotilla" } else { name };
    let mut end = name.len().min(253 - 17);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].trim_end_matches(['.', '-'])
}

impl Events {
    /// `operator` is e.g. `config-copier`; `instance` the pod's name. Must be
    /// called inside a tokio runtime (it starts the worker).
    pub fn new(client: Client, operator: &str, instance: &str) -> Self {
        let (queue, mut rx) = crate::drop_oldest::queue::<(ObjectReference, Key)>(QUEUE);
        let dropped = dropped_counter();
        let counted = dropped.clone();
        let mut sender = Sender {
            client,
            controller: format!("flotilla-{operator}"),
            instance: instance.to_string(),
            published: recent::Recent::default(),
        };
        tokio::spawn(async move {
            while let Some(((on, key), lost)) = rx.next().await {
                if lost > 0 {
                    counted.inc_by(lost);
                    tracing::warn!(dropped = lost, "the event queue was full; dropped the oldest events");
                }
                let what = format!("{} on {}/{}", key.reason, key.namespace, key.name);
                match tokio::time::timeout(PUBLISH_TIMEOUT, sender.send(&on, &key)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!(error = %e, event = %what, "could not publish an event"),
                    Err(_) => tracing::warn!(event = %what, "publishing an event timed out"),
                }
            }
        });
        Self { queue, dropped }
    }

    /// `flotilla_events_dropped_total`, to register on the operator's metrics.
    pub fn dropped(&self) -> IntCounter {
        self.dropped.clone()
    }

    /// A `Normal` event: something the operator did.
    pub fn normal(&self, on: &ObjectReference, reason: &str, action: &str, note: impl Into<String>) {
        self.publish(on, false, reason, action, note.into());
    }

    /// A `Warning` event: something refused or failed.
    pub fn warning(&self, on: &ObjectReference, reason: &str, action: &str, note: impl Into<String>) {
        self.publish(on, true, reason, action, note.into());
    }

    fn publish(&self, on: &ObjectReference, warning: bool, reason: &str, action: &str, note: String) {
        let key = Key {
            namespace: on.namespace.clone().unwrap_or_else(|| "default".to_string()),
            kind: on.kind.clone().unwrap_or_default(),
            name: on.name.clone().unwrap_or_default(),
            uid: on.uid.clone().unwrap_or_default(),
            warning,
            reason: reason.to_string(),
            action: action.to_string(),
            note: cut(note),
        };
        if self.queue.send((on.clone(), key)).is_err() {
            tracing::warn!(reason, "the event worker has stopped; event dropped");
        }
    }
}

impl Sender {
    /// Creates the Event, or bumps the series of the identical one.
    async fn send(&mut self, on: &ObjectReference, key: &Key) -> Result<(), kube::Error> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &key.namespace);
        let now = MicroTime(Timestamp::now());
        self.published.forget_expired(Instant::now());
        let repeat = self.published.repeat(key, Instant::now());
        if let Some((name, count)) = repeat {
            let series = EventSeries { count, last_observed_time: now.clone() };
            let patch = serde_json::json!({ "series": series });
            match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => return Ok(()),
                // Gone (expired or deleted): publish it afresh below.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let event = Event {
            metadata: ObjectMeta {
                // `<object>.<random hex>`, as kubelet names its events.
                name: Some(format!("{}.{:016x}", event_name_prefix(&key.name), rand::random::<u64>())),
                namespace: Some(key.namespace.clone()),
                ..Default::default()
            },
            event_time: Some(now),
            type_: Some(if key.warning { "Warning" } else { "Normal" }.to_string()),
            reason: Some(key.reason.clone()),
            action: Some(key.action.clone()),
            note: Some(key.note.clone()),
            regarding: Some(on.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        };
        let created = api.create(&PostParams::default(), &event).await?;
        let name = created.metadata.name.unwrap_or_default();
        self.published.remember(key, name, Instant::now());
        Ok(())
    }
}
