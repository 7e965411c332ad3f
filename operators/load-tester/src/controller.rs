//! The LoadTest controller (and the start of both controllers): runner
//! pods (owned, labelled, held by a watch, [`crate::runner_pods`]) and the
//! target Service (a metadata watch of Services) trigger their LoadTest.
//! Each reconcile follows the suite's shape: snapshot (the test's runners,
//! from that cache) → plan (the state machine's step, [`crate::machine`],
//! stepping again with what it asks to look at: the target Service,
//! [`crate::snapshot`]; the namespace's runner pods, counted one run at a
//! time, the names reserved until the cache shows them) → report (the status, [`crate::report`]) → apply (runners
//! deleted, made, signalled, [`crate::apply`]). SimpleDeployment has its
//! own controller ([`crate::simple_deployment`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_shared::backoff::ErrorBackoff;
use flotilla_shared::conditions::{INVALID_SPEC, READY, already_said};
use flotilla_shared::{AdmissionGuard, AdmissionPolicyArgs, Context, Controller};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use crate::apply::{self, Carried};
use crate::crd::{LoadTest, SimpleDeployment, State};
use crate::error::Error;
use crate::machine::{Limits, Need, RunnerLog, Seen, Step, Target, Wanted, step};
use crate::metrics::LoadMetrics;
use crate::report::{count_ended_run, write_status};
use crate::runner;
use crate::runner_pods::{Room, RunnerPods};
use crate::schedule::Schedule;
use crate::simple::OWNER_LABEL;
use crate::snapshot;

/// Annotation: re-run a LoadTest whose spec did not change (any new value).
pub const RERUN_ANNOTATION: &str = "flotilla.dev/rerun";
/// Annotation: save the last run (or the current one, once it ends) as
/// this LoadTest's baseline (any new value).
pub const SAVE_BASELINE_ANNOTATION: &str = "flotilla.dev/save-baseline";
/// Options of both controllers (from flags).
#[derive(Debug, Clone)]
pub struct Options {
    pub watch_namespace: Option<String>,
    /// The runners' image unless a LoadTest names one.
    pub loadgen_image: String,
    /// The cluster's DNS domain: runners send Host
    /// `<service>.<namespace>.svc.<cluster_domain>`.
    pub cluster_domain: String,
    /// A LoadTest's next run starts no sooner than this after its last.
    pub min_rerun_interval: Duration,
    /// Runner pods of one namespace at once, every LoadTest's together.
    pub max_runners_per_namespace: usize,
    /// The LoadTest policy (`--require-admission-policy`): while it is
    /// missing, no pod runs a LoadTest's or SimpleDeployment's own image
    /// and no runner gets a header from a Secret.
    pub admission: AdmissionPolicyArgs,
}

pub struct Data {
    pub ctx: Context,
    pub metrics: LoadMetrics,
    pub options: Options,
    /// Every LoadTest's runner pods, as the watch shows them.
    runner_pods: RunnerPods,
    /// Per namespace whose runner pods are being counted or made (entries
    /// nobody holds and with nothing reserved are dropped): two runs
    /// starting at once in a namespace cannot both take the last room.
    rooms: Mutex<HashMap<String, Arc<Room>>>,
    pub(crate) admission: AdmissionGuard,
    /// Every LoadTest, as the controller's watch holds them (a baseline is
    /// read from here: no request, no RBAC beyond list/watch).
    tests: Store<LoadTest>,
    /// Per object (by UID), the delay before its retry after failures.
    backoff: ErrorBackoff,
}

impl Data {
    fn room(&self, ns: &str) -> Arc<Room> {
        let mut rooms = self.rooms.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        rooms.retain(|_, r| Arc::strong_count(r) > 1 || !r.is_idle());
        Arc::clone(rooms.entry(ns.to_string()).or_default())
    }
}

