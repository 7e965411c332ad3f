//! What the Services want, as a sync reads it from the cache at its start.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::desired::Claim;
use crate::service::ServiceInfo;

/// What the Services want, as read from the cache at a sync's start.
#[derive(Default)]
pub(super) struct Wanted {
    /// The Services the cache held, in resource-id order (the store's).
    pub services: Vec<Arc<ServiceInfo>>,
    pub claims: Vec<Claim>,
    /// Services skipped for bad input keep what they have.
    pub keep: BTreeSet<String>,
}

impl Wanted {
    /// The UID of Service `resource` (for the Events' object references),
    /// looked up in the Services read, not kept per Service at every sync.
    pub fn uid_of(&self, resource: &str) -> Option<String> {
        let i = self.services.binary_search_by(|s| s.resource_id().cmp(resource)).ok()?;
        self.services[i].uid.as_ref().map(ToString::to_string)
    }
}
