//! # config-copier
//!
//! A `CopyRule` (`flotilla.dev/v1alpha1`) copies the ConfigMaps or Secrets of
//! its own namespace that match a label selector into other namespaces, and
//! keeps the copies in sync: new namespaces, source changes, hand edits and
//! deletions of copies, namespace relabelling, rule changes and rule deletion
//! all converge within seconds. It never writes or deletes an object that
//! does not carry its ownership label (unless told to adopt one), and a rule
//! never reads sources outside its own namespace. A `CopyRequest` pulls one
//! object of another namespace into its own, when that object's owner
//! allows it (annotation `flotilla.dev/allow-pull-to`).
//!
//! | module | concern |
//! | --- | --- |
//! | [`crd`] | the CRD types, schema, CEL rules, printer columns |
//! | [`targets`] | a rule's namespace targets: its label selector and name globs (pure) |
//! | [`copy`] | what a copy looks like: content, ownership marks, hashes (pure) |
//! | [`cache`] | what the watches hold (namespaces, copies: metadata only; `cache::watches` feeds them and wakes rules); what reads of sources taught; one read-once `Snapshot` per reconcile, looked up where the rule's copies would go |
//! | [`sources`] | every possible source, one metadata-only watch per kind for all rules |
//! | [`claims`] | claims and conflicts: who wins a name two rules want and what is known of the rule a copy's marks name (pure); the claims and reported conflicts kept between reconciles, a change returning the rules to wake |
//! | [`budget`] | the bytes of payload held at once (`--max-bytes-in-flight`) |
//! | [`read`] | the reads of sources' payloads, within that budget; a copy read again after a write's answer; a target namespace's workloads listed for `rolloutOnChange` (`read::workloads`) |
//! | [`plan`] | which copies should exist and their names (`spec.target`: `plan::Naming`), the rule's claim, whose each object is, and what to do about each; which workloads consume a changed copy and roll (`plan::rollouts`) (pure) |
//! | [`apply`] | the writes and nothing else: create, server-side apply, delete, each proving ownership; typed answers; a workload's pod-template copy hash patched (`apply::rollouts`) |
//! | [`cleanup`] | a deleted rule: the copies to prune, found by asking the API |
//! | [`status`] | status and conditions (pure) |
//! | [`report`] | a sync told: outcomes counted into the status and `copy_operations_total`, Events |
//! | [`metrics`] | `flotilla_config_copier_*` |
//! | [`request`] | `CopyRequest`: a pull into the request's namespace, allowed by the source's annotation `flotilla.dev/allow-pull-to`; its own controller, plan (pure), writes and report |
//! | [`controller`] | wiring, finalizer, and the reconcile: snapshot → plan → apply in rounds (a write's answer read and planned again, `controller::rounds`) → the consumers of updated copies rolled (`controller::rollouts`) → report; a deleted rule's copies pruned (`controller::deletion`) |

pub mod apply;
pub mod budget;
pub mod cache;
pub mod claims;
pub mod cleanup;
pub mod controller;
pub mod copy;
pub mod crd;
pub mod error;
pub mod metrics;
pub mod plan;
pub mod read;
pub mod report;
pub mod request;
pub mod sources;
pub mod status;
pub mod targets;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The operator's CRDs, for `cargo xtask crds`.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![crd::CopyRule::crd(), crd::CopyRequest::crd()]
}

#[cfg(test)]
mod heap_budget;

// Unit tests count heap bytes (heap_budget.rs) through this allocator.
#[cfg(test)]
#[global_allocator]
static HEAP: flotilla_testenv::heap::Counting = flotilla_testenv::heap::Counting;
