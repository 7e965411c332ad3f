//! A rule's copies planned (pure): every copy it wants and every copy of
//! its own, as the snapshot shows them, decided ([`super::decide`]) and
//! grouped for the writes — those that need a source's payload by source
//! (each source read once for all its copies), the rest apart.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Action, CopyContext, Desired, Ownership, decide};
use crate::copy::{CopyKey, Observed, SourceInfo};

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
