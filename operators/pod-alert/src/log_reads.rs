//! The log tails of a reconcile's new incidents: which reads are needed
//! (from the transitions and the incident book), the reads side by side,
//! with the log-source pod's last Warning Events ([`crate::events`], when
//! spec.logs.events), then the book changed and the transitions a log
//! pattern silences dropped.
//! Every tail here is already redacted ([`crate::redact`]): log patterns
//! judge, and the book holds, only what status and the sinks may show.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;

use crate::controller::{Data, State};
use crate::incident::{Change, Transition};
use crate::logs::{Identity, Run, Tail};
use crate::observe::Key;
use crate::pod::State as RunState;
use crate::redact::Redactor;
use crate::rules::Rules;

/// Which run of `container` in `pod` holds the crash, from the newest view:
/// whether it is the kubelet's `previous`, and when it ran.
fn crashed_run(data: &Data, ns: &str, pod: &str, container: &str, fallback: bool) -> (bool, Option<Run>) {
    let Some(view) = data.pods.get(&format!("{ns}/{pod}")) else { return (fallback, None) };
    let Some((_, c)) = view.named_containers().find(|(name, _)| &***name == container) else { return (fallback, None) };
    // A container seen in back-off may have restarted since: then the
    // crashed run is `previous` (the read checks the lines' times too).
    let state = c.state();
    let previous = state.crashed_run_is_previous();
    let term = match &*state {
        RunState::Terminated(t) => Some(t),
        _ => c.last_termination(),
    };
    let run = term.and_then(|t| t.finished_at.get().map(|finished| Run { started: t.started_at.get(), finished }));
    (previous, run)
}

/// How long a failed or empty log read waits before it is made again.
const LOG_READ_RETRY: Duration = Duration::from_secs(2);

/// Whether a read of a tail, `attempt` (0: the first) having given
/// `outcome`, is made again, and after how long: once, whatever failed. A
/// run the kubelet's container GC removed stays gone (it keeps one dead
/// container per container and counts one created but not yet started as
/// dead: a GC pass in a restart's create-to-start window removes the
/// crashed run, seen in CI); a node that does not answer would hold the
/// reconcile for another read timeout.
fn read_again(attempt: u32, outcome: &Result<String, String>) -> Option<Duration> {
    match (outcome, attempt) {
        (Ok(text), _) if !text.is_empty() => None,
        // A run may print nothing: empty twice is its tail.
        (_, 0) => Some(LOG_READ_RETRY),
        _ => None,
    }
}

/// Log reads one reconcile waits on side by side. A PodAlert over the whole
/// cluster opens many incidents at once (after a start, on a bad rollout),
/// and a failed read waits [`LOG_READ_RETRY`] or up to the read timeout:
/// one after the other, 20 incidents on unreachable nodes held the
/// PodAlert's status for minutes (`cargo xtask bench scale`). Memory stays bounded by
/// the reads in flight across all PodAlerts (`logs::READS_IN_FLIGHT`).
const LOG_READS_AT_ONCE: usize = 16;

/// A log tail a transition needs read (or shared from another PodAlert's read).
struct TailRead {
    key: Key,
    id: Identity,
    namespace: String,
    container: String,
    /// The incident's log source first, then one other pod of it.
    pods: Vec<String>,
    /// The crashed run is `previous`, as the evaluation saw it.
    previous: bool,
}

/// Reads the log tail of each newly opened or escalated incident, or shares
/// the one another PodAlert read for the same incident key; drops the
/// transitions a log pattern silences. The reads run side by side
/// ([`LOG_READS_AT_ONCE`]); the book is changed only once they are done.
pub(crate) async fn read_logs(
    ns: &str,
    rules: &Rules,
    transitions: Vec<Transition>,
    st: &mut State,
    data: &Data,
    now: Timestamp,
) -> Vec<Transition> {
    let (lines, bytes) = (rules.tail_lines, rules.max_bytes);
    let reads: Vec<Option<TailRead>> = transitions
        .iter()
        .map(|t| {
            if !matches!(t.change, Change::Opened { .. } | Change::Escalated { .. }) {
                return None;
            }
            let inc = st.book.incidents.get(&t.key)?;
            let src = inc.log_source.as_ref()?;
            let container = src.container.as_ref().unwrap_or(&inc.key.container);
            if container.is_empty() || src.pod.is_empty() {
                return None;
            }
            // The kubelet may have dropped a run's log file (it keeps one
            // dead container per container): then another pod of the
            // incident, at most two pods.
            let mut pods = vec![src.pod.clone()];
            pods.extend(inc.pods.iter().filter(|p| **p != src.pod).take(1).cloned());
            Some(TailRead {
                key: t.key.clone(),
                id: Identity { pod: src.pod.clone(), incarnation: src.incarnation.clone().unwrap_or_default() },
                namespace: if inc.key.namespace.is_empty() { ns.to_string() } else { inc.key.namespace.clone() },
                container: container.clone(),
                pods,
                previous: src.previous,
            })
        })
        .collect();
    let redactor = &rules.redactor;
    let events = rules.events;
    let tails: Vec<Option<(Arc<Tail>, String)>> = futures::stream::iter(reads)
        .map(|read| async move {
            match read {
                Some(read) => {
                    let (tail, text) = read_tail(data, &read, redactor, lines, bytes, now).await;
                    if events {
                        read_events(data, &read, &tail, redactor).await;
                    }
                    Some((tail, text))
                }
                None => None,
            }
        })
        .buffered(LOG_READS_AT_ONCE)
        .collect()
        .await;

    let mut kept = Vec::with_capacity(transitions.len());
    for (t, tail) in transitions.into_iter().zip(tails) {
        if !matches!(t.change, Change::Opened { .. } | Change::Escalated { .. }) {
            kept.push(t);
            continue;
        }
        let Some(inc) = st.book.incidents.get_mut(&t.key) else { continue };
        let judged = match tail {
            Some((tail, text)) => {
                inc.logs = Some(tail);
                text
            }
            None => inc.log_text(lines, bytes),
        };
        if let Some(pattern) = rules.suppressing_pattern(&judged) {
            tracing::info!(incident = %t.key, pattern, "held back: the log matches ignore.logPatterns");
            st.book.silence(&t.key);
            continue;
        }
        kept.push(t);
    }
    kept
}

