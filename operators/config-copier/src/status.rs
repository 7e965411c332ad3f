//! A rule's status from what a reconcile found: counts, the conflicts (capped
//! list) and the conditions `Ready` and `Conflicting`; what of it is no
//! change worth a write ([`ReportedStatus`]). Pure.

use flotilla_shared::Conditions;
use flotilla_shared::conditions::INVALID_SPEC;
use flotilla_shared::status::ReportedStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::crd::{ConflictEntry, CopyRuleStatus, MAX_CONFLICTS_LISTED, SkippedSource};

pub const CONFLICTING: &str = "Conflicting";

/// What one reconcile found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub sources: usize,
    pub namespaces: usize,
    pub desired: usize,
    pub in_sync: usize,
    pub conflicts: Vec<ConflictEntry>,
    /// Failed writes, as messages.
    pub failures: Vec<String>,
    /// The spec cannot be used (and why).
    pub invalid: Option<String>,
    /// The spec asks for what the missing admission policy guards (and why).
    pub refused: Option<String>,
    /// The sources cannot be read (and why).
    pub sources_unavailable: Option<String>,
    /// The sources exceed the per-rule budget (and by how much).
    pub too_large: Option<String>,
    /// `target.name` and several sources: nothing decided (why).
    pub ambiguous: Option<String>,
    /// Some sources' copy names are not valid object names (why); the
    /// others are copied.
    pub names_invalid: Option<String>,
    /// Protected namespaces the selection matched.
    pub protected: Vec<String>,
    /// Selected objects that are not copied.
    pub skipped: Vec<SkippedSource>,
    /// The rule is being deleted and a copy could not be (why).
    pub prune_failed: Option<String>,
    /// `rolloutOnChange: true`: whether the operator rolls workloads and
    /// where (`None`: the rule does not ask).
    pub rollouts: Option<Rollouts>,
}

/// Condition type saying what becomes of `rolloutOnChange`.
pub const ROLLOUT_ON_CHANGE: &str = "RolloutOnChange";

/// What `rolloutOnChange: true` does for a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rollouts {
    /// The operator runs without `--enable-rollouts`: nothing is rolled.
    Disabled,
    /// Workloads roll in `accepting` of the rule's `targets` namespaces
    /// (the others lack `flotilla.dev/accept-rollouts=true`).
    Enabled { accepting: usize, targets: usize },
}

fn n(v: usize) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

fn plural(v: usize, one: &str) -> String {
    if v == 1 {
        format!("1 {one}")
    } else if let Some(stem) = one.strip_suffix('y') {
        // "copies", not "copys".
        format!("{v} {stem}ies")
    } else {
        format!("{v} {one}s")
    }
}

