//! A CopyRule's deletion (its finalizer's cleanup): its copies pruned when
//! it asks for it, then everything the operator keeps for it forgotten.

use kube::Resource;
use kube::runtime::controller::Action;

use super::{Data, rounds, rule_ref, write_status};
use crate::crd::CopyRule;
use crate::error::Error;
use crate::report;
use crate::report::{Carried, Outcome};
use crate::status::Summary;

/// The rule is being deleted: prune its copies (when `prune`), forget it.
/// A copy whose deletion is denied keeps the finalizer (status and a
/// Warning say so, retried with backoff); the escape is `prune: false` on
/// the rule, or removing the finalizer by hand.
pub(super) async fn cleanup(rule: &CopyRule, data: &Data) -> Result<Action, Error> {
    let me = rule_ref(rule)?;
    let caches = &data.caches;
    if rule.spec.prune {
        let (client, field_manager) = (&data.ctx.client, data.ctx.field_manager.as_str());
        let jobs =
            crate::cleanup::copies_to_prune(client, caches, field_manager, &data.options.policy, rule, &me).await?;
        let pruned = jobs.len();
        let carried: Vec<Carried> = rounds::run_jobs(&data.writer(&me), jobs, data.options.concurrency).await;
        report::count_operations(caches.metrics(), &carried);
        let failures: Vec<String> = carried
            .iter()
            .filter_map(|c| match &c.outcome {
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
        tracing::info!(rule = %me.id, pruned, "rule deleted: copies pruned");
    }
    caches.forget_rule(&me.id);
    caches.metrics().forget_rule(&me.id);
    data.rollouts.keep(&me.id, Vec::new());
    Ok(Action::await_change())
}
