//! The writes of ConfigMaps and Secrets, and nothing else: what to write
//! is decided by the plan ([`crate::plan::decide`]); each write returns the
//! server's answer, typed ([`Written`]), and decides nothing more — an
//! answer that says the world is not what the plan saw is the next plan
//! round's input (the controller's rounds). Every write proves
//! ownership on the server: a create fails rather than overwrite, an apply
//! carries the `resourceVersion` the decision was made at, a delete
//! carries `uid` and `resourceVersion`; a 409 comes back as
//! [`Answer::Stale`], a 422 as [`Answer::Invalid`].
//!
//! Responses are asked for as metadata only (`as=PartialObjectMetadata`):
//! a write of a 1 MiB copy does not bring 1 MiB back. The caller holds the
//! budget for the writes in flight (see [`crate::read::Held`]).

pub mod rollouts;

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Value, json};

use crate::cache::{Caches, api_resource};
use crate::copy::{CopyKey, ResourceVersion, RuleRef, Source, stray_fields};

const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// One operation as `flotilla_config_copier_copy_operations_total`
/// counts it (`action`, `result` labels); [`crate::report`] counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    pub what: &'static str,
    pub result: &'static str,
}

impl Op {
    pub fn new(what: &'static str, result: &'static str) -> Self {
        Self { what, result }
    }
}

/// What the server answered to one write.
#[derive(Debug)]
pub enum Answer {
    /// Done as asked.
    Done,
    /// A delete found nothing: gone already (as good as deleted).
    Gone,
    /// 409 to a create or an apply: the object is not what the decision
    /// saw (a create: it exists).
    Stale,
    /// 422 to a create or an apply: the API refused the object as invalid.
    Invalid(kube::Error),
    /// Any other failure (a delete's 409 included: it changed since it
    /// was seen, and the watch brings the new version to the next plan).
    Failed(kube::Error),
}

/// One write (`what`: create, update, adopt, delete) and its answer.
#[derive(Debug)]
pub struct Written {
    pub what: &'static str,
    pub answer: Answer,
}

impl Written {
    /// The operation this answer counts: a success or a failure. A 409 or
    /// a 422 is answered by reading the object again, and counted by what
    /// comes of that; a delete of an object gone already counts nothing.
    pub fn op(&self) -> Option<Op> {
        match self.answer {
            Answer::Done => Some(Op::new(self.what, "success")),
            Answer::Failed(_) => Some(Op::new(self.what, "error")),
            Answer::Gone | Answer::Stale | Answer::Invalid(_) => None,
        }
    }
}

/// Writes copies for one rule.
pub struct Writer<'a> {
    pub client: &'a Client,
    pub field_manager: &'a str,
    pub caches: &'a Caches,
    pub rule: &'a RuleRef,
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

