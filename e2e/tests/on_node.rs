//! The charts for real, on the one-node cluster: `helm install` of the
//! umbrella with the images `cargo xtask images` built (no overrides), every
//! operator pod Ready through its own probes under the chart's security
//! context, leader election across pod deletion, the operators working as
//! pods with the chart's ServiceAccount (service-dns against moto on the
//! node's address, config-copier copying a ConfigMap), a real Prometheus
//! scraping every pod, `helm upgrade` rolling the pods, and `helm uninstall`
//! leaving only the CRDs. Then one operator chart alone, the same way.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use flotilla_e2e::{
    Prometheus, UMBRELLA, apply_crds, build_chart_dependencies, chart_image_reference, charts_dir, helm_ok,
    objects_of_release, operators, without_crds,
};
use flotilla_testenv::aws::moto::{MotoServer, route53};
use flotilla_testenv::aws::route53_proxy::Route53Proxy;
use flotilla_testenv::cluster::node::paths::NODE_IP;
use flotilla_testenv::{Lifetime, TestEnv, node, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const T: Duration = Duration::from_secs(180);

fn from_json<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> K {
    serde_json::from_value(v).expect("test object")
}

/// Uninstalls a release when dropped, so a failed test does not leave its
/// cluster-wide objects in the way of the next run.
struct Release<'a> {
    name: &'a str,
    namespace: String,
    kubeconfig: std::path::PathBuf,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        let _ = flotilla_e2e::helm(Some(&self.kubeconfig), &["uninstall", self.name, "--namespace", &self.namespace]);
    }
}

/// Pods of one operator Deployment of a release.
async fn operator_pods(client: &Client, ns: &str, op: &str) -> Vec<Pod> {
    let lp = ListParams::default().labels(&format!("app.kubernetes.io/name={op}"));
    Api::<Pod>::namespaced(client.clone(), ns).list(&lp).await.unwrap().items
}

