//! The level-triggered loop: a Service cache (watch), and a sync — desired
//! from the cache, current from Route53, `plan`, apply — after each burst of
//! Service events (debounced) and every `--interval`. A failed sync is
//! retried with backoff, however many events arrive meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime};

use flotilla_shared::Context;
use flotilla_shared::projection::{self, Store};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;

use crate::apply::{Applied, apply, update_zone};
use crate::batch::{Limits, full_batches, oldest_first};
use crate::config::{Config, ZoneSource};
use crate::desired::{Claim, Desired, Naming, desired, resource_id};
use crate::metrics::DnsMetrics;
use crate::model::{Action, RecordSet};
use crate::plan::{ChangeGroup, ChangeKind, Plan, plan_keeping};
use crate::report::{self, Reporter};
use crate::route53::{Route53, Route53Error, jittered_backoff};
use crate::service::ServiceInfo;

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
    #[error("{failed} of {total} record changes failed; first: {first}")]
    Changes { failed: usize, total: usize, first: Route53Error },
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// Which zone, resolved.
#[derive(Debug, Clone)]
pub struct Zone {
    pub id: String,
    pub name: String,
}

/// Finds the zone (`--hosted-zone-id` or the one zone named `--domain-name`).
/// Route53 being unreachable is retried until `shutdown`; a zone that does
/// not exist, or several with that name, is a configuration error.
pub async fn resolve_zone(
    r53: &Route53,
    source: &ZoneSource,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Result<Option<Zone>, Error> {
    let mut attempt = 0;
    loop {
        let result = match source {
            ZoneSource::Id { id, domain: Some(d) } => return Ok(Some(Zone { id: id.clone(), name: d.clone() })),
            ZoneSource::Id { id, domain: None } => match r53.zone_name(id).await {
                Ok(name) => return Ok(Some(Zone { id: id.clone(), name })),
                Err(e) if e.code == "NoSuchHostedZone" => {
                    return Err(flotilla_shared::ConfigError::new(
                        "hosted-zone-id",
                        format!("no hosted zone {id}: {}", e.message),
                    )
                    .into());
                }
                Err(e) => e,
            },
            ZoneSource::Domain(d) => match r53.zones_named(d).await {
                Ok(zones) if zones.len() == 1 => {
                    let z = &zones[0];
                    return Ok(Some(Zone { id: z.id.clone(), name: z.name.clone() }));
                }
                Ok(zones) if zones.is_empty() => {
                    return Err(flotilla_shared::ConfigError::new(
                        "domain-name",
                        format!("no hosted zone is named {d}"),
                    )
                    .into());
                }
                Ok(zones) => {
                    let ids: Vec<&str> = zones.iter().map(|z| z.id.as_str()).collect();
                    return Err(flotilla_shared::ConfigError::new(
                        "domain-name",
                        format!(
                            "{} hosted zones are named {d} ({}); choose one with --hosted-zone-id",
                            zones.len(),
                            ids.join(", ")
                        ),
                    )
                    .into());
                }
                Err(e) => e,
            },
        };
        attempt += 1;
        let wait = jittered_backoff(attempt, Duration::from_secs(1), Duration::from_secs(60));
        tracing::warn!(error = %result, retry_in = ?wait, "looking up the hosted zone failed; retrying");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return Ok(None),
        }
    }
}

