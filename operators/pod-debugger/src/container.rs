//! The ephemeral container a PodDebugger adds, and the patch that adds it
//! (a strategic merge on `pods/<name>/ephemeralcontainers`, keyed by
//! container name, as kubectl debug sends it). Pure.

use k8s_openapi::api::core::v1::{EnvVar, EphemeralContainer};
use serde_json::{Value, json};

use crate::crd::PodDebuggerSpec;
use crate::security::security_context;

/// The container `spec` describes, named `name`, joining `target`.
pub fn ephemeral_container(spec: &PodDebuggerSpec, name: &str, target: &str) -> EphemeralContainer {
    let some_vec = |v: &[String]| (!v.is_empty()).then(|| v.to_vec());
    EphemeralContainer {
        name: name.to_string(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.map(|p| p.as_str().to_string()),
        command: some_vec(&spec.command),
        args: some_vec(&spec.args),
        env: (!spec.env.is_empty()).then(|| {
            spec.env
                .iter()
                .map(|e| EnvVar { name: e.name.clone(), value: Some(e.value.clone()), value_from: None })
                .collect()
        }),
        stdin: Some(spec.stdin),
        tty: Some(spec.tty),
        target_container_name: Some(target.to_string()),
        security_context: security_context(spec.profile),
        termination_message_policy: Some("File".into()),
        ..EphemeralContainer::default()
    }
}

/// The strategic-merge patch adding `container` (and nothing else) to the
/// pod with UID `uid`: a pod replaced under the same name since the plan
/// (a StatefulSet's) refuses it, as its UID cannot change.
pub fn patch(container: &EphemeralContainer, uid: &str) -> Value {
    json!({"metadata": {"uid": uid}, "spec": {"ephemeralContainers": [container]}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_container_carries_the_spec_the_target_and_the_profile() {
        let spec: PodDebuggerSpec = serde_json::from_value(json!({
            "selector": {"matchLabels": {"app": "payment"}},
            "image": "busybox:1.37",
            "command": ["sleep", "86400"],
            "env": [{"name": "A", "value": "1"}],
            "profile": "restricted",
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let c = ephemeral_container(&spec, "dbg-x-0123456789", "app");
        let v = patch(&c, "uid-1");
        assert_eq!(v["metadata"]["uid"], "uid-1");
        let c = &v["spec"]["ephemeralContainers"][0];
        assert_eq!(c["name"], "dbg-x-0123456789");
        assert_eq!(c["image"], "busybox:1.37");
        assert_eq!(c["targetContainerName"], "app");
        assert_eq!(c["command"], json!(["sleep", "86400"]));
        assert!(c.get("args").is_none());
        assert_eq!(c["env"], json!([{"name": "A", "value": "1"}]));
        assert_eq!((c["stdin"].as_bool(), c["tty"].as_bool()), (Some(true), Some(true)));
        assert_eq!(c["securityContext"]["runAsNonRoot"], true);
        assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    }
}
