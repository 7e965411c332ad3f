//! A PodAlert's spec, checked and in usable form: durations parsed, globs
//! and log patterns compiled, the cluster-wide scope decided. Pure. The CRD
//! schema rejects most of this at admission; this is the runtime defence
//! for objects stored before a schema change, and it turns what remains into
//! a condition instead of a crash.

use std::sync::Arc;
use std::time::Duration;

use flotilla_shared::selector::{Selector, glob_match};

use crate::crd::{LogOptions, LogPattern, PodAlertSpec, Reason};
use crate::redact::Redactor;
use crate::silence::{NamespaceSilences, SilenceRule, WorkloadSilences};

/// Why a spec cannot be used, for the Ready condition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("an alert must be set (spec.alerts.checkRunningPods)")]
    NoAlert,
    #[error("{0}")]
    Spec(String),
    #[error(
        "allNamespaces is honoured only for PodAlerts in {allowed} (the operator's --cluster-scope-namespaces); pod logs can hold secrets"
    )]
    ClusterScopeRefused { allowed: String },
}

impl Invalid {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Invalid::NoAlert => "NoAlertSet",
            Invalid::Spec(_) => "InvalidSpec",
            Invalid::ClusterScopeRefused { .. } => "ClusterScopeRefused",
        }
    }
}

/// Parses a Go duration (`90s`, `5m`, `1h30m`, `250ms`).
pub use flotilla_shared::duration::parse as parse_duration;

/// The longest `alerts.restartWindow` (the CRD's bound too): a container's
/// exit older than this can no longer count for any PodAlert, and a pod
/// view does not keep it (`pod::view`).
pub const MAX_RESTART_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The checked rule.
#[derive(Debug, Clone)]
pub struct Rules {
    /// False: paused.
    pub enabled: bool,
    pub pending_after: Duration,
    pub restart_threshold: u32,
    pub restart_window: Duration,
    pub resolve_after: Duration,
    /// Empty: every reason.
    pub reasons: Vec<Reason>,
    pub selector: Option<Selector>,
    /// Watch every namespace (allowed by the operator's policy).
    pub all_namespaces: bool,
    pub ignore_containers: Vec<String>,
    pub ignore_pods: Vec<String>,
    pub log_patterns: Vec<regex::Regex>,
    /// What is taken out of every log tail before it is held (spec.logs.redact,
    /// redactDefaults). Shared: the log reads take it along.
    pub redactor: Arc<Redactor>,
    pub tail_lines: u32,
    pub max_bytes: usize,
    /// spec.logs.events: the pod's last Warning Events shown beside the tail.
    pub events: bool,
    pub cooldown: Duration,
    /// spec.runbookURL, a template ([`crate::notify::runbook_url`]).
    pub runbook: Option<Arc<str>>,
    /// spec.silences, checked.
    pub silences: Vec<SilenceRule>,
    /// The PodAlert's namespace: a pod's silence annotation counts only
    /// here (a tenant cannot mute a cluster-wide PodAlert of the platform
    /// team by annotating its own pods).
    pub namespace: String,
    /// The namespaces' silence annotations as the operator last saw them
    /// (not the spec's: set by the reconcile, empty here).
    pub namespace_silences: Arc<NamespaceSilences>,
    /// The workloads' silence annotations, likewise.
    pub workload_silences: WorkloadSilences,
    /// alerts.rollouts: stalled rollouts are incidents.
    pub rollouts: bool,
    /// alerts.rolloutTimeout: a StatefulSet's or DaemonSet's rollout
    /// without progress this long is stalled.
    pub rollout_timeout: Duration,
    /// alerts.jobs: failed Jobs (a CronJob's newest run) are incidents.
    pub jobs: bool,
}

/// Regex program size limit for one user regex (ignore.logPatterns,
/// logs.redact): an untrusted pattern cannot make the operator compile a
/// huge automaton. Their count and length are bounded by the schema
/// (`crd::LogPattern`: 512 characters, 32 per list).
const REGEX_SIZE_LIMIT: usize = 256 * 1024;

