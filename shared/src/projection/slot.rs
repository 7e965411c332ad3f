//! How a [`super::Store`] holds each entry: the key beside the projection
//! ([`Pair`], the default), or a projection that holds its own key
//! ([`Own`], for [`HasKey`] projections).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::sync::Arc;

/// How a store holds one entry, its key and its projection: an ordered set
/// of slots looked up by the key (`Borrow<str>`, ordered and compared as
/// the key alone), so that the keys sharing a prefix (a namespace's
/// `namespace/name` keys) are one range ([`super::Store::matching_under`]).
pub trait Slot<T>: Borrow<str> + Ord {
    /// The slot of `value` under `key`.
    fn new(key: String, value: Arc<T>) -> Self;
    fn value(&self) -> &Arc<T>;
}

/// The default slot: the key beside the projection, as a `Box<str>` (8
/// bytes less than a `String`, no spare capacity: memory per object held,
/// issue 28).
pub struct Pair<T> {
    key: Box<str>,
    value: Arc<T>,
}

impl<T> Slot<T> for Pair<T> {
    fn new(key: String, value: Arc<T>) -> Self {
        Self { key: key.into_boxed_str(), value }
    }

    fn value(&self) -> &Arc<T> {
        &self.value
    }
}

impl<T> Borrow<str> for Pair<T> {
    fn borrow(&self) -> &str {
        &self.key
    }
}

impl<T> Ord for Pair<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        // As the `str` it borrows as: a lookup or a range by key finds it.
        self.key.cmp(&other.key)
    }
}

impl<T> PartialOrd for Pair<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> PartialEq for Pair<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl<T> Eq for Pair<T> {}

/// A projection that holds its own key: a store of them ([`super::keyed_store`])
/// keeps the projection alone in each slot, so the key is allocated once,
/// in the projection, and a slot is a pointer (a pod cache of 150,000
/// entries saves a key's allocation and 16 bytes of slot per pod).
pub trait HasKey {
    /// The key it is stored under, as its watch's `project` makes it.
    fn key(&self) -> &str;
}

/// The slot of a projection that holds its own key ([`HasKey`]).
pub struct Own<T>(Arc<T>);

impl<T: HasKey> Slot<T> for Own<T> {
    fn new(key: String, value: Arc<T>) -> Self {
        // The two must agree, or a deletion (by the event's key) would
        // miss the slot; `project` builds both from the same object.
        debug_assert_eq!(key, value.key(), "a keyed projection's key differs from its store key");
        Own(value)
    }

    fn value(&self) -> &Arc<T> {
        &self.0
    }
}

impl<T: HasKey> Borrow<str> for Own<T> {
    fn borrow(&self) -> &str {
        self.0.key()
    }
}

impl<T: HasKey> Ord for Own<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.key().cmp(other.0.key())
    }
}

impl<T: HasKey> PartialOrd for Own<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T: HasKey> PartialEq for Own<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}

impl<T: HasKey> Eq for Own<T> {}
