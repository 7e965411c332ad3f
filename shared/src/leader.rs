//! Leader election on a `coordination.k8s.io/v1` Lease with client-go /
//! controller-runtime semantics:
//!
//! * A lease held by someone else is free once `leaseDurationSeconds` have
//!   passed since *we observed* its last change (our clock, not theirs, so
//!   clock skew between nodes does not matter).
//! * The leader renews every retry period; when it has not renewed
//!   successfully for the renew deadline, its term is *suspended*: it must
//!   act no more (another candidate may acquire the lease a lease duration
//!   after the last renewal). client-go ends the term there and
//!   controller-runtime exits; here the leader keeps trying, and if the
//!   lease still shows its term — its holder, acquire time and transition
//!   count unchanged, so nobody led meanwhile — it renews and resumes. An
//!   API server outage longer than the renew deadline thus costs a pause,
//!   not a process restart. If anyone else took the lease, the term is lost.
//! * Releasing (on shutdown) empties `holderIdentity`, so a standby takes over
//!   at its next retry instead of waiting a whole lease duration.
//!
//! Updates use the lease's resourceVersion, so two candidates can never both
//! believe they acquired it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::LeaseTimings;

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("lease {namespace}/{name}: {source}")]
    Api { namespace: String, name: String, source: kube::Error },
}

/// What we last saw of the lease, and when (by our clock).
#[derive(Debug, Clone)]
struct Observed {
    resource_version: Option<String>,
    at: Instant,
    /// Our term, when we wrote the lease last: its acquire time and
    /// transition count, which change whenever anyone else acquires it.
    term: Option<(Option<MicroTime>, Option<i32>)>,
}

/// The state of a leader's term (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Term {
    Leading,
    /// Not renewed within the renew deadline: do nothing until it resumes.
    Suspended,
    /// Someone else acquired the lease (or it was deleted): over for good.
    Lost,
}

/// What a suspended leader found when it tried to renew.
enum Reclaim {
    Renewed,
    Taken(String),
    Retry,
}

/// Competes for one Lease.
#[derive(Clone)]
pub struct LeaderElector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    timings: LeaseTimings,
    /// Whether the last attempt reached the API (a standby's health).
    healthy: Arc<AtomicBool>,
}

/// `<pod or host name>_<random suffix>`, as controller-runtime does, so two
/// processes on one host never share an identity.
pub fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string()))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "flotilla".to_string());
    format!("{host}_{:08x}", rand::random::<u32>())
}

fn now_micro() -> MicroTime {
    MicroTime(Timestamp::now())
}

