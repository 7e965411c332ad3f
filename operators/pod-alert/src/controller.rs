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
use flotilla_shared::per_object::PerObject;
use flotilla_shared::pods::{LabelKeys, NAMESPACE_MARK};
use flotilla_shared::projection;
use flotilla_shared::{AdmissionGuard, AdmissionPolicyArgs, Context, FromSpecs};
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::annotation_silences::SilenceStore;
use crate::crd::{PodAlert, Reason, SecretKeyRef};
use crate::delivery::{Delivery, Sink, SinkRules};
use crate::error::Error;
use crate::evaluation::{Changes, Dirty, Evaluation, OneNamespace, Pods};
use crate::incident::{Book, Transition};
use crate::log_reads::read_logs;
use crate::logs::Tails;
use crate::metrics::AlertMetrics;
use crate::pod::{PodView, elapsed};
use crate::rules::Rules;
use crate::sinks::{self, Outbox};
use crate::status::Summary;
use crate::throttle::{Held, Limiter};
use crate::workload_signals::failed_container;
use crate::{apply, report};
use workload_watches::Signals;

mod silence_report;
mod start;
mod workload_watches;
use silence_report::{silence_statuses, warn_refused_silences};
pub use start::run;

/// Look at every PodAlert at least this often.
const RESYNC: Duration = Duration::from_secs(300);
/// A sink Secret is checked at most this often per PodAlert.
pub(crate) const SECRET_CHECK_EVERY: Duration = Duration::from_secs(60);
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
    /// Name in each notification the `kubectl` line that creates a
    /// PodDebugger for the incident (`--debug-hint`).
    pub debug_hint: bool,
}

/// One PodAlert's state between reconciles.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) book: Book,
    /// The pods' findings, kept per namespace between reconciles.
    pub(crate) evaluation: Evaluation,
    pub(crate) sinks: BTreeMap<&'static str, Sink>,
    pub(crate) alertmanager: crate::notify::AlertmanagerSchedule,
    pub(crate) secret_checks: HashMap<SecretKeyRef, (Timestamp, Result<(), String>)>,
    /// Held-back counts already added to the metric.
    pub(crate) counted: BTreeMap<&'static str, i64>,
    /// Notifications waiting for the namespace's rate limit, per sink.
    pub(crate) held: BTreeMap<&'static str, Held>,
    /// The conditions last written (their transition times carry on).
    pub(crate) conditions: Vec<Condition>,
    /// What the status last written says (times aside): unchanged, not written.
    pub(crate) written: Option<flotilla_shared::status::Fingerprint>,
    /// The refused silences last warned about: warned again only when they change.
    pub(crate) refused_silences: String,
}

/// Statuses read at first sight of a PodAlert (the cache keeps none): the
/// incident book and conditions to start from, taken by its first reconcile.
#[derive(Default)]
pub(crate) struct Restored {
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
    pub(crate) pods: projection::Store<PodView, projection::Own<PodView>>,
    pub(crate) alerts: Store<PodAlert>,
    /// [`Data::served`], derived again only when a PodAlert's spec changed.
    pub(crate) served: FromSpecs<Arc<HashSet<String>>>,
    pub(crate) states: PerObject<State>,
    /// Firing incidents per PodAlert UID, by (namespace, reason), for the gauge.
    pub(crate) firing: Mutex<HashMap<String, FiringCounts>>,
    pub(crate) backoff: ErrorBackoff,
    pub(crate) delivery: Delivery,
    pub(crate) trigger: UnboundedSender<ObjectRef<PodAlert>>,
    pub(crate) tails: Arc<Tails>,
    pub(crate) limiter: Mutex<Limiter>,
    pub(crate) restored: Arc<Mutex<Restored>>,
    pub(crate) label_keys: LabelKeys,
    pub(crate) admission: AdmissionGuard,
    /// The namespaces' silence annotations (none watched with `--watch-namespace`).
    pub(crate) namespace_silences: Arc<SilenceStore>,
    /// The workloads' silence annotations, per kind.
    pub(crate) workload_silences: Vec<(&'static str, Arc<SilenceStore>)>,
    /// Deployments whose rollout stopped and Jobs that ended
    /// ([`crate::workload_signals`]), fed by the same watches.
    pub(crate) signals: Signals,
    /// The namespaces changed for each cluster-wide PodAlert since its last
    /// evaluation ([`crate::evaluation`]).
    pub(crate) changes: Changes,
}

/// The order PodAlerts of a namespace are served in: oldest first.
fn seniority(a: &PodAlert) -> (Option<Timestamp>, String) {
    (a.metadata.creation_timestamp.as_ref().map(|t| t.0), a.name_any())
}

impl Data {
    fn state(&self, uid: &str) -> Arc<tokio::sync::Mutex<State>> {
        self.states.get(uid, || {
            // First sight (or an operator restart): the status remembers
            // open incidents and what was notified.
            let mut r = self.restored.lock().unwrap_or_else(PoisonError::into_inner);
            r.seen.insert(uid.to_string());
            let (book, conditions) = r.pending.remove(uid).unwrap_or_default();
            State { book, conditions, ..State::default() }
        })
    }

