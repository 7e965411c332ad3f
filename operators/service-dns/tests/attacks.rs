//! Issue 27, "names belong to namespaces": each attack of a Service author on
//! the shared zone, shown closed. The operator runs as a process with the
//! chart's RBAC (a ServiceAccount bound to exactly the chart's rules), the
//! real control plane, moto behind the Route53-faithful proxy. Settings other
//! than the defaults are given as environment variables (`HANDOVER_GRACE`,
//! …), which a build without the flag ignores: every test here runs, and
//! fails, against a build from before the fix
//! (`SERVICE_DNS_TEST_BINARY=<that build> cargo test -p service-dns --test attacks`).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::wait_for;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use service_dns::model::RecordType;

/// One attack's world: a zone, the operator with the chart's RBAC.
struct World {
    client: kube::Client,
    proxy: flotilla_testenv::aws::route53_proxy::Route53Proxy,
    r53: aws_sdk_route53::Client,
    zone: String,
    domain: String,
    kubeconfig: std::path::PathBuf,
}

impl World {
    async fn new(prefix: &str) -> World {
        let env = flotilla_testenv::shared();
        let client = env.client().await;
        let moto = moto();
        let proxy = faithful(&moto);
        let r53 = route53(&moto.endpoint);
        let (zone, domain) = create_zone(&r53, prefix).await;
        let kubeconfig = chart_kubeconfig(&env).await;
        World { client, proxy, r53, zone, domain, kubeconfig }
    }

    /// The operator on this zone with `args`, and `env` as environment.
    async fn operator(&self, args: &[String], env: &[(&str, &str)]) -> Operator {
        let mut op = self.operator_started(args, env);
        op.wait_ready().await;
        op
    }

    /// The operator started, not waited for: Ready follows its first sync,
    /// which a test that makes it write hundreds of changes waits for by
    /// the records themselves, with a time fit for that many.
    fn operator_started(&self, args: &[String], env: &[(&str, &str)]) -> Operator {
        let mut all = zone_args(&self.zone, &self.domain);
        all.extend_from_slice(args);
        Operator::start_with(&self.kubeconfig, &self.proxy.endpoint, &all, env)
    }

    fn name(&self, label: &str) -> String {
        format!("{label}.{}", self.domain)
    }

    async fn a(&self, name: &str) -> Option<Vec<String>> {
        find(&self.r53, &self.zone, name, RecordType::A).await.map(|r| values(&r))
    }

    async fn txt(&self, name: &str) -> Option<String> {
        find(&self.r53, &self.zone, &format!("_flotilla-owner.{name}"), RecordType::Txt)
            .await
            .and_then(|r| r.values.first().map(|v| v.to_string()))
    }
}

/// A Service with `flotilla.dev/hostname: <names>`, labelled `dns-test=<label>`.
fn named(name: &str, hostnames: &str, label: &str) -> Service {
    let mut s = service(name, "ClusterIP", &[("flotilla.dev/hostname", hostnames)]);
    s.metadata.labels = Some([("dns-test".to_string(), label.to_string())].into());
    s
}

