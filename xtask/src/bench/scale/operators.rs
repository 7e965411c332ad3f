//! Each operator as its chart runs it: the release binary with the flags and
//! environment `helm template` renders for the chart's defaults, under the
//! chart's own ServiceAccount and RBAC (applied from the same render), in
//! the release namespace. Only what a pod gives differs: the metrics and
//! health ports are free loopback ports, and the ServiceAccount's token is
//! in a kubeconfig.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_testenv::ControlPlane;
use flotilla_testenv::cluster::kubeconfig::{self, Credentials};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::Value;

use super::cluster::SYSTEM_NS;
use super::populate::{COPY_LABEL, Layout, count};
use crate::bench::Killed;

/// The operators, in the order they start.
pub const OPERATORS: [&str; 5] = ["service-dns", "config-copier", "pod-alert", "pod-debugger", "load-tester"];

/// The Helm release name.
const RELEASE: &str = "flotilla";

/// What the chart runs: flags, environment (literal values, and the pod's
/// own name and namespace), ServiceAccount and memory limit.
#[derive(Debug, Clone)]
pub struct ChartRun {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub service_account: String,
    pub memory_limit: String,
}

/// Renders operator `op`'s chart with `values` (a values file's content,
/// written into `dir`), applies its ServiceAccount, RBAC and admission
/// policy objects, and
/// returns how it runs the operator.
pub async fn install_chart(client: &Client, op: &str, values: &Value, dir: &Path) -> anyhow::Result<ChartRun> {
    flotilla_e2e::build_chart_dependencies()?;
    let chart = flotilla_e2e::charts_dir().join(op).display().to_string();
    let file = dir.join(format!("values-{op}.yaml"));
    std::fs::write(&file, serde_saphyr::to_string(values)?)?;
    let file = file.display().to_string();
    let args = ["template", RELEASE, chart.as_str(), "--namespace", SYSTEM_NS, "--values", file.as_str()];
    let rendered = flotilla_e2e::helm_ok(None, &args)?;
    let mut run = None;
    for doc in flotilla_e2e::yaml_documents(&rendered)? {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let plural = match kind.as_str() {
            "ServiceAccount" => "serviceaccounts",
            "ClusterRole" => "clusterroles",
            "ClusterRoleBinding" => "clusterrolebindings",
            "Role" => "roles",
            "RoleBinding" => "rolebindings",
            // The operators refuse what these guard while they are missing
            // (--require-admission-policy), as in a real install.
            "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
            "ValidatingAdmissionPolicyBinding" => "validatingadmissionpolicybindings",
            "Deployment" => {
                run = Some(chart_run(&doc)?);
                continue;
            }
            _ => continue,
        };
        let api_version = doc["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, &kind), plural);
        let obj: DynamicObject = serde_json::from_value(doc.clone())?;
        let name = obj.metadata.name.clone().context("metadata.name")?;
        let api: Api<DynamicObject> = match obj.metadata.namespace.as_deref() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None if kind.starts_with("Cluster") || kind.starts_with("ValidatingAdmissionPolicy") => {
                Api::all_with(client.clone(), &ar)
            }
            None => Api::namespaced_with(client.clone(), SYSTEM_NS, &ar),
        };
        api.patch(&name, &PatchParams::apply("scale-bench").force(), &Patch::Apply(&obj))
            .await
            .with_context(|| format!("applying {kind} {name} of the {op} chart"))?;
    }
    run.with_context(|| format!("the {op} chart rendered no Deployment"))
}

fn chart_run(deployment: &Value) -> anyhow::Result<ChartRun> {
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let args = container["args"]
        .as_array()
        .context("the Deployment's args")?
        .iter()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let mut env = Vec::new();
    for e in container["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap_or_default().to_string();
        if let Some(v) = e["value"].as_str() {
            env.push((name, v.to_string()));
        } else if let Some(path) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            let v = match path {
                "metadata.name" => format!("{}-scale-0", deployment["metadata"]["name"].as_str().unwrap_or("op")),
                "metadata.namespace" => SYSTEM_NS.to_string(),
                other => bail!("the chart reads {other} from the pod: not known to the benchmark"),
            };
            env.push((name, v));
        }
    }
    Ok(ChartRun {
        args,
        env,
        service_account: pod["serviceAccountName"].as_str().context("serviceAccountName")?.to_string(),
        memory_limit: container["resources"]["limits"]["memory"].as_str().unwrap_or("none").to_string(),
    })
}

