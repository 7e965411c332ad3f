//! `rolloutOnChange` after a rule's writes: for each copy updated in a
//! namespace that accepts rollouts, that namespace's workloads consuming
//! the updated copies read ([`crate::read::workloads`], a list, only now:
//! nothing is watched),
//! those to roll chosen ([`plan::rollouts::to_roll`], pure) and patched
//! ([`crate::apply::rollouts`]). Each step is its own module's.

use std::collections::{BTreeMap, HashMap};

use kube::Client;

use crate::apply::rollouts::roll;
use crate::copy::CopyKey;
use crate::plan::NamespaceInfo;
use crate::plan::rollouts::to_roll;
use crate::read::workloads::{Changed, list_workloads};

/// What the rollouts of one reconcile did.
#[derive(Debug, Default)]
pub(crate) struct Rolled {
    /// Workloads patched, as `namespace/Kind/name`.
    pub patched: Vec<String>,
    /// Failed reads and patches, as messages.
    pub failures: Vec<String>,
}

/// Rolls the consumers of the `updated` copies (key, data hash) in the
/// namespaces that accept rollouts; the others are left alone.
pub(crate) async fn roll_consumers(
    client: &Client,
    field_manager: &str,
    updated: Vec<(CopyKey, String)>,
    namespaces: &HashMap<String, NamespaceInfo>,
) -> Rolled {
    let mut by_namespace: BTreeMap<String, Vec<(CopyKey, String)>> = BTreeMap::new();
    for (key, hash) in updated {
        if namespaces.get(&*key.namespace).is_some_and(NamespaceInfo::accepts_rollouts) {
            by_namespace.entry(key.namespace.to_string()).or_default().push((key, hash));
        }
    }
    let mut rolled = Rolled::default();
    for (ns, copies) in by_namespace {
        let changed: Changed = copies.iter().map(|(key, _)| (key.kind, key.name.to_string())).collect();
        let workloads = match list_workloads(client, &ns, &changed).await {
            Ok(w) => w,
            Err(e) => {
                rolled.failures.push(format!("listing the workloads of {ns} to roll them: {e}"));
                continue;
            }
        };
        // A workload consuming two changed copies rolls once, to the last
        // one's hash (its next change rolls it again).
        let mut patches: BTreeMap<(crate::plan::rollouts::WorkloadKind, String), String> = BTreeMap::new();
        for (key, hash) in &copies {
            for w in to_roll(key.kind, &key.name, hash, &workloads) {
                patches.insert((w.kind, w.name.clone()), hash.clone());
            }
        }
        for ((kind, name), hash) in patches {
            let what = format!("{ns}/{}/{name}", kind.as_str());
            match roll(client, field_manager, &ns, kind, &name, &hash).await {
                Ok(()) => rolled.patched.push(what),
                Err(e) => rolled.failures.push(format!("rolling {what}: {e}")),
            }
        }
    }
    rolled
}
