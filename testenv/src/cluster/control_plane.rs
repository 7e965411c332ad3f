//! Starting and stopping etcd, kube-apiserver, kube-controller-manager and
//! kube-scheduler on loopback with free ports.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;

use crate::build::assets::{Assets, fmt_elapsed};
use crate::cluster::kubeconfig::{self, Credentials};
use crate::cluster::pki::Pki;
use crate::cluster::process::{Lifetime, Process, free_port};

/// The Service ClusterIP ranges: dual-stack, so IPv6 records can be tested.
pub const SERVICE_CIDRS: &str = "10.96.0.0/16,fd00:10:96::/112";

/// How long start-up may take before it is declared failed.
const START_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Pki(#[from] crate::cluster::pki::PkiError),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("the test control plane did not become ready: {reason}\n{logs}")]
    NotReady { reason: String, logs: String },
}

/// Options for [`ControlPlane::start`].
#[derive(Debug, Clone)]
pub struct Options {
    /// Holds the PKI, etcd data, logs and kubeconfig. Created if missing.
    pub dir: PathBuf,
    pub lifetime: Lifetime,
}

/// Flags added to each component's own, after them (a repeated flag: the
/// later wins), for a control plane tuned to a purpose — a benchmark's
/// raised client rates (as Kubernetes' own scale tests run them), an audit
/// log.
#[derive(Debug, Clone, Default)]
pub struct ExtraFlags {
    pub etcd: Vec<String>,
    pub apiserver: Vec<String>,
    pub controller_manager: Vec<String>,
    pub scheduler: Vec<String>,
}

/// A running control plane.
#[derive(Debug)]
pub struct ControlPlane {
    pub dir: PathBuf,
    /// `https://127.0.0.1:<port>`
    pub server: String,
    /// Admin (system:masters) kubeconfig.
    pub kubeconfig: PathBuf,
    pub pki: Pki,
    processes: Vec<Process>,
    /// How each component was started, to start it again.
    respawn: std::collections::BTreeMap<String, Respawn>,
}

/// The order the components start in (they stop in reverse).
const START_ORDER: [&str; 4] = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"];

/// A component's command line, kept to restart it on the same port and data.
#[derive(Debug, Clone)]
struct Respawn {
    bin: PathBuf,
    args: Vec<String>,
    logs: PathBuf,
    lifetime: Lifetime,
}

impl ControlPlane {
    /// Starts a control plane; ready means `/readyz` answers `ok` and the
    /// `default/default` ServiceAccount exists (so Pods can be created). A
    /// start that loses a port race is retried with new ports.
    pub async fn start(assets: &Assets, options: &Options) -> Result<Self, StartError> {
        Self::start_with(assets, options, None, &ExtraFlags::default()).await
    }

    /// [`Self::start`] with `extra` flags for the components.
    pub async fn start_tuned(assets: &Assets, options: &Options, extra: &ExtraFlags) -> Result<Self, StartError> {
        Self::start_with(assets, options, None, extra).await
    }

    /// A control plane for the one-node cluster: the API server listens on
    /// the node's bridge address `node_ip` (which must exist), publishes it
    /// as the `kubernetes` Service's endpoint so pods reach it, authorizes
    /// kubelets with the Node authorizer and talks to them with a client
    /// certificate.
    pub async fn start_for_node(
        assets: &Assets,
        options: &Options,
        node_ip: std::net::Ipv4Addr,
    ) -> Result<Self, StartError> {
        Self::start_with(assets, options, Some(node_ip), &ExtraFlags::default()).await
    }

    async fn start_with(
        assets: &Assets,
        options: &Options,
        node_ip: Option<std::net::Ipv4Addr>,
        extra: &ExtraFlags,
    ) -> Result<Self, StartError> {
        let mut last = None;
        for _attempt in 0..3 {
            match Self::start_once(assets, options, node_ip, extra).await {
                Ok(cp) => return Ok(cp),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| StartError::NotReady { reason: "no attempt made".into(), logs: String::new() }))
    }