/// A kubeconfig with a day-long token of ServiceAccount `SYSTEM_NS/sa`.
pub async fn kubeconfig_for(client: &Client, cp: &ControlPlane, sa: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), SYSTEM_NS);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec { expiration_seconds: Some(86_400), ..Default::default() }),
        ..Default::default()
    };
    let response: TokenRequest = api.create_subresource("token", sa, &PostParams::default(), &request).await?;
    let token = response.status.and_then(|s| s.token).context("a token")?;
    let yaml = kubeconfig::render(sa, &cp.server, &cp.pki.ca_cert_pem, Credentials::Token(&token));
    let path = dir.join(format!("kubeconfig-{sa}"));
    std::fs::write(&path, yaml)?;
    Ok(path)
}

/// The ServiceAccount's user name, as the audit log has it.
pub fn user_of(sa: &str) -> String {
    format!("system:serviceaccount:{SYSTEM_NS}:{sa}")
}

/// An operator process; killed when dropped.
pub struct Running {
    pub name: String,
    pub user: String,
    pub log: PathBuf,
    pub started: Instant,
    child: Killed,
    metrics: String,
    health: String,
}

impl Running {
    /// Starts `binary` as `run` says, with `kubeconfig` and `extra_env`.
    pub fn start(
        name: &str,
        binary: &Path,
        run: &ChartRun,
        kubeconfig: &Path,
        extra_env: &[(String, String)],
        log: &Path,
    ) -> anyhow::Result<Self> {
        let (mp, hp) =
            (flotilla_testenv::cluster::process::free_port()?, flotilla_testenv::cluster::process::free_port()?);
        let args = run.args.iter().map(|a| {
            if a.starts_with("--metrics-bind-address=") {
                format!("--metrics-bind-address=127.0.0.1:{mp}")
            } else if a.starts_with("--health-probe-bind-address=") {
                format!("--health-probe-bind-address=127.0.0.1:{hp}")
            } else {
                a.clone()
            }
        });
        let child = Command::new(binary)
            .args(args)
            .envs(run.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(extra_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).with_context(|| log.display().to_string())?)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Self {
            name: name.to_string(),
            user: user_of(&run.service_account),
            log: log.to_path_buf(),
            started: Instant::now(),
            child: Killed(child),
            metrics: format!("127.0.0.1:{mp}"),
            health: format!("127.0.0.1:{hp}"),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// Fails when the process has exited (a bad flag, a panic).
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Ok(Some(status)) = self.child.0.try_wait() {
            bail!(
                "{} exited ({status}); last lines of {}:\n{}",
                self.name,
                self.log.display(),
                flotilla_testenv::cluster::process::log_tail(&self.log, 20)
            );
        }
        Ok(())
    }

    /// `/readyz` answers 200.
    pub fn ready(&self) -> bool {
        http_get(&self.health, "/readyz").is_ok_and(|(status, _)| status == 200)
    }

    /// The sum of a metric's series (`name` may carry the start of a label
    /// set to pick some).
    pub fn metric(&self, name: &str) -> f64 {
        let Ok((_, body)) = http_get(&self.metrics, "/metrics") else { return f64::NAN };
        body.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ', ',', '}']))
            .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            .sum::<f64>()
            + 0.0
    }

    /// SIGTERM, then SIGKILL after 15 s.
    pub fn stop(self) {
        flotilla_testenv::cluster::process::terminate_pid(self.pid(), Duration::from_secs(15));
    }
}

fn http_get(addr: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()))
}

/// An operator's own view of "done", and what it holds.
pub struct Goal {
    /// What "converged" means, for the table.
    pub meaning: &'static str,
    /// The objects whose number its memory follows, for the per-object slope.
    pub objects: &'static str,
}

pub fn goal(op: &str) -> Goal {
    match op {
        "service-dns" => Goal { meaning: "every Service's record managed", objects: "Services" },
        "config-copier" => Goal { meaning: "every CopyRule Ready", objects: "copies" },
        "pod-alert" => Goal { meaning: "every PodAlert evaluated, every crash loop an incident", objects: "pods" },
        "pod-debugger" => Goal { meaning: "every matched pod has its debug container", objects: "pods" },
        _ => Goal { meaning: "every LoadTest Executing or ended", objects: "LoadTests + runner pods" },
    }
}

fn crs<K: kube::Resource<DynamicType = ()>>(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &ApiResource::erase::<K>(&()))
}

fn observed(o: &DynamicObject) -> bool {
    o.data["status"]["observedGeneration"].as_i64().is_some()
        && o.data["status"]["observedGeneration"].as_i64() == o.metadata.generation
}

