//! A rule's planned copies carried out, copy by copy, in rounds (at most
//! [`ROUNDS`]): the planned action written ([`crate::apply`]); when the
//! server's answer says the world is not what the plan saw (a 409, a 422),
//! the object read again ([`read_copy`], with the claims and owners as the
//! caches know them now), planned again on that read ([`plan::decide`],
//! [`plan::after_invalid`]), and the new action written. Each step is its
//! own module's; this only hands one step's result to the next, and
//! decides nothing itself.
//!
//! The writes of a source's copies are bounded twice: by the byte budget
//! (its payload is read once for all of them, [`crate::read`]) and by the
//! reconcile's `--copy-concurrency`.

use std::ops::ControlFlow::{self, Break, Continue};
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::Semaphore;

use crate::apply::{Answer, Op, Writer};
use crate::copy::{CopyKey, Source};
use crate::plan::{self, Action, AfterInvalid, ConflictReason, CopyContext, Desired, Job};
use crate::read::{Reader, read_copy};
use crate::report::{Carried, Outcome};

/// Rounds per copy at most (a 409 or a read leads to another).
const ROUNDS: usize = 4;

fn failed(key: &CopyKey, action: &'static str, e: impl std::fmt::Display) -> Outcome {
    Outcome::Failed { key: key.clone(), action, error: e.to_string() }
}

