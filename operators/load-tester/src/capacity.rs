//! load.capacity: each step judged on its own figures against the
//! thresholds (the hold stage's, every runner's merged), the highest rate
//! that passed; and, while the search runs, the last 10 s of a step held
//! judged the same way, so the search stops at the first step that misses
//! instead of running on to `max`. Pure.

use std::collections::BTreeMap;
use std::time::Duration;

use loadgen::Histogram;
use loadgen::summary::{ErrorKind, Merged, MergedStage};

use crate::crd::{CapacityResult, CapacitySpec, Thresholds, Verdict};
use crate::results::verdict;

/// What a step (or a window of it) is judged on: answered latencies,
/// requests completed, and of them failed or not sent (dropped: every
/// connection busy when due counts against the step, as the rate was not
/// served).
fn judge(t: &Thresholds, histogram: Histogram<u64>, requests: u64, failed: u64) -> Option<String> {
    let figures = Merged {
        runners: 1,
        requests,
        errors: if failed > 0 { BTreeMap::from([(ErrorKind::Other, failed)]) } else { BTreeMap::new() },
        histogram,
        ..Merged::empty()
    };
    // The achieved rate is the search's own figure, not a threshold here.
    let judged = Thresholds { min_rate: None, abort_on_fail: false, ..t.clone() };
    match verdict(&figures, Some(&judged)) {
        (Verdict::Failed, why) => Some(why),
        _ => None,
    }
}

/// The step's own figures: its hold stage's (index 2k+1). Without its
/// latencies (the runners' summaries had no room for so many stages'
/// histograms) while a latency threshold is set, it is not shown to pass:
/// a miss (an unknown is never counted as met).
fn step_missed(t: &Thresholds, hold: Option<&MergedStage>) -> Option<String> {
    let Some(s) = hold.filter(|s| s.requests > 0 || s.dropped > 0) else {
        return Some("no figures (not run, or a runner's were not read)".into());
    };
    let (requests, failed) = (s.requests.saturating_add(s.dropped), s.errors.saturating_add(s.dropped));
    match s.histogram.clone() {
        Some(h) => judge(t, h, requests, failed),
        None => {
            let errors_only = Thresholds { max_error_ratio: t.max_error_ratio, ..Thresholds::default() };
            let latency = [&t.p50, &t.p90, &t.p99, &t.max_latency].iter().any(|l| l.is_some());
            judge(&errors_only, loadgen::summary::histogram(), requests, failed).or_else(|| {
                latency.then(|| {
                    "latencies unknown (a runner's summary had no room for its histogram and its log was not read)"
                        .to_string()
                })
            })
        }
    }
}

/// The search's outcome from the merged results; `live`: the step the
/// search was ended at while it ran, and why (it fails, whatever its final
/// figures show).
pub fn result(c: &CapacitySpec, t: &Thresholds, merged: &Merged, live: Option<(i32, &str)>) -> CapacityResult {
    let rates = c.rates();
    let planned = i32::try_from(rates.len()).unwrap_or(i32::MAX);
    let mut out = CapacityResult { rate: 0, steps: 0, planned, limited_by: String::new() };
    for (k, rate) in rates.iter().enumerate() {
        let missed = step_missed(t, merged.stages.get(2 * k + 1));
        let missed = match live {
            Some((at, why)) if at == *rate => Some(missed.unwrap_or_else(|| format!("{why} (its last 10 s)"))),
            _ => missed,
        };
        if let Some(why) = missed {
            out.limited_by = format!("the step at {rate} requests/s: {why}");
            break;
        }
        out.rate = *rate;
        out.steps += 1;
    }
    out
}

/// The verdict of a capacity search: Passed when the first step passed.
pub fn verdict_of(r: &CapacityResult) -> (Verdict, &'static str, String) {
    let found = format!("capacity {} requests/s ({} of {} steps passed)", r.rate, r.steps, r.planned);
    match (r.steps, r.limited_by.is_empty()) {
        (0, _) => (Verdict::Failed, "NoCapacity", format!("{found}; {}", r.limited_by)),
        (_, true) => (Verdict::Passed, "CapacityFound", format!("{found}: every step up to max passed")),
        (_, false) => (Verdict::Passed, "CapacityFound", format!("{found}; limited by {}", r.limited_by)),
    }
}

