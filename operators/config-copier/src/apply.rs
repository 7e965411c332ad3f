//! Writing copies. The only place that changes ConfigMaps and Secrets, and
//! it proves ownership before every write:
//!
//! * a new copy is created with a plain create (POST), which fails instead of
//!   overwriting when an object of that name appeared meanwhile;
//! * an existing copy is updated with server-side apply (field manager
//!   `flotilla-config-copier`, forced over fields another manager took by a
//!   hand edit) carrying the `resourceVersion` at which it was seen carrying
//!   this rule's ownership label, so an object changed since is not written;
//! * a copy is deleted with a `uid` and `resourceVersion` precondition;
//! * an object without this rule's label is only written with
//!   `onConflict: Overwrite` (adoption), never when another existing rule
//!   owns it.

use std::collections::BTreeMap;

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Value, json};

use crate::cache::{Caches, api_resource};
use crate::copy::{CopyKey, Existing, RuleId, Source, stale_marks};
use crate::crd::{ConflictEntry, OnConflict};

/// What happened to one copy.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    InSync,
    Created,
    Updated,
    Adopted(CopyKey),
    Deleted,
    Conflict(ConflictEntry),
    Failed { key: CopyKey, action: &'static str, error: String },
}

/// Writes copies for one rule.
pub struct Writer<'a> {
    pub client: &'a Client,
    pub field_manager: &'a str,
    pub caches: &'a Caches,
    pub rule: &'a RuleId,
    pub on_conflict: OnConflict,
}

