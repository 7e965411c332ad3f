//! A CopyRequest's copy: its ownership marks and manifest, and what a copy
//! read from the API says about it. Pure.
//!
//! A request's copy carries the source's payload, labels and annotations
//! (minus tracking ones, as a CopyRule's copy: [`Source`]), plus label
//! `flotilla.dev/copy-request` (the request, as [`RuleId::label_value`]
//! spells it), `app.kubernetes.io/managed-by`, annotations
//! `flotilla.dev/copy-request` (`namespace/name`),
//! `flotilla.dev/copy-request-uid`, `flotilla.dev/source` and
//! `flotilla.dev/content-hash`, and an ownerReference to the request (its
//! changes wake the request). Not the CopyRule label: a CopyRule never
//! takes a request's copy for its own, and the reverse.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::plan::TargetSeen;
use crate::copy::{Content, HASH_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL, RuleRef, SOURCE_ANNOTATION, Source};

/// Ownership label of a request's copy; also what the operator's watch of
/// request copies selects.
pub const REQUEST_LABEL: &str = "flotilla.dev/copy-request";
/// The request's `namespace/name`.
pub const REQUEST_ANNOTATION: &str = "flotilla.dev/copy-request";
/// The request's UID.
pub const REQUEST_UID_ANNOTATION: &str = "flotilla.dev/copy-request-uid";

fn strings(obj: &Value, field: &str) -> BTreeMap<String, String> {
    obj.pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string()))).collect())
        .unwrap_or_default()
}

/// An annotation of an object read from the API.
pub fn annotation(obj: &Value, key: &str) -> Option<String> {
    strings(obj, "annotations").remove(key)
}

/// The copy of `source` named `name` in the request's namespace, as the
/// request `me` (its marks and an ownerReference to it) owns it.
pub fn manifest(source: &Source, me: &RuleRef, name: &str) -> Value {
    let mut labels = source.labels.clone();
    labels.insert(REQUEST_LABEL.to_string(), me.id.label_value());
    labels.insert(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string());
    let mut annotations = source.annotations.clone();
    annotations.insert(REQUEST_ANNOTATION.to_string(), me.id.to_string());
    annotations.insert(REQUEST_UID_ANNOTATION.to_string(), me.uid.clone());
    annotations.insert(SOURCE_ANNOTATION.to_string(), format!("{}/{}", source.namespace, source.name));
    annotations.insert(HASH_ANNOTATION.to_string(), source.hash.clone());
    let owner = json!({
        "apiVersion": "flotilla.dev/v1alpha1",
        "kind": "CopyRequest",
        "name": me.id.name,
        "uid": me.uid,
        "controller": true,
    });
    let mut obj = json!({
        "apiVersion": "v1",
        "kind": source.kind.as_str(),
        "metadata": {
            "name": name,
            "namespace": me.id.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner],
        },
    });
    if !source.content.data.is_empty() {
        obj["data"] = json!(source.content.data);
    }
    if !source.content.binary_data.is_empty() {
        obj["binaryData"] = json!(source.content.binary_data);
    }
    if let Some(t) = &source.content.type_ {
        obj["type"] = json!(t);
    }
    obj
}

/// Whether `obj` carries the marks of `me`: its label (the request's
/// namespace and name; a deleted predecessor of the same name is the same
/// author's, in the same namespace). Anything else is not ours.
pub fn is_mine(obj: &Value, me: &RuleRef) -> bool {
    strings(obj, "labels").get(REQUEST_LABEL) == Some(&me.id.label_value())
}

/// What is at the copy's place: `obj` as read (None: nothing), for `me`,
/// compared with `source` when there is one.
pub fn observe(obj: Option<&Value>, me: &RuleRef, source: Option<&Source>) -> TargetSeen {
    let Some(obj) = obj else { return TargetSeen::Absent };
    if !is_mine(obj, me) {
        return TargetSeen::NotOurs;
    }
    let kind = source.map_or(crate::crd::SourceKind::ConfigMap, |s| s.kind);
    let content = Content::from_json(kind, obj);
    let in_sync = source.is_some_and(|s| {
        let annotations = strings(obj, "annotations");
        let labels = strings(obj, "labels");
        annotations.get(HASH_ANNOTATION) == Some(&s.hash)
            && annotations.get(REQUEST_UID_ANNOTATION) == Some(&me.uid)
            && labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
            && content.hash() == s.content_hash
    });
    TargetSeen::Mine {
        in_sync,
        type_: obj.get("type").and_then(Value::as_str).map(str::to_string),
        uid: obj.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_string),
        resource_version: obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_string),
    }
}

