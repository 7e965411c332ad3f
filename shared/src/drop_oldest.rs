//! A bounded queue that never blocks its senders: when it is full, the
//! oldest item makes room for the new one, and the receiver learns how many
//! were lost. It holds only what waits in it.
//!
//! Why not tokio's `broadcast` channel (its one-receiver form has the same
//! drop-oldest behaviour, and was used for the Events queue): it allocates
//! and initialises every slot up front. The Events queue's 8,192 slots of
//! ~370 bytes were 3 MiB of every operator's idle memory (heaptrack, 29
//! Nov), about 60 % of its heap, for a queue that is empty nearly always.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// Capacity kept, at least, once a burst has drained.
const KEEP: usize = 16;

struct State<T> {
    items: VecDeque<T>,
    /// Dropped since the receiver last took an item.
    dropped: u64,
    senders: usize,
    /// The receiver is gone: nothing will take what is sent.
    closed: bool,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    ready: Notify,
    capacity: usize,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // The lock guards no invariant a panic could break half-way.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The receiver is gone: what is sent would never be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the queue's receiver is gone")]
pub struct Closed;

/// The sending end; cheap to clone.
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// The receiving end.
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

/// A queue of at most `capacity` items (at least one).
pub fn queue<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State { items: VecDeque::new(), dropped: 0, senders: 1, closed: false }),
        ready: Notify::new(),
        capacity: capacity.max(1),
    });
    (Sender { shared: Arc::clone(&shared) }, Receiver { shared })
}

impl<T> Sender<T> {
    /// Queues `item`, dropping the oldest one when the queue is full;
    /// [`Closed`] (and `item` dropped) when the receiver is gone.
    pub fn send(&self, item: T) -> Result<(), Closed> {
        {
            let mut s = self.shared.lock();
            if s.closed {
                return Err(Closed);
            }
            if s.items.len() >= self.shared.capacity {
                s.items.pop_front();
                s.dropped += 1;
            }
            s.items.push_back(item);
        }
        self.shared.ready.notify_one();
        Ok(())
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        Self { shared: Arc::clone(&self.shared) }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.shared.lock().senders -= 1;
        self.shared.ready.notify_one();
    }
}

impl<T> Receiver<T> {
    /// The oldest item still queued, and how many older ones were dropped
    /// since the last; `None` once the queue is empty and every sender gone.
    pub async fn next(&mut self) -> Option<(T, u64)> {
        loop {
            {
                let mut s = self.shared.lock();
                if let Some(item) = s.items.pop_front() {
                    let dropped = std::mem::take(&mut s.dropped);
                    // Give a burst's memory back once it has drained.
                    let cap = s.items.capacity();
                    if cap > KEEP && s.items.len() < cap / 4 {
                        s.items.shrink_to((cap / 2).max(KEEP));
                    }
                    return Some((item, dropped));
                }
                if s.senders == 0 {
                    return None;
                }
            }
            // A notification sent in between is kept as a permit: not lost.
            self.shared.ready.notified().await;
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        s.closed = true;
        // What waits would never be taken.
        s.items = VecDeque::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn drain<T>(rx: &mut Receiver<T>) -> (Vec<T>, u64) {
        let (mut got, mut dropped) = (Vec::new(), 0);
        while let Some((v, d)) = rx.next().await {
            got.push(v);
            dropped += d;
        }
        (got, dropped)
    }

    #[tokio::test]
    async fn a_full_queue_drops_the_oldest_and_says_how_many() {
        let (tx, mut rx) = queue::<u32>(4);
        for i in 0..10 {
            tx.send(i).unwrap();
        }
        drop(tx);
        assert_eq!(drain(&mut rx).await, (vec![6, 7, 8, 9], 6), "the newest are kept");
    }

    #[tokio::test]
    async fn it_ends_when_every_sender_is_gone_not_before() {
        let (tx, mut rx) = queue::<u32>(8);
        let tx2 = tx.clone();
        drop(tx);
        tx2.send(1).unwrap();
        let waiting = tokio::spawn(async move { drain(&mut rx).await });
        tokio::task::yield_now().await;
        tx2.send(2).unwrap();
        drop(tx2);
        assert_eq!(waiting.await.unwrap(), (vec![1, 2], 0));
    }

    #[tokio::test]
    async fn a_waiting_receiver_wakes_for_each_item() {
        let (tx, mut rx) = queue::<u32>(8);
        let got = tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..3 {
                got.push(rx.next().await.unwrap().0);
            }
            got
        });
        for i in 0..3 {
            tokio::task::yield_now().await;
            tx.send(i).unwrap();
        }
        assert_eq!(got.await.unwrap(), [0, 1, 2]);
    }

    /// What the change was for: an empty queue holds (nearly) nothing, and
    /// a drained burst gives most of its memory back.
    #[tokio::test]
    async fn it_holds_only_what_waits() {
        let (tx, mut rx) = queue::<[u8; 256]>(8192);
        assert_eq!(rx.shared.lock().items.capacity(), 0, "nothing allocated up front");
        for _ in 0..8192 {
            tx.send([0; 256]).unwrap();
        }
        for _ in 0..8192 {
            rx.next().await.unwrap();
        }
        assert!(rx.shared.lock().items.capacity() <= 64, "{}", rx.shared.lock().items.capacity());
    }

    #[test]
    fn a_send_after_the_receiver_is_gone_says_closed() {
        let (tx, rx) = queue::<u32>(8);
        tx.send(1).unwrap();
        drop(rx);
        assert_eq!(tx.send(2), Err(Closed));
    }
}
