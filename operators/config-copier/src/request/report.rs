//! A request's status (server-side apply on its status subresource, only
//! when it says something new) and Events: a Warning when it is refused
//! for a new reason, a Normal when its copy is made, updated or pruned.

use flotilla_shared::Conditions;
use flotilla_shared::conditions::{INVALID_SPEC, already_said};
use flotilla_shared::events::Events;
use flotilla_shared::status::{ReportedStatus, apply_status_if_changed};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Api, Client, Resource, ResourceExt};

use super::apply::Wrote;
use super::plan::{CONFLICT, PROTECTED_NAMESPACE, SOURCE_TOO_LARGE, Verdict};
use crate::crd::{CopyRequest, CopyRequestStatus};

impl ReportedStatus for CopyRequestStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

/// The status `verdict` makes of `request`'s (pure).
pub fn status(request: &CopyRequest, verdict: &Verdict, copy: Option<String>) -> CopyRequestStatus {
    let previous = request.status.as_ref().map(|s| s.conditions.as_slice());
    let mut c = Conditions::new(previous, request.metadata.generation);
    c.set("Ready", verdict.ready, verdict.reason, verdict.message.clone());
    // Stalled: nothing changes until someone edits the request, the source
    // or the object in the way.
    c.stall_on(&[INVALID_SPEC, CONFLICT, PROTECTED_NAMESPACE, SOURCE_TOO_LARGE]);
    CopyRequestStatus { observed_generation: request.metadata.generation, conditions: c.into_vec(), copy }
}

/// Writes the status (if new) and the Events of one reconcile.
pub async fn report(
    client: &Client,
    field_manager: &str,
    events: &Events,
    request: &CopyRequest,
    verdict: &Verdict,
    wrote: &Wrote,
    copy: Option<String>,
) -> Result<(), kube::Error> {
    let oref = request.object_ref(&());
    let previous = request.status.as_ref().map(|s| s.conditions.as_slice());
    if !verdict.ready && !already_said(previous, "Ready", verdict.reason, &verdict.message) {
        events.warning(&oref, verdict.reason, "Copy", verdict.message.clone());
    }
    let name = copy.as_deref().unwrap_or_default();
    match wrote {
        Wrote::Created => events.normal(&oref, "Created", "Copy", format!("copy {name} created")),
        Wrote::Updated => events.normal(&oref, "Updated", "Copy", format!("copy {name} updated from its source")),
        Wrote::Deleted => events.normal(&oref, "Pruned", "Delete", "copy pruned".to_string()),
        Wrote::Nothing | Wrote::Stale => {}
    }
    let new = status(request, verdict, copy);
    let ns = request.namespace().unwrap_or_default();
    let api: Api<CopyRequest> = Api::namespaced(client.clone(), &ns);
    apply_status_if_changed(&api, &request.name_any(), field_manager, request.status.as_ref(), &new).await?;
    Ok(())
}
