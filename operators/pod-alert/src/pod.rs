//! What pod-alert keeps of a pod: a small projection (a few hundred bytes,
//! not the kilobytes of a full `Pod`), and the workload that owns it. Pure.
//!
//! Bounded whatever the pod's author writes: only the label keys a live
//! selector references ([`LabelKeys`]), messages cut to
//! [`MAX_MESSAGE_BYTES`], at most [`MAX_CONTAINERS`] containers.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use flotilla_shared::intern::{Interner, names};
use flotilla_shared::pods::{LabelKeys, PodLabels};
use flotilla_shared::projection::{HasKey, ns_key};
use flotilla_shared::uid::Uid;

use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod};
use k8s_openapi::jiff::Timestamp;

use crate::rules::MAX_RESTART_WINDOW;

mod container;
mod container_id;
mod stamp;
pub use container::{ContainerView, State, Termination, Waiting};
pub use container_id::ContainerId;
pub use stamp::Stamp;

/// The workload a pod belongs to: its controller, followed from a
/// ReplicaSet to its Deployment (by Kubernetes' naming: a Deployment's
/// ReplicaSet is `<deployment>-<pod-template-hash>`, and its pods carry that
/// hash as a label), so no ReplicaSet read is needed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Workload {
    /// Interned, as the name: 16 bytes, shared by every pod of the kind
    /// (memory per pod, issue 28).
    pub kind: Arc<str>,
    /// Interned: a workload's pods share it.
    pub name: Arc<str>,
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// A message (the kubelet's, the scheduler's) kept at most this long.
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// Containers and init containers of a pod kept at most.
pub const MAX_CONTAINERS: usize = 64;

/// What a pod says of itself when something is off; most pods say
/// nothing, and hold one pointer for it (memory per pod, issue 28).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trouble {
    /// Pod-level reason and message (`Evicted`, …).
    pub reason: Box<str>,
    pub message: Box<str>,
    /// PodScheduled=False: its reason and message.
    pub unschedulable: Option<(Box<str>, Box<str>)>,
    /// When the pod's Ready condition last changed, kept while it is not
    /// Ready (a not-ready container counts from it; a Ready pod's is
    /// never read).
    pub not_ready_since: Stamp,
}

/// What the pods of one workload have in common — the workload, the labels
/// kept, the restart policy, the containers' names — held once for all of
/// them ([`SHAPES`]): a pointer per pod instead of ~100 bytes, and 16 bytes
/// less per container (memory per pod, issue 28).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Shape {
    pub workload: Workload,
    /// The labels some PodAlert's selector references.
    pub labels: PodLabels,
    pub restart_policy: RestartPolicy,
    /// The names of the view's containers, in its order (init containers
    /// first), interned as a list: most workloads share theirs (`app`,
    /// a mesh's sidecar) with others.
    pub containers: Arc<ContainerNames>,
    /// The pod's `flotilla.dev/silence-until` annotation, when it is a
    /// time ([`crate::silence`]): here, since a workload's pods share it.
    pub silence_until: Stamp,
}

/// The names of a pod's containers, in the order its view keeps them.
pub type ContainerNames = Box<[Arc<str>]>;

/// Every pod view's [`Shape`], shared (bounded as
/// [`flotilla_shared::intern::names`] is: swept when it has doubled).
pub static SHAPES: LazyLock<Interner<Shape>> = LazyLock::new(Interner::default);

/// Every shape's container names, shared.
static CONTAINER_NAMES: LazyLock<Interner<ContainerNames>> = LazyLock::new(Interner::default);

/// `names` (interned each), shared with every shape listing the same.
pub fn container_names<'a>(list: impl IntoIterator<Item = &'a str>) -> Arc<ContainerNames> {
    CONTAINER_NAMES.share(list.into_iter().map(|n| names().get(n)).collect())
}

impl Shape {
    /// `self`, shared with every view of an equal shape.
    pub fn share(self) -> Arc<Shape> {
        SHAPES.share(self)
    }
}

