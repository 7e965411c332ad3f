//! The CopyRule controller: the watches wired, and one reconcile per rule
//! that converges all of its copies, in this order — a [`Snapshot`] of the
//! caches (namespaces, sources' metadata, copies), what reads of its
//! sources taught ([`crate::read`]), its claim published and then every
//! rule's claims read ([`crate::claims`]), the plan ([`crate::plan`],
//! pure), the writes in rounds (`rounds`:
//! apply, and a write's answer read and planned again), then the report
//! ([`crate::report`]: status, Events, metrics). The caches trigger the
//! rules concerned on every change. A source's payload is read only to
//! learn a new version of it, or to write its copies, within the byte
//! budget. A finalizer prunes a deleted rule's copies (never in a protected
//! namespace; [`crate::cleanup`] finds them).

mod deletion;
mod rollouts;
mod rounds;

use std::sync::Arc;
use std::time::Duration;

use flotilla_shared::backoff::ErrorBackoff;
use flotilla_shared::conditions::already_said;
use flotilla_shared::{AdmissionGuard, AdmissionPolicyArgs, Context, Controller};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::apply::Writer;
use crate::budget::Budget;
use crate::cache::{CacheOptions, Caches, GC_INTERVAL, Snapshot, trigger_channel};
use crate::copy::{RuleId, RuleRef, StripLabels};
use crate::crd::{CopyRule, SkippedSource, SourceKind};
use crate::error::Error;
use crate::metrics::CopierMetrics;
use crate::plan::{
    Naming, Policy, RulePlan, Seen, SourceSelection, TARGET_NAME_INVALID, copy_facts, desired_copies,
    invalid_names_message, name_copies, plan_copies, sources_too_large, target_namespaces,
};
use crate::read::Reader;
use crate::report;
use crate::report::Outcome;
use crate::status::{Rollouts, Summary};
use crate::targets::{Selector, TargetFilter};

/// The finalizer on every CopyRule: its copies are pruned before it goes.
pub const FINALIZER: &str = "flotilla.dev/config-copier";
/// Re-check every rule this often even without events.
const RESYNC: Duration = Duration::from_secs(600);
/// Re-check rules with conflicts this often (an object in the way may go).
const CONFLICT_RECHECK: Duration = Duration::from_secs(60);
/// A rule waiting for a cache's list looks again this often if no list
/// woke it (polling every 2 s, 1,000 rules made 500 reconciles a second
/// while a large list arrived; issue 28).
const CACHE_WAIT: Duration = Duration::from_secs(60);

/// Options of the controller (from flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// Only rules in this namespace (targets stay cluster-wide).
    pub watch_namespace: Option<String>,
    /// Copy writes in flight per reconcile.
    pub concurrency: usize,
    /// KiB of payload read or written at once, all reconciles together.
    pub max_kib_in_flight: u32,
    /// Bytes a rule's sources may hold together.
    pub max_rule_source_bytes: u64,
    /// CopyRequests served per namespace (`--max-requests-per-namespace`).
    pub max_requests_per_namespace: usize,
    pub policy: Policy,
    pub strip: StripLabels,
    /// The CopyRule admission policy that guards Overwrite and open target lists.
    pub admission: AdmissionPolicyArgs,
    /// `--enable-rollouts`: rules with `rolloutOnChange` roll the workloads
    /// consuming a changed copy (the operator's RBAC then allows list and
    /// patch on apps workloads).
    pub enable_rollouts: bool,
}

/// What every reconcile shares.
pub struct Data {
    pub ctx: Context,
    pub caches: Arc<Caches>,
    pub options: Options,
    pub budget: Budget,
    /// Whether the CopyRule admission policy is in place (`--require-admission-policy`).
    pub admission: AdmissionGuard,
    /// Retry delays of failing rules (1 s doubling to 5 min, jittered).
    pub backoff: ErrorBackoff,
    /// Rollouts that failed, tried again at the rule's retry (forgotten
    /// for deleted rules by the caches' garbage collection too).
    pub(crate) rollouts: Arc<rollouts::Pending>,
    /// One workload list for rollouts at a time, in the whole process.
    pub(crate) rollout_lists: tokio::sync::Semaphore,
}

