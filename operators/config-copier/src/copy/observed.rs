//! What is at a copy's place, as read from its metadata (and, when read
//! in full, its payload's hash): whose marks it carries, whether someone
//! edited its payload, and which fields a write of ours left behind.
//! Pure.

use std::sync::{Arc, LazyLock};

use flotilla_shared::intern;
use flotilla_shared::uid::Uid;
use serde_json::Value;

use super::{
    Content, CopyKey, HASH_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL, PAYLOAD_FIELDS, RULE_ANNOTATION, RULE_LABEL,
    RULE_UID_ANNOTATION, ResourceVersion, RuleId,
};
use crate::crd::SourceKind;

/// What is known of a copy's payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Read in full ([`Payload::read`]): boxed, as only a copy just read
    /// holds it, while every copy the watch keeps holds a `Payload`.
    Read(Box<ReadPayload>),
    /// Metadata only, and nothing says it was edited: it holds what its hash
    /// annotation says (a version we wrote or verified, or no other field
    /// manager owns a payload field).
    Trusted,
    /// Metadata only: another field manager owns payload fields (edited by hand).
    Edited,
    /// Metadata only: changed by someone else since we last knew it, and
    /// managedFields do not say how. Read it before deciding.
    Unexplained,
}

/// A copy's payload as read in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPayload {
    /// The hash of what it holds now.
    pub content_hash: Box<str>,
    /// Its Secret type.
    pub type_: Option<Box<str>>,
}

impl Payload {
    pub fn read(content_hash: &str, type_: Option<&str>) -> Self {
        Self::Read(Box::new(ReadPayload { content_hash: content_hash.into(), type_: type_.map(Into::into) }))
    }
}

/// The longest ownership mark or hash [`Observed::from_json`] keeps.
pub const MAX_MARK_BYTES: usize = 512;

/// An object at a copy's place, as far as ownership and drift go. Built
/// from metadata (the copy watch) or from the full object (a GET). Kept
/// for every copy (issue 28): strings many copies repeat (key, marks,
/// hash) are the shared ones of [`intern::names`], the UID is 16 bytes
/// and the resourceVersion a number when it is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub key: CopyKey,
    /// The rule its ownership marks name, if any (shared: the same on
    /// every copy of a rule, [`Owner::shared`]).
    pub owner: Option<Arc<Owner>>,
    /// The hash annotation it was last written with (the same on every
    /// copy of one version of a source).
    pub annotated_hash: Option<Arc<str>>,
    /// `app.kubernetes.io/managed-by` says config-copier.
    pub managed_by_ours: bool,
    pub uid: Option<Uid>,
    pub resource_version: Option<ResourceVersion>,
    pub payload: Payload,
}

/// Who an object's ownership marks name. A copy is known as ours by the
/// label or, when a hand edit removed it, by the annotations. The same
/// marks on every copy of a rule: shared strings, and kept shared as a
/// whole ([`Owner::shared`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    /// The `flotilla.dev/copy-rule` label value.
    pub label: Option<Arc<str>>,
    /// The rule's `namespace/name` from the annotation, only when it
    /// parses as one ([`Owner::rule`]).
    rule: Option<Arc<str>>,
    /// The rule's UID from the annotation.
    pub uid: Option<Arc<str>>,
}

impl Owner {
    /// Marks naming `rule` (by the annotation, as [`Observed::from_json`]
    /// keeps it: only what parses back), with `label` and `uid`.
    pub fn new(label: Option<&str>, rule: Option<&RuleId>, uid: Option<&str>) -> Self {
        let names = intern::names();
        Self {
            label: label.map(|l| names.get(l)),
            rule: rule.map(ToString::to_string).filter(|a| RuleId::parse(a).is_some()).map(|a| names.get(&a)),
            uid: uid.map(|u| names.get(u)),
        }
    }

