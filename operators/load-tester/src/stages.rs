//! load.stages on the operator's side: each stage's rate (for the whole
//! test) split over the runners, as loadgen's --stages takes it, and the
//! runners' per-stage figures, merged, back into the results. Pure.

use std::time::Duration;

use loadgen::summary::Merged;

use crate::crd::{LoadStage, StageLatency, StageResults};

/// Runner `i`'s share of `rate` over `runners` runners: the quotient, and
/// one more for the first `rate % runners` runners, so the shares add up to
/// `rate` exactly.
pub fn share(rate: i32, runners: usize, i: usize) -> i32 {
    let (rate, n) = (i64::from(rate.max(0)), i64::try_from(runners.max(1)).unwrap_or(i64::MAX));
    let i = i64::try_from(i).unwrap_or(i64::MAX);
    let q = rate / n + i64::from(i < rate % n);
    i32::try_from(q).unwrap_or(i32::MAX)
}

/// Runner `i`'s --stages value: `<ms>ms:<rate>` per stage, comma-separated
/// (whole milliseconds, which every loadgen parses). Empty without stages.
pub fn runner_flag(stages: &[LoadStage], runners: usize, i: usize) -> String {
    stages
        .iter()
        .map(|s| {
            let ms = s.duration.get().map_or(0, |d| d.as_millis());
            format!("{ms}ms:{}", share(s.rate, runners, i))
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn fmt_latency(d: Duration) -> String {
    crate::results::fmt(d)
}

/// Each stage's merged figures, beside the spec's stage (a summary's
/// stages beyond the spec's are ignored; a stage no runner reported shows
/// zeros).
pub fn results(merged: &Merged, stages: &[LoadStage]) -> Vec<StageResults> {
    stages
        .iter()
        .enumerate()
        .map(|(k, spec)| {
            let m = merged.stages.get(k);
            let count =
                |f: fn(&loadgen::summary::MergedStage) -> u64| m.map_or(0, |m| i64::try_from(f(m)).unwrap_or(i64::MAX));
            let requests = count(|m| m.requests);
            let secs = spec.duration.get().map_or(0.0, |d| d.as_secs_f64());
            let latency = m.and_then(|m| {
                Some(StageLatency {
                    p50: fmt_latency(m.quantile(0.50)?),
                    p90: fmt_latency(m.quantile(0.90)?),
                    p99: fmt_latency(m.quantile(0.99)?),
                })
            });
            StageResults {
                duration: spec.duration.0.clone(),
                rate: spec.rate,
                requests,
                achieved_rate: format!("{:.1}", if secs > 0.0 { requests as f64 / secs } else { 0.0 }),
                errors: count(|m| m.errors),
                dropped: count(|m| m.dropped),
                latency,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use flotilla_shared::duration::GoDuration;
    use proptest::prelude::*;

    #[test]
    fn shares_add_up_to_the_rate() {
        assert_eq!((0..3).map(|i| share(100, 3, i)).collect::<Vec<_>>(), vec![34, 33, 33]);
        assert_eq!((0..4).map(|i| share(2, 4, i)).collect::<Vec<_>>(), vec![1, 1, 0, 0]);
        assert_eq!(share(0, 5, 0), 0);
        assert_eq!(share(7, 0, 0), 7, "no runners is read as one");
    }

    #[test]
    fn each_runner_gets_its_share_of_every_stage_in_milliseconds() {
        let stages = vec![
            LoadStage { duration: GoDuration::new("1.5s"), rate: 10 },
            LoadStage { duration: GoDuration::new("2m"), rate: 3 },
        ];
        assert_eq!(runner_flag(&stages, 2, 0), "1500ms:5,120000ms:2");
        assert_eq!(runner_flag(&stages, 2, 1), "1500ms:5,120000ms:1");
        assert_eq!(runner_flag(&[], 2, 1), "");
    }

    #[test]
    fn the_load_lasts_the_stages_total_so_the_deadline_covers_it() {
        let spec: crate::crd::LoadTestSpec = serde_json::from_value(serde_json::json!({
            "replicas": 2, "test": {"serviceName": "web"},
            "load": {"stages": [{"duration": "30s", "rate": 10}, {"duration": "1.5m", "rate": 0}]}
        }))
        .unwrap();
        assert_eq!(spec.duration(), Ok(Some(Duration::from_secs(120))));
        assert_eq!(spec.stages().len(), 2);
        let limits = crate::machine::Limits {
            deadline: Duration::from_secs(60),
            start_timeout: Duration::from_secs(120),
            duration: spec.duration().unwrap(),
            min_rerun_interval: Duration::ZERO,
            max_runners_per_namespace: 10,
            schedule: None,
        };
        assert_eq!(limits.run_deadline(), Duration::from_secs(120 + 120) + crate::machine::DURATION_SLACK);
    }

    #[test]
    fn stage_results_are_the_merged_runners_beside_the_spec() {
        use loadgen::summary::{StageOutcome, Staged, Summary, histogram, record};
        let runner = |ms: u64, dropped: u64| {
            let mut h = histogram();
            for _ in 0..50 {
                record(&mut h, Duration::from_millis(ms));
            }
            let st = StageOutcome { requests: 50, errors: 0, dropped, histogram: h };
            let staged =
                Staged { dropped, stages: vec![st.clone(), StageOutcome { requests: 0, ..st }], ..Staged::default() };
            Summary::to_message_staged(50, Default::default(), 0, Duration::from_secs(20), &histogram(), &staged)
                .unwrap()
        };
        let stages = vec![
            LoadStage { duration: GoDuration::new("10s"), rate: 20 },
            LoadStage { duration: GoDuration::new("10s"), rate: 20 },
        ];
        let (_, r) =
            crate::results::merge(&[("a".into(), runner(2, 1)), ("b".into(), runner(40, 0))], &stages, &[]).unwrap();
        assert_eq!(r.dropped, 1);
        assert_eq!(r.stages.len(), 2);
        let s0 = &r.stages[0];
        assert_eq!((s0.requests, s0.dropped, s0.achieved_rate.as_str(), s0.rate), (100, 1, "10.0", 20));
        let lat = s0.latency.clone().unwrap();
        assert!(lat.p50.starts_with('2') && lat.p99.starts_with("40"), "{lat:?}");
        assert_eq!((r.stages[1].requests, r.stages[1].latency.is_some()), (0, true));
        // Without stages, the results are as they were.
        let (_, plain) = crate::results::merge(&[("a".into(), runner(2, 0))], &[], &[]).unwrap();
        assert!(plain.stages.is_empty());
        assert!(!serde_json::to_string(&plain).unwrap().contains("stages"));
    }

    proptest! {
        /// However many runners, the shares differ by at most one and add
        /// up to the stage's rate exactly.
        #[test]
        fn shares_are_even_and_exact(rate in 0i32..=100_000, runners in 1usize..=500) {
            let shares: Vec<i32> = (0..runners).map(|i| share(rate, runners, i)).collect();
            prop_assert_eq!(shares.iter().map(|s| i64::from(*s)).sum::<i64>(), i64::from(rate));
            let (lo, hi) = (shares.iter().min().copied().unwrap_or(0), shares.iter().max().copied().unwrap_or(0));
            prop_assert!(hi - lo <= 1);
        }
    }
}
