//! Log tails: read from the kubelet through the API, and held once.
//!
//! **Reading** ([`read`]): the failing container's tail — the crashed run's
//! — capped by lines and bytes (the end is kept), or "logs unavailable:
//! <reason>". The lines are asked for with their timestamps: which run is
//! the crashed one is decided from a cached pod view, and the kubelet may
//! start the next run between that view and the read (a back-off ending).
//! Lines stamped after the crashed run ended belong to a later run: the
//! crashed run is then the kubelet's `previous`, read instead ([`judge`]).
//! A read can hold an older run's lines in one case only (the crashed run
//! printed nothing and `previous` is checked for it): only there are lines
//! stamped before the run started dropped.
//!
//! **Holding** ([`Tails`]): one tail per incident key, shared by every
//! PodAlert whose incident has that key (40 PodAlerts over one crash loop
//! hold it once), within an operator-wide budget (`--max-log-bytes`) of
//! which each namespace holding tails gets a fair share: a namespace may
//! fill what others leave unused, and gives it back (its largest tails are
//! left out) when another namespace needs its share. A tail left out says
//! so; notifications and status carry that note instead. A tail is held
//! as its PodAlert's [`Redactor`] left it, and shared only between
//! PodAlerts that redact the same way.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::LogParams;

use crate::redact::Redactor;

mod tails;
pub use tails::{EVICTED, Identity, LEFT_OUT, Tail, Tails};

/// A log read never holds a reconcile longer than this.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes read at most per tail (1,000 lines of 4 KiB).
const READ_LIMIT: i64 = 4 << 20;
/// Log reads in flight, all PodAlerts together: each holds up to
/// [`READ_LIMIT`] bytes while it is judged and cut.
const READS_IN_FLIGHT: usize = 2;
/// Runtime timestamps are to the nanosecond, a run's `finishedAt` to the
/// second (cut, not rounded): a line stamped within this after it is still
/// the run's.
const END_SLACK: Duration = Duration::from_secs(1);
/// A run's first lines may be stamped before its `startedAt`: containerd
/// records the start once the runtime's start call has returned, after the
/// process began, and a run that prints and exits at once (a crash loop's)
/// has its lines stamped first; the API then cuts `startedAt` to the second.
/// Judged against the cut start with no slack, such a run's only line was
/// dropped whenever the two fell in different seconds (an empty tail, seen
/// in CI).
const START_SLACK: Duration = Duration::from_secs(1);

/// What the kubelet answers, with status 200, when a run's log file is gone.
const KUBELET_FAILURES: [&str; 2] = ["unable to retrieve container logs", "failed to try resolving symlinks"];

/// Cuts `text` to its last `max_bytes` bytes (on a character boundary,
/// starting at a line when one begins within the kept part).
pub fn cap(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let mut start = text.len() - max_bytes;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let kept = &text[start..];
    match kept.find('\n') {
        Some(nl) if nl + 1 < kept.len() => kept[nl + 1..].to_string(),
        _ => kept.to_string(),
    }
}

/// The last `lines` lines of `text`, then at most `max_bytes` of them.
pub fn last_lines(text: &str, lines: u32, max_bytes: usize) -> String {
    if lines == 0 || max_bytes == 0 {
        return String::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    let start = body.rmatch_indices('\n').nth(lines as usize - 1).map_or(0, |(i, _)| i + 1);
    cap(&text[start..], max_bytes)
}

/// The bytes `c` takes in a JSON string.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// The end of `text` that takes at most `max` bytes once escaped in JSON
/// (a log of quotes doubles, of control characters grows sixfold).
pub fn cap_escaped(text: &str, max: usize) -> String {
    let mut used = 0;
    let mut start = text.len();
    for (i, c) in text.char_indices().rev() {
        used += escaped_len(c);
        if used > max {
            break;
        }
        start = i;
    }
    text[start..].to_string()
}

/// The crashed run whose log an incident wants: when it started and ended
/// (seconds, as the API gives them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub started: Option<Timestamp>,
    pub finished: Timestamp,
}

impl Run {
    /// For a read that cannot be of a run older than this one (the
    /// kubelet's current and previous runs are never older than the view's):
    /// no line is dropped for being early.
    fn ending_only(self) -> Run {
        Run { started: None, ..self }
    }
}

/// Where a timestamped read's lines fall against the crashed run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The run's own lines (possibly none), timestamps removed.
    Fits(String),
    /// Some lines come from a run that started after it ended: the read
    /// was of a later run.
    Later,
}

