//! Label selectors and namespace-name globs: checking them, matching them in
//! memory, and rendering a selector for server-side filtering. Pure.

use std::collections::BTreeMap;

use crate::crd::{LabelSelector, NamespaceTargets, SelectorOperator};

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

/// A checked label selector.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    labels: BTreeMap<String, String>,
    exprs: Vec<(String, SelectorOperator, Vec<String>)>,
}

impl Selector {
    /// Checks a selector (the CRD schema checks the same at admission; this
    /// is the runtime defence for objects stored before a schema change).
    pub fn new(sel: &LabelSelector) -> Result<Self, InvalidSpec> {
        let mut labels = BTreeMap::new();
        for (k, v) in &sel.match_labels {
            check_key(&k.0)?;
            check_value(&k.0, &v.0)?;
            labels.insert(k.0.clone(), v.0.clone());
        }
        let mut exprs = Vec::new();
        for r in &sel.match_expressions {
            check_key(&r.key)?;
            let values: Vec<String> = r.values.iter().map(|v| v.0.clone()).collect();
            for v in &values {
                check_value(&r.key, v)?;
            }
            match r.operator {
                SelectorOperator::In | SelectorOperator::NotIn if values.is_empty() => {
                    return Err(InvalidSpec(format!("{:?} on {:?} needs at least one value", r.operator, r.key)));
                }
                SelectorOperator::Exists | SelectorOperator::DoesNotExist if !values.is_empty() => {
                    return Err(InvalidSpec(format!("{:?} on {:?} takes no values", r.operator, r.key)));
                }
                _ => {}
            }
            exprs.push((r.key.clone(), r.operator, values));
        }
        Ok(Self { labels, exprs })
    }

    /// Whether `labels` satisfy the selector (Kubernetes semantics).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.exprs.iter().all(|(k, op, values)| match op {
                SelectorOperator::In => labels.get(k).is_some_and(|v| values.contains(v)),
                SelectorOperator::NotIn => labels.get(k).is_none_or(|v| !values.contains(v)),
                SelectorOperator::Exists => labels.contains_key(k),
                SelectorOperator::DoesNotExist => !labels.contains_key(k),
            })
    }

    /// The selector in the API's `labelSelector` query syntax.
    pub fn to_query(&self) -> String {
        let mut parts: Vec<String> = self.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for (k, op, values) in &self.exprs {
            parts.push(match op {
                SelectorOperator::In => format!("{k} in ({})", values.join(",")),
                SelectorOperator::NotIn => format!("{k} notin ({})", values.join(",")),
                SelectorOperator::Exists => k.clone(),
                SelectorOperator::DoesNotExist => format!("!{k}"),
            });
        }
        parts.join(",")
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

fn check_glob(glob: &str) -> Result<(), InvalidSpec> {
    let ok = !glob.is_empty()
        && glob.len() <= 63
        && glob.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'*' || b == b'?');
    if ok { Ok(()) } else { Err(InvalidSpec(format!("namespace glob {glob:?} is invalid"))) }
}

/// The checked form of `spec.namespaces`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TargetFilter {
    selector: Option<Selector>,
    include: Vec<String>,
    exclude: Vec<String>,
}

impl TargetFilter {
    pub fn new(t: Option<&NamespaceTargets>) -> Result<Self, InvalidSpec> {
        let Some(t) = t else { return Ok(Self::default()) };
        for g in t.include.iter().chain(&t.exclude) {
            check_glob(&g.0)?;
        }
        Ok(Self {
            selector: t.selector.as_ref().map(Selector::new).transpose()?,
            include: t.include.iter().map(|g| g.0.clone()).collect(),
            exclude: t.exclude.iter().map(|g| g.0.clone()).collect(),
        })
    }

