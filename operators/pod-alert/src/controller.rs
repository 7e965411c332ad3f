//! The PodAlert controller: a pod watch (a small projection per pod) whose
//! changes trigger the PodAlerts of the pod's namespace; each reconcile
//! evaluates the pods in scope, steps the PodAlert's incident book, reads
//! log tails for new incidents, hands notifications to the sink workers and
//! writes the status. Debounced: a burst of pod updates is one evaluation.
//!
//! What a tenant can make it hold is bounded: PodAlerts are cached without
//! their status (read once, at first sight, to restore the incident book),
//! at most `--max-podalerts-per-namespace` of a namespace are evaluated, log
//! tails are held once per incident key within `--max-log-bytes`
//! ([`crate::logs::Tails`]), pod views keep only the label keys a served
//! PodAlert's selector references, and notifications wait for the
//! namespace's rate limit ([`crate::throttle`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flotilla_shared::backoff::ErrorBackoff;
use flotilla_shared::conditions::already_said;
use flotilla_shared::health::WatchHealth;
use flotilla_shared::pods::{LabelKeys, NAMESPACE_MARK};
use flotilla_shared::projection;
use flotilla_shared::{AdmissionGuard, AdmissionPolicyArgs, Context, Controller};
use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::crd::{PodAlert, PodAlertStatus, Reason, SecretKeyRef, SinkStatus};
use crate::delivery::{Delivery, Payload, Sink, SinkRules, Target, read_secret};
use crate::error::Error;
use crate::incident::{Book, Change, Transition};
use crate::logs::{Identity, Run, Tail, Tails};
use crate::metrics::AlertMetrics;
use crate::notify::{IncidentView, Notification, alertmanager_alerts};
use crate::observe::{Key, evaluate};
use crate::pod::{PodView, State as RunState, elapsed, view};
use crate::rules::Rules;
use crate::status::{self, Summary};
use crate::throttle::{Held, Limiter, Release};

/// Look at every PodAlert at least this often.
const RESYNC: Duration = Duration::from_secs(300);
/// A sink Secret is checked at most this often per PodAlert.
const SECRET_CHECK_EVERY: Duration = Duration::from_secs(60);
/// A PodAlert refused for its namespace's count looks again this often (one
/// of the others may have gone).
const REFUSED_RECHECK: Duration = Duration::from_secs(30);
/// PodAlerts per list page: each may carry a status of up to 256 KiB.
const PODALERT_PAGE: u32 = 20;

/// Options of the controller (from flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// Only PodAlerts and pods of this namespace.
    pub watch_namespace: Option<String>,
    /// PodAlerts here may set allNamespaces.
    pub cluster_scope: Vec<String>,
    /// Per-request timeout of sinks.
    pub sink_timeout: Duration,
    pub retry: crate::delivery::Retry,
    /// Where sinks may send (`--allowed-sink-cidrs`, `--slack-hosts`).
    pub sink_rules: SinkRules,
    /// Bytes of log tails held, all namespaces (`--max-log-bytes`).
    pub max_log_bytes: usize,
    /// PodAlerts evaluated per namespace (`--max-podalerts-per-namespace`).
    pub max_per_namespace: usize,
    /// Notifications per minute per namespace (0: no limit).
    pub notifications_per_minute: u32,
    /// The PodAlert policy (`--require-admission-policy`): while it is
    /// missing, `allNamespaces` is refused.
    pub admission: AdmissionPolicyArgs,
}

/// One PodAlert's state between reconciles.
#[derive(Default)]
struct State {
    book: Book,
    sinks: BTreeMap<&'static str, Sink>,
    alertmanager: crate::notify::AlertmanagerSchedule,
    secret_checks: HashMap<SecretKeyRef, (Timestamp, Result<(), String>)>,
    /// Held-back counts already added to the metric.
    counted: BTreeMap<&'static str, i64>,
    /// Notifications waiting for the namespace's rate limit, per sink.
    held: BTreeMap<&'static str, Held>,
    /// The conditions last written (their transition times carry on).
    conditions: Vec<Condition>,
    /// What the status last written says (times aside): unchanged, not written.
    written: Option<u64>,
}

/// Statuses read at first sight of a PodAlert (the cache keeps none): the
/// incident book and conditions to start from, taken by its first reconcile.
#[derive(Default)]
struct Restored {
    seen: HashSet<String>,
    pending: HashMap<String, (Book, Vec<Condition>)>,
}

