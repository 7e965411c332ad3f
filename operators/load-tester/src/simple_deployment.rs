//! SimpleDeployment's controller (seed 004's first example, unrelated to
//! load tests): exactly one child pod per SimpleDeployment, made again when
//! deleted, replaced when the spec changes, left alone when a pod of that
//! name is not its own. The child's shape is [`crate::simple`]'s.

use std::sync::Arc;
use std::time::Duration;

use flotilla_shared::conditions::{INVALID_SPEC, READY, already_said};
use flotilla_shared::status::apply_status_if_changed;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use crate::controller::Data;
use crate::crd::{SimpleDeployment, SimpleDeploymentStatus};
use crate::error::Error;
use crate::simple;
use crate::snapshot::owned_by;

/// Annotation on the child: the SimpleDeployment generation it was made for.
const CHILD_GENERATION: &str = "flotilla.dev/generation";

pub async fn reconcile(sd: Arc<SimpleDeployment>, data: Arc<Data>) -> Result<Action, Error> {
    let ns = sd.namespace().ok_or(Error::NoNamespace)?;
    let (name, uid) = (sd.name_any(), sd.uid().unwrap_or_default());
    let generation = sd.metadata.generation.unwrap_or(0).to_string();
    let pods: Api<Pod> = Api::namespaced(data.ctx.client.clone(), &ns);
    let child = simple::child_name(&name);
    let oref = sd.object_ref(&());
    let mut c =
        flotilla_shared::Conditions::new(sd.status.as_ref().map(|s| s.conditions.as_slice()), sd.metadata.generation);
    let mut status = SimpleDeploymentStatus { child: child.clone(), ..Default::default() };
    let mut refused = false;
    let guarded = sd.spec.image.as_ref().and_then(|_| data.admission.check().err());
    let sd_conditions = sd.status.as_ref().map(|s| s.conditions.as_slice());
    match pods.get_opt(&child).await.map_err(|e| Error::Kube("child", e))? {
        // Its own image is what only the LoadTest policy lets the right
        // people ask for: not run while that policy is missing.
        None if guarded.is_some() => {
            let why = guarded.unwrap_or_default();
            refused = true;
            status.child = String::new();
            let msg = format!("spec.image: {why}; the pod is made once it is in place");
            if !already_said(sd_conditions, READY, "AdmissionPolicyMissing", &msg) {
                data.ctx.events.warning(&oref, "AdmissionPolicyMissing", "Create", msg.clone());
            }
            c.set(READY, false, "AdmissionPolicyMissing", msg);
        }
        None => {
            let mut pod = simple::pod(&name, &uid, &sd.spec);
            pod["metadata"]["annotations"] = serde_json::json!({CHILD_GENERATION: generation});
            let pod: Pod =
                serde_json::from_value(pod).map_err(|e| Error::Kube("child pod", kube::Error::SerdeError(e)))?;
            // Some(made by this call); None: refused.
            let created = match pods.create(&PostParams::default(), &pod).await {
                Ok(_) => Some(true),
                // Made by an earlier reconcile, not yet in what we read.
                Err(kube::Error::Api(s)) if s.code == 409 => Some(false),
                // Refused by admission (Pod Security, a quota, a webhook):
                // said once, retried slowly — the namespace has to change.
                Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403 | 422) => {
                    refused = true;
                    status.child = String::new();
                    let msg = format!("pod {child} was refused: {}", s.message);
                    if !already_said(sd_conditions, READY, "ChildRefused", &msg) {
                        data.ctx.events.warning(&oref, "ChildRefused", "Create", msg.clone());
                    }
                    c.set(READY, false, "ChildRefused", msg);
                    None
                }
                Err(e) => return Err(Error::Kube("create child", e)),
            };
            if let Some(made) = created {
                if made {
                    data.ctx.events.normal(&oref, "ChildCreated", "Create", format!("created pod {child}"));
                }
                status.child_phase = "Pending".into();
                c.set(READY, true, "ChildCreated", format!("pod {child} created"));
            }
        }
        Some(pod) if !owned_by(&pod, &uid) => {
            status.child = String::new();
            let msg = format!("a pod named {child} exists and is not this SimpleDeployment's: left alone");
            if sd.status.as_ref().is_none_or(|s| !s.conditions.iter().any(|c| c.reason == "NameConflict")) {
                data.ctx.events.warning(&oref, "NameConflict", "Create", msg.clone());
            }
            c.set(READY, false, "NameConflict", msg);
        }
        Some(pod) => {
            let made_for = pod.annotations().get(CHILD_GENERATION).cloned().unwrap_or_default();
            if made_for != generation && pod.metadata.deletion_timestamp.is_none() {
                // The spec changed: a pod cannot be changed, so it is replaced.
                pods.delete(&child, &DeleteParams::default()).await.map_err(|e| Error::Kube("replace child", e))?;
                data.ctx.events.normal(
                    &oref,
                    "ChildReplaced",
                    "Delete",
                    format!("pod {child} replaced: the spec changed"),
                );
            }
            status.child_phase = pod.status.and_then(|s| s.phase).unwrap_or_default();
            c.set(READY, true, "ChildExists", format!("pod {child} is {}", status.child_phase));
        }
    }
    // The schema checks the whole spec at admission, so nothing here says
    // InvalidSpec today; the call keeps Stalled's rule the suite's.
    c.stall_on(&[INVALID_SPEC]);
    status.conditions = c.into_vec();
    status.observed_generation = sd.metadata.generation;
    let api: Api<SimpleDeployment> = Api::namespaced(data.ctx.client.clone(), &ns);
    apply_status_if_changed(&api, &name, &data.ctx.field_manager, sd.status.as_ref(), &status)
        .await
        .map_err(|e| Error::Kube("status", e))?;
    Ok(Action::requeue(Duration::from_secs(if refused { 60 } else { 300 })))
}
