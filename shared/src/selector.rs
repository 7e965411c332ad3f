//! Label selectors as custom resources carry them (`matchLabels` AND
//! `matchExpressions`, with Kubernetes' syntax checked by the schema and CEL
//! at admission), checked and matched in memory; and name globs. Pure.
//! Every Flotilla CRD with a selector uses these types, so `kubectl explain`
//! reads the same everywhere.

use std::collections::BTreeMap;

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Label-key syntax (`[prefix/]name`), as Kubernetes checks it.
pub const LABEL_KEY_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
/// Label-value syntax (may be empty).
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// A label selector (matchLabels AND matchExpressions); empty matches everything.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.matchLabels) || self.matchLabels.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))"
).message("matchLabels keys must be valid label keys ([prefix/]name)"))]
pub struct LabelSelector {
    /// Labels that must all be present with exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub match_labels: BTreeMap<LabelKey, LabelValue>,
    /// Requirements that must all hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

impl LabelSelector {
    /// The label keys the selector reads (what a pod view must keep).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.match_labels.keys().map(|k| k.0.as_str()).chain(self.match_expressions.iter().map(|r| r.key.as_str()))
    }
}

/// A label key, `[prefix/]name`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
#[serde(transparent)]
pub struct LabelKey(#[schemars(length(min = 1, max = 317))] pub String);

/// A label value: at most 63 characters, alphanumerics, '-', '_' and '.',
/// starting and ending with an alphanumeric (or empty).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
#[serde(transparent)]
pub struct LabelValue(
    #[schemars(length(max = 63), pattern(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"))] pub String,
);

/// One requirement of a label selector.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(validation = kube::core::Rule::new(
    "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : (!has(self.values) || size(self.values) == 0)"
).message("In and NotIn need at least one value; Exists and DoesNotExist take none"))]
pub struct LabelSelectorRequirement {
    /// The label key the requirement applies to.
    #[schemars(length(min = 1, max = 317), pattern(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"))]
    pub key: String,
    /// In, NotIn, Exists or DoesNotExist.
    pub operator: SelectorOperator,
    /// The values for In and NotIn (at least one); empty for Exists and DoesNotExist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub values: Vec<LabelValue>,
}

/// A label selector requirement's operator.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// A selector that cannot be used, with a message for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidSpec(pub String);

fn check_key(key: &str) -> Result<(), InvalidSpec> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !ok {
            return Err(InvalidSpec(format!("label key {key:?} has an invalid prefix")));
        }
    }
    if name.is_empty() || !check_value_chars(name) {
        return Err(InvalidSpec(format!("label key {key:?} has an invalid name part")));
    }
    Ok(())
}

fn check_value_chars(v: &str) -> bool {
    v.len() <= 63
        && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && v.bytes().next().is_none_or(|b| b.is_ascii_alphanumeric())
        && v.bytes().last().is_none_or(|b| b.is_ascii_alphanumeric())
}

fn check_value(key: &str, v: &str) -> Result<(), InvalidSpec> {
    if check_value_chars(v) { Ok(()) } else { Err(InvalidSpec(format!("label value {v:?} for {key:?} is invalid"))) }
}

/// A checked label selector: our validation (the same as the CRD schema's)
/// in front of kube's own expressions and query syntax. Matching takes a
/// lookup, not only kube's `BTreeMap` (whose one-entry node is ~550 bytes):
/// the pod caches keep labels as a compact sorted list, per pod (issue 28).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector(Vec<kube::core::Expression>);

impl Selector {
    /// Checks a selector (the CRD schema checks the same at admission; this
    /// is the runtime defence for objects stored before a schema change).
    pub fn new(sel: &LabelSelector) -> Result<Self, InvalidSpec> {
        use kube::core::Expression;
        let mut exprs = Vec::new();
        for (k, v) in &sel.match_labels {
            check_key(&k.0)?;
            check_value(&k.0, &v.0)?;
            exprs.push(Expression::Equal(k.0.clone(), v.0.clone()));
        }
        for r in &sel.match_expressions {
            check_key(&r.key)?;
            let values: std::collections::BTreeSet<String> = r.values.iter().map(|v| v.0.clone()).collect();
            for v in &values {
                check_value(&r.key, v)?;
            }
            exprs.push(match r.operator {
                SelectorOperator::In | SelectorOperator::NotIn if values.is_empty() => {
                    return Err(InvalidSpec(format!("{:?} on {:?} needs at least one value", r.operator, r.key)));
                }
                SelectorOperator::Exists | SelectorOperator::DoesNotExist if !values.is_empty() => {
                    return Err(InvalidSpec(format!("{:?} on {:?} takes no values", r.operator, r.key)));
                }
                SelectorOperator::In => Expression::In(r.key.clone(), values),
                SelectorOperator::NotIn => Expression::NotIn(r.key.clone(), values),
                SelectorOperator::Exists => Expression::Exists(r.key.clone()),
                SelectorOperator::DoesNotExist => Expression::DoesNotExist(r.key.clone()),
            });
        }
        Ok(Self(exprs))
    }

    /// Whether `labels` satisfy the selector (Kubernetes semantics).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    /// Whether the labels `get` looks up satisfy the selector.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        use kube::core::Expression;
        self.0.iter().all(|e| match e {
            Expression::Equal(k, v) => get(k) == Some(v.as_str()),
            Expression::NotEqual(k, v) => get(k) != Some(v.as_str()),
            Expression::In(k, values) => get(k).is_some_and(|v| values.contains(v)),
            Expression::NotIn(k, values) => get(k).is_none_or(|v| !values.contains(v)),
            Expression::Exists(k) => get(k).is_some(),
            Expression::DoesNotExist(k) => get(k).is_none(),
        })
    }

    /// The label keys the selector reads.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        use kube::core::Expression;
        self.0.iter().map(|e| match e {
            Expression::Equal(k, _)
            | Expression::NotEqual(k, _)
            | Expression::In(k, _)
            | Expression::NotIn(k, _)
            | Expression::Exists(k)
            | Expression::DoesNotExist(k) => k.as_str(),
        })
    }

    /// The selector in the API's `labelSelector` query syntax.
    pub fn to_query(&self) -> String {
        kube::core::Selector::from_iter(self.0.iter().cloned()).to_string()
    }
}

/// Whether `name` matches `glob` ('*' = any run, '?' = one character).
pub fn glob_match(glob: &str, name: &str) -> bool {
    let (g, n) = (glob.as_bytes(), name.as_bytes());
    let (mut gi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if gi < g.len() && (g[gi] == b'?' || g[gi] == n[ni]) {
            gi += 1;
            ni += 1;
        } else if gi < g.len() && g[gi] == b'*' {
            star = Some((gi, ni));
            gi += 1;
        } else if let Some((sg, sn)) = star {
            gi = sg + 1;
            ni = sn + 1;
            star = Some((sg, sn + 1));
        } else {
            return false;
        }
    }
    g[gi..].iter().all(|&b| b == b'*')
}

/// Checks a namespace-name glob: lowercase letters, digits, '-', '*' and '?'.
pub fn check_glob(glob: &str) -> Result<(), InvalidSpec> {
    let ok = !glob.is_empty()
        && glob.len() <= 63
        && glob.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'*' || b == b'?');
    if ok { Ok(()) } else { Err(InvalidSpec(format!("namespace glob {glob:?} is invalid"))) }
}
