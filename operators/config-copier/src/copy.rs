//! What a copy looks like: its content, ownership marks and hashes. Pure.
//!
//! A copy has the source's name, `data`/`binaryData` (and `type` for
//! Secrets), the source's labels and annotations minus tracking ones, plus:
//! label `flotilla.dev/copy-rule` (who owns it), label
//! `app.kubernetes.io/managed-by: flotilla-config-copier`, and annotations
//! `flotilla.dev/copy-rule` (`namespace/name` of the rule),
//! `flotilla.dev/source` (`namespace/name`) and `flotilla.dev/content-hash`.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::crd::SourceKind;

/// Ownership label: its value names the rule (see [`RuleId::label_value`]).
pub const RULE_LABEL: &str = "flotilla.dev/copy-rule";
/// The rule's `namespace/name`, in full.
pub const RULE_ANNOTATION: &str = "flotilla.dev/copy-rule";
/// The source's `namespace/name`.
pub const SOURCE_ANNOTATION: &str = "flotilla.dev/source";
/// `sha256:<hex>` of the content, labels and annotations the copy was written with.
pub const HASH_ANNOTATION: &str = "flotilla.dev/content-hash";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "flotilla-config-copier";
/// Selects every copy config-copier made (for its label-selected watches).
pub const COPIES_SELECTOR: &str = "app.kubernetes.io/managed-by=flotilla-config-copier,flotilla.dev/copy-rule";
/// Added to every source selector: a copy is never a source.
pub const NOT_A_COPY: &str = "!flotilla.dev/copy-rule";
/// Secrets of this type are never copied (the token controller owns them).
pub const SA_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";

/// Annotations and labels that track another tool's ownership and must not
/// be copied (they would make Helm/Argo CD/kubectl think they own the copy).
pub fn is_tracking_key(key: &str) -> bool {
    const EXACT: &[&str] = &[
        "kubectl.kubernetes.io/last-applied-configuration",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/instance",
        "helm.sh/chart",
        "meta.helm.sh/release-name",
        "meta.helm.sh/release-namespace",
        "kapp.k14s.io/app",
        "deployment.kubernetes.io/revision",
    ];
    const PREFIXES: &[&str] = &["argocd.argoproj.io/", "helm.sh/", "flotilla.dev/", "kustomize.toolkit.fluxcd.io/"];
    EXACT.contains(&key) || PREFIXES.iter().any(|p| key.starts_with(p))
}

fn without_tracking(m: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    m.iter().filter(|(k, _)| !is_tracking_key(k)).map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// A rule's identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId {
    pub namespace: String,
    pub name: String,
}

impl RuleId {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self { namespace: namespace.into(), name: name.into() }
    }

    /// The ownership label's value: `<namespace>.<name>` when that is a valid
    /// label value (≤ 63 characters), else a stable hash of it.
    pub fn label_value(&self) -> String {
        let plain = format!("{}.{}", self.namespace, self.name);
        if plain.len() <= 63 {
            plain
        } else {
            let digest = Sha256::digest(format!("{}/{}", self.namespace, self.name).as_bytes());
            let hash = hex::encode(&digest[..10]);
            let keep = 63 - hash.len() - 1;
            let prefix: String = plain.chars().take(keep).collect();
            format!("{}-{hash}", prefix.trim_end_matches(['.', '-']))
        }
    }

    /// Parses `namespace/name`.
    pub fn parse(s: &str) -> Option<Self> {
        let (ns, name) = s.split_once('/')?;
        (!ns.is_empty() && !name.is_empty()).then(|| Self::new(ns, name))
    }
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Where a copy lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CopyKey {
    pub kind: SourceKind,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for CopyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// The payload of a ConfigMap or Secret: `data` (strings for ConfigMaps,
/// base64 for Secrets, as on the wire), `binaryData` (base64) and `type`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Content {
    pub data: BTreeMap<String, String>,
    pub binary_data: BTreeMap<String, String>,
    pub type_: Option<String>,
}

