//! A key of a Secret or a ConfigMap in the custom resource's own namespace:
//! one shape (and one schema) for every CRD of the suite that names one —
//! the API's `secretKeyRef`/`configMapKeyRef` without `optional` (a missing
//! object or key is the resource's error, said in its status) and without
//! a namespace (a tenant never names another namespace's objects).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A key of an object (a Secret, a ConfigMap) in the resource's namespace.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
pub struct KeyRef {
    /// The object's name (a DNS subdomain, as the API requires).
    #[schemars(
        length(min = 1, max = 253),
        pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
    /// The key in its data (as the API allows data keys).
    #[schemars(length(min = 1, max = 253), pattern(r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
}
