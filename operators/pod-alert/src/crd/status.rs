//! What pod-alert reports of a PodAlert: its incidents, what was left
//! out and why, and its sinks' state.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What pod-alert found and sent for this PodAlert.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodAlertStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready (the PodAlert is valid and being evaluated; False with
    /// TooManyPodAlerts past the operator's per-namespace limit),
    /// SinksHealthy (every sink delivered its last notification) and
    /// Throttled (notifications wait for the namespace's rate limit).
    #[serde(default)]
    #[schemars(schema_with = "flotilla_shared::conditions::schema")]
    pub conditions: Vec<Condition>,
    /// Incidents firing (notified, not resolved).
    #[serde(default)]
    pub firing: i32,
    /// Problems still within their grace period (not notified yet).
    #[serde(default)]
    pub pending: i32,
    /// The incidents: firing, pending, resolving (healthy, within
    /// resolveAfter) and recently resolved (kept for restartWindow so that an
    /// old termination never fires again). At most 20; firing first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incidents: Vec<IncidentStatus>,
    /// What was held back, by cause. Pods and containers skipped in the last
    /// evaluation: Completed, Terminating, SchedulingGated, IgnoredContainer,
    /// IgnoredPod, ReasonNotSelected, LabelsTooLarge (more than 4 KiB of the
    /// labels selectors read: such a pod matches no selector). Notifications not sent since the
    /// operator started evaluating this PodAlert: LogPattern, Cooldown,
    /// RecoveredInGrace (healthy again within the grace), AlreadyNotified.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub suppressed: BTreeMap<String, i64>,
    /// Each configured sink's delivery state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sinks: Vec<SinkStatus>,
    /// Each of spec.silences, in its order: Active, Ended or Refused, and
    /// how many problems it silenced at the last evaluation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub silences: Vec<SilenceStatus>,
}

/// One of spec.silences as the last evaluation applied it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SilenceStatus {
    /// Active (until is ahead), Ended (until has passed) or Refused (until
    /// is more than 7 days ahead: not applied).
    pub state: String,
    /// Its until.
    pub until: String,
    /// Its comment.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub comment: String,
    /// Problems it silenced at the last evaluation.
    #[serde(default)]
    pub problems: i32,
}

/// One incident.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncidentStatus {
    /// Pending (in its grace period), Firing, Resolving (healthy, waiting
    /// resolveAfter) or Resolved.
    pub state: String,
    /// The pods' namespace.
    pub namespace: String,
    /// The owning workload, Kind/name (a ReplicaSet's pods belong to its
    /// Deployment); a pod without a controller is Pod/<name>.
    pub workload: String,
    /// The container (empty for pod-level reasons: Evicted, Pending).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container: String,
    /// Why (see spec.alerts.reasons).
    pub reason: String,
    /// What the kubelet or scheduler said, e.g. the exit code.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Pods concerned (at most 10 names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<String>,
    /// How many pods are concerned.
    #[serde(default)]
    pub pod_count: i32,
    /// The highest restart count among them.
    #[serde(default)]
    pub restarts: i32,
    /// When the problem started.
    pub since: Time,
    /// When the incident last changed state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<Time>,
    /// The restart level last notified (0, 3, 10 or 50): escalations are
    /// sent when restarts pass the next one.
    #[serde(default)]
    pub notified_level: i32,
    /// Whether sinks were told of the opening (false while pending, or when
    /// suppressed by cooldown or a log pattern).
    #[serde(default)]
    pub notified: bool,
    /// Container incarnations already notified (terminated container IDs):
    /// never notified again, even after an operator restart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incarnations: Vec<String>,
    /// The end of the failing container's log tail (its crashed run's),
    /// at most 4 KiB here (the sinks get all of spec.logs); "logs
    /// unavailable: …" when the API could not serve them, "(log tail left
    /// out: …)" past the operator's log budget.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub logs: String,
    /// The last Warning Events about the incident's pod, read with the log
    /// tail (spec.logs.events): at most 5, newest last, each
    /// "<reason>: <message> (xN)" of at most 256 bytes, redacted as the
    /// tail; "events unavailable: …" when the API could not list them.
    /// Kept across an operator restart (from here) until the next read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 5))]
    pub events: Vec<String>,
    /// What silences it (state Silenced): "spec.silences[N]" with the
    /// silence's comment, or "<pod|deployment|statefulset|daemonset|job|cronjob|namespace>
    /// <name> annotation flotilla.dev/silence-until".
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub silenced_by: String,
    /// Until when (RFC 3339): then, if the problem is still there, it opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silenced_until: Option<Time>,
    /// The Slack thread of the incident (sinks.slack with a bot token):
    /// where its first message was posted. Later transitions reply there
    /// and update that message, also after an operator restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack_thread: Option<SlackThread>,
}

/// A Slack message that heads an incident's thread, as Slack's
/// chat.postMessage named it, and the sink it was posted with: a thread
/// posted with another channel or token than the sink's current ones is
/// not replied to (a new message starts the thread instead).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SlackThread {
    /// The channel's ID (Slack's answer, whatever spec.sinks.slack.channel
    /// named it by).
    #[schemars(length(min = 1, max = 32))]
    pub channel: String,
    /// The message's timestamp (its ID in the channel, e.g.
    /// 1712345678.123456).
    #[schemars(length(min = 1, max = 32))]
    pub ts: String,
    /// spec.sinks.slack.channel when the thread was posted. Absent in a
    /// thread recorded before it was kept: such a thread is not reused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 81))]
    pub spec_channel: Option<String>,
    /// spec.sinks.slack.botTokenSecretRef (the Secret's name and key, never
    /// the token) when the thread was posted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_token_secret_ref: Option<crate::crd::SecretKeyRef>,
}

impl SlackThread {
    /// Whether this thread was posted by the sink with `channel` (as the
    /// spec names it) and the token in `token`: only then may it be
    /// replied to. Slack's channel ID cannot be compared with a name, so
    /// the spec's own value is kept with the thread.
    pub fn posted_with(&self, channel: &str, token: &crate::crd::SecretKeyRef) -> bool {
        self.spec_channel.as_deref() == Some(channel) && self.bot_token_secret_ref.as_ref() == Some(token)
    }
}

/// One sink's delivery state.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SinkStatus {
    /// events, slack, webhook, alertmanager, teams or pagerduty.
    pub name: String,
    /// Whether the last delivery (or configuration check) succeeded.
    pub healthy: bool,
    /// When a notification was last delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success: Option<Time>,
    /// The last failure: its class only (refused by policy, unreachable,
    /// timeout, HTTP 4xx, HTTP 5xx), Slack's error code for a bot token's
    /// request that Slack refused ("slack: channel_not_found"), or a
    /// configuration problem (a Secret not found).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_error: String,
    /// When it happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_time: Option<Time>,
    /// Notifications delivered since the operator started.
    #[serde(default)]
    pub delivered: i64,
    /// Notifications given up after their retries.
    #[serde(default)]
    pub failed: i64,
}

/// At most this many incidents in status.
pub const MAX_INCIDENTS_LISTED: usize = 20;
/// At most this many pod names per incident in status.
pub const MAX_PODS_LISTED: usize = 10;

impl flotilla_shared::status::ReportedStatus for PodAlertStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}
