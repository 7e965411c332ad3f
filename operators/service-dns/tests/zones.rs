//! Several hosted zones (`--hosted-zone-id` repeated): a public and a
//! private zone of one domain (split horizon) and a zone of another
//! domain, on moto behind the Route53-faithful proxy. Each name goes to its
//! own zones, `flotilla.dev/zones` narrows a Service's, and a zone the
//! operator is denied (an IAM policy that grants only some zones) holds no
//! other zone's changes back.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;

use common::*;
use flotilla_testenv::wait_for;
use kube::Api;
use kube::api::{Patch, PatchParams};
use service_dns::model::RecordType;

/// The names with an A record in `zone`.
async fn a_names(r53: &aws_sdk_route53::Client, zone: &str) -> BTreeSet<String> {
    records(r53, zone).await.into_iter().filter(|r| r.rtype == RecordType::A).map(|r| r.name.to_string()).collect()
}

async fn wait_names(r53: &aws_sdk_route53::Client, zone: &str, want: &[String], op: &Operator) {
    let want: BTreeSet<String> = want.iter().cloned().collect();
    let r = wait_for(&format!("zone {zone} to hold exactly {want:?}"), T, || async {
        Ok::<_, String>((a_names(r53, zone).await == want).then_some(()))
    })
    .await;
    if let Err(e) = r {
        panic!("{e}: it holds {:?}\nlogs:\n{}", a_names(r53, zone).await, op.logs());
    }
}

#[tokio::test]
async fn each_name_goes_to_its_own_zones_and_a_denied_zone_holds_no_other_back() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (public, domain) = create_zone(&r53, "split").await;
    // The private side of the split horizon: another zone of the same name.
    let private = create_zone_named(&r53, &domain).await;
    let (other, other_domain) = create_zone(&r53, "other").await;
    let ns = env.namespace("zones").await.expect("namespace");
    grant(&client, &ns, Some(&format!("*.{domain},*.{other_domain}"))).await;
    let mut op = Operator::start(
        &env,
        &proxy.endpoint,
        &[
            format!("--hosted-zone-id={public},{private}"),
            format!("--hosted-zone-id={other}"),
            format!("--watch-namespace={ns}"),
            "--interval=2s".into(),
        ],
    );
    op.wait_ready().await;

    // web: the template's name, in each zone's domain. api: a name of each
    // domain. internal: the private zone only.
    create_service(&client, &ns, &service("web", "ClusterIP", &[])).await;
    let api_hosts = format!("api.{domain},api.{other_domain}");
    create_service(&client, &ns, &service("api", "ClusterIP", &[("flotilla.dev/hostname", &api_hosts)])).await;
    let internal_host = format!("internal.{domain}");
    let internal = [("flotilla.dev/hostname", internal_host.as_str()), ("flotilla.dev/zones", private.as_str())];
    create_service(&client, &ns, &service("internal", "ClusterIP", &internal)).await;
    let (web, api) = (format!("kube-web.{domain}"), format!("api.{domain}"));
    wait_names(&r53, &public, &[web.clone(), api.clone()], &op).await;
    wait_names(&r53, &private, &[web.clone(), api.clone(), internal_host.clone()], &op).await;
    wait_names(&r53, &other, &[format!("kube-web.{other_domain}"), format!("api.{other_domain}")], &op).await;
    // The Events say which zone, once there are several.
    let note = wait_event(&client, &ns, "internal", "DnsRecordCreated", &format!("in zone {private}")).await;
    assert!(note.contains(&internal_host), "{note}");

    // The other domain's zone is denied from now on: its sync fails and
    // backs off; the split horizon's zones go on at their own pace.
    proxy.faults().deny_zone(&other, true);
    let more = format!("api.{domain},api2.{domain},api.{other_domain},api2.{other_domain}");
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), &ns);
    let patch = serde_json::json!({"metadata": {"annotations": {"flotilla.dev/hostname": more}}});
    services.patch("api", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let api2 = format!("api2.{domain}");
    wait_names(&r53, &public, &[web.clone(), api.clone(), api2.clone()], &op).await;
    wait_names(&r53, &private, &[web.clone(), api.clone(), api2.clone(), internal_host.clone()], &op).await;
    wait_for("the denied zone's failure logged", T, || async {
        Ok::<_, String>(op.logs().contains("AccessDenied").then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", op.logs()));
    assert!(!a_names(&r53, &other).await.contains(&format!("api2.{other_domain}")), "denied: nothing written");

    // Allowed again: the zone catches up on its own.
    proxy.faults().deny_zone(&other, false);
    let all_other = [format!("kube-web.{other_domain}"), format!("api.{other_domain}"), format!("api2.{other_domain}")];
    wait_names(&r53, &other, &all_other, &op).await;
    // One managed-records gauge for the three zones: 3 + 4 + 3 A records.
    let counted = wait_for("flotilla_service_dns_managed_records = 10", T, || async {
        Ok::<_, String>((op.metric("flotilla_service_dns_managed_records").await == Some(10.0)).then_some(()))
    })
    .await;
    if let Err(e) = counted {
        panic!("{e}\n{}", op.scrape().await);
    }

    // api chooses the private zone alone: its names go from the others.
    let patch = serde_json::json!({"metadata": {"annotations": {"flotilla.dev/zones": private}}});
    services.patch("api", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    wait_names(&r53, &public, std::slice::from_ref(&web), &op).await;
    wait_names(&r53, &other, &[format!("kube-web.{other_domain}")], &op).await;
    wait_names(&r53, &private, &[web.clone(), api.clone(), api2.clone(), internal_host.clone()], &op).await;
    let logs = op.logs();
    assert!(!logs.contains("panicked"), "{logs}");
}
