//! A deleted rule's copies to prune (when `prune`): found by asking the
//! API (not the cache: a copy written a moment ago is pruned too), and
//! planned as deletions of what is this rule's. The controller carries
//! them out and forgets the rule.

use flotilla_shared::paged_list::list_kept;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};

use crate::cache::{Caches, api_resource};
use crate::copy::{Observed, RULE_LABEL, RuleRef};
use crate::crd::{CopyRule, SourceKind};
use crate::error::Error;
use crate::plan::{Action as PlanAction, CopyContext, Job, Ownership, Policy};

/// Objects' metadata per page of the prune's list: ~13 MB at most (256 KiB
/// of annotations each); a rule's thousands of copies in a few hundred
/// requests, not thousands.
const PAGE: u32 = 50;

/// The deletions that prune `rule`'s copies (`me`): every object of either
/// kind marked as its copy and proven its own, never in a protected
/// namespace.
pub(crate) async fn copies_to_prune(
    client: &Client,
    caches: &Caches,
    field_manager: &str,
    policy: &Policy,
    rule: &CopyRule,
    me: &RuleRef,
) -> Result<Vec<Job>, Error> {
    // Ask the API, not the cache: a copy written a moment ago is pruned too.
    let mut jobs = Vec::new();
    for kind in SourceKind::ALL {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource(kind));
        let params = ListParams::default().labels(&format!("{RULE_LABEL}={}", me.id.label_value())).limit(PAGE);
        // In pages, each object kept as the little a prune needs: any
        // tenant may put the rule's label on its own objects, with 256 KiB
        // of annotations each. (The rule's reconciles prune such objects
        // as they appear, so few are left for this list; not counted on.)
        let fetch = |p: ListParams| {
            caches.metrics().request("list");
            let api = api.clone();
            async move { api.list_metadata(&p).await }
        };
        let found = list_kept(&params, fetch, |o| {
            let o = serde_json::to_value(o).ok()?;
            Observed::from_json(kind, &o, false, field_manager)
        });
        let found = match found.await {
            Ok(found) => found,
            // A kind withheld by the operator's RBAC: it could not delete
            // such copies either, and a ConfigMap rule must not keep its
            // finalizer for want of Secrets. Nor must a rule of that kind
            // whose copy watch never listed (refused too): the operator
            // could not have written its copies. A kind once listed and
            // refused now may hold copies: that refusal keeps the finalizer.
            Err(kube::Error::Api(e)) if e.code == 403 && (kind != rule.spec.kind || !caches.copies_ready(kind)) => {
                tracing::warn!(rule = %me.id, kind = kind.as_str(), "copies of this kind not pruned: the operator's RBAC withholds them");
                continue;
            }
            Err(e) => return Err(Error::List(e)),
        };
        for o in found {
            // Never a delete in a protected namespace, whatever marks an object there carries.
            if !policy.may_touch(&o.key.namespace) {
                tracing::warn!(rule = %me.id, copy = %o.key, "an object marked as this rule's copy is in a protected namespace: left alone");
                continue;
            }
            if caches.ownership(me, &o) == Ownership::Mine {
                let action = PlanAction::Delete {
                    uid: o.uid.as_ref().map(ToString::to_string),
                    resource_version: o.resource_version.as_ref().map(ToString::to_string),
                };
                let ctx = CopyContext {
                    on_conflict: rule.spec.on_conflict,
                    prune: true,
                    accepts_overwrite: false,
                    claimed_by: None,
                };
                jobs.push(Job { key: o.key.clone(), action, ctx });
            }
        }
    }
    Ok(jobs)
}
