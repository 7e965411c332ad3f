//! One sync, in the suite's steps: snapshot (desired from the Service cache
//! and the namespaces' hostname grants, read once; current from Route53: a
//! full listing, or the copy kept between listings with the names back from
//! quarantine read again) → `plan` (then `hold` says how much goes now, and
//! `batch` into which requests) → `apply` → report (Events, metrics; the
//! accepted changes go to the INSYNC watcher, the refused names to
//! quarantine). The loop only calls [`Syncer::sync`]; the state kept between
//! syncs is private to this module.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use flotilla_shared::projection::{Own, Store};

use crate::apply::{apply, refresh_names, update_zone};
use crate::batch::{Applied, Limits};
use crate::config::Config;
use crate::desired::{Desired, Naming, Wish, wish};
use crate::endpoints::SliceInfo;
use crate::headless::TOO_MANY_ENDPOINTS;
use crate::hold::{Hold, Sending};
use crate::hostname::owner_txt_name;
use crate::insync::{InsyncWatcher, Note};
use crate::metrics::DnsMetrics;
use crate::model::{Action, RecordSet};
use crate::namespaces::Grants;
use crate::plan::{ChangeGroup, Conflict, ConflictCause, Plan, Rules, plan_with};
use crate::quarantine::Quarantine;
use crate::report::{self, Reporter};
use crate::route53::{FailureKind, Route53, Route53Error};
use crate::service::ServiceInfo;
use crate::zone::Zone;
use crate::zones::ZoneSet;

mod texts;
mod wanted;
use texts::{note, refusal};
use wanted::Wanted;

/// The caches a sync reads, once each, at its start (shared by the zones' syncs).
#[derive(Clone)]
pub struct Caches {
    pub services: Store<ServiceInfo, Own<ServiceInfo>>,
    /// The EndpointSlices of headless Services; `None` with
    /// `--publish-headless` off (they are never read then).
    pub slices: Option<Store<SliceInfo>>,
    /// The namespaces' hostname grants (empty unless `--hostname-annotations=namespace-allowed`).
    pub grants: Grants,
}

/// What the loop learns from a sync that went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Synced {
    /// The zone was listed in full: the next full listing is due an
    /// `--interval` from now.
    pub listed: bool,
}

/// Records made in the zone copy after which it is compacted
/// ([`Syncer::compact`]): a burst's worth, not a single Service's change.
const COMPACT_AFTER: usize = 256;

/// The sync's state between two syncs. Private: only a sync changes it; the
/// loop reads what it needs through methods.
pub struct Syncer {
    cfg: Config,
    owner_id: String,
    zone: Zone,
    naming: Naming,
    r53: Route53,
    metrics: DnsMetrics,
    reporter: Reporter,
    insync: InsyncWatcher,
    caches: Caches,
    /// The zone as of the last sync (None: list it next time).
    zone_cache: Option<Vec<RecordSet>>,
    /// Records made in the zone copy since it was last compacted, or
    /// `usize::MAX` after a listing ([`Syncer::compact`]).
    made_since_compacted: usize,
    /// Names Route53 refused, each with its own backoff.
    quarantine: Quarantine,
    /// ` in zone <id> (<domain>)` in Events when several zones are
    /// managed; empty with one.
    zone_note: String,
}

