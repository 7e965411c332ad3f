//! A debug copy of a crash-looping pod (spec.mode: copy): its name, the
//! labels that say whose copy it is, and the Pod itself, built from the
//! source pod and the PodDebugger. Pure.
//!
//! The copy keeps what the target needs to be looked at (image, env,
//! mounts, service account, volumes) and drops what would let anything
//! adopt or route to it: the pod's labels and annotations, its owners,
//! its node (the scheduler places it), its ephemeral containers.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, VolumeMount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::container::env_vars;
use crate::crd::{CopySpec, PodDebuggerSpec};
use crate::naming;
use crate::security::security_context;

/// The label holding the UID of the pod a copy was made of.
pub const COPY_OF: &str = "flotilla.dev/debug-copy-of";
/// The label holding the UID of the PodDebugger that made a copy.
pub const COPIED_BY: &str = "flotilla.dev/debug-copied-by";
/// The annotation naming the pod a copy was made of (a name may be longer
/// than a label value may).
pub const SOURCE_ANNOTATION: &str = "flotilla.dev/debug-copy-of-pod";

/// A pod name is a DNS subdomain: at most this long.
const MAX_POD_NAME: usize = 253;
const HASH_DIGITS: usize = 10;

/// The copy's name: `<pod>-dbg-<hash>`, the hash of the PodDebugger's and
/// the source pod's UIDs (one copy per pod and PodDebugger), the pod's
/// part cut so the whole is a valid pod name.
pub fn copy_name(pod: &str, debugger_uid: &str, pod_uid: &str) -> String {
    let h = naming::fnv1a(format!("{debugger_uid}\0{pod_uid}").as_bytes());
    let hash = &format!("{h:016x}")[..HASH_DIGITS];
    let room = MAX_POD_NAME - "-dbg-".len() - HASH_DIGITS;
    let mut end = pod.len().min(room);
    while !pod.is_char_boundary(end) {
        end -= 1;
    }
    // A cut name may end in '-' or '.': not allowed before "-dbg".
    let part = pod[..end].trim_end_matches(['-', '.']);
    format!("{part}-dbg-{hash}")
}

/// What the copy is made from besides the source pod.
pub struct CopyOf<'a> {
    pub spec: &'a PodDebuggerSpec,
    /// The PodDebugger (the copy's owner).
    pub debugger_name: &'a str,
    pub debugger_uid: &'a str,
    /// The debug container's name (the current spec's).
    pub container: &'a str,
    /// The container that runs spec.copy.command instead of its own.
    pub target: &'a str,
    /// Seconds until the expiry, if the PodDebugger expires.
    pub deadline: Option<u64>,
    /// The debug container's mounts (spec.volumeMounts).
    pub mounts: &'a [VolumeMount],
}