impl Content {
    /// From an object's JSON (a ConfigMap or Secret as the API returns it).
    pub fn from_json(kind: SourceKind, obj: &Value) -> Self {
        let map = |field: &str| -> BTreeMap<String, String> {
            obj.get(field)
                .and_then(Value::as_object)
                .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string()))).collect())
                .unwrap_or_default()
        };
        Self {
            data: map("data"),
            binary_data: if kind == SourceKind::ConfigMap { map("binaryData") } else { BTreeMap::new() },
            type_: if kind == SourceKind::Secret {
                obj.get("type").and_then(Value::as_str).map(str::to_string)
            } else {
                None
            },
        }
    }

    /// `sha256:<hex>` of the payload alone (compared against what a copy
    /// actually holds, to repair hand edits).
    pub fn hash(&self) -> String {
        let canonical = json!({"data": self.data, "binaryData": self.binary_data, "type": self.type_});
        format!("sha256:{}", hex::encode(Sha256::digest(canonical.to_string().as_bytes())))
    }
}

/// A source object, reduced to what copies need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub kind: SourceKind,
    pub namespace: String,
    pub name: String,
    /// Labels and annotations to copy (tracking ones already removed).
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub content: Content,
    /// Hash of the payload.
    pub content_hash: String,
    /// Hash of payload, labels and annotations: the copy's annotation.
    pub hash: String,
}

impl Source {
    pub fn new(
        kind: SourceKind,
        namespace: &str,
        name: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
        content: Content,
    ) -> Self {
        let labels = without_tracking(labels);
        let annotations = without_tracking(annotations);
        let content_hash = content.hash();
        let full = json!({"content": content_hash, "labels": labels, "annotations": annotations});
        let hash = format!("sha256:{}", hex::encode(Sha256::digest(full.to_string().as_bytes())));
        Self {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
            labels,
            annotations,
            content,
            content_hash,
            hash,
        }
    }

    /// Parses a ConfigMap or Secret as returned by the API; `None` for
    /// objects that are never sources (copies, service-account tokens).
    pub fn from_json(kind: SourceKind, obj: &Value) -> Option<Self> {
        let meta = obj.get("metadata")?;
        let namespace = meta.get("namespace")?.as_str()?;
        let name = meta.get("name")?.as_str()?;
        let strings = |field: &str| -> BTreeMap<String, String> {
            meta.get(field)
                .and_then(Value::as_object)
                .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string()))).collect())
                .unwrap_or_default()
        };
        let labels = strings("labels");
        if labels.contains_key(RULE_LABEL) {
            return None;
        }
        let content = Content::from_json(kind, obj);
        if content.type_.as_deref() == Some(SA_TOKEN_TYPE) {
            return None;
        }
        Some(Self::new(kind, namespace, name, &labels, &strings("annotations"), content))
    }

    /// The copy of this source in `namespace` for `rule`, as a server-side
    /// apply body: exactly the fields config-copier owns.
    pub fn copy_manifest(&self, rule: &RuleId, namespace: &str) -> Value {
        let mut labels = self.labels.clone();
        labels.insert(RULE_LABEL.to_string(), rule.label_value());
        labels.insert(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string());
        let mut annotations = self.annotations.clone();
        annotations.insert(RULE_ANNOTATION.to_string(), rule.to_string());
        annotations.insert(SOURCE_ANNOTATION.to_string(), format!("{}/{}", self.namespace, self.name));
        annotations.insert(HASH_ANNOTATION.to_string(), self.hash.clone());
        let mut obj = json!({
            "apiVersion": "v1",
            "kind": self.kind.as_str(),
            "metadata": {"name": self.name, "namespace": namespace, "labels": labels, "annotations": annotations},
        });
        if !self.content.data.is_empty() {
            obj["data"] = json!(self.content.data);
        }
        if !self.content.binary_data.is_empty() {
            obj["binaryData"] = json!(self.content.binary_data);
        }
        if let Some(t) = &self.content.type_ {
            obj["type"] = json!(t);
        }
        obj
    }
}

/// An existing object at a copy's place, as far as ownership goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing {
    pub key: CopyKey,
    /// The rule named by the ownership label (and annotation), if any.
    pub owner: Option<Owner>,
    /// The hash annotation it was last written with.
    pub annotated_hash: Option<String>,
    /// The hash of what it holds now.
    pub content_hash: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// Who an object's ownership marks name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The `flotilla.dev/copy-rule` label value.
    pub label: String,
    /// The rule from the annotation, when present and parseable.
    pub rule: Option<RuleId>,
}