fn condition_true(o: &DynamicObject, t: &str) -> bool {
    o.data["status"]["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == t && c["status"] == "True"))
}

/// Whether `op` has done all there is to do. `Err` explains what is left
/// (printed when the wait gives up).
pub async fn converged(op: &Running, client: &Client, layout: &Layout) -> anyhow::Result<bool> {
    match op.name.as_str() {
        "service-dns" => {
            let services = count(&Api::<Service>::all(client.clone()), &ListParams::default()).await?;
            let managed = op.metric("flotilla_service_dns_managed_records");
            // NaN (no metrics yet) is not converged either.
            if managed.is_nan() || managed < services as f64 {
                bail!("{managed} of {services} records managed");
            }
            Ok(true)
        }
        "config-copier" => {
            let rules = crs::<config_copier::crd::CopyRule>(client).list(&ListParams::default()).await?.items;
            let waiting = rules.iter().filter(|r| !(observed(r) && condition_true(r, "Ready"))).count();
            // Ready says the rule's last reconcile went well; after the
            // growth (a new config per team) it was already Ready: the
            // copies themselves say whether the new ones are in place.
            let copies =
                count(&Api::<ConfigMap>::all(client.clone()), &ListParams::default().labels(COPY_LABEL)).await?;
            if copies < layout.expected_copies() {
                bail!("{copies} of {} copies in place", layout.expected_copies());
            }
            if waiting > 0 || rules.len() < layout.preset.copy_rules.min(layout.rule_teams().len() + 1) {
                let example = rules.iter().find(|r| !(observed(r) && condition_true(r, "Ready")));
                bail!(
                    "{waiting} of {} CopyRules not Ready (e.g. {:?}: {})",
                    rules.len(),
                    example.and_then(|r| r.metadata.namespace.clone()),
                    example.map(|r| r.data["status"]["conditions"].to_string()).unwrap_or_default()
                );
            }
            Ok(true)
        }
        "pod-alert" => {
            let alerts = crs::<pod_alert::crd::PodAlert>(client).list(&ListParams::default()).await?.items;
            let waiting = alerts.iter().filter(|a| !observed(a)).count();
            let platform = alerts.iter().find(|a| a.metadata.namespace.as_deref() == Some(SYSTEM_NS));
            let incidents = platform
                .map(|a| {
                    a.data["status"]["firing"].as_i64().unwrap_or(0) + a.data["status"]["pending"].as_i64().unwrap_or(0)
                })
                .unwrap_or(0);
            let want = layout.crashing_deployments() as i64;
            if waiting > 0 || incidents < want {
                bail!(
                    "{waiting} of {} PodAlerts not evaluated; {incidents} of {want} crash loops an incident",
                    alerts.len()
                );
            }
            Ok(true)
        }
        "pod-debugger" => {
            let rules = crs::<pod_debugger::crd::PodDebugger>(client).list(&ListParams::default()).await?.items;
            let (mut matched, mut injected) = (0, 0);
            for r in &rules {
                matched += r.data["status"]["matched"].as_i64().unwrap_or(0);
                injected += r.data["status"]["injected"].as_i64().unwrap_or(0);
            }
            let waiting = rules.iter().filter(|r| !observed(r)).count();
            if waiting > 0 || matched == 0 || injected < matched {
                bail!(
                    "{waiting} of {} PodDebuggers not reconciled; {injected} of {matched} pods injected",
                    rules.len()
                );
            }
            Ok(true)
        }
        _ => {
            let tests = crs::<load_tester::crd::LoadTest>(client).list(&ListParams::default()).await?.items;
            let state = |t: &DynamicObject| t.data["status"]["state"].as_str().unwrap_or("").to_string();
            // Settled: running, or ended (a run that ended during the churn
            // is not started again; Failed counts, with its reason in status).
            let settled =
                tests.iter().filter(|t| matches!(state(t).as_str(), "Executing" | "Finished" | "Failed")).count();
            if settled < tests.len() || tests.len() < layout.loadtest_namespaces().len() {
                bail!("{settled} of {} LoadTests Executing or ended", tests.len());
            }
            Ok(true)
        }
    }
}

/// How many of the objects [`goal`] names exist now.
/// The objects `r` holds: pod-alert and pod-debugger say how many pods
/// their cache holds (only namespaces a rule reads); the others' are counted.
pub async fn objects_held(r: &Running, client: &Client, layout: &Layout) -> anyhow::Result<usize> {
    Ok(match r.name.as_str() {
        "service-dns" => count(&Api::<Service>::all(client.clone()), &ListParams::default()).await?,
        "config-copier" => {
            count(&Api::<ConfigMap>::all(client.clone()), &ListParams::default().labels(COPY_LABEL)).await?
        }
        "pod-alert" => r.metric("flotilla_pod_alert_pods_cached") as usize,
        "pod-debugger" => r.metric("flotilla_pod_debugger_pods_cached") as usize,
        _ => {
            let tests = layout.loadtest_namespaces().len();
            let runners = count(
                &Api::<Pod>::all(client.clone()),
                &ListParams::default().labels(load_tester::runner::LOADTEST_LABEL),
            )
            .await?;
            tests + runners
        }
    })
}
