//! A debounce with a maximum delay, in front of kube-runtime's scheduler.
//!
//! kube-runtime's own debounce (`Config::debounce`) restarts on every
//! request for an object that waits: a stream of triggers faster than the
//! debounce postpones its reconcile for as long as the stream goes on. On a
//! shared cluster that is a lever for one tenant over another — relabelling
//! one pod every 300 ms kept a cluster-wide PodAlert from ever reconciling,
//! and patching a copy every 150 ms kept another namespace's CopyRule from
//! delivering a rotated Secret.
//!
//! [`Debounce`] keeps the useful half (a burst becomes one reconcile, after
//! `quiet` without a new trigger) and bounds the other: an object is let out
//! at most `max_delay` after its first pending trigger, whatever follows
//! (CONVENTIONS.md: 2 s). The scheduler behind it then runs with no
//! debounce of its own, so what this stage lets out is due at once.
//! Watch errors pass straight through (the controller reports them).

use std::collections::HashMap;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use futures::stream::{Fuse, StreamExt};
use tokio::time::Instant;
use tokio_util::time::{DelayQueue, delay_queue};

/// The bound CONVENTIONS.md sets: no stream of triggers postpones a
/// reconcile more than this past its first pending trigger.
pub const MAX_TRIGGER_DELAY: Duration = Duration::from_secs(2);

/// A request the stage can key: one pending entry per key.
pub trait Keyed {
    type Key: Clone + Eq + Hash + Unpin;
    fn key(&self) -> Self::Key;
}

impl<K: kube::Resource> Keyed for kube::runtime::controller::ReconcileRequest<K>
where
    K::DynamicType: Clone + Eq + Hash + Unpin,
{
    type Key = kube::runtime::reflector::ObjectRef<K>;
    fn key(&self) -> Self::Key {
        self.obj_ref.clone()
    }
}

/// See the module docs. Made by [`debounce`].
pub struct Debounce<S, T: Keyed> {
    inner: Fuse<S>,
    quiet: Duration,
    max_delay: Duration,
    due: DelayQueue<T::Key>,
    pending: HashMap<T::Key, Pending<T>>,
}

struct Pending<T> {
    slot: delay_queue::Key,
    /// The first trigger of this burst: the entry is due by `first + max_delay`.
    first: Instant,
    /// The first request of the burst (its reason is what the reconcile is told).
    request: T,
}

/// Lets each key's requests out once per burst: `quiet` after the last of
/// them, but never later than `max_delay` after the first. A `quiet` of
/// zero passes every request through as it comes. `max_delay` below
/// `quiet` wins: the burst then ends at `max_delay`.
pub fn debounce<S, T, E>(inner: S, quiet: Duration, max_delay: Duration) -> Debounce<S, T>
where
    S: Stream<Item = Result<T, E>>,
    T: Keyed,
{
    Debounce { inner: inner.fuse(), quiet, max_delay, due: DelayQueue::new(), pending: HashMap::new() }
}

impl<S, T: Keyed> Debounce<S, T> {
    /// Objects waiting in this stage.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    fn add(&mut self, request: T, now: Instant) {
        let key = request.key();
        match self.pending.get_mut(&key) {
            Some(p) => {
                let at = (now + self.quiet).min(p.first + self.max_delay);
                self.due.reset_at(&p.slot, at);
            }
            None => {
                let at = now + self.quiet.min(self.max_delay);
                let slot = self.due.insert_at(key.clone(), at);
                self.pending.insert(key, Pending { slot, first: now, request });
            }
        }
    }
}

