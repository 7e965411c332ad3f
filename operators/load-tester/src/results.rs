//! The runners' summaries merged into one result, and the verdict judged on
//! the merged data (never on one runner's, never on averaged percentiles).
//! Pure.

use std::time::Duration;

use loadgen::summary::{Merged, Summary};

use crate::crd::{Latency, LoadStage, RequestResults, Results, StageLatency, Thresholds, Verdict};

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
/// stage's figures too; with test.requests, named `requests`, each
/// request's); an unreadable one is an error naming its runner.
pub fn merge(
    messages: &[(String, String)],
    stages: &[LoadStage],
    requests: &[String],
) -> Result<(Merged, Results), String> {
    let mut summaries = Vec::with_capacity(messages.len());
    let mut saturated = Vec::new();
    for (runner, message) in messages {
        let s = Summary::parse(message).map_err(|e| format!("runner {runner}: {e}"))?;
        if let Some(why) = s.strain.saturated(Duration::from_millis(s.elapsed_ms)) {
            saturated.push(format!("{runner}: {why}"));
        }
        summaries.push(s);
    }
    saturated.sort();
    let merged = Merged::of(&summaries).map_err(|e| e.to_string())?;
    let histogram = loadgen::summary::encode(&merged.histogram).unwrap_or_default();
    let results = Results {
        runners: i32::try_from(merged.runners).unwrap_or(i32::MAX),
        requests: i64::try_from(merged.requests).unwrap_or(i64::MAX),
        errors: by_kind(&merged.errors),
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
        saturated,
        by_request: by_request(&merged, requests),
        capacity: None,
    };
    Ok((merged, results))
}

/// Failed requests by kind, as the status shows them.
fn by_kind(
    errors: &std::collections::BTreeMap<loadgen::summary::ErrorKind, u64>,
) -> std::collections::BTreeMap<String, i64> {
    errors.iter().map(|(k, n)| (k.as_str().to_string(), i64::try_from(*n).unwrap_or(i64::MAX))).collect()
}