impl Data {
    /// The writer of one rule's copies.
    pub(crate) fn writer<'a>(&'a self, rule: &'a RuleRef) -> Writer<'a> {
        Writer { client: &self.ctx.client, field_manager: &self.ctx.field_manager, caches: &self.caches, rule }
    }

    /// The reader of the sources of `kind` in `namespace`.
    fn reader<'a>(&'a self, kind: SourceKind, namespace: &'a str) -> Reader<'a> {
        Reader {
            client: &self.ctx.client,
            caches: &self.caches,
            budget: &self.budget,
            strip: &self.options.strip,
            kind,
            namespace,
        }
    }
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
    let admission = AdmissionGuard::for_operator(&ctx, &options.admission).await?;
    let controller = Controller::new(rules, watcher::Config::default())
        .debounce(Duration::from_millis(200))
        .concurrency(8)
        .reconcile_on(rx)
        .reconcile_all_on(admission.changes());
    let cache_options =
        CacheOptions { field_manager: ctx.field_manager.clone(), scope: options.watch_namespace.clone() };
    let caches = Caches::new(ctx.client.clone(), controller.store(), tx, metrics, cache_options);

    let readiness = ctx.readiness().clone();
    let mut tasks = Vec::new();
    tasks.push(tokio::spawn(Arc::clone(&caches).watch_namespaces(readiness.watch("namespaces"))));
    for kind in SourceKind::ALL {
        let name = match kind {
            SourceKind::ConfigMap => "copies-configmaps",
            SourceKind::Secret => "copies-secrets",
        };
        tasks.push(tokio::spawn(Arc::clone(&caches).watch_copies(kind, readiness.watch(name))));
        let name = match kind {
            SourceKind::ConfigMap => "sources-configmaps",
            SourceKind::Secret => "sources-secrets",
        };
        tasks.push(tokio::spawn(Arc::clone(&caches).watch_sources(kind, readiness.watch(name))));
    }
    let owed_rollouts = Arc::new(rollouts::Pending::default());
    {
        let (caches, owed_rollouts) = (Arc::clone(&caches), Arc::clone(&owed_rollouts));
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(GC_INTERVAL).await;
                owed_rollouts.retain(&caches.collect_garbage());
            }
        }));
    }
    let budget = Budget::new(options.max_kib_in_flight);
    let requests = crate::request::Data {
        ctx: ctx.clone(),
        policy: options.policy.clone(),
        strip: options.strip.clone(),
        max_source_bytes: options.max_rule_source_bytes,
        max_per_namespace: options.max_requests_per_namespace,
        backoff: ErrorBackoff::default(),
        queue: Default::default(),
    };
    let requests = crate::request::run(ctx.clone(), requests, options.watch_namespace.clone());
    let data = Arc::new(Data {
        ctx: ctx.clone(),
        caches,
        options,
        budget,
        admission,
        backoff: ErrorBackoff::default(),
        rollouts: owed_rollouts,
        rollout_lists: tokio::sync::Semaphore::new(1),
    });
    let rules = ctx.run_controller("copyrule", controller, reconcile, error_policy, data);
    let (result, requested) = tokio::join!(rules, requests);
    let result = result.and(requested);
    for t in tasks {
        t.abort();
    }
    result
}

/// Failures back off per rule (1 s doubling to 5 min): a rule whose copies
/// the API keeps refusing (a policy, a denied delete) never slows the others
/// nor loops hot.
pub fn error_policy(rule: Arc<CopyRule>, error: &Error, data: Arc<Data>) -> Action {
    let id = RuleId::new(rule.namespace().unwrap_or_default(), rule.name_any());
    let delay = data.backoff.next(&id.to_string());
    tracing::debug!(rule = %id, error = error.metric_label(), ?delay, "will retry");
    Action::requeue(delay)
}

