//! What the charts' opt-in PrometheusRule and Grafana dashboard read: the
//! PromQL of every alert and panel, and the metric names in it — checked
//! against the code (`tests/charts.rs`) and against what a running
//! operator exports (`tests/rbac.rs`, after every operator's scenario).

use std::collections::BTreeSet;

use anyhow::Context;

use crate::{build_chart_dependencies, charts_dir, helm_ok, yaml_documents};

/// Values a chart needs to render at all (service-dns: a hosted zone).
pub fn render_values(op: &str) -> Vec<&'static str> {
    match op {
        "service-dns" => vec!["--set", "route53.hostedZoneId=Z0123456789ABC"],
        _ => vec![],
    }
}

/// Every PromQL expression of `op`'s chart: its alerts' and its dashboard
/// panels' (both rendered with their opt-in values).
pub fn promql(op: &str) -> anyhow::Result<Vec<String>> {
    build_chart_dependencies()?;
    let chart = charts_dir().join(op).display().to_string();
    let mut args = vec![
        "template",
        "rel",
        &chart,
        "--namespace",
        "ops",
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "grafanaDashboard.enabled=true",
    ];
    args.extend(render_values(op));
    let docs = yaml_documents(&helm_ok(None, &args)?)?;
    let mut exprs = Vec::new();
    for doc in &docs {
        if doc["kind"] == "PrometheusRule" {
            for group in doc["spec"]["groups"].as_array().into_iter().flatten() {
                for rule in group["rules"].as_array().into_iter().flatten() {
                    exprs.extend(rule["expr"].as_str().map(str::to_string));
                }
            }
        }
        if doc["kind"] == "ConfigMap" && doc["metadata"]["labels"]["grafana_dashboard"] == "1" {
            for json in doc["data"].as_object().into_iter().flat_map(|d| d.values()) {
                let dashboard: serde_json::Value =
                    serde_json::from_str(json.as_str().unwrap_or_default()).context("the dashboard's JSON")?;
                for panel in dashboard["panels"].as_array().into_iter().flatten() {
                    for target in panel["targets"].as_array().into_iter().flatten() {
                        exprs.extend(target["expr"].as_str().map(str::to_string));
                    }
                }
            }
        }
    }
    Ok(exprs)
}

/// The metric names a PromQL expression reads (`name{…}`), `_bucket`
/// removed (the histogram's family name).
pub fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (i, _) in expr.match_indices('{') {
        let before = &expr[..i];
        let start = before.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')).map_or(0, |p| p + 1);
        let name = &before[start..];
        if !name.is_empty() {
            names.push(name.strip_suffix("_bucket").unwrap_or(name).to_string());
        }
    }
    names
}

/// The metric families in a `/metrics` answer (its `# TYPE` lines).
pub fn exported_families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_promql() {
        let e = r#"histogram_quantile(0.99, sum by (le) (rate(a_seconds_bucket{job="x"}[5m]))) / b_total{}"#;
        assert_eq!(metric_names(e), vec!["a_seconds", "b_total"]);
        let text = "# HELP a_seconds x\n# TYPE a_seconds histogram\na_seconds_bucket{le=\"1\"} 0\n# TYPE up gauge\n";
        assert_eq!(exported_families(text), BTreeSet::from(["a_seconds".to_string(), "up".to_string()]));
    }
}
