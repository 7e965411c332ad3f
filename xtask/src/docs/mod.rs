//! `cargo xtask docs [--check|--serve]`: the documentation site (MkDocs +
//! Material, `mkdocs.yml`, pages in `docs/`).
//!
//! - `cargo xtask docs` writes the generated pages (`docs/reference/`: one
//!   per CRD kind from `crds/`, one per chart from its helm-docs README),
//!   installs the pinned tools if needed ([`venv`]) and builds the site into
//!   `target/site` with `mkdocs build --strict` (a broken link or a page
//!   missing from the nav fails).
//! - `--check` regenerates the generated pages in memory and fails when a
//!   committed one differs; it needs no venv.
//! - `--serve` serves the site locally (`mkdocs serve`), rebuilding on edits.
//!
//! [`test`] is `cargo xtask test`'s step: `--check`, the strict build, and
//! the coverage checks of [`coverage`].

pub mod coverage;
pub mod reference;
pub mod venv;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::util::{root, run_cmd, say};

/// Where `cargo xtask docs` builds the site (also `mkdocs.yml`'s `site_dir`).
pub const SITE_DIR: &str = "target/site";

/// Where the flags every operator shares (the runtime's) are documented.
pub const COMMON_FLAGS_PAGE: &str = "install.md";

/// Generated page (path under `docs/`) → content.
pub fn generated(root: &Path) -> anyhow::Result<BTreeMap<PathBuf, String>> {
    let mut out = BTreeMap::new();
    for (file, page) in reference::pages(&root.join("crds"))? {
        out.insert(Path::new("reference").join(file), page);
    }
    for (chart, readme) in chart_readmes(root)? {
        let page = format!(
            "<!-- Generated from charts/{chart}/README.md (helm-docs, `cargo xtask charts`) by `cargo xtask docs`; do not edit. -->\n\n{readme}"
        );
        out.insert(Path::new("reference").join("charts").join(format!("{chart}.md")), page);
    }
    Ok(out)
}

/// Every chart's helm-docs README (the values tables), by chart.
fn chart_readmes(root: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root.join("charts")).context("reading charts/")? {
        let dir = entry?.path();
        let readme = dir.join("README.md");
        if !dir.join("values.yaml").is_file() || !readme.is_file() {
            continue;
        }
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        out.push((name, std::fs::read_to_string(&readme).with_context(|| format!("reading {}", readme.display()))?));
    }
    out.sort();
    Ok(out)
}

/// The generated pages whose committed copy differs (or is missing).
pub fn stale_reference(root: &Path) -> anyhow::Result<Vec<String>> {
    let docs = root.join("docs");
    Ok(generated(root)?
        .into_iter()
        .filter(|(path, content)| std::fs::read_to_string(docs.join(path)).ok().as_deref() != Some(content.as_str()))
        .map(|(path, _)| format!("docs/{}", path.display()))
        .collect())
}

fn write_generated(root: &Path) -> anyhow::Result<()> {
    let docs = root.join("docs");
    let stale = stale_reference(root)?;
    for (path, content) in generated(root)? {
        let file = docs.join(&path);
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&file, content).with_context(|| format!("writing {}", file.display()))?;
    }
    if stale.is_empty() {
        say("docs: generated reference pages already up to date");
    } else {
        say(&format!("docs: wrote {}", stale.join(", ")));
    }
    Ok(())
}

/// `cargo xtask docs`.
pub fn run(check: bool, serve: bool) -> anyhow::Result<()> {
    let root = root();
    if check {
        return check_generated(&root);
    }
    say("docs: generating the API and chart reference pages (docs/reference/)");
    write_generated(&root)?;
    say("docs: the site's tools (docs/requirements.txt)");
    let mkdocs = venv::ensure(&root)?;
    if serve {
        say("docs: serving the site (mkdocs serve; Ctrl-C to stop)");
        return run_cmd(Command::new(&mkdocs).args(["serve", "--strict"]));
    }
    build(&mkdocs)
}

