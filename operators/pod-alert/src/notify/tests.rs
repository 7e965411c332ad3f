//! The notification tests that span sinks, and the fixtures every sink's
//! tests share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use super::*;
use crate::observe::Key;
use crate::pod::Workload;

pub(crate) fn incident(phase: Phase) -> Incident {
    let t = Timestamp::from_second(1_800_000_000).unwrap();
    Incident {
        key: Key {
            namespace: "team-a".into(),
            workload: Workload { kind: "Deployment".into(), name: "web".into() },
            container: "app".into(),
            reason: Reason::CrashLoopBackOff,
        },
        phase,
        since: t,
        changed: t,
        pods: (0..12).map(|i| format!("web-{i:02}")).collect(),
        message: "4 restarts, last: Error, exit code 1".into(),
        restarts: 4,
        notified: true,
        silenced: false,
        notified_level: 3,
        incarnations: BTreeSet::new(),
        last_opened: Some(t),
        log_source: None,
        logs: Some(Tail::detached("starting\npanic: boom ```")),
        silencing: None,
        slack_thread: None,
    }
}

/// An opening notification of `incident`, as the PodAlert `team-a/crashes` sends it.
pub(crate) fn opened(incident: IncidentView) -> Notification {
    Notification {
        podalert: ("team-a".into(), "crashes".into()),
        change: Change::Opened { replaces: None },
        incident,
        at: Timestamp::from_second(1_800_000_100).unwrap(),
    }
}

pub(crate) fn note(change: Change, phase: Phase) -> Notification {
    Notification {
        podalert: ("team-a".into(), "crashes".into()),
        change,
        incident: IncidentView::of(&incident(phase), 50, 8192),
        at: Timestamp::from_second(1_800_000_100).unwrap(),
    }
}

#[test]
fn webhook_document_has_the_documented_fields() {
    let v = note(Change::Opened { replaces: None }, Phase::Firing).webhook();
    assert_eq!(v["apiVersion"], API_VERSION);
    assert_eq!(v["kind"], KIND);
    assert_eq!(v["event"], "opened");
    assert_eq!(v["podAlert"]["name"], "crashes");
    assert_eq!(v["incident"]["workload"], "Deployment/web");
    assert_eq!(v["incident"]["podCount"], 12);
    assert_eq!(v["incident"]["pods"].as_array().unwrap().len(), 10);
    assert_eq!(v["incident"]["severity"], "critical");
    assert!(v["incident"]["logs"].as_str().unwrap().contains("panic: boom"));
    let r = note(Change::Resolved, Phase::Resolved { at: Timestamp::from_second(1_800_000_050).unwrap() }).webhook();
    assert_eq!(r["event"], "resolved");
    assert!(r["incident"]["resolvedAt"].is_string());
}

/// The pod's Warning Events: in the webhook, Slack (escaped as the logs
/// are) and Alertmanager, never in the Event note; none when the
/// PodAlert does not show them.
#[test]
fn warning_events_go_beside_the_logs_where_the_podalert_shows_them() {
    let mut i = incident(Phase::Firing);
    let tail = Tail::detached("panic: boom");
    tail.set_events(vec![
        "Unhealthy: Liveness probe failed: <!channel> ``` (x3)".into(),
        "BackOff: Back-off restarting failed container app (x7)".into(),
    ]);
    i.logs = Some(tail);
    let n = opened(IncidentView::of(&i, 50, 8192).with_events(&i, true));
    let events = n.webhook()["incident"]["events"].clone();
    assert_eq!(events[1], "BackOff: Back-off restarting failed container app (x7)", "newest last");
    assert_eq!(events.as_array().unwrap().len(), 2);
    let slack = n.slack().to_string();
    assert!(slack.contains("*Warning Events*"), "{slack}");
    assert!(slack.contains("Liveness probe failed: &lt;!channel&gt; '''"), "{slack}");
    assert!(!slack.contains("<!channel>"), "{slack}");
    assert!(!n.event_note().contains("Back-off restarting"), "{}", n.event_note());
    let am = alertmanager_alerts(("team-a", "crashes"), &[&i], (50, 8192, true), None, false, n.at);
    assert_eq!(
        am[0]["annotations"]["events"],
        "Unhealthy: Liveness probe failed: <!channel> ``` (x3)\nBackOff: Back-off restarting failed container app (x7)"
    );
    // spec.logs.events false: nowhere, though the shared tail holds them.
    let off = IncidentView::of(&i, 50, 8192).with_events(&i, false);
    assert!(off.events.is_empty());
    assert!(serde_json::to_value(&off).unwrap().get("events").is_none());
    let am = alertmanager_alerts(("team-a", "crashes"), &[&i], (50, 8192, false), None, false, n.at);
    assert!(am[0]["annotations"].get("events").is_none());
    // None read: none shown.
    let plain = incident(Phase::Firing);
    assert!(IncidentView::of(&plain, 50, 8192).with_events(&plain, true).events.is_empty());
}

