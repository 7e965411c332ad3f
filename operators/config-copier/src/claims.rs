//! Claims and conflicts: what each rule wants (its [`Claim`]: names,
//! namespaces, rank), so that two rules wanting one object agree on who
//! has it — who wins ([`winner`], [`claimed_by`]) and what is known of the
//! rule an object's marks name ([`owner_state`]), pure, over a [`ClaimSet`]
//! read once — and [`Claims`], the claims and the conflicts already
//! reported (a conflict is warned about once) kept between reconciles. A
//! change that may change another rule's decision RETURNS the rules to
//! wake: the caller wakes them (this module holds no trigger).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::copy::{CopyKey, RuleId};
use crate::crd::SourceKind;

/// A rule's precedence when two want the same object: the oldest rule,
/// then the smallest `namespace/name`. Smaller wins.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rank {
    /// Creation time (RFC 3339 sorts as text; a missing one sorts last).
    pub created: Option<String>,
    pub rule: RuleId,
}

/// What one rule wants, published for the others. Its names and
/// namespaces are the process's shared strings ([`flotilla_shared::intern`]):
/// every rule copying into a namespace, and every copy there, holds the
/// same one (issue 28).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub rank: Rank,
    pub kind: SourceKind,
    pub names: BTreeSet<Arc<str>>,
    pub namespaces: BTreeSet<Arc<str>>,
}

impl Claim {
    pub fn wants(&self, key: &CopyKey) -> bool {
        self.kind == key.kind && self.names.contains(&*key.name) && self.namespaces.contains(&*key.namespace)
    }
}

/// The rule that wins `key` among `claims` (the best rank wanting it).
pub fn winner<'c>(key: &CopyKey, claims: impl IntoIterator<Item = &'c Claim>) -> Option<&'c RuleId> {
    winning_claim(key, claims).map(|c| &c.rank.rule)
}

fn winning_claim<'c>(key: &CopyKey, claims: impl IntoIterator<Item = &'c Claim>) -> Option<&'c Claim> {
    claims.into_iter().filter(|c| c.wants(key)).min_by(|a, b| a.rank.cmp(&b.rank))
}

/// Every rule's claim, by rule, as one decision reads them ([`Claims`]
/// keeps them between reconciles).
pub type ClaimSet = HashMap<RuleId, Arc<Claim>>;

/// The rule ranking above `rule` that wants `key`, if any (none while
/// `rule` claims nothing).
pub fn claimed_by(claims: &ClaimSet, rule: &RuleId, key: &CopyKey) -> Option<RuleId> {
    let mine = claims.get(rule)?;
    winning_claim(key, claims.values().map(|c| &**c))
        .filter(|w| w.rank.rule != *rule && w.rank < mine.rank)
        .map(|w| w.rank.rule.clone())
}

/// The live rules of this installation that ownership labels name, by
/// label value: their id and UID (as the rules cache shows them).
pub type LiveRules = HashMap<String, (RuleId, String)>;

/// What is known of the rule behind ownership label `label`, for `me`
/// deciding about `key`: live (and whether it wants `key` but ranks below
/// `me`), outside this installation's `scope`, or gone.
pub fn owner_state(
    label: &str,
    me: &RuleId,
    key: &CopyKey,
    rules: &LiveRules,
    scope: Option<&str>,
    claims: &ClaimSet,
) -> OwnerState {
    if let Some((id, uid)) = rules.get(label) {
        let theirs = claims.get(id).filter(|c| c.wants(key));
        let loses_to_us = match (theirs, claims.get(me)) {
            (Some(t), Some(m)) => m.rank < t.rank,
            _ => false,
        };
        return OwnerState::Live { uid: uid.clone(), loses_to_us };
    }
    match scope {
        // The label is `<namespace>.<name>` (or a hash): a rule of ours starts with our namespace.
        Some(scope) if !label.starts_with(&format!("{scope}.")) => OwnerState::OutOfScope,
        _ => OwnerState::Gone,
    }
}

