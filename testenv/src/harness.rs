//! What integration tests use: one control plane per test binary, started on
//! first use and torn down when the binary exits, plus helpers.

use std::future::Future;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::build::assets::Assets;
use crate::cluster::control_plane::{ControlPlane, Options};
use crate::cluster::kubeconfig::{self, Credentials};
use crate::cluster::process::{self, Lifetime};

/// Label put on every namespace the harness creates.
pub const TEST_NAMESPACE_LABEL: &str = "flotilla.dev/test";

/// Handle on the shared control plane of this test binary.
#[derive(Debug, Clone)]
pub struct TestEnv {
    pub server: String,
    pub kubeconfig: PathBuf,
    pub dir: PathBuf,
    ca_pem: String,
}

impl TestEnv {
    /// A handle on a control plane the test started itself — one it may
    /// stop parts of (see [`ControlPlane::stop_api_server`]).
    pub fn of(cp: &ControlPlane) -> Self {
        Self {
            server: cp.server.clone(),
            kubeconfig: cp.kubeconfig.clone(),
            dir: cp.dir.clone(),
            ca_pem: cp.pki.ca_cert_pem.clone(),
        }
    }
}

static SHARED: OnceLock<Result<TestEnv, String>> = OnceLock::new();

/// The control plane shared by every test in this binary. The first call
/// starts it (about 10 s); a failure to start fails every test that asks,
/// with the components' logs.
///
/// # Panics
/// When the binaries are missing (the message says to run
/// `cargo xtask setup`) or the control plane does not start.
pub fn shared() -> TestEnv {
    let result = SHARED.get_or_init(|| {
        let assets = Assets::locate().map_err(|e| e.to_string())?;
        let dir =
            std::env::temp_dir().join(format!("flotilla-testenv-{}-{}", std::process::id(), rand::random::<u32>()));
        process::run_until_exit("flotilla-testenv", dir, move |dir| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
            let options = Options { dir: dir.to_path_buf(), lifetime: Lifetime::DieWithParent };
            let cp = rt.block_on(ControlPlane::start(&assets, &options)).map_err(|e| e.to_string())?;
            let env = TestEnv {
                server: cp.server.clone(),
                kubeconfig: cp.kubeconfig.clone(),
                dir: dir.to_path_buf(),
                ca_pem: cp.pki.ca_cert_pem.clone(),
            };
            let pids = cp.pids().into_iter().map(|(_, pid)| pid).collect();
            Ok((env, pids, (cp, rt)))
        })
    });
    match result {
        Ok(env) => env.clone(),
        Err(e) => panic!("test control plane unavailable: {e}"),
    }
}

static NODE: OnceLock<Result<TestEnv, String>> = OnceLock::new();

/// The machine's one-node cluster (control plane + a real node: containerd,
/// kubelet, kube-proxy, CoreDNS), for tests about pods. It attaches to the
/// running one (`cargo xtask test` and `cargo xtask cluster up` start it
/// before the tests) or, when none runs, brings one up and takes it down
/// again when this test binary exits. Tests share it: each works in its own
/// namespaces.
///
/// # Panics
/// When it cannot be brought up (not root, tools missing: the message says
/// what to do) — a test about pods cannot mean anything without it.
pub fn node() -> TestEnv {
    let result = NODE.get_or_init(|| {
        let progress = |line: &str| eprintln!("[flotilla-testenv node] {line}");
        let exe = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default();
        let owner = format!("test binary {exe} (pid {})", std::process::id());
        // On a thread of its own: `up` runs a runtime, and tests call this
        // from inside theirs.
        let up = std::thread::spawn(move || crate::cluster::node::up(&owner, &progress).map_err(|e| e.to_string()))
            .join()
            .map_err(|_| "bringing the one-node cluster up panicked".to_string())??;
        if let crate::cluster::node::Up::Started(_) = &up {
            process::at_exit(stop_node_at_exit);
        }
        let info = up.info();
        Ok(TestEnv {
            server: info.server.clone(),
            kubeconfig: info.kubeconfig.clone(),
            dir: info.dir.clone(),
            ca_pem: info.ca_pem.clone(),
        })
    });
    match result {
        Ok(env) => env.clone(),
        Err(e) => panic!("one-node cluster unavailable: {e}"),
    }
}

