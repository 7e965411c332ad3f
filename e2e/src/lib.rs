//! Helpers for the packaging checks: where things are, helm, the operators'
//! binaries, and running an operator process.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use anyhow::{Context, bail};
use flotilla_testenv::Assets;

pub mod access;
pub mod observability;
pub mod release;

/// The umbrella chart.
pub const UMBRELLA: &str = "flotilla";

pub fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

pub fn charts_dir() -> PathBuf {
    root().join("charts")
}

/// Every crate under `operators/`, sorted.
pub fn operators() -> anyhow::Result<Vec<String>> {
    let mut ops = Vec::new();
    for entry in std::fs::read_dir(root().join("operators")).context("reading operators/")? {
        let entry = entry?;
        if entry.path().join("Cargo.toml").is_file() {
            ops.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    ops.sort();
    Ok(ops)
}

/// What a cluster of the tests' version answers about itself, for helm's
/// client-only renders: its Kubernetes version (helm assumes 1.20, which
/// the charts' `kubeVersion` refuses) and, for `template`, the
/// ValidatingAdmissionPolicy API (which the charts' default
/// `admissionPolicy.enabled` requires). `lint` takes the version only.
pub fn as_the_test_cluster(subcommand: &str) -> Vec<String> {
    let mut args = vec!["--kube-version".to_string(), flotilla_testenv::build::versions::kubernetes_version()];
    if subcommand == "template" {
        args.extend(["--api-versions".into(), "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy".into()]);
    }
    args
}

/// Runs helm (from `cargo xtask setup`) with `KUBECONFIG`, returning its
/// output. `template` and `lint`, which ask no cluster, answer as the test
/// cluster would ([`as_the_test_cluster`]) unless the call says
/// `--kube-version` or `--api-versions` itself (a test of what an older
/// cluster gets).
pub fn helm(kubeconfig: Option<&Path>, args: &[&str]) -> anyhow::Result<Output> {
    let bin = Assets::helm()?;
    let mut cmd = Command::new(bin);
    cmd.args(args);
    if let Some(sub @ ("template" | "lint")) = args.first().copied()
        && !args.iter().any(|a| a.starts_with("--kube-version") || a.starts_with("--api-versions"))
    {
        cmd.args(as_the_test_cluster(sub));
    }
    if let Some(k) = kubeconfig {
        cmd.env("KUBECONFIG", k);
    }
    // helm's caches and config go to a temp dir, not the user's home.
    let home = std::env::temp_dir().join("flotilla-helm-home");
    cmd.env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    cmd.output().with_context(|| format!("running helm {args:?}"))
}

/// helm, failing with its stderr when it fails.
pub fn helm_ok(kubeconfig: Option<&Path>, args: &[&str]) -> anyhow::Result<String> {
    let out = helm(kubeconfig, args)?;
    if !out.status.success() {
        bail!(
            "helm {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The CRD files an operator's chart renders (`charts/<op>/files/crds/`,
/// see `cargo xtask crds`); empty for a chart without CRDs.
pub fn chart_crd_files(op: &str) -> anyhow::Result<Vec<PathBuf>> {
    let dir = charts_dir().join(op).join("files").join("crds");
    let Ok(entries) = std::fs::read_dir(&dir) else { return Ok(Vec::new()) };
    let mut files = Vec::new();
    for e in entries {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "yaml") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// `--set` arguments that keep the CRDs out of a release of `chart` (an
/// operator chart or the umbrella): for clusters where they are applied
/// otherwise (the tests' `apply_crds`), or owned by another release.
pub fn without_crds(chart: &str) -> anyhow::Result<Vec<String>> {
    let mut args = Vec::new();
    for op in operators()? {
        if (chart == UMBRELLA || chart == op) && !chart_crd_files(&op)?.is_empty() {
            let key = if chart == UMBRELLA { format!("{op}.crds.enabled=false") } else { "crds.enabled=false".into() };
            args.extend(["--set".to_string(), key]);
        }
    }
    Ok(args)
}

/// `helm dependency build` for every operator chart (library inside), then
/// the umbrella. Once per process; `cargo xtask charts` runs the same.
pub fn build_chart_dependencies() -> anyhow::Result<()> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    // `cargo xtask test` builds them before the tests, which run side by
    // side: a second `helm dependency build` would rewrite the archives
    // another test binary is reading.
    if std::env::var_os("FLOTILLA_CHART_DEPENDENCIES_BUILT").is_some() {
        return Ok(());
    }
    DONE.get_or_init(|| {
        let mut charts = operators().map_err(|e| e.to_string())?;
        charts.push(UMBRELLA.to_string());
        for chart in charts {
            let dir = charts_dir().join(&chart).display().to_string();
            helm_ok(None, &["dependency", "build", "--skip-refresh", &dir]).map_err(|e| e.to_string())?;
        }
        Ok(())
    })
    .clone()
    .map_err(anyhow::Error::msg)
}

/// `--set` values every chart needs to render a working configuration
/// (service-dns: a hosted zone; the umbrella: service-dns's, once enabled).
pub fn required_values(chart: &str) -> Vec<&'static str> {
    match chart {
        "service-dns" => vec!["--set", "route53.hostedZoneId=Z0123456789ABC"],
        UMBRELLA => vec!["--set", "service-dns.enabled=true", "--set", "service-dns.route53.domainName=example.com"],
        _ => vec![],
    }
}

/// Parses multi-document YAML (e.g. `helm template` output) into values.
pub fn yaml_documents(text: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_str_multiple(text)?;
    Ok(docs.into_iter().filter(|v| !v.is_null()).collect())
}

/// The debug binary of an operator, built by `cargo test --workspace`.
pub fn operator_binary(op: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
    let bin = dir.join(op);
    if !bin.is_file() {
        bail!("{} is missing: build it with `cargo build -p {op}` (cargo test --workspace builds it)", bin.display());
    }
    Ok(bin)
}

pub use flotilla_testenv::cluster::process::OperatorProcess;

/// Starts operator `op`'s debug binary (see [`operator_binary`]).
pub fn start_operator(
    op: &str,
    kubeconfig: &Path,
    args: &[String],
    env: &[(&str, &str)],
) -> anyhow::Result<OperatorProcess> {
    OperatorProcess::start(&operator_binary(op)?, kubeconfig, args, env).with_context(|| format!("starting {op}"))
}

/// Installs every generated CRD (`crds/*.yaml`) and waits until each is
/// established.
pub async fn apply_crds(client: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let mut crds = Vec::new();
    for entry in std::fs::read_dir(root().join("crds"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let crd: CustomResourceDefinition = serde_saphyr::from_str(&std::fs::read_to_string(&path)?)?;
            crds.push(crd);
        }
    }
    flotilla_testenv::harness::install_crds(client, &crds).await
}

/// The image reference operator `op`'s chart renders by default:
/// `<image.registry>/<image.repository>:<appVersion>`. `cargo xtask images`
/// names the local image exactly so; a test checks `helm template` agrees.
pub fn chart_image_reference(op: &str) -> anyhow::Result<String> {
    let dir = charts_dir().join(op);
    let values: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("values.yaml")).context("reading values.yaml")?)?;
    let chart: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("Chart.yaml")).context("reading Chart.yaml")?)?;
    let registry = values["image"]["registry"].as_str().unwrap_or_default();
    let repository = values["image"]["repository"].as_str().unwrap_or_default();
    let tag = match values["image"]["tag"].as_str().filter(|t| !t.is_empty()) {
        Some(t) => t.to_string(),
        None => chart["appVersion"].as_str().unwrap_or_default().to_string(),
    };
    if registry.is_empty() || repository.is_empty() || tag.is_empty() {
        bail!("charts/{op}: image.registry, image.repository and appVersion must be set");
    }
    Ok(format!("{registry}/{repository}:{tag}"))
}