impl Existing {
    pub fn from_json(kind: SourceKind, obj: &Value) -> Option<Self> {
        let meta = obj.get("metadata")?;
        let s = |section: &str, key: &str| {
            meta.get(section).and_then(|m| m.get(key)).and_then(Value::as_str).map(str::to_string)
        };
        let owner = s("labels", RULE_LABEL)
            .map(|label| Owner { label, rule: s("annotations", RULE_ANNOTATION).and_then(|a| RuleId::parse(&a)) });
        Some(Self {
            key: CopyKey {
                kind,
                namespace: meta.get("namespace")?.as_str()?.to_string(),
                name: meta.get("name")?.as_str()?.to_string(),
            },
            owner,
            annotated_hash: s("annotations", HASH_ANNOTATION),
            content_hash: Content::from_json(kind, obj).hash(),
            uid: meta.get("uid").and_then(Value::as_str).map(str::to_string),
            resource_version: meta.get("resourceVersion").and_then(Value::as_str).map(str::to_string),
        })
    }

    /// Whether `rule` owns it: the ownership label carries the rule's value.
    pub fn owned_by(&self, rule: &RuleId) -> bool {
        self.owner.as_ref().is_some_and(|o| o.label == rule.label_value())
    }

    /// Whether it holds `source`'s current content, labels and annotations.
    pub fn in_sync_with(&self, source: &Source) -> bool {
        self.annotated_hash.as_deref() == Some(source.hash.as_str()) && self.content_hash == source.content_hash
    }
}

