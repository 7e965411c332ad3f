//! `cargo xtask demo`: a control plane with the CRDs, every operator and the
//! seeds' scenarios from `examples/`, until Ctrl-C.

use anyhow::Context;
use flotilla_testenv::{ControlPlane, Lifetime, Options};

use crate::util::{root, runtime, say, setup};

pub fn run() -> anyhow::Result<()> {
    let assets = setup()?;
    let rt = runtime()?;
    rt.block_on(async {
        say("starting the demo control plane on 127.0.0.1");
        let dir = root().join("target").join("flotilla-demo");
        let mut cp = ControlPlane::start(&assets, &Options { dir, lifetime: Lifetime::DieWithParent })
            .await
            .context("starting the demo control plane")?;
        let kubectl = assets.bin("kubectl");
        say("the demo cluster is up. In another terminal:");
        eprintln!("    export KUBECONFIG={}", cp.kubeconfig.display());
        eprintln!("    alias kubectl={}", kubectl.display());
        eprintln!("    kubectl get namespaces,serviceaccounts -A");
        eprintln!("    kubectl api-resources --api-group=flotilla.dev");
        say("no operator has landed yet: each operator issue adds its scenario here");
        say("press Ctrl-C to stop and remove the demo cluster");
        tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
        say("stopping");
        cp.stop();
        Ok(())
    })
}
