//! A rule's planned copies carried out: each copy's action written
//! ([`crate::apply`]), and when the server's answer shows the world is not
//! what the plan saw (a 409, a 422), the object read again and the answer
//! handed back to the plan ([`plan::decide`], [`plan::after_invalid`]) with
//! the claims and owners as the caches know them now — at most [`ROUNDS`]
//! times. Nothing here decides what a copy should be; it passes answers.
//!
//! The writes of a source's copies are bounded twice: by the byte budget
//! (its payload is read once for all of them, [`crate::read`]) and by the
//! reconcile's `--copy-concurrency`.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::Semaphore;

use crate::apply::{Writer, Written};
use crate::copy::{CopyKey, Source};
use crate::plan::{self, Action, AfterInvalid, ConflictReason, CopyContext, Desired, Job};
use crate::read::Reader;

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
    Conflict { key: CopyKey, reason: ConflictReason },
    Failed { key: CopyKey, action: &'static str, error: String },
}

/// A target left alone (counted as a create that met a conflict).
fn conflict(writer: &Writer<'_>, key: &CopyKey, reason: ConflictReason) -> Outcome {
    writer.count("create", "conflict");
    Outcome::Conflict { key: key.clone(), reason }
}

fn failed(key: &CopyKey, action: &'static str, e: impl std::fmt::Display) -> Outcome {
    Outcome::Failed { key: key.clone(), action, error: e.to_string() }
}

/// `ctx` with the claims as they are now: a better-ranked rule may have
/// claimed the name since the plan (two rules woken by one list decide at
/// once), and a 409 is often its create.
fn claims_now(writer: &Writer<'_>, key: &CopyKey, desired: Option<&Desired>, ctx: &CopyContext) -> CopyContext {
    CopyContext { claimed_by: desired.and_then(|_| writer.caches.claimed_by(&writer.rule.id, key)), ..ctx.clone() }
}

/// Reads the object and has the plan decide again on what was read.
async fn decide_on_read(
    writer: &Writer<'_>,
    key: &CopyKey,
    desired: Option<&Desired>,
    ctx: &CopyContext,
) -> Result<Action, Outcome> {
    let seen = writer.get(key).await.map_err(|e| {
        writer.count("get", "error");
        failed(key, "get", e)
    })?;
    let ctx = claims_now(writer, key, desired, ctx);
    let owner = seen.as_ref().map(|o| writer.caches.ownership(writer.rule, o));
    let action = plan::decide(desired, seen.as_ref().zip(owner.as_ref()), &ctx);
    if let (Action::InSync, Some(o)) = (&action, &seen) {
        // Verified: this version holds what it should.
        writer.caches.record_version(key, o.resource_version.clone());
    }
    Ok(action)
}

/// The plan's answer to a 422 on an apply: the object read again, then
/// replaced (a Secret whose type must change), created (gone meanwhile) or
/// the refusal reported.
async fn after_invalid(
    writer: &Writer<'_>,
    key: &CopyKey,
    desired: &Desired,
    what: &'static str,
    refusal: kube::Error,
) -> Result<Action, Outcome> {
    let seen = writer.get(key).await.map_err(|e| {
        writer.count("get", "error");
        failed(key, "get", e)
    })?;
    let owner = seen.as_ref().map(|o| writer.caches.ownership(writer.rule, o));
    match plan::after_invalid(key.kind, seen.as_ref().zip(owner.as_ref()), desired) {
        AfterInvalid::Create => Ok(Action::Create),
        AfterInvalid::Replace { uid, resource_version } => match writer.delete_copy(key, uid, resource_version).await {
            Ok(()) => Ok(Action::Create),
            Err(e) => Err(failed(key, "delete", e)),
        },
        AfterInvalid::Refused => {
            writer.count(what, "error");
            Err(failed(key, what, refusal))
        }
    }
}

