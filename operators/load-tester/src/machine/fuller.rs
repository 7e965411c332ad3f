//! The fuller summaries of runners whose termination messages had no room
//! for everything (`more`: precision lowered, histograms of stages or
//! requests left out): each prints it as the last line of its log, which
//! the controller reads when every runner has ended. Pure.
//!
//! A log line is trusted no more than the termination message (whoever may
//! exec into a runner writes both): it replaces the message only when it
//! parses (its histograms checked as the message's are) and tells the same
//! counts (its stages adding up to the run's where the message had no room
//! for them).

use loadgen::summary::{FULL_PREFIX, Summary};

use super::progress::RunnerLog;
use crate::runner::Runner;

/// The ended runners whose termination message says a fuller summary is in
/// their log.
pub(super) fn with_more(done: &[&&Runner]) -> Vec<String> {
    done.iter()
        .filter(|r| r.terminated.as_ref().is_some_and(|(_, _, m)| Summary::parse(m).is_ok_and(|s| s.more)))
        .map(|r| r.name.clone())
        .collect()
}

/// What to merge for `runner`: the fuller summary in its log when there is
/// one that agrees with its termination `message`, else the message.
pub(super) fn summary_of(runner: &str, message: &str, logs: &[RunnerLog]) -> String {
    let Ok(short) = Summary::parse(message) else { return message.to_string() };
    let Some(Ok(log)) = logs.iter().find(|l| l.runner == runner).map(|l| l.log.as_ref()) else {
        return message.to_string();
    };
    // The newest such line (a line cut short by the read's limit fails to parse).
    let fuller = log
        .lines()
        .rev()
        .filter_map(|l| l.strip_prefix(FULL_PREFIX))
        .find_map(|json| Summary::parse(json).ok().filter(|full| agrees(&short, full)).map(|_| json.to_string()));
    fuller.unwrap_or_else(|| message.to_string())
}

