//! Waiting for INSYNC off the sync loop. Real Route53 takes tens of seconds
//! to propagate a change; the loop hands each accepted change to this task
//! and goes on at once. The task polls `GetChange` and publishes the
//! change's Events ("… (Route53 change C… INSYNC)") when it is in sync, or
//! says it was only submitted after `--insync-timeout`.
//!
//! Only the oldest pending change is polled: Route53 applies a zone's
//! changes in order, so when it is INSYNC the next ones usually are too
//! (one GetChange each), and while it is not, polling the others would only
//! spend the request budget the sync loop needs.

use std::collections::VecDeque;
use std::time::Duration;

use flotilla_shared::Events;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::report;
use crate::route53::{Route53, short_zone_id};

/// Pending changes kept at most; beyond, the oldest is reported as
/// submitted without waiting (a bound on memory while Route53 lags).
pub const MAX_PENDING: usize = 1000;
/// First poll of a change, and the longest wait between two polls.
const FIRST_POLL: Duration = Duration::from_millis(500);
const MAX_POLL: Duration = Duration::from_secs(10);

/// One Event to publish when the change is INSYNC.
#[derive(Debug, Clone)]
pub struct Note {
    pub resource: String,
    pub uid: Option<String>,
    pub reason: &'static str,
    pub text: String,
}

#[derive(Debug)]
struct Pending {
    change_id: String,
    notes: Vec<Note>,
    deadline: Instant,
    next_poll: Instant,
    wait: Duration,
}

/// The handle the sync loop sends accepted changes to.
#[derive(Clone)]
pub struct InsyncWatcher {
    tx: mpsc::UnboundedSender<(String, Vec<Note>)>,
}

impl InsyncWatcher {
    /// Starts the task; it ends when every handle is dropped.
    pub fn start(r53: Route53, timeout: Duration, events: Option<Events>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(r53, timeout, events, rx));
        Self { tx }
    }

    /// A change Route53 accepted, and what to say once it is INSYNC.
    pub fn watch(&self, change_id: String, notes: Vec<Note>) {
        if let Err(mpsc::error::SendError((id, notes))) = self.tx.send((change_id, notes)) {
            publish(None, &id, &notes, "submitted (not followed: shutting down)");
        }
    }
}

fn publish(events: Option<&Events>, change_id: &str, notes: &[Note], status: &str) {
    let id = short_zone_id(change_id);
    for n in notes {
        report::action(
            events,
            &n.resource,
            n.uid.clone(),
            n.reason,
            format!("{} (Route53 change {id} {status})", n.text),
        );
    }
}

async fn run(
    r53: Route53,
    timeout: Duration,
    events: Option<Events>,
    mut rx: mpsc::UnboundedReceiver<(String, Vec<Note>)>,
) {
    let mut queue: VecDeque<Pending> = VecDeque::new();
    loop {
        let next = queue.front().map(|p| p.next_poll);
        let received = match next {
            Some(at) => tokio::select! {
                got = rx.recv() => Some(got),
                _ = tokio::time::sleep_until(at) => None,
            },
            None => Some(rx.recv().await),
        };
        match received {
            Some(None) => break,
            Some(Some((change_id, notes))) => {
                let now = Instant::now();
                queue.push_back(Pending {
                    change_id,
                    notes,
                    deadline: now + timeout,
                    next_poll: now + FIRST_POLL,
                    wait: FIRST_POLL,
                });
                while queue.len() > MAX_PENDING {
                    if let Some(p) = queue.pop_front() {
                        publish(events.as_ref(), &p.change_id, &p.notes, "submitted (INSYNC not awaited)");
                    }
                }
                continue;
            }
            None => {}
        }
        // The head is due: poll it, and the ones after it while they are in sync.
        while let Some(head) = queue.front_mut() {
            if head.next_poll > Instant::now() {
                break;
            }
            let status = match r53.is_insync(&head.change_id).await {
                Ok(true) => Some("INSYNC".to_string()),
                Ok(false) if Instant::now() >= head.deadline => {
                    Some(format!("submitted, not INSYNC after {}", flotilla_shared::duration::format(timeout)))
                }
                Err(e) if Instant::now() >= head.deadline => Some(format!("submitted; GetChange failed: {}", e.code)),
                Ok(false) | Err(_) => None,
            };
            match status {
                Some(status) => {
                    if let Some(p) = queue.pop_front() {
                        publish(events.as_ref(), &p.change_id, &p.notes, &status);
                    }
                    // The next one was submitted later: probably in sync too.
                    if let Some(next) = queue.front_mut() {
                        next.next_poll = next.next_poll.min(Instant::now());
                    }
                }
                None => {
                    head.wait = (head.wait * 2).min(MAX_POLL);
                    head.next_poll = (Instant::now() + head.wait).min(head.deadline);
                    break;
                }
            }
        }
    }
    for p in queue {
        publish(events.as_ref(), &p.change_id, &p.notes, "submitted (not followed: shutting down)");
    }
}
