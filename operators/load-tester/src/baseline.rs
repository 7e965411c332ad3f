//! `spec.baseline`: the baseline pinned when a run starts (another
//! LoadTest's last finished run, or this one's previous, or the run saved
//! on it with `flotilla.dev/save-baseline`), and the finished run compared
//! with it. Pure.

use std::time::Duration;

use loadgen::summary::{Merged, decode};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::crd::{BaselineStatus, LoadTestStatus, MaxRegression, Percent, SavedBaseline, State, Verdict};
use crate::results::fmt;

/// The latency percentiles compared.
const QUANTILES: [(&str, f64); 3] = [("p50", 0.50), ("p90", 0.90), ("p99", 0.99)];
const ERROR_RATIO: &str = "errorRatio";

/// What LoadTest `name`'s status offers as a baseline: its run, when it
/// Finished with results (else why not, and run 0).
pub fn pin(name: &str, status: Option<&LoadTestStatus>) -> BaselineStatus {
    let mut b = BaselineStatus { load_test_ref: name.to_string(), ..BaselineStatus::default() };
    // A failed run never becomes the baseline: compared with its previous
    // run, a regression would otherwise pass the next time.
    let usable = |s: &&LoadTestStatus| s.state == State::Finished && s.verdict != Verdict::Failed;
    let Some((s, r)) = status.filter(usable).and_then(|s| s.results.as_ref().map(|r| (s, r))) else {
        b.message =
            format!("LoadTest {name} has no finished run that did not fail to compare with: this run is not compared");
        return b;
    };
    b.run = s.run;
    b.figures.insert(ERROR_RATIO.into(), r.error_ratio.clone());
    match decode(&r.histogram) {
        Ok(h) if !h.is_empty() => {
            for (k, q) in QUANTILES {
                let us = h.value_at_quantile(q);
                b.micros.insert(k.into(), i64::try_from(us).unwrap_or(i64::MAX));
                b.figures.insert(k.into(), fmt(Duration::from_micros(us)));
            }
        }
        _ => {
            b.message = format!("run {} of {name} has no latencies (nothing answered): only errors are compared", s.run)
        }
    }
    b
}

/// What LoadTest `name` offers as a baseline: the run saved on it with
/// `flotilla.dev/save-baseline`, else its last run ([`pin`]).
pub fn offered(name: &str, status: Option<&LoadTestStatus>) -> BaselineStatus {
    match status.and_then(|s| s.saved_baseline.as_ref()).filter(|saved| saved.run > 0) {
        Some(saved) => BaselineStatus {
            load_test_ref: name.to_string(),
            run: saved.run,
            message: saved.message.clone(),
            figures: saved.figures.clone(),
            micros: saved.micros.clone(),
            saved_at: saved.saved_at.clone(),
            ..BaselineStatus::default()
        },
        None => pin(name, status),
    }
}

/// A save-baseline value kept as written at most this long.
const MAX_TOKEN: usize = 253;

fn digest(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes()).iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// The annotation's value as status keeps it: a long one as its digest (a
/// status write has to fit the API server's limit).
fn kept_token(token: &str) -> String {
    if token.len() <= MAX_TOKEN { token.to_string() } else { format!("sha256:{}", digest(token)) }
}

/// Whether [`save`] would act on `status` for `token`: a value not acted
/// on yet, and no run going on (cheap: a reconcile asks before copying
/// the status to save from).
pub fn pending(status: &LoadTestStatus, token: &str) -> bool {
    if token.is_empty() || (status.run > 0 && !status.state.is_terminal()) {
        return false;
    }
    let token = kept_token(token);
    status.saved_baseline.as_ref().is_none_or(|s| s.token != token)
}

