//! `rolloutOnChange` after a rule's writes: for each copy updated in a
//! namespace that accepts rollouts, that namespace's workloads consuming
//! the updated copies read ([`crate::read::workloads`], a list, only now:
//! nothing is watched),
//! those to roll chosen ([`patches`], pure) and patched
//! ([`crate::apply::rollouts`]). Each step is its own module's.
//!
//! A rollout that fails (a workload list refused, a patch denied by a
//! policy) is kept ([`Pending`], per workload when its patch failed) and
//! tried again at the rule's retry: by then the copy is in sync, so nothing
//! else would say that its consumers still have to roll.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use kube::Client;
use tokio::sync::Semaphore;

use crate::apply::rollouts::roll;
use crate::copy::{CopyKey, RuleId};
use crate::plan::NamespaceInfo;
use crate::plan::rollouts::{ChangedCopy, OwedPatch, WorkloadKind, patches};
use crate::read::workloads::{Changed, list_workloads};

/// What the rollouts of one reconcile did.
#[derive(Debug, Default)]
pub(crate) struct Rolled {
    /// Workloads patched, as `namespace/Kind/name`.
    pub patched: Vec<String>,
    /// Failed reads and patches, as messages.
    pub failures: Vec<String>,
    /// What failed, to try again at the retry ([`Pending`]).
    pub retry: Vec<Owed>,
}

/// A rollout still owed: the changed copy and its data hash, and the
/// workload (kind, name) whose patch failed — or `None` when the listing
/// of the copy's namespace failed (then each of its consumers is owed).
/// Kept per workload, so that a retry rolls only what did not roll.
pub(crate) type Owed = (CopyKey, String, Option<(WorkloadKind, String)>);

/// The rollouts each rule still owes, kept between its reconciles. Bounded
/// by the rule's copies and their consumers (a patch failed for each);
/// forgotten when the rule no longer rolls anything ([`Pending::keep`]
/// with nothing) or is deleted.
#[derive(Debug, Default)]
pub(crate) struct Pending(Mutex<HashMap<RuleId, Vec<Owed>>>);

impl Pending {
    /// What `rule` still owes, taken out (kept again only if it fails again).
    pub fn take(&self, rule: &RuleId) -> Vec<Owed> {
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
    pub fn keep(&self, rule: &RuleId, retry: Vec<Owed>) {
        if let Ok(mut m) = self.0.lock() {
            if retry.is_empty() {
                m.remove(rule);
            } else {
                m.insert(rule.clone(), retry);
            }
        }
    }
}

/// One namespace's share of a reconcile's rollouts.
#[derive(Default)]
struct InNamespace {
    /// Copies whose every consumer is to roll: updated now, or owed from
    /// a failed listing (a copy updated now wins: its newest hash).
    changed: BTreeMap<CopyKey, String>,
    /// Patches owed from an earlier reconcile.
    owed: Vec<(CopyKey, String, (WorkloadKind, String))>,
}

/// Rolls the consumers of the `updated` copies (key, data hash), and what
/// is `owed`, in the namespaces that accept rollouts; the others are left
/// alone. Workloads are listed under a permit of `listing` ([`list_workloads`]).
pub(crate) async fn roll_consumers(
    client: &Client,
    field_manager: &str,
    listing: &Semaphore,
    updated: Vec<(CopyKey, String)>,
    owed: Vec<Owed>,
    namespaces: &HashMap<String, NamespaceInfo>,
) -> Rolled {
    let mut by_namespace: BTreeMap<String, InNamespace> = BTreeMap::new();
    let accepts = |key: &CopyKey| namespaces.get(&*key.namespace).is_some_and(NamespaceInfo::accepts_rollouts);
    for (key, hash, workload) in owed.into_iter().filter(|(k, _, _)| accepts(k)) {
        let ns = by_namespace.entry(key.namespace.to_string()).or_default();
        match workload {
            None => {
                ns.changed.insert(key, hash);
            }
            Some(w) => ns.owed.push((key, hash, w)),
        }
    }
    for (key, hash) in updated.into_iter().filter(|(k, _)| accepts(k)) {
        by_namespace.entry(key.namespace.to_string()).or_default().changed.insert(key, hash);
    }
    let mut rolled = Rolled::default();
    for (ns, mut copies) in by_namespace {
        // A copy that changed again decides alone (its newest hash).
        copies.owed.retain(|(key, _, _)| !copies.changed.contains_key(key));
        let consumed: Changed = copies
            .changed
            .keys()
            .chain(copies.owed.iter().map(|(k, _, _)| k))
            .map(|key| (key.kind, key.name.to_string()))
            .collect();
        let workloads = match list_workloads(client, listing, &ns, &consumed).await {
            Ok(w) => w,
            Err(e) => {
                rolled.failures.push(format!("listing the workloads of {ns} to roll them: {e}"));
                rolled.retry.extend(copies.changed.into_iter().map(|(k, h)| (k, h, None)));
                rolled.retry.extend(copies.owed.into_iter().map(|(k, h, w)| (k, h, Some(w))));
                continue;
            }
        };
        let changed: Vec<ChangedCopy<'_>> =
            copies.changed.iter().map(|(key, hash)| ChangedCopy { kind: key.kind, name: &key.name, hash }).collect();
        let owed: Vec<OwedPatch<'_>> = copies
            .owed
            .iter()
            .map(|(key, hash, (kind, name))| OwedPatch {
                copy: ChangedCopy { kind: key.kind, name: &key.name, hash },
                workload: (*kind, name),
            })
            .collect();
        let to_patch = patches(&changed, &owed, &workloads);
        for ((kind, name), (copy_kind, copy_name, hash)) in to_patch {
            let what = format!("{ns}/{}/{name}", kind.as_str());
            match roll(client, field_manager, &ns, kind, &name, &hash).await {
                Ok(()) => rolled.patched.push(what),
                Err(e) => {
                    rolled.failures.push(format!("rolling {what}: {e}"));
                    let key = CopyKey { kind: copy_kind, namespace: ns.as_str().into(), name: copy_name.into() };
                    rolled.retry.push((key, hash, Some((kind, name))));
                }
            }
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
    fn what_is_owed_is_taken_once_and_nothing_owed_forgets_the_rule() {
        let pending = Pending::default();
        let rule = RuleId::new("team", "roll");
        pending.keep(&rule, vec![(key("a", "settings"), "h".to_string(), None)]);
        assert_eq!(pending.take(&rule).len(), 1);
        assert!(pending.take(&rule).is_empty(), "taken out");
        pending.keep(&rule, vec![(key("a", "settings"), "h".to_string(), None)]);
        pending.keep(&rule, Vec::new());
        assert!(pending.take(&rule).is_empty());
        assert!(pending.0.lock().unwrap().is_empty());
    }
}
