//! The ephemeral container a PodDebugger adds, and the patch that adds it
//! (a strategic merge on `pods/<name>/ephemeralcontainers`, keyed by
//! container name, as kubectl debug sends it). Pure.

use k8s_openapi::api::core::v1::{EnvVar, EphemeralContainer, VolumeMount};
use serde_json::{Value, json};

use crate::crd::PodDebuggerSpec;
use crate::security::security_context;

/// The command under a deadline: `timeout -s KILL <seconds> <command...>`
/// (busybox's and coreutils' syntax alike). KILL, because an interactive
/// shell ignores TERM, and the deadline is the end of debug access.
/// busybox's `timeout` runs the command in its own place and kills it from
/// a forked watcher, coreutils' runs it as a child and exits after it:
/// either way the container's main process ends at the deadline.
pub fn with_deadline(command: &[String], deadline: Option<u64>) -> Vec<String> {
    match deadline {
        Some(secs) if !command.is_empty() => ["timeout", "-s", "KILL", &secs.max(1).to_string()]
            .into_iter()
            .map(str::to_string)
            .chain(command.iter().cloned())
            .collect(),
        _ => command.to_vec(),
    }
}

/// The container `spec` describes, named `name`, joining `target`, its
/// command ending after `deadline` seconds (the expiry; the schema requires
/// a command with one), mounting `mounts`.
/// The spec's literal environment variables as a container's (None when
/// there are none): the injected container's and a debug copy's.
pub fn env_vars(spec: &PodDebuggerSpec) -> Option<Vec<EnvVar>> {
    (!spec.env.is_empty()).then(|| {
        spec.env
            .iter()
            .map(|e| EnvVar { name: e.name.clone(), value: Some(e.value.clone()), value_from: None })
            .collect()
    })
}

pub fn ephemeral_container(
    spec: &PodDebuggerSpec,
    name: &str,
    target: &str,
    deadline: Option<u64>,
    mounts: &[VolumeMount],
) -> EphemeralContainer {
    let some_vec = |v: &[String]| (!v.is_empty()).then(|| v.to_vec());
    EphemeralContainer {
        name: name.to_string(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.map(|p| p.as_str().to_string()),
        command: some_vec(&with_deadline(&spec.command, deadline)),
        volume_mounts: (!mounts.is_empty()).then(|| mounts.to_vec()),
        args: some_vec(&spec.args),
        env: env_vars(spec),
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
        let c = ephemeral_container(&spec, "dbg-x-0123456789", "app", None, &[]);
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
        assert!(c.get("volumeMounts").is_none());
    }

    #[test]
    fn an_expiring_container_runs_its_command_under_the_deadline_with_its_mounts() {
        let spec: PodDebuggerSpec = serde_json::from_value(json!({
            "selector": {"matchLabels": {"app": "payment"}},
            "image": "busybox:1.37",
            "command": ["sh", "-c", "sleep 3600"],
            "ttl": "20s",
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let mount = VolumeMount {
            name: "data".into(),
            mount_path: "/data".into(),
            read_only: Some(true),
            ..VolumeMount::default()
        };
        let c = ephemeral_container(&spec, "dbg-x-0123456789", "app", Some(17), std::slice::from_ref(&mount));
        assert_eq!(
            c.command,
            Some(["timeout", "-s", "KILL", "17", "sh", "-c", "sleep 3600"].map(String::from).to_vec())
        );
        assert_eq!(c.volume_mounts, Some(vec![mount]));
        // No command, no deadline to put it under (the schema forbids an
        // expiry without a command); a zero deadline still ends it.
        assert_eq!(with_deadline(&[], Some(5)), Vec::<String>::new());
        assert_eq!(with_deadline(&["sh".to_string()], Some(0))[3], "1");
        assert_eq!(with_deadline(&["sh".to_string()], None), ["sh"]);
    }
}
