//! Which of a pod's volumes a debug container mounts (spec.volumeMounts,
//! kubernetes#114184), from the pod's volume projection. Pure.
//!
//! The debug container mounts a volume where the target container does, so
//! paths in logs and configs mean the same in both. Read-only unless the
//! PodDebugger asks for the target's own mode. Not mounted, each with its
//! reason: volumes the pod lacks, volumes the target does not mount (no
//! path to mirror), subPath mounts (the API refuses them on ephemeral
//! containers) and, unless allowed, volumes holding Secret material.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Volume, VolumeMount};

use crate::crd::VolumeMounts;

/// Volumes and mounts a pod view keeps at most.
pub const MAX_VOLUMES: usize = 256;

/// One mount of a container, as the projection keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub volume: String,
    pub path: String,
    pub read_only: bool,
    /// Mounts a subPath (or subPathExpr) of the volume.
    pub sub_path: bool,
}

/// What a pod view keeps of the pod's volumes, only in namespaces where a
/// PodDebugger mounts volumes (the pod cache's budget).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodVolumes {
    /// The pod's volumes: name, and whether it holds Secret material.
    pub volumes: Vec<(String, bool)>,
    /// Every container's mounts: (container, mount).
    pub mounts: Vec<(Arc<str>, Mount)>,
}

/// Whether a volume holds Secret material: a secret volume, or a projected
/// one with a Secret or a service account token source (a token is a
/// credential as much as a Secret is).
fn holds_secrets(v: &Volume) -> bool {
    v.secret.is_some()
        || v.projected.as_ref().is_some_and(|p| {
            p.sources.iter().flatten().any(|s| s.secret.is_some() || s.service_account_token.is_some())
        })
}

/// Projects the volumes and the containers' mounts of `pod`.
pub fn project(pod: &Pod) -> PodVolumes {
    let Some(spec) = pod.spec.as_ref() else { return PodVolumes::default() };
    let names = flotilla_shared::intern::names();
    PodVolumes {
        volumes: spec.volumes.iter().flatten().take(MAX_VOLUMES).map(|v| (v.name.clone(), holds_secrets(v))).collect(),
        mounts: spec
            .containers
            .iter()
            .flat_map(|c| {
                let container = names.get(&c.name);
                c.volume_mounts.iter().flatten().map(move |m| {
                    let mount = Mount {
                        volume: m.name.clone(),
                        path: m.mount_path.clone(),
                        read_only: m.read_only == Some(true),
                        sub_path: m.sub_path.as_deref().is_some_and(|s| !s.is_empty())
                            || m.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty()),
                    };
                    (Arc::clone(&container), mount)
                })
            })
            .take(MAX_VOLUMES)
            .collect(),
    }
}

/// A volume not mounted, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub volume: String,
    /// NotInPod, NotMountedByTarget, SubPathNotAllowed or SecretVolumeNotAllowed.
    pub reason: &'static str,
}

/// The debug container's mounts for `want` in a pod with `pod`'s volumes,
/// joining `target`; `secrets`: whether Secret volumes may be mounted.
pub fn mounts(want: &VolumeMounts, pod: &PodVolumes, target: &str, secrets: bool) -> (Vec<VolumeMount>, Vec<Skipped>) {
    let of_target: Vec<&Mount> = pod.mounts.iter().filter(|(c, _)| **c == *target).map(|(_, m)| m).collect();
    let secret = |name: &str| pod.volumes.iter().any(|(v, s)| v == name && *s);
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    let mut skip = |volume: &str, reason| {
        if !skipped.iter().any(|s: &Skipped| s.volume == volume && s.reason == reason) {
            skipped.push(Skipped { volume: volume.to_string(), reason });
        }
    };
    let chosen: Vec<&Mount> = if want.mirror {
        of_target
    } else {
        let mut chosen = Vec::new();
        for name in &want.names {
            let name = name.0.as_str();
            if !pod.volumes.iter().any(|(v, _)| v == name) {
                skip(name, "NotInPod");
                continue;
            }
            let at: Vec<&Mount> = of_target.iter().copied().filter(|m| m.volume == name).collect();
            if at.is_empty() {
                skip(name, "NotMountedByTarget");
            }
            chosen.extend(at);
        }
        chosen
    };
    for m in chosen {
        if m.sub_path {
            skip(&m.volume, "SubPathNotAllowed");
        } else if secret(&m.volume) && !secrets {
            skip(&m.volume, "SecretVolumeNotAllowed");
        } else if !out.iter().any(|o: &VolumeMount| o.mount_path == m.path) {
            out.push(VolumeMount {
                name: m.volume.clone(),
                mount_path: m.path.clone(),
                read_only: Some(!want.read_write || m.read_only),
                ..VolumeMount::default()
            });
        }
    }
    (out, skipped)
}

