//! A real local Kubernetes control plane for Flotilla's tests, demo and
//! manual use — the idea of controller-runtime's envtest, built by our own
//! tooling because our build machines cannot download release binaries.
//!
//! * [`build`]: what the cluster runs, built here — etcd, kube-apiserver,
//!   kube-controller-manager, kube-scheduler, kubectl and helm from the Go
//!   module proxy into `~/.cache/flotilla/` (or `FLOTILLA_TEST_ASSETS`), the
//!   node's binaries, OCI images without Docker.
//! * [`cluster`]: running it — the control plane on loopback with free
//!   ports, a CA of its own, RBAC and working ServiceAccount tokens; the
//!   real node; kwok's simulated nodes; the processes.
//! * [`aws`]: moto's Route53 behind the Route53-faithful proxy.
//! * [`rbac`], [`admission_policy`], [`fixtures`], [`heap`]: what tests
//!   grant, install, build and count; [`under_test`]: the operator a test
//!   binary starts, and its CRDs.
//! * [`harness`] is what tests use:
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let env = flotilla_testenv::shared();          // started once per test binary
//! let client = env.client().await;               // admin client
//! let ns = env.namespace("my-test").await?;      // fresh namespace
//! let sa = env.service_account_client(&ns, "op").await?; // RBAC-limited client
//! # Ok(()) }
//! ```

pub mod admission_policy;
pub mod aws;
pub mod build;
pub mod cluster;
pub mod fixtures;
pub mod harness;
pub mod heap;
pub mod kubelet;
pub mod memory_limit;
pub mod rbac;
pub mod serving_pki;
pub mod under_test;

pub use build::assets::Assets;
pub use cluster::control_plane::{ControlPlane, ExtraFlags, Options};
pub use cluster::process::Lifetime;
pub use harness::{TestEnv, WaitTimeout, events_about, node, shared, wait_event, wait_for, wait_object};

// The heap module's own tests count through it.
#[cfg(test)]
#[global_allocator]
static HEAP: heap::Counting = heap::Counting;
