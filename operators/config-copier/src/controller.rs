//! The CopyRule controller: one reconcile per rule converges all of its
//! copies from the caches (namespaces, sources, copies); the caches trigger
//! the rules concerned on every change. A finalizer prunes a deleted rule's
//! copies.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use flotilla_shared::Context;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::apply::{Outcome, Writer};
use crate::cache::{Caches, GC_INTERVAL, Sources, api_resource, trigger_channel};
use crate::copy::{CopyKey, Existing, RULE_LABEL, RuleId, Source};
use crate::crd::{CopyRule, SourceKind};
use crate::error::Error;
use crate::metrics::CopierMetrics;
use crate::plan::{RulePlan, desired_copies, diff, target_namespaces};
use crate::selector::{Selector, TargetFilter};
use crate::status::{self, Summary};

/// The finalizer on every CopyRule: its copies are pruned before it goes.
pub const FINALIZER: &str = "flotilla.dev/config-copier";
/// Re-check every rule this often even without events.
const RESYNC: Duration = Duration::from_secs(600);
/// Re-check rules with conflicts this often (an object in the way may go).
const CONFLICT_RECHECK: Duration = Duration::from_secs(60);
/// Events of one kind per reconcile, at most.
const MAX_EVENTS: usize = 5;

/// Options of the controller (from flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// Only rules in this namespace (targets stay cluster-wide).
    pub watch_namespace: Option<String>,
    /// Copy writes in flight per reconcile.
    pub concurrency: usize,
}

/// What every reconcile shares.
pub struct Data {
    pub ctx: Context,
    pub caches: Arc<Caches>,
    pub options: Options,
}

/// Runs the controller until shutdown.
pub async fn run(ctx: Context, options: Options) -> anyhow::Result<()> {
    let metrics = CopierMetrics::new()?;
    metrics.register(&ctx.metrics)?;
    let rules: Api<CopyRule> = match &options.watch_namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let (tx, rx) = trigger_channel();
    let controller = Controller::new(rules, watcher::Config::default().any_semantic())
        .with_config(controller::Config::default().debounce(Duration::from_millis(200)).concurrency(8))
        .reconcile_on(rx);
    let caches = Caches::new(ctx.client.clone(), controller.store(), tx, metrics);

    let readiness = ctx.readiness().clone();
    let mut tasks = Vec::new();
    readiness.register("namespaces");
    {
        let r = readiness.clone();
        tasks.push(tokio::spawn(Arc::clone(&caches).watch_namespaces(move || r.set_synced("namespaces"))));
    }
    for kind in SourceKind::ALL {
        let name = match kind {
            SourceKind::ConfigMap => "copies-configmaps",
            SourceKind::Secret => "copies-secrets",
        };
        readiness.register(name);
        let r = readiness.clone();
        tasks.push(tokio::spawn(Arc::clone(&caches).watch_copies(kind, move || r.set_synced(name))));
    }
    {
        let caches = Arc::clone(&caches);
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(GC_INTERVAL).await;
                caches.collect_garbage();
            }
        }));
    }
    let data = Arc::new(Data { ctx: ctx.clone(), caches, options });
    let result = ctx.run_controller("copyrule", controller, reconcile, error_policy, data).await;
    for t in tasks {
        t.abort();
    }
    result
}

pub fn error_policy(rule: Arc<CopyRule>, error: &Error, _: Arc<Data>) -> Action {
    tracing::debug!(rule = %rule.name_any(), error = error.metric_label(), "will retry");
    Action::requeue(Duration::from_secs(10))
}