/// Labels and annotations that `field_manager` set with a plain create or
/// update (not apply) and that `desired` (an apply body) no longer has: left
/// over from when the copy was created, to be removed. Keys other managers
/// set are never listed.
pub fn stale_marks(obj: &Value, field_manager: &str, desired: &Value) -> (Vec<String>, Vec<String>) {
    let mut labels = Vec::new();
    let mut annotations = Vec::new();
    let entries = obj.pointer("/metadata/managedFields").and_then(Value::as_array).cloned().unwrap_or_default();
    for entry in entries {
        let ours = entry.get("manager").and_then(Value::as_str) == Some(field_manager)
            && entry.get("operation").and_then(Value::as_str) == Some("Update");
        if !ours {
            continue;
        }
        for (section, out) in [("labels", &mut labels), ("annotations", &mut annotations)] {
            let owned = entry.pointer(&format!("/fieldsV1/f:metadata/f:{section}")).and_then(Value::as_object);
            let want = desired.pointer(&format!("/metadata/{section}")).and_then(Value::as_object);
            let present = obj.pointer(&format!("/metadata/{section}")).and_then(Value::as_object);
            for key in owned.into_iter().flat_map(|m| m.keys()).filter_map(|k| k.strip_prefix("f:")) {
                let wanted = want.is_some_and(|w| w.contains_key(key));
                let there = present.is_some_and(|p| p.contains_key(key));
                if !wanted && there && !out.iter().any(|k: &String| k == key) {
                    out.push(key.to_string());
                }
            }
        }
    }
    (labels, annotations)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn tracking_metadata_is_not_copied() {
        let src = Source::new(
            SourceKind::ConfigMap,
            "default",
            "cfg",
            &m(&[("copyrator", "true"), ("app.kubernetes.io/instance", "x"), ("argocd.argoproj.io/instance", "a")]),
            &m(&[
                ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
                ("note", "keep"),
                ("meta.helm.sh/release-name", "r"),
            ]),
            Content { data: m(&[("k", "v")]), ..Default::default() },
        );
        let obj = src.copy_manifest(&RuleId::new("default", "main-rule"), "team-a");
        let labels = obj["metadata"]["labels"].as_object().unwrap();
        assert_eq!(labels.len(), 3, "{labels:?}");
        assert_eq!(labels["copyrator"], "true");
        assert_eq!(labels[RULE_LABEL], "default.main-rule");
        assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY);
        let ann = obj["metadata"]["annotations"].as_object().unwrap();
        assert_eq!(ann["note"], "keep");
        assert_eq!(ann[SOURCE_ANNOTATION], "default/cfg");
        assert_eq!(ann[RULE_ANNOTATION], "default/main-rule");
        assert!(!ann.contains_key("kubectl.kubernetes.io/last-applied-configuration"));
        assert!(!ann.contains_key("meta.helm.sh/release-name"));
        assert_eq!(obj["metadata"]["namespace"], "team-a");
        assert_eq!(obj["data"]["k"], "v");
    }

    #[test]
    fn a_written_copy_reads_back_in_sync_and_drift_is_seen() {
        let src = Source::new(
            SourceKind::Secret,
            "default",
            "s",
            &m(&[("a", "b")]),
            &BTreeMap::new(),
            Content { data: m(&[("k", "dg==")]), type_: Some("Opaque".into()), ..Default::default() },
        );
        let rule = RuleId::new("default", "r");
        let mut obj = src.copy_manifest(&rule, "x");
        let existing = Existing::from_json(SourceKind::Secret, &obj).unwrap();
        assert!(existing.owned_by(&rule));
        assert!(!existing.owned_by(&RuleId::new("default", "other")));
        assert!(existing.in_sync_with(&src));
        obj["data"]["k"] = json!("ZWRpdGVk");
        assert!(!Existing::from_json(SourceKind::Secret, &obj).unwrap().in_sync_with(&src));
        obj["data"]["k"] = json!("dg==");
        obj["data"]["extra"] = json!("eA==");
        assert!(!Existing::from_json(SourceKind::Secret, &obj).unwrap().in_sync_with(&src));
    }

    #[test]
    fn copies_and_service_account_tokens_are_never_sources() {
        let copy = json!({"metadata": {"namespace": "a", "name": "x", "labels": {RULE_LABEL: "b.r"}}});
        assert!(Source::from_json(SourceKind::ConfigMap, &copy).is_none());
        let token = json!({"metadata": {"namespace": "a", "name": "t"}, "type": SA_TOKEN_TYPE});
        assert!(Source::from_json(SourceKind::Secret, &token).is_none());
        let ok = json!({"metadata": {"namespace": "a", "name": "t"}, "type": "Opaque", "data": {"k": "dg=="}});
        assert_eq!(Source::from_json(SourceKind::Secret, &ok).unwrap().content.type_.as_deref(), Some("Opaque"));
    }

    #[test]
    fn label_values_stay_valid_and_distinct() {
        let short = RuleId::new("default", "r");
        assert_eq!(short.label_value(), "default.r");
        let long1 = RuleId::new("a".repeat(60), "rule-one");
        let long2 = RuleId::new("a".repeat(60), "rule-two");
        for v in [long1.label_value(), long2.label_value()] {
            assert!(v.len() <= 63, "{v}");
            assert!(v.chars().last().is_some_and(|c| c.is_ascii_alphanumeric()));
        }
        assert_ne!(long1.label_value(), long2.label_value());
        assert_eq!(RuleId::parse("ns/name"), Some(RuleId::new("ns", "name")));
        assert_eq!(RuleId::parse("nope"), None);
    }

    #[test]
    fn the_hash_covers_labels_and_annotations_but_not_tracking_ones() {
        let c = Content { data: m(&[("k", "v")]), ..Default::default() };
        let a = Source::new(SourceKind::ConfigMap, "d", "n", &m(&[("x", "1")]), &BTreeMap::new(), c.clone());
        let b = Source::new(SourceKind::ConfigMap, "d", "n", &m(&[("x", "2")]), &BTreeMap::new(), c.clone());
        let t = Source::new(
            SourceKind::ConfigMap,
            "d",
            "n",
            &m(&[("x", "1"), ("helm.sh/chart", "c")]),
            &BTreeMap::new(),
            c.clone(),
        );
        assert_ne!(a.hash, b.hash);
        assert_eq!(a.hash, t.hash);
        assert_eq!(a.content_hash, b.content_hash);
    }

    #[test]
    fn stale_marks_are_only_our_own_leftovers() {
        let src =
            Source::new(SourceKind::ConfigMap, "d", "n", &m(&[("keep", "1")]), &BTreeMap::new(), Content::default());
        let desired = src.copy_manifest(&RuleId::new("d", "r"), "x");
        let obj = json!({
            "metadata": {
                "labels": {"keep": "1", "gone": "1", "theirs": "1"},
                "annotations": {"old-note": "x"},
                "managedFields": [
                    {"manager": "flotilla-config-copier", "operation": "Update", "fieldsV1": {"f:metadata": {
                        "f:labels": {"f:keep": {}, "f:gone": {}}, "f:annotations": {"f:old-note": {}}}}},
                    {"manager": "flotilla-config-copier", "operation": "Apply", "fieldsV1": {"f:metadata": {
                        "f:labels": {"f:applied": {}}}}},
                    {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:metadata": {
                        "f:labels": {"f:theirs": {}}}}}
                ]
            }
        });
        let (labels, annotations) = stale_marks(&obj, "flotilla-config-copier", &desired);
        assert_eq!(labels, ["gone"]);
        assert_eq!(annotations, ["old-note"]);
    }
}
