#![allow(clippy::unwrap_used)]
use super::*;
use crate::held_store::Carry;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};

use crate::observe::tests::rules;

const NOW: &str = "2026-11-29T12:00:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn deployment(name: &str, progressing: (&str, &str)) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "a"},
        "spec": {"selector": {}, "template": {"metadata": {"labels": {"app": name}}}},
        "status": {"conditions": [
            {"type": "Available", "status": "True"},
            {"type": "Progressing", "status": progressing.0, "reason": progressing.1,
             "message": format!("ReplicaSet \"{name}-abc\" has timed out progressing."),
             "lastTransitionTime": "2026-11-29T11:50:00Z"}
        ]}
    }))
    .unwrap()
}

fn job(name: &str, cronjob: Option<&str>, created: &str, condition: Option<(&str, &str)>) -> Job {
    let owner = cronjob.map(|c| {
        serde_json::json!([{"apiVersion": "batch/v1", "kind": "CronJob", "name": c, "uid": "u", "controller": true}])
    });
    let conditions: Vec<_> = condition
        .map(|(t, reason)| serde_json::json!({"type": t, "status": "True", "reason": reason, "message": "Job has reached the specified backoff limit", "lastTransitionTime": created}))
        .into_iter()
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "a", "uid": format!("uid-{name}"), "creationTimestamp": created, "ownerReferences": owner},
        "spec": {"template": {"metadata": {"labels": {"app": "batch"}}, "spec": {"containers": []}}},
        "status": {"conditions": conditions}
    }))
    .unwrap()
}

fn held<T>(items: impl IntoIterator<Item = (String, Option<T>)>) -> Held<T> {
    items.into_iter().filter_map(|(k, v)| Some((Arc::from(k), v?))).collect()
}

/// No incident open.
fn none_open(_: &Key) -> bool {
    false
}

fn key(name: &str) -> String {
    format!("a/{name}")
}

fn signals(rules: &Rules, deployments: &[Deployment], jobs: &[Job]) -> Findings {
    let d = held(deployments.iter().map(|d| (key(d.metadata.name.as_deref().unwrap()), stalled(d))));
    let j = held(jobs.iter().map(|j| (key(j.metadata.name.as_deref().unwrap()), finished(j))));
    let no_pod = |_: &str, _: &str| None;
    let held = HeldSignals { deployments: Arc::new(d), jobs: Arc::new(j), ..HeldSignals::default() };
    findings(&held, rules, Some("a"), &none_open, &no_pod, now())
}

fn described(f: &Findings) -> Vec<String> {
    f.problems.iter().map(|p| format!("{} | {}", p.key, p.message)).collect()
}

#[test]
fn only_what_has_something_to_say_is_held() {
    assert!(stalled(&deployment("web", ("True", "NewReplicaSetAvailable"))).is_none());
    assert!(stalled(&deployment("web", ("True", "ReplicaSetUpdated"))).is_none());
    let s = stalled(&deployment("web", ("False", "ProgressDeadlineExceeded"))).unwrap();
    assert_eq!(s.since.get(), Some("2026-11-29T11:50:00Z".parse().unwrap()));
    // A running Job, a completed Job no CronJob started: nothing.
    assert!(finished(&job("once", None, NOW, None)).is_none());
    assert!(finished(&job("once", None, NOW, Some(("Complete", "CompletionsReached")))).is_none());
    // A CronJob's completed run is held (it may resolve the CronJob's incident).
    let run = finished(&job("nightly-1", Some("nightly"), NOW, Some(("Complete", "CompletionsReached")))).unwrap();
    assert!(run.failure.is_none());
    let failed = finished(&job("once", None, NOW, Some(("Failed", "BackoffLimitExceeded")))).unwrap();
    assert_eq!(&*failed.failure.as_ref().unwrap().reason, "BackoffLimitExceeded");
}

#[test]
fn nothing_unless_the_podalert_asks() {
    let r = rules(serde_json::json!({}));
    let f = signals(
        &r,
        &[deployment("web", ("False", "ProgressDeadlineExceeded"))],
        &[job("once", None, NOW, Some(("Failed", "BackoffLimitExceeded")))],
    );
    assert!(f.problems.is_empty() && f.is_empty());
}

