//! The Events published lately, for aggregating repeats: a repeat within
//! [`AGGREGATE_FOR`] bumps the published Event's count instead of making
//! another.
//!
//! Bounded twice: by time, and by number ([`REMEMBERED`], the oldest
//! forgotten first). Each is remembered by a 64-bit hash of its identity,
//! not the identity itself, whose note alone may be 1 KiB: a burst of Events
//! (one per Service published, per copy made, per container injected)
//! otherwise held ~0.5-1.5 KiB each for six minutes, without a bound, so a
//! tenant making many objects could make the operator hold as many.
//! A hash collision (about 2^-64 per pair) would only bump another Event's
//! count instead of making a new one; the hash is keyed at random per
//! process, so a tenant cannot compute one offline to hide its Event's
//! message behind another's.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::time::{Duration, Instant};

/// How long a published Event is remembered for aggregation (as kube's recorder).
pub const AGGREGATE_FOR: Duration = Duration::from_secs(6 * 60);
/// Events remembered at most (a few dozen bytes each).
pub const REMEMBERED: usize = 4096;

/// A published Event: its name and how often it happened.
struct Published {
    name: Box<str>,
    count: i32,
    at: Instant,
}

#[derive(Default)]
pub struct Recent {
    by_id: HashMap<u64, Published>,
    /// Keyed at random: identities are the authors' to choose.
    keys: RandomState,
}

impl Recent {
    /// Forgets what was published longer than [`AGGREGATE_FOR`] before `now`.
    pub fn forget_expired(&mut self, now: Instant) {
        self.by_id.retain(|_, p| now.saturating_duration_since(p.at) < AGGREGATE_FOR);
        if self.by_id.capacity() > 64 && self.by_id.len() < self.by_id.capacity() / 4 {
            self.by_id.shrink_to(self.by_id.len() * 2);
        }
    }

    /// When `identity` was published within [`AGGREGATE_FOR`]: the Event's
    /// name and its count, bumped.
    pub fn repeat(&mut self, identity: &impl Hash, now: Instant) -> Option<(String, i32)> {
        let p = self.by_id.get_mut(&self.keys.hash_one(identity))?;
        if now.saturating_duration_since(p.at) >= AGGREGATE_FOR {
            return None;
        }
        p.count += 1;
        p.at = now;
        Some((p.name.to_string(), p.count))
    }

    /// Remembers `identity` as published now, as Event `name`.
    pub fn remember(&mut self, identity: &impl Hash, name: String, now: Instant) {
        let id = self.keys.hash_one(identity);
        if self.by_id.len() >= REMEMBERED
            && !self.by_id.contains_key(&id)
            && let Some(oldest) = self.by_id.iter().min_by_key(|(_, p)| p.at).map(|(k, _)| *k)
        {
            self.by_id.remove(&oldest);
        }
        self.by_id.insert(id, Published { name: name.into_boxed_str(), count: 1, at: now });
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_within_the_window_is_counted_on_the_same_event() {
        let (mut r, t0) = (Recent::default(), Instant::now());
        assert_eq!(r.repeat(&("svc", "Published", "a.example"), t0), None);
        r.remember(&("svc", "Published", "a.example"), "svc.1".into(), t0);
        assert_eq!(r.repeat(&("svc", "Published", "a.example"), t0), Some(("svc.1".into(), 2)));
        assert_eq!(r.repeat(&("svc", "Published", "b.example"), t0), None, "another note is another Event");
        let later = t0 + AGGREGATE_FOR - Duration::from_secs(1);
        assert_eq!(r.repeat(&("svc", "Published", "a.example"), later), Some(("svc.1".into(), 3)));
    }

    #[test]
    fn what_is_older_than_the_window_is_forgotten() {
        let (mut r, t0) = (Recent::default(), Instant::now());
        r.remember(&"a", "a.1".into(), t0);
        r.remember(&"b", "b.1".into(), t0 + Duration::from_secs(60));
        let later = t0 + AGGREGATE_FOR;
        assert_eq!(r.repeat(&"a", later), None);
        r.forget_expired(later);
        assert_eq!(r.len(), 1);
        assert!(r.repeat(&"b", later).is_some());
    }

    /// The bound: a burst of distinct Events keeps at most [`REMEMBERED`],
    /// the newest.
    #[test]
    fn at_most_remembered_are_kept_the_oldest_forgotten_first() {
        let (mut r, t0) = (Recent::default(), Instant::now());
        for i in 0..REMEMBERED + 100 {
            r.remember(&i, format!("e.{i}"), t0 + Duration::from_millis(i as u64));
        }
        assert_eq!(r.len(), REMEMBERED);
        let now = t0 + Duration::from_secs(10);
        assert_eq!(r.repeat(&0usize, now), None, "the oldest was forgotten");
        assert_eq!(r.repeat(&(REMEMBERED + 99), now), Some((format!("e.{}", REMEMBERED + 99), 2)));
    }
}