    /// These marks, shared with every copy that carries the same (the
    /// process's set of marks, bounded as [`intern::names`] is).
    pub fn shared(self) -> Arc<Self> {
        static OWNERS: LazyLock<intern::Interner<Owner>> = LazyLock::new(Default::default);
        OWNERS.share(self)
    }

    /// The rule from the annotation, when present and parseable.
    pub fn rule(&self) -> Option<RuleId> {
        self.rule.as_deref().and_then(RuleId::parse)
    }

    /// The rule from the annotation as `namespace/name` (as [`RuleId`] prints).
    pub fn rule_name(&self) -> Option<&str> {
        self.rule.as_deref()
    }

    /// The ownership label value these marks stand for.
    pub fn label_value(&self) -> Option<String> {
        self.label.as_deref().map(str::to_string).or_else(|| self.rule().map(|r| r.label_value()))
    }
}

impl Observed {
    /// From an object's JSON: `full` when it carries its payload (a GET),
    /// else metadata only, where managedFields tell whether another field
    /// manager than `field_manager` owns payload fields.
    pub fn from_json(kind: SourceKind, obj: &Value, full: bool, field_manager: &str) -> Option<Self> {
        let meta = obj.get("metadata")?;
        let names = intern::names();
        // No mark the operator writes is longer (a rule's `namespace/name`
        // at most 317 bytes, a hash 71); a longer one is someone else's,
        // read as absent, so that an object's author cannot make its
        // Observed hold 256 KiB of annotations.
        let s = |section: &str, key: &str| {
            meta.get(section).and_then(|m| m.get(key)).and_then(Value::as_str).filter(|v| v.len() <= MAX_MARK_BYTES)
        };
        let shared = |section: &str, key: &str| s(section, key).map(|v| names.get(v));
        let (label, rule, uid) = (
            shared("labels", RULE_LABEL),
            // Kept as text only when it names a rule (what `Owner::rule` parses).
            s("annotations", RULE_ANNOTATION).filter(|a| RuleId::parse(a).is_some()).map(|a| names.get(a)),
            shared("annotations", RULE_UID_ANNOTATION),
        );
        let owner = (label.is_some() || uid.is_some()).then(|| Owner { label, rule, uid }.shared());
        let payload = if full {
            let content = Content::from_json(kind, obj);
            Payload::read(&content.hash(), content.type_.as_deref())
        } else if foreign_payload(obj, field_manager) {
            Payload::Edited
        } else {
            Payload::Trusted
        };
        Some(Self {
            key: CopyKey::interned(kind, meta.get("namespace")?.as_str()?, meta.get("name")?.as_str()?),
            owner,
            annotated_hash: shared("annotations", HASH_ANNOTATION),
            managed_by_ours: s("labels", MANAGED_BY_LABEL) == Some(MANAGED_BY),
            uid: meta.get("uid").and_then(Value::as_str).map(Uid::parse),
            resource_version: meta.get("resourceVersion").and_then(Value::as_str).map(ResourceVersion::parse),
            payload,
        })
    }
}

/// Whether a field manager other than `ours` owns a payload field (`data`,
/// `binaryData`, `type`, `immutable`): the trace a hand edit leaves.
pub fn foreign_payload(obj: &Value, ours: &str) -> bool {
    let entries = obj.pointer("/metadata/managedFields").and_then(Value::as_array);
    entries.into_iter().flatten().any(|e| {
        e.get("manager").and_then(Value::as_str) != Some(ours)
            && e.pointer("/fieldsV1")
                .and_then(Value::as_object)
                .is_some_and(|f| PAYLOAD_FIELDS.iter().any(|p| f.contains_key(*p)))
    })
}

/// Fields to remove after a write, found in managedFields (so a
/// metadata-only response is enough).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Strays {
    pub labels: Vec<String>,
    pub annotations: Vec<String>,
    /// `data` and `binaryData` keys.
    pub data: Vec<String>,
    pub binary_data: Vec<String>,
}

impl Strays {
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty() && self.data.is_empty() && self.binary_data.is_empty()
    }
}

