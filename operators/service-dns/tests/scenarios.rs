//! service-dns end to end: the binary as a process, the real control plane,
//! a real moto server behind the Route53-faithful proxy (the operator talks
//! to the proxy; the tests read and write moto directly, as a user editing
//! the zone by hand would). Every test asserts on the zone's final contents.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use aws_sdk_route53::types::RrType;
use common::*;
use flotilla_testenv::wait_for;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use service_dns::model::RecordType;

/// The seed: namespace `test`, NodePort Service `hello-world` on port 8000 →
/// `kube-hello-world.<domain>` A ClusterIP, Events on the Service, metrics;
/// delete → gone.
#[tokio::test]
async fn seed_scenario_create_and_delete() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (zone, domain) = create_zone(&r53, "seed").await;
    ensure_namespace(&client, "test").await;
    let mut op = Operator::start(
        &env,
        &proxy.endpoint,
        &[zone_args(&zone, &domain), vec!["--watch-namespace=test".into()]].concat(),
    );
    op.wait_ready().await;

    let svc = create_service(&client, "test", &service("hello-world", "NodePort", &[])).await;
    let ip = cluster_ip(&svc);
    let name = format!("kube-hello-world.{domain}");
    let a = wait_record(&r53, &zone, &name, RecordType::A, &[&ip]).await;
    assert_eq!(a.ttl, 300);
    // No --owner-id: derived from the cluster (kube-system's UID, and the
    // watched namespace), and logged.
    let uid =
        Api::<Namespace>::all(client.clone()).get("kube-system").await.expect("kube-system").metadata.uid.expect("uid");
    let owner = service_dns::owner::derive(&uid, Some("test"), None);
    let uid_hex: String = uid.chars().filter(char::is_ascii_hexdigit).take(8).collect();
    assert!(owner.starts_with(&format!("{uid_hex}-")) && owner.len() == 15, "{owner}");
    let txt = find(&r53, &zone, &format!("_flotilla-owner.{name}"), RecordType::Txt).await.expect("ownership TXT");
    assert_eq!(values(&txt), vec![format!("\"heritage=flotilla,owner={owner},resource=service/test/hello-world\"")]);
    assert!(op.logs().contains(&owner), "the derived owner id is logged\n{}", op.logs());
    let note =
        wait_event(&client, "test", "hello-world", "DnsRecordCreated", &format!("created dns {name} → {ip}")).await;
    assert!(note.contains("INSYNC"), "{note}");

    // Metrics: one managed record, successful Route53 calls, shared reconcile metrics.
    wait_for("managed_records = 1", T, || async {
        Ok::<_, String>((op.metric("flotilla_service_dns_managed_records").await == Some(1.0)).then_some(()))
    })
    .await
    .unwrap();
    let text = op.scrape().await;
    assert!(
        metric_value(
            &text,
            "flotilla_service_dns_route53_requests_total{operation=\"ChangeResourceRecordSets\",result=\"success\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
    assert!(
        metric_value(&text, "flotilla_service_dns_route53_changes_total{action=\"create\"}").unwrap_or(0.0) >= 2.0,
        "{text}"
    );
    assert!(
        metric_value(&text, "controller_runtime_reconcile_total{controller=\"service-dns\",result=\"success\"}")
            .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
    assert!(
        metric_value(&text, "flotilla_service_dns_last_successful_sync_timestamp_seconds").unwrap_or(0.0) > 1.0e9,
        "{text}"
    );

    // An unchanged zone costs no write: a few resyncs later, no new change call.
    let writes = |t: &str| {
        metric_value(
            t,
            "flotilla_service_dns_route53_requests_total{operation=\"ChangeResourceRecordSets\",result=\"success\"}",
        )
        .unwrap_or(0.0)
    };
    let before = writes(&op.scrape().await);
    op.wait_more_syncs(2).await;
    assert_eq!(writes(&op.scrape().await), before, "an unchanged zone must cost zero write calls");

    Api::<Service>::namespaced(client.clone(), "test")
        .delete("hello-world", &DeleteParams::default())
        .await
        .expect("delete");
    wait_gone(&r53, &zone, &name).await;
    wait_event(&client, "test", "hello-world", "DnsRecordDeleted", &format!("deleted dns {name} → {ip}")).await;
    // What is left: the name's TXT, holding it for namespace test for
    // --handover-grace (5m).
    let left = user_records(&r53, &zone).await;
    assert!(left.len() == 1 && is_held(&left[0]) && *left[0].name == format!("_flotilla-owner.{name}"), "{left:?}");
    assert_eq!(op.stop().await.code(), Some(0), "SIGTERM: clean exit\n{}", op.logs());
}

/// A Service deleted while the operator is down is cleaned up after restart.
#[tokio::test]
async fn service_deleted_while_stopped_is_removed_after_restart() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (zone, domain) = create_zone(&r53, "restart").await;
    let ns = env.namespace("restart").await.expect("namespace");
    let args = [zone_args(&zone, &domain), vec![format!("--watch-namespace={ns}")]].concat();
    let mut op = Operator::start(&env, &proxy.endpoint, &args);
    let keep = create_service(&client, &ns, &service("keep", "ClusterIP", &[])).await;
    let gone = create_service(&client, &ns, &service("gone", "ClusterIP", &[])).await;
    wait_record(&r53, &zone, &format!("kube-keep.{domain}"), RecordType::A, &[&cluster_ip(&keep)]).await;
    wait_record(&r53, &zone, &format!("kube-gone.{domain}"), RecordType::A, &[&cluster_ip(&gone)]).await;
    assert_eq!(op.stop().await.code(), Some(0));

    Api::<Service>::namespaced(client.clone(), &ns).delete("gone", &DeleteParams::default()).await.expect("delete");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(find(&r53, &zone, &format!("kube-gone.{domain}"), RecordType::A).await.is_some(), "nobody deleted it yet");

    let _op = Operator::start(&env, &proxy.endpoint, &args);
    wait_gone(&r53, &zone, &format!("kube-gone.{domain}")).await;
    let left = live_records(&r53, &zone).await;
    assert_eq!(left.len(), 2, "only keep's A and TXT remain: {left:?}");
    assert!(left.iter().any(|r| *r.name == format!("kube-keep.{domain}") && values(r) == vec![cluster_ip(&keep)]));
}

/// Under leader election a standby keeps its Service cache (it is ready once
/// synced) but writes nothing; it publishes once the lease is its own.
#[tokio::test]
async fn a_standby_keeps_its_cache_and_writes_nothing_until_it_leads() {
    use k8s_openapi::api::coordination::v1::Lease;
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (zone, domain) = create_zone(&r53, "standby").await;
    let ns = env.namespace("standby").await.expect("namespace");
    // Someone else leads, for an hour.
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "service-dns-standby"},
        "spec": {
            "holderIdentity": "someone-else",
            "leaseDurationSeconds": 3600,
            "renewTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        },
    }))
    .unwrap();
    leases.create(&kube::api::PostParams::default(), &lease).await.unwrap();
    let le = [
        "--leader-elect".to_string(),
        format!("--leader-election-namespace={ns}"),
        "--leader-election-id=service-dns-standby".to_string(),
    ];
    let args = [zone_args(&zone, &domain), vec![format!("--watch-namespace={ns}")], le.to_vec()].concat();
    let mut op = Operator::start(&env, &proxy.endpoint, &args);
    let svc = create_service(&client, &ns, &service("standby", "ClusterIP", &[])).await;
    op.wait_ready().await;
    // Several resync intervals (2 s) later: nothing written, no sync run.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(op.logs().contains("standing by"), "{}", op.logs());
    assert_eq!(user_records(&r53, &zone).await, vec![], "a standby wrote to the zone");
    // Its sync metrics come with its first sync: none while standing by.
    for result in ["success", "error"] {
        let series = format!("controller_runtime_reconcile_total{{controller=\"service-dns\",result=\"{result}\"}}");
        assert_eq!(op.metric(&series).await, None, "a standby synced ({result})");
    }

    // Released: the standby leads and publishes from the cache it kept.
    let release = serde_json::json!({"spec": {"holderIdentity": null}});
    leases.patch("service-dns-standby", &PatchParams::default(), &Patch::Merge(&release)).await.unwrap();
    wait_record(&r53, &zone, &format!("kube-standby.{domain}"), RecordType::A, &[&cluster_ip(&svc)]).await;
}

