//! The `PodAlert` custom resource (`flotilla.dev/v1alpha1`). Every field's
//! doc comment is its `kubectl explain` description; the schema and its CEL
//! rules reject what can be rejected at admission (the seed's rule without
//! `alerts.checkRunningPods` gets "an alert must be set").

use flotilla_shared::selector::LabelSelector;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod alerts;
mod silence;
mod status;
pub use alerts::{AlertRules, Reason};
pub use flotilla_shared::duration::GoDuration;
pub use silence::Silence;
pub use status::{
    IncidentStatus, MAX_INCIDENTS_LISTED, MAX_PODS_LISTED, PodAlertStatus, SilenceStatus, SinkStatus, SlackThread,
};

/// Turns unhealthy pods of this PodAlert's namespace into incidents (one per
/// workload, container and reason, with the failing container's log tail),
/// reported in status, as Events and to Slack, a webhook or Alertmanager.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = kube::core::Rule::new(
    "has(self.alerts) && has(self.alerts.checkRunningPods)"
).message("an alert must be set"))]
#[kube(
    group = "flotilla.dev",
    version = "v1alpha1",
    kind = "PodAlert",
    doc = "Turns unhealthy pods into incidents with their log tails, sent to status, Events, Slack, webhooks and Alertmanager.",
    namespaced,
    status = "PodAlertStatus",
    shortname = "pa",
    category = "flotilla",
    printcolumn = r#"{"name":"Firing","type":"integer","jsonPath":".status.firing","description":"incidents firing"}"#,
    printcolumn = r#"{"name":"Pending","type":"integer","jsonPath":".status.pending","description":"problems within their grace period"}"#,
    printcolumn = r#"{"name":"Sinks","type":"string","jsonPath":".status.conditions[?(@.type==\"SinksHealthy\")].status","description":"every sink delivered its last notification"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message","description":"the Ready condition's message (kubectl get -o wide)"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PodAlertSpec {
    /// What counts as unhealthy and when an incident opens and resolves.
    /// Required, with checkRunningPods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alerts: Option<AlertRules>,
    /// Which pods of this PodAlert's namespace are watched, by label.
    /// Omitted: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Watch pods of every namespace instead of this one. Honoured only for
    /// PodAlerts in the operator's --cluster-scope-namespaces (default: the
    /// operator's own namespace); elsewhere the PodAlert is refused with a
    /// condition, because pod logs can hold secrets.
    #[serde(default)]
    pub all_namespaces: bool,
    /// Containers, pods and log lines that never make an incident.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<Ignore>,
    /// How much of the failing container's log an incident carries, and
    /// what is redacted from it before it is held, shown or sent.
    #[serde(default)]
    #[schemars(default = "LogOptions::default")]
    pub logs: LogOptions,
    /// Minimum time between two openings of one incident on the sinks
    /// (Go duration, e.g. 1h). An incident that resolves and opens again
    /// within this time shows in status but is not sent again.
    #[serde(default = "default_cooldown")]
    #[schemars(default = "default_cooldown")]
    pub cooldown: GoDuration,
    /// Where notifications go. Events are on by default; the others are off
    /// until configured.
    #[serde(default)]
    #[schemars(default = "Sinks::default")]
    pub sinks: Sinks,
    /// A runbook link sent with every notification: in Slack's message, as
    /// the webhook's incident.runbookURL, as Alertmanager's runbook_url
    /// annotation and at the end of the Event's note. An http(s) URL in
    /// which {reason}, {namespace}, {workload} (Kind/name) and {container}
    /// are replaced by the incident's, percent-encoded (a workload's `/`
    /// kept), e.g. https://runbooks.example.com/pods/{reason}. Omitted: no
    /// link.
    #[serde(default, rename = "runbookURL", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 8, max = 1024), pattern(r#"^https?://[^\s<>|"`]+$"#))]
    pub runbook_url: Option<String>,
    /// Maintenance windows: until each one's `until`, the problems of the
    /// pods it selects, with one of its reasons, open no incident and send
    /// nothing (an incident already firing sends no escalation; its resolve
    /// is still sent, so a pager's incident closes with ours). They show in
    /// status.incidents as Silenced, naming the silence, and are counted in
    /// status.suppressed.Silenced; a problem still there when its silence
    /// ends opens then. A pod annotated `flotilla.dev/silence-until: <RFC
    /// 3339 time>` is silenced the same way for the PodAlerts of its own
    /// namespace (never for a cluster-wide one of another namespace), and
    /// so is every pod of a Deployment, StatefulSet, DaemonSet, Job or
    /// CronJob annotated so; a
    /// Namespace annotated so (an admin's maintenance window) for every
    /// PodAlert, cluster-wide ones too. A silence more than 7 days
    /// ahead is refused (not applied; a Warning Event, and
    /// status.silences says so). At most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub silences: Vec<Silence>,
}

