//! What an operator derives from the specs of every object in a
//! controller's cache (pod-alert: the PodAlerts served per namespace and the
//! pod label keys they read; pod-debugger: the label keys), derived again
//! only when a spec changed.
//!
//! Every reconcile asks for it, and deriving it reads every object: 37 % of
//! pod-alert's CPU with 500 PodAlerts when it was derived per reconcile
//! (issue 28). The cache's change count ([`StoreChanges`]) answers "nothing
//! changed" at no cost; but a status write is a change too, and every
//! reconcile writes status, so after a change the objects' (UID,
//! generation) pairs decide: the API server raises `metadata.generation`
//! on a spec change only, and a UID is created, deleted or replaced with
//! its object.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use kube::Resource;
use kube::runtime::reflector::Store;

use crate::controller::StoreChanges;

/// The (UID, generation) of every object, folded into one number that does
/// not depend on their order.
pub fn spec_fingerprint<K: Resource>(objects: &[Arc<K>]) -> u64 {
    objects.iter().fold(0u64, |sum, o| {
        let mut h = DefaultHasher::new();
        o.meta().uid.hash(&mut h);
        o.meta().generation.hash(&mut h);
        sum.wrapping_add(h.finish())
    })
}

/// The last value derived, and from what.
struct Last<T> {
    changes: u64,
    fingerprint: u64,
    extra: u64,
    value: T,
}

/// A value derived from a cache's specs, kept until one changes.
pub struct FromSpecs<T> {
    changes: StoreChanges,
    last: Mutex<Option<Last<T>>>,
}

impl<T: Clone> FromSpecs<T> {
    /// `changes`: the change count of the cache the value is derived from
    /// (`Controller::store_changes`).
    pub fn new(changes: StoreChanges) -> Self {
        Self { changes, last: Mutex::new(None) }
    }

    /// The value derived from `store`'s objects by `derive`, derived again
    /// only when an object's spec changed (or one came or went) or `extra`
    /// (whatever else the value depends on) differs from the last time.
    pub fn get<K>(&self, store: &Store<K>, extra: u64, derive: impl FnOnce(&[Arc<K>]) -> T) -> T
    where
        K: Resource + Clone + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone,
    {
        // Read before the cache: a change after this is seen next time.
        let changes = self.changes.get();
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = last.as_ref()
            && l.changes == changes
            && l.extra == extra
        {
            return l.value.clone();
        }
        let objects = store.state();
        let fingerprint = spec_fingerprint(&objects);
        if let Some(l) = last.as_mut()
            && l.fingerprint == fingerprint
            && l.extra == extra
        {
            // Status or metadata writes only.
            l.changes = changes;
            return l.value.clone();
        }
        let value = derive(&objects);
        *last = Some(Last { changes, fingerprint, extra, value: value.clone() });
        value
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::Event;

    use super::*;

    fn object(uid: &str, generation: i64, label: &str) -> ConfigMap {
        let mut o = ConfigMap::default();
        o.metadata.name = Some(uid.to_string());
        o.metadata.namespace = Some("ns".into());
        o.metadata.uid = Some(uid.into());
        o.metadata.generation = Some(generation);
        o.metadata.labels = Some([("l".to_string(), label.to_string())].into());
        o
    }

    #[test]
    fn the_fingerprint_follows_uids_and_generations_not_order_or_metadata() {
        let (a, b) = (Arc::new(object("a", 1, "x")), Arc::new(object("b", 1, "x")));
        let ab = spec_fingerprint(&[a.clone(), b.clone()]);
        assert_eq!(ab, spec_fingerprint(&[b.clone(), a.clone()]));
        assert_eq!(ab, spec_fingerprint(&[a.clone(), Arc::new(object("b", 1, "relabelled"))]));
        assert_ne!(ab, spec_fingerprint(&[a.clone(), Arc::new(object("b", 2, "x"))]));
        assert_ne!(ab, spec_fingerprint(std::slice::from_ref(&a)));
        assert_ne!(ab, spec_fingerprint(&[a, Arc::new(object("c", 1, "x"))]));
    }

    #[test]
    fn a_value_is_derived_again_only_when_a_spec_or_the_extra_changed() {
        let (store, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
        let changes = StoreChanges::default();
        let cached = FromSpecs::new(changes.clone());
        let derived = AtomicUsize::new(0);
        let get = |extra| {
            cached.get(&store, extra, |objects| {
                derived.fetch_add(1, Ordering::SeqCst);
                objects.len()
            })
        };
        let apply = |writer: &mut kube::runtime::reflector::store::Writer<ConfigMap>, o: ConfigMap| {
            writer.apply_watcher_event(&Event::Apply(o));
            changes.bump();
        };
        apply(&mut writer, object("a", 1, "x"));
        assert_eq!((get(0), get(0)), (1, 1));
        assert_eq!(derived.load(Ordering::SeqCst), 1, "nothing changed");
        // A status or label write: a change, the same spec.
        apply(&mut writer, object("a", 1, "y"));
        assert_eq!(get(0), 1);
        assert_eq!(derived.load(Ordering::SeqCst), 1, "the same specs");
        apply(&mut writer, object("a", 2, "y"));
        assert_eq!(get(0), 1);
        assert_eq!(derived.load(Ordering::SeqCst), 2, "a spec changed");
        apply(&mut writer, object("b", 1, "y"));
        assert_eq!(get(0), 2);
        assert_eq!(derived.load(Ordering::SeqCst), 3, "an object came");
        assert_eq!(get(1), 2);
        assert_eq!(derived.load(Ordering::SeqCst), 4, "the extra changed");
    }
}
