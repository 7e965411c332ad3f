//! What a copy looks like: its content, ownership marks and hashes. Pure.
//!
//! A copy has the source's name (or the one `spec.target` makes of it:
//! [`crate::plan::Naming`]), `data`/`binaryData` (and `type` for
//! Secrets), the source's labels and annotations minus tracking ones, plus:
//! label `flotilla.dev/copy-rule` (who owns it), label
//! `app.kubernetes.io/managed-by: flotilla-config-copier`, and annotations
//! `flotilla.dev/copy-rule` (`namespace/name` of the rule),
//! `flotilla.dev/source` (`namespace/name`), `flotilla.dev/copy-rule-uid`
//! (the rule's UID: two installations, or a rule and its deleted
//! predecessor, never take each other's copies) and
//! `flotilla.dev/content-hash`.
//!
//! A source exists here in three sizes: [`SourceMeta`] (what its
//! metadata-only watch holds: a name and a resourceVersion), [`SourceInfo`]
//! (what one read of it taught: size, type, hashes; no payload, kept per
//! resourceVersion so that deciding needs no read) and [`Source`] (the
//! payload itself, only while its copies are being written).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use flotilla_shared::intern;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::crd::SourceKind;

mod observed;
pub use observed::{Observed, Owner, Payload, ReadPayload, Strays, foreign_payload, stray_fields};

/// Ownership label: its value names the rule (see [`RuleId::label_value`]).
pub const RULE_LABEL: &str = "flotilla.dev/copy-rule";
/// The rule's `namespace/name`, in full.
pub const RULE_ANNOTATION: &str = "flotilla.dev/copy-rule";
/// The source's `namespace/name`.
pub const SOURCE_ANNOTATION: &str = "flotilla.dev/source";
/// The owning rule's UID.
pub const RULE_UID_ANNOTATION: &str = "flotilla.dev/copy-rule-uid";
/// `sha256:<hex>` of the content, labels and annotations the copy was written with.
pub const HASH_ANNOTATION: &str = "flotilla.dev/content-hash";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "flotilla-config-copier";
/// Selects every copy config-copier made (for its label-selected watches).
/// Only the ownership label: a copy whose `app.kubernetes.io/managed-by` is
/// rewritten by hand stays in the watch and is repaired.
pub const COPIES_SELECTOR: &str = "flotilla.dev/copy-rule";
/// Added to every source selector: a copy is never a source.
pub const NOT_A_COPY: &str = "!flotilla.dev/copy-rule";
/// Secrets of this type are never copied (the token controller owns them).
pub const SA_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
/// Field manager names are compared against this when reading managedFields.
const PAYLOAD_FIELDS: [&str; 4] = ["f:data", "f:binaryData", "f:type", "f:immutable"];

/// Labels, beyond the built-in tracking ones, that are never copied
/// (`--strip-labels`): exact keys, or prefixes ending in `/` or `*`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StripLabels(pub Vec<String>);

impl StripLabels {
    fn strips(&self, key: &str) -> bool {
        self.0.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => key.starts_with(prefix),
            None if p.ends_with('/') => key.starts_with(p.as_str()),
            None => key == p,
        })
    }
}

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

