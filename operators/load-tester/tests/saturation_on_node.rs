//! Runners that cannot keep up, on the one-node cluster: a runner held to
//! 10m of CPU asked for 2,000 requests/s is throttled by its cgroup and
//! falls behind its rate, and the LoadTest says so (RunnerSaturated=True
//! naming it, status.results.saturated, a Warning Event); a runner with
//! room at 20 requests/s is not (RunnerSaturated=False). Needs the loadgen
//! image (`cargo xtask images`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use flotilla_testenv::node;
use load_tester::crd::{LoadTestStatus, State};
use serde_json::json;

fn condition(s: &LoadTestStatus) -> (String, String, String) {
    let c = s.conditions.iter().find(|c| c.type_ == "RunnerSaturated").expect("a RunnerSaturated condition");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[tokio::test]
async fn a_runner_held_to_10m_of_cpu_is_reported_and_one_with_room_is_not() {
    let env = node();
    let (client, ns, operator) = capture_namespace(&env, "lt-saturated").await;
    // The static page: httpd answers it without a fork.
    let test = |concurrency: i32| json!({"serviceName": "web", "port": 8080, "path": "/", "concurrency": concurrency});
    create(
        &client,
        &ns,
        "LoadTest",
        "starved",
        // 10m, not 50m: on a node whose cores every test binary shares, a
        // 50m runner was once given less than its quota by the others and
        // never throttled (CI, twice in about ten runs), and its requests
        // were all waiting on busy connections (counted as the server's
        // slowness): "every runner kept up" at 186 of 2,000 requests/s.
        // That starvation by the node, not the limit, is not reported yet
        // (issue 28's note); a 10 ms-a-second quota is reached under any load.
        json!({"replicas": 1, "rate": 2000, "load": {"duration": "10s"}, "test": test(50),
               "runner": {"resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                        "limits": {"cpu": "10m", "memory": "128Mi"}}}}),
    )
    .await
    .unwrap();
    let starved = wait_ended(&client, &ns, "starved").await;
    assert_eq!(starved.state, State::Finished, "{starved:#?}");
    let (status, reason, message) = condition(&starved);
    eprintln!("starved: {message}");
    // The whole status, with its rate and elapsed time, says what it did.
    assert_eq!((status.as_str(), reason.as_str()), ("True", "RunnerSaturated"), "{message}: {starved:#?}");
    assert!(message.contains("starved-r1-0") && message.contains("throttled"), "{message}");
    let r = starved.results.clone().unwrap();
    assert_eq!(r.saturated.len(), 1, "{r:#?}");
    // The Warning is recorded after the status is written: waited for.
    flotilla_testenv::wait_for("the RunnerSaturated Warning", std::time::Duration::from_secs(30), || async {
        let events = format!("{:?}", events_about(&client, &ns, "starved").await);
        Ok::<_, std::convert::Infallible>(events.contains("RunnerSaturated").then_some(()))
    })
    .await
    .unwrap();

    create(
        &client,
        &ns,
        "LoadTest",
        "roomy",
        small(json!({"replicas": 1, "rate": 20, "load": {"duration": "10s"}, "test": test(4)})),
    )
    .await
    .unwrap();
    let roomy = wait_ended(&client, &ns, "roomy").await;
    assert_eq!(roomy.state, State::Finished, "{roomy:#?}");
    let (status, reason, message) = condition(&roomy);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "RunnersKeptUp"), "{message}: {roomy:#?}");
    assert!(roomy.results.as_ref().unwrap().saturated.is_empty(), "{roomy:#?}");

    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}