extern "C" fn stop_node_at_exit() {
    match crate::cluster::node::down(&|_| {}) {
        Ok(left) if left.is_clean() => {}
        Ok(left) => eprintln!("[flotilla-testenv node] left on the machine after stopping the node: {left}"),
        Err(e) => eprintln!("[flotilla-testenv node] stopping the node: {e}"),
    }
}

impl TestEnv {
    /// An admin (`system:masters`) client. Make one per test: a client is
    /// bound to the tokio runtime it was made on.
    pub async fn client(&self) -> Client {
        match self.try_client().await {
            Ok(c) => c,
            Err(e) => panic!("building a client for {}: {e:#}", self.kubeconfig.display()),
        }
    }

    /// Runs the cluster's `kubectl` as admin; its stdout, or an error with
    /// its stderr.
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.kubectl_output(args)?;
        if !out.status.success() {
            anyhow::bail!("kubectl {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs the cluster's `kubectl` as admin, whatever its exit status.
    pub fn kubectl_output(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        let kubectl = Assets::locate()?.bin("kubectl");
        Ok(std::process::Command::new(kubectl)
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(args)
            .output()?)
    }

    async fn try_client(&self) -> anyhow::Result<Client> {
        let yaml = std::fs::read_to_string(&self.kubeconfig)?;
        kubeconfig::client_from_yaml(&yaml).await
    }

    /// A client acting as `user` (in `groups`) by impersonation: what that
    /// user may do is whatever RBAC and admission grant them, so policies
    /// can be tested without minting credentials.
    pub async fn impersonating(&self, user: &str, groups: &[&str]) -> anyhow::Result<Client> {
        let yaml = std::fs::read_to_string(&self.kubeconfig)?;
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml)?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await?;
        config.auth_info.impersonate = Some(user.to_string());
        config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
        Ok(Client::try_from(config)?)
    }

    /// Creates a fresh namespace `<prefix>-<random>` labelled
    /// `flotilla.dev/test=true`, and returns its name.
    pub async fn namespace(&self, prefix: &str) -> anyhow::Result<String> {
        let name = format!("{prefix}-{:08x}", rand::random::<u32>());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([(TEST_NAMESPACE_LABEL.to_string(), "true".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(self.client().await).create(&PostParams::default(), &ns).await?;
        Ok(name)
    }

    /// A client authenticated as ServiceAccount `namespace/name` through a
    /// TokenRequest (the account is created if missing). Its rights are
    /// whatever RBAC grants it: nothing, until a binding says otherwise.
    pub async fn service_account_client(&self, namespace: &str, name: &str) -> anyhow::Result<Client> {
        let token = self.service_account_token(namespace, name).await?;
        let yaml =
            kubeconfig::render(&format!("{namespace}-{name}"), &self.server, &self.ca_pem, Credentials::Token(&token));
        kubeconfig::client_from_yaml(&yaml).await
    }

    /// A kubeconfig file for ServiceAccount `namespace/name`, for running an
    /// operator binary out of cluster with exactly that account's rights.
    pub async fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> anyhow::Result<PathBuf> {
        let token = self.service_account_token(namespace, name).await?;
        let yaml =
            kubeconfig::render(&format!("{namespace}-{name}"), &self.server, &self.ca_pem, Credentials::Token(&token));
        // A file per call: test binaries run at once share `dir`, and one
        // binary rewriting a shared file (truncated, then written) while
        // another's operator reads it gave that operator a kubeconfig with
        // no current context (config-copier/security on CI).
        static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = self.dir.join(format!("kubeconfig-{namespace}-{name}-{}-{call}", std::process::id()));
        std::fs::write(&path, yaml)?;
        Ok(path)
    }

    async fn service_account_token(&self, namespace: &str, name: &str) -> anyhow::Result<String> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client().await, namespace);
        let sa = ServiceAccount {
            metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() },
            ..Default::default()
        };
        // Create it unless it exists; two tests may ask for one account at once.
        match api.create(&PostParams::default(), &sa).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        let request = TokenRequest {
            spec: Some(TokenRequestSpec { expiration_seconds: Some(3600), ..Default::default() }),
            ..Default::default()
        };
        let response: TokenRequest = api.create_subresource("token", name, &PostParams::default(), &request).await?;
        response
            .status
            .and_then(|s| s.token)
            .ok_or_else(|| anyhow::anyhow!("TokenRequest for {namespace}/{name} returned no status"))
    }
}

/// `wait_for` gave up.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {timeout:?} waiting for {what}; last observation: {last}")]
pub struct WaitTimeout {
    pub what: String,
    pub timeout: Duration,
    pub last: String,
}

/// Polls `check` every 100 ms until it returns `Ok(Some(value))`, or fails
/// after `timeout` with what was being waited for and the last observation
/// (`Ok(None)` or the error's text).
pub async fn wait_for<T, E, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T, WaitTimeout>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, E>>,
    E: std::fmt::Display,
{
    let started = Instant::now();
    loop {
        let last = match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => "condition not met".to_string(),
            Err(e) => e.to_string(),
        };
        if started.elapsed() >= timeout {
            return Err(WaitTimeout { what: what.to_string(), timeout, last });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the object `name` satisfies `check` (polled with
/// [`wait_for`]); on a timeout, panics with the object's status as it is
/// then, so a failing test says what it saw. For tests only.
pub async fn wait_object<K, T>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&K) -> Option<T>,
) -> T
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let check = &check;
    let result = wait_for(what, timeout, || {
        let api = api.clone();
        async move { Ok::<_, kube::Error>(check(&api.get(name).await?)) }
    })
    .await;
    match result {
        Ok(v) => v,
        Err(e) => {
            let now = api.get(name).await.ok().and_then(|o| serde_json::to_value(o).ok());
            let status = now.map(|v| v["status"].clone()).unwrap_or_default();
            panic!("{e}; status now: {}", serde_json::to_string_pretty(&status).unwrap_or_default())
        }
    }
}

/// The Events (events.k8s.io/v1) of `ns` about the object named `name`, as
/// (type, reason, note).
pub async fn events_about(client: &Client, ns: &str, name: &str) -> Vec<(String, String, String)> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    let list = events.list(&Default::default()).await.map(|l| l.items).unwrap_or_default();
    list.into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// Waits (up to `timeout`) for an Event of `type_` and `reason` about
/// `name` in `ns`: operators send Events in the background, after the
/// status that caused them, so a status seen is no proof its Event is
/// already stored. Returns every Event about `name` then; panics with them
/// when none comes.
pub async fn wait_event(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
    reason: &str,
    timeout: Duration,
) -> Vec<(String, String, String)> {
    let what = format!("a {type_} Event {reason} about {name}");
    let found = wait_for(&what, timeout, || async {
        let events = events_about(client, ns, name).await;
        let seen = events.iter().any(|(t, r, _)| t == type_ && r == reason);
        Ok::<_, std::convert::Infallible>(seen.then_some(events))
    })
    .await;
    match found {
        Ok(events) => events,
        Err(e) => panic!("{e}; Events about {name}: {:?}", events_about(client, ns, name).await),
    }
}

/// Server-side-applies CRDs (field manager `flotilla-tests`) and waits until
/// each is Established, so the next request for its kind is served.
pub async fn install_crds(
    client: &Client,
    crds: &[k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition],
) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams};
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &PatchParams::apply("flotilla-tests").force(), &Patch::Apply(crd)).await?;
        wait_for(&format!("CRD {name} to be established"), Duration::from_secs(30), || {
            let (api, name) = (api.clone(), name.clone());
            async move {
                let crd = api.get(&name).await?;
                let established = crd
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                Ok::<_, kube::Error>(established.then_some(()))
            }
        })
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wait_for_returns_the_value_once_ready() {
        let mut n = 0;
        let v = wait_for("n to reach 3", Duration::from_secs(5), || {
            n += 1;
            let n = n;
            async move { Ok::<_, String>((n >= 3).then_some(n)) }
        })
        .await;
        assert_eq!(v.ok(), Some(3));
    }

    #[tokio::test]
    async fn wait_for_times_out_with_the_last_observation() {
        let err = wait_for("never", Duration::from_millis(250), || async { Err::<Option<()>, _>("boom") })
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("waiting for never"), "{err}");
        assert!(err.contains("boom"), "{err}");
    }
}
