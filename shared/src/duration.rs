//! Durations as custom resources carry them: Go's syntax (`90s`, `5m`,
//! `1h30m`, `250ms`), which users know from every other Kubernetes tool.
//! The schema checks the syntax at admission; [`parse`] reads it. Pure.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A duration in Go's syntax: a sequence of numbers with units ms, s, m or
/// h, e.g. 90s, 5m, 1h30m.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(transparent)]
pub struct GoDuration(#[schemars(length(min = 2, max = 32), pattern(r"^([0-9]{1,9}(ms|s|m|h))+$"))] pub String);

impl GoDuration {
    pub fn new(s: &str) -> Self {
        GoDuration(s.to_string())
    }

    /// The duration (the schema admits only what this parses, up to overflow).
    pub fn get(&self) -> Result<Duration, String> {
        parse(&self.0)
    }
}

/// Parses a Go duration (`90s`, `5m`, `1h30m`, `250ms`).
pub fn parse(s: &str) -> Result<Duration, String> {
    if s.is_empty() {
        return Err("an empty duration".into());
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return Err(format!("{s:?} is not a duration like 90s, 5m or 1h30m"));
        }
        let n: u64 = rest[..digits].parse().map_err(|_| format!("{s:?}: bad number"))?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (Duration::from_millis(1), 2)
        } else if rest.starts_with('s') {
            (Duration::from_secs(1), 1)
        } else if rest.starts_with('m') {
            (Duration::from_secs(60), 1)
        } else if rest.starts_with('h') {
            (Duration::from_secs(3600), 1)
        } else {
            return Err(format!("{s:?} is not a duration like 90s, 5m or 1h30m (units ms, s, m, h)"));
        };
        rest = &rest[len..];
        let part =
            u32::try_from(n).ok().and_then(|n| unit.checked_mul(n)).ok_or_else(|| format!("{s:?} is too long"))?;
        total = total.checked_add(part).ok_or_else(|| format!("{s:?} is too long"))?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_and_nonsense_is_refused() {
        assert_eq!(parse("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["", "5", "5d", "m5", "1.5s", "9999999999s"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