/// Judges a read made with `timestamps=true` against `run` (None: no run to
/// check, every line kept). Lines stamped before the run started, less
/// [`START_SLACK`] (an older run's), are dropped; lines after it ended make
/// the read [`Verdict::Later`].
pub fn judge(stamped: &str, run: Option<Run>) -> Verdict {
    let mut out = String::with_capacity(stamped.len());
    for line in stamped.split_inclusive('\n') {
        let (stamp, text) = line.split_once(' ').unwrap_or((line.trim_end(), "\n"));
        let at = stamp.parse::<Timestamp>().ok();
        if let (Some(run), Some(at)) = (run, at) {
            if at >= crate::pod::after(run.finished, END_SLACK) {
                return Verdict::Later;
            }
            if run.started.is_some_and(|s| at < crate::pod::before(s, START_SLACK)) {
                continue;
            }
        }
        // A line without a parseable stamp (a continuation) is kept as is.
        out.push_str(if at.is_some() { text } else { line });
    }
    Verdict::Fits(out)
}

static READS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(READS_IN_FLIGHT);

/// Runs `read` (a read for an incident: its log or its pod's Events) within
/// the bound on reads in flight and the read timeout; Err says why it did
/// not finish, as "logs unavailable: …" reads say it.
pub(crate) async fn within_read_bound<T>(read: impl std::future::Future<Output = T>) -> Result<T, String> {
    let _permit = READS.acquire().await.map_err(|_| "the operator is stopping".to_string())?;
    tokio::time::timeout(READ_TIMEOUT, read).await.map_err(|_| format!("no answer within {}s", READ_TIMEOUT.as_secs()))
}

/// One timestamped read; `Ok(None)`: the run's log is gone.
async fn read_once(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    container: &str,
    previous: bool,
    lines: u32,
) -> Result<String, String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = LogParams {
        container: (!container.is_empty()).then(|| container.to_string()),
        previous,
        timestamps: true,
        tail_lines: Some(i64::from(lines)),
        // limitBytes cuts the *end* of the tail, the lines that matter: it
        // is only a guard against huge lines; `cap` keeps the end.
        limit_bytes: Some(READ_LIMIT),
        ..LogParams::default()
    };
    let _permit = READS.acquire().await.map_err(|_| "logs unavailable: the operator is stopping".to_string())?;
    match tokio::time::timeout(READ_TIMEOUT, api.logs(pod, &params)).await {
        // The kubelet answers 200 with this when the run's log is gone
        // (it keeps one dead container per container).
        Ok(Ok(text)) if KUBELET_FAILURES.iter().any(|f| text.starts_with(f)) => {
            Err(format!("logs unavailable: {}", text.trim()))
        }
        Ok(Ok(text)) => Ok(text),
        Ok(Err(kube::Error::Api(s))) => Err(format!("logs unavailable: {}", s.message)),
        Ok(Err(e)) => Err(format!("logs unavailable: {e}")),
        Err(_) => Err(format!("logs unavailable: no answer within {}s", READ_TIMEOUT.as_secs())),
    }
}

/// Reads the tail of `container`'s crashed `run` in `pod`: the current run's
/// log, or `previous`'s when `previous` says the crashed run is no longer
/// the newest. A read that turns out to be of a later run (the kubelet
/// started one since the pod view) is made again of `previous`; a read of
/// the current run with none of the crashed run's lines is checked against
/// `previous` too, in case a later run has just not printed yet.
///
/// What is returned is redacted by `redactor`: the raw text lives only
/// within this call. The lines that hold the last `max_bytes` are redacted
/// whole before the text is cut to them, so a secret on the first line kept
/// is still found by what precedes it on its line (`password=`, `Bearer `).
#[allow(clippy::too_many_arguments)]
pub async fn read(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    container: &str,
    previous: bool,
    run: Option<Run>,
    lines: u32,
    max_bytes: usize,
    redactor: &Redactor,
) -> Result<String, String> {
    if lines == 0 || max_bytes == 0 {
        return Ok(String::new());
    }
    match read_raw(client, namespace, pod, container, previous, run, lines).await {
        Ok(text) => Ok(cap(&redactor.redact(line_window(&text, max_bytes)), max_bytes)),
        // The API's own words; redacted all the same, they are shown too.
        Err(e) => Err(redactor.redact(&e).into_owned()),
    }
}