/// `flotilla.dev/hostname: login.<zone>` from a namespace nobody granted it
/// to: today the author's own load balancer answers for the company's login
/// page (and gets a valid ACME certificate for it). Now nothing is
/// published, the Service gets `HostnameNotAllowed` saying which annotation
/// to ask the admin for, and a grant added later publishes, a grant removed
/// unpublishes.
#[tokio::test]
async fn a_service_cannot_publish_a_name_its_namespace_was_not_granted() {
    let w = World::new("grant").await;
    let env = flotilla_testenv::shared();
    let ns = env.namespace("grant").await.expect("namespace");
    let op = w.operator(&[format!("--watch-namespace={ns}")], &[]).await;
    let (login, www) = (w.name("login"), w.name("www"));
    create_service(&w.client, &ns, &service("phish", "ClusterIP", &[("flotilla.dev/hostname", &login)])).await;
    create_service(
        &w.client,
        &ns,
        &service("alias", "ClusterIP", &[("external-dns.alpha.kubernetes.io/hostname", &www)]),
    )
    .await;
    let plain = create_service(&w.client, &ns, &service("plain", "ClusterIP", &[])).await;
    // The template name needs no grant: once it is there, the sync that saw
    // the others is done; two more to be sure.
    wait_record(&w.r53, &w.zone, &w.name("kube-plain"), RecordType::A, &[&cluster_ip(&plain)]).await;
    op.wait_more_syncs(2).await;
    assert_eq!(w.a(&login).await, None, "{login} was published for a namespace nobody granted it to");
    assert_eq!(w.a(&www).await, None, "{www} (external-dns's alias) was published without a grant");
    for (svc, key) in [("phish", "flotilla.dev/hostname"), ("alias", "external-dns.alpha.kubernetes.io/hostname")] {
        let note = wait_event(&w.client, &ns, svc, "HostnameNotAllowed", ALLOWED_HOSTNAMES).await;
        assert!(note.starts_with(key) && note.contains("not granted"), "{note}");
    }

    // The admin grants login and a subtree (and writes one entry wrong).
    let sub = create_service(
        &w.client,
        &ns,
        &service(
            "sub",
            "ClusterIP",
            &[("flotilla.dev/hostname", &format!("{}, {}", w.name("team"), w.name("a.team")))],
        ),
    )
    .await;
    grant(&w.client, &ns, Some(&format!("{login}, *.{}, not a name", w.name("team")))).await;
    let phish = Api::<Service>::namespaced(w.client.clone(), &ns).get("phish").await.unwrap();
    wait_record(&w.r53, &w.zone, &login, RecordType::A, &[&cluster_ip(&phish)]).await;
    // *.team covers a.team, not team itself; the wrong entry is pointed out.
    wait_record(&w.r53, &w.zone, &w.name("a.team"), RecordType::A, &[&cluster_ip(&sub)]).await;
    let note = wait_event(&w.client, &ns, "sub", "HostnameNotAllowed", "\"not a name\"").await;
    assert!(note.contains(&format!("{} is not granted", w.name("team"))), "{note}");
    assert_eq!(w.a(&w.name("team")).await, None);
    assert_eq!(w.a(&www).await, None, "www was not granted");

    // The grant withdrawn: the name is no longer claimed, its record goes.
    grant(&w.client, &ns, None).await;
    wait_for(&format!("{login}'s A record to go"), T, || async {
        Ok::<_, String>(w.a(&login).await.is_none().then_some(()))
    })
    .await
    .unwrap();
    assert_eq!(w.a(&w.name("kube-plain")).await, Some(vec![cluster_ip(&plain)]), "template names stay");
}

/// With `watchNamespace` the chart lets the operator read only its own
/// Namespace (`resourceNames`); the operator watches it by a `metadata.name`
/// field selector, which that rule admits: its grant works, nothing is
/// refused.
#[tokio::test]
async fn a_watch_namespace_install_reads_only_its_own_namespace_grant() {
    let w = World::new("scoped").await;
    let env = flotilla_testenv::shared();
    let ns = env.namespace("scoped").await.expect("namespace");
    let kubeconfig = scoped_chart_kubeconfig(&env, &ns).await;
    grant(&w.client, &ns, Some(&w.name("shop"))).await;
    let mut all = zone_args(&w.zone, &w.domain);
    all.push(format!("--watch-namespace={ns}"));
    let mut op = Operator::start_with(&kubeconfig, &w.proxy.endpoint, &all, &[]);
    op.wait_ready().await;
    let s =
        create_service(&w.client, &ns, &service("shop", "ClusterIP", &[("flotilla.dev/hostname", &w.name("shop"))]))
            .await;
    wait_record(&w.r53, &w.zone, &w.name("shop"), RecordType::A, &[&cluster_ip(&s)]).await;
    // A grant changed later is seen through the narrowed watch too.
    grant(&w.client, &ns, Some(&w.name("other"))).await;
    wait_for("shop's record to go with its grant", T, || async {
        Ok::<_, String>(w.a(&w.name("shop")).await.is_none().then_some(()))
    })
    .await
    .unwrap();
    assert!(!op.logs().to_lowercase().contains("forbidden"), "refused something:\n{}", op.logs());
}