    async fn start_once(
        assets: &Assets,
        options: &Options,
        node_ip: Option<std::net::Ipv4Addr>,
        extra: &ExtraFlags,
    ) -> Result<Self, StartError> {
        let started = Instant::now();
        let dir = options.dir.clone();
        let io = |what: &str| {
            let what = what.to_string();
            move |e| StartError::Io(what, e)
        };
        let _ = std::fs::remove_dir_all(dir.join("etcd-data"));
        for sub in ["logs", "etcd-data"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(io(&format!("creating {}", dir.join(sub).display())))?;
        }
        let logs = dir.join("logs");
        let pki = Pki::generate(&dir.join("pki"))?;
        let port = || free_port().map_err(io("finding a free port"));

        let mut cp = ControlPlane {
            server: String::new(),
            kubeconfig: dir.join("kubeconfig"),
            dir: dir.clone(),
            pki,
            processes: Vec::new(),
            respawn: std::collections::BTreeMap::new(),
        };

        // etcd
        let (etcd_client, etcd_peer) = (port()?, port()?);
        let etcd_url = format!("http://127.0.0.1:{etcd_client}");
        let peer_url = format!("http://127.0.0.1:{etcd_peer}");
        let mut etcd_args = vec![
            format!("--data-dir={}", dir.join("etcd-data").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            "--unsafe-no-fsync=true".into(),
            // etcd's default 2 GiB quota fills with old revisions when a
            // benchmark writes 1,000 copies of 1 MiB twice (the API server
            // compacts every 5 minutes, too late); 8 GiB stays ahead of it.
            "--quota-backend-bytes=8589934592".into(),
            "--log-level=warn".into(),
        ];
        etcd_args.extend(extra.etcd.iter().cloned());
        cp.spawn(assets, "etcd", &etcd_args, &logs, options.lifetime)?;
        cp.wait_tcp("etcd", etcd_client, started).await?;

        // kube-apiserver
        let api_port = port()?;
        let api_ip = node_ip.map(|ip| ip.to_string()).unwrap_or_else(|| "127.0.0.1".into());
        cp.server = format!("https://{api_ip}:{api_port}");
        let p = &cp.pki;
        let mut api_args = vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--bind-address={api_ip}"),
            format!("--advertise-address={api_ip}"),
            format!("--secure-port={api_port}"),
            format!("--cert-dir={}", dir.join("pki").display()),
            format!("--tls-cert-file={}", p.server_cert.display()),
            format!("--tls-private-key-file={}", p.server_key.display()),
            format!("--client-ca-file={}", p.ca_cert.display()),
            format!("--authorization-mode={}", if node_ip.is_some() { "Node,RBAC" } else { "RBAC" }),
            format!("--service-account-issuer={}", cp.server),
            format!("--service-account-key-file={}", p.sa_pub.display()),
            format!("--service-account-signing-key-file={}", p.sa_key.display()),
            format!("--service-cluster-ip-range={SERVICE_CIDRS}"),
            "--allow-privileged=true".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ];
        if node_ip.is_some() {
            api_args.extend([
                "--enable-admission-plugins=NodeRestriction".to_string(),
                format!("--kubelet-client-certificate={}", p.kubelet_client_cert.display()),
                format!("--kubelet-client-key={}", p.kubelet_client_key.display()),
                "--kubelet-preferred-address-types=InternalIP,Hostname".into(),
            ]);
        } else {
            // No node: nothing can reach a published endpoint anyway.
            api_args.push("--endpoint-reconciler-type=none".into());
        }
        api_args.extend(extra.apiserver.iter().cloned());
        cp.spawn(assets, "kube-apiserver", &api_args, &logs, options.lifetime)?;
        let admin = kubeconfig::render(
            "flotilla-testenv",
            &cp.server,
            &cp.pki.ca_cert_pem,
            Credentials::ClientCert { cert_pem: &cp.pki.admin_cert_pem, key_pem: &cp.pki.admin_key_pem },
        );
        std::fs::write(&cp.kubeconfig, &admin).map_err(io("writing the kubeconfig"))?;
        let client = kubeconfig::client_from_yaml(&admin)
            .await
            .map_err(|e| cp.not_ready(format!("building a client: {e:#}")))?;
        cp.wait_readyz(&client, started).await?;

        // kube-controller-manager and kube-scheduler
        let mut kcm_args = vec![
            format!("--kubeconfig={}", cp.kubeconfig.display()),
            format!("--authentication-kubeconfig={}", cp.kubeconfig.display()),
            format!("--authorization-kubeconfig={}", cp.kubeconfig.display()),
            "--leader-elect=false".into(),
            "--controllers=*".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", port()?),
            format!("--cert-dir={}", dir.join("pki").display()),
            format!("--service-account-private-key-file={}", cp.pki.sa_key.display()),
            format!("--root-ca-file={}", cp.pki.ca_cert.display()),
            format!("--service-cluster-ip-range={SERVICE_CIDRS}"),
            "--v=1".into(),
        ];
        kcm_args.extend(extra.controller_manager.iter().cloned());
        cp.spawn(assets, "kube-controller-manager", &kcm_args, &logs, options.lifetime)?;
        let mut sched_args = vec![
            format!("--kubeconfig={}", cp.kubeconfig.display()),
            format!("--authentication-kubeconfig={}", cp.kubeconfig.display()),
            format!("--authorization-kubeconfig={}", cp.kubeconfig.display()),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", port()?),
            format!("--cert-dir={}", dir.join("pki").display()),
        ];
        sched_args.extend(extra.scheduler.iter().cloned());
        cp.spawn(assets, "kube-scheduler", &sched_args, &logs, options.lifetime)?;
        cp.wait_default_service_account(&client, started).await?;
        tracing::info!(server = %cp.server, elapsed = %fmt_elapsed(started.elapsed()), "test control plane ready");
        Ok(cp)
    }

