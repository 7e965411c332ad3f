//! `spec.rolloutOnChange`, the pure half: which workloads of a target
//! namespace consume a copy ([`references`]), and which of them to patch
//! after the copy's data changed ([`to_roll`]). A workload is patched only
//! when its pod template's [`COPY_HASH`] annotation differs from the hash
//! of the copy's data, so that one change rolls it once and a resync (same
//! data, same hash) never does. Whether a namespace accepts rollouts is
//! [`NamespaceInfo::accepts_rollouts`](crate::plan::NamespaceInfo::accepts_rollouts).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PodSpec;

use crate::crd::SourceKind;

/// Pod-template annotation: the hash of the data of the copy the workload
/// last rolled for.
pub const COPY_HASH: &str = "flotilla.dev/copy-hash";
/// Namespace label: `true` lets rules with `rolloutOnChange` roll workloads there.
pub const ACCEPT_ROLLOUTS: &str = "flotilla.dev/accept-rollouts";

/// The workload kinds rolled (all `apps/v1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 3] = [WorkloadKind::Deployment, WorkloadKind::StatefulSet, WorkloadKind::DaemonSet];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "deployments",
            WorkloadKind::StatefulSet => "statefulsets",
            WorkloadKind::DaemonSet => "daemonsets",
        }
    }
}

/// What a read of one workload keeps: what it consumes and the hash it
/// last rolled for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub name: String,
    /// The pod template's [`COPY_HASH`] annotation.
    pub copy_hash: Option<String>,
    /// The ConfigMaps and Secrets its pod template references (as read for
    /// a rollout: only the changed ones, [`crate::read::workloads::view`]).
    pub refs: BTreeSet<(SourceKind, String)>,
}

/// The ConfigMaps and Secrets a pod spec references: containers' and
/// initContainers' `env[].valueFrom` and `envFrom`, `volumes[]` and
/// projected volumes' sources.
pub fn references(spec: &PodSpec) -> BTreeSet<(SourceKind, String)> {
    let mut refs = BTreeSet::new();
    let containers = spec.containers.iter().chain(spec.init_containers.iter().flatten());
    for c in containers {
        for env in c.env.iter().flatten() {
            let Some(from) = &env.value_from else { continue };
            if let Some(r) = &from.config_map_key_ref {
                refs.insert((SourceKind::ConfigMap, r.name.clone()));
            }
            if let Some(r) = &from.secret_key_ref {
                refs.insert((SourceKind::Secret, r.name.clone()));
            }
        }
        for from in c.env_from.iter().flatten() {
            if let Some(r) = &from.config_map_ref {
                refs.insert((SourceKind::ConfigMap, r.name.clone()));
            }
            if let Some(r) = &from.secret_ref {
                refs.insert((SourceKind::Secret, r.name.clone()));
            }
        }
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(cm) = &v.config_map {
            refs.insert((SourceKind::ConfigMap, cm.name.clone()));
        }
        if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            refs.insert((SourceKind::Secret, name));
        }
        for p in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(cm) = &p.config_map {
                refs.insert((SourceKind::ConfigMap, cm.name.clone()));
            }
            if let Some(s) = &p.secret {
                refs.insert((SourceKind::Secret, s.name.clone()));
            }
        }
    }
    refs.retain(|(_, name)| !name.is_empty());
    refs
}

/// The workloads to patch to `hash` after the copy `kind`/`name` (in their
/// namespace) changed: those that reference it and did not roll for this
/// data already.
pub fn to_roll<'w>(kind: SourceKind, name: &str, hash: &str, workloads: &'w [Workload]) -> Vec<&'w Workload> {
    workloads
        .iter()
        .filter(|w| w.copy_hash.as_deref() != Some(hash) && w.refs.iter().any(|(k, n)| *k == kind && n == name))
        .collect()
}

/// One changed copy of a namespace, for [`patches`]: its kind, name and
/// data hash.
#[derive(Debug, Clone, Copy)]
pub struct ChangedCopy<'a> {
    pub kind: SourceKind,
    pub name: &'a str,
    pub hash: &'a str,
}

/// A patch an earlier reconcile failed to make, for [`patches`]: the
/// workload, and the changed copy (kind, name, data hash) it was to roll for.
#[derive(Debug, Clone, Copy)]
pub struct OwedPatch<'a> {
    pub copy: ChangedCopy<'a>,
    pub workload: (WorkloadKind, &'a str),
}

