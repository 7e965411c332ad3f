//! The target Service as the state machine sees it: what the controller
//! found, what a run pins (a cluster IP to connect to), and what counts as
//! the Service changing under a run. Pure.

use crate::crd::PinnedTarget;

/// The target Service, as the controller found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Not looked at (the step says when it must be: [`super::Need::Target`]).
    Unchecked,
    Missing,
    Seen(ServiceView),
}

/// What the state machine reads of the target Service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceView {
    pub uid: String,
    /// spec.type (ClusterIP when unset).
    pub type_: String,
    /// Its cluster IP; None for ExternalName and headless Services.
    pub cluster_ip: Option<String>,
    /// Whether an EndpointSlice has a ready endpoint (None: not listed).
    pub ready: Option<bool>,
    /// The Host the runners send: `<service>.<namespace>.svc.<domain>`.
    pub host: String,
}

/// The Service pinned for a run, if `view` can be one: a cluster IP to
/// connect to (ExternalName names a host anywhere; a headless Service has
/// no address of its own).
pub(super) fn pin(view: &ServiceView) -> Option<PinnedTarget> {
    Some(PinnedTarget {
        uid: view.uid.clone(),
        type_: view.type_.clone(),
        cluster_ip: view.cluster_ip.clone()?,
        host: view.host.clone(),
    })
}

/// How the Service differs from the one pinned, if it does.
pub(super) fn changed(pinned: &PinnedTarget, target: &Target, svc: &str) -> Option<String> {
    match target {
        Target::Unchecked => None,
        Target::Missing => Some(format!("Service {svc} was deleted during the run")),
        Target::Seen(v) if v.uid != pinned.uid => {
            Some(format!("Service {svc} was deleted and made again during the run"))
        }
        Target::Seen(v) if v.type_ != pinned.type_ => {
            Some(format!("Service {svc} changed type from {} to {} during the run", pinned.type_, v.type_))
        }
        Target::Seen(v) if v.cluster_ip.as_deref() != Some(pinned.cluster_ip.as_str()) => Some(format!(
            "Service {svc} changed cluster IP from {} to {} during the run",
            pinned.cluster_ip,
            v.cluster_ip.as_deref().unwrap_or("none")
        )),
        Target::Seen(_) => None,
    }
}