    fn spawn(
        &mut self,
        assets: &Assets,
        name: &str,
        args: &[String],
        logs: &Path,
        lifetime: Lifetime,
    ) -> Result<(), StartError> {
        let process = Process::spawn(name, &assets.bin(name), args, logs, lifetime)
            .map_err(|e| StartError::Io(format!("starting {}", assets.bin(name).display()), e))?;
        self.processes.push(process);
        let respawn = Respawn { bin: assets.bin(name), args: args.to_vec(), logs: logs.to_path_buf(), lifetime };
        self.respawn.insert(name.to_string(), respawn);
        Ok(())
    }

    /// Fails fast when a component died (a port race, a bad flag).
    fn check_alive(&mut self) -> Result<(), StartError> {
        let dead: Vec<String> =
            self.processes.iter_mut().filter_map(|p| p.exited().map(|s| format!("{} exited ({s})", p.name))).collect();
        if dead.is_empty() { Ok(()) } else { Err(self.not_ready(dead.join(", "))) }
    }

    fn not_ready(&self, reason: String) -> StartError {
        let logs = self
            .processes
            .iter()
            .map(|p| format!("--- {} ({}), last lines:\n{}", p.name, p.log.display(), p.log_tail(25)))
            .collect::<Vec<_>>()
            .join("\n");
        StartError::NotReady { reason, logs }
    }