/// Saves the run of `status` as LoadTest `name`'s baseline when
/// `flotilla.dev/save-baseline` has a value not acted on yet, once the
/// run has ended (a run still going is saved when it ends, if it may
/// be). Returns the Event to tell: (warning, reason, message).
pub fn save(
    name: &str,
    status: &mut LoadTestStatus,
    token: &str,
    now: Timestamp,
) -> Option<(bool, &'static str, String)> {
    if !pending(status, token) {
        return None;
    }
    let token = kept_token(token);
    let pinned = pin(name, Some(status));
    let saved = status.saved_baseline.get_or_insert_with(SavedBaseline::default);
    saved.token.clone_from(&token);
    if pinned.run == 0 {
        saved.refused = format!(
            "flotilla.dev/save-baseline saved nothing: {}",
            if status.run == 0 {
                "no run yet".to_string()
            } else {
                format!(
                    "run {} is {:?} with verdict {:?}, and only a Finished run whose verdict is not Failed can be the baseline",
                    status.run, status.state, status.verdict
                )
            }
        );
        let kept = if saved.run > 0 { format!("; run {} stays the baseline", saved.run) } else { String::new() };
        return Some((true, "BaselineNotSaved", format!("{}{kept}", saved.refused)));
    }
    *saved = SavedBaseline {
        token,
        refused: String::new(),
        run: pinned.run,
        saved_at: Some(Time(now)),
        message: pinned.message,
        figures: pinned.figures,
        micros: pinned.micros,
    };
    let p99 = saved.figures.get("p99").map_or_else(String::new, |p| format!(", p99 {p}"));
    Some((false, "BaselineSaved", format!("run {} saved as the baseline{p99}", saved.run)))
}

/// Compares the finished run (`merged`) with the pinned baseline: the
/// deltas go into `b`, and what regressed past `max` is returned (empty:
/// none, or nothing to compare with).
pub fn compare(b: &mut BaselineStatus, merged: &Merged, max: &MaxRegression) -> Vec<String> {
    if b.run == 0 {
        return Vec::new();
    }
    let mut regressed = Vec::new();
    let limits = [&max.p50, &max.p90, &max.p99];
    for ((k, q), limit) in QUANTILES.into_iter().zip(limits) {
        let Some(&base) = b.micros.get(k) else { continue };
        let limit = limit.as_ref().and_then(Percent::value);
        if merged.histogram.is_empty() {
            b.deltas.insert(k.into(), "nothing answered".into());
            if limit.is_some() {
                regressed.push(format!("{k}: nothing was answered"));
            }
            continue;
        }
        let now = merged.histogram.value_at_quantile(q);
        let change = percent_change(u64::try_from(base).unwrap_or(0), now);
        b.deltas.insert(k.into(), format!("{change:+.1}%"));
        if let Some(l) = limit
            && change > l
        {
            let base_text = b.figures.get(k).cloned().unwrap_or_default();
            regressed.push(format!("{k} {} vs {base_text} ({change:+.1}% > {l}%)", fmt(Duration::from_micros(now))));
        }
    }
    if let Some(base) = b.figures.get(ERROR_RATIO).and_then(|r| r.parse::<f64>().ok()) {
        let points = (merged.error_ratio() - base) * 100.0;
        b.deltas.insert(ERROR_RATIO.into(), format!("{points:+.2} points"));
        if let Some(l) = max.error_ratio.as_ref().and_then(Percent::value)
            && points > l
        {
            regressed.push(format!("error ratio {:.4} vs {base} ({points:+.2} points > {l})", merged.error_ratio()));
        }
    }
    b.message = if regressed.is_empty() {
        format!("within maxRegression of run {} of {}", b.run, b.load_test_ref)
    } else {
        format!("regressed against run {} of {}: {}", b.run, b.load_test_ref, regressed.join("; "))
    };
    regressed
}