/// What pod-alert keeps of a pod. Strings are `Box<str>` (16 bytes, not a
/// `String`'s 24), those many pods repeat interned
/// ([`flotilla_shared::intern`]), what a workload's pods share held once
/// ([`Shape`]), the key shared with the store, and the rare parts boxed:
/// the view is per pod, and 150,000 pods is Kubernetes' limit
/// (`heap_budget.rs` counts it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// `<namespace>/<name>`: the store's key, held here only
    /// (`projection::keyed_store`).
    pub key: Box<str>,
    pub shape: Arc<Shape>,
    pub uid: Uid,
    pub created: Stamp,
    pub deleting: bool,
    pub phase: PodPhase,
    /// The pod's reason, message, scheduling trouble and when it stopped
    /// being Ready, when it has any of those.
    pub trouble: Option<Box<Trouble>>,
    pub scheduling_gated: bool,
    /// The Ready condition's status.
    pub ready: bool,
    pub containers: Box<[ContainerView]>,
}

impl HasKey for PodView {
    fn key(&self) -> &str {
        &self.key
    }
}

impl PodView {
    pub fn namespace(&self) -> &str {
        ns_key::namespace(&self.key)
    }

    pub fn name(&self) -> &str {
        ns_key::name(&self.key)
    }

    pub fn workload(&self) -> &Workload {
        &self.shape.workload
    }

    /// The labels some PodAlert's selector references.
    pub fn labels(&self) -> &PodLabels {
        &self.shape.labels
    }

    pub fn restart_policy(&self) -> RestartPolicy {
        self.shape.restart_policy
    }

    /// Until when the pod's annotation silences its problems.
    pub fn silence_until(&self) -> Option<Timestamp> {
        self.shape.silence_until.get()
    }

    /// The containers with their names (init containers first). A view
    /// and its shape list the same containers (made together, [`view`]).
    pub fn named_containers(&self) -> impl Iterator<Item = (&Arc<str>, &ContainerView)> {
        debug_assert_eq!(self.shape.containers.len(), self.containers.len(), "a view's containers and names differ");
        self.shape.containers.iter().zip(self.containers.iter())
    }

    /// The pod-level reason (`Evicted`, …), empty when none.
    pub fn reason(&self) -> &str {
        self.trouble.as_ref().map_or("", |t| &t.reason)
    }

    /// The pod-level message, empty when none.
    pub fn message(&self) -> &str {
        self.trouble.as_ref().map_or("", |t| &t.message)
    }

    /// PodScheduled=False: its reason and message.
    pub fn unschedulable(&self) -> Option<(&str, &str)> {
        self.trouble.as_ref()?.unschedulable.as_ref().map(|(r, m)| (&**r, &**m))
    }

    /// When the Ready condition last changed, while the pod is not Ready.
    pub fn not_ready_since(&self) -> Stamp {
        self.trouble.as_ref().map_or(Stamp::NONE, |t| t.not_ready_since)
    }
}

fn termination(t: &k8s_openapi::api::core::v1::ContainerStateTerminated) -> Termination {
    Termination {
        reason: termination_reason(t.reason.as_deref()),
        exit_code: t.exit_code,
        started_at: Stamp::of(t.started_at.as_ref()),
        finished_at: Stamp::of(t.finished_at.as_ref()),
        container_id: ContainerId::parse(t.container_id.as_deref().unwrap_or_default()),
    }
}

/// A termination's reason, not allocated when it is one the kubelet gives.
fn termination_reason(reason: Option<&str>) -> Cow<'static, str> {
    const KNOWN: [&str; 7] =
        ["", "Error", "OOMKilled", "Completed", "ContainerCannotRun", "DeadlineExceeded", "StartError"];
    let reason = reason.unwrap_or_default();
    match KNOWN.iter().find(|k| **k == reason) {
        Some(k) => Cow::Borrowed(*k),
        None => Cow::Owned(short(Some(reason)).into()),
    }
}

/// `s` cut to `MAX_MESSAGE_BYTES` (its start: a message says what it is first).
fn short(s: Option<&str>) -> Box<str> {
    let s = s.unwrap_or_default();
    let mut end = s.len().min(MAX_MESSAGE_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].into()
}

fn state(s: Option<&ContainerState>) -> State {
    let Some(s) = s else { return State::Unknown };
    if let Some(w) = &s.waiting {
        State::Waiting(Waiting { reason: short(w.reason.as_deref()), message: short(w.message.as_deref()) })
    } else if let Some(r) = &s.running {
        State::Running { started_at: Stamp::of(r.started_at.as_ref()) }
    } else if let Some(t) = &s.terminated {
        State::Terminated(termination(t))
    } else {
        State::Unknown
    }
}

