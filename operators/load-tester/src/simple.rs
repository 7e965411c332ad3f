//! SimpleDeployment's child pod (seed 004's first example): prints a line
//! and sleeps `sleepytime` seconds. Exactly one per SimpleDeployment: its
//! name is fixed (`<name>-child`), so a second can never be created. It
//! meets the `restricted` Pod Security level (non-root, no capabilities,
//! RuntimeDefault seccomp), and `sleepytime` reaches `sleep` as an argument,
//! never as shell text. Pure.

use serde_json::{Value, json};

use crate::crd::SimpleDeploymentSpec;

/// Label: the SimpleDeployment a child belongs to.
pub const OWNER_LABEL: &str = "flotilla.dev/simpledeployment";
/// The default image (it needs sh, echo and sleep).
pub const DEFAULT_IMAGE: &str = "busybox";

/// The child's name, cut to fit a pod name.
pub fn child_name(sd: &str) -> String {
    let keep = sd.len().min(253 - "-child".len());
    format!("{}-child", sd[..keep].trim_end_matches(['-', '.']))
}

/// The child pod.
pub fn pod(sd: &str, uid: &str, spec: &SimpleDeploymentSpec) -> Value {
    // `sleepytime` is `$1`: even a value the schema's pattern let through
    // could not become a command.
    let script = r#"echo "I'm so very useful!"; exec sleep "$1""#;
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": child_name(sd),
            "labels": {"app.kubernetes.io/managed-by": crate::runner::MANAGED_BY, OWNER_LABEL: crate::runner::label_value(sd)},
            "ownerReferences": [{
                "apiVersion": "flotilla.dev/v1alpha1", "kind": "SimpleDeployment", "name": sd, "uid": uid,
                "controller": true
            }]
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"}
            },
            "containers": [{
                "name": "simple",
                "image": spec.image.as_deref().unwrap_or(DEFAULT_IMAGE),
                "command": ["sh", "-c", script, "simple", spec.sleepytime],
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}
            }]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_is_owned_named_and_sleeps() {
        let spec: SimpleDeploymentSpec =
            serde_json::from_value(json!({"sleepytime": "120"})).unwrap_or_else(|e| panic!("{e}"));
        let p = pod("example-01", "u", &spec);
        assert_eq!(p["metadata"]["name"], "example-01-child");
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "SimpleDeployment");
        assert_eq!(p["spec"]["containers"][0]["command"][4], "120", "sleepytime is an argument");
        assert!(!p["spec"]["containers"][0]["command"][2].as_str().unwrap_or("").contains("120"));
        assert_eq!(p["spec"]["securityContext"]["runAsNonRoot"], true);
        assert_eq!(p["spec"]["containers"][0]["securityContext"]["capabilities"]["drop"][0], "ALL");
        assert_eq!(p["spec"]["containers"][0]["image"], DEFAULT_IMAGE);
        assert!(child_name(&"x".repeat(253)).len() <= 253);
    }
}