impl PodAlertSpec {
    /// The label keys its selectors read (the PodAlert's and its
    /// silences'): what the pod views must keep for it.
    pub fn selector_keys(&self) -> impl Iterator<Item = &str> {
        self.selector.iter().chain(self.silences.iter().filter_map(|s| s.selector.as_ref())).flat_map(|s| s.keys())
    }
}

fn default_true() -> bool {
    true
}
fn default_tail_lines() -> i32 {
    50
}
fn default_max_bytes() -> i32 {
    8192
}
fn default_cooldown() -> GoDuration {
    GoDuration("1h".into())
}

/// What never makes an incident (each skip is counted in status.suppressed).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Ignore {
    /// Containers (and init containers) with these names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub container_names: Vec<ContainerName>,
    /// Pods whose name matches one of these globs ('*' any run of
    /// characters, '?' one character).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub pod_name_patterns: Vec<NameGlob>,
    /// Regular expressions (RE2 syntax); an incident whose log tail matches
    /// one is not sent anywhere (counted as LogPattern). They are matched
    /// against the redacted tail (see logs.redact), the text status and the
    /// sinks show: a pattern cannot match a secret's value, so it cannot be
    /// used to learn one either.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub log_patterns: Vec<LogPattern>,
}

/// A container name (a DNS label).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
#[serde(transparent)]
pub struct ContainerName(
    #[schemars(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))] pub String,
);

/// A pod-name glob: lowercase letters, digits, '-', '.', '*' and '?'.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(transparent)]
pub struct NameGlob(#[schemars(length(min = 1, max = 253), pattern(r"^[a-z0-9.*?-]+$"))] pub String);

/// A regular expression (RE2 syntax, at most 512 characters).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(transparent)]
pub struct LogPattern(#[schemars(length(min = 1, max = 512))] pub String);

/// How much log an incident carries, and what is redacted from it: once,
/// as it is read, so status, Events and every sink get the same redacted
/// text (the raw tail is never held).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogOptions {
    /// Lines from the end of the failing container's log (its previous run
    /// when it has restarted), default 50.
    #[serde(default = "default_tail_lines")]
    #[schemars(default = "default_tail_lines", range(min = 0, max = 1000))]
    pub tail_lines: i32,
    /// At most this many bytes of it (the end is kept), default 8192.
    #[serde(default = "default_max_bytes")]
    #[schemars(default = "default_max_bytes", range(min = 0, max = 65536))]
    pub max_bytes: i32,
    /// Redact the usual secrets from the tail before it is held, shown in
    /// status or sent to any sink (default true): each is replaced by
    /// "[redacted]". They are "Bearer <token>", the value of an
    /// Authorization header, AWS access key IDs (AKIA…, ASIA…) and secret
    /// keys (the value of aws_secret_access_key), JWTs, PEM private keys
    /// (the whole BEGIN…END block; from BEGIN to the end of the tail, or
    /// from its start to END, when the tail cuts the block), a URL's
    /// user:password@, and the value after password, passwd, secret, token,
    /// api_key, api-key or apikey (any case, also as the end of a longer
    /// name such as DB_PASSWORD) followed by '=' or ':'. False: only the
    /// redact patterns apply.
    #[serde(default = "default_true")]
    #[schemars(default = "default_true")]
    pub redact_defaults: bool,
    /// More regular expressions (RE2 syntax, the limits of
    /// ignore.logPatterns) whose matches are redacted, whatever
    /// redactDefaults says: the whole match, or only the first capture
    /// group that took part in it, e.g. 'session=([0-9a-f]+)' keeps
    /// "session=". Matches that overlap are one "[redacted]"; empty matches
    /// redact nothing. An invalid pattern makes the PodAlert Ready=False
    /// (InvalidSpec) with a Warning Event.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub redact: Vec<LogPattern>,
    /// Show the last 5 Warning Events about the incident's pod beside the
    /// log tail (default true), each "<reason>: <message> (xN)", newest
    /// last, at most 256 bytes, redacted as the tail is: e.g. the kubelet's
    /// "BackOff: Back-off restarting failed container …". Read with the
    /// tail, for a new or escalated incident; in the webhook's
    /// incident.events, Slack, Alertmanager's `events` annotation and
    /// status, not in the Event note. Needs `list` on core Events.
    #[serde(default = "default_true")]
    #[schemars(default = "default_true")]
    pub events: bool,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            tail_lines: default_tail_lines(),
            max_bytes: default_max_bytes(),
            redact_defaults: default_true(),
            redact: Vec::new(),
            events: default_true(),
        }
    }
}

