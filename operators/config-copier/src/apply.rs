//! Carrying out [`plan::decide`]'s actions: the only place that writes
//! ConfigMaps and Secrets. Every write proves ownership on the server: a
//! create fails rather than overwrite, an apply carries the
//! `resourceVersion` the decision was made at, a delete carries `uid` and
//! `resourceVersion`. When the server says the world differs from what the
//! decision saw (409), the one object concerned is read and decided again.
//!
//! Responses are asked for as metadata only (`as=PartialObjectMetadata`):
//! a write of a 1 MiB copy does not bring 1 MiB back. The caller holds the
//! budget for the writes in flight (see [`crate::read::Held`]).

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::cache::{Caches, api_resource};
use crate::copy::{CopyKey, Observed, RuleRef, Source, stray_fields};
use crate::crd::{ConflictEntry, SourceKind};
use crate::plan::{self, Action, ConflictReason, CopyContext, Desired, Ownership};
use crate::read::Reader;

const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
/// Decisions per copy at most (a 409 or a read leads to another).
const ROUNDS: usize = 4;

/// What happened to one copy.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Nothing,
    InSync,
    Created,
    Updated,
    Adopted(CopyKey),
    Deleted,
    Kept,
    Conflict(ConflictEntry),
    Failed { key: CopyKey, action: &'static str, error: String },
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

    fn count(&self, action: &'static str, result: &'static str) {
        self.caches.metrics().operations.with_label_values(&[action, result]).inc();
    }

    fn failed(&self, key: &CopyKey, action: &'static str, e: impl std::fmt::Display) -> Outcome {
        self.count(action, "error");
        Outcome::Failed { key: key.clone(), action, error: e.to_string() }
    }

    fn conflict(&self, key: &CopyKey, reason: &ConflictReason) -> Outcome {
        self.count("create", "conflict");
        let message = match reason {
            ConflictReason::NotOwned => format!(
                "{key} exists and was not created by this rule (onConflict: Overwrite adopts it only where the namespace is labelled {}=true)",
                plan::ACCEPT_OVERWRITE
            ),
            ConflictReason::OwnedByAnotherRule(r) => format!("copied by CopyRule {r}"),
            ConflictReason::OwnedByAnotherInstallation(r) => {
                format!("copied by CopyRule {r}, of another config-copier installation")
            }
            ConflictReason::ClaimedByAnotherRule(r) => format!("CopyRule {r} wants it too and is older"),
        };
        Outcome::Conflict(ConflictEntry {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            reason: reason.reason().to_string(),
            message,
        })
    }

    /// Whose `o` is, for this rule.
    pub fn ownership(&self, o: &Observed) -> Ownership {
        plan::ownership(o.owner.as_ref(), self.rule, |label| self.caches.owner_state(label, &self.rule.id, &o.key))
    }

    /// Carries out `action` for `key`, deciding again after a read.
    pub async fn execute(
        &self,
        key: &CopyKey,
        source: Option<&Arc<Source>>,
        mut action: Action,
        ctx: &CopyContext,
    ) -> Outcome {
        let desired = source.map(|s| Desired::of(&s.info()));
        for _ in 0..ROUNDS {
            action = match action {
                Action::Nothing => return Outcome::Nothing,
                Action::InSync => return Outcome::InSync,
                Action::Keep => return Outcome::Kept,
                Action::Conflict(reason) => return self.conflict(key, &reason),
                Action::Read => match self.read(key, desired.as_ref(), ctx).await {
                    Ok((a, _)) => a,
                    Err(e) => return self.failed(key, "get", e),
                },
                Action::Create => {
                    let Some(s) = source else { return Outcome::Nothing };
                    // A rule ranking above this one may have claimed the
                    // name since the plan (both woken by one list): it
                    // creates, this one does not race it.
                    if let Some(by) = self.caches.claimed_by(&self.rule.id, key) {
                        return self.conflict(key, &plan::ConflictReason::ClaimedByAnotherRule(by));
                    }
                    match self.create(key, s).await {
                        Ok(()) => {
                            self.count("create", "success");
                            return Outcome::Created;
                        }
                        Err(e) if is_status(&e, 409) => match self.read(key, desired.as_ref(), ctx).await {
                            Ok((a, _)) => a,
                            Err(e) => return self.failed(key, "get", e),
                        },
                        Err(e) => return self.failed(key, "create", e),
                    }
                }
                Action::Update { resource_version } => {
                    let Some(s) = source else { return Outcome::Nothing };
                    match self.write(key, s, resource_version.as_deref(), ctx, "update").await {
                        Ok(o) => return o.unwrap_or(Outcome::Updated),
                        Err(next) => next,
                    }
                }
                Action::Adopt { resource_version } => {
                    let Some(s) = source else { return Outcome::Nothing };
                    match self.write(key, s, resource_version.as_deref(), ctx, "adopt").await {
                        Ok(o) => return o.unwrap_or(Outcome::Adopted(key.clone())),
                        Err(next) => next,
                    }
                }
                Action::Delete { uid, resource_version } => return self.delete(key, uid, resource_version).await,
            };
        }
        self.failed(key, "write", "the object kept changing under us")
    }

    /// Applies the copy over what was decided on; `Ok(Some)` for an outcome
    /// other than the plain one, `Err(action)` to decide again.
    async fn write(
        &self,
        key: &CopyKey,
        source: &Source,
        resource_version: Option<&str>,
        ctx: &CopyContext,
        what: &'static str,
    ) -> Result<Option<Outcome>, Action> {
        let desired = Desired::of(&source.info());
        match self.apply(key, source, resource_version).await {
            Ok(()) => {
                self.count(what, "success");
                Ok(None)
            }
            // Changed since we saw it (maybe no longer ours): look again.
            Err(e) if is_status(&e, 409) => match self.read(key, Some(&desired), ctx).await {
                Ok((a, _)) => Err(a),
                Err(e) => Ok(Some(self.failed(key, "get", e))),
            },
            // Invalid: only a Secret whose type must change is replaced;
            // anything else (a policy, `immutable` set by hand) is reported.
            Err(e) if is_status(&e, 422) => {
                let seen = match self.get(key).await {
                    Ok(Some(o)) => o,
                    Ok(None) => return Err(Action::Create),
                    Err(g) => return Ok(Some(self.failed(key, "get", g))),
                };
                let owner = self.ownership(&seen);
                if key.kind == SourceKind::Secret && plan::replace_after_invalid(&seen, &owner, &desired) {
                    return match self.delete(key, seen.uid.clone(), seen.resource_version.clone()).await {
                        Outcome::Deleted => Err(Action::Create),
                        other => Ok(Some(other)),
                    };
                }
                Ok(Some(self.failed(key, what, e)))
            }
            Err(e) => Ok(Some(self.failed(key, what, e))),
        }
    }

    /// Reads the object and decides again with its payload known.
    async fn read(
        &self,
        key: &CopyKey,
        desired: Option<&Desired>,
        ctx: &CopyContext,
    ) -> Result<(Action, Option<Observed>), kube::Error> {
        let seen = self.get(key).await?;
        // Decided again with the claims as they are now, not as the plan
        // saw them: a 409 here is often a better-ranked rule's create, and
        // its copy must read as claimed by it (ClaimedByAnotherRule), not
        // as another rule's property (OwnedByAnotherRule, warned once and
        // kept in the Events).
        let ctx = &CopyContext {
            claimed_by: desired.and_then(|_| self.caches.claimed_by(&self.rule.id, key)),
            ..ctx.clone()
        };
        let action = match &seen {
            None => plan::decide(desired, None, ctx),
            Some(o) => {
                let owner = self.ownership(o);
                let a = plan::decide(desired, Some((o, &owner)), ctx);
                if a == Action::InSync {
                    // Verified: this version holds what it should.
                    self.caches.record_version(key, o.resource_version.clone());
                }
                a
            }
        };
        Ok((action, seen))
    }

    async fn get(&self, key: &CopyKey) -> Result<Option<Observed>, kube::Error> {
        self.caches.metrics().request("get");
        let obj = self.api(key).get_opt(&key.name).await?;
        Ok(obj
            .and_then(|o| serde_json::to_value(o).ok())
            .and_then(|v| Observed::from_json(key.kind, &v, true, self.field_manager)))
    }

    async fn create(&self, key: &CopyKey, source: &Source) -> Result<(), kube::Error> {
        let manifest = source.copy_manifest(self.rule, &key.namespace);
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
        let mut manifest = source.copy_manifest(self.rule, &key.namespace);
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
        let rv = meta.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_string);
        let desired = source.copy_manifest_marks(self.rule, &key.namespace);
        let strays = stray_fields(meta, self.field_manager, &desired, repair);
        if strays.is_empty() {
            self.caches.record_version(key, rv);
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
        self.caches.record_version(key, patched.metadata.resource_version.clone());
        Ok(())
    }

    /// Deletes a copy this rule owns (as last seen: same uid and version).
    pub async fn delete(&self, key: &CopyKey, uid: Option<String>, resource_version: Option<String>) -> Outcome {
        let dp = DeleteParams { preconditions: Some(Preconditions { uid, resource_version }), ..Default::default() };
        self.caches.metrics().request("delete");
        match self.api(key).delete(&key.name, &dp).await {
            Ok(_) => {
                self.count("delete", "success");
                self.caches.forget_copy(key);
                Outcome::Deleted
            }
            Err(err) if is_status(&err, 404) => {
                self.caches.forget_copy(key);
                Outcome::Deleted
            }
            // Changed since we saw it: the watch brings the new version and another reconcile.
            Err(err) => self.failed(key, "delete", err),
        }
    }
}

