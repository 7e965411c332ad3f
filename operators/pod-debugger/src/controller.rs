//! The PodDebugger controller: a pod watch (a small projection per pod)
//! whose changes trigger the PodDebuggers of the pod's namespace; each
//! reconcile checks the rule as a whole (protected namespace, selector,
//! image allow-list, profile against the namespace's Pod Security level),
//! plans every matched pod, proves the container with one dry run, adds it
//! where the plan says, and writes the status. Debounced: a burst of pod
//! updates is one reconcile.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flotilla_shared::backoff::ErrorBackoff;
use flotilla_shared::health::WatchHealth;
use flotilla_shared::per_object::PerObject;
use flotilla_shared::pods::{LabelKeys, NAMESPACE_MARK};
use flotilla_shared::projection;
use flotilla_shared::selector::Selector;
use flotilla_shared::{AdmissionGuard, AdmissionPolicyArgs, Context, Controller, FromSpecs};
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Pod};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::apply::{DRY_RUN_RETRY, DryRun, add, dry_run};
use crate::copy::{COPIED_BY, COPY_OF};
use crate::copy_apply::{delete_copies, make_copies, verify_copies};
use crate::copy_plan::{all_copies, plan_copies, unverified};
use crate::crd::{Mode, PodDebugger};
use crate::error::Error;
use crate::images::ImagePolicy;
use crate::metrics::DebuggerMetrics;
use crate::naming;
use crate::plan::{Decision, Expiry, Memory, Rule, forget, next_wake, plan};
use crate::pod::{PodView, VOLUMES_MARK, view};
use crate::report;
use crate::security::{Level, check_profile};
use crate::status::Outcome;
use k8s_openapi::jiff::Timestamp;

/// Look at every PodDebugger at least this often.
const RESYNC: Duration = Duration::from_secs(300);
/// A namespace's Pod Security level is read at most this often.
const NAMESPACE_TTL: Duration = Duration::from_secs(10);

/// Options of the controller (from flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// Only PodDebuggers and pods of this namespace.
    pub watch_namespace: Option<String>,
    /// Images a PodDebugger may run.
    pub images: ImagePolicy,
    /// Namespaces whose PodDebuggers are refused (kube-system, ..., the
    /// operator's own).
    pub protected: BTreeSet<String>,
    /// Additions in flight per reconcile.
    pub concurrency: usize,
    /// The PodDebugger policy (`--require-admission-policy`): while it is
    /// missing, every PodDebugger is refused.
    pub admission: AdmissionPolicyArgs,
    /// Debug copies (`--debug-copies`): without, PodDebuggers in mode copy
    /// are refused (CopiesDisabled).
    pub copies: bool,
}

/// One PodDebugger's state between reconciles.
pub(crate) struct RuleState {
    pub(crate) memory: Memory,
    pub(crate) dry_run: Option<DryRun>,
    /// For the Event when the PodDebugger is deleted.
    pub(crate) oref: ObjectReference,
    pub(crate) name: String,
    pub(crate) namespace: String,
}

/// What every reconcile shares.
pub struct Data {
    pub ctx: Context,
    pub metrics: DebuggerMetrics,
    pub options: Options,
    pods: projection::Store<PodView, projection::Own<PodView>>,
    rules: Store<PodDebugger>,
    /// Counts the changes of `rules`, and the count the label keys were
    /// last set at: set again only after a change, not in every reconcile.
    /// The label keys were set from these PodDebuggers' specs.
    keys_set: FromSpecs<()>,
    states: PerObject<RuleState>,
    namespaces: Mutex<HashMap<String, (Level, Instant)>>,
    backoff: ErrorBackoff,
    trigger: UnboundedSender<ObjectRef<PodDebugger>>,
    /// The label keys PodDebuggers' selectors reference: all a pod view keeps.
    label_keys: LabelKeys,
    admission: AdmissionGuard,
}

