//! What the cluster holds before the operators start, laid out from the
//! preset: namespaces of ten per team, one Deployment and one Service per
//! namespace (realistic pods: 10 labels, 3 containers), every 100th
//! namespace's pods crash-looping and every 100th (offset 50) Pending, the
//! teams' CopyRules and one platform-wide CopyRule, PodAlerts (one per
//! namespace group, and the platform team's over every namespace),
//! PodDebuggers and LoadTests in healthy namespaces.

use std::time::{Duration, Instant};

use flotilla_testenv::cluster::kwok::{BEHAVIOUR_LABEL, CRASH_LOOP, PENDING};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use kube::api::{ApiResource, DynamicObject, ListParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::{Api, Client, Resource};
use serde_json::{Value, json};

use super::Preset;
use super::cluster::SYSTEM_NS;
use crate::bench::from_json;
use crate::util::say;

/// Label on every tenant namespace (the platform CopyRule's targets).
pub const TENANT_LABEL: &str = "scale.flotilla.dev/tenant";
/// A namespace's team (ten namespaces each): a team CopyRule's targets.
pub const TEAM_LABEL: &str = "scale.flotilla.dev/team";
/// A team's source ConfigMap.
const TEAM_CONFIG_LABEL: &str = "scale.flotilla.dev/team-config";
/// The copies config-copier makes carry it (their rule).
pub const COPY_LABEL: &str = "flotilla.dev/copy-rule";
/// Namespace label the charts' `--target-consent=label` needs.
const ACCEPT_COPIES: &str = "flotilla.dev/accept-copies";

/// Concurrent creates.
pub(super) const CREATES: usize = 32;

/// Where everything goes, computed from the preset.
#[derive(Debug, Clone)]
pub struct Layout {
    pub preset: Preset,
    /// Configs in each team's source namespace that its rule copies: one,
    /// two after the growth.
    pub team_configs: usize,
}

impl Layout {
    pub fn namespace(i: usize) -> String {
        format!("sc-{i:05}")
    }

    fn team(i: usize) -> String {
        format!("t{:04}", i / 10)
    }

    /// Crash-looping (`Some(CRASH_LOOP)`), Pending, or healthy (`None`).
    pub fn behaviour(i: usize) -> Option<&'static str> {
        match i % 100 {
            0 => Some(CRASH_LOOP),
            50 => Some(PENDING),
            _ => None,
        }
    }

    /// Pods of namespace `i`'s Deployment.
    pub fn replicas(&self, i: usize) -> usize {
        let (n, p) = (self.preset.namespaces, self.preset.pods);
        p / n + usize::from(i < p % n)
    }

    /// The layout after the growth phase ([`super::grow::grow`]): half as
    /// many pods and Services again, a second config per team; the
    /// namespaces and rules unchanged.
    pub fn grown(&self) -> Layout {
        let mut preset = self.preset.clone();
        preset.pods += preset.pods / 2;
        preset.services += preset.services / 2;
        Layout { preset, team_configs: self.team_configs + 1 }
    }

    /// The copies config-copier should have made: each team rule's configs
    /// in its team's other namespaces, and the platform rule's CA bundle in
    /// every namespace but its own.
    pub fn expected_copies(&self) -> usize {
        let n = self.preset.namespaces;
        if self.preset.copy_rules == 0 || n == 0 {
            return 0;
        }
        let others = |t: usize| (t * 10..(t * 10 + 10).min(n)).count() - 1;
        self.rule_teams().map(others).sum::<usize>() * self.team_configs + (n - 1)
    }

    pub fn crashing_deployments(&self) -> usize {
        (0..self.preset.namespaces).filter(|i| Self::behaviour(*i) == Some(CRASH_LOOP)).count()
    }

    pub fn pending_pods(&self) -> usize {
        (0..self.preset.namespaces).filter(|i| Self::behaviour(*i) == Some(PENDING)).map(|i| self.replicas(i)).sum()
    }

    /// Every `n`-th namespace (offset `offset`), at most `count` of them.
    fn spread(&self, count: usize, offset: usize) -> Vec<usize> {
        if count == 0 {
            return Vec::new();
        }
        let step = (self.preset.namespaces / count).max(1);
        (0..count).map(|k| k * step + offset % step).filter(|i| *i < self.preset.namespaces).collect()
    }

    /// Namespaces with a PodAlert of their own (every crash-looping and
    /// Pending namespace among them).
    pub fn alert_namespaces(&self) -> Vec<usize> {
        self.spread(self.preset.pod_alerts.saturating_sub(1), 0)
    }

    /// Namespaces with a PodDebugger (healthy ones: offset 5 of 50).
    pub fn debugger_namespaces(&self) -> Vec<usize> {
        self.spread(self.preset.pod_debuggers, 5)
    }

    /// Namespaces with a LoadTest (healthy ones: offset 25).
    pub fn loadtest_namespaces(&self) -> Vec<usize> {
        self.spread(self.preset.load_tests, 25)
    }

    /// Teams with a CopyRule of their own (team 0 has the platform rule).
    pub fn rule_teams(&self) -> std::ops::Range<usize> {
        let teams = self.preset.namespaces.div_ceil(10);
        1..teams.min(self.preset.copy_rules)
    }
}

