//! The pod projection: what the plan reads of a pod, a few hundred bytes
//! instead of the whole object. Pure.
//!
//! Bounded whatever the pod's author writes: only the label keys a
//! PodDebugger's selector references ([`LabelKeys`]), messages (a
//! container's termination message is its own to write) cut to
//! [`MAX_MESSAGE_BYTES`], at most [`MAX_CONTAINERS`] names per list.

use std::sync::{Arc, LazyLock};

use flotilla_shared::intern::{Interner, names};
use flotilla_shared::projection::{HasKey, ns_key};
use flotilla_shared::uid::Uid;
use std::collections::BTreeMap;

use flotilla_shared::pods::{LabelKeys, PodLabels};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use crate::mounts::{PodVolumes, project};

/// A message kept at most this long.
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// Containers of a pod kept at most (one bit each says whether it runs).
pub const MAX_CONTAINERS: usize = 64;
/// Ephemeral containers of a pod kept at most.
pub const MAX_EPHEMERAL: usize = 256;

/// `s` cut to [`MAX_MESSAGE_BYTES`] (its start).
fn short(s: &str) -> String {
    let mut end = s.len().min(MAX_MESSAGE_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The kubelet's reason for a container it waits to restart after crashes.
pub const CRASH_LOOP: &str = "CrashLoopBackOff";

/// The annotation the kubelet sets on a static pod's mirror.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// A container's state in the pod's status.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerState {
    /// Running, Waiting or Terminated ("" when the status has no entry yet).
    pub state: &'static str,
    /// The kubelet's reason, e.g. ImagePullBackOff, Completed.
    pub reason: String,
    pub message: String,
}

/// What the pods of one workload have in common — the labels kept and
/// the containers' names — held once for all of them ([`SHAPES`]): a
/// pointer per pod instead of two lists (memory per pod, issue 28).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape {
    /// The labels some PodDebugger's selector references.
    pub labels: PodLabels,
    /// The containers, in order (at most [`MAX_CONTAINERS`]).
    pub containers: Box<[Arc<str>]>,
}

/// Every pod view's [`Shape`], shared (bounded as
/// [`flotilla_shared::intern::names`] is: swept when it has doubled).
pub static SHAPES: LazyLock<Interner<Shape>> = LazyLock::new(Interner::default);

impl Shape {
    /// `self`, shared with every view of an equal shape.
    pub fn share(self) -> Arc<Shape> {
        SHAPES.share(self)
    }
}

/// The debug containers a pod has: most pods have none, and hold one
/// pointer for them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ephemeral {
    /// Ephemeral containers in the spec, in order.
    pub names: Vec<String>,
    /// Their states, by name.
    pub states: BTreeMap<String, ContainerState>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodView {
    /// `<namespace>/<name>`: the store's key, held here only
    /// (`projection::keyed_store`).
    pub key: Box<str>,
    pub shape: Arc<Shape>,
    pub uid: Uid,
    /// Phase Running.
    pub running: bool,
    /// Has a deletionTimestamp.
    pub terminating: bool,
    /// A static pod's mirror (the API cannot change it).
    pub mirror: bool,
    /// Which of the shape's containers run: bit `i` for container `i`.
    pub running_containers: u64,
    /// Which of the shape's containers wait in CrashLoopBackOff (mode: copy).
    pub crash_looping: u64,
    /// Its debug containers, when it has any.
    pub ephemeral: Option<Box<Ephemeral>>,
    /// The pod's volumes and mounts, kept only in namespaces where a
    /// PodDebugger mounts volumes ([`VOLUMES_MARK`]).
    pub volumes: Option<Arc<PodVolumes>>,
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

    /// The labels some PodDebugger's selector references.
    pub fn labels(&self) -> &PodLabels {
        &self.shape.labels
    }

    /// The containers, in order.
    pub fn containers(&self) -> &[Arc<str>] {
        &self.shape.containers
    }

    /// Whether container `name` is running.
    pub fn runs(&self, name: &str) -> bool {
        self.containers().iter().position(|c| **c == *name).is_some_and(|i| self.running_containers >> i & 1 == 1)
    }

    /// The first container waiting in CrashLoopBackOff, if one is.
    pub fn first_crash_looping(&self) -> Option<&str> {
        let i = self.crash_looping.trailing_zeros() as usize;
        self.containers().get(i).map(|c| &**c)
    }

    /// Whether container `name` waits in CrashLoopBackOff.
    pub fn crash_loops(&self, name: &str) -> bool {
        self.containers().iter().position(|c| **c == *name).is_some_and(|i| self.crash_looping >> i & 1 == 1)
    }

    /// Ephemeral containers in the spec, in order.
    pub fn ephemeral(&self) -> &[String] {
        self.ephemeral.as_ref().map_or(&[], |e| &e.names)
    }

    /// The state of ephemeral container `name`, if it has one yet.
    pub fn ephemeral_state(&self, name: &str) -> Option<&ContainerState> {
        self.ephemeral.as_ref()?.states.get(name)
    }
}