fn ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Waits until the Deployment's replicas all run the current template and
/// are Ready; returns their pods.
async fn wait_rolled_out(client: &Client, ns: &str, deployment: &str, op: &str, replicas: usize) -> Vec<Pod> {
    let api = Api::<Deployment>::namespaced(client.clone(), ns);
    wait_for(&format!("{deployment}: {replicas} updated Ready replicas"), T, || {
        let api = api.clone();
        async move {
            let d = api.get(deployment).await?;
            let s = d.status.unwrap_or_default();
            let done = s.observed_generation == d.metadata.generation
                && s.updated_replicas == Some(replicas as i32)
                && s.ready_replicas == Some(replicas as i32)
                && s.replicas == Some(replicas as i32);
            Ok::<_, kube::Error>(done.then_some(()))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    // Rolled out: the old ReplicaSet is at 0, so every pod not being
    // deleted is a new, Ready one.
    let pods: Vec<Pod> = operator_pods(client, ns, op).await.into_iter().filter(ready).collect();
    assert_eq!(pods.len(), replicas, "{deployment}: Ready pods not being deleted");
    pods
}

/// The pod's container runs the local image as the chart says: non-root
/// UID 65532, read-only root filesystem, no privilege escalation.
fn assert_hardened(p: &Pod, image: &str) {
    let spec = p.spec.as_ref().unwrap();
    let c = &spec.containers[0];
    assert_eq!(c.image.as_deref(), Some(image), "the chart's default image reference");
    let psc = spec.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.run_as_user, Some(65532));
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    let status = p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).unwrap();
    assert!(status[0].ready, "Ready through its own /readyz probe");
}

/// The pod holding the lease: the holder identity is `<pod name>_<random>`,
/// as controller-runtime writes it.
async fn lease_holder(client: &Client, ns: &str, name: &str) -> Option<String> {
    let lease = Api::<Lease>::namespaced(client.clone(), ns).get_opt(name).await.ok().flatten()?;
    let holder = lease.spec?.holder_identity.filter(|h| !h.is_empty())?;
    Some(holder.rsplit_once('_').map(|(pod, _)| pod.to_string()).unwrap_or(holder))
}

/// Deletes the leader's pod and measures how long until the other replica
/// holds the lease (the lease is 15 s; the deleted pod releases it on
/// SIGTERM, so it is usually much faster).
async fn leader_fails_over(client: &Client, ns: &str, lease: &str) -> Duration {
    let leader = wait_for(&format!("a holder of lease {lease}"), T, || async {
        Ok::<_, String>(lease_holder(client, ns, lease).await)
    })
    .await
    .unwrap();
    let started = Instant::now();
    Api::<Pod>::namespaced(client.clone(), ns).delete(&leader, &DeleteParams::default()).await.unwrap();
    let next = wait_for(&format!("another holder of lease {lease} than {leader}"), Duration::from_secs(30), || {
        let leader = leader.clone();
        async move { Ok::<_, String>(lease_holder(client, ns, lease).await.filter(|h| *h != leader)) }
    })
    .await
    .unwrap();
    let took = started.elapsed();
    assert_ne!(next, leader);
    assert!(took <= Duration::from_secs(15 + 5), "takeover within the lease duration: {took:?}");
    took
}

/// config-copier, running as a pod with the chart's ServiceAccount, copies
/// a labelled ConfigMap into a consenting namespace.
async fn config_copier_copies(env: &TestEnv, client: &Client) {
    let source_ns = env.namespace("cc-source").await.unwrap();
    let target_ns = env.namespace("cc-target").await.unwrap();
    let patch = json!({"metadata": {"labels": {"flotilla.dev/accept-copies": "true", "flotilla-e2e-target": "yes"}}});
    Api::<Namespace>::all(client.clone())
        .patch(&target_ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let cm: ConfigMap = from_json(json!({
        "metadata": {"name": "app-config", "labels": {"copy": "yes"}},
        "data": {"greeting": "hello from a pod"},
    }));
    Api::<ConfigMap>::namespaced(client.clone(), &source_ns).create(&PostParams::default(), &cm).await.unwrap();
    let rule = json!({
        "apiVersion": "flotilla.dev/v1alpha1",
        "kind": "CopyRule",
        "metadata": {"name": "to-target", "namespace": source_ns},
        "spec": {
            "kind": "ConfigMap",
            "selector": {"matchLabels": {"copy": "yes"}},
            "namespaces": {"include": [target_ns]},
        },
    });
    let file = std::env::temp_dir().join(format!("copyrule-{source_ns}.json"));
    std::fs::write(&file, rule.to_string()).unwrap();
    env.kubectl(&["apply", "-f", &file.display().to_string()]).unwrap();
    let copies = Api::<ConfigMap>::namespaced(client.clone(), &target_ns);
    wait_for("the copy in the target namespace", T, || {
        let copies = copies.clone();
        async move {
            let c = copies.get_opt("app-config").await?;
            Ok::<_, kube::Error>(
                c.and_then(|c| c.data).filter(|d| d.get("greeting").map(String::as_str) == Some("hello from a pod")),
            )
        }
    })
    .await
    .unwrap();
}

/// service-dns, running as a pod, publishes a Service's record, updates it
/// (an UPSERT carrying the guard on our ownership TXT, which Route53 — and
/// the proxy in front of moto — applies atomically) and removes it with the
/// Service. The pod talks to the Route53-faithful proxy on the node's
/// address; the records are read from moto behind it.
async fn service_dns_publishes(env: &TestEnv, client: &Client, moto: &str, zone: &str) {
    let ns = env.namespace("dns-svc").await.unwrap();
    // A name of its own: the node outlives test runs, and an older Service
    // wanting the same name would keep it (service-dns gives it to the oldest).
    let name = format!("hello-{}", ns.rsplit('-').next().unwrap_or_default());
    let svc: Service = from_json(json!({
        "metadata": {"name": name},
        "spec": {"selector": {"app": "hello-world"}, "ports": [{"port": 8000}]},
    }));
    let created = Api::<Service>::namespaced(client.clone(), &ns).create(&PostParams::default(), &svc).await.unwrap();
    let ip = created.spec.and_then(|s| s.cluster_ip).unwrap();
    let host = format!("kube-{name}.flotilla-e2e.test");
    wait_for(&format!("the A record of {host}"), T, || async {
        let values = route53::find(moto, zone, &host, "A").map_err(|e| e.to_string())?;
        Ok::<_, String>(values.filter(|v| v.contains(&ip)))
    })
    .await
    .unwrap();

    let services = Api::<Service>::namespaced(client.clone(), &ns);
    let ttl = json!({"metadata": {"annotations": {"flotilla.dev/ttl": "77"}}});
    services.patch(&name, &PatchParams::default(), &Patch::Merge(&ttl)).await.unwrap();
    wait_for(&format!("the A record of {host} with TTL 77"), T, || async {
        let set = route53::find_set(moto, zone, &host, "A").map_err(|e| e.to_string())?;
        Ok::<_, String>(set.filter(|(ttl, _)| *ttl == Some(77)))
    })
    .await
    .unwrap();

    services.delete(&name, &Default::default()).await.unwrap();
    wait_for(&format!("the A record of {host} to be removed"), T, || async {
        let set = route53::find_set(moto, zone, &host, "A").map_err(|e| e.to_string())?;
        Ok::<_, String>(set.is_none().then_some(()))
    })
    .await
    .unwrap();
}

async fn prometheus_scrapes_every_pod(pods: &BTreeMap<String, Vec<Pod>>) {
    let jobs: Vec<(&str, Vec<String>)> = pods
        .iter()
        .map(|(op, pods)| {
            let targets =
                pods.iter().filter_map(|p| p.status.as_ref()?.pod_ip.clone()).map(|ip| format!("{ip}:8080")).collect();
            (op.as_str(), targets)
        })
        .collect();
    let prom = Prometheus::start(&jobs).unwrap();
    for (op, pods) in pods {
        let want = pods.len();
        wait_for(&format!("Prometheus to scrape all {want} {op} pods (up == 1)"), Duration::from_secs(60), || async {
            let r = prom.query(&format!("up{{job=\"{op}\"}} == 1")).await?;
            Ok::<_, String>((r.len() == want).then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\nprometheus log:\n{}", prom.log()));
        let series = prom.query(&format!("controller_runtime_reconcile_total{{job=\"{op}\"}}")).await.unwrap();
        assert!(!series.is_empty(), "{op}: reconcile metrics scraped from the pods");
    }
}

/// One test, two releases in turn: two config-copier installations at once
/// would both act on every CopyRule of the cluster.
#[tokio::test]
async fn charts_run_their_operators_as_pods() {
    umbrella_chart_runs_every_operator_as_pods().await;
    one_operator_chart_alone_runs_as_pods().await;
}

async fn umbrella_chart_runs_every_operator_as_pods() {
    let env = node();
    let client = env.client().await;
    build_chart_dependencies().unwrap();
    let ns = env.namespace("flotilla-system").await.unwrap();

    // Route53 for service-dns: moto on the node's address.
    let moto_dir = std::env::temp_dir().join(format!("flotilla-e2e-moto-{}", std::process::id()));
    let moto = MotoServer::start_on(&moto_dir, Lifetime::DieWithParent, &NODE_IP.to_string()).unwrap();
    let proxy = Route53Proxy::start_on(&moto.endpoint, &NODE_IP.to_string()).unwrap();
    let zone = route53::create_hosted_zone(&moto.endpoint, "flotilla-e2e.test").unwrap();
    let creds: Secret = from_json(json!({
        "metadata": {"name": "aws"},
        "stringData": {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"},
    }));
    Api::<Secret>::namespaced(client.clone(), &ns).create(&PostParams::default(), &creds).await.unwrap();

    let path = charts_dir().join(UMBRELLA).display().to_string();
    let kubeconfig = Some(env.kubeconfig.as_path());
    let zone_arg = format!("service-dns.route53.hostedZoneId={zone}");
    let endpoint_arg = format!("service-dns.aws.endpointUrl={}", proxy.endpoint);
    #[rustfmt::skip]
    let values = [
        "--set", "service-dns.enabled=true",
        "--set", "config-copier.enabled=true",
        "--set", "pod-debugger.enabled=true",
        "--set", &zone_arg,
        "--set", "service-dns.aws.region=us-east-1",
        "--set", "service-dns.aws.credentialsSecret=aws",
        "--set", &endpoint_arg,
    ];
    // Other test binaries on this node apply the CRDs too (a node outlives
    // them): applied here, kept out of the release (tests/chart_crds.rs
    // proves the chart's own CRD lifecycle on a control plane of its own).
    apply_crds(&client).await.unwrap();
    let no_crds = without_crds(UMBRELLA).unwrap();
    let mut install = vec!["install", "flotilla", &path, "--namespace", &ns, "--wait", "--timeout", "3m"];
    install.extend(values);
    install.extend(no_crds.iter().map(String::as_str));
    let _release = Release { name: "flotilla", namespace: ns.clone(), kubeconfig: env.kubeconfig.clone() };
    helm_ok(kubeconfig, &install).unwrap();

    let mut pods = BTreeMap::new();
    for op in operators().unwrap() {
        let running = wait_rolled_out(&client, &ns, &format!("flotilla-{op}"), &op, 2).await;
        let image = chart_image_reference(&op).unwrap();
        for p in &running {
            assert_hardened(p, &image);
        }
        pods.insert(op, running);
    }

    config_copier_copies(&env, &client).await;
    service_dns_publishes(&env, &client, &moto.endpoint, &zone).await;
    prometheus_scrapes_every_pod(&pods).await;
    for op in operators().unwrap() {
        let took = leader_fails_over(&client, &ns, &format!("flotilla-{op}")).await;
        eprintln!("{op}: leader pod deleted -> new leader after {took:?}");
    }

    // A changed value rolls the pods.
    let before: Vec<String> =
        operator_pods(&client, &ns, "config-copier").await.into_iter().filter_map(|p| p.metadata.name).collect();
    let mut upgrade = vec!["upgrade", "flotilla", &path, "--namespace", &ns, "--wait", "--timeout", "3m"];
    upgrade.extend(values);
    upgrade.extend(no_crds.iter().map(String::as_str));
    upgrade.extend(["--set", "config-copier.copyConcurrency=8"]);
    helm_ok(kubeconfig, &upgrade).unwrap();
    let after = wait_rolled_out(&client, &ns, "flotilla-config-copier", "config-copier", 2).await;
    for p in &after {
        let name = p.metadata.name.clone().unwrap_or_default();
        assert!(!before.contains(&name), "pod {name} was not replaced by the upgrade");
        let args = p.spec.as_ref().unwrap().containers[0].args.clone().unwrap_or_default();
        assert!(args.iter().any(|a| a == "--copy-concurrency=8"), "{args:?}");
    }

    helm_ok(kubeconfig, &["uninstall", "flotilla", "--namespace", &ns, "--wait"]).unwrap();
    let left = objects_of_release(&client, &ns, "flotilla").await.unwrap();
    assert!(left.is_empty(), "left after uninstall: {left:?}");
    wait_for("the operator pods to be gone", T, || async {
        let left: usize = {
            let mut n = 0;
            for op in operators().unwrap() {
                n += operator_pods(&client, &ns, &op).await.len();
            }
            n
        };
        Ok::<_, String>((left == 0).then_some(()))
    })
    .await
    .unwrap();
    drop(proxy);
    drop(moto);
    let _ = std::fs::remove_dir_all(moto_dir);
}

async fn one_operator_chart_alone_runs_as_pods() {
    let env = node();
    let client = env.client().await;
    build_chart_dependencies().unwrap();
    let ns = env.namespace("cc-alone").await.unwrap();
    let path = charts_dir().join("config-copier").display().to_string();
    let kubeconfig = Some(env.kubeconfig.as_path());
    let _release = Release { name: "alone", namespace: ns.clone(), kubeconfig: env.kubeconfig.clone() };
    apply_crds(&client).await.unwrap();
    let no_crds = without_crds("config-copier").unwrap();
    let mut install = vec!["install", "alone", &path, "--namespace", &ns, "--wait", "--timeout", "3m"];
    install.extend(no_crds.iter().map(String::as_str));
    helm_ok(kubeconfig, &install).unwrap();
    let pods = wait_rolled_out(&client, &ns, "alone-config-copier", "config-copier", 2).await;
    let image = chart_image_reference("config-copier").unwrap();
    for p in &pods {
        assert_hardened(p, &image);
    }
    leader_fails_over(&client, &ns, "alone-config-copier").await;
    config_copier_copies(&env, &client).await;
    helm_ok(kubeconfig, &["uninstall", "alone", "--namespace", &ns, "--wait"]).unwrap();
    let left = objects_of_release(&client, &ns, "alone").await.unwrap();
    assert!(left.is_empty(), "left after uninstall: {left:?}");
}
