//! Headless Services end to end (issue 31): the binary as a process, the
//! real control plane, moto behind the Route53-faithful proxy. The
//! EndpointSlices are made by hand (Services without a selector, as the
//! control-plane-only cluster runs no pods), labelled as the EndpointSlice
//! controller labels those of a headless Service. Publishing them is
//! opt-in (`--publish-headless`): without it they are skipped as before.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::*;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use service_dns::model::RecordType;

/// A headless Service without selector (its slices are ours to write).
fn headless(name: &str, annotations: Value, publish_not_ready: bool) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": publish_not_ready,
                 "ports": [{"name": "db", "port": 5432, "protocol": "TCP"}]},
    }))
    .unwrap()
}

/// Endpoints as `(address, ready, hostname)`.
fn endpoints(eps: &[(&str, bool, Option<&str>)]) -> Value {
    eps.iter()
        .map(|(ip, ready, h)| {
            let mut e = json!({"addresses": [ip], "conditions": {"ready": ready}});
            if let Some(h) = h {
                e["hostname"] = json!(h);
            }
            e
        })
        .collect()
}

async fn create_slice(f: &Fixture, service: &str, eps: &[(&str, bool, Option<&str>)]) {
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": service, "labels": {
            "kubernetes.io/service-name": service,
            "service.kubernetes.io/headless": "",
            "endpointslice.kubernetes.io/managed-by": "tests.flotilla.dev",
        }},
        "addressType": "IPv4",
        "endpoints": endpoints(eps),
        "ports": [{"name": "db", "port": 5432, "protocol": "TCP"}],
    }))
    .unwrap();
    Api::<EndpointSlice>::namespaced(f.client.clone(), &f.ns).create(&PostParams::default(), &slice).await.unwrap();
}

async fn set_endpoints(f: &Fixture, service: &str, eps: &[(&str, bool, Option<&str>)]) {
    Api::<EndpointSlice>::namespaced(f.client.clone(), &f.ns)
        .patch(service, &PatchParams::default(), &Patch::Merge(json!({"endpoints": endpoints(eps)})))
        .await
        .unwrap();
}

async fn create(f: &Fixture, svc: &Service) {
    create_service(&f.client, &f.ns, svc).await;
}

/// The ready endpoints' IPs at the Service's name, one name per pod with the
/// annotation; an endpoint going not-ready leaves the set and its name goes;
/// coming back, it returns. Every name has its ownership TXT.
#[tokio::test]
async fn a_headless_service_publishes_its_ready_endpoints_and_pods() {
    let f = Fixture::start("headless", &["--publish-headless"]).await;
    create(&f, &headless("db", json!({"flotilla.dev/pod-records": "true"}), false)).await;
    create_slice(
        &f,
        "db",
        &[("10.1.0.1", true, Some("db-0")), ("10.1.0.2", true, Some("db-1")), ("10.1.0.3", false, Some("db-2"))],
    )
    .await;
    let (set, pod) = (f.record("db"), |p: &str| format!("{p}.db.{}", f.domain));
    wait_record(&f.r53, &f.zone, &set, RecordType::A, &["10.1.0.1", "10.1.0.2"]).await;
    wait_record(&f.r53, &f.zone, &pod("db-0"), RecordType::A, &["10.1.0.1"]).await;
    wait_record(&f.r53, &f.zone, &pod("db-1"), RecordType::A, &["10.1.0.2"]).await;
    for name in [set.clone(), pod("db-0"), pod("db-1")] {
        let txt = find(&f.r53, &f.zone, &format!("_flotilla-owner.{name}"), RecordType::Txt).await;
        let txt = txt.unwrap_or_else(|| panic!("ownership TXT of {name}"));
        assert!(values(&txt)[0].contains("resource=service/"), "{txt:?}");
    }
    assert!(find(&f.r53, &f.zone, &pod("db-2"), RecordType::A).await.is_none(), "db-2 is not ready");

    // db-1 not ready: out of the set, its name gone; db-2 ready: in.
    set_endpoints(
        &f,
        "db",
        &[("10.1.0.1", true, Some("db-0")), ("10.1.0.2", false, Some("db-1")), ("10.1.0.3", true, Some("db-2"))],
    )
    .await;
    wait_record(&f.r53, &f.zone, &set, RecordType::A, &["10.1.0.1", "10.1.0.3"]).await;
    wait_gone(&f.r53, &f.zone, &pod("db-1")).await;
    wait_record(&f.r53, &f.zone, &pod("db-2"), RecordType::A, &["10.1.0.3"]).await;

    // The Service goes: every name with it.
    Api::<Service>::namespaced(f.client.clone(), &f.ns).delete("db", &DeleteParams::default()).await.unwrap();
    for name in [set, pod("db-0"), pod("db-2")] {
        wait_gone(&f.r53, &f.zone, &name).await;
    }
    assert!(live_records(&f.r53, &f.zone).await.is_empty(), "{:?}", live_records(&f.r53, &f.zone).await);
}

