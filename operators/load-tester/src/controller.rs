//! The two controllers. LoadTest: runner pods (owned, labelled) and the
//! target Service (a metadata watch of Services) trigger their LoadTest;
//! each reconcile lists the test's runners, asks the state machine for the
//! next step, looks at what the step needs (the target Service; the
//! namespace's runner pods, counted one run at a time, the room reserved
//! until the runners are made) and carries the step out (delete, create,
//! signal, Events, status). SimpleDeployment: its one child pod, recreated when
//! deleted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_shared::conditions::{READY, Status, already_said};
use flotilla_shared::status::apply_status_if_changed;
use flotilla_shared::{AdmissionGuard, AdmissionPolicyArgs, Context, Controller};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use crate::crd::{LoadTest, LoadTestStatus, SimpleDeployment, State, Verdict};
use crate::error::Error;
use crate::machine::{Limits, Need, Seen, ServiceView, Step, Target, Wanted, step};
use crate::metrics::LoadMetrics;
use crate::runner::{self, LOADTEST_LABEL, Runner, START_ANNOTATION};
use crate::simple::OWNER_LABEL;

/// Annotation: re-run a LoadTest whose spec did not change (any new value).
pub const RERUN_ANNOTATION: &str = "flotilla.dev/rerun";
/// Annotation on a SimpleDeployment's child: the generation it was made for.

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
    /// Per namespace whose runner pods are being counted or made (entries
    /// nobody holds are dropped): two runs starting at once in a namespace
    /// cannot both take the last room.
    rooms: Mutex<HashMap<String, Arc<Room>>>,
    pub(crate) admission: AdmissionGuard,
}

/// A namespace's room for runner pods: runs are counted one at a time, and
/// the pods a counted run is still making are reserved until it has made
/// them (then the API server lists them), so creations run in parallel.
/// A pod both listed and still reserved counts twice: a run may wait one
/// look more, never pass the bound.
#[derive(Default)]
struct Room {
    counting: Arc<tokio::sync::Mutex<()>>,
    reserved: std::sync::atomic::AtomicUsize,
}

/// Pods of a run being made, reserved in their namespace's [`Room`].
struct Reservation(Arc<Room>, usize);

