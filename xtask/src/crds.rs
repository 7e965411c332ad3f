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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const READY_STATUS: &str = r#".status.conditions[?(@.type=="Ready")].status"#;
    const READY_MESSAGE: &str = r#".status.conditions[?(@.type=="Ready")].message"#;

    /// The short names of the built-in kinds (`kubectl api-resources`,
    /// Kubernetes 1.33), which a CRD's must not shadow.
    const BUILT_IN_SHORT_NAMES: &[&str] = &[
        "cs",
        "cm",
        "ep",
        "ev",
        "limits",
        "ns",
        "no",
        "pvc",
        "pv",
        "po",
        "rc",
        "quota",
        "sa",
        "svc",
        "mwc",
        "vwc",
        "vap",
        "vapb",
        "crd",
        "crds",
        "apiservice",
        "apiservices",
        "ds",
        "deploy",
        "rs",
        "sts",
        "hpa",
        "cj",
        "csr",
        "ing",
        "ingclass",
        "netpol",
        "pdb",
        "pc",
        "sc",
        "csinodes",
        "eps",
        "rac",
        "rcc",
        "vac",
        "ipa",
        "sc",
    ];

    #[test]
    fn every_kind_shows_ready_and_its_message_and_has_a_short_distinct_short_name() {
        let all: Vec<CustomResourceDefinition> = by_operator().into_iter().flat_map(|(_, c)| c).collect();
        assert!(all.len() >= 5, "every Flotilla kind: {}", all.len());
        let mut seen = std::collections::BTreeSet::new();
        for crd in &all {
            let names = &crd.spec.names;
            let kind = &names.kind;
            let version = &crd.spec.versions[0];
            let columns = version.additional_printer_columns.clone().unwrap_or_default();
            let ready = columns.iter().find(|c| c.name == "Ready").unwrap_or_else(|| panic!("{kind}: no Ready"));
            assert_eq!((ready.json_path.as_str(), ready.priority), (READY_STATUS, None), "{kind}");
            let message = columns.iter().find(|c| c.name == "Message").unwrap_or_else(|| panic!("{kind}: no Message"));
            assert_eq!(
                (message.json_path.as_str(), message.priority),
                (READY_MESSAGE, Some(1)),
                "{kind}: -o wide only"
            );
            assert_eq!(columns.last().map(|c| c.name.as_str()), Some("Age"), "{kind}");
            let short = names.short_names.clone().unwrap_or_default();
            let first = short.first().unwrap_or_else(|| panic!("{kind}: no short name"));
            assert!(first.len() <= 2, "{kind}: {first} is not short");
            for s in &short {
                assert_ne!(Some(s), names.singular.as_ref(), "{kind}: a short name equal to the singular");
                assert!(!BUILT_IN_SHORT_NAMES.contains(&s.as_str()), "{kind}: {s} shadows a built-in kind");
                assert!(seen.insert(s.clone()), "{kind}: {s} is another Flotilla kind's too");
            }
        }
    }
}
