//! # pod-alert
//!
//! A `PodAlert` (`flotilla.dev/v1alpha1`) turns the unhealthy pods of its
//! namespace (and, opted in, its stalled rollouts and failed Jobs) into
//! incidents — one per workload, container and reason, so a
//! Deployment's ten crashing pods are one incident — with the failing
//! container's log tail, reported in its status, as Events, and to Slack, a
//! webhook or Alertmanager. Incidents open after a grace period, escalate
//! when restarts pass 3, 10 and 50, and resolve only after staying healthy
//! for `resolveAfter`; each terminated container is notified once.
//!
//! | module | concern |
//! | --- | --- |
//! | [`crd`] | the CRD types, schema, CEL rules, printer columns |
//! | [`rules`] | the spec checked: durations, globs, patterns, scope (pure) |
//! | [`pod`] | the pod projection and its workload (pure) |
//! | [`observe`] | what is wrong with the pods now (pure) |
//! | [`silence`] | spec.silences and the pods', workloads' and namespaces' silence annotations applied (pure) |
//! | [`annotation_silences`] | the namespaces' and workloads' silence annotations, held for the objects that carry one |
//! | [`workload_signals`] | what workloads say of themselves: stalled rollouts, failed Jobs, CronJobs' last and missed runs, as problems (pure) |
//! | [`held_store`] | a watch's few objects that say something, projected and held; one watch feeding several stores |
//! | [`incident`] | the incident state machine (pure) |
//! | [`debug_hint`] | the `kubectl` line creating a PodDebugger for an incident, shell-quoted (pure) |
//! | [`notify`] | Slack, webhook, Alertmanager and Event payloads (pure) |
//! | [`status`] | status from the incidents and back (pure) |
//! | [`throttle`] | the per-namespace rate limit on notifications, held ones and summaries (pure) |
//! | [`redact`] | secrets taken out of log tails: the defaults and spec.logs.redact, compiled once per spec (pure) |
//! | [`logs`] | log tails: read (the crashed run's, told by timestamps), held once per incident key within a budget |
//! | [`delivery`] | sink workers: HTTP, retries, `Retry-After`, failure classes; a Slack bot token's Web API calls, one thread per incident |
//! | [`address`] | where sinks may send: the operator's own network refused unless admitted, also after DNS |
//! | [`metrics`] | `flotilla_pod_alert_*` |
//! | [`log_reads`] | a reconcile's log reads: which, side by side, then judged against `ignore.logPatterns` |
//! | [`sinks`] | a reconcile's deliveries decided: the workers the spec wants, their Secrets read, what goes to which sink within the rate limit, Alertmanager's schedule |
//! | [`apply`] | the writes and nothing else: sink workers started and stopped, documents handed to them |
//! | [`report`] | a reconcile told: status (written when it changed), Events, Warnings, metrics |
//! | [`controller`] | the watch, the reconcile (snapshot → rules, incidents, log reads, deliveries → apply → report) and wiring |

pub mod address;
pub mod annotation_silences;
pub mod apply;
pub mod controller;
pub mod crd;
pub mod debug_hint;
pub mod delivery;
pub mod error;
pub mod evaluation;
pub mod events;
pub mod held_store;
pub mod incident;
pub mod log_reads;
pub mod logs;
pub mod metrics;
pub mod notify;
pub mod observe;
pub mod pod;
pub mod redact;
pub mod report;
pub mod rules;
pub mod silence;
pub mod sinks;
pub mod status;
pub mod throttle;
pub mod workload_signals;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The operator's CRDs, for `cargo xtask crds`.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![crd::PodAlert::crd()]
}

#[cfg(test)]
mod heap_budget;

// Unit tests count heap bytes (heap_budget.rs) through this allocator.
#[cfg(test)]
#[global_allocator]
static HEAP: flotilla_testenv::heap::Counting = flotilla_testenv::heap::Counting;