/// The copy of `source` (its name from [`copy_name`]). None when the
/// source has no spec, or no container `target`.
pub fn copy_pod(source: &Pod, of: &CopyOf<'_>) -> Option<Pod> {
    let mut spec: PodSpec = source.spec.clone()?;
    let settings = of.spec.copy.clone().unwrap_or_default();
    let target = spec.containers.iter_mut().find(|c| c.name == of.target)?;
    run_instead(target, &settings);
    spec.containers.push(debug_container(of));
    // The expiry ends the whole copy, whatever its images hold (a
    // distroless target has no `timeout`) and whatever its restart policy
    // (a container ended by `timeout` would be started again): the kubelet
    // stops a pod past its active deadline. The operator deletes it then.
    spec.active_deadline_seconds = of.deadline.map(|s| i64::try_from(s.max(1)).unwrap_or(i64::MAX));
    // The scheduler places the copy (the source's node may be full); the
    // priority is recomputed from priorityClassName by admission, which
    // refuses a pod that brings its own.
    spec.node_name = None;
    spec.priority = None;
    spec.ephemeral_containers = None;
    spec.share_process_namespace = Some(true);
    let name = source.metadata.name.as_deref().unwrap_or_default();
    let uid = source.metadata.uid.as_deref().unwrap_or_default();
    let labels = BTreeMap::from([
        (COPY_OF.to_string(), uid.to_string()),
        (COPIED_BY.to_string(), of.debugger_uid.to_string()),
        ("app.kubernetes.io/managed-by".to_string(), "flotilla-pod-debugger".to_string()),
    ]);
    Some(Pod {
        metadata: ObjectMeta {
            name: Some(copy_name(name, of.debugger_uid, uid)),
            namespace: source.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(SOURCE_ANNOTATION.to_string(), name.to_string())])),
            // Deleted with the PodDebugger by the garbage collector; not
            // blocking its deletion (that would need update on its
            // finalizers).
            owner_references: Some(vec![OwnerReference {
                api_version: "flotilla.dev/v1alpha1".into(),
                kind: "PodDebugger".into(),
                name: of.debugger_name.to_string(),
                uid: of.debugger_uid.to_string(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// The target runs the copy's command (its image's entrypoint replaced,
/// its arguments dropped) and nothing restarts it for failing a probe.
fn run_instead(target: &mut Container, settings: &CopySpec) {
    target.command = Some(settings.command.clone());
    target.args = None;
    target.liveness_probe = None;
    target.readiness_probe = None;
    target.startup_probe = None;
}

/// The debug container, as the injected one would be, as a container of
/// the copy.
fn debug_container(of: &CopyOf<'_>) -> Container {
    let spec = of.spec;
    let some_vec = |v: &[String]| (!v.is_empty()).then(|| v.to_vec());
    Container {
        name: of.container.to_string(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.map(|p| p.as_str().to_string()),
        command: some_vec(&spec.command),
        args: some_vec(&spec.args),
        env: env_vars(spec),
        volume_mounts: (!of.mounts.is_empty()).then(|| of.mounts.to_vec()),
        stdin: Some(spec.stdin),
        tty: Some(spec.tty),
        security_context: security_context(spec.profile),
        termination_message_policy: Some("File".into()),
        ..Container::default()
    }
}

/// Whether `pod` (as fetched) is a copy owned by the PodDebugger with UID
/// `debugger_uid`: its owner reference says so, not only its labels
/// (which anyone who may label pods can write).
pub fn owned_by(pod: &Pod, debugger_uid: &str) -> bool {
    pod.metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|r| r.kind == "PodDebugger" && r.uid == debugger_uid))
        && pod.metadata.labels.as_ref().and_then(|l| l.get(COPIED_BY)).map(String::as_str) == Some(debugger_uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec() -> PodDebuggerSpec {
        serde_json::from_value(json!({
            "selector": {"matchLabels": {"app": "payment"}},
            "image": "busybox:1.37",
            "command": ["sh"],
            "mode": "copy",
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn source() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "payment-7d9f-x2", "namespace": "shop", "uid": "u-src",
                         "labels": {"app": "payment", "pod-template-hash": "7d9f"},
                         "annotations": {"a": "b"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "payment-7d9f", "uid": "rs", "controller": true}]},
            "spec": {"nodeName": "node-1", "priority": 1000, "priorityClassName": "high",
                     "serviceAccountName": "payment",
                     "containers": [
                        {"name": "app", "image": "shop/payment:1", "command": ["/payment"], "args": ["--port=8080"],
                         "env": [{"name": "DB", "value": "x"}],
                         "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                         "livenessProbe": {"httpGet": {"port": 8080}}, "readinessProbe": {"httpGet": {"port": 8080}}},
                        {"name": "side", "image": "shop/side:1"}],
                     "ephemeralContainers": [{"name": "dbg-old", "image": "busybox"}],
                     "volumes": [{"name": "data", "emptyDir": {}}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn of<'a>(spec: &'a PodDebuggerSpec, deadline: Option<u64>) -> CopyOf<'a> {
        CopyOf {
            spec,
            debugger_name: "pd",
            debugger_uid: "u-pd",
            container: "dbg-pd-0123456789",
            target: "app",
            deadline,
            mounts: &[],
        }
    }

    #[test]
    fn the_copy_runs_the_targets_image_env_and_mounts_under_the_copy_command_with_the_debug_container() {
        let spec = spec();
        let copy = copy_pod(&source(), &of(&spec, None)).unwrap_or_else(|| panic!("no copy"));
        let m = &copy.metadata;
        assert_eq!(m.name.as_deref(), Some(copy_name("payment-7d9f-x2", "u-pd", "u-src").as_str()));
        assert!(m.name.as_deref().is_some_and(|n| n.starts_with("payment-7d9f-x2-dbg-")));
        let labels = m.labels.clone().unwrap_or_default();
        assert!(!labels.contains_key("app") && !labels.contains_key("pod-template-hash"), "{labels:?}");
        assert_eq!(labels.get(COPY_OF).map(String::as_str), Some("u-src"));
        let owners = m.owner_references.clone().unwrap_or_default();
        assert_eq!(owners.len(), 1, "no ReplicaSet adopts it: {owners:?}");
        assert_eq!((owners[0].kind.as_str(), owners[0].uid.as_str()), ("PodDebugger", "u-pd"));
        assert!(owned_by(&copy, "u-pd") && !owned_by(&copy, "u-other"));
        let s = copy.spec.clone().unwrap_or_default();
        assert_eq!((s.node_name.as_deref(), s.priority, s.priority_class_name.as_deref()), (None, None, Some("high")));
        assert_eq!((s.share_process_namespace, s.ephemeral_containers.is_none()), (Some(true), true));
        assert_eq!(s.service_account_name.as_deref(), Some("payment"));
        let app = &s.containers[0];
        assert_eq!(app.image.as_deref(), Some("shop/payment:1"));
        assert_eq!(app.command, Some(vec!["sleep".to_string(), "infinity".to_string()]));
        assert!(app.args.is_none() && app.liveness_probe.is_none() && app.readiness_probe.is_none());
        assert_eq!(app.env.as_ref().map(Vec::len), Some(1));
        assert_eq!(app.volume_mounts.as_ref().map(|v| v[0].mount_path.as_str()), Some("/data"));
        assert_eq!(s.containers[1].name, "side");
        let dbg = &s.containers[2];
        assert_eq!((dbg.name.as_str(), dbg.image.as_deref()), ("dbg-pd-0123456789", Some("busybox:1.37")));
        assert_eq!(dbg.command, Some(vec!["sh".to_string()]));
        assert_eq!((dbg.stdin, dbg.tty), (Some(true), Some(true)));
    }

    #[test]
    fn an_expiring_copy_ends_at_its_active_deadline_whatever_its_images_hold() {
        let mut spec = spec();
        spec.copy = Some(CopySpec { command: vec!["sleep".into(), "3600".into()], max_copies: 1 });
        let copy = copy_pod(&source(), &of(&spec, Some(60))).unwrap_or_else(|| panic!("no copy"));
        let s = copy.spec.unwrap_or_default();
        assert_eq!(s.active_deadline_seconds, Some(60));
        assert_eq!(s.containers[0].command, Some(vec!["sleep".to_string(), "3600".to_string()]), "no timeout wrapper");
        assert_eq!(s.containers[2].command, Some(vec!["sh".to_string()]));
        let never = copy_pod(&source(), &of(&spec, None)).unwrap_or_else(|| panic!("no copy"));
        assert_eq!(never.spec.unwrap_or_default().active_deadline_seconds, None);
    }

    #[test]
    fn no_copy_without_the_target() {
        let spec = spec();
        let mut o = of(&spec, None);
        o.target = "nope";
        assert!(copy_pod(&source(), &o).is_none());
    }

    #[test]
    fn copy_names_are_valid_pod_names_whatever_the_pods_name() {
        let long = format!("{}-{}", "a".repeat(240), "b".repeat(12));
        for pod in ["p", long.as_str(), &format!("{}.-x", "c".repeat(236))] {
            let n = copy_name(pod, "u1", "u2");
            assert!(n.len() <= MAX_POD_NAME, "{n}");
            assert!(!n.contains("--dbg") && !n.contains(".-dbg"), "{n}");
        }
        assert_ne!(copy_name("p", "u1", "u2"), copy_name("p", "u1", "u3"));
        assert_ne!(copy_name("p", "u1", "u2"), copy_name("p", "u4", "u2"));
    }
}
