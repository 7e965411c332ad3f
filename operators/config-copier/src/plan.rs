//! Which copies should exist, and what to do about the ones that do. Pure:
//! everything here is computed from the caches, so it is unit- and
//! property-tested without a cluster.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::copy::{CopyKey, Existing, RuleId, Source};
use crate::crd::SourceKind;
use crate::selector::{Selector, TargetFilter};

/// A namespace as the metadata-only watch sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NamespaceInfo {
    pub labels: BTreeMap<String, String>,
    /// Has a deletionTimestamp: never a target.
    pub terminating: bool,
}

/// A checked rule: what the planner needs.
#[derive(Debug, Clone)]
pub struct RulePlan<'a> {
    pub id: &'a RuleId,
    pub kind: SourceKind,
    pub selector: &'a Selector,
    pub targets: &'a TargetFilter,
}

/// The namespaces a rule copies into: selected, not terminating, and never
/// the rule's own. Sorted.
pub fn target_namespaces<'n>(rule: &RulePlan<'_>, namespaces: &'n HashMap<String, NamespaceInfo>) -> Vec<&'n str> {
    let mut out: Vec<&str> = namespaces
        .iter()
        .filter(|(name, ns)| {
            !ns.terminating && name.as_str() != rule.id.namespace && rule.targets.selects(name, &ns.labels)
        })
        .map(|(name, _)| name.as_str())
        .collect();
    out.sort_unstable();
    out
}

/// The sources a rule copies: of its kind, in its own namespace (whatever
/// the caller passed), matching its selector. Sorted by name.
pub fn rule_sources<'s>(rule: &RulePlan<'_>, sources: &'s [Arc<Source>]) -> Vec<&'s Arc<Source>> {
    let mut out: Vec<&Arc<Source>> = sources
        .iter()
        .filter(|s| s.kind == rule.kind && s.namespace == rule.id.namespace && rule.selector.matches(&s.labels))
        .collect();
    out.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// Every copy that should exist: each source in each target namespace.
pub fn desired_copies(
    rule: &RulePlan<'_>,
    sources: &[Arc<Source>],
    namespaces: &HashMap<String, NamespaceInfo>,
) -> BTreeMap<CopyKey, Arc<Source>> {
    let targets = target_namespaces(rule, namespaces);
    let mut out = BTreeMap::new();
    for source in rule_sources(rule, sources) {
        for ns in &targets {
            out.insert(
                CopyKey { kind: rule.kind, namespace: (*ns).to_string(), name: source.name.clone() },
                Arc::clone(source),
            );
        }
    }
    out
}

/// What to do, from the desired copies and the copies this rule owns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Wanted but not among the rule's copies: look at what is there (maybe
    /// nothing, maybe someone else's object) before writing.
    pub missing: Vec<(CopyKey, Arc<Source>)>,
    /// The rule's copy exists but differs from its source (source changed or
    /// copy edited): rewrite.
    pub update: Vec<(CopyKey, Arc<Source>)>,
    /// The rule's copies nobody wants any more (only when pruning).
    pub delete: Vec<Existing>,
    /// The rule's copies that are not wanted but kept (prune: false).
    pub orphaned: usize,
    /// Wanted and already right.
    pub in_sync: usize,
}

impl Plan {
    /// How many API writes the plan asks for at most.
    pub fn writes(&self) -> usize {
        self.missing.len() + self.update.len() + self.delete.len()
    }
}