#[test]
fn a_stalled_rollout_and_a_failed_job_are_problems_of_their_workloads() {
    let r = rules(serde_json::json!({"alerts": {"checkRunningPods": true, "rollouts": true, "jobs": true}}));
    let f = signals(
        &r,
        &[
            deployment("web", ("False", "ProgressDeadlineExceeded")),
            deployment("api", ("True", "NewReplicaSetAvailable")),
        ],
        &[job("once", None, NOW, Some(("Failed", "BackoffLimitExceeded"))), job("running", None, NOW, None)],
    );
    assert_eq!(
        described(&f),
        [
            "a/Deployment/web: RolloutStuck | rollout stopped: ReplicaSet \"web-abc\" has timed out progressing.",
            "a/Job/once: JobFailed | BackoffLimitExceeded: Job has reached the specified backoff limit",
        ]
    );
    assert_eq!(f.problems[1].incarnation.as_deref(), Some("uid-once"), "each failed Job is notified once");
    // Another namespace's are not this PodAlert's.
    let d = held([("b/web".to_string(), stalled(&deployment("web", ("False", "ProgressDeadlineExceeded"))))]);
    let held = HeldSignals { deployments: Arc::new(d), ..HeldSignals::default() };
    let none = findings(&held, &r, Some("a"), &none_open, &|_, _| None, now());
    assert!(none.problems.is_empty());
}

#[test]
fn a_cronjob_fails_while_its_newest_finished_run_failed() {
    let r = rules(serde_json::json!({"alerts": {"checkRunningPods": true, "jobs": true}}));
    let ok = |n: &str, at: &str| job(n, Some("nightly"), at, Some(("Complete", "CompletionsReached")));
    let bad = |n: &str, at: &str| job(n, Some("nightly"), at, Some(("Failed", "DeadlineExceeded")));
    let failing =
        signals(&r, &[], &[ok("nightly-1", "2026-11-27T03:00:00Z"), bad("nightly-2", "2026-11-28T03:00:00Z")]);
    assert_eq!(
        described(&failing),
        [
            "a/CronJob/nightly: JobFailed | last run nightly-2 failed: DeadlineExceeded: Job has reached the specified backoff limit"
        ]
    );
    // A later run that completed resolves it; one still running does not
    // (it is not held).
    let healed = signals(&r, &[], &[bad("nightly-2", "2026-11-28T03:00:00Z"), ok("nightly-3", "2026-11-29T03:00:00Z")]);
    assert!(healed.problems.is_empty());
    let running = job("nightly-3", Some("nightly"), "2026-11-29T03:00:00Z", None);
    let still = signals(&r, &[], &[bad("nightly-2", "2026-11-28T03:00:00Z"), running]);
    assert_eq!(still.problems.len(), 1);
}

#[test]
fn the_selector_reasons_and_silences_apply_to_workloads() {
    let stuck = [deployment("web", ("False", "ProgressDeadlineExceeded"))];
    let other = rules(
        serde_json::json!({"alerts": {"checkRunningPods": true, "rollouts": true}, "selector": {"matchLabels": {"app": "api"}}}),
    );
    assert!(signals(&other, &stuck, &[]).problems.is_empty(), "the selector reads the pod template's labels");
    let mine = rules(
        serde_json::json!({"alerts": {"checkRunningPods": true, "rollouts": true}, "selector": {"matchLabels": {"app": "web"}}}),
    );
    assert_eq!(signals(&mine, &stuck, &[]).problems.len(), 1);
    let narrowed = rules(
        serde_json::json!({"alerts": {"checkRunningPods": true, "rollouts": true, "reasons": ["CrashLoopBackOff"]}}),
    );
    let f = signals(&narrowed, &stuck, &[]);
    assert!(f.problems.is_empty());
    assert_eq!(f.skipped.get(&Skip::ReasonNotSelected), Some(&1));
    // The Deployment's own annotation silences it (in its namespace's PodAlert).
    let mut silenced = rules(serde_json::json!({"alerts": {"checkRunningPods": true, "rollouts": true}}));
    let until: Timestamp = "2026-11-29T13:00:00Z".parse().unwrap();
    let annotated: crate::silence::Silences = [(Arc::from("a/web"), until)].into_iter().collect();
    silenced.workload_silences =
        crate::silence::WorkloadSilences { by_kind: vec![("Deployment", std::sync::Arc::new(annotated))] };
    let f = signals(&silenced, &stuck, &[]);
    assert_eq!(f.problems.len(), 1, "still a problem: it opens when the silence ends");
    let s = f.silenced.values().next().unwrap();
    assert_eq!((s.by.as_str(), s.until), ("deployment web annotation flotilla.dev/silence-until", until));
    assert_eq!(f.recheck_at, Some(until));
}