/// The end of `text` from the start of the line that holds its last
/// `max_bytes` bytes.
fn line_window(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let cut = text.len() - max_bytes;
    // '\n' is never inside a UTF-8 sequence: the start is a boundary.
    let start = text.as_bytes()[..cut].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    &text[start..]
}

/// [`read`] before redaction and the cut to `max_bytes`.
async fn read_raw(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    container: &str,
    previous: bool,
    run: Option<Run>,
    lines: u32,
) -> Result<String, String> {
    let first = read_once(client, namespace, pod, container, previous, lines).await;
    let verdict = match &first {
        Ok(text) => judge(text, run.map(Run::ending_only)),
        Err(_) if previous || run.is_none() => return first,
        // The newest run's log is unreadable; the crashed run may be `previous`.
        Err(_) => Verdict::Later,
    };
    let text = match verdict {
        Verdict::Fits(text) if previous || run.is_none() || !text.is_empty() => text,
        // Nothing of the crashed run in the newest run's log: a later run
        // has started (printed or not yet), or the crashed run printed
        // nothing; then `previous` is an older run, whose lines are dropped.
        Verdict::Fits(empty) => match read_once(client, namespace, pod, container, true, lines).await {
            Ok(older) => match judge(&older, run) {
                Verdict::Fits(text) if !text.is_empty() => text,
                _ => empty,
            },
            Err(_) => empty,
        },
        Verdict::Later if previous => {
            // `previous` is a run that ended after the crashed one: a newer
            // crash of the same container, whose log is as good.
            match first {
                Ok(text) => strip_stamps(&text),
                Err(e) => return Err(e),
            }
        }
        Verdict::Later => {
            tracing::info!(pod, container, "the log read was of a later run; reading the crashed run's (previous)");
            let older = read_once(client, namespace, pod, container, true, lines).await?;
            match judge(&older, run.map(Run::ending_only)) {
                Verdict::Fits(text) => text,
                Verdict::Later => strip_stamps(&older),
            }
        }
    };
    Ok(text)
}