/// The workloads of one namespace to patch, each to one hash and for one
/// copy (kind, name): for each `changed` copy, its consumers that do not
/// carry its hash ([`to_roll`]; one consuming several rolls once, to the
/// last one's); then each `owed` patch whose copy did not change again,
/// whose workload is not rolled already, and which still consumes that
/// copy without carrying its hash. Owed patches are per workload, so a
/// retry rolls only the workloads whose patch failed.
pub fn patches(
    changed: &[ChangedCopy<'_>],
    owed: &[OwedPatch<'_>],
    workloads: &[Workload],
) -> BTreeMap<(WorkloadKind, String), (SourceKind, String, String)> {
    let mut out = BTreeMap::new();
    for c in changed {
        for w in to_roll(c.kind, c.name, c.hash, workloads) {
            out.insert((w.kind, w.name.clone()), (c.kind, c.name.to_string(), c.hash.to_string()));
        }
    }
    for o in owed {
        let key = (o.workload.0, o.workload.1.to_string());
        // A copy that changed again decides alone: its newest hash, or
        // nothing if the workload carries it (a revert must not be undone).
        let changed_again = changed.iter().any(|c| c.kind == o.copy.kind && c.name == o.copy.name);
        if changed_again || out.contains_key(&key) {
            continue;
        }
        let c = o.copy;
        if let Some(w) = workloads.iter().find(|w| w.kind == key.0 && w.name == key.1)
            && to_roll(c.kind, c.name, c.hash, std::slice::from_ref(w)).len() == 1
        {
            out.insert(key, (c.kind, c.name.to_string(), c.hash.to_string()));
        }
    }
    out
}

/// The merge patch that rolls a workload: its pod template's annotation,
/// nothing else.
pub fn patch(hash: &str) -> serde_json::Value {
    serde_json::json!({"spec": {"template": {"metadata": {"annotations": {COPY_HASH: hash}}}}})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    fn one_container(extra: serde_json::Value) -> PodSpec {
        let mut c = json!({"name": "app", "image": "x"});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        spec(json!({"containers": [c]}))
    }

    fn cm(name: &str) -> (SourceKind, String) {
        (SourceKind::ConfigMap, name.into())
    }

    fn secret(name: &str) -> (SourceKind, String) {
        (SourceKind::Secret, name.into())
    }

    #[test]
    fn each_reference_kind_is_found() {
        let env = one_container(json!({"env": [
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}},
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s-env", "key": "k"}}},
            {"name": "C", "value": "plain"},
        ]}));
        assert_eq!(references(&env), [cm("cm-env"), secret("s-env")].into());

        let env_from = one_container(
            json!({"envFrom": [{"configMapRef": {"name": "cm-from"}}, {"secretRef": {"name": "s-from"}}]}),
        );
        assert_eq!(references(&env_from), [cm("cm-from"), secret("s-from")].into());

        let init = spec(json!({
            "containers": [{"name": "app", "image": "x"}],
            "initContainers": [{"name": "init", "image": "x", "envFrom": [{"configMapRef": {"name": "cm-init"}}]}],
        }));
        assert_eq!(references(&init), [cm("cm-init")].into());

        let volumes = spec(json!({
            "containers": [{"name": "app", "image": "x"}],
            "volumes": [
                {"name": "a", "configMap": {"name": "cm-vol"}},
                {"name": "b", "secret": {"secretName": "s-vol"}},
                {"name": "c", "projected": {"sources": [
                    {"configMap": {"name": "cm-proj"}},
                    {"secret": {"name": "s-proj"}},
                    {"serviceAccountToken": {"path": "t"}},
                ]}},
                {"name": "d", "emptyDir": {}},
            ],
        }));
        assert_eq!(references(&volumes), [cm("cm-vol"), secret("s-vol"), cm("cm-proj"), secret("s-proj")].into());
        assert!(references(&one_container(json!({}))).is_empty());
    }

    fn workload(name: &str, hash: Option<&str>, refs: &[(SourceKind, String)]) -> Workload {
        Workload {
            kind: WorkloadKind::Deployment,
            name: name.into(),
            copy_hash: hash.map(str::to_string),
            refs: refs.iter().cloned().collect(),
        }
    }

    #[test]
    fn only_consumers_of_the_copy_roll() {
        let ws = [
            workload("consumer", None, &[cm("settings")]),
            workload("other-cm", None, &[cm("unrelated")]),
            // Same name, other kind: a Secret called settings is another object.
            workload("secret-of-that-name", None, &[secret("settings")]),
            workload("nothing", None, &[]),
        ];
        let names: Vec<_> = to_roll(SourceKind::ConfigMap, "settings", "h1", &ws).iter().map(|w| &w.name).collect();
        assert_eq!(names, ["consumer"]);
    }

    #[test]
    fn the_same_hash_rolls_nothing_and_a_new_one_rolls_once() {
        let rolled = [workload("app", Some("h1"), &[cm("settings")])];
        assert!(to_roll(SourceKind::ConfigMap, "settings", "h1", &rolled).is_empty(), "a resync: same data");
        assert_eq!(to_roll(SourceKind::ConfigMap, "settings", "h2", &rolled).len(), 1, "new data");
    }

    #[test]
    fn only_the_accept_rollouts_label_true_consents() {
        let ns = |labels: &[(&str, &str)]| crate::plan::NamespaceInfo {
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            terminating: false,
        };
        assert!(ns(&[(ACCEPT_ROLLOUTS, "true")]).accepts_rollouts());
        assert!(!ns(&[(ACCEPT_ROLLOUTS, "false")]).accepts_rollouts());
        assert!(!ns(&[("flotilla.dev/accept-copies", "true")]).accepts_rollouts(), "copies are not rollouts");
    }

    fn changed(name: &'static str, hash: &'static str) -> ChangedCopy<'static> {
        ChangedCopy { kind: SourceKind::ConfigMap, name, hash }
    }

    fn patched(p: &BTreeMap<(WorkloadKind, String), (SourceKind, String, String)>) -> Vec<(&str, &str)> {
        p.iter().map(|((_, w), (_, _, h))| (w.as_str(), h.as_str())).collect()
    }

    #[test]
    fn a_retry_rolls_only_the_workloads_whose_patch_failed() {
        // The failed reconcile rolled `both` (a and b changed: to b's hash)
        // and failed to patch `refused` to a's.
        let ws = [workload("both", Some("hb"), &[cm("a"), cm("b")]), workload("refused", Some("old"), &[cm("a")])];
        let owed = [OwedPatch { copy: changed("a", "ha"), workload: (WorkloadKind::Deployment, "refused") }];
        assert_eq!(patched(&patches(&[], &owed, &ws)), vec![("refused", "ha")]);
        // Done meanwhile, deleted, or no longer consuming a: nothing.
        let done = [workload("refused", Some("ha"), &[cm("a")])];
        assert!(patches(&[], &owed, &done).is_empty());
        assert!(patches(&[], &owed, &[]).is_empty());
        assert!(patches(&[], &owed, &[workload("refused", Some("old"), &[cm("other")])]).is_empty());
    }

    #[test]
    fn an_owed_patch_does_not_undo_a_newer_change() {
        // `w` owes a's old hash, and a changed again now: it rolls once, to the new.
        let ws = [workload("w", Some("h0"), &[cm("a")])];
        let owed = [OwedPatch { copy: changed("a", "h1"), workload: (WorkloadKind::Deployment, "w") }];
        assert_eq!(patched(&patches(&[changed("a", "h2")], &owed, &ws)), vec![("w", "h2")]);
    }

    #[test]
    fn an_owed_patch_does_not_undo_a_revert() {
        // `w` carries hX; a changed to Y (its patch refused: owed), then
        // back to X: `w` is where it should be, and stays.
        let ws = [workload("w", Some("hX"), &[cm("a")])];
        let owed = [OwedPatch { copy: changed("a", "hY"), workload: (WorkloadKind::Deployment, "w") }];
        assert!(patches(&[changed("a", "hX")], &owed, &ws).is_empty());
    }

    #[test]
    fn the_reviewers_sequence_misses_no_rollout() {
        // R1: b changed, `w` (a, b) rolled to hb, `x` (b) refused.
        // R2: a changed, `w`'s patch to ha refused. R3 retries both.
        let ws = [workload("w", Some("hb"), &[cm("a"), cm("b")]), workload("x", Some("old"), &[cm("b")])];
        let owed = [
            OwedPatch { copy: changed("b", "hb"), workload: (WorkloadKind::Deployment, "x") },
            OwedPatch { copy: changed("a", "ha"), workload: (WorkloadKind::Deployment, "w") },
        ];
        assert_eq!(patched(&patches(&[], &owed, &ws)), vec![("w", "ha"), ("x", "hb")]);
    }

    #[test]
    fn the_patch_touches_the_pod_template_annotation_only() {
        assert_eq!(
            patch("h"),
            json!({"spec": {"template": {"metadata": {"annotations": {"flotilla.dev/copy-hash": "h"}}}}})
        );
    }
}
