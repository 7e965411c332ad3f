//! The runners' summaries merged into one result, and the verdict judged on
//! the merged data (never on one runner's, never on averaged percentiles).
//! Pure.

use std::time::Duration;

use loadgen::summary::{Merged, Summary};

use crate::crd::{Latency, LoadStage, Results, Thresholds, Verdict};

pub(crate) fn fmt(d: Duration) -> String {
    let us = d.as_micros();
    if us < 1_000 {
        format!("{us}µs")
    } else if us < 1_000_000 {
        format!("{:.1}ms", us as f64 / 1_000.0)
    } else {
        format!("{:.2}s", us as f64 / 1_000_000.0)
    }
}

/// Merges the runners' termination messages (with load.stages, each
/// stage's figures too); an unreadable one is an error naming its runner.
pub fn merge(messages: &[(String, String)], stages: &[LoadStage]) -> Result<(Merged, Results), String> {
    let mut summaries = Vec::with_capacity(messages.len());
    for (runner, message) in messages {
        let s = Summary::parse(message).map_err(|e| format!("runner {runner}: {e}"))?;
        summaries.push(s);
    }
    let merged = Merged::of(&summaries).map_err(|e| e.to_string())?;
    let histogram = loadgen::summary::encode(&merged.histogram).unwrap_or_default();
    let results = Results {
        runners: i32::try_from(merged.runners).unwrap_or(i32::MAX),
        requests: i64::try_from(merged.requests).unwrap_or(i64::MAX),
        errors: merged
            .errors
            .iter()
            .map(|(k, n)| (k.as_str().to_string(), i64::try_from(*n).unwrap_or(i64::MAX)))
            .collect(),
        not_sent: i64::try_from(merged.not_sent).unwrap_or(i64::MAX),
        elapsed: fmt(merged.elapsed),
        error_ratio: format!("{:.4}", merged.error_ratio()),
        rps: format!("{:.1}", merged.rps()),
        latency: Latency {
            p50: fmt(merged.quantile(0.50)),
            p90: fmt(merged.quantile(0.90)),
            p99: fmt(merged.quantile(0.99)),
            max: fmt(merged.max()),
        },
        histogram,
        dropped: i64::try_from(merged.dropped).unwrap_or(i64::MAX),
        stages: crate::stages::results(&merged, stages),
    };
    Ok((merged, results))
}

/// The verdict and its message.
pub fn verdict(merged: &Merged, thresholds: Option<&Thresholds>) -> (Verdict, String) {
    let Some(t) = thresholds else {
        return (Verdict::None, "no thresholds set".into());
    };
    let mut missed = Vec::new();
    if let Some(max) = t.max_error_ratio
        && merged.error_ratio() > max
    {
        missed.push(format!(
            "error ratio {:.4} ({} of {}) > {max}",
            merged.error_ratio(),
            merged.error_count(),
            merged.requests
        ));
    }
    if merged.not_sent > 0 {
        missed.push(format!("{} requests not sent before the deadline (or cut short by it)", merged.not_sent));
    }
    if let Some(p99) = t.p99.as_ref().and_then(|d| d.get().ok()) {
        let got = merged.quantile(0.99);
        if merged.histogram.is_empty() {
            missed.push("no request was answered: p99 unknown".into());
        } else if got > p99 {
            missed.push(format!("p99 {} > {}", fmt(got), fmt(p99)));
        }
    }
    if missed.is_empty() {
        (Verdict::Passed, "every threshold met".into())
    } else {
        (Verdict::Failed, missed.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use flotilla_shared::duration::GoDuration;
    use loadgen::summary::{ErrorKind, histogram, record};

    fn message(latencies_ms: &[u64], errors: u64) -> String {
        let mut h = histogram();
        for ms in latencies_ms {
            record(&mut h, Duration::from_millis(*ms));
        }
        let e = if errors > 0 { BTreeMap::from([(ErrorKind::Http5xx, errors)]) } else { BTreeMap::new() };
        Summary::to_message(latencies_ms.len() as u64 + errors, e, 0, Duration::from_secs(1), &h)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn runners_are_merged_and_judged_on_the_merged_data() {
        // Four fast runners and one slow: the merged p99 is the slow one's,
        // which averaging per-runner p99s would hide.
        let mut msgs: Vec<(String, String)> = (0..4).map(|i| (format!("r{i}"), message(&[2; 10], 0))).collect();
        msgs.push(("r4".into(), message(&[900; 10], 0)));
        let (m, r) = merge(&msgs, &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((r.runners, r.requests), (5, 50));
        assert!(r.latency.p99.starts_with("90") || r.latency.p99.starts_with("899"), "{:?}", r.latency);
        assert!(r.latency.p50.starts_with('2'), "{:?}", r.latency);
        let t = Thresholds { max_error_ratio: Some(0.01), p99: Some(GoDuration::new("500ms")) };
        let (v, why) = verdict(&m, Some(&t));
        assert_eq!(v, Verdict::Failed);
        assert!(why.contains("p99"), "{why}");
        let t = Thresholds { max_error_ratio: Some(0.01), p99: Some(GoDuration::new("1s")) };
        assert_eq!(verdict(&m, Some(&t)).0, Verdict::Passed);
        assert_eq!(verdict(&m, None).0, Verdict::None);
    }

    #[test]
    fn errors_fail_the_error_ratio_and_a_bad_summary_names_its_runner() {
        let msgs = vec![("a".to_string(), message(&[1; 9], 1)), ("b".to_string(), message(&[1; 10], 0))];
        let (m, r) = merge(&msgs, &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.errors.get("http5xx"), Some(&1));
        assert_eq!(r.error_ratio, "0.0500");
        let t = Thresholds { max_error_ratio: Some(0.01), p99: None };
        assert_eq!(verdict(&m, Some(&t)).0, Verdict::Failed);
        let e = merge(&[("r7".into(), "oops".into())], &[]).err().unwrap_or_default();
        assert!(e.contains("r7"), "{e}");
    }
}