/// The skipped volumes as a message: `a (NotInPod), b (SecretVolumeNotAllowed)`.
pub fn describe(skipped: &[Skipped]) -> String {
    skipped.iter().map(|s| format!("{} ({})", s.volume, s.reason)).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::VolumeName;

    fn pod() -> PodVolumes {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {"name": "app", "volumeMounts": [
                        {"name": "data", "mountPath": "/data"},
                        {"name": "config", "mountPath": "/etc/app", "readOnly": true},
                        {"name": "creds", "mountPath": "/creds"},
                        {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
                        {"name": "data", "mountPath": "/logs", "subPath": "logs"}]},
                    {"name": "side", "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}]}],
                "volumes": [
                    {"name": "data", "emptyDir": {}},
                    {"name": "config", "configMap": {"name": "c"}},
                    {"name": "creds", "secret": {"secretName": "s"}},
                    {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
                    {"name": "scratch", "emptyDir": {}}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        project(&pod)
    }

    fn paths(m: &[VolumeMount]) -> Vec<(&str, &str, bool)> {
        m.iter().map(|m| (m.name.as_str(), m.mount_path.as_str(), m.read_only == Some(true))).collect()
    }

    #[test]
    fn mirror_mounts_the_targets_volumes_read_only_without_secrets_or_subpaths() {
        let want = VolumeMounts { mirror: true, ..VolumeMounts::default() };
        let (m, skipped) = mounts(&want, &pod(), "app", false);
        assert_eq!(paths(&m), [("data", "/data", true), ("config", "/etc/app", true)]);
        assert_eq!(
            describe(&skipped),
            "creds (SecretVolumeNotAllowed), kube-api-access (SecretVolumeNotAllowed), data (SubPathNotAllowed)"
        );
        // readWrite keeps the target's mode; secrets: true mounts them.
        let want = VolumeMounts { mirror: true, read_write: true, ..VolumeMounts::default() };
        let (m, _) = mounts(&want, &pod(), "app", true);
        assert_eq!(
            paths(&m),
            [
                ("data", "/data", false),
                ("config", "/etc/app", true),
                ("creds", "/creds", false),
                ("kube-api-access", "/var/run/secrets/kubernetes.io/serviceaccount", true)
            ]
        );
        // Another target, other mounts.
        let (m, skipped) = mounts(&VolumeMounts { mirror: true, ..VolumeMounts::default() }, &pod(), "side", false);
        assert_eq!((paths(&m), skipped), (vec![("scratch", "/tmp", true)], vec![]));
    }

    #[test]
    fn names_mount_the_named_volumes_where_the_target_does_and_say_what_they_skip() {
        let names = ["config", "nope", "scratch", "creds"].map(|n| VolumeName(n.into())).to_vec();
        let want = VolumeMounts { names, ..VolumeMounts::default() };
        let (m, skipped) = mounts(&want, &pod(), "app", false);
        assert_eq!(paths(&m), [("config", "/etc/app", true)]);
        assert_eq!(describe(&skipped), "nope (NotInPod), scratch (NotMountedByTarget), creds (SecretVolumeNotAllowed)");
    }
}