/// Creates with bounded concurrency; a 409 (left by an earlier attempt) is fine.
pub(super) async fn create_all<K>(api_for: impl Fn(&K) -> Api<K>, objects: Vec<K>, what: &str) -> anyhow::Result<()>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let started = Instant::now();
    let n = objects.len();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(objects.into_iter().map(|o| {
        let api = api_for(&o);
        async move {
            match api.create(&PostParams::default(), &o).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(anyhow::Error::new(e).context(format!("creating {:?}", o.meta().name))),
            }
        }
    }))
    .buffer_unordered(CREATES)
    .collect()
    .await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    eprintln!("    {n} {what} in {:.1?}", started.elapsed());
    Ok(())
}

pub(super) fn namespaced<K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>>(
    client: &Client,
) -> impl Fn(&K) -> Api<K> {
    let client = client.clone();
    move |o: &K| Api::namespaced(client.clone(), o.meta().namespace.as_deref().unwrap_or("default"))
}

fn dynamic(client: &Client, ar: &ApiResource) -> impl Fn(&DynamicObject) -> Api<DynamicObject> {
    let (client, ar) = (client.clone(), ar.clone());
    move |o: &DynamicObject| {
        Api::namespaced_with(client.clone(), o.metadata.namespace.as_deref().unwrap_or("default"), &ar)
    }
}

/// A Deployment whose pods look like a real service's: 10 labels (with the
/// pod-template-hash the ReplicaSet adds), 3 containers.
///
/// Its pods name their node (one node per namespace, round the nodes): the
/// bench measures the operators, and on two cores kube-scheduler placing
/// 50,000 pods on 1,000 nodes took most of a CPU.
fn deployment(
    ns: &str,
    team: &str,
    node: &str,
    replicas: usize,
    behaviour: Option<&str>,
) -> anyhow::Result<Deployment> {
    let mut labels = json!({
        "app": "app", "team": team, "tier": "backend", "version": "v1.4.2", "component": "api",
        "environment": "production", "region": "eu-west-1",
        "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/managed-by": "helm"
    });
    if let Some(b) = behaviour {
        labels[BEHAVIOUR_LABEL] = b.into();
    }
    let container = |name: &str, image: &str, port: u16| {
        json!({"name": name, "image": image, "ports": [{"containerPort": port}],
               "env": [{"name": "LOG_LEVEL", "value": "info"}],
               "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}})
    };
    from_json(json!({
        "metadata": {"name": "app", "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "app"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeName": node,
                    "containers": [
                        container("app", "registry.example/shop/api:1.4.2", 8080),
                        container("metrics", "registry.example/shop/exporter:0.9", 9100),
                        container("proxy", "registry.example/mesh/proxy:1.22", 15001),
                    ],
                    "terminationGracePeriodSeconds": 30
                }
            }
        }
    }))
}

fn service(ns: &str, name: &str) -> anyhow::Result<Service> {
    from_json(json!({
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "app"}},
        "spec": {"selector": {"app": "app"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    }))
}

/// The `k`-th Service: `app` in every namespace, then `app-1`, `app-2`, ...
pub(super) fn service_number(layout: &Layout, k: usize) -> anyhow::Result<Service> {
    let n = layout.preset.namespaces;
    let name = if k < n { "app".to_string() } else { format!("app-{}", k / n) };
    service(&Layout::namespace(k % n), &name)
}

