//! Helpers for service-dns's integration tests: the real control plane, a
//! real moto server, the operator binary as a process, zone and Event reads.
#![allow(dead_code)]

use flotilla_testenv::under_test::UnderTest;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use aws_sdk_route53::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_route53::types::{Change, ChangeAction, ChangeBatch, ResourceRecord, ResourceRecordSet, RrType};
use flotilla_testenv::aws::moto::SharedMoto;
use flotilla_testenv::aws::route53_proxy::Route53Proxy;
use flotilla_testenv::rbac::{self, Scope, account_with, rule, rule_named};
use flotilla_testenv::{TestEnv, wait_for};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use service_dns::model::{RecordSet, RecordType};

pub const T: Duration = Duration::from_secs(30);

pub fn free_port() -> u16 {
    flotilla_testenv::cluster::process::free_port().expect("a free port")
}

/// An AWS Route53 client on moto, for the tests' own reads and writes.
pub fn route53(endpoint: &str) -> aws_sdk_route53::Client {
    let config = aws_sdk_route53::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .http_client(
            aws_smithy_http_client::Builder::new()
                .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                    aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
                ))
                .build_https(),
        )
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("testing", "testing", None, None, "test"))
        .build();
    aws_sdk_route53::Client::from_conf(config)
}

/// A fresh hosted zone `<prefix>-<random>.example.com`: (id, domain).
pub async fn create_zone(r53: &aws_sdk_route53::Client, prefix: &str) -> (String, String) {
    let domain = format!("{prefix}-{:08x}.example.com", rand::random::<u32>());
    (create_zone_named(r53, &domain).await, domain)
}

/// Another hosted zone of `domain` (e.g. the private side of a split
/// horizon beside a public zone of the same name): its id.
pub async fn create_zone_named(r53: &aws_sdk_route53::Client, domain: &str) -> String {
    let out = r53
        .create_hosted_zone()
        .name(domain)
        .caller_reference(format!("{domain}-{}", rand::random::<u64>()))
        .send()
        .await
        .expect("creating a hosted zone");
    let id = out.hosted_zone().map(|z| z.id().to_string()).unwrap_or_default();
    service_dns::route53::short_zone_id(&id)
}

/// Every record set of a zone (paginated), in our model.
pub async fn records(r53: &aws_sdk_route53::Client, zone: &str) -> Vec<RecordSet> {
    let mut out = Vec::new();
    let mut start: Option<(String, RrType)> = None;
    loop {
        let mut req = r53.list_resource_record_sets().hosted_zone_id(zone);
        if let Some((n, t)) = &start {
            req = req.start_record_name(n).start_record_type(t.clone());
        }
        let page = req.send().await.expect("listing records");
        out.extend(page.resource_record_sets().iter().map(service_dns::route53::from_route53));
        match (page.is_truncated(), page.next_record_name(), page.next_record_type()) {
            (true, Some(n), Some(t)) => start = Some((n.to_string(), t.clone())),
            _ => break,
        }
    }
    out
}

/// The A/AAAA/CNAME/TXT records of a zone (not its SOA/NS).
pub async fn user_records(r53: &aws_sdk_route53::Client, zone: &str) -> Vec<RecordSet> {
    records(r53, zone).await.into_iter().filter(|r| r.rtype != RecordType::Other).collect()
}

pub async fn find(r53: &aws_sdk_route53::Client, zone: &str, name: &str, rtype: RecordType) -> Option<RecordSet> {
    records(r53, zone).await.into_iter().find(|r| &*r.name == name && r.rtype == rtype)
}