/// The operator: watch Services, sync the zone, until shutdown.
pub async fn run(ctx: Context, cfg: Config) -> Result<(), Error> {
    let metrics = DnsMetrics::new()?;
    metrics.register(&ctx.metrics)?;
    let shutdown = ctx.shutdown_token();
    ctx.readiness().register(CONTROLLER);
    let r53 = Route53::from_env(cfg.route53_rps, metrics.clone()).await;
    let Some(zone) = resolve_zone(&r53, &cfg.zone, &shutdown).await? else { return Ok(()) };
    tracing::info!(zone = %zone.id, domain = %zone.name, owner = %cfg.owner_id, policy = ?cfg.policy, dry_run = cfg.dry_run, "managing the hosted zone");

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
    let watch = watcher(api, wc).default_backoff();
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

    // Never plan from an unsynced cache: an empty one would delete everything.
    tokio::select! {
        r = store.wait_until_ready() => if r.is_err() { return Ok(()) },
        _ = shutdown.cancelled() => return Ok(()),
    }
    tracing::info!("Service cache synced");

    let naming = Naming {
        template: cfg.template.clone(),
        prefix: cfg.prefix.clone(),
        domain: zone.name.clone(),
        default_ttl: cfg.ttl,
    };
    let mut syncer = Syncer {
        cfg: cfg.clone(),
        zone,
        naming,
        r53,
        metrics,
        reporter: Reporter::new(Some(ctx.events.clone())),
        store,
        zone_cache: None,
        listed: false,
        first_planned: HashMap::new(),
        held_since: None,
    };
    let reconcile = ctx.metrics.controller(CONTROLLER);
    let mut failures: u32 = 0;
    let mut next_full = tokio::time::Instant::now();
    // Startup counts as an event: the first sync covers every Service.
    let mut events = Unsynced::default();
    events.saw_one();
    let mut last_sync = tokio::time::Instant::now();
    let check_every = cfg.debounce.max(BATCH_CHECK);
    loop {
        // Idle: wait for an event or the resync tick.
        if events.first.is_none() && syncer.held_since.is_none() {
            tokio::select! {
                _ = tokio::time::sleep_until(next_full) => {}
                got = rx.recv() => match got {
                    Some(()) => events.saw_one(),
                    None => break,
                },
                _ = shutdown.cancelled() => break,
            }
        }
        // An event that arrived during the last sync: the stream's last
        // event is now, not before that sync (else a sync longer than the
        // debounce would look like the stream's end).
        if rx.try_recv().is_ok() {
            events.saw_one();
        }
        // Gather the burst: sync everything once the stream pauses for a
        // `--debounce` or its oldest unsent change has waited
        // `--max-batch-delay`; meanwhile, every `check_every`, send the
        // requests that are full (`hold`).
        let hold = loop {
            let oldest = [events.first, syncer.held_since].into_iter().flatten().min();
            let cap = oldest.map_or(tokio::time::Instant::now(), |t| (t + cfg.max_batch_delay).into());
            // Inside a stream (changes held), a pause of one debounce is not
            // its end: a loaded API server stalls creations that long.
            let quiet = if syncer.held_since.is_some() { check_every } else { cfg.debounce };
            let due = (events.last + quiet).min(cap);
            let check = last_sync + check_every;
            tokio::select! {
                got = rx.recv() => match got {
                    Some(()) => events.saw_one(),
                    None => break false,
                },
                _ = tokio::time::sleep_until(due) => break false,
                _ = tokio::time::sleep_until(check), if check < due => break true,
                _ = shutdown.cancelled() => break false,
            }
        };
        if shutdown.is_cancelled() {
            break;
        }
        events.first = None;
        reconcile.active.inc();
        let started = Instant::now();
        let full = tokio::time::Instant::now() >= next_full;
        syncer.listed = false;
        let result = syncer.sync(full, hold).await;
        let took = started.elapsed();
        last_sync = tokio::time::Instant::now();
        reconcile.time.observe(took.as_secs_f64());
        syncer.metrics.sync_duration.observe(took.as_secs_f64());
        reconcile.active.dec();
        ctx.readiness().set_synced(CONTROLLER);
        // A sync of thousands of records frees megabytes: give them back.
        flotilla_shared::memory::release_free_memory();
        match result {
            Ok(()) => {
                failures = 0;
                reconcile.success.inc();
                if syncer.listed {
                    next_full = tokio::time::Instant::now() + cfg.interval;
                }
            }
            Err(e) => {
                failures += 1;
                reconcile.error.inc();
                reconcile.errors.inc();
                syncer.metrics.sync_errors.inc();
                let wait = jittered_backoff(failures, Duration::from_secs(1), cfg.interval.max(Duration::from_secs(1)));
                tracing::warn!(error = %e, retry_in = ?wait, "sync failed");
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
    tracing::info!("stopped");
    Ok(())
}

/// The Service events not yet covered by a sync.
struct Unsynced {
    /// When the first of them came (None: there are none).
    first: Option<Instant>,
    /// When the last one came: the stream has paused when this is old.
    last: tokio::time::Instant,
}

impl Default for Unsynced {
    fn default() -> Self {
        Self { first: None, last: tokio::time::Instant::now() }
    }
}

impl Unsynced {
    fn saw_one(&mut self) {
        self.first.get_or_insert_with(Instant::now);
        self.last = tokio::time::Instant::now();
    }
}

struct Syncer {
    cfg: Config,
    zone: Zone,
    naming: Naming,
    r53: Route53,
    metrics: DnsMetrics,
    reporter: Reporter,
    store: Store<ServiceInfo>,
    /// The zone as of the last sync (None: list it next time).
    zone_cache: Option<Vec<RecordSet>>,
    /// Whether the last sync listed the zone in full.
    listed: bool,
    /// When each unsent change (by name) was first planned: changes are
    /// sent oldest first.
    first_planned: HashMap<String, Instant>,
    /// The oldest change the last sync held back for a fuller request.
    held_since: Option<Instant>,
}

fn describe(records: &[RecordSet]) -> String {
    let values: Vec<&str> = records.iter().flat_map(|r| r.values.iter().map(String::as_str)).collect();
    values.join(", ")
}

fn note(g: &ChangeGroup, dry_run: bool) -> (&'static str, String) {
    let verb = match (g.kind, dry_run) {
        (ChangeKind::Created, false) => "created",
        (ChangeKind::Updated, false) => "updated",
        (ChangeKind::Deleted, false) => "deleted",
        (ChangeKind::Created, true) => "dry run: would create",
        (ChangeKind::Updated, true) => "dry run: would update",
        (ChangeKind::Deleted, true) => "dry run: would delete",
    };
    let reason = match (g.kind, dry_run) {
        (_, true) => report::DRY_RUN,
        (ChangeKind::Created, _) => report::CREATED,
        (ChangeKind::Updated, _) => report::UPDATED,
        (ChangeKind::Deleted, _) => report::DELETED,
    };
    let text = match g.kind {
        ChangeKind::Created => format!("{verb} dns {} → {}", g.name, describe(&g.after)),
        ChangeKind::Updated => format!("{verb} dns {} → {} (was {})", g.name, describe(&g.after), describe(&g.before)),
        ChangeKind::Deleted => format!("{verb} dns {} → {}", g.name, describe(&g.before)),
    };
    (reason, text)
}

impl Syncer {
    /// One sync. `hold`: send only full requests and keep the rest for later
    /// (a stream of changes is still arriving).
    async fn sync(&mut self, full: bool, hold: bool) -> Result<(), Error> {
        let services = self.store.state();
        let mut uids: BTreeMap<String, Option<String>> = BTreeMap::new();
        let mut claims: Vec<Claim> = Vec::new();
        // Services skipped for bad input keep what they have.
        let mut keep: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        for svc in &services {
            let resource = resource_id(&svc.namespace, &svc.name);
            let uid = svc.uid.clone();
            uids.insert(resource.clone(), uid.clone());
            match desired(svc, &self.naming) {
                Desired::Publish(c) => claims.push(c),
                Desired::Skip { reason, message } => {
                    self.reporter.standing(&resource, uid, false, reason, "", message);
                }
                Desired::Invalid { reason, message } => {
                    keep.insert(resource.clone());
                    self.reporter.standing(&resource, uid, true, reason, "", message);
                }
                Desired::Quiet => {}
            }
        }
        let uid_of = |r: &str| uids.get(r).cloned().flatten();

        // The zone: listed in full at every resync (and after any failure);
        // in between, the copy kept up to date with our own changes.
        let current = match self.zone_cache.take() {
            Some(c) if !full => c,
            _ => match self.r53.list(&self.zone.id).await {
                Ok(c) => {
                    self.listed = true;
                    c
                }
                Err(e) => {
                    self.reporter.end_sync(|reason| reason != report::DRY_RUN);
                    return Err(e.into());
                }
            },
        };
        let mut p: Plan = plan_keeping(&claims, &keep, &current, &self.cfg.owner_id, self.cfg.policy);
        let since = oldest_first(&mut p.groups, &self.first_planned, Instant::now());
        tracing::debug!(
            services = services.len(),
            records = current.len(),
            changes = p.groups.len(),
            conflicts = p.conflicts.len(),
            "planned"
        );
        self.metrics.conflicts.set(p.conflicts.len() as i64);
        for c in &p.conflicts {
            if self.reporter.standing(&c.resource, uid_of(&c.resource), true, report::CONFLICT, &c.name, c.message()) {
                self.metrics.conflicts_total.inc();
            }
        }
        if self.cfg.dry_run {
            for g in &p.groups {
                let (reason, text) = note(g, true);
                self.reporter.standing(&g.resource, uid_of(&g.resource), false, reason, &g.name, text);
            }
            self.metrics.managed_records.set(count_owned(&current, &self.cfg.owner_id) as i64);
            self.reporter.end_sync(|_| false);
            self.metrics.last_success.set(unix_now());
            self.zone_cache = Some(current);
            return Ok(());
        }

        // Apply: whole batches; a failed batch is retried name by name.
        let limits = Limits::default();
        let sending = if hold { full_batches(&p.groups, limits) } else { p.groups.len() };
        let (to_send, held) = p.groups.split_at(sending);
        self.held_since = held.iter().filter_map(|g| since.get(&g.name)).min().copied();
        if !held.is_empty() {
            tracing::debug!(sending = to_send.len(), held = held.len(), "holding a partial request for more changes");
        }
        let (r53, zone_id) = (&self.r53, self.zone.id.as_str());
        let Applied { done, failed } =
            apply(to_send, limits, |batch| async move { r53.change(zone_id, &batch).await }).await;
        self.first_planned = since;
        for (_, groups) in &done {
            for g in groups {
                self.first_planned.remove(&g.name);
            }
        }
        let mut applied_records = 0i64;
        for (_, groups) in &done {
            for g in groups {
                for c in &g.changes {
                    let action = match c.action {
                        Action::Create => "create",
                        Action::Upsert => "upsert",
                        Action::Delete => "delete",
                    };
                    self.metrics.changes.with_label_values(&[action]).inc();
                }
                applied_records += g.after.len() as i64 - g.before.len() as i64;
            }
        }
        for (g, e) in &failed {
            let text = format!(
                "could not {} dns {}: {}: {}",
                match g.kind {
                    ChangeKind::Created => "create",
                    ChangeKind::Updated => "update",
                    ChangeKind::Deleted => "delete",
                },
                g.name,
                e.code,
                e.message
            );
            self.reporter.standing(&g.resource, uid_of(&g.resource), true, report::ROUTE53_ERROR, &g.name, text);
        }
        let before = count_owned(&current, &self.cfg.owner_id) as i64;
        self.metrics.managed_records.set(before + applied_records);

        // Wait for INSYNC (bounded), then say what was done.
        let deadline = Instant::now() + self.cfg.insync_timeout;
        for (id, groups) in &done {
            let left = deadline.saturating_duration_since(Instant::now());
            let status = match self.r53.wait_insync(id, left).await {
                Ok(true) => format!("Route53 change {} INSYNC", crate::route53::short_zone_id(id)),
                Ok(false) => format!(
                    "Route53 change {} submitted, not INSYNC after {:?}",
                    crate::route53::short_zone_id(id),
                    self.cfg.insync_timeout
                ),
                Err(e) => format!(
                    "Route53 change {} submitted; GetChange failed: {}",
                    crate::route53::short_zone_id(id),
                    e.code
                ),
            };
            for g in groups {
                let (reason, text) = note(g, false);
                self.reporter.action(&g.resource, uid_of(&g.resource), reason, format!("{text} ({status})"));
            }
        }
        self.reporter.end_sync(|_| false);
        if failed.is_empty() {
            let applied: Vec<&ChangeGroup> = done.iter().flat_map(|(_, g)| g.iter().copied()).collect();
            self.zone_cache = Some(update_zone(current, &applied));
        }
        match failed.into_iter().next() {
            Some((_, first)) => {
                let total = to_send.len();
                let failed = total - done.iter().map(|(_, g)| g.len()).sum::<usize>();
                Err(Error::Changes { failed, total, first })
            }
            None => {
                self.metrics.last_success.set(unix_now());
                Ok(())
            }
        }
    }
}

fn count_owned(current: &[RecordSet], owner: &str) -> usize {
    let owned: std::collections::BTreeSet<&str> = current
        .iter()
        .filter(|r| crate::registry::ownership_of(r).is_some_and(|o| o.owner == owner))
        .filter_map(|r| crate::hostname::owned_name_of_txt(&r.name))
        .collect();
    current.iter().filter(|r| r.rtype.is_managed() && r.foreign.is_none() && owned.contains(r.name.as_str())).count()
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}
