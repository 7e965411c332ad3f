//! One copy of each source object in memory, however many rules select it.
//! Every rule has a source watch of its own (its own selector); without
//! this, each held its own copy of what it selected, so 100 rules over one
//! 1 MiB Secret held 100 MiB — a way for anyone who may write CopyRules in
//! one namespace to run the operator, and every namespace's copying, out of
//! memory. Sources are shared by kind, namespace, name and resourceVersion
//! (versions never evict each other: a rule's watch that lags a version
//! behind the others shares that version's copy); an entry lives as long as
//! some rule's store holds it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use crate::copy::Source;
use crate::crd::SourceKind;

type Key = (SourceKind, String, String, String);

#[derive(Default)]
pub struct SourceInterner {
    held: Mutex<HashMap<Key, Weak<Source>>>,
}

impl SourceInterner {
    /// The source already held at `resource_version`, else the one `build`
    /// makes (then shared). Without a resourceVersion nothing is shared.
    pub fn get_or_build(
        &self,
        kind: SourceKind,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
        build: impl FnOnce() -> Option<Source>,
    ) -> Option<Arc<Source>> {
        let Some(rv) = resource_version else { return build().map(Arc::new) };
        let key = (kind, namespace.to_string(), name.to_string(), rv.to_string());
        if let Some(held) = self.held_at(&key) {
            return Some(held);
        }
        // Built without the lock (it parses the payload); another watch may
        // have built the same meanwhile: the first one stays.
        let built = Arc::new(build()?);
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(first) = held.get(&key).and_then(Weak::upgrade) {
            return Some(first);
        }
        held.insert(key, Arc::downgrade(&built));
        Some(built)
    }

    fn held_at(&self, key: &Key) -> Option<Arc<Source>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).get(key).and_then(Weak::upgrade)
    }

    /// Forgets the entries no rule's store holds any more.
    pub fn collect_garbage(&self) {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).retain(|_, weak| weak.strong_count() > 0);
    }

    /// Entries (held or not yet collected).
    pub fn len(&self) -> usize {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    use super::*;
    use crate::copy::Content;

    fn source(value: &str) -> Source {
        let content = Content {
            data: BTreeMap::from([("k".to_string(), value.to_string())]),
            binary_data: BTreeMap::new(),
            type_: None,
        };
        Source::new(SourceKind::ConfigMap, "ns", "cfg", &BTreeMap::new(), &BTreeMap::new(), content)
    }

    #[test]
    fn rules_selecting_one_object_share_one_copy_per_version() {
        let interner = SourceInterner::default();
        let builds = AtomicUsize::new(0);
        let build = |v: &'static str| {
            let builds = &builds;
            move || {
                builds.fetch_add(1, SeqCst);
                Some(source(v))
            }
        };
        let get = |rv: Option<&str>, v: &'static str| {
            interner.get_or_build(SourceKind::ConfigMap, "ns", "cfg", rv, build(v)).unwrap()
        };
        let first = get(Some("1"), "a");
        let second = get(Some("1"), "a");
        assert!(Arc::ptr_eq(&first, &second), "a second rule got its own copy");
        assert_eq!(builds.load(SeqCst), 1, "parsed again");

        // A new version is a new copy; the old one lives while held, and a
        // rule still at the old version shares it.
        let newer = get(Some("2"), "b");
        assert!(!Arc::ptr_eq(&first, &newer));
        assert!(Arc::ptr_eq(&newer, &get(Some("2"), "b")));
        assert!(Arc::ptr_eq(&first, &get(Some("1"), "a")), "a lagging rule made a second copy of version 1");
        // Another kind, or no resourceVersion, is never shared.
        let secret = interner.get_or_build(SourceKind::Secret, "ns", "cfg", Some("2"), build("b")).unwrap();
        assert!(!Arc::ptr_eq(&newer, &secret));
        assert!(!Arc::ptr_eq(&get(None, "b"), &get(None, "b")));

        // Nobody holds them any more: collected.
        drop((first, second, newer, secret));
        assert_eq!(interner.len(), 3);
        interner.collect_garbage();
        assert!(interner.is_empty());
    }
}
