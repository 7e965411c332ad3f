//! `spec.alerts`: what makes an incident, and the reasons one has. Every
//! field's doc comment is its `kubectl explain` description.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use kube::KubeSchema;

use super::GoDuration;

fn default_pending_after() -> GoDuration {
    GoDuration("5m".into())
}
fn default_restart_window() -> GoDuration {
    GoDuration("10m".into())
}
fn default_resolve_after() -> GoDuration {
    GoDuration("5m".into())
}
fn default_rollout_timeout() -> GoDuration {
    GoDuration("10m".into())
}
fn default_restart_threshold() -> i32 {
    3
}

/// When a pod is unhealthy, and for how long before it is an incident.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "duration(self.pendingAfter) <= duration('24h') && duration(self.resolveAfter) <= duration('24h') && duration(self.restartWindow) >= duration('1m') && duration(self.restartWindow) <= duration('24h') && duration(self.rolloutTimeout) >= duration('1m') && duration(self.rolloutTimeout) <= duration('24h')"
).message("pendingAfter and resolveAfter are at most 24h; restartWindow and rolloutTimeout are between 1m and 24h"))]
pub struct AlertRules {
    /// Check this namespace's pods (the seed's switch; required). False
    /// pauses the rule: nothing is checked and open incidents are dropped
    /// without a resolve notification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_running_pods: Option<bool>,
    /// A pod that stays Pending (unschedulable, image not pulled, container
    /// not created) or a container that stays not Ready this long is an
    /// incident (Go duration; default 5m). Crashes, OOM kills, errors and
    /// evictions have no such grace: they open at once.
    #[serde(default = "default_pending_after")]
    #[schemars(default = "default_pending_after")]
    pub pending_after: GoDuration,
    /// Restarts of a container within restartWindow before its crash loop
    /// is an incident (default 3).
    #[serde(default = "default_restart_threshold")]
    #[schemars(default = "default_restart_threshold", range(min = 1, max = 1000))]
    pub restart_threshold: i32,
    /// The window restartThreshold counts restarts in; a container whose
    /// last crash is older than this is no longer crash-looping (Go duration;
    /// default 10m).
    #[serde(default = "default_restart_window")]
    #[schemars(default = "default_restart_window")]
    pub restart_window: GoDuration,
    /// Reasons that open incidents. Omitted or empty: all of them. Problems
    /// with another reason are counted in status.suppressed.ReasonNotSelected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub reasons: Vec<crate::crd::Reason>,
    /// Workload rollouts (kube-prometheus's KubeDeploymentRolloutStuck,
    /// KubeStatefulSetUpdateNotRolledOut, KubeDaemonSetRolloutStuck): a
    /// Deployment whose rollout stopped (its Progressing condition False,
    /// ProgressDeadlineExceeded: spec.progressDeadlineSeconds without
    /// progress), or a StatefulSet or DaemonSet whose rollout (its spec
    /// not yet observed, fewer pods updated than wanted) has not progressed
    /// for rolloutTimeout (no more pods updated),
    /// is a RolloutStuck incident of the workload, until it progresses
    /// again. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rollouts: bool,
    /// How long a StatefulSet's or DaemonSet's rollout may go without
    /// progress (no more pods updated) before it is stuck
    /// (Go duration, 1m to 24h; default 10m). Counted from when the
    /// operator saw its last progress (a restart of the operator counts
    /// again). A Deployment's own spec.progressDeadlineSeconds decides for
    /// it.
    #[serde(default = "default_rollout_timeout")]
    #[schemars(default = "default_rollout_timeout")]
    pub rollout_timeout: GoDuration,
    /// Jobs (kube-prometheus's KubeJobFailed): a Job that failed (its
    /// backoff limit, its deadline, a pod failure policy) is a JobFailed
    /// incident of the Job, with a failed pod's log tail when one is
    /// left; for a CronJob's Jobs, an incident of the CronJob while its
    /// newest finished run is a failed one (a later successful run, or its
    /// status.lastSuccessfulTime, resolves it); and a CronJob that did not start a run when due (5
    /// minutes late, or its startingDeadlineSeconds when shorter, at least
    /// 30 s) is a MissedSchedule incident until it starts one. Default
    /// false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub jobs: bool,
    /// How long an incident must stay healthy before it resolves (Go
    /// duration; default 5m): a pod that is Running for a minute between two
    /// crashes does not resolve and fire again.
    #[serde(default = "default_resolve_after")]
    #[schemars(default = "default_resolve_after")]
    pub resolve_after: GoDuration,
}

