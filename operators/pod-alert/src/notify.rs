//! What a notification says, and how each sink wants it said: a Slack Block
//! Kit message, the webhook's JSON document, Alertmanager v2 alerts and
//! Event notes. Pure.

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

use crate::crd::Reason;
use crate::incident::{Change, Incident, Phase};
use crate::pod::after;

/// The webhook document's apiVersion and kind.
pub const API_VERSION: &str = "flotilla.dev/v1alpha1";
pub const KIND: &str = "PodAlertNotification";
/// Alertmanager's alert name.
pub const ALERT_NAME: &str = "PodUnhealthy";
/// A firing alert's `endsAt` is this far ahead; it is re-sent every minute.
pub const FIRING_ENDS_AFTER: std::time::Duration = std::time::Duration::from_secs(4 * 60);

/// A snapshot of an incident, as sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IncidentView {
    pub namespace: String,
    pub workload: String,
    pub container: String,
    pub reason: String,
    pub severity: String,
    pub message: String,
    pub pods: Vec<String>,
    pub pod_count: usize,
    pub restarts: u32,
    pub since: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<String>,
    pub logs: String,
}

impl IncidentView {
    pub fn of(i: &Incident) -> Self {
        Self {
            namespace: i.key.namespace.clone(),
            workload: i.key.workload.to_string(),
            container: i.key.container.clone(),
            reason: i.key.reason.to_string(),
            severity: i.key.reason.severity().to_string(),
            message: i.message.clone(),
            pods: i.pods.iter().take(crate::crd::MAX_PODS_LISTED).cloned().collect(),
            pod_count: i.pods.len(),
            restarts: i.restarts,
            since: i.since.to_string(),
            resolved_at: match i.phase {
                Phase::Resolved { at } => Some(at.to_string()),
                _ => None,
            },
            logs: i.logs.clone(),
        }
    }

    /// `team-a/Deployment/web container app: CrashLoopBackOff`.
    pub fn title(&self) -> String {
        let mut s = format!("{}/{}", self.namespace, self.workload);
        if !self.container.is_empty() {
            s.push_str(&format!(" container {}", self.container));
        }
        s.push_str(&format!(": {}", self.reason));
        s
    }

    pub fn pods_line(&self) -> String {
        let more = self.pod_count.saturating_sub(self.pods.len());
        let mut s = self.pods.join(", ");
        if more > 0 {
            s.push_str(&format!(" and {more} more"));
        }
        s
    }
}

/// One notification to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// The PodAlert's namespace and name.
    pub podalert: (String, String),
    pub change: Change,
    pub incident: IncidentView,
    pub at: Timestamp,
}

impl Notification {
    pub fn event(&self) -> &'static str {
        match self.change {
            Change::Opened { .. } => "opened",
            Change::Escalated { .. } => "escalated",
            Change::Resolved => "resolved",
        }
    }

    /// One line: what happened.
    pub fn headline(&self) -> String {
        let i = &self.incident;
        match &self.change {
            Change::Opened { replaces: Some(r) } => format!("{} (was {r})", i.title()),
            Change::Opened { replaces: None } => i.title(),
            Change::Escalated { level } => format!("{}: {level}+ restarts", i.title()),
            Change::Resolved => format!("{} resolved", i.title()),
        }
    }

    /// The Event reason and note for the `events` sink.
    pub fn event_reason(&self) -> &'static str {
        match self.change {
            Change::Opened { .. } => "IncidentOpened",
            Change::Escalated { .. } => "IncidentEscalated",
            Change::Resolved => "IncidentResolved",
        }
    }

    pub fn event_note(&self) -> String {
        let i = &self.incident;
        match self.change {
            Change::Resolved => format!("{} ({} pods)", self.headline(), i.pod_count),
            _ => format!(
                "{}: {} ({} pods, {} restarts: {})",
                self.headline(),
                i.message,
                i.pod_count,
                i.restarts,
                i.pods_line()
            ),
        }
    }

    /// The webhook document (see the README's schema).
    pub fn webhook(&self) -> Value {
        let (replaces, level) = match &self.change {
            Change::Opened { replaces } => (replaces.map(Reason::as_str), None),
            Change::Escalated { level } => (None, Some(*level)),
            Change::Resolved => (None, None),
        };
        json!({
            "apiVersion": API_VERSION,
            "kind": KIND,
            "event": self.event(),
            "podAlert": {"namespace": self.podalert.0, "name": self.podalert.1},
            "incident": self.incident,
            "replaces": replaces,
            "escalationLevel": level,
            "sentAt": self.at.to_string(),
        })
    }

    /// A Slack Block Kit message.
    pub fn slack(&self) -> Value {
        let i = &self.incident;
        let icon = match self.change {
            Change::Resolved => ":large_green_circle:",
            Change::Escalated { .. } => ":red_circle:",
            Change::Opened { .. } => {
                if i.severity == "critical" {
                    ":red_circle:"
                } else {
                    ":large_orange_circle:"
                }
            }
        };
        let verb = match self.change {
            Change::Opened { .. } => "Opened",
            Change::Escalated { .. } => "Escalated",
            Change::Resolved => "Resolved",
        };
        let text = format!("{icon} {verb}: {}", self.headline());
        let mut blocks = vec![
            json!({"type": "header", "text": {"type": "plain_text", "text": cut_start(&format!("{verb}: {}", self.headline()), 150), "emoji": true}}),
            json!({"type": "section", "fields": [
                {"type": "mrkdwn", "text": format!("*Workload*\n{}/{}", i.namespace, i.workload)},
                {"type": "mrkdwn", "text": format!("*Reason*\n{}", i.reason)},
                {"type": "mrkdwn", "text": format!("*Pods ({})*\n{}", i.pod_count, cut_start(&i.pods_line(), 1900))},
                {"type": "mrkdwn", "text": format!("*Restarts*\n{}", i.restarts)},
            ]}),
        ];
        if !i.message.is_empty() {
            blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": cut_start(&i.message, 2900)}}));
        }
        if !i.logs.is_empty() && !matches!(self.change, Change::Resolved) {
            // Slack's section limit is 3000 characters: the end of the log matters most.
            let logs = cut_end_keep_tail(&i.logs.replace("```", "'''"), 2800);
            blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": format!("```{logs}```")}}));
        }
        blocks.push(json!({"type": "context", "elements": [
            {"type": "mrkdwn", "text": format!("PodAlert {}/{} · since {}", self.podalert.0, self.podalert.1, i.since)}
        ]}));
        json!({"text": text, "blocks": blocks})
    }
}

