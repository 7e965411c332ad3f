//! A deleted rule: its copies pruned (when `prune`), found by asking the
//! API (not the cache: a copy written a moment ago is pruned too), then the
//! rule forgotten.

use kube::Resource;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::controller::Action;

use crate::cache::api_resource;
use crate::controller::{Data, rule_ref, write_status};
use crate::converge::{Outcome, run_jobs};
use crate::copy::{Observed, RULE_LABEL};
use crate::crd::{CopyRule, SourceKind};
use crate::error::Error;
use crate::plan::{Action as PlanAction, CopyContext, Job, Ownership};
use crate::report;
use crate::status::Summary;

/// The rule is being deleted: prune its copies (when `prune`), forget it.
/// A copy whose deletion is denied keeps the finalizer (status and a
/// Warning say so, retried with backoff); the escape is `prune: false` on
/// the rule, or removing the finalizer by hand.
pub(crate) async fn cleanup(rule: &CopyRule, data: &Data) -> Result<Action, Error> {
    let me = rule_ref(rule)?;
    let caches = &data.caches;
    if !rule.spec.prune {
        caches.forget_rule(&me.id);
        caches.metrics().forget_rule(&me.id);
        return Ok(Action::await_change());
    }
    let writer = data.writer(&me);
    // Ask the API, not the cache: a copy written a moment ago is pruned too.
    let mut jobs = Vec::new();
    for kind in SourceKind::ALL {
        let api: Api<DynamicObject> = Api::all_with(data.ctx.client.clone(), &api_resource(kind));
        caches.metrics().request("list");
        let params = ListParams::default().labels(&format!("{RULE_LABEL}={}", me.id.label_value()));
        let list = match api.list_metadata(&params).await {
            Ok(list) => list,
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
        for o in list.items.iter().filter_map(|o| serde_json::to_value(o).ok()) {
            let Some(o) = Observed::from_json(kind, &o, false, &data.ctx.field_manager) else { continue };
            // Never a delete in a protected namespace, whatever marks an object there carries.
            if !data.options.policy.may_touch(&o.key.namespace) {
                tracing::warn!(rule = %me.id, copy = %o.key, "an object marked as this rule's copy is in a protected namespace: left alone");
                continue;
            }
            if caches.ownership(&me, &o) == Ownership::Mine {
                let action = PlanAction::Delete { uid: o.uid.clone(), resource_version: o.resource_version.clone() };
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
    let pruned = jobs.len();
    let outcomes = run_jobs(&writer, jobs, data.options.concurrency).await;
    let failures: Vec<String> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Failed { key, action, error } => Some(report::failure(key, action, error)),
            _ => None,
        })
        .collect();
    if let Some(first) = failures.first() {
        let oref = rule.object_ref(&());
        data.ctx.events.warning(
            &oref,
            "PruneFailed",
            "Delete",
            format!("{first} (set prune: false on the rule to delete it without its copies)"),
        );
        let summary = Summary { prune_failed: Some(first.clone()), ..Default::default() };
        write_status(rule, data, &summary, false).await?;
        return Err(Error::Writes { failed: failures.len(), first: first.clone() });
    }
    caches.forget_rule(&me.id);
    caches.metrics().forget_rule(&me.id);
    tracing::info!(rule = %me.id, pruned, "rule deleted: copies pruned");
    Ok(Action::await_change())
}