/// Runs both controllers until shutdown.
pub async fn run(ctx: Context, options: Options) -> anyhow::Result<()> {
    let metrics = LoadMetrics::new()?;
    metrics.register(&ctx.metrics)?;
    let client = ctx.client.clone();
    let (tests, sds, pods, services): (Api<LoadTest>, Api<SimpleDeployment>, Api<Pod>, Api<Service>) =
        match &options.watch_namespace {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client, ns),
            ),
            None => (Api::all(client.clone()), Api::all(client.clone()), Api::all(client.clone()), Api::all(client)),
        };
    let admission = AdmissionGuard::for_operator(&ctx, &options.admission).await?;
    // Runner pods are watched (by label) into a cache that wakes their
    // owners and that reconciles read, never list.
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let (runner_pods, feeding) = RunnerPods::start(pods.clone(), ctx.readiness().watch("runner pods"), tx.clone());
    let feeding = tokio::spawn(feeding);
    // A bounded number of tests reconcile at a time. (No debounce: the
    // scheduler restarts it on every trigger, and a test's runners change
    // often enough to push its deadline's reconcile back.)
    let runners = Controller::new(tests, watcher::Config::default())
        .concurrency(8)
        .reconcile_on(rx)
        .reconcile_all_on(admission.changes());
    let data = Arc::new(Data {
        ctx: ctx.clone(),
        metrics,
        options,
        runner_pods,
        rooms: Mutex::default(),
        admission,
        tests: runners.store(),
        backoff: ErrorBackoff::default(),
    });
    let targets = tokio::spawn(watch_targets(services, runners.store(), tx, ctx.readiness().watch("services")));
    let children = Controller::new(sds, watcher::Config::default())
        .owns(pods, watcher::Config::default().labels(OWNER_LABEL))
        .concurrency(8)
        .reconcile_all_on(data.admission.changes());
    let gc = tokio::spawn(forget_gone(Arc::clone(&data), runners.store(), children.store()));
    let a = ctx.run_controller(
        "loadtest",
        runners,
        |t, d| forgetting_on_success(t, d, reconcile_test),
        error_policy,
        Arc::clone(&data),
    );
    let b = ctx.run_controller(
        "simpledeployment",
        children,
        |s, d| forgetting_on_success(s, d, crate::simple_deployment::reconcile),
        error_policy,
        Arc::clone(&data),
    );
    let result = tokio::try_join!(a, b);
    targets.abort();
    gc.abort();
    feeding.abort();
    result?;
    Ok(())
}

/// `reconcile`; a success clears the object's error backoff.
async fn forgetting_on_success<K, F, Fut>(obj: Arc<K>, data: Arc<Data>, reconcile: F) -> Result<Action, Error>
where
    K: Resource,
    F: FnOnce(Arc<K>, Arc<Data>) -> Fut,
    Fut: std::future::Future<Output = Result<Action, Error>>,
{
    let uid = obj.meta().uid.clone().unwrap_or_default();
    let result = reconcile(obj, Arc::clone(&data)).await;
    if result.is_ok() {
        data.backoff.forget(&uid);
    }
    result
}

/// Every minute, forgets the backoff of objects that are gone, and the
/// live series of runs no longer Executing (a deleted object is not
/// reconciled again, so nothing else would).
async fn forget_gone(data: Arc<Data>, tests: Store<LoadTest>, sds: Store<SimpleDeployment>) {
    loop {
        tokio::time::sleep(Duration::from_secs(60)).await;
        let live: HashSet<String> =
            tests.state().iter().filter_map(|t| t.uid()).chain(sds.state().iter().filter_map(|s| s.uid())).collect();
        data.backoff.retain(|uid| live.contains(uid));
        let executing: HashSet<(String, String)> = tests
            .state()
            .iter()
            .filter(|t| t.status.as_ref().is_some_and(|s| s.state == State::Executing))
            .map(|t| (t.namespace().unwrap_or_default(), t.name_any()))
            .collect();
        data.metrics.forget_all_but(&executing);
    }
}

/// Wakes the running LoadTests whose target Service changed (or went): a
/// metadata-only watch (nothing of Services is held), so a type or cluster
/// IP change stops a run at once, not at its next look.
async fn watch_targets(
    services: Api<Service>,
    tests: Store<LoadTest>,
    tx: futures::channel::mpsc::UnboundedSender<ObjectRef<LoadTest>>,
    health: flotilla_shared::health::WatchHealth,
) {
    let watch = flotilla_shared::metadata::metadata_watch(services, watcher::Config::default())
        .backoff(flotilla_shared::backoff::watch_backoff());
    let mut events = std::pin::pin!(health.track(watch));
    while let Some(event) = events.next().await {
        let svc = match event {
            Ok(watcher::Event::Apply(svc) | watcher::Event::Delete(svc)) => svc,
            Ok(watcher::Event::InitDone) => {
                health.synced();
                continue;
            }
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "watching Services (retried)");
                continue;
            }
        };
        let (ns, name) = (svc.metadata.namespace.unwrap_or_default(), svc.metadata.name.unwrap_or_default());
        for t in tests.state() {
            let running = t.status.as_ref().is_some_and(|s| !s.state.is_terminal());
            if running && t.spec.test.service_name == name && t.namespace().as_deref() == Some(ns.as_str()) {
                let _ = tx.unbounded_send(ObjectRef::from_obj(t.as_ref()));
            }
        }
    }
}

/// Failures back off per object (1 s doubling to 5 min, `ErrorBackoff`).
pub fn error_policy<K: Resource>(obj: Arc<K>, error: &Error, data: Arc<Data>) -> Action {
    let d = data.backoff.next(obj.meta().uid.as_deref().unwrap_or_default());
    tracing::warn!(error = %error, label = error.metric_label(), delay = ?d, "will retry");
    Action::requeue(d)
}

