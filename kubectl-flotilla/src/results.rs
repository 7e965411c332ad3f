//! `kubectl flotilla results`: a LoadTest's merged results as a report.

use std::io::Write;

use anyhow::Context;
use kube::Client;
use kube::api::{Api, DynamicObject};
use serde_json::Value;

use crate::{chart, kinds, status, table};

/// Bars of the latency chart at most this wide.
const BAR_WIDTH: usize = 50;

/// Reads `name` and writes its report.
pub async fn show(client: &Client, ns: &str, name: &str, out: &mut impl Write) -> anyhow::Result<()> {
    let kind = kinds::find("loadtest")?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &kind.resource);
    let test = api
        .get(name)
        .await
        .map_err(crate::client::readable)
        .with_context(|| format!("reading loadtest {ns}/{name}"))?;
    report(&test, out)?;
    Ok(())
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_str).unwrap_or("")
}

fn n(v: &Value, path: &[&str]) -> Option<i64> {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_i64)
}

/// A scalar as a cell.
fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Object(_) | Value::Array(_) => v.to_string(),
        other => other.to_string(),
    }
}

/// The report of a LoadTest read from the API.
pub fn report(test: &DynamicObject, out: &mut impl Write) -> std::io::Result<()> {
    let empty = Value::Null;
    let st = test.data.get("status").unwrap_or(&empty);
    let name = format!(
        "{}/{}",
        test.metadata.namespace.as_deref().unwrap_or_default(),
        test.metadata.name.as_deref().unwrap_or_default()
    );
    writeln!(
        out,
        "LoadTest {name}: run {}, {}, verdict {}",
        n(st, &["run"]).unwrap_or(0),
        if s(st, &["state"]).is_empty() { "not started" } else { s(st, &["state"]) },
        if s(st, &["verdict"]).is_empty() { "None" } else { s(st, &["verdict"]) },
    )?;
    if let Some(ready) = status::ready_condition(Some(st)) {
        writeln!(out, "  {}: {}", s(ready, &["reason"]), s(ready, &["message"]))?;
    }
    let Some(r) = st.get("results").filter(|r| r.is_object()) else {
        return writeln!(out, "No results yet (they are written when the run ends).");
    };
    writeln!(out)?;
    writeln!(
        out,
        "requests {}   runners {}   not sent {}   elapsed {}   rate {}/s   error ratio {}",
        n(r, &["requests"]).unwrap_or(0),
        n(r, &["runners"]).unwrap_or(0),
        n(r, &["notSent"]).unwrap_or(0),
        s(r, &["elapsed"]),
        s(r, &["rps"]),
        s(r, &["errorRatio"]),
    )?;
    if let Some(errors) = r.get("errors").and_then(Value::as_object).filter(|e| !e.is_empty()) {
        let list: Vec<String> = errors.iter().map(|(k, v)| format!("{k} {}", cell(v))).collect();
        writeln!(out, "errors   {}", list.join(", "))?;
    }
    writeln!(
        out,
        "latency  p50 {}   p90 {}   p99 {}   max {}",
        s(r, &["latency", "p50"]),
        s(r, &["latency", "p90"]),
        s(r, &["latency", "p99"]),
        s(r, &["latency", "max"]),
    )?;
    match r.get("histogram").and_then(Value::as_str).filter(|h| !h.is_empty()).map(loadgen::summary::decode) {
        Some(Ok(h)) => {
            writeln!(out)?;
            writeln!(out, "latency histogram (answered requests; count, share at or below, bar):")?;
            for line in chart::draw(&h, BAR_WIDTH) {
                writeln!(out, "  {line}")?;
            }
        }
        Some(Err(e)) => writeln!(out, "(the histogram in status cannot be read: {e})")?,
        None => {}
    }
    // Per-stage figures, baseline deltas and a capacity search's result,
    // when the run has them: every field the operator writes is shown.
    if let Some(rows) = r.get("stages").and_then(Value::as_array).filter(|a| !a.is_empty()) {
        writeln!(out)?;
        writeln!(out, "stages:")?;
        rows_table(rows, out)?;
    }
    for (title, section) in
        [("baseline", r.get("baseline").or_else(|| st.get("baseline"))), ("capacity", r.get("capacity"))]
    {
        if let Some(fields) = section.and_then(Value::as_object) {
            writeln!(out)?;
            writeln!(out, "{title}:")?;
            for (k, v) in fields {
                writeln!(out, "  {k}: {}", cell(v))?;
            }
        }
    }
    Ok(())
}

/// Objects as a table, their scalar fields as columns (first seen first).
fn rows_table(rows: &[Value], out: &mut impl Write) -> std::io::Result<()> {
    let mut columns: Vec<String> = Vec::new();
    for row in rows {
        for (k, v) in row.as_object().into_iter().flatten() {
            if !v.is_object() && !v.is_array() && !columns.contains(k) {
                columns.push(k.clone());
            }
        }
    }
    // Nested latency percentiles flattened (latency.p99 → p99).
    let nested = ["p50", "p90", "p99", "max"];
    let has_latency = rows.iter().any(|r| r.get("latency").is_some_and(Value::is_object));
    let mut header: Vec<String> = columns.iter().map(|c| c.to_uppercase()).collect();
    if has_latency {
        header.extend(nested.iter().map(|p| p.to_uppercase()));
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            let mut c: Vec<String> = columns.iter().map(|k| row.get(k).map(cell).unwrap_or_default()).collect();
            if has_latency {
                c.extend(nested.iter().map(|p| s(row, &["latency", p]).to_string()));
            }
            c
        })
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    table::write_indented(out, &header, &cells)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_finished_run_reads_as_a_report_with_its_chart_and_stages() {
        let mut h = loadgen::summary::histogram();
        h.record_n(2_000, 990).unwrap();
        h.record_n(40_000, 10).unwrap();
        let test: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "LoadTest",
            "metadata": {"name": "smoke", "namespace": "shop"},
            "status": {"run": 2, "state": "Finished", "verdict": "Failed",
                "conditions": [{"type": "Ready", "status": "True", "reason": "Finished", "message": "p99 40ms over 20ms"}],
                "results": {"runners": 2, "requests": 1000, "errors": {"http5xx": 3}, "notSent": 0, "elapsed": "10.00s",
                    "errorRatio": "0.003", "rps": "100.0", "latency": {"p50": "2ms", "p90": "2ms", "p99": "40ms", "max": "40ms"},
                    "histogram": loadgen::summary::encode(&h).unwrap(),
                    "stages": [{"duration": "10s", "target": 100, "requests": 1000, "latency": {"p50": "2ms", "p90": "2ms", "p99": "40ms", "max": "40ms"}}]}}
        }))
        .unwrap();
        let mut out = Vec::new();
        report(&test, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with("LoadTest shop/smoke: run 2, Finished, verdict Failed\n"), "{out}");
        assert!(out.contains("errors   http5xx 3"), "{out}");
        assert!(out.contains("p99 40ms"), "{out}");
        assert!(out.contains(" 990 ") && out.contains("100.00%"), "{out}");
        assert!(out.contains("stages:\n  DURATION   REQUESTS   TARGET   P50   P90   P99    MAX"), "{out}");
    }

    #[test]
    fn a_run_without_results_says_so() {
        let test: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "LoadTest", "metadata": {"name": "smoke", "namespace": "shop"},
        }))
        .unwrap();
        let mut out = Vec::new();
        report(&test, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("not started") && out.contains("No results yet"), "{out}");
    }
}
