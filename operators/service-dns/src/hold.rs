//! The hold rule, in one place: when the loop syncs, and how much of a
//! plan a sync sends while a stream of changes goes on. Pure: every time is
//! an argument.
//!
//! Batching costs nothing when there is nothing to batch: the first event
//! on an idle loop is synced at once (leading edge: one request for one
//! change). Events that arrive while a request is in flight, or during a
//! stream, are gathered: a sync once the stream pauses, the requests that
//! are full as they fill, and nothing held past `--max-batch-delay`.
//!
//! The loop (`controller.rs`) tells [`Hold`] of events and syncs and asks
//! it how long to [`Hold::wait`]; the sync (`sync.rs`) asks it in
//! which order the planned changes go ([`Hold::order`]), how many of them to
//! send ([`Hold::sending`]), and tells it what went ([`Hold::sent`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::batch::{Limits, full_batches};
use crate::plan::{ChangeGroup, ChangeKind};

/// What a sync sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sending {
    /// Everything planned: the stream (if any) has ended.
    All,
    /// A stream of changes is still arriving: the full requests, and the
    /// rest kept for a fuller one unless it holds a change that has waited
    /// `--max-batch-delay`.
    FullRequests,
}

/// How long the loop gathers events before it syncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// Sync then at the latest: the stream paused, or the oldest pending
    /// change waited `--max-batch-delay`.
    pub until: Instant,
    /// What that sync sends.
    pub then: Sending,
    /// Before `until`: when to send the requests already full
    /// ([`Sending::FullRequests`]).
    pub check: Option<Instant>,
}

/// When each planned change was first planned, as a sync ordered them: the
/// input of [`Hold::sending`] and [`Hold::sent`].
#[derive(Debug, Clone, Default)]
pub struct Planned {
    since: HashMap<String, Instant>,
}

/// The events not yet covered by a sync, and the changes planned but not
/// yet sent.
#[derive(Debug, Clone)]
pub struct Hold {
    /// `--debounce`: an idle loop's event goes at once when there was no
    /// sync for that long; otherwise a quiet stream ends after it.
    debounce: Duration,
    /// `--max-batch-delay`: no change waits longer for a fuller request.
    max_delay: Duration,
    /// During a stream, how often the full requests are sent.
    check_every: Duration,
    /// When the first event not yet covered by a sync came (None: none).
    first_event: Option<Instant>,
    /// When the last event came: the stream has paused when this is old.
    last_event: Instant,
    /// The longest pause between two events of the current stream, as seen
    /// while gathering (a pause across a sync measures the sync, not the
    /// stream, and is not counted).
    longest_gap: Duration,
    /// When the last sync ended.
    last_sync: Instant,
    /// When each unsent change (by name) was first planned: changes are
    /// sent oldest first.
    first_planned: HashMap<String, Instant>,
    /// The oldest change the last sync held back for a fuller request.
    held_since: Option<Instant>,
}

impl Hold {
    /// A loop started at `now` (counting as its last sync) with nothing
    /// pending.
    pub fn new(debounce: Duration, max_delay: Duration, check_every: Duration, now: Instant) -> Self {
        Self {
            debounce,
            max_delay,
            check_every,
            first_event: None,
            last_event: now,
            longest_gap: Duration::ZERO,
            last_sync: now,
            first_planned: HashMap::new(),
            held_since: None,
        }
    }

    /// An event seen after a sync, or on an idle loop: no gap measured.
    pub fn event(&mut self, now: Instant) {
        self.first_event.get_or_insert(now);
        self.last_event = now;
    }

    /// An event seen while gathering a stream: the pause before it counts.
    pub fn event_in_stream(&mut self, now: Instant) {
        self.longest_gap = self.longest_gap.max(now.saturating_duration_since(self.last_event));
        self.first_event.get_or_insert(now);
        self.last_event = now;
    }

    /// Nothing pending: no event since the last sync, no change held.
    pub fn idle(&self) -> bool {
        self.first_event.is_none() && self.held_since.is_none()
    }

    /// The stream there was (if any) has ended: the next starts afresh.
    pub fn stream_ended(&mut self) {
        self.longest_gap = Duration::ZERO;
    }

