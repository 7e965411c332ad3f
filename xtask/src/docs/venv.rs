//! The site's tools (MkDocs + Material), from PyPI into a venv under the
//! cache the other tools use: `~/.cache/flotilla/mkdocs-<version>/`, at the
//! versions `docs/requirements.txt` pins, with the machine's pip
//! configuration (index, proxy, certificates: whatever pip is told). Cached:
//! reinstalled only when the requirements file changes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

use crate::util::progress;

/// The pinned requirements, relative to the workspace root.
pub const REQUIREMENTS: &str = "docs/requirements.txt";

/// The mkdocs version the requirements pin (names the venv directory).
pub fn mkdocs_version(requirements: &str) -> anyhow::Result<String> {
    requirements
        .lines()
        .find_map(|l| l.trim().strip_prefix("mkdocs=="))
        .map(|v| v.trim().to_string())
        .with_context(|| format!("{REQUIREMENTS} pins no `mkdocs==<version>`"))
}

fn venv_dir(version: &str) -> PathBuf {
    flotilla_testenv::build::versions::cache_root().join(format!("mkdocs-{version}"))
}

/// The `mkdocs` executable, installing it first unless the venv holds
/// exactly the pinned requirements (idempotent).
pub fn ensure(root: &Path) -> anyhow::Result<PathBuf> {
    let reqs_path = root.join(REQUIREMENTS);
    let reqs = std::fs::read_to_string(&reqs_path).with_context(|| format!("reading {}", reqs_path.display()))?;
    let version = mkdocs_version(&reqs)?;
    let dir = venv_dir(&version);
    let bin = dir.join("bin").join("mkdocs");
    let stamp = dir.join(".installed");
    if bin.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == reqs) {
        progress(&format!("mkdocs {version}: {} (cached)", bin.display()));
        return Ok(bin);
    }
    let started = Instant::now();
    progress(&format!("mkdocs {version}: creating a venv at {}", dir.display()));
    let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    run(Command::new(&python).args(["-m", "venv", "--clear"]).arg(&dir), "python3 -m venv")
        .context("the documentation tools need Python 3 with venv (Debian: `apt-get install python3-venv`)")?;
    progress(&format!("mkdocs {version}: pip install -r {REQUIREMENTS} (a few seconds)"));
    run(
        Command::new(dir.join("bin").join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&reqs_path),
        "pip install -r docs/requirements.txt",
    )
    .context(
        "pip could not install MkDocs from PyPI: the site's tools come from PyPI through this machine's pip \
         configuration. Give pip a way there (network access, a proxy via HTTPS_PROXY, or an index mirror via \
         PIP_INDEX_URL or pip.conf), or point PIP_FIND_LINKS at a directory holding the wheels docs/requirements.txt pins",
    )?;
    std::fs::write(&stamp, &reqs).with_context(|| format!("writing {}", stamp.display()))?;
    progress(&format!("mkdocs {version}: installed in {:.0?}", started.elapsed()));
    Ok(bin)
}

fn run(cmd: &mut Command, what: &str) -> anyhow::Result<()> {
    let out = cmd.output().with_context(|| format!("{what}: could not start it"))?;
    if !out.status.success() {
        bail!("{what} exited with {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_committed_requirements_pin_mkdocs_and_every_package() {
        let reqs = std::fs::read_to_string(crate::util::root().join(REQUIREMENTS)).unwrap();
        assert!(!mkdocs_version(&reqs).unwrap().is_empty());
        for line in reqs.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            assert!(line.contains("=="), "{REQUIREMENTS}: `{line}` is not pinned");
        }
        assert!(mkdocs_version("mkdocs-material==9\n").is_err());
    }
}