pub async fn reconcile(rule: Arc<CopyRule>, data: Arc<Data>) -> Result<Action, Error> {
    let ns = rule.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<CopyRule> = Api::namespaced(data.ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, rule, |event| async {
        match event {
            Finalizer::Apply(r) => sync(&r, &data).await,
            Finalizer::Cleanup(r) => cleanup(&r, &data).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

fn rule_id(rule: &CopyRule) -> Result<RuleId, Error> {
    Ok(RuleId::new(rule.namespace().ok_or(Error::NoNamespace)?, rule.name_any()))
}

enum Op<'a> {
    Missing(&'a CopyKey, &'a Source),
    Update(&'a CopyKey, &'a Source, &'a Existing),
    Delete(&'a Existing),
}

async fn run_op(w: &Writer<'_>, op: Op<'_>) -> Outcome {
    match op {
        Op::Missing(k, s) => w.ensure_missing(k, s).await,
        Op::Update(k, s, e) => w.update(k, s, e).await,
        Op::Delete(e) => w.delete(e).await,
    }
}

/// Runs `ops` with at most `limit` in flight. Futures are made as slots free
/// up (not all up front: a request future is several KiB, times thousands).
async fn run_ops<'a>(w: &Writer<'_>, ops: Vec<Op<'a>>, limit: usize) -> Vec<Outcome> {
    let mut outcomes = Vec::with_capacity(ops.len());
    let mut ops = ops.into_iter();
    let mut pending = FuturesUnordered::new();
    for op in ops.by_ref().take(limit.max(1)) {
        pending.push(run_op(w, op));
    }
    while let Some(outcome) = pending.next().await {
        outcomes.push(outcome);
        if let Some(op) = ops.next() {
            pending.push(run_op(w, op));
        }
    }
    outcomes
}

/// Converges one rule.
async fn sync(rule: &CopyRule, data: &Data) -> Result<Action, Error> {
    let id = rule_id(rule)?;
    let caches = &data.caches;
    let oref = rule.object_ref(&());
    let previous = rule.status.as_ref();

    let checked =
        Selector::new(&rule.spec.selector).and_then(|s| Ok((s, TargetFilter::new(rule.spec.namespaces.as_ref())?)));
    let (selector, targets) = match checked {
        Ok(v) => v,
        Err(e) => {
            caches.stop_sources(&id);
            let was = previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == "Ready"));
            if !was.is_some_and(|c| c.reason == "InvalidSpec" && c.message == e.0) {
                data.ctx.events.warning(&oref, "InvalidSpec", "Validate", format!("rule not applied: {e}"));
            }
            let summary = Summary { invalid: Some(e.0), ..Default::default() };
            write_status(rule, data, &summary, false).await?;
            return Ok(Action::await_change());
        }
    };
    let (Some(namespaces), true) = (caches.namespaces(), caches.copies_ready()) else {
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    let sources = match caches.sources(&id, rule.spec.kind, &selector.to_query()) {
        Sources::Ready(s) => s,
        Sources::NotReady(None) => return Ok(Action::requeue(Duration::from_secs(2))),
        Sources::NotReady(Some(why)) => {
            let summary = Summary { sources_unavailable: Some(why), ..Default::default() };
            write_status(rule, data, &summary, false).await?;
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
    };

    let plan_rule = RulePlan { id: &id, kind: rule.spec.kind, selector: &selector, targets: &targets };
    let target_count = target_namespaces(&plan_rule, &namespaces).len();
    let source_count = crate::plan::rule_sources(&plan_rule, &sources).len();
    let desired = desired_copies(&plan_rule, &sources, &namespaces);
    let owned = caches.owned_copies(&id);
    let plan = diff(&id, &desired, &owned, rule.spec.prune);
    tracing::debug!(
        rule = %id, desired = desired.len(), in_sync = plan.in_sync, missing = plan.missing.len(),
        update = plan.update.len(), delete = plan.delete.len(), "plan"
    );

    let writer = Writer::new(&data.ctx, caches, &id, rule.spec.on_conflict);
    let mut ops: Vec<Op<'_>> = Vec::with_capacity(plan.writes());
    ops.extend(plan.missing.iter().map(|(k, s)| Op::Missing(k, s)));
    ops.extend(plan.update.iter().filter_map(|(k, s)| owned.get(k).map(|e| Op::Update(k, s, e))));
    ops.extend(plan.delete.iter().map(Op::Delete));
    let outcomes = run_ops(&writer, ops, data.options.concurrency).await;

    let mut summary = Summary {
        sources: source_count,
        namespaces: target_count,
        desired: desired.len(),
        in_sync: plan.in_sync,
        ..Default::default()
    };
    let (mut created, mut updated, mut deleted, mut adopted) = (0, 0, 0, Vec::new());
    for o in outcomes {
        match o {
            Outcome::InSync => summary.in_sync += 1,
            Outcome::Created => {
                created += 1;
                summary.in_sync += 1;
            }
            Outcome::Updated => {
                updated += 1;
                summary.in_sync += 1;
            }
            Outcome::Adopted(k) => {
                adopted.push(k);
                summary.in_sync += 1;
            }
            Outcome::Deleted => deleted += 1,
            Outcome::Conflict(c) => summary.conflicts.push(c),
            Outcome::Failed { key, action, error } => summary.failures.push(format!("{action} {key}: {error}")),
        }
    }
    // Events: new conflicts, what was written, failures.
    let known: HashSet<(String, String)> = previous
        .map(|p| p.conflicting.iter().map(|c| (c.namespace.clone(), c.name.clone())).collect())
        .unwrap_or_default();
    for c in
        summary.conflicts.iter().filter(|c| !known.contains(&(c.namespace.clone(), c.name.clone()))).take(MAX_EVENTS)
    {
        data.ctx.events.warning(
            &oref,
            "Conflict",
            "Copy",
            format!("{} {}/{} left alone ({}): {}", rule.spec.kind.as_str(), c.namespace, c.name, c.reason, c.message),
        );
    }
    for k in adopted.iter().take(MAX_EVENTS) {
        data.ctx.events.normal(
            &oref,
            "Adopted",
            "Copy",
            format!("{k} had no ownership label and was adopted (onConflict: Overwrite)"),
        );
    }
    let writes = created + updated + deleted + adopted.len();
    if writes > 0 {
        data.ctx.events.normal(
            &oref,
            "Synced",
            "Copy",
            format!("created {created}, updated {updated}, deleted {deleted} {} cop(ies)", rule.spec.kind.as_str()),
        );
    }
    if let Some(first) = summary.failures.first() {
        data.ctx.events.warning(&oref, "SyncFailed", "Copy", first.clone());
    }
    caches.metrics().set_rule(&id, summary.sources, summary.desired, summary.in_sync, summary.conflicts.len());

    write_status(rule, data, &summary, writes > 0).await?;
    if !summary.failures.is_empty() {
        return Err(Error::Writes { failed: summary.failures.len(), first: summary.failures[0].clone() });
    }
    Ok(Action::requeue(if summary.conflicts.is_empty() { RESYNC } else { CONFLICT_RECHECK }))
}

async fn write_status(rule: &CopyRule, data: &Data, summary: &Summary, wrote: bool) -> Result<(), Error> {
    let previous = rule.status.as_ref();
    let mut new = status::build(previous, rule.metadata.generation, summary);
    if previous.is_some_and(|p| status::same(p, &new)) && !wrote {
        return Ok(());
    }
    new.last_sync_time = Some(Time(Timestamp::now()));
    let ns = rule.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<CopyRule> = Api::namespaced(data.ctx.client.clone(), &ns);
    data.caches.metrics().request("status");
    flotilla_shared::apply_status(&api, &rule.name_any(), &data.ctx.field_manager, &new)
        .await
        .map_err(Error::Status)?;
    Ok(())
}

/// The rule is being deleted: prune its copies (when `prune`), stop its watches.
async fn cleanup(rule: &CopyRule, data: &Data) -> Result<Action, Error> {
    let id = rule_id(rule)?;
    let caches = &data.caches;
    caches.stop_sources(&id);
    caches.metrics().forget_rule(&id);
    if !rule.spec.prune {
        return Ok(Action::await_change());
    }
    let writer = Writer::new(&data.ctx, caches, &id, rule.spec.on_conflict);
    // Ask the API, not the cache: a copy written a moment ago is pruned too.
    let mut copies = Vec::new();
    for kind in SourceKind::ALL {
        let api: Api<DynamicObject> = Api::all_with(data.ctx.client.clone(), &api_resource(kind));
        caches.metrics().request("list");
        let list = api
            .list_metadata(&ListParams::default().labels(&format!("{RULE_LABEL}={}", id.label_value())))
            .await
            .map_err(Error::List)?;
        copies.extend(
            list.items
                .iter()
                .filter_map(|o| serde_json::to_value(o).ok())
                .filter_map(|v| Existing::from_json(kind, &v))
                .filter(|e| e.owned_by(&id)),
        );
    }
    let outcomes = run_ops(&writer, copies.iter().map(Op::Delete).collect(), data.options.concurrency).await;
    let failures: Vec<String> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Failed { key, action, error } => Some(format!("{action} {key}: {error}")),
            _ => None,
        })
        .collect();
    if let Some(first) = failures.first() {
        data.ctx.events.warning(&rule.object_ref(&()), "PruneFailed", "Delete", first.clone());
        return Err(Error::Writes { failed: failures.len(), first: first.clone() });
    }
    tracing::info!(rule = %id, pruned = copies.len(), "rule deleted: copies pruned");
    Ok(Action::await_change())
}