#[test]
fn a_failed_jobs_pod_gives_its_log() {
    let r = rules(serde_json::json!({"alerts": {"checkRunningPods": true, "jobs": true}}));
    let j = held([(key("once"), finished(&job("once", None, NOW, Some(("Failed", "BackoffLimitExceeded")))))]);
    let pod =
        |ns: &str, job: &str| (ns == "a" && job == "once").then(|| ("once-x7k2p".to_string(), "main".to_string()));
    let held = HeldSignals { jobs: Arc::new(j), ..HeldSignals::default() };
    let f = findings(&held, &r, None, &none_open, &pod, now());
    assert_eq!((f.problems[0].pod.as_str(), f.problems[0].log_container.as_deref()), ("once-x7k2p", Some("main")));
}

#[test]
fn messages_and_labels_are_bounded() {
    let mut d = deployment("web", ("False", "ProgressDeadlineExceeded"));
    let status = d.status.as_mut().unwrap();
    status.conditions.as_mut().unwrap()[1].message = Some("é".repeat(4000));
    d.spec.as_mut().unwrap().template.metadata.as_mut().unwrap().labels =
        Some((0..100).map(|i| (format!("k{i}"), "v".repeat(100))).collect());
    let s = stalled(&d).unwrap();
    assert!(s.message.len() <= crate::pod::MAX_MESSAGE_BYTES);
    assert!(s.labels.is_none(), "more than 32 labels are not held");
}

fn statefulset(
    generation: i64,
    observed: i64,
    updated: i32,
    available: i32,
    strategy: serde_json::Value,
) -> StatefulSet {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "db", "namespace": "a", "generation": generation},
        "spec": {"replicas": 3, "selector": {}, "serviceName": "db", "updateStrategy": strategy,
                 "template": {"metadata": {"labels": {"app": "db"}}}},
        "status": {"replicas": 3, "observedGeneration": observed, "updatedReplicas": updated, "availableReplicas": available}
    }))
    .unwrap()
}

fn daemonset(observed: i64, updated: i32, available: i32) -> DaemonSet {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "agent", "namespace": "a", "generation": 2},
        "spec": {"selector": {}, "template": {"metadata": {"labels": {"app": "agent"}}}},
        "status": {"desiredNumberScheduled": 5, "currentNumberScheduled": 5, "numberMisscheduled": 0, "numberReady": available,
                   "observedGeneration": observed, "updatedNumberScheduled": updated, "numberAvailable": available}
    }))
    .unwrap()
}

fn statefulset_rollout_at(s: &StatefulSet, at: Timestamp) -> Option<Arc<Rollout>> {
    statefulset_rollout(s, at, false)
}

fn daemonset_rollout_at(d: &DaemonSet, at: Timestamp) -> Option<Arc<Rollout>> {
    daemonset_rollout(d, at, false)
}

