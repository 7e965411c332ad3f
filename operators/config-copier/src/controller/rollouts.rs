//! `rolloutOnChange` after a rule's writes: for each copy updated in a
//! namespace that accepts rollouts, that namespace's workloads consuming
//! the updated copies read ([`crate::read::workloads`], a list, only now:
//! nothing is watched),
//! those to roll chosen ([`plan::rollouts::to_roll`], pure) and patched
//! ([`crate::apply::rollouts`]). Each step is its own module's.
//!
//! A rollout that fails (a workload list refused, a patch denied by a
//! policy) is kept ([`Pending`]) and tried again at the rule's retry: by
//! then the copy is in sync, so nothing else would say that its consumers
//! still have to roll.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use kube::Client;
use tokio::sync::Semaphore;

use crate::apply::rollouts::roll;
use crate::copy::{CopyKey, RuleId};
use crate::plan::NamespaceInfo;
use crate::plan::rollouts::{ChangedCopy, patches};
use crate::read::workloads::{Changed, list_workloads};

/// What the rollouts of one reconcile did.
#[derive(Debug, Default)]
pub(crate) struct Rolled {
    /// Workloads patched, as `namespace/Kind/name`.
    pub patched: Vec<String>,
    /// Failed reads and patches, as messages.
    pub failures: Vec<String>,
    /// The updated copies (key, data hash) of the namespaces where a read
    /// or a patch failed, to roll again at the retry ([`Pending`]); the
    /// workloads that did roll are skipped then ([`to_roll`]).
    pub retry: Vec<(CopyKey, String)>,
}

/// The rollouts each rule still owes, kept between its reconciles. Bounded
/// by the rule's copies (one hash each); forgotten when the rule no longer
/// rolls anything ([`Pending::keep`] with nothing) or is deleted.
#[derive(Debug, Default)]
pub(crate) struct Pending(Mutex<HashMap<RuleId, Vec<(CopyKey, String)>>>);

impl Pending {
    /// What `rule` still owes, taken out (kept again only if it fails again).
    pub fn take(&self, rule: &RuleId) -> Vec<(CopyKey, String)> {
        self.0.lock().map(|mut m| m.remove(rule).unwrap_or_default()).unwrap_or_default()
    }

    /// Forgets what the rules not in `live` owe (deleted without their
    /// cleanup, e.g. their finalizer removed by hand).
    pub fn retain(&self, live: &std::collections::HashSet<RuleId>) {
        if let Ok(mut m) = self.0.lock() {
            m.retain(|rule, _| live.contains(rule));
        }
    }

    /// Keeps `retry` as what `rule` owes (nothing: forgets the rule).
    pub fn keep(&self, rule: &RuleId, retry: Vec<(CopyKey, String)>) {
        if let Ok(mut m) = self.0.lock() {
            if retry.is_empty() {
                m.remove(rule);
            } else {
                m.insert(rule.clone(), retry);
            }
        }
    }
}

/// A copy whose consumers to roll: its key, its data hash, and whether an
/// earlier reconcile owes it (`true`) or this one updated it.
pub(crate) type ToRoll = (CopyKey, String, bool);

/// What to roll in one reconcile: what is still owed, then this
/// reconcile's updates (a copy updated again rolls to its newest hash, as
/// updated now).
pub(crate) fn owed_and_updated(
    owed: Vec<(CopyKey, String)>,
    updated: impl IntoIterator<Item = (CopyKey, String)>,
) -> Vec<ToRoll> {
    let mut by_key: BTreeMap<CopyKey, (String, bool)> = owed.into_iter().map(|(k, h)| (k, (h, true))).collect();
    by_key.extend(updated.into_iter().map(|(k, h)| (k, (h, false))));
    by_key.into_iter().map(|(k, (h, owed))| (k, h, owed)).collect()
}

/// Rolls the consumers of the `updated` copies (key, data hash) in the
/// namespaces that accept rollouts; the others are left alone. Workloads
/// are listed under a permit of `listing` ([`list_workloads`]).
pub(crate) async fn roll_consumers(
    client: &Client,
    field_manager: &str,
    listing: &Semaphore,
    to_roll: Vec<ToRoll>,
    namespaces: &HashMap<String, NamespaceInfo>,
) -> Rolled {
    let mut by_namespace: BTreeMap<String, Vec<ToRoll>> = BTreeMap::new();
    for (key, hash, owed) in to_roll {
        if namespaces.get(&*key.namespace).is_some_and(NamespaceInfo::accepts_rollouts) {
            by_namespace.entry(key.namespace.to_string()).or_default().push((key, hash, owed));
        }
    }
    let mut rolled = Rolled::default();
    for (ns, copies) in by_namespace {
        let changed: Changed = copies.iter().map(|(key, _, _)| (key.kind, key.name.to_string())).collect();
        let workloads = match list_workloads(client, listing, &ns, &changed).await {
            Ok(w) => w,
            Err(e) => {
                rolled.failures.push(format!("listing the workloads of {ns} to roll them: {e}"));
                rolled.retry.extend(copies.into_iter().map(|(k, h, _)| (k, h)));
                continue;
            }
        };
        // A workload consuming two changed copies rolls once, to the last
        // one's hash (its next change rolls it again).
        let batch: Vec<ChangedCopy<'_>> = copies
            .iter()
            .map(|(key, hash, owed)| ChangedCopy { kind: key.kind, name: &key.name, hash, owed: *owed })
            .collect();
        let to_patch = patches(&batch, &workloads);
        drop(batch);
        let mut failed = false;
        for ((kind, name), hash) in to_patch {
            let what = format!("{ns}/{}/{name}", kind.as_str());
            match roll(client, field_manager, &ns, kind, &name, &hash).await {
                Ok(()) => rolled.patched.push(what),
                Err(e) => {
                    failed = true;
                    rolled.failures.push(format!("rolling {what}: {e}"));
                }
            }
        }
        if failed {
            rolled.retry.extend(copies.into_iter().map(|(k, h, _)| (k, h)));
        }
    }
    rolled
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::crd::SourceKind;

    fn key(ns: &str, name: &str) -> CopyKey {
        CopyKey { kind: SourceKind::ConfigMap, namespace: ns.into(), name: name.into() }
    }

    #[test]
    fn a_copy_updated_again_rolls_to_its_newest_hash_and_the_rest_owed_still_rolls() {
        let owed = vec![(key("a", "settings"), "old".to_string()), (key("b", "settings"), "b1".to_string())];
        let rolled = owed_and_updated(owed, [(key("a", "settings"), "new".to_string())]);
        assert_eq!(
            rolled,
            vec![(key("a", "settings"), "new".to_string(), false), (key("b", "settings"), "b1".to_string(), true)]
        );
    }

    #[test]
    fn what_is_owed_is_taken_once_and_nothing_owed_forgets_the_rule() {
        let pending = Pending::default();
        let rule = RuleId::new("team", "roll");
        pending.keep(&rule, vec![(key("a", "settings"), "h".to_string())]);
        assert_eq!(pending.take(&rule).len(), 1);
        assert!(pending.take(&rule).is_empty(), "taken out");
        pending.keep(&rule, vec![(key("a", "settings"), "h".to_string())]);
        pending.keep(&rule, Vec::new());
        assert!(pending.take(&rule).is_empty());
        assert!(pending.0.lock().unwrap().is_empty());
    }
}
