//! Log tails held once: one per incident key, shared by every PodAlert
//! whose incident has that key, within the operator-wide budget
//! (`--max-log-bytes`) shared fairly between namespaces (see the parent
//! module's docs).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::observe::Key;
use crate::pod::elapsed;
use crate::redact::Redactor;

use super::{cap, last_lines};

/// Which read a tail is: the pod it came from and the crashed run's
/// container ID ("" when there is none, e.g. a container not Ready).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    pub pod: String,
    pub incarnation: String,
}

/// A tail not older than this is shared even without an incarnation to
/// tell which run it is.
const FRESH: Duration = Duration::from_secs(30);
/// Less room than this left for a tail: it is left out rather than cut to
/// a few lines.
const MIN_KEPT: usize = 1024;

pub const LEFT_OUT: &str =
    "(log tail left out: this namespace's share of the operator's log budget (--max-log-bytes) is in use)";
pub const EVICTED: &str =
    "(log tail left out: its room in the operator's log budget went to another namespace's fair share)";

/// One incident key's tail, shared.
#[derive(Debug)]
pub struct Tail {
    namespace: String,
    state: Mutex<TailState>,
}

#[derive(Debug)]
struct TailState {
    text: Arc<str>,
    /// Bytes charged to the budget.
    charged: usize,
    identity: Identity,
    lines: u32,
    bytes: usize,
    read_at: Timestamp,
    /// The text is the whole read (not cut by the budget, not a note):
    /// another PodAlert may judge its ignore.logPatterns on it.
    complete: bool,
    /// The pod's last Warning Events ([`crate::events`]), redacted as the
    /// text; None until a PodAlert that shows them has read them. Bounded
    /// (5 lines of 256 bytes), not charged to the log budget.
    events: Option<Arc<[String]>>,
}

impl PartialEq for Tail {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}
impl Eq for Tail {}

impl Tail {
    /// The text as held.
    pub fn text(&self) -> Arc<str> {
        Arc::clone(&self.state.lock().unwrap_or_else(PoisonError::into_inner).text)
    }

    /// The text as a PodAlert with `lines` and `max_bytes` sees it.
    pub fn view(&self, lines: u32, max_bytes: usize) -> String {
        last_lines(&self.text(), lines, max_bytes)
    }

    /// The pod's Warning Events read with this tail, None when none were read.
    pub fn events(&self) -> Option<Arc<[String]>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).events.clone()
    }

    /// Holds `events`, read for this tail's pod and redacted as its text:
    /// every PodAlert sharing the tail shows them. A new read of the tail
    /// ([`Tails::store`]) forgets them.
    pub fn set_events(&self, events: Vec<String>) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).events = Some(events.into());
    }

    /// A tail that is not shared, for tests and restored notes.
    pub fn detached(text: &str) -> Arc<Tail> {
        Arc::new(Tail {
            namespace: String::new(),
            state: Mutex::new(TailState {
                text: text.into(),
                charged: 0,
                identity: Identity::default(),
                lines: 0,
                bytes: 0,
                read_at: Timestamp::UNIX_EPOCH,
                complete: false,
                events: None,
            }),
        })
    }
}

/// The tails of every incident of every PodAlert, keyed by incident key.
#[derive(Debug)]
pub struct Tails {
    budget: usize,
    inner: Mutex<Inner>,
}

/// What a tail is held under: the incident key and the profile of the
/// redaction it went through ([`Redactor::profile`]). PodAlerts that redact
/// differently never share a tail: one with `redactDefaults: false` must not
/// hand its text to one that redacts, nor the other way round.
type Slot = (Key, Arc<str>);

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<Slot, Arc<Tail>>,
    /// One read at a time per key: the PodAlerts that open the same
    /// incident together wait for the first read and share it.
    gates: HashMap<Key, Arc<tokio::sync::Mutex<()>>>,
    by_namespace: HashMap<String, usize>,
    total: usize,
}

