//! LoadTest and SimpleDeployment admission on the test control plane: the
//! schema rejects replicas 0 or over 500, unknown methods, a path not
//! starting with /, a bad sleepytime; the seed's objects are accepted with
//! their defaults.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::shared;
use load_tester::crd::Scheme;
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
        (
            "a schedule with seconds",
            json!({"replicas": 1, "schedule": "0 0 3 * * *", "test": {"serviceName": "web"}}),
            "spec.schedule",
        ),
        (
            "a schedule nickname cron does not know",
            json!({"replicas": 1, "schedule": "@reboot", "test": {"serviceName": "web"}}),
            "spec.schedule",
        ),
        ("an unknown scheme", test(json!({"serviceName": "web", "scheme": "ftp"})), "spec.test.scheme"),
        (
            "tls without https",
            test(json!({"serviceName": "web", "tls": {"insecureSkipVerify": true}})),
            "tls is only for scheme https",
        ),
        (
            "a CA and no verification",
            test(json!({"serviceName": "web", "scheme": "https",
                "tls": {"insecureSkipVerify": true, "caConfigMapRef": {"name": "ca", "key": "ca.crt"}}})),
            "caConfigMapRef and insecureSkipVerify are mutually exclusive",
        ),
        (
            "a CA ConfigMap name that is not one",
            test(
                json!({"serviceName": "web", "scheme": "https", "tls": {"caConfigMapRef": {"name": "CA!", "key": "ca.crt"}}}),
            ),
            "spec.test.tls.caConfigMapRef.name",
        ),
        // Issue 30: checks.
        (
            "a status code out of range",
            test(json!({"serviceName": "web", "checks": {"statusCodes": [200, 99]}})),
            "spec.test.checks.statusCodes",
        ),
        (
            "a status code twice",
            test(json!({"serviceName": "web", "checks": {"statusCodes": [200, 200]}})),
            "spec.test.checks.statusCodes",
        ),
        (
            "a body check of a HEAD answer",
            test(json!({"serviceName": "web", "method": "HEAD", "checks": {"bodyContains": "ok"}})),
            "checks.bodyContains is not for method HEAD",
        ),
        (
            "an empty body check",
            test(json!({"serviceName": "web", "checks": {"bodyContains": ""}})),
            "spec.test.checks.bodyContains",
        ),
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
    assert_eq!((t.spec.test.scheme, t.spec.test.http2, t.spec.test.tls.clone()), (Scheme::Http, false, None));
    // https with a CA from a ConfigMap, or with no verification, is admitted.
    for (name, tls) in [
        ("https-ca", json!({"caConfigMapRef": {"name": "shop-ca", "key": "ca.crt"}})),
        ("https-insecure", json!({"insecureSkipVerify": true})),
    ] {
        let spec = test(json!({"serviceName": "web", "port": 443, "scheme": "https", "http2": true, "tls": tls}));
        create(&client, &ns, "LoadTest", name, spec).await.unwrap();
    }
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

/// A schedule the schema lets through (five fields) that names no valid
/// time is InvalidSpec, said with the line and what is wrong: Stalled.
#[tokio::test]
async fn a_schedule_out_of_range_is_stalled_with_the_reason() {
    let env = shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("lt-bad-schedule").await.unwrap();
    let _operator = start_operator(&env, &ns);
    let spec = json!({"replicas": 1, "schedule": "61 * * * *", "test": {"serviceName": "web"}});
    create(&client, &ns, "LoadTest", "bad-schedule", spec).await.unwrap();
    let condition = |s: &LoadTestStatus, t: &str| s.conditions.iter().find(|c| c.type_ == t).cloned();
    let st = wait_test(&client, &ns, "bad-schedule", "Stalled", Duration::from_secs(40), |s| {
        condition(s, "Stalled").map(|_| s.clone())
    })
    .await;
    let stalled = condition(&st, "Stalled").unwrap();
    assert_eq!(stalled.reason, "InvalidSpec");
    assert!(stalled.message.contains("schedule \"61 * * * *\""), "{stalled:?}");
    assert_eq!(st.run, 0, "{st:?}");
}

