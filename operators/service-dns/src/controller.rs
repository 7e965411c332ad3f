//! The level-triggered loop: a Service cache (watch), the namespaces'
//! hostname grants (a metadata watch, [`crate::namespaces`]), and a sync
//! (see [`crate::sync`]) after Service or grant changes and every
//! `--interval`.
//!
//! Batching costs nothing when there is nothing to batch: the first event
//! on an idle loop is synced at once (leading edge: one request for one
//! change). Events that arrive while a request is in flight, or during a
//! stream, are gathered: a sync once the stream pauses for `--debounce`,
//! full requests as they fill, and nothing held past `--max-batch-delay`.
//! A sync that failed because Route53 was unavailable or throttling is
//! retried with backoff, however many events arrive meanwhile; a single
//! refused name does not fail the sync (it is quarantined).

use std::time::{Duration, Instant};

use flotilla_shared::Context;
use flotilla_shared::projection;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::runtime::watcher;
use tokio::sync::mpsc;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::desired::resource_id;
use crate::grant::HostnameAnnotations;
use crate::metrics::DnsMetrics;
use crate::namespaces::{self, Grants};
use crate::owner;
use crate::report::Reporter;
use crate::route53::{Route53, Route53Error, jittered_backoff};
use crate::service::ServiceInfo;
use crate::sync::{Caches, Synced, Syncer, sync_backoff};
use crate::zone::resolve_zone;

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

