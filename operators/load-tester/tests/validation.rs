//! LoadTest and SimpleDeployment admission on the test control plane: the
//! schema rejects replicas 0 or over 500, unknown methods, a path not
//! starting with /, a bad sleepytime; the seed's objects are accepted with
//! their defaults.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::shared;
use serde_json::json;

#[tokio::test]
async fn admission_rejects_what_would_fail_later() {
    let env = shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("lt-admission").await.unwrap();
    let test = |t: serde_json::Value| json!({"replicas": 1, "test": t});
    let cases = [
        ("replicas 0", json!({"replicas": 0, "test": {"serviceName": "web"}}), "spec.replicas"),
        ("replicas 501", json!({"replicas": 501, "test": {"serviceName": "web"}}), "spec.replicas"),
        ("unknown method", test(json!({"serviceName": "web", "method": "BREW"})), "spec.test.method"),
        ("path without /", test(json!({"serviceName": "web", "path": "index.html"})), "spec.test.path"),
        ("bad service name", test(json!({"serviceName": "Web_1"})), "spec.test.serviceName"),
        ("bad timeout", test(json!({"serviceName": "web", "timeout": "5 seconds"})), "spec.test.timeout"),
        (
            "a header value with a newline",
            test(json!({"serviceName": "web", "headers": {"X-A": "1\nX-B: 2"}})),
            "spec.test.headers",
        ),
        ("deadline over 24h", json!({"replicas": 1, "deadline": "25h", "test": {"serviceName": "web"}}), "24h"),
    ];
    for (i, (what, spec, expect)) in cases.into_iter().enumerate() {
        match create(&client, &ns, "LoadTest", &format!("bad-{i}"), spec).await {
            Err(kube::Error::Api(s)) if s.code == 422 => assert!(s.message.contains(expect), "{what}: {}", s.message),
            other => panic!("{what} was not rejected: {other:?}"),
        }
    }
    match create(&client, &ns, "SimpleDeployment", "bad", json!({"sleepytime": "soon"})).await {
        Err(kube::Error::Api(s)) if s.code == 422 => assert!(s.message.contains("sleepytime"), "{}", s.message),
        other => panic!("a bad sleepytime was not rejected: {other:?}"),
    }
    // The seed's example-02, as written there, with our defaults.
    create(
        &client,
        &ns,
        "LoadTest",
        "example-02",
        json!({"replicas": 5, "test": {"method": "GET", "serviceName": "nginx", "path": "/", "repeat": 10}}),
    )
    .await
    .unwrap();
    let t: kube::Api<LoadTest> = kube::Api::namespaced(client.clone(), &ns);
    let t = t.get("example-02").await.unwrap();
    assert_eq!((t.spec.test.port, t.spec.test.concurrency, t.spec.deadline.0.as_str()), (80, 1, "10m"));
    create(&client, &ns, "SimpleDeployment", "example-01", json!({"sleepytime": "120"})).await.unwrap();
}

/// A header name that is not an HTTP token passes the schema (map keys are
/// not checked there) and fails the run with InvalidSpec: Stalled, since
/// only an edit helps. The edit that fixes it starts a run, and Stalled is
/// gone.
#[tokio::test]
async fn a_spec_that_cannot_run_is_stalled_until_it_is_fixed() {
    let env = shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("lt-stalled").await.unwrap();
    let _operator = start_operator(&env, &ns);
    let spec = json!({"replicas": 1, "test": {"serviceName": "web", "headers": {"X Bad": "1"}}});
    create(&client, &ns, "LoadTest", "bad-header", spec).await.unwrap();
    let t = Duration::from_secs(40);
    let condition = |s: &LoadTestStatus, t: &str| s.conditions.iter().find(|c| c.type_ == t).cloned();
    let st = wait_test(&client, &ns, "bad-header", "Stalled", t, |s| condition(s, "Stalled").map(|_| s.clone())).await;
    let stalled = condition(&st, "Stalled").unwrap();
    assert_eq!((stalled.status.as_str(), stalled.reason.as_str()), ("True", "InvalidSpec"));
    assert!(stalled.message.contains("X Bad"), "{stalled:?}");
    assert_eq!((st.state.as_str(), condition(&st, "Ready").map(|c| c.status)), ("Failed", Some("False".into())));

    patch_spec(&client, &ns, "LoadTest", "bad-header", json!({"test": {"headers": {"X Bad": null, "X-Good": "1"}}}))
        .await;
    // A new run (whatever becomes of it: there is no Service web), not Stalled.
    wait_test(&client, &ns, "bad-header", "a new run, not Stalled", t, |s| {
        let ready = condition(s, "Ready")?;
        (s.run > st.run && ready.reason != "InvalidSpec" && condition(s, "Stalled").is_none()).then_some(())
    })
    .await;
}