/// A JSON merge patch turning `current` (ours, at `resource_version`: the
/// patch fails with 409 if it changed since) into `desired` exactly: every
/// label, annotation and payload key not desired is removed.
pub fn merge_patch(current: &Value, desired: &Value, resource_version: Option<&str>) -> Value {
    let mut patch = desired.clone();
    patch["metadata"]["resourceVersion"] = json!(resource_version);
    for (path, field) in [("/metadata", "labels"), ("/metadata", "annotations"), ("", "data"), ("", "binaryData")] {
        let Some(had) = current.pointer(&format!("{path}/{field}")).and_then(Value::as_object) else { continue };
        let target = if path.is_empty() { &mut patch } else { &mut patch["metadata"] };
        let wanted = target.get(field).and_then(Value::as_object).cloned().unwrap_or_default();
        let mut merged: Map<String, Value> = wanted.clone();
        for k in had.keys().filter(|k| !wanted.contains_key(*k)) {
            merged.insert(k.clone(), Value::Null);
        }
        target[field] = Value::Object(merged);
    }
    patch
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::copy::RuleId;
    use crate::crd::SourceKind;

    fn me() -> RuleRef {
        RuleRef { id: RuleId::new("app-1", "ca"), uid: "uid-1".into() }
    }

    fn source(v: &str) -> Source {
        let m = |p: &[(&str, &str)]| p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let content = Content { data: m(&[("ca.crt", v)]), ..Default::default() };
        Source::new(
            SourceKind::ConfigMap,
            "team-a",
            "ca",
            &m(&[("team", "a")]),
            &m(&[("flotilla.dev/allow-pull-to", "app-*")]),
            content,
        )
    }

    #[test]
    fn the_copy_carries_our_marks_and_not_the_permission() {
        let obj = manifest(&source("pem"), &me(), "ca");
        assert_eq!(obj["metadata"]["labels"][REQUEST_LABEL], "app-1.ca");
        assert_eq!(obj["metadata"]["annotations"][REQUEST_UID_ANNOTATION], "uid-1");
        assert_eq!(obj["metadata"]["annotations"][SOURCE_ANNOTATION], "team-a/ca");
        assert!(obj["metadata"]["annotations"].get(super::super::ALLOW_PULL_TO).is_none(), "not offered on again");
        assert!(obj["metadata"]["labels"].get(crate::copy::RULE_LABEL).is_none(), "not a CopyRule's copy");
        assert_eq!(obj["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(obj["data"]["ca.crt"], "pem");
    }

    #[test]
    fn a_copy_is_in_sync_only_with_the_current_content() {
        let mut obj = manifest(&source("pem"), &me(), "ca");
        obj["metadata"]["resourceVersion"] = json!("5");
        assert!(matches!(observe(Some(&obj), &me(), Some(&source("pem"))), TargetSeen::Mine { in_sync: true, .. }));
        assert!(matches!(observe(Some(&obj), &me(), Some(&source("new"))), TargetSeen::Mine { in_sync: false, .. }));
        obj["data"]["extra"] = json!("by hand");
        assert!(matches!(observe(Some(&obj), &me(), Some(&source("pem"))), TargetSeen::Mine { in_sync: false, .. }));
        let other = RuleRef { id: RuleId::new("app-1", "other"), uid: "u2".into() };
        assert_eq!(observe(Some(&obj), &other, None), TargetSeen::NotOurs);
        assert_eq!(observe(Some(&json!({"metadata": {"name": "ca"}})), &me(), None), TargetSeen::NotOurs);
        assert_eq!(observe(None, &me(), None), TargetSeen::Absent);
    }

    #[test]
    fn the_patch_removes_what_is_not_desired() {
        let desired = manifest(&source("pem"), &me(), "ca");
        let mut current = desired.clone();
        current["data"]["extra"] = json!("x");
        current["metadata"]["labels"]["stray"] = json!("y");
        let patch = merge_patch(&current, &desired, Some("9"));
        assert_eq!(patch["data"]["extra"], Value::Null);
        assert_eq!(patch["data"]["ca.crt"], "pem");
        assert_eq!(patch["metadata"]["labels"]["stray"], Value::Null);
        assert_eq!(patch["metadata"]["resourceVersion"], "9");
    }
}