impl LeaderElector {
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str, timings: LeaseTimings) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            timings,
            healthy: Arc::new(AtomicBool::new(false)),
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    pub fn lease_name(&self) -> &str {
        &self.name
    }

    /// Whether the last acquire attempt reached the API server.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    fn api_err(&self, source: kube::Error) -> LeaderError {
        LeaderError::Api { namespace: self.namespace.clone(), name: self.name.clone(), source }
    }

    /// One client-go `tryAcquireOrRenew`: `Ok(true)` when we hold the lease
    /// afterwards, `Ok(false)` when someone else validly does.
    async fn try_acquire_or_renew(&self, observed: &mut Option<Observed>) -> Result<bool, LeaderError> {
        let now = now_micro();
        let lease_secs = i32::try_from(self.timings.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.name).await.map_err(|e| self.api_err(e))? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(lease_secs),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    *observed = Some(Observed::written(&created));
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(self.api_err(e)),
            };
        };

        let rv = lease.metadata.resource_version.clone();
        if observed.as_ref().map(|o| &o.resource_version) != Some(&rv) {
            let term = observed.as_ref().and_then(|o| o.term.clone());
            *observed = Some(Observed { resource_version: rv, at: Instant::now(), term });
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let held_by_us = holder == self.identity;
        if !holder.is_empty() && !held_by_us {
            let their_duration =
                Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0));
            let seen_at = observed.as_ref().map(|o| o.at).unwrap_or_else(Instant::now);
            if seen_at + their_duration > Instant::now() {
                return Ok(false);
            }
        }
        if !held_by_us {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(lease_secs);
        spec.renew_time = Some(now);
        let Some(updated) = self.replace(&lease).await? else { return Ok(false) };
        *observed = Some(Observed::written(&updated));
        Ok(true)
    }

    /// A suspended leader's renewal: only if the lease still shows our term.
    async fn reclaim(&self, observed: &mut Option<Observed>) -> Result<Reclaim, LeaderError> {
        let Some(mut lease) = self.api.get_opt(&self.name).await.map_err(|e| self.api_err(e))? else {
            return Ok(Reclaim::Taken("nobody: the lease was deleted".into()));
        };
        let ours = observed.as_ref().and_then(|o| o.term.clone());
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        if holder != self.identity || ours != Some((spec.acquire_time.clone(), spec.lease_transitions)) {
            return Ok(Reclaim::Taken(if holder.is_empty() { "nobody (released)".into() } else { holder }));
        }
        spec.renew_time = Some(now_micro());
        let Some(updated) = self.replace(&lease).await? else { return Ok(Reclaim::Retry) };
        *observed = Some(Observed::written(&updated));
        Ok(Reclaim::Renewed)
    }

    /// Writes `lease` back, conditional on the resourceVersion it was read
    /// at: `None` when someone wrote it meanwhile (409).
    async fn replace(&self, lease: &Lease) -> Result<Option<Lease>, LeaderError> {
        match self.api.replace(&self.name, &PostParams::default(), lease).await {
            Ok(updated) => Ok(Some(updated)),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
            Err(e) => Err(self.api_err(e)),
        }
    }

    /// Waits until this candidate holds the lease, retrying every retry
    /// period (jittered by up to 20 %, as client-go does). Cancel by dropping
    /// the future (e.g. in a `select!` with shutdown).
    pub async fn acquire(&self) -> HeldLease {
        let mut observed = None;
        loop {
            match self.try_acquire_or_renew(&mut observed).await {
                Ok(true) => {
                    self.healthy.store(true, Ordering::Relaxed);
                    tracing::info!(lease = %self.name, identity = %self.identity, "acquired the leader lease");
                    return self.start_renewing(observed);
                }
                Ok(false) => self.healthy.store(true, Ordering::Relaxed),
                Err(e) => {
                    self.healthy.store(false, Ordering::Relaxed);
                    tracing::warn!(error = %e, "could not read or acquire the leader lease; retrying");
                }
            }
            let jitter = self.timings.retry_period.mul_f64(rand::random::<f64>() * 0.2);
            tokio::time::sleep(self.timings.retry_period + jitter).await;
        }
    }

    fn start_renewing(&self, observed: Option<Observed>) -> HeldLease {
        let (term_tx, term_rx) = watch::channel(Term::Leading);
        let elector = self.clone();
        let task = tokio::spawn(async move {
            let mut observed = observed;
            // When the last successful renewal was *sent*: others count the
            // lease from the write, and a reply can come late.
            let mut last_renewed = Instant::now();
            loop {
                let suspended = *term_tx.borrow() == Term::Suspended;
                // Never sleep past the renew deadline: suspension must come
                // at the deadline, well before a standby may take the lease.
                let wake = Instant::now() + elector.timings.retry_period;
                let wake = if suspended { wake } else { wake.min(last_renewed + elector.timings.renew_deadline) };
                tokio::time::sleep_until(wake).await;
                if suspended {
                    let attempt = tokio::time::timeout(elector.timings.renew_deadline, elector.reclaim(&mut observed));
                    let sent = Instant::now();
                    match attempt.await {
                        Ok(Ok(Reclaim::Renewed)) => {
                            last_renewed = sent;
                            tracing::info!(lease = %elector.name, "renewed the leader lease: nobody took it meanwhile; resuming");
                            let _ = term_tx.send(Term::Leading);
                        }
                        Ok(Ok(Reclaim::Taken(holder))) => {
                            tracing::error!(lease = %elector.name, %holder, "the leader lease was taken while suspended");
                            break;
                        }
                        Ok(Ok(Reclaim::Retry)) => {}
                        Ok(Err(e)) => tracing::debug!(error = %e, "still cannot renew the leader lease"),
                        Err(_) => tracing::debug!("still cannot renew the leader lease (timed out)"),
                    }
                    continue;
                }
                let deadline = last_renewed + elector.timings.renew_deadline;
                let sent = Instant::now();
                let attempt = tokio::time::timeout_at(deadline, elector.try_acquire_or_renew(&mut observed)).await;
                match attempt {
                    Ok(Ok(true)) => last_renewed = sent,
                    // A conflict, or the lease rewritten by someone else: like
                    // client-go, try again until the renew deadline; leadership
                    // is lost only if no renewal succeeds by then.
                    Ok(Ok(false)) => tracing::warn!(
                        lease = %elector.name,
                        "the leader lease was changed by someone else; retrying until the renew deadline"
                    ),
                    Ok(Err(e)) => tracing::warn!(error = %e, "renewing the leader lease failed; retrying"),
                    Err(_) => {}
                }
                if Instant::now() >= deadline && last_renewed + elector.timings.renew_deadline <= Instant::now() {
                    tracing::error!(
                        lease = %elector.name,
                        renew_deadline = ?elector.timings.renew_deadline,
                        "could not renew the leader lease within the renew deadline: suspended; renewing it if nobody takes it"
                    );
                    let _ = term_tx.send(Term::Suspended);
                }
            }
            let _ = term_tx.send(Term::Lost);
        });
        HeldLease { elector: self.clone(), term: term_rx, task }
    }

    /// Empties `holderIdentity` if we still hold the lease, so a standby takes
    /// over at its next retry.
    async fn release(&self) -> Result<bool, LeaderError> {
        let Some(mut lease) = self.api.get_opt(&self.name).await.map_err(|e| self.api_err(e))? else {
            return Ok(false);
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        let now = now_micro();
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now.clone());
        spec.acquire_time = Some(now);
        Ok(self.replace(&lease).await?.is_some())
    }
}