#[test]
fn the_runbook_link_is_filled_in_and_what_pods_name_cannot_leave_its_place() {
    let t = "https://runbooks.example.com/{reason}/{namespace}/{workload}?c={container}&x={unknown}";
    let mut v = IncidentView::of(&incident(Phase::Firing), 50, 8192);
    assert_eq!(
        runbook_url(t, &v),
        "https://runbooks.example.com/CrashLoopBackOff/team-a/Deployment/web?c=app&x={unknown}"
    );
    v.container = "a?b#c&d=e%@evil.example {namespace}".into();
    assert_eq!(
        runbook_url("https://r.example/{container}", &v),
        "https://r.example/a%3Fb%23c%26d%3De%25%40evil.example%20%7Bnamespace%7D",
        "encoded, and never substituted twice"
    );
    assert_eq!(runbook_url("https://r.example/{", &v), "https://r.example/{");
}

#[test]
fn every_sink_carries_the_runbook_link_and_none_without_one() {
    let mut n = note(Change::Opened { replaces: None }, Phase::Firing);
    n.incident = n.incident.clone().with_runbook(Some("https://r.example/{reason}"));
    let url = "https://r.example/CrashLoopBackOff";
    assert_eq!(n.webhook()["incident"]["runbookURL"], url);
    assert!(n.slack()["blocks"].to_string().contains(&format!("<{url}|Runbook>")));
    assert!(n.event_note().ends_with(&format!(" · runbook: {url}")), "{}", n.event_note());
    let firing = incident(Phase::Firing);
    let now = Timestamp::from_second(1_800_000_100).unwrap();
    let am = alertmanager_alerts(
        ("team-a", "crashes"),
        &[&firing],
        (50, 8192, true),
        Some("https://r.example/{reason}"),
        false,
        now,
    );
    assert_eq!(am[0]["annotations"]["runbook_url"], url);

    let plain = note(Change::Opened { replaces: None }, Phase::Firing);
    assert!(plain.webhook()["incident"].get("runbookURL").is_none());
    assert!(!plain.slack().to_string().contains("Runbook"));
    assert!(!plain.event_note().contains("runbook"));
    let am = alertmanager_alerts(("team-a", "crashes"), &[&firing], (50, 8192, true), None, false, now);
    assert!(am[0]["annotations"].get("runbook_url").is_none(), "absent, not null");
}

/// `--debug-hint`: the line in the webhook, Slack (escaped, while the
/// incident is open) and Alertmanager; nowhere when off.
#[test]
fn every_sink_carries_the_debug_line_when_asked() {
    let mut i = incident(Phase::Firing);
    i.key.workload = Workload { kind: "StatefulSet".into(), name: "db".into() };
    i.pods = ["db-1".to_string(), "db-0".to_string()].into();
    let n = opened(IncidentView::of(&i, 50, 8192).with_debug_hint(&i, true));
    let cmd = n.webhook()["incident"]["debugCommand"].as_str().unwrap().to_string();
    assert!(cmd.starts_with("kubectl -n 'team-a' create -f - <<< '"), "{cmd}");
    assert!(cmd.contains(r#""statefulset.kubernetes.io/pod-name":"db-0""#), "the first pod: {cmd}");
    let slack = n.slack();
    let line = slack["blocks"].as_array().unwrap().last().unwrap()["elements"][0]["text"].as_str().unwrap();
    // The incident is a crash loop: the line makes a debug copy.
    assert!(line.starts_with("Debug copy (this pod only: a copy of the crash-looping pod"), "{line}");
    assert!(cmd.contains(r#""mode":"copy""#), "{cmd}");
    assert!(line.contains("&lt;&lt;&lt;") && !line.contains('<'), "{line}");
    let mut oom = i.clone();
    oom.key.reason = crate::crd::Reason::OOMKilled;
    let shell = opened(IncidentView::of(&oom, 50, 8192).with_debug_hint(&oom, true)).slack();
    let line = shell["blocks"].as_array().unwrap().last().unwrap()["elements"][0]["text"].as_str().unwrap();
    assert!(line.starts_with("Debug shell (this pod only, for 1h): `kubectl"), "{line}");
    let am = alertmanager_alerts(("team-a", "crashes"), &[&i], (50, 8192, true), None, true, n.at);
    assert_eq!(am[0]["annotations"]["debug_command"], cmd.as_str());

    let resolved = Notification { change: Change::Resolved, ..n.clone() };
    assert!(!resolved.slack().to_string().contains("Debug copy"));
    let off = IncidentView::of(&i, 50, 8192).with_debug_hint(&i, false);
    assert!(serde_json::to_value(&off).unwrap().get("debugCommand").is_none());
    let am = alertmanager_alerts(("team-a", "crashes"), &[&i], (50, 8192, true), None, false, n.at);
    assert!(am[0]["annotations"].get("debug_command").is_none());
    // A bare pod: no label to select it by, no line.
    let plain = incident(Phase::Firing);
    let mut bare = plain.clone();
    bare.key.workload = Workload { kind: "Pod".into(), name: "once".into() };
    assert!(IncidentView::of(&bare, 50, 8192).with_debug_hint(&bare, true).debug_command.is_none());
}

#[test]
fn event_notes_and_escalations() {
    let n = note(Change::Escalated { level: 10 }, Phase::Firing);
    assert_eq!(n.event_reason(), "IncidentEscalated");
    assert!(n.event_note().contains("10+ restarts"));
    let n = note(Change::Opened { replaces: Some(Reason::NotReady) }, Phase::Firing);
    assert!(n.headline().contains("(was NotReady)"));
}
