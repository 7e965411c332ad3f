//! `cargo xtask crds [--check]`: the CRD files, generated from the operators'
//! Rust types, in `crds/` and in the chart of the operator that owns them
//! (`charts/<operator>/files/crds/`, byte-identical; the chart renders them
//! as templates, see `flotilla-common/templates/_crds.tpl`). `--check` (run by `cargo xtask
//! test`) fails when a committed file differs from what the types generate.

use flotilla_shared::crd::{self, Mode};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::util::{root, say};

/// Where a chart keeps its CRD files: not Helm's `crds/` (installed once,
/// never upgraded) but files its templates render.
pub const CHART_CRDS: &str = "files/crds";

/// Every operator's CRDs, by operator. Adding an operator with CRDs: add its
/// `crds()` here.
pub fn by_operator() -> Vec<(&'static str, Vec<CustomResourceDefinition>)> {
    vec![
        ("config-copier", config_copier::crds()),
        ("pod-alert", pod_alert::crds()),
        ("pod-debugger", pod_debugger::crds()),
        ("load-tester", load_tester::crds()),
    ]
}

pub fn run(check: bool) -> anyhow::Result<()> {
    let mode = if check { Mode::Check } else { Mode::Write };
    let owned = by_operator();
    let all: Vec<CustomResourceDefinition> = owned.iter().flat_map(|(_, c)| c.iter().cloned()).collect();
    let mut changed = crd::sync_dir(&root().join("crds"), &all, mode)?;
    for (operator, crds) in &owned {
        let dir = root().join("charts").join(operator).join(CHART_CRDS);
        changed.extend(
            crd::sync_dir(&dir, crds, mode)?.into_iter().map(|f| format!("charts/{operator}/{CHART_CRDS}/{f}")),
        );
    }
    if check {
        say(&format!("crds: {} CRD(s) in crds/ and the charts match the Rust types", all.len()));
    } else if changed.is_empty() {
        say("crds: already up to date");
    } else {
        say(&format!("crds: wrote {}", changed.join(", ")));
    }
    Ok(())
}