    /// Whether an event at `now` on an idle loop is synced at once — idle
    /// meaning no sync for a `--debounce` either: a burst whose first
    /// creates trickle in (a loaded API server) would otherwise send each of
    /// them alone, one leading edge after the other.
    pub fn leading_edge(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_sync) >= self.debounce
    }

    /// How long to gather events (`streaming`: an event came during the last
    /// sync). Everything once the stream pauses for a `--debounce`;
    /// meanwhile, every `check_every` since the last sync, the requests that
    /// are full; and what has waited `--max-batch-delay` at the latest.
    pub fn wait(&self, streaming: bool, now: Instant) -> Wait {
        let oldest = [self.first_event, self.held_since].into_iter().flatten().min();
        let cap = oldest.map_or(now, |t| t + self.max_delay);
        // Inside a stream (changes held, or events that came while a
        // request was in flight), a pause of one debounce is not its end:
        // a loaded API server stalls creations that long, and longer — see
        // `stream_quiet`.
        let quiet = if self.held_since.is_some() || streaming { self.stream_quiet() } else { self.debounce };
        let paused = self.last_event + quiet;
        let until = paused.min(cap);
        // The stream paused, or an event not yet planned waited
        // `--max-batch-delay`: send it all. A held change that waited that
        // long while the stream goes on goes with the full requests instead
        // (`sending`): a partial request only if the full ones cannot carry it.
        let held_is_oldest = self.held_since.is_some_and(|h| self.first_event.is_none_or(|f| h <= f));
        let then = if until < paused && held_is_oldest { Sending::FullRequests } else { Sending::All };
        let check = self.last_sync + self.check_every;
        Wait { until, then, check: (check < until).then_some(check) }
    }

    /// How long a stream must pause before its partial request is sent: at
    /// least `check_every`, and twice the longest pause the stream has
    /// already had. A stream whose creations stall for 1.5 s now and then
    /// (an API server on 2 busy cores) is not taken to have ended at each
    /// stall — every such stall would cost a partial request — while a
    /// steady stream still ends after `check_every`. `--max-batch-delay`
    /// bounds the wait whatever this says.
    fn stream_quiet(&self) -> Duration {
        self.check_every.max(self.longest_gap.saturating_mul(2))
    }

    /// A sync starts: the events so far are covered by it.
    pub fn sync_starts(&mut self) {
        self.first_event = None;
    }

    /// A sync ended at `now`.
    pub fn synced(&mut self, now: Instant) {
        self.last_sync = now;
    }

    /// The oldest change the last sync held back for a fuller request.
    pub fn held_since(&self) -> Option<Instant> {
        self.held_since
    }

    /// Orders `groups` deletions first, then oldest first — by when each
    /// name's change was first planned (new ones at `now`), then by name —
    /// so that a change held back for a fuller request goes out in the next
    /// one. Returns those times.
    ///
    /// Deletions first: after an outage or a restart, a record of a Service
    /// deleted meanwhile still points at its ClusterIP, which the cluster
    /// may have given to another Service since; it must not wait behind
    /// thousands of creations (at `--route53-rps` a request or two a second).
    pub fn order(&self, groups: &mut [ChangeGroup], now: Instant) -> Planned {
        let since: HashMap<String, Instant> =
            groups.iter().map(|g| (g.name.clone(), self.first_planned.get(&g.name).copied().unwrap_or(now))).collect();
        groups.sort_by_cached_key(|g| (g.kind != ChangeKind::Deleted, since.get(&g.name).copied(), g.name.clone()));
        Planned { since }
    }

    /// How many of `groups` (ordered by [`Hold::order`]) a sync sends, the
    /// oldest of the rest held for a fuller request. [`Sending::All`]: all.
    /// [`Sending::FullRequests`]: the full requests — and the last, partial
    /// one too when it holds a change first planned `--max-batch-delay` or
    /// longer before `now`: that change has waited long enough, and the
    /// request it goes in might as well carry everything pending. The
    /// oldest change is always in the first request, so a change that falls
    /// overdue while full requests exist goes with them, costing no request.
    pub fn sending(
        &mut self,
        planned: &Planned,
        groups: &[ChangeGroup],
        limits: Limits,
        sending: Sending,
        now: Instant,
    ) -> usize {
        let count = match sending {
            Sending::All => groups.len(),
            Sending::FullRequests => {
                let full = full_batches(groups, limits);
                let late = groups[full..].iter().any(|g| {
                    planned.since.get(&g.name).is_some_and(|t| now.saturating_duration_since(*t) >= self.max_delay)
                });
                if late { groups.len() } else { full }
            }
        };
        self.held_since = groups[count..].iter().filter_map(|g| planned.since.get(&g.name)).min().copied();
        count
    }

    /// The sync sent the changes to `done` (accepted by Route53): the others
    /// planned keep their first-planned times; names no longer planned are
    /// forgotten.
    pub fn sent<'a>(&mut self, planned: Planned, done: impl IntoIterator<Item = &'a str>) {
        self.first_planned = planned.since;
        for name in done {
            self.first_planned.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::batches;
    use crate::batch::tests::groups;
    use crate::desired::Claim;
    use crate::model::{RecordSet, RecordType};
    use crate::plan::{Policy, plan};
    use proptest::prelude::*;

    const SEC: Duration = Duration::from_secs(1);

    /// 2 names (A + TXT each) per request.
    fn two_per_request() -> Limits {
        Limits { max_records: 4, max_chars: 10_000 }
    }

    fn hold(t0: Instant) -> Hold {
        Hold::new(Duration::from_millis(200), Duration::from_secs(15), SEC, t0)
    }

    #[test]
    fn a_stream_that_stalled_must_pause_longer_to_end() {
        let t0 = Instant::now();
        let mut h = hold(t0);
        let mut t = t0;
        h.event(t);
        for _ in 0..10 {
            t += Duration::from_millis(50);
            h.event_in_stream(t);
        }
        assert_eq!(h.stream_quiet(), SEC, "a steady stream ends after check_every");
        t += Duration::from_millis(1500);
        h.event_in_stream(t);
        assert_eq!(h.stream_quiet(), 3 * SEC, "twice the longest stall");
        // A pause across a sync (events seen after it) is not a stall.
        t += 6 * SEC;
        h.event(t);
        assert_eq!(h.stream_quiet(), 3 * SEC);
        h.stream_ended();
        assert_eq!(h.stream_quiet(), SEC, "a new stream starts afresh");
    }

    #[test]
    fn a_lone_event_on_an_idle_loop_goes_at_once_and_one_soon_after_a_sync_waits() {
        let t0 = Instant::now();
        let mut h = hold(t0);
        assert!(h.idle());
        assert!(!h.leading_edge(t0 + Duration::from_millis(100)), "within --debounce of the last sync");
        assert!(h.leading_edge(t0 + Duration::from_millis(200)));
        // Gathered instead: everything once the stream pauses for --debounce.
        let t = t0 + Duration::from_millis(100);
        h.event(t);
        assert!(!h.idle());
        let w = h.wait(false, t);
        assert_eq!(w, Wait { until: t + Duration::from_millis(200), then: Sending::All, check: None });
    }

    #[test]
    fn a_stream_sends_full_requests_every_check_and_all_when_it_pauses() {
        let t0 = Instant::now();
        let mut h = hold(t0);
        let mut t = t0 + Duration::from_millis(500);
        h.event(t);
        for _ in 0..10 {
            t += Duration::from_millis(100);
            h.event_in_stream(t);
        }
        // An event came during the last sync: the stream's pause is check_every.
        let w = h.wait(true, t);
        assert_eq!(w.until, t + SEC);
        assert_eq!(w.then, Sending::All);
        assert_eq!(w.check, Some(t0 + SEC), "the full requests go a check_every after the last sync");
    }

    #[test]
    fn a_held_change_overdue_goes_with_the_full_requests() {
        let t0 = Instant::now();
        let mut h = hold(t0);
        let mut gs = groups(&["a", "b", "c"]);
        let planned = h.order(&mut gs, t0);
        assert_eq!(h.sending(&planned, &gs, two_per_request(), Sending::FullRequests, t0), 2, "c waits");
        assert_eq!(h.held_since(), Some(t0));
        h.sent(planned, ["a.z", "b.z"]);
        h.synced(t0);
        // Events keep coming, 100 ms apart: the stream never pauses, and the
        // held change's bound comes first. At it, the full requests go.
        let mut t = t0;
        for _ in 0..145 {
            t += Duration::from_millis(100);
            h.event_in_stream(t);
        }
        let w = h.wait(false, t);
        assert_eq!(w.until, t0 + Duration::from_secs(15));
        assert_eq!(w.then, Sending::FullRequests, "the held change is the oldest: with the full requests");
        h.sync_starts();
        let mut gs = groups(&["c", "d", "e"]);
        let at = t0 + Duration::from_secs(15);
        let planned = h.order(&mut gs, at);
        assert_eq!(gs[0].name, "c.z", "held: it goes first");
        assert_eq!(h.sending(&planned, &gs, two_per_request(), Sending::FullRequests, at), 2, "c and d: full");
        assert_eq!(h.held_since(), Some(at), "e waits, from now");
        // ...and alone only when no full request can carry it.
        let mut gs = groups(&["e"]);
        let planned = h.order(&mut gs, at);
        let later = at + Duration::from_secs(15);
        assert_eq!(h.sending(&planned, &gs, two_per_request(), Sending::FullRequests, later), 1);
        assert_eq!(h.held_since(), None);
    }

    #[test]
    fn a_partial_request_goes_mid_stream_only_with_an_overdue_change() {
        let t0 = Instant::now();
        let limits = two_per_request();
        let mut h = hold(t0);
        h.first_planned.insert("a.z".to_string(), t0);
        let mut gs = groups(&["a", "b", "c", "d", "e"]);
        let later = t0 + Duration::from_secs(10);
        let planned = h.order(&mut gs, later);
        let (now, wait) = (later + Duration::from_secs(5), Duration::from_secs(15));
        // The stream has ended: everything.
        assert_eq!(h.sending(&planned, &gs, limits, Sending::All, now), 5);
        assert_eq!(h.held_since(), None);
        // Mid-stream, nothing overdue in the partial request: the full ones.
        assert_eq!(
            h.sending(&planned, &gs, limits, Sending::FullRequests, now),
            4,
            "a (overdue) goes in the first full request"
        );
        assert_eq!(h.held_since(), Some(later));
        assert_eq!(
            h.sending(&planned, &gs[..1], limits, Sending::FullRequests, now),
            1,
            "a alone is overdue: its partial request goes"
        );
        assert_eq!(
            h.sending(&planned, &gs[1..], limits, Sending::FullRequests, now),
            2,
            "b..e: nothing overdue, d and e wait"
        );
        // 15 s after b..e were planned, e is overdue too: the partial goes.
        assert_eq!(h.sending(&planned, &gs, limits, Sending::FullRequests, later + wait), 5);
    }

    #[test]
    fn deletions_go_before_creations_and_updates() {
        // After a restart every change is new: by name, the deletion of
        // zz.z (its Service gone, its ClusterIP maybe someone else's now)
        // would go last.
        let mut zone = Vec::new();
        for g in groups(&["zz", "m"]) {
            zone.extend(g.changes.into_iter().map(|c| c.record));
        }
        let mut claims: Vec<Claim> = ["a", "b", "c"]
            .iter()
            .map(|n| {
                let resource = format!("service/ns/{n}");
                let records = vec![RecordSet::new(format!("{n}.z"), RecordType::A, 300, vec!["10.0.0.9".into()])];
                Claim { order: (0, resource.clone()), records, resource }
            })
            .collect();
        claims.push(Claim {
            resource: "service/ns/m".into(),
            order: (0, "service/ns/m".into()),
            records: vec![RecordSet::new("m.z", RecordType::A, 300, vec!["10.0.0.2".into()])],
        });
        let mut p = plan(&claims, &zone, "me", Policy::Sync).groups;
        let now = Instant::now();
        let mut h = hold(now);
        let planned = h.order(&mut p, now);
        let order: Vec<(&str, ChangeKind)> = p.iter().map(|g| (g.name.as_str(), g.kind)).collect();
        assert_eq!(
            order,
            [
                ("zz.z", ChangeKind::Deleted),
                ("a.z", ChangeKind::Created),
                ("b.z", ChangeKind::Created),
                ("c.z", ChangeKind::Created),
                ("m.z", ChangeKind::Updated)
            ]
        );
        // In requests of two names, the deletion is in the first.
        assert_eq!(batches(&p, two_per_request())[0][0].name, "zz.z");
        assert_eq!(h.sending(&planned, &p, two_per_request(), Sending::All, now), 5);
    }

    #[test]
    fn held_changes_go_first() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(5);
        let mut h = hold(t0);
        let mut gs = groups(&["c"]);
        let planned = h.order(&mut gs, t0);
        h.sent(planned, []);
        let mut gs = groups(&["a", "b", "c"]);
        let planned = h.order(&mut gs, later);
        let order: Vec<&str> = gs.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(order, ["c.z", "a.z", "b.z"], "c was held: it goes first; then by name");
        assert_eq!(planned.since["c.z"], t0);
        assert_eq!(planned.since["a.z"], later);
        // What went is forgotten; what is no longer planned too.
        h.sent(planned, ["c.z", "a.z"]);
        assert_eq!(h.first_planned.keys().collect::<Vec<_>>(), ["b.z"]);
        let planned = h.order(&mut [], later);
        h.sent(planned, []);
        assert!(h.first_planned.is_empty());
    }

    /// A loop's history: events (in a stream or after a sync) and syncs
    /// that send full requests or everything, `ms` apart.
    #[derive(Debug, Clone)]
    enum Step {
        Event { ms: u64, in_stream: bool },
        Sync { ms: u64, all: bool, names: u8 },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u64..3000, any::<bool>()).prop_map(|(ms, in_stream)| Step::Event { ms, in_stream }),
            (0u64..3000, any::<bool>(), 0u8..8).prop_map(|(ms, all, names)| Step::Sync { ms, all, names }),
        ]
    }

    proptest! {
        /// Whatever happened before: the loop never waits past the oldest
        /// pending change's `--max-batch-delay`; a sync sends every full
        /// request, and holds back nothing that has waited that long.
        #[test]
        fn nothing_is_held_past_max_batch_delay_and_full_requests_go(
            steps in proptest::collection::vec(step(), 0..40),
            streaming in any::<bool>(),
        ) {
            let t0 = Instant::now();
            let max = Duration::from_secs(15);
            let mut h = Hold::new(Duration::from_millis(200), max, SEC, t0);
            let mut t = t0;
            let mut next = 0usize;
            for s in steps {
                match s {
                    Step::Event { ms, in_stream } => {
                        t += Duration::from_millis(ms);
                        if in_stream { h.event_in_stream(t) } else { h.event(t) }
                    }
                    Step::Sync { ms, all, names } => {
                        t += Duration::from_millis(ms);
                        h.sync_starts();
                        // Some of the changes held again, and `names` new ones.
                        let mut held: Vec<String> = h.first_planned.keys().cloned().collect();
                        held.sort();
                        let mut wanted: Vec<String> =
                            held.iter().take(3).map(|n| n.trim_end_matches(".z").to_string()).collect();
                        for _ in 0..names {
                            next += 1;
                            wanted.push(format!("n{next}"));
                        }
                        let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
                        let mut gs = groups(&wanted);
                        let planned = h.order(&mut gs, t);
                        let sending = if all { Sending::All } else { Sending::FullRequests };
                        let count = h.sending(&planned, &gs, two_per_request(), sending, t);
                        prop_assert!(count >= full_batches(&gs, two_per_request()), "a full request always goes");
                        if all {
                            prop_assert_eq!(count, gs.len());
                        }
                        for g in &gs[count..] {
                            let waited = t.saturating_duration_since(planned.since[&g.name]);
                            prop_assert!(waited < max, "{} held past the bound", g.name);
                        }
                        let done: Vec<String> = gs[..count].iter().map(|g| g.name.clone()).collect();
                        h.sent(planned, done.iter().map(String::as_str));
                        h.synced(t);
                    }
                }
                let w = h.wait(streaming, t);
                let oldest = [h.first_event, h.held_since()].into_iter().flatten().min();
                match oldest {
                    Some(o) => prop_assert!(w.until <= o + max, "waits past the oldest change's bound"),
                    None => prop_assert!(w.until <= t, "nothing pending: no wait"),
                }
                if let Some(c) = w.check { prop_assert!(c < w.until); }
            }
        }

        /// An event on a loop idle for a `--debounce` is synced at once, and
        /// a sync of everything sends everything.
        #[test]
        fn a_lone_change_on_an_idle_loop_goes_at_once(idle_ms in 200u64..100_000, n in 1usize..6) {
            let t0 = Instant::now();
            let mut h = Hold::new(Duration::from_millis(200), Duration::from_secs(15), SEC, t0);
            let t = t0 + Duration::from_millis(idle_ms);
            prop_assert!(h.idle() && h.leading_edge(t));
            h.event(t);
            h.sync_starts();
            let names: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut gs = groups(&names);
            let planned = h.order(&mut gs, t);
            prop_assert_eq!(h.sending(&planned, &gs, two_per_request(), Sending::All, t), n);
            prop_assert!(h.held_since().is_none());
        }
    }
}
