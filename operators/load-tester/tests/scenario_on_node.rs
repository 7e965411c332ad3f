//! load-tester's scenarios on the one-node cluster (issue 30): a LoadTest
//! with `test.requests` sends each request its share by weight, as written
//! (method, path and query, its headers, a header and a body from a
//! Secret), judges each by its own checks and shows each request's figures
//! in `status.results.byRequest`. Against the capture server (busybox
//! httpd: `/cgi-bin/capture` logs each request it answers; a path it does
//! not serve answers 404).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::node;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use load_tester::crd::{LoadTest, State, Verdict};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(240);

/// The scenario: `home` (3 of 5), `cart` (1 of 5, POST, its Authorization
/// and body from Secret `shop`, checked for `cart_checks`), `missing` (1
/// of 5, a 404 expected).
fn scenario(cart_checks: Value) -> Value {
    let from = |k: &str| json!({"secretKeyRef": {"name": "shop", "key": k}});
    small(json!({"replicas": 2, "cleanup": "Never",
        "test": {"serviceName": "web", "port": 8080, "repeat": 10, "concurrency": 2,
                 "requests": [
                     {"name": "home", "weight": 3, "path": "/cgi-bin/capture?page=home", "headers": {"X-Api-Key": "home"}},
                     {"name": "cart", "method": "POST", "path": "/cgi-bin/capture",
                      "httpHeaders": [{"name": "Authorization", "valueFrom": from("token")}],
                      "bodyFrom": from("order"), "checks": cart_checks},
                     {"name": "missing", "path": "/nowhere", "checks": {"statusCodes": [404]}}
                 ]},
        "thresholds": {"maxErrorRatio": 0.01}}))
}

#[tokio::test]
async fn a_scenario_sends_each_request_its_share_and_shows_each_ones_figures() {
    let env = node();
    let (client, ns, operator) = capture_namespace(&env, "lt-scenario").await;
    let token = format!("tok-{}", std::process::id());
    let order = format!("{{\"order\":\"{}\"}}", std::process::id());
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "shop"}, "stringData": {"token": format!("Bearer {token}"), "order": order}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns).create(&PostParams::default(), &secret).await.unwrap();
    create(&client, &ns, "LoadTest", "shop", scenario(json!({"statusCodes": [200], "bodyContains": "ok"})))
        .await
        .unwrap();
    let s =
        wait_test(&client, &ns, "shop", "the scenario to end", T, |s| s.state.is_terminal().then(|| s.clone())).await;
    assert_eq!((s.state, s.verdict), (State::Finished, Verdict::Passed), "{s:#?}");
    let r = s.results.clone().unwrap();
    // Each runner sends 20: 12 home, 4 cart, 4 missing (3:1:1, interleaved).
    assert_eq!(r.requests, 40, "{r:#?}");
    let by: Vec<(&str, i64)> = r.by_request.iter().map(|q| (q.name.as_str(), q.requests)).collect();
    assert_eq!(by, [("home", 24), ("cart", 8), ("missing", 8)], "{r:#?}");
    assert!(r.by_request.iter().all(|q| q.errors.is_empty() && q.latency.is_some()), "{r:#?}");
    let hits = hits(&env, &ns, "web");
    let home = hits.iter().filter(|h| h.contains("key=home") && h.ends_with("body=")).count();
    let cart = hits.iter().filter(|h| h.contains(&format!("auth=Bearer {token} key= body={order}"))).count();
    assert_eq!((home, cart, hits.len()), (24, 8, 32), "{hits:#?}");

    // The same with a body check the cart's answers fail: only the cart's
    // 8 requests are errors, of kind check, and the verdict fails.
    create(&client, &ns, "LoadTest", "broken-cart", scenario(json!({"bodyContains": "added to cart"}))).await.unwrap();
    let s = wait_test(&client, &ns, "broken-cart", "the second scenario to end", T, |s| {
        s.state.is_terminal().then(|| s.clone())
    })
    .await;
    assert_eq!((s.state, s.verdict), (State::Finished, Verdict::Failed), "{s:#?}");
    let r = s.results.clone().unwrap();
    assert_eq!(r.errors.get("check"), Some(&8), "{r:#?}");
    let cart = r.by_request.iter().find(|q| q.name == "cart").unwrap();
    assert_eq!((cart.requests, cart.errors.get("check"), cart.error_ratio.as_str()), (8, Some(&8), "1.0000"));
    assert!(cart.latency.is_none(), "none of its answers passed: {cart:?}");
    assert!(r.by_request.iter().filter(|q| q.name != "cart").all(|q| q.errors.is_empty()), "{r:#?}");

    // The Secret's values reached the target and nothing else.
    for p in runner_pods(&client, &ns, "shop").await {
        let text = serde_json::to_string(&p).unwrap();
        assert!(!text.contains(&token) && !text.contains(&order), "a runner pod holds a value: {text}");
    }
    let test = Api::<LoadTest>::namespaced(client.clone(), &ns).get("shop").await.unwrap();
    let text = serde_json::to_string(&test).unwrap();
    assert!(!text.contains(&token) && !text.contains(&order), "{text}");
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}