/// Team `t`'s config ConfigMap `name`, in the team's first namespace: what
/// its CopyRule copies into the team's namespaces.
pub(super) fn team_config(t: usize, name: &str) -> anyhow::Result<ConfigMap> {
    let (ns, team) = (Layout::namespace(t * 10), Layout::team(t * 10));
    from_json(json!({
        "metadata": {"name": name, "namespace": ns, "labels": {TEAM_CONFIG_LABEL: "true"}},
        "data": {"team": team, "log-level": "info", "feature-flags": "checkout-v2,search-v3", "owner": format!("{team}@example.com")}
    }))
}

fn dyn_object(ar: &ApiResource, ns: &str, name: &str, spec: Value) -> anyhow::Result<DynamicObject> {
    from_json(json!({
        "apiVersion": ar.api_version, "kind": ar.kind,
        "metadata": {"name": name, "namespace": ns}, "spec": spec
    }))
}

/// Creates everything, then waits until every pod is bound and has the
/// status its behaviour gives it.
pub async fn populate(client: &Client, layout: &Layout) -> anyhow::Result<()> {
    let p = &layout.preset;
    say(&format!(
        "populating: {} namespaces, {} pods, {} Services, {} CopyRules, {} PodAlerts, {} PodDebuggers, {} LoadTests",
        p.namespaces, p.pods, p.services, p.copy_rules, p.pod_alerts, p.pod_debuggers, p.load_tests
    ));
    let namespaces: Vec<Namespace> = (0..p.namespaces)
        .map(|i| {
            from_json(json!({"metadata": {"name": Layout::namespace(i), "labels": {
                TENANT_LABEL: "true", TEAM_LABEL: Layout::team(i), ACCEPT_COPIES: "true"
            }}}))
        })
        .collect::<anyhow::Result<_>>()?;
    let ns_api = Api::<Namespace>::all(client.clone());
    create_all(move |_| ns_api.clone(), namespaces, "namespaces").await?;

    // Services before the pods: the endpoint-slice controller then follows
    // the pods as they come.
    let services = (0..p.services).map(|k| service_number(layout, k)).collect::<anyhow::Result<Vec<_>>>()?;
    create_all(namespaced(client), services, "Services").await?;

    let deployments: Vec<Deployment> = (0..p.namespaces)
        .map(|i| {
            let node = super::cluster::node_name(i % p.nodes.max(1));
            deployment(&Layout::namespace(i), &Layout::team(i), &node, layout.replicas(i), Layout::behaviour(i))
        })
        .collect::<anyhow::Result<_>>()?;
    create_all(namespaced(client), deployments, "Deployments").await?;

    // config-copier: each team's config, and the platform's 1 KiB CA bundle.
    let mut sources = Vec::new();
    let rule_ar = ApiResource::erase::<config_copier::crd::CopyRule>(&());
    let mut rules = Vec::new();
    for t in layout.rule_teams() {
        let (ns, team) = (Layout::namespace(t * 10), Layout::team(t * 10));
        sources.push(team_config(t, "team-config")?);
        rules.push(dyn_object(
            &rule_ar,
            &ns,
            "team-config",
            json!({
                "kind": "ConfigMap",
                "selector": {"matchLabels": {TEAM_CONFIG_LABEL: "true"}},
                "namespaces": {"selector": {"matchLabels": {TEAM_LABEL: team}}}
            }),
        )?);
    }
    if p.copy_rules > 0 {
        let ns = Layout::namespace(0);
        sources.push(from_json::<ConfigMap>(json!({
            "metadata": {"name": "platform-ca", "namespace": ns},
            "data": {"ca.crt": "C".repeat(1024)}
        }))?);
        rules.push(dyn_object(
            &rule_ar,
            &ns,
            "platform-ca",
            json!({
                "kind": "ConfigMap",
                "names": ["platform-ca"],
                "namespaces": {"selector": {"matchLabels": {TENANT_LABEL: "true"}}}
            }),
        )?);
    }
    create_all(namespaced(client), sources, "source ConfigMaps").await?;
    create_all(dynamic(client, &rule_ar), rules, "CopyRules").await?;

    // pod-alert: a PodAlert per namespace group, and the platform team's
    // over every namespace (in the operator's own namespace, which the
    // charts' --cluster-scope-namespaces allows).
    let alert_ar = ApiResource::erase::<pod_alert::crd::PodAlert>(&());
    let rules_spec = json!({"checkRunningPods": true, "restartThreshold": 3});
    let mut alerts = Vec::new();
    for i in layout.alert_namespaces() {
        alerts.push(dyn_object(&alert_ar, &Layout::namespace(i), "team", json!({"alerts": rules_spec}))?);
    }
    if p.pod_alerts > 0 {
        alerts.push(dyn_object(
            &alert_ar,
            SYSTEM_NS,
            "platform",
            json!({"alerts": rules_spec, "allNamespaces": true}),
        )?);
    }
    create_all(dynamic(client, &alert_ar), alerts, "PodAlerts").await?;

    let debugger_ar = ApiResource::erase::<pod_debugger::crd::PodDebugger>(&());
    let debuggers: Vec<DynamicObject> = layout
        .debugger_namespaces()
        .into_iter()
        .map(|i| {
            dyn_object(
                &debugger_ar,
                &Layout::namespace(i),
                "debug",
                json!({
                    "selector": {"matchLabels": {"app": "app"}}, "image": "busybox:1.37"
                }),
            )
        })
        .collect::<anyhow::Result<_>>()?;
    create_all(dynamic(client, &debugger_ar), debuggers, "PodDebuggers").await?;

    let loadtest_ar = ApiResource::erase::<load_tester::crd::LoadTest>(&());
    let tests: Vec<DynamicObject> = layout
        .loadtest_namespaces()
        .into_iter()
        .map(|i| {
            dyn_object(
                &loadtest_ar,
                &Layout::namespace(i),
                "smoke",
                json!({
                    "replicas": 2, "cleanup": "Never", "test": {"serviceName": "app", "repeat": 100}
                }),
            )
        })
        .collect::<anyhow::Result<_>>()?;
    create_all(dynamic(client, &loadtest_ar), tests, "LoadTests").await?;

    wait_for_pods(client, layout).await
}

