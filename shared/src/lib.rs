//! # flotilla-shared: the runtime every Flotilla operator is built on
//!
//! An operator's `main.rs` parses its flags, names its controllers and hands
//! them to [`Operator::run`]; everything the suite's conventions
//! (`CONVENTIONS.md`) require of a process is done here:
//!
//! | concern | module |
//! | --- | --- |
//! | common flags/env, checked before touching the cluster (bad → exit 2) | [`config`] |
//! | `text`/`json` logs, `RUST_LOG`, a span per reconcile | [`telemetry`], [`context`] |
//! | `/metrics`, `/healthz`, `/readyz` | [`server`], [`health`] |
//! | which reconcile errors are terminal (`controller_runtime_terminal_reconcile_errors_total`) | [`reconcile_error`] |
//! | controller-runtime reconcile metrics, client-go's `workqueue_*` (the queue side from a mirror of kube-runtime's scheduler), process metrics, your own | [`metrics`], [`workqueue`] |
//! | client-go's `rest_client_requests_total`: every request of the kube client, by a tower layer | [`rest_client`] |
//! | a controller's watches and triggers (kube-runtime's `Controller` builder, run with `applier` so its queue is seen) | [`controller`] |
//! | a debounce that a stream of triggers cannot postpone past 2 s | [`debounce`] |
//! | refusing the powers an admission policy guards while that policy is missing (`--require-admission-policy`) | [`admission`] |
//! | leader election on a Lease (15 s / 10 s / 2 s), release on shutdown; a term not renewed in time is suspended and resumed if nobody took the lease | [`leader`], [`Context::suspended`], [`Leadership`] (for work outside a reconcile) |
//! | warm standbys: controllers watch before the lease is won, reconcile after | [`context`], [`Context::leading`] |
//! | `/readyz` unready while a watch feeding a cache fails | [`health`] |
//! | status by server-side apply, `metav1.Condition` semantics | [`status`], [`conditions`] |
//! | Events as `flotilla-<operator>`, never blocking a reconcile | [`events`] |
//! | SIGTERM: stop taking work, finish in-flight reconciles, release, exit 0 | [`operator`] |
//! | CRD files generated from the Rust types, drift check; a Secret's or ConfigMap's key, one shape for every CRD | [`crd`], [`key_ref`] |
//! | watch caches of small projections, not whole objects; Pods by namespace | [`projection`], [`pods`] |
//! | one-off lists of a tenant's kinds in pages, keeping only what is needed of each object | [`paged_list`] |
//! | names and label values many cached objects repeat, held once; UIDs as 16 bytes | [`intern`], [`uid`] |
//! | what an operator remembers of each custom resource between reconciles, dropped with the object | [`per_object`] |
//!
//! ## A minimal operator
//!
//! ```no_run
//! use std::sync::Arc;
//! use clap::Parser;
//! use flotilla_shared::{CommonArgs, Context, Controller, Operator};
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::runtime::controller::Action;
//! use kube::runtime::watcher;
//! use kube::Api;
//!
//! #[derive(Parser)]
//! #[command(version, about = "Does one thing well")]
//! struct Args {
//!     #[command(flatten)]
//!     common: CommonArgs,
//! }
//!
//! #[derive(Debug, thiserror::Error)]
//! enum Error {
//!     #[error("kubernetes: {0}")]
//!     Kube(#[from] kube::Error),
//! }
//!
//! // A failed request may pass: not terminal (the default).
//! impl flotilla_shared::ReconcileError for Error {}
//!
//! async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<Context>) -> Result<Action, Error> {
//!     // ... make the world look like `cm` says ...
//!     Ok(Action::await_change())
//! }
//!
//! fn error_policy(_: Arc<ConfigMap>, _: &Error, _: Arc<Context>) -> Action {
//!     Action::requeue(std::time::Duration::from_secs(30))
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     let args = Args::parse();
//!     Operator::new("example", &args.common).run(|ctx| async move {
//!         let api: Api<ConfigMap> = Api::all(ctx.client.clone());
//!         let controller = Controller::new(api, watcher::Config::default());
//!         ctx.run_controller("configmap", controller, reconcile, error_policy, Arc::new(ctx.clone())).await
//!     })
//! }
//! ```
//!
//! `shared/examples/toy_operator.rs` is a complete one with a CRD, status
//! conditions and Events; the crate's integration tests run it as a process.

pub mod admission;
pub mod backoff;
pub mod conditions;
pub mod config;
pub mod context;
pub mod controller;
pub mod crd;
pub mod cron;
pub mod debounce;
pub mod drop_oldest;
pub mod duration;
pub mod events;
pub mod from_specs;
pub mod health;
pub mod intern;
pub mod key_ref;
pub mod leader;
pub mod leadership;
pub mod memory;
pub mod metadata;
pub mod metrics;
pub mod operator;
pub mod paged_list;
pub mod per_object;
pub mod pods;
pub mod projection;
pub mod reconcile_error;
pub mod rest_client;
pub mod selector;
pub mod server;
pub mod status;
pub mod streaming_list;
pub mod telemetry;
pub mod uid;
pub mod workqueue;

pub use admission::{AdmissionGuard, AdmissionPolicyArgs};
pub use conditions::Conditions;
pub use config::{CommonArgs, ConfigError, WatchNamespaceArgs};
pub use context::Context;
pub use controller::{Controller, StoreChanges};
pub use events::Events;
pub use from_specs::FromSpecs;
pub use leadership::Leadership;
pub use metrics::Metrics;
pub use operator::Operator;
pub use reconcile_error::ReconcileError;
pub use status::apply_status;
