//! The PodAlert controller: a pod watch (a small projection per pod) whose
//! changes trigger the PodAlerts of the pod's namespace; each reconcile
//! evaluates the pods in scope, steps the PodAlert's incident book, reads
//! log tails for new incidents, hands notifications to the sink workers and
//! writes the status. Debounced: a burst of pod updates is one evaluation.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flotilla_shared::health::WatchHealth;
use flotilla_shared::projection;
use flotilla_shared::{Context, Controller};
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::crd::{PodAlert, PodAlertStatus, Reason, SecretKeyRef, SinkStatus};
use crate::delivery::{Delivery, Sink, Target, read_secret};
use crate::error::Error;
use crate::incident::{Book, Change, Transition};
use crate::metrics::AlertMetrics;
use crate::notify::{IncidentView, Notification, alertmanager_alerts};
use crate::observe::evaluate;
use crate::pod::{PodView, elapsed, view};
use crate::rules::Rules;
use crate::status::{self, Summary};

/// Look at every PodAlert at least this often.
const RESYNC: Duration = Duration::from_secs(300);
/// A sink Secret is checked at most this often per PodAlert.
const SECRET_CHECK_EVERY: Duration = Duration::from_secs(60);

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
    backoff: Mutex<HashMap<String, Duration>>,
    delivery: Delivery,
    trigger: UnboundedSender<ObjectRef<PodAlert>>,
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
    let controller = Controller::new(alerts_api, watcher::Config::default().any_semantic())
        .debounce(Duration::from_millis(500))
        .concurrency(8)
        .reconcile_on(rx);
    let http = crate::delivery::http_client(options.sink_timeout)?;
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
        },
        options,
        pods,
        alerts: controller.store(),
        states: Mutex::default(),
        firing: Mutex::default(),
        backoff: Mutex::default(),
        trigger: tx,
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

/// Keeps the pod projection and triggers the PodAlerts a change concerns.
async fn watch_pods(api: Api<Pod>, writer: projection::Writer<PodView>, data: Arc<Data>, health: WatchHealth) {
    flotilla_shared::pods::watch_pods(
        api,
        writer,
        view,
        |p: &PodView| p.namespace.as_str(),
        health,
        |namespaces| {
            data.metrics.pods_cached.set(i64::try_from(data.pods.len()).unwrap_or(i64::MAX));
            let alerts = data.alerts.state();
            // `allNamespaces` counts only where it is honoured: a refused
            // one must not wake on every pod change of the cluster.
            let everywhere = |a: &PodAlert| {
                a.spec.all_namespaces
                    && a.metadata.namespace.as_ref().is_some_and(|ns| data.options.cluster_scope.contains(ns))
            };
            for alert in flotilla_shared::pods::concerned(&alerts, namespaces, everywhere) {
                let _ = data.trigger.unbounded_send(alert);
            }
        },
    )
    .await;
}

impl Data {
    fn state(&self, uid: &str, status: Option<&PodAlertStatus>) -> Arc<tokio::sync::Mutex<State>> {
        let mut states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(states.entry(uid.to_string()).or_insert_with(|| {
            // First sight (or an operator restart): the status remembers
            // open incidents and what was notified.
            let book = status.map(status::restore).unwrap_or_default();
            Arc::new(tokio::sync::Mutex::new(State { book, ..State::default() }))
        }))
    }

    /// Drops the state of deleted PodAlerts (their sink workers end).
    fn collect_garbage(&self) {
        let live: std::collections::HashSet<String> = self.alerts.state().iter().filter_map(|a| a.uid()).collect();
        self.states.lock().unwrap_or_else(PoisonError::into_inner).retain(|uid, _| live.contains(uid));
        let gone: Vec<String> = {
            let firing = self.firing.lock().unwrap_or_else(PoisonError::into_inner);
            firing.keys().filter(|u| !live.contains(*u)).cloned().collect()
        };
        for uid in gone {
            self.set_firing(&uid, BTreeMap::new());
        }
        self.backoff.lock().unwrap_or_else(PoisonError::into_inner).retain(|uid, _| live.contains(uid));
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
    let mut backoff = data.backoff.lock().unwrap_or_else(PoisonError::into_inner);
    let d = backoff.entry(uid).or_insert(Duration::from_millis(500));
    *d = (*d * 2).min(Duration::from_secs(300));
    tracing::debug!(error = error.metric_label(), delay = ?*d, "will retry");
    Action::requeue(*d)
}

fn condition<'a>(
    s: Option<&'a PodAlertStatus>,
    t: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    s.and_then(|s| s.conditions.iter().find(|c| c.type_ == t))
}