/// Labels to copy: no tracking ones, not Helm's `owner=helm` (Helm finds its
/// release objects by it), none of `strip`.
fn copied_labels(m: &BTreeMap<String, String>, strip: &StripLabels) -> BTreeMap<String, String> {
    m.iter()
        .filter(|(k, v)| {
            let helm_owner = k.as_str() == "owner" && v.as_str() == "helm";
            !(is_tracking_key(k) || helm_owner || strip.strips(k))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The hash of payload, labels and annotations: the copy's hash annotation.
fn full_hash(content_hash: &str, labels: &BTreeMap<String, String>, annotations: &BTreeMap<String, String>) -> String {
    let full = json!({"content": content_hash, "labels": labels, "annotations": annotations});
    format!("sha256:{}", hex::encode(Sha256::digest(full.to_string().as_bytes())))
}

/// A CopyRule as its copies name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleRef {
    pub id: RuleId,
    pub uid: String,
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

/// Where a copy lives. Shared strings (issue 28): a copy's name is its
/// source's in every namespace, and a namespace holds the copies of many
/// sources; a key kept beside the copy watch's ([`CopyKey::interned`])
/// costs no allocation of its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CopyKey {
    pub kind: SourceKind,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl CopyKey {
    /// A key whose strings are the process's shared ones
    /// ([`intern::names`]): for keys kept beyond one reconcile.
    pub fn interned(kind: SourceKind, namespace: &str, name: &str) -> Self {
        let names = intern::names();
        Self { kind, namespace: names.get(namespace), name: names.get(name) }
    }
}

/// A resourceVersion as kept for each copy (issue 28): opaque text per
/// the API conventions, held as a number when it is a plain decimal (what
/// the API server writes), so that it costs no allocation. Only equal
/// texts are equal: a number is kept only for the one text that prints as
/// it (no sign, no leading zero), and it reads back as that text. 16
/// bytes: any other text is boxed twice (a thin pointer), being rare.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum ResourceVersion {
    Decimal(u64),
    /// Anything else, as written.
    #[allow(clippy::redundant_allocation, reason = "a thin pointer keeps the enum at 16 bytes")]
    Text(Box<Box<str>>),
}

impl ResourceVersion {
    pub fn parse(s: &str) -> Self {
        let canonical = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
        match s.parse::<u64>() {
            Ok(n) if canonical => Self::Decimal(n),
            _ => Self::Text(Box::new(s.into())),
        }
    }
}

impl From<&str> for ResourceVersion {
    fn from(s: &str) -> Self {
        Self::parse(s)
    }
}

impl From<String> for ResourceVersion {
    fn from(s: String) -> Self {
        Self::parse(&s)
    }
}

impl fmt::Display for ResourceVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Decimal(n) => write!(f, "{n}"),
            Self::Text(s) => f.write_str(s),
        }
    }
}

impl fmt::Debug for ResourceVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
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

    /// From an object's JSON, taking the payload out of it rather than
    /// copying it (a 1 MiB source is not held twice while parsed).
    pub fn take_from_json(kind: SourceKind, obj: &mut Value) -> Self {
        let mut take = |field: &str| -> BTreeMap<String, String> {
            match obj.get_mut(field).map(Value::take) {
                Some(Value::Object(m)) => m
                    .into_iter()
                    .filter_map(|(k, v)| match v {
                        Value::String(s) => Some((k, s)),
                        _ => None,
                    })
                    .collect(),
                _ => BTreeMap::new(),
            }
        };
        let data = take("data");
        let binary_data = if kind == SourceKind::ConfigMap { take("binaryData") } else { BTreeMap::new() };
        let type_ =
            if kind == SourceKind::Secret { obj.get("type").and_then(Value::as_str).map(str::to_string) } else { None };
        Self { data, binary_data, type_ }
    }

    /// `sha256:<hex>` of the payload alone (compared against what a copy
    /// actually holds, to repair hand edits).
    pub fn hash(&self) -> String {
        let canonical = json!({"data": self.data, "binaryData": self.binary_data, "type": self.type_});
        format!("sha256:{}", hex::encode(Sha256::digest(canonical.to_string().as_bytes())))
    }
}

/// A source object as its metadata-only watch holds it: which version of
/// which object. Neither its payload nor its labels and annotations (whose
/// size the author chooses) are held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceMeta {
    pub name: String,
    pub resource_version: Option<String>,
}