/// Compiles one user regex of the spec at `field`, within [`REGEX_SIZE_LIMIT`].
fn user_regex(field: &str, p: &LogPattern) -> Result<regex::Regex, Invalid> {
    regex::RegexBuilder::new(&p.0)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| Invalid::Spec(format!("{field} {:?}: {e}", p.0)))
}

/// The redaction `logs` asks for, its patterns compiled as every user regex
/// is ([`user_regex`]).
pub fn redactor(logs: &LogOptions) -> Result<Redactor, Invalid> {
    let custom = logs.redact.iter().map(|p| user_regex("logs.redact", p)).collect::<Result<Vec<_>, _>>()?;
    Redactor::new(logs.redact_defaults, custom).map_err(|e| Invalid::Spec(e.to_string()))
}

fn bounded(name: &str, d: Duration, max: Duration) -> Result<Duration, Invalid> {
    if d > max {
        return Err(Invalid::Spec(format!("{name} is longer than {}h", max.as_secs() / 3600)));
    }
    Ok(d)
}

impl Rules {
    /// Checks `spec` of a PodAlert in `namespace`; `cluster_scope` are the
    /// namespaces whose PodAlerts may watch every namespace.
    pub fn new(spec: &PodAlertSpec, namespace: &str, cluster_scope: &[String]) -> Result<Self, Invalid> {
        let alerts = spec.alerts.as_ref().ok_or(Invalid::NoAlert)?;
        let enabled = alerts.check_running_pods.ok_or(Invalid::NoAlert)?;
        let dur = |name: &str, s: &str| parse_duration(s).map_err(|e| Invalid::Spec(format!("{name}: {e}")));
        let day = Duration::from_secs(24 * 3600);
        let pending_after = bounded("alerts.pendingAfter", dur("alerts.pendingAfter", &alerts.pending_after.0)?, day)?;
        let resolve_after = bounded("alerts.resolveAfter", dur("alerts.resolveAfter", &alerts.resolve_after.0)?, day)?;
        let restart_window = bounded(
            "alerts.restartWindow",
            dur("alerts.restartWindow", &alerts.restart_window.0)?,
            MAX_RESTART_WINDOW,
        )?;
        if restart_window < Duration::from_secs(60) {
            return Err(Invalid::Spec("alerts.restartWindow is shorter than 1m".into()));
        }
        let rollout_timeout =
            bounded("alerts.rolloutTimeout", dur("alerts.rolloutTimeout", &alerts.rollout_timeout.0)?, day)?;
        if rollout_timeout < Duration::from_secs(60) {
            return Err(Invalid::Spec("alerts.rolloutTimeout is shorter than 1m".into()));
        }
        let cooldown = bounded("cooldown", dur("cooldown", &spec.cooldown.0)?, 7 * day)?;
        let restart_threshold = u32::try_from(alerts.restart_threshold)
            .ok()
            .filter(|t| (1..=1000).contains(t))
            .ok_or_else(|| Invalid::Spec("alerts.restartThreshold is not between 1 and 1000".into()))?;
        let selector = spec
            .selector
            .as_ref()
            .map(Selector::new)
            .transpose()
            .map_err(|e| Invalid::Spec(format!("selector: {e}")))?;
        if spec.all_namespaces && !cluster_scope.iter().any(|n| n == namespace) {
            let allowed = if cluster_scope.is_empty() { "no namespace".to_string() } else { cluster_scope.join(", ") };
            return Err(Invalid::ClusterScopeRefused { allowed });
        }
        let ignore = spec.ignore.clone().unwrap_or_default();
        let log_patterns =
            ignore.log_patterns.iter().map(|p| user_regex("ignore.logPatterns", p)).collect::<Result<Vec<_>, _>>()?;
        let logs = &spec.logs;
        let redactor = Arc::new(redactor(logs)?);
        Ok(Self {
            enabled,
            pending_after,
            restart_threshold,
            restart_window,
            resolve_after,
            reasons: alerts.reasons.clone(),
            selector,
            all_namespaces: spec.all_namespaces,
            ignore_containers: ignore.container_names.iter().map(|c| c.0.clone()).collect(),
            ignore_pods: ignore.pod_name_patterns.iter().map(|g| g.0.clone()).collect(),
            log_patterns,
            redactor,
            tail_lines: u32::try_from(logs.tail_lines.clamp(0, 1000)).unwrap_or(50),
            max_bytes: usize::try_from(logs.max_bytes.clamp(0, 65536)).unwrap_or(8192),
            events: logs.events,
            cooldown,
            runbook: spec.runbook_url.as_deref().map(Arc::from),
            silences: SilenceRule::all(&spec.silences)?,
            namespace: namespace.to_string(),
            namespace_silences: Arc::default(),
            workload_silences: WorkloadSilences::default(),
            rollouts: alerts.rollouts,
            rollout_timeout,
            jobs: alerts.jobs,
        })
    }