pub async fn reconcile(alert: Arc<PodAlert>, data: Arc<Data>) -> Result<Action, Error> {
    let ns = alert.namespace().ok_or(Error::NoNamespace)?;
    let uid = alert.uid().unwrap_or_default();
    let name = alert.name_any();
    let oref = alert.object_ref(&());
    let state = data.state(&uid, alert.status.as_ref());
    let mut st = state.lock().await;
    let now = Timestamp::now();
    let mut summary = Summary::default();

    let rules = match Rules::new(&alert.spec, &ns, &data.options.cluster_scope) {
        Ok(r) => Some(r),
        Err(e) => {
            let was = condition(alert.status.as_ref(), "Ready");
            if !was.is_some_and(|c| c.reason == e.reason() && c.message == e.to_string()) {
                data.ctx.events.warning(&oref, e.reason(), "Validate", format!("PodAlert not evaluated: {e}"));
            }
            summary.invalid = Some((e.reason().to_string(), e.to_string()));
            st.book = Book::default();
            st.sinks.clear();
            None
        }
    };
    let mut next: Option<Timestamp> = None;
    if let Some(rules) = rules.as_ref().filter(|r| r.enabled) {
        let transitions = evaluate_and_step(&alert, &ns, rules, &mut st, &mut summary, &data, now);
        sync_sinks(&alert, &ns, &mut st, &data).await;
        check_sink_secrets(&alert, &ns, &mut st, &mut summary, &data, now).await;
        let transitions = read_logs(&ns, rules, transitions, &mut st, &data).await;
        notify(&alert, &oref, &transitions, &mut st, &data, now);
        next = st.book.next_deadline(rules, now);
        if let Some(at) = push_alertmanager(&alert, &ns, &mut st, &data.metrics, !transitions.is_empty(), now) {
            next = Some(next.map_or(at, |n| n.min(at)));
        }
    } else if rules.is_some() {
        summary.paused = true;
        st.book = Book::default();
        st.sinks.clear();
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

    let new = status::build(alert.status.as_ref(), alert.metadata.generation, &st.book, &summary);
    if alert.status.as_ref().is_none_or(|old| !status::same(old, &new)) {
        let api: Api<PodAlert> = Api::namespaced(data.ctx.client.clone(), &ns);
        flotilla_shared::apply_status(&api, &name, &data.ctx.field_manager, &new).await.map_err(Error::Status)?;
    }
    data.backoff.lock().unwrap_or_else(PoisonError::into_inner).remove(&uid);
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
    let pods: Vec<Arc<PodView>> = data
        .pods
        .state()
        .into_iter()
        .filter(|p| rules.all_namespaces || p.namespace == ns)
        .filter(|p| rules.selector.as_ref().is_none_or(|s| s.matches(&p.labels)))
        .collect();
    summary.pods = pods.len();
    let findings = evaluate(pods.iter().map(AsRef::as_ref), rules, &mut st.book.history, now);
    summary.skipped = findings.skipped.iter().map(|(k, v)| (k.as_str().to_string(), i64::from(*v))).collect();
    let transitions = st.book.step(&findings, rules, now);
    for t in &transitions {
        tracing::info!(podalert = %alert.name_any(), incident = %t.key, change = ?t.change, "incident");
    }
    transitions
}

/// Reads the log tail of each newly opened or escalated incident; drops the
/// transitions a log pattern silences.
async fn read_logs(
    ns: &str,
    rules: &Rules,
    transitions: Vec<Transition>,
    st: &mut State,
    data: &Data,
) -> Vec<Transition> {
    let mut kept = Vec::with_capacity(transitions.len());
    let mut held: usize = st.book.incidents.values().map(|i| i.logs.len()).sum();
    for t in transitions {
        if !matches!(t.change, Change::Opened { .. } | Change::Escalated { .. }) {
            kept.push(t);
            continue;
        }
        let Some(inc) = st.book.incidents.get_mut(&t.key) else { continue };
        if let Some((pod, previous)) = inc.log_source.clone() {
            let container = inc.key.container.clone();
            let pod_ns = if inc.key.namespace.is_empty() { ns.to_string() } else { inc.key.namespace.clone() };
            // Which run holds the crash is decided now, from the newest view
            // of the pod: a container seen in back-off may have restarted
            // since, and then the crashed run is the kubelet's `previous`.
            let previous = data
                .pods
                .get(&format!("{pod_ns}/{pod}"))
                .and_then(|v| {
                    v.containers.iter().find(|c| c.name == container).map(|c| c.state.crashed_run_is_previous())
                })
                .unwrap_or(previous);
            // The kubelet may have dropped a run's log file (it keeps one dead
            // container per container): try the other run of this pod, then
            // other pods of the incident, at most three reads.
            let mut tries = vec![(pod.clone(), previous), (pod.clone(), !previous)];
            tries.extend(inc.pods.iter().filter(|p| **p != pod).take(1).map(|p| (p.clone(), previous)));
            let mut logs = Ok(String::new());
            if !container.is_empty() {
                for (p, prev) in tries {
                    let (lines, bytes) = (rules.tail_lines, rules.max_bytes);
                    logs = crate::logs::tail(&data.ctx.client, &pod_ns, &p, &container, prev, lines, bytes).await;
                    if logs.is_ok() {
                        break;
                    }
                }
                let result = if logs.is_ok() { "success" } else { "unavailable" };
                data.metrics.log_reads.with_label_values(&[result]).inc();
            }
            if let Err(e) = &logs {
                tracing::warn!(incident = %t.key, pod = %pod, error = %e, "could not read the log tail");
            }
            // The whole tail is read and judged (ignore.logPatterns); what is
            // kept is what the PodAlert's log budget leaves room for.
            let tail = logs.unwrap_or_else(|e| e);
            if let Some(pattern) = rules.suppressing_pattern(&tail) {
                tracing::info!(incident = %t.key, pattern, "held back: the log matches ignore.logPatterns");
                st.book.silence(&t.key);
                continue;
            }
            held = held.saturating_sub(inc.logs.len());
            let room = crate::logs::room(held, crate::logs::BUDGET, tail.len());
            inc.logs = if room == tail.len() {
                tail
            } else if room == 0 {
                format!(
                    "(log tail left out: this PodAlert's incidents already hold {} MiB of log tails)",
                    crate::logs::BUDGET >> 20
                )
            } else {
                crate::logs::cap(&tail, room)
            };
            held += inc.logs.len();
        } else if let Some(pattern) = rules.suppressing_pattern(&inc.logs) {
            tracing::info!(incident = %t.key, pattern, "held back: the log matches ignore.logPatterns");
            st.book.silence(&t.key);
            continue;
        }
        kept.push(t);
    }
    kept
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
    if let Some(Err(e)) = s.alertmanager.as_ref().map(|am| crate::delivery::check_url(&am.url)) {
        summary.sink_problems.push(("alertmanager".into(), e));
    }
    for (sink, r) in refs {
        let Some(r) = r else { continue };
        let fresh = st.secret_checks.get(r).is_some_and(|(at, _)| elapsed(*at, now) < SECRET_CHECK_EVERY);
        if !fresh {
            let result = match read_secret(&data.ctx.client, ns, r).await {
                Ok(url) => crate::delivery::check_url(&url)
                    .map(|_| ())
                    .map_err(|e| format!("Secret {}/{} key {}: {e}", ns, r.name, r.key)),
                Err(f) => Err(f.message),
            };
            st.secret_checks.insert(r.clone(), (now, result));
        }
        if let Some((_, Err(e))) = st.secret_checks.get(r) {
            let was = condition(alert.status.as_ref(), status::SINKS_HEALTHY);
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

/// Sends each transition to the Events, Slack and webhook sinks.
fn notify(
    alert: &PodAlert,
    oref: &ObjectReference,
    transitions: &[Transition],
    st: &mut State,
    data: &Data,
    now: Timestamp,
) {
    let podalert = (alert.namespace().unwrap_or_default(), alert.name_any());
    for t in transitions {
        let Some(inc) = st.book.incidents.get(&t.key) else { continue };
        let n = Notification {
            podalert: podalert.clone(),
            change: t.change.clone(),
            incident: IncidentView::of(inc),
            at: now,
        };
        if alert.spec.sinks.events {
            match t.change {
                Change::Resolved => data.ctx.events.normal(oref, n.event_reason(), "Notify", n.event_note()),
                _ => data.ctx.events.warning(oref, n.event_reason(), "Notify", n.event_note()),
            }
            data.metrics.notified("events", "success");
        }
        if let Some(sink) = st.sinks.get("slack") {
            sink.send(n.slack(), &data.metrics, "slack");
        }
        if let Some(sink) = st.sinks.get("webhook") {
            sink.send(n.webhook(), &data.metrics, "webhook");
        }
    }
}

/// Sends Alertmanager the full list of alerts when something changed or a
/// minute passed; returns when to send again (None: nothing to tell).
fn push_alertmanager(
    alert: &PodAlert,
    ns: &str,
    st: &mut State,
    metrics: &AlertMetrics,
    changed: bool,
    now: Timestamp,
) -> Option<Timestamp> {
    let sink = st.sinks.get("alertmanager")?;
    let incidents = st.book.for_alertmanager(now);
    let (send, next) = st.alertmanager.tick(!incidents.is_empty(), changed, now);
    if send {
        let body = alertmanager_alerts((ns, &alert.name_any()), &incidents, now);
        // A full queue is counted; the next minute sends again anyway.
        sink.send(body, metrics, "alertmanager");
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