/// A record we do not own is never changed; the Service gets a conflict Event
/// and the metric counts it; other Services are published.
#[tokio::test]
async fn unowned_record_is_untouched_and_reported() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (zone, domain) = create_zone(&r53, "unowned").await;
    let ns = env.namespace("unowned").await.expect("namespace");
    let taken = format!("kube-taken.{domain}");
    put_records(&r53, &zone, &[(taken.clone(), RrType::A, vec!["192.0.2.1".into()])]).await;
    let before = user_records(&r53, &zone).await;

    let op = Operator::start(
        &env,
        &proxy.endpoint,
        &[zone_args(&zone, &domain), vec![format!("--watch-namespace={ns}")]].concat(),
    );
    create_service(&client, &ns, &service("taken", "ClusterIP", &[])).await;
    let free = create_service(&client, &ns, &service("free", "ClusterIP", &[])).await;
    wait_record(&r53, &zone, &format!("kube-free.{domain}"), RecordType::A, &[&cluster_ip(&free)]).await;
    let note = wait_event(&client, &ns, "taken", "DnsRecordConflict", &taken).await;
    assert!(note.contains("does not own"), "{note}");
    wait_for("the conflict metric", T, || async {
        Ok::<_, String>((op.metric("flotilla_service_dns_conflicts_total").await >= Some(1.0)).then_some(()))
    })
    .await
    .unwrap();
    // Several syncs later, still untouched and no TXT of ours beside it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = user_records(&r53, &zone).await;
    for r in &before {
        assert!(after.contains(r), "{r:?} was changed: {after:?}");
    }
    assert!(find(&r53, &zone, &format!("_flotilla-owner.{taken}"), RecordType::Txt).await.is_none());
    // Deleting the Service does not delete the record it never owned.
    Api::<Service>::namespaced(client.clone(), &ns).delete("taken", &DeleteParams::default()).await.expect("delete");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(find(&r53, &zone, &taken, RecordType::A).await.map(|r| values(&r)), Some(vec!["192.0.2.1".to_string()]));
}

