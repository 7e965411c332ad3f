//! A LoadTest's step carried out, writes and nothing else: its runner pods
//! deleted, made (at most 16 creations at once) and, once all run,
//! signalled to start (or, abortOnFail, to stop). The step ([`crate::machine::step`]) decided all of
//! it; a refusal of the API comes back for the machine to record.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

use crate::error::Error;
use crate::machine::Step;
use crate::runner::{START_ANNOTATION, STOP};

/// Runner creations in flight at once.
const CREATIONS_AT_ONCE: usize = 16;

/// How carrying a step out ended.
#[derive(Debug, PartialEq)]
pub enum Carried {
    Done,
    /// A runner pod was refused (quota, a policy, validation): a retry
    /// would not pass; the API's answer.
    Refused(String),
}

/// Deletes the step's runners, creates `create` (already built from the
/// step), then signals the step's runners to start.
pub async fn carry_out(pods: &Api<Pod>, step: &Step, create: Vec<Pod>) -> Result<Carried, Error> {
    for pod in &step.delete {
        match pods.delete(pod, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(Error::Kube("delete runner", e)),
        }
    }
    let made: Vec<Result<(), kube::Error>> = futures::stream::iter(create.into_iter().map(|pod| {
        let pods = pods.clone();
        async move {
            match pods.create(&PostParams::default(), &pod).await {
                // Made by an earlier try of this run.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                other => other.map(|_| ()),
            }
        }
    }))
    .buffer_unordered(CREATIONS_AT_ONCE)
    .collect()
    .await;
    let refused = made.iter().find_map(|r| match r {
        Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403 | 422) => Some(s.message.clone()),
        _ => None,
    });
    if let Some(message) = refused {
        return Ok(Carried::Refused(message));
    }
    if let Some(Err(e)) = made.into_iter().find(Result::is_err) {
        return Err(Error::Kube("create runner", e));
    }
    let go = Patch::Merge(serde_json::json!({"metadata": {"annotations": {START_ANNOTATION: "go"}}}));
    for pod in &step.signal {
        pods.patch(pod, &PatchParams::default(), &go).await.map_err(|e| Error::Kube("signal runner", e))?;
    }
    let stop = Patch::Merge(serde_json::json!({"metadata": {"annotations": {START_ANNOTATION: STOP}}}));
    for pod in &step.stop {
        match pods.patch(pod, &PatchParams::default(), &stop).await {
            Ok(_) => {}
            // Gone: nothing to stop.
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(Error::Kube("stop runner", e)),
        }
    }
    Ok(Carried::Done)
}
