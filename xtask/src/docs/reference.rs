//! The API reference: one Markdown page per CRD kind, generated from the
//! committed CRD files in `crds/` (which `cargo xtask crds` generates from
//! the Rust types), so every field, type, default, validation (OpenAPI and
//! CEL) and description the API server knows is on the site, and nothing
//! else. Pure: no tool, no venv, so `cargo xtask docs --check` runs anywhere.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

/// `docs/reference/<kind>.md` (kind lower-cased) → its content, for every
/// CRD file in `crds_dir`.
pub fn pages(crds_dir: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut files: Vec<_> = std::fs::read_dir(crds_dir)
        .with_context(|| format!("reading {}", crds_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let crd: Value = serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let (kind, page) = page(&crd, &name).with_context(|| format!("documenting {}", file.display()))?;
        out.insert(format!("{}.md", kind.to_lowercase()), page);
    }
    Ok(out)
}

/// The page of one CRD: (kind, Markdown).
pub fn page(crd: &Value, file: &str) -> anyhow::Result<(String, String)> {
    let spec = &crd["spec"];
    let kind = spec["names"]["kind"].as_str().context("spec.names.kind missing")?.to_string();
    let group = spec["group"].as_str().unwrap_or_default();
    let mut md = format!("# {kind}\n\n");
    md.push_str(&format!(
        "<!-- Generated from crds/{file} by `cargo xtask docs`; do not edit (`cargo xtask docs --check` fails when stale). -->\n\n"
    ));
    let scope = spec["scope"].as_str().unwrap_or("Namespaced");
    md.push_str(&format!("Group `{group}`, {} scope", scope.to_lowercase()));
    if let Some(short) = spec["names"]["shortNames"].as_array().filter(|s| !s.is_empty()) {
        let names: Vec<String> = short.iter().filter_map(Value::as_str).map(|s| format!("`{s}`")).collect();
        md.push_str(&format!(", short names {}", names.join(", ")));
    }
    md.push_str(&format!(
        ", plural `{}`. Generated from `crds/{file}`, which `cargo xtask crds` generates from the Rust types.\n",
        spec["names"]["plural"].as_str().unwrap_or_default()
    ));
    for version in spec["versions"].as_array().context("spec.versions missing")? {
        let v = version["name"].as_str().unwrap_or_default();
        let served = version["served"].as_bool().unwrap_or(false);
        let storage = version["storage"].as_bool().unwrap_or(false);
        md.push_str(&format!("\n## {group}/{v}\n\nServed: {}, storage version: {}.\n", yes(served), yes(storage)));
        let schema = &version["schema"]["openAPIV3Schema"];
        if let Some(d) = schema["description"].as_str() {
            md.push_str(&format!("\n{}\n", d.trim()));
        }
        let rules = cel_rules(schema);
        if !rules.is_empty() {
            md.push_str("\nRules on the whole object (CEL):\n\n");
            for r in rules {
                md.push_str(&format!("- {}\n", r.replace('\n', " ")));
            }
        }
        for top in ["spec", "status"] {
            let Some(node) = schema["properties"].get(top) else { continue };
            md.push_str(&format!("\n### {top}\n\n"));
            md.push_str("| field | type | default | validation | description |\n| --- | --- | --- | --- | --- |\n");
            let required = required_of(schema).contains(&top.to_string());
            let mut rows = Vec::new();
            walk(node, top, required, &mut rows);
            for r in rows {
                md.push_str(&r);
                md.push('\n');
            }
        }
    }
    Ok((kind, md))
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn required_of(node: &Value) -> Vec<String> {
    node["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

/// One table row per field, depth first in the schema's (sorted) order.
fn walk(node: &Value, path: &str, required: bool, rows: &mut Vec<String>) {
    rows.push(format!(
        "| `{}` | {} | {} | {} | {} |",
        path,
        cell(&type_of(node)),
        node.get("default").map(|d| format!("`{}`", cell(&d.to_string()))).unwrap_or_default(),
        cell(&validation(node, required)),
        cell(node["description"].as_str().unwrap_or_default().trim()),
    ));
    let req = required_of(node);
    if let Some(props) = node["properties"].as_object() {
        for (name, child) in props {
            walk(child, &format!("{path}.{name}"), req.contains(name), rows);
        }
    }
    if node.get("items").is_some() {
        let items = &node["items"];
        if items.get("properties").is_some() || items.get("items").is_some() {
            let req = required_of(items);
            if let Some(props) = items["properties"].as_object() {
                for (name, child) in props {
                    walk(child, &format!("{path}[].{name}"), req.contains(name), rows);
                }
            }
        }
    }
    if let Some(ap) = node.get("additionalProperties").filter(|a| a.get("properties").is_some()) {
        let req = required_of(ap);
        if let Some(props) = ap["properties"].as_object() {
            for (name, child) in props {
                walk(child, &format!("{path}.<key>.{name}"), req.contains(name), rows);
            }
        }
    }
}

/// The field's type as `kubectl explain` would say it.
fn type_of(node: &Value) -> String {
    if node["x-kubernetes-int-or-string"].as_bool() == Some(true) {
        return "integer or string".into();
    }
    let t = node["type"].as_str().unwrap_or("any");
    let base = match t {
        "array" => format!("[]{}", type_of(&node["items"])),
        "object" => match node.get("additionalProperties") {
            Some(ap) if ap.is_object() => format!("map[string]{}", type_of(ap)),
            _ if node["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true) => "object (any fields)".into(),
            _ => "object".into(),
        },
        other => match node["format"].as_str() {
            Some(f) => format!("{other} ({f})"),
            None => other.to_string(),
        },
    };
    if node["nullable"].as_bool() == Some(true) { format!("{base}, nullable") } else { base }
}

/// Every constraint the schema puts on the field, CEL rules included.
fn validation(node: &Value, required: bool) -> String {
    let mut v = Vec::new();
    if required {
        v.push("required".to_string());
    }
    if let Some(e) = node["enum"].as_array() {
        let vals: Vec<String> =
            e.iter().map(|x| format!("`{}`", x.as_str().map(String::from).unwrap_or(x.to_string()))).collect();
        v.push(format!("one of {}", vals.join(", ")));
    }
    for (key, label) in [
        ("minimum", "minimum"),
        ("maximum", "maximum"),
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minItems", "min items"),
        ("maxItems", "max items"),
        ("minProperties", "min properties"),
        ("maxProperties", "max properties"),
        ("multipleOf", "multiple of"),
    ] {
        if let Some(x) = node.get(key) {
            let exclusive = match key {
                "minimum" => node["exclusiveMinimum"].as_bool() == Some(true),
                "maximum" => node["exclusiveMaximum"].as_bool() == Some(true),
                _ => false,
            };
            v.push(format!("{label} {x}{}", if exclusive { " (exclusive)" } else { "" }));
        }
    }
    if let Some(p) = node["pattern"].as_str() {
        v.push(format!("pattern `{p}`"));
    }
    if node["uniqueItems"].as_bool() == Some(true) {
        v.push("unique items".into());
    }
    for key in ["x-kubernetes-list-type", "x-kubernetes-map-type"] {
        if let Some(t) = node[key].as_str() {
            v.push(format!("{key}: {t}"));
        }
    }
    if let Some(keys) = node["x-kubernetes-list-map-keys"].as_array() {
        let k: Vec<String> = keys.iter().filter_map(Value::as_str).map(|s| format!("`{s}`")).collect();
        v.push(format!("list map keys {}", k.join(", ")));
    }
    v.extend(cel_rules(node));
    // A list of scalars: the items' own constraints (an enum of reasons,
    // a pattern), since they get no row of their own.
    if let Some(items) = node.get("items").filter(|i| i.get("properties").is_none()) {
        let inner = validation(items, false);
        if !inner.is_empty() {
            v.push(format!("each item: {inner}"));
        }
    }
    v.join("; ")
}

/// `x-kubernetes-validations`: each rule with its message.
fn cel_rules(node: &Value) -> Vec<String> {
    let Some(rules) = node["x-kubernetes-validations"].as_array() else { return Vec::new() };
    rules
        .iter()
        .map(|r| {
            let rule = r["rule"].as_str().unwrap_or_default();
            let mut s = format!("CEL `{rule}`");
            if let Some(m) = r["message"].as_str() {
                s.push_str(&format!(": {m}"));
            }
            if let Some(m) = r["messageExpression"].as_str() {
                s.push_str(&format!(" (message: `{m}`)"));
            }
            if let Some(reason) = r["reason"].as_str() {
                s.push_str(&format!(" (reason {reason})"));
            }
            s
        })
        .collect()
}

/// A table cell: no newline, no unescaped `|`.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace("\n\n", "<br><br>").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn crd() -> Value {
        serde_json::json!({"spec": {
            "group": "flotilla.dev", "scope": "Namespaced",
            "names": {"kind": "Thing", "plural": "things", "shortNames": ["th"]},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "description": "A thing.",
                "required": ["spec"],
                "x-kubernetes-validations": [{"rule": "self.spec.a != 'x'", "message": "no x"}],
                "properties": {"spec": {"type": "object", "required": ["a"], "properties": {
                    "a": {"type": "string", "enum": ["p", "q"], "description": "The a.\n\nMore | text."},
                    "n": {"type": "integer", "format": "int32", "minimum": 1, "default": 3},
                    "l": {"type": "array", "maxItems": 4, "items": {"type": "object", "properties": {"k": {"type": "string", "pattern": "^k"}}}},
                    "r": {"type": "array", "items": {"type": "string", "enum": ["A", "B"]}}
                }}}
            }}}]
        }})
    }

    /// Every field, with type, default, enum, bounds, pattern, CEL and the
    /// description (its `|` escaped so the table holds).
    #[test]
    fn a_page_lists_every_field_and_constraint() {
        let (kind, md) = page(&crd(), "things.flotilla.dev.yaml").unwrap();
        assert_eq!(kind, "Thing");
        assert!(md.contains("- CEL `self.spec.a != 'x'`: no x"), "{md}");
        assert!(
            md.contains("| `spec.a` | string |  | required; one of `p`, `q` | The a.<br><br>More \\| text. |"),
            "{md}"
        );
        assert!(md.contains("| `spec.n` | integer (int32) | `3` | minimum 1 |"), "{md}");
        assert!(md.contains("| `spec.l` | []object |  | max items 4 |"), "{md}");
        assert!(md.contains("| `spec.l[].k` | string |  | pattern `^k` |"), "{md}");
        assert!(md.contains("| `spec.r` | []string |  | each item: one of `A`, `B` |"), "{md}");
        assert!(md.contains("short names `th`"), "{md}");
    }

    /// The committed pages are what the committed CRDs generate (the drift
    /// check of `cargo xtask docs --check`, as a unit test).
    #[test]
    fn committed_reference_pages_match_the_crds() {
        let root = crate::util::root();
        let stale = super::super::stale_reference(&root).unwrap();
        assert!(stale.is_empty(), "stale API reference pages (run `cargo xtask docs`): {stale:?}");
    }
}
