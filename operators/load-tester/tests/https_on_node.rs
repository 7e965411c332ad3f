//! `test.scheme: https` on the one-node cluster (issue 30): the target is
//! CoreDNS serving DNS over HTTPS (RFC 8484; HTTP/2 and HTTP/1.1 by ALPN)
//! with a certificate for the Service's name from a CA made here. A
//! LoadTest trusting that CA (`tls.caConfigMapRef`, mounted into the
//! runners) is answered 200 on every request, with `http2: true` (h2
//! offered by ALPN; loadgen's tests/tls.rs proves what is negotiated) and
//! HTTP/1.1 only; one that trusts only the public roots gets no answer at
//! all (every request fails the handshake: `connect`), and one with
//! `insecureSkipVerify` is answered. Needs the loadgen image and the node's
//! CoreDNS (`cargo xtask images`, `cargo xtask setup`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use flotilla_testenv::node;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::Api;
use kube::api::PostParams;
use load_tester::crd::{State, Verdict};
use serde_json::json;

/// RFC 8484's example query (www.example.com, A), base64url: CoreDNS's
/// whoami plugin answers any name.
const QUERY: &str = "/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB";

/// A CA's certificate, and a certificate and key for `name` it signed (PEM).
fn pki(name: &str) -> (String, String, String) {
    let p = flotilla_testenv::serving_pki::serving_pki(&[name]).unwrap();
    (p.ca_pem, p.cert_pem, p.key_pem)
}

#[tokio::test]
async fn an_https_target_is_loaded_through_the_ca_given_and_refused_without_it() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("lt-https").await.unwrap();
    let (ca, cert, key) = pki(&format!("doh.{ns}.svc.cluster.local"));
    let pp = PostParams::default();
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "doh-tls"},
        "stringData": {"tls.crt": cert, "tls.key": key}}))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns).create(&pp, &secret).await.unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let corefile = "https://.:8443 {\n    tls /certs/tls.crt /certs/tls.key\n    whoami\n}\n";
    for (name, data) in [
        ("doh-ca", BTreeMap::from([("ca.crt", ca)])),
        ("doh-conf", BTreeMap::from([("Corefile", corefile.to_string())])),
    ] {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap();
        config_maps.create(&pp, &cm).await.unwrap();
    }
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "doh", "labels": {"app": "doh"}}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "coredns", "image": flotilla_testenv::build::node_assets::coredns_image(),
            "args": ["-conf", "/etc/coredns/Corefile"],
            "readinessProbe": {"tcpSocket": {"port": 8443}, "periodSeconds": 1},
            "volumeMounts": [{"name": "conf", "mountPath": "/etc/coredns"}, {"name": "tls", "mountPath": "/certs"}]}],
        "volumes": [{"name": "conf", "configMap": {"name": "doh-conf"}}, {"name": "tls", "secret": {"secretName": "doh-tls"}}]
    }}))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), &ns).create(&pp, &pod).await.unwrap();
    service(&client, &ns, "doh", "doh", false).await;
    wait_ready_endpoint(&client, &ns, "doh", None).await;
    // service() maps 8080; the DoH server listens on 8443.
    let svc: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), &ns);
    svc.patch(
        "doh",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"ports": [{"port": 8080, "targetPort": 8443}]}})),
    )
    .await
    .unwrap();
    let operator = start_operator(&env, &ns);

    let run = |tls: serde_json::Value, http2: bool| {
        small(json!({"replicas": 1,
            "test": {"serviceName": "doh", "port": 8080, "scheme": "https", "path": QUERY, "repeat": 20,
                     "concurrency": 2, "http2": http2, "tls": tls, "checks": {"statusCodes": [200]}},
            "thresholds": {"maxErrorRatio": 0}}))
    };
    let trusted = json!({"caConfigMapRef": {"name": "doh-ca", "key": "ca.crt"}});
    create(&client, &ns, "LoadTest", "h2", run(trusted.clone(), true)).await.unwrap();
    create(&client, &ns, "LoadTest", "h1", run(trusted, false)).await.unwrap();
    create(&client, &ns, "LoadTest", "insecure", run(json!({"insecureSkipVerify": true}), true)).await.unwrap();
    create(&client, &ns, "LoadTest", "untrusted", run(json!({}), false)).await.unwrap();

    for (name, answered) in [("h2", true), ("h1", true), ("insecure", true), ("untrusted", false)] {
        let s = wait_test(&client, &ns, name, &format!("{name} to end"), Duration::from_secs(240), |s| {
            s.state.is_terminal().then(|| s.clone())
        })
        .await;
        let r = s.results.clone().unwrap_or_default();
        eprintln!("{name}: {} {:?}", s.message, r.errors);
        assert_eq!(s.state, State::Finished, "{name}: {s:#?}");
        assert_eq!(r.requests, 40, "{name}: {r:#?}");
        if answered {
            assert!(r.errors.is_empty(), "{name}: {r:#?}");
            assert_eq!(s.verdict, Verdict::Passed, "{name}");
        } else {
            // No answer: the handshake fails (no check error, no status).
            assert_eq!(r.errors.values().sum::<i64>(), 40, "{name}: {r:#?}");
            assert!(!r.errors.contains_key("check") && !r.errors.contains_key("http5xx"), "{name}: {r:#?}");
            assert_eq!(s.verdict, Verdict::Failed, "{name}");
        }
    }
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}