/// spec.load and spec.runner at admission: a duration excludes repeat and
/// is 1s-24h; limits are at least their requests (compared as quantities,
/// so 1Gi = 1024Mi and an integer CPU counts); the embedded Kubernetes
/// types are bounded; pod (anti-)affinity stays in the namespace; what is
/// valid is stored as written, repeat absent.
#[tokio::test]
async fn admission_checks_the_load_duration_and_the_runner_spec() {
    let env = shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("lt-runner-admission").await.unwrap();
    let with = |extra: serde_json::Value| {
        let mut spec = json!({"replicas": 1, "test": {"serviceName": "web"}});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        spec
    };
    let resources = |r: serde_json::Value| with(json!({"runner": {"resources": r}}));
    let many = |n: usize| (0..n).map(|i| (format!("k{i}"), json!("v"))).collect::<serde_json::Map<_, _>>();
    let toleration = json!({"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"});
    let cases = [
        (
            "duration and repeat",
            json!({"replicas": 1, "load": {"duration": "10s"}, "test": {"serviceName": "web", "repeat": 5}}),
            "mutually exclusive",
        ),
        ("duration under 1s", with(json!({"load": {"duration": "500ms"}})), "1s to 24h"),
        ("duration over 24h", with(json!({"load": {"duration": "25h"}})), "1s to 24h"),
        ("duration not a duration", with(json!({"load": {"duration": "soon"}})), "spec.load.duration"),
        (
            "cpu limit under its request",
            resources(json!({"requests": {"cpu": "1"}, "limits": {"cpu": "500m"}})),
            "each limit is at least its request",
        ),
        (
            "integer cpu request over its limit",
            resources(json!({"requests": {"cpu": 2}, "limits": {"cpu": "1500m"}})),
            "each limit is at least its request",
        ),
        (
            "memory limit under its request",
            resources(json!({"requests": {"memory": "1Gi"}, "limits": {"memory": "1000Mi"}})),
            "each limit is at least its request",
        ),
        ("not a quantity", resources(json!({"requests": {"cpu": "lots"}})), "quantities"),
        ("a long quantity", resources(json!({"limits": {"cpu": "1".repeat(65)}})), "spec.runner.resources.limits"),
        ("nine requests", resources(json!({"requests": many(9)})), "spec.runner.resources.requests"),
        (
            "33 tolerations",
            with(json!({"runner": {"tolerations": vec![toleration.clone(); 33]}})),
            "spec.runner.tolerations",
        ),
        ("33 node labels", with(json!({"runner": {"nodeSelector": many(33)}})), "spec.runner.nodeSelector"),
        (
            "33 affinity values",
            with(json!({"runner": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": vec!["v"; 33]}]}]
            }}}}})),
            "values",
        ),
        // The attack: whether a runner schedules next to (or away from)
        // pods of another namespace tells the author which pods exist there.
        (
            "pod affinity to another namespace",
            with(json!({"runner": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "namespaces": ["kube-system"],
                 "labelSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}
            ]}}}})),
            "pods of this namespace only",
        ),
        (
            "pod anti-affinity by namespace selector",
            with(
                json!({"runner": {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "namespaceSelector": {},
                     "labelSelector": {"matchLabels": {"app": "secret"}}}}
                ]}}}}),
            ),
            "pods of this namespace only",
        ),
    ];
    for (i, (what, spec, expect)) in cases.into_iter().enumerate() {
        match create(&client, &ns, "LoadTest", &format!("bad-{i}"), spec).await {
            Err(kube::Error::Api(s)) if s.code == 422 => assert!(s.message.contains(expect), "{what}: {}", s.message),
            other => panic!("{what} was not rejected: {other:?}"),
        }
    }
    let t: kube::Api<LoadTest> = kube::Api::namespaced(client.clone(), &ns);
    // A fixed-time run: no repeat is defaulted in beside it.
    create(&client, &ns, "LoadTest", "timed", with(json!({"load": {"duration": "2m"}}))).await.unwrap();
    let timed = t.get("timed").await.unwrap();
    assert_eq!(timed.spec.test.repeat, None);
    assert_eq!(timed.spec.duration().unwrap(), Some(std::time::Duration::from_secs(120)));
    assert_eq!(timed.spec.runner, None, "no runner section made up");
    // Limits equal to or over their requests, however written; placement.
    let runner = json!({
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": 1, "memory": "1024Mi"}},
        "nodeSelector": {"pool": "load"},
        "tolerations": [toleration],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10,
            "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"a": "b"}}}}]}},
        "spread": false
    });
    create(&client, &ns, "LoadTest", "placed", with(json!({"runner": runner}))).await.unwrap();
    let placed = t.get("placed").await.unwrap().spec.runner.unwrap();
    assert_eq!((placed.spread, placed.node_selector.get("pool").map(String::as_str)), (false, Some("load")));
    assert_eq!(placed.tolerations.len(), 1);
    assert!(placed.affinity.is_some());
    // spread defaults to true once a runner section is given.
    create(&client, &ns, "LoadTest", "sized", with(json!({"runner": {"nodeSelector": {"pool": "load"}}})))
        .await
        .unwrap();
    assert!(t.get("sized").await.unwrap().spec.runner.unwrap().spread);
    // Today's spec, repeat given, is as valid as ever.
    create(&client, &ns, "LoadTest", "counted", with(json!({"test": {"serviceName": "web", "repeat": 5}})))
        .await
        .unwrap();
    assert_eq!(t.get("counted").await.unwrap().spec.test.repeat(), 5);
}