fn container(c: &ContainerStatus, init: bool, now: Timestamp) -> ContainerView {
    let state = state(c.state.as_ref());
    // A running container's exit older than any restart window counts for
    // no PodAlert (a new exit comes with a new event): not kept, so a
    // long-lived pod that restarted once holds no ~100 bytes for it.
    let relevant = |t: &Termination| {
        !matches!(state, State::Running { .. })
            || t.finished_at.get().is_none_or(|at| elapsed(at, now) < MAX_RESTART_WINDOW)
    };
    let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref()).map(termination).filter(relevant);
    ContainerView::new(init, c.ready, u32::try_from(c.restart_count).unwrap_or(0), state, last)
}

/// The workload owning a pod (see [`Workload`]).
pub fn workload_of(pod: &Pod) -> Workload {
    let owner = pod.metadata.owner_references.as_ref().and_then(|o| o.iter().find(|o| o.controller == Some(true)));
    let Some(owner) = owner else {
        // Only a bare pod is its own workload: a pod's name is unique, and
        // interned for every pod it would sit in the table until the next
        // sweep (~90 bytes per pod, issue 28).
        return Workload {
            kind: names().get("Pod"),
            name: names().get(pod.metadata.name.as_deref().unwrap_or_default()),
        };
    };
    if owner.kind == "ReplicaSet" && owner.api_version == "apps/v1" {
        let hash = pod.metadata.labels.as_ref().and_then(|l| l.get("pod-template-hash"));
        let deployment = hash.and_then(|h| owner.name.strip_suffix(&format!("-{h}"))).filter(|d| !d.is_empty());
        if let Some(deployment) = deployment {
            return Workload { kind: names().get("Deployment"), name: names().get(deployment) };
        }
    }
    Workload { kind: names().get(&owner.kind), name: names().get(&owner.name) }
}

/// A pod's phase, one of the API's five: a byte in every pod view, not a
/// 16-byte `&str` (memory per pod, issue 28). Compares with the API's
/// spelling (`pod.phase == "Pending"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    /// The API's phase (anything else: `Unknown`).
    pub fn of(p: Option<&str>) -> Self {
        match p {
            Some("Pending") => Self::Pending,
            Some("Running") => Self::Running,
            Some("Succeeded") => Self::Succeeded,
            Some("Failed") => Self::Failed,
            _ => Self::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Unknown => "Unknown",
        }
    }
}

impl PartialEq<&str> for PodPhase {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A pod's restart policy: a byte, as [`PodPhase`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    /// The API's policy (its default, `Always`, when unset).
    pub fn of(p: Option<&str>) -> Self {
        match p {
            Some("OnFailure") => Self::OnFailure,
            Some("Never") => Self::Never,
            _ => Self::Always,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::OnFailure => "OnFailure",
            Self::Never => "Never",
        }
    }
}

impl PartialEq<&str> for RestartPolicy {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// The projection of `pod`, keeping the labels `keys` names.
pub fn view(pod: &Pod, keys: &LabelKeys) -> PodView {
    view_at(pod, keys, Timestamp::now())
}

/// [`view`] as of `now` (what is too old to keep).
pub fn view_at(pod: &Pod, keys: &LabelKeys, now: Timestamp) -> PodView {
    let meta = &pod.metadata;
    let status = pod.status.as_ref();
    let spec = pod.spec.as_ref();
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    let condition = |t: &str| conditions.iter().find(|c| c.type_ == t);
    let unschedulable = condition("PodScheduled")
        .filter(|c| c.status == "False")
        .map(|c| (short(c.reason.as_deref()), short(c.message.as_deref())));
    let ready_cond = condition("Ready");
    let mut containers: Vec<ContainerView> = Vec::new();
    let mut names_kept: Vec<&str> = Vec::new();
    let reason = short(status.and_then(|s| s.reason.as_deref()));
    let message = short(status.and_then(|s| s.message.as_deref()));
    let ready = ready_cond.is_some_and(|c| c.status == "True");
    let not_ready_since =
        if ready { Stamp::NONE } else { Stamp::of(ready_cond.and_then(|c| c.last_transition_time.as_ref())) };
    let trouble = (!reason.is_empty() || !message.is_empty() || unschedulable.is_some() || !ready)
        .then(|| Box::new(Trouble { reason, message, unschedulable, not_ready_since }));
    if let Some(s) = status {
        let init = s.init_container_statuses.as_deref().unwrap_or_default().iter().map(|c| (c, true));
        let regular = s.container_statuses.as_deref().unwrap_or_default().iter().map(|c| (c, false));
        for (c, is_init) in init.chain(regular).take(MAX_CONTAINERS) {
            names_kept.push(&c.name);
            containers.push(container(c, is_init, now));
        }
    }
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let shape = Shape {
        workload: workload_of(pod),
        labels: keys.keep(namespace, meta.labels.as_ref()),
        restart_policy: RestartPolicy::of(spec.and_then(|s| s.restart_policy.as_deref())),
        containers: container_names(names_kept),
        silence_until: Stamp::from(
            meta.annotations
                .as_ref()
                .and_then(|a| a.get(crate::silence::ANNOTATION))
                .and_then(|v| crate::silence::parse_annotation(v)),
        ),
    };
    PodView {
        key: ns_key::of(namespace, meta.name.as_deref().unwrap_or_default()).into(),
        shape: shape.share(),
        uid: Uid::parse(meta.uid.as_deref().unwrap_or_default()),
        created: Stamp::of(meta.creation_timestamp.as_ref()),
        deleting: meta.deletion_timestamp.is_some(),
        phase: PodPhase::of(status.and_then(|s| s.phase.as_deref())),
        trouble,
        scheduling_gated: spec.and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty()),
        ready,
        containers: containers.into_boxed_slice(),
    }
}