/// One copy's decided action, to carry out.
pub(crate) type Job = (CopyKey, Option<Arc<Source>>, Action, CopyContext);

/// Runs `f` over `items` with at most `limit` in flight. Futures are made
/// as slots free up (not all up front: a request future is several KiB,
/// times thousands).
pub(crate) async fn bounded<T, O, Fut>(items: Vec<T>, limit: usize, f: impl Fn(T) -> Fut) -> Vec<O>
where
    Fut: std::future::Future<Output = O>,
{
    let mut out = Vec::with_capacity(items.len());
    let mut items = items.into_iter();
    let mut pending = FuturesUnordered::new();
    for item in items.by_ref().take(limit.max(1)) {
        pending.push(f(item));
    }
    while let Some(o) = pending.next().await {
        out.push(o);
        if let Some(item) = items.next() {
            pending.push(f(item));
        }
    }
    out
}

/// Runs `jobs` that need no payload (deletions, conflicts) with at most `limit` in flight.
pub(crate) async fn run_jobs(writer: &Writer<'_>, jobs: Vec<Job>, limit: usize) -> Vec<Outcome> {
    bounded(jobs, limit, |(k, s, a, c): Job| async move { writer.execute(&k, s.as_ref(), a, &c).await }).await
}

/// The jobs of one source: its copies to create, update, adopt or read.
pub(crate) struct SourceJobs {
    pub(crate) name: String,
    pub(crate) jobs: Vec<(CopyKey, Action, CopyContext)>,
}

/// Carries out one source's jobs: reads the source (its payload held only
/// for this, within the byte budget), then writes, as many at once as its
/// share of the budget covers and a slot of the reconcile's
/// `--copy-concurrency` is free.
pub(crate) async fn run_source_jobs(
    writer: &Writer<'_>,
    reader: &Reader<'_>,
    group: SourceJobs,
    slots: &Semaphore,
    concurrency: usize,
) -> Vec<Outcome> {
    let held = match reader.read_for_writes(&group.name, group.jobs.len().min(concurrency)).await {
        Ok(Some(h)) => h,
        // Gone since it was learned: its watch triggers the next reconcile, which prunes.
        Ok(None) => return group.jobs.iter().map(|_| Outcome::Nothing).collect(),
        Err(e) => {
            return group
                .jobs
                .into_iter()
                .map(|(key, _, _)| Outcome::Failed { key, action: "get source", error: e.to_string() })
                .collect();
        }
    };
    let source = &held.source;
    bounded(group.jobs, held.writes, |(k, a, c)| async move {
        let Ok(_slot) = slots.acquire().await else { return Outcome::Nothing };
        writer.execute(&k, Some(source), a, &c).await
    })
    .await
}