/// The key a PodDebugger with spec.volumeMounts registers for its
/// namespace ([`LabelKeys::set`]): views there keep volumes. No label key
/// contains `!`.
pub const VOLUMES_MARK: &str = "!volumes";

/// Whether the container is in a crash loop: waiting in CrashLoopBackOff,
/// or ended with an error after restarts. The kubelet shows the second
/// for most of each back-off (the container stays Terminated until the
/// back-off ends) and CrashLoopBackOff only for a moment before the
/// restart, too short for a watch with a debounce to see (measured on the
/// node: Terminated for 20 s, then CrashLoopBackOff, Running and
/// Terminated again within 400 ms).
fn crash_looping(c: &ContainerStatus) -> bool {
    let state = c.state.as_ref();
    let waiting = state.and_then(|s| s.waiting.as_ref()).and_then(|w| w.reason.as_deref()) == Some(CRASH_LOOP);
    let failed_again =
        c.restart_count >= 1 && state.and_then(|s| s.terminated.as_ref()).is_some_and(|t| t.exit_code != 0);
    waiting || failed_again
}

fn state_of(s: &ContainerStatus) -> ContainerState {
    let st = s.state.as_ref();
    if st.is_some_and(|s| s.running.is_some()) {
        return ContainerState { state: "Running", ..ContainerState::default() };
    }
    if let Some(w) = st.and_then(|s| s.waiting.as_ref()) {
        return ContainerState {
            state: "Waiting",
            reason: short(w.reason.as_deref().unwrap_or_default()),
            message: short(w.message.as_deref().unwrap_or_default()),
        };
    }
    if let Some(t) = st.and_then(|s| s.terminated.as_ref()) {
        let reason = short(t.reason.as_deref().unwrap_or_default());
        return ContainerState {
            state: "Terminated",
            message: t.message.as_deref().map_or_else(|| format!("exit code {}", t.exit_code), short),
            reason,
        };
    }
    ContainerState::default()
}