/// Waits until the layout's pods are all made, bound, and have the
/// status their behaviour gives them (kwok).
pub(super) async fn wait_for_pods(client: &Client, layout: &Layout) -> anyhow::Result<()> {
    let p = &layout.preset;
    say(&format!("waiting for {} pods: made, bound and started by kwok", p.pods));
    let started = Instant::now();
    let pods: Api<Pod> = Api::all(client.clone());
    let want_running = p.pods - layout.pending_pods();
    let limit = Duration::from_secs(3600);
    let mut last = Instant::now();
    loop {
        // Crash-looping pods are Running too (their containers restart).
        let counted = async {
            let total = count(&pods, &ListParams::default().labels("app=app")).await?;
            let running = count(&pods, &ListParams::default().labels("app=app").fields("status.phase=Running")).await?;
            anyhow::Ok((total, running))
        };
        match counted.await {
            Ok((total, running)) if total >= p.pods && running >= want_running => break,
            Ok((total, running)) if last.elapsed() > Duration::from_secs(30) => {
                last = Instant::now();
                eprintln!("    {total} pods, {running} Running after {:.0?}", started.elapsed());
            }
            Ok(_) => {}
            Err(e) => eprintln!("    (counting pods: {e:#})"),
        }
        if started.elapsed() > limit {
            anyhow::bail!("the pods were not all made, bound and started within {limit:?}");
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    eprintln!("    {} pods in place in {:.1?}", p.pods, started.elapsed());
    Ok(())
}

/// Objects a list matches, read in pages of 5,000 (metadata only).
pub async fn count<K>(api: &Api<K>, lp: &ListParams) -> anyhow::Result<usize>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut lp = lp.clone().limit(5000);
    let mut n = 0;
    loop {
        let page: kube::core::ObjectList<PartialObjectMeta<K>> = api.list_metadata(&lp).await?;
        n += page.items.len();
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => return Ok(n),
        }
    }
}

/// Names (`namespace/name`) a list matches, in pages of 5,000.
pub async fn names<K>(api: &Api<K>, lp: &ListParams) -> anyhow::Result<Vec<(String, String)>>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut lp = lp.clone().limit(5000);
    let mut out = Vec::new();
    loop {
        let page: kube::core::ObjectList<PartialObjectMeta<K>> = api.list_metadata(&lp).await?;
        out.extend(
            page.items
                .into_iter()
                .map(|o| (o.metadata.namespace.unwrap_or_default(), o.metadata.name.unwrap_or_default())),
        );
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => return Ok(out),
        }
    }
}