    /// Whether incidents with `reason` are wanted.
    pub fn selects_reason(&self, reason: Reason) -> bool {
        self.reasons.is_empty() || self.reasons.contains(&reason)
    }

    /// Whether the pod named `name` is ignored.
    pub fn ignores_pod(&self, name: &str) -> bool {
        self.ignore_pods.iter().any(|g| glob_match(g, name))
    }

    pub fn ignores_container(&self, name: &str) -> bool {
        self.ignore_containers.iter().any(|c| c == name)
    }

    /// The ignore.logPatterns entry the log tail matches, if any. The tail
    /// given is the redacted one (as held and shown): a pattern never sees a
    /// secret, so its verdict (counted in status) cannot reveal one.
    pub fn suppressing_pattern(&self, logs: &str) -> Option<&str> {
        self.log_patterns.iter().find(|re| re.is_match(logs)).map(regex::Regex::as_str)
    }

    /// How long a problem with `reason` must last before it opens.
    pub fn grace(&self, reason: Reason) -> Duration {
        if reason.is_stuck() { self.pending_after } else { Duration::ZERO }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::crd::{AlertRules, GoDuration, Ignore};

    fn spec() -> PodAlertSpec {
        serde_json::from_value(serde_json::json!({"alerts": {"checkRunningPods": true}})).unwrap()
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1m1s").unwrap(), Duration::from_secs(61));
        // Go's ParseDuration takes fractions, and so do we (shared::duration).
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        for bad in ["", "5", "m", "1d", "-1s", "1h 2m", "9999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let r = Rules::new(&spec(), "team-a", &[]).unwrap();
        assert!(r.enabled);
        assert_eq!(r.pending_after, Duration::from_secs(300));
        assert_eq!(r.restart_threshold, 3);
        assert_eq!(r.restart_window, Duration::from_secs(600));
        assert_eq!(r.resolve_after, Duration::from_secs(300));
        assert_eq!(r.cooldown, Duration::from_secs(3600));
        assert_eq!((r.tail_lines, r.max_bytes), (50, 8192));
        assert!(r.events, "Warning Events shown unless logs.events is false");
        let off: PodAlertSpec = serde_json::from_value(
            serde_json::json!({"alerts": {"checkRunningPods": true}, "logs": {"events": false, "tailLines": 10}}),
        )
        .unwrap();
        assert!(!Rules::new(&off, "team-a", &[]).unwrap().events);
        let partial: PodAlertSpec = serde_json::from_value(
            serde_json::json!({"alerts": {"checkRunningPods": true}, "logs": {"tailLines": 10}}),
        )
        .unwrap();
        assert!(Rules::new(&partial, "team-a", &[]).unwrap().events, "a logs block without it: true");
        assert!(Reason::ALL.iter().all(|&x| r.selects_reason(x)));
        assert_eq!(r.grace(Reason::CrashLoopBackOff), Duration::ZERO);
        assert_eq!(r.grace(Reason::ImagePullBackOff), Duration::from_secs(300));
    }

    #[test]
    fn the_seeds_rule_without_an_alert_is_refused() {
        let s: PodAlertSpec = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(Rules::new(&s, "a", &[]).unwrap_err(), Invalid::NoAlert);
        let s: PodAlertSpec = serde_json::from_value(serde_json::json!({"alerts": {}})).unwrap();
        assert_eq!(
            Rules::new(&s, "a", &[]).unwrap_err().to_string(),
            "an alert must be set (spec.alerts.checkRunningPods)"
        );
    }

    #[test]
    fn cluster_scope_only_from_trusted_namespaces() {
        let mut s = spec();
        s.all_namespaces = true;
        let trusted = vec!["flotilla".to_string()];
        assert!(Rules::new(&s, "flotilla", &trusted).unwrap().all_namespaces);
        let e = Rules::new(&s, "team-a", &trusted).unwrap_err();
        assert_eq!(e.reason(), "ClusterScopeRefused");
        assert!(e.to_string().contains("flotilla"));
    }

    #[test]
    fn bad_values_are_named() {
        let mut s = spec();
        s.alerts = Some(AlertRules { restart_window: GoDuration("10s".into()), ..s.alerts.unwrap() });
        assert!(Rules::new(&s, "a", &[]).unwrap_err().to_string().contains("restartWindow"));
        let mut s = spec();
        s.ignore = Some(Ignore { log_patterns: vec![LogPattern("(unclosed".into())], ..Default::default() });
        assert!(Rules::new(&s, "a", &[]).unwrap_err().to_string().contains("logPatterns"));
        let mut s = spec();
        s.ignore = Some(Ignore { log_patterns: vec![LogPattern("a{1000}{1000}".into())], ..Default::default() });
        assert!(Rules::new(&s, "a", &[]).is_err(), "a huge automaton is refused");
        // logs.redact: the same compiler, the same bounds, its own field named.
        let mut s = spec();
        s.logs.redact = vec![LogPattern("(unclosed".into())];
        let e = Rules::new(&s, "a", &[]).unwrap_err();
        assert_eq!(e.reason(), "InvalidSpec");
        assert!(e.to_string().contains("logs.redact"), "{e}");
        s.logs.redact = vec![LogPattern("a{1000}{1000}".into())];
        assert!(
            Rules::new(&s, "a", &[]).unwrap_err().to_string().contains("logs.redact"),
            "a huge automaton is refused"
        );
    }

    #[test]
    fn redaction_is_on_by_default_and_can_be_turned_off() {
        let r = Rules::new(&spec(), "a", &[]).unwrap();
        assert_eq!(r.redactor.redact("password=hunter2"), "password=[redacted]");
        let s: PodAlertSpec = serde_json::from_value(serde_json::json!({
            "alerts": {"checkRunningPods": true},
            "logs": {"redactDefaults": false, "redact": ["ssn=\\d+"]}
        }))
        .unwrap();
        let r = Rules::new(&s, "a", &[]).unwrap();
        assert_eq!(r.redactor.redact("password=hunter2 ssn=123"), "password=hunter2 [redacted]");
    }

    #[test]
    fn ignores() {
        let mut s = spec();
        s.ignore = Some(
            serde_json::from_value(serde_json::json!({
                "containerNames": ["istio-proxy"], "podNamePatterns": ["canary-*"], "logPatterns": ["expected shutdown"]
            }))
            .unwrap(),
        );
        let r = Rules::new(&s, "a", &[]).unwrap();
        assert!(r.ignores_container("istio-proxy") && !r.ignores_container("app"));
        assert!(r.ignores_pod("canary-7f9c") && !r.ignores_pod("web-1"));
        assert_eq!(r.suppressing_pattern("...expected shutdown..."), Some("expected shutdown"));
        assert_eq!(r.suppressing_pattern("panic"), None);
    }
}