/// Carries `action` out for `key` (a copy of `source`, or not wanted),
/// deciding again on the server's answers.
pub async fn converge(
    writer: &Writer<'_>,
    key: &CopyKey,
    source: Option<&Arc<Source>>,
    mut action: Action,
    ctx: &CopyContext,
) -> Outcome {
    let desired = source.map(|s| Desired::of(&s.info()));
    let desired = desired.as_ref();
    for _ in 0..ROUNDS {
        let next = match action {
            Action::Nothing => return Outcome::Nothing,
            Action::InSync => return Outcome::InSync,
            Action::Keep => return Outcome::Kept,
            Action::Conflict(reason) => return conflict(writer, key, reason),
            Action::Read => decide_on_read(writer, key, desired, ctx).await,
            Action::Delete { uid, resource_version } => {
                return match writer.delete_copy(key, uid, resource_version).await {
                    Ok(()) => Outcome::Deleted,
                    Err(e) => failed(key, "delete", e),
                };
            }
            Action::Create => {
                let Some(s) = source else { return Outcome::Nothing };
                // Decided again with the claims as they are now: a rule
                // ranking above this one creates; this one does not race it
                // (in this round: a conflict found now is not a write).
                if let Action::Conflict(reason) = plan::decide(desired, None, &claims_now(writer, key, desired, ctx)) {
                    return conflict(writer, key, reason);
                }
                match writer.create_copy(key, s).await {
                    Written::Done => return Outcome::Created,
                    Written::Stale => decide_on_read(writer, key, desired, ctx).await,
                    Written::Invalid(e) => {
                        writer.count("create", "error");
                        return failed(key, "create", e);
                    }
                    Written::Failed(e) => return failed(key, "create", e),
                }
            }
            Action::Update { ref resource_version } | Action::Adopt { ref resource_version } => {
                let (Some(s), Some(d)) = (source, desired) else { return Outcome::Nothing };
                let (what, done) = match action {
                    Action::Update { .. } => ("update", Outcome::Updated),
                    _ => ("adopt", Outcome::Adopted(key.clone())),
                };
                match writer.apply_copy(key, s, resource_version.as_deref(), what).await {
                    Written::Done => return done,
                    Written::Stale => decide_on_read(writer, key, desired, ctx).await,
                    Written::Invalid(e) => after_invalid(writer, key, d, what, e).await,
                    Written::Failed(e) => return failed(key, what, e),
                }
            }
        };
        action = match next {
            Ok(a) => a,
            Err(outcome) => return outcome,
        };
    }
    writer.count("write", "error");
    failed(key, "write", "the object kept changing under us")
}

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

/// Carries out `jobs` that need no payload (deletions, conflicts) with at
/// most `limit` in flight.
pub(crate) async fn run_jobs(writer: &Writer<'_>, jobs: Vec<Job>, limit: usize) -> Vec<Outcome> {
    bounded(jobs, limit, |j: Job| async move { converge(writer, &j.key, None, j.action, &j.ctx).await }).await
}

/// Carries out the jobs of the source `name`: reads it (its payload held
/// only for this, within the byte budget), then writes, as many at once as
/// its share of the budget covers and a slot of the reconcile's
/// `--copy-concurrency` is free.
pub(crate) async fn run_source_jobs(
    writer: &Writer<'_>,
    reader: &Reader<'_>,
    (name, jobs): (String, Vec<Job>),
    slots: &Semaphore,
    concurrency: usize,
) -> Vec<Outcome> {
    let held = match reader.read_for_writes(&name, jobs.len().min(concurrency)).await {
        Ok(Some(h)) => h,
        // Gone since it was learned: its watch triggers the next reconcile, which prunes.
        Ok(None) => return jobs.iter().map(|_| Outcome::Nothing).collect(),
        Err(e) => return jobs.into_iter().map(|j| failed(&j.key, "get source", &e)).collect(),
    };
    let source = &held.source;
    bounded(jobs, held.writes, |j: Job| async move {
        let Ok(_slot) = slots.acquire().await else { return Outcome::Nothing };
        converge(writer, &j.key, Some(source), j.action, &j.ctx).await
    })
    .await
}
