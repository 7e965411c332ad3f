//! spec.schedule on the one-node cluster: a LoadTest scheduled every minute
//! waits for the next minute (Ready=False Scheduled, status.nextRunTime),
//! runs then, runs again at the minute after, keeps both runs in
//! status.history, and a spec edited meanwhile starts no run by itself.
//! Needs the loadgen image (`cargo xtask images`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::node;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::ListParams;
use load_tester::crd::{LoadTest, State, Verdict};
use serde_json::json;

const T: Duration = Duration::from_secs(150);

#[tokio::test]
async fn a_scheduled_test_runs_at_each_scheduled_minute_and_keeps_its_history() {
    let env = node();
    let (client, ns, operator) = capture_namespace(&env, "lt-schedule").await;
    // Created early in a minute, so the Scheduled wait is seen before the
    // next minute starts run 1.
    while !(2..=40).contains(&(Timestamp::now().as_second() % 60)) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    create(
        &client,
        &ns,
        "LoadTest",
        "nightly",
        small(json!({"replicas": 1, "schedule": "* * * * *",
               "test": {"serviceName": "web", "port": 8080, "path": "/cgi-bin/capture", "repeat": 5, "concurrency": 1},
               "thresholds": {"maxErrorRatio": 0.0}})),
    )
    .await
    .unwrap();
    let tests: Api<LoadTest> = Api::namespaced(client.clone(), &ns);
    let created = tests.get("nightly").await.unwrap().metadata.creation_timestamp.unwrap().0;

    // Before its time: nothing runs, and the status says when it will.
    let first_at = wait_test(&client, &ns, "nightly", "Scheduled", T, |s| {
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready")?;
        (ready.reason == "Scheduled").then(|| (s.run, s.next_run_time.clone(), ready.message.clone()))
    })
    .await;
    let (run, next, message) = first_at;
    let next = next.expect("nextRunTime").0;
    assert_eq!(run, 0, "no run before the schedule's time");
    assert!(next > created && next.as_second() % 60 == 0 && next.as_second() - created.as_second() <= 60, "{next}");
    assert!(message.contains("* * * * *"), "{message}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let runners = |l: Vec<Pod>| l.into_iter().filter(|p| p.metadata.name.as_deref() != Some("web")).count();
    if Timestamp::now() < next {
        assert_eq!(runners(pods.list(&ListParams::default()).await.unwrap().items), 0, "runners before the time");
    }

    // At the time: run 1, and it finishes.
    let one = wait_test(&client, &ns, "nightly", "run 1 to finish", T, |s| {
        (s.run == 1 && s.state.is_terminal()).then(|| s.clone())
    })
    .await;
    assert_eq!((one.state, one.verdict), (State::Finished, Verdict::Passed), "{one:#?}");
    let started = one.start_time.clone().unwrap().0;
    assert!(started >= next && started.as_second() - next.as_second() < 15, "run 1 started at {started}, due {next}");
    assert_eq!(one.next_run_time.as_ref().map(|t| t.0.as_second()), Some(next.as_second() + 60), "{one:#?}");

    // An edit starts nothing by itself: the run stays 1 until the next minute.
    patch_spec(&client, &ns, "LoadTest", "nightly", json!({"test": {"repeat": 6}})).await;
    let seen = wait_test(&client, &ns, "nightly", "the edit observed", T, |s| {
        (s.observed_generation == Some(2)).then(|| (s.run, Timestamp::now()))
    })
    .await;
    // Seen within run 1's minute: run 2 is the next minute's, with the edit.
    let edit_in_time = seen.1.as_second() < next.as_second() + 60;
    if edit_in_time {
        assert_eq!(seen.0, 1, "a spec change between runs started a run of a scheduled test");
    }

    // The next minute: run 2, with the edit, and both in the history.
    let two = wait_test(&client, &ns, "nightly", "run 2 to finish", T, |s| {
        (s.run == 2 && s.state.is_terminal()).then(|| s.clone())
    })
    .await;
    assert_eq!((two.state, two.verdict), (State::Finished, Verdict::Passed), "{two:#?}");
    let started2 = two.start_time.clone().unwrap().0;
    assert!(started2.as_second() >= next.as_second() + 60, "run 2 started at {started2}, before its minute");
    let history: Vec<_> = two.history.iter().map(|h| (h.run, h.state, h.verdict)).collect();
    assert_eq!(history, [(1, State::Finished, Verdict::Passed), (2, State::Finished, Verdict::Passed)], "{two:#?}");
    assert_eq!(two.history[0].requests, Some(5), "{two:#?}");
    if edit_in_time {
        assert_eq!((two.run_generation, two.results.as_ref().map(|r| r.requests)), (2, Some(6)), "{two:#?}");
    }
    assert!(two.history.iter().all(|h| !h.p99.is_empty() && !h.rps.is_empty()), "{:#?}", two.history);

    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}