/// The runners' image reference the load-tester chart renders by default
/// (`--loadgen-image`): `<loadgen.image.registry>/<loadgen.image.repository>:<appVersion>`.
pub fn loadgen_image_reference() -> anyhow::Result<String> {
    let dir = charts_dir().join("load-tester");
    let values: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("values.yaml")).context("reading values.yaml")?)?;
    let chart: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("Chart.yaml")).context("reading Chart.yaml")?)?;
    let image = &values["loadgen"]["image"];
    let (registry, repository) =
        (image["registry"].as_str().unwrap_or_default(), image["repository"].as_str().unwrap_or_default());
    let tag = match image["tag"].as_str().filter(|t| !t.is_empty()) {
        Some(t) => t.to_string(),
        None => chart["appVersion"].as_str().unwrap_or_default().to_string(),
    };
    if registry.is_empty() || repository.is_empty() || tag.is_empty() {
        bail!("charts/load-tester: loadgen.image.registry, loadgen.image.repository and appVersion must be set");
    }
    Ok(format!("{registry}/{repository}:{tag}"))
}

/// A real Prometheus (Debian's package) scraping static targets on this
/// machine, queried through its HTTP API. Killed (its data removed) on drop.
pub struct Prometheus {
    child: std::process::Child,
    dir: PathBuf,
    pub port: u16,
}