/// One annotation naming thousands of names would fill the zone's 10,000
/// records for every tool using it. Over `--max-hostnames-per-service` (10):
/// nothing from the annotation, a `TooManyHostnames` Warning; 10 are fine.
#[tokio::test]
async fn one_service_cannot_fill_the_zone() {
    let w = World::new("cap").await;
    let env = flotilla_testenv::shared();
    let ns = env.namespace("cap").await.expect("namespace");
    grant(&w.client, &ns, Some(&format!("*.{}", w.domain))).await;
    let op = w.operator(&[format!("--watch-namespace={ns}")], &[]).await;
    let names = |prefix: &str, n: usize| (0..n).map(|i| w.name(&format!("{prefix}{i:02}"))).collect::<Vec<_>>();
    let (greedy, ten) = (names("greedy-", 40), names("ten-", 10));
    create_service(&w.client, &ns, &service("greedy", "ClusterIP", &[("flotilla.dev/hostname", &greedy.join(","))]))
        .await;
    let ok = create_service(&w.client, &ns, &service("ten", "ClusterIP", &[("flotilla.dev/hostname", &ten.join(","))]))
        .await;
    for n in &ten {
        wait_record(&w.r53, &w.zone, n, RecordType::A, &[&cluster_ip(&ok)]).await;
    }
    op.wait_more_syncs(2).await;
    let zone = user_records(&w.r53, &w.zone).await;
    let published = zone.iter().filter(|r| r.name.starts_with("greedy-")).count();
    assert_eq!(published, 0, "a Service asking for 40 names got {published} records");
    let note = wait_event(&w.client, &ns, "greedy", "TooManyHostnames", "40 hostnames").await;
    assert!(note.contains("--max-hostnames-per-service"), "{note}");
}

/// `flotilla.dev/ttl: "2147483647"` keeps a wrong answer in resolvers for 68
/// years. Above `--max-ttl` (1 day): published with a day and a `TTLClamped`
/// Warning.
#[tokio::test]
async fn a_huge_ttl_is_clamped() {
    let w = World::new("ttl").await;
    let env = flotilla_testenv::shared();
    let ns = env.namespace("ttl").await.expect("namespace");
    let _op = w.operator(&[format!("--watch-namespace={ns}")], &[]).await;
    let s =
        create_service(&w.client, &ns, &service("forever", "ClusterIP", &[("flotilla.dev/ttl", "2147483647")])).await;
    let r = wait_record(&w.r53, &w.zone, &w.name("kube-forever"), RecordType::A, &[&cluster_ip(&s)]).await;
    assert_eq!(r.ttl, 86_400, "published with TTL {}", r.ttl);
    let note = wait_event(&w.client, &ns, "forever", "TTLClamped", "--max-ttl").await;
    assert!(note.contains("2147483647"), "{note}");
}