/// The same name from two namespaces: the older Service keeps it, the other
/// gets a conflict (which does not name the holder); when the holder goes,
/// the other takes over — at once with `--handover-grace=0s` (the default
/// grace is `attacks.rs`'s).
#[tokio::test]
async fn same_name_in_two_namespaces() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (zone, domain) = create_zone(&r53, "twons").await;
    let (ns1, ns2) = (env.namespace("twons-a").await.expect("ns"), env.namespace("twons-b").await.expect("ns"));
    let label = format!("t{:08x}", rand::random::<u32>());
    let labelled = |mut s: Service| {
        s.metadata.labels = Some([("dns-test".to_string(), label.clone())].into());
        s
    };
    let first = create_service(&client, &ns1, &labelled(service("api", "ClusterIP", &[]))).await;
    // creationTimestamp has 1 s resolution: make the order unambiguous.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = create_service(&client, &ns2, &labelled(service("api", "ClusterIP", &[]))).await;
    let _op = Operator::start(
        &env,
        &proxy.endpoint,
        &[
            zone_args(&zone, &domain),
            vec![format!("--service-selector=dns-test={label}"), "--handover-grace=0s".into()],
        ]
        .concat(),
    );
    let name = format!("kube-api.{domain}");
    wait_record(&r53, &zone, &name, RecordType::A, &[&cluster_ip(&first)]).await;
    let note = wait_event(&client, &ns2, "api", "DnsRecordConflict", &name).await;
    assert!(note.contains("already published by another Service") && !note.contains(&ns1), "{note}");
    let txt = find(&r53, &zone, &format!("_flotilla-owner.{name}"), RecordType::Txt).await.expect("TXT");
    assert!(txt.values[0].contains(&format!("resource=service/{ns1}/api")), "{txt:?}");

    Api::<Service>::namespaced(client.clone(), &ns1).delete("api", &DeleteParams::default()).await.expect("delete");
    wait_record(&r53, &zone, &name, RecordType::A, &[&cluster_ip(&second)]).await;
    let txt = find(&r53, &zone, &format!("_flotilla-owner.{name}"), RecordType::Txt).await.expect("TXT");
    assert!(txt.values[0].contains(&format!("resource=service/{ns2}/api")), "{txt:?}");
    assert_eq!(user_records(&r53, &zone).await.len(), 2);
}

/// A continuous stream of new Services (events closer together than
/// `--debounce`, so the stream never pauses) does not hold records back
/// past `--max-batch-delay`: the first one is written while the stream is
/// still going, and all of them once it ends.
#[tokio::test]
async fn a_continuous_stream_is_written_within_max_batch_delay() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (zone, domain) = create_zone(&r53, "stream").await;
    let ns = env.namespace("stream").await.expect("ns");
    let mut op = Operator::start(
        &env,
        &proxy.endpoint,
        &[
            zone_args(&zone, &domain),
            vec![format!("--watch-namespace={ns}"), "--debounce=1s".into(), "--max-batch-delay=3s".into()],
        ]
        .concat(),
    );
    op.wait_ready().await;

    // One Service every 250 ms for 12 s.
    const COUNT: usize = 48;
    let created = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stream = tokio::spawn({
        let (client, ns, created) = (client.clone(), ns.clone(), created.clone());
        async move {
            let mut ips = Vec::new();
            for i in 0..COUNT {
                let svc = create_service(&client, &ns, &service(&format!("s{i:02}"), "ClusterIP", &[])).await;
                ips.push(cluster_ip(&svc));
                created.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            ips
        }
    });
    // s00 goes at once (the leading edge); s01 onwards are held for a
    // fuller request, but none longer than --max-batch-delay (3 s) and a
    // sync (1 s), while the stream goes on for 12 s.
    let held = format!("kube-s04.{domain}");
    wait_for("s04 created", T, || async {
        Ok::<_, String>((created.load(std::sync::atomic::Ordering::SeqCst) > 4).then_some(()))
    })
    .await
    .unwrap();
    let s04_created = std::time::Instant::now();
    wait_for("s04's record, while the stream goes on", T, || async {
        Ok::<_, String>(find(&r53, &zone, &held, RecordType::A).await.map(|_| ()))
    })
    .await
    .unwrap();
    let waited = s04_created.elapsed();
    let so_far = created.load(std::sync::atomic::Ordering::SeqCst);
    assert!(so_far < COUNT, "s04's record appeared only after the whole stream ({so_far} Services created)");
    assert!(waited < Duration::from_secs(3 + 2), "s04 waited {waited:?}: over --max-batch-delay and a sync");
    let ips = stream.await.expect("the stream");
    for (i, ip) in ips.iter().enumerate() {
        wait_record(&r53, &zone, &format!("kube-s{i:02}.{domain}"), RecordType::A, &[ip]).await;
    }
    assert_eq!(op.stop().await.code(), Some(0), "{}", op.logs());
}

