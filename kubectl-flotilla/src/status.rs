//! `kubectl flotilla status`: one line per Flotilla object, Ready or not.

use std::io::Write;

use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::kinds;
use crate::table;

/// One object's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The Ready condition's status: True, False or Unknown.
    pub ready: String,
    pub reason: String,
    pub age: String,
    pub message: String,
}

/// The Ready condition of a status (`status.conditions[type=Ready]`).
pub fn ready_condition(status: Option<&Value>) -> Option<&Value> {
    status?.get("conditions")?.as_array()?.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
}

fn text(v: Option<&Value>, key: &str) -> String {
    v.and_then(|v| v.get(key)).and_then(Value::as_str).unwrap_or_default().to_string()
}

/// The line of `obj` of kind `kind`.
pub fn row(kind: &str, obj: &DynamicObject) -> Row {
    let status = obj.data.get("status");
    let ready = ready_condition(status);
    let mut message = text(ready, "message").split_whitespace().collect::<Vec<_>>().join(" ");
    let observed = ready.and_then(|c| c.get("observedGeneration")).and_then(Value::as_i64);
    if let (Some(seen), Some(generation)) = (observed, obj.metadata.generation)
        && seen < generation
    {
        message = format!("(generation {generation} not yet seen by the operator) {message}");
    }
    if ready.is_none() {
        message = "no Ready condition yet: is the operator running and watching this namespace?".to_string();
    }
    Row {
        kind: kind.to_string(),
        namespace: obj.namespace().unwrap_or_default(),
        name: obj.name_any(),
        ready: ready.map_or_else(|| "Unknown".to_string(), |c| text(Some(c), "status")),
        reason: text(ready, "reason"),
        age: table::age(obj.metadata.creation_timestamp.as_ref()),
        message: message.trim().to_string(),
    }
}

/// Every Flotilla object of `namespace` (None: all namespaces), kind by
/// kind. A kind whose CRD is not installed is skipped; one the user may
/// not list is named on stderr.
pub async fn collect(client: &Client, namespace: Option<&str>, not_ready: bool) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for kind in kinds::all()? {
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &kind.resource),
            None => Api::all_with(client.clone(), &kind.resource),
        };
        let list = match api.list(&ListParams::default()).await {
            Ok(list) => list,
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(kube::Error::Api(e)) if e.code == 403 => {
                eprintln!("warning: may not list {}: {}", kind.resource.plural, e.message);
                continue;
            }
            Err(e) => return Err(crate::client::readable(e).context(format!("listing {}", kind.resource.plural))),
        };
        let mut of_kind: Vec<Row> = list.items.iter().map(|o| row(&kind.resource.kind, o)).collect();
        of_kind.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        rows.extend(of_kind.into_iter().filter(|r| !not_ready || r.ready != "True"));
    }
    Ok(rows)
}

/// The table (with a NAMESPACE column for all namespaces).
pub fn print(out: &mut impl Write, rows: &[Row], all_namespaces: bool) -> std::io::Result<()> {
    if rows.is_empty() {
        return writeln!(out, "No Flotilla objects found.");
    }
    let mut header = vec!["KIND"];
    if all_namespaces {
        header.push("NAMESPACE");
    }
    header.extend(["NAME", "READY", "REASON", "AGE", "MESSAGE"]);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut c = vec![r.kind.clone()];
            if all_namespaces {
                c.push(r.namespace.clone());
            }
            c.extend([r.name.clone(), r.ready.clone(), r.reason.clone(), r.age.clone(), r.message.clone()]);
            c
        })
        .collect();
    table::write(out, &header, &cells)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn object(generation: i64, status: Value) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "PodAlert",
            "metadata": {"name": "crashes", "namespace": "shop", "generation": generation},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_row_says_ready_reason_and_message() {
        let r = row(
            "PodAlert",
            &object(
                2,
                serde_json::json!({"conditions": [
                    {"type": "Stalled", "status": "True", "reason": "InvalidSpec", "message": "other"},
                    {"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": "bad\n  selector", "observedGeneration": 2},
                ]}),
            ),
        );
        assert_eq!((r.ready.as_str(), r.reason.as_str(), r.message.as_str()), ("False", "InvalidSpec", "bad selector"));
    }

    #[test]
    fn a_stale_condition_and_a_missing_one_are_said() {
        let stale = row(
            "PodAlert",
            &object(
                3,
                serde_json::json!({"conditions": [
                    {"type": "Ready", "status": "True", "reason": "Watching", "message": "ok", "observedGeneration": 2},
                ]}),
            ),
        );
        assert!(stale.message.starts_with("(generation 3 not yet seen"), "{}", stale.message);
        let none = row("PodAlert", &object(1, Value::Null));
        assert_eq!(none.ready, "Unknown");
        assert!(none.message.contains("is the operator running"), "{}", none.message);
    }
}