#[test]
fn a_statefulset_or_daemonset_rollout_is_held_while_under_way() {
    let rolling = serde_json::json!({"type": "RollingUpdate"});
    assert!(statefulset_rollout_at(&statefulset(2, 2, 3, 3, rolling.clone()), now()).is_none(), "done");
    let r = statefulset_rollout_at(&statefulset(2, 2, 1, 2, rolling.clone()), now()).unwrap();
    assert_eq!(r.describe(), "1 of 3 pods updated");
    assert!(statefulset_rollout_at(&statefulset(3, 2, 3, 3, rolling), now()).is_some(), "a spec not yet observed");
    let partition = serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 2}});
    assert!(
        statefulset_rollout_at(&statefulset(2, 2, 1, 3, partition), now()).is_none(),
        "the partition's pods are updated"
    );
    let on_delete = serde_json::json!({"type": "OnDelete"});
    assert!(
        statefulset_rollout_at(&statefulset(2, 2, 0, 3, on_delete), now()).is_none(),
        "OnDelete never rolls by itself"
    );
    assert!(daemonset_rollout_at(&daemonset(2, 5, 5), now()).is_none());
    assert!(daemonset_rollout_at(&daemonset(2, 3, 4), now()).is_some());
    // The same progress later carries the first `since`; more pods
    // updated does not; fewer pods available is not progress.
    let later: Timestamp = "2026-11-29T12:30:00Z".parse().unwrap();
    let first = daemonset_rollout_at(&daemonset(2, 3, 4), now()).unwrap();
    let same = daemonset_rollout_at(&daemonset(2, 3, 2), later).unwrap().carry(&first);
    assert_eq!(same.since, first.since);
    let moved = daemonset_rollout_at(&daemonset(2, 4, 4), later).unwrap().carry(&first);
    assert_eq!(moved.since.get(), Some(later));
}

#[test]
fn a_rollout_is_stuck_after_rollout_timeout_without_progress() {
    let r = rules(serde_json::json!({"alerts": {"checkRunningPods": true, "rollouts": true, "rolloutTimeout": "10m"}}));
    let since: Timestamp = "2026-11-29T11:55:00Z".parse().unwrap();
    let rolling = serde_json::json!({"type": "RollingUpdate"});
    let sts = statefulset_rollout_at(&statefulset(2, 2, 1, 2, rolling), since).unwrap();
    let ds = daemonset_rollout_at(&daemonset(2, 3, 4), "2026-11-29T11:40:00Z".parse().unwrap()).unwrap();
    let held = HeldSignals {
        statefulsets: Arc::new([(Arc::from("a/db"), sts)].into_iter().collect()),
        daemonsets: Arc::new([(Arc::from("a/agent"), ds)].into_iter().collect()),
        ..HeldSignals::default()
    };
    let f = findings(&held, &r, None, &none_open, &|_, _| None, now());
    assert_eq!(
        described(&f),
        ["a/DaemonSet/agent: RolloutStuck | rollout not progressing for 10m: 3 of 5 pods updated"]
    );
    assert_eq!(f.problems[0].since, "2026-11-29T11:40:00Z".parse::<Timestamp>().unwrap());
    // The StatefulSet's 5 minutes are not yet 10: looked at again then.
    assert_eq!(f.recheck_at, Some("2026-11-29T12:05:00Z".parse().unwrap()));
}

fn cron(schedule: &str, extra: serde_json::Value, last: Option<&str>, active: usize) -> CronJob {
    let mut spec = serde_json::json!({"schedule": schedule, "jobTemplate": {"spec": {"template": {"metadata": {"labels": {"app": "batch"}}}}}});
    spec.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let active: Vec<_> = (0..active).map(|i| serde_json::json!({"name": format!("run-{i}")})).collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "nightly", "namespace": "a", "creationTimestamp": "2026-11-01T00:00:00Z"},
        "spec": spec,
        "status": {"lastScheduleTime": last, "active": active}
    }))
    .unwrap()
}

/// Seen long before `NOW`.
fn next_run_at(c: &CronJob) -> Option<Arc<NextRun>> {
    next_run(c, "2026-11-01T00:00:00Z".parse().unwrap(), false)
}