/// The leading edge is for an idle loop only. A change on a loop that has
/// not synced for `--debounce` goes at once; a change that comes sooner
/// after a sync is gathered with what follows it — else a burst whose first
/// creates trickle in (a loaded API server) costs a request per create.
#[tokio::test]
async fn a_change_soon_after_a_sync_is_gathered_not_sent_alone() {
    let mut f = Fixture::start("edge", &["--interval=10m", "--debounce=4s"]).await;
    let syncs = "controller_runtime_reconcile_total{controller=\"service-dns\",result=\"success\"}";
    // Idle for longer than --debounce: a goes at once, alone.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    f.proxy.faults().reset_stats();
    let before = f.op.metric(syncs).await.unwrap_or(0.0);
    let created = std::time::Instant::now();
    let a_ip = f.service("a").await;
    wait_record(&f.r53, &f.zone, &f.record("a"), RecordType::A, &[&a_ip]).await;
    let a_took = created.elapsed();
    assert!(a_took < Duration::from_secs(4), "a, on an idle loop, waited {a_took:?}: it was not sent at once");
    // The sync that wrote a has ended (its INSYNC wait included); b and c
    // come well within --debounce of it.
    wait_for("a's sync to end", T, || async {
        Ok::<_, String>((f.op.metric(syncs).await.unwrap_or(0.0) > before).then_some(()))
    })
    .await
    .unwrap();
    let synced = std::time::Instant::now();
    let b_ip = f.service("b").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c_ip = f.service("c").await;
    let c_after_sync = synced.elapsed();
    assert!(c_after_sync < Duration::from_secs(3), "c was created {c_after_sync:?} after the sync: too late to test");
    wait_record(&f.r53, &f.zone, &f.record("b"), RecordType::A, &[&b_ip]).await;
    wait_record(&f.r53, &f.zone, &f.record("c"), RecordType::A, &[&c_ip]).await;

    let stats = f.proxy.faults().stats();
    let requests_with = |record: &str| -> Vec<usize> {
        let owns = |n: &String| {
            let n = n.trim_end_matches('.');
            n == record || n.ends_with(&format!(".{record}"))
        };
        stats.batches.iter().enumerate().filter(|(_, names)| names.iter().any(owns)).map(|(i, _)| i).collect()
    };
    let (a, b, c) = (requests_with(&f.record("a")), requests_with(&f.record("b")), requests_with(&f.record("c")));
    assert_eq!(a.len(), 1, "a: {a:?} of {:?}", stats.batches);
    assert_eq!(b.len(), 1, "b: {b:?} of {:?}", stats.batches);
    assert_eq!(
        b, c,
        "b and c, created {c_after_sync:?} after a sync (within --debounce), went in separate requests: {:?}",
        stats.batches
    );
    assert_eq!(stats.change_requests, 2, "{:?}", stats.batches);
    assert_eq!(f.op.stop().await.code(), Some(0), "{}", f.op.logs());
}

/// flotilla.dev/hostname (several names), /ttl, /dns=false, /target=load-balancer.
#[tokio::test]
async fn annotations() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (zone, domain) = create_zone(&r53, "annot").await;
    let ns = env.namespace("annot").await.expect("namespace");
    grant(&client, &ns, Some(&format!("www.{domain}, api.{domain}"))).await;
    let _op = Operator::start(
        &env,
        &proxy.endpoint,
        &[zone_args(&zone, &domain), vec![format!("--watch-namespace={ns}")]].concat(),
    );
    let api: Api<Service> = Api::namespaced(client.clone(), &ns);

    let hosts = format!("www.{domain}, API.{domain}.");
    let multi = create_service(
        &client,
        &ns,
        &service("multi", "ClusterIP", &[("flotilla.dev/hostname", &hosts), ("flotilla.dev/ttl", "60")]),
    )
    .await;
    let ip = cluster_ip(&multi);
    for n in [format!("www.{domain}"), format!("api.{domain}")] {
        let r = wait_record(&r53, &zone, &n, RecordType::A, &[&ip]).await;
        assert_eq!(r.ttl, 60);
    }
    create_service(&client, &ns, &service("optout", "ClusterIP", &[("flotilla.dev/dns", "false")])).await;

    // TTL change → update + Event.
    api.patch(
        "multi",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"flotilla.dev/ttl": "120"}}})),
    )
    .await
    .expect("patch");
    wait_for("ttl 120", T, || async {
        Ok::<_, String>(find(&r53, &zone, &format!("www.{domain}"), RecordType::A).await.filter(|r| r.ttl == 120))
    })
    .await
    .unwrap();
    wait_event(&client, &ns, "multi", "DnsRecordUpdated", &format!("updated dns www.{domain}")).await;

    // Load balancer: an IP → A, a hostname → CNAME.
    let lb =
        create_service(&client, &ns, &service("lb", "LoadBalancer", &[("flotilla.dev/target", "load-balancer")])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        find(&r53, &zone, &format!("kube-lb.{domain}"), RecordType::A).await.is_none(),
        "no ingress yet, no record (not the ClusterIP {})",
        cluster_ip(&lb)
    );
    api.patch_status(
        "lb",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}})),
    )
    .await
    .expect("status");
    wait_record(&r53, &zone, &format!("kube-lb.{domain}"), RecordType::A, &["203.0.113.7"]).await;
    api.patch_status(
        "lb",
        &PatchParams::default(),
        &Patch::Merge(
            serde_json::json!({"status": {"loadBalancer": {"ingress": [{"hostname": "abc.elb.amazonaws.com"}]}}}),
        ),
    )
    .await
    .expect("status");
    wait_record(&r53, &zone, &format!("kube-lb.{domain}"), RecordType::Cname, &["abc.elb.amazonaws.com"]).await;
    assert!(find(&r53, &zone, &format!("kube-lb.{domain}"), RecordType::A).await.is_none(), "A replaced by the CNAME");

    // Opting out later removes what was published.
    api.patch(
        "multi",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"flotilla.dev/dns": "false"}}})),
    )
    .await
    .expect("patch");
    wait_gone(&r53, &zone, &format!("www.{domain}")).await;
    wait_gone(&r53, &zone, &format!("api.{domain}")).await;
    let left = live_records(&r53, &zone).await;
    let names: Vec<&str> = left.iter().map(|r| &*r.name).collect();
    assert_eq!(left.len(), 2, "only lb's CNAME and TXT: {names:?}");
    assert!(!names.iter().any(|n| n.contains("optout")));
}