/// What the caller knows about the rule an object's marks name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerState {
    /// A live rule of ours (its UID), and whether it wants this object but ranks below us.
    Live { uid: String, loses_to_us: bool },
    /// Its namespace is outside this installation's scope.
    OutOfScope,
    /// No such rule.
    Gone,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere mid-update of a map; the map is still a map.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A target left alone, as reported: `(namespace, name)`.
pub type ConflictId = (String, String);

/// Every rule's claim and reported conflicts.
#[derive(Default)]
pub struct Claims {
    claims: Mutex<ClaimSet>,
    reported: Mutex<HashMap<RuleId, BTreeSet<ConflictId>>>,
}

impl Claims {
    /// The claims as they are now, for one plan (cheap: the claims are shared).
    pub fn view(&self) -> ClaimSet {
        lock(&self.claims).clone()
    }

    /// `f` of the claims as they are now, under the lock (no copy: a
    /// check before every create).
    pub fn with<R>(&self, f: impl FnOnce(&ClaimSet) -> R) -> R {
        f(&lock(&self.claims))
    }

    /// Publishes what `rule` wants (`None`: nothing). Returns the other
    /// rules of the kind to wake when it changed: one of them may now win
    /// or lose a name.
    #[must_use = "the rules returned must be woken"]
    pub fn set(&self, rule: &RuleId, claim: Option<Claim>) -> Vec<RuleId> {
        let mut claims = lock(&self.claims);
        let changed = claims.get(rule).map(|c| &**c) != claim.as_ref();
        if !changed {
            return Vec::new();
        }
        let kind = claim.as_ref().map(|c| c.kind).or_else(|| claims.get(rule).map(|c| c.kind));
        match claim {
            Some(c) => claims.insert(rule.clone(), Arc::new(c)),
            None => claims.remove(rule),
        };
        claims.iter().filter(|(id, c)| *id != rule && Some(c.kind) == kind).map(|(id, _)| id.clone()).collect()
    }

    /// Of `conflicts`, those not reported before for `rule`; remembers them all.
    pub fn new_conflicts(&self, rule: &RuleId, conflicts: BTreeSet<ConflictId>) -> Vec<ConflictId> {
        let mut reported = lock(&self.reported);
        let before = reported.get(rule);
        let new = conflicts.iter().filter(|c| !before.is_some_and(|b| b.contains(*c))).cloned().collect();
        reported.insert(rule.clone(), conflicts);
        new
    }

    /// Forgets a rule (deleted or invalid): its claim and reports. Returns
    /// the rules to wake (see [`Self::set`]).
    #[must_use = "the rules returned must be woken"]
    pub fn forget(&self, rule: &RuleId) -> Vec<RuleId> {
        lock(&self.reported).remove(rule);
        self.set(rule, None)
    }

