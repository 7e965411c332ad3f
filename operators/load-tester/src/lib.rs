//! # load-tester
//!
//! A `LoadTest` (`flotilla.dev/v1alpha1`) runs `replicas` loadgen pods
//! against a Service of its namespace, started together once all run, and
//! merges their latency histograms into one result with a verdict; a
//! `SimpleDeployment` keeps exactly one sleeping pod (seed 004).
//!
//! | module | concern |
//! | --- | --- |
//! | [`crd`] | the CRD types, schema, printer columns |
//! | [`runner`] | runner pods and their projection (pure) |
//! | [`machine`] | the LoadTest state machine (pure) |
//! | [`results`] | merged results and the verdict (pure) |
//! | [`scenario`] | test.requests: what the runners are told, the Secret files they mount, what the schema cannot check (pure) |
//! | [`stages`] | load.stages: rates split over the runners, per-stage results (pure) |
//! | [`schedule`] | spec.schedule: the cron line checked, its next time (pure) |
//! | [`capacity`] | load.capacity: each step judged on its own figures, the highest rate that passed, a step's window judged live (pure) |
//! | [`baseline`] | spec.baseline: pinned when a run starts, compared and judged when it ends (pure) |
//! | [`simple`] | SimpleDeployment's child pod (pure) |
//! | [`simple_deployment`] | SimpleDeployment's controller: its one child kept |
//! | [`metrics`] | `flotilla_load_tester_*` |
//! | [`snapshot`] | what a step looks at: the test's runners, the target Service, the namespace's other runners (reads) |
//! | [`progress`] | a run's progress: the runners' last log lines read (reads) |
//! | [`apply`] | a step carried out: runners deleted, made, signalled to start or stop (writes) |
//! | [`report`] | status, its Ready and RunnerSaturated conditions, Events, runs counted in the metrics |
//! | [`controller`] | the LoadTest reconcile (snapshot → step → report → apply) and both controllers' start |

pub mod apply;
pub mod baseline;
pub mod capacity;
pub mod controller;
pub mod crd;
pub mod error;
pub mod machine;
pub mod metrics;
pub mod progress;
pub mod report;
pub mod results;
pub mod runner;
pub mod runner_pods;
pub mod scenario;
pub mod schedule;
pub mod simple;
pub mod simple_deployment;
pub mod snapshot;
pub mod stages;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The operator's CRDs, for `cargo xtask crds`.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![crd::LoadTest::crd(), crd::SimpleDeployment::crd()]
}