impl Writer<'_> {
    fn api(&self, key: &CopyKey) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &key.namespace, &api_resource(key.kind))
    }

    fn answer(what: &'static str, result: Result<(), kube::Error>) -> Written {
        let answer = match result {
            Ok(()) => Answer::Done,
            Err(e) if is_status(&e, 409) => Answer::Stale,
            Err(e) if is_status(&e, 422) => Answer::Invalid(e),
            Err(e) => Answer::Failed(e),
        };
        Written { what, answer }
    }

    /// Creates the copy of `source` at `key`; fails (409) rather than overwrite.
    pub async fn create_copy(&self, key: &CopyKey, source: &Source) -> Written {
        let result = self.create(key, source).await;
        Self::answer("create", result)
    }

    /// Applies the copy of `source` over the object at `resource_version`
    /// (`what`: "update" or "adopt").
    pub async fn apply_copy(
        &self,
        key: &CopyKey,
        source: &Source,
        resource_version: Option<&str>,
        what: &'static str,
    ) -> Written {
        let result = self.apply(key, source, resource_version).await;
        Self::answer(what, result)
    }

    /// Deletes the object at `key` as last seen (same uid and version).
    /// A failure (a 409 included: it changed since it was seen) is final
    /// for this reconcile: the watch brings the new version and the next
    /// plan decides on it.
    pub async fn delete_copy(&self, key: &CopyKey, uid: Option<String>, resource_version: Option<String>) -> Written {
        let dp = DeleteParams { preconditions: Some(Preconditions { uid, resource_version }), ..Default::default() };
        self.caches.metrics().request("delete");
        let answer = match self.api(key).delete(&key.name, &dp).await {
            Ok(_) => Answer::Done,
            Err(e) if is_status(&e, 404) => Answer::Gone,
            Err(e) => Answer::Failed(e),
        };
        if matches!(answer, Answer::Done | Answer::Gone) {
            self.caches.forget_copy(key);
        }
        Written { what: "delete", answer }
    }

    async fn create(&self, key: &CopyKey, source: &Source) -> Result<(), kube::Error> {
        let manifest = source.copy_manifest(self.rule, &key.namespace, &key.name);
        let body = serde_json::to_vec(&manifest).map_err(kube::Error::SerdeError)?;
        drop(manifest);
        let pp = PostParams { dry_run: false, field_manager: Some(self.field_manager.to_string()) };
        let mut req = kube::core::Request::new(self.api(key).resource_url())
            .create(&pp, body)
            .map_err(kube::Error::BuildRequest)?;
        req.headers_mut().insert(http::header::ACCEPT, http::HeaderValue::from_static(METADATA_ONLY));
        self.caches.metrics().request("create");
        let created: Value = self.client.request(req).await?;
        self.settle(key, source, &created, false).await
    }

    /// Server-side apply of the copy, with a resourceVersion precondition.
    async fn apply(&self, key: &CopyKey, source: &Source, resource_version: Option<&str>) -> Result<(), kube::Error> {
        let mut manifest = source.copy_manifest(self.rule, &key.namespace, &key.name);
        if let Some(rv) = resource_version {
            manifest["metadata"]["resourceVersion"] = json!(rv);
        }
        self.caches.metrics().request("apply");
        let pp = PatchParams::apply(self.field_manager).force();
        let applied = self.api(key).patch_metadata(&key.name, &pp, &Patch::Apply(&manifest)).await?;
        drop(manifest);
        let value = serde_json::to_value(&applied).map_err(kube::Error::SerdeError)?;
        self.settle(key, source, &value, true).await
    }

    /// Removes what should not be on the copy any more (leftovers of the
    /// create, payload keys added by hand), read from managedFields, then
    /// records the version we leave it at.
    async fn settle(&self, key: &CopyKey, source: &Source, meta: &Value, repair: bool) -> Result<(), kube::Error> {
        let rv = meta.pointer("/metadata/resourceVersion").and_then(Value::as_str);
        let desired = source.copy_manifest_marks(self.rule, &key.namespace, &key.name);
        let strays = stray_fields(meta, self.field_manager, &desired, repair);
        if strays.is_empty() {
            self.caches.record_version(key, rv.map(ResourceVersion::parse));
            return Ok(());
        }
        let nulls =
            |keys: &[String]| -> Value { Value::Object(keys.iter().map(|k| (k.clone(), Value::Null)).collect()) };
        let mut patch = json!({"metadata": {"resourceVersion": rv}});
        for (field, keys) in [("labels", &strays.labels), ("annotations", &strays.annotations)] {
            if !keys.is_empty() {
                patch["metadata"][field] = nulls(keys);
            }
        }
        for (field, keys) in [("data", &strays.data), ("binaryData", &strays.binary_data)] {
            if !keys.is_empty() {
                patch[field] = nulls(keys);
            }
        }
        self.caches.metrics().request("patch");
        let pp = PatchParams { field_manager: Some(self.field_manager.to_string()), ..Default::default() };
        let patched = self.api(key).patch_metadata(&key.name, &pp, &Patch::Merge(&patch)).await?;
        self.caches.record_version(key, patched.metadata.resource_version.as_deref().map(ResourceVersion::parse));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status::failure("no", "Refused").with_code(code)))
    }

    #[test]
    fn an_answer_counts_a_success_or_a_failure_and_nothing_the_next_round_answers() {
        let op = |what, answer| Written { what, answer }.op();
        assert_eq!(op("update", Answer::Done), Some(Op::new("update", "success")));
        assert_eq!(op("create", Answer::Failed(refused(500))), Some(Op::new("create", "error")));
        assert_eq!(op("delete", Answer::Gone), None, "gone already: nothing was deleted");
        assert_eq!(op("create", Answer::Stale), None, "a 409 is read and planned again");
        assert_eq!(op("adopt", Answer::Invalid(refused(422))), None, "a 422 is read and planned again");
    }
}
