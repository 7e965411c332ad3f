//! The controller: the wiring (a Service cache (watch), the namespaces'
//! hostname grants (a metadata watch, [`crate::namespaces`]), the zones and
//! the owner id) and a level-triggered loop per zone: a sync (see
//! [`crate::sync`]) after Service or grant changes and every `--interval`.
//! The zones' loops share the caches and the Route53 client (its rate
//! limit is the account's) and nothing else: each has its own hold, zone
//! copy, quarantine and backoff, so one zone's outage holds no other back.
//!
//! When to sync, and whether a sync sends everything or only the full
//! requests of a stream of changes, is the hold rule's ([`crate::hold`]):
//! the loop tells it of events and syncs, and sleeps as long as it says.
//! A sync that failed because Route53 was unavailable or throttling is
//! retried with backoff, however many events arrive meanwhile; a single
//! refused name does not fail the sync (it is quarantined).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use flotilla_shared::Context;
use flotilla_shared::projection;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::runtime::watcher;
use tokio::sync::mpsc;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::Config;
use crate::endpoints::{self, SliceInfo};
use crate::grant::HostnameAnnotations;
use crate::hold::{Hold, Sending};
use crate::metrics::DnsMetrics;
use crate::namespaces::{self, Grants};
use crate::owner;
use crate::report::Reporter;
use crate::route53::{Route53, Route53Error, jittered_backoff};
use crate::service::ServiceInfo;
use crate::sync::{Caches, Synced, Syncer, sync_backoff};
use crate::zone::resolve_zones;
use crate::zones::ZoneSet;

/// The controller label of the shared reconcile metrics and readiness gate.
pub const CONTROLLER: &str = "service-dns";

/// During a stream of Service events, how often the requests that are
/// already full are sent (at least `--debounce`): a burst of creations goes
/// out in full requests as it arrives, and only its end in a partial one.
pub const BATCH_CHECK: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] flotilla_shared::ConfigError),
    #[error("{0}")]
    Route53(#[from] Route53Error),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Config(_) => "config",
            Error::Route53(_) => "route53",
            Error::Metrics(_) => "metrics",
        }
    }
}

/// The owner id: `--owner-id`, else derived from the cluster (retried
/// until shutdown: without it nothing may be written). `None`: shutdown.
async fn owner_id(ctx: &Context, cfg: &Config, shutdown: &CancellationToken) -> Option<String> {
    if let Some(id) = &cfg.owner_id {
        return Some(id.clone());
    }
    let mut failures = 0;
    loop {
        match owner::cluster_uid(&ctx.client).await {
            Ok(uid) if !uid.is_empty() => {
                let id = owner::derive(&uid, cfg.watch_namespace.as_deref(), cfg.service_selector.as_deref());
                tracing::info!(owner = %id, "no --owner-id: derived one from the kube-system namespace UID (pin it with --owner-id to keep it when the cluster is rebuilt)");
                return Some(id);
            }
            Ok(_) => tracing::warn!("namespace kube-system has no UID; cannot derive an owner id"),
            Err(e) => tracing::warn!(
                error = %e,
                "reading namespace kube-system to derive the owner id (needs get on namespaces/kube-system, or set --owner-id)"
            ),
        }
        failures += 1;
        let wait = jittered_backoff(failures, Duration::from_secs(1), Duration::from_secs(60));
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return None,
        }
    }
}