/// What a write's answer asks of the next round.
enum Again {
    /// The plan saw something else (a 409, or `Action::Read`): decide again on a fresh read.
    Decide,
    /// The API refused `what` as invalid: what the plan makes of a refusal, on a fresh read.
    AfterInvalid { what: &'static str, refusal: kube::Error },
}

/// What a round writes: the plan's action, or the replacement the plan
/// chose after a 422 ([`AfterInvalid::Replace`]: delete, then create).
enum Step {
    Act(Action),
    Replace { uid: Option<String>, resource_version: Option<String> },
}

/// `ctx` with the claims as they are now: a better-ranked rule may have
/// claimed the name since the snapshot (two rules woken by one list plan
/// at once), and a 409 is often its create.
fn claims_now(writer: &Writer<'_>, key: &CopyKey, desired: Option<&Desired>, ctx: &CopyContext) -> CopyContext {
    CopyContext { claimed_by: desired.and_then(|_| writer.caches.claimed_by(&writer.rule.id, key)), ..ctx.clone() }
}

/// A target left alone counts as a create that met a conflict.
fn conflict(ops: &mut Vec<Op>, key: &CopyKey, reason: ConflictReason) -> Outcome {
    ops.push(Op::new("create", "conflict"));
    Outcome::Conflict { key: key.clone(), reason }
}

/// The outcome of a delete, unless it is done (or found nothing).
fn delete_failed(key: &CopyKey, answer: Answer) -> Option<Outcome> {
    match answer {
        Answer::Done | Answer::Gone => None,
        Answer::Failed(e) | Answer::Invalid(e) => Some(failed(key, "delete", e)),
        // A delete's 409 comes back as a failure; this is for completeness.
        Answer::Stale => Some(failed(key, "delete", "the object changed since it was seen")),
    }
}

/// Creates the copy of `s` at `key`, planned again first with the claims
/// as they are now: a rule ranking above this one creates; this one does
/// not race it (a conflict found now is not a write). `Break`: the copy's
/// outcome; `Continue`: what the next round must plan on.
async fn create(
    writer: &Writer<'_>,
    key: &CopyKey,
    s: &Source,
    desired: Option<&Desired>,
    ctx: &CopyContext,
    ops: &mut Vec<Op>,
) -> ControlFlow<Outcome, Again> {
    if let Action::Conflict(reason) = plan::decide(desired, None, &claims_now(writer, key, desired, ctx)) {
        return Break(conflict(ops, key, reason));
    }
    let written = writer.create_copy(key, s).await;
    ops.extend(written.op());
    match written.answer {
        Answer::Done => Break(Outcome::Created),
        Answer::Stale | Answer::Gone => Continue(Again::Decide),
        Answer::Invalid(e) => {
            // Nothing there to read again: the refusal is final.
            ops.push(Op::new("create", "error"));
            Break(failed(key, "create", e))
        }
        Answer::Failed(e) => Break(failed(key, "create", e)),
    }
}

/// Carries `action` out for `key` (a copy of `source`, or not wanted):
/// apply, and on an answer that says the plan saw another world, read,
/// plan and apply again.
pub(crate) async fn carry_out(
    writer: &Writer<'_>,
    key: &CopyKey,
    source: Option<&Arc<Source>>,
    action: Action,
    ctx: &CopyContext,
) -> Carried {
    let desired = source.map(|s| Desired::of(&s.info()));
    let desired = desired.as_ref();
    let mut ops = Vec::new();
    let mut step = Step::Act(action);
    let outcome = 'rounds: {
        for _ in 0..ROUNDS {
            // Apply the step (those that write nothing end here); a write
            // whose answer is not final says what the next round plans on.
            let done = match step {
                Step::Act(Action::Nothing) => Break(Outcome::Nothing),
                Step::Act(Action::InSync) => Break(Outcome::InSync),
                Step::Act(Action::Keep) => Break(Outcome::Kept),
                Step::Act(Action::Conflict(reason)) => Break(conflict(&mut ops, key, reason)),
                Step::Act(Action::Read) => Continue(Again::Decide),
                Step::Act(Action::Delete { uid, resource_version }) => {
                    let written = writer.delete_copy(key, uid, resource_version).await;
                    ops.extend(written.op());
                    Break(delete_failed(key, written.answer).unwrap_or(Outcome::Deleted))
                }
                Step::Act(Action::Create) => match source {
                    Some(s) => create(writer, key, s, desired, ctx, &mut ops).await,
                    None => Break(Outcome::Nothing),
                },
                Step::Replace { uid, resource_version } => match source {
                    Some(s) => {
                        let written = writer.delete_copy(key, uid, resource_version).await;
                        ops.extend(written.op());
                        match delete_failed(key, written.answer) {
                            Some(outcome) => Break(outcome),
                            None => create(writer, key, s, desired, ctx, &mut ops).await,
                        }
                    }
                    None => Break(Outcome::Nothing),
                },
                Step::Act(
                    ref action @ (Action::Update { ref resource_version } | Action::Adopt { ref resource_version }),
                ) => match source {
                    Some(s) => {
                        let (what, done) = match action {
                            Action::Update { .. } => {
                                ("update", Outcome::Updated { key: key.clone(), data_hash: s.content_hash.clone() })
                            }
                            _ => ("adopt", Outcome::Adopted(key.clone())),
                        };
                        let written = writer.apply_copy(key, s, resource_version.as_deref(), what).await;
                        ops.extend(written.op());
                        match written.answer {
                            Answer::Done => Break(done),
                            Answer::Stale | Answer::Gone => Continue(Again::Decide),
                            Answer::Invalid(refusal) => Continue(Again::AfterInvalid { what, refusal }),
                            Answer::Failed(e) => Break(failed(key, what, e)),
                        }
                    }
                    None => Break(Outcome::Nothing),
                },
            };
            let again = match done {
                ControlFlow::Continue(again) => again,
                ControlFlow::Break(outcome) => break 'rounds outcome,
            };
            // Snapshot: the object read again, whose it is now.
            let seen = match read_copy(writer.client, writer.caches, writer.field_manager, key).await {
                Ok(seen) => seen,
                Err(e) => {
                    ops.push(Op::new("get", "error"));
                    break 'rounds failed(key, "get", e);
                }
            };
            let owner = seen.as_ref().map(|o| writer.caches.ownership(writer.rule, o));
            let observed = seen.as_ref().zip(owner.as_ref());
            // Plan the next round on it.
            step = match again {
                Again::Decide => {
                    let next = plan::decide(desired, observed, &claims_now(writer, key, desired, ctx));
                    if let (Action::InSync, Some(o)) = (&next, &seen) {
                        // Verified: this version holds what it should.
                        writer.caches.record_version(key, o.resource_version.clone());
                    }
                    Step::Act(next)
                }
                Again::AfterInvalid { what, refusal } => {
                    let Some(d) = desired else { break 'rounds Outcome::Nothing };
                    match plan::after_invalid(key.kind, observed, d) {
                        AfterInvalid::Create => Step::Act(Action::Create),
                        AfterInvalid::Replace { uid, resource_version } => Step::Replace { uid, resource_version },
                        AfterInvalid::Refused => {
                            ops.push(Op::new(what, "error"));
                            break 'rounds failed(key, what, refusal);
                        }
                    }
                }
            };
        }
        ops.push(Op::new("write", "error"));
        failed(key, "write", "the object kept changing under us")
    };
    Carried { outcome, ops }
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
pub(crate) async fn run_jobs(writer: &Writer<'_>, jobs: Vec<Job>, limit: usize) -> Vec<Carried> {
    bounded(jobs, limit, |j: Job| async move { carry_out(writer, &j.key, None, j.action, &j.ctx).await }).await
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
) -> Vec<Carried> {
    let untouched = |outcome| Carried { outcome, ops: Vec::new() };
    let held = match reader.read_for_writes(&name, jobs.len().min(concurrency)).await {
        Ok(Some(h)) => h,
        // Gone since it was learned: its watch triggers the next reconcile, which prunes.
        Ok(None) => return jobs.iter().map(|_| untouched(Outcome::Nothing)).collect(),
        // A source's read is not an operation on a copy: not counted.
        Err(e) => return jobs.into_iter().map(|j| untouched(failed(&j.key, "get source", &e))).collect(),
    };
    let source = &held.source;
    bounded(jobs, held.writes, |j: Job| async move {
        let Ok(_slot) = slots.acquire().await else { return untouched(Outcome::Nothing) };
        carry_out(writer, &j.key, Some(source), j.action, &j.ctx).await
    })
    .await
}