    /// The UIDs of the PodAlerts evaluated (the oldest
    /// `--max-podalerts-per-namespace` of each namespace), and the label
    /// keys their selectors reference set for the pod views. Derived again
    /// only when a PodAlert came, went or changed its spec, or the
    /// admission policy came or went ([`FromSpecs`]): every reconcile asks,
    /// and deriving it reads every PodAlert (37 % of the operator's CPU with
    /// 500 PodAlerts, issue 28).
    fn served(&self) -> Arc<HashSet<String>> {
        let admitted = u64::from(self.admission.check().is_ok());
        self.served.get(&self.alerts, admitted, |alerts| Arc::new(self.derive_served(alerts)))
    }

    fn derive_served(&self, alerts: &[Arc<PodAlert>]) -> HashSet<String> {
        let mut by_ns: BTreeMap<&str, Vec<&PodAlert>> = BTreeMap::new();
        for a in alerts {
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
                keys.extend(a.spec.selector_keys().map(|k| (scope.clone(), k.to_string())));
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
        self.states.remove_gone(|uid| live.contains(uid));
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
        self.changes.retain(|uid| live.contains(uid));
    }

    /// Notes for each cluster-wide PodAlert the namespaces a watch event
    /// touched: its next evaluation reads those again, not every pod.
    pub(crate) fn note_touched(&self, alerts: &[Arc<PodAlert>], touched: flotilla_shared::pods::Touched<'_>) {
        for a in alerts.iter().filter(|a| self.everywhere(a)) {
            if let Some(uid) = a.metadata.uid.as_deref() {
                self.changes.touched(uid, touched.namespaces, touched.listed);
            }
        }
    }

    /// Records one PodAlert's firing counts and updates the gauge's series.
    pub(crate) fn set_firing(&self, uid: &str, counts: BTreeMap<(String, Reason), usize>) {
        let mut firing = self.firing.lock().unwrap_or_else(PoisonError::into_inner);
        let old = if counts.is_empty() { firing.remove(uid) } else { firing.insert(uid.to_string(), counts.clone()) };
        let mut touched: Vec<(String, Reason)> = counts.keys().cloned().collect();
        touched.extend(old.into_iter().flat_map(|o| o.into_keys()));
        for (ns, reason) in touched {
            let total: usize = firing.values().filter_map(|m| m.get(&(ns.clone(), reason))).sum();
            self.metrics.set_firing(&ns, reason, total);
        }
    }

    /// Wakes `alert`'s reconcile (a sink worker's delivery state changed).
    pub(crate) fn trigger_for(&self, alert: &PodAlert) -> impl Fn() + Clone + Send + Sync + 'static {
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

pub(crate) fn condition<'a>(conditions: &'a [Condition], t: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == t)
}

/// One PodAlert: snapshot (is it served, are its pods listed, its state)
/// → plan (its rules admitted, the pods evaluated, the incident book
/// stepped; the new incidents' log tails read and judged,
/// [`crate::log_reads`]; the sinks' Secrets read and the deliveries decided
/// within the rate limit, [`crate::sinks`]) → apply (sink workers started
/// or stopped, documents handed to them: [`crate::apply`]) → report
/// (status, Events, metrics: [`crate::report`]).
pub async fn reconcile(alert: Arc<PodAlert>, data: Arc<Data>) -> Result<Action, Error> {
    let ns = alert.namespace().ok_or(Error::NoNamespace)?;
    let uid = alert.uid().unwrap_or_default();
    let oref = alert.object_ref(&());
    let served = data.served().contains(&uid);
    // Until the pods are listed (with the label keys this PodAlert's
    // selector reads), an evaluation would see too few pods. The list's
    // completion wakes every PodAlert (`watch_pods`); the resync is only a
    // fallback. Polling every second, 903 PodAlerts made 45,963 reconciles
    // during a 6-minute first list of 20,000 pods (issue 28).
    let keys_listed =
        data.label_keys.covers(data.scope(&alert).as_deref(), alert.spec.selector_keys().chain([NAMESPACE_MARK]));
    // Nor before the namespaces' and workloads' silences are: a restart
    // must not notify what a silence covers (the lists' completion wakes
    // every PodAlert).
    let silences_listed = data.namespace_silences.is_listed()
        && data.workload_silences.iter().all(|(_, s)| s.is_listed())
        && data.signals.is_listed();
    if served && (!data.pods.is_ready() || !keys_listed || !silences_listed) {
        return Ok(Action::requeue(RESYNC));
    }
    let state = data.state(&uid);
    let mut st = state.lock().await;
    let now = Timestamp::now();
    let mut summary = Summary::default();

    // What changed for a cluster-wide PodAlert, taken before its rules copy
    // the namespaces' silences: a silence written after that copy leaves
    // its mark for the next reconcile (the watch writes, then marks).
    let touched = if data.everywhere(&alert) { data.changes.take(&uid) } else { Dirty::All };
    let rules = match admitted_rules(&alert, &ns, served, &data) {
        Ok(rules) => Some(rules),
        Err((reason, message)) => {
            report::refused(&oref, &st, &data, &reason, &message);
            summary.invalid = Some((reason, message));
            st.book = Book::default();
            st.evaluation = Evaluation::default();
            st.sinks.clear();
            st.held.clear();
            None
        }
    };
    let mut next: Option<Timestamp> = None;
    if let Some(rules) = rules.as_ref().filter(|r| r.enabled) {
        summary.log_lines = rules.tail_lines;
        summary.log_bytes = rules.max_bytes;
        summary.events = rules.events;
        let (transitions, signals_recheck) =
            evaluate_and_step(&alert, &ns, touched, rules, &mut st, &mut summary, &data, now);
        let transitions = read_logs(&ns, rules, transitions, &mut st, &data, now).await;
        let workers = sinks::worker_changes(&alert, &ns, &mut st);
        let misconfigured = sinks::check_sink_secrets(&alert, &ns, &mut st, &mut summary, &data, now).await;
        sinks::learn_threads(&alert, &mut st);
        let mut out = Outbox::default();
        sinks::notify(&alert, rules, &transitions, &mut st, &data, now, &mut out);
        next = st.book.next_deadline(rules, now);
        // When time alone changes what the pods show (a crash leaving the
        // restart window, a silence ending): looked at then.
        if let Some(at) = st.evaluation.recheck_at().into_iter().chain(signals_recheck).min() {
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        let changed = !transitions.is_empty();
        if let Some(at) = sinks::push_alertmanager(&alert, &ns, rules, &mut st, &data, changed, now, &mut out) {
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        let waiting = sinks::release_held(&alert, &ns, &mut st, &data, now, &mut out);

        apply::workers(workers, data.trigger_for(&alert), &mut st, &data);
        apply::send(&mut out, &st, &data);

        report::sink_misconfigured(&alert, &st, &data, &misconfigured);
        report::deliveries(&oref, &out, &data);
        if let Some((at, waiting)) = waiting {
            next = Some(next.map_or(at, |n| n.min(at)));
            summary.throttled = Some(report::throttled(&oref, &ns, waiting, &st, &data));
        }
    } else if rules.is_some() {
        summary.paused = true;
        st.book = Book::default();
        st.evaluation = Evaluation::default();
        st.sinks.clear();
        st.held.clear();
    }

    report::report(&alert, &ns, &mut st, summary, &data).await?;
    data.backoff.forget(&uid);
    if !served {
        return Ok(Action::requeue(REFUSED_RECHECK));
    }
    let wait = next.map_or(RESYNC, |at| elapsed(now, at)).clamp(Duration::from_secs(1), RESYNC);
    Ok(Action::requeue(wait))
}

/// The PodAlert's rules, or why it is not evaluated (reason, message): not
/// among its namespace's oldest `--max-podalerts-per-namespace`, a spec
/// the schema could not refuse, or `allNamespaces` while the PodAlert
/// policy is missing (every namespace's pod logs are what that policy lets
/// only those who may read them all ask for).
fn admitted_rules(alert: &PodAlert, ns: &str, served: bool, data: &Data) -> Result<Rules, (String, String)> {
    if !served {
        let n = data.alerts.state().iter().filter(|a| a.metadata.namespace.as_deref() == Some(ns)).count();
        let max = data.options.max_per_namespace;
        return Err((
            "TooManyPodAlerts".to_string(),
            format!(
                "namespace {ns} has {n} PodAlerts; the operator evaluates the {max} oldest (--max-podalerts-per-namespace): delete one, or merge their selectors"
            ),
        ));
    }
    let mut rules = Rules::new(&alert.spec, ns, &data.options.cluster_scope)
        .map_err(|e| (e.reason().to_string(), e.to_string()))?;
    rules.namespace_silences = data.namespace_silences.snapshot();
    rules.workload_silences = crate::silence::WorkloadSilences {
        by_kind: data.workload_silences.iter().map(|(kind, s)| (*kind, s.snapshot())).collect(),
    };
    match data.admission.check() {
        Err(why) if rules.all_namespaces => {
            Err(("AdmissionPolicyMissing".to_string(), format!("allNamespaces: {why}")))
        }
        _ => Ok(rules),
    }
}

/// `touched`: the namespaces changed since the last evaluation (of a
/// cluster-wide PodAlert; a namespace's reads its namespace each time).
#[allow(clippy::too_many_arguments)]
fn evaluate_and_step(
    alert: &PodAlert,
    ns: &str,
    touched: Dirty,
    rules: &Rules,
    st: &mut State,
    summary: &mut Summary,
    data: &Data,
    now: Timestamp,
) -> (Vec<Transition>, Option<Timestamp>) {
    // A namespace's PodAlert reads its namespace's range of the cache, not
    // every pod of the cluster; a cluster-wide one reads again only the
    // namespaces changed since (issue 28: churn elsewhere costs it nothing).
    let own = OneNamespace(&data.pods, ns);
    let (scope, dirty): (&dyn Pods, Dirty) =
        if rules.all_namespaces { (&data.pods, touched) } else { (&own, Dirty::All) };
    let made_with = (alert.metadata.generation, rules.all_namespaces);
    let outcome = st.evaluation.update(made_with, dirty, rules, scope, now);
    // What the workloads say (alerts.rollouts, alerts.jobs): few held,
    // read at each reconcile; merged only when there is something.
    let signals = workload_findings(ns, rules, &st.book, data, now);
    let merged;
    let findings = if signals.is_empty() {
        outcome.findings
    } else {
        merged = outcome.findings.merged(&signals);
        &merged
    };
    summary.pods = outcome.pods;
    tracing::debug!(namespaces = outcome.evaluated, pods = outcome.pods, "evaluated");
    summary.skipped = findings.skipped.iter().map(|(k, v)| (k.as_str().to_string(), i64::from(*v))).collect();
    if outcome.cut > 0 {
        *summary.skipped.entry("LabelsTooLarge".to_string()).or_default() +=
            i64::try_from(outcome.cut).unwrap_or(i64::MAX);
    }
    summary.silences = silence_statuses(rules, findings, now);
    warn_refused_silences(alert, &summary.silences, findings, &mut st.refused_silences, data);
    let transitions = st.book.step(findings, rules, now);
    for t in &transitions {
        tracing::info!(podalert = %alert.name_any(), incident = %t.key, change = ?t.change, "incident");
    }
    (transitions, signals.recheck_at)
}

/// The problems of the stalled rollouts, failed Jobs and CronJobs in the
/// PodAlert's scope ([`crate::workload_signals`]), with a failed pod of
/// each Job for its log tail when the pod cache has one (each namespace's
/// pods read once per reconcile, whatever its failed Jobs).
fn workload_findings(ns: &str, rules: &Rules, book: &Book, data: &Data, now: Timestamp) -> crate::observe::Findings {
    if !rules.rollouts && !rules.jobs {
        return crate::observe::Findings::default();
    }
    let held = data.signals.snapshot();
    let scope = (!rules.all_namespaces).then_some(ns);
    let open = |key: &crate::observe::Key| book.incidents.get(key).is_some_and(|i| i.phase.is_open());
    // Per namespace: each failed Job's pod and container.
    type ByJob = HashMap<String, (String, String)>;
    let failed_pods: std::cell::RefCell<HashMap<String, ByJob>> = Default::default();
    let failed_pod = |n: &str, job: &str| {
        let mut cache = failed_pods.borrow_mut();
        let by_job = cache.entry(n.to_string()).or_insert_with(|| {
            let mut by_job = HashMap::new();
            for p in data.pods.in_namespace(n, |p| &*p.workload().kind == "Job") {
                if let Some(container) = failed_container(&p) {
                    by_job
                        .entry(p.workload().name.to_string())
                        .or_insert((p.name().to_string(), container.to_string()));
                }
            }
            by_job
        });
        by_job.get(job).cloned()
    };
    crate::workload_signals::findings(&held, rules, scope, &open, &failed_pod, now)
}
