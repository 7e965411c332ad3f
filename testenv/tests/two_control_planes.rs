//! Several control planes can run at once (free ports), and stopping one
//! leaves no process behind.

use flotilla_testenv::cluster::process::pid_alive;
use flotilla_testenv::{Assets, ControlPlane, Lifetime, Options};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::ListParams;

#[tokio::test]
async fn two_control_planes_run_side_by_side() -> anyhow::Result<()> {
    let assets = Assets::locate()?;
    let base = std::env::temp_dir().join(format!("flotilla-two-{}", std::process::id()));
    let opts = |n: &str| Options { dir: base.join(n), lifetime: Lifetime::DieWithParent };
    let (opts_a, opts_b) = (opts("a"), opts("b"));
    let (a, b) = tokio::join!(ControlPlane::start(&assets, &opts_a), ControlPlane::start(&assets, &opts_b));
    let (mut a, mut b) = (a?, b?);
    assert_ne!(a.server, b.server, "the two API servers must listen on different ports");

    // Each is a separate cluster: a namespace made in one is absent in the other.
    let (ca, cb) = (a.client().await?, b.client().await?);
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": "only-in-a"}}))?;
    Api::<Namespace>::all(ca).create(&Default::default(), &ns).await?;
    let in_b = Api::<Namespace>::all(cb).list(&ListParams::default()).await?;
    assert!(in_b.items.iter().all(|n| n.metadata.name.as_deref() != Some("only-in-a")));

    let pids: Vec<u32> = a.pids().into_iter().chain(b.pids()).map(|(_, p)| p).collect();
    assert_eq!(pids.len(), 8, "etcd, apiserver, controller-manager, scheduler twice: {pids:?}");
    a.stop();
    b.stop();
    let alive: Vec<u32> = pids.into_iter().filter(|p| pid_alive(*p)).collect();
    assert!(alive.is_empty(), "processes left after stop: {alive:?}");
    let _ = std::fs::remove_dir_all(base);
    Ok(())
}