/// AWS load balancers get ALIAS records (A, and AAAA when dualstack) to
/// their region's canonical hosted zone — checked by the Route53-faithful
/// proxy, which refuses an ALIAS naming another zone, as Route53 does — and
/// the zone apex may then be published beside its SOA and NS.
/// `flotilla.dev/alias: "false"` switches a name to a CNAME and back in one
/// batch each; a CNAME wish for the apex is refused and said.
#[tokio::test]
async fn aws_load_balancers_get_alias_records_and_the_apex() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (zone, domain) = create_zone(&r53, "alias").await;
    let ns = env.namespace("alias").await.expect("namespace");
    grant(&client, &ns, Some(&domain)).await;
    let apex_before: Vec<_> = records(&r53, &zone).await;
    assert!(apex_before.iter().any(|r| r.foreign() == Some("SOA")), "{apex_before:?}");
    let _op = Operator::start(
        &env,
        &proxy.endpoint,
        &[zone_args(&zone, &domain), vec![format!("--watch-namespace={ns}")]].concat(),
    );
    let api: Api<Service> = Api::namespaced(client.clone(), &ns);
    let ingress = |hostname: &str| {
        Patch::Merge(serde_json::json!({"status": {"loadBalancer": {"ingress": [{"hostname": hostname}]}}}))
    };
    let annotate =
        |key: &str, value: Option<&str>| Patch::Merge(serde_json::json!({"metadata": {"annotations": {key: value}}}));
    let alias_at = |name: String, rtype: RecordType, zone_id: &'static str, target: &'static str| {
        let (r53, zone) = (&r53, &zone);
        async move {
            wait_for(&format!("{rtype} {name} ALIAS {target} in {zone_id}"), T, || async {
                let at: Vec<_> = records(r53, zone).await.into_iter().filter(|r| *r.name == name).collect();
                let found = at.iter().find(|r| {
                    r.rtype == rtype
                        && r.alias_target().is_some_and(|a| {
                            &*a.zone_id == zone_id && &*a.dns_name == target && a.evaluate_target_health
                        })
                });
                match found {
                    Some(r) => Ok(Some(r.clone())),
                    None => Err(format!("at {name}: {at:?}")),
                }
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"))
        }
    };

    // The apex, a dualstack Network Load Balancer of us-east-1.
    const NLB: &str = "k8s-web-0123456789.elb.us-east-1.amazonaws.com";
    let web = [
        ("flotilla.dev/target", "load-balancer"),
        ("flotilla.dev/hostname", domain.as_str()),
        ("service.beta.kubernetes.io/aws-load-balancer-ip-address-type", "dualstack"),
    ];
    create_service(&client, &ns, &service("web", "LoadBalancer", &web)).await;
    api.patch_status("web", &PatchParams::default(), &ingress(NLB)).await.expect("status");
    alias_at(domain.clone(), RecordType::A, "Z26RNL4JYFTOTI", NLB).await;
    alias_at(domain.clone(), RecordType::Aaaa, "Z26RNL4JYFTOTI", NLB).await;
    assert!(find(&r53, &zone, &format!("_flotilla-owner.{domain}"), RecordType::Txt).await.is_some());

    // An Application Load Balancer of eu-west-1 at a templated name: ALIAS,
    // then a CNAME when the Service opts out, then the ALIAS again.
    const ALB: &str = "k8s-api-0123456789.eu-west-1.elb.amazonaws.com";
    create_service(&client, &ns, &service("api", "LoadBalancer", &[("flotilla.dev/target", "load-balancer")])).await;
    api.patch_status("api", &PatchParams::default(), &ingress(ALB)).await.expect("status");
    let api_name = format!("kube-api.{domain}");
    alias_at(api_name.clone(), RecordType::A, "Z32O12XQLNTSW2", ALB).await;
    api.patch("api", &PatchParams::default(), &annotate("flotilla.dev/alias", Some("false"))).await.expect("patch");
    wait_record(&r53, &zone, &api_name, RecordType::Cname, &[ALB]).await;
    assert!(find(&r53, &zone, &api_name, RecordType::A).await.is_none(), "the ALIAS replaced by the CNAME");
    api.patch("api", &PatchParams::default(), &annotate("flotilla.dev/alias", None)).await.expect("patch");
    alias_at(api_name.clone(), RecordType::A, "Z32O12XQLNTSW2", ALB).await;
    assert!(find(&r53, &zone, &api_name, RecordType::Cname).await.is_none(), "the CNAME replaced by the ALIAS");

    // A CNAME cannot stand at the apex: refused and said, the ALIAS kept.
    api.patch("web", &PatchParams::default(), &annotate("flotilla.dev/alias", Some("false"))).await.expect("patch");
    let said = wait_event(&client, &ns, "web", "InvalidHostname", "zone apex").await;
    assert!(said.contains("ALIAS"), "{said}");
    assert!(find(&r53, &zone, &domain, RecordType::A).await.is_some_and(|r| r.alias_target().is_some()));

    // Gone with the Service: the ALIASes (the TXT held for the namespace,
    // --handover-grace), never the SOA and NS.
    api.delete("web", &DeleteParams::default()).await.expect("delete");
    let left = wait_for("the apex ALIASes to go", T, || async {
        let left = records(&r53, &zone).await;
        let ours = left.iter().any(|r| {
            (&*r.name == domain.as_str() && r.rtype != RecordType::Other)
                || (*r.name == format!("_flotilla-owner.{domain}") && !is_held(r))
        });
        Ok::<_, String>((!ours).then_some(left))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let zones_own = |rs: &[service_dns::model::RecordSet]| {
        rs.iter().filter(|r| r.rtype == RecordType::Other).cloned().collect::<Vec<_>>()
    };
    assert_eq!(zones_own(&left), zones_own(&apex_before), "the zone's own records untouched");
}

/// Dual-stack Services get A and AAAA from spec.clusterIPs.
#[tokio::test]
async fn dual_stack_gets_a_and_aaaa() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (zone, domain) = create_zone(&r53, "dual").await;
    let ns = env.namespace("dual").await.expect("namespace");
    let _op = Operator::start(
        &env,
        &proxy.endpoint,
        &[zone_args(&zone, &domain), vec![format!("--watch-namespace={ns}")]].concat(),
    );
    let mut s = service("dual", "ClusterIP", &[]);
    if let Some(spec) = s.spec.as_mut() {
        spec.ip_family_policy = Some("RequireDualStack".into());
        spec.ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
    }
    let s = create_service(&client, &ns, &s).await;
    let ips = s.spec.and_then(|s| s.cluster_ips).unwrap_or_default();
    assert_eq!(ips.len(), 2, "{ips:?}");
    let v6: std::net::Ipv6Addr = ips[1].parse().expect("IPv6");
    let name = format!("kube-dual.{domain}");
    wait_record(&r53, &zone, &name, RecordType::A, &[&ips[0]]).await;
    wait_record(&r53, &zone, &name, RecordType::Aaaa, &[&v6.to_string()]).await;
}

/// Invalid annotations: Warning Event, that Service skipped, others go on;
/// a headless Service is skipped with a Normal Event (without
/// `--publish-headless`; with it, `headless.rs`).
#[tokio::test]
async fn invalid_annotations_are_reported_and_skipped() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (zone, domain) = create_zone(&r53, "invalid").await;
    let ns = env.namespace("invalid").await.expect("namespace");
    let op = Operator::start(
        &env,
        &proxy.endpoint,
        &[zone_args(&zone, &domain), vec![format!("--watch-namespace={ns}")]].concat(),
    );
    let long_label = format!("{}.{domain}", "a".repeat(64));
    let long_name = format!("{}{domain}", "abcdefghi.".repeat(25));
    let cases = [
        ("outside", "flotilla.dev/hostname", "x.not-our-zone.org".to_string(), "InvalidHostname"),
        ("longlabel", "flotilla.dev/hostname", long_label, "InvalidHostname"),
        ("longname", "flotilla.dev/hostname", long_name, "InvalidHostname"),
        ("badchars", "flotilla.dev/hostname", format!("under_score.{domain}"), "InvalidHostname"),
        ("badttl", "flotilla.dev/ttl", "soon".to_string(), "InvalidAnnotation"),
        ("badtarget", "flotilla.dev/target", "node".to_string(), "InvalidAnnotation"),
    ];
    for (name, key, value, _) in &cases {
        create_service(&client, &ns, &service(name, "ClusterIP", &[(key, value)])).await;
    }
    let mut headless = service("headless", "ClusterIP", &[]);
    if let Some(spec) = headless.spec.as_mut() {
        spec.cluster_ip = Some("None".into());
    }
    create_service(&client, &ns, &headless).await;
    let good = create_service(&client, &ns, &service("good", "ClusterIP", &[])).await;
    wait_record(&r53, &zone, &format!("kube-good.{domain}"), RecordType::A, &[&cluster_ip(&good)]).await;
    for (name, _, _, reason) in &cases {
        wait_event(&client, &ns, name, reason, "no record published").await;
    }
    wait_event(&client, &ns, "headless", "DnsRecordSkipped", "--publish-headless is off").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let left = user_records(&r53, &zone).await;
    assert_eq!(left.len(), 2, "only good's A and TXT: {left:?}");
    // A published Service whose annotation turns bad keeps its record.
    Api::<Service>::namespaced(client.clone(), &ns)
        .patch(
            "good",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"flotilla.dev/ttl": "-1"}}})),
        )
        .await
        .expect("patch");
    wait_event(&client, &ns, "good", "InvalidAnnotation", "no record published").await;
    op.wait_more_syncs(2).await;
    assert_eq!(user_records(&r53, &zone).await, left, "kept as it was while the annotation is bad");
    // Reported once, not at every resync.
    assert_eq!(
        events(&client, &ns, "outside", "InvalidHostname")
            .await
            .iter()
            .map(|e| e.deprecated_count.unwrap_or(1).max(e.series.as_ref().map(|s| s.count).unwrap_or(1)))
            .sum::<i32>(),
        1
    );
    let mut op = op;
    assert!(op.exited().is_none(), "still running");
}

