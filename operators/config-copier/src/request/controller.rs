//! The CopyRequest controller: the watches wired, and one reconcile per
//! request — read (the source, unless its namespace is protected; the
//! copy's place) → plan ([`super::plan`], pure) → apply (one write) →
//! report (status, Events). What wakes a request: the request itself, its
//! copy (ownerReference), and any change of the object it names (a
//! metadata-only watch of ConfigMaps and Secrets, holding nothing). A
//! finalizer prunes the copy when the request goes.

use std::sync::Arc;
use std::time::Duration;

use flotilla_shared::backoff::ErrorBackoff;
use flotilla_shared::conditions::INVALID_SPEC;
use flotilla_shared::metadata::metadata_watch;
use flotilla_shared::{Context, Controller};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::ALLOW_PULL_TO as ALLOW;
use super::apply::{Wrote, write};
use super::marks::{REQUEST_LABEL, manifest, observe};
use super::plan::{Act, Ask, SourceSeen, TargetSeen, Verdict, decide, may_read_source};
use super::read::read;
use super::report::report;
use crate::copy::{RuleId, RuleRef, Source, StripLabels};
use crate::crd::{CopyRequest, SourceKind};
use crate::error::Error;
use crate::plan::Policy;

/// The finalizer on every CopyRequest: its copy is pruned before it goes.
pub const FINALIZER: &str = "flotilla.dev/config-copier-request";
/// Re-check every request this often even without events.
const RESYNC: Duration = Duration::from_secs(600);

/// What every request reconcile shares.
pub struct Data {
    pub ctx: Context,
    pub policy: Policy,
    pub strip: StripLabels,
    /// Bytes a source may hold (`--max-rule-source-bytes`).
    pub max_source_bytes: u64,
    /// Requests served per namespace (`--max-requests-per-namespace`).
    pub max_per_namespace: usize,
    pub backoff: ErrorBackoff,
    /// Filled by [`run`].
    pub queue: Queue,
}

/// Each namespace's requests in order (the controller's own cache of
/// them), and a way to wake the next waiting request of a namespace when
/// one of its served requests goes.
#[derive(Default)]
pub struct Queue {
    requests: Option<Store<CopyRequest>>,
    freed: Option<futures::channel::mpsc::UnboundedSender<String>>,
}

fn place(r: &CopyRequest) -> (Option<i64>, &str) {
    (r.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()), r.metadata.name.as_deref().unwrap_or_default())
}

fn waiting(r: &CopyRequest) -> bool {
    r.status
        .as_ref()
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.reason == super::plan::TOO_MANY_REQUESTS))
}

impl Queue {
    /// How many requests of `request`'s namespace (not being deleted) come
    /// before it; 0 before the cache is there, or while it holds at most
    /// `max` in all (no namespace can be over it, and nothing is scanned).
    fn older_than(&self, request: &CopyRequest, max: usize) -> usize {
        let Some(store) = &self.requests else { return 0 };
        if store.len() <= max {
            return 0;
        }
        let ns = request.metadata.namespace.as_deref();
        let all = store.state();
        super::plan::older_than(
            place(request),
            // A request being deleted has left the queue.
            all.iter()
                .filter(|r| r.metadata.namespace.as_deref() == ns && r.metadata.deletion_timestamp.is_none())
                .map(|r| place(r.as_ref())),
        )
    }

    /// A served request of `namespace` went: the oldest waiting one may be served now.
    fn freed(&self, namespace: &str) {
        if let Some(tx) = &self.freed {
            let _ = tx.unbounded_send(namespace.to_string());
        }
    }
}

/// The oldest waiting request of each namespace named on `freed`.
fn next_waiting(
    freed: futures::channel::mpsc::UnboundedReceiver<String>,
    store: Store<CopyRequest>,
) -> impl Stream<Item = ObjectRef<CopyRequest>> + Send + 'static {
    freed.filter_map(move |ns| {
        let next = store
            .state()
            .iter()
            .filter(|r| r.metadata.namespace.as_deref() == Some(ns.as_str()) && waiting(r))
            .min_by(|a, b| place(a).cmp(&place(b)))
            .map(|r| ObjectRef::from_obj(r.as_ref()));
        std::future::ready(next)
    })
}