/// Where notifications go.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Sinks {
    /// Kubernetes Events on this PodAlert: Warning IncidentOpened and
    /// IncidentEscalated, Normal IncidentResolved (default true).
    #[serde(default = "default_true")]
    #[schemars(default = "default_true")]
    pub events: bool,
    /// Slack: with webhookSecretRef, an incoming webhook gets one Block
    /// Kit message per incident transition (opened, escalated, resolved);
    /// with botTokenSecretRef and channel, each incident is one thread
    /// (its opening a message kept up to date with its state, the later
    /// transitions replies in its thread).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack: Option<SlackSink>,
    /// A generic webhook: a JSON document per transition (the schema is in
    /// the README, kind PodAlertNotification).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookSink>,
    /// An Alertmanager (API v2): alerts re-sent every minute while firing,
    /// resolved with endsAt when the incident resolves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alertmanager: Option<AlertmanagerSink>,
    /// A Microsoft Teams Workflows webhook ("Post to a channel when a
    /// webhook request is received"): one Adaptive Card per incident
    /// transition. The URL's host must be one of the operator's
    /// --teams-hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub teams: Option<TeamsSink>,
    /// PagerDuty (Events API v2, to the operator's --pagerduty-url): a
    /// trigger when an incident opens or escalates and a resolve when it
    /// resolves, under one dedup key per incident, so PagerDuty's incident
    /// resolves with ours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pagerduty: Option<PagerDutySink>,
}

impl Default for Sinks {
    fn default() -> Self {
        Self { events: true, slack: None, webhook: None, alertmanager: None, teams: None, pagerduty: None }
    }
}

/// Microsoft Teams (a Workflows webhook posting Adaptive Cards).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TeamsSink {
    /// The key of a Secret in this PodAlert's namespace holding the
    /// workflow's webhook URL.
    pub webhook_secret_ref: SecretKeyRef,
}

/// PagerDuty Events API v2.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PagerDutySink {
    /// The key of a Secret in this PodAlert's namespace holding the
    /// service's integration (routing) key: 32 letters and digits.
    pub routing_key_secret_ref: SecretKeyRef,
    /// The severity of the alerts triggered (default error).
    #[serde(default)]
    #[schemars(default = "PagerDutySeverity::default")]
    pub severity: PagerDutySeverity,
}

/// PagerDuty's severities.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PagerDutySeverity {
    Critical,
    #[default]
    Error,
    Warning,
    Info,
}

impl PagerDutySeverity {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Critical => "critical",
            Self::Error => "error",
            Self::Warning => "warning",
            Self::Info => "info",
        }
    }
}

/// Slack: an incoming webhook (webhookSecretRef), or a bot token and a
/// channel (botTokenSecretRef and channel) for one thread per incident.
/// Exactly one of the two.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "has(self.webhookSecretRef) != has(self.botTokenSecretRef)"
).message("give webhookSecretRef, or botTokenSecretRef with channel, not both"))]
#[x_kube(validation = kube::core::Rule::new(
    "has(self.botTokenSecretRef) == has(self.channel)"
).message("botTokenSecretRef and channel go together: a bot token needs the channel to post to, and a webhook posts to its own channel"))]
pub struct SlackSink {
    /// The key of a Secret in this PodAlert's namespace holding an incoming
    /// webhook URL (read with get; the operator never lists Secrets): one
    /// message per incident transition (opened, escalated, resolved). Its
    /// host must be one of the operator's --slack-hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_secret_ref: Option<SecretKeyRef>,
    /// The key of a Secret in this PodAlert's namespace holding a Slack
    /// bot token (xoxb-…, with the chat:write scope; the bot must be a
    /// member of the channel). Each incident is one thread: its opening is
    /// posted to channel with the Web API's chat.postMessage, its later
    /// transitions (escalated, resolved) are replies in that thread, and
    /// the first message is updated in place to show the incident's
    /// current state. The token is sent only to the operator's
    /// --slack-api-url (default https://slack.com/api). Needs channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_token_secret_ref: Option<SecretKeyRef>,
    /// The channel the bot posts to, with botTokenSecretRef: its ID (e.g.
    /// C0123456789, found in the channel's details) or its name (e.g.
    /// alerts-prod or #alerts-prod: lowercase letters, digits, '-' and
    /// '_', at most 80). The ID keeps working when the channel is renamed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 81), pattern(r"^([CGD][A-Z0-9]{6,20}|#?[a-z0-9][a-z0-9_-]{0,79})$"))]
    pub channel: Option<String>,
}

/// Generic webhook.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookSink {
    /// The key of a Secret in this PodAlert's namespace holding the URL.
    pub url_secret_ref: SecretKeyRef,
}

/// Alertmanager.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertmanagerSink {
    /// Alertmanager's base URL, e.g. http://alertmanager.monitoring:9093;
    /// alerts are POSTed to <url>/api/v2/alerts.
    #[schemars(length(min = 8, max = 2048), pattern(r"^https?://[^\s]+$"))]
    pub url: String,
}

/// A key of a Secret in the PodAlert's namespace (the suite's one shape).
pub type SecretKeyRef = flotilla_shared::key_ref::KeyRef;
