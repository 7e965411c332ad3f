//! The PagerDuty sink's document: Events API v2, one dedup key per
//! incident (trigger, escalations and resolve share it).

use serde_json::{Value, json};

use super::{Notification, cut_end_keep_tail, cut_start};
use crate::incident::Change;

impl Notification {
    /// The incident's PagerDuty dedup key: the PodAlert and the incident's
    /// key (namespace, workload, container, reason), hashed to a fixed
    /// length; a trigger, its escalations and its resolve share it.
    pub fn dedup_key(&self) -> String {
        use sha2::{Digest, Sha256};
        let i = &self.incident;
        let id = [&self.podalert.0, &self.podalert.1, &i.namespace, &i.workload, &i.container, &i.reason];
        let digest = Sha256::digest(id.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n").as_bytes());
        let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
        format!("flotilla-{hex}")
    }

    /// A PagerDuty Events API v2 document (without `routing_key`: the
    /// sink's worker adds it from the Secret when it sends): `trigger` when
    /// the incident opens or escalates, `resolve` when it resolves.
    pub fn pagerduty(&self, severity: &str) -> Value {
        let i = &self.incident;
        let key = self.dedup_key();
        if matches!(self.change, Change::Resolved) {
            return json!({"event_action": "resolve", "dedup_key": key});
        }
        let mut details = json!({
            "podAlert": format!("{}/{}", self.podalert.0, self.podalert.1),
            "reason": i.reason,
            "message": cut_start(&i.message, 1024),
            "pods": cut_start(&i.pods_line(), 1024),
            "restarts": i.restarts,
            "since": i.since,
            // PagerDuty keeps a document up to 512 KB; the log's end matters.
            "logs": cut_end_keep_tail(&i.logs.text(), 16 * 1024),
        });
        if !i.events.is_empty() {
            details["events"] = json!(i.events);
        }
        if let Some(cmd) = &i.debug_command {
            details["debugCommand"] = json!(cmd);
        }
        let mut doc = json!({
            "event_action": "trigger",
            "dedup_key": key,
            "payload": {
                // PagerDuty's summary is at most 1024 characters.
                "summary": cut_start(&self.headline(), 1024),
                "source": format!("{}/{}", i.namespace, i.workload),
                "severity": severity,
                "timestamp": self.at.to_string(),
                "component": i.container,
                "group": i.namespace,
                "class": i.reason,
                "custom_details": details,
            },
            "client": "Flotilla pod-alert",
        });
        if let Some(url) = &i.runbook_url {
            doc["links"] = json!([{"href": url, "text": "Runbook"}]);
        }
        doc
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::incident::{Change, Phase};
    use crate::notify::tests::note;
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn pagerduty_triggers_and_resolves_one_incident_under_one_dedup_key() {
        let opened = note(Change::Opened { replaces: None }, Phase::Firing);
        let v = opened.pagerduty("critical");
        assert_eq!(v["event_action"], "trigger");
        let key = v["dedup_key"].as_str().unwrap().to_string();
        assert!(key.starts_with("flotilla-") && key.len() == "flotilla-".len() + 32, "{key}");
        assert!(v.get("routing_key").is_none(), "the key is added by the worker, from the Secret");
        let p = &v["payload"];
        assert_eq!(p["severity"], "critical");
        assert_eq!(p["source"], "team-a/Deployment/web");
        assert_eq!(p["class"], "CrashLoopBackOff");
        assert!(p["summary"].as_str().unwrap().contains("team-a/Deployment/web container app"), "{p}");
        assert!(p["custom_details"]["logs"].as_str().unwrap().contains("panic: boom"), "{p}");
        assert!(p["timestamp"].as_str().unwrap().starts_with("2027-"), "{p}");
        let escalated = note(Change::Escalated { level: 5 }, Phase::Firing).pagerduty("error");
        assert_eq!(
            (escalated["event_action"].as_str(), escalated["dedup_key"].as_str()),
            (Some("trigger"), Some(key.as_str()))
        );
        let resolved = note(Change::Resolved, Phase::Resolved { at: Timestamp::from_second(1_800_000_050).unwrap() })
            .pagerduty("error");
        assert_eq!(resolved, json!({"event_action": "resolve", "dedup_key": key}));
        // Another reason of the same container is another incident.
        let mut other = opened.clone();
        other.incident.reason = "OOMKilled".into();
        assert_ne!(other.dedup_key(), key);
        // As is the same incident seen by another PodAlert.
        let mut elsewhere = opened.clone();
        elsewhere.podalert.1 = "platform".into();
        assert_ne!(elsewhere.dedup_key(), key);
    }
}