fn strip_stamps(stamped: &str) -> String {
    match judge(stamped, None) {
        Verdict::Fits(t) => t,
        Verdict::Later => String::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::crd::Reason;
    use crate::observe::Key;
    use crate::pod::Workload;
    use std::sync::Arc;

    fn key(ns: &str, w: &str) -> Key {
        Key {
            namespace: ns.into(),
            workload: Workload { kind: "Deployment".into(), name: w.into() },
            container: "app".into(),
            reason: Reason::CrashLoopBackOff,
        }
    }

    fn id(pod: &str) -> Identity {
        Identity { pod: pod.into(), incarnation: format!("containerd://{pod}") }
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    /// The default redaction's profile.
    fn p() -> Arc<str> {
        Arc::clone(Redactor::defaults().unwrap().profile())
    }

    #[test]
    fn cap_keeps_the_end_from_a_line_start() {
        assert_eq!(cap("a\nb\nc\n", 100), "a\nb\nc\n");
        let text = "first line\nsecond line\nthird line\n";
        assert_eq!(cap(text, 16), "third line\n");
        let s = "é".repeat(10);
        let c = cap(&s, 5);
        assert!(c.len() <= 5 && c.chars().all(|ch| ch == 'é'));
    }

    #[test]
    fn last_lines_and_escaped_caps() {
        assert_eq!(last_lines("a\nb\nc\n", 2, 100), "b\nc\n");
        assert_eq!(last_lines("a\nb\nc", 2, 100), "b\nc");
        assert_eq!(last_lines("a\nb\nc\n", 10, 100), "a\nb\nc\n");
        assert_eq!(last_lines("a\nb\nc\n", 0, 100), "");
        let quotes = "\"".repeat(10_000);
        let c = cap_escaped(&quotes, 4096);
        assert_eq!(serde_json::to_string(&c).unwrap().len() - 2, 4096);
        let nul = "\u{0}".repeat(10_000);
        assert!(serde_json::to_string(&cap_escaped(&nul, 4096)).unwrap().len() - 2 <= 4096);
        assert_eq!(cap_escaped("short", 4096), "short");
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_read_of_a_later_run_is_told_apart_by_its_timestamps() {
        let run = Some(Run { started: Some(at("2026-01-01T00:00:05Z")), finished: at("2026-01-01T00:00:09Z") });
        // The crashed run's own lines, the last within the second its end is cut to.
        let own = "2026-01-01T00:00:05.100000000Z starting\n2026-01-01T00:00:09.900000000Z panic: boom\n";
        assert_eq!(judge(own, run), Verdict::Fits("starting\npanic: boom\n".into()));
        // The next run's lines (the back-off ended between the view and the read).
        let later = "2026-01-01T00:00:20.000000000Z later-run-line\n";
        assert_eq!(judge(later, run), Verdict::Later);
        // An older run's lines (previous, while the crashed run is the newest) are not its.
        let older = "2026-01-01T00:00:03.900000000Z older\n";
        assert_eq!(judge(older, run), Verdict::Fits(String::new()));
        // Its first line stamped before its startedAt (recorded once the
        // runtime's start returned, then cut to the second): still its own.
        let early = "2026-01-01T00:00:04.990000000Z crashed-run-2\n";
        assert_eq!(judge(early, run), Verdict::Fits("crashed-run-2\n".into()));
        // Where no older run can be read, nothing is early.
        assert_eq!(judge(older, run.map(Run::ending_only)), Verdict::Fits("older\n".into()));
        // Without a run to check, every line is kept, stamps removed.
        assert_eq!(judge(later, None), Verdict::Fits("later-run-line\n".into()));
        assert_eq!(judge("", run), Verdict::Fits(String::new()));
    }

    #[test]
    fn one_tail_per_key_whatever_the_podalerts() {
        let tails = Tails::new(1 << 20);
        let k = key("a", "web");
        assert!(tails.reusable(&k, &p(), &id("p"), 50, 8192, now()).is_none());
        let held: Vec<Arc<Tail>> = (0..40)
            .map(|_| match tails.reusable(&k, &p(), &id("p"), 50, 8192, now()) {
                Some(t) => t,
                None => tails.store(&k, &p(), id("p"), 50, 8192, "x".repeat(8000), now()),
            })
            .collect();
        assert_eq!(tails.held(), 8000, "40 PodAlerts hold one tail");
        assert!(held.iter().all(|t| Arc::ptr_eq(t, &held[0])));
        // A PodAlert wanting more lines reads again; every sharer sees the new read.
        assert!(tails.reusable(&k, &p(), &id("p"), 100, 8192, now()).is_none());
        tails.store(&k, &p(), id("p"), 100, 8192, "y".repeat(9000), now());
        assert_eq!(tails.held(), 9000);
        assert_eq!(held[5].text().len(), 9000);
        assert_eq!(held[5].view(100, 100).len(), 100, "each PodAlert sees its own maxBytes");
        // Another crash (incarnation): not the same read.
        assert!(tails.reusable(&k, &p(), &id("q"), 50, 8192, now()).is_none());
        drop(held);
        tails.collect();
        assert_eq!(tails.held(), 0, "no incident holds it: forgotten");
    }

    /// A crash loop restarts between two PodAlerts' evaluations: each saw
    /// another run. A read begun after a PodAlert's evaluation read a view
    /// at least as new as its own, and is shared; one begun before it,
    /// of another run, is not (the PodAlert reads the newer run itself).
    /// Before, each missed the other's tail and read it again in turn.
    #[test]
    fn a_read_begun_after_an_evaluation_is_shared_whatever_run_it_named() {
        let tails = Tails::new(1 << 20);
        let k = key("a", "web");
        let run = |n: u32| Identity { pod: "p".into(), incarnation: format!("containerd://run-{n}") };
        let t = |s: i64| Timestamp::from_second(1_800_000_000 + s).unwrap();
        // Read (run 4) by a PodAlert, the read begun at t+10.
        tails.store(&k, &p(), run(4), 50, 8192, "x".repeat(100), t(10));
        // One that evaluated at t+8 and saw run 3: shares it.
        assert!(tails.reusable(&k, &p(), &run(3), 50, 8192, t(8)).is_some());
        // One that evaluated at t+12 and saw run 5: reads it.
        assert!(tails.reusable(&k, &p(), &run(5), 50, 8192, t(12)).is_none());
        // Another pod's read is never shared for this one.
        let other = Identity { pod: "q".into(), incarnation: "containerd://run-3".into() };
        assert!(tails.reusable(&k, &p(), &other, 50, 8192, t(8)).is_none());
    }

    #[test]
    fn a_namespace_gets_its_fair_share_back_from_one_that_filled_the_budget() {
        let budget = 64 << 10;
        let tails = Tails::new(budget);
        // Namespace a alone may fill the budget.
        let a: Vec<Arc<Tail>> = (0..8)
            .map(|i| tails.store(&key("a", &format!("w{i}")), &p(), id("p"), 50, 9000, "a".repeat(8192), now()))
            .collect();
        assert_eq!(tails.held_by("a"), budget);
        // b arrives: half the budget is its share, taken back from a.
        let b: Vec<Arc<Tail>> = (0..4)
            .map(|i| tails.store(&key("b", &format!("w{i}")), &p(), id("p"), 50, 9000, "b".repeat(8192), now()))
            .collect();
        assert_eq!(tails.held_by("b"), budget / 2);
        assert_eq!(tails.held_by("a"), budget / 2);
        assert!(tails.held() <= budget);
        assert_eq!(a.iter().filter(|t| t.text().as_ref() == EVICTED).count(), 4);
        assert!(b.iter().all(|t| t.text().len() == 8192));
        // b past its share: left out, a keeps the rest.
        let more = tails.store(&key("b", "w9"), &p(), id("p"), 50, 9000, "b".repeat(8192), now());
        assert_eq!(more.text().as_ref(), LEFT_OUT);
        assert_eq!(tails.held_by("a"), budget / 2);
        // Something smaller than the room left is cut to it, the end kept.
        drop(b);
        tails.collect();
        let tails2 = Tails::new(10_000);
        let t = tails2.store(&key("c", "w"), &p(), id("p"), 50, 20_000, format!("{}\nEND", "z".repeat(15_000)), now());
        assert!(t.text().ends_with("END") && t.text().len() <= 10_000);
        assert!(
            tails2.reusable(&key("c", "w"), &p(), &id("p"), 50, 20_000, now()).is_none(),
            "a cut tail is not judged again"
        );
    }

    #[test]
    fn a_restored_tail_is_adopted_once() {
        let tails = Tails::new(1 << 20);
        let k = key("a", "web");
        let one = tails.adopt(&k, &Redactor::defaults().unwrap(), "restored".into(), now());
        let two = tails.adopt(&k, &Redactor::defaults().unwrap(), "restored".into(), now());
        assert!(Arc::ptr_eq(&one, &two));
        assert_eq!(tails.held(), 8);
        assert!(tails.reusable(&k, &p(), &Identity::default(), 0, 0, now()).is_none());
    }

    /// A status written before redaction (or by a spec that redacted less)
    /// is redacted as the adopting PodAlert redacts, and PodAlerts that
    /// redact differently never share one held tail.
    #[test]
    fn tails_are_held_per_redaction() {
        let tails = Tails::new(1 << 20);
        let k = key("a", "web");
        let defaults = Redactor::defaults().unwrap();
        let raw = Redactor::new(false, Vec::new()).unwrap();
        let restored = tails.adopt(&k, &defaults, "db password=hunter2\n".into(), now());
        assert_eq!(restored.text().as_ref(), "db password=[redacted]\n");
        let unredacted = tails.adopt(&k, &raw, "db password=hunter2\n".into(), now());
        assert!(!Arc::ptr_eq(&restored, &unredacted));
        assert_eq!(restored.text().as_ref(), "db password=[redacted]\n", "untouched by the other profile");
        // A read stored by the PodAlert without redaction is not another's to reuse.
        tails.store(&k, raw.profile(), id("p"), 50, 8192, "password=hunter2".into(), now());
        assert!(tails.reusable(&k, defaults.profile(), &id("p"), 50, 8192, now()).is_none());
        assert!(tails.reusable(&k, raw.profile(), &id("p"), 50, 8192, now()).is_some());
        assert_eq!(restored.text().as_ref(), "db password=[redacted]\n");
    }

    #[test]
    fn the_window_redacted_is_the_kept_lines_whole() {
        let r = Redactor::defaults().unwrap();
        let text = "old line\nconnect password=hunter2 to db\nlast\n";
        assert_eq!(line_window(text, 20), "connect password=hunter2 to db\nlast\n", "the line holding the cut, whole");
        // One long line cut in its middle: cut first, the secret has lost
        // what tells it is one; redacted first, it is gone.
        let line = "connect password=hunter2hunter2";
        assert!(r.redact(&cap(line, 14)).contains("hunter2"), "the attack: cut before redacting");
        let kept = cap(&r.redact(line_window(line, 14)), 14);
        assert!(!kept.contains("hunter2") && kept.ends_with("[redacted]"), "{kept:?}");
        assert_eq!(line_window("short", 20), "short");
        assert_eq!(line_window(&"é".repeat(20), 5), "é".repeat(20), "no newline: all of it");
    }
}
