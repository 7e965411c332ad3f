//! The Slack sink's message: Block Kit, within Slack's limits. Text from
//! pods is shown, never interpreted: `&`, `<` and `>` are escaped as
//! Slack's mrkdwn asks, so a log line holding `<!channel>` or
//! `<https://evil|runbook>` pings no one and links nowhere.

use serde_json::{Value, json};

use super::{Notification, cut_end_keep_tail, cut_start};
use crate::incident::Change;

/// Text for Slack's mrkdwn, shown as written: `&`, `<` and `>` are the
/// only characters Slack interprets there (links, mentions, `<!channel>`).
pub fn mrkdwn_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

impl Notification {
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
        let e = mrkdwn_escape;
        let text = format!("{icon} {verb}: {}", e(&self.headline()));
        let mut blocks = vec![
            // plain_text is never interpreted: no escaping (it would show).
            json!({"type": "header", "text": {"type": "plain_text", "text": cut_start(&format!("{verb}: {}", self.headline()), 150), "emoji": true}}),
            json!({"type": "section", "fields": [
                {"type": "mrkdwn", "text": format!("*Workload*\n{}", e(&format!("{}/{}", i.namespace, i.workload)))},
                {"type": "mrkdwn", "text": format!("*Reason*\n{}", e(&i.reason))},
                {"type": "mrkdwn", "text": format!("*Pods ({})*\n{}", i.pod_count, cut_start(&e(&i.pods_line()), 1900))},
                {"type": "mrkdwn", "text": format!("*Restarts*\n{}", i.restarts)},
            ]}),
        ];
        if !i.message.is_empty() {
            blocks
                .push(json!({"type": "section", "text": {"type": "mrkdwn", "text": cut_start(&e(&i.message), 2900)}}));
        }
        let logs = i.logs.text();
        if !logs.is_empty() && !matches!(self.change, Change::Resolved) {
            // Slack's section limit is 3000 characters: the end of the log
            // matters most. Escaped first, so a cut cannot make a `<`.
            let logs = cut_end_keep_tail(&e(&logs).replace("```", "'''"), 2800);
            blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": format!("```{logs}```")}}));
        }
        if !i.events.is_empty() && !matches!(self.change, Change::Resolved) {
            // Escaped as the logs are; 5 lines of 256 bytes fit a section.
            let events = cut_end_keep_tail(&e(&i.events.join("\n")).replace("```", "'''"), 2800);
            blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": format!("*Warning Events*\n```{events}```")}}));
        }
        let mut context = e(&format!("PodAlert {}/{} · since {}", self.podalert.0, self.podalert.1, i.since));
        if let Some(url) = &i.runbook_url {
            // The admin's URL (no `<`, `>`, `|`: the schema refuses them)
            // with encoded values: a link, and only to where it points.
            context.push_str(&format!(" · <{url}|Runbook>"));
        }
        blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": context}]}));
        if let (Some(cmd), Some(scope)) = (&i.debug_command, i.debug_scope)
            && !matches!(self.change, Change::Resolved)
        {
            // The line holds no backtick (its values are Kubernetes names);
            // escaped, Slack shows `<<<` and copies it as written.
            let line = if i.debug_copy {
                format!(
                    "Debug copy ({}: a copy of the crash-looping pod with a shell, for {}; pod-debugger's --debug-copies): `{}`",
                    scope.describe(),
                    crate::debug_hint::TTL,
                    e(cmd)
                )
            } else {
                format!("Debug shell ({}, for {}): `{}`", scope.describe(), crate::debug_hint::TTL, e(cmd))
            };
            blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": line}]}));
        }
        json!({"text": text, "blocks": blocks})
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::incident::{Change, Phase};
    use crate::logs::Tail;
    use crate::notify::IncidentView;
    use crate::notify::tests::{incident, note, opened};
    use k8s_openapi::jiff::Timestamp;

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

    /// A log line (and a kubelet message) holding Slack's control syntax is
    /// shown, never interpreted: no `<` reaches Slack from a pod.
    #[test]
    fn slack_shows_what_pods_write_and_interprets_none_of_it() {
        let mut i = incident(Phase::Firing);
        i.logs = Some(Tail::detached("ok\n<!channel> deploy failed, see <https://evil.example|runbook> & fix\n"));
        i.message = "<@U123> &lt; <!here>".into();
        let n = opened(IncidentView::of(&i, 50, 8192));
        let v = n.slack();
        let mrkdwn: Vec<String> = v["blocks"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|b| {
                let mut t: Vec<String> = b["text"]["text"].as_str().map(String::from).into_iter().collect();
                for f in b["fields"].as_array().into_iter().chain(b["elements"].as_array()).flatten() {
                    t.extend(f["text"].as_str().map(String::from));
                }
                t.into_iter().filter(|_| b["text"]["type"] != "plain_text")
            })
            .chain(v["text"].as_str().map(String::from))
            .collect();
        let all = mrkdwn.join("\n");
        assert!(!all.contains('<') && !all.contains('>'), "{all}");
        assert!(
            all.contains("&lt;!channel&gt; deploy failed, see &lt;https://evil.example|runbook&gt; &amp; fix"),
            "{all}"
        );
        assert!(all.contains("&lt;@U123&gt; &amp;lt; &lt;!here&gt;"), "{all}");
        assert_eq!(mrkdwn_escape("a<b>&c"), "a&lt;b&gt;&amp;c");
        // The webhook document carries the text as it is.
        assert!(n.webhook()["incident"]["logs"].as_str().unwrap().contains("<!channel>"));
    }
}