/// spec.load.stages at admission: 1-32 stages, each 1s-24h and a rate of
/// 0-100000, 24h at most in all; not with test.repeat, load.duration or a
/// rate; maxConnections 1-10000 and only with stages. A valid profile is
/// stored as written, no repeat defaulted in beside it.
#[tokio::test]
async fn admission_checks_the_load_stages() {
    let env = shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("lt-stages-admission").await.unwrap();
    let stage = |d: &str, r: i64| json!({"duration": d, "rate": r});
    let with = |load: serde_json::Value| json!({"replicas": 2, "test": {"serviceName": "web"}, "load": load});
    let ramp = json!([stage("10s", 40), stage("10s", 40)]);
    let cases = [
        (
            "stages and repeat",
            json!({"replicas": 1, "test": {"serviceName": "web", "repeat": 5}, "load": {"stages": ramp}}),
            "mutually exclusive with test.repeat and rate",
        ),
        (
            "stages and rate",
            json!({"replicas": 1, "rate": 10, "test": {"serviceName": "web"}, "load": {"stages": ramp}}),
            "mutually exclusive with test.repeat and rate",
        ),
        ("stages and duration", with(json!({"stages": ramp, "duration": "20s"})), "load.duration and load.stages"),
        ("no stage", with(json!({"stages": []})), "spec.load.stages"),
        ("33 stages", with(json!({"stages": vec![stage("1s", 1); 33]})), "spec.load.stages"),
        ("a stage under 1s", with(json!({"stages": [stage("500ms", 1)]})), "1s to 24h"),
        ("a stage over 24h", with(json!({"stages": [stage("25h", 1)]})), "1s to 24h"),
        ("over 24h in all", with(json!({"stages": [stage("13h", 1), stage("12h", 1)]})), "24h in all"),
        ("a negative rate", with(json!({"stages": [stage("1s", -1)]})), "rate"),
        ("a rate over 100000", with(json!({"stages": [stage("1s", 100_001)]})), "rate"),
        ("a stage without a rate", with(json!({"stages": [{"duration": "1s"}]})), "rate"),
        ("maxConnections without stages", with(json!({"maxConnections": 5})), "with them only"),
        ("maxConnections 0", with(json!({"stages": ramp, "maxConnections": 0})), "maxConnections"),
        ("maxConnections over 10000", with(json!({"stages": ramp, "maxConnections": 10_001})), "maxConnections"),
    ];
    for (i, (what, spec, expect)) in cases.into_iter().enumerate() {
        match create(&client, &ns, "LoadTest", &format!("bad-{i}"), spec).await {
            Err(kube::Error::Api(s)) if s.code == 422 => assert!(s.message.contains(expect), "{what}: {}", s.message),
            other => panic!("{what} was not rejected: {other:?}"),
        }
    }
    let t: kube::Api<LoadTest> = kube::Api::namespaced(client.clone(), &ns);
    let full = json!([stage("30s", 100), stage("2m", 100), stage("30s", 0)]);
    create(&client, &ns, "LoadTest", "ramp", with(json!({"stages": full, "maxConnections": 50}))).await.unwrap();
    let ramp = t.get("ramp").await.unwrap().spec;
    assert_eq!(ramp.test.repeat, None);
    assert_eq!(ramp.stages().len(), 3);
    assert_eq!(ramp.load.as_ref().and_then(|l| l.max_connections), Some(50));
    assert_eq!(ramp.duration().unwrap(), Some(std::time::Duration::from_secs(180)));
    // rate 0 written out is today's default: it does not conflict.
    create(
        &client,
        &ns,
        "LoadTest",
        "zero-rate",
        json!({"replicas": 1, "rate": 0, "test": {"serviceName": "web"}, "load": {"stages": [stage("24h", 0)]}}),
    )
    .await
    .unwrap();
}

