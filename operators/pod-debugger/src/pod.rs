//! The pod projection: what the plan reads of a pod, a few hundred bytes
//! instead of the whole object. Pure.
//!
//! Bounded whatever the pod's author writes: only the label keys a
//! PodDebugger's selector references ([`LabelKeys`]), messages (a
//! container's termination message is its own to write) cut to
//! [`MAX_MESSAGE_BYTES`], at most [`MAX_CONTAINERS`] names per list.

use std::sync::Arc;

use flotilla_shared::intern::names;
use flotilla_shared::uid::Uid;
use std::collections::BTreeMap;

use flotilla_shared::pods::{LabelKeys, PodLabels};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use crate::mounts::{PodVolumes, project};

/// A message kept at most this long.
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// Containers (and ephemeral containers) of a pod kept at most.
pub const MAX_CONTAINERS: usize = 256;

/// `s` cut to [`MAX_MESSAGE_BYTES`] (its start).
fn short(s: &str) -> String {
    let mut end = s.len().min(MAX_MESSAGE_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

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

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodView {
    /// Interned ([`flotilla_shared::intern`]), as the container names: a
    /// namespace's pods, a workload's containers share them.
    pub namespace: Arc<str>,
    /// Boxed: 8 bytes less than a `String` in every view (memory per pod,
    /// issue 28), as the container lists below.
    pub name: Box<str>,
    pub uid: Uid,
    /// The labels some PodDebugger's selector references.
    pub labels: PodLabels,
    /// Phase Running.
    pub running: bool,
    /// Has a deletionTimestamp.
    pub terminating: bool,
    /// A static pod's mirror (the API cannot change it).
    pub mirror: bool,
    /// The containers, in order.
    pub containers: Box<[Arc<str>]>,
    /// Containers whose state is running.
    pub running_containers: Box<[Arc<str>]>,
    /// Ephemeral containers in the spec, in order.
    pub ephemeral: Vec<String>,
    /// Their states, by name.
    pub ephemeral_states: BTreeMap<String, ContainerState>,
    /// The pod's volumes and mounts, kept only in namespaces where a
    /// PodDebugger mounts volumes ([`VOLUMES_MARK`]).
    pub volumes: Option<Arc<PodVolumes>>,
}

/// The key a PodDebugger with spec.volumeMounts registers for its
/// namespace ([`LabelKeys::set`]): views there keep volumes. No label key
/// contains `!`.
pub const VOLUMES_MARK: &str = "!volumes";

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
    let running_containers = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        .map(|c| names().get(&c.name))
        .take(MAX_CONTAINERS)
        .collect();
    let ephemeral_states = status
        .and_then(|s| s.ephemeral_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| (c.name.clone(), state_of(c)))
        .take(MAX_CONTAINERS)
        .collect();
    PodView {
        namespace: names().get(meta.namespace.as_deref().unwrap_or_default()),
        name: meta.name.as_deref().unwrap_or_default().into(),
        uid: Uid::parse(meta.uid.as_deref().unwrap_or_default()),
        labels: keys.keep(meta.namespace.as_deref().unwrap_or_default(), meta.labels.as_ref()),
        running: status.and_then(|s| s.phase.as_deref()) == Some("Running"),
        terminating: meta.deletion_timestamp.is_some(),
        mirror: meta.annotations.as_ref().is_some_and(|a| a.contains_key(MIRROR_ANNOTATION)),
        containers: spec
            .map(|s| s.containers.iter().map(|c| names().get(&c.name)).take(MAX_CONTAINERS).collect())
            .unwrap_or_default(),
        running_containers,
        ephemeral: spec
            .and_then(|s| s.ephemeral_containers.as_ref())
            .into_iter()
            .flatten()
            .map(|c| c.name.clone())
            .take(MAX_CONTAINERS)
            .collect(),
        ephemeral_states,
        volumes: keys
            .wanted_in(meta.namespace.as_deref().unwrap_or_default(), VOLUMES_MARK)
            .then(|| Arc::new(project(pod))),
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
        assert_eq!(v.labels, flotilla_shared::pods::PodLabels::from_pairs([("app", "payment")]));
        assert!(v.running && v.mirror && !v.terminating);
        assert_eq!(*v.containers, [Arc::from("app"), Arc::from("side")]);
        assert_eq!(*v.running_containers, [Arc::from("app")]);
        assert_eq!(v.ephemeral, ["dbg-a-0123456789"]);
        let s = &v.ephemeral_states["dbg-a-0123456789"];
        assert_eq!((s.state, s.reason.as_str(), s.message.as_str()), ("Waiting", "ImagePullBackOff", "not found"));
        assert!(v.volumes.is_none(), "no PodDebugger of the namespace mounts volumes");
        keys.set([(Some("n".to_string()), "app".to_string()), (Some("n".to_string()), VOLUMES_MARK.to_string())]);
        assert!(view(&pod, &keys).volumes.is_some());
    }
}