/// While the search runs: the step whose hold the last 10 s fell in
/// entirely (the runners' elapsed time, from their start): its rate and
/// what that window missed; None while the window spans a ramp, or
/// nothing missed.
pub fn window_missed(
    c: &CapacitySpec,
    t: &Thresholds,
    elapsed: Duration,
    window: Duration,
    recent: &Histogram<u64>,
    recent_requests: u64,
    recent_dropped: u64,
) -> Option<(i32, String)> {
    let step = c.step_duration.get().ok()?;
    let ramp = Duration::from_secs(1);
    if step.is_zero() || window < Duration::from_secs(10) {
        return None;
    }
    let k = u32::try_from(elapsed.as_millis() / step.as_millis()).ok()?;
    let into = elapsed.checked_sub(step.checked_mul(k)?)?;
    // The window [elapsed - window, elapsed] must lie after the ramp.
    if into < ramp + window {
        return None;
    }
    let rate = *c.rates().get(usize::try_from(k).ok()?)?;
    // Dropped requests count against the step, as in its final figures.
    let failed = recent_requests.saturating_sub(recent.len()).saturating_add(recent_dropped);
    judge(t, recent.clone(), recent_requests.saturating_add(recent_dropped), failed).map(|why| (rate, why))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use flotilla_shared::duration::GoDuration;
    use loadgen::summary::{histogram, record};

    fn spec() -> CapacitySpec {
        CapacitySpec { start: 50, step: 50, step_duration: GoDuration::new("30s"), max: 200 }
    }

    fn p99(ms: u64) -> Thresholds {
        Thresholds { p99: Some(GoDuration::new(&format!("{ms}ms"))), max_error_ratio: Some(0.01), ..Default::default() }
    }

    fn stage(latency_ms: u64, requests: u64, errors: u64) -> MergedStage {
        let mut h = histogram();
        for _ in 0..requests - errors {
            record(&mut h, Duration::from_millis(latency_ms));
        }
        MergedStage { requests, errors, dropped: 0, histogram: Some(h) }
    }

    fn merged(steps: &[MergedStage]) -> Merged {
        let mut m = Merged::empty();
        for s in steps {
            m.stages.push(stage(1, 1, 0)); // the ramp: not judged
            m.stages.push(s.clone());
        }
        m
    }

    #[test]
    fn the_steps_are_its_rates_as_ramps_and_holds() {
        let c = spec();
        assert_eq!(c.rates(), vec![50, 100, 150, 200]);
        let stages = c.stages().unwrap();
        assert_eq!(stages.len(), 8);
        assert_eq!((stages[2].duration.0.as_str(), stages[2].rate), ("1s", 100));
        assert_eq!((stages[3].duration.0.as_str(), stages[3].rate), ("29000ms", 100));
        let wide = CapacitySpec { start: 1, step: 1, max: 1000, ..spec() };
        assert_eq!(wide.rates().len(), 100, "never more than 100 steps, whatever the schema let through");
        // The example: 50 to 5000 by 50, every 30 s.
        let example = CapacitySpec { start: 50, step: 50, max: 5000, ..spec() };
        assert_eq!((example.rates().len(), example.stages().unwrap().len()), (100, 200));
    }

    #[test]
    fn the_capacity_is_the_last_step_before_the_first_that_missed() {
        let c = spec();
        let m = merged(&[stage(5, 1000, 0), stage(8, 2000, 0), stage(40, 3000, 0), stage(5, 4000, 0)]);
        let r = result(&c, &p99(10), &m, None);
        assert_eq!((r.rate, r.steps, r.planned), (100, 2, 4));
        assert!(r.limited_by.starts_with("the step at 150 requests/s: p99 40.0ms > 10.0ms"), "{}", r.limited_by);
        assert_eq!(verdict_of(&r).1, "CapacityFound");
        // Errors count, and so do requests dropped for want of a connection.
        let mut dropped = stage(5, 2000, 0);
        dropped.dropped = 100;
        let m = merged(&[stage(5, 1000, 0), dropped]);
        let r = result(&c, &p99(10), &m, None);
        assert_eq!(r.rate, 50, "{r:?}");
        assert!(r.limited_by.contains("error ratio"), "{}", r.limited_by);
        // Not even the first: no capacity, failed.
        let r = result(&c, &p99(10), &merged(&[stage(5, 1000, 100)]), None);
        assert_eq!((r.rate, verdict_of(&r).0, verdict_of(&r).1), (0, Verdict::Failed, "NoCapacity"));
        // Every step passed.
        let all = merged(&[stage(1, 10, 0), stage(1, 10, 0), stage(1, 10, 0), stage(1, 10, 0)]);
        let r = result(&c, &p99(10), &all, None);
        assert_eq!((r.rate, r.limited_by.as_str()), (200, ""));
        // Stopped live at the third step: it fails though its figures
        // pass; the fourth never ran.
        let three = merged(&[stage(1, 10, 0), stage(1, 10, 0), stage(1, 10, 0)]);
        let r = result(&c, &p99(10), &three, Some((150, "p99 40.0ms > 10.0ms")));
        assert_eq!((r.rate, r.steps), (100, 2), "{r:?}");
        assert_eq!(r.limited_by, "the step at 150 requests/s: p99 40.0ms > 10.0ms (its last 10 s)");
        // A step without its latencies (no room in the summaries) is not
        // shown to pass a latency threshold.
        let mut blind = merged(&[stage(1, 10, 0), stage(1, 10, 0)]);
        blind.stages[3].histogram = None;
        let r = result(&c, &p99(10), &blind, None);
        assert_eq!(r.rate, 50, "{r:?}");
        assert!(r.limited_by.contains("latencies unknown"), "{r:?}");
    }

    #[test]
    fn a_window_is_judged_only_inside_a_steps_hold() {
        let (c, t) = (spec(), p99(10));
        let slow = {
            let mut h = histogram();
            for _ in 0..100 {
                record(&mut h, Duration::from_millis(50));
            }
            h
        };
        let at = |s: u64| window_missed(&c, &t, Duration::from_secs(s), Duration::from_secs(10), &slow, 100, 0);
        // Step 1 (100/s) runs 30-60 s: its ramp is 30-31 s.
        assert_eq!(at(40), None, "the window 30-40 s holds the ramp");
        let (rate, why) = at(41).unwrap();
        assert_eq!(rate, 100);
        assert!(why.starts_with("p99 50.0ms"), "{why}");
        assert_eq!(at(65), None);
        assert!(window_missed(&c, &t, Duration::from_secs(41), Duration::from_secs(9), &slow, 100, 0).is_none());
        // Fast answers, but requests dropped: the rate was not served.
        let fast = {
            let mut h = histogram();
            record(&mut h, Duration::from_millis(1));
            h
        };
        let dropped = window_missed(&c, &t, Duration::from_secs(41), Duration::from_secs(10), &fast, 1, 9);
        assert!(dropped.unwrap().1.starts_with("error ratio 0.9000"));
        // Beyond the last step: nothing to judge.
        assert_eq!(at(125), None);
    }
}