pub async fn reconcile(rule: Arc<CopyRule>, data: Arc<Data>) -> Result<Action, Error> {
    let ns = rule.namespace().ok_or(Error::NoNamespace)?;
    let id = RuleId::new(ns.clone(), rule.name_any());
    let api: Api<CopyRule> = Api::namespaced(data.ctx.client.clone(), &ns);
    let result = finalizer(&api, FINALIZER, rule, |event| async {
        match event {
            Finalizer::Apply(r) => sync(&r, &data).await,
            Finalizer::Cleanup(r) => deletion::cleanup(&r, &data).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    if result.is_ok() {
        data.backoff.forget(&id.to_string());
    }
    result
}

pub(crate) fn rule_ref(rule: &CopyRule) -> Result<RuleRef, Error> {
    Ok(RuleRef {
        id: RuleId::new(rule.namespace().ok_or(Error::NoNamespace)?, rule.name_any()),
        uid: rule.uid().unwrap_or_default(),
    })
}

/// A cache the rule needs has not listed yet: the rule waits, woken by
/// the list's completion (every watch of `Caches` wakes the rules a
/// complete list concerns); [`CACHE_WAIT`] is only a fallback. While a
/// watch fails (e.g. the operator's RBAC withholds a kind), its status and
/// a Warning say why instead of a silent wait; nothing is decided, so its
/// copies stay as they are. The watch's recovery wakes the rule.
async fn caches_not_ready(rule: &CopyRule, data: &Data) -> Result<Action, Error> {
    let Some(mut why) = data.caches.watch_error(rule.spec.kind) else {
        return Ok(Action::requeue(CACHE_WAIT));
    };
    if why.to_ascii_lowercase().contains("forbidden") {
        // Not the rule author's to fix: say whose it is.
        why.push_str(&format!(
            " (the operator's RBAC does not allow it: a cluster admin grants its ServiceAccount get, list and watch \
             on {} cluster-wide, as the chart does)",
            rule.spec.kind.plural()
        ));
    }
    let previous = rule.status.as_ref().map(|p| p.conditions.as_slice());
    let message = format!("cannot read the sources: {why}");
    if !already_said(previous, "Ready", "SourcesUnavailable", &message) {
        data.ctx.events.warning(&rule.object_ref(&()), "SourcesUnavailable", "Copy", message);
    }
    let summary = Summary { sources_unavailable: Some(why), ..Default::default() };
    write_status(rule, data, &summary, false).await?;
    Ok(Action::requeue(Duration::from_secs(5)))
}

/// Converges one rule.
async fn sync(rule: &CopyRule, data: &Data) -> Result<Action, Error> {
    let me = rule_ref(rule)?;
    let id = &me.id;
    let caches = &data.caches;
    let policy = &data.options.policy;
    let oref = rule.object_ref(&());
    let previous = rule.status.as_ref();

    let checked = rule
        .spec
        .selector
        .as_ref()
        .map(Selector::new)
        .transpose()
        .and_then(|s| Ok((s, TargetFilter::new(rule.spec.namespaces.as_ref())?)))
        .and_then(|(s, t)| Ok((s, t, Naming::of(rule.spec.target.as_ref())?)));
    let (selector, targets, naming) = match checked {
        Ok(v) => v,
        Err(e) => {
            caches.forget_rule(id);
            if !already_said(previous.map(|p| p.conditions.as_slice()), "Ready", "InvalidSpec", &e.0) {
                data.ctx.events.warning(&oref, "InvalidSpec", "Validate", format!("rule not applied: {e}"));
            }
            let summary = Summary { invalid: Some(e.0), ..Default::default() };
            write_status(rule, data, &summary, false).await?;
            return Ok(Action::await_change());
        }
    };
    // What only the admission policy lets the right people ask for is
    // refused while that policy is missing.
    if let Some(power) = crate::plan::guarded_power(&rule.spec)
        && let Err(why) = data.admission.check()
    {
        caches.forget_rule(id);
        let message = format!("{power}: {why}");
        if !already_said(previous.map(|p| p.conditions.as_slice()), "Ready", "AdmissionPolicyMissing", &message) {
            data.ctx.events.warning(
                &oref,
                "AdmissionPolicyMissing",
                "Validate",
                format!("rule not applied: {message}"),
            );
        }
        let summary = Summary { refused: Some(message), ..Default::default() };
        write_status(rule, data, &summary, false).await?;
        return Ok(Action::await_change());
    }
    let selection = SourceSelection { selector, names: rule.spec.names.iter().map(|n| n.0.clone()).collect() };
    // Snapshot: the caches, read once.
    let Some(Snapshot { namespaces, sources: metas, copies, rules, scope }) =
        caches.snapshot(id, rule.spec.kind, &selection, &targets, &naming)
    else {
        return caches_not_ready(rule, data).await;
    };
    // What each source is at its current version: known from an earlier
    // read, else read now (bounded by the byte budget) and forgotten but
    // for its size, type and hashes.
    let reader = data.reader(rule.spec.kind, &id.namespace);
    let sources = match reader.learn(&metas, data.options.concurrency).await {
        Ok(s) => s,
        Err(e) => {
            let summary = Summary { sources_unavailable: Some(e.to_string()), ..Default::default() };
            write_status(rule, data, &summary, false).await?;
            return Err(Error::Read(e));
        }
    };
    drop(metas);

    // Plan (pure): the sources, the targets, the copies wanted.
    let plan_rule = RulePlan { rule: &me, kind: rule.spec.kind, sources: &selection, targets: &targets };
    let rule_sources = crate::plan::rule_sources(&plan_rule, &sources, policy);
    if let Some(why) = sources_too_large(&rule_sources, data.options.max_rule_source_bytes) {
        // Nothing is decided for this rule: its copies stay as they are
        // (neither updated nor pruned) and the other rules go on.
        let was = previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == "Ready"));
        if was.is_none_or(|c| c.reason != "SourcesTooLarge") {
            data.ctx.events.warning(&oref, "SourcesTooLarge", "Copy", why.clone());
        }
        let summary = Summary { sources: rule_sources.copied.len(), too_large: Some(why), ..Default::default() };
        write_status(rule, data, &summary, false).await?;
        return Ok(Action::requeue(RESYNC));
    }
    // The copies' names (spec.target). One name for several sources is
    // refused as a whole, as a rule over its budget is: its copies stay
    // as they are, and nothing is copied under that name.
    let named = match name_copies(&rule_sources, &naming) {
        Ok(named) => named,
        Err(ambiguous) => {
            let why = ambiguous.message();
            if !already_said(previous.map(|p| p.conditions.as_slice()), "Ready", "TargetNameAmbiguous", &why) {
                data.ctx.events.warning(&oref, "TargetNameAmbiguous", "Copy", why.clone());
            }
            let summary = Summary { sources: rule_sources.copied.len(), ambiguous: Some(why), ..Default::default() };
            write_status(rule, data, &summary, false).await?;
            return Ok(Action::requeue(RESYNC));
        }
    };
    let names_invalid = invalid_names_message(&named);
    if let Some(why) = &names_invalid
        && !already_said(previous.map(|p| p.conditions.as_slice()), "Ready", "TargetNameInvalid", why)
    {
        data.ctx.events.warning(&oref, "TargetNameInvalid", "Copy", why.clone());
    }
    let target_set = target_namespaces(&plan_rule, &namespaces, policy);
    let desired = desired_copies(&named, &target_set, rule.spec.kind);
    let created = rule.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string());
    let claim = crate::plan::claim(&plan_rule, created, &named, &target_set);
    // Published for the other rules (those whose claims overlap it are
    // woken), then the claims read again for this plan: one changed while
    // the sources were read was compared with this rule's claim as it was
    // then, and did not wake it if it overlaps only the new one.
    caches.wake(caches.claims().set(id, Some(claim)));
    let claims = caches.claims().view();

    let mut summary = Summary {
        sources: rule_sources.copied.len(),
        namespaces: target_set.accepted.len(),
        desired: desired.len(),
        protected: target_set.protected.iter().map(|s| s.to_string()).collect(),
        skipped: rule_sources
            .skipped
            .iter()
            .map(|(name, why)| SkippedSource {
                name: name.clone(),
                reason: why.reason().into(),
                message: why.message(),
            })
            .chain(named.invalid.iter().map(|(name, why)| SkippedSource {
                name: name.clone(),
                reason: TARGET_NAME_INVALID.into(),
                message: why.clone(),
            }))
            .collect(),
        names_invalid,
        rollouts: rule.spec.rollout_on_change.then(|| match data.options.enable_rollouts {
            false => Rollouts::Disabled,
            true => Rollouts::Enabled {
                accepting: target_set
                    .accepted
                    .iter()
                    .filter(|ns| namespaces.get(**ns).is_some_and(|n| n.accepts_rollouts()))
                    .count(),
                targets: target_set.accepted.len(),
            },
        }),
        ..Default::default()
    };
    let seen = Seen {
        me: &me,
        copies: &copies,
        rules: &rules,
        scope: scope.as_deref(),
        claims: &claims,
        namespaces: &namespaces,
    };
    // What an earlier reconcile failed to roll, for the copies still wanted.
    let owed: Vec<_> = data.rollouts.take(id).into_iter().filter(|(k, _, _)| desired.contains_key(k)).collect();
    let plan = plan_copies(copy_facts(desired, &seen, policy, rule.spec.on_conflict, rule.spec.prune));
    drop((copies, claims));
    summary.in_sync = plan.in_sync;
    tracing::debug!(rule = %id, desired = summary.desired, in_sync = plan.in_sync, jobs = plan.jobs(), "plan");

    // Apply, in rounds: each source read once for its copies' writes,
    // within the budget; a write's answer read and planned again.
    let writer = data.writer(&me);
    let concurrency = data.options.concurrency;
    let slots = tokio::sync::Semaphore::new(concurrency);
    let mut carried = rounds::bounded(plan.by_source.into_iter().collect(), concurrency, |group| {
        rounds::run_source_jobs(&writer, &reader, group, &slots, concurrency)
    })
    .await
    .into_iter()
    .flatten()
    .collect::<Vec<_>>();
    carried.extend(rounds::run_jobs(&writer, plan.without_payload, concurrency).await);

    // Roll the consumers of copies whose data changed (rolloutOnChange),
    // and those an earlier reconcile failed to roll (`owed`).
    let rolled = match summary.rollouts {
        Some(Rollouts::Enabled { accepting, .. }) if accepting > 0 => {
            let updated = carried
                .iter()
                .filter_map(|c| match &c.outcome {
                    Outcome::Updated { key, data_hash } => Some((key.clone(), data_hash.clone())),
                    _ => None,
                })
                .collect();
            let (client, field_manager) = (&data.ctx.client, data.ctx.field_manager.as_str());
            rollouts::roll_consumers(client, field_manager, &data.rollout_lists, updated, owed, &namespaces).await
        }
        _ => rollouts::Rolled::default(),
    };
    data.rollouts.keep(id, rolled.retry);
    summary.failures.extend(rolled.failures);

    // Report: metrics, status, Events.
    report::count_operations(caches.metrics(), &carried);
    let written = report::tally(carried.into_iter().map(|c| c.outcome), &mut summary);
    let new_conflicts = caches.claims().new_conflicts(id, report::conflicts(&summary));
    report::events(&data.ctx.events, &oref, rule.spec.kind, &summary, &written, &new_conflicts);
    if let Some(first) = rolled.patched.first() {
        let more = rolled.patched.len() - 1;
        let others = if more > 0 { format!(" and {more} more") } else { String::new() };
        data.ctx.events.normal(&oref, "RolledOut", "Rollout", format!("copies' data changed: rolled {first}{others}"));
    }
    caches.metrics().set_rule(id, summary.sources, summary.desired, summary.in_sync, summary.conflicts.len());
    let writes = written.total();
    write_status(rule, data, &summary, writes > 0).await?;
    if !summary.failures.is_empty() {
        return Err(Error::Writes { failed: summary.failures.len(), first: summary.failures[0].clone() });
    }
    Ok(Action::requeue(if summary.conflicts.is_empty() { RESYNC } else { CONFLICT_RECHECK }))
}

/// Writes `rule`'s status from `summary` (see [`report::write_status`]).
pub(crate) async fn write_status(rule: &CopyRule, data: &Data, summary: &Summary, wrote: bool) -> Result<(), Error> {
    report::write_status(&data.ctx.client, &data.ctx.field_manager, data.caches.metrics(), rule, summary, wrote).await
}