    /// Forgets the claims of rules not in `live` (no rule is woken: a rule
    /// gone from the cache was forgotten, and its claim with it, by its
    /// cleanup; this only collects what a missed deletion left).
    pub fn retain(&self, live: &HashSet<RuleId>) {
        lock(&self.claims).retain(|id, _| live.contains(id));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn claim(rule: &RuleId, kind: SourceKind, names: &[&str]) -> Claim {
        Claim {
            rank: Rank { created: Some("2026-01-01T00:00:00Z".into()), rule: rule.clone() },
            kind,
            names: names.iter().map(|n| Arc::from(*n)).collect(),
            namespaces: [Arc::from("b")].into(),
        }
    }

    #[test]
    fn a_changed_claim_returns_the_other_rules_of_its_kind_to_wake() {
        let claims = Claims::default();
        let (a, b, s) = (RuleId::new("x", "a"), RuleId::new("x", "b"), RuleId::new("x", "s"));
        assert!(claims.set(&a, Some(claim(&a, SourceKind::ConfigMap, &["cfg"]))).is_empty(), "nobody else yet");
        assert_eq!(claims.set(&b, Some(claim(&b, SourceKind::ConfigMap, &["cfg"]))), vec![a.clone()]);
        assert!(claims.set(&s, Some(claim(&s, SourceKind::Secret, &["cfg"]))).is_empty(), "another kind");
        assert!(claims.set(&b, Some(claim(&b, SourceKind::ConfigMap, &["cfg"]))).is_empty(), "unchanged");
        assert_eq!(claims.set(&b, Some(claim(&b, SourceKind::ConfigMap, &["other"]))), vec![a.clone()]);
        assert_eq!(claims.forget(&a), vec![b.clone()], "a rule forgotten wakes the others of its kind");
        assert!(claims.forget(&a).is_empty(), "forgotten twice: nothing changed");
        assert_eq!(claims.view().len(), 2);
        claims.retain(&[s.clone()].into());
        assert_eq!(claims.view().keys().collect::<Vec<_>>(), vec![&s]);
    }

    #[test]
    fn a_conflict_is_new_once() {
        let claims = Claims::default();
        let r = RuleId::new("x", "a");
        let c = |n: &str| ("b".to_string(), n.to_string());
        assert_eq!(claims.new_conflicts(&r, [c("1"), c("2")].into()), vec![c("1"), c("2")]);
        assert_eq!(claims.new_conflicts(&r, [c("2"), c("3")].into()), vec![c("3")]);
        // Resolved, then back: new again.
        assert_eq!(claims.new_conflicts(&r, [c("3")].into()), Vec::<ConflictId>::new());
        assert_eq!(claims.new_conflicts(&r, [c("2"), c("3")].into()), vec![c("2")]);
        let _ = claims.forget(&r);
        assert_eq!(claims.new_conflicts(&r, [c("3")].into()), vec![c("3")]);
    }

    /// A ConfigMap copy's key (for this module's tests and the plan's).
    pub(crate) fn key(ns: &str, name: &str) -> CopyKey {
        CopyKey { kind: SourceKind::ConfigMap, namespace: ns.into(), name: name.into() }
    }

    /// `rule`'s claim on ConfigMaps named `cfg` in `namespaces`.
    pub(crate) fn claim_of(rule: &RuleId, created: &str, namespaces: &[&str]) -> Arc<Claim> {
        Arc::new(Claim {
            rank: Rank { created: Some(created.into()), rule: rule.clone() },
            kind: SourceKind::ConfigMap,
            names: [Arc::from("cfg")].into(),
            namespaces: namespaces.iter().map(|n| Arc::from(*n)).collect(),
        })
    }

    #[test]
    fn claims_and_owners_are_read_from_one_claim_set() {
        let k = key("b", "cfg");
        let (old, young) = (RuleId::new("z", "old"), RuleId::new("a", "young"));
        let claims: ClaimSet = [
            (old.clone(), claim_of(&old, "2026-01-01T00:00:00Z", &["b"])),
            (young.clone(), claim_of(&young, "2026-01-02T00:00:00Z", &["b"])),
        ]
        .into();
        assert_eq!(claimed_by(&claims, &young, &k), Some(old.clone()));
        assert_eq!(claimed_by(&claims, &old, &k), None, "the winner is claimed by nobody");
        assert_eq!(claimed_by(&claims, &RuleId::new("x", "none"), &k), None, "a rule that claims nothing");
        assert_eq!(claimed_by(&claims, &young, &key("c", "cfg")), None, "a name nobody else wants");
        let rules: LiveRules = [
            (old.label_value(), (old.clone(), "uid-old".to_string())),
            (young.label_value(), (young.clone(), "uid-young".to_string())),
        ]
        .into();
        let state = |label: &str, me: &RuleId, scope| owner_state(label, me, &k, &rules, scope, &claims);
        assert_eq!(
            state(&young.label_value(), &old, None),
            OwnerState::Live { uid: "uid-young".into(), loses_to_us: true }
        );
        assert_eq!(
            state(&old.label_value(), &young, None),
            OwnerState::Live { uid: "uid-old".into(), loses_to_us: false }
        );
        assert_eq!(state("elsewhere.r", &old, Some("z")), OwnerState::OutOfScope);
        assert_eq!(state("z.gone", &old, Some("z")), OwnerState::Gone, "ours, and no such rule");
        assert_eq!(state("elsewhere.r", &old, None), OwnerState::Gone, "every namespace is ours");
    }
}