/// Projects a pod, keeping the labels `keys` names.
pub fn view(pod: &Pod, keys: &LabelKeys) -> PodView {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let shape = Shape {
        labels: keys.keep(namespace, meta.labels.as_ref()),
        containers: spec
            .map(|s| s.containers.iter().map(|c| names().get(&c.name)).take(MAX_CONTAINERS).collect())
            .unwrap_or_default(),
    };
    let bits = |which: fn(&ContainerStatus) -> bool| {
        status
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| which(c))
            .filter_map(|c| shape.containers.iter().position(|n| **n == *c.name))
            .fold(0u64, |bits, i| bits | 1 << i)
    };
    let running_containers = bits(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
    let crash_looping = bits(crash_looping);
    let names: Vec<String> = spec
        .and_then(|s| s.ephemeral_containers.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.name.clone())
        .take(MAX_EPHEMERAL)
        .collect();
    let states: BTreeMap<String, ContainerState> = status
        .and_then(|s| s.ephemeral_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| (c.name.clone(), state_of(c)))
        .take(MAX_EPHEMERAL)
        .collect();
    let ephemeral = (!names.is_empty() || !states.is_empty()).then(|| Box::new(Ephemeral { names, states }));
    PodView {
        key: ns_key::of(namespace, meta.name.as_deref().unwrap_or_default()).into(),
        shape: shape.share(),
        uid: Uid::parse(meta.uid.as_deref().unwrap_or_default()),
        running: status.and_then(|s| s.phase.as_deref()) == Some("Running"),
        terminating: meta.deletion_timestamp.is_some(),
        mirror: meta.annotations.as_ref().is_some_and(|a| a.contains_key(MIRROR_ANNOTATION)),
        running_containers,
        crash_looping,
        ephemeral,
        volumes: keys.wanted_in(namespace, VOLUMES_MARK).then(|| Arc::new(project(pod))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_projected_with_its_debug_containers_states() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "u", "labels": {"app": "payment"},
                          "annotations": {"kubernetes.io/config.mirror": "x"}},
            "spec": {"containers": [{"name": "app"}, {"name": "side"}],
                     "ephemeralContainers": [{"name": "dbg-a-0123456789", "image": "busybox"}]},
            "status": {"phase": "Running",
                "containerStatuses": [
                    {"name": "app", "ready": true, "restartCount": 0, "image": "x", "imageID": "", "state": {"running": {}}},
                    {"name": "side", "ready": false, "restartCount": 0, "image": "x", "imageID": "", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
                "ephemeralContainerStatuses": [
                    {"name": "dbg-a-0123456789", "ready": false, "restartCount": 0, "image": "busybox", "imageID": "",
                     "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let keys = LabelKeys::new();
        keys.set([(Some("n".to_string()), "app".to_string())]);
        let v = view(&pod, &keys);
        assert_eq!(*v.labels(), flotilla_shared::pods::PodLabels::from_pairs([("app", "payment")]));
        assert!(v.running && v.mirror && !v.terminating);
        assert_eq!((v.namespace(), v.name()), ("n", "p"));
        assert_eq!(*v.containers(), [Arc::from("app"), Arc::from("side")]);
        assert!(v.runs("app") && !v.runs("side") && !v.runs("nope"));
        assert!(v.crash_loops("side") && !v.crash_loops("app"));
        let status = |restarts: i32, state: serde_json::Value| -> ContainerStatus {
            serde_json::from_value(serde_json::json!({"name": "app", "ready": false, "restartCount": restarts,
                "image": "x", "imageID": "", "state": state}))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let error = serde_json::json!({"terminated": {"exitCode": 1, "reason": "Error"}});
        assert!(crash_looping(&status(2, error.clone())), "ended with an error after restarts");
        assert!(!crash_looping(&status(0, error)), "one failure is no loop yet");
        assert!(!crash_looping(&status(3, serde_json::json!({"terminated": {"exitCode": 0}}))));
        assert!(!crash_looping(&status(3, serde_json::json!({"running": {}}))));
        assert_eq!(v.first_crash_looping(), Some("side"));
        assert_eq!(v.ephemeral(), ["dbg-a-0123456789"]);
        let s = v.ephemeral_state("dbg-a-0123456789").unwrap_or_else(|| panic!("{v:?}"));
        assert_eq!((s.state, s.reason.as_str(), s.message.as_str()), ("Waiting", "ImagePullBackOff", "not found"));
        assert!(v.volumes.is_none(), "no PodDebugger of the namespace mounts volumes");
        keys.set([(Some("n".to_string()), "app".to_string()), (Some("n".to_string()), VOLUMES_MARK.to_string())]);
        assert!(view(&pod, &keys).volumes.is_some());
    }

    #[test]
    fn a_view_keeps_at_most_its_bounds_of_containers() {
        let containers: Vec<serde_json::Value> =
            (0..300).map(|i| serde_json::json!({"name": format!("c{i}")})).collect();
        let statuses: Vec<serde_json::Value> = (0..300)
            .map(|i| serde_json::json!({"name": format!("c{i}"), "ready": true, "restartCount": 0, "image": "x", "imageID": "",
                "state": {"running": {}}}))
            .collect();
        let ephemeral: Vec<serde_json::Value> =
            (0..400).map(|i| serde_json::json!({"name": format!("dbg-{i}"), "image": "busybox"})).collect();
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "u"},
            "spec": {"containers": containers, "ephemeralContainers": ephemeral},
            "status": {"phase": "Running", "containerStatuses": statuses}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let v = view(&pod, &LabelKeys::new());
        assert_eq!(v.containers().len(), MAX_CONTAINERS);
        assert!(v.runs("c0") && v.runs("c63"), "a bit for each kept container");
        assert!(!v.runs("c64"), "past the bound a container is not known");
        assert_eq!(v.ephemeral().len(), MAX_EPHEMERAL);
    }
}
