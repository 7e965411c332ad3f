//! Keys made `<namespace>/<name>`: a namespace's objects are one range
//! of a store's keys ([`super::Store::in_namespace`]).

/// The key of `name` in `namespace`.
pub fn of(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The namespace part of a key ("" for a key without one).
pub fn namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(ns, _)| ns)
}

/// The name part of a key (the whole key without a namespace).
pub fn name(key: &str) -> &str {
    key.split_once('/').map_or(key, |(_, name)| name)
}
