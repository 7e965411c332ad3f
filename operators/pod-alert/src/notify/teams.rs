//! The Microsoft Teams sink's message: one Adaptive Card for a Workflows
//! webhook, every text a pod wrote in a text run (never markdown).

use serde_json::{Value, json};

use super::{Notification, cut_end_keep_tail, cut_start};
use crate::incident::Change;

impl Notification {
    /// A Microsoft Teams message for a Workflows webhook: one Adaptive
    /// Card (schema 1.4). Everything a pod or the PodAlert's author wrote
    /// goes in `RichTextBlock` text runs, which Adaptive Cards never read as
    /// markdown (a TextBlock's or a Fact's text would make a pod's
    /// `[click](https://…)` a link): it reads as written.
    pub fn teams(&self) -> Value {
        let i = &self.incident;
        let (verb, color) = match self.change {
            Change::Opened { .. } => ("Opened", if i.severity == "critical" { "Attention" } else { "Warning" }),
            Change::Escalated { .. } => ("Escalated", "Attention"),
            Change::Resolved => ("Resolved", "Good"),
        };
        let live = !matches!(self.change, Change::Resolved);
        let mut body = vec![
            rich(vec![json!({"type": "TextRun", "text": cut_start(&format!("{verb}: {}", self.headline()), 300),
                             "size": "Large", "weight": "Bolder", "color": color})]),
            labelled("Workload", &format!("{}/{}", i.namespace, i.workload)),
            labelled("Reason", &i.reason),
            labelled(&format!("Pods ({})", i.pod_count), &cut_start(&i.pods_line(), 1000)),
            labelled("Restarts", &i.restarts.to_string()),
            labelled("Since", &i.since),
        ];
        if !i.message.is_empty() {
            body.push(rich(vec![json!({"type": "TextRun", "text": cut_start(&i.message, 2000)})]));
        }
        let logs = i.logs.text();
        if !logs.is_empty() && live {
            body.push(rich(vec![monospace(&cut_end_keep_tail(&logs, 8000))]));
        }
        if !i.events.is_empty() && live {
            body.push(rich(vec![json!({"type": "TextRun", "text": "Warning Events", "weight": "Bolder"})]));
            body.push(rich(vec![monospace(&i.events.join("\n"))]));
        }
        if let Some(cmd) = i.debug_command.as_ref().filter(|_| live) {
            body.push(labelled("Debug shell", cmd));
        }
        body.push(rich(vec![
            json!({"type": "TextRun", "text": format!("PodAlert {}/{}", self.podalert.0, self.podalert.1),
                                   "isSubtle": true, "size": "Small"}),
        ]));
        let mut card = json!({
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "type": "AdaptiveCard",
            "version": "1.4",
            "msteams": {"width": "Full"},
            "body": body,
        });
        if let Some(url) = &i.runbook_url {
            // The admin's template with encoded values: a link only to where it points.
            card["actions"] = json!([{"type": "Action.OpenUrl", "title": "Runbook", "url": url}]);
        }
        json!({
            "type": "message",
            "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": null, "content": card}],
        })
    }
}

/// A RichTextBlock of `runs`, wrapping.
fn rich(runs: Vec<Value>) -> Value {
    json!({"type": "RichTextBlock", "inlines": runs})
}

/// "Label: value", the label bold.
fn labelled(label: &str, value: &str) -> Value {
    rich(vec![
        json!({"type": "TextRun", "text": format!("{label}: "), "weight": "Bolder"}),
        json!({"type": "TextRun", "text": value}),
    ])
}

fn monospace(text: &str) -> Value {
    json!({"type": "TextRun", "text": text, "fontType": "Monospace", "size": "Small"})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use crate::incident::{Change, Phase};
    use crate::logs::Tail;
    use crate::notify::IncidentView;
    use crate::notify::tests::{incident, note, opened};
    use k8s_openapi::jiff::Timestamp;

    /// Every element whose text a pod (or the PodAlert's author) wrote is a
    /// text run, which Adaptive Cards never read as markdown.
    #[test]
    fn teams_card_is_an_adaptive_card_that_shows_what_pods_write_as_written() {
        let mut i = incident(Phase::Firing);
        i.logs = Some(Tail::detached("ok\n[click here](https://evil.example) **urgent**\n"));
        i.message = "_see_ [docs](https://evil.example)".into();
        let n = opened(IncidentView::of(&i, 50, 8192).with_runbook(Some("https://runbooks.example/{reason}")));
        let v = n.teams();
        assert_eq!(v["type"], "message");
        let attachment = &v["attachments"][0];
        assert_eq!(attachment["contentType"], "application/vnd.microsoft.card.adaptive");
        let card = &attachment["content"];
        assert_eq!((card["type"].as_str(), card["version"].as_str()), (Some("AdaptiveCard"), Some("1.4")));
        let body = card["body"].as_array().unwrap();
        assert!(body.iter().all(|b| b["type"] == "RichTextBlock"), "no TextBlock or FactSet: {body:#?}");
        let runs: Vec<&str> = body
            .iter()
            .flat_map(|b| b["inlines"].as_array().unwrap())
            .map(|r| {
                assert_eq!(r["type"], "TextRun");
                r["text"].as_str().unwrap()
            })
            .collect();
        let all = runs.join("\n");
        assert!(all.contains("[click here](https://evil.example) **urgent**"), "as written: {all}");
        assert!(all.contains("_see_ [docs](https://evil.example)"), "{all}");
        assert!(all.contains("Workload: ") && all.contains("team-a/Deployment/web"), "{all}");
        assert_eq!(card["actions"][0]["type"], "Action.OpenUrl");
        assert_eq!(card["actions"][0]["url"], "https://runbooks.example/CrashLoopBackOff");
        // A resolve carries no log tail.
        let resolved = note(Change::Resolved, Phase::Resolved { at: Timestamp::from_second(1_800_000_050).unwrap() })
            .teams()
            .to_string();
        assert!(resolved.contains("Resolved: ") && !resolved.contains("panic: boom"), "{resolved}");
    }
}