/// A Service of namespace b waits for `login`, which namespace a's Service
/// holds. a's Service is deleted (a `helm` reinstall, an Argo replace): today
/// b gets the name in the same sync. Now the name is held for namespace a
/// for `--handover-grace`: its stale record is deleted, b does not get it,
/// a's recreated Service gets it back. A restart does not cut the grace
/// short: a name freed while the operator was down starts a whole grace.
/// The conflict Event on b never names a's Service.
#[tokio::test]
async fn a_name_freed_by_one_namespace_is_kept_for_it_for_the_grace() {
    const GRACE: &str = "12s";
    let w = World::new("handover").await;
    let env = flotilla_testenv::shared();
    let (ns_a, ns_b) = (env.namespace("handover-a").await.unwrap(), env.namespace("handover-b").await.unwrap());
    let login = w.name("login");
    // The admin granted login to both teams (or runs with `any`).
    grant(&w.client, &ns_a, Some(&login)).await;
    grant(&w.client, &ns_b, Some(&login)).await;
    let label = format!("t{:08x}", rand::random::<u32>());
    let args = [format!("--service-selector=dns-test={label}")];
    let grace = [("HANDOVER_GRACE", GRACE)];
    let mut op = w.operator(&args, &grace).await;
    let (api_a, api_b) =
        (Api::<Service>::namespaced(w.client.clone(), &ns_a), Api::<Service>::namespaced(w.client.clone(), &ns_b));
    let a = api_a.create(&PostParams::default(), &named("login", &login, &label)).await.unwrap();
    wait_record(&w.r53, &w.zone, &login, RecordType::A, &[&cluster_ip(&a)]).await;
    let b = api_b.create(&PostParams::default(), &named("squatter", &login, &label)).await.unwrap();
    let b_ip = cluster_ip(&b);
    wait_event(&w.client, &ns_b, "squatter", "DnsRecordConflict", &login).await;

    // a's Service goes: its record goes, and b does not get the name.
    api_a.delete("login", &DeleteParams::default()).await.unwrap();
    let a_ip = cluster_ip(&a);
    wait_for("a's record to change", T, || async {
        Ok::<_, String>((w.a(&login).await != Some(vec![a_ip.clone()])).then_some(()))
    })
    .await
    .unwrap();
    let never_b = |when: &'static str| {
        let (w, login, ns_b) = (&w, &login, &ns_b);
        async move {
            let (a, txt) = (w.a(login).await, w.txt(login).await.unwrap_or_default());
            assert_eq!(a, None, "{when}: {login} was handed to namespace b's Service (A {a:?}, TXT {txt})");
            assert!(!txt.contains(ns_b.as_str()), "{when}: {login}'s TXT names namespace b: {txt}");
            assert!(txt.contains(",freed="), "{when}: {login} is not held: TXT {txt:?}");
        }
    };
    for _ in 0..8 {
        never_b("within the grace").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The reinstall: a's Service again, same name, a new ClusterIP: its name back.
    let again = api_a.create(&PostParams::default(), &named("login", &login, &label)).await.unwrap();
    wait_record(&w.r53, &w.zone, &login, RecordType::A, &[&cluster_ip(&again)]).await;
    let txt = w.txt(&login).await.unwrap();
    assert!(txt.contains(&format!("resource=service/{ns_a}/login")) && !txt.contains("freed"), "{txt}");

    // Freed while the operator is down: the restart starts a whole grace.
    assert_eq!(op.stop().await.code(), Some(0));
    api_a.delete("login", &DeleteParams::default()).await.unwrap();
    let op = w.operator(&args, &grace).await;
    let again_ip = cluster_ip(&again);
    wait_for("the stale record to go after the restart", T, || async {
        Ok::<_, String>((w.a(&login).await != Some(vec![again_ip.clone()])).then_some(()))
    })
    .await
    .unwrap();
    for _ in 0..4 {
        never_b("just after a restart").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The grace over, b gets it.
    wait_record(&w.r53, &w.zone, &login, RecordType::A, &[&b_ip]).await;
    let txt = w.txt(&login).await.unwrap();
    assert!(txt.contains(&format!("resource=service/{ns_b}/squatter")), "{txt}");
    drop(op);
}

/// Two Services of two namespaces want one name: the loser's conflict Event
/// used to name the holder (`service/<namespace>/<name>`), telling a tenant
/// what another namespace runs. Now it says "another Service"; the
/// operator's log keeps who.
#[tokio::test]
async fn a_conflict_event_does_not_name_the_other_namespace() {
    let w = World::new("conflict").await;
    let env = flotilla_testenv::shared();
    let (ns_a, ns_b) = (env.namespace("conflict-a").await.unwrap(), env.namespace("conflict-b").await.unwrap());
    let label = format!("t{:08x}", rand::random::<u32>());
    let labelled = |name: &str| {
        let mut s = service(name, "ClusterIP", &[]);
        s.metadata.labels = Some([("dns-test".to_string(), label.clone())].into());
        s
    };
    let holder = create_service(&w.client, &ns_a, &labelled("secret-project")).await;
    let op = w.operator(&[format!("--service-selector=dns-test={label}")], &[]).await;
    let name = w.name("kube-secret-project");
    wait_record(&w.r53, &w.zone, &name, RecordType::A, &[&cluster_ip(&holder)]).await;
    create_service(&w.client, &ns_b, &labelled("secret-project")).await;
    let note = wait_event(&w.client, &ns_b, "secret-project", "DnsRecordConflict", &name).await;
    assert!(!note.contains(&ns_a), "the Event in namespace b names namespace a's Service: {note}");
    assert!(note.contains("already published by another Service"), "{note}");
    assert!(op.logs().contains(&format!("service/{ns_a}/secret-project")), "the operator's log says who holds it");
}

/// After an outage or a restart, the deletions of Services gone meanwhile go
/// before everything else: a stale record points at a ClusterIP the cluster
/// may have given to another Service since (here it has: the new Service
/// asked for it). With 600 names to create (two requests or more), the
/// deletion used to go in the last request, after all of them (by name).
#[tokio::test]
async fn deletions_go_first_after_a_restart() {
    let w = World::new("order").await;
    let env = flotilla_testenv::shared();
    let ns = env.namespace("order").await.expect("namespace");
    grant(&w.client, &ns, Some(&format!("*.{}", w.domain))).await;
    let args = [format!("--watch-namespace={ns}")];
    let many_names = [("MAX_HOSTNAMES_PER_SERVICE", "1000")];
    let mut op = w.operator(&args, &many_names).await;
    let old = create_service(&w.client, &ns, &service("old", "ClusterIP", &[])).await;
    let (stale, old_ip) = (w.name("kube-old"), cluster_ip(&old));
    wait_record(&w.r53, &w.zone, &stale, RecordType::A, &[&old_ip]).await;
    assert_eq!(op.stop().await.code(), Some(0));

    // While it is down: old goes, and its ClusterIP goes to a Service with
    // 600 names (which sort before kube-old).
    let api = Api::<Service>::namespaced(w.client.clone(), &ns);
    api.delete("old", &DeleteParams::default()).await.unwrap();
    let hostnames: Vec<String> = (0..600).map(|i| w.name(&format!("a-{i:03}"))).collect();
    let mut many = service("many", "ClusterIP", &[("flotilla.dev/hostname", &hostnames.join(","))]);
    if let Some(spec) = many.spec.as_mut() {
        spec.cluster_ip = Some(old_ip.clone());
    }
    let many = wait_for("old's ClusterIP to be free for another Service", T, || async {
        match api.create(&PostParams::default(), &many).await {
            Ok(s) => Ok(Some(s)),
            Err(kube::Error::Api(e)) if e.code == 422 || e.code == 409 => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
    .unwrap();
    assert_eq!(cluster_ip(&many), old_ip, "the new Service has old's ClusterIP");

    w.proxy.faults().reset_stats();
    // Its first sync writes 601 changes (Ready only after): under a loaded
    // CI that took more than the 30 s a Ready wait gives.
    let _op = w.operator_started(&args, &many_names);
    wait_for(&format!("{stale} gone and the 600 names published"), Duration::from_secs(120), || async {
        let zone = user_records(&w.r53, &w.zone).await;
        let gone = !zone.iter().any(|r| *r.name == stale && r.rtype == RecordType::A);
        let made = zone.iter().filter(|r| r.name.starts_with("a-") && r.rtype == RecordType::A).count();
        Ok::<_, String>((gone && made == 600).then_some(()))
    })
    .await
    .unwrap();
    let stats = w.proxy.faults().stats();
    let names_stale = |b: &Vec<String>| b.iter().any(|n| n.trim_end_matches('.').ends_with(&stale));
    let creates = |b: &Vec<String>| b.iter().any(|n| n.starts_with("a-"));
    let first_create = stats.batches.iter().position(creates).expect("a request creating the names");
    let deletion = stats.batches.iter().position(names_stale).expect("a request deleting the stale record");
    let requests_creating = stats.batches.iter().filter(|b| creates(b)).count();
    assert!(requests_creating >= 2, "the test needs the creations in several requests: {requests_creating}");
    assert!(
        deletion <= first_create,
        "the stale record (pointing at the ClusterIP now {}'s) was deleted in request {deletion}, after the \
         creations began in request {first_create} (requests: {:?})",
        "many",
        stats.batches.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

/// A Service author cannot push the operator past its chart's memory limit:
/// 320 Services with 250 KB of annotations each (the API allows 256 KiB) are
/// 80 MB of metadata, which the Service watch's first list took in one page
/// of 500: the body and its decoded objects, ~160 MB, and the operator was
/// OOM-killed under the chart's 128Mi at every start. Its lists now stream,
/// one Service at a time. (Headless, without endpoints: no cluster IP each,
/// nothing to publish.)
#[tokio::test]
async fn a_tenants_bloated_services_cannot_push_it_past_the_charts_memory_limit() {
    use flotilla_testenv::memory_limit::{MemoryLimit, bloat, chart_limit};
    let w = World::new("bloat").await;
    let ns = flotilla_testenv::shared().namespace("bloat").await.expect("namespace");
    let headless = serde_json::json!({"metadata": {}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}});
    bloat(&Api::<Service>::namespaced(w.client.clone(), &ns), 320, headless).await.unwrap();
    let limit = MemoryLimit::new("service-dns-bloat", chart_limit("service-dns").unwrap()).unwrap();
    let mut args = zone_args(&w.zone, &w.domain);
    args.push(format!("--watch-namespace={ns}"));
    let mut op = Operator::start_limited(&w.kubeconfig, &w.proxy.endpoint, &args, &[], Some(&limit));
    // Ready: its Services listed and its first sync done; then 20 s more.
    let health = op.health.clone();
    let peak = limit
        .outlived(&mut op, "readiness", T, Duration::from_secs(20), || {
            let ready = format!("{health}/readyz");
            async move { reqwest::get(&ready).await.is_ok_and(|r| r.status().is_success()) }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("peak memory under the chart's limit: {peak:?} bytes");
    drop(op);
    let _ =
        Api::<k8s_openapi::api::core::v1::Namespace>::all(w.client.clone()).delete(&ns, &DeleteParams::default()).await;
}
