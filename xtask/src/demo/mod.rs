//! `cargo xtask demo`: a control plane with the CRDs, every operator and the
//! seeds' scenarios from `examples/`, printed as they happen, until Ctrl-C.
//!
//! Each operator has a module here with `start(&DemoEnv)`: it starts whatever
//! the operator needs (an emulator, say), runs the operator binary against
//! the demo cluster, applies its `examples/<operator>/` resources and prints
//! what the operator did. It returns the processes to stop at the end.

mod config_copier;
mod service_dns;

use std::path::PathBuf;
use std::process::{Child, Command};

use anyhow::Context;
use flotilla_testenv::{ControlPlane, Lifetime, Options};

use crate::util::{root, run_cmd, runtime, say, setup};

/// What an operator's demo part gets.
pub struct DemoEnv {
    pub kubeconfig: PathBuf,
    pub kubectl: PathBuf,
    pub root: PathBuf,
}

impl DemoEnv {
    /// An operator's debug binary, built by `cargo build --workspace --bins`
    /// (honours `CARGO_TARGET_DIR`).
    pub fn operator_binary(&self, op: &str) -> PathBuf {
        std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| self.root.join("target"))
            .join("debug")
            .join(op)
    }

    /// `kubectl …` against the demo cluster, output shown.
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<()> {
        run_cmd(Command::new(&self.kubectl).args(args).env("KUBECONFIG", &self.kubeconfig))
    }
}

/// A process the demo started; killed when dropped.
pub struct Running {
    pub name: String,
    pub child: Child,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn run() -> anyhow::Result<()> {
    let assets = setup()?;
    say("building the operators");
    run_cmd(crate::util::cargo().args(["build", "--workspace", "--bins"]))?;
    let rt = runtime()?;
    rt.block_on(async {
        say("starting the demo control plane on 127.0.0.1");
        let dir = root().join("target").join("flotilla-demo");
        let mut cp = ControlPlane::start(&assets, &Options { dir, lifetime: Lifetime::DieWithParent })
            .await
            .context("starting the demo control plane")?;
        let env = DemoEnv { kubeconfig: cp.kubeconfig.clone(), kubectl: assets.bin("kubectl"), root: root() };
        if root()
            .join("crds")
            .read_dir()
            .map(|mut d| d.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "yaml"))))
            .unwrap_or(false)
        {
            say("installing the CRDs from crds/");
            env.kubectl(&["apply", "--server-side", "-f", &root().join("crds").display().to_string()])?;
        }
        let mut running: Vec<Running> = Vec::new();
        for (name, part) in
            [("service-dns", service_dns::start as Part), ("config-copier", config_copier::start as Part)]
        {
            say(&format!("demo: {name}"));
            match part(&env).await {
                Ok(mut r) => running.append(&mut r),
                Err(e) => eprintln!("    {name}: demo part failed: {e:#}"),
            }
        }
        say("the demo cluster is up. In another terminal:");
        eprintln!("    export KUBECONFIG={}", cp.kubeconfig.display());
        eprintln!("    alias kubectl={}", env.kubectl.display());
        eprintln!("    kubectl get namespaces,services -A");
        eprintln!("    kubectl api-resources --api-group=flotilla.dev");
        for r in &running {
            eprintln!("    running: {} (pid {})", r.name, r.child.id());
        }
        say("press Ctrl-C to stop and remove the demo cluster");
        tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
        say("stopping");
        drop(running);
        cp.stop();
        Ok(())
    })
}

type Part = fn(&DemoEnv) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<Vec<Running>>> + '_>>;
