//! Routing policies for active/active across clusters: two operators with
//! two owner ids (two clusters) publish one name on one zone, each its own
//! weighted set with its own ownership TXT, on moto behind the
//! Route53-faithful proxy (which refuses what Route53 refuses: a set beside
//! a record of no policy, two policies at a name). Neither ever changes
//! the other's set; a tenant of one cluster cannot add its own set to a
//! name another namespace's Service publishes.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;

use common::*;
use flotilla_testenv::wait_for;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use service_dns::model::{RecordType, RoutingPolicy};

/// The sets at `name`: (type, set identifier, weight) of each.
async fn sets(r53: &aws_sdk_route53::Client, zone: &str, name: &str) -> BTreeSet<(RecordType, String, u8)> {
    let owner_txt = format!("_flotilla-owner.{name}");
    records(r53, zone)
        .await
        .into_iter()
        .filter(|r| *r.name == *name || *r.name == owner_txt)
        .filter_map(|r| {
            let ro = r.routing()?;
            let RoutingPolicy::Weighted(w) = ro.policy else { return None };
            Some((r.rtype, ro.set_id.to_string(), w))
        })
        .collect()
}

async fn wait_sets(
    r53: &aws_sdk_route53::Client,
    zone: &str,
    name: &str,
    want: &[(RecordType, &str, u8)],
    ops: &[&Operator],
) {
    let want: BTreeSet<(RecordType, String, u8)> = want.iter().map(|(t, s, w)| (*t, s.to_string(), *w)).collect();
    let r = wait_for(&format!("{name} to hold exactly the sets {want:?}"), T, || async {
        Ok::<_, String>((sets(r53, zone, name).await == want).then_some(()))
    })
    .await;
    if let Err(e) = r {
        let logs: Vec<String> = ops.iter().map(|o| o.logs()).collect();
        panic!("{e}: it holds {:?}\nlogs:\n{}", sets(r53, zone, name).await, logs.join("\n-----\n"));
    }
}

#[tokio::test]
async fn two_clusters_share_a_name_each_with_its_own_weighted_set() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (zone, domain) = create_zone(&r53, "sets").await;
    // Two "clusters": two namespaces, each watched by its own operator with its own owner id.
    let (ns_a, ns_b) = (env.namespace("sets-a").await.unwrap(), env.namespace("sets-b").await.unwrap());
    let www = format!("www.{domain}");
    for ns in [&ns_a, &ns_b] {
        grant(&client, ns, Some(&www)).await;
    }
    // Each "cluster" publishes the Services labelled with its name.
    let start = |cluster: &str| {
        let mut args = zone_args(&zone, &domain);
        args.extend([format!("--service-selector=cluster={cluster}"), format!("--owner-id=cluster-{cluster}")]);
        Operator::start(&env, &proxy.endpoint, &args)
    };
    let (mut op_a, mut op_b) = (start("a"), start("b"));
    op_a.wait_ready().await;
    op_b.wait_ready().await;

    let web = |cluster: &str, set: &str, weight: &str| {
        let mut s = service(
            "web",
            "ClusterIP",
            &[
                ("flotilla.dev/hostname", www.as_str()),
                ("flotilla.dev/set-identifier", set),
                ("flotilla.dev/weight", weight),
            ],
        );
        s.metadata.labels = Some([("cluster".to_string(), cluster.to_string())].into());
        s
    };
    create_service(&client, &ns_a, &web("a", "a", "70")).await;
    create_service(&client, &ns_b, &web("b", "b", "30")).await;
    use RecordType::{A, Txt};
    wait_sets(&r53, &zone, &www, &[(A, "a", 70), (Txt, "a", 70), (A, "b", 30), (Txt, "b", 30)], &[&op_a, &op_b]).await;

    // B's weight changes: its set (and its TXT) follow; A's is untouched.
    let b_services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), &ns_b);
    let patch = serde_json::json!({"metadata": {"annotations": {"flotilla.dev/weight": "0"}}});
    b_services.patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    wait_sets(&r53, &zone, &www, &[(A, "a", 70), (Txt, "a", 70), (A, "b", 0), (Txt, "b", 0)], &[&op_a, &op_b]).await;

    // A tenant of cluster B picks its own identifier for the same name: it
    // does not get a share of the traffic, and is told why.
    let thief_ns = env.namespace("sets-evil").await.unwrap();
    grant(&client, &thief_ns, Some(&www)).await;
    create_service(&client, &thief_ns, &web("b", "evil", "255")).await;
    let said = wait_event(&client, &thief_ns, "web", "DnsRecordConflict", &www).await;
    assert!(said.contains("already published by another Service"), "{said}");
    op_b.wait_more_syncs(2).await;
    wait_sets(&r53, &zone, &www, &[(A, "a", 70), (Txt, "a", 70), (A, "b", 0), (Txt, "b", 0)], &[&op_a, &op_b]).await;

    // B moves its name to another set: one batch (the old set and its TXT
    // deleted, the new ones created), A's untouched.
    let patch = serde_json::json!({"metadata": {"annotations": {"flotilla.dev/set-identifier": "b2"}}});
    b_services.patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    wait_sets(&r53, &zone, &www, &[(A, "a", 70), (Txt, "a", 70), (A, "b2", 0), (Txt, "b2", 0)], &[&op_a, &op_b]).await;

    // A's Service goes: A's record set goes (its TXT stays, marked freed,
    // for --handover-grace: the name is held for A's namespace), B's stays.
    let a_services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), &ns_a);
    a_services.delete("web", &DeleteParams::default()).await.unwrap();
    wait_sets(&r53, &zone, &www, &[(Txt, "a", 70), (A, "b2", 0), (Txt, "b2", 0)], &[&op_a, &op_b]).await;
    let held = records(&r53, &zone).await.into_iter().find(|r| r.rtype == Txt && r.set_id() == Some("a"));
    assert!(held.as_ref().is_some_and(is_held), "A's TXT marked freed: {held:?}");
    for op in [&op_a, &op_b] {
        let logs = op.logs();
        assert!(!logs.contains("panicked"), "{logs}");
    }
}
