//! # pod-debugger
//!
//! A `PodDebugger` (`flotilla.dev/v1alpha1`) adds an ephemeral debug
//! container to the running pods of its namespace that match a label, once
//! per pod and container spec, joining a target container's process
//! namespace, so a distroless pod gets a shell. Only images on the
//! operator's allow-list run; a profile the namespace's Pod Security level
//! would reject is refused before any pod is touched (one rejected
//! ephemeral container blocks every later one on that pod). In mode copy
//! it makes, instead, a debug copy of each matched crash-looping pod.
//!
//! | module | concern |
//! | --- | --- |
//! | [`crd`] | the CRD types, schema, CEL rules, printer columns |
//! | [`naming`] | deterministic container names (pure) |
//! | [`security`] | profiles as security contexts, Pod Security levels (pure) |
//! | [`images`] | the image allow-list (pure) |
//! | [`pod`] | the pod projection (pure) |
//! | [`mounts`] | which pod volumes the debug container mounts (pure) |
//! | [`plan`] | what to do with each matched pod, and the expiry (pure) |
//! | [`container`] | the ephemeral container and its patch (pure) |
//! | [`copy`] | mode copy: a crash-looping pod's debug copy, its name and labels (pure) |
//! | [`copy_plan`] | mode copy: each matched pod's copy or why none, and the copies to delete (pure) |
//! | [`copy_apply`] | mode copy: copies created, and deleted only when the API shows them ours |
//! | [`status`] | status from the plan (pure) |
//! | [`metrics`] | `flotilla_pod_debugger_*` |
//! | [`apply`] | the writes: a dry run of the first addition, then the additions (their answers handed back) |
//! | [`report`] | a reconcile told: each addition's answer as the pod's decision, Events and metrics; the refusal's Warning and metric; status written when it changed |
//! | [`controller`] | the watch and the reconcile: check (snapshot) → plan → apply → report |

pub mod apply;
pub mod container;
pub mod controller;
pub mod copy;
pub mod copy_apply;
pub mod copy_plan;
pub mod crd;
pub mod error;
pub mod images;
pub mod metrics;
pub mod mounts;
pub mod naming;
pub mod plan;
pub mod pod;
pub mod report;
pub mod security;
pub mod status;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The operator's CRDs, for `cargo xtask crds`.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![crd::PodDebugger::crd()]
}

#[cfg(test)]
mod heap_budget;

// Unit tests count heap bytes (heap_budget.rs) through this allocator.
#[cfg(test)]
#[global_allocator]
static HEAP: flotilla_testenv::heap::Counting = flotilla_testenv::heap::Counting;