/// The first `max` characters (on a char boundary), with an ellipsis when cut.
fn cut_start(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The last `max` characters, with an ellipsis in front when cut.
fn cut_end_keep_tail(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let mut out = String::from("…");
    out.extend(s.chars().skip(n - max.saturating_sub(1)));
    out
}

/// Alertmanager hears of firing incidents this often.
pub const ALERTMANAGER_RESEND: std::time::Duration = std::time::Duration::from_secs(60);

/// When a PodAlert's alerts go to Alertmanager: at once on any change, then
/// every minute while it has any (firing, or resolved within five minutes),
/// so `endsAt` (now + 4 min) never lapses while an incident fires.
#[derive(Debug, Clone, Default)]
pub struct AlertmanagerSchedule {
    last: Option<Timestamp>,
}

impl AlertmanagerSchedule {
    /// A new sink (or a changed URL): the next tick sends.
    pub fn reset(&mut self) {
        self.last = None;
    }

    /// Whether to send now, and when to look again (None: nothing to tell).
    pub fn tick(&mut self, has_alerts: bool, changed: bool, now: Timestamp) -> (bool, Option<Timestamp>) {
        if !has_alerts {
            return (false, None);
        }
        // A little early rather than late: reconciles are not to the second.
        let slack = std::time::Duration::from_secs(2);
        let due = self.last.is_none_or(|at| crate::pod::elapsed(at, now) + slack >= ALERTMANAGER_RESEND);
        let send = changed || due;
        if send {
            self.last = Some(now);
        }
        (send, self.last.map(|at| after(at, ALERTMANAGER_RESEND)))
    }
}

/// Alertmanager v2 alerts for the incidents it must hear of now
/// ([`crate::incident::Book::for_alertmanager`]).
pub fn alertmanager_alerts(podalert: (&str, &str), incidents: &[&Incident], now: Timestamp) -> Value {
    let alerts: Vec<Value> = incidents
        .iter()
        .map(|i| {
            let v = IncidentView::of(i);
            let ends = match i.phase {
                Phase::Resolved { at } => at,
                _ => after(now, FIRING_ENDS_AFTER),
            };
            json!({
                "labels": {
                    "alertname": ALERT_NAME,
                    "namespace": v.namespace,
                    "workload": v.workload,
                    "container": v.container,
                    "reason": v.reason,
                    "severity": v.severity,
                    "podalert": format!("{}/{}", podalert.0, podalert.1),
                },
                "annotations": {
                    "summary": v.title(),
                    "description": format!("{} ({} pods, {} restarts: {})", v.message, v.pod_count, v.restarts, v.pods_line()),
                    "logs": v.logs,
                },
                "startsAt": i.since.to_string(),
                "endsAt": ends.to_string(),
            })
        })
        .collect();
    Value::Array(alerts)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::observe::Key;
    use crate::pod::Workload;
    use std::collections::BTreeSet;

    fn incident(phase: Phase) -> Incident {
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
            logs: "starting\npanic: boom ```".into(),
        }
    }

    fn note(change: Change, phase: Phase) -> Notification {
        Notification {
            podalert: ("team-a".into(), "crashes".into()),
            change,
            incident: IncidentView::of(&incident(phase)),
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
        let r =
            note(Change::Resolved, Phase::Resolved { at: Timestamp::from_second(1_800_000_050).unwrap() }).webhook();
        assert_eq!(r["event"], "resolved");
        assert!(r["incident"]["resolvedAt"].is_string());
    }

    #[test]
    fn slack_message_is_block_kit_within_limits() {
        let v = note(Change::Opened { replaces: None }, Phase::Firing).slack();
        assert!(v["text"].as_str().unwrap().contains("Opened: team-a/Deployment/web container app: CrashLoopBackOff"));
        let blocks = v["blocks"].as_array().unwrap();
        assert_eq!(blocks[0]["type"], "header");
        let logs = blocks.iter().find(|b| b["text"]["text"].as_str().is_some_and(|t| t.starts_with("```"))).unwrap();
        assert!(
            !logs["text"]["text"].as_str().unwrap().trim_matches('`').contains("```"),
            "fences in logs are defused"
        );
        assert!(v["blocks"].to_string().contains("and 2 more"));
        let resolved =
            note(Change::Resolved, Phase::Resolved { at: Timestamp::from_second(1_800_000_050).unwrap() }).slack();
        assert!(resolved["text"].as_str().unwrap().contains("Resolved"));
        let long = cut_end_keep_tail(&"x".repeat(5000), 2800);
        assert_eq!(long.chars().count(), 2800);
    }

    #[test]
    fn alertmanager_firing_ends_in_four_minutes_resolved_ends_when_resolved() {
        let now = Timestamp::from_second(1_800_000_100).unwrap();
        let firing = incident(Phase::Firing);
        let at = Timestamp::from_second(1_800_000_090).unwrap();
        let resolved = incident(Phase::Resolved { at });
        let v = alertmanager_alerts(("team-a", "crashes"), &[&firing, &resolved], now);
        let a = v.as_array().unwrap();
        assert_eq!(a[0]["labels"]["alertname"], ALERT_NAME);
        assert_eq!(a[0]["labels"]["reason"], "CrashLoopBackOff");
        assert_eq!(a[0]["startsAt"], firing.since.to_string());
        assert_eq!(a[0]["endsAt"], after(now, FIRING_ENDS_AFTER).to_string());
        assert_eq!(a[1]["endsAt"], at.to_string());
        assert!(a[0]["annotations"]["logs"].as_str().unwrap().contains("panic"));
    }

    #[test]
    fn alertmanager_hears_every_minute_while_firing_and_five_minutes_after_the_resolve() {
        use crate::incident::Book;
        use crate::observe::evaluate;
        use crate::observe::tests::{crashing, pod, rules, t};
        let r = rules(
            serde_json::json!({"alerts": {"checkRunningPods": true, "resolveAfter": "1m", "restartWindow": "1m"}}),
        );
        let mut book = Book::default();
        let mut schedule = AlertmanagerSchedule::default();
        let mut sent: Vec<(i64, String)> = Vec::new();
        for s in (0..=900).step_by(10) {
            let pods = if s < 60 { vec![crashing(pod("w", "web"), 3, 0, "Error")] } else { vec![pod("w", "web")] };
            let f = evaluate(pods.iter(), &r, &mut book.history, t(s));
            let changed = !book.step(&f, &r, t(s)).is_empty();
            let incidents = book.for_alertmanager(t(s));
            let (send, next) = schedule.tick(!incidents.is_empty(), changed, t(s));
            if send {
                let body = alertmanager_alerts(("a", "p"), &incidents, t(s));
                sent.push((s, body[0]["endsAt"].as_str().unwrap().to_string()));
            }
            assert_eq!(next.is_some(), !incidents.is_empty());
        }
        let times: Vec<i64> = sent.iter().map(|(s, _)| *s).collect();
        // Opened at 0 (re-sent at 60); the crash ages out at 60, resolved 60 s
        // later at 120 (a change: sent), then every minute while within five minutes of it.
        assert_eq!(times, vec![0, 60, 120, 180, 240, 300, 360], "{sent:?}");
        assert_eq!(sent[0].1, t(240).to_string(), "firing: endsAt = now + 4 min");
        assert_eq!(sent[1].1, t(300).to_string());
        for (_, ends) in &sent[2..] {
            assert_eq!(ends, &t(120).to_string(), "resolved: endsAt = the resolve time");
        }
    }

    #[test]
    fn event_notes_and_escalations() {
        let n = note(Change::Escalated { level: 10 }, Phase::Firing);
        assert_eq!(n.event_reason(), "IncidentEscalated");
        assert!(n.event_note().contains("10+ restarts"));
        let n = note(Change::Opened { replaces: Some(Reason::NotReady) }, Phase::Firing);
        assert!(n.headline().contains("(was NotReady)"));
    }
}