/// Each named request's merged figures (none without a scenario).
fn by_request(merged: &Merged, names: &[String]) -> Vec<RequestResults> {
    names
        .iter()
        .zip(&merged.by_request)
        .map(|(name, r)| {
            let ratio = if r.requests == 0 { 0.0 } else { r.error_count() as f64 / r.requests as f64 };
            RequestResults {
                name: name.clone(),
                requests: i64::try_from(r.requests).unwrap_or(i64::MAX),
                errors: by_kind(&r.errors),
                error_ratio: format!("{ratio:.4}"),
                latency: match (r.quantile(0.50), r.quantile(0.90), r.quantile(0.99)) {
                    (Some(p50), Some(p90), Some(p99)) => {
                        Some(StageLatency { p50: fmt(p50), p90: fmt(p90), p99: fmt(p99) })
                    }
                    _ => None,
                },
            }
        })
        .collect()
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
    let latencies = [
        ("p50", t.p50.as_ref(), merged.quantile(0.50)),
        ("p90", t.p90.as_ref(), merged.quantile(0.90)),
        ("p99", t.p99.as_ref(), merged.quantile(0.99)),
        ("max latency", t.max_latency.as_ref(), merged.max()),
    ];
    for (name, limit, got) in latencies {
        let Some(limit) = limit.and_then(|d| d.get().ok()) else { continue };
        if merged.histogram.is_empty() {
            missed.push(format!("no request was answered: {name} unknown"));
        } else if got > limit {
            missed.push(format!("{name} {} > {}", fmt(got), fmt(limit)));
        }
    }
    if let Some(min) = t.min_rate
        && merged.rps() < min
    {
        missed.push(format!("rate {:.1} requests/s < {min}", merged.rps()));
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
    fn runners_that_could_not_keep_up_are_named_with_why() {
        let strained = |behind_seconds, throttled_ms| {
            let staged = loadgen::summary::Staged {
                strain: loadgen::pace::Strain { behind_seconds, throttled_ms },
                ..Default::default()
            };
            Summary::to_message_staged(10, BTreeMap::new(), 0, Duration::from_secs(10), &histogram(), &staged)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let msgs = vec![
            ("t-r1-0".to_string(), strained(0, 0)),
            ("t-r1-2".to_string(), strained(8, 9_400)),
            ("t-r1-1".to_string(), strained(3, 100)),
        ];
        let (_, r) = merge(&msgs, &[], &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.saturated, ["t-r1-2: below 95 % of its rate for 8 s, CPU throttled for 9.4 s of 10.0 s"]);
        // An older runner's summary (no strain fields) reads as kept up.
        let (_, r) = merge(&[("old".into(), message(&[2; 10], 0))], &[], &[]).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.saturated.is_empty());
    }

    /// A scenario's requests are merged each on its own, named in the
    /// spec's order: one request's failures never blur another's figures.
    #[test]
    fn each_request_of_a_scenario_is_merged_apart_and_named() {
        let runner = |fast: u64, failed: u64| {
            let mut ok = histogram();
            for _ in 0..fast {
                loadgen::summary::record(&mut ok, Duration::from_millis(2));
            }
            let staged = loadgen::summary::Staged {
                requests: vec![
                    loadgen::scenario::RequestOutcome { requests: fast, errors: BTreeMap::new(), histogram: ok },
                    loadgen::scenario::RequestOutcome {
                        requests: failed,
                        errors: BTreeMap::from([(loadgen::summary::ErrorKind::Check, failed)]),
                        histogram: histogram(),
                    },
                ],
                ..Default::default()
            };
            let errors = BTreeMap::from([(loadgen::summary::ErrorKind::Check, failed)]);
            Summary::to_message_staged(fast + failed, errors, 0, Duration::from_secs(1), &histogram(), &staged)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let msgs = vec![("a".to_string(), runner(8, 2)), ("b".to_string(), runner(12, 3))];
        let names = ["home".to_string(), "cart".to_string()];
        let (_, r) = merge(&msgs, &[], &names).unwrap_or_else(|e| panic!("{e}"));
        let home = &r.by_request[0];
        assert_eq!((home.name.as_str(), home.requests, home.error_ratio.as_str()), ("home", 20, "0.0000"));
        assert!(home.latency.as_ref().is_some_and(|l| l.p99.starts_with("2.0")), "{home:?}");
        let cart = &r.by_request[1];
        assert_eq!((cart.name.as_str(), cart.requests, cart.error_ratio.as_str()), ("cart", 5, "1.0000"));
        assert_eq!(cart.errors, BTreeMap::from([("check".to_string(), 5)]));
        assert!(cart.latency.is_none(), "no answer passed: no percentiles");
        // Without a scenario: none.
        let (_, r) = merge(&[("a".into(), message(&[2; 10], 0))], &[], &[]).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.by_request.is_empty());
    }

    #[test]
    fn runners_are_merged_and_judged_on_the_merged_data() {
        // Four fast runners and one slow: the merged p99 is the slow one's,
        // which averaging per-runner p99s would hide.
        let mut msgs: Vec<(String, String)> = (0..4).map(|i| (format!("r{i}"), message(&[2; 10], 0))).collect();
        msgs.push(("r4".into(), message(&[900; 10], 0)));
        let (m, r) = merge(&msgs, &[], &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((r.runners, r.requests), (5, 50));
        assert!(r.latency.p99.starts_with("90") || r.latency.p99.starts_with("899"), "{:?}", r.latency);
        assert!(r.latency.p50.starts_with('2'), "{:?}", r.latency);
        let t =
            Thresholds { max_error_ratio: Some(0.01), p99: Some(GoDuration::new("500ms")), ..Thresholds::default() };
        let (v, why) = verdict(&m, Some(&t));
        assert_eq!(v, Verdict::Failed);
        assert!(why.contains("p99"), "{why}");
        let t = Thresholds { max_error_ratio: Some(0.01), p99: Some(GoDuration::new("1s")), ..Thresholds::default() };
        assert_eq!(verdict(&m, Some(&t)).0, Verdict::Passed);
        assert_eq!(verdict(&m, None).0, Verdict::None);
    }

    #[test]
    fn errors_fail_the_error_ratio_and_a_bad_summary_names_its_runner() {
        let msgs = vec![("a".to_string(), message(&[1; 9], 1)), ("b".to_string(), message(&[1; 10], 0))];
        let (m, r) = merge(&msgs, &[], &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.errors.get("http5xx"), Some(&1));
        assert_eq!(r.error_ratio, "0.0500");
        let t = Thresholds { max_error_ratio: Some(0.01), ..Thresholds::default() };
        assert_eq!(verdict(&m, Some(&t)).0, Verdict::Failed);
        let e = merge(&[("r7".into(), "oops".into())], &[], &[]).err().unwrap_or_default();
        assert!(e.contains("r7"), "{e}");
    }

    /// Answers that failed test.checks are merged under their own kind,
    /// apart from the transport's, and count in the error ratio.
    #[test]
    fn check_errors_are_merged_apart_and_count_in_the_error_ratio() {
        let with = |errors: &[(ErrorKind, u64)]| {
            let mut h = histogram();
            for _ in 0..90 {
                record(&mut h, Duration::from_millis(2));
            }
            let n: u64 = errors.iter().map(|(_, n)| n).sum();
            Summary::to_message(90 + n, errors.iter().copied().collect(), 0, Duration::from_secs(1), &h)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let msgs = vec![
            ("a".to_string(), with(&[(ErrorKind::Check, 6), (ErrorKind::Timeout, 1)])),
            ("b".to_string(), with(&[(ErrorKind::Check, 3)])),
        ];
        let (m, r) = merge(&msgs, &[], &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.errors, BTreeMap::from([("check".to_string(), 9), ("timeout".to_string(), 1)]));
        assert_eq!((r.requests, r.error_ratio.as_str()), (190, "0.0526"));
        let t = Thresholds { max_error_ratio: Some(0.05), ..Thresholds::default() };
        let (v, why) = verdict(&m, Some(&t));
        assert_eq!(v, Verdict::Failed);
        assert!(why.contains("error ratio 0.0526 (10 of 190)"), "{why}");
        let t = Thresholds { max_error_ratio: Some(0.06), ..Thresholds::default() };
        assert_eq!(verdict(&m, Some(&t)).0, Verdict::Passed);
    }

    /// Each new threshold fails on its own figure and passes at it: the
    /// median, the 90th percentile, the slowest request, the achieved rate.
    #[test]
    fn p50_p90_max_latency_and_min_rate_judge_the_merged_run() {
        // 100 requests over 1 s: 50 at 2 ms, 40 at 10 ms, 9 at 50 ms, 1 at 400 ms.
        let mut latencies = vec![2; 50];
        latencies.extend([10; 40]);
        latencies.extend([50; 9]);
        latencies.push(400);
        let (m, _) = merge(&[("r".into(), message(&latencies, 0))], &[], &[]).unwrap_or_else(|e| panic!("{e}"));
        let judge = |t: Thresholds| verdict(&m, Some(&t));
        let d = |s: &str| Some(GoDuration::new(s));
        let cases = [
            (Thresholds { p50: d("1ms"), ..Thresholds::default() }, Some("p50")),
            (Thresholds { p50: d("3ms"), ..Thresholds::default() }, None),
            (Thresholds { p90: d("5ms"), ..Thresholds::default() }, Some("p90")),
            (Thresholds { p90: d("11ms"), ..Thresholds::default() }, None),
            (Thresholds { max_latency: d("100ms"), ..Thresholds::default() }, Some("max latency")),
            (Thresholds { max_latency: d("1s"), ..Thresholds::default() }, None),
            (Thresholds { min_rate: Some(150.0), ..Thresholds::default() }, Some("rate 100.0")),
            (Thresholds { min_rate: Some(100.0), ..Thresholds::default() }, None),
        ];
        for (t, missed) in cases {
            let (v, why) = judge(t.clone());
            match missed {
                Some(what) => {
                    assert_eq!(v, Verdict::Failed, "{t:?}: {why}");
                    assert!(why.contains(what), "{t:?}: {why}");
                }
                None => assert_eq!(v, Verdict::Passed, "{t:?}: {why}"),
            }
        }
        // Every missed threshold is named, not only the first.
        let all = Thresholds { p50: d("1ms"), max_latency: d("1ms"), min_rate: Some(1e6), ..Thresholds::default() };
        let why = judge(all).1;
        assert!(why.contains("p50") && why.contains("max latency") && why.contains("rate"), "{why}");
    }

    /// A run with no answer has no latency: a latency threshold fails, it
    /// does not pass on an empty histogram's zeros.
    #[test]
    fn latency_thresholds_fail_when_nothing_was_answered() {
        let (m, _) = merge(&[("r".into(), message(&[], 3))], &[], &[]).unwrap_or_else(|e| panic!("{e}"));
        for t in [
            Thresholds { p50: Some(GoDuration::new("1s")), ..Thresholds::default() },
            Thresholds { max_latency: Some(GoDuration::new("1s")), ..Thresholds::default() },
        ] {
            let (v, why) = verdict(&m, Some(&t));
            assert_eq!(v, Verdict::Failed, "{why}");
            assert!(why.contains("no request was answered"), "{why}");
        }
    }
}
