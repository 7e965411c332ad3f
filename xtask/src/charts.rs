//! `cargo xtask charts [--check]`: builds the charts' local dependencies
//! (the flotilla-common library, then the umbrella's subcharts; see
//! `flotilla_e2e::build_chart_dependencies`) and writes
//! each chart's README.md values table with helm-docs and its
//! `values.schema.json` from `xtask/values-schema/` (see `values_schema.rs`)
//! and the generated Artifact Hub annotations of each Chart.yaml (see
//! `chart_annotations.rs`); `--check` fails when a committed README, schema
//! or Chart.yaml differs from what is generated.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::bail;
use flotilla_testenv::build::tools::HELM_DOCS;

use crate::util::{root, run_cmd, say};

pub fn charts_dir() -> PathBuf {
    root().join("charts")
}

fn helm_docs(dir: &Path) -> anyhow::Result<()> {
    let bin = HELM_DOCS.locate()?;
    run_cmd(Command::new(bin).args(["--chart-search-root", &dir.display().to_string(), "--log-level", "warning"]))
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// Writes (or, with `check`, compares) every chart's values.schema.json.
fn values_schemas(check: bool) -> anyhow::Result<()> {
    let mut differing = Vec::new();
    for (chart, text) in crate::values_schema::generate()? {
        let path = charts_dir().join(&chart).join("values.schema.json");
        if check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                differing.push(chart);
            }
        } else {
            std::fs::write(&path, text)?;
        }
    }
    if !differing.is_empty() {
        bail!(
            "values.schema.json differs from xtask/values-schema/ (edit the source there, run `cargo xtask charts` and commit): {}",
            differing.join(", ")
        );
    }
    Ok(())
}

pub fn run(check: bool) -> anyhow::Result<()> {
    values_schemas(check)?;
    crate::chart_annotations::run(check)?;
    flotilla_e2e::build_chart_dependencies()?;
    if !check {
        helm_docs(&charts_dir())?;
        say(
            "charts: values.schema.json and Chart.yaml annotations written, dependencies built, README.md values tables written",
        );
        return Ok(());
    }
    let tmp = std::env::temp_dir().join(format!("flotilla-charts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    copy_dir(&charts_dir(), &tmp)?;
    helm_docs(&tmp)?;
    let mut differing = Vec::new();
    for entry in std::fs::read_dir(&tmp)? {
        let name = entry?.file_name();
        let (fresh, committed) = (tmp.join(&name).join("README.md"), charts_dir().join(&name).join("README.md"));
        if fresh.is_file() && std::fs::read(&fresh).ok() != std::fs::read(&committed).ok() {
            differing.push(name.to_string_lossy().into_owned());
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    if !differing.is_empty() {
        bail!("chart READMEs differ from values.yaml (run `cargo xtask charts` and commit): {}", differing.join(", "));
    }
    say(
        "charts: README.md values tables match values.yaml, values.schema.json match xtask/values-schema/, Chart.yaml annotations match values.yaml, examples/ and CHANGELOG.md",
    );
    Ok(())
}
