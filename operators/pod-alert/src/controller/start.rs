//! Starting the PodAlert controller: its watches (PodAlerts cached without
//! their status, pods as small views), the shared state every reconcile
//! reads, and the tasks beside the controller (garbage collection).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flotilla_shared::backoff::ErrorBackoff;
use flotilla_shared::health::WatchHealth;
use flotilla_shared::per_object::PerObject;
use flotilla_shared::pods::LabelKeys;
use flotilla_shared::projection;
use flotilla_shared::{AdmissionGuard, Context, Controller, FromSpecs};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::watcher;

use super::{Data, Options, PODALERT_PAGE, Restored, error_policy, reconcile};
use crate::crd::PodAlert;
use crate::delivery::Delivery;
use crate::logs::Tails;
use crate::metrics::AlertMetrics;
use crate::pod::{PodView, view};
use crate::redact::Redactor;
use crate::status;
use crate::throttle::Limiter;

/// Runs the controller until shutdown.
pub async fn run(ctx: Context, options: Options) -> anyhow::Result<()> {
    let metrics = AlertMetrics::new()?;
    metrics.register(&ctx.metrics)?;
    let (alerts_api, pods_api): (Api<PodAlert>, Api<Pod>) = match &options.watch_namespace {
        Some(ns) => (Api::namespaced(ctx.client.clone(), ns), Api::namespaced(ctx.client.clone(), ns)),
        None => (Api::all(ctx.client.clone()), Api::all(ctx.client.clone())),
    };
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let tails = Arc::new(Tails::new(options.max_log_bytes));
    let restored: Arc<Mutex<Restored>> = Arc::default();
    let stash = {
        let (tails, restored) = (Arc::clone(&tails), Arc::clone(&restored));
        move |pa: &mut PodAlert| stash_status(pa, &tails, &restored)
    };
    let config = watcher::Config::default().page_size(PODALERT_PAGE);
    let admission = AdmissionGuard::for_operator(&ctx, &options.admission).await?;
    let controller = Controller::new_modified(alerts_api, config, stash)
        .debounce(Duration::from_millis(500))
        .concurrency(8)
        .reconcile_on(rx)
        .reconcile_all_on(admission.changes());
    let http = crate::delivery::http_client(options.sink_timeout, Arc::clone(&options.sink_rules.addresses))?;
    let (pods, writer) = projection::keyed_store::<PodView>();
    let (namespace_silences, workload_silences) = super::workload_watches::stores(options.watch_namespace.as_deref());
    let data = Arc::new(Data {
        ctx: ctx.clone(),
        metrics: metrics.clone(),
        delivery: Delivery {
            http,
            kube: ctx.client.clone(),
            metrics,
            retry: options.retry,
            leadership: ctx.leadership(),
            rules: options.sink_rules.clone(),
        },
        limiter: Mutex::new(Limiter::new(options.notifications_per_minute)),
        options,
        pods,
        alerts: controller.store(),
        served: FromSpecs::new(controller.store_changes()),
        states: PerObject::default(),
        firing: Mutex::default(),
        backoff: ErrorBackoff::default(),
        trigger: tx,
        tails,
        restored,
        label_keys: LabelKeys::only_wanted_namespaces(),
        admission,
        namespace_silences: Arc::new(namespace_silences),
        workload_silences,
        signals: super::workload_watches::Signals::watched(),
        changes: Default::default(),
    });

    let readiness = ctx.readiness().clone();
    let mut tasks = Vec::new();
    tasks.push(tokio::spawn(watch_pods(pods_api, writer, Arc::clone(&data), readiness.watch("pods"))));
    tasks.extend(super::workload_watches::spawn(&data, &readiness));
    {
        let data = Arc::clone(&data);
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(30)).await;
                data.collect_garbage();
            }
        }));
    }
    let result = ctx.run_controller("podalert", controller, reconcile, error_policy, Arc::clone(&data)).await;
    for t in tasks {
        t.abort();
    }
    result
}

/// Takes a PodAlert's status out of what the cache keeps; at first sight
/// of it, what its reconcile restores from (log tails into the shared store).
fn stash_status(pa: &mut PodAlert, tails: &Tails, restored: &Mutex<Restored>) {
    let Some(status) = pa.status.take() else { return };
    let Some(uid) = pa.metadata.uid.clone() else { return };
    let mut r = restored.lock().unwrap_or_else(PoisonError::into_inner);
    if r.seen.contains(&uid) {
        return;
    }
    let (mut book, logs) = status::restore(&status);
    let now = Timestamp::now();
    // Redacted as this spec redacts (its reconciles share these tails); a
    // spec that cannot be used gets the defaults, the safe side.
    let redactor = crate::rules::redactor(&pa.spec.logs).or_else(|_| Redactor::defaults());
    for (key, text, events) in logs {
        if let Some(inc) = book.incidents.get_mut(&key) {
            inc.logs = match &redactor {
                Ok(r) => {
                    let tail = tails.adopt(&key, r, text, now);
                    // The Events shown before the restart, until the next read.
                    if !events.is_empty() && tail.events().is_none() {
                        tail.set_events(crate::events::restored(&events, r));
                    }
                    Some(tail)
                }
                // Never: the built-in patterns compile (unit-tested). Not held, then.
                Err(_) => None,
            };
        }
    }
    r.pending.insert(uid, (book, status.conditions));
}

/// Keeps the pod projection and triggers the PodAlerts a change concerns.
/// Starts once the PodAlerts are listed, so that the first list of pods
/// keeps the label keys their selectors reference.
async fn watch_pods(
    api: Api<Pod>,
    writer: projection::Writer<PodView, projection::Own<PodView>>,
    data: Arc<Data>,
    health: WatchHealth,
) {
    if !flotilla_shared::pods::rules_listed(&data.alerts).await {
        return;
    }
    data.served();
    let keys = data.label_keys.clone();
    flotilla_shared::pods::watch_pods(
        api,
        writer,
        |p: &Pod| view(p, &keys),
        data.label_keys.clone(),
        health,
        |touched| {
            data.metrics.pods_cached.set(i64::try_from(data.pods.len()).unwrap_or(i64::MAX));
            let alerts = data.alerts.state();
            data.note_touched(&alerts, touched);
            // `allNamespaces` counts only where it is honoured: a refused
            // one must not wake on every pod change of the cluster.
            let everywhere = |a: &PodAlert| data.everywhere(a);
            for alert in flotilla_shared::pods::concerned(&alerts, touched, everywhere) {
                let _ = data.trigger.unbounded_send(alert);
            }
        },
    )
    .await;
}
