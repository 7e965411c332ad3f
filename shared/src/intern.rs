//! Strings that many cached objects repeat — namespaces, container names,
//! workload names, label values — held once and shared (memory per object
//! held, issue 28: at 150,000 pods each 16-byte string costs a 32-byte
//! allocation, 4.6 MiB per field).
//!
//! Bounded by what the caches hold: a string no object holds any more is
//! dropped at the next sweep, and a sweep runs whenever the set has doubled
//! since the last one, so the set never holds more than twice the strings
//! in use (plus [`MIN_SWEEP`]), whatever the objects' authors write, with
//! O(1) amortised cost per string. Not `Weak` references: a `Weak<str>`
//! cannot be looked up by content without upgrading every candidate.
//!
//! Any other value many objects repeat (an operator's small record of
//! marks or labels) is shared the same way by an `Interner<T>` of its own
//! ([`Interner::share`]).

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

/// Below this many strings the set is not swept.
pub const MIN_SWEEP: usize = 1024;

/// A set of shared strings (or of shared values of another type `T`).
#[derive(Debug)]
pub struct Interner<T: ?Sized = str> {
    state: Mutex<State<T>>,
}

#[derive(Debug)]
struct State<T: ?Sized> {
    set: HashSet<Arc<T>>,
    /// Values held after the last sweep.
    live: usize,
}

impl<T: ?Sized> Default for Interner<T> {
    fn default() -> Self {
        Self { state: Mutex::new(State { set: HashSet::new(), live: 0 }) }
    }
}

impl Interner {
    pub fn new() -> Self {
        Self::default()
    }

    /// `s`, shared with every other holder of the same text.
    pub fn get(&self, s: &str) -> Arc<str> {
        let mut st = self.lock();
        if let Some(held) = st.set.get(s) {
            return Arc::clone(held);
        }
        st.hold(Arc::from(s))
    }
}

impl<T: Hash + Eq> Interner<T> {
    /// `value`, shared with every other holder of an equal one.
    pub fn share(&self, value: T) -> Arc<T> {
        let mut st = self.lock();
        if let Some(held) = st.set.get(&value) {
            return Arc::clone(held);
        }
        st.hold(Arc::new(value))
    }
}

impl<T: ?Sized + Hash + Eq> State<T> {
    /// Holds `shared` (not held yet) from now on, sweeping first when due.
    fn hold(&mut self, shared: Arc<T>) -> Arc<T> {
        if self.set.len() >= (2 * self.live).max(MIN_SWEEP) {
            // Only the set holds a value whose count is 1, and only the
            // interner (under its lock) hands out new holders: none can
            // appear while this runs.
            self.set.retain(|held| Arc::strong_count(held) > 1);
            self.live = self.set.len();
        }
        self.set.insert(Arc::clone(&shared));
        shared
    }
}

impl<T: ?Sized + Hash + Eq> Interner<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        // A poisoned lock only means a panic elsewhere mid-update of the set; the set is still a set.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops at once the values nothing else holds (a sweep otherwise
    /// waits for the set to double) and gives back the set's spare room:
    /// a memory-budget test starts from it, so that what an earlier test
    /// left does not make its figure depend on the order tests run in.
    pub fn sweep(&self) {
        let mut st = self.lock();
        st.set.retain(|held| Arc::strong_count(held) > 1);
        st.set.shrink_to_fit();
        st.live = st.set.len();
    }

    /// Values in the set (some perhaps no longer held elsewhere).
    pub fn len(&self) -> usize {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The process's interner for the names and label values of cached objects.
pub fn names() -> &'static Interner {
    static NAMES: LazyLock<Interner> = LazyLock::new(Interner::new);
    &NAMES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_are_one_allocation() {
        let i = Interner::new();
        let a = i.get("team-a");
        let b = i.get(&String::from("team-a"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &i.get("team-b")));
        assert_eq!(&*a, "team-a");
    }

    #[test]
    fn equal_values_of_another_type_are_one_allocation() {
        let i = Interner::<(u32, Arc<str>)>::default();
        let a = i.share((1, "a".into()));
        let b = i.share((1, "a".into()));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &i.share((2, "a".into()))));
        assert_eq!(i.len(), 2);
    }

    #[test]
    fn the_set_stays_within_twice_the_strings_held() {
        let i = Interner::new();
        let mut held = Vec::new();
        for n in 0..100_000 {
            let s = i.get(&format!("pod-{n}"));
            // One string in ten stays held; the rest are dropped at once.
            if n % 10 == 0 {
                held.push(s);
            }
            assert!(i.len() <= (2 * held.len() + 1).max(MIN_SWEEP) + 1, "{} strings for {} held", i.len(), held.len());
        }
        // Everything still held is still the same allocation.
        for s in &held {
            assert!(Arc::ptr_eq(s, &i.get(s)));
        }
    }

    #[test]
    fn a_sweep_drops_at_once_what_nothing_else_holds() {
        let i = Interner::new();
        let kept = i.get("kept");
        drop(i.get("dropped"));
        assert_eq!(i.len(), 2);
        i.sweep();
        assert_eq!(i.len(), 1);
        assert!(Arc::ptr_eq(&kept, &i.get("kept")));
    }
}
