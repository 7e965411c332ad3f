//! Running a controller ([`crate::controller::Controller`], kube-runtime's
//! triggers run by its `applier`) the Flotilla way: reconcile and workqueue
//! metrics, a `reconcile` span per call, a panicking reconcile caught and retried,
//! readiness once its cache has synced, and a graceful stop on shutdown
//! (in-flight reconciles finish, no new ones start).
//!
//! Under leader election the controllers start while the process stands by:
//! their watches fill the caches (a standby is warm, as controller-runtime's
//! are), but no reconcile runs before the lease is won ([`Context::leading`]).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::runtime::applier;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::utils::StreamBackoff;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::controller::{Controller, queue_key};
use crate::events::Events;
use crate::health::Readiness;
use crate::leadership::{Leadership, suspended, wait_leading};
use crate::metrics::Metrics;
use crate::workqueue::{InQueue, requeue_after};

/// What every reconcile needs from the runtime. Cheap to clone; put it in
/// your own context struct next to your state.
#[derive(Clone)]
pub struct Context {
    /// Client for the cluster (in-cluster config, else KUBECONFIG).
    pub client: Client,
    /// The registry behind `/metrics`: register your own metrics here.
    pub metrics: Metrics,
    /// Events as `flotilla-<operator>`.
    pub events: Events,
    /// `config-copier`, …
    pub operator: &'static str,
    /// `flotilla-<operator>`: the server-side apply field manager.
    pub field_manager: String,
    pub(crate) readiness: Readiness,
    pub(crate) shutdown: CancellationToken,
    /// `true` once this process leads (from the start without election).
    pub(crate) leading: tokio::sync::watch::Receiver<bool>,
}

impl Context {
    /// Cancelled when the process is asked to stop (or loses leadership).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Resolves once this process leads — at once without leader election;
    /// `false` when shutdown comes first. Work that is not a `Controller`
    /// (a sync loop) waits for it before it writes anything: the operator's
    /// code runs while standing by, to keep its caches warm.
    pub async fn leading(&self) -> bool {
        wait_leading(self.leading.clone(), &self.shutdown).await
    }

    /// Whether this process leads now.
    pub fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// The same answers as [`Context::leading`], [`Context::is_leading`] and
    /// [`Context::suspended`], for a task that does not hold the context
    /// (a sink's delivery worker).
    pub fn leadership(&self) -> Leadership {
        Leadership::new(self.leading.clone(), self.shutdown.clone())
    }

    /// Resolves when leading is suspended (the lease was not renewed in
    /// time, `leader.rs`): work outside `run_controller` that writes stops
    /// there, and waits for [`Context::leading`] again. Never resolves
    /// without leader election.
    pub async fn suspended(&self) {
        suspended(self.leading.clone()).await;
    }

