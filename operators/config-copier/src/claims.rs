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
    /// Creation time (RFC 3339 sorts as text; a missing one, which the API
    /// server never leaves, sorts first).
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

    /// Whether some copy is wanted by both: one kind, and a name and a
    /// namespace in common (a claim wants every name in every namespace
    /// it lists). Only a rule whose claim overlaps another's can win or
    /// lose a copy to it.
    pub fn overlaps(&self, other: &Claim) -> bool {
        // `is_disjoint` looks the smaller set up in the larger (a platform
        // rule's claim lists every namespace).
        self.kind == other.kind
            && !self.names.is_disjoint(&other.names)
            && !self.namespaces.is_disjoint(&other.namespaces)
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

/// [`claimed_by`] for the many keys of one plan: the claims that rank
/// above the rule's and overlap it, found once, so that each key is
/// checked against those alone (against every claim, a rule copying into
/// 10,000 namespaces beside 1,000 other rules made 10 million checks per
/// plan; issue 28).
pub struct Rivals<'c> {
    claims: &'c ClaimSet,
    rule: &'c RuleId,
    mine: Option<&'c Claim>,
    above: Vec<&'c Claim>,
}

impl<'c> Rivals<'c> {
    pub fn of(claims: &'c ClaimSet, rule: &'c RuleId) -> Self {
        let mine = claims.get(rule).map(|c| &**c);
        let above = match mine {
            Some(m) => claims.values().map(|c| &**c).filter(|c| c.rank < m.rank && c.overlaps(m)).collect(),
            None => Vec::new(),
        };
        Rivals { claims, rule, mine, above }
    }