#[test]
fn a_cronjobs_next_run_is_due_after_its_last_in_its_time_zone() {
    let c = next_run_at(&cron("0 3 * * *", serde_json::json!({}), Some("2026-11-29T03:00:00Z"), 0)).unwrap();
    assert_eq!(c.due.get(), Some("2026-11-30T03:00:00Z".parse().unwrap()));
    assert_eq!((c.grace, c.forbidden_by), (300, 0));
    // Never run: due after its creation.
    let first = next_run_at(&cron("0 3 * * *", serde_json::json!({}), None, 0)).unwrap();
    assert_eq!(first.due.get(), Some("2026-11-01T03:00:00Z".parse().unwrap()));
    // 03:00 in Paris is 02:00 UTC in winter.
    let paris = serde_json::json!({"timeZone": "Europe/Paris"});
    let c = next_run_at(&cron("0 3 * * *", paris, Some("2026-11-29T02:00:00Z"), 0)).unwrap();
    assert_eq!(c.due.get(), Some("2026-11-30T02:00:00Z".parse().unwrap()));
    let forbid = serde_json::json!({"concurrencyPolicy": "Forbid", "startingDeadlineSeconds": 10});
    let c = next_run_at(&cron("* * * * *", forbid, Some(NOW), 2)).unwrap();
    assert_eq!((c.grace, c.forbidden_by), (30, 2), "a deadline under 30 s counts as 30");
    let suspended = next_run_at(&cron("0 3 * * *", serde_json::json!({"suspend": true}), None, 0)).unwrap();
    assert_eq!(suspended.due, Stamp::NONE, "held (its last success counts), no run due");
    let mars = next_run_at(&cron("0 3 * * *", serde_json::json!({"timeZone": "Mars/Olympus"}), None, 0)).unwrap();
    assert_eq!(mars.due, Stamp::NONE);
}

#[test]
fn a_run_not_started_within_its_grace_is_missed() {
    let r = rules(serde_json::json!({"alerts": {"checkRunningPods": true, "jobs": true}}));
    let forbid = serde_json::json!({"concurrencyPolicy": "Forbid"});
    let find = |last: &str| {
        let c = next_run_at(&cron("0 * * * *", forbid.clone(), Some(last), 1)).unwrap();
        let held = HeldSignals {
            cronjobs: Arc::new([(Arc::from("a/nightly"), c)].into_iter().collect()),
            ..HeldSignals::default()
        };
        findings(&held, &r, None, &none_open, &|_, _| None, now())
    };
    // Due at 11:00, 5 minutes of grace passed at 12:00: missed.
    let f = find("2026-11-29T10:00:00Z");
    assert_eq!(
        described(&f),
        [
            "a/CronJob/nightly: MissedSchedule | no run started for the one due at 2026-11-29T11:00:00Z (concurrencyPolicy Forbid, 1 Job of it still running)"
        ]
    );
    // Due at 12:00 (now): not yet missed; looked at again at 12:05.
    let f = find("2026-11-29T11:00:00Z");
    assert!(f.problems.is_empty());
    assert_eq!(f.recheck_at, Some("2026-11-29T12:05:00Z".parse().unwrap()));
    // Resumed at 11:58 after a long suspension (its last run a week ago):
    // its controller gets the grace from then to start one.
    let resumed = next_run(
        &cron("0 * * * *", forbid.clone(), Some("2026-11-22T10:00:00Z"), 0),
        "2026-11-29T11:58:00Z".parse().unwrap(),
        false,
    )
    .unwrap();
    let held = HeldSignals {
        cronjobs: Arc::new([(Arc::from("a/nightly"), resumed.clone())].into_iter().collect()),
        ..HeldSignals::default()
    };
    let f = findings(&held, &r, None, &none_open, &|_, _| None, now());
    assert!(f.problems.is_empty());
    assert_eq!(f.recheck_at, Some("2026-11-29T12:03:00Z".parse().unwrap()));
    // Seen again later with the same last run: it carries the first `seen`
    // (and due), whatever else changed (a run of it ended).
    let again = next_run(&cron("0 * * * *", forbid, Some("2026-11-22T10:00:00Z"), 1), now(), false).unwrap();
    let again = again.carry(&resumed);
    assert_eq!((again.seen, again.due), (resumed.seen, resumed.due));
}