/// Compares `desired` with `owned` (the copies carrying this rule's
/// ownership label). Objects without the label never appear in `owned`, so
/// nothing here can delete or overwrite them: `missing` entries are checked
/// against the live object before any write.
pub fn diff(
    rule: &RuleId,
    desired: &BTreeMap<CopyKey, Arc<Source>>,
    owned: &HashMap<CopyKey, Existing>,
    prune: bool,
) -> Plan {
    let mut plan = Plan::default();
    for (key, source) in desired {
        match owned.get(key) {
            Some(e) if e.owned_by(rule) && e.in_sync_with(source) => plan.in_sync += 1,
            Some(e) if e.owned_by(rule) => plan.update.push((key.clone(), Arc::clone(source))),
            _ => plan.missing.push((key.clone(), Arc::clone(source))),
        }
    }
    let mut unwanted: Vec<&Existing> =
        owned.iter().filter(|(k, e)| e.owned_by(rule) && !desired.contains_key(*k)).map(|(_, e)| e).collect();
    unwanted.sort_unstable_by(|a, b| a.key.cmp(&b.key));
    if prune {
        plan.delete = unwanted.into_iter().cloned().collect();
    } else {
        plan.orphaned = unwanted.len();
    }
    plan
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::type_complexity)]
    use super::*;
    use crate::copy::{Content, Owner};
    use crate::crd::{LabelKey, LabelSelector, LabelValue, NamespaceGlob, NamespaceTargets};
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn source(ns: &str, name: &str, l: &[(&str, &str)], value: &str) -> Arc<Source> {
        Arc::new(Source::new(
            SourceKind::ConfigMap,
            ns,
            name,
            &labels(l),
            &BTreeMap::new(),
            Content { data: labels(&[("k", value)]), ..Default::default() },
        ))
    }

    fn copy_of(rule: &RuleId, key: &CopyKey, s: &Source) -> Existing {
        Existing::from_json(key.kind, &s.copy_manifest(rule, &key.namespace)).unwrap()
    }

    fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: pairs.iter().map(|(k, v)| (LabelKey(k.to_string()), LabelValue(v.to_string()))).collect(),
            match_expressions: vec![],
        }
    }

    fn nss(items: &[(&str, &[(&str, &str)], bool)]) -> HashMap<String, NamespaceInfo> {
        items.iter().map(|(n, l, t)| (n.to_string(), NamespaceInfo { labels: labels(l), terminating: *t })).collect()
    }

    #[test]
    fn the_seed_scenario() {
        let id = RuleId::new("default", "main-rule");
        let sel = Selector::new(&selector(&[("copyrator", "true")])).unwrap();
        let targets = TargetFilter::default();
        let rule = RulePlan { id: &id, kind: SourceKind::ConfigMap, selector: &sel, targets: &targets };
        let sources = vec![
            source("default", "cfg", &[("copyrator", "true")], "1"),
            source("default", "other", &[], "1"),
            source("elsewhere", "foreign", &[("copyrator", "true")], "1"),
        ];
        let namespaces = nss(&[("default", &[], false), ("a", &[], false), ("b", &[], false), ("gone", &[], true)]);
        let desired = desired_copies(&rule, &sources, &namespaces);
        let keys: Vec<String> = desired.keys().map(|k| format!("{}/{}", k.namespace, k.name)).collect();
        assert_eq!(keys, ["a/cfg", "b/cfg"], "own namespace, terminating ones and foreign sources excluded");

        let plan = diff(&id, &desired, &HashMap::new(), true);
        assert_eq!(plan.missing.len(), 2);
        // After the writes the copies are in sync; an update of the source makes them stale.
        let owned: HashMap<CopyKey, Existing> = desired.iter().map(|(k, s)| (k.clone(), copy_of(&id, k, s))).collect();
        assert_eq!(diff(&id, &desired, &owned, true).in_sync, 2);
        let updated = vec![source("default", "cfg", &[("copyrator", "true")], "2")];
        let desired2 = desired_copies(&rule, &updated, &namespaces);
        let plan = diff(&id, &desired2, &owned, true);
        assert_eq!((plan.update.len(), plan.in_sync, plan.missing.len()), (2, 0, 0));
    }

    #[test]
    fn unwanted_copies_are_pruned_only_with_prune() {
        let id = RuleId::new("default", "r");
        let s = source("default", "cfg", &[], "1");
        let key = CopyKey { kind: SourceKind::ConfigMap, namespace: "a".into(), name: "cfg".into() };
        let owned = HashMap::from([(key.clone(), copy_of(&id, &key, &s))]);
        assert_eq!(diff(&id, &BTreeMap::new(), &owned, true).delete.len(), 1);
        let kept = diff(&id, &BTreeMap::new(), &owned, false);
        assert_eq!((kept.delete.len(), kept.orphaned), (0, 1));
    }

    #[test]
    fn another_rules_copy_is_never_updated_or_deleted() {
        let me = RuleId::new("default", "me");
        let other = RuleId::new("default", "other");
        let s = source("default", "cfg", &[], "1");
        let key = CopyKey { kind: SourceKind::ConfigMap, namespace: "a".into(), name: "cfg".into() };
        let theirs = copy_of(&other, &key, &s);
        let owned = HashMap::from([(key.clone(), theirs)]);
        let desired = BTreeMap::from([(key.clone(), s.clone())]);
        let plan = diff(&me, &desired, &owned, true);
        assert_eq!(plan.missing.len(), 1, "looked at before writing, not updated");
        assert!(diff(&me, &BTreeMap::new(), &owned, true).delete.is_empty());
    }

    #[test]
    fn namespace_selector_and_globs() {
        let id = RuleId::new("src", "r");
        let sel = Selector::new(&LabelSelector::default()).unwrap();
        let targets = TargetFilter::new(Some(&NamespaceTargets {
            selector: Some(selector(&[("team", "a")])),
            include: vec![NamespaceGlob("team-*".into())],
            exclude: vec![NamespaceGlob("team-x*".into())],
        }))
        .unwrap();
        let rule = RulePlan { id: &id, kind: SourceKind::ConfigMap, selector: &sel, targets: &targets };
        let namespaces = nss(&[
            ("team-1", &[("team", "a")], false),
            ("team-2", &[("team", "b")], false),
            ("team-x1", &[("team", "a")], false),
            ("other", &[("team", "a")], false),
        ]);
        assert_eq!(target_namespaces(&rule, &namespaces), ["team-1"]);
    }

    fn arb_world()
    -> impl Strategy<Value = (Vec<(String, bool, bool)>, Vec<(String, bool, u8)>, Vec<(usize, usize, u8, bool)>)> {
        (
            // namespaces: name, labelled team=a, terminating
            proptest::collection::vec(("[a-f]{1,2}", any::<bool>(), proptest::bool::weighted(0.1)), 0..8),
            // sources: name, matches the selector, content version
            proptest::collection::vec(("[p-s]{1,2}", any::<bool>(), 0u8..3), 0..5),
            // existing copies: ns index, source index, content version, owned by us
            proptest::collection::vec((0usize..8, 0usize..5, 0u8..3, any::<bool>()), 0..12),
        )
    }

    proptest! {
        /// Whatever exists, the plan: covers every desired copy exactly once,
        /// never touches objects of other owners, only deletes unwanted
        /// copies of this rule (and only when pruning), and after carrying it
        /// out the next plan has nothing left to do.
        #[test]
        fn plans_are_complete_safe_and_converge((ns_in, src_in, ex_in) in arb_world(), prune in any::<bool>()) {
            let id = RuleId::new("home", "r");
            let other = RuleId::new("home", "other");
            let sel = Selector::new(&selector(&[("copy", "yes")])).unwrap();
            let targets = TargetFilter::new(Some(&NamespaceTargets {
                selector: Some(selector(&[("team", "a")])), ..Default::default()
            })).unwrap();
            let rule = RulePlan { id: &id, kind: SourceKind::ConfigMap, selector: &sel, targets: &targets };
            let mut namespaces: HashMap<String, NamespaceInfo> = ns_in.iter().map(|(n, team, term)| {
                let l = if *team { labels(&[("team", "a")]) } else { BTreeMap::new() };
                (n.clone(), NamespaceInfo { labels: l, terminating: *term })
            }).collect();
            namespaces.insert("home".into(), NamespaceInfo { labels: labels(&[("team", "a")]), terminating: false });
            let sources: Vec<Arc<Source>> = src_in.iter().map(|(n, m, v)| {
                source("home", n, if *m { &[("copy", "yes")] } else { &[] }, &v.to_string())
            }).collect();
            let ns_names: Vec<String> = ns_in.iter().map(|(n, ..)| n.clone()).collect();
            let mut owned: HashMap<CopyKey, Existing> = HashMap::new();
            for (ni, si, v, mine) in &ex_in {
                let (Some(ns), Some((sname, ..))) = (ns_names.get(*ni), src_in.get(*si)) else { continue };
                let key = CopyKey { kind: SourceKind::ConfigMap, namespace: ns.clone(), name: sname.clone() };
                let s = source("home", sname, &[("copy", "yes")], &v.to_string());
                owned.insert(key.clone(), copy_of(if *mine { &id } else { &other }, &key, &s));
            }

            let desired = desired_copies(&rule, &sources, &namespaces);
            for key in desired.keys() {
                prop_assert_ne!(&key.namespace, "home");
                prop_assert!(!namespaces[&key.namespace].terminating);
                prop_assert_eq!(namespaces[&key.namespace].labels.get("team").map(String::as_str), Some("a"));
            }
            let plan = diff(&id, &desired, &owned, prune);
            prop_assert_eq!(plan.in_sync + plan.update.len() + plan.missing.len(), desired.len());
            for (key, _) in &plan.update {
                prop_assert!(owned[key].owned_by(&id));
            }
            for e in &plan.delete {
                prop_assert!(prune);
                prop_assert!(e.owned_by(&id));
                prop_assert!(!desired.contains_key(&e.key));
            }

            // Carry the plan out: missing ones are written unless someone else holds them.
            let mut after = owned.clone();
            for (key, s) in plan.missing.iter().chain(&plan.update) {
                if after.get(key).is_none_or(|e| e.owned_by(&id)) {
                    after.insert(key.clone(), copy_of(&id, key, s));
                }
            }
            for e in &plan.delete {
                after.remove(&e.key);
            }
            let again = diff(&id, &desired, &after, prune);
            prop_assert!(again.update.is_empty() && again.delete.is_empty());
            // Only conflicts (objects of the other owner) remain "missing".
            for (key, _) in &again.missing {
                prop_assert!(after[key].owner.as_ref().is_some_and(|o: &Owner| o.label == other.label_value()));
            }
        }
    }
}