/// Waits until `name`/`rtype` exists with `values`.
pub async fn wait_record(
    r53: &aws_sdk_route53::Client,
    zone: &str,
    name: &str,
    rtype: RecordType,
    values: &[&str],
) -> RecordSet {
    let want: Vec<String> = {
        let mut v: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        v.sort();
        v
    };
    wait_for(&format!("{rtype} {name} = {want:?}"), T, || async {
        Ok::<_, String>(find(r53, zone, name, rtype).await.filter(|r| self::values(r) == want))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A record set's values, as strings to compare with.
pub fn values(r: &RecordSet) -> Vec<String> {
    r.values.iter().map(|v| v.to_string()).collect()
}

/// Whether `r` is the ownership TXT of a name freed and held for its
/// namespace for `--handover-grace` (`freed=` in its value).
pub fn is_held(r: &RecordSet) -> bool {
    r.rtype == RecordType::Txt && r.values.iter().any(|v| v.contains(",freed="))
}

/// The records of a zone that are published (not SOA/NS, not the TXT of a
/// name held for `--handover-grace`).
pub async fn live_records(r53: &aws_sdk_route53::Client, zone: &str) -> Vec<RecordSet> {
    user_records(r53, zone).await.into_iter().filter(|r| !is_held(r)).collect()
}

/// Waits until nothing is published at `name`: no record, and its TXT gone
/// or held for its namespace (`--handover-grace`).
pub async fn wait_gone(r53: &aws_sdk_route53::Client, zone: &str, name: &str) {
    wait_for(&format!("{name} to be gone"), T, || async {
        let left: Vec<RecordSet> = records(r53, zone)
            .await
            .into_iter()
            .filter(|r| &*r.name == name || (*r.name == format!("_flotilla-owner.{name}") && !is_held(r)))
            .collect();
        Ok::<_, String>(left.is_empty().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// CREATE record sets directly (a user's own records).
pub async fn put_records(r53: &aws_sdk_route53::Client, zone: &str, sets: &[(String, RrType, Vec<String>)]) {
    for chunk in sets.chunks(500) {
        let changes: Vec<Change> = chunk
            .iter()
            .map(|(name, t, values)| {
                let rs = ResourceRecordSet::builder()
                    .name(name)
                    .r#type(t.clone())
                    .ttl(60)
                    .set_resource_records(Some(
                        values.iter().map(|v| ResourceRecord::builder().value(v).build().expect("record")).collect(),
                    ))
                    .build()
                    .expect("record set");
                Change::builder().action(ChangeAction::Create).resource_record_set(rs).build().expect("change")
            })
            .collect();
        r53.change_resource_record_sets()
            .hosted_zone_id(zone)
            .change_batch(ChangeBatch::builder().set_changes(Some(changes)).build().expect("batch"))
            .send()
            .await
            .expect("creating records");
    }
}

/// A running service-dns binary.
pub struct Operator {
    pub child: Child,
    pub metrics: String,
    pub health: String,
    pub log: PathBuf,
}

/// The operator under test: this build's, or `SERVICE_DNS_TEST_BINARY`
/// (another build, e.g. one from before a fix, to see its attack test
/// fail). It has no CRD; it starts with its AWS endpoint ([`Operator`]).
pub const OPERATOR: UnderTest = UnderTest {
    name: "service-dns",
    other_build: "SERVICE_DNS_TEST_BINARY",
    built: env!("CARGO_BIN_EXE_service-dns"),
    crds: Vec::new,
};

impl Operator {
    /// Starts the binary against the test cluster and `aws_endpoint`.
    pub fn start(env: &TestEnv, aws_endpoint: &str, args: &[String]) -> Operator {
        Self::start_with_kubeconfig(&env.kubeconfig, aws_endpoint, args)
    }

    pub fn start_with_kubeconfig(kubeconfig: &Path, aws_endpoint: &str, args: &[String]) -> Operator {
        Self::start_with(kubeconfig, aws_endpoint, args, &[])
    }

    /// With more environment: flags given as their environment variables
    /// (`HANDOVER_GRACE=10s`), which a build that lacks the flag ignores —
    /// so that an attack test runs, and fails, against a build from before
    /// its fix (`SERVICE_DNS_TEST_BINARY`).
    pub fn start_with(kubeconfig: &Path, aws_endpoint: &str, args: &[String], env: &[(&str, &str)]) -> Operator {
        Self::start_limited(kubeconfig, aws_endpoint, args, env, None)
    }

    /// [`Operator::start_with`] inside `limit`'s cgroup (a pod's memory limit).
    pub fn start_limited(
        kubeconfig: &Path,
        aws_endpoint: &str,
        args: &[String],
        env: &[(&str, &str)],
        limit: Option<&flotilla_testenv::memory_limit::MemoryLimit>,
    ) -> Operator {
        let (mp, hp) = (free_port(), free_port());
        let log = std::env::temp_dir().join(format!("service-dns-{}-{mp}.log", std::process::id()));
        let out = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(OPERATOR.binary());
        if let Some(limit) = limit {
            limit.join_on_exec(&mut cmd);
        }
        let child = cmd
            .arg(format!("--metrics-bind-address=127.0.0.1:{mp}"))
            .arg(format!("--health-probe-bind-address=127.0.0.1:{hp}"))
            .arg("--log-format=json")
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,service_dns=debug")
            .env("AWS_ENDPOINT_URL_ROUTE_53", aws_endpoint)
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_REGION", "us-east-1")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_ENDPOINT_URL")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("spawning service-dns");
        Operator {
            child,
            metrics: format!("http://127.0.0.1:{mp}/metrics"),
            health: format!("http://127.0.0.1:{hp}"),
            log,
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, sig: flotilla_testenv::cluster::process::Signal) {
        flotilla_testenv::cluster::process::signal_pid(self.child.id(), sig);
    }

    /// SIGTERM and wait for a clean exit.
    pub async fn stop(&mut self) -> std::process::ExitStatus {
        self.signal(flotilla_testenv::cluster::process::Signal::TERM);
        let child = &mut self.child;
        let r = wait_for("service-dns to exit", T, || {
            let r = child.try_wait().map_err(|e| e.to_string());
            async move { r }
        })
        .await;
        match r {
            Ok(s) => s,
            Err(e) => panic!("{e}\nlogs:\n{}", self.logs()),
        }
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub async fn scrape(&self) -> String {
        match reqwest::Client::new().get(&self.metrics).timeout(Duration::from_secs(5)).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Waits until `n` more syncs succeeded than when called (a few
    /// resyncs later: what has not happened by then will not happen).
    pub async fn wait_more_syncs(&self, n: u32) {
        let series = "controller_runtime_reconcile_total{controller=\"service-dns\",result=\"success\"}";
        let start = self.metric(series).await.unwrap_or(0.0);
        wait_for(&format!("{n} more successful syncs"), T, || async {
            Ok::<_, String>((self.metric(series).await.unwrap_or(0.0) >= start + f64::from(n)).then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }

    pub async fn metric(&self, series: &str) -> Option<f64> {
        metric_value(&self.scrape().await, series)
    }

    pub async fn ready(&self) -> bool {
        matches!(reqwest::Client::new().get(format!("{}/readyz", self.health)).timeout(Duration::from_secs(5)).send().await, Ok(r) if r.status().as_u16() == 200)
    }

    /// Waits until /readyz answers 200 (cache synced, first sync done).
    pub async fn wait_ready(&mut self) {
        let r = wait_for("service-dns to be ready", T, || async { Ok::<_, String>(self.ready().await.then_some(())) })
            .await;
        if let Err(e) = r {
            panic!("{e}\nlogs:\n{}", self.logs());
        }
    }
}

impl flotilla_testenv::memory_limit::Started for Operator {
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        Operator::exited(self)
    }
    fn logs(&self) -> String {
        Operator::logs(self)
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log);
        } else {
            eprintln!("service-dns logs ({}):\n{}", self.log.display(), self.logs());
        }
    }
}

pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')).and_then(|v| v.trim().parse().ok())
    })
}

/// The standard flags for a test zone.
pub fn zone_args(zone: &str, domain: &str) -> Vec<String> {
    vec![format!("--hosted-zone-id={zone}"), format!("--domain-name={domain}"), "--interval=2s".into()]
}

/// A Service (ClusterIP type unless given).
pub fn service(name: &str, type_: &str, annotations: &[(&str, &str)]) -> Service {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "annotations": annotations.iter().map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string()))).collect::<serde_json::Map<_, _>>(),
        },
        "spec": {
            "type": type_,
            "selector": {"app": name},
            "ports": [{"name": "web", "port": 8000, "targetPort": 8000, "protocol": "TCP"}],
        },
    }))
    .expect("service")
}

