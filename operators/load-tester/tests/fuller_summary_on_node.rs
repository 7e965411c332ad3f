//! A runner whose 4 KiB termination message cannot hold every histogram
//! (32 stages and a scenario of 8 requests, each mixing 1 ms and 200 ms
//! answers) says so (`more`) and prints its fuller summary as the last line
//! of its log; the operator, with exactly the chart's RBAC, reads it when
//! the run ends: every stage and every request shows its percentiles, and
//! the merged histogram keeps 3 significant digits. Without that read the
//! message's lowered precision or missing histograms would show. Against
//! the capture server (busybox httpd: `/` at once, `/cgi-bin/slow` after
//! 200 ms). Needs the loadgen image (`cargo xtask images`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::node;
use load_tester::crd::State;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(240);

#[tokio::test]
async fn what_a_termination_message_has_no_room_for_comes_through_the_log() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("lt-fuller").await.unwrap();
    capture_pod(&client, &ns, "web", None).await;
    service(&client, &ns, "web", "web", false).await;
    wait_ready_endpoint(&client, &ns, "web", None).await;
    let operator = start_operator_with_chart_rbac(&env, &ns, &[]).await;
    let requests: Vec<Value> = (0..8)
        .map(|i| json!({"name": format!("r{i}"), "path": if i % 2 == 0 { "/" } else { "/cgi-bin/slow" }}))
        .collect();
    let stages: Vec<Value> = (0..32).map(|_| json!({"duration": "1s", "rate": 16})).collect();
    create(
        &client,
        &ns,
        "LoadTest",
        "wide",
        small(json!({"replicas": 1, "cleanup": "Never",
            "test": {"serviceName": "web", "port": 8080, "requests": requests},
            "load": {"stages": stages, "maxConnections": 20}})),
    )
    .await
    .unwrap();
    let s = wait_test(&client, &ns, "wide", "the run to end", T, |s| s.state.is_terminal().then(|| s.clone())).await;
    assert_eq!(s.state, State::Finished, "{s:#?}");
    // The load made the message leave something out (else this test
    // proves nothing: widen it).
    let pods = runner_pods(&client, &ns, "wide").await;
    let message = pods[0].status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0]
        .state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .and_then(|t| t.message.clone())
        .unwrap_or_default();
    let short = loadgen::summary::Summary::parse(&message).unwrap();
    assert!(short.more, "the termination message held everything ({} bytes): {message}", message.len());
    let r = s.results.clone().unwrap();
    assert_eq!(r.stages.len(), 32, "{r:#?}");
    assert!(r.stages.iter().all(|st| st.latency.is_some()), "a stage without percentiles: {:#?}", r.stages);
    assert_eq!(r.by_request.len(), 8, "{r:#?}");
    assert!(r.by_request.iter().all(|q| q.latency.is_some()), "a request without percentiles: {:#?}", r.by_request);
    let merged = loadgen::summary::decode(&r.histogram).unwrap();
    assert_eq!(merged.sigfig(), 3, "the merged histogram lost precision: the log's summary was not taken");
    // The slow requests' p50 is the server's 200 ms, the others' far below.
    let p50 = |q: &load_tester::crd::RequestResults| {
        let text = q.latency.as_ref().unwrap().p50.clone();
        let (n, unit) = text.split_at(text.find(|c: char| c.is_alphabetic() || c == 'µ').unwrap());
        n.parse::<f64>().unwrap()
            * match unit {
                "µs" => 1e-3,
                "ms" => 1.0,
                _ => 1e3,
            }
    };
    assert!((150.0..1000.0).contains(&p50(&r.by_request[1])), "{:?}", r.by_request[1]);
    assert!(p50(&r.by_request[0]) < 100.0, "{:?}", r.by_request[0]);
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}