/// What one read of a source taught, kept so that deciding whether its
/// copies are in sync needs no read: a few short strings and numbers, valid
/// for one resourceVersion (an object's content never changes without its
/// resourceVersion changing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceInfo {
    pub kind: SourceKind,
    pub namespace: String,
    pub name: String,
    pub resource_version: Option<String>,
    /// Bytes a copy carries (see [`Source::size`]).
    pub size: u64,
    /// The Secret's type (None for ConfigMaps).
    pub type_: Option<String>,
    /// Hash of payload, labels and annotations: the copy's annotation.
    pub hash: String,
    /// Hash of the payload.
    pub content_hash: String,
    /// `Kind/name` of the controller, if any.
    pub controller: Option<String>,
    /// A Helm release record.
    pub helm_release: bool,
}

/// A source object with its payload, reduced to what copies need. Held
/// only while its copies are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub kind: SourceKind,
    pub namespace: String,
    pub name: String,
    /// The version read (None for sources built in tests).
    pub resource_version: Option<String>,
    /// Labels and annotations to copy (tracking ones already removed).
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub content: Content,
    /// Hash of the payload.
    pub content_hash: String,
    /// Hash of payload, labels and annotations: the copy's annotation.
    pub hash: String,
    /// `Kind/name` of the controller (ownerReference with `controller: true`), if any.
    pub controller: Option<String>,
    /// Labelled `owner=helm` or a `helm.sh/release.v1` Secret: a Helm release record.
    pub helm_release: bool,
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
        let helm_release =
            labels.get("owner").is_some_and(|v| v == "helm") || content.type_.as_deref() == Some("helm.sh/release.v1");
        let labels = copied_labels(labels, &StripLabels::default());
        let annotations = without_tracking(annotations);
        let content_hash = content.hash();
        let hash = full_hash(&content_hash, &labels, &annotations);
        Self {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
            resource_version: None,
            labels,
            annotations,
            content,
            content_hash,
            hash,
            controller: None,
            helm_release,
        }
    }

    /// Without the labels `strip` names (`--strip-labels`).
    pub fn stripped(mut self, strip: &StripLabels) -> Self {
        self.labels.retain(|k, _| !strip.strips(k));
        self.hash = full_hash(&self.content_hash, &self.labels, &self.annotations);
        self
    }

    /// Bytes a copy carries: `data` and `binaryData` (a Secret's base64
    /// encoded, as on the wire and as held), labels and annotations copied.
    pub fn size(&self) -> u64 {
        let m = |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum::<u64>();
        m(&self.content.data) + m(&self.content.binary_data) + m(&self.labels) + m(&self.annotations)
    }

    /// What deciding needs to know of this source, without its payload.
    pub fn info(&self) -> SourceInfo {
        SourceInfo {
            kind: self.kind,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            resource_version: self.resource_version.clone(),
            size: self.size(),
            type_: self.content.type_.clone(),
            hash: self.hash.clone(),
            content_hash: self.content_hash.clone(),
            controller: self.controller.clone(),
            helm_release: self.helm_release,
        }
    }

    /// Parses a ConfigMap or Secret as returned by the API; `None` for
    /// objects that are never sources (copies).
    pub fn from_json(kind: SourceKind, obj: &Value) -> Option<Self> {
        Self::from_json_strip(kind, obj, &StripLabels::default())
    }

    pub fn from_json_strip(kind: SourceKind, obj: &Value, strip: &StripLabels) -> Option<Self> {
        let content = Content::from_json(kind, obj);
        Self::from_parts(kind, obj, content, strip)
    }

    /// [`Source::from_json_strip`], taking the payload out of `obj`.
    pub fn from_json_owned(kind: SourceKind, mut obj: Value, strip: &StripLabels) -> Option<Self> {
        let content = Content::take_from_json(kind, &mut obj);
        Self::from_parts(kind, &obj, content, strip)
    }

    fn from_parts(kind: SourceKind, obj: &Value, content: Content, strip: &StripLabels) -> Option<Self> {
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
        let mut source = Self::new(kind, namespace, name, &labels, &strings("annotations"), content).stripped(strip);
        source.resource_version = meta.get("resourceVersion").and_then(Value::as_str).map(str::to_string);
        source.controller = meta.get("ownerReferences").and_then(Value::as_array).and_then(|refs| {
            refs.iter().find(|r| r.get("controller").and_then(Value::as_bool) == Some(true)).map(|r| {
                let s = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("?");
                format!("{}/{}", s("kind"), s("name"))
            })
        });
        Some(source)
    }

    /// The copy of this source named `name` in `namespace` for `rule`, as
    /// a server-side apply body: exactly the fields config-copier owns.
    /// `name` is the plan's (the source's, or as `spec.target` names it);
    /// the source annotation names the source either way.
    pub fn copy_manifest(&self, rule: &RuleRef, namespace: &str, name: &str) -> Value {
        self.manifest(rule, namespace, name, true)
    }

    /// The copy's manifest with empty payload values: its marks and key
    /// names, without carrying the payload around.
    pub fn copy_manifest_marks(&self, rule: &RuleRef, namespace: &str, name: &str) -> Value {
        self.manifest(rule, namespace, name, false)
    }

    fn manifest(&self, rule: &RuleRef, namespace: &str, name: &str, values: bool) -> Value {
        let payload = |m: &BTreeMap<String, String>| -> Value {
            if values { json!(m) } else { Value::Object(m.keys().map(|k| (k.clone(), json!(""))).collect()) }
        };
        let mut labels = self.labels.clone();
        labels.insert(RULE_LABEL.to_string(), rule.id.label_value());
        labels.insert(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string());
        let mut annotations = self.annotations.clone();
        annotations.insert(RULE_ANNOTATION.to_string(), rule.id.to_string());
        annotations.insert(RULE_UID_ANNOTATION.to_string(), rule.uid.clone());
        annotations.insert(SOURCE_ANNOTATION.to_string(), format!("{}/{}", self.namespace, self.name));
        annotations.insert(HASH_ANNOTATION.to_string(), self.hash.clone());
        let mut obj = json!({
            "apiVersion": "v1",
            "kind": self.kind.as_str(),
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        });
        if !self.content.data.is_empty() {
            obj["data"] = payload(&self.content.data);
        }
        if !self.content.binary_data.is_empty() {
            obj["binaryData"] = payload(&self.content.binary_data);
        }
        if let Some(t) = &self.content.type_ {
            obj["type"] = json!(t);
        }
        obj
    }
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
        let obj = src.copy_manifest(&rref("default", "main-rule"), "team-a", "cfg");
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

    fn rref(ns: &str, name: &str) -> RuleRef {
        RuleRef { id: RuleId::new(ns, name), uid: format!("uid-{name}") }
    }

    #[test]
    fn a_renamed_copy_has_the_plans_name_and_names_its_source() {
        let src = Source::new(
            SourceKind::ConfigMap,
            "team-a",
            "ca-crt",
            &BTreeMap::new(),
            &BTreeMap::new(),
            Content { data: m(&[("ca.crt", "pem")]), ..Default::default() },
        );
        let rule = rref("team-a", "r");
        for obj in
            [src.copy_manifest(&rule, "apps", "team-a-ca-crt"), src.copy_manifest_marks(&rule, "apps", "team-a-ca-crt")]
        {
            assert_eq!(obj["metadata"]["name"], "team-a-ca-crt");
            assert_eq!(obj["metadata"]["annotations"][SOURCE_ANNOTATION], "team-a/ca-crt");
            assert_eq!(obj["metadata"]["labels"][RULE_LABEL], "team-a.r");
        }
        // The name is no part of the content hash: a rename alone rewrites nothing but the name.
        let read =
            Observed::from_json(SourceKind::ConfigMap, &src.copy_manifest(&rule, "apps", "x"), true, "me").unwrap();
        assert_eq!(read.annotated_hash.as_deref(), Some(src.hash.as_str()));
        assert_eq!(&*read.key.name, "x");
    }

    #[test]
    fn a_written_copy_reads_back_with_its_marks_and_drift_is_seen() {
        let src = Source::new(
            SourceKind::Secret,
            "default",
            "s",
            &m(&[("a", "b")]),
            &BTreeMap::new(),
            Content { data: m(&[("k", "dg==")]), type_: Some("Opaque".into()), ..Default::default() },
        );
        let rule = rref("default", "r");
        let mut obj = src.copy_manifest(&rule, "x", "s");
        let read = Observed::from_json(SourceKind::Secret, &obj, true, "me").unwrap();
        let owner = read.owner.clone().unwrap();
        assert_eq!(owner.label.as_deref(), Some("default.r"));
        assert_eq!(owner.uid.as_deref(), Some("uid-r"));
        assert_eq!(owner.rule(), Some(rule.id.clone()));
        assert!(read.managed_by_ours);
        assert_eq!(read.annotated_hash.as_deref(), Some(src.hash.as_str()));
        assert_eq!(read.payload, Payload::read(&src.content_hash, Some("Opaque")));
        obj["data"]["k"] = json!("ZWRpdGVk");
        let edited = Observed::from_json(SourceKind::Secret, &obj, true, "me").unwrap();
        assert_ne!(edited.payload, read.payload);
        // Metadata only: managedFields tell whether someone else owns payload fields.
        obj["metadata"]["managedFields"] =
            json!([{"manager": "me", "operation": "Apply", "fieldsV1": {"f:data": {"f:k": {}}}}]);
        assert_eq!(Observed::from_json(SourceKind::Secret, &obj, false, "me").unwrap().payload, Payload::Trusted);
        let ours = obj["metadata"]["managedFields"][0].clone();
        obj["metadata"]["managedFields"] =
            json!([ours, {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:data": {"f:k": {}}}}]);
        assert_eq!(Observed::from_json(SourceKind::Secret, &obj, false, "me").unwrap().payload, Payload::Edited);
        obj["metadata"]["managedFields"][1] = json!({"manager": "kubectl-label", "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": {"f:x": {}}}}});
        assert_eq!(Observed::from_json(SourceKind::Secret, &obj, false, "me").unwrap().payload, Payload::Trusted);
        // The label edited away: still known by the annotations.
        obj["metadata"]["labels"] = json!({});
        let unlabelled = Observed::from_json(SourceKind::Secret, &obj, false, "me").unwrap();
        assert_eq!(unlabelled.owner.unwrap().label_value().as_deref(), Some("default.r"));
        assert!(!unlabelled.managed_by_ours);
    }

    #[test]
    fn copies_are_never_sources_and_tokens_are_left_to_the_policy() {
        let copy = json!({"metadata": {"namespace": "a", "name": "x", "labels": {RULE_LABEL: "b.r"}}});
        assert!(Source::from_json(SourceKind::ConfigMap, &copy).is_none());
        let token = json!({"metadata": {"namespace": "a", "name": "t"}, "type": SA_TOKEN_TYPE});
        // Parsed (so that status can say why it is skipped); plan::admit_source refuses it.
        assert_eq!(
            Source::from_json(SourceKind::Secret, &token).unwrap().content.type_.as_deref(),
            Some(SA_TOKEN_TYPE)
        );
        let ok = json!({"metadata": {"namespace": "a", "name": "t"}, "type": "Opaque", "data": {"k": "dg=="}});
        assert_eq!(Source::from_json(SourceKind::Secret, &ok).unwrap().content.type_.as_deref(), Some("Opaque"));
    }

    #[test]
    fn a_source_read_by_taking_its_payload_is_the_same_and_its_info_has_no_payload() {
        let obj = json!({
            "metadata": {"namespace": "a", "name": "s", "resourceVersion": "42",
                         "labels": {"team": "x", "example.com/tool": "t"}, "annotations": {"note": "n"}},
            "type": "Opaque",
            "data": {"k": "dg==", "other": "b3RoZXI="}
        });
        let strip = StripLabels(vec!["example.com/".into()]);
        let copied = Source::from_json_strip(SourceKind::Secret, &obj, &strip).unwrap();
        let taken = Source::from_json_owned(SourceKind::Secret, obj, &strip).unwrap();
        assert_eq!(copied, taken);
        assert_eq!(taken.resource_version.as_deref(), Some("42"));
        // data (as held: base64), plus the labels and annotations copied.
        assert_eq!(taken.size(), (1 + 4 + 5 + 8) + (4 + 1) + (4 + 1));
        let info = taken.info();
        assert_eq!(
            (info.size, info.type_.as_deref(), info.resource_version.as_deref()),
            (taken.size(), Some("Opaque"), Some("42"))
        );
        assert_eq!((info.hash, info.content_hash), (taken.hash.clone(), taken.content_hash.clone()));
    }

    #[test]
    fn a_resource_version_reads_back_exactly_and_equals_only_its_own_text() {
        for s in
            ["0", "7", "48213377", "18446744073709551615", "18446744073709551616", "007", "0x1", "+1", "", "-1", "é"]
        {
            assert_eq!(ResourceVersion::parse(s).to_string(), s);
        }
        assert!(matches!(ResourceVersion::parse("48213377"), ResourceVersion::Decimal(48_213_377)));
        assert_ne!(ResourceVersion::parse("7"), ResourceVersion::parse("07"));
        assert_ne!(ResourceVersion::parse("7"), ResourceVersion::parse("+7"));
        assert_eq!(size_of::<Option<ResourceVersion>>(), 16);
        assert_eq!(ResourceVersion::parse("7"), ResourceVersion::from("7".to_string()));
    }

    proptest::proptest! {
        #[test]
        fn resource_versions_are_equal_exactly_when_their_texts_are(a in "[0-9]{0,22}|\\PC{0,8}", b in "[0-9]{0,22}|\\PC{0,8}") {
            let (ra, rb) = (ResourceVersion::parse(&a), ResourceVersion::parse(&b));
            proptest::prop_assert_eq!(ra.to_string(), a.clone());
            proptest::prop_assert_eq!(ra == rb, a == b);
            proptest::prop_assert_eq!(ra.clone(), ResourceVersion::parse(&a));
        }
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
    fn strays_are_our_own_leftovers_and_with_repair_keys_added_by_hand() {
        let src = Source::new(
            SourceKind::ConfigMap,
            "d",
            "n",
            &m(&[("keep", "1")]),
            &BTreeMap::new(),
            Content { data: m(&[("k", "v")]), ..Default::default() },
        );
        let desired = src.copy_manifest_marks(&rref("d", "r"), "x", "n");
        assert_eq!(desired["data"]["k"], "", "marks carry key names, not the payload");
        let obj = json!({
            "metadata": {
                "labels": {"keep": "1", "gone": "1", "theirs": "1"},
                "annotations": {"old-note": "x"},
                "managedFields": [
                    {"manager": "flotilla-config-copier", "operation": "Update", "fieldsV1": {
                        "f:metadata": {"f:labels": {"f:keep": {}, "f:gone": {}}, "f:annotations": {"f:old-note": {}}},
                        "f:data": {"f:k": {}, "f:old": {}}}},
                    {"manager": "flotilla-config-copier", "operation": "Apply", "fieldsV1": {"f:metadata": {
                        "f:labels": {"f:applied": {}}}}},
                    {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {
                        "f:metadata": {"f:labels": {"f:theirs": {}}}, "f:data": {"f:extra": {}, "f:k": {}}}}
                ]
            }
        });
        let s = stray_fields(&obj, "flotilla-config-copier", &desired, false);
        assert_eq!(
            (s.labels, s.annotations, s.data),
            (vec!["gone".to_string()], vec!["old-note".to_string()], vec!["old".to_string()])
        );
        let s = stray_fields(&obj, "flotilla-config-copier", &desired, true);
        assert_eq!(s.data, ["old", "extra"]);
    }
}
