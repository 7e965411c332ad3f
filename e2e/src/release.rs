//! The release's chart packaging, shared by `cargo xtask package-charts`
//! (which `release.yml` runs on a tag) and the test that runs it for a fake
//! tag. One version source: the workspace version in `Cargo.toml`. A tag
//! `vX.Y.Z` must name it; every chart's `version` and `appVersion`, and the
//! versions the charts depend on each other by, become `X.Y.Z`; the images
//! are tagged `X.Y.Z` (`release.yml` passes it to `docker buildx bake` as
//! `TAG`), which is what the charts render by default (`appVersion`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::{UMBRELLA, charts_dir, operators, root};

/// `X.Y.Z` of tag `vX.Y.Z`, when it is the workspace version.
pub fn release_version(tag: &str) -> anyhow::Result<String> {
    let version = tag.strip_prefix('v').with_context(|| format!("tag {tag:?} does not start with v"))?;
    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).context("reading Cargo.toml")?;
    let workspace = cargo
        .lines()
        .skip_while(|l| l.trim() != "[workspace.package]")
        .find_map(|l| l.trim().strip_prefix("version = ").map(|v| v.trim_matches('"').to_string()))
        .context("no version in [workspace.package] of Cargo.toml")?;
    if version != workspace {
        bail!("tag {tag} does not name the workspace version {workspace} (Cargo.toml): bump it first");
    }
    Ok(version.to_string())
}

/// `Chart.yaml` with every `version:` (the chart's and its dependencies')
/// and `appVersion:` set to `version`, and the images its Artifact Hub
/// annotations name (tagged with the old appVersion) tagged `version` too.
/// Other `version:` lines (a CRD's `v1alpha1` in `artifacthub.io/crds`) stay.
pub fn versioned_chart_yaml(text: &str, version: &str) -> String {
    let old_app = text
        .lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"').to_string())
        .filter(|v| !v.is_empty());
    let mut out = String::with_capacity(text.len());
    // The top-level key the line is under.
    let mut section = "";
    for line in text.lines() {
        let indent = &line[..line.len() - line.trim_start().len()];
        let trimmed = line.trim_start();
        if indent.is_empty() && !trimmed.is_empty() && !trimmed.starts_with('#') {
            section = trimmed.split(':').next().unwrap_or_default();
        }
        let dependency = section == "dependencies";
        if (indent.is_empty() || dependency) && (trimmed.starts_with("version:") || trimmed.starts_with("- version:")) {
            let dash = if trimmed.starts_with("- ") { "- " } else { "" };
            out.push_str(&format!("{indent}{dash}version: {version}"));
        } else if indent.is_empty() && trimmed.starts_with("appVersion:") {
            out.push_str(&format!("{indent}appVersion: \"{version}\""));
        } else if let (true, Some(old)) = (section == "annotations", old_app.as_deref())
            && let Some(image) = trimmed.trim_start_matches("- ").strip_prefix("image: ")
            && let Some(name) = image.strip_suffix(&format!(":{old}"))
        {
            out.push_str(&line.replace(image, &format!("{name}:{version}")));
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

fn copy_chart(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        // Built by `helm dependency build` from the versioned copies.
        if name == "charts" || name == "Chart.lock" {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        if entry.file_type()?.is_dir() {
            copy_chart(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).with_context(|| format!("copying {}", src.display()))?;
        }
    }
    Ok(())
}

fn helm(helm: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(helm).args(args).output().with_context(|| format!("running {}", helm.display()))?;
    if !out.status.success() {
        bail!("helm {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Copies every chart to `out/src`, versions it `version`, and packages
/// the operator charts and the umbrella into `out` (the library chart
/// travels inside them). Returns the packages, umbrella last.
pub fn package_charts(helm_bin: &Path, version: &str, out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let src = out.join("src");
    let _ = std::fs::remove_dir_all(&src);
    let mut charts = vec!["flotilla-common".to_string()];
    charts.extend(operators()?);
    charts.push(UMBRELLA.to_string());
    for c in &charts {
        let dir = src.join(c);
        copy_chart(&charts_dir().join(c), &dir)?;
        let yaml = dir.join("Chart.yaml");
        let text = std::fs::read_to_string(&yaml).with_context(|| format!("reading {}", yaml.display()))?;
        std::fs::write(&yaml, versioned_chart_yaml(&text, version))?;
    }
    let mut packages = Vec::new();
    let dest = out.display().to_string();
    for c in charts.iter().skip(1) {
        let dir = src.join(c).display().to_string();
        helm(helm_bin, &["dependency", "build", "--skip-refresh", &dir])?;
        helm(helm_bin, &["package", &dir, "--destination", &dest])?;
        packages.push(out.join(format!("{c}-{version}.tgz")));
    }
    for p in &packages {
        if !p.is_file() {
            bail!("helm package did not write {}", p.display());
        }
    }
    Ok(packages)
}