/// The verdict of a finished run, its reason and why: the thresholds'
/// (`thresholds`, from [`crate::results::verdict`]), then the pinned
/// baseline's when there is one to compare with (`max`: spec.baseline's
/// limits) — a regression fails a run the thresholds passed
/// (BaselineRegressed), and with no thresholds a run within the limits
/// passes (BaselineMet).
pub fn judge(
    thresholds: (Verdict, String),
    pinned: Option<&mut BaselineStatus>,
    max: Option<&MaxRegression>,
    merged: &Merged,
) -> (Verdict, &'static str, String) {
    let (verdict, why) = thresholds;
    let reason = match verdict {
        Verdict::Failed => "ThresholdsMissed",
        Verdict::Passed => "ThresholdsMet",
        Verdict::None => "Finished",
    };
    let (Some(b), Some(max)) = (pinned.filter(|b| b.run > 0), max) else {
        return (verdict, reason, why);
    };
    let regressed = compare(b, merged, max);
    match (regressed.is_empty(), verdict) {
        (false, Verdict::Failed) => (verdict, reason, format!("{why}; baseline: {}", b.message)),
        (false, _) => (Verdict::Failed, "BaselineRegressed", format!("baseline: {}", b.message)),
        (true, Verdict::None) if max.any() => (Verdict::Passed, "BaselineMet", b.message.clone()),
        (true, _) => (verdict, reason, why),
    }
}

