//! What a PodDebugger's reconcile tells: a refusal as a Warning (once per
//! reason and message) and counted in the metrics, and the status, from the
//! plan or the refusal, written only when it changed.

use flotilla_shared::conditions::already_said;
use flotilla_shared::status::apply_status_if_changed;
use kube::api::Api;
use kube::{Resource, ResourceExt};

use crate::controller::{Data, Refused};
use crate::crd::PodDebugger;
use crate::error::Error;
use crate::plan::PodPlan;
use crate::status::{self, Outcome};

/// Reports one reconcile of `rule`: refused (why), or what its plans did.
pub(crate) async fn report(
    rule: &PodDebugger,
    ns: &str,
    container: &str,
    refused: Option<&Refused>,
    plans: &[PodPlan],
    data: &Data,
) -> Result<(), Error> {
    let name = rule.name_any();
    let outcome = match refused {
        Some((reason, message)) => {
            if !already_said(rule.status.as_ref().map(|s| s.conditions.as_slice()), "Ready", reason, message) {
                tracing::warn!(poddebugger = %name, reason, message = %message, "refused");
                let note = format!("no debug container added: {message}");
                data.ctx.events.warning(&rule.object_ref(&()), reason, "Validate", note);
                data.metrics.refusals.with_label_values(&[reason]).inc();
            }
            Outcome::Refused { reason, message: message.clone() }
        }
        None => Outcome::Planned(plans),
    };
    let new = status::build(rule.status.as_ref(), rule.metadata.generation, container, outcome);
    let api: Api<PodDebugger> = Api::namespaced(data.ctx.client.clone(), ns);
    apply_status_if_changed(&api, &name, &data.ctx.field_manager, rule.status.as_ref(), &new)
        .await
        .map_err(Error::Status)?;
    Ok(())
}