/// Open incidents by (namespace, reason).
type FiringCounts = BTreeMap<(String, Reason), usize>;

/// What every reconcile shares.
pub struct Data {
    pub ctx: Context,
    pub metrics: AlertMetrics,
    pub options: Options,
    pods: projection::Store<PodView>,
    alerts: Store<PodAlert>,
    states: Mutex<HashMap<String, Arc<tokio::sync::Mutex<State>>>>,
    /// Firing incidents per PodAlert UID, by (namespace, reason), for the gauge.
    firing: Mutex<HashMap<String, FiringCounts>>,
    backoff: ErrorBackoff,
    delivery: Delivery,
    trigger: UnboundedSender<ObjectRef<PodAlert>>,
    tails: Arc<Tails>,
    limiter: Mutex<Limiter>,
    restored: Arc<Mutex<Restored>>,
    label_keys: LabelKeys,
    admission: AdmissionGuard,
}

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
    let config = watcher::Config::default().any_semantic().page_size(PODALERT_PAGE);
    let admission = AdmissionGuard::for_operator(&ctx, &options.admission).await?;
    let controller = Controller::new_modified(alerts_api, config, stash)
        .debounce(Duration::from_millis(500))
        .concurrency(8)
        .reconcile_on(rx)
        .reconcile_all_on(admission.changes());
    let http = crate::delivery::http_client(options.sink_timeout, Arc::clone(&options.sink_rules.addresses))?;
    let (pods, writer) = projection::store::<PodView>();
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
        states: Mutex::default(),
        firing: Mutex::default(),
        backoff: ErrorBackoff::default(),
        trigger: tx,
        tails,
        restored,
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
    for (key, text) in logs {
        if let Some(inc) = book.incidents.get_mut(&key) {
            inc.logs = Some(tails.adopt(&key, text, now));
        }
    }
    r.pending.insert(uid, (book, status.conditions));
}

/// Keeps the pod projection and triggers the PodAlerts a change concerns.
/// Starts once the PodAlerts are listed, so that the first list of pods
/// keeps the label keys their selectors reference.
async fn watch_pods(api: Api<Pod>, writer: projection::Writer<PodView>, data: Arc<Data>, health: WatchHealth) {
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
        |namespaces| {
            data.metrics.pods_cached.set(i64::try_from(data.pods.len()).unwrap_or(i64::MAX));
            let alerts = data.alerts.state();
            // `allNamespaces` counts only where it is honoured: a refused
            // one must not wake on every pod change of the cluster.
            let everywhere = |a: &PodAlert| data.everywhere(a);
            for alert in flotilla_shared::pods::concerned(&alerts, namespaces, everywhere) {
                let _ = data.trigger.unbounded_send(alert);
            }
        },
    )
    .await;
}

/// The order PodAlerts of a namespace are served in: oldest first.
fn seniority(a: &PodAlert) -> (Option<Timestamp>, String) {
    (a.metadata.creation_timestamp.as_ref().map(|t| t.0), a.name_any())
}

impl Data {
    fn state(&self, uid: &str) -> Arc<tokio::sync::Mutex<State>> {
        let mut states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(states.entry(uid.to_string()).or_insert_with(|| {
            // First sight (or an operator restart): the status remembers
            // open incidents and what was notified.
            let mut r = self.restored.lock().unwrap_or_else(PoisonError::into_inner);
            r.seen.insert(uid.to_string());
            let (book, conditions) = r.pending.remove(uid).unwrap_or_default();
            Arc::new(tokio::sync::Mutex::new(State { book, conditions, ..State::default() }))
        }))
    }

    /// The UIDs of the PodAlerts evaluated (the oldest
    /// `--max-podalerts-per-namespace` of each namespace), and the label
    /// keys their selectors reference set for the pod views.
    fn served(&self) -> HashSet<String> {
        let alerts = self.alerts.state();
        let mut by_ns: BTreeMap<&str, Vec<&PodAlert>> = BTreeMap::new();
        for a in &alerts {
            by_ns.entry(a.metadata.namespace.as_deref().unwrap_or_default()).or_default().push(a);
        }
        let mut served = HashSet::new();
        let mut keys = BTreeSet::new();
        for list in by_ns.values_mut() {
            list.sort_by_key(|a| seniority(a));
            for a in list.iter().take(self.options.max_per_namespace) {
                served.extend(a.uid());
                let scope = self.scope(a);
                keys.insert((scope.clone(), NAMESPACE_MARK.to_string()));
                keys.extend(a.spec.selector.iter().flat_map(|s| s.keys()).map(|k| (scope.clone(), k.to_string())));
            }
        }
        self.label_keys.set(keys);
        served
    }

