//! What the cluster runs, built here: the control plane's and the node's
//! binaries from the Go module proxy ([`assets`], [`node_assets`], pinned in
//! [`versions`]), the tools beside them ([`tools`]), and OCI images without
//! Docker ([`images`]).

pub mod assets;
pub mod images;
pub mod node_assets;
pub mod tools;
pub mod versions;
