//! Bounded schemas for the Kubernetes types a LoadTest embeds (tolerations,
//! affinity, a node selector): k8s-openapi's schemas leave lists, maps and
//! strings unbounded, so a tenant could make the operator hold (and the API
//! server's CEL cost estimates assume) arbitrarily large objects. Every
//! list, map and string below gets a bound here, recursively.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Map, Value};

/// Items of any list, entries of any map.
pub const MAX_ITEMS: u64 = 32;
/// Characters of any string (label keys are at most 317, values 63).
pub const MAX_LENGTH: u64 = 1024;

/// Adds the bounds to `node` and everything under it.
fn bound(node: &mut Value) {
    let Value::Object(o) = node else { return };
    match o.get("type").and_then(Value::as_str) {
        Some("array") => {
            o.entry("maxItems").or_insert(MAX_ITEMS.into());
        }
        Some("string") => {
            o.entry("maxLength").or_insert(MAX_LENGTH.into());
        }
        Some("object") if o.contains_key("additionalProperties") => {
            o.entry("maxProperties").or_insert(MAX_ITEMS.into());
        }
        _ => {}
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = o.get_mut(key) {
            bound(child);
        }
    }
    if let Some(Value::Object(props)) = o.get_mut("properties") {
        props.values_mut().for_each(bound);
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(list)) = o.get_mut(key) {
            list.iter_mut().for_each(bound);
        }
    }
}

/// `T`'s schema, bounded.
fn bounded<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let mut value = generator.subschema_for::<T>().to_value();
    bound(&mut value);
    Schema::try_from(value).unwrap_or_else(|_| Schema::from(Map::new()))
}

pub fn node_selector(generator: &mut SchemaGenerator) -> Schema {
    bounded::<std::collections::BTreeMap<String, String>>(generator)
}

pub fn tolerations(generator: &mut SchemaGenerator) -> Schema {
    bounded::<Vec<k8s_openapi::api::core::v1::Toleration>>(generator)
}

/// Resource quantities by name (at most 8): each an integer or a string
/// such as 500m or 256Mi (the CEL rules check it is a quantity), without
/// k8s-openapi's page-long description of the format.
pub fn quantities(_: &mut SchemaGenerator) -> Schema {
    let value = serde_json::json!({
        "type": "object",
        "maxProperties": 8,
        "additionalProperties": {"x-kubernetes-int-or-string": true, "maxLength": 64}
    });
    Schema::try_from(value).unwrap_or_else(|_| Schema::from(Map::new()))
}

pub fn affinity(generator: &mut SchemaGenerator) -> Schema {
    bounded::<k8s_openapi::api::core::v1::Affinity>(generator)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every list, map and string of `node` has its bound; the path of the
    /// first that does not.
    fn unbounded(node: &Value, path: &str) -> Option<String> {
        let o = node.as_object()?;
        let missing = match o.get("type").and_then(Value::as_str) {
            Some("array") => !o.contains_key("maxItems"),
            Some("string") => !o.contains_key("maxLength"),
            Some("object") => o.contains_key("additionalProperties") && !o.contains_key("maxProperties"),
            _ => false,
        };
        if missing {
            return Some(path.to_string());
        }
        let children =
            ["items", "additionalProperties"].into_iter().filter_map(|k| o.get(k).map(|c| (k.to_string(), c)));
        let props = o.get("properties").and_then(Value::as_object).into_iter().flatten().map(|(k, c)| (k.clone(), c));
        children.chain(props).find_map(|(k, c)| unbounded(c, &format!("{path}.{k}")))
    }

    #[test]
    fn every_list_map_and_string_of_the_embedded_types_is_bounded() {
        let mut generator =
            schemars::generate::SchemaSettings::openapi3().with(|s| s.inline_subschemas = true).into_generator();
        for (name, schema) in [
            ("affinity", affinity(&mut generator)),
            ("tolerations", tolerations(&mut generator)),
            ("nodeSelector", node_selector(&mut generator)),
        ] {
            let value = schema.to_value();
            // The bounds reach deep: affinity's match expressions' values.
            assert!(value.to_string().contains("maxItems") || name == "nodeSelector", "{name}");
            assert_eq!(unbounded(&value, name), None, "{name}: {value}");
        }
        let raw = generator.subschema_for::<k8s_openapi::api::core::v1::Affinity>().to_value();
        assert!(unbounded(&raw, "affinity").is_some(), "k8s-openapi's own schema is unbounded: the test can fail");
    }
}
