//! A cron line as a Kubernetes CronJob takes it: five fields or a nickname
//! (`@daily`, …), read by `croner`: a LoadTest's `spec.schedule` (in UTC)
//! and the CronJobs pod-alert watches for missed runs (in their
//! `spec.timeZone`). Pure.

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;

/// A checked schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    line: String,
    cron: Cron,
}

impl Schedule {
    /// `line` checked: five fields (no seconds, no year) or a nickname
    /// (`@daily`, …); why not otherwise.
    pub fn parse(line: &str) -> Result<Self, String> {
        let trimmed = line.trim();
        if trimmed.starts_with("TZ=") || trimmed.starts_with("CRON_TZ=") {
            return Err(format!("schedule {line:?}: time zones are not supported (the schedule is in UTC)"));
        }
        if trimmed.starts_with('@') && !NICKNAMES.contains(&trimmed) {
            return Err(format!("schedule {line:?}: one of {} or five fields", NICKNAMES.join(", ")));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(trimmed)
            .map_err(|e| format!("schedule {line:?}: {e}"))?;
        Ok(Self { line: trimmed.to_string(), cron })
    }

    /// The first time it names strictly after `after`, in UTC, to the
    /// second (None when it names no time in the next few years, e.g.
    /// "0 0 30 2 *").
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        self.next_after_in(after, &TimeZone::UTC)
    }

    /// [`Self::next_after`] with the fields read in `tz`.
    pub fn next_after_in(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let zoned = after.to_zoned(tz.clone());
        self.cron.find_next_occurrence(&zoned, false).ok().map(|z| z.timestamp())
    }

    pub fn line(&self) -> &str {
        &self.line
    }
}

/// The nicknames a CronJob takes (besides five fields).
const NICKNAMES: [&str; 7] = ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"];

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn five_fields_and_nicknames_name_the_next_minute_in_utc() {
        let s = Schedule::parse("0 3 * * *").unwrap();
        assert_eq!(s.next_after(at("2026-11-28T15:04:13Z")), Some(at("2026-11-29T03:00:00Z")));
        // Strictly after: a run started at 03:00:00 is not due again then.
        assert_eq!(s.next_after(at("2026-11-29T03:00:00Z")), Some(at("2026-11-30T03:00:00Z")));
        let every = Schedule::parse("* * * * *").unwrap();
        assert_eq!(every.next_after(at("2026-11-28T15:04:13Z")), Some(at("2026-11-28T15:05:00Z")));
        let weekdays = Schedule::parse("30 6 * * MON-FRI").unwrap();
        // 28 Nov 2026 is a Saturday.
        assert_eq!(weekdays.next_after(at("2026-11-28T15:04:13Z")), Some(at("2026-11-30T06:30:00Z")));
        let daily = Schedule::parse("@daily").unwrap();
        assert_eq!(daily.next_after(at("2026-11-28T15:04:13Z")), Some(at("2026-11-29T00:00:00Z")));
        assert_eq!(Schedule::parse(" */15 * * * * ").unwrap().line(), "*/15 * * * *");
    }

    #[test]
    fn what_a_cronjob_would_refuse_is_refused_with_the_line() {
        for bad in [
            "",
            "* * * *",
            "0 0 3 * * *",
            "61 * * * *",
            "* 24 * * *",
            "@reboot",
            "@every 5m",
            "TZ=Europe/Paris 0 3 * * *",
            "nonsense",
        ] {
            let err = Schedule::parse(bad).expect_err(bad);
            assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
        }
    }

    #[test]
    fn a_date_that_never_comes_names_no_time() {
        let s = Schedule::parse("0 0 30 2 *").unwrap();
        assert_eq!(s.next_after(at("2026-11-28T15:04:13Z")), None);
    }
}
