//! LoadTest and SimpleDeployment admission on the test control plane: the
//! schema rejects replicas 0 or over 500, unknown methods, a path not
//! starting with /, a bad sleepytime; the seed's objects are accepted with
//! their defaults.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

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