    async fn poll<F, Fut>(&mut self, what: &str, started: Instant, mut f: F) -> Result<(), StartError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<bool, String>>,
    {
        loop {
            self.check_alive()?;
            let last = match f().await {
                Ok(true) => return Ok(()),
                Ok(false) => "not yet".to_string(),
                Err(e) => e,
            };
            if started.elapsed() > START_TIMEOUT {
                return Err(
                    self.not_ready(format!("timed out after {START_TIMEOUT:?} waiting for {what} (last: {last})"))
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn wait_tcp(&mut self, what: &str, port: u16, started: Instant) -> Result<(), StartError> {
        self.poll(what, started, || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map(|_| true).map_err(|e| e.to_string())
        })
        .await
    }

    async fn wait_readyz(&mut self, client: &kube::Client, started: Instant) -> Result<(), StartError> {
        self.poll("kube-apiserver /readyz", started, || async {
            let req = http_get("/readyz");
            match client.request_text(req).await {
                Ok(body) => Ok(body.trim() == "ok"),
                Err(e) => Err(e.to_string()),
            }
        })
        .await
    }

    async fn wait_default_service_account(
        &mut self,
        client: &kube::Client,
        started: Instant,
    ) -> Result<(), StartError> {
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        self.poll("the default/default ServiceAccount", started, || {
            let api = api.clone();
            async move { api.get_opt("default").await.map(|sa| sa.is_some()).map_err(|e| e.to_string()) }
        })
        .await
    }

    /// Stops the API server (SIGTERM, as a restart or an upgrade would);
    /// etcd and the other components go on. [`Self::start_api_server`]
    /// brings it back on the same address and data.
    pub fn stop_api_server(&mut self) {
        self.stop_component("kube-apiserver");
    }

    /// Starts the API server again (same flags, port, certificates and etcd)
    /// and waits until `/readyz` says ok.
    pub async fn start_api_server(&mut self) -> Result<(), StartError> {
        let started = Instant::now();
        self.start_component("kube-apiserver")?;
        let client = self.client().await.map_err(|e| self.not_ready(format!("building a client: {e:#}")))?;
        self.wait_readyz(&client, started).await
    }

    /// Stops and starts a component (`kube-controller-manager`,
    /// `kube-scheduler`) with its own flags: a fresh one lists everything at
    /// once, where the running one may still be backing off.
    pub fn restart_component(&mut self, name: &str) -> Result<(), StartError> {
        self.stop_component(name);
        self.start_component(name)
    }

    fn stop_component(&mut self, name: &str) {
        if let Some(i) = self.processes.iter().position(|p| p.name == name) {
            let mut p = self.processes.remove(i);
            p.stop(Duration::from_secs(10));
        }
    }

    /// Starts a stopped component again; its earlier log is kept as
    /// `<name>.before-restart.log`. Stop order stays the reverse of start
    /// order.
    fn start_component(&mut self, name: &str) -> Result<(), StartError> {
        let r = self.respawn.get(name).cloned().ok_or_else(|| self.not_ready(format!("{name} was never started")))?;
        let _ = std::fs::rename(r.logs.join(format!("{name}.log")), r.logs.join(format!("{name}.before-restart.log")));
        let process = Process::spawn(name, &r.bin, &r.args, &r.logs, r.lifetime)
            .map_err(|e| StartError::Io(format!("starting {}", r.bin.display()), e))?;
        let at = START_ORDER.iter().position(|n| *n == name).map_or(self.processes.len(), |rank| {
            self.processes.iter().take_while(|p| START_ORDER.iter().position(|n| *n == p.name) < Some(rank)).count()
        });
        self.processes.insert(at, process);
        Ok(())
    }

    /// Admin client.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let yaml = std::fs::read_to_string(&self.kubeconfig)?;
        kubeconfig::client_from_yaml(&yaml).await
    }

    /// Process ids of the components, in start order.
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.processes.iter().map(|p| (p.name.clone(), p.child.id())).collect()
    }

    /// Stops the components in reverse start order.
    pub fn stop(&mut self) {
        while let Some(mut p) = self.processes.pop() {
            p.stop(Duration::from_secs(5));
        }
    }

    /// Forgets the processes without stopping them (they are detached and
    /// `cargo xtask cluster down` stops them by pid).
    pub fn detach(mut self) {
        self.processes.clear();
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A GET request with an empty body.
pub fn http_get(path: &str) -> http::Request<Vec<u8>> {
    let mut req = http::Request::new(Vec::new());
    *req.uri_mut() = path.parse::<http::Uri>().unwrap_or_default();
    req
}