/// Route53 unreachable: errors counted, no crash; converges when it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route53_down_then_back() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (zone, domain) = create_zone(&r53, "outage").await;
    let ns = env.namespace("outage").await.expect("namespace");
    let mut op = Operator::start(
        &env,
        &proxy.endpoint,
        &[zone_args(&zone, &domain), vec![format!("--watch-namespace={ns}")]].concat(),
    );
    let one = create_service(&client, &ns, &service("one", "ClusterIP", &[])).await;
    wait_record(&r53, &zone, &format!("kube-one.{domain}"), RecordType::A, &[&cluster_ip(&one)]).await;

    proxy.faults().set_down(true);
    let two = create_service(&client, &ns, &service("two", "ClusterIP", &[])).await;
    Api::<Service>::namespaced(client.clone(), &ns).delete("one", &DeleteParams::default()).await.expect("delete");
    wait_for("Route53 errors to be counted", T, || async {
        let text = op.scrape().await;
        let errors = metric_value(&text, "flotilla_service_dns_sync_errors_total").unwrap_or(0.0);
        let reqs = metric_value(
            &text,
            "flotilla_service_dns_route53_requests_total{operation=\"ListResourceRecordSets\",result=\"error\"}",
        )
        .unwrap_or(0.0);
        Ok::<_, String>((errors >= 2.0 && reqs >= 2.0).then_some(()))
    })
    .await
    .unwrap();
    assert!(op.exited().is_none(), "no crash while Route53 is down\n{}", op.logs());
    assert!(find(&r53, &zone, &format!("kube-two.{domain}"), RecordType::A).await.is_none());

    proxy.faults().set_down(false);
    wait_record(&r53, &zone, &format!("kube-two.{domain}"), RecordType::A, &[&cluster_ip(&two)]).await;
    wait_gone(&r53, &zone, &format!("kube-one.{domain}")).await;
    assert_eq!(live_records(&r53, &zone).await.len(), 2);
}

