//! Alertmanager v2 alerts, and when a PodAlert's alerts are sent again.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::IncidentView;
use crate::incident::{Incident, Phase};
use crate::pod::after;

/// Alertmanager's alert name.
pub const ALERT_NAME: &str = "PodUnhealthy";
/// A firing alert's `endsAt` is this far ahead; it is re-sent every minute.
pub const FIRING_ENDS_AFTER: std::time::Duration = std::time::Duration::from_secs(4 * 60);

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

    /// Whether the periodic re-send is due (a change need not wait for it).
    pub fn is_due(&self, now: Timestamp) -> bool {
        // A little early rather than late: reconciles are not to the second.
        let slack = std::time::Duration::from_secs(2);
        self.last.is_none_or(|at| crate::pod::elapsed(at, now) + slack >= ALERTMANAGER_RESEND)
    }

    /// Whether to send now, and when to look again (None: nothing to tell).
    pub fn tick(&mut self, has_alerts: bool, changed: bool, now: Timestamp) -> (bool, Option<Timestamp>) {
        if !has_alerts {
            return (false, None);
        }
        let send = changed || self.is_due(now);
        if send {
            self.last = Some(now);
        }
        (send, self.last.map(|at| after(at, ALERTMANAGER_RESEND)))
    }
}

/// Alertmanager v2 alerts for the incidents it must hear of now
/// ([`crate::incident::Book::for_alertmanager`]).
pub fn alertmanager_alerts(
    podalert: (&str, &str),
    incidents: &[&Incident],
    (lines, bytes, events): (u32, usize, bool),
    runbook: Option<&str>,
    debug_hint: bool,
    now: Timestamp,
) -> Value {
    let alerts: Vec<Value> = incidents
        .iter()
        .map(|i| {
            let v = IncidentView::of(i, lines, bytes)
                .with_events(i, events)
                .with_runbook(runbook)
                .with_debug_hint(i, debug_hint);
            let ends = match i.phase {
                Phase::Resolved { at } => at,
                _ => after(now, FIRING_ENDS_AFTER),
            };
            let mut annotations = json!({
                "summary": v.title(),
                "description": if v.pod_count == 0 {
                    v.message.clone()
                } else {
                    format!("{} ({} pods, {} restarts: {})", v.message, v.pod_count, v.restarts, v.pods_line())
                },
                "logs": v.logs,
            });
            // Alertmanager's annotations are strings: absent, not null.
            if let Some(url) = &v.runbook_url {
                annotations["runbook_url"] = Value::from(url.as_str());
            }
            if let Some(cmd) = &v.debug_command {
                annotations["debug_command"] = Value::from(cmd.as_str());
            }
            if !v.events.is_empty() {
                annotations["events"] = Value::from(v.events.join("\n"));
            }
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
                "annotations": annotations,
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
    use crate::notify::tests::incident;

    #[test]
    fn alertmanager_firing_ends_in_four_minutes_resolved_ends_when_resolved() {
        let now = Timestamp::from_second(1_800_000_100).unwrap();
        let firing = incident(Phase::Firing);
        let at = Timestamp::from_second(1_800_000_090).unwrap();
        let resolved = incident(Phase::Resolved { at });
        let v = alertmanager_alerts(("team-a", "crashes"), &[&firing, &resolved], (50, 8192, true), None, false, now);
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
        let (mut book, mut history) = (Book::default(), crate::observe::RestartHistory::default());
        let mut schedule = AlertmanagerSchedule::default();
        let mut sent: Vec<(i64, String)> = Vec::new();
        for s in (0..=900).step_by(10) {
            let pods = if s < 60 { vec![crashing(pod("w", "web"), 3, 0, "Error")] } else { vec![pod("w", "web")] };
            let f = evaluate(pods.iter(), &r, &mut history, t(s));
            let changed = !book.step(&f, &r, t(s)).is_empty();
            let incidents = book.for_alertmanager(t(s));
            let (send, next) = schedule.tick(!incidents.is_empty(), changed, t(s));
            if send {
                let body = alertmanager_alerts(("a", "p"), &incidents, (50, 8192, true), None, false, t(s));
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
}
