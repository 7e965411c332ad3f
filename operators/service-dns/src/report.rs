//! Events on Services. Actions (created/updated/deleted) are published as
//! they happen; standing situations (a conflict, an invalid annotation, a
//! skipped headless Service, a failing change) once when they appear or
//! change, not at every sync.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_shared::Events;
use k8s_openapi::api::core::v1::ObjectReference;

use crate::desired::object_ref;

pub const CREATED: &str = "DnsRecordCreated";
pub const UPDATED: &str = "DnsRecordUpdated";
pub const DELETED: &str = "DnsRecordDeleted";
pub const CONFLICT: &str = "DnsRecordConflict";
pub const INVALID_HOSTNAME: &str = "InvalidHostname";
pub const ROUTE53_ERROR: &str = "Route53Error";
pub const DRY_RUN: &str = "DnsRecordDryRun";
/// A freed name kept for its namespace (`--handover-grace`), then let go.
pub const NAME_HELD: &str = "DnsNameHeld";
pub const NAME_RELEASED: &str = "DnsNameReleased";

/// Where Events go: the Services we know (uid for the reference).
pub struct Reporter {
    events: Option<Events>,
    /// (resource, reason, key) → message of a standing situation.
    standing: BTreeMap<(String, &'static str, String), String>,
    seen: BTreeSet<(String, &'static str, String)>,
}

/// `service/<ns>/<name>` → (ns, name).
pub fn split_resource(resource: &str) -> Option<(&str, &str)> {
    resource.strip_prefix("service/").and_then(|r| r.split_once('/'))
}

fn reference(resource: &str, uid: Option<String>) -> Option<ObjectReference> {
    split_resource(resource).map(|(ns, name)| object_ref(ns, name, uid))
}

/// Something done, on the Service concerned: logged, and published when
/// there is somewhere to publish.
pub fn action(events: Option<&Events>, resource: &str, uid: Option<String>, reason: &str, note: String) {
    tracing::info!(%resource, %reason, "{note}");
    if let (Some(events), Some(r)) = (events, reference(resource, uid)) {
        events.normal(&r, reason, "Sync", note);
    }
}

impl Reporter {
    pub fn new(events: Option<Events>) -> Self {
        Self { events, standing: BTreeMap::new(), seen: BTreeSet::new() }
    }

    /// Where actions are published (for the INSYNC watcher).
    pub fn events(&self) -> Option<Events> {
        self.events.clone()
    }

    /// Something done: always published.
    pub fn action(&self, resource: &str, uid: Option<String>, reason: &str, note: String) {
        action(self.events.as_ref(), resource, uid, reason, note);
    }

    /// A standing situation: published when new or changed. `key`
    /// distinguishes several of one reason on one Service (e.g. the name).
    pub fn standing(
        &mut self,
        resource: &str,
        uid: Option<String>,
        warning: bool,
        reason: &'static str,
        key: &str,
        note: String,
    ) -> bool {
        let k = (resource.to_string(), reason, key.to_string());
        self.seen.insert(k.clone());
        if self.standing.get(&k) == Some(&note) {
            return false;
        }
        if warning {
            tracing::warn!(%resource, %reason, "{note}");
        } else {
            tracing::info!(%resource, %reason, "{note}");
        }
        if let (Some(events), Some(r)) = (&self.events, reference(resource, uid)) {
            if warning {
                events.warning(&r, reason, "Sync", note.clone());
            } else {
                events.normal(&r, reason, "Sync", note.clone());
            }
        }
        self.standing.insert(k, note);
        true
    }

    /// Ends a sync: situations not reported again are over (so that they
    /// are reported anew if they come back).
    pub fn end_sync(&mut self, keep_reason: impl Fn(&str) -> bool) {
        let seen = std::mem::take(&mut self.seen);
        self.standing.retain(|k, _| seen.contains(k) || keep_reason(k.1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standing_situations_are_reported_once_until_they_end() {
        let mut r = Reporter::new(None);
        assert!(r.standing("service/a/x", None, true, CONFLICT, "n", "taken".into()));
        r.end_sync(|_| false);
        assert!(!r.standing("service/a/x", None, true, CONFLICT, "n", "taken".into()), "same: not again");
        assert!(r.standing("service/a/x", None, true, CONFLICT, "n", "taken by y".into()), "changed: again");
        r.end_sync(|_| false);
        r.end_sync(|_| false); // a sync where it did not happen: over
        assert!(r.standing("service/a/x", None, true, CONFLICT, "n", "taken by y".into()), "back: again");
        assert_eq!(split_resource("service/ns/name"), Some(("ns", "name")));
    }
}