/// `now` against `base` in percent (a zero baseline: any latency is an
/// unbounded rise, said as a large number, not infinity).
fn percent_change(base: u64, now: u64) -> f64 {
    if base == 0 {
        return if now == 0 { 0.0 } else { 1e6 };
    }
    (now as f64 - base as f64) / base as f64 * 100.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Results;

    fn merged(latencies_us: &[u64], errors: u64) -> Merged {
        let mut h = loadgen::summary::histogram();
        for l in latencies_us {
            h.record(*l).unwrap();
        }
        let mut errs = std::collections::BTreeMap::new();
        if errors > 0 {
            errs.insert(loadgen::summary::ErrorKind::Http5xx, errors);
        }
        Merged {
            runners: 1,
            requests: latencies_us.len() as u64 + errors,
            errors: errs,
            not_sent: 0,
            elapsed: Duration::from_secs(1),
            digits: 3,
            histogram: h,
            dropped: 0,
            stages: Vec::new(),
            by_request: Vec::new(),
        }
    }

    fn finished(m: &Merged, run: i64) -> LoadTestStatus {
        let results = Results {
            histogram: loadgen::summary::encode(&m.histogram).unwrap(),
            error_ratio: format!("{:.6}", m.error_ratio()),
            requests: i64::try_from(m.requests).unwrap(),
            ..Results::default()
        };
        LoadTestStatus { state: State::Finished, run, results: Some(results), ..LoadTestStatus::default() }
    }

    fn limit(p: &str) -> Option<Percent> {
        Some(Percent(p.into()))
    }

    #[test]
    fn a_slower_run_regresses_past_its_limit_and_a_same_speed_one_does_not() {
        let base = merged(&[10_000; 100], 0);
        let pinned = pin("golden", Some(&finished(&base, 7)));
        assert_eq!((pinned.run, pinned.micros.get("p99").copied()), (7, Some(10_007)));
        assert_eq!(pinned.figures.get("p99").map(String::as_str), Some("10.0ms"));
        let max = MaxRegression { p99: limit("10%"), error_ratio: limit("0.5%"), ..MaxRegression::default() };

        let mut same = pinned.clone();
        assert!(compare(&mut same, &merged(&[10_500; 100], 0), &max).is_empty(), "{same:?}");
        assert_eq!(same.deltas.get("p99").map(String::as_str), Some("+5.0%"));
        assert_eq!(same.deltas.get("errorRatio").map(String::as_str), Some("+0.00 points"));
        assert!(same.message.starts_with("within maxRegression of run 7 of golden"), "{}", same.message);

        let mut slow = pinned.clone();
        let why = compare(&mut slow, &merged(&[30_000; 100], 0), &max);
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(why[0].starts_with("p99 30.0ms vs 10.0ms (+199.") && why[0].ends_with("% > 10%)"), "{why:?}");
        // p50 and p90 have no limit: shown, not judged.
        assert!(slow.deltas.contains_key("p50") && slow.deltas.contains_key("p90"), "{slow:?}");

        let mut failing = pinned;
        let why = compare(&mut failing, &merged(&[10_000; 98], 2), &max);
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(why[0].contains("+2.00 points > 0.5"), "{why:?}");
    }

    #[test]
    fn the_baseline_judges_beside_the_thresholds() {
        let pinned = pin("golden", Some(&finished(&merged(&[10_000; 100], 0), 2)));
        let max = MaxRegression { p99: limit("10%"), ..MaxRegression::default() };
        let (slow, fast) = (merged(&[30_000; 100], 0), merged(&[10_000; 100], 0));
        let judge_with = |t: Verdict, m: &Merged| {
            let mut b = pinned.clone();
            judge((t, "why".into()), Some(&mut b), Some(&max), m)
        };
        let (v, reason, why) = judge_with(Verdict::Passed, &slow);
        assert_eq!((v, reason), (Verdict::Failed, "BaselineRegressed"));
        assert!(why.starts_with("baseline: regressed against run 2 of golden"), "{why}");
        let (v, reason, why) = judge_with(Verdict::Failed, &slow);
        assert_eq!((v, reason), (Verdict::Failed, "ThresholdsMissed"));
        assert!(why.starts_with("why; baseline: regressed"), "{why}");
        assert_eq!(judge_with(Verdict::None, &fast).0, Verdict::Passed);
        assert_eq!(judge_with(Verdict::None, &fast).1, "BaselineMet");
        assert_eq!(judge_with(Verdict::Passed, &fast), (Verdict::Passed, "ThresholdsMet", "why".to_string()));
        // Nothing pinned to compare with: the thresholds alone.
        let mut none = pin("golden", None);
        assert_eq!(judge((Verdict::None, "w".into()), Some(&mut none), Some(&max), &slow).1, "Finished");
        assert_eq!(judge((Verdict::Passed, "w".into()), None, None, &slow).1, "ThresholdsMet");
    }

    #[test]
    fn nothing_to_compare_with_is_said_and_judges_nothing() {
        let none = pin("golden", None);
        assert_eq!(none.run, 0);
        assert!(none.message.contains("no finished run"), "{}", none.message);
        let running = LoadTestStatus { state: State::Executing, run: 3, ..LoadTestStatus::default() };
        assert_eq!(pin("golden", Some(&running)).run, 0);
        // A run that failed its verdict never becomes the baseline.
        let failed = LoadTestStatus { verdict: Verdict::Failed, ..finished(&merged(&[5_000; 10], 0), 4) };
        assert_eq!(pin("golden", Some(&failed)).run, 0);
        // Limits none: the figures are compared, nothing is judged.
        let mut ok = pin("golden", Some(&finished(&merged(&[5_000; 10], 0), 5)));
        let judged = judge(
            (Verdict::None, "w".into()),
            Some(&mut ok),
            Some(&MaxRegression::default()),
            &merged(&[9_000; 10], 0),
        );
        assert_eq!((judged.0, judged.1), (Verdict::None, "Finished"));
        assert!(ok.deltas.contains_key("p50"), "{ok:?}");
        let mut b = none;
        let max = MaxRegression { p99: limit("0%"), ..MaxRegression::default() };
        assert!(compare(&mut b, &merged(&[1_000_000; 10], 5), &max).is_empty());
        assert!(b.deltas.is_empty());
    }

    #[test]
    fn a_run_that_answered_nothing_regresses_where_latency_is_judged() {
        let pinned = pin("golden", Some(&finished(&merged(&[5_000; 10], 0), 1)));
        let mut b = pinned;
        let max = MaxRegression { p50: limit("50%"), ..MaxRegression::default() };
        let why = compare(&mut b, &merged(&[], 10), &max);
        assert_eq!(why, ["p50: nothing was answered"]);
        assert_eq!(Percent("12.5%".into()).value(), Some(12.5));
        assert_eq!(Percent("x".into()).value(), None);
    }
}