impl Prometheus {
    /// Starts Prometheus with one scrape job per `(job, targets)`, scraping
    /// every second.
    pub fn start(jobs: &[(&str, Vec<String>)]) -> anyhow::Result<Self> {
        use std::fmt::Write as _;
        let bin = flotilla_testenv::build::tools::prometheus()?;
        let port = flotilla_testenv::cluster::process::free_port()?;
        let dir = std::env::temp_dir().join(format!("flotilla-prometheus-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut config = String::from("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n");
        for (job, targets) in jobs {
            let list = targets.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(", ");
            let _ = write!(config, "  - job_name: {job}\n    static_configs:\n      - targets: [{list}]\n");
        }
        std::fs::write(dir.join("prometheus.yml"), config)?;
        let child = Command::new(bin)
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log"))?)
            .spawn()
            .context("starting prometheus")?;
        Ok(Self { child, dir, port })
    }

    /// An instant query's result vector.
    pub async fn query(&self, q: &str) -> Result<Vec<serde_json::Value>, String> {
        let url = format!("http://127.0.0.1:{}/api/v1/query", self.port);
        let r = reqwest::Client::new()
            .get(url)
            .query(&[("query", q)])
            .timeout(std::time::Duration::from_secs(5))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let body: serde_json::Value = r.json().await.map_err(|e| e.to_string())?;
        Ok(body["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every object a Helm release made (by `app.kubernetes.io/instance`), as
/// `Kind/name`: what must be gone after `helm uninstall`.
pub async fn objects_of_release(client: &kube::Client, ns: &str, release: &str) -> anyhow::Result<Vec<String>> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Service, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use kube::Api;
    use kube::api::ListParams;
    let lp = ListParams::default().labels(&format!("app.kubernetes.io/instance={release}"));
    let mut found = Vec::new();
    macro_rules! collect {
        ($api:expr, $kind:literal) => {
            for o in $api.list(&lp).await?.items {
                found.push(format!("{}/{}", $kind, o.metadata.name.unwrap_or_default()));
            }
        };
    }
    collect!(Api::<Deployment>::namespaced(client.clone(), ns), "Deployment");
    collect!(Api::<ServiceAccount>::namespaced(client.clone(), ns), "ServiceAccount");
    collect!(Api::<Service>::namespaced(client.clone(), ns), "Service");
    collect!(Api::<Role>::namespaced(client.clone(), ns), "Role");
    collect!(Api::<RoleBinding>::namespaced(client.clone(), ns), "RoleBinding");
    collect!(Api::<ClusterRole>::all(client.clone()), "ClusterRole");
    collect!(Api::<ClusterRoleBinding>::all(client.clone()), "ClusterRoleBinding");
    Ok(found)
}

/// Renders one template of a chart (as the test cluster would answer,
/// [`helm`]) and applies each object server-side as
/// `admin`; returns the kinds applied, in order. For tests of a chart's
/// access objects (roles, admission policies) without installing it.
pub async fn apply_chart_template(
    admin: &kube::Client,
    chart: &str,
    release: &str,
    template: &str,
) -> anyhow::Result<Vec<String>> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    build_chart_dependencies()?;
    let path = charts_dir().join(chart).display().to_string();
    let rendered = helm_ok(None, &["template", release, &path, "--show-only", template])?;
    let mut kinds = Vec::new();
    for doc in yaml_documents(&rendered)? {
        let (group_version, kind) = (
            doc["apiVersion"].as_str().context("apiVersion")?.to_string(),
            doc["kind"].as_str().context("kind")?.to_string(),
        );
        let (group, version) = group_version.split_once('/').unwrap_or(("", group_version.as_str()));
        let plural = match kind.as_str() {
            "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
            "ValidatingAdmissionPolicyBinding" => "validatingadmissionpolicybindings",
            "ClusterRole" => "clusterroles",
            other => bail!("{chart}/{template}: no plural known for {other}"),
        };
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, &kind), plural);
        let obj: DynamicObject = serde_json::from_value(doc.clone())?;
        let name = obj.metadata.name.clone().context("metadata.name")?;
        kube::Api::<DynamicObject>::all_with(admin.clone(), &ar)
            .patch(&name, &PatchParams::apply("e2e").force(), &Patch::Apply(&obj))
            .await?;
        kinds.push(kind);
    }
    Ok(kinds)
}

#[cfg(test)]
mod yaml_tests {
    use super::yaml_documents;

    #[test]
    fn helm_template_output_splits_into_its_objects() {
        let text = "---\n# Source: c/templates/a.yaml\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n---\n# Source: c/templates/empty.yaml\n---\n# Source: c/templates/b.yaml\nkind: Role\nrules:\n- verbs: [\"get\"]\n  description: >-\n    folded\n    text\n";
        let docs = yaml_documents(text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(docs.len(), 2, "{docs:?}");
        assert_eq!(docs[0]["metadata"]["name"], "a");
        assert_eq!(docs[1]["rules"][0]["description"], "folded text");
    }
}
