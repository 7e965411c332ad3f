//! The rules' claims, shared between reconciles: what each rule wants
//! (its [`Claim`]: names, namespaces, rank), so that two rules wanting one
//! object agree on who has it, and the conflicts already reported per rule
//! (a conflict is warned about once). Who wins is the plan's (pure, over
//! a [`ClaimSet`] read once); this module only keeps the claims. A change
//! that may change another rule's decision RETURNS the rules to wake: the
//! caller wakes them (this module holds no trigger).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::copy::RuleId;
use crate::plan::{Claim, ClaimSet};

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
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::crd::SourceKind;
    use crate::plan::Rank;

    fn claim(rule: &RuleId, kind: SourceKind, names: &[&str]) -> Claim {
        Claim {
            rank: Rank { created: Some("2026-01-01T00:00:00Z".into()), rule: rule.clone() },
            kind,
            names: names.iter().map(|n| n.to_string()).collect(),
            namespaces: ["b".to_string()].into(),
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
}