pub async fn create_service(client: &Client, ns: &str, svc: &Service) -> Service {
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), svc)
        .await
        .expect("creating a Service")
}

pub fn cluster_ip(svc: &Service) -> String {
    svc.spec.as_ref().and_then(|s| s.cluster_ip.clone()).expect("a ClusterIP")
}

/// Creates namespace `name` if missing.
pub async fn ensure_namespace(client: &Client, name: &str) {
    let ns = Namespace { metadata: ObjectMeta { name: Some(name.into()), ..Default::default() }, ..Default::default() };
    match Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

/// Events (events.k8s.io/v1) about Service `name` in `ns` with `reason`.
pub async fn events(client: &Client, ns: &str, name: &str, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason) && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}

/// Waits for an Event with `reason` on Service `name` whose note contains `text`; returns the note.
pub async fn wait_event(client: &Client, ns: &str, name: &str, reason: &str, text: &str) -> String {
    wait_for(&format!("a {reason} Event on {ns}/{name} containing {text:?}"), T, || async {
        let found =
            events(client, ns, name, reason).await.into_iter().filter_map(|e| e.note).find(|n| n.contains(text));
        Ok::<_, String>(found)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

pub fn moto() -> SharedMoto {
    flotilla_testenv::aws::moto::shared()
}

/// The Route53-faithful proxy in front of the shared moto: what every
/// operator under test talks to (its own per test, so faults stay local).
pub fn faithful(moto: &SharedMoto) -> Route53Proxy {
    Route53Proxy::start(&moto.endpoint).expect("the Route53 proxy")
}

/// One test's world: moto behind a proxy of its own, a fresh zone and
/// namespace, and the operator on them (watching that namespace).
pub struct Fixture {
    pub client: Client,
    pub proxy: Route53Proxy,
    /// A client on moto itself: the tests' reads and hand edits.
    pub r53: aws_sdk_route53::Client,
    pub zone: String,
    pub domain: String,
    pub ns: String,
    pub op: Operator,
}

impl Fixture {
    /// `args` come after the zone's and the namespace's (`--interval` is
    /// 2s unless given); the operator is ready when this returns.
    pub async fn start(prefix: &str, args: &[&str]) -> Fixture {
        let env = flotilla_testenv::shared();
        let client = env.client().await;
        let moto = moto();
        let proxy = faithful(&moto);
        let r53 = route53(&moto.endpoint);
        let (zone, domain) = create_zone(&r53, prefix).await;
        let ns = env.namespace(prefix).await.expect("namespace");
        let mut all = vec![
            format!("--hosted-zone-id={zone}"),
            format!("--domain-name={domain}"),
            format!("--watch-namespace={ns}"),
        ];
        if !args.iter().any(|a| a.starts_with("--interval")) {
            all.push("--interval=2s".into());
        }
        all.extend(args.iter().map(|a| a.to_string()));
        let mut op = Operator::start(&env, &proxy.endpoint, &all);
        op.wait_ready().await;
        Fixture { client, proxy, r53, zone, domain, ns, op }
    }

    /// Creates Service `name` (ClusterIP) in the namespace; returns its ClusterIP.
    pub async fn service(&self, name: &str) -> String {
        cluster_ip(&create_service(&self.client, &self.ns, &service(name, "ClusterIP", &[])).await)
    }

    /// `kube-<name>.<domain>`.
    pub fn record(&self, name: &str) -> String {
        format!("kube-{name}.{}", self.domain)
    }
}

/// The Namespace annotation that grants names to a namespace's Services.
pub const ALLOWED_HOSTNAMES: &str = "flotilla.dev/allowed-hostnames";

/// Sets (or, with `None`, removes) namespace `ns`'s hostname grant, as a
/// cluster admin would.
pub async fn grant(client: &Client, ns: &str, value: Option<&str>) {
    let patch = serde_json::json!({"metadata": {"annotations": {ALLOWED_HOSTNAMES: value}}});
    Api::<Namespace>::all(client.clone())
        .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("granting {value:?} to {ns}: {e}"));
}

/// The rules of the chart's ClusterRoles for a cluster-wide install with
/// the defaults (`charts/service-dns/templates/_operator.tpl`; the RBAC
/// proof in `e2e/tests/rbac.rs` shows each of them needed). No
/// `endpointslices` rule: that comes with `publishHeadless=true` only, and
/// an operator without `--publish-headless` never reads them.
pub fn chart_rules() -> Vec<PolicyRule> {
    vec![
        rule(&[""], &["services"], &["get", "list", "watch"]),
        rule(&["events.k8s.io"], &["events"], &["create", "patch"]),
        // `-namespaces`: the hostname grants (metadata only).
        rule(&[""], &["namespaces"], &["list", "watch"]),
        // `-cluster-id`: the derived owner id.
        rule_named(&[""], &["namespaces"], &["kube-system"], &["get"]),
    ]
}

static CHART_KUBECONFIG: tokio::sync::OnceCell<PathBuf> = tokio::sync::OnceCell::const_new();

/// A kubeconfig of ServiceAccount `service-dns-system/service-dns`, bound to
/// [`chart_rules`] only: the operator as the chart runs it.
pub async fn chart_kubeconfig(env: &TestEnv) -> PathBuf {
    CHART_KUBECONFIG
        .get_or_init(|| async {
            let (ns, name) = ("service-dns-system", "flotilla-service-dns-tests");
            ensure_namespace(&env.client().await, ns).await;
            account_with(env, Scope::Cluster, name, ns, "service-dns", chart_rules()).await
        })
        .await
        .clone()
}

/// A kubeconfig of a ServiceAccount with the rules the chart gives a
/// `watchNamespace=<ns>` install: a Role in `ns` (Services, Events), the
/// `-namespaces` ClusterRole narrowed to Namespace `ns` (`resourceNames`),
/// and `-cluster-id`.
pub async fn scoped_chart_kubeconfig(env: &TestEnv, ns: &str) -> PathBuf {
    let name = format!("flotilla-service-dns-{ns}");
    let namespaced = vec![
        rule(&[""], &["services"], &["get", "list", "watch"]),
        rule(&["events.k8s.io"], &["events"], &["create", "patch"]),
    ];
    rbac::grant(env, Scope::Namespace(ns), &name, ns, "service-dns", namespaced).await;
    let cluster = vec![
        rule_named(&[""], &["namespaces"], &[ns], &["list", "watch"]),
        rule_named(&[""], &["namespaces"], &["kube-system"], &["get"]),
    ];
    account_with(env, Scope::Cluster, &name, ns, "service-dns", cluster).await
}