/// `to - from`, zero when `to` is earlier.
pub fn elapsed(from: Timestamp, to: Timestamp) -> Duration {
    let ms = to.as_millisecond().saturating_sub(from.as_millisecond());
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// `t + d`.
pub fn after(t: Timestamp, d: Duration) -> Timestamp {
    let ms = t.as_millisecond().saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2));
    Timestamp::from_millisecond(ms).unwrap_or(t)
}

/// `t - d`.
pub fn before(t: Timestamp, d: Duration) -> Timestamp {
    let ms = t.as_millisecond().saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2));
    Timestamp::from_millisecond(ms).unwrap_or(t)
}

/// Empties the interners of what no view holds any more
/// ([`flotilla_shared::intern::Interner::sweep`]): a budget test counts from there.
#[cfg(test)]
pub(crate) fn sweep_interned() {
    // Shapes and lists first: they hold names.
    SHAPES.sweep();
    CONTAINER_NAMES.sweep();
    names().sweep();
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn pod(owner: Option<(&str, &str, &str)>, hash: Option<&str>) -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-7f9c-abcde", "namespace": "a", "uid": "u1"},
        }))
        .unwrap();
        if let Some((api, kind, name)) = owner {
            p.metadata.owner_references = Some(vec![
                serde_json::from_value(serde_json::json!({
                    "apiVersion": api, "kind": kind, "name": name, "uid": "o", "controller": true
                }))
                .unwrap(),
            ]);
        }
        if let Some(h) = hash {
            p.metadata.labels = Some([("pod-template-hash".to_string(), h.to_string())].into());
        }
        p
    }

    #[test]
    fn replicaset_pods_belong_to_their_deployment() {
        let w = workload_of(&pod(Some(("apps/v1", "ReplicaSet", "web-7f9c")), Some("7f9c")));
        assert_eq!(w.to_string(), "Deployment/web");
        // A bare ReplicaSet (no hash label, or a name that does not end with it).
        let w = workload_of(&pod(Some(("apps/v1", "ReplicaSet", "web-7f9c")), None));
        assert_eq!(w.to_string(), "ReplicaSet/web-7f9c");
        let w = workload_of(&pod(Some(("apps/v1", "ReplicaSet", "web")), Some("7f9c")));
        assert_eq!(w.to_string(), "ReplicaSet/web");
        assert_eq!(workload_of(&pod(Some(("apps/v1", "StatefulSet", "db")), None)).to_string(), "StatefulSet/db");
        assert_eq!(workload_of(&pod(None, None)).to_string(), "Pod/web-7f9c-abcde");
    }

    #[test]
    fn view_keeps_container_states() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "a", "uid": "u"},
            "spec": {"containers": [{"name": "app"}], "restartPolicy": "Always"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
              "containerStatuses": [{"name": "app", "ready": false, "restartCount": 4, "image": "x", "imageID": "",
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "containerID": "containerd://abc", "finishedAt": "2026-01-01T00:01:00Z"}}}]}
        }))
        .unwrap();
        let v = view(&p, &LabelKeys::new());
        assert_eq!(v.containers.len(), 1);
        let c = &v.containers[0];
        assert_eq!(c.restart_count(), 4);
        assert!(matches!(&*c.state(), State::Waiting(w) if &*w.reason == "CrashLoopBackOff"));
        let t = c.last_termination().unwrap();
        assert_eq!((t.exit_code, t.container_id.to_string().as_str()), (1, "containerd://abc"));
        assert!(!v.ready);
    }

    #[test]
    fn an_exit_older_than_any_restart_window_is_not_kept_while_the_container_runs() {
        let pod = |state: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "a", "uid": "u"},
                "status": {"phase": "Running", "containerStatuses": [{"name": "app", "ready": true, "restartCount": 1,
                    "image": "x", "imageID": "", "state": state,
                    "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-01-01T00:00:00Z"}}}]}
            }))
            .unwrap()
        };
        let running = pod(serde_json::json!({"running": {"startedAt": "2026-01-01T00:00:01Z"}}));
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        let keeps =
            |p: &Pod, now: &str| view_at(p, &LabelKeys::new(), at(now)).containers[0].last_termination().is_some();
        assert!(keeps(&running, "2026-01-01T23:59:00Z"), "within 24h it may still count");
        assert!(!keeps(&running, "2026-01-02T00:00:01Z"), "past every restart window");
        let waiting = pod(serde_json::json!({"waiting": {"reason": "CrashLoopBackOff"}}));
        assert!(keeps(&waiting, "2026-03-01T00:00:00Z"), "a waiting container's last exit says since when it waits");
    }

    #[test]
    fn a_view_is_small_whatever_the_pod_holds() {
        let keys = LabelKeys::new();
        keys.set([(Some("a".to_string()), "tier".to_string())]);
        let labels: serde_json::Map<String, serde_json::Value> = (0..12_000)
            .map(|i| (format!("label-{i:05}"), serde_json::Value::from("x")))
            .chain([("tier".to_string(), serde_json::Value::from("backend"))])
            .collect();
        let statuses: Vec<serde_json::Value> = (0..500)
            .map(|i| serde_json::json!({"name": format!("c{i}"), "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                "state": {"waiting": {"reason": "CreateContainerConfigError", "message": "m".repeat(100_000)}}}))
            .collect();
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "a", "uid": "u", "labels": labels},
            "status": {"phase": "Pending", "message": "n".repeat(100_000), "containerStatuses": statuses}
        }))
        .unwrap();
        let v = view(&p, &keys);
        assert_eq!(v.labels().labels().len(), 1, "only the referenced key");
        assert_eq!(v.labels().get("tier"), Some("backend"));
        assert_eq!(v.containers.len(), MAX_CONTAINERS);
        assert_eq!(v.message().len(), MAX_MESSAGE_BYTES);
        assert!(
            v.containers
                .iter()
                .all(|c| matches!(&*c.state(), State::Waiting(w) if w.message.len() == MAX_MESSAGE_BYTES))
        );
    }

    #[test]
    fn a_container_is_16_bytes_and_reads_back_what_it_was_given() {
        assert_eq!(size_of::<ContainerView>(), 16);
        let exit = Termination { reason: "OOMKilled".into(), exit_code: 137, ..Default::default() };
        let running = State::Running { started_at: Stamp::from(Timestamp::from_second(100).unwrap()) };
        for state in
            [running.clone(), State::Unknown, State::waiting("CrashLoopBackOff", "m"), State::Terminated(exit.clone())]
        {
            for last in [None, Some(exit.clone())] {
                let c = ContainerView::new(false, true, 3, state.clone(), last.clone());
                assert_eq!((&*c.state(), c.last_termination()), (&state, last.as_ref()));
                // Set in any order, the same value (views compare equal).
                let mut d = ContainerView::new(false, true, 3, State::waiting("x", "y"), Some(Termination::default()));
                d.set_last_termination(last.clone());
                d.set_state(state.clone());
                assert_eq!(d, c);
            }
        }
        // A running container with no recent exit allocates nothing.
        let (_, heap) = flotilla_testenv::heap::heap_of(|| ContainerView::new(false, true, 0, running.clone(), None));
        assert_eq!(heap.allocations, 0);
    }

    #[test]
    fn time_helpers() {
        let t = Timestamp::from_second(100).unwrap();
        assert_eq!(elapsed(t, after(t, Duration::from_secs(5))), Duration::from_secs(5));
        assert_eq!(elapsed(after(t, Duration::from_secs(5)), t), Duration::ZERO);
    }
}
