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

use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

/// Below this many strings the set is not swept.
pub const MIN_SWEEP: usize = 1024;

/// A set of shared strings.
#[derive(Debug, Default)]
pub struct Interner {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    set: HashSet<Arc<str>>,
    /// Strings held after the last sweep.
    live: usize,
}

impl Interner {
    pub fn new() -> Self {
        Self::default()
    }

    /// `s`, shared with every other holder of the same text.
    pub fn get(&self, s: &str) -> Arc<str> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = st.set.get(s) {
            return Arc::clone(held);
        }
        if st.set.len() >= (2 * st.live).max(MIN_SWEEP) {
            // Only the set holds a string whose count is 1, and only `get`
            // (under this lock) hands out new holders: none can appear
            // while this runs.
            st.set.retain(|held| Arc::strong_count(held) > 1);
            st.live = st.set.len();
        }
        let shared: Arc<str> = Arc::from(s);
        st.set.insert(Arc::clone(&shared));
        shared
    }

    /// Strings in the set (some perhaps no longer held elsewhere).
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
}