/// --policy upsert-only never deletes; create-only never updates; --dry-run changes nothing.
#[tokio::test]
async fn policies_and_dry_run() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);

    // upsert-only
    let (zone, domain) = create_zone(&r53, "upsert").await;
    let ns = env.namespace("upsert").await.expect("namespace");
    let op = Operator::start(
        &env,
        &proxy.endpoint,
        &[zone_args(&zone, &domain), vec![format!("--watch-namespace={ns}"), "--policy=upsert-only".into()]].concat(),
    );
    let api: Api<Service> = Api::namespaced(client.clone(), &ns);
    let s = create_service(&client, &ns, &service("s", "ClusterIP", &[])).await;
    let name = format!("kube-s.{domain}");
    wait_record(&r53, &zone, &name, RecordType::A, &[&cluster_ip(&s)]).await;
    api.patch(
        "s",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"flotilla.dev/ttl": "77"}}})),
    )
    .await
    .expect("patch");
    wait_for("ttl 77 (update allowed)", T, || async {
        Ok::<_, String>(find(&r53, &zone, &name, RecordType::A).await.filter(|r| r.ttl == 77))
    })
    .await
    .unwrap();
    api.delete("s", &DeleteParams::default()).await.expect("delete");
    op.wait_more_syncs(2).await;
    assert!(find(&r53, &zone, &name, RecordType::A).await.is_some(), "upsert-only never deletes");
    drop(op);

    // create-only
    let (zone, domain) = create_zone(&r53, "createonly").await;
    let ns = env.namespace("createonly").await.expect("namespace");
    let op = Operator::start(
        &env,
        &proxy.endpoint,
        &[zone_args(&zone, &domain), vec![format!("--watch-namespace={ns}"), "--policy=create-only".into()]].concat(),
    );
    let api: Api<Service> = Api::namespaced(client.clone(), &ns);
    let s = create_service(&client, &ns, &service("c", "ClusterIP", &[])).await;
    let name = format!("kube-c.{domain}");
    wait_record(&r53, &zone, &name, RecordType::A, &[&cluster_ip(&s)]).await;
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"flotilla.dev/ttl": "77"}}})),
    )
    .await
    .expect("patch");
    // A sync sees the new TTL before the delete (else both would fall in
    // one debounce and the test could not fail): create-only keeps 300.
    op.wait_more_syncs(2).await;
    assert_eq!(find(&r53, &zone, &name, RecordType::A).await.map(|r| r.ttl), Some(300), "create-only never updates");
    api.delete("c", &DeleteParams::default()).await.expect("delete");
    op.wait_more_syncs(2).await;
    let r = find(&r53, &zone, &name, RecordType::A).await.expect("create-only never deletes");
    assert_eq!(r.ttl, 300, "create-only never updates");
    drop(op);

    // dry run
    let (zone, domain) = create_zone(&r53, "dryrun").await;
    let ns = env.namespace("dryrun").await.expect("namespace");
    let op = Operator::start(
        &env,
        &proxy.endpoint,
        &[zone_args(&zone, &domain), vec![format!("--watch-namespace={ns}"), "--dry-run".into()]].concat(),
    );
    let s = create_service(&client, &ns, &service("d", "ClusterIP", &[])).await;
    let note = wait_event(&client, &ns, "d", "DnsRecordDryRun", "would create").await;
    assert!(note.contains(&cluster_ip(&s)), "{note}");
    op.wait_more_syncs(2).await;
    assert!(user_records(&r53, &zone).await.is_empty(), "dry run changes nothing");
    assert_eq!(
        op.metric(
            "flotilla_service_dns_route53_requests_total{operation=\"ChangeResourceRecordSets\",result=\"success\"}"
        )
        .await
        .unwrap_or(0.0),
        0.0
    );
}

