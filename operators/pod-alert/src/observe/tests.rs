#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::crd::PodAlertSpec;
use crate::pod::{PodPhase, RestartPolicy, Shape, Stamp, Trouble, container_names};

pub(crate) fn rules(extra: serde_json::Value) -> Rules {
    let mut spec = serde_json::json!({"alerts": {"checkRunningPods": true}});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    let spec: PodAlertSpec = serde_json::from_value(spec).unwrap();
    Rules::new(&spec, "a", &[]).unwrap()
}

pub(crate) fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

pub(crate) fn pod(name: &str, workload: &str) -> PodView {
    PodView {
        key: format!("a/{name}").into(),
        shape: Shape {
            workload: Workload { kind: "Deployment".into(), name: workload.into() },
            labels: Default::default(),
            restart_policy: RestartPolicy::Always,
            containers: container_names(["app"]),
            silence_until: Stamp::NONE,
        }
        .share(),
        uid: format!("uid-{name}").into(),
        created: t(0).into(),
        deleting: false,
        phase: PodPhase::Running,
        trouble: None,
        scheduling_gated: false,
        ready: true,
        containers: vec![ContainerView::new(false, true, 0, State::Running { started_at: t(0).into() }, None)].into(),
    }
}

/// `p` with these containers, their names in its shape (as views are made).
pub(crate) fn set_containers(p: &mut PodView, containers: Vec<(&str, ContainerView)>) {
    let names = container_names(containers.iter().map(|(n, _)| *n));
    p.shape = Shape { containers: names, ..(*p.shape).clone() }.share();
    p.containers = containers.into_iter().map(|(_, c)| c).collect();
}

/// `p` with restart policy Never (its shape, shared, replaced).
pub(crate) fn never_restarts(p: &mut PodView) {
    p.shape = Shape { restart_policy: RestartPolicy::Never, ..(*p.shape).clone() }.share();
}

/// `p` crash-looping: `restarts` restarts, the last exit at `at` (container ID per restart).
pub(crate) fn crashing(mut p: PodView, restarts: u32, at: i64, reason: &str) -> PodView {
    let c = &mut p.containers[0];
    c.set_ready(false);
    c.set_restart_count(restarts);
    c.set_state(State::waiting("CrashLoopBackOff", "back-off"));
    c.set_last_termination(Some(Termination {
        reason: reason.to_string().into(),
        exit_code: if reason == "OOMKilled" { 137 } else { 1 },
        started_at: t(at - 1).into(),
        finished_at: t(at).into(),
        container_id: format!("containerd://{}-{restarts}", p.uid).into(),
    }));
    p.ready = false;
    p
}

fn eval(pods: &[PodView], r: &Rules, now: i64) -> Findings {
    evaluate(pods.iter(), r, &mut RestartHistory::default(), t(now))
}

#[test]
fn healthy_pods_have_no_problems() {
    let f = eval(&[pod("web-1", "web"), pod("web-2", "web")], &rules(serde_json::json!({})), 100);
    assert!(f.problems.is_empty());
    assert!(f.skipped.is_empty());
}

#[test]
fn a_crash_loop_needs_the_threshold_within_the_window() {
    let r = rules(serde_json::json!({}));
    assert!(eval(&[crashing(pod("w", "web"), 2, 90, "Error")], &r, 100).problems.is_empty(), "2 < 3 restarts");
    let f = eval(&[crashing(pod("w", "web"), 3, 90, "Error")], &r, 100);
    assert_eq!(f.problems.len(), 1);
    let p = &f.problems[0];
    assert_eq!(p.key.reason, Reason::CrashLoopBackOff);
    assert_eq!(p.key.workload.to_string(), "Deployment/web");
    assert!(!p.previous_logs, "in back-off the newest run is the crashed one");
    assert!(p.message.contains("exit code 1"), "{}", p.message);
    // The last crash is older than the window: no longer a crash loop.
    assert!(eval(&[crashing(pod("w", "web"), 9, 0, "Error")], &r, 700).problems.is_empty());
}

