//! Durations, one dialect everywhere: Go's `time.ParseDuration` (`90s`,
//! `5m`, `1h30m`, `250ms`, `1.5h`), which users know from every other
//! Kubernetes tool — in custom resources, flags and annotations alike.
//! kube's own [`kube::core::Duration`] parses it; [`parse`] first checks
//! the grammar, because kube's parser takes any float (`NaN`, `inf`, `1e30`)
//! and panics on it, and a duration can come from an untrusted author.
//! Only non-negative durations of at most 9 integer digits per part are
//! taken. The CRD schema's pattern is the same contract at admission.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A duration in Go's syntax: numbers (with an optional fraction) with
/// units ns, us, ms, s, m or h, e.g. 90s, 5m, 1h30m, 1.5h.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(transparent)]
pub struct GoDuration(
    #[schemars(length(min = 2, max = 32), pattern(r"^([0-9]{1,9}(\.[0-9]{1,9})?(ns|us|ms|s|m|h))+$"))] pub String,
);

impl GoDuration {
    pub fn new(s: &str) -> Self {
        GoDuration(s.to_string())
    }

    /// The duration (the schema admits only what this parses).
    pub fn get(&self) -> Result<Duration, String> {
        parse(&self.0)
    }
}

/// Whether `s` is one or more `<digits>[.<digits>]<unit>` parts, each with
/// at most 9 digits on either side of the point, 64 characters at most (so
/// no sum overflows).
fn well_formed(s: &str) -> bool {
    if s.len() > 64 {
        return false;
    }
    let mut rest = s;
    while !rest.is_empty() {
        let int = rest.bytes().take_while(u8::is_ascii_digit).count();
        rest = &rest[int..];
        if let Some(after) = rest.strip_prefix('.') {
            let frac = after.bytes().take_while(u8::is_ascii_digit).count();
            if frac == 0 || frac > 9 {
                return false;
            }
            rest = &after[frac..];
        }
        if int == 0 || int > 9 {
            return false;
        }
        let unit = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"].into_iter().find(|u| rest.starts_with(u));
        let Some(unit) = unit else { return false };
        rest = &rest[unit.len()..];
    }
    !s.is_empty()
}

/// Parses a Go duration (`90s`, `5m`, `1h30m`, `250ms`, `1.5h`; also `0`).
pub fn parse(s: &str) -> Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if !well_formed(s) {
        return Err(format!("{s:?} is not a duration like 90s, 5m, 1h30m or 1.5h (units ns, us, ms, s, m, h)"));
    }
    s.parse::<kube::core::Duration>().map(Duration::from).map_err(|e| format!("{s:?}: {e}"))
}

/// [`parse`], for clap's `value_parser`: flags take the same dialect.
pub fn parse_flag(s: &str) -> Result<Duration, String> {
    parse(s)
}

/// A duration as Go prints it, for messages: `1h30m`, `90s`, `250ms`.
pub fn format(d: Duration) -> String {
    let (mut secs, ms) = (d.as_secs(), d.subsec_millis());
    if secs == 0 {
        return format!("{}ms", ms);
    }
    let mut out = String::new();
    for (unit, size) in [("h", 3600), ("m", 60)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if secs > 0 || ms > 0 || out.is_empty() {
        if ms > 0 { out.push_str(&format!("{secs}.{ms:03}s")) } else { out.push_str(&format!("{secs}s")) }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_and_nonsense_is_refused() {
        assert_eq!(parse("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)), "Go's fractions");
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        // What kube's parser would panic on, and what no Go duration is.
        for bad in ["", "5", "5d", "m5", "9999999999s", "NaNh", "infs", "1e30h", "-5s", "+5s", "2 weeks", "1.s", ".5s"]
        {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formatted_as_go_prints() {
        assert_eq!(format(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format(Duration::from_secs(90)), "1m30s");
        assert_eq!(format(Duration::from_millis(250)), "250ms");
        assert_eq!(format(Duration::from_millis(1500)), "1.500s");
        assert_eq!(format(Duration::from_secs(3600)), "1h");
    }

    proptest::proptest! {
        /// Whatever the input, parsing answers and never panics.
        #[test]
        fn parse_never_panics(s in "[0-9.a-zµ+-]{0,14}") {
            let _ = parse(&s);
        }

        /// What parses agrees with Go's arithmetic for whole parts.
        #[test]
        fn whole_parts_add_up(h in 0u64..1000, m in 0u64..1000, sec in 0u64..1000) {
            proptest::prop_assert_eq!(parse(&format!("{h}h{m}m{sec}s")), Ok(Duration::from_secs(h * 3600 + m * 60 + sec)));
        }
    }
}