/// Runs the controller until shutdown.
pub async fn run(ctx: Context, options: Options) -> anyhow::Result<()> {
    let metrics = DebuggerMetrics::new()?;
    metrics.register(&ctx.metrics)?;
    let (rules_api, pods_api): (Api<PodDebugger>, Api<Pod>) = match &options.watch_namespace {
        Some(ns) => (Api::namespaced(ctx.client.clone(), ns), Api::namespaced(ctx.client.clone(), ns)),
        None => (Api::all(ctx.client.clone()), Api::all(ctx.client.clone())),
    };
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let admission = AdmissionGuard::for_operator(&ctx, &options.admission).await?;
    let controller = Controller::new(rules_api, watcher::Config::default())
        .debounce(Duration::from_millis(500))
        .concurrency(8)
        .reconcile_on(rx)
        .reconcile_all_on(admission.changes());
    let (pods, writer) = projection::keyed_store::<PodView>();
    let data = Arc::new(Data {
        ctx: ctx.clone(),
        metrics,
        options,
        pods,
        rules: controller.store(),
        keys_set: FromSpecs::new(controller.store_changes()),
        states: PerObject::default(),
        namespaces: Mutex::default(),
        backoff: ErrorBackoff::default(),
        trigger: tx,
        label_keys: LabelKeys::only_wanted_namespaces(),
        admission,
    });

    let readiness = ctx.readiness().clone();
    let mut tasks = Vec::new();
    tasks.push(tokio::spawn(watch_pods(pods_api, writer, Arc::clone(&data), readiness.watch("pods"))));
    {
        let data = Arc::clone(&data);
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                data.collect_garbage().await;
            }
        }));
    }
    let result = ctx.run_controller("poddebugger", controller, reconcile, error_policy, Arc::clone(&data)).await;
    for t in tasks {
        t.abort();
    }
    result
}

/// Keeps the pod projection and triggers the PodDebuggers of the namespaces
/// that changed. Starts once the PodDebuggers are listed, so that the first
/// list of pods keeps the label keys their selectors reference.
async fn watch_pods(
    api: Api<Pod>,
    writer: projection::Writer<PodView, projection::Own<PodView>>,
    data: Arc<Data>,
    health: WatchHealth,
) {
    if !flotilla_shared::pods::rules_listed(&data.rules).await {
        return;
    }
    data.refresh_label_keys();
    let keys = data.label_keys.clone();
    flotilla_shared::pods::watch_pods(
        api,
        writer,
        |p: &Pod| view(p, &keys),
        data.label_keys.clone(),
        health,
        |touched| {
            data.metrics.pods_cached.set(i64::try_from(data.pods.len()).unwrap_or(i64::MAX));
            let rules = data.rules.state();
            for rule in flotilla_shared::pods::concerned(&rules, touched, |_: &PodDebugger| false) {
                let _ = data.trigger.unbounded_send(rule);
            }
        },
    )
    .await;
}

impl Data {
    /// Sets the label keys the live PodDebuggers' selectors reference (the
    /// pod watch lists again when one is new).
    fn refresh_label_keys(&self) {
        // Set again only when a PodDebugger came, went or changed its spec.
        self.keys_set.get(&self.rules, 0, |rules| {
            self.label_keys.set(rules.iter().flat_map(|r| {
                let ns = r.metadata.namespace.clone();
                r.spec
                    .selector
                    .keys()
                    .chain([NAMESPACE_MARK, COPY_OF, COPIED_BY])
                    .chain(r.spec.volume_mounts.is_some().then_some(VOLUMES_MARK))
                    .map(move |k| (ns.clone(), k.to_string()))
                    .collect::<Vec<_>>()
            }));
        });
    }

    fn state(&self, rule: &PodDebugger) -> Arc<tokio::sync::Mutex<RuleState>> {
        self.states.get(&rule.uid().unwrap_or_default(), || RuleState {
            memory: Memory::default(),
            dry_run: None,
            oref: rule.object_ref(&()),
            name: rule.name_any(),
            namespace: rule.namespace().unwrap_or_default(),
        })
    }

    /// Drops the state of deleted PodDebuggers, telling (a Normal Event)
    /// that their containers stay: ephemeral containers cannot be removed.
    async fn collect_garbage(&self) {
        if !self.pods.is_ready() {
            return;
        }
        let live: std::collections::HashSet<String> = self.rules.state().iter().filter_map(|r| r.uid()).collect();
        let gone = self.states.remove_gone(|uid| live.contains(uid));
        for st in gone {
            let st = st.lock().await;
            let left = self
                .pods
                .in_namespace(&st.namespace, |p| p.ephemeral().iter().any(|c| naming::added_by(&st.name, c)))
                .len();
            if left > 0 {
                self.ctx.events.normal(
                    &st.oref,
                    "DebugContainersLeft",
                    "Delete",
                    format!(
                        "PodDebugger {} deleted: its debug containers stay in {left} pod(s) until those pods are replaced (ephemeral containers cannot be removed)",
                        st.name
                    ),
                );
            }
        }
        self.backoff.retain(|uid| live.contains(uid));
    }