/// One LoadTest: snapshot (its runners) → plan (the state machine's step,
/// stepping again with what each step asks to look at) → report (status
/// first: a run's number and start time are recorded before any pod
/// exists) → apply (runners deleted, made, signalled) → report (a refused
/// runner fails the run).
pub async fn reconcile_test(test: Arc<LoadTest>, data: Arc<Data>) -> Result<Action, Error> {
    let ns = test.namespace().ok_or(Error::NoNamespace)?;
    let (name, uid) = (test.name_any(), test.uid().unwrap_or_default());
    let oref = test.object_ref(&());
    let pods: Api<Pod> = Api::namespaced(data.ctx.client.clone(), &ns);
    data.runner_pods.ready().await.map_err(|_| Error::CacheGone("runner pods"))?;
    let runners = data.runner_pods.of_test(&ns, &uid);
    let limits = match limits(&test, &data.options) {
        Ok(l) => l,
        Err(why) => {
            let mut st = test.status.clone().unwrap_or_default();
            st.state = State::Failed;
            st.reason = INVALID_SPEC.into();
            st.message = why.clone();
            write_status(&test, &ns, &name, st, &data, &oref, vec![(true, INVALID_SPEC, why)], None).await?;
            return Ok(Action::await_change());
        }
    };
    let old = test.status.as_ref();
    let (mut next, counting) = plan_step(&test, &data, &limits, &runners).await?;
    // Runners about to be made with what only the LoadTest policy lets the
    // right people ask for: while that policy is missing, the run waits
    // (not recorded, nothing made) and starts once it is back.
    if !next.create.is_empty()
        && let Some(power) = crate::crd::guarded_power(&test.spec)
        && let Err(why) = data.admission.check()
    {
        let waiting = ("AdmissionPolicyMissing", format!("{power}: {why}; the run starts once it is in place"));
        let said = already_said(old.map(|s| s.conditions.as_slice()), READY, waiting.0, &waiting.1);
        let events = if said { vec![] } else { vec![(true, waiting.0, waiting.1.clone())] };
        let st = test.status.clone().unwrap_or_default();
        write_status(&test, &ns, &name, st, &data, &oref, events, Some(&waiting)).await?;
        return Ok(Action::await_change());
    }
    // The counted room is reserved for this run's runners (by name, until
    // the cache shows them); the next run may count meanwhile.
    let _reserved = counting.map(|(room, _lock)| {
        let names = next.create.iter().map(|i| runner::name(&name, next.status.run, *i)).collect();
        room.reserve(&uid, next.status.run, names)
    });

    // The status first: a new run's number and start time are recorded
    // before any pod exists, so a failure below is retried within this run
    // (its startTimeout still counts) instead of starting it again.
    if !next.create.is_empty() {
        next.status.children += i32::try_from(next.create.len()).unwrap_or(0);
    }
    let written =
        write_status(&test, &ns, &name, next.status.clone(), &data, &oref, next.events.clone(), next.waiting.as_ref())
            .await?;
    count_ended_run(old, &next.status, &data.metrics, &name);
    match &next.live {
        Some(live) if next.status.state == State::Executing => data.metrics.live(&ns, &name, live),
        Some(_) => {}
        None if next.status.state != State::Executing => data.metrics.forget(&ns, &name),
        None => {}
    }

    let image = test.spec.image.clone().unwrap_or_else(|| data.options.loadgen_image.clone());
    let (run, window) = (next.status.run, crate::machine::runners_window(&next.status, &limits));
    let mut create: Vec<Pod> = Vec::with_capacity(next.create.len());
    // The machine pins the target before it asks for runners.
    if let Some(pinned) = next.status.target.as_ref() {
        for i in &next.create {
            let pod = runner::pod(&name, &uid, &ns, &test.spec, &image, run, *i, &window, pinned);
            create
                .push(serde_json::from_value(pod).map_err(|e| Error::Kube("runner pod", kube::Error::SerdeError(e)))?);
        }
    }
    if let Carried::Refused(message) = apply::carry_out(&pods, &next, create).await? {
        // The run fails with the API's answer.
        let mut failed = written.unwrap_or(next.status);
        let event = crate::machine::creation_refused(
            &mut failed,
            Timestamp::now(),
            format!("a runner pod was refused: {message}"),
        );
        let before = failed.clone();
        write_status(&test, &ns, &name, failed, &data, &oref, vec![event], None).await?;
        count_ended_run(old, &before, &data.metrics, &name);
        return Ok(Action::await_change());
    }
    Ok(match next.requeue {
        Some(d) => Action::requeue(d.clamp(Duration::from_secs(1), Duration::from_secs(300))),
        None if next.status.state.is_terminal() => Action::await_change(),
        None => Action::requeue(Duration::from_secs(300)),
    })
}

