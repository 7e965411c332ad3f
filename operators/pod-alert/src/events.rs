//! The last Warning Events about an incident's log-source pod, shown beside
//! its log tail (kubelet's "BackOff: Back-off restarting failed container",
//! "Unhealthy: Liveness probe failed: …", "FailedMount: …" say what the log
//! often cannot).
//!
//! Read once with the log tail ([`crate::log_reads`]), under the same bound
//! on reads in flight and the same timeout; held with the tail
//! ([`crate::logs::Tail::events`]), so every PodAlert over one incident
//! holds them once. Redacted by the PodAlert's [`Redactor`] as the tail is:
//! an Event's message can quote a probe's URL or a command line. A failed
//! read is one line saying so, in place of the events: it never holds an
//! incident back.

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::ListParams;

use crate::redact::Redactor;

/// Events kept per incident, the newest.
pub const MAX_EVENTS: usize = 5;
/// Bytes of one event's line at most (the start is kept: reason first).
pub const MAX_LINE: usize = 256;

/// When `e` last happened: its series' last sighting, else its
/// lastTimestamp, eventTime, firstTimestamp, creation (events.k8s.io
/// writers fill eventTime and series, core writers the timestamps).
fn last_seen(e: &Event) -> Option<Timestamp> {
    e.series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| t.0)
        .or_else(|| e.last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| e.event_time.as_ref().map(|t| t.0))
        .or_else(|| e.first_timestamp.as_ref().map(|t| t.0))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// How often `e` happened: its series' count, else its count, else once.
fn count(e: &Event) -> i32 {
    e.series.as_ref().and_then(|s| s.count).or(e.count).unwrap_or(1).max(1)
}

/// The first `max` bytes of `s` (on a character boundary), "…" ending it
/// when cut.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The lines shown for `events`: the last [`MAX_EVENTS`] by when they last
/// happened, newest last, each "<reason>: <message> (xN)" on one line,
/// the message redacted and then the line cut to [`MAX_LINE`] bytes
/// (redacted before the cut, so a secret the cut splits is still found by
/// what precedes it).
pub fn lines(mut events: Vec<Event>, redactor: &Redactor) -> Vec<String> {
    // Stable: events with the same time keep the API's order.
    events.sort_by_key(last_seen);
    let skip = events.len().saturating_sub(MAX_EVENTS);
    events
        .iter()
        .skip(skip)
        .map(|e| {
            let reason = e.reason.as_deref().unwrap_or("Unknown");
            let message = e.message.as_deref().unwrap_or("").split_whitespace().collect::<Vec<_>>().join(" ");
            // The message alone: a rule that takes the rest of its line
            // (an Authorization header) must not take the count.
            cut(&format!("{reason}: {} (x{})", redactor.redact(&message), count(e)), MAX_LINE)
        })
        .collect()
}

/// Lines a status held (an operator restart), held again as read ones are:
/// redacted as this spec redacts (the status may predate its patterns),
/// at most [`MAX_EVENTS`] of [`MAX_LINE`] bytes.
pub fn restored(held: &[String], redactor: &Redactor) -> Vec<String> {
    let skip = held.len().saturating_sub(MAX_EVENTS);
    held.iter().skip(skip).map(|l| cut(&redactor.redact(l), MAX_LINE)).collect()
}

/// What a read that failed says, in place of the events.
fn unavailable(why: &str) -> Vec<String> {
    vec![cut(&format!("events unavailable: {why}"), MAX_LINE)]
}

