//! Every operator is a whole product — crate, chart, image target, umbrella
//! dependency — and the packaging files say what they must. No cluster needed.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flotilla_e2e::{UMBRELLA, charts_dir, operators, root};
use serde_json::Value;

fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml(path: &std::path::Path) -> Value {
    serde_saphyr::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn bake() -> Value {
    let body: hcl::Body = hcl::from_str(&read(&root().join("docker-bake.hcl"))).expect("docker-bake.hcl parses as HCL");
    // Blocks as JSON: {"target": {"name": {...}}, "group": ..., "variable": ...}
    serde_json::to_value(hcl::from_body::<Value>(body).expect("bake file as a value")).unwrap()
}

#[test]
fn there_are_operators() {
    assert!(!operators().unwrap().is_empty());
}

#[test]
fn every_operator_has_a_chart_an_image_target_and_an_umbrella_entry() {
    let bake = bake();
    let umbrella = yaml(&charts_dir().join(UMBRELLA).join("Chart.yaml"));
    let umbrella_values = yaml(&charts_dir().join(UMBRELLA).join("values.yaml"));
    let default_group = bake["group"]["default"]["targets"].as_array().cloned().unwrap_or_default();
    for op in operators().unwrap() {
        let chart = yaml(&charts_dir().join(&op).join("Chart.yaml"));
        assert_eq!(chart["name"], Value::from(op.clone()), "charts/{op}/Chart.yaml");
        for f in ["values.yaml", "values.schema.json", "templates/NOTES.txt", "README.md"] {
            assert!(charts_dir().join(&op).join(f).is_file(), "charts/{op}/{f} is missing");
        }

        let target = &bake["target"][&op];
        assert!(target.is_object(), "docker-bake.hcl has no target {op:?}");
        assert_eq!(target["inherits"], serde_json::json!(["_operator"]), "target {op} inherits the shared settings");
        assert_eq!(target["args"]["OPERATOR"], Value::from(op.clone()), "target {op} builds {op}");
        let tags = target["tags"].to_string();
        assert!(tags.contains(&format!("flotilla-{op}:")), "target {op} tags flotilla-{op}: {tags}");
        assert!(default_group.contains(&Value::from(op.clone())), "group default lacks {op}");

        let dep = umbrella["dependencies"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["name"] == op.as_str()).cloned())
            .unwrap_or_else(|| panic!("charts/{UMBRELLA} has no dependency {op}"));
        assert_eq!(dep["repository"], Value::from(format!("file://../{op}")));
        assert_eq!(dep["condition"], Value::from(format!("{op}.enabled")));
        assert!(umbrella_values[&op]["enabled"].is_boolean(), "charts/{UMBRELLA}/values.yaml lacks {op}.enabled");
    }
}

#[test]
fn bake_file_builds_both_platforms_with_registry_and_tag_variables() {
    let bake = bake();
    let common = &bake["target"]["_operator"];
    assert_eq!(common["platforms"], serde_json::json!(["linux/amd64", "linux/arm64"]));
    assert_eq!(common["dockerfile"], "Dockerfile");
    // One GitHub Actions cache scope per image, or each export overwrites
    // the previous image's.
    for op in operators().unwrap().into_iter().chain(["loadgen".to_string()]) {
        let target = &bake["target"][&op];
        assert_eq!(target["cache-from"], serde_json::json!([format!("type=gha,scope={op}")]), "{op} cache-from");
        assert_eq!(target["cache-to"], serde_json::json!([format!("type=gha,scope={op},mode=max")]), "{op} cache-to");
    }
    for v in ["REGISTRY", "TAG"] {
        assert!(bake["variable"][v]["default"].is_string(), "variable {v}");
    }
}

#[test]
fn dockerfile_runs_as_non_root_on_distroless_with_oci_labels() {
    let d = read(&root().join("Dockerfile"));
    assert!(d.contains("FROM gcr.io/distroless/cc-debian12:nonroot"), "distroless nonroot runtime");
    assert!(d.contains("USER 65532:65532"));
    assert!(d.contains("ENTRYPOINT [\"/usr/local/bin/operator\"]"));
    for label in ["source", "version", "licenses", "revision", "title"] {
        assert!(d.contains(&format!("org.opencontainers.image.{label}=")), "OCI label {label}");
    }
    assert!(d.contains("--mount=type=cache"), "dependency caching");
}

#[test]
fn dockerfile_cross_compiles_instead_of_emulating() {
    let d = read(&root().join("Dockerfile"));
    let builder = d.lines().find(|l| l.starts_with("FROM ") && l.ends_with(" AS builder")).expect("a builder stage");
    assert!(builder.starts_with("FROM --platform=$BUILDPLATFORM "), "the builder runs natively: {builder}");
    for (arch, triple) in [("amd64", "x86_64-unknown-linux-gnu"), ("arm64", "aarch64-unknown-linux-gnu")] {
        assert!(d.contains(&format!("{arch}) triple={triple};")), "TARGETARCH {arch} builds {triple}");
    }
    assert!(d.contains("--target \"${target}\""), "cargo builds for the target platform");
    assert!(d.contains("id=cargo-target-${TARGETARCH}"), "one cargo target cache per platform");
    // The final stage runs nothing, so no platform needs emulation at all.
    let last_stage = d.rsplit("\nFROM ").next().unwrap();
    assert!(!last_stage.lines().any(|l| l.starts_with("RUN ")), "the runtime stage must not RUN (it would need QEMU)");
}

#[test]
fn chart_crds_are_byte_identical_to_the_generated_ones() {
    let top = root().join("crds");
    let mut seen = std::collections::BTreeMap::<String, Vec<String>>::new();
    for op in operators().unwrap() {
        assert!(
            !charts_dir().join(&op).join("crds").exists(),
            "charts/{op}/crds/ is Helm's install-once directory: CRDs live in files/crds/ and are templated"
        );
        let dir = charts_dir().join(&op).join("files").join("crds");
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".yaml") {
                continue;
            }
            let committed = top.join(&name);
            assert!(committed.is_file(), "charts/{op}/files/crds/{name} has no counterpart in crds/");
            assert_eq!(
                std::fs::read(e.path()).unwrap(),
                std::fs::read(&committed).unwrap(),
                "charts/{op}/files/crds/{name} differs from crds/{name} (run `cargo xtask crds`)"
            );
            seen.entry(name).or_default().push(op.clone());
        }
    }
    for e in std::fs::read_dir(&top).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".yaml") {
            assert_eq!(
                seen.get(&name).map(Vec::len),
                Some(1),
                "crds/{name} must ship in exactly one operator chart: {seen:?}"
            );
        }
    }
}

/// Every action in every workflow is pinned by commit SHA (a tag can be
/// moved to other code; a SHA cannot), with the version it stands for in a
/// comment so that updates stay readable.
#[test]
fn workflow_actions_are_pinned_by_commit_sha() {
    let dir = root().join(".github").join("workflows");
    let mut seen = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let text = read(&e.path());
        for (i, line) in text.lines().enumerate() {
            let Some(uses) = line.trim_start().trim_start_matches("- ").strip_prefix("uses: ") else { continue };
            seen += 1;
            let (reference, comment) = uses.split_once(" # ").unwrap_or((uses, ""));
            let sha = reference.rsplit_once('@').map(|(_, r)| r).unwrap_or("");
            let where_ = format!("{}:{}: {uses}", e.path().display(), i + 1);
            assert!(sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit()), "not pinned by SHA: {where_}");
            assert!(!comment.trim().is_empty(), "say which version the SHA is: {where_}");
        }
    }
    assert!(seen > 10, "found only {seen} `uses:` lines");
}