/// `publishNotReadyAddresses: true` publishes the not-ready endpoints too;
/// without the annotation no pod name is published; past
/// `--max-endpoints-per-service` the lowest addresses are, with a Warning.
#[tokio::test]
async fn publish_not_ready_addresses_and_the_bound() {
    let f = Fixture::start("headless-bound", &["--publish-headless", "--max-endpoints-per-service=3"]).await;
    create(&f, &headless("early", json!({}), true)).await;
    create_slice(&f, "early", &[("10.2.0.1", false, Some("early-0")), ("10.2.0.2", true, Some("early-1"))]).await;
    wait_record(&f.r53, &f.zone, &f.record("early"), RecordType::A, &["10.2.0.1", "10.2.0.2"]).await;

    create(&f, &headless("many", json!({}), false)).await;
    let ips: Vec<String> = (1..=5).map(|i| format!("10.3.0.{i}")).collect();
    let eps: Vec<(&str, bool, Option<&str>)> = ips.iter().map(|ip| (ip.as_str(), true, None)).collect();
    create_slice(&f, "many", &eps).await;
    wait_record(&f.r53, &f.zone, &f.record("many"), RecordType::A, &["10.3.0.1", "10.3.0.2", "10.3.0.3"]).await;
    wait_event(&f.client, &f.ns, "many", "TooManyEndpoints", "5 endpoint addresses").await;

    f.op.wait_more_syncs(2).await;
    let names: Vec<String> = live_records(&f.r53, &f.zone).await.iter().map(|r| r.name.to_string()).collect();
    assert!(names.iter().all(|n| !n.starts_with("early-")), "no pod names without the annotation: {names:?}");
    assert_eq!(names.len(), 4, "two sets and their TXTs: {names:?}");
}

/// Without `--publish-headless` (the default) nothing changes from before
/// issue 31: a headless Service with ready endpoints publishes nothing and
/// gets a `DnsRecordSkipped` Normal Event; the operator runs with the
/// chart's default RBAC, which has no `endpointslices` rule (a list or
/// watch of them would be refused and it would never be ready).
#[tokio::test]
async fn without_the_flag_a_headless_service_is_skipped() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (zone, domain) = create_zone(&r53, "headless-off").await;
    let ns = env.namespace("headless-off").await.expect("namespace");
    let kubeconfig = chart_kubeconfig(&env).await;
    let mut args = zone_args(&zone, &domain);
    args.push(format!("--watch-namespace={ns}"));
    let mut op = Operator::start_with(&kubeconfig, &proxy.endpoint, &args, &[]);
    op.wait_ready().await;
    let f = Fixture { client, proxy, r53, zone, domain, ns, op };

    create(&f, &headless("db", json!({"flotilla.dev/pod-records": "true"}), false)).await;
    create_slice(&f, "db", &[("10.4.0.1", true, Some("db-0")), ("10.4.0.2", true, Some("db-1"))]).await;
    let plain = f.service("plain").await;
    wait_record(&f.r53, &f.zone, &f.record("plain"), RecordType::A, &[&plain]).await;
    wait_event(&f.client, &f.ns, "db", "DnsRecordSkipped", "--publish-headless is off").await;
    f.op.wait_more_syncs(2).await;
    let names: Vec<String> = live_records(&f.r53, &f.zone).await.iter().map(|r| r.name.to_string()).collect();
    assert_eq!(names.len(), 2, "plain's A and TXT only: {names:?}");
    assert!(!f.op.logs().to_lowercase().contains("forbidden"), "refused something:\n{}", f.op.logs());
}