#[test]
fn restarts_are_counted_within_the_window_not_over_the_pods_life() {
    let r = rules(serde_json::json!({"alerts": {"checkRunningPods": true, "restartWindow": "10m"}}));
    let mut h = RestartHistory::default();
    // Seen at t=0 with 40 old restarts, then one crash 20 minutes later.
    let old = crashing(pod("w", "web"), 40, -3600, "Error");
    assert!(evaluate([&old], &r, &mut h, t(0)).problems.is_empty(), "the last crash is an hour old");
    let mut later = crashing(pod("w", "web"), 41, 1199, "Error");
    later.containers[0].set_state(State::Running { started_at: t(1199).into() });
    later.containers[0].set_ready(true);
    let f = evaluate([&later], &r, &mut h, t(1200));
    assert!(f.problems.is_empty(), "1 restart in the window is below 3: {f:?}");
    let again = crashing(pod("w", "web"), 43, 1250, "Error");
    assert_eq!(evaluate([&again], &r, &mut h, t(1260)).problems.len(), 1, "3 restarts in the window");
}

#[test]
fn containers_that_never_restarted_are_not_remembered() {
    let r = rules(serde_json::json!({}));
    let mut h = RestartHistory::default();
    let healthy: Vec<PodView> = (0..1000).map(|i| pod(&format!("web-{i}"), "web")).collect();
    assert!(evaluate(healthy.iter(), &r, &mut h, t(0)).problems.is_empty());
    assert_eq!(h.len(), 0, "a PodAlert over every pod held a sample per container");
    // A container seen first at 0 and later with 3 restarts counts all 3,
    // as when it was remembered at 0.
    let first = [pod("w", "web")];
    evaluate(first.iter(), &r, &mut h, t(0));
    let f = evaluate([&crashing(pod("w", "web"), 3, 3590, "Error")], &r, &mut h, t(3600));
    assert_eq!(f.problems.len(), 1, "{f:?}");
    assert_eq!(h.len(), 1);
}

#[test]
fn one_oom_kill_is_a_problem_with_its_incarnation() {
    let r = rules(serde_json::json!({}));
    let mut p = crashing(pod("w", "web"), 1, 95, "OOMKilled");
    p.containers[0].set_state(State::Running { started_at: t(96).into() });
    let f = eval(&[p], &r, 100);
    assert_eq!(f.problems.len(), 1);
    assert_eq!(f.problems[0].key.reason, Reason::OOMKilled);
    assert_eq!(f.problems[0].incarnation.as_deref(), Some("containerd://uid-w-1"));
    assert!(f.problems[0].previous_logs, "a new run is alive: the crashed one is `previous`");
}

#[test]
fn image_pull_and_config_errors_are_stuck_reasons() {
    let r = rules(serde_json::json!({}));
    for (waiting, want) in [
        ("ImagePullBackOff", Reason::ImagePullBackOff),
        ("ErrImagePull", Reason::ImagePullBackOff),
        ("InvalidImageName", Reason::ErrImagePull),
        ("CreateContainerConfigError", Reason::CreateContainerConfigError),
    ] {
        let mut p = pod("w", "web");
        p.phase = PodPhase::Pending;
        p.containers[0].set_state(State::waiting(waiting, "x"));
        let f = eval(&[p], &r, 10);
        assert_eq!(f.problems.len(), 1, "{waiting}");
        assert_eq!(f.problems[0].key.reason, want);
        assert_eq!(f.problems[0].since, t(0));
        assert!(want.is_stuck());
    }
}

#[test]
fn pending_unschedulable_and_not_started() {
    let r = rules(serde_json::json!({}));
    let mut p = pod("w", "web");
    p.phase = PodPhase::Pending;
    p.trouble = Some(Box::new(Trouble {
        unschedulable: Some(("Unschedulable".into(), "0/1 nodes are available".into())),
        ..Default::default()
    }));
    set_containers(&mut p, vec![]);
    let f = eval(&[p.clone()], &r, 10);
    assert_eq!(f.problems.len(), 1);
    assert_eq!((f.problems[0].key.reason, f.problems[0].key.container.as_str()), (Reason::Pending, ""));
    assert!(f.problems[0].message.contains("0/1 nodes"));
    p.trouble = None;
    set_containers(
        &mut p,
        vec![("app", ContainerView::new(false, false, 0, State::waiting("ContainerCreating", ""), None))],
    );
    let f = eval(&[p], &r, 10);
    assert_eq!(f.problems[0].key.reason, Reason::Pending);
    assert_eq!(f.problems[0].message, "app: ContainerCreating");
}

