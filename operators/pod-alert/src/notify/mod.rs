//! What a notification says, and how each sink wants it said: the
//! webhook's JSON document and Event notes here; a Slack Block Kit message
//! (`slack`), a Teams Adaptive Card (`teams`), a PagerDuty Events v2
//! document (`pagerduty`) and Alertmanager v2 alerts (`alertmanager`). Pure.
//!
//! Text from pods (log lines, the kubelet's messages) is shown by every
//! sink as written, never interpreted as markup or links.

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

use crate::crd::Reason;
use crate::incident::{Change, Incident, Phase};
use crate::logs::Tail;

mod alertmanager;
mod pagerduty;
mod slack;
mod teams;

pub use alertmanager::{ALERTMANAGER_RESEND, AlertmanagerSchedule, alertmanager_alerts};
pub use slack::mrkdwn_escape;

/// The webhook document's apiVersion and kind.
pub const API_VERSION: &str = "flotilla.dev/v1alpha1";
pub const KIND: &str = "PodAlertNotification";

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
    /// That line makes a debug copy (a crash loop), not an ephemeral
    /// container (said beside it in Slack).
    #[serde(skip)]
    pub debug_copy: bool,
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
            debug_copy: false,
        }
    }

    /// With the `kubectl` line that creates a PodDebugger for one of the
    /// incident's pods, when the operator gives them (`--debug-hint`).
    #[must_use]
    pub fn with_debug_hint(mut self, i: &Incident, on: bool) -> Self {
        let hint = on.then(|| i.pods.first()).flatten().and_then(|pod| {
            let crash_loop = i.key.reason == crate::crd::Reason::CrashLoopBackOff;
            crate::debug_hint::debug_hint(&i.key.namespace, &i.key.workload, &i.key.container, pod, crash_loop)
        });
        self.debug_copy = hint.as_ref().is_some_and(|h| h.copy);
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
            Change::Resolved if i.pod_count == 0 => self.headline(),
            Change::Resolved => format!("{} ({} pods)", self.headline(), i.pod_count),
            // A workload's own problem (a stalled rollout, a missed run) names no pod.
            _ if i.pod_count == 0 => format!("{}: {}", self.headline(), i.message),
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

#[cfg(test)]
mod tests;