impl Inner {
    fn charge(&mut self, ns: &str, n: usize) {
        *self.by_namespace.entry(ns.to_string()).or_default() += n;
        self.total += n;
    }

    fn uncharge(&mut self, ns: &str, n: usize) {
        if let Some(held) = self.by_namespace.get_mut(ns) {
            *held = held.saturating_sub(n);
            if *held == 0 {
                self.by_namespace.remove(ns);
            }
        }
        self.total = self.total.saturating_sub(n);
    }

    /// A namespace's fair share: the budget over the namespaces holding
    /// tails, `ns` counted.
    fn share(&self, budget: usize, ns: &str) -> usize {
        let n = self.by_namespace.len() + usize::from(!self.by_namespace.contains_key(ns));
        budget / n.max(1)
    }

    /// Leaves out the largest tail of the namespace most over its share
    /// (not `ns`); false when none is over.
    fn evict_one(&mut self, budget: usize, ns: &str) -> bool {
        let share = self.share(budget, ns);
        let over = self
            .by_namespace
            .iter()
            .filter(|(n, held)| n.as_str() != ns && **held > share)
            .max_by_key(|(_, held)| **held)
            .map(|(n, _)| n.clone());
        let Some(victim_ns) = over else { return false };
        let victim = self
            .entries
            .values()
            .filter(|t| t.namespace == victim_ns)
            .max_by_key(|t| t.state.lock().unwrap_or_else(PoisonError::into_inner).charged)
            .cloned();
        let Some(victim) = victim else { return false };
        let freed = {
            let mut st = victim.state.lock().unwrap_or_else(PoisonError::into_inner);
            st.text = EVICTED.into();
            st.complete = false;
            std::mem::take(&mut st.charged)
        };
        self.uncharge(&victim_ns, freed);
        freed > 0
    }
}

impl Tails {
    pub fn new(budget: usize) -> Self {
        Self { budget, inner: Mutex::default() }
    }