impl Drop for Reservation {
    fn drop(&mut self) {
        self.0.reserved.fetch_sub(self.1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Data {
    fn room(&self, ns: &str) -> Arc<Room> {
        let mut rooms = self.rooms.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        rooms.retain(|_, r| Arc::strong_count(r) > 1);
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
    let data = Arc::new(Data { ctx: ctx.clone(), metrics, options, rooms: Mutex::default(), admission });
    // Only our own pods are watched (by label), and only to wake owners. A
    // bounded number of tests reconcile at a time. (No debounce: the
    // scheduler restarts it on every trigger, and a test's runners change
    // often enough to push its deadline's reconcile back.)
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let runners = Controller::new(tests, watcher::Config::default().any_semantic())
        .owns(pods.clone(), watcher::Config::default().labels(LOADTEST_LABEL).any_semantic())
        .concurrency(8)
        .reconcile_on(rx)
        .reconcile_all_on(data.admission.changes());
    let targets = tokio::spawn(watch_targets(services, runners.store(), tx, ctx.readiness().watch("services")));
    let children = Controller::new(sds, watcher::Config::default().any_semantic())
        .owns(pods, watcher::Config::default().labels(OWNER_LABEL).any_semantic())
        .concurrency(8)
        .reconcile_all_on(data.admission.changes());
    let a = ctx.run_controller("loadtest", runners, reconcile_test, error_policy, Arc::clone(&data));
    let b = ctx.run_controller(
        "simpledeployment",
        children,
        crate::simple_deployment::reconcile,
        error_policy,
        Arc::clone(&data),
    );
    let result = tokio::try_join!(a, b);
    targets.abort();
    result?;
    Ok(())
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
    let watch = flotilla_shared::metadata::metadata_watch(services, watcher::Config::default().any_semantic())
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

pub fn error_policy<K>(_: Arc<K>, error: &Error, _: Arc<Data>) -> Action {
    tracing::warn!(error = %error, label = error.metric_label(), "will retry in 10s");
    Action::requeue(Duration::from_secs(10))
}

/// Whether `uid` owns `pod` (a same-named older object's pods are not its).
pub(crate) fn owned_by(pod: &Pod, uid: &str) -> bool {
    pod.metadata.owner_references.as_ref().is_some_and(|o| o.iter().any(|r| r.uid == uid))
}

/// The Service as it is (its type, cluster IP, UID) and, with
/// `endpoints`, whether it has a ready endpoint.
async fn check_target(
    client: &kube::Client,
    ns: &str,
    service: &str,
    host: String,
    endpoints: bool,
) -> Result<Target, Error> {
    let svcs: Api<Service> = Api::namespaced(client.clone(), ns);
    let Some(svc) = svcs.get_opt(service).await.map_err(|e| Error::Kube("service", e))? else {
        return Ok(Target::Missing);
    };
    let spec = svc.spec.unwrap_or_default();
    let type_ = spec.type_.unwrap_or_else(|| "ClusterIP".into());
    // ExternalName names a host anywhere; "None" is a headless Service.
    let cluster_ip = spec.cluster_ip.filter(|ip| !ip.is_empty() && ip != "None" && type_ != "ExternalName");
    let ready = if endpoints {
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
        let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
        let list = slices.list(&lp).await.map_err(|e| Error::Kube("endpointslices", e))?;
        Some(
            list.items
                .iter()
                .flat_map(|s| s.endpoints.iter().flatten())
                .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true)),
        )
    } else {
        None
    };
    Ok(Target::Seen(ServiceView { uid: svc.metadata.uid.unwrap_or_default(), type_, cluster_ip, ready, host }))
}

/// Runner pods in the namespace (every LoadTest's, by label) that may run
/// and are not of run `run` of the test `uid`: what a new run's runners
/// come on top of. Pods that are done (Succeeded, Failed) hold no node.
/// Metadata only, the done ones left out by the API server: a namespace's
/// hundreds of runner pods are not read whole at each run's start.
async fn others_in_namespace(pods: &Api<Pod>, uid: &str, run: i64) -> Result<usize, Error> {
    let lp = ListParams::default().labels(LOADTEST_LABEL).fields("status.phase!=Succeeded,status.phase!=Failed");
    let list = pods.list_metadata(&lp).await.map_err(|e| Error::Kube("pods", e))?;
    Ok(list
        .items
        .iter()
        .filter(|p| {
            let ours = p.metadata.owner_references.as_ref().is_some_and(|o| o.iter().any(|r| r.uid == uid));
            let this_run = p.metadata.labels.as_ref().and_then(|l| l.get(runner::RUN_LABEL)) == Some(&run.to_string());
            !(ours && this_run)
        })
        .count())
}

fn ready_condition(
    old: Option<&LoadTestStatus>,
    new: &mut LoadTestStatus,
    generation: Option<i64>,
    waiting: Option<&(&'static str, String)>,
) {
    let mut c = flotilla_shared::Conditions::new(old.map(|s| s.conditions.as_slice()), generation);
    let (status, reason, message) = match (new.state, waiting) {
        (_, Some((reason, message))) => (Status::False, (*reason).to_string(), message.clone()),
        (State::Pending, None) => {
            (Status::False, "Pending".to_string(), format!("run {}: starting the runners", new.run))
        }
        (State::Executing, None) => {
            (Status::False, "Executing".to_string(), format!("run {}: the runners are sending", new.run))
        }
        (State::Finished, None) => {
            (Status::from(new.verdict != Verdict::Failed), new.reason.clone(), new.message.clone())
        }
        (State::Failed, None) => (Status::False, new.reason.clone(), new.message.clone()),
    };
    c.set(READY, status, &reason, message);
    new.conditions = c.into_vec();
    new.observed_generation = generation;
}

pub async fn reconcile_test(test: Arc<LoadTest>, data: Arc<Data>) -> Result<Action, Error> {
    let ns = test.namespace().ok_or(Error::NoNamespace)?;
    let (name, uid) = (test.name_any(), test.uid().unwrap_or_default());
    let client = data.ctx.client.clone();
    let oref = test.object_ref(&());
    let generation = test.metadata.generation.unwrap_or(0);
    let rerun = test.annotations().get(RERUN_ANNOTATION).cloned().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let listed = pods
        .list(&ListParams::default().labels(&format!("{LOADTEST_LABEL}={}", runner::label_value(&name))))
        .await
        .map_err(|e| Error::Kube("pods", e))?;
    // Only pods this LoadTest owns (a same-named older test's are not ours).
    let runners: Vec<Runner> = listed.items.iter().filter(|p| owned_by(p, &uid)).map(runner::view).collect();
    let headers = match test.spec.test.headers.keys().find(|k| !crate::crd::is_header_name(k)) {
        Some(bad) => Err(format!("header name {bad:?} is not an HTTP token")),
        None => Ok(()),
    };
    let limits = match (test.spec.deadline.get(), test.spec.start_timeout.get(), test.spec.test.timeout.get(), headers)
    {
        (Ok(deadline), Ok(start_timeout), Ok(_), Ok(())) => Limits {
            deadline,
            start_timeout,
            min_rerun_interval: data.options.min_rerun_interval,
            max_runners_per_namespace: data.options.max_runners_per_namespace,
        },
        (d, s, t, h) => {
            let why = [d.err(), s.err(), t.err(), h.err()].into_iter().flatten().collect::<Vec<_>>().join("; ");
            let mut st = test.status.clone().unwrap_or_default();
            st.state = State::Failed;
            st.reason = "InvalidSpec".into();
            st.message = why.clone();
            write_status(&test, &ns, &name, st, &data, &oref, vec![(true, "InvalidSpec", why)], None).await?;
            return Ok(Action::await_change());
        }
    };
    let now = Timestamp::now();
    let old = test.status.as_ref();
    let wanted = Wanted { generation, rerun: &rerun };
    let svc = &test.spec.test.service_name;
    let host = format!("{svc}.{ns}.svc.{}", data.options.cluster_domain);
    // Step, look at what the step needs, step again (each looked at once).
    let (mut target, mut others, mut counting) = (Target::Unchecked, None, None);
    let mut next: Step = loop {
        let seen = Seen { runners: &runners, target: &target, others_in_namespace: others };
        let next = step(&test.spec, &limits, &wanted, old, &seen, now);
        match next.needs {
            Some(Need::Target { endpoints }) if target == Target::Unchecked => {
                target = check_target(&client, &ns, svc, host.clone(), endpoints).await?;
            }
            Some(Need::Room) if others.is_none() => {
                // Counted one run at a time; what others are still making
                // counts too.
                let room = data.room(&ns);
                let lock = Arc::clone(&room.counting).lock_owned().await;
                let listed = others_in_namespace(&pods, &uid, next.status.run).await?;
                others = Some(listed + room.reserved.load(std::sync::atomic::Ordering::SeqCst));
                counting = Some((room, lock));
            }
            _ => break next,
        }
    };
    // Runners about to be made with what only the LoadTest policy lets the
    // right people ask for: while that policy is missing, the run waits
    // (not recorded, nothing made) and starts once it is back.
    if !next.create.is_empty()
        && let Some(power) = crate::crd::guarded_power(&test.spec)
        && let Err(why) = data.admission.check()
    {
        let waiting = ("AdmissionPolicyMissing", format!("{power}: {why}; the run starts once it is in place"));
        let said = already_said(test.status.as_ref().map(|s| s.conditions.as_slice()), READY, waiting.0, &waiting.1);
        let events = if said { vec![] } else { vec![(true, waiting.0, waiting.1.clone())] };
        let st = test.status.clone().unwrap_or_default();
        write_status(&test, &ns, &name, st, &data, &oref, events, Some(&waiting)).await?;
        return Ok(Action::await_change());
    }
    // The counted room is reserved for this run's runners until they are
    // made (or this reconcile ends); the next run may count meanwhile.
    let _reserved = counting.map(|(room, _lock)| {
        room.reserved.fetch_add(next.create.len(), std::sync::atomic::Ordering::SeqCst);
        Reservation(room, next.create.len())
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

    for pod in &next.delete {
        match pods.delete(pod, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(Error::Kube("delete runner", e)),
        }
    }
    let image = test.spec.image.clone().unwrap_or_else(|| data.options.loadgen_image.clone());
    let (run, end_at) = (next.status.run, crate::machine::runners_end(&next.status, &limits));
    let mut to_create: Vec<Pod> = Vec::with_capacity(next.create.len());
    // The machine pins the target before it asks for runners.
    if let Some(pinned) = next.status.target.as_ref() {
        for i in &next.create {
            let pod = runner::pod(&name, &uid, &ns, &test.spec, &image, run, *i, end_at, pinned);
            to_create
                .push(serde_json::from_value(pod).map_err(|e| Error::Kube("runner pod", kube::Error::SerdeError(e)))?);
        }
    }
    let made: Vec<Result<(), kube::Error>> = futures::stream::iter(to_create.into_iter().map(|pod| {
        let pods = pods.clone();
        async move {
            match pods.create(&PostParams::default(), &pod).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(e),
            }
        }
    }))
    .buffer_unordered(16)
    .collect()
    .await;
    // A refusal (quota, a policy, validation) will not pass on a retry:
    // the run fails with the API's answer. Anything else is retried.
    let refused = made.iter().find_map(|r| match r {
        Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403 | 422) => Some(s.message.clone()),
        _ => None,
    });
    if let Some(message) = refused {
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
    if let Some(Err(e)) = made.into_iter().find(Result::is_err) {
        return Err(Error::Kube("create runner", e));
    }
    let go = Patch::Merge(serde_json::json!({"metadata": {"annotations": {START_ANNOTATION: "go"}}}));
    for pod in &next.signal {
        pods.patch(pod, &PatchParams::default(), &go).await.map_err(|e| Error::Kube("signal runner", e))?;
    }
    let requeue = next.requeue;
    let terminal = next.status.state.is_terminal();
    Ok(match requeue {
        Some(d) => Action::requeue(d.clamp(Duration::from_secs(1), Duration::from_secs(300))),
        None if terminal => Action::await_change(),
        None => Action::requeue(Duration::from_secs(300)),
    })
}

/// Counts a run that has just ended (once: when its status says so first).
fn count_ended_run(old: Option<&LoadTestStatus>, new: &LoadTestStatus, metrics: &LoadMetrics, name: &str) {
    let was_terminal = old.is_some_and(|s| s.state.is_terminal() && s.run == new.run);
    if !new.state.is_terminal() || was_terminal {
        return;
    }
    metrics.runs.with_label_values(&[new.state.as_str(), &format!("{:?}", new.verdict)]).inc();
    if let Some(r) = &new.results {
        let errors = r.errors.values().fold(0i64, |a, b| a.saturating_add(*b));
        metrics
            .requests
            .with_label_values(&["ok"])
            .inc_by(u64::try_from(r.requests.saturating_sub(errors)).unwrap_or(0));
        for (kind, n) in &r.errors {
            metrics.requests.with_label_values(&[kind]).inc_by(u64::try_from(*n).unwrap_or(0));
        }
    }
    tracing::info!(loadtest = %name, run = new.run, state = new.state.as_str(), reason = %new.reason, "run ended");
}

#[allow(clippy::too_many_arguments)]
async fn write_status(
    test: &LoadTest,
    ns: &str,
    name: &str,
    mut st: LoadTestStatus,
    data: &Data,
    oref: &k8s_openapi::api::core::v1::ObjectReference,
    events: Vec<(bool, &'static str, String)>,
    waiting: Option<&(&'static str, String)>,
) -> Result<Option<LoadTestStatus>, Error> {
    ready_condition(test.status.as_ref(), &mut st, test.metadata.generation, waiting);
    let written = st.clone();
    let api: Api<LoadTest> = Api::namespaced(data.ctx.client.clone(), ns);
    let wrote = apply_status_if_changed(&api, name, &data.ctx.field_manager, test.status.as_ref(), &st)
        .await
        .map_err(|e| Error::Kube("status", e))?;
    if wrote {
        // Events only once the status that caused them is written: a
        // failed write is retried and must not repeat them.
        for (warning, reason, note) in events {
            if warning {
                data.ctx.events.warning(oref, reason, "Run", note);
            } else {
                data.ctx.events.normal(oref, reason, "Run", note);
            }
        }
    }
    Ok(Some(written))
}
