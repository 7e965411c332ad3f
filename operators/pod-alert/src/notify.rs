//! What a notification says, and how each sink wants it said: a Slack Block
//! Kit message, the webhook's JSON document, Alertmanager v2 alerts and
//! Event notes. Pure.
//!
//! Text from pods (log lines, the kubelet's messages) is shown in Slack,
//! never interpreted: `&`, `<` and `>` are escaped as Slack's mrkdwn asks,
//! so a log line holding `<!channel>` or `<https://evil|runbook>` pings
//! no one and links nowhere.

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

use crate::crd::Reason;
use crate::incident::{Change, Incident, Phase};
use crate::logs::Tail;
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
    pub logs: LogText,
    /// The last Warning Events about the incident's pod (spec.logs.events),
    /// newest last, redacted as the logs; absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    /// The PodAlert's runbookURL, filled in for this incident.
    #[serde(rename = "runbookURL", skip_serializing_if = "Option::is_none")]
    pub runbook_url: Option<String>,
    /// The `kubectl` line creating a PodDebugger for the incident's pod
    /// (`--debug-hint`; [`crate::debug_hint`]); absent when off or when the
    /// pod cannot be selected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug_command: Option<String>,
    /// What that line's PodDebugger selects (said beside it in Slack).
    #[serde(skip)]
    pub debug_scope: Option<crate::debug_hint::Scope>,
}

/// An incident's log tail as one PodAlert shows it, rendered when a
/// notification is sent: a queued notification holds the shared tail.
#[derive(Clone)]
pub struct LogText {
    tail: Option<Arc<Tail>>,
    lines: u32,
    bytes: usize,
}

impl LogText {
    pub fn new(tail: Option<Arc<Tail>>, lines: u32, bytes: usize) -> Self {
        Self { tail, lines, bytes }
    }

    /// A fixed text (tests).
    pub fn fixed(text: &str) -> Self {
        Self::new(Some(Tail::detached(text)), u32::MAX, usize::MAX)
    }

    pub fn text(&self) -> String {
        self.tail.as_ref().map(|t| t.view(self.lines, self.bytes)).unwrap_or_default()
    }
}

impl Serialize for LogText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text())
    }
}

impl PartialEq for LogText {
    fn eq(&self, o: &Self) -> bool {
        self.text() == o.text()
    }
}
impl Eq for LogText {}

impl std::fmt::Debug for LogText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LogText").field(&self.text()).finish()
    }
}

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

impl IncidentView {
    /// `lines` and `bytes`: the PodAlert's `logs.tailLines` and `logs.maxBytes`.
    pub fn of(i: &Incident, lines: u32, bytes: usize) -> Self {
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
            logs: LogText::new(i.logs.clone(), lines, bytes),
            events: Vec::new(),
            runbook_url: None,
            debug_command: None,
            debug_scope: None,
        }
    }

    /// With the `kubectl` line that creates a PodDebugger for one of the
    /// incident's pods, when the operator gives them (`--debug-hint`).
    #[must_use]
    pub fn with_debug_hint(mut self, i: &Incident, on: bool) -> Self {
        let hint = on
            .then(|| i.pods.first())
            .flatten()
            .and_then(|pod| crate::debug_hint::debug_hint(&i.key.namespace, &i.key.workload, &i.key.container, pod));
        (self.debug_command, self.debug_scope) = hint.map(|h| (h.command, h.scope)).unzip();
        self
    }

    /// With the Warning Events held with the incident's tail, when the
    /// PodAlert shows them (spec.logs.events).
    #[must_use]
    pub fn with_events(mut self, i: &Incident, shown: bool) -> Self {
        self.events = i.event_lines(shown);
        self
    }

    /// With the PodAlert's runbook link filled in for this incident.
    #[must_use]
    pub fn with_runbook(mut self, template: Option<&str>) -> Self {
        self.runbook_url = template.map(|t| runbook_url(t, &self));
        self
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

/// `template` with `{reason}`, `{namespace}`, `{workload}` and
/// `{container}` replaced by `v`'s, percent-encoded: what pods name cannot
/// add a query, a fragment or another host to the admin's link. The
/// workload's `/` (Kind/name) is kept, as a path.
pub fn runbook_url(template: &str, v: &IncidentView) -> String {
    let fields = [
        ("{reason}", v.reason.as_str()),
        ("{namespace}", v.namespace.as_str()),
        ("{workload}", v.workload.as_str()),
        ("{container}", v.container.as_str()),
    ];
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    'scan: while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        for (name, value) in fields {
            if let Some(after) = rest.strip_prefix(name) {
                out.push_str(&percent_encode(value));
                rest = after;
                continue 'scan;
            }
        }
        out.push('{');
        rest = &rest[1..];
    }
    out.push_str(rest);
    out
}