    /// Bytes held, all namespaces.
    pub fn held(&self) -> usize {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).total
    }

    /// Bytes held by `namespace`.
    pub fn held_by(&self, namespace: &str) -> usize {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).by_namespace.get(namespace).copied().unwrap_or(0)
    }

    /// The tail already held for `key` redacted as `profile`, when it is
    /// the same read (same pod and crashed run, or read moments ago) or a
    /// read of the same pod begun after `now` (the caller's evaluation),
    /// whole, and has at least `lines` and `bytes`: another PodAlert read it.
    pub fn reusable(
        &self,
        key: &Key,
        profile: &Arc<str>,
        id: &Identity,
        lines: u32,
        bytes: usize,
        now: Timestamp,
    ) -> Option<Arc<Tail>> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let tail = inner.entries.get(&(key.clone(), Arc::clone(profile)))?;
        let st = tail.state.lock().unwrap_or_else(PoisonError::into_inner);
        // A read begun after this evaluation (`now`) read a view at least
        // as new as this one's, whatever run it named: reused. Without
        // this, PodAlerts that evaluated a fast crash loop moments apart
        // each saw another run, missed each other's tail and read it again
        // in turn — 20 PodAlerts over 20 crash-looping containers queued
        // hundreds of reads behind the two read permits (a CI run's 5
        // minutes before their statuses showed the incidents).
        let newer = st.identity.pod == id.pod && st.read_at >= now;
        let same = newer || st.identity == *id && (!id.incarnation.is_empty() || elapsed(st.read_at, now) < FRESH);
        (same && st.complete && st.lines >= lines && st.bytes >= bytes).then(|| Arc::clone(tail))
    }

    /// Holds `text`, redacted as `profile` and read as `id` with `lines` and
    /// `bytes` by a read begun at `now`, as `key`'s tail (replacing what was held: every PodAlert with
    /// that key and profile sees it), within the namespace's share of the
    /// budget.
    #[allow(clippy::too_many_arguments)]
    pub fn store(
        &self,
        key: &Key,
        profile: &Arc<str>,
        id: Identity,
        lines: u32,
        bytes: usize,
        text: String,
        now: Timestamp,
    ) -> Arc<Tail> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let ns = key.namespace.as_str();
        let tail = Arc::clone(inner.entries.entry((key.clone(), Arc::clone(profile))).or_insert_with(|| {
            Arc::new(Tail {
                namespace: ns.to_string(),
                state: Mutex::new(TailState {
                    text: "".into(),
                    charged: 0,
                    identity: Identity::default(),
                    lines: 0,
                    bytes: 0,
                    read_at: now,
                    complete: false,
                    events: None,
                }),
            })
        }));
        let old = std::mem::take(&mut tail.state.lock().unwrap_or_else(PoisonError::into_inner).charged);
        inner.uncharge(ns, old);
        let want = text.len();
        let room = |inner: &Inner| {
            let held = inner.by_namespace.get(ns).copied().unwrap_or(0);
            let share = inner.share(self.budget, ns).saturating_sub(held);
            (share, self.budget.saturating_sub(inner.total))
        };
        // Within its share, a namespace takes room back from those over theirs.
        loop {
            let (share, free) = room(&inner);
            if free >= want.min(share) || !inner.evict_one(self.budget, ns) {
                break;
            }
        }
        let (share, free) = room(&inner);
        let fits = want.min(share).min(free);
        let (kept, complete): (Arc<str>, bool) = if fits == want {
            (text.into(), true)
        } else if fits >= MIN_KEPT {
            (cap(&text, fits).into(), false)
        } else {
            (LEFT_OUT.into(), false)
        };
        let charged = if complete || kept.as_ref() != LEFT_OUT { kept.len() } else { 0 };
        inner.charge(ns, charged);
        let mut st = tail.state.lock().unwrap_or_else(PoisonError::into_inner);
        *st = TailState { text: kept, charged, identity: id, lines, bytes, read_at: now, complete, events: None };
        drop(st);
        tail
    }

    /// The tail held for `key` redacted by `redactor`, or `text` (an
    /// operator restart's tail from the status) redacted and held as it, if
    /// room allows. Redacted again: a status written before redaction
    /// existed, or under another spec, may hold what this one redacts.
    pub fn adopt(&self, key: &Key, redactor: &Redactor, text: String, now: Timestamp) -> Arc<Tail> {
        let profile = redactor.profile();
        let slot = (key.clone(), Arc::clone(profile));
        if let Some(t) = self.inner.lock().unwrap_or_else(PoisonError::into_inner).entries.get(&slot) {
            return Arc::clone(t);
        }
        let text = match redactor.redact(&text) {
            std::borrow::Cow::Borrowed(_) => text,
            std::borrow::Cow::Owned(redacted) => redacted,
        };
        let tail = self.store(key, profile, Identity::default(), 0, 0, text, now);
        // Not a read: nothing to share with a PodAlert that needs one.
        tail.state.lock().unwrap_or_else(PoisonError::into_inner).complete = false;
        tail
    }

    /// Held while reading `key`'s tail: a PodAlert with the same incident
    /// waits, then finds the read [`Tails::reusable`].
    pub fn gate(&self, key: &Key) -> Arc<tokio::sync::Mutex<()>> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(inner.gates.entry(key.clone()).or_default())
    }

    /// Forgets the tails no incident or queued notification holds.
    pub fn collect(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.gates.retain(|_, g| Arc::strong_count(g) > 1);
        let unused: Vec<Slot> =
            inner.entries.iter().filter(|(_, t)| Arc::strong_count(t) == 1).map(|(k, _)| k.clone()).collect();
        for key in unused {
            if let Some(t) = inner.entries.remove(&key) {
                let charged = t.state.lock().unwrap_or_else(PoisonError::into_inner).charged;
                inner.uncharge(&t.namespace, charged);
            }
        }
    }
}