/// A zone with more records than one ListResourceRecordSets page (300): our
/// records beyond the first page are found, kept, and deleted when due.
#[tokio::test]
async fn zone_larger_than_one_page() {
    let env = flotilla_testenv::shared();
    let client = env.client().await;
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let (zone, domain) = create_zone(&r53, "paged").await;
    let ns = env.namespace("paged").await.expect("namespace");
    // 700 records of someone else's, sorting before ours.
    let theirs: Vec<_> =
        (0..700).map(|i| (format!("aaa-{i:04}.{domain}"), RrType::A, vec![format!("192.0.2.{}", i % 250)])).collect();
    put_records(&r53, &zone, &theirs).await;
    // And one of theirs at a name a Service wants, past the first pages.
    put_records(&r53, &zone, &[(format!("kube-zz-taken.{domain}"), RrType::A, vec!["198.51.100.1".into()])]).await;
    assert!(records(&r53, &zone).await.len() > 700);

    let op = Operator::start(
        &env,
        &proxy.endpoint,
        &[zone_args(&zone, &domain), vec![format!("--watch-namespace={ns}")]].concat(),
    );
    let s = create_service(&client, &ns, &service("zz-mine", "ClusterIP", &[])).await;
    create_service(&client, &ns, &service("zz-taken", "ClusterIP", &[])).await;
    let name = format!("kube-zz-mine.{domain}");
    wait_record(&r53, &zone, &name, RecordType::A, &[&cluster_ip(&s)]).await;
    wait_event(&client, &ns, "zz-taken", "DnsRecordConflict", "kube-zz-taken").await;
    // Resyncs see our record on a later page: no rewrite.
    let writes = op
        .metric(
            "flotilla_service_dns_route53_requests_total{operation=\"ChangeResourceRecordSets\",result=\"success\"}",
        )
        .await
        .unwrap_or(0.0);
    op.wait_more_syncs(2).await;
    assert_eq!(
        op.metric(
            "flotilla_service_dns_route53_requests_total{operation=\"ChangeResourceRecordSets\",result=\"success\"}"
        )
        .await
        .unwrap_or(0.0),
        writes
    );
    assert!(
        op.metric(
            "flotilla_service_dns_route53_requests_total{operation=\"ListResourceRecordSets\",result=\"success\"}"
        )
        .await
        .unwrap_or(0.0)
            >= 3.0
    );

    Api::<Service>::namespaced(client.clone(), &ns).delete("zz-mine", &DeleteParams::default()).await.expect("delete");
    wait_gone(&r53, &zone, &name).await;
    let after = live_records(&r53, &zone).await;
    assert_eq!(after.len(), 701, "all of theirs, untouched");
    assert_eq!(
        find(&r53, &zone, &format!("kube-zz-taken.{domain}"), RecordType::A).await.map(|r| values(&r)),
        Some(vec!["198.51.100.1".to_string()])
    );
}

/// Bad configuration: one line naming the flag, exit 2, before the cluster is touched.
#[tokio::test]
async fn bad_configuration_exits_2() {
    let env = flotilla_testenv::shared();
    let moto = moto();
    let proxy = faithful(&moto);
    let r53 = route53(&moto.endpoint);
    let run = |args: Vec<String>| {
        let out = std::process::Command::new(OPERATOR.binary())
            .args(args)
            .env("KUBECONFIG", &env.kubeconfig)
            .env("AWS_ENDPOINT_URL_ROUTE_53", &proxy.endpoint)
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_REGION", "us-east-1")
            .env("METRICS_BIND_ADDRESS", "0")
            .env("HEALTH_PROBE_BIND_ADDRESS", "0")
            .output()
            .expect("running service-dns");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (code, err) = run(vec![]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--hosted-zone-id") && err.lines().count() == 1, "{err}");
    let (code, err) = run(vec!["--domain-name=example.com".into(), "--hostname-template={nope}.{domain}".into()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--hostname-template"), "{err}");

    // The new limits (issue 27): a bad one names its flag.
    for (flag, bad) in [("--max-ttl", "-1"), ("--max-ttl", "2147483648"), ("--max-hostnames-per-service", "0")] {
        let (code, err) = run(vec!["--domain-name=example.com".into(), format!("{flag}={bad}")]);
        assert_eq!(code, Some(2), "{flag}={bad}: {err}");
        assert!(err.contains(flag) && err.lines().count() == 1, "{err}");
    }

    // Durations are bounded: no overflow at run time.
    let (code, err) = run(vec!["--domain-name=example.com".into(), "--interval=999999999h".into()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--interval") && err.lines().count() == 1, "{err}");

    // Zone discovery: none, or more than one, with that name.
    let missing = format!("missing-{:08x}.example.com", rand::random::<u32>());
    let (code, err) = run(vec![format!("--domain-name={missing}")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no hosted zone is named"), "{err}");
    let (_, domain) = create_zone(&r53, "dup").await;
    r53.create_hosted_zone()
        .name(&domain)
        .caller_reference(format!("dup2-{}", rand::random::<u64>()))
        .send()
        .await
        .expect("second zone");
    let (code, err) = run(vec![format!("--domain-name={domain}")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("2 hosted zones are named"), "{err}");
    // A zone id and a domain that disagree.
    let (other_zone, _) = create_zone(&r53, "mismatch").await;
    let (code, err) = run(vec![format!("--hosted-zone-id={other_zone}"), "--domain-name=not-it.example.com".into()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--hosted-zone-id") && err.contains("not --domain-name"), "{err}");
    // Exactly one: found, runs (ready) and stops cleanly.
    let (zone, domain) = create_zone(&r53, "found").await;
    let mut op = Operator::start(
        &env,
        &proxy.endpoint,
        &[format!("--domain-name={domain}"), "--watch-namespace=kube-system".into()],
    );
    op.wait_ready().await;
    assert!(op.logs().contains(&zone), "the discovered zone is logged\n{}", op.logs());
    assert_eq!(op.stop().await.code(), Some(0));
}