/// The requests of `store` that name `kind` `namespace/name`.
fn naming(store: &Store<CopyRequest>, kind: SourceKind, namespace: &str, name: &str) -> Vec<ObjectRef<CopyRequest>> {
    store
        .state()
        .iter()
        .filter(|r| {
            r.spec.source.kind == kind && r.spec.source.namespace.0 == namespace && r.spec.source.name.0 == name
        })
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

/// Wakes the requests naming an object of `kind` whenever it changes
/// (its annotation included) or goes: a metadata-only watch, nothing held.
fn sources_changed<K>(
    api: Api<K>,
    kind: SourceKind,
    store: Store<CopyRequest>,
) -> impl Stream<Item = ObjectRef<CopyRequest>> + Send + 'static
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    metadata_watch(api, watcher::Config::default())
        .default_backoff()
        .touched_objects()
        .filter_map(|o| async move { o.ok() })
        .flat_map(move |o| {
            let wake = naming(&store, kind, &o.namespace().unwrap_or_default(), &o.name_any());
            futures::stream::iter(wake)
        })
}

/// Runs the CopyRequest controller until shutdown.
pub async fn run(ctx: Context, mut data: Data, watch_namespace: Option<String>) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let requests: Api<CopyRequest> = match &watch_namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    // The copies live in their request's namespace.
    let (config_maps, secrets): (Api<ConfigMap>, Api<Secret>) = match &watch_namespace {
        Some(ns) => (Api::namespaced(client.clone(), ns), Api::namespaced(client.clone(), ns)),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let controller = Controller::new(requests, watcher::Config::default())
        .owns(config_maps, watcher::Config::default().labels(REQUEST_LABEL))
        .owns(secrets, watcher::Config::default().labels(REQUEST_LABEL))
        .debounce(Duration::from_millis(200))
        .concurrency(8);
    let store = controller.store();
    let (freed, next) = futures::channel::mpsc::unbounded();
    data.queue = Queue { requests: Some(store.clone()), freed: Some(freed) };
    let controller = controller
        .reconcile_on(sources_changed(Api::<ConfigMap>::all(client.clone()), SourceKind::ConfigMap, store.clone()))
        .reconcile_on(sources_changed(Api::<Secret>::all(client), SourceKind::Secret, store.clone()))
        .reconcile_on(next_waiting(next, store));
    ctx.run_controller("copyrequest", controller, reconcile, error_policy, Arc::new(data)).await
}

fn key(request: &CopyRequest) -> String {
    format!("{}/{}", request.namespace().unwrap_or_default(), request.name_any())
}

/// Failures back off per request (1 s doubling to 5 min).
fn error_policy(request: Arc<CopyRequest>, error: &Error, data: Arc<Data>) -> Action {
    let delay = data.backoff.next(&key(&request));
    tracing::debug!(request = %key(&request), error = error.metric_label(), ?delay, "will retry");
    Action::requeue(delay)
}