/// The same run told twice: the same counts everywhere, the fuller one's
/// histograms readable.
fn agrees(short: &Summary, full: &Summary) -> bool {
    // A message with no room for the stages at all (200 of a long capacity
    // search) leaves the run's counts to compare: the stages must add up
    // to them (each request sent falls in one stage).
    let stage_totals =
        |f: fn(&loadgen::summary::StageSummary) -> u64| full.stages.iter().map(f).fold(0u64, u64::saturating_add);
    let adds_up = full.stages.is_empty()
        || stage_totals(|s| s.requests) == full.requests
            && stage_totals(|s| s.dropped) == full.dropped
            && stage_totals(|s| s.errors) == full.error_count();
    let same_stages = short.stages.is_empty() && adds_up
        || short.stages.len() == full.stages.len()
            && short
                .stages
                .iter()
                .zip(&full.stages)
                .all(|(a, b)| (a.requests, a.errors, a.dropped) == (b.requests, b.errors, b.dropped));
    let same_requests = short.by_request.is_empty()
        || short.by_request.len() == full.by_request.len()
            && short
                .by_request
                .iter()
                .zip(&full.by_request)
                .all(|(a, b)| (a.requests, &a.errors) == (b.requests, &b.errors));
    let same_counts = short.requests == full.requests
        && short.errors == full.errors
        && short.not_sent == full.not_sent
        && short.elapsed_ms == full.elapsed_ms
        && short.dropped == full.dropped
        && short.stopped == full.stopped
        && same_stages
        && same_requests;
    same_counts
        && full.histogram().is_ok()
        && (0..full.stages.len()).all(|k| full.stage_histogram(k).is_ok())
        && (0..full.by_request.len()).all(|k| full.request_histogram(k).is_ok())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeMap;
    use std::time::Duration;

    use loadgen::summary::{StageOutcome, Staged, histogram, record};

    use super::*;

    /// 40 stages of spread latencies: too much for 4 KiB at full precision.
    fn staged(scale: u64) -> Staged {
        let stages = (0..40u64)
            .map(|k| {
                let mut h = histogram();
                for v in 1..200u64 {
                    record(&mut h, Duration::from_micros(v * v * scale + k));
                }
                StageOutcome { requests: 199, errors: 1, dropped: 0, histogram: h }
            })
            .collect();
        Staged { stages, ..Staged::default() }
    }

    fn both(staged: &Staged) -> (String, Option<String>) {
        let errors = BTreeMap::from([(loadgen::summary::ErrorKind::Timeout, 40)]);
        Summary::to_message_and_full(40 * 200, errors, 0, Duration::from_secs(40), &histogram(), staged).unwrap()
    }

    fn log(runner: &str, text: String) -> RunnerLog {
        RunnerLog { runner: runner.into(), log: Ok(text) }
    }

    #[test]
    fn the_fuller_summary_replaces_the_message_only_when_it_agrees() {
        let (message, full) = both(&staged(7));
        let full = full.expect("the message had to leave something out");
        let short = Summary::parse(&message).unwrap();
        assert!(short.more && short.stages.iter().any(|s| s.hist.is_none()) || short.digits < 3, "{message}");
        let parsed = Summary::parse(&full).unwrap();
        assert!(!parsed.more && parsed.digits == 3 && parsed.stages.iter().all(|s| s.hist.is_some()));
        // Found as the log's last line (after the message and a warning).
        let text = format!("{message}\nwarning: slow\n{FULL_PREFIX}{full}\n");
        assert_eq!(summary_of("r0", &message, &[log("r0", text.clone())]), full);
        // Not this runner's log, no log read, a read that failed: the message.
        assert_eq!(summary_of("r1", &message, &[log("r0", text)]), message);
        assert_eq!(summary_of("r0", &message, &[]), message);
        let failed = RunnerLog { runner: "r0".into(), log: Err("no kubelet".into()) };
        assert_eq!(summary_of("r0", &message, &[failed]), message);
        // Cut short by the read's limit: the message.
        let cut = format!("{FULL_PREFIX}{}", &full[..full.len() / 2]);
        assert_eq!(summary_of("r0", &message, &[log("r0", cut)]), message);
    }

    /// 200 stages (a 100-step search): the message has no room even for
    /// their counts; the log's stages are taken when they add up to the
    /// message's counts, not when one was changed.
    #[test]
    fn stages_the_message_had_no_room_for_must_add_up_to_its_counts() {
        let stages: Vec<StageOutcome> = (0..200u64)
            .map(|k| {
                let mut h = histogram();
                for _ in 0..1000 {
                    record(&mut h, Duration::from_micros(1000 + k));
                }
                StageOutcome { requests: 145_000 + k, errors: 12, dropped: 3, histogram: h }
            })
            .collect();
        let requests = stages.iter().map(|s| s.requests).sum();
        let staged = Staged { dropped: 600, stages, ..Staged::default() };
        let errors = BTreeMap::from([(loadgen::summary::ErrorKind::Timeout, 2400)]);
        let (message, full) =
            Summary::to_message_and_full(requests, errors, 0, Duration::from_secs(6000), &histogram(), &staged)
                .unwrap();
        let short = Summary::parse(&message).unwrap();
        assert!(short.more && short.stages.is_empty(), "{} bytes, {} stages", message.len(), short.stages.len());
        let full = full.unwrap();
        assert_eq!(summary_of("r0", &message, &[log("r0", format!("{FULL_PREFIX}{full}"))]), full);
        let mut forged = Summary::parse(&full).unwrap();
        forged.stages[7].requests += 1;
        let forged = serde_json::to_string(&forged).unwrap();
        assert_eq!(summary_of("r0", &message, &[log("r0", format!("{FULL_PREFIX}{forged}"))]), message);
    }

    /// A log line telling other counts (another run's, or written by
    /// whoever may exec into the runner) is not taken.
    #[test]
    fn a_fuller_summary_with_other_counts_is_ignored() {
        let (message, _) = both(&staged(7));
        let other =
            Summary::to_message_and_full(1, BTreeMap::new(), 0, Duration::from_secs(40), &histogram(), &staged(9))
                .unwrap();
        let forged = other.1.unwrap_or(other.0);
        assert_eq!(summary_of("r0", &message, &[log("r0", format!("{FULL_PREFIX}{forged}"))]), message);
    }
}
