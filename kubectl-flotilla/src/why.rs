//! `kubectl flotilla why`: what the operator says of one object — its
//! conditions, its last Warning Events, and the rest of its status.

use std::io::Write;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Event;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;

use crate::{kinds, table};

/// Reads `object` (KIND/NAME) and its Events, and writes the explanation.
pub async fn explain(
    client: &Client,
    ns: &str,
    object: &str,
    max_events: usize,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let Some((kind, name)) = object.split_once('/') else {
        bail!("{object:?}: give KIND/NAME, e.g. loadtest/smoke or pa/crashes")
    };
    let kind = kinds::find(kind)?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &kind.resource);
    let obj = api
        .get(name)
        .await
        .map_err(crate::client::readable)
        .with_context(|| format!("reading {} {ns}/{name}", kind.resource.kind))?;
    let events = match obj.metadata.uid.as_deref() {
        Some(uid) => {
            let events: Api<Event> = Api::namespaced(client.clone(), ns);
            let lp = ListParams::default().fields(&format!("involvedObject.uid={uid},type=Warning"));
            match events.list(&lp).await {
                Ok(list) => Ok(list.items),
                Err(kube::Error::Api(e)) if e.code == 403 => Err(e.message),
                Err(e) => return Err(crate::client::readable(e).context("listing its Events")),
            }
        }
        None => Ok(Vec::new()),
    };
    write(&kind.resource.kind, &obj, events, max_events, out)?;
    Ok(())
}

/// When `e` last happened (its series, else its timestamps).
fn last_seen(e: &Event) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    e.series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t.0))
        .or_else(|| e.last_timestamp.clone())
        .or_else(|| e.event_time.as_ref().map(|t| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t.0)))
        .or_else(|| e.first_timestamp.clone())
        .or_else(|| e.metadata.creation_timestamp.clone())
}

/// The explanation of `obj` given its Warning Events (or why they could
/// not be read).
pub fn write(
    kind: &str,
    obj: &DynamicObject,
    events: Result<Vec<Event>, String>,
    max_events: usize,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let ns = obj.metadata.namespace.as_deref().unwrap_or_default();
    let name = obj.metadata.name.as_deref().unwrap_or_default();
    let generation = obj.metadata.generation.unwrap_or(0);
    writeln!(
        out,
        "{kind} {ns}/{name} (generation {generation}, created {} ago)",
        table::age(obj.metadata.creation_timestamp.as_ref())
    )?;
    let status = obj.data.get("status").cloned().unwrap_or(Value::Null);
    let conditions = status.get("conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    writeln!(out)?;
    if conditions.is_empty() {
        writeln!(
            out,
            "Conditions: none yet — the operator has not reported on it (is it running, and does it watch namespace {ns}?)"
        )?;
    } else {
        writeln!(out, "Conditions:")?;
        let rows: Vec<Vec<String>> = conditions
            .iter()
            .map(|c| {
                let f = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                let since = c
                    .get("lastTransitionTime")
                    .and_then(|t| serde_json::from_value(t.clone()).ok())
                    .map(|t| table::age(Some(&t)))
                    .unwrap_or_default();
                let seen = c.get("observedGeneration").and_then(Value::as_i64);
                let stale = seen.is_some_and(|g| g < generation);
                let mut message = f("message").split_whitespace().collect::<Vec<_>>().join(" ");
                if stale {
                    message = format!("(of generation {}) {message}", seen.unwrap_or(0));
                }
                vec![f("type"), f("status"), f("reason"), since, message]
            })
            .collect();
        table::write_indented(out, &["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"], &rows)?;
    }
    writeln!(out)?;
    match events {
        Err(why) => writeln!(out, "Warning Events: cannot be read ({why})")?,
        Ok(events) if events.is_empty() => writeln!(out, "Warning Events: none")?,
        Ok(mut events) => {
            events.sort_by_key(last_seen);
            let skip = events.len().saturating_sub(max_events);
            writeln!(out, "Warning Events (the last {} of {}):", events.len() - skip, events.len())?;
            let rows: Vec<Vec<String>> = events
                .iter()
                .skip(skip)
                .map(|e| {
                    let count = e.series.as_ref().and_then(|s| s.count).or(e.count).unwrap_or(1);
                    vec![
                        table::age(last_seen(e).as_ref()),
                        e.reason.clone().unwrap_or_default(),
                        format!("x{count}"),
                        e.message.as_deref().unwrap_or_default().split_whitespace().collect::<Vec<_>>().join(" "),
                    ]
                })
                .collect();
            table::write_indented(out, &["LAST SEEN", "REASON", "COUNT", "MESSAGE"], &rows)?;
        }
    }
    // The rest of what the operator reports (conditions shown above).
    let mut rest = status;
    if let Some(o) = rest.as_object_mut() {
        o.remove("conditions");
    }
    shorten(&mut rest);
    if rest.as_object().is_some_and(|o| !o.is_empty()) {
        writeln!(out)?;
        writeln!(out, "Status:")?;
        let yaml = serde_saphyr::to_string(&rest).unwrap_or_else(|_| rest.to_string());
        for line in yaml.lines() {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(())
}

/// Strings longer than a line (an encoded histogram) cut, saying how long
/// they were.
fn shorten(v: &mut Value) {
    const MAX: usize = 100;
    match v {
        Value::String(s) if s.len() > MAX => {
            let mut end = 60;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            *s = format!("{}… ({} bytes)", &s[..end], s.len());
        }
        Value::Array(a) => a.iter_mut().for_each(shorten),
        Value::Object(o) => o.values_mut().for_each(shorten),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn conditions_events_and_the_rest_of_the_status_are_shown() {
        let obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "PodAlert",
            "metadata": {"name": "crashes", "namespace": "shop", "generation": 3},
            "status": {"pods": 12, "histogram": "H".repeat(500), "conditions": [
                {"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": "selector: bad", "observedGeneration": 2,
                 "lastTransitionTime": "2026-11-27T10:00:00Z"}]}
        }))
        .unwrap();
        let events: Vec<Event> = (0..12)
            .map(|i| {
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("e{i}"), "namespace": "shop"},
                    "involvedObject": {"kind": "PodAlert", "name": "crashes"},
                    "reason": format!("R{i:02}"), "message": "m", "type": "Warning", "count": 2,
                    "lastTimestamp": format!("2026-11-27T10:{i:02}:00Z"),
                }))
                .unwrap()
            })
            .collect();
        let mut out = Vec::new();
        write("PodAlert", &obj, Ok(events), 10, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("InvalidSpec") && out.contains("(of generation 2) selector: bad"), "{out}");
        assert!(out.contains("Warning Events (the last 10 of 12):"), "{out}");
        assert!(!out.contains("R01") && out.contains("R02") && out.contains("R11"), "the newest ten: {out}");
        assert!(
            out.contains("Status:\n  histogram: HHH") && out.contains("… (500 bytes)") && out.contains("  pods: 12"),
            "{out}"
        );
    }

    #[test]
    fn unreadable_events_and_no_status_are_said() {
        let obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "LoadTest", "metadata": {"name": "smoke", "namespace": "shop"},
        }))
        .unwrap();
        let mut out = Vec::new();
        write("LoadTest", &obj, Err("forbidden".into()), 10, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("Conditions: none yet") && out.contains("cannot be read (forbidden)"), "{out}");
    }
}