/// The spec's durations and the operator's bounds, or why the spec cannot run.
fn limits(test: &LoadTest, options: &Options) -> Result<Limits, String> {
    // What the schema cannot say of the request: header names as tokens,
    // the body substring's length in bytes.
    let request = match test.spec.test.headers.keys().find(|k| !crate::crd::is_header_name(k)) {
        Some(bad) => Err(format!("header name {bad:?} is not an HTTP token")),
        None => test
            .spec
            .test
            .checks
            .as_ref()
            .and_then(crate::crd::Checks::invalid)
            .or_else(|| crate::scenario::problem(&test.spec.test))
            .map_or(Ok(()), Err),
    };
    let spec = &test.spec;
    let schedule = spec.schedule.as_deref().map(Schedule::parse).transpose();
    match (spec.deadline.get(), spec.start_timeout.get(), spec.test.timeout.get(), spec.duration(), request, schedule) {
        (Ok(deadline), Ok(start_timeout), Ok(_), Ok(duration), Ok(()), Ok(schedule)) => Ok(Limits {
            deadline,
            start_timeout,
            duration,
            min_rerun_interval: options.min_rerun_interval,
            max_runners_per_namespace: options.max_runners_per_namespace,
            schedule,
        }),
        (d, s, t, l, h, c) => Err([d.err(), s.err(), t.err(), l.err(), h.err(), c.err()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("; ")),
    }
}

/// The namespace's room, held while it is counted.
type Counting = (Arc<Room>, tokio::sync::OwnedMutexGuard<()>);

/// The machine's step, with what it asks to look at read once each (the
/// target Service; the namespace's runner pods, counted one run at a time).
async fn plan_step(
    test: &LoadTest,
    data: &Data,
    limits: &Limits,
    runners: &[crate::runner::Runner],
) -> Result<(Step, Option<Counting>), Error> {
    let ns = test.namespace().ok_or(Error::NoNamespace)?;
    let uid = test.uid().unwrap_or_default();
    let rerun = test.annotations().get(RERUN_ANNOTATION).cloned().unwrap_or_default();
    let created = test.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let name = test.name_any();
    let save_baseline = test.annotations().get(SAVE_BASELINE_ANNOTATION).cloned().unwrap_or_default();
    let wanted = Wanted {
        name: &name,
        generation: test.metadata.generation.unwrap_or(0),
        rerun: &rerun,
        created,
        save_baseline: &save_baseline,
    };
    let svc = &test.spec.test.service_name;
    let host = format!("{svc}.{ns}.svc.{}", data.options.cluster_domain);
    let now = Timestamp::now();
    let (mut target, mut others, mut counting, mut baseline) = (Target::Unchecked, None, None, None);
    let mut logs: Option<Vec<RunnerLog>> = None;
    loop {
        let seen = Seen {
            runners,
            target: &target,
            others_in_namespace: others,
            baseline: baseline.as_ref(),
            progress: logs.as_deref(),
        };
        let next = step(&test.spec, limits, &wanted, test.status.as_ref(), &seen, now);
        match next.needs {
            Some(Need::Target { endpoints }) if target == Target::Unchecked => {
                target = snapshot::check_target(&data.ctx.client, &ns, svc, host.clone(), endpoints).await?;
            }
            Some(Need::Room) if others.is_none() => {
                // Counted one run at a time; what others made or are
                // making and the cache does not show yet counts too.
                let room = data.room(&ns);
                let lock = Arc::clone(&room.counting).lock_owned().await;
                others = Some(room.others(&data.runner_pods, &ns, &uid, next.status.run, std::time::Instant::now()));
                counting = Some((room, lock));
            }
            Some(Need::Baseline) if baseline.is_none() => {
                let other = test.spec.baseline.as_ref().map(|b| b.load_test_ref.as_str()).unwrap_or_default();
                let found = data.tests.get(&ObjectRef::new(other).within(&ns));
                baseline = Some(crate::baseline::offered(other, found.as_ref().and_then(|t| t.status.as_ref())));
            }
            Some(Need::Progress(names)) if logs.is_none() => {
                let pods: Api<Pod> = Api::namespaced(data.ctx.client.clone(), &ns);
                logs = Some(crate::progress::read(&pods, names).await);
            }
            Some(Need::Summaries(names)) if logs.is_none() => {
                let pods: Api<Pod> = Api::namespaced(data.ctx.client.clone(), &ns);
                logs = Some(crate::progress::read_summaries(&pods, names).await);
            }
            _ => return Ok((next, counting)),
        }
    }
}
