//! `CopyRequest`: a pull, with consent on both sides. A request in a
//! target namespace names a source in another; the source's owner allows
//! namespaces by the annotation [`ALLOW_PULL_TO`]. Same shape as the
//! CopyRule controller, one copy per request:
//!
//! | module | concern |
//! | --- | --- |
//! | `controller` | watches (requests; the copies they own; every source, metadata only, waking the requests that name it), finalizer, each namespace's queue (`--max-requests-per-namespace`), and the reconcile: read → plan → apply → report |
//! | [`marks`] | the copy's ownership marks and manifest, and what a read copy says (pure) |
//! | [`plan`] | whether the source allows the namespace, whether the request is within its namespace's limit, and what to do (pure) |
//! | `apply` | the writes, each proving ownership (create fails rather than overwrite; patch and delete carry the version seen) |
//! | `report` | status (server-side apply) and Events |

mod apply;
mod controller;
pub mod marks;
pub mod plan;
mod read;
mod report;

pub use controller::{Data, FINALIZER, run};

/// The annotation by which a source's owner allows copies into namespaces:
/// comma-separated namespace globs.
pub const ALLOW_PULL_TO: &str = "flotilla.dev/allow-pull-to";