/// The new status (its `lastSyncTime` is the previous one; the caller moves it).
pub fn build(previous: Option<&CopyRuleStatus>, generation: Option<i64>, s: &Summary) -> CopyRuleStatus {
    let mut c = Conditions::new(previous.map(|p| p.conditions.as_slice()), generation);
    let mut conflicts = s.conflicts.clone();
    conflicts.sort();
    if let Some(why) = &s.prune_failed {
        c.set(
            "Ready",
            false,
            "PruneFailed",
            format!("deleting the rule's copies failed ({why}); retried with backoff. Set prune: false to delete the rule without its copies"),
        );
    } else if let Some(why) = &s.invalid {
        c.set("Ready", false, INVALID_SPEC, why.clone());
    } else if let Some(why) = &s.refused {
        c.set("Ready", false, "AdmissionPolicyMissing", why.clone());
    } else if let Some(why) = &s.sources_unavailable {
        c.set("Ready", false, "SourcesUnavailable", format!("cannot read the sources: {why}"));
    } else if let Some(why) = &s.too_large {
        c.set("Ready", false, "SourcesTooLarge", why.clone());
    } else if let Some(why) = &s.ambiguous {
        c.set("Ready", false, "TargetNameAmbiguous", why.clone());
    } else if let Some(why) = &s.names_invalid {
        c.set("Ready", false, crate::plan::TARGET_NAME_INVALID, why.clone());
    } else if let Some(first) = s.failures.first() {
        c.set(
            "Ready",
            false,
            "SyncFailed",
            format!("{} failed; first: {first}", plural(s.failures.len(), "copy write")),
        );
    } else if !conflicts.is_empty() {
        c.set(
            "Ready",
            false,
            "Conflicts",
            format!(
                "{} of {} in sync; {} held by objects this rule does not own",
                s.in_sync,
                plural(s.desired, "copy"),
                plural(conflicts.len(), "target")
            ),
        );
    } else {
        c.set(
            "Ready",
            true,
            "Synced",
            format!(
                "{} of {} in sync across {}",
                plural(s.in_sync, "copy"),
                plural(s.sources, "source"),
                plural(s.namespaces, "namespace")
            ),
        );
    }
    // A rule that decided nothing (invalid, too large, ambiguous) says nothing new of conflicts.
    let decided = s.invalid.is_none()
        && s.refused.is_none()
        && s.prune_failed.is_none()
        && s.too_large.is_none()
        && s.ambiguous.is_none();
    if decided {
        if conflicts.is_empty() {
            c.set(CONFLICTING, false, "NoConflicts", "every target is free or owned by this rule");
        } else {
            let first = &conflicts[0];
            c.set(
                CONFLICTING,
                true,
                "TargetsNotOwned",
                format!(
                    "{} left alone, e.g. {}/{}: {}",
                    plural(conflicts.len(), "target"),
                    first.namespace,
                    first.name,
                    first.message
                ),
            );
        }
    }
    match s.rollouts {
        None => c.remove(ROLLOUT_ON_CHANGE),
        Some(Rollouts::Disabled) => c.set(
            ROLLOUT_ON_CHANGE,
            false,
            "RolloutsDisabled",
            "the operator runs without --enable-rollouts (chart value rollouts.enabled): no workload is rolled",
        ),
        Some(Rollouts::Enabled { accepting, targets }) if accepting < targets => c.set(
            ROLLOUT_ON_CHANGE,
            true,
            "SomeNamespacesRefuse",
            format!(
                "workloads roll on data changes in {accepting} of {}; the others are not labelled \
                 flotilla.dev/accept-rollouts=true and their workloads are left alone",
                plural(targets, "target namespace")
            ),
        ),
        Some(Rollouts::Enabled { targets, .. }) => c.set(
            ROLLOUT_ON_CHANGE,
            true,
            "Enabled",
            format!("workloads roll on data changes in every target namespace ({targets})"),
        ),
    };
    // An invalid rule stays so until it is edited: Stalled (kstatus).
    c.stall_on(&[INVALID_SPEC]);
    let count = conflicts.len();
    conflicts.truncate(MAX_CONFLICTS_LISTED);
    let mut skipped = s.skipped.clone();
    skipped.sort();
    skipped.truncate(MAX_CONFLICTS_LISTED);
    CopyRuleStatus {
        observed_generation: generation,
        conditions: c.into_vec(),
        sources: n(s.sources),
        namespaces: n(s.namespaces),
        desired: n(s.desired),
        copies: n(s.in_sync),
        conflicts: n(count),
        conflicting: conflicts,
        protected_namespaces: s.protected.clone(),
        skipped,
        last_sync_time: previous.and_then(|p| p.last_sync_time.clone()),
    }
}