impl Syncer {
    /// The state of the sync of `zone` (one of `zones`) for `owner_id`; the
    /// accepted changes are watched until INSYNC (their Events told then)
    /// by a watcher started here.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: Config,
        owner_id: String,
        zone: Zone,
        zones: Arc<ZoneSet>,
        r53: Route53,
        metrics: DnsMetrics,
        reporter: Reporter,
        caches: Caches,
    ) -> Self {
        let naming = Naming {
            template: cfg.template.clone(),
            prefix: cfg.prefix.clone(),
            domain: zone.name.clone(),
            zone_id: zone.id.clone(),
            zones: Arc::clone(&zones),
            default_ttl: cfg.ttl,
            max_ttl: cfg.max_ttl,
            max_hostnames: cfg.max_hostnames,
            annotations: cfg.hostname_annotations,
            publish_headless: cfg.publish_headless,
            pod_template: cfg.pod_template.clone(),
            max_endpoints: cfg.max_endpoints,
            alias_load_balancers: cfg.alias_load_balancers,
        };
        let insync = InsyncWatcher::start(r53.clone(), cfg.insync_timeout, reporter.events());
        let quarantine = Quarantine::new(cfg.interval.max(Duration::from_secs(300)));
        let zone_note =
            if zones.is_several() { format!(" in zone {} ({})", zone.id, zone.name) } else { String::new() };
        metrics.zone(&zone.id, |_| {});
        Self {
            cfg,
            owner_id,
            zone,
            naming,
            r53,
            metrics,
            reporter,
            insync,
            caches,
            zone_cache: None,
            made_since_compacted: 0,
            quarantine,
            zone_note,
        }
    }

    /// The zone copy and the Service cache made again in fresh
    /// allocations, once a listing or [`COMPACT_AFTER`] changes made records
    /// of the copy. Those records were made at a sync's peak, while its
    /// claims and plan were held, above them in the heap, as were the views
    /// of the Services that came meanwhile; once the sync's work is freed,
    /// they pin pages the allocator cannot give back (1,000 Services added
    /// cost ~2.2 KiB of RSS each for ~1 KiB held). Made again after it (a
    /// few milliseconds for thousands), they fill the holes below, and the
    /// pages they leave are returned with the rest of the sync's
    /// (`memory::release_free_memory`, next in the loop).
    pub fn compact(&mut self) {
        if self.made_since_compacted < COMPACT_AFTER {
            return;
        }
        self.made_since_compacted = 0;
        if let Some(copy) = self.zone_cache.take() {
            self.zone_cache = Some(copy.to_vec());
        }
        self.caches.services.compact();
    }

    /// When a quarantined name is due for another try.
    pub fn next_retry(&self) -> Option<Instant> {
        self.quarantine.next_due()
    }

    /// The names a quarantined name's retry reads again: the name, its
    /// ownership TXT, and the adopted external-dns owner's TXT names.
    fn names_to_read(&self, name: &str) -> Vec<String> {
        let mut out = vec![name.to_string(), owner_txt_name(name)];
        if let Some(adopt) = &self.cfg.adopt {
            out.extend(adopt.txt_names(name).into_iter().filter(|n| n != name));
        }
        out
    }

    /// One sync: snapshot (the caches read once, the zone as it is) →
    /// plan → apply → report. `full`: list the zone. `sending`: all the
    /// changes, or (a stream of changes still arriving) the full requests,
    /// as `hold` says ([`Hold::sending`]): it orders the changes and keeps
    /// the time each was first planned.
    pub async fn sync(&mut self, full: bool, sending: Sending, hold: &mut Hold) -> Result<Synced, Route53Error> {
        // Snapshot.
        let wanted = self.wanted();
        let now = Instant::now();
        let due = self.quarantine.due(now);
        let (current, listed) = match self.current(full, &due).await {
            Ok(current) => current,
            Err(e) => {
                self.reporter.end_sync(|reason| reason != report::DRY_RUN);
                return Err(e);
            }
        };

        // Plan.
        let rules = Rules {
            owner_id: &self.owner_id,
            policy: self.cfg.policy,
            adopt: self.cfg.adopt.as_ref(),
            grace: i64::try_from(self.cfg.handover_grace.as_secs()).unwrap_or(i64::MAX),
            now: unix_now() as i64,
        };
        let mut p: Plan = plan_with(&wanted.claims, &wanted.keep, &current, &rules);
        let since = hold.order(&mut p.groups, Instant::now());
        tracing::debug!(
            services = wanted.services.len(),
            records = current.len(),
            changes = p.groups.len(),
            conflicts = p.conflicts.len(),
            quarantined = self.quarantine.len(),
            "planned"
        );
        self.report_conflicts(&p.conflicts, &wanted);
        if self.cfg.dry_run {
            self.report_dry_run(&p.groups, &current, &wanted);
            self.zone_cache = Some(current);
            return Ok(Synced { listed });
        }

        // Names back from quarantine go alone; those still waiting stay
        // out; a due name with nothing left to do (fixed, or now a
        // conflict the plan reports) leaves quarantine.
        let planned: HashSet<&str> = p.groups.iter().map(|g| g.name.as_str()).collect();
        for name in due.iter().filter(|n| !planned.contains(n.as_str())) {
            self.quarantine.release(name);
        }
        let (alone, rest): (Vec<ChangeGroup>, Vec<ChangeGroup>) =
            p.groups.into_iter().partition(|g| due.contains(&g.name));
        let (waiting, normal): (Vec<ChangeGroup>, Vec<ChangeGroup>) =
            rest.into_iter().partition(|g| self.quarantine.holds(&g.name, now));
        for (name, resource, text) in self.quarantine.notes() {
            if waiting.iter().any(|g| g.name == name) {
                self.reporter.standing(
                    resource,
                    wanted.uid_of(resource),
                    true,
                    report::ROUTE53_ERROR,
                    name,
                    text.to_string(),
                );
            }
        }
        // Whole requests; while a stream goes on, the full ones (and a
        // partial one holding a change overdue).
        let limits = Limits::default();
        let count = hold.sending(&since, &normal, limits, sending, Instant::now());
        let (to_send, held) = normal.split_at(count);
        if !held.is_empty() {
            tracing::debug!(sending = to_send.len(), held = held.len(), "holding a partial request for more changes");
        }

        // Apply.
        let (r53, zone_id) = (&self.r53, self.zone.id.as_str());
        let Applied { done, refused, unsent: _, outage } =
            apply(to_send, &alone, limits, |batch| async move { r53.change(zone_id, &batch).await }).await;
        hold.sent(since, done.iter().flat_map(|(_, g)| g.iter().map(|g| g.name.as_str())));
        tracing::debug!(
            requests = done.len(),
            names = done.iter().map(|(_, g)| g.len()).sum::<usize>(),
            sizes = ?done.iter().map(|(_, g)| g.len()).collect::<Vec<_>>(),
            held = held.len(),
            hold = sending == Sending::FullRequests,
            "applied"
        );

        // Report.
        self.report_applied(&done, &refused, &current, &wanted);

        // The copy of the zone: what Route53 accepted is in it; a refused
        // batch changed nothing (Route53 applies a batch whole or not at
        // all). After no answer, nobody knows what happened: list again.
        let applied: Vec<&ChangeGroup> = done.iter().flat_map(|(_, g)| g.iter().copied()).collect();
        match outage {
            Some(e) => {
                if e.kind() == FailureKind::Throttled {
                    self.zone_cache = Some(update_zone(current, &applied));
                }
                Err(e)
            }
            None => {
                let made = if listed { usize::MAX } else { applied.iter().map(|g| g.changes.len()).sum() };
                self.made_since_compacted = self.made_since_compacted.saturating_add(made);
                self.zone_cache = Some(update_zone(current, &applied));
                self.metrics.zone(&self.zone.id, |z| z.last_success = unix_now());
                Ok(Synced { listed })
            }
        }
    }

    /// Desired state from the caches, read once: the Services' claims, and
    /// what a Service asks for that cannot be (reported on it).
    fn wanted(&mut self) -> Wanted {
        let services = self.caches.services.state();
        let grants = self.caches.grants.snapshot();
        let slices = self.caches.slices.as_ref().map(Store::state).unwrap_or_default();
        let mut by_service: HashMap<(&str, &str), Vec<&SliceInfo>> = HashMap::new();
        for s in &slices {
            by_service.entry((&s.namespace, &s.service)).or_default().push(s);
        }
        let mut wanted = Wanted::default();
        for svc in &services {
            let resource = svc.resource_id();
            let uid = || svc.uid.as_ref().map(ToString::to_string);
            let own = by_service.get(&(svc.namespace(), svc.name())).map_or(&[][..], Vec::as_slice);
            let grant = grants.get(svc.namespace()).map(|g| &**g);
            let Wish { desired, notices } = wish(svc, &self.naming, grant, own);
            for n in notices {
                let new = self.reporter.standing(resource, uid(), true, n.reason, "", n.message.clone());
                if new && n.reason == TOO_MANY_ENDPOINTS {
                    tracing::warn!(resource = %resource, "{}", n.message);
                }
            }
            match desired {
                Desired::Publish(c) => wanted.claims.push(c),
                Desired::Skip { reason, message } => {
                    self.reporter.standing(resource, uid(), false, reason, "", message);
                }
                Desired::Invalid { reason, message } => {
                    wanted.keep.insert(resource.to_string());
                    self.reporter.standing(resource, uid(), true, reason, "", message);
                }
                Desired::Quiet => {}
            }
        }
        wanted.services = services;
        wanted
    }

    /// The zone: listed in full at every resync (and after an outage); in
    /// between, the copy kept up to date with our own changes, with the
    /// names coming back from quarantine (`due`) read again. Also whether
    /// it was listed.
    async fn current(&mut self, full: bool, due: &[String]) -> Result<(Vec<RecordSet>, bool), Route53Error> {
        match self.zone_cache.take() {
            Some(c) if !full => {
                let mut names = HashSet::new();
                let mut fresh = Vec::new();
                for name in due.iter().flat_map(|n| self.names_to_read(n)) {
                    match self.r53.records_at(&self.zone.id, &name).await {
                        Ok(rs) => fresh.extend(rs),
                        Err(e) => {
                            // Nothing changed meanwhile: the copy stays.
                            self.zone_cache = Some(c);
                            return Err(e);
                        }
                    }
                    names.insert(name);
                }
                Ok((refresh_names(c, &names, fresh), false))
            }
            _ => Ok((self.r53.list(&self.zone.id).await?, true)),
        }
    }

    fn report_conflicts(&mut self, conflicts: &[Conflict], wanted: &Wanted) {
        self.metrics.zone(&self.zone.id, |z| z.conflicts = conflicts.len() as i64);
        for c in conflicts {
            let mut message = c.message();
            if !self.zone_note.is_empty() {
                message.push_str(&format!(" ({})", self.zone_note.trim_start()));
            }
            if self.reporter.standing(&c.resource, wanted.uid_of(&c.resource), true, report::CONFLICT, &c.name, message)
            {
                self.metrics.conflicts_total.inc();
                // The Event does not say which Service holds the name (it
                // may be another namespace's); the operator's log does.
                if let ConflictCause::OtherService(holder) = &c.cause {
                    tracing::warn!(name = %c.name, resource = %c.resource, holder = %holder, "name held by another Service");
                }
            }
        }
    }

    /// `--dry-run`: what would be done, as standing Events; nothing sent.
    fn report_dry_run(&mut self, groups: &[ChangeGroup], current: &[RecordSet], wanted: &Wanted) {
        for g in groups {
            let (reason, text) = note(g, true, &self.zone_note);
            self.reporter.standing(&g.resource, wanted.uid_of(&g.resource), false, reason, &g.name, text);
        }
        let managed = count_owned(current, &self.owner_id) as i64;
        self.metrics.zone(&self.zone.id, |z| (z.managed_records, z.last_success) = (managed, unix_now()));
        self.reporter.end_sync(|_| false);
    }

    /// The accepted changes counted and handed to the INSYNC watcher (their
    /// Events told there); the refused names quarantined and reported.
    fn report_applied(
        &mut self,
        done: &[(String, Vec<&ChangeGroup>)],
        refused: &[(&ChangeGroup, Route53Error)],
        current: &[RecordSet],
        wanted: &Wanted,
    ) {
        let mut applied_records = 0i64;
        for (id, groups) in done {
            let mut notes = Vec::new();
            for g in groups {
                self.quarantine.release(&g.name);
                for c in &g.changes {
                    let action = match c.action {
                        Action::Create => "create",
                        Action::Upsert => "upsert",
                        Action::Delete => "delete",
                    };
                    self.metrics.changes.with_label_values(&[action]).inc();
                }
                applied_records += g.after.len() as i64 - g.before.len() as i64;
                let (reason, text) = note(g, false, &self.zone_note);
                notes.push(Note { resource: g.resource.clone(), uid: wanted.uid_of(&g.resource), reason, text });
            }
            self.insync.watch(id.clone(), notes);
        }
        let now = Instant::now();
        for (g, e) in refused {
            let text = refusal(g, e, &self.zone_note);
            let wait = self.quarantine.refused(&g.name, now, &g.resource, &text);
            tracing::warn!(name = %g.name, error = %e, retry_in = ?wait, "Route53 refused a name; quarantined");
            self.reporter.standing(&g.resource, wanted.uid_of(&g.resource), true, report::ROUTE53_ERROR, &g.name, text);
        }
        let (quarantined, before) = (self.quarantine.len() as i64, count_owned(current, &self.owner_id) as i64);
        self.metrics
            .zone(&self.zone.id, |z| (z.quarantined, z.managed_records) = (quarantined, before + applied_records));
        self.reporter.end_sync(|_| false);
    }
}

/// Backoff of a whole sync after Route53 was unavailable or throttling.
pub fn sync_backoff(failures: u32, e: &Route53Error, interval: Duration) -> Duration {
    crate::route53::jittered_backoff(failures, Duration::from_secs(1), interval.max(Duration::from_secs(1)))
        .max(e.retry_after.unwrap_or_default())
}

/// Our address record sets: those at a name (and in a routing set) our
/// ownership TXT guards.
fn count_owned(current: &[RecordSet], owner: &str) -> usize {
    let owned: BTreeSet<(&str, Option<&str>)> = current
        .iter()
        .filter(|r| crate::registry::ownership_of(r).is_some_and(|o| o.owner == owner))
        .filter_map(|r| crate::hostname::owned_name_of_txt(&r.name).map(|n| (n, r.set_id())))
        .collect();
    current
        .iter()
        .filter(|r| r.rtype.is_managed() && !r.is_foreign() && owned.contains(&(&*r.name, r.set_id())))
        .count()
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}
