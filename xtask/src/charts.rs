//! `cargo xtask charts [--check]`: builds the charts' local dependencies
//! (the flotilla-common library, then the umbrella's subcharts; see
//! `flotilla_e2e::build_chart_dependencies`) and writes
//! each chart's README.md values table with helm-docs; `--check` fails when
//! a committed README differs from what helm-docs generates.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::bail;
use flotilla_testenv::tools::HELM_DOCS;

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

pub fn run(check: bool) -> anyhow::Result<()> {
    flotilla_e2e::build_chart_dependencies()?;
    if !check {
        helm_docs(&charts_dir())?;
        say("charts: dependencies built, README.md values tables written");
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
    say("charts: README.md values tables match values.yaml");
    Ok(())
}