impl ReportedStatus for CopyRuleStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }

    /// `lastSyncTime` moves with every write: alone it is no change to
    /// write (a write of copies moves it: [`crate::report::write_status`]).
    fn clear_write_times(&mut self) {
        self.last_sync_time = None;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use flotilla_shared::status::says_the_same;

    #[test]
    fn counts_read_as_english() {
        assert_eq!(plural(1, "copy"), "1 copy");
        assert_eq!(plural(3, "copy"), "3 copies");
        assert_eq!(plural(2, "source"), "2 sources");
        assert_eq!(plural(2, "copy write"), "2 copy writes");
    }

    fn cond<'a>(s: &'a CopyRuleStatus, t: &str) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn ready_when_all_in_sync() {
        let s =
            build(None, Some(3), &Summary { sources: 1, namespaces: 2, desired: 2, in_sync: 2, ..Default::default() });
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(cond(&s, "Ready").observed_generation, Some(3));
        assert_eq!(cond(&s, CONFLICTING).status, "False");
        assert_eq!((s.sources, s.copies, s.conflicts), (1, 2, 0));
    }

    #[test]
    fn conflicts_are_counted_listed_capped_and_not_ready() {
        let conflicts: Vec<ConflictEntry> = (0..30)
            .map(|i| ConflictEntry {
                namespace: format!("ns-{i:02}"),
                name: "cfg".into(),
                reason: "NotOwned".into(),
                message: "x".into(),
            })
            .collect();
        let s = build(None, Some(1), &Summary { desired: 30, conflicts, ..Default::default() });
        assert_eq!(s.conflicts, 30);
        assert_eq!(s.conflicting.len(), MAX_CONFLICTS_LISTED);
        assert_eq!(s.conflicting[0].namespace, "ns-00");
        assert_eq!(cond(&s, "Ready").reason, "Conflicts");
        assert_eq!(cond(&s, CONFLICTING).status, "True");
    }

    #[test]
    fn rollout_on_change_says_where_workloads_roll_and_disappears_when_not_asked() {
        let with = |r| build(None, None, &Summary { rollouts: r, ..Default::default() });
        let s = with(Some(Rollouts::Disabled));
        assert_eq!(
            (cond(&s, ROLLOUT_ON_CHANGE).status.as_str(), cond(&s, ROLLOUT_ON_CHANGE).reason.as_str()),
            ("False", "RolloutsDisabled")
        );
        assert_eq!(cond(&s, "Ready").reason, "Synced", "a disabled rollout is no sync failure");
        let s = with(Some(Rollouts::Enabled { accepting: 1, targets: 2 }));
        assert_eq!(cond(&s, ROLLOUT_ON_CHANGE).reason, "SomeNamespacesRefuse");
        assert!(cond(&s, ROLLOUT_ON_CHANGE).message.contains("1 of 2 target namespaces"));
        let s = with(Some(Rollouts::Enabled { accepting: 2, targets: 2 }));
        assert_eq!(cond(&s, ROLLOUT_ON_CHANGE).reason, "Enabled");
        let off = build(Some(&s), None, &Summary::default());
        assert!(!off.conditions.iter().any(|c| c.type_ == ROLLOUT_ON_CHANGE), "rolloutOnChange turned off");
    }

    #[test]
    fn invalid_and_failures_have_reasons() {
        let s = build(None, None, &Summary { invalid: Some("bad glob".into()), ..Default::default() });
        assert_eq!(cond(&s, "Ready").reason, "InvalidSpec");
        assert_eq!((cond(&s, "Stalled").status.as_str(), cond(&s, "Stalled").message.as_str()), ("True", "bad glob"));
        // Fixed: Stalled is gone; a failed write is not Stalled (retried).
        let fixed = build(Some(&s), None, &Summary::default());
        assert!(!fixed.conditions.iter().any(|c| c.type_ == "Stalled"), "{:?}", fixed.conditions);
        let s = build(None, None, &Summary { failures: vec!["boom".into()], ..Default::default() });
        assert!(!s.conditions.iter().any(|c| c.type_ == "Stalled"));
        assert_eq!(cond(&s, "Ready").reason, "SyncFailed");
        assert!(cond(&s, "Ready").message.contains("boom"));
    }

    #[test]
    fn sources_too_large_is_not_ready_and_leaves_conflicting_as_it_was() {
        let before = build(None, Some(1), &Summary { desired: 1, conflicts: vec![], ..Default::default() });
        let s = build(
            Some(&before),
            Some(2),
            &Summary { sources: 60, too_large: Some("60 sources hold 40 MiB".into()), ..Default::default() },
        );
        assert_eq!(cond(&s, "Ready").reason, "SourcesTooLarge");
        assert_eq!(cond(&s, "Ready").status, "False");
        assert!(cond(&s, "Ready").message.contains("40 MiB"));
        assert_eq!(cond(&s, CONFLICTING), cond(&before, CONFLICTING));
        assert_eq!(s.sources, 60);
    }

    #[test]
    fn target_names_that_cannot_be_have_their_reasons() {
        let before = build(None, Some(1), &Summary { desired: 1, in_sync: 1, ..Default::default() });
        let s = build(
            Some(&before),
            Some(2),
            &Summary { sources: 2, ambiguous: Some("target.name x names one copy".into()), ..Default::default() },
        );
        assert_eq!(
            (cond(&s, "Ready").status.as_str(), cond(&s, "Ready").reason.as_str()),
            ("False", "TargetNameAmbiguous")
        );
        assert_eq!(cond(&s, CONFLICTING), cond(&before, CONFLICTING), "nothing was decided");
        let s = build(
            Some(&before),
            Some(3),
            &Summary {
                sources: 2,
                desired: 1,
                in_sync: 1,
                names_invalid: Some("1 source is not copied".into()),
                failures: vec!["boom".into()],
                ..Default::default()
            },
        );
        assert_eq!(cond(&s, "Ready").reason, "TargetNameInvalid", "the spec's problem, before a write's");
        assert_eq!(cond(&s, CONFLICTING).reason, "NoConflicts", "the other sources were decided");
    }

    #[test]
    fn a_status_says_the_same_whatever_its_times() {
        let sum = Summary { sources: 1, namespaces: 1, desired: 1, in_sync: 1, ..Default::default() };
        let a = build(None, Some(1), &sum);
        let mut b = build(Some(&a), Some(1), &sum);
        b.last_sync_time =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
        assert!(says_the_same(&a, &b));
        let c = build(Some(&a), Some(1), &Summary { in_sync: 0, ..sum });
        assert!(!says_the_same(&a, &c));
    }
}