/// What to remove from a copy after a write of `desired` (an apply body):
/// labels, annotations and payload keys that `field_manager` set with a
/// plain create or update (not apply) and that `desired` no longer has;
/// with `repair`, also payload keys another manager added by hand. Labels
/// and annotations of other managers are never listed (coexistence).
pub fn stray_fields(obj: &Value, field_manager: &str, desired: &Value, repair: bool) -> Strays {
    let mut out = Strays::default();
    let entries = obj.pointer("/metadata/managedFields").and_then(Value::as_array).cloned().unwrap_or_default();
    let keys = |entry: &Value, path: &str| -> Vec<String> {
        entry
            .pointer(path)
            .and_then(Value::as_object)
            .map(|m| m.keys().filter_map(|k| k.strip_prefix("f:")).map(str::to_string).collect())
            .unwrap_or_default()
    };
    let push = |out: &mut Vec<String>, key: String| {
        if !out.contains(&key) {
            out.push(key);
        }
    };
    for entry in entries {
        let ours = entry.get("manager").and_then(Value::as_str) == Some(field_manager);
        let update = entry.get("operation").and_then(Value::as_str) == Some("Update");
        if ours && update {
            for (section, out) in [("labels", &mut out.labels), ("annotations", &mut out.annotations)] {
                let want = desired.pointer(&format!("/metadata/{section}")).and_then(Value::as_object);
                let present = obj.pointer(&format!("/metadata/{section}")).and_then(Value::as_object);
                for key in keys(&entry, &format!("/fieldsV1/f:metadata/f:{section}")) {
                    let wanted = want.is_some_and(|w| w.contains_key(&key));
                    let there = present.is_some_and(|p| p.contains_key(&key));
                    if !wanted && there {
                        push(out, key);
                    }
                }
            }
        }
        if (ours && update) || (!ours && repair) {
            for (field, out) in [("data", &mut out.data), ("binaryData", &mut out.binary_data)] {
                let want = desired.get(field).and_then(Value::as_object);
                for key in keys(&entry, &format!("/fieldsV1/f:{field}")) {
                    if !want.is_some_and(|w| w.contains_key(&key)) {
                        push(out, key);
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    /// A tenant's object with the rule's label (anyone may set it) and
    /// 250 KB in each mark: what it is seen as holds none of them.
    #[test]
    fn marks_longer_than_any_the_operator_writes_are_read_as_absent() {
        let big = "x".repeat(250_000);
        let obj = json!({"metadata": {
            "namespace": "tenant", "name": "cfg", "uid": "0b4c3f4e-8a43-4c43-9d7e-4a6c2d3b1f00",
            "labels": {RULE_LABEL: "abc"},
            "annotations": {HASH_ANNOTATION: big, RULE_ANNOTATION: big, RULE_UID_ANNOTATION: big},
        }});
        let o = Observed::from_json(SourceKind::ConfigMap, &obj, false, "me").unwrap();
        assert_eq!(o.annotated_hash, None);
        let owner = o.owner.unwrap();
        assert_eq!((owner.label.as_deref(), owner.rule_name(), owner.uid.as_deref()), (Some("abc"), None, None));
        // The operator's own marks are kept, the longest rule name too (a
        // 63-byte namespace and a 253-byte name).
        let hash = format!("sha256:{}", "a".repeat(64));
        let rule = format!("{}/{}", "n".repeat(63), "r".repeat(253));
        let obj = json!({"metadata": {"namespace": "t", "name": "c", "labels": {RULE_LABEL: "abc"},
            "annotations": {HASH_ANNOTATION: hash, RULE_ANNOTATION: rule}}});
        let o = Observed::from_json(SourceKind::ConfigMap, &obj, false, "me").unwrap();
        assert_eq!(o.annotated_hash.as_deref(), Some(hash.as_str()));
        assert_eq!(o.owner.unwrap().rule_name(), Some(rule.as_str()));
    }
}
