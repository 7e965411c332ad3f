//! A rule's copies planned (pure): every copy it wants and every copy of
//! its own, as the snapshot shows them ([`copy_facts`]), decided ([`super::decide`]) and
//! grouped for the writes — those that need a source's payload by source
//! (each source read once for all its copies), the rest apart.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{Action, CopyContext, Desired, NamespaceInfo, Ownership, Policy, decide, ownership};
use crate::claims::{ClaimSet, LiveRules, Rivals, owner_state};
use crate::copy::{CopyKey, Observed, RuleRef, SourceInfo};
use crate::crd::OnConflict;

/// One copy as the snapshot shows it.
#[derive(Debug, Clone)]
pub struct CopyFacts {
    pub key: CopyKey,
    /// The source it copies, when the rule wants it.
    pub source: Option<Arc<SourceInfo>>,
    /// What is there (as far as the caches know), and whose it is.
    pub observed: Option<(Observed, Ownership)>,
    pub ctx: CopyContext,
}

/// One copy's decided action, to carry out.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub key: CopyKey,
    pub action: Action,
    pub ctx: CopyContext,
}

/// What a rule's copies need.
#[derive(Debug, Default, PartialEq)]
pub struct CopyPlan {
    /// Copies already as they should be.
    pub in_sync: usize,
    /// Writes that need a source's payload, by source name.
    pub by_source: BTreeMap<String, Vec<Job>>,
    /// Conflicts and deletions: no payload needed.
    pub without_payload: Vec<Job>,
}

impl CopyPlan {
    /// Writes (and reads) to carry out, all groups together.
    pub fn jobs(&self) -> usize {
        self.by_source.values().map(Vec::len).sum::<usize>() + self.without_payload.len()
    }
}

/// Decides every copy in `copies`.
pub fn plan_copies(copies: impl IntoIterator<Item = CopyFacts>) -> CopyPlan {
    let mut plan = CopyPlan::default();
    for CopyFacts { key, source, observed, ctx } in copies {
        let desired = source.as_deref().map(Desired::of);
        let action = decide(desired.as_ref(), observed.as_ref().map(|(o, w)| (o, w)), &ctx);
        match (action, source) {
            (Action::InSync, _) => plan.in_sync += 1,
            (Action::Nothing | Action::Keep, _) => {}
            (action @ (Action::Conflict(_) | Action::Delete { .. }), _) | (action, None) => {
                plan.without_payload.push(Job { key, action, ctx });
            }
            (action, Some(s)) => plan.by_source.entry(s.name.clone()).or_default().push(Job { key, action, ctx }),
        }
    }
    plan
}

/// What the plan of a rule's copies reads, from one snapshot of the caches.
pub struct Seen<'a> {
    pub me: &'a RuleRef,
    /// What the copy watch holds at every key the rule may care about.
    pub copies: &'a BTreeMap<CopyKey, Observed>,
    /// The live rules the copies' labels name.
    pub rules: &'a LiveRules,
    /// `--watch-namespace`: rules elsewhere are another installation's.
    pub scope: Option<&'a str>,
    /// The claims, this rule's new one included.
    pub claims: &'a ClaimSet,
    pub namespaces: &'a HashMap<String, NamespaceInfo>,
}

impl Seen<'_> {
    /// Whose `o` is, for this rule.
    pub fn ownership(&self, o: &Observed) -> Ownership {
        ownership(o.owner.as_deref(), self.me, |label| {
            owner_state(label, &self.me.id, &o.key, self.rules, self.scope, self.claims)
        })
    }
}

/// The copies to decide: every wanted one (`desired`) and every copy of
/// this rule's outside the protected namespaces (objects marked as this
/// rule's there were planted: config-copier never writes there, so they
/// are left alone, never pruned), each with what is there and whose it is.
pub fn copy_facts<'a>(
    desired: BTreeMap<CopyKey, Arc<SourceInfo>>,
    seen: &'a Seen<'a>,
    policy: &Policy,
    on_conflict: OnConflict,
    prune: bool,
) -> impl Iterator<Item = CopyFacts> + 'a {
    let label = seen.me.id.label_value();
    let mut keys: BTreeMap<CopyKey, Option<Arc<SourceInfo>>> = desired.into_iter().map(|(k, s)| (k, Some(s))).collect();
    for o in seen.copies.values() {
        let ours = o.owner.as_ref().is_some_and(|w| w.label_value().as_deref() == Some(label.as_str()));
        if ours && policy.may_touch(&o.key.namespace) {
            keys.entry(o.key.clone()).or_default();
        }
    }
    let rivals = Rivals::of(seen.claims, &seen.me.id);
    keys.into_iter().map(move |(key, source)| {
        let observed = seen.copies.get(&key).map(|o| (o.clone(), seen.ownership(o)));
        let ctx = CopyContext {
            on_conflict,
            prune,
            accepts_overwrite: seen.namespaces.get(&*key.namespace).is_some_and(|n| n.accepts_overwrite()),
            claimed_by: source.as_ref().and_then(|_| rivals.claimed_by(&key)),
        };
        CopyFacts { key, source, observed, ctx }
    })
}