    /// The same answer as [`claimed_by`].
    pub fn claimed_by(&self, key: &CopyKey) -> Option<RuleId> {
        let mine = self.mine?;
        if !mine.wants(key) {
            // Not a key of the claim the rivals were chosen by.
            return claimed_by(self.claims, self.rule, key);
        }
        winning_claim(key, self.above.iter().copied()).map(|w| w.rank.rule.clone())
    }
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
    /// rules to wake when it changed: those whose claim overlaps the old
    /// one or the new one — one of them may now win or lose a copy. The
    /// others' decisions do not read this claim (waking every rule of the
    /// kind, 1,000 rules starting together woke each other a million
    /// times; issue 28).
    #[must_use = "the rules returned must be woken"]
    pub fn set(&self, rule: &RuleId, claim: Option<Claim>) -> Vec<RuleId> {
        let mut claims = lock(&self.claims);
        let changed = claims.get(rule).map(|c| &**c) != claim.as_ref();
        if !changed {
            return Vec::new();
        }
        let old = match claim {
            Some(c) => claims.insert(rule.clone(), Arc::new(c)),
            None => claims.remove(rule),
        };
        let new = claims.get(rule);
        let touched = |c: &Claim| [old.as_deref(), new.map(|n| &**n)].into_iter().flatten().any(|o| o.overlaps(c));
        claims.iter().filter(|(id, c)| *id != rule && touched(c)).map(|(id, _)| id.clone()).collect()
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

    /// Forgets the claims of rules not in `live` (a rule gone from the
    /// cache was forgotten, and its claim with it, by its cleanup; this
    /// collects what a missed deletion left, e.g. a finalizer removed by
    /// hand). Returns the rules to wake, as [`Self::set`] does.
    #[must_use = "the rules returned must be woken"]
    pub fn retain(&self, live: &HashSet<RuleId>) -> Vec<RuleId> {
        let mut claims = lock(&self.claims);
        let gone: Vec<Arc<Claim>> =
            claims.iter().filter(|(id, _)| !live.contains(*id)).map(|(_, c)| Arc::clone(c)).collect();
        claims.retain(|id, _| live.contains(id));
        claims.iter().filter(|(_, c)| gone.iter().any(|g| g.overlaps(c))).map(|(id, _)| id.clone()).collect()
    }

    /// The rules whose claims want `key`: when a copy there goes or
    /// changes hands, one of them may now make it its own.
    pub fn wanting(&self, key: &CopyKey) -> Vec<RuleId> {
        lock(&self.claims).iter().filter(|(_, c)| c.wants(key)).map(|(id, _)| id.clone()).collect()
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
    fn a_changed_claim_wakes_the_rules_whose_claims_overlap_it() {
        let claims = Claims::default();
        let (a, b, s) = (RuleId::new("x", "a"), RuleId::new("x", "b"), RuleId::new("x", "s"));
        assert!(claims.set(&a, Some(claim(&a, SourceKind::ConfigMap, &["cfg"]))).is_empty(), "nobody else yet");
        assert_eq!(claims.set(&b, Some(claim(&b, SourceKind::ConfigMap, &["cfg"]))), vec![a.clone()]);
        assert!(claims.set(&s, Some(claim(&s, SourceKind::Secret, &["cfg"]))).is_empty(), "another kind");
        assert!(claims.set(&b, Some(claim(&b, SourceKind::ConfigMap, &["cfg"]))).is_empty(), "unchanged");
        // b's old claim wanted a's copy: a may now have it alone.
        assert_eq!(claims.set(&b, Some(claim(&b, SourceKind::ConfigMap, &["other"]))), vec![a.clone()]);
        assert!(claims.forget(&a).is_empty(), "a and b no longer want a copy in common");
        assert!(claims.forget(&a).is_empty(), "forgotten twice: nothing changed");
        assert_eq!(claims.view().len(), 2);
        assert!(claims.retain(&[s.clone()].into()).is_empty(), "b's claim overlapped nobody's");
        assert_eq!(claims.view().keys().collect::<Vec<_>>(), vec![&s]);
    }

    /// The start-up of issue 28's large preset: a platform rule copying
    /// one name into every namespace, and team rules copying another into
    /// their own. A claim published wakes none of the others, and a team
    /// rule copying the platform's name into its namespaces wakes only
    /// the platform rule (each rule's first claim woke every other rule:
    /// a million wake-ups for 1,000 rules).
    #[test]
    fn claims_that_want_no_copy_in_common_wake_nobody() {
        let claims = Claims::default();
        let named = |rule: &RuleId, name: &str, namespaces: &[String]| Claim {
            rank: Rank { created: Some("2026-01-01T00:00:00Z".into()), rule: rule.clone() },
            kind: SourceKind::ConfigMap,
            names: [Arc::from(name)].into(),
            namespaces: namespaces.iter().map(|n| Arc::from(n.as_str())).collect(),
        };
        let team_namespaces = |t: usize| (t * 10..t * 10 + 10).map(|i| format!("ns-{i}")).collect::<Vec<_>>();
        let every: Vec<String> = (0..1_000).map(|i| format!("ns-{i}")).collect();
        let platform = RuleId::new("platform", "ca");
        assert!(claims.set(&platform, Some(named(&platform, "ca", &every))).is_empty());
        for t in 0..100 {
            let team = RuleId::new(format!("ns-{}", t * 10), "team");
            let woken = claims.set(&team, Some(named(&team, "team-config", &team_namespaces(t))));
            assert!(woken.is_empty(), "team {t} woke {woken:?}");
        }
        let greedy = RuleId::new("ns-20", "greedy");
        assert_eq!(claims.set(&greedy, Some(named(&greedy, "ca", &team_namespaces(2)))), vec![platform.clone()]);
        // The platform rule leaving those namespaces: greedy may now have them.
        assert_eq!(claims.set(&platform, Some(named(&platform, "ca", &every[500..]))), vec![greedy]);
        assert!(
            claims.set(&platform, Some(named(&platform, "ca", &every[600..]))).is_empty(),
            "greedy's are not in it"
        );
    }

    /// A copy gone wakes the rules wanting its key; the claims of rules
    /// deleted without their cleanup, collected, wake those they overlapped.
    #[test]
    fn a_freed_key_wakes_the_rules_that_want_it() {
        let claims = Claims::default();
        let (a, b, c) = (RuleId::new("x", "a"), RuleId::new("x", "b"), RuleId::new("x", "c"));
        let _ = claims.set(&a, Some(claim(&a, SourceKind::ConfigMap, &["cfg"])));
        let _ = claims.set(&b, Some(claim(&b, SourceKind::ConfigMap, &["cfg", "more"])));
        let _ = claims.set(&c, Some(claim(&c, SourceKind::ConfigMap, &["other"])));
        let mut wanting = claims.wanting(&key("b", "cfg"));
        wanting.sort();
        assert_eq!(wanting, vec![a.clone(), b.clone()]);
        assert!(claims.wanting(&key("elsewhere", "cfg")).is_empty());
        assert_eq!(claims.retain(&[b.clone(), c.clone()].into()), vec![b.clone()], "a's claim went: b may take cfg");
    }

    proptest::proptest! {
        /// `Rivals` answers as `claimed_by` does, for any claims and key.
        #[test]
        fn rivals_answer_as_every_claim_does(
            rules in proptest::collection::vec(
                (proptest::option::of(0u8..4), proptest::collection::btree_set(0u8..4, 0..3), proptest::collection::btree_set(0u8..4, 0..3), proptest::bool::ANY),
                1..6,
            ),
            me in 0usize..6,
            key_ns in 0u8..4,
            key_name in 0u8..4,
        ) {
            let set: ClaimSet = rules
                .iter()
                .enumerate()
                .map(|(i, (created, names, namespaces, secret))| {
                    let id = RuleId::new("x", format!("r{i}"));
                    let claim = Claim {
                        rank: Rank { created: created.map(|c| format!("2026-01-0{}T00:00:00Z", c + 1)), rule: id.clone() },
                        kind: if *secret { SourceKind::Secret } else { SourceKind::ConfigMap },
                        names: names.iter().map(|n| Arc::from(format!("n{n}").as_str())).collect(),
                        namespaces: namespaces.iter().map(|n| Arc::from(format!("s{n}").as_str())).collect(),
                    };
                    (id, Arc::new(claim))
                })
                .collect();
            let rule = RuleId::new("x", format!("r{me}"));
            let key = CopyKey { kind: SourceKind::ConfigMap, namespace: format!("s{key_ns}").into(), name: format!("n{key_name}").into() };
            proptest::prop_assert_eq!(Rivals::of(&set, &rule).claimed_by(&key), claimed_by(&set, &rule, &key));
        }
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