fn check_generated(root: &Path) -> anyhow::Result<()> {
    let stale = stale_reference(root)?;
    if !stale.is_empty() {
        bail!("generated documentation pages are stale (run `cargo xtask docs` and commit): {}", stale.join(", "));
    }
    say("docs: the generated reference pages match crds/ and the charts' READMEs");
    Ok(())
}

fn build(mkdocs: &Path) -> anyhow::Result<()> {
    say(&format!("docs: mkdocs build --strict into {SITE_DIR}"));
    run_cmd(Command::new(mkdocs).args(["build", "--strict", "--site-dir", SITE_DIR]))?;
    say(&format!("docs: site built: {}", root().join(SITE_DIR).join("index.html").display()));
    Ok(())
}

/// `cargo xtask test`'s step: the generated pages are fresh, the site
/// builds strictly, and it covers every flag, chart value and runbook.
pub fn test() -> anyhow::Result<()> {
    let root = root();
    check_generated(&root)?;
    let mkdocs = venv::ensure(&root)?;
    build(&mkdocs)?;
    let docs = root.join("docs");
    let mut problems = Vec::new();

    let alerts = coverage::runbook_alerts(&root.join("charts"))?;
    let md = std::fs::read_to_string(docs.join(coverage::ALERTS_PAGE))?;
    let html_path = root.join(SITE_DIR).join(coverage::ALERTS_PAGE.trim_end_matches(".md")).join("index.html");
    let html = std::fs::read_to_string(&html_path).with_context(|| format!("reading {}", html_path.display()))?;
    for a in coverage::missing_runbooks(&alerts, &md, Some(&html)) {
        problems.push(format!(
            "alert {a}: no runbook section `## {a}` (anchor #{}) in docs/{}",
            a.to_lowercase(),
            coverage::ALERTS_PAGE
        ));
    }
    say(&format!("docs: {} runbook(s) checked", alerts.len()));

    let bin_dir = crate::dist::build_images_binaries(crate::dist::Profile::Dev)?;
    for op in crate::util::operators()? {
        let out = Command::new(bin_dir.join(&op)).arg("--help").output().with_context(|| format!("{op} --help"))?;
        if !out.status.success() {
            bail!("{op} --help failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let help = String::from_utf8_lossy(&out.stdout);
        // The operator's own page, or the page of the flags every operator
        // shares (the runtime's).
        let mut page = String::new();
        for p in [format!("operators/{op}.md"), COMMON_FLAGS_PAGE.to_string()] {
            page.push_str(&std::fs::read_to_string(docs.join(&p)).with_context(|| format!("reading docs/{p}"))?);
        }
        let flags = coverage::flags(&help);
        if flags.is_empty() {
            bail!("{op} --help lists no flags: the check would check nothing");
        }
        for f in coverage::undocumented_flags(&help, &page) {
            problems.push(format!("{op}: flag {f} is on neither docs/operators/{op}.md nor docs/{COMMON_FLAGS_PAGE}"));
        }
        say(&format!("docs: {op}: {} flag(s) checked", flags.len()));
    }

    for (chart, _) in chart_readmes(&root)? {
        let values = std::fs::read_to_string(root.join("charts").join(&chart).join("values.yaml"))?;
        let page = std::fs::read_to_string(docs.join("reference").join("charts").join(format!("{chart}.md")))?;
        let paths = coverage::value_paths(&values)?;
        for p in &paths {
            if !coverage::value_documented(&page, p) {
                problems.push(format!("chart {chart}: value {p} is not in docs/reference/charts/{chart}.md"));
            }
        }
        say(&format!("docs: chart {chart}: {} value(s) checked", paths.len()));
    }

    if !problems.is_empty() {
        bail!("the site misses {} thing(s):\n  {}", problems.len(), problems.join("\n  "));
    }
    Ok(())
}