/// The operator: watch Services, sync the zone, until shutdown.
pub async fn run(ctx: Context, cfg: Config) -> Result<(), Error> {
    let metrics = DnsMetrics::new()?;
    metrics.register(&ctx.metrics)?;
    let shutdown = ctx.shutdown_token();
    ctx.readiness().register_leader_work(CONTROLLER);
    let r53 = Route53::from_env(cfg.route53_rps, cfg.route53_timeout, metrics.clone()).await;
    let Some(zone) = resolve_zone(&r53, &cfg.zone, &shutdown).await? else { return Ok(()) };
    let Some(owner_id) = owner_id(&ctx, &cfg, &shutdown).await else { return Ok(()) };
    tracing::info!(zone = %zone.id, domain = %zone.name, owner = %owner_id, policy = ?cfg.policy, dry_run = cfg.dry_run, adopt_external_dns_owner = ?cfg.adopt.as_ref().map(|a| &a.owner), "managing the hosted zone");

    let api: Api<Service> = match &cfg.watch_namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let mut wc = watcher::Config::default();
    if let Some(sel) = &cfg.service_selector {
        wc = wc.labels(sel);
    }
    // The cache keeps a ServiceInfo per Service, not the Service.
    let (store, mut writer) = projection::store::<ServiceInfo>();
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let grants_tx = tx.clone();
    let services = ctx.readiness().watch("services");
    let watch = services.watcher(api, wc);
    let watch_shutdown = shutdown.clone();
    let watch_task = tokio::spawn(async move {
        let mut watch = std::pin::pin!(watch);
        loop {
            let ev = tokio::select! {
                ev = watch.next() => ev,
                _ = watch_shutdown.cancelled() => break,
            };
            match ev {
                Some(Ok(ev)) => {
                    writer.apply(ev, |svc| {
                        let info = ServiceInfo::from(svc);
                        (resource_id(&info.namespace, &info.name), info)
                    });
                    let _ = tx.try_send(());
                }
                Some(Err(e)) => tracing::warn!(error = %e, "watching Services"),
                None => break,
            }
        }
    });

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
    tokio::select! {
        r = grants.wait_until_ready() => if r.is_err() { return Ok(()) },
        _ = shutdown.cancelled() => return Ok(()),
    }

    let reporter = Reporter::new(Some(ctx.events.clone()));
    let caches = Caches { services: store, grants };
    let mut syncer = Syncer::new(cfg.clone(), owner_id, zone, r53, metrics.clone(), reporter, caches);
    // A standby keeps its cache warm; only the leader writes to the zone.
    if !ctx.is_leading() {
        tracing::info!("standing by: the cache is kept, the first sync waits for the lease");
        if !ctx.leading().await {
            watch_task.abort();
            if let Some(t) = grants_task {
                t.abort();
            }
            return Ok(());
        }
    }
    let reconcile = ctx.metrics.controller(CONTROLLER);
    let mut failures: u32 = 0;
    let mut next_full = tokio::time::Instant::now();
    // Startup counts as an event: the first sync covers every Service.
    let mut events = Unsynced::default();
    events.saw_one();
    let mut last_sync = tokio::time::Instant::now();
    let check_every = cfg.debounce.max(BATCH_CHECK);
    loop {
        // An event that arrived during the last sync: it was not sent with
        // the request then in flight, so it is batched with what follows
        // (and the stream's last event is now, not before that sync, else
        // a sync longer than the debounce would look like the stream's end).
        let streaming = rx.try_recv().is_ok();
        if streaming {
            events.saw_one();
        }
        // Idle: wait for an event, a quarantined name's retry or the resync
        // tick. An event on an idle loop is synced at once — idle meaning no
        // sync for a `--debounce` either: a burst whose first creates
        // trickle in (a loaded API server) would otherwise send each of
        // them alone, one leading edge after the other.
        let mut leading = false;
        if events.first.is_none() && syncer.held_since().is_none() {
            // Nothing pending: whatever stream there was has ended.
            events.stream_ended();
            let wake = syncer.next_retry().map_or(next_full, |t| next_full.min(t.into()));
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                got = rx.recv() => match got {
                    Some(()) => {
                        events.saw_one();
                        leading = last_sync.elapsed() >= cfg.debounce;
                    }
                    None => break,
                },
                _ = shutdown.cancelled() => break,
            }
        }
        // Gather the burst: sync everything once the stream pauses for a
        // `--debounce`; meanwhile, every `check_every`, send the requests
        // that are full (`hold`), and what has waited `--max-batch-delay`.
        let hold = !leading
            && loop {
                let oldest = [events.first, syncer.held_since()].into_iter().flatten().min();
                let cap = oldest.map_or(tokio::time::Instant::now(), |t| (t + cfg.max_batch_delay).into());
                // Inside a stream (changes held, or events that came while a
                // request was in flight), a pause of one debounce is not its
                // end: a loaded API server stalls creations that long, and
                // longer — see `Unsynced::stream_quiet`.
                let quiet = if syncer.held_since().is_some() || streaming {
                    events.stream_quiet(check_every)
                } else {
                    cfg.debounce
                };
                let paused = events.last + quiet;
                let due = paused.min(cap);
                let check = last_sync + check_every;
                tokio::select! {
                    got = rx.recv() => match got {
                        Some(()) => events.saw_next(),
                        None => break false,
                    },
                    // The stream paused, or an event not yet planned waited
                    // `--max-batch-delay`: send it all. A held change that
                    // waited that long while the stream goes on goes with
                    // the full requests instead (`batch::sending`): a partial
                    // request only if the full ones cannot carry it.
                    _ = tokio::time::sleep_until(due) => {
                        let held_is_oldest =
                            syncer.held_since().is_some_and(|h| events.first.is_none_or(|f| h <= f));
                        break due < paused && held_is_oldest;
                    }
                    _ = tokio::time::sleep_until(check), if check < due => break true,
                    _ = shutdown.cancelled() => break false,
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
        events.first = None;
        reconcile.active.inc();
        let running = reconcile.running.start();
        let started = Instant::now();
        // A full listing that falls due inside a stream waits for the sync
        // that ends it (the stream's pause, or `--max-batch-delay`): listing
        // thousands of records between two full requests delays the rest of
        // the burst, and the oldest held change with it, which is what cuts a
        // burst into more requests than its size needs.
        let full = tokio::time::Instant::now() >= next_full && !hold;
        // Leadership suspended mid-sync: the sync is dropped where it waits
        // (its zone copy with it, so the next sync lists the zone afresh).
        let outcome = tokio::select! {
            biased;
            () = ctx.suspended() => None,
            r = syncer.sync(full, hold) => Some(r),
        };
        let Some(result) = outcome else {
            drop(running);
            reconcile.active.dec();
            tracing::warn!("sync cancelled: leadership suspended");
            events.saw_one();
            continue;
        };
        let took = started.elapsed();
        last_sync = tokio::time::Instant::now();
        reconcile.time.observe(took.as_secs_f64());
        reconcile.work_duration.observe(took.as_secs_f64());
        metrics.sync_duration.observe(took.as_secs_f64());
        drop(running);
        reconcile.active.dec();
        ctx.readiness().set_synced(CONTROLLER);
        // A sync of thousands of records frees megabytes: give them back.
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
                events.saw_one();
            }
        }
    }
    watch_task.abort();
    if let Some(t) = grants_task {
        t.abort();
    }
    tracing::info!("stopped");
    Ok(())
}