impl<'a> Writer<'a> {
    /// The writer for one rule's reconcile.
    pub fn new(
        ctx: &'a flotilla_shared::Context,
        caches: &'a Caches,
        rule: &'a RuleId,
        on_conflict: OnConflict,
    ) -> Self {
        Self { client: &ctx.client, field_manager: &ctx.field_manager, caches, rule, on_conflict }
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

impl Writer<'_> {
    fn api(&self, key: &CopyKey) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &key.namespace, &api_resource(key.kind))
    }

    fn count(&self, action: &'static str, ok: bool) {
        let result = if ok { "success" } else { "error" };
        self.caches.metrics().operations.with_label_values(&[action, result]).inc();
    }

    fn failed(&self, key: &CopyKey, action: &'static str, e: impl std::fmt::Display) -> Outcome {
        self.count(action, false);
        Outcome::Failed { key: key.clone(), action, error: e.to_string() }
    }

    /// A wanted copy that the cache does not show as this rule's: create it;
    /// if something is already there, look at it before anything else.
    pub async fn ensure_missing(&self, key: &CopyKey, source: &Source) -> Outcome {
        for _ in 0..2 {
            match self.create(key, source).await {
                Ok(()) => return Outcome::Created,
                Err(e) if is_status(&e, 409) => {}
                Err(e) => return self.failed(key, "create", e),
            }
            self.caches.metrics().request("get");
            match self.api(key).get_opt(&key.name).await {
                Err(e) => return self.failed(key, "create", e),
                // Gone between our create and our look: try again.
                Ok(None) => continue,
                Ok(Some(obj)) => return self.existing(key, source, &obj).await,
            }
        }
        self.failed(key, "create", "the object kept appearing and disappearing")
    }

    async fn existing(&self, key: &CopyKey, source: &Source, obj: &DynamicObject) -> Outcome {
        let Some(e) = serde_json::to_value(obj).ok().and_then(|v| Existing::from_json(key.kind, &v)) else {
            return self.failed(key, "update", "unreadable object");
        };
        if e.owned_by(self.rule) {
            if e.in_sync_with(source) {
                self.caches.record_copy(e);
                return Outcome::InSync;
            }
            return self.update(key, source, &e).await;
        }
        let conflict = |reason: &str, message: String| {
            self.caches.metrics().operations.with_label_values(&["create", "conflict"]).inc();
            Outcome::Conflict(ConflictEntry {
                namespace: key.namespace.clone(),
                name: key.name.clone(),
                reason: reason.to_string(),
                message,
            })
        };
        match &e.owner {
            Some(o) if self.caches.rule_exists(&o.label) => {
                let who = o.rule.as_ref().map(ToString::to_string).unwrap_or_else(|| o.label.clone());
                conflict("OwnedByAnotherRule", format!("copied by CopyRule {who}"))
            }
            _ if self.on_conflict == OnConflict::Skip => {
                conflict("NotOwned", format!("{} exists and was not created by this rule (onConflict: Skip)", key))
            }
            _ => match self.apply(key, source, e.resource_version.as_deref()).await {
                Ok(()) => {
                    self.count("adopt", true);
                    Outcome::Adopted(key.clone())
                }
                Err(err) => self.failed(key, "adopt", err),
            },
        }
    }

    /// A copy of this rule that differs from its source.
    pub async fn update(&self, key: &CopyKey, source: &Source, seen: &Existing) -> Outcome {
        match self.apply(key, source, seen.resource_version.as_deref()).await {
            Ok(()) => {
                self.count("update", true);
                Outcome::Updated
            }
            // Changed since we saw it (maybe no longer ours): look again.
            Err(e) if is_status(&e, 409) => {
                self.caches.metrics().request("get");
                match self.api(key).get_opt(&key.name).await {
                    Ok(Some(obj)) => Box::pin(self.existing(key, source, &obj)).await,
                    Ok(None) => match self.create(key, source).await {
                        Ok(()) => Outcome::Created,
                        Err(e) => self.failed(key, "create", e),
                    },
                    Err(e) => self.failed(key, "update", e),
                }
            }
            // A Secret's type cannot change in place: replace our own copy.
            Err(e) if is_status(&e, 422) && key.kind == crate::crd::SourceKind::Secret => {
                match self.delete(seen).await {
                    Outcome::Deleted => match self.create(key, source).await {
                        Ok(()) => Outcome::Updated,
                        Err(e) => self.failed(key, "create", e),
                    },
                    _ => self.failed(key, "update", e),
                }
            }
            Err(e) => self.failed(key, "update", e),
        }
    }

    async fn create(&self, key: &CopyKey, source: &Source) -> Result<(), kube::Error> {
        let manifest = source.copy_manifest(self.rule, &key.namespace);
        let obj: DynamicObject = serde_json::from_value(manifest).map_err(kube::Error::SerdeError)?;
        self.caches.metrics().request("create");
        let pp = PostParams { dry_run: false, field_manager: Some(self.field_manager.to_string()) };
        match self.api(key).create(&pp, &obj).await {
            Ok(created) => {
                self.count("create", true);
                self.settle(key, source, &created).await
            }
            Err(e) => Err(e),
        }
    }

    /// Server-side apply of the copy, with a resourceVersion precondition.
    async fn apply(&self, key: &CopyKey, source: &Source, resource_version: Option<&str>) -> Result<(), kube::Error> {
        let mut manifest = source.copy_manifest(self.rule, &key.namespace);
        if let Some(rv) = resource_version {
            manifest["metadata"]["resourceVersion"] = json!(rv);
        }
        self.caches.metrics().request("apply");
        let pp = PatchParams::apply(self.field_manager).force();
        let applied = self.api(key).patch(&key.name, &pp, &Patch::Apply(&manifest)).await?;
        self.settle(key, source, &applied).await
    }

    /// Removes data keys that another field manager keeps on the object (a
    /// key added by hand), then records what the copy now is.
    async fn settle(&self, key: &CopyKey, source: &Source, obj: &DynamicObject) -> Result<(), kube::Error> {
        let value = serde_json::to_value(obj).map_err(kube::Error::SerdeError)?;
        let Some(mut e) = Existing::from_json(key.kind, &value) else { return Ok(()) };
        let nulls = |keys: Vec<String>| -> serde_json::Map<String, Value> {
            keys.into_iter().map(|k| (k, Value::Null)).collect()
        };
        let stray = |field: &str, keep: &BTreeMap<String, String>| -> Vec<String> {
            value
                .get(field)
                .and_then(Value::as_object)
                .map(|m| m.keys().filter(|k| !keep.contains_key(*k)).cloned().collect())
                .unwrap_or_default()
        };
        let desired = source.copy_manifest(self.rule, &key.namespace);
        let (labels, annotations) = stale_marks(&value, self.field_manager, &desired);
        let mut patch = serde_json::Map::new();
        let mut meta = serde_json::Map::new();
        meta.insert("resourceVersion".into(), json!(e.resource_version));
        if !labels.is_empty() {
            meta.insert("labels".into(), Value::Object(nulls(labels)));
        }
        if !annotations.is_empty() {
            meta.insert("annotations".into(), Value::Object(nulls(annotations)));
        }
        let mut needed = meta.len() > 1;
        patch.insert("metadata".into(), Value::Object(meta));
        if !e.in_sync_with(source) {
            for (field, keep) in [("data", &source.content.data), ("binaryData", &source.content.binary_data)] {
                let keys = stray(field, keep);
                if !keys.is_empty() {
                    patch.insert(field.into(), Value::Object(nulls(keys)));
                    needed = true;
                }
            }
        }
        if needed {
            self.caches.metrics().request("patch");
            let pp = PatchParams { field_manager: Some(self.field_manager.to_string()), ..Default::default() };
            let patched = self.api(key).patch(&key.name, &pp, &Patch::Merge(&Value::Object(patch))).await?;
            let v = serde_json::to_value(&patched).map_err(kube::Error::SerdeError)?;
            if let Some(p) = Existing::from_json(key.kind, &v) {
                e = p;
            }
        }
        self.caches.record_copy(e);
        Ok(())
    }

    /// Deletes a copy this rule owns (as last seen: same uid and version).
    pub async fn delete(&self, e: &Existing) -> Outcome {
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid: e.uid.clone(), resource_version: e.resource_version.clone() }),
            ..Default::default()
        };
        self.caches.metrics().request("delete");
        match self.api(&e.key).delete(&e.key.name, &dp).await {
            Ok(_) => {
                self.count("delete", true);
                self.caches.forget_copy(&e.key);
                Outcome::Deleted
            }
            Err(err) if is_status(&err, 404) => {
                self.caches.forget_copy(&e.key);
                Outcome::Deleted
            }
            // Changed since we saw it: the watch brings the new version and another reconcile.
            Err(err) if is_status(&err, 409) => self.failed(&e.key, "delete", err),
            Err(err) => self.failed(&e.key, "delete", err),
        }
    }
}