/// After an operator restart, a rollout or a CronJob first seen in its
/// first list counts its timeout from then; an incident restored open
/// stays open meanwhile (no resolve, and no second opening a timeout
/// later), and one not open waits the timeout as usual.
#[test]
fn what_was_stuck_before_a_restart_stays_open() {
    let r = rules(serde_json::json!({"alerts": {"checkRunningPods": true, "rollouts": true, "jobs": true}}));
    let sts = statefulset_rollout(&statefulset(2, 2, 1, 2, serde_json::json!({"type": "RollingUpdate"})), now(), true)
        .unwrap();
    let forbid = serde_json::json!({"concurrencyPolicy": "Forbid"});
    let c = next_run(&cron("0 * * * *", forbid, Some("2026-11-29T10:00:00Z"), 1), now(), true).unwrap();
    let held = HeldSignals {
        statefulsets: Arc::new([(Arc::from("a/db"), sts)].into_iter().collect()),
        cronjobs: Arc::new([(Arc::from("a/nightly"), c)].into_iter().collect()),
        ..HeldSignals::default()
    };
    let restored = |k: &Key| matches!(&*k.workload.name, "db" | "nightly");
    let kept = findings(&held, &r, None, &restored, &|_, _| None, now());
    assert_eq!(
        kept.problems.iter().map(|p| p.key.to_string()).collect::<Vec<_>>(),
        ["a/CronJob/nightly: MissedSchedule", "a/StatefulSet/db: RolloutStuck"]
    );
    let fresh = findings(&held, &r, None, &none_open, &|_, _| None, now());
    assert!(fresh.problems.is_empty(), "{:?}", fresh.problems);
    assert_eq!(fresh.recheck_at, Some("2026-11-29T12:05:00Z".parse().unwrap()), "the CronJob's grace from now");
}

/// A CronJob's failed run is not its newest outcome once a later run
/// succeeded, even when that run's Job is gone (successfulJobsHistoryLimit: 0).
#[test]
fn a_success_since_resolves_a_cronjob_whose_successful_job_is_gone() {
    let r = rules(serde_json::json!({"alerts": {"checkRunningPods": true, "jobs": true}}));
    let failed = job("nightly-2", Some("nightly"), "2026-11-28T03:00:00Z", Some(("Failed", "BackoffLimitExceeded")));
    let mut cj = cron("0 3 * * *", serde_json::json!({}), Some("2026-11-29T03:00:00Z"), 0);
    let check = |cj: &CronJob| {
        let held = HeldSignals {
            jobs: Arc::new([(Arc::from("a/nightly-2"), finished(&failed).unwrap())].into_iter().collect()),
            cronjobs: Arc::new([(Arc::from("a/nightly"), next_run_at(cj).unwrap())].into_iter().collect()),
            ..HeldSignals::default()
        };
        findings(&held, &r, None, &none_open, &|_, _| None, now()).problems.len()
    };
    assert_eq!(check(&cj), 1);
    cj.status.as_mut().unwrap().last_successful_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-11-29T03:00:40Z".parse().unwrap()));
    assert_eq!(check(&cj), 0);
}

/// Resumed after a suspension, a CronJob with a startingDeadlineSeconds
/// will not start the runs older than that (its controller skips them):
/// the next due is the first after now less the deadline.
#[test]
fn runs_past_the_starting_deadline_are_not_due() {
    let deadline = serde_json::json!({"startingDeadlineSeconds": 120});
    let c = next_run(&cron("0 3 * * *", deadline, Some("2026-11-20T03:00:00Z"), 0), now(), false).unwrap();
    assert_eq!(c.due.get(), Some("2026-11-30T03:00:00Z".parse().unwrap()));
}

/// A PodAlert that does not select a reason is not woken for it.
#[test]
fn no_recheck_for_a_reason_not_selected() {
    let r = rules(
        serde_json::json!({"alerts": {"checkRunningPods": true, "rollouts": true, "jobs": true, "reasons": ["JobFailed"]}}),
    );
    let sts =
        statefulset_rollout_at(&statefulset(2, 2, 1, 2, serde_json::json!({"type": "RollingUpdate"})), now()).unwrap();
    let c = next_run_at(&cron("0 * * * *", serde_json::json!({}), Some("2026-11-29T11:00:00Z"), 0)).unwrap();
    let held = HeldSignals {
        statefulsets: Arc::new([(Arc::from("a/db"), sts)].into_iter().collect()),
        cronjobs: Arc::new([(Arc::from("a/nightly"), c)].into_iter().collect()),
        ..HeldSignals::default()
    };
    assert_eq!(findings(&held, &r, None, &none_open, &|_, _| None, now()).recheck_at, None);
}