/// spec.load.capacity at admission: start, step and max 1-100000, max at
/// least start, at most 100 steps, stepDuration 30s-10m; not with
/// load.duration, load.stages, test.repeat or a rate; thresholds to search
/// against. A valid search is stored as written and runs as 2 stages a
/// step (a 1 s ramp, then the hold).
#[tokio::test]
async fn admission_checks_the_capacity_search() {
    let env = shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("lt-capacity-admission").await.unwrap();
    let search = json!({"start": 50, "step": 50, "stepDuration": "30s", "max": 500});
    let with = |capacity: serde_json::Value, more: serde_json::Value| {
        let mut spec = json!({"replicas": 2, "test": {"serviceName": "web"}, "load": {"capacity": capacity},
                              "thresholds": {"p99": "50ms"}});
        for (k, v) in more.as_object().unwrap() {
            spec[k] = v.clone();
        }
        spec
    };
    let changed = |k: &str, v: serde_json::Value| {
        let mut c = search.clone();
        c[k] = v;
        with(c, json!({}))
    };
    let cases = [
        ("no thresholds", with(search.clone(), json!({"thresholds": {}})), "needs a threshold"),
        ("only minRate", with(search.clone(), json!({"thresholds": {"minRate": 10}})), "needs a threshold"),
        (
            "and repeat",
            with(search.clone(), json!({"test": {"serviceName": "web", "repeat": 5}})),
            "load.capacity is mutually exclusive",
        ),
        ("and a rate", with(search.clone(), json!({"rate": 10})), "load.capacity is mutually exclusive"),
        (
            "and a duration",
            with(search.clone(), json!({"load": {"capacity": search, "duration": "1m"}})),
            "sets its own steps",
        ),
        ("max below start", changed("max", json!(10)), "at least capacity.start"),
        ("101 steps", changed("max", json!(5050)), "at most 100 steps"),
        ("a step of 0", changed("step", json!(0)), "step"),
        ("a start of 0", changed("start", json!(0)), "start"),
        ("a step of 20s", changed("stepDuration", json!("20s")), "30s to 10m"),
        ("a step of 11m", changed("stepDuration", json!("11m")), "30s to 10m"),
    ];
    for (i, (what, spec, expect)) in cases.into_iter().enumerate() {
        match create(&client, &ns, "LoadTest", &format!("bad-{i}"), spec).await {
            Err(kube::Error::Api(s)) if s.code == 422 => assert!(s.message.contains(expect), "{what}: {}", s.message),
            other => panic!("{what} was not rejected: {other:?}"),
        }
    }
    let t: kube::Api<LoadTest> = kube::Api::namespaced(client.clone(), &ns);
    create(&client, &ns, "LoadTest", "search", with(changed("max", json!(800))["load"]["capacity"].clone(), json!({})))
        .await
        .unwrap();
    // The example, 50 to 5000 by 50: 100 steps, admitted (it was
    // refused at 16 steps before the fuller summaries).
    create(&client, &ns, "LoadTest", "hundred", changed("max", json!(5000))).await.unwrap();
    let spec = t.get("search").await.unwrap().spec;
    assert_eq!((spec.test.repeat, spec.stages().len()), (None, 32));
    assert_eq!(spec.duration().unwrap(), Some(std::time::Duration::from_secs(16 * 30)));
}
