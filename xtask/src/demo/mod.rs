//! `cargo xtask demo`: the one-node cluster, the umbrella chart installed
//! with helm (every operator running as pods, with the images `cargo xtask
//! images` built), and the seeds' scenarios from `examples/`, printed as
//! they happen, until Ctrl-C.
//!
//! Each operator has a module here with `start(&DemoEnv)`: it applies its
//! `examples/<operator>/` resources and prints what the operator did.

mod config_copier;
mod load_tester;
mod pod_alert;
mod pod_debugger;
mod service_dns;

use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;
use flotilla_testenv::aws::moto::{self, MotoServer, route53};
use flotilla_testenv::aws::route53_proxy::Route53Proxy;
use flotilla_testenv::cluster::node::paths::NODE_IP;
use flotilla_testenv::{Assets, Lifetime};

use crate::util::{root, run_cmd, say};

/// What an operator's demo part gets.
pub struct DemoEnv {
    pub kubeconfig: PathBuf,
    pub kubectl: PathBuf,
    pub root: PathBuf,
    /// moto (the Route53 emulator) on the node's address, reachable from pods.
    pub moto_endpoint: String,
    /// The hosted zone of [`service_dns::DOMAIN`] in moto.
    pub zone: String,
}

impl DemoEnv {
    /// `kubectl …` against the demo cluster, output shown.
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<()> {
        run_cmd(Command::new(&self.kubectl).args(args).env("KUBECONFIG", &self.kubeconfig))
    }

    /// `kubectl …`'s standard output, trimmed (for polling what a demo waits for).
    pub fn kubectl_output(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(&self.kubectl).args(args).env("KUBECONFIG", &self.kubeconfig).output()?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn helm(&self, args: &[&str]) -> anyhow::Result<()> {
        eprintln!("    helm {}", args.join(" "));
        flotilla_e2e::helm_ok(Some(&self.kubeconfig), args).map(|out| eprint!("{out}"))
    }
}

const RELEASE_NAMESPACE: &str = "flotilla-system";

pub fn run() -> anyhow::Result<()> {
    say("building the operator images (release binaries, as the Dockerfile builds them)");
    crate::images::run(&[])?;
    let started = crate::cluster::up_node("cargo xtask demo")?;
    let info = flotilla_testenv::cluster::node::running(&flotilla_testenv::cluster::node::NodePaths::default())
        .context("the one-node cluster is not running")?;
    let assets = Assets::locate()?;
    let dir = root().join("target").join("flotilla-demo");
    moto::locate().context("the Route53 emulator")?;
    let moto = MotoServer::start_on(&dir, Lifetime::DieWithParent, &NODE_IP.to_string()).context("starting moto")?;
    // service-dns talks to moto through the Route53-faithful proxy, so that
    // its guarded UPSERTs are applied atomically as on AWS.
    let proxy = Route53Proxy::start_on(&moto.endpoint, &NODE_IP.to_string()).context("starting the Route53 proxy")?;
    let zone = route53::create_hosted_zone(&moto.endpoint, service_dns::DOMAIN).context("creating the hosted zone")?;
    eprintln!(
        "    moto on {}, behind the Route53-faithful proxy on {} (pods reach both there): hosted zone {zone} ({})",
        moto.endpoint,
        proxy.endpoint,
        service_dns::DOMAIN
    );
    let env = DemoEnv {
        kubeconfig: info.kubeconfig.clone(),
        kubectl: assets.bin("kubectl"),
        root: root(),
        moto_endpoint: moto.endpoint.clone(),
        zone: zone.clone(),
    };

    say("installing the umbrella chart with helm (every operator as pods)");
    flotilla_e2e::build_chart_dependencies()?;
    env.kubectl(&["create", "namespace", RELEASE_NAMESPACE])?;
    env.kubectl(&[
        "-n",
        RELEASE_NAMESPACE,
        "create",
        "secret",
        "generic",
        "aws",
        "--from-literal=AWS_ACCESS_KEY_ID=demo",
        "--from-literal=AWS_SECRET_ACCESS_KEY=demo",
    ])?;
    let chart = root().join("charts").join(flotilla_e2e::UMBRELLA).display().to_string();
    let zone_value = format!("service-dns.route53.hostedZoneId={zone}");
    let domain_value = format!("service-dns.route53.domainName={}", service_dns::DOMAIN);
    let endpoint_value = format!("service-dns.aws.endpointUrl={}", proxy.endpoint);
    // The demo's webhook receiver listens on the node's address, a private
    // one, which pod-alert's sinks refuse unless the admin allows it.
    let sinks_value = format!("pod-alert.sinks.allowedCIDRs={{{NODE_IP}/32}}");
    #[rustfmt::skip]
    let mut install = vec![
        "install", "flotilla", &chart, "--namespace", RELEASE_NAMESPACE, "--wait", "--timeout", "5m",
        "--set", "service-dns.enabled=true",
        "--set", "config-copier.enabled=true",
        "--set", "pod-debugger.enabled=true",
        "--set", &zone_value,
        "--set", &domain_value,
        "--set", "service-dns.aws.region=us-east-1",
        "--set", "service-dns.aws.credentialsSecret=aws",
        "--set", &endpoint_value,
        "--set", &sinks_value,
    ];
    // A node that tests ran on has the CRDs already (applied by them, not
    // owned by a release): the release then leaves them alone.
    let existing = env.kubectl_output(&["get", "crd", "-o", "name"])?;
    let no_crds: Vec<String> = crate::crds::by_operator()
        .into_iter()
        .filter(|(_, crds)| {
            crds.iter().any(|c| existing.contains(&format!("/{}", c.metadata.name.as_deref().unwrap_or("-"))))
        })
        .map(|(op, _)| format!("{op}.crds.enabled=false"))
        .collect();
    if !no_crds.is_empty() {
        eprintln!("    CRDs already in the cluster: installing with {}", no_crds.join(", "));
    }
    for v in &no_crds {
        install.extend(["--set", v.as_str()]);
    }
    env.helm(&install)?;
    eprintln!("    kubectl get pods -A");
    env.kubectl(&["get", "pods", "-A", "-o", "wide"])?;

    let rt = crate::util::runtime()?;
    rt.block_on(async {
        for (name, part) in [
            ("service-dns", service_dns::start as Part),
            ("config-copier", config_copier::start as Part),
            ("pod-alert", pod_alert::start as Part),
            ("pod-debugger", pod_debugger::start as Part),
            ("load-tester", load_tester::start as Part),
        ] {
            say(&format!("demo: {name}"));
            if let Err(e) = part(&env).await {
                eprintln!("    {name}: demo part failed: {e:#}");
            }
        }
        say("the demo cluster is up. In another terminal:");
        eprintln!("    export KUBECONFIG={}", env.kubeconfig.display());
        eprintln!("    alias kubectl={}", env.kubectl.display());
        eprintln!("    kubectl get pods -A");
        eprintln!("    kubectl -n {RELEASE_NAMESPACE} logs deploy/flotilla-service-dns");
        eprintln!("    kubectl api-resources --api-group=flotilla.dev");
        say("press Ctrl-C to stop");
        tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")
    })?;
    say("stopping");
    let _ = env.helm(&["uninstall", "flotilla", "--namespace", RELEASE_NAMESPACE, "--wait"]);
    drop(proxy);
    drop(moto);
    if started {
        let left = flotilla_testenv::cluster::node::down(&crate::util::progress)?;
        say(&format!("the one-node cluster is down: {left}"));
    } else {
        say("the one-node cluster was running before the demo: left running");
    }
    Ok(())
}

type Part = fn(&DemoEnv) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + '_>>;
