//! load-tester's checks on the one-node cluster (issue 30): the runners
//! judge each answer against `spec.test.checks`. Against the capture
//! server (busybox httpd answering `ok`), a LoadTest whose checks the
//! answers meet finishes with no error and passes; one whose body check
//! they fail counts every request as an error of kind `check` (not a
//! transport or HTTP error) and fails its error-ratio threshold; one that
//! expects a 404 where the server answers 200 does too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::node;
use load_tester::crd::{State, Verdict};
use serde_json::json;

const T: Duration = Duration::from_secs(240);

#[tokio::test]
async fn answers_failing_their_checks_are_check_errors_and_fail_the_verdict() {
    let env = node();
    let (client, ns, operator) = capture_namespace(&env, "lt-checks").await;
    let run = |checks: serde_json::Value| {
        small(json!({"replicas": 1,
            "test": {"serviceName": "web", "port": 8080, "path": "/", "repeat": 20, "concurrency": 2, "checks": checks},
            "thresholds": {"maxErrorRatio": 0.01}}))
    };
    create(&client, &ns, "LoadTest", "met", run(json!({"statusCodes": [200], "bodyContains": "ok"}))).await.unwrap();
    create(&client, &ns, "LoadTest", "body", run(json!({"bodyContains": "never-in-the-answer"}))).await.unwrap();
    create(&client, &ns, "LoadTest", "status", run(json!({"statusCodes": [404]}))).await.unwrap();

    for (name, passes) in [("met", true), ("body", false), ("status", false)] {
        let s =
            wait_test(&client, &ns, name, &format!("{name} to end"), T, |s| s.state.is_terminal().then(|| s.clone()))
                .await;
        assert_eq!(s.state, State::Finished, "{name}: {s:#?}");
        let r = s.results.clone().unwrap();
        assert_eq!(r.requests, 40, "{name}: {r:#?}");
        if passes {
            assert!(r.errors.is_empty(), "{name}: {r:#?}");
            assert_eq!(s.verdict, Verdict::Passed, "{name}");
        } else {
            assert_eq!(r.errors.get("check"), Some(&40), "{name}: every answer fails its check, and only that: {r:#?}");
            assert_eq!(r.errors.len(), 1, "{name}: {r:#?}");
            assert_eq!(s.verdict, Verdict::Failed, "{name}");
        }
    }
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}