impl<S, T, E> Stream for Debounce<S, T>
where
    S: Stream<Item = Result<T, E>> + Unpin,
    T: Keyed + Unpin,
{
    type Item = Result<T, E>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        // Take in everything the triggers have ready.
        loop {
            match this.inner.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(request))) if this.quiet.is_zero() => return Poll::Ready(Some(Ok(request))),
                Poll::Ready(Some(Ok(request))) => this.add(request, Instant::now()),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) | Poll::Pending => break,
            }
        }
        if this.inner.is_done() {
            // The triggers ended: what waits is let out now, then the end.
            let Some(key) = this.pending.keys().next().cloned() else {
                return Poll::Ready(None);
            };
            if let Some(p) = this.pending.remove(&key) {
                this.due.remove(&p.slot);
                return Poll::Ready(Some(Ok(p.request)));
            }
        }
        match this.due.poll_expired(cx) {
            Poll::Ready(Some(expired)) => match this.pending.remove(expired.get_ref()) {
                Some(p) => Poll::Ready(Some(Ok(p.request))),
                // Not possible (every slot has its entry); wait for the next.
                None => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            },
            // Nothing waits (`None`) or nothing is due yet.
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    #[derive(Debug, Clone, PartialEq)]
    struct Req(&'static str, u32);
    impl Keyed for Req {
        type Key = &'static str;
        fn key(&self) -> &'static str {
            self.0
        }
    }

    /// Drives `triggers` (each `(at_ms, key)`) through a debounce and
    /// returns what came out, with the time in ms (the clock is tokio's
    /// paused one: exact, and no test waits for real).
    async fn drive(triggers: Vec<(u64, &'static str)>, quiet_ms: u64, max_ms: u64) -> Vec<(u64, Req)> {
        let start = Instant::now();
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Req, Infallible>>();
        let feeder = tokio::spawn(async move {
            for (i, (at, key)) in triggers.into_iter().enumerate() {
                tokio::time::sleep_until(start + Duration::from_millis(at)).await;
                let _ = tx.unbounded_send(Ok(Req(key, u32::try_from(i).unwrap_or(u32::MAX))));
            }
            // The triggers end much later (watches do not end).
            tokio::time::sleep_until(start + Duration::from_secs(60)).await;
        });
        let out: Vec<(u64, Req)> = debounce(rx, Duration::from_millis(quiet_ms), Duration::from_millis(max_ms))
            .map(|r| {
                let Ok(r) = r;
                (u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX), r)
            })
            .collect()
            .await;
        let _ = feeder.await;
        out
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_one_request_after_the_quiet_time() {
        let out = drive(vec![(0, "a"), (100, "a"), (200, "a")], 500, 2000).await;
        assert_eq!(out, vec![(700, Req("a", 0))], "one request, 500 ms after the last, with the first's reason");
    }

    /// The attack: a trigger every 300 ms for 10 s against a 500 ms quiet
    /// time. kube-runtime's debounce lets nothing out until the stream ends
    /// (10.5 s); with the bound the object comes out every 2 s.
    #[tokio::test(start_paused = true)]
    async fn a_stream_of_triggers_never_postpones_an_object_past_the_max_delay() {
        let stream: Vec<(u64, &str)> = (0..34).map(|i| (i * 300, "a")).collect();
        let out = drive(stream, 500, 2000).await;
        let times: Vec<u64> = out.iter().map(|(t, _)| *t).collect();
        assert_eq!(times.first(), Some(&2000), "first let out at the max delay: {times:?}");
        // Every later burst starts at the first trigger after a let-out and
        // ends at most 2 s later.
        for pair in times.windows(2) {
            assert!(pair[1] - pair[0] <= 2300, "a gap over 2 s plus one trigger period: {times:?}");
        }
        assert_eq!(*times.last().unwrap_or(&0), 9900 + 500, "the stream's end is let out after the quiet time");
    }

    #[tokio::test(start_paused = true)]
    async fn keys_are_debounced_apart() {
        // b's stream does not hold a back; a's single trigger goes after its quiet time.
        let mut triggers: Vec<(u64, &str)> = (0..10).map(|i| (i * 100, "b")).collect();
        triggers.push((50, "a"));
        triggers.sort_by_key(|t| t.0);
        let out = drive(triggers, 300, 2000).await;
        let a: Vec<u64> = out.iter().filter(|(_, r)| r.0 == "a").map(|(t, _)| *t).collect();
        let b: Vec<u64> = out.iter().filter(|(_, r)| r.0 == "b").map(|(t, _)| *t).collect();
        assert_eq!(a, vec![350]);
        assert_eq!(b, vec![1200]);
    }

    #[tokio::test(start_paused = true)]
    async fn no_quiet_time_passes_every_request_through() {
        let out = drive(vec![(0, "a"), (10, "a")], 0, 2000).await;
        assert_eq!(out, vec![(0, Req("a", 0)), (10, Req("a", 1))]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_max_delay_below_the_quiet_time_wins() {
        let out = drive(vec![(0, "a")], 5000, 2000).await;
        assert_eq!(out, vec![(2000, Req("a", 0))]);
    }

    #[tokio::test(start_paused = true)]
    async fn errors_pass_straight_through() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Req, &'static str>>();
        tx.unbounded_send(Ok(Req("a", 0))).ok();
        tx.unbounded_send(Err("watch failed")).ok();
        drop(tx);
        let out: Vec<_> = debounce(rx, Duration::from_millis(500), Duration::from_secs(2)).collect().await;
        assert_eq!(out, vec![Err("watch failed"), Ok(Req("a", 0))]);
    }
}
