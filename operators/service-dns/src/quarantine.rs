//! Names Route53 keeps refusing, each with a backoff of its own. A refused
//! name stays out of the batches until its time comes; then it is read
//! again from Route53 (only that name), planned again from what is really
//! there, and — if still wanted — sent in a request of its own. Every other
//! name goes on at normal speed, and the zone is not listed for it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::route53::jittered_backoff;

/// First retry of a refused name.
pub const BASE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
struct Entry {
    failures: u32,
    until: Instant,
    /// The Service and what Route53 said: reported while it lasts.
    resource: String,
    note: String,
}

/// The quarantined names.
#[derive(Debug, Clone)]
pub struct Quarantine {
    entries: HashMap<String, Entry>,
    cap: Duration,
}

impl Quarantine {
    /// `cap`: the longest backoff.
    pub fn new(cap: Duration) -> Self {
        Self { entries: HashMap::new(), cap: cap.max(BASE) }
    }

    /// Route53 refused `name` (again) for `resource`, saying `note`:
    /// returns how long it now waits.
    pub fn refused(&mut self, name: &str, now: Instant, resource: &str, note: &str) -> Duration {
        let e = self.entries.entry(name.to_string()).or_insert(Entry {
            failures: 0,
            until: now,
            resource: String::new(),
            note: String::new(),
        });
        e.failures = e.failures.saturating_add(1);
        resource.clone_into(&mut e.resource);
        note.clone_into(&mut e.note);
        let wait = jittered_backoff(e.failures - 1, BASE, self.cap);
        e.until = now + wait;
        wait
    }

    /// `name` went through (or is no longer wanted): out of quarantine.
    pub fn release(&mut self, name: &str) {
        self.entries.remove(name);
    }

    /// Whether `name` is waiting out its backoff.
    pub fn holds(&self, name: &str, now: Instant) -> bool {
        self.entries.get(name).is_some_and(|e| e.until > now)
    }

    /// Names whose backoff is over: read them again, plan, send alone.
    pub fn due(&self, now: Instant) -> Vec<String> {
        let mut out: Vec<String> =
            self.entries.iter().filter(|(_, e)| e.until <= now).map(|(n, _)| n.clone()).collect();
        out.sort();
        out
    }

    /// When the next name comes out (the loop wakes up then).
    pub fn next_due(&self) -> Option<Instant> {
        self.entries.values().map(|e| e.until).min()
    }

    /// `(name, resource, note)` of every quarantined name.
    pub fn notes(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.entries.iter().map(|(n, e)| (n.as_str(), e.resource.as_str(), e.note.as_str()))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_name_waits_longer_each_time_and_alone() {
        let mut q = Quarantine::new(Duration::from_secs(300));
        let t0 = Instant::now();
        let first = q.refused("bad.z", t0, "service/a/b", "refused");
        assert!((BASE..=BASE * 2).contains(&first), "{first:?}");
        assert!(q.holds("bad.z", t0));
        assert!(!q.holds("good.z", t0), "other names are not held");
        assert!(q.due(t0).is_empty());
        assert_eq!(q.next_due(), Some(t0 + first));
        let later = t0 + first;
        assert_eq!(q.due(later), ["bad.z"]);
        assert_eq!(q.notes().collect::<Vec<_>>(), [("bad.z", "service/a/b", "refused")]);
        let mut waits = Vec::new();
        for _ in 0..12 {
            waits.push(q.refused("bad.z", later, "service/a/b", "refused"));
        }
        assert!(waits.iter().all(|w| *w <= Duration::from_secs(300)), "capped: {waits:?}");
        assert!(waits[11] >= BASE);
        q.release("bad.z");
        assert!(q.is_empty() && q.next_due().is_none());
    }
}