/// Watches the Namespaces' metadata for hostname grants (all of them, or the
/// `--watch-namespace`); a grant added, changed or removed triggers a sync.
fn watch_grants(
    ctx: &Context,
    cfg: &Config,
    tx: mpsc::Sender<()>,
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
                        let _ = tx.try_send(());
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

/// The Service events not yet covered by a sync.
struct Unsynced {
    /// When the first of them came (None: there are none).
    first: Option<Instant>,
    /// When the last one came: the stream has paused when this is old.
    last: tokio::time::Instant,
    /// The longest pause between two events of the current stream, as seen
    /// while gathering (a pause across a sync measures the sync, not the
    /// stream, and is not counted).
    longest_gap: Duration,
}

impl Default for Unsynced {
    fn default() -> Self {
        Self { first: None, last: tokio::time::Instant::now(), longest_gap: Duration::ZERO }
    }
}

impl Unsynced {
    /// An event seen after a sync (or on an idle loop): no gap measured.
    fn saw_one(&mut self) {
        self.first.get_or_insert_with(Instant::now);
        self.last = tokio::time::Instant::now();
    }

    /// An event seen while gathering a stream: the pause before it counts.
    fn saw_next(&mut self) {
        let now = tokio::time::Instant::now();
        self.longest_gap = self.longest_gap.max(now.saturating_duration_since(self.last));
        self.first.get_or_insert_with(Instant::now);
        self.last = now;
    }

    fn stream_ended(&mut self) {
        self.longest_gap = Duration::ZERO;
    }

    /// How long a stream must pause before its partial request is sent:
    /// at least `check_every`, and twice the longest pause the stream has
    /// already had. A stream whose creations stall for 1.5 s now and then
    /// (an API server on 2 busy cores) is not taken to have ended at each
    /// stall — every such stall would cost a partial request — while a
    /// steady stream still ends after `check_every`. `--max-batch-delay`
    /// bounds the wait whatever this says.
    fn stream_quiet(&self, check_every: Duration) -> Duration {
        check_every.max(self.longest_gap.saturating_mul(2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_stalled_must_pause_longer_to_end() {
        let check = Duration::from_secs(1);
        let mut ev = Unsynced::default();
        ev.saw_one();
        for _ in 0..10 {
            tokio::time::advance(Duration::from_millis(50)).await;
            ev.saw_next();
        }
        assert_eq!(ev.stream_quiet(check), check, "a steady stream ends after check_every");
        tokio::time::advance(Duration::from_millis(1500)).await;
        ev.saw_next();
        assert_eq!(ev.stream_quiet(check), Duration::from_secs(3), "twice the longest stall");
        // A pause across a sync (events seen after it) is not a stall.
        tokio::time::advance(Duration::from_secs(6)).await;
        ev.saw_one();
        assert_eq!(ev.stream_quiet(check), Duration::from_secs(3));
        ev.stream_ended();
        assert_eq!(ev.stream_quiet(check), check, "a new stream starts afresh");
    }
}
