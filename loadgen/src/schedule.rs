//! When each request of a ramping arrival-rate profile is due, as k6's
//! ramping-arrival-rate executor plans it: stage k ramps linearly from the
//! previous stage's rate (the first from 0) to its own over its duration.
//! The cumulative count of planned requests N(t) is the integral of that
//! rate; request i (from 0) is due at the time N(t) = i, so a stage holds
//! as many requests as its integral, within one. Pure.

use std::time::Duration;

/// One stage: ramp to `rate` requests per second over `duration`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stage {
    pub duration: Duration,
    pub rate: f64,
}

/// A stage's place in the profile.
#[derive(Debug, Clone, Copy)]
struct Span {
    /// When it starts, in seconds from the run's start.
    start: f64,
    /// Its length in seconds.
    len: f64,
    /// The rate at its start and end (requests per second).
    from: f64,
    to: f64,
    /// Requests planned before it (N at its start).
    before: f64,
}

impl Span {
    /// Requests planned within it (its integral).
    fn count(&self) -> f64 {
        (self.from + self.to) / 2.0 * self.len
    }
}

/// The planned requests of a profile.
#[derive(Debug, Clone)]
pub struct Schedule {
    spans: Vec<Span>,
}

impl Schedule {
    /// The schedule of `stages`; negative or non-finite rates count as 0.
    pub fn new(stages: &[Stage]) -> Schedule {
        let mut spans = Vec::with_capacity(stages.len());
        let (mut start, mut from, mut before) = (0.0, 0.0, 0.0);
        for s in stages {
            let to = if s.rate.is_finite() { s.rate.max(0.0) } else { 0.0 };
            let span = Span { start, len: s.duration.as_secs_f64(), from, to, before };
            before += span.count();
            start += span.len;
            from = to;
            spans.push(span);
        }
        Schedule { spans }
    }

    /// The whole profile's length.
    pub fn length(&self) -> Duration {
        self.spans.last().map_or(Duration::ZERO, |s| Duration::from_secs_f64(s.start + s.len))
    }

    /// How many requests it plans: the i with N(t) = i for some t before
    /// its end (the integral, rounded up).
    pub fn total(&self) -> u64 {
        let n = self.spans.last().map_or(0.0, |s| s.before + s.count());
        // A whole-number integral must not gain one by rounding error.
        let n = (n - 1e-9).ceil();
        if n <= 0.0 { 0 } else { n as u64 }
    }

    /// How many requests stage `k` plans (requests due within it).
    pub fn planned(&self, k: usize) -> u64 {
        let Some(span) = self.spans.get(k) else { return 0 };
        let ceil = |x: f64| {
            let c = (x - 1e-9).ceil();
            if c <= 0.0 { 0u64 } else { c as u64 }
        };
        ceil(span.before + span.count()).saturating_sub(ceil(span.before))
    }