/// The operator: watch Services, sync each zone, until shutdown.
pub async fn run(ctx: Context, cfg: Config) -> Result<(), Error> {
    let metrics = DnsMetrics::new()?;
    metrics.register(&ctx.metrics)?;
    let shutdown = ctx.shutdown_token();
    ctx.readiness().register_leader_work(CONTROLLER);
    let r53 = Route53::from_env(cfg.route53_rps, cfg.route53_timeout, metrics.clone()).await;
    let Some(zones) = resolve_zones(&r53, &cfg.zones, &shutdown).await? else { return Ok(()) };
    let zones = Arc::new(ZoneSet::new(zones));
    let Some(owner_id) = owner_id(&ctx, &cfg, &shutdown).await else { return Ok(()) };
    for zone in zones.zones() {
        tracing::info!(zone = %zone.id, domain = %zone.name, owner = %owner_id, policy = ?cfg.policy, dry_run = cfg.dry_run, adopt_external_dns_owner = ?cfg.adopt.as_ref().map(|a| &a.owner), "managing the hosted zone");
    }

    let api: Api<Service> = match &cfg.watch_namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let mut wc = watcher::Config::default();
    if let Some(sel) = &cfg.service_selector {
        wc = wc.labels(sel);
    }
    // The cache keeps a ServiceInfo per Service, not the Service.
    let (store, writer) = projection::keyed_store::<ServiceInfo>();
    // One wake-up channel per zone: a change wakes every zone's loop.
    let (txs, receivers): (Vec<_>, Vec<_>) = zones.zones().iter().map(|_| mpsc::channel::<()>(1)).unzip();
    let wake = Wake(Arc::new(txs));
    let (tx, grants_tx) = (wake.clone(), wake.clone());
    let services = ctx.readiness().watch("services");
    let watch = services.watcher(api, wc);
    let watch_shutdown = shutdown.clone();
    // A sync is due when a Service's kept fields changed or a list
    // completed (the first, or a relist after a lost watch); an update that
    // leaves its `ServiceInfo` as it was (its status, an unrelated label)
    // plans nothing new and wakes nothing.
    let max_hostnames = cfg.max_hostnames;
    let watch_task = tokio::spawn(writer.feed(
        watch.take_until(watch_shutdown.cancelled_owned()),
        move |svc| {
            let info = ServiceInfo::read(svc, max_hostnames);
            (info.resource_id().to_string(), info)
        },
        move |fed| {
            if matches!(fed, projection::Fed::Listed(_)) || !fed.changes().is_empty() {
                tx.wake();
            }
        },
    ));

    // The EndpointSlices of headless Services: their addresses, held small;
    // never listed without `--publish-headless` (the chart grants no
    // endpointslices rule then).
    let slices = cfg.publish_headless.then(|| watch_slices(&ctx, &cfg, grants_tx.clone(), shutdown.clone()));

    // The namespaces' grants, read only when names need them.
    let (grants, grants_task) = if cfg.hostname_annotations == HostnameAnnotations::NamespaceAllowed {
        let (grants, task) = watch_grants(&ctx, &cfg, grants_tx, shutdown.clone());
        (grants, Some(task))
    } else {
        (namespaces::none(), None)
    };

    // Never plan from an unsynced cache: an empty one would delete everything
    // (and an empty grant cache every annotated name).
    tokio::select! {
        r = store.wait_until_ready() => if r.is_err() { return Ok(()) },
        _ = shutdown.cancelled() => return Ok(()),
    }
    tracing::info!("Service cache synced");
    services.synced();
    // An unsynced slice cache would withdraw every headless Service's records.
    if let Some((slices, slices_ready, _)) = &slices {
        tokio::select! {
            r = slices.wait_until_ready() => if r.is_err() { return Ok(()) },
            _ = shutdown.cancelled() => return Ok(()),
        }
        slices_ready.synced();
    }
    let (slices, slices_task) = match slices {
        Some((store, _, task)) => (Some(store), Some(task)),
        None => (None, None),
    };
    tokio::select! {
        r = grants.wait_until_ready() => if r.is_err() { return Ok(()) },
        _ = shutdown.cancelled() => return Ok(()),
    }

    let caches = Caches { services: store, slices, grants };
    if !ctx.is_leading() {
        tracing::info!("standing by: the cache is kept, the first sync waits for the lease");
        if !ctx.leading().await {
            watch_task.abort();
            if let Some(t) = slices_task {
                t.abort();
            }
            if let Some(t) = grants_task {
                t.abort();
            }
            return Ok(());
        }
    }
    // A loop per zone, each with its own backoff and zone copy: one zone
    // failing (Route53 refusing its listing, say) holds no other back.
    let unsynced = Arc::new(AtomicUsize::new(zones.zones().len()));
    let mut loops = tokio::task::JoinSet::new();
    for (zone, rx) in zones.zones().iter().cloned().zip(receivers) {
        let span = tracing::info_span!("zone", id = %zone.id);
        let reporter = Reporter::new(Some(ctx.events.clone()));
        let syncer = Syncer::new(
            cfg.clone(),
            owner_id.clone(),
            zone,
            Arc::clone(&zones),
            r53.clone(),
            metrics.clone(),
            reporter,
            caches.clone(),
        );
        let zone_loop =
            ZoneLoop { ctx: ctx.clone(), cfg: cfg.clone(), metrics: metrics.clone(), unsynced: Arc::clone(&unsynced) };
        loops.spawn(zone_loop.run(syncer, rx).instrument(span));
    }
    // They end together, at shutdown (or when the lease is lost). A zone's
    // loop that panicked takes the operator down as a single loop did:
    // better restarted than running on without that zone.
    while let Some(ended) = loops.join_next().await {
        if let Err(e) = ended
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    watch_task.abort();
    if let Some(t) = slices_task {
        t.abort();
    }
    if let Some(t) = grants_task {
        t.abort();
    }
    tracing::info!("stopped");
    Ok(())
}

/// Wakes every zone's loop (a change of the Services, slices or grants).
#[derive(Clone)]
struct Wake(Arc<Vec<mpsc::Sender<()>>>);

impl Wake {
    fn wake(&self) {
        for tx in self.0.iter() {
            // Full: a wake-up is already pending, which is as good.
            let _ = tx.try_send(());
        }
    }
}

/// What one zone's loop shares with the others.
struct ZoneLoop {
    ctx: Context,
    cfg: Config,
    metrics: DnsMetrics,
    /// Zones not synced once yet: ready when none is left.
    unsynced: Arc<AtomicUsize>,
}

impl ZoneLoop {
    /// The level-triggered loop of one zone, until shutdown.
    async fn run(self, mut syncer: Syncer, mut rx: mpsc::Receiver<()>) {
        let ZoneLoop { ctx, cfg, metrics, unsynced } = self;
        let shutdown = ctx.shutdown_token();
        let mut first = true;
        let reconcile = ctx.metrics.controller(CONTROLLER);
        let mut failures: u32 = 0;
        let mut next_full = tokio::time::Instant::now();
        // When to sync and what to send: the hold rule (`hold.rs`), told of
        // every event and sync.
        let mut hold = Hold::new(cfg.debounce, cfg.max_batch_delay, cfg.debounce.max(BATCH_CHECK), Instant::now());
        // Startup counts as an event: the first sync covers every Service.
        hold.event(Instant::now());
        loop {
            // An event that arrived during the last sync: it was not sent with
            // the request then in flight, so it is batched with what follows
            // (and the stream's last event is now, not before that sync, else
            // a sync longer than the debounce would look like the stream's end).
            let streaming = rx.try_recv().is_ok();
            if streaming {
                hold.event(Instant::now());
            }
            // Idle: wait for an event, a quarantined name's retry or the resync
            // tick; an event on an idle loop may go at once (`Hold::leading_edge`).
            let mut leading = false;
            if hold.idle() {
                // Nothing pending: whatever stream there was has ended.
                hold.stream_ended();
                let wake = syncer.next_retry().map_or(next_full, |t| next_full.min(t.into()));
                tokio::select! {
                    _ = tokio::time::sleep_until(wake) => {}
                    got = rx.recv() => match got {
                        Some(()) => {
                            let now = Instant::now();
                            hold.event(now);
                            leading = hold.leading_edge(now);
                        }
                        None => break,
                    },
                    _ = shutdown.cancelled() => break,
                }
            }
            // Gather the burst for as long as `Hold::wait` says; the full
            // requests go at its `check`.
            let sending = if leading {
                Sending::All
            } else {
                loop {
                    let wait = hold.wait(streaming, Instant::now());
                    let check = wait.check.unwrap_or(wait.until);
                    tokio::select! {
                        got = rx.recv() => match got {
                            Some(()) => hold.event_in_stream(Instant::now()),
                            None => break Sending::All,
                        },
                        _ = tokio::time::sleep_until(wait.until.into()) => break wait.then,
                        _ = tokio::time::sleep_until(check.into()), if wait.check.is_some() => break Sending::FullRequests,
                        _ = shutdown.cancelled() => break Sending::All,
                    }
                }
            };
            if shutdown.is_cancelled() {
                break;
            }
            // Leadership suspended (the lease not renewed in time): nothing is
            // written until it is renewed; what waits is synced then.
            if !ctx.is_leading() {
                tracing::warn!("leadership suspended: the next sync waits for the lease");
                if !ctx.leading().await {
                    break;
                }
            }
            hold.sync_starts();
            reconcile.active.inc();
            let running = reconcile.running.start();
            let started = Instant::now();
            // A full listing that falls due inside a stream waits for the sync
            // that ends it (the stream's pause, or `--max-batch-delay`): listing
            // thousands of records between two full requests delays the rest of
            // the burst, and the oldest held change with it, which is what cuts a
            // burst into more requests than its size needs.
            let full = tokio::time::Instant::now() >= next_full && sending == Sending::All;
            // Leadership suspended mid-sync: the sync is dropped where it waits
            // (its zone copy with it, so the next sync lists the zone afresh).
            let outcome = tokio::select! {
                biased;
                () = ctx.suspended() => None,
                r = syncer.sync(full, sending, &mut hold) => Some(r),
            };
            let Some(result) = outcome else {
                drop(running);
                reconcile.active.dec();
                tracing::warn!("sync cancelled: leadership suspended");
                hold.event(Instant::now());
                continue;
            };
            let took = started.elapsed();
            hold.synced(Instant::now());
            reconcile.time.observe(took.as_secs_f64());
            reconcile.work_duration.observe(took.as_secs_f64());
            metrics.sync_duration.observe(took.as_secs_f64());
            drop(running);
            reconcile.active.dec();
            // Ready once every zone tried its first sync (failed or not: a
            // zone Route53 refuses shows in the metrics and the log).
            if std::mem::take(&mut first) {
                unsynced.fetch_sub(1, Ordering::AcqRel);
            }
            if unsynced.load(Ordering::Acquire) == 0 {
                ctx.readiness().set_synced(CONTROLLER);
            }
            // A sync of thousands of records frees megabytes: give them back.
            syncer.compact();
            flotilla_shared::memory::release_free_memory();
            match result {
                Ok(Synced { listed }) => {
                    failures = 0;
                    reconcile.success.inc();
                    if listed {
                        next_full = tokio::time::Instant::now() + cfg.interval;
                    }
                }
                Err(e) => {
                    failures += 1;
                    reconcile.error.inc();
                    reconcile.errors.inc();
                    reconcile.retries.inc();
                    metrics.sync_errors.inc();
                    let wait = sync_backoff(failures, &e, cfg.interval);
                    tracing::warn!(error = %Error::Route53(e), retry_in = ?wait, "sync failed; backing off with every pending change");
                    // Backoff: events arriving meanwhile wait for it.
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = shutdown.cancelled() => break,
                    }
                    hold.event(Instant::now());
                }
            }
        }
    }
}