/// Why a container or pod is unhealthy.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
pub enum Reason {
    /// A container keeps crashing: restartThreshold restarts within
    /// restartWindow, its last exit non-zero.
    CrashLoopBackOff,
    /// The image cannot be pulled, for pendingAfter (the kubelet's
    /// ErrImagePull and ImagePullBackOff, which alternate, are both this).
    ImagePullBackOff,
    /// The image can never be pulled as written (InvalidImageName,
    /// ErrImageNeverPull), for pendingAfter.
    ErrImagePull,
    /// The container's configuration refers to something missing (a
    /// ConfigMap, a Secret, a key), for pendingAfter.
    CreateContainerConfigError,
    /// The runtime could not create or start the container, for pendingAfter.
    CreateContainerError,
    /// The container was killed for exceeding its memory limit (each kill
    /// once: an old OOMKilled in lastState never fires again).
    OOMKilled,
    /// A container that does not restart ended with a non-zero exit code.
    Error,
    /// The kubelet evicted the pod (node pressure).
    Evicted,
    /// The pod was not scheduled or its containers not started for pendingAfter.
    Pending,
    /// A running container was not Ready for pendingAfter.
    NotReady,
    /// A Deployment's rollout stopped: ProgressDeadlineExceeded
    /// (alerts.rollouts).
    RolloutStuck,
    /// A Job failed, or a CronJob's newest finished run did (alerts.jobs).
    JobFailed,
    /// A CronJob did not start a run when due (alerts.jobs): its
    /// concurrencyPolicy Forbid with a run still going, its
    /// startingDeadlineSeconds passed, the controller behind.
    MissedSchedule,
}

impl Reason {
    pub const ALL: [Reason; 13] = [
        Reason::CrashLoopBackOff,
        Reason::ImagePullBackOff,
        Reason::ErrImagePull,
        Reason::CreateContainerConfigError,
        Reason::CreateContainerError,
        Reason::OOMKilled,
        Reason::Error,
        Reason::Evicted,
        Reason::Pending,
        Reason::NotReady,
        Reason::RolloutStuck,
        Reason::JobFailed,
        Reason::MissedSchedule,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::CrashLoopBackOff => "CrashLoopBackOff",
            Reason::ImagePullBackOff => "ImagePullBackOff",
            Reason::ErrImagePull => "ErrImagePull",
            Reason::CreateContainerConfigError => "CreateContainerConfigError",
            Reason::CreateContainerError => "CreateContainerError",
            Reason::OOMKilled => "OOMKilled",
            Reason::Error => "Error",
            Reason::Evicted => "Evicted",
            Reason::Pending => "Pending",
            Reason::NotReady => "NotReady",
            Reason::RolloutStuck => "RolloutStuck",
            Reason::JobFailed => "JobFailed",
            Reason::MissedSchedule => "MissedSchedule",
        }
    }

    /// Reasons that describe a pod stuck in a state (they wait pendingAfter
    /// before opening); the others are events that already happened.
    pub fn is_stuck(self) -> bool {
        matches!(
            self,
            Reason::ImagePullBackOff
                | Reason::ErrImagePull
                | Reason::CreateContainerConfigError
                | Reason::CreateContainerError
                | Reason::Pending
                | Reason::NotReady
        )
    }

    /// Alertmanager's `severity` label.
    pub fn severity(self) -> &'static str {
        match self {
            Reason::NotReady | Reason::Pending | Reason::RolloutStuck | Reason::JobFailed | Reason::MissedSchedule => {
                "warning"
            }
            _ => "critical",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
