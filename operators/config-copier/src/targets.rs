//! Namespace targets of a CopyRule: a label selector and name globs. The
//! selector and glob primitives are the suite's (`flotilla_shared::selector`). Pure.

use std::collections::BTreeMap;

pub use flotilla_shared::selector::{InvalidSpec, Selector, check_glob, glob_match};

use crate::crd::NamespaceTargets;

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
    use crate::crd::{LabelKey, LabelSelector, LabelSelectorRequirement, LabelValue, NamespaceGlob, SelectorOperator};
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