/// Watches the EndpointSlices of headless Services (all namespaces, or the
/// `--watch-namespace`; the API server filters by the label the
/// EndpointSlice controller puts on them, see [`crate::endpoints`]) into a
/// store of small projections; a change of what is kept (an endpoint
/// added, gone, ready or not) triggers a sync, which the hold rule runs
/// within `--debounce`.
fn watch_slices(
    ctx: &Context,
    cfg: &Config,
    tx: Wake,
    shutdown: CancellationToken,
) -> (projection::Store<SliceInfo>, flotilla_shared::health::WatchHealth, tokio::task::JoinHandle<()>) {
    let api: Api<EndpointSlice> = match &cfg.watch_namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let wc = watcher::Config::default().labels(endpoints::SELECTOR);
    let (store, writer) = projection::store::<SliceInfo>();
    let health = ctx.readiness().watch("endpointslices");
    let watch = health.watcher(api, wc);
    let task = tokio::spawn(writer.feed(
        watch.take_until(shutdown.cancelled_owned()),
        |slice| (endpoints::key(&slice), SliceInfo::from(slice)),
        move |fed| {
            if matches!(fed, projection::Fed::Listed(_)) || !fed.changes().is_empty() {
                tx.wake();
            }
        },
    ));
    (store, health, task)
}

/// Watches the Namespaces' metadata for hostname grants (all of them, or the
/// `--watch-namespace`); a grant added, changed or removed triggers a sync.
fn watch_grants(
    ctx: &Context,
    cfg: &Config,
    tx: Wake,
    shutdown: CancellationToken,
) -> (Grants, tokio::task::JoinHandle<()>) {
    let (grants, mut writer) = namespaces::cache();
    let health = ctx.readiness().watch("namespaces");
    let (api, wc) = namespaces::api_and_config(ctx.client.clone(), cfg.watch_namespace.as_deref());
    let watch = health.watcher(api, wc);
    let task = tokio::spawn(async move {
        let mut watch = std::pin::pin!(watch);
        loop {
            let ev = tokio::select! {
                ev = watch.next() => ev,
                _ = shutdown.cancelled() => break,
            };
            match ev {
                Some(Ok(ev)) => {
                    let init_done = matches!(ev, watcher::Event::InitDone);
                    if writer.apply(ev) {
                        tx.wake();
                    }
                    if init_done {
                        health.synced();
                    }
                }
                Some(Err(e)) => tracing::warn!(error = %e, "watching Namespaces (their hostname grants)"),
                None => break,
            }
        }
    });
    (grants, task)
}