async fn reconcile(request: Arc<CopyRequest>, data: Arc<Data>) -> Result<Action, Error> {
    let ns = request.namespace().ok_or(Error::NoNamespace)?;
    let k = key(&request);
    let api: Api<CopyRequest> = Api::namespaced(data.ctx.client.clone(), &ns);
    let result = finalizer(&api, FINALIZER, request, |event| async {
        match event {
            Finalizer::Apply(r) => sync(&r, &data).await,
            Finalizer::Cleanup(r) => cleanup(&r, &data).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    if result.is_ok() {
        data.backoff.forget(&k);
    }
    result
}

fn me(request: &CopyRequest) -> Result<RuleRef, Error> {
    Ok(RuleRef {
        id: RuleId::new(request.namespace().ok_or(Error::NoNamespace)?, request.name_any()),
        uid: request.uid().unwrap_or_default(),
    })
}

fn copy_name(request: &CopyRequest) -> &str {
    request.spec.name.as_ref().map_or(request.spec.source.name.0.as_str(), |n| n.0.as_str())
}

/// Converges one request's copy.
async fn sync(request: &CopyRequest, data: &Data) -> Result<Action, Error> {
    let me = me(request)?;
    let client = &data.ctx.client;
    let spec = &request.spec;
    let kind = spec.source.kind;
    let name = copy_name(request);
    let ask = Ask {
        namespace: &me.id.namespace,
        kind: kind.as_str(),
        source_namespace: &spec.source.namespace.0,
        source_name: &spec.source.name.0,
        copy_name: name,
    };
    // What the schema cannot see: a copy onto its own source.
    if ask.source_namespace == ask.namespace && ask.source_name == name {
        let verdict = Verdict {
            ready: false,
            reason: INVALID_SPEC,
            message: "the copy would be its own source: set spec.name to another name".into(),
        };
        report_and(request, data, &verdict, &Wrote::Nothing, None).await?;
        return Ok(Action::await_change());
    }
    // Past the namespace's limit: nothing read, nothing written; woken
    // when one of the namespace's served requests goes.
    let older = data.queue.older_than(request, data.max_per_namespace);
    if let Some(verdict) = super::plan::over_limit(ask.namespace, older, data.max_per_namespace) {
        let copy = request.status.as_ref().and_then(|s| s.copy.clone());
        report_and(request, data, &verdict, &Wrote::Nothing, copy).await?;
        return Ok(Action::requeue(RESYNC));
    }
    // Read: the source (never in a protected namespace), the copy's place.
    let read_source = if may_read_source(&data.policy, &ask) {
        read(client, kind, ask.source_namespace, ask.source_name).await.map_err(Error::Read)?
    } else {
        None
    };
    let allow = read_source.as_ref().and_then(|o| super::marks::annotation(o, ALLOW));
    // A copy made by a CopyRule is no source (`None`), as for CopyRules.
    let source = read_source.and_then(|o| Source::from_json_owned(kind, o, &data.strip));
    let seen = match &source {
        Some(s) => SourceSeen::Found { allow_pull_to: allow, info: Box::new(s.info()) },
        None => SourceSeen::Unavailable,
    };
    let current = if data.policy.may_touch(ask.namespace) {
        read(client, kind, ask.namespace, name).await.map_err(Error::Read)?
    } else {
        None
    };
    let target = observe(current.as_ref(), &me, source.as_ref());
    // Plan.
    let decision = decide(&ask, &seen, &target, &data.policy, data.max_source_bytes);
    // Apply.
    let desired = source.as_ref().map(|s| manifest(s, &me, name));
    drop(source);
    let act = decision.act.clone();
    let wrote =
        write(client, &data.ctx.field_manager, (kind, ask.namespace, name), act, desired.as_ref(), current.as_ref())
            .await
            .map_err(Error::Request);
    let (verdict, wrote) = match wrote {
        Ok(w) => (decision.verdict, w),
        Err(e) => {
            let verdict = Verdict { ready: false, reason: "WriteFailed", message: format!("writing the copy: {e}") };
            report_and(request, data, &verdict, &Wrote::Nothing, None).await?;
            return Err(e);
        }
    };
    // Report: the copy's name while it exists (or is being made).
    let exists = match (&decision.act, &target) {
        (Act::Delete { .. }, _) => false,
        (Act::Create | Act::Update { .. }, _) => true,
        (Act::Nothing, t) => matches!(t, TargetSeen::Mine { .. }),
    };
    report_and(request, data, &verdict, &wrote, exists.then(|| name.to_string())).await?;
    Ok(match wrote {
        // Decided again soon: the watch event usually comes first.
        Wrote::Stale | Wrote::Deleted => Action::requeue(Duration::from_secs(2)),
        _ => Action::requeue(RESYNC),
    })
}

async fn report_and(
    request: &CopyRequest,
    data: &Data,
    verdict: &Verdict,
    wrote: &Wrote,
    copy: Option<String>,
) -> Result<(), Error> {
    report(&data.ctx.client, &data.ctx.field_manager, &data.ctx.events, request, verdict, wrote, copy)
        .await
        .map_err(Error::Status)
}

/// The request is being deleted: its copy, if ours, is pruned (never in a
/// protected namespace); a denied delete keeps the finalizer and retries.
async fn cleanup(request: &CopyRequest, data: &Data) -> Result<Action, Error> {
    let me = me(request)?;
    if !waiting(request) {
        data.queue.freed(&me.id.namespace);
    }
    let (kind, name) = (request.spec.source.kind, copy_name(request));
    if !data.policy.may_touch(&me.id.namespace) {
        return Ok(Action::await_change());
    }
    let client = &data.ctx.client;
    let current = read(client, kind, &me.id.namespace, name).await.map_err(Error::Read)?;
    if let TargetSeen::Mine { uid, resource_version, .. } = observe(current.as_ref(), &me, None) {
        let act = Act::Delete { uid, resource_version };
        let wrote = write(client, &data.ctx.field_manager, (kind, &me.id.namespace, name), act, None, None)
            .await
            .map_err(Error::Request)?;
        if let Wrote::Stale = wrote {
            // Changed since read: read and decide again.
            return Err(Error::Writes { failed: 1, first: format!("{kind:?} {name} changed while being pruned") });
        }
        tracing::info!(request = %me.id, "request deleted: copy pruned");
    }
    data.backoff.forget(&key(request));
    Ok(Action::await_change())
}