/// One incident's tail: shared when another PodAlert that redacts the same
/// way read it for this run (one read at a time per incident key), else read
/// (redacted by [`crate::logs::read`]) and stored. The whole tail is
/// returned to be judged (ignore.logPatterns), redacted as it is in either
/// case; what is held is what the namespace's share leaves room for.
async fn read_tail(
    data: &Data,
    read: &TailRead,
    redactor: &Redactor,
    lines: u32,
    bytes: usize,
    now: Timestamp,
) -> (Arc<Tail>, String) {
    let gate = data.tails.gate(&read.key);
    let _reading = gate.lock().await;
    let profile = redactor.profile();
    if let Some(tail) = data.tails.reusable(&read.key, profile, &read.id, lines, bytes, now) {
        let text = tail.view(lines, bytes);
        return (tail, text);
    }
    // When this read begins (after the gate): a PodAlert that evaluated
    // before it reuses it ([`crate::logs::Tails::reusable`]).
    let began = Timestamp::now();
    let mut logs = Ok(String::new());
    'pods: for p in &read.pods {
        let mut attempt = 0;
        loop {
            let (previous, run) = crashed_run(data, &read.namespace, p, &read.container, read.previous);
            logs = crate::logs::read(
                &data.ctx.client,
                &read.namespace,
                p,
                &read.container,
                previous,
                run,
                lines,
                bytes,
                redactor,
            )
            .await;
            if logs.as_ref().is_ok_and(|text| !text.is_empty()) {
                break 'pods;
            }
            // While a run is being replaced the kubelet can answer "unable
            // to retrieve container logs", or nothing of the crashed run (an
            // empty tail): again, a moment later, as the newest view then
            // tells it.
            let Some(wait) = read_again(attempt, &logs) else {
                if logs.is_ok() {
                    break 'pods;
                }
                break;
            };
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }
    let result = if logs.is_ok() { "success" } else { "unavailable" };
    data.metrics.log_reads.with_label_values(&[result]).inc();
    if let Err(e) = &logs {
        tracing::warn!(incident = %read.key, pod = %read.id.pod, error = %e, "could not read the log tail");
    }
    let text = logs.unwrap_or_else(|e| e);
    let tail = data.tails.store(&read.key, profile, read.id.clone(), lines, bytes, text.clone(), began.max(now));
    (tail, text)
}

/// The log-source pod's last Warning Events, read once per tail read (one
/// PodAlert at a time per incident key: the gate) and held with the tail;
/// a tail shared from a PodAlert that does not show them gets them now.
async fn read_events(data: &Data, read: &TailRead, tail: &Tail, redactor: &Redactor) {
    let gate = data.tails.gate(&read.key);
    let _reading = gate.lock().await;
    if tail.events().is_some() {
        return;
    }
    let lines = crate::events::read(&data.ctx.client, &read.namespace, &read.id.pod, redactor).await;
    tail.set_events(lines);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_is_read_again_once_when_empty_or_failed() {
        let ok = |t: &str| Ok::<_, String>(t.to_string());
        let err = |t: &str| Err::<String, _>(t.to_string());
        assert_eq!(read_again(0, &ok("line\n")), None);
        assert_eq!(read_again(0, &ok("")), Some(LOG_READ_RETRY));
        assert_eq!(read_again(1, &ok("")), None, "a run that printed nothing");
        let lost = "logs unavailable: unable to retrieve container logs for containerd://d18da";
        assert_eq!(read_again(0, &err(lost)), Some(LOG_READ_RETRY));
        assert_eq!(read_again(1, &err(lost)), None, "two reads at most");
    }
}