/// Reads the Warning Events about `pod` in `namespace` and makes them
/// [`lines`]; a failure is one "events unavailable: …" line, redacted too.
pub async fn read(client: &kube::Client, namespace: &str, pod: &str, redactor: &Redactor) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    // resourceVersion=0: served from the API server's watch cache, not
    // read from etcd once per incident (`cargo xtask bench scale` counted
    // 57 such LISTs in 3 minutes of churn); a moment stale at most.
    let params = ListParams::default()
        .fields(&format!("involvedObject.name={pod},involvedObject.kind=Pod,type=Warning"))
        .match_any();
    let listed = crate::logs::within_read_bound(api.list(&params)).await;
    match listed {
        Ok(Ok(list)) => lines(list.items, redactor),
        Ok(Err(kube::Error::Api(s))) => {
            tracing::warn!(namespace, pod, error = %s.message, "could not read the pod's Events");
            unavailable(&redactor.redact(&s.message))
        }
        Ok(Err(e)) => unavailable(&redactor.redact(&e.to_string())),
        Err(why) => unavailable(&why),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::core::v1::EventSeries;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn ev(reason: &str, message: &str, last: i64, count: i32) -> Event {
        Event {
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_timestamp: Some(Time(at(last))),
            count: Some(count),
            type_: Some("Warning".into()),
            ..Event::default()
        }
    }

    fn r() -> Redactor {
        Redactor::defaults().unwrap()
    }

    #[test]
    fn newest_last_at_most_five_with_counts() {
        let events = vec![
            ev("BackOff", "Back-off restarting failed container app in pod web-1", 90, 12),
            ev("Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 500", 10, 3),
            ev("Old1", "a", 1, 1),
            ev("Old2", "b", 2, 1),
            ev("Mid", "c", 50, 1),
            ev("Mid2", "d", 60, 2),
        ];
        let got = lines(events, &r());
        assert_eq!(
            got,
            vec![
                "Old2: b (x1)",
                "Unhealthy: Liveness probe failed: HTTP probe failed with statuscode: 500 (x3)",
                "Mid: c (x1)",
                "Mid2: d (x2)",
                "BackOff: Back-off restarting failed container app in pod web-1 (x12)",
            ]
        );
        assert!(lines(Vec::new(), &r()).is_empty());
    }

    #[test]
    fn a_series_and_event_time_order_as_their_last_sighting() {
        // events.k8s.io writers: eventTime and a series, no lastTimestamp.
        let series = Event {
            reason: Some("FailedMount".into()),
            message: Some("MountVolume.SetUp failed".into()),
            event_time: Some(MicroTime(at(5))),
            series: Some(EventSeries { count: Some(7), last_observed_time: Some(MicroTime(at(100))) }),
            ..Event::default()
        };
        let single = Event {
            reason: Some("Failed".into()),
            message: Some("Error: ImagePullBackOff".into()),
            event_time: Some(MicroTime(at(40))),
            ..Event::default()
        };
        let got = lines(vec![series, single, ev("BackOff", "x", 20, 1)], &r());
        assert_eq!(
            got,
            vec![
                "BackOff: x (x1)",
                "Failed: Error: ImagePullBackOff (x1)",
                "FailedMount: MountVolume.SetUp failed (x7)"
            ]
        );
    }

    #[test]
    fn a_line_is_one_line_cut_on_a_character_boundary() {
        let long = format!("first\nsecond {}", "é".repeat(400));
        let got = lines(vec![ev("Failed", &long, 1, 1)], &r());
        assert_eq!(got.len(), 1);
        assert!(got[0].len() <= MAX_LINE, "{}", got[0].len());
        assert!(got[0].starts_with("Failed: first second é"));
        assert!(got[0].ends_with('…') && !got[0].contains('\n'));
    }

    #[test]
    fn redacted_before_the_cut() {
        // Longer than a line may be only until the token is redacted: cut
        // first, the count would be lost and part of the token shown.
        let message = format!("{} Authorization: Bearer {}", "x".repeat(180), "s3cr3tt0k3n".repeat(10));
        let got = lines(vec![ev("Unhealthy", &message, 1, 1)], &r());
        assert!(!got[0].contains("s3cr3t"), "{}", got[0]);
        assert!(got[0].ends_with("[redacted] (x1)"), "{}", got[0]);
        let plain = lines(vec![ev("Unhealthy", "probe GET http://admin:hunter2@db:80/ failed", 1, 1)], &r());
        assert!(!plain[0].contains("hunter2"), "{}", plain[0]);
        let custom = Redactor::new(false, vec![regex::Regex::new("tenant-[0-9]+").unwrap()]).unwrap();
        assert_eq!(lines(vec![ev("Failed", "tenant-42 quota", 1, 1)], &custom), vec!["Failed: [redacted] quota (x1)"]);
    }

    #[test]
    fn restored_lines_are_redacted_and_bounded_again() {
        let held: Vec<String> = (0..7).map(|n| format!("Failed{n}: token=abc{n} {}", "y".repeat(300))).collect();
        let got = restored(&held, &r());
        assert_eq!(got.len(), MAX_EVENTS);
        assert!(got[0].starts_with("Failed2: token=[redacted]"), "{}", got[0]);
        assert!(got.iter().all(|l| l.len() <= MAX_LINE && !l.contains("abc")), "{got:?}");
    }

    #[test]
    fn unavailable_is_one_bounded_line() {
        let got = unavailable(&"forbidden ".repeat(100));
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with("events unavailable: forbidden") && got[0].len() <= MAX_LINE);
    }
}
