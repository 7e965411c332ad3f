//! A real local Kubernetes control plane for Flotilla's tests, demo and
//! manual use — the idea of controller-runtime's envtest, built by our own
//! tooling because our build machines cannot download release binaries.
//!
//! * [`assets`] builds etcd, kube-apiserver, kube-controller-manager,
//!   kube-scheduler, kubectl and helm from the Go module proxy into
//!   `~/.cache/flotilla/` (or uses `FLOTILLA_TEST_ASSETS`).
//! * [`control_plane`] starts them on loopback with free ports, a CA of its
//!   own, RBAC authorization and working ServiceAccount tokens.
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
pub mod assets;
pub mod control_plane;
pub mod fixtures;
pub mod harness;
pub mod heap;
pub mod images;
pub mod kubeconfig;
pub mod kwok;
pub mod moto;
pub mod node;
pub mod node_assets;
pub mod pki;
pub mod process;
pub mod rbac;
pub mod route53_proxy;
pub mod tools;
pub mod versions;

pub use assets::Assets;
pub use control_plane::{ControlPlane, ExtraFlags, Options};
pub use harness::{TestEnv, WaitTimeout, events_about, node, shared, wait_for, wait_object};
pub use process::Lifetime;

// The heap module's own tests count through it.
#[cfg(test)]
#[global_allocator]
static HEAP: heap::Counting = heap::Counting;