    /// When request `i` is due (from the run's start) and its stage; None
    /// past the profile's end.
    pub fn due(&self, i: u64) -> Option<(Duration, usize)> {
        let i = i as f64;
        // The stage whose range of N holds i (a stage planning nothing
        // holds none).
        let (k, span) =
            self.spans.iter().enumerate().find(|(_, s)| i >= s.before - 1e-9 && i < s.before + s.count() - 1e-9)?;
        let m = (i - span.before).max(0.0);
        // Solve from·t + (to-from)/(2·len)·t² = m for t in [0, len], in the
        // form that stays exact for a flat stage and one ramping from 0.
        let slope = if span.len > 0.0 { (span.to - span.from) / span.len } else { 0.0 };
        let root = (span.from * span.from + 2.0 * slope * m).max(0.0).sqrt();
        let denom = span.from + root;
        let t = if m == 0.0 || denom <= 0.0 { 0.0 } else { 2.0 * m / denom };
        Some((Duration::from_secs_f64(span.start + t.clamp(0.0, span.len)), k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stage(secs: f64, rate: f64) -> Stage {
        Stage { duration: Duration::from_secs_f64(secs), rate }
    }

    /// Every due time of a schedule, in order.
    fn all(s: &Schedule) -> Vec<(Duration, usize)> {
        (0..s.total()).map(|i| s.due(i).unwrap_or_else(|| panic!("request {i} of {}", s.total()))).collect()
    }

    #[test]
    fn a_flat_stage_is_a_constant_rate() {
        // A ramp to 10/s over 0 s cannot be: the first stage ramps from 0.
        let s = Schedule::new(&[stage(10.0, 10.0), stage(10.0, 10.0)]);
        assert_eq!(s.total(), 50 + 100);
        assert_eq!((s.planned(0), s.planned(1)), (50, 100));
        // In the flat stage, requests are 100 ms apart.
        let d = all(&s);
        assert_eq!(d[50], (Duration::from_secs(10), 1));
        let gap = d[61].0 - d[60].0;
        assert!((gap.as_secs_f64() - 0.1).abs() < 1e-6, "{gap:?}");
    }

    #[test]
    fn a_ramp_from_zero_plans_its_triangle_and_speeds_up() {
        // 0 -> 40/s over 10 s: 200 requests, 5 in the first second (N(1) =
        // 40/20 = 2: requests 0, 1 at t < 1 s ... by N = t²·2).
        let s = Schedule::new(&[stage(10.0, 40.0)]);
        assert_eq!(s.total(), 200);
        let d = all(&s);
        let per_second: Vec<usize> = (0..10).map(|sec| d.iter().filter(|(t, _)| t.as_secs() == sec).count()).collect();
        // N(t) = 2t²: per second 2, 6, 10, ... 38.
        assert_eq!(per_second, vec![2, 6, 10, 14, 18, 22, 26, 30, 34, 38]);
        assert_eq!(d[0].0, Duration::ZERO);
    }

    #[test]
    fn a_stage_at_rate_zero_plans_nothing_and_ramping_down_ends_at_zero() {
        let s = Schedule::new(&[stage(5.0, 0.0), stage(10.0, 20.0), stage(10.0, 0.0)]);
        assert_eq!((s.planned(0), s.planned(1), s.planned(2)), (0, 100, 100));
        let d = all(&s);
        assert!(d.iter().all(|(t, _)| *t >= Duration::from_secs(5)));
        assert!(d.last().is_some_and(|(t, k)| *k == 2 && *t < Duration::from_secs(25)));
        assert_eq!(s.due(200), None);
        assert_eq!(Schedule::new(&[]).total(), 0);
        assert_eq!(Schedule::new(&[stage(3.0, f64::NAN)]).total(), 0);
    }

    proptest! {
        /// For any profile: due times never go back, each lies within its
        /// stage, each stage plans its integral within one, and the whole
        /// plans the whole integral within one.
        #[test]
        fn each_stage_plans_its_integral(
            stages in proptest::collection::vec((1u64..40, 0u32..400), 1..8),
        ) {
            let stages: Vec<Stage> = stages.iter().map(|(d, r)| stage(*d as f64 / 2.0, f64::from(*r))).collect();
            let s = Schedule::new(&stages);
            let d = all(&s);
            prop_assert_eq!(s.due(s.total()), None);
            let mut start = 0.0;
            let mut from = 0.0;
            let mut integral = 0.0;
            for (k, st) in stages.iter().enumerate() {
                let len = st.duration.as_secs_f64();
                let want = (from + st.rate) / 2.0 * len;
                integral += want;
                let got: Vec<_> = d.iter().filter(|(_, j)| *j == k).collect();
                prop_assert_eq!(got.len() as u64, s.planned(k));
                prop_assert!((got.len() as f64 - want).abs() <= 1.0 + 1e-6, "stage {}: {} vs {}", k, got.len(), want);
                for (t, _) in &got {
                    let t = t.as_secs_f64();
                    prop_assert!(t >= start - 1e-6 && t <= start + len + 1e-6, "{} outside stage {}", t, k);
                }
                start += len;
                from = st.rate;
            }
            prop_assert!((d.len() as f64 - integral).abs() <= 1.0 + 1e-6);
            prop_assert!(d.windows(2).all(|w| w[0].0 <= w[1].0));
        }

        /// The counts planned in any window follow the rate's integral
        /// over it within one (what a server counting per second sees).
        #[test]
        fn any_window_holds_its_integral(rate in 1u32..500, secs in 2u64..30, a in 0.0f64..1.0, w in 0.05f64..1.0) {
            let len = secs as f64;
            let s = Schedule::new(&[stage(len, f64::from(rate))]);
            let (lo, hi) = (a * len * (1.0 - w), a * len * (1.0 - w) + w * len);
            let n = all(&s).iter().filter(|(t, _)| t.as_secs_f64() >= lo && t.as_secs_f64() < hi).count();
            let big_n = |t: f64| f64::from(rate) / (2.0 * len) * t * t;
            let want = big_n(hi) - big_n(lo);
            prop_assert!((n as f64 - want).abs() <= 1.0 + 1e-6, "{} vs {}", n, want);
        }
    }
}