#[test]
fn expected_states_are_skipped_and_counted() {
    let r = rules(serde_json::json!({"ignore": {"containerNames": ["sidecar"], "podNamePatterns": ["canary-*"]}}));
    let mut done = pod("job-1", "job");
    done.phase = PodPhase::Succeeded;
    let mut deleting = crashing(pod("old-1", "web"), 5, 95, "Error");
    deleting.deleting = true;
    let mut gated = pod("gated", "web");
    gated.phase = PodPhase::Pending;
    gated.scheduling_gated = true;
    let canary = crashing(pod("canary-1", "web"), 5, 95, "Error");
    let mut side = crashing(pod("s-1", "web"), 5, 95, "Error");
    side.shape = Shape { containers: container_names(["sidecar"]), ..(*side.shape).clone() }.share();
    let mut exited0 = pod("x-1", "web");
    never_restarts(&mut exited0);
    exited0.containers[0].set_state(State::Terminated(Termination { exit_code: 0, ..Default::default() }));
    let f = eval(&[done, deleting, gated, canary, side, exited0], &r, 100);
    assert!(f.problems.is_empty(), "{:?}", f.problems);
    let count = |s: Skip| f.skipped.get(&s).copied().unwrap_or(0);
    assert_eq!(count(Skip::Completed), 2);
    assert_eq!(count(Skip::Terminating), 1);
    assert_eq!(count(Skip::SchedulingGated), 1);
    assert_eq!(count(Skip::IgnoredPod), 1);
    assert_eq!(count(Skip::IgnoredContainer), 1);
}

#[test]
fn a_reason_filter_that_drops_problems_says_so() {
    let r = rules(serde_json::json!({"alerts": {"checkRunningPods": true, "reasons": ["OOMKilled"]}}));
    let f = eval(&[crashing(pod("w", "web"), 5, 95, "Error")], &r, 100);
    assert!(f.problems.is_empty());
    assert_eq!(f.skipped.get(&Skip::ReasonNotSelected), Some(&1));
}

#[test]
fn failed_containers_that_do_not_restart_and_evictions() {
    let r = rules(serde_json::json!({}));
    let mut p = pod("job-x", "job");
    never_restarts(&mut p);
    p.phase = PodPhase::Failed;
    p.containers[0].set_state(State::Terminated(Termination {
        reason: "Error".into(),
        exit_code: 2,
        started_at: Stamp::NONE,
        finished_at: t(50).into(),
        container_id: "containerd://j".into(),
    }));
    let f = eval(&[p], &r, 100);
    assert_eq!(f.problems[0].key.reason, Reason::Error);
    assert_eq!(f.problems[0].incarnation.as_deref(), Some("containerd://j"));
    let mut e = pod("ev", "web");
    e.phase = PodPhase::Failed;
    e.trouble = Some(Box::new(Trouble {
        reason: "Evicted".into(),
        message: "The node was low on resource: memory.".into(),
        ..Default::default()
    }));
    set_containers(&mut e, vec![]);
    let f = eval(&[e], &r, 100);
    assert_eq!(f.problems[0].key.reason, Reason::Evicted);
    assert_eq!(f.problems[0].key.container, "");
}

#[test]
fn not_ready_counts_from_the_ready_transition() {
    let r = rules(serde_json::json!({}));
    let mut p = pod("w", "web");
    p.ready = false;
    p.trouble = Some(Box::new(Trouble { not_ready_since: t(40).into(), ..Default::default() }));
    p.containers[0].set_ready(false);
    let f = eval(&[p], &r, 100);
    assert_eq!(f.problems[0].key.reason, Reason::NotReady);
    assert_eq!(f.problems[0].since, t(40));
}

#[test]
fn a_deployments_pods_share_one_key() {
    let r = rules(serde_json::json!({}));
    let pods: Vec<PodView> = (0..5).map(|i| crashing(pod(&format!("web-{i}"), "web"), 4, 95, "Error")).collect();
    let f = eval(&pods, &r, 100);
    assert_eq!(f.problems.len(), 5);
    assert!(f.problems.iter().all(|p| p.key == f.problems[0].key));
}