/// Everything but RFC 3986's unreserved characters and `/`, percent-encoded.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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
        let note = self.event_text();
        match &i.runbook_url {
            Some(url) => format!("{note} · runbook: {url}"),
            None => note,
        }
    }

    fn event_text(&self) -> String {
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
            let line = format!("Debug shell ({}, for {}): `{}`", scope.describe(), crate::debug_hint::TTL, e(cmd));
            blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": line}]}));
        }
        json!({"text": text, "blocks": blocks})
    }
}

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
            let v = IncidentView::of(i, lines, bytes).with_events(i, events).with_runbook(runbook).with_debug_hint(i, debug_hint);
            let ends = match i.phase {
                Phase::Resolved { at } => at,
                _ => after(now, FIRING_ENDS_AFTER),
            };
            let mut annotations = json!({
                "summary": v.title(),
                "description": format!("{} ({} pods, {} restarts: {})", v.message, v.pod_count, v.restarts, v.pods_line()),
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
            logs: Some(Tail::detached("starting\npanic: boom ```")),
        }
    }

    fn note(change: Change, phase: Phase) -> Notification {
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

    /// A log line (and a kubelet message) holding Slack's control syntax is
    /// shown, never interpreted: no `<` reaches Slack from a pod.
    #[test]
    fn slack_shows_what_pods_write_and_interprets_none_of_it() {
        let mut i = incident(Phase::Firing);
        i.logs = Some(Tail::detached("ok\n<!channel> deploy failed, see <https://evil.example|runbook> & fix\n"));
        i.message = "<@U123> &lt; <!here>".into();
        let n = Notification {
            podalert: ("team-a".into(), "crashes".into()),
            change: Change::Opened { replaces: None },
            incident: IncidentView::of(&i, 50, 8192),
            at: Timestamp::from_second(1_800_000_100).unwrap(),
        };
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

    /// Every element whose text a pod (or the PodAlert's author) wrote is a
    /// text run, which Adaptive Cards never read as markdown.
    #[test]
    fn teams_card_is_an_adaptive_card_that_shows_what_pods_write_as_written() {
        let mut i = incident(Phase::Firing);
        i.logs = Some(Tail::detached("ok\n[click here](https://evil.example) **urgent**\n"));
        i.message = "_see_ [docs](https://evil.example)".into();
        let n = Notification {
            podalert: ("team-a".into(), "crashes".into()),
            change: Change::Opened { replaces: None },
            incident: IncidentView::of(&i, 50, 8192).with_runbook(Some("https://runbooks.example/{reason}")),
            at: Timestamp::from_second(1_800_000_100).unwrap(),
        };
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
        let n = Notification {
            podalert: ("team-a".into(), "crashes".into()),
            change: Change::Opened { replaces: None },
            incident: IncidentView::of(&i, 50, 8192).with_events(&i, true),
            at: Timestamp::from_second(1_800_000_100).unwrap(),
        };
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
        let n = Notification {
            podalert: ("team-a".into(), "crashes".into()),
            change: Change::Opened { replaces: None },
            incident: IncidentView::of(&i, 50, 8192).with_debug_hint(&i, true),
            at: Timestamp::from_second(1_800_000_100).unwrap(),
        };
        let cmd = n.webhook()["incident"]["debugCommand"].as_str().unwrap().to_string();
        assert!(cmd.starts_with("kubectl -n 'team-a' create -f - <<< '"), "{cmd}");
        assert!(cmd.contains(r#""statefulset.kubernetes.io/pod-name":"db-0""#), "the first pod: {cmd}");
        let slack = n.slack();
        let line = slack["blocks"].as_array().unwrap().last().unwrap()["elements"][0]["text"].as_str().unwrap();
        assert!(line.starts_with("Debug shell (this pod only, for 1h): `kubectl"), "{line}");
        assert!(line.contains("&lt;&lt;&lt;") && !line.contains('<'), "{line}");
        let am = alertmanager_alerts(("team-a", "crashes"), &[&i], (50, 8192, true), None, true, n.at);
        assert_eq!(am[0]["annotations"]["debug_command"], cmd.as_str());

        let resolved = Notification { change: Change::Resolved, ..n.clone() };
        assert!(!resolved.slack().to_string().contains("Debug shell"));
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

    #[test]
    fn event_notes_and_escalations() {
        let n = note(Change::Escalated { level: 10 }, Phase::Firing);
        assert_eq!(n.event_reason(), "IncidentEscalated");
        assert!(n.event_note().contains("10+ restarts"));
        let n = note(Change::Opened { replaces: Some(Reason::NotReady) }, Phase::Firing);
        assert!(n.headline().contains("(was NotReady)"));
    }
}
