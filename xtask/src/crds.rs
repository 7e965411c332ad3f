//! `cargo xtask crds [--check]`: the CRD files in `crds/`, generated from the
//! operators' Rust types. `--check` (run by `cargo xtask test`) fails when a
//! committed file differs from what the types generate.

use flotilla_shared::crd::{self, Mode};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::util::{root, say};

/// Every operator's CRDs. Adding an operator with CRDs: add its `crds()` here.
pub fn all() -> Vec<CustomResourceDefinition> {
    let mut crds = Vec::new();
    crds.extend(config_copier::crds());
    crds
}

pub fn run(check: bool) -> anyhow::Result<()> {
    let dir = root().join("crds");
    let crds = all();
    let mode = if check { Mode::Check } else { Mode::Write };
    let changed = crd::sync_dir(&dir, &crds, mode)?;
    if check {
        say(&format!("crds: {} file(s) in crds/ match the Rust types", crds.len()));
    } else if changed.is_empty() {
        say("crds: already up to date");
    } else {
        say(&format!("crds: wrote {}", changed.join(", ")));
    }
    Ok(())
}