    /// The namespace whose pods `a` reads (None: every namespace, where its
    /// `allNamespaces` is honoured).
    fn scope(&self, a: &PodAlert) -> Option<String> {
        if self.everywhere(a) { None } else { a.metadata.namespace.clone() }
    }

    /// Whether `a`'s `allNamespaces` is honoured: set, in a trusted namespace,
    /// and the admission policy in place. A refused one neither keeps label
    /// keys of every namespace nor wakes on every pod change.
    fn everywhere(&self, a: &PodAlert) -> bool {
        a.spec.all_namespaces
            && a.metadata.namespace.as_ref().is_some_and(|n| self.options.cluster_scope.contains(n))
            && self.admission.check().is_ok()
    }

    /// Drops the state of deleted PodAlerts (their sink workers end), the
    /// log tails no incident holds any more, and idle rate-limit buckets.
    fn collect_garbage(&self) {
        let live: HashSet<String> = self.alerts.state().iter().filter_map(|a| a.uid()).collect();
        self.states.lock().unwrap_or_else(PoisonError::into_inner).retain(|uid, _| live.contains(uid));
        {
            let mut r = self.restored.lock().unwrap_or_else(PoisonError::into_inner);
            r.seen.retain(|uid| live.contains(uid));
            r.pending.retain(|uid, _| live.contains(uid));
        }
        self.tails.collect();
        self.metrics.log_tail_bytes.set(i64::try_from(self.tails.held()).unwrap_or(i64::MAX));
        self.limiter.lock().unwrap_or_else(PoisonError::into_inner).forget_idle(Timestamp::now());
        let gone: Vec<String> = {
            let firing = self.firing.lock().unwrap_or_else(PoisonError::into_inner);
            firing.keys().filter(|u| !live.contains(*u)).cloned().collect()
        };
        for uid in gone {
            self.set_firing(&uid, BTreeMap::new());
        }
        self.backoff.retain(|uid| live.contains(uid));
    }

    /// Records one PodAlert's firing counts and updates the gauge's series.
    fn set_firing(&self, uid: &str, counts: BTreeMap<(String, Reason), usize>) {
        let mut firing = self.firing.lock().unwrap_or_else(PoisonError::into_inner);
        let old = if counts.is_empty() { firing.remove(uid) } else { firing.insert(uid.to_string(), counts.clone()) };
        let mut touched: Vec<(String, Reason)> = counts.keys().cloned().collect();
        touched.extend(old.into_iter().flat_map(|o| o.into_keys()));
        for (ns, reason) in touched {
            let total: usize = firing.values().filter_map(|m| m.get(&(ns.clone(), reason))).sum();
            self.metrics.set_firing(&ns, reason, total);
        }
    }

    fn trigger_for(&self, alert: &PodAlert) -> impl Fn() + Send + Sync + 'static {
        let (tx, oref) = (self.trigger.clone(), ObjectRef::from_obj(alert));
        move || {
            let _ = tx.unbounded_send(oref.clone());
        }
    }
}

/// Failures back off per PodAlert (1 s doubling to 5 min).
pub fn error_policy(alert: Arc<PodAlert>, error: &Error, data: Arc<Data>) -> Action {
    let uid = alert.uid().unwrap_or_default();
    let d = data.backoff.next(&uid);
    tracing::debug!(error = error.metric_label(), delay = ?d, "will retry");
    Action::requeue(d)
}

fn condition<'a>(conditions: &'a [Condition], t: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == t)
}

/// What a status says, condition times aside: equal fingerprints, no write.
fn fingerprint(s: &PodAlertStatus) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut s = s.clone();
    for c in &mut s.conditions {
        c.last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH);
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_vec(&s).unwrap_or_default().hash(&mut h);
    h.finish()
}

