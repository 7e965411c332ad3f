//! spec.baseline on the one-node cluster: a LoadTest run against the
//! capture server is the baseline; the same test with that baseline passes
//! (BaselineMet, the deltas in status.baseline), and one against a server
//! slowed by 200 ms fails its verdict (BaselineRegressed) though it has no
//! thresholds. Then golden's run 1 is saved (`flotilla.dev/save-baseline`)
//! and golden runs again against the slowed server: a test naming golden
//! still compares with the saved run 1 and fails. Needs the loadgen image
//! (`cargo xtask images`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use flotilla_testenv::node;
use kube::api::{Patch, PatchParams};
use load_tester::crd::{State, Verdict};
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn a_slowed_server_fails_against_the_baseline_and_a_same_speed_one_passes() {
    let env = node();
    let (client, ns, operator) = capture_namespace(&env, "lt-baseline").await;
    let test = |path: &str| json!({"serviceName": "web", "port": 8080, "path": path, "repeat": 20, "concurrency": 1});
    // A p50 up to eleven times the baseline's still passes (a forking CGI
    // on a 2-core node other tests share); the slowed server's is over a
    // hundred times it.
    let baseline = json!({"loadTestRef": "golden", "maxRegression": {"p50": "1000%"}});

    create(&client, &ns, "LoadTest", "golden", small(json!({"replicas": 1, "test": test("/cgi-bin/capture")})))
        .await
        .unwrap();
    let golden = wait_ended(&client, &ns, "golden").await;
    assert_eq!((golden.state, golden.verdict), (State::Finished, Verdict::None), "{golden:#?}");

    create(
        &client,
        &ns,
        "LoadTest",
        "same",
        small(json!({"replicas": 1, "test": test("/cgi-bin/capture"), "baseline": baseline})),
    )
    .await
    .unwrap();
    let same = wait_ended(&client, &ns, "same").await;
    let b = same.baseline.clone().unwrap();
    eprintln!("same: {} {:?}", same.message, b);
    assert_eq!((same.state, same.verdict, same.reason.as_str()), (State::Finished, Verdict::Passed, "BaselineMet"));
    assert_eq!((b.load_test_ref.as_str(), b.run), ("golden", 1), "{b:#?}");
    assert_eq!(b.figures.get("p50"), golden.results.as_ref().map(|r| &r.latency.p50), "{b:#?}");
    for k in ["p50", "p90", "p99", "errorRatio"] {
        assert!(b.deltas.contains_key(k), "{k}: {b:#?}");
    }

    create(
        &client,
        &ns,
        "LoadTest",
        "slow",
        small(json!({"replicas": 1, "test": test("/cgi-bin/slow"), "baseline": baseline})),
    )
    .await
    .unwrap();
    let slow = wait_ended(&client, &ns, "slow").await;
    eprintln!("slow: {}", slow.message);
    assert_eq!(
        (slow.state, slow.verdict, slow.reason.as_str()),
        (State::Finished, Verdict::Failed, "BaselineRegressed")
    );
    assert!(slow.message.contains("p50") && slow.message.contains("> 1000%"), "{}", slow.message);
    let b = slow.baseline.unwrap();
    assert!(b.message.starts_with("regressed against run 1 of golden"), "{b:#?}");
    let events = format!("{:?}", events_about(&client, &ns, "slow").await);
    assert!(events.contains("BaselineRegressed") || events.contains("verdict Failed"), "{events}");

    // Run 1 of golden saved as its baseline; golden then runs against the
    // slowed server (a spec edit: run 2). A test naming golden compares
    // with the saved run 1, not with the slow run 2, and fails.
    let save = json!({"metadata": {"annotations": {"flotilla.dev/save-baseline": "v1"}}});
    api(&client, &ns, "LoadTest").patch("golden", &PatchParams::default(), &Patch::Merge(&save)).await.unwrap();
    let saved = wait_test(&client, &ns, "golden", "golden's run 1 saved", Duration::from_secs(60), |s| {
        s.saved_baseline.clone().filter(|b| b.token == "v1")
    })
    .await;
    assert_eq!((saved.run, saved.saved_at.is_some()), (1, true), "{saved:#?}");
    assert_eq!(saved.figures.get("p50"), golden.results.as_ref().map(|r| &r.latency.p50), "{saved:#?}");
    patch_spec(&client, &ns, "LoadTest", "golden", json!({"test": test("/cgi-bin/slow")})).await;
    let golden2 = wait_test(&client, &ns, "golden", "golden's run 2 to end", Duration::from_secs(180), |s| {
        (s.run == 2 && s.state.is_terminal()).then(|| s.clone())
    })
    .await;
    assert_eq!((golden2.state, golden2.saved_baseline.map(|b| b.run)), (State::Finished, Some(1)));
    create(
        &client,
        &ns,
        "LoadTest",
        "after",
        small(json!({"replicas": 1, "test": test("/cgi-bin/slow"), "baseline": baseline})),
    )
    .await
    .unwrap();
    let after = wait_ended(&client, &ns, "after").await;
    let b = after.baseline.clone().unwrap();
    eprintln!("after: {} {b:?}", after.message);
    assert_eq!((after.verdict, after.reason.as_str()), (Verdict::Failed, "BaselineRegressed"), "{after:#?}");
    assert_eq!((b.run, b.saved_at.is_some()), (1, true), "{b:#?}");
    let events = format!("{:?}", events_about(&client, &ns, "golden").await);
    assert!(events.contains("BaselineSaved"), "{events}");

    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}