impl Observed {
    /// The lease as we have just written it.
    fn written(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        Self {
            resource_version: lease.metadata.resource_version.clone(),
            at: Instant::now(),
            term: Some((spec.and_then(|s| s.acquire_time.clone()), spec.and_then(|s| s.lease_transitions))),
        }
    }
}

/// Held leadership: renews in the background until lost or released.
pub struct HeldLease {
    elector: LeaderElector,
    term: watch::Receiver<Term>,
    task: JoinHandle<()>,
}

impl HeldLease {
    /// Resolves when leadership is lost for good (another holder, after the
    /// renew deadline).
    pub async fn lost(&mut self) {
        let _ = self.term.wait_for(|t| *t == Term::Lost).await;
    }

    pub fn is_lost(&self) -> bool {
        *self.term.borrow() == Term::Lost
    }

    /// The term's next state, when it changes (`Lost` stays `Lost`).
    pub async fn changed(&mut self) -> Term {
        if self.is_lost() {
            return Term::Lost;
        }
        match self.term.changed().await {
            Ok(()) => *self.term.borrow_and_update(),
            Err(_) => Term::Lost,
        }
    }

    /// Stops renewing and hands the lease back.
    pub async fn release(self) -> Result<bool, LeaderError> {
        self.task.abort();
        let released = self.elector.release().await?;
        if released {
            tracing::info!(lease = %self.elector.name, "released the leader lease");
        }
        Ok(released)
    }

    /// Stops renewing without releasing (a crash, as far as others can tell).
    pub fn abandon(self) {
        self.task.abort();
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        self.task.abort();
    }
}