pub async fn reconcile(alert: Arc<PodAlert>, data: Arc<Data>) -> Result<Action, Error> {
    let ns = alert.namespace().ok_or(Error::NoNamespace)?;
    let uid = alert.uid().unwrap_or_default();
    let name = alert.name_any();
    let oref = alert.object_ref(&());
    let served = data.served().contains(&uid);
    // Until the pods are listed (with the label keys this PodAlert's
    // selector reads), an evaluation would see too few pods.
    let keys_listed = data.label_keys.covers(
        data.scope(&alert).as_deref(),
        alert.spec.selector.iter().flat_map(|s| s.keys()).chain([NAMESPACE_MARK]),
    );
    if served && (!data.pods.is_ready() || !keys_listed) {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let state = data.state(&uid);
    let mut st = state.lock().await;
    let now = Timestamp::now();
    let mut summary = Summary::default();

    let rules = if served {
        match Rules::new(&alert.spec, &ns, &data.options.cluster_scope) {
            // Every namespace's pod logs are what the PodAlert policy lets
            // only those who may read them all ask for: refused while that
            // policy is missing.
            Ok(r) => match data.admission.check() {
                Err(why) if r.all_namespaces => {
                    summary.invalid = Some(("AdmissionPolicyMissing".to_string(), format!("allNamespaces: {why}")));
                    None
                }
                _ => Some(r),
            },
            Err(e) => {
                summary.invalid = Some((e.reason().to_string(), e.to_string()));
                None
            }
        }
    } else {
        let n = data.alerts.state().iter().filter(|a| a.metadata.namespace.as_deref() == Some(ns.as_str())).count();
        let max = data.options.max_per_namespace;
        summary.invalid = Some((
            "TooManyPodAlerts".to_string(),
            format!(
                "namespace {ns} has {n} PodAlerts; the operator evaluates the {max} oldest (--max-podalerts-per-namespace): delete one, or merge their selectors"
            ),
        ));
        None
    };
    if let Some((reason, message)) = &summary.invalid {
        if !already_said(Some(&st.conditions), "Ready", reason, message) {
            data.ctx.events.warning(&oref, reason, "Validate", format!("PodAlert not evaluated: {message}"));
        }
        st.book = Book::default();
        st.sinks.clear();
        st.held.clear();
    }
    let mut next: Option<Timestamp> = None;
    if let Some(rules) = rules.as_ref().filter(|r| r.enabled) {
        summary.log_lines = rules.tail_lines;
        summary.log_bytes = rules.max_bytes;
        let transitions = evaluate_and_step(&alert, &ns, rules, &mut st, &mut summary, &data, now);
        sync_sinks(&alert, &ns, &mut st, &data).await;
        check_sink_secrets(&alert, &ns, &mut st, &mut summary, &data, now).await;
        let transitions = read_logs(&ns, rules, transitions, &mut st, &data, now).await;
        notify(&alert, rules, &oref, &transitions, &mut st, &data, now);
        next = st.book.next_deadline(rules, now);
        let changed = !transitions.is_empty();
        if let Some(at) = push_alertmanager(&alert, &ns, rules, &mut st, &data, changed, now) {
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        if let Some((at, waiting)) = release_held(&alert, &ns, &mut st, &data, now) {
            next = Some(next.map_or(at, |n| n.min(at)));
            summary.throttled = Some(format!(
                "{waiting} notifications wait for namespace {ns}'s rate limit ({} per minute, --max-notifications-per-minute-per-namespace); when several wait for a sink they go out as one summary",
                data.options.notifications_per_minute
            ));
            if condition(&st.conditions, status::THROTTLED).is_none_or(|c| c.status != "True") {
                data.ctx.events.warning(
                    &oref,
                    "NotificationsThrottled",
                    "Notify",
                    format!("notifications wait for namespace {ns}'s rate limit; they go out as it allows, several as one summary"),
                );
            }
        }
    } else if rules.is_some() {
        summary.paused = true;
        st.book = Book::default();
        st.sinks.clear();
        st.held.clear();
    }

    // Sinks' delivery state, and held-back counts into the metric.
    summary.sinks = sink_statuses(&alert, &st);
    for (cause, total) in &st.book.held_back {
        let before = st.counted.get(cause).copied().unwrap_or(0);
        data.metrics.suppressed(cause, u64::try_from(total - before).unwrap_or(0));
    }
    st.counted = st.book.held_back.clone();
    let mut counts: BTreeMap<(String, Reason), usize> = BTreeMap::new();
    for i in st.book.incidents.values().filter(|i| i.phase.is_open()) {
        *counts.entry((i.key.namespace.clone(), i.key.reason)).or_default() += 1;
    }
    data.set_firing(&uid, counts);
    data.metrics.log_tail_bytes.set(i64::try_from(data.tails.held()).unwrap_or(i64::MAX));

    let new = status::build(Some(&st.conditions), alert.metadata.generation, &st.book, &summary);
    let print = fingerprint(&new);
    if st.written != Some(print) {
        let api: Api<PodAlert> = Api::namespaced(data.ctx.client.clone(), &ns);
        flotilla_shared::apply_status(&api, &name, &data.ctx.field_manager, &new).await.map_err(Error::Status)?;
        st.written = Some(print);
        st.conditions = new.conditions;
    }
    data.backoff.forget(&uid);
    if !served {
        return Ok(Action::requeue(REFUSED_RECHECK));
    }
    let wait = next.map_or(RESYNC, |at| elapsed(now, at)).clamp(Duration::from_secs(1), RESYNC);
    Ok(Action::requeue(wait))
}

fn evaluate_and_step(
    alert: &PodAlert,
    ns: &str,
    rules: &Rules,
    st: &mut State,
    summary: &mut Summary,
    data: &Data,
    now: Timestamp,
) -> Vec<Transition> {
    let mut cut = 0;
    let pods: Vec<Arc<PodView>> = data
        .pods
        .state()
        .into_iter()
        .filter(|p| rules.all_namespaces || p.namespace == ns)
        .filter(|p| match rules.selector.as_ref() {
            None => true,
            // Labels past what a view keeps match no selector.
            Some(_) if p.labels.cut => {
                cut += 1;
                false
            }
            Some(s) => p.labels.matched_by(s),
        })
        .collect();
    summary.pods = pods.len();
    let findings = evaluate(pods.iter().map(AsRef::as_ref), rules, &mut st.book.history, now);
    summary.skipped = findings.skipped.iter().map(|(k, v)| (k.as_str().to_string(), i64::from(*v))).collect();
    if cut > 0 {
        summary.skipped.insert("LabelsTooLarge".to_string(), cut);
    }
    let transitions = st.book.step(&findings, rules, now);
    for t in &transitions {
        tracing::info!(podalert = %alert.name_any(), incident = %t.key, change = ?t.change, "incident");
    }
    transitions
}

/// Which run of `container` in `pod` holds the crash, from the newest view:
/// whether it is the kubelet's `previous`, and when it ran.
fn crashed_run(data: &Data, ns: &str, pod: &str, container: &str, fallback: bool) -> (bool, Option<Run>) {
    let Some(view) = data.pods.get(&format!("{ns}/{pod}")) else { return (fallback, None) };
    let Some(c) = view.containers.iter().find(|c| c.name == container) else { return (fallback, None) };
    // A container seen in back-off may have restarted since: then the
    // crashed run is `previous` (the read checks the lines' times too).
    let previous = c.state.crashed_run_is_previous();
    let term = match &c.state {
        RunState::Terminated(t) => Some(t),
        _ => c.last_termination.as_ref(),
    };
    let run = term.and_then(|t| t.finished_at.map(|finished| Run { started: t.started_at, finished }));
    (previous, run)
}

/// How long a failed log read waits before its one retry.
const LOG_READ_RETRY: Duration = Duration::from_secs(2);
/// Log reads one reconcile waits on side by side. A PodAlert over the whole
/// cluster opens many incidents at once (after a start, on a bad rollout),
/// and a failed read waits [`LOG_READ_RETRY`] or up to the read timeout: one
/// after the other, 20 incidents on unreachable nodes held the PodAlert's
/// status for minutes (`cargo xtask bench scale`). Memory stays bounded by
/// the reads in flight across all PodAlerts (`logs::READS_IN_FLIGHT`).
const LOG_READS_AT_ONCE: usize = 16;

/// A log tail a transition needs read (or shared from another PodAlert's read).
struct TailRead {
    key: Key,
    id: Identity,
    namespace: String,
    container: String,
    /// The incident's log source first, then one other pod of it.
    pods: Vec<String>,
    /// The crashed run is `previous`, as the evaluation saw it.
    previous: bool,
}

/// Reads the log tail of each newly opened or escalated incident, or shares
/// the one another PodAlert read for the same incident key; drops the
/// transitions a log pattern silences. The reads run side by side
/// ([`LOG_READS_AT_ONCE`]); the book is changed only once they are done.
async fn read_logs(
    ns: &str,
    rules: &Rules,
    transitions: Vec<Transition>,
    st: &mut State,
    data: &Data,
    now: Timestamp,
) -> Vec<Transition> {
    let (lines, bytes) = (rules.tail_lines, rules.max_bytes);
    let reads: Vec<Option<TailRead>> = transitions
        .iter()
        .map(|t| {
            if !matches!(t.change, Change::Opened { .. } | Change::Escalated { .. }) {
                return None;
            }
            let inc = st.book.incidents.get(&t.key)?;
            let src = inc.log_source.as_ref().filter(|_| !inc.key.container.is_empty())?;
            // The kubelet may have dropped a run's log file (it keeps one
            // dead container per container): then another pod of the
            // incident, at most two pods.
            let mut pods = vec![src.pod.clone()];
            pods.extend(inc.pods.iter().filter(|p| **p != src.pod).take(1).cloned());
            Some(TailRead {
                key: t.key.clone(),
                id: Identity { pod: src.pod.clone(), incarnation: src.incarnation.clone().unwrap_or_default() },
                namespace: if inc.key.namespace.is_empty() { ns.to_string() } else { inc.key.namespace.clone() },
                container: inc.key.container.clone(),
                pods,
                previous: src.previous,
            })
        })
        .collect();
    let tails: Vec<Option<(Arc<Tail>, String)>> = futures::stream::iter(reads)
        .map(|read| async move {
            match read {
                Some(read) => Some(read_tail(data, read, lines, bytes, now).await),
                None => None,
            }
        })
        .buffered(LOG_READS_AT_ONCE)
        .collect()
        .await;

    let mut kept = Vec::with_capacity(transitions.len());
    for (t, tail) in transitions.into_iter().zip(tails) {
        if !matches!(t.change, Change::Opened { .. } | Change::Escalated { .. }) {
            kept.push(t);
            continue;
        }
        let Some(inc) = st.book.incidents.get_mut(&t.key) else { continue };
        let judged = match tail {
            Some((tail, text)) => {
                inc.logs = Some(tail);
                text
            }
            None => inc.log_text(lines, bytes),
        };
        if let Some(pattern) = rules.suppressing_pattern(&judged) {
            tracing::info!(incident = %t.key, pattern, "held back: the log matches ignore.logPatterns");
            st.book.silence(&t.key);
            continue;
        }
        kept.push(t);
    }
    kept
}

/// One incident's tail: shared when another PodAlert read it for this run
/// (one read at a time per incident key), else read and stored. The whole
/// tail is returned to be judged (ignore.logPatterns); what is held is what
/// the namespace's share leaves room for.
async fn read_tail(data: &Data, read: TailRead, lines: u32, bytes: usize, now: Timestamp) -> (Arc<Tail>, String) {
    let gate = data.tails.gate(&read.key);
    let _reading = gate.lock().await;
    if let Some(tail) = data.tails.reusable(&read.key, &read.id, lines, bytes, now) {
        let text = tail.view(lines, bytes);
        return (tail, text);
    }
    let mut logs = Ok(String::new());
    'pods: for p in &read.pods {
        for attempt in 0..2 {
            if attempt > 0 {
                // While a run is being replaced the kubelet can answer
                // "unable to retrieve container logs" (seen in CI): once
                // more, a moment later, as the newest view then tells it.
                tokio::time::sleep(LOG_READ_RETRY).await;
            }
            let (previous, run) = crashed_run(data, &read.namespace, p, &read.container, read.previous);
            logs =
                crate::logs::read(&data.ctx.client, &read.namespace, p, &read.container, previous, run, lines, bytes)
                    .await;
            if logs.is_ok() {
                break 'pods;
            }
        }
    }
    let result = if logs.is_ok() { "success" } else { "unavailable" };
    data.metrics.log_reads.with_label_values(&[result]).inc();
    if let Err(e) = &logs {
        tracing::warn!(incident = %read.key, pod = %read.id.pod, error = %e, "could not read the log tail");
    }
    let text = logs.unwrap_or_else(|e| e);
    let tail = data.tails.store(&read.key, read.id, lines, bytes, text.clone(), now);
    (tail, text)
}

/// Starts, replaces or stops sink workers to match the spec.
async fn sync_sinks(alert: &PodAlert, ns: &str, st: &mut State, data: &Data) {
    let s = &alert.spec.sinks;
    let wanted: [(&'static str, Option<Target>, &'static str, bool); 3] = [
        (
            "slack",
            s.slack
                .as_ref()
                .map(|x| Target::Secret { namespace: ns.to_string(), secret: x.webhook_secret_ref.clone() }),
            "",
            false,
        ),
        (
            "webhook",
            s.webhook.as_ref().map(|x| Target::Secret { namespace: ns.to_string(), secret: x.url_secret_ref.clone() }),
            "",
            false,
        ),
        ("alertmanager", s.alertmanager.as_ref().map(|x| Target::Url(x.url.clone())), "/api/v2/alerts", true),
    ];
    for (name, target, path, coalesce) in wanted {
        match target {
            None => {
                st.sinks.remove(name);
                st.held.remove(name);
            }
            Some(t) => {
                if st.sinks.get(name).is_none_or(|s| s.target != t) {
                    let sink = data.delivery.start(name, t, path, coalesce, data.trigger_for(alert));
                    st.sinks.insert(name, sink);
                    if name == "alertmanager" {
                        st.alertmanager.reset();
                    }
                }
            }
        }
    }
}

/// Checks that the sinks' Secrets exist and hold a usable URL (at most once
/// a minute each), so a misconfiguration shows before the first incident.
async fn check_sink_secrets(
    alert: &PodAlert,
    ns: &str,
    st: &mut State,
    summary: &mut Summary,
    data: &Data,
    now: Timestamp,
) {
    let s = &alert.spec.sinks;
    let refs = [
        ("slack", s.slack.as_ref().map(|x| &x.webhook_secret_ref)),
        ("webhook", s.webhook.as_ref().map(|x| &x.url_secret_ref)),
    ];
    let rules = &data.delivery.rules;
    if let Some(Err(e)) = s.alertmanager.as_ref().map(|am| crate::delivery::check_url(&am.url, false, rules)) {
        summary.sink_problems.push(("alertmanager".into(), e));
    }
    for (sink, r) in refs {
        let Some(r) = r else { continue };
        let fresh = st.secret_checks.get(r).is_some_and(|(at, _)| elapsed(*at, now) < SECRET_CHECK_EVERY);
        if !fresh {
            let result = match read_secret(&data.ctx.client, ns, r).await {
                Ok(url) => crate::delivery::check_url(&url, sink == "slack", rules)
                    .map(|_| ())
                    .map_err(|e| format!("Secret {}/{} key {}: {e}", ns, r.name, r.key)),
                Err(f) => Err(f.message),
            };
            st.secret_checks.insert(r.clone(), (now, result));
        }
        if let Some((_, Err(e))) = st.secret_checks.get(r) {
            let was = condition(&st.conditions, status::SINKS_HEALTHY);
            if !was.is_some_and(|c| c.message.contains(e.as_str())) {
                tracing::warn!(podalert = %alert.name_any(), sink, error = %e, "sink misconfigured");
                data.ctx.events.warning(
                    &alert.object_ref(&()),
                    "SinkMisconfigured",
                    "Validate",
                    format!("{sink}: {e}"),
                );
            }
            summary.sink_problems.push((sink.to_string(), e.clone()));
        }
    }
    st.secret_checks.retain(|k, _| refs.iter().any(|(_, r)| *r == Some(k)));
}

/// The document `n` is for `sink`, rendered when it is sent.
fn payload(sink: &str, n: Notification) -> Payload {
    if sink == "slack" { Payload::new(move || n.slack()) } else { Payload::new(move || n.webhook()) }
}

/// Sends each transition to the Events sink, and to Slack and the webhook
/// as the namespace's rate limit allows (the rest wait, in order).
fn notify(
    alert: &PodAlert,
    rules: &Rules,
    oref: &ObjectReference,
    transitions: &[Transition],
    st: &mut State,
    data: &Data,
    now: Timestamp,
) {
    let podalert = (alert.namespace().unwrap_or_default(), alert.name_any());
    let ns = podalert.0.clone();
    for t in transitions {
        let Some(inc) = st.book.incidents.get(&t.key) else { continue };
        let n = Notification {
            podalert: podalert.clone(),
            change: t.change.clone(),
            incident: IncidentView::of(inc, rules.tail_lines, rules.max_bytes),
            at: now,
        };
        if alert.spec.sinks.events {
            match t.change {
                Change::Resolved => data.ctx.events.normal(oref, n.event_reason(), "Notify", n.event_note()),
                _ => data.ctx.events.warning(oref, n.event_reason(), "Notify", n.event_note()),
            }
            data.metrics.notified("events", "success");
        }
        for name in ["slack", "webhook"] {
            let Some(sink) = st.sinks.get(name) else { continue };
            let held = st.held.entry(name).or_default();
            let token =
                held.is_empty() && data.limiter.lock().unwrap_or_else(PoisonError::into_inner).try_take(&ns, now);
            if token {
                sink.send(payload(name, n.clone()), &data.metrics, name);
            } else if held.hold(n.clone()) {
                data.metrics.notified(name, "held");
            } else {
                data.metrics.notified(name, "dropped");
            }
        }
    }
}

/// Sends what waits for the rate limit as tokens allow: each alone when the
/// tokens cover them, else the oldest alone or all as one summary. Returns,
/// while some still wait, when to look again and how many wait.
fn release_held(alert: &PodAlert, ns: &str, st: &mut State, data: &Data, now: Timestamp) -> Option<(Timestamp, usize)> {
    let podalert = (ns.to_string(), alert.name_any());
    let mut limiter = data.limiter.lock().unwrap_or_else(PoisonError::into_inner);
    for (name, held) in st.held.iter_mut() {
        let Some(sink) = st.sinks.get(name) else { continue };
        while !held.is_empty() {
            let tokens = limiter.available(ns, now);
            if !limiter.try_take(ns, now) {
                break;
            }
            match held.release(tokens) {
                Some(Release::One(n)) => {
                    sink.send(payload(name, *n), &data.metrics, name);
                }
                Some(Release::Summary(all, more)) => {
                    data.metrics.notifications.with_label_values(&[name, "summarized"]).inc_by(all.len() as u64);
                    let body = if *name == "slack" {
                        crate::throttle::slack_summary(&podalert, &all, more)
                    } else {
                        crate::throttle::webhook_summary(&podalert, &all, more, now)
                    };
                    sink.send(body, &data.metrics, name);
                }
                None => break,
            }
        }
    }
    st.held.retain(|_, h| !h.is_empty());
    let waiting: usize = st.held.values().map(|h| h.waiting.len() + h.overflow).sum();
    (waiting > 0).then(|| (limiter.next_token(ns, now), waiting))
}

/// Sends Alertmanager the full list of alerts when something changed or a
/// minute passed; returns when to send again (None: nothing to tell). A
/// change takes a token of the namespace's rate limit; without one it goes
/// with the minute's re-send.
fn push_alertmanager(
    alert: &PodAlert,
    ns: &str,
    rules: &Rules,
    st: &mut State,
    data: &Data,
    changed: bool,
    now: Timestamp,
) -> Option<Timestamp> {
    let sink = st.sinks.get("alertmanager")?;
    let incidents = st.book.for_alertmanager(now);
    let changed = changed
        && (st.alertmanager.is_due(now)
            || data.limiter.lock().unwrap_or_else(PoisonError::into_inner).try_take(ns, now));
    let (send, next) = st.alertmanager.tick(!incidents.is_empty(), changed, now);
    if send {
        let body = alertmanager_alerts((ns, &alert.name_any()), &incidents, (rules.tail_lines, rules.max_bytes), now);
        sink.send(body, &data.metrics, "alertmanager");
    }
    next
}

fn sink_statuses(alert: &PodAlert, st: &State) -> Vec<SinkStatus> {
    let mut out = Vec::new();
    if alert.spec.sinks.events {
        out.push(SinkStatus { name: "events".into(), healthy: true, ..Default::default() });
    }
    for (name, sink) in &st.sinks {
        out.push(sink.state().to_status(name));
    }
    out
}
