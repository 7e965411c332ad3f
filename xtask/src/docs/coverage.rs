//! What the site must cover, checked against the sources of truth: every
//! flag an operator's `--help` prints is on its page, every chart value is
//! in the chart's reference page, and every alert a PrometheusRule links a
//! runbook for has that runbook's section (heading and anchor) on the
//! alerts page. A flag, value or alert added without its documentation
//! fails `cargo xtask test`.

use std::path::Path;

use anyhow::{Context, bail};

/// The page holding the runbooks the charts' `runbook_url`s link to.
pub const ALERTS_PAGE: &str = "operating/alerts.md";

/// The long flags a `--help` text defines: the option lines (`  --name`,
/// `  -n, --name`), not flags its prose mentions (service-dns's help names
/// external-dns's `--txt-owner-id`). `--help`/`--version` are clap's own.
pub fn flags(help: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in help.lines() {
        let t = line.trim_start();
        let t = match t.split_once(", ") {
            Some((short, rest)) if short.len() == 2 && short.starts_with('-') => rest,
            _ => t,
        };
        let Some(rest) = t.strip_prefix("--") else { continue };
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
        let flag = format!("--{name}");
        if !name.is_empty() && flag != "--help" && flag != "--version" && !out.contains(&flag) {
            out.push(flag);
        }
    }
    out
}

/// Whether `text` names `flag` as a whole (`--foo` is not `--foo-bar`).
pub fn mentions_flag(text: &str, flag: &str) -> bool {
    text.match_indices(flag).any(|(i, _)| {
        let after = text[i + flag.len()..].chars().next();
        !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

/// The flags of `help` that `page` does not mention.
pub fn undocumented_flags(help: &str, page: &str) -> Vec<String> {
    flags(help).into_iter().filter(|f| !mentions_flag(page, f)).collect()
}

/// The value paths of a values.yaml as helm-docs lists them: leaves and
/// empty maps/lists, dotted.
pub fn value_paths(values_yaml: &str) -> anyhow::Result<Vec<String>> {
    let v: serde_json::Value = serde_saphyr::from_str(values_yaml).context("parsing values.yaml")?;
    let mut out = Vec::new();
    fn walk(v: &serde_json::Value, path: String, out: &mut Vec<String>) {
        match v.as_object() {
            Some(m) if !m.is_empty() => {
                for (k, child) in m {
                    let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    walk(child, p, out);
                }
            }
            _ => out.push(path),
        }
    }
    walk(&v, String::new(), &mut out);
    Ok(out)
}

/// Whether a helm-docs table lists value `path`: its own row, or the row
/// of a map above it (helm-docs documents `resources` as a whole, its
/// default showing every key below).
pub fn value_documented(page: &str, path: &str) -> bool {
    let mut p = path;
    loop {
        if page.contains(&format!("| {p} |")) {
            return true;
        }
        match p.rfind('.') {
            Some(i) => p = &p[..i],
            None => return false,
        }
    }
}

/// The alerts the chart templates link runbooks for
/// (`include "flotilla.runbook" (dict … "alert" "<Name>")`).
pub fn runbook_alerts(charts_dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for chart in std::fs::read_dir(charts_dir).with_context(|| format!("reading {}", charts_dir.display()))? {
        let templates = chart?.path().join("templates");
        let Ok(entries) = std::fs::read_dir(&templates) else { continue };
        for f in entries {
            let text = std::fs::read_to_string(f?.path())?;
            for line in text.lines().filter(|l| l.contains("include \"flotilla.runbook\"")) {
                let name = line.split("\"alert\" \"").nth(1).and_then(|r| r.split('"').next()).with_context(|| {
                    format!("{}: a runbook link without an alert name: {line}", templates.display())
                })?;
                out.push(name.to_string());
            }
        }
    }
    out.sort();
    out.dedup();
    if out.is_empty() {
        bail!("no runbook_url in {}: the check would check nothing", charts_dir.display());
    }
    Ok(out)
}

/// The alerts whose runbook is missing: no `## <Alert>` heading on the
/// alerts page, or (when the built page is given) no `id="<alert>"` anchor
/// in its HTML, which is what `runbook_url`'s `#<alert>` points at.
pub fn missing_runbooks(alerts: &[String], page_md: &str, page_html: Option<&str>) -> Vec<String> {
    alerts
        .iter()
        .filter(|a| {
            let heading = page_md.lines().any(|l| l.trim_end() == format!("## {a}"));
            let anchor = page_html.is_none_or(|h| h.contains(&format!("id=\"{}\"", a.to_lowercase())));
            !(heading && anchor)
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const HELP: &str = "Usage: op [OPTIONS]\n\nOptions:\n      --metrics-addr <METRICS_ADDR>  where [env: METRICS_ADDR=] [default: 0.0.0.0:8080]\n      \
                        --leader-elect  elect (see --metrics-addr)\n          like external-dns's --txt-owner-id\n  -h, --help     Print help\n  -V, --version  Print version\n";

    #[test]
    fn flags_are_read_from_help_and_checked_whole() {
        assert_eq!(flags(HELP), vec!["--metrics-addr", "--leader-elect"]);
        assert_eq!(undocumented_flags(HELP, "`--metrics-addr` and `--leader-elect-x`"), vec!["--leader-elect"]);
        assert!(undocumented_flags(HELP, "| `--metrics-addr` | | `--leader-elect` |").is_empty());
    }

    #[test]
    fn value_paths_are_dotted_leaves() {
        let paths = value_paths("image:\n  repository: r\n  tag: \"\"\npodAnnotations: {}\nlist: [1]\n").unwrap();
        assert_eq!(paths, vec!["image.repository", "image.tag", "list", "podAnnotations"]);
    }

    #[test]
    fn a_value_is_documented_by_its_row_or_a_parent_row() {
        let page = "| key | type |\n| resources | object | `{\"limits\":{}}` |\n| image.tag | string |\n";
        assert!(value_documented(page, "resources.limits.memory"));
        assert!(value_documented(page, "image.tag"));
        assert!(!value_documented(page, "image.repository"));
        assert!(!value_documented(page, "resourcesX.a"));
    }

    #[test]
    fn a_runbook_needs_its_heading_and_its_anchor() {
        let alerts = vec!["FlotillaA".to_string(), "FlotillaB".to_string()];
        let md = "# Alerts\n\n## FlotillaA\n\ntext\n\n### FlotillaB\n";
        assert_eq!(missing_runbooks(&alerts, md, None), vec!["FlotillaB"]);
        assert_eq!(missing_runbooks(&alerts, md, Some("<h2 id=\"other\">")), vec!["FlotillaA", "FlotillaB"]);
    }

    /// The charts link runbooks, and each has its section on the alerts page.
    #[test]
    fn every_chart_runbook_has_its_section() {
        let root = crate::util::root();
        let alerts = runbook_alerts(&root.join("charts")).unwrap();
        assert!(alerts.contains(&"FlotillaOperatorDown".to_string()), "{alerts:?}");
        let page = std::fs::read_to_string(root.join("docs").join(ALERTS_PAGE)).unwrap();
        assert_eq!(missing_runbooks(&alerts, &page, None), Vec::<String>::new());
    }
}