    /// Whether a namespace named `name` with `labels` is selected (the rule's
    /// own namespace and terminating namespaces are excluded elsewhere).
    pub fn selects(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.selector.as_ref().is_none_or(|s| s.matches(labels))
            && (self.include.is_empty() || self.include.iter().any(|g| glob_match(g, name)))
            && !self.exclude.iter().any(|g| glob_match(g, name))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::crd::{LabelKey, LabelSelectorRequirement, LabelValue, NamespaceGlob};
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn sel(ml: &[(&str, &str)], ex: Vec<(&str, SelectorOperator, Vec<&str>)>) -> LabelSelector {
        LabelSelector {
            match_labels: ml.iter().map(|(k, v)| (LabelKey(k.to_string()), LabelValue(v.to_string()))).collect(),
            match_expressions: ex
                .into_iter()
                .map(|(k, op, vs)| LabelSelectorRequirement {
                    key: k.to_string(),
                    operator: op,
                    values: vs.into_iter().map(|v| LabelValue(v.to_string())).collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn selector_semantics() {
        let s = Selector::new(&sel(
            &[("app", "x")],
            vec![
                ("tier", SelectorOperator::In, vec!["a", "b"]),
                ("env", SelectorOperator::NotIn, vec!["prod"]),
                ("team", SelectorOperator::Exists, vec![]),
                ("legacy", SelectorOperator::DoesNotExist, vec![]),
            ],
        ))
        .unwrap();
        assert!(s.matches(&labels(&[("app", "x"), ("tier", "a"), ("team", "t")])));
        assert!(!s.matches(&labels(&[("app", "x"), ("tier", "c"), ("team", "t")])));
        assert!(!s.matches(&labels(&[("app", "x"), ("tier", "a"), ("team", "t"), ("env", "prod")])));
        assert!(!s.matches(&labels(&[("app", "x"), ("tier", "a")])));
        assert!(!s.matches(&labels(&[("app", "x"), ("tier", "a"), ("team", "t"), ("legacy", "")])));
        assert_eq!(s.to_query(), "app=x,tier in (a,b),env notin (prod),team,!legacy");
        assert!(Selector::new(&LabelSelector::default()).unwrap().matches(&BTreeMap::new()));
    }

    #[test]
    fn bad_selectors_are_rejected() {
        assert!(Selector::new(&sel(&[("bad key", "x")], vec![])).is_err());
        assert!(Selector::new(&sel(&[("a", "-x")], vec![])).is_err());
        assert!(Selector::new(&sel(&[("Bad_Prefix/a", "x")], vec![])).is_err());
        assert!(Selector::new(&sel(&[], vec![("a", SelectorOperator::In, vec![])])).is_err());
        assert!(Selector::new(&sel(&[], vec![("a", SelectorOperator::Exists, vec!["x"])])).is_err());
        assert!(Selector::new(&sel(&[("example.com/a", "")], vec![])).is_ok());
    }

    #[test]
    fn globs() {
        assert!(glob_match("team-*", "team-a"));
        assert!(glob_match("team-*", "team-"));
        assert!(!glob_match("team-*", "xteam-a"));
        assert!(glob_match("*-prod", "a-prod"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("*", ""));
        assert!(glob_match("k*-*-s", "kube-x-system-s"));
    }

    #[test]
    fn target_filter_applies_exclude_last() {
        let t = NamespaceTargets {
            selector: Some(sel(&[("team", "a")], vec![])),
            include: vec![NamespaceGlob("team-*".into())],
            exclude: vec![NamespaceGlob("team-old*".into())],
        };
        let f = TargetFilter::new(Some(&t)).unwrap();
        assert!(f.selects("team-x", &labels(&[("team", "a")])));
        assert!(!f.selects("team-x", &labels(&[("team", "b")])));
        assert!(!f.selects("other", &labels(&[("team", "a")])));
        assert!(!f.selects("team-old1", &labels(&[("team", "a")])));
        assert!(TargetFilter::new(None).unwrap().selects("anything", &BTreeMap::new()));
        let bad = NamespaceTargets { include: vec![NamespaceGlob("Team".into())], ..Default::default() };
        assert!(TargetFilter::new(Some(&bad)).is_err());
    }

    fn glob_to_regex(g: &str) -> regex::Regex {
        let mut re = String::from("^");
        for c in g.chars() {
            match c {
                '*' => re.push_str(".*"),
                '?' => re.push('.'),
                c => re.push_str(&regex::escape(&c.to_string())),
            }
        }
        re.push('$');
        regex::Regex::new(&re).unwrap()
    }

    proptest! {
        #[test]
        fn glob_agrees_with_a_regex(glob in "[ab*?-]{0,8}", name in "[ab-]{0,10}") {
            prop_assert_eq!(glob_match(&glob, &name), glob_to_regex(&glob).is_match(&name));
        }

        #[test]
        fn match_labels_selector_matches_exactly_supersets(
            want in proptest::collection::btree_map("[a-c]", "[xy]", 0..3),
            have in proptest::collection::btree_map("[a-d]", "[xy]", 0..4),
        ) {
            let s = LabelSelector {
                match_labels: want.iter().map(|(k, v)| (LabelKey(k.clone()), LabelValue(v.clone()))).collect(),
                match_expressions: vec![],
            };
            let expected = want.iter().all(|(k, v)| have.get(k) == Some(v));
            prop_assert_eq!(Selector::new(&s).unwrap().matches(&have), expected);
        }
    }
}
