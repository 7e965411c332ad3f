//! Live progress and abortOnFail on the one-node cluster (issue 30), the
//! operator as the chart's ServiceAccount with exactly the chart's RBAC
//! (its log reads go through the real kubelet). Against the capture server
//! (busybox httpd): a 40 s run shows `status.progress` while Executing,
//! growing from one read to the next, and the same figures as live metrics
//! labelled by LoadTest (gone once it ends); a 3-minute run against a path
//! the server answers 404 with `abortOnFail` is stopped once the figures so
//! far miss its error ratio: it ends long before its time, Finished,
//! verdict Failed, reason AbortedOnFail, with a Warning Event. Needs the
//! loadgen image (`cargo xtask images`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use flotilla_testenv::node;
use load_tester::crd::{State, Verdict};
use serde_json::json;

const T: Duration = Duration::from_secs(300);

#[tokio::test]
async fn a_run_shows_its_progress_and_a_failing_one_is_aborted_early() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("lt-progress").await.unwrap();
    capture_pod(&client, &ns, "web", None).await;
    service(&client, &ns, "web", "web", false).await;
    wait_ready_endpoint(&client, &ns, "web", None).await;
    let operator = start_operator_with_chart_rbac(&env, &ns, &[]).await;
    let test = |path: &str, duration: &str| {
        small(json!({"replicas": 2,
            "test": {"serviceName": "web", "port": 8080, "path": path, "concurrency": 1},
            "rate": 10,
            "load": {"duration": duration},
            "thresholds": {"maxErrorRatio": 0.01, "abortOnFail": true}}))
    };
    create(&client, &ns, "LoadTest", "steady", test("/", "40s")).await.unwrap();
    create(&client, &ns, "LoadTest", "failing", test("/missing", "3m")).await.unwrap();
    let created = Instant::now();

    // While steady runs: two reads, the later with more requests.
    let first = wait_test(&client, &ns, "steady", "steady's first progress with requests", T, |s| {
        s.progress.as_ref().filter(|p| s.state == State::Executing && p.requests > 0).cloned()
    })
    .await;
    assert_eq!((first.runners, first.aborted.as_str(), first.message.as_str()), (2, "", ""), "{first:#?}");
    assert!(!first.rate.is_empty() && !first.p99.is_empty(), "{first:#?}");
    let later = wait_test(&client, &ns, "steady", "steady's progress to grow", T, |s| {
        s.progress.as_ref().filter(|p| p.requests > first.requests && p.updated != first.updated).cloned()
    })
    .await;
    assert_eq!(later.errors, 0, "{later:#?}");
    let metrics = reqwest::get(operator.metrics_url()).await.unwrap().text().await.unwrap();
    let series = format!("flotilla_load_tester_progress_requests{{loadtest=\"steady\",namespace=\"{ns}\"}}");
    assert!(metrics.contains(&series), "no live series {series} in:\n{metrics}");

    let steady = wait_ended(&client, &ns, "steady").await;
    assert_eq!((steady.state, steady.verdict), (State::Finished, Verdict::Passed), "{steady:#?}");

    // The failing run: stopped early, failed for it.
    let failing =
        wait_test(&client, &ns, "failing", "failing to end", T, |s| s.state.is_terminal().then(|| s.clone())).await;
    let took = created.elapsed();
    eprintln!("steady: first {first:?}\nlater {later:?}\nfailing ended after {took:?}: {}", failing.message);
    assert_eq!(
        (failing.state, failing.verdict, failing.reason.as_str()),
        (State::Finished, Verdict::Failed, "AbortedOnFail"),
        "{failing:#?}"
    );
    let aborted = failing.progress.as_ref().map(|p| p.aborted.clone()).unwrap_or_default();
    assert!(aborted.starts_with("error ratio 1.0000"), "{failing:#?}");
    let r = failing.results.clone().unwrap();
    assert!(r.requests >= 100 && r.errors.get("http4xx") == Some(&r.requests), "{r:#?}");
    // Of its 3 minutes: 100 requests at 10/s take 10 s, a read follows
    // within 5 s, the kubelet refreshes the annotation's file within its
    // sync period (1 minute).
    assert!(took < Duration::from_secs(150), "the failing run took {took:?} of its 3 minutes: not stopped early");
    let events = events_about(&client, &ns, "failing").await;
    assert!(events.iter().any(|(_, reason, _)| reason == "AbortedOnFail"), "{events:?}");

    // No live series once the runs ended.
    let metrics = reqwest::get(operator.metrics_url()).await.unwrap().text().await.unwrap();
    assert!(!metrics.contains("flotilla_load_tester_progress_requests{"), "{metrics}");
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked") && !logs.to_lowercase().contains("forbidden"), "{logs}");
}
