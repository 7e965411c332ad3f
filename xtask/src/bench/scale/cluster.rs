//! The benchmark's cluster: the project's control plane with the client
//! rates Kubernetes' own scale tests give kube-controller-manager and the
//! scheduler (their defaults, 20 and 50 requests a second, would take most
//! of an hour to make and bind 50,000 pods), an audit log of the operators'
//! requests, and kwok's simulated nodes.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use flotilla_testenv::cluster::kwok::{self, Kwok, KwokOptions};
use flotilla_testenv::{Assets, ControlPlane, ExtraFlags, Lifetime, Options};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};

use super::audit;
use crate::bench::from_json;
use crate::util::{progress, say};

/// The namespace the operators run in, as the charts' release namespace.
pub const SYSTEM_NS: &str = "flotilla-system";

/// The control plane, tuned, with the audit log of `SYSTEM_NS`'s
/// ServiceAccounts in `dir`.
pub async fn control_plane(assets: &Assets, dir: &Path) -> anyhow::Result<ControlPlane> {
    std::fs::create_dir_all(dir)?;
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(&policy, audit::policy(&format!("system:serviceaccounts:{SYSTEM_NS}")))?;
    let rates = |qps: u32| vec![format!("--kube-api-qps={qps}"), format!("--kube-api-burst={}", qps * 2)];
    let mut controller_manager = rates(200);
    controller_manager.extend(["--concurrent-replicaset-syncs=10".into(), "--concurrent-deployment-syncs=10".into()]);
    let extra = ExtraFlags {
        apiserver: audit::apiserver_flags(&policy, &audit_log(dir)),
        controller_manager,
        scheduler: rates(200),
        ..ExtraFlags::default()
    };
    let options = Options { dir: dir.join("cp"), lifetime: Lifetime::DieWithParent };
    ControlPlane::start_tuned(assets, &options, &extra).await.context("starting the control plane")
}

/// The `i`-th simulated node's name.
pub fn node_name(i: usize) -> String {
    format!("kwok-node-{i:04}")
}

pub fn audit_log(dir: &Path) -> std::path::PathBuf {
    dir.join("audit.log")
}

/// kwok, and `count` simulated nodes, all Ready.
pub async fn nodes(cp: &ControlPlane, dir: &Path, count: u32) -> anyhow::Result<Kwok> {
    let mut kwok = Kwok::start(
        &cp.kubeconfig,
        dir,
        Lifetime::DieWithParent,
        &KwokOptions { pod_parallelism: 32, ..KwokOptions::default() },
        &progress,
    )
    .context("starting kwok")?;
    let client = cp.client().await?;
    let nodes: Api<Node> = Api::all(client.clone());
    say(&format!("{count} simulated nodes (kwok)"));
    let started = Instant::now();
    let made: Vec<anyhow::Result<()>> = futures::stream::iter((0..count).map(|i| {
        let nodes = nodes.clone();
        async move {
            let node: Node = from_json(kwok::node(&node_name(i as usize), i))?;
            match nodes.create(&PostParams::default(), &node).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(e).context("creating a node"),
            }
        }
    }))
    .buffer_unordered(16)
    .collect()
    .await;
    made.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    let log = kwok.log();
    loop {
        if let Some(status) = kwok.exited() {
            anyhow::bail!("kwok exited ({status}); see {}", log.display());
        }
        if ready_nodes(&nodes).await.unwrap_or(0) >= count as usize {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            anyhow::bail!("the simulated nodes were not all Ready after 10 minutes; kwok's log: {}", log.display());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!("    {count} nodes Ready in {:.1?}", started.elapsed());
    Ok(kwok)
}

async fn ready_nodes(nodes: &Api<Node>) -> anyhow::Result<usize> {
    let list = nodes.list(&ListParams::default().labels(&format!("{}=true", kwok::NODE_LABEL))).await?;
    Ok(list
        .items
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count())
}

/// Nodes Ready now (kwok keeps them so through the run; a drop means the
/// API server or kwok fell behind).
pub async fn nodes_ready(client: &Client) -> anyhow::Result<usize> {
    ready_nodes(&Api::all(client.clone())).await
}