    /// Readiness gate for work that is not a `Controller` (a periodic sync
    /// loop, say): register it, then mark it synced.
    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    /// Runs `controller` until shutdown. `name` is the `controller` label of
    /// the `controller_runtime_*` metrics and of the reconcile span, and the
    /// `controller` and `name` labels of the `workqueue_*` metrics. An error
    /// whose [`crate::ReconcileError::is_terminal`] says so, and a panic,
    /// also count as terminal.
    /// Returns when the controller has stopped (after shutdown, in-flight
    /// reconciles finished).
    pub async fn run_controller<K, D, E, F, Fut, P>(
        &self,
        name: &'static str,
        controller: Controller<K>,
        reconcile: F,
        error_policy: P,
        data: Arc<D>,
    ) -> anyhow::Result<()>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
        D: Send + Sync + 'static,
        E: crate::ReconcileError + Send + Sync + 'static,
        F: Fn(Arc<K>, Arc<D>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        P: Fn(Arc<K>, &E, Arc<D>) -> Action + Send + Sync + 'static,
    {
        let m = self.metrics.controller(name);
        m.max_concurrent.set(i64::from(controller.concurrency));
        let queue = self.metrics.queue(name);
        // A replica that does not lead works on nothing: its queue is empty.
        let (mirror, mut leading_rx) = (queue.clone(), self.leading.clone());
        let follow_leading = tokio::spawn(async move {
            loop {
                let leading = *leading_rx.borrow_and_update();
                mirror.set_leading(leading, Instant::now());
                if leading_rx.changed().await.is_err() {
                    break;
                }
            }
        });
        self.readiness.register(name);
        let store = controller.store();
        let readiness = self.readiness.clone();
        tokio::spawn(async move {
            // kube-runtime 5's store readiness is a oneshot receiver with a
            // single waker slot: the controller's own wait can overwrite ours,
            // which would then never wake. Polling again after a short timeout
            // re-registers us; once anyone has seen the value it is memoized.
            loop {
                match tokio::time::timeout(std::time::Duration::from_millis(200), store.wait_until_ready()).await {
                    Ok(Ok(())) => {
                        tracing::info!(controller = name, "cache synced");
                        readiness.set_synced(name);
                        break;
                    }
                    Ok(Err(_)) => break,
                    Err(_) => continue,
                }
            }
        });

        let reconcile = Arc::new(reconcile);
        let panicked = Arc::new(crate::backoff::ErrorBackoff::default());
        let gone = panicked.clone();
        let cache = controller.store();
        let (leading, shutdown) = (self.leading.clone(), self.shutdown.clone());
        let retries = m.retries.clone();
        let mirror = queue.clone();
        let wrapped = move |obj: Arc<K>, data: Arc<D>| -> BoxFuture<'static, Result<Action, E>> {
            let m = m.clone();
            let reconcile = reconcile.clone();
            let panicked = panicked.clone();
            let (cache, leading, shutdown) = (cache.clone(), leading.clone(), shutdown.clone());
            let mirror = mirror.clone();
            let key = queue_key(obj.namespace().as_deref(), &obj.name_any());
            let span = tracing::info_span!(
                "reconcile",
                controller = name,
                object = %obj.name_any(),
                namespace = obj.namespace().as_deref().unwrap_or(""),
            );
            let (task_m, task_panicked, task_key, task_mirror) =
                (m.clone(), panicked.clone(), key.clone(), mirror.clone());
            let work = async move {
                // Standing by: nothing starts before the lease is won; then
                // the object is read again from the cache, since what was
                // scheduled may be hours old, or deleted since.
                let obj = if *leading.borrow() {
                    obj
                } else {
                    let latest = match wait_leading(leading.clone(), &shutdown).await {
                        true => cache.get(&ObjectRef::from_obj(obj.as_ref())),
                        false => None,
                    };
                    match latest {
                        Some(latest) => latest,
                        // Deleted meanwhile (or shutdown came first): it
                        // leaves the queue without a reconcile.
                        None => {
                            mirror.dropped(&key, Instant::now(), *leading.borrow());
                            return Ok(Action::await_change());
                        }
                    }
                };
                // It leaves the queue now, and comes back with its requeue.
                let in_queue = InQueue::start(mirror, key.clone());
                m.active.inc();
                let running = m.running.start();
                let started = Instant::now();
                // A panic is caught, counted and retried with backoff (as
                // controller-runtime does), never a crash of every controller.
                let work = std::panic::AssertUnwindSafe(async move { reconcile(obj, data).await }).catch_unwind();
                // A leader whose lease was not renewed in time acts no more:
                // the reconcile is dropped where it waits (as a process exit
                // would stop it), and retried once leading again.
                let result = tokio::select! {
                    // Suspension first: a reconcile must not be polled (and
                    // send a request) once leading has turned false.
                    biased;
                    () = suspended(leading) => {
                        drop(running);
                        m.active.dec();
                        tracing::warn!("reconcile cancelled: leadership suspended");
                        let retry = Action::requeue(Duration::from_secs(1));
                        in_queue.finish(Some(&retry));
                        return Ok(retry);
                    }
                    r = work => r,
                };
                let took = started.elapsed().as_secs_f64();
                m.time.observe(took);
                m.work_duration.observe(took);
                drop(running);
                m.active.dec();
                let result = match result {
                    Ok(result) => {
                        panicked.forget(&key);
                        result
                    }
                    Err(payload) => {
                        m.panics.inc();
                        m.terminal.inc();
                        m.error.inc();
                        m.errors.inc();
                        m.retries.inc();
                        let retry = panicked.next(&key);
                        tracing::error!(panic = %panic_message(payload.as_ref()), ?retry, "reconcile panicked; retried with backoff");
                        let retry = Action::requeue(retry);
                        in_queue.finish(Some(&retry));
                        return Ok(retry);
                    }
                };
                match &result {
                    Ok(action) if *action == Action::await_change() => m.success.inc(),
                    Ok(_) => m.requeue_after.inc(),
                    Err(e) => {
                        m.error.inc();
                        m.errors.inc();
                        if e.is_terminal() {
                            m.terminal.inc();
                        }
                        tracing::warn!(error = %DisplayChain(e), terminal = e.is_terminal(), "reconcile failed");
                    }
                }
                // An error's requeue is the error policy's (below).
                in_queue.finish(result.as_ref().ok());
                result
            }
            .instrument(span);
            // Each reconcile on its own task, as kube-runtime's
            // `Controller::run` does (aborted if the runner drops it).
            let task = AbortOnDrop(tokio::spawn(work));
            async move {
                match task.await {
                    Ok(result) => result,
                    // The reconcile's own panics are caught above; this is a
                    // panic in the code around it (an error's `Display`, say),
                    // or an abort, whose result nobody awaits. Counted and
                    // retried with the same backoff, as a caught one is.
                    Err(e) => {
                        let retry = task_panicked.next(&task_key);
                        task_mirror.requeue(&task_key, Instant::now(), retry);
                        if e.is_panic() {
                            task_m.panics.inc();
                            task_m.terminal.inc();
                            task_m.errors.inc();
                            tracing::error!(controller = name, key = %task_key, ?retry, "reconcile task panicked; retried with backoff");
                        }
                        Ok(Action::requeue(retry))
                    }
                }
            }
            .boxed()
        };

        // An error's retry is the policy's requeue (client-go's AddRateLimited).
        let mirror = queue.clone();
        let error_policy = move |obj: Arc<K>, e: &E, data: Arc<D>| {
            let key = queue_key(obj.namespace().as_deref(), &obj.name_any());
            let action = error_policy(obj, e, data);
            if action != Action::await_change() {
                retries.inc();
            }
            if let Some(after) = requeue_after(&action) {
                mirror.requeue(&key, Instant::now(), after);
            }
            action
        };

        tracing::info!(controller = name, "starting controller");
        let (readiness, leading_now) = (self.readiness.clone(), self.leading.clone());
        let crate::controller::Controller { triggers, reader, debounce, concurrency, .. } = controller;
        let mirror = queue.clone();
        // Triggers are debounced here, with a bound (`debounce.rs`), not by
        // the scheduler, whose debounce a stream of triggers postpones
        // forever. Every request on its way into the scheduler is mirrored.
        let triggers =
            StreamBackoff::new(futures::stream::select_all(triggers), crate::backoff::watch_backoff()).boxed();
        let requests = crate::debounce::debounce(triggers, debounce, crate::debounce::MAX_TRIGGER_DELAY)
            .inspect(move |request| {
                if let Ok(request) = request {
                    let key = queue_key(request.obj_ref.namespace.as_deref(), &request.obj_ref.name);
                    mirror.request(&key, Instant::now());
                }
            })
            // Graceful shutdown: no new request is taken; what runs finishes.
            .take_until(self.shutdown.clone().cancelled_owned());
        let config = kube::runtime::controller::Config::default().concurrency(concurrency);
        applier(wrapped, error_policy, data, reader, requests, config)
            .for_each(|result| {
                match result {
                    // Already logged (with its span) by the wrapper.
                    Ok(_) | Err(kube::runtime::controller::Error::ReconcilerFailed(..)) => {}
                    // A watch (of the kind or of one it owns/watches) failed:
                    // the cache is stale until it resumes (health.rs).
                    Err(kube::runtime::controller::Error::QueueError(e)) => {
                        readiness.watch_failed(name, &e.to_string());
                        tracing::warn!(controller = name, error = %e, "watch failed; retrying");
                    }
                    // Its turn came after it was deleted: it left the queue.
                    Err(kube::runtime::controller::Error::ObjectNotFound(obj_ref)) => {
                        let key = queue_key(obj_ref.namespace.as_deref(), &obj_ref.name);
                        queue.dropped(&key, Instant::now(), *leading_now.borrow());
                        gone.forget(&key);
                    }
                    Err(other) => tracing::debug!(controller = name, error = %other, "controller event"),
                }
                futures::future::ready(())
            })
            .await;
        follow_leading.abort();
        tracing::info!(controller = name, "controller stopped");
        Ok(())
    }
}

/// A spawned reconcile, aborted when its handle is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

/// The message of a caught panic (a `&str` or `String` payload).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Displays an error with its sources: `outer: inner: root`.
pub struct DisplayChain<'a, E: std::error::Error>(pub &'a E);

impl<E: std::error::Error> std::fmt::Display for DisplayChain<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}