    /// The namespace's Pod Security enforce level (cached briefly).
    async fn level(&self, ns: &str) -> Result<Level, Error> {
        let now = Instant::now();
        if let Some((level, at)) = self.namespaces.lock().unwrap_or_else(PoisonError::into_inner).get(ns)
            && now.saturating_duration_since(*at) < NAMESPACE_TTL
        {
            return Ok(*level);
        }
        let api: Api<Namespace> = Api::all(self.ctx.client.clone());
        let n = api.get(ns).await.map_err(|e| Error::Namespace(ns.to_string(), e))?;
        let level = Level::of(&n.metadata.labels.unwrap_or_default());
        self.namespaces.lock().unwrap_or_else(PoisonError::into_inner).insert(ns.to_string(), (level, now));
        Ok(level)
    }
}

/// Failures back off per PodDebugger (1 s doubling to 5 min).
pub fn error_policy(rule: Arc<PodDebugger>, error: &Error, data: Arc<Data>) -> Action {
    let uid = rule.uid().unwrap_or_default();
    let d = data.backoff.next(&uid);
    tracing::warn!(error = %error, label = error.metric_label(), delay = ?d, "will retry");
    Action::requeue(d)
}

/// A refusal of the whole PodDebugger: a reason and a message.
pub(crate) type Refused = (&'static str, String);

/// What a PodDebugger's reconcile needs once it is allowed.
struct Checked {
    selector: Selector,
    level: Level,
    /// When its access ends (None: never).
    expires: Option<Timestamp>,
}

/// When `rule`'s access ends: spec.expiresAt, or creation plus spec.ttl.
fn expiry_time(rule: &PodDebugger) -> Result<Option<Timestamp>, String> {
    let ttl = rule.spec.ttl.as_ref().map(|d| d.get()).transpose().map_err(|e| format!("ttl: {e}"))?;
    Expiry::time(
        rule.spec.expires_at.as_ref().map(|t| t.0),
        ttl,
        rule.metadata.creation_timestamp.as_ref().map(|t| t.0),
    )
}

/// The rule's selector, or why the whole PodDebugger is refused.
async fn check(rule: &PodDebugger, ns: &str, data: &Data) -> Result<Result<Checked, Refused>, Error> {
    if data.options.protected.contains(ns) {
        let msg = format!("namespace {ns} is protected: the operator never adds debug containers there");
        return Ok(Err(("ProtectedNamespace", msg)));
    }
    // A debug container is exec into the pod: only the PodDebugger policy
    // keeps that to those who may exec there themselves. Without it, none.
    if let Err(why) = data.admission.check() {
        return Ok(Err(("AdmissionPolicyMissing", format!("debug containers: {why}"))));
    }
    let selector = match Selector::new(&rule.spec.selector) {
        Ok(s) => s,
        Err(e) => return Ok(Err(("InvalidSpec", format!("selector: {e}")))),
    };
    if let Err(e) = data.options.images.check(&rule.spec.image) {
        return Ok(Err(("ImageNotAllowed", e)));
    }
    if rule.spec.mode == Mode::Copy && !data.options.copies {
        let msg = "mode copy: debug copies are off in this operator (--debug-copies; the chart's debugCopies.enabled)";
        return Ok(Err(("CopiesDisabled", msg.to_string())));
    }
    let expires = match expiry_time(rule) {
        Ok(t) => t,
        Err(e) => return Ok(Err(("InvalidSpec", e))),
    };
    let level = data.level(ns).await?;
    if let Err(e) = check_profile(level, rule.spec.profile) {
        return Ok(Err(("ProfileForbidden", e)));
    }
    Ok(Ok(Checked { selector, level, expires }))
}

pub async fn reconcile(rule: Arc<PodDebugger>, data: Arc<Data>) -> Result<Action, Error> {
    let ns = rule.namespace().ok_or(Error::NoNamespace)?;
    let name = rule.name_any();
    let uid = rule.uid().unwrap_or_default();
    let container = naming::container_name(&name, &rule.spec);
    // Until the pod cache holds the first complete list (with the label
    // keys this selector reads), a plan would see too few pods (and a
    // status written from it would say so). The list's completion wakes
    // every PodDebugger (`watch_pods`); the resync is only a fallback
    // (polling every second cost a core at scale, issue 28).
    data.refresh_label_keys();
    let marks = [
        Some(NAMESPACE_MARK),
        Some(COPY_OF),
        Some(COPIED_BY),
        rule.spec.volume_mounts.is_some().then_some(VOLUMES_MARK),
    ];
    if !data.pods.is_ready()
        || !data.label_keys.covers(Some(&ns), rule.spec.selector.keys().chain(marks.into_iter().flatten()))
    {
        return Ok(Action::requeue(RESYNC));
    }
    let state = data.state(&rule);
    let mut st = state.lock().await;
    let now = Instant::now();

    let mut refused = None;
    let mut plans = Vec::new();
    let mut wake = None;
    let mut expiry = Expiry::Never;
    let mut copies = None;
    // Copies go at the expiry and when the PodDebugger left mode copy,
    // whatever else is wrong with its spec: a refusal (an image taken off
    // the allow-list, a missing policy) must not keep them.
    let mut deleted = 0;
    {
        let pods = data.pods.in_namespace(&ns, |_| true);
        st.memory.not_ours.retain(|u| pods.iter().any(|p| p.uid == *u));
        st.memory.ours.retain(|u| pods.iter().any(|p| p.uid == *u));
        let expired = matches!(expiry_time(&rule), Ok(Some(at)) if at <= Timestamp::now());
        // Without --debug-copies there are none to delete (nor the RBAC to).
        if data.options.copies && (rule.spec.mode == Mode::Inject || expired) {
            let doomed = all_copies(&uid, pods.iter().map(AsRef::as_ref), &st.memory);
            deleted = delete_copies(&rule, &ns, &doomed, &mut st.memory, &data).await;
        }
    }
    match check(&rule, &ns, &data).await? {
        Err(r) => refused = Some(r),
        Ok(Checked { selector, level, expires }) => {
            expiry = Expiry::at(expires, Timestamp::now());
            // Secret volumes only where an admission policy checked that
            // the author may read Secrets: the operator cannot know who
            // wrote the spec. check() refused everything while a required
            // policy is missing; with none required, none checked.
            let secrets = rule.spec.volume_mounts.as_ref().is_some_and(|v| v.secrets)
                && data.options.admission.name().is_some()
                && data.admission.check().is_ok();
            let r = Rule {
                name: &name,
                namespace: &ns,
                selector: &selector,
                container: &container,
                target: rule.spec.target_container.as_deref(),
                max_per_pod: usize::try_from(rule.spec.max_per_pod.clamp(1, 10)).unwrap_or(1),
                expiry,
                volumes: rule.spec.volume_mounts.as_ref(),
                secrets,
            };
            // Only this namespace's range of the cache is read.
            let pods = data.pods.in_namespace(&ns, |_| true);
            let pods = pods.iter().map(AsRef::as_ref);
            match rule.spec.mode {
                Mode::Inject => {
                    plans = plan(&r, pods, &st.memory, now);
                    if plans.iter().any(|p| matches!(p.decision, Decision::Add { .. })) {
                        refused = dry_run(&rule, &ns, &container, level, &plans, &mut st, &data).await;
                        if refused.is_none() {
                            let results = add(&rule, &ns, &container, &plans, &data).await;
                            report::additions(&rule, &ns, &container, &mut plans, results, &mut st, &data);
                        }
                    }
                }
                Mode::Copy => {
                    let labelled = unverified(&uid, pods.clone(), &st.memory);
                    if !labelled.is_empty() {
                        verify_copies(&rule, &ns, &labelled, &mut st.memory, &data).await;
                    }
                    let max = rule.spec.copy.as_ref().map_or(3, |c| c.max_copies).clamp(1, 10);
                    let cp = plan_copies(&r, &uid, usize::try_from(max).unwrap_or(1), pods, &mut st.memory, now);
                    // Expired: deleted above already.
                    if !matches!(expiry, Expiry::Expired { .. }) {
                        deleted += delete_copies(&rule, &ns, &cp.delete, &mut st.memory, &data).await;
                    }
                    plans = cp.pods;
                    if plans.iter().any(|p| matches!(p.decision, Decision::Copy { .. })) {
                        let results = make_copies(&rule, &ns, &container, &plans, &data).await;
                        report::copies(&rule, &container, &mut plans, results, &mut st, &data);
                    }
                    copies = Some(cp.copies.saturating_sub(deleted));
                }
            }
            forget(&mut st.memory, &plans, now);
            wake = next_wake(expiry, &plans, &st.memory, now);
        }
    }

    let outcome = match (&refused, copies) {
        (Some((reason, message)), _) => Outcome::Refused { reason, message: message.clone() },
        (None, None) => Outcome::Planned(&plans),
        (None, Some(copies)) => Outcome::Copies { plans: &plans, copies },
    };
    report::report(&rule, &ns, &container, expiry, outcome, &data).await?;
    data.backoff.forget(&uid);
    // A wake at the expiry is a few milliseconds late, never early: the
    // reconcile then sees it expired.
    let wait = wake
        .map_or(RESYNC, |at| at.saturating_duration_since(Instant::now()) + Duration::from_millis(10))
        .clamp(Duration::from_millis(100), RESYNC);
    let wait =
        if refused.as_ref().is_some_and(|(r, _)| *r == "DryRunRejected") { wait.min(DRY_RUN_RETRY) } else { wait };
    Ok(Action::requeue(wait))
}
