//! What an operator remembers of each of its custom resources between
//! reconciles (incidents, what it added, backoffs), by UID: one lock per
//! object, held across a reconcile's awaits so two reconciles of the same
//! object never interleave their memory, and the memory of deleted objects
//! dropped (a deleted object is not reconciled again, so nothing else
//! would: a tenant creating and deleting objects must not grow it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// One object's memory, locked for a reconcile.
pub type Entry<S> = Arc<tokio::sync::Mutex<S>>;

/// The memory of each live object, by UID.
pub struct PerObject<S> {
    states: Mutex<HashMap<String, Entry<S>>>,
}

impl<S> Default for PerObject<S> {
    fn default() -> Self {
        Self { states: Mutex::default() }
    }
}

impl<S> PerObject<S> {
    fn states(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry<S>>> {
        self.states.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `uid`'s memory, made by `new` the first time.
    pub fn get(&self, uid: &str, new: impl FnOnce() -> S) -> Entry<S> {
        let mut states = self.states();
        if let Some(s) = states.get(uid) {
            return Arc::clone(s);
        }
        let s = Arc::new(tokio::sync::Mutex::new(new()));
        states.insert(uid.to_string(), Arc::clone(&s));
        s
    }

    /// Drops the memory of every object `live` does not name and returns
    /// it (for a last word about the deleted object).
    pub fn remove_gone(&self, live: impl Fn(&str) -> bool) -> Vec<Entry<S>> {
        let mut states = self.states();
        let gone: Vec<String> = states.keys().filter(|u| !live(u)).cloned().collect();
        gone.iter().filter_map(|u| states.remove(u)).collect()
    }

    /// Objects remembered.
    pub fn len(&self) -> usize {
        self.states().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_lives_as_long_as_its_object() {
        let m: PerObject<Vec<u32>> = PerObject::default();
        m.get("a", Vec::new).lock().await.push(1);
        m.get("b", Vec::new).lock().await.push(2);
        assert_eq!(*m.get("a", || vec![9]).lock().await, vec![1], "made once, then kept");
        let gone = m.remove_gone(|u| u == "a");
        assert_eq!(gone.len(), 1);
        assert_eq!(*gone[0].lock().await, vec![2], "the deleted object's memory, for a last word");
        assert_eq!(m.len(), 1);
        assert!(m.get("b", Vec::new).lock().await.is_empty(), "a new object of that UID starts afresh");
    }
}
