//! Simulated nodes with [kwok](https://kwok.sigs.k8s.io) (`sigs.k8s.io/kwok`,
//! the Kubernetes project's own simulator): Node objects that go Ready and
//! whose pods go Running — or crash-loop, or stay Pending — without a
//! kubelet or a container, against a real control plane. kwok runs out of
//! cluster with the control plane's admin kubeconfig and manages only the
//! nodes labelled [`NODE_LABEL`]`=true`; what it writes is decided by the
//! stages in `testenv/kwok/` (see its README), shipped inside this crate.
//!
//! Built by `cargo xtask setup` ([`crate::build::tools::KWOK`]); not needed by the
//! tests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::build::assets::{AssetsError, Progress};
use crate::build::tools::KWOK;
use crate::cluster::process::{Lifetime, Process, free_port};

/// The label that hands a node to kwok (`=true`).
pub const NODE_LABEL: &str = "kwok.flotilla.dev/node";

/// A pod label that picks a behaviour other than Running (see the values).
pub const BEHAVIOUR_LABEL: &str = "kwok.flotilla.dev/behaviour";
/// [`BEHAVIOUR_LABEL`]: crash every 20–30 s (CrashLoopBackOff, restarts rising).
pub const CRASH_LOOP: &str = "crash-loop";
/// [`BEHAVIOUR_LABEL`]: stay Pending, containers in ImagePullBackOff.
pub const PENDING: &str = "pending";

/// Pods a simulated node takes: Kubernetes' published limit per node.
pub const PODS_PER_NODE: u32 = 110;

/// The address every simulated node reports. Loopback, and nothing listens
/// on [`KUBELET_PORT`] there: whatever the API server would ask a kubelet
/// (a pod's log) fails at once, and nothing leaves the machine.
pub const NODE_IP: &str = "127.0.0.2";
/// The kubelet port every simulated node reports (see [`NODE_IP`]).
pub const KUBELET_PORT: u16 = 1;

/// The stage files (name, YAML), in the order kwok reads them.
pub const STAGES: &[(&str, &str)] = &[
    ("node-initialize.yaml", include_str!("../../kwok/node-initialize.yaml")),
    ("node-heartbeat.yaml", include_str!("../../kwok/node-heartbeat.yaml")),
    ("pod-running.yaml", include_str!("../../kwok/pod-running.yaml")),
    ("pod-crash-loop.yaml", include_str!("../../kwok/pod-crash-loop.yaml")),
    ("pod-pending.yaml", include_str!("../../kwok/pod-pending.yaml")),
    ("pod-delete.yaml", include_str!("../../kwok/pod-delete.yaml")),
];

/// How kwok runs.
#[derive(Debug, Clone)]
pub struct KwokOptions {
    /// Seconds a node's Lease lasts; kwok renews it every quarter of that.
    /// kube-controller-manager marks a node NotReady 50 s after its last
    /// renewal (`--node-monitor-grace-period`), so at most 120.
    pub lease_seconds: u32,
    /// Pods whose stages kwok plays at once (its default, 4, starts about
    /// 8 pods a second against a busy API server: 50,000 pods would take
    /// most of two hours).
    pub pod_parallelism: u32,
}

impl Default for KwokOptions {
    fn default() -> Self {
        // Renewals every 15 s: three chances inside the 50 s grace, and a
        // third fewer Lease writes than kwok's default 40 s (10 s renewals)
        // — 67 writes a second at 1,000 nodes instead of 100.
        Self { lease_seconds: 60, pod_parallelism: 4 }
    }
}

/// kwok's configuration document. v0.8.0 applies no defaults to a document
/// it is given, so every option it needs is spelled out (its defaults but
/// the pod parallelism).
fn configuration(options: &KwokOptions) -> String {
    format!(
        "apiVersion: config.kwok.x-k8s.io/v1alpha1\n\
         kind: KwokConfiguration\n\
         options:\n  \
           cidr: 10.0.0.0/24\n  \
           manageAllNodes: false\n  \
           enableDebuggingHandlers: true\n  \
           enableContentionProfiling: false\n  \
           enableProfilingHandler: true\n  \
           enablePodsOnNodeSyncStreamWatch: false\n  \
           podPlayStageParallelism: {}\n  \
           nodePlayStageParallelism: 4\n  \
           nodeLeaseParallelism: 4\n  \
           podsOnNodeSyncParallelism: 1\n  \
           enablePodsOnNodeSyncListPager: true\n",
        options.pod_parallelism.max(1)
    )
}

/// A running kwok; stopped when dropped.
#[derive(Debug)]
pub struct Kwok {
    process: Process,
}

impl Kwok {
    /// Starts kwok (installing it first when missing) against the cluster
    /// of `kubeconfig`; the stages and its log go into `dir`.
    pub fn start(
        kubeconfig: &Path,
        dir: &Path,
        lifetime: Lifetime,
        options: &KwokOptions,
        progress: Progress<'_>,
    ) -> Result<Self, AssetsError> {
        let bin = KWOK.ensure(progress)?;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| AssetsError::Io { path, source }
        };
        let stages = dir.join("kwok-stages");
        std::fs::create_dir_all(&stages).map_err(io(&stages))?;
        let mut args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--manage-nodes-with-label-selector={NODE_LABEL}=true"),
            format!("--node-ip={NODE_IP}"),
            format!("--node-port={KUBELET_PORT}"),
            // Its own server (kubelet endpoints, health) on loopback only:
            // without an address it would listen on 0.0.0.0.
            format!("--server-address=127.0.0.1:{}", free_port().map_err(io(dir))?),
            format!("--node-lease-duration-seconds={}", options.lease_seconds),
            // A line per patched pod at INFO: tens of thousands in a scale run.
            "--v=WARN".into(),
        ];
        let config = stages.join("kwok-configuration.yaml");
        std::fs::write(&config, configuration(options)).map_err(io(&config))?;
        args.push(format!("--config={}", config.display()));
        for (name, yaml) in STAGES {
            let path = stages.join(name);
            std::fs::write(&path, yaml).map_err(io(&path))?;
            args.push(format!("--config={}", path.display()));
        }
        let process = Process::spawn("kwok", &bin, &args, dir, lifetime).map_err(io(&bin))?;
        Ok(Self { process })
    }

    /// Its log file.
    pub fn log(&self) -> PathBuf {
        self.process.log.clone()
    }

    pub fn pid(&self) -> u32 {
        self.process.child.id()
    }

    /// `Some(status)` once it has exited (a bad stage, a bad flag).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.process.exited()
    }
}

impl Drop for Kwok {
    fn drop(&mut self) {
        self.process.stop(Duration::from_secs(5));
    }
}

/// Simulated node number `index`, named `name`: labelled for kwok (and
/// Linux/amd64, as the scheduler's default filters expect), [`PODS_PER_NODE`]
/// pods, and a `/24` pod CIDR of its own inside 10.64.0.0/10 (kwok takes pod
/// IPs from it; addresses only written into statuses, never connected to).
pub fn node(name: &str, index: u32) -> Value {
    let cidr = format!("10.{}.{}.0/24", 64 + (index / 256) % 64, index % 256);
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                NODE_LABEL: "true",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
        "status": {
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": PODS_PER_NODE.to_string()},
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": PODS_PER_NODE.to_string()},
        },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn every_stage_file_is_a_kwok_stage_and_all_are_shipped() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kwok");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .filter(|n| n.ends_with(".yaml"))
            .collect();
        on_disk.sort();
        let mut shipped: Vec<String> = STAGES.iter().map(|(n, _)| n.to_string()).collect();
        shipped.sort();
        assert_eq!(on_disk, shipped, "every file in testenv/kwok/ is in STAGES");
        for (name, yaml) in STAGES {
            let v: Value = serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(v["kind"], "Stage", "{name}");
            assert_eq!(v["apiVersion"], "kwok.x-k8s.io/v1alpha1", "{name}");
            assert_eq!(format!("{}.yaml", v["metadata"]["name"].as_str().unwrap()), *name, "{name}");
        }
    }

    /// kwok v0.8.0 applies no defaults to a configuration it is given: the
    /// options it would otherwise default are all there, with the pod
    /// parallelism asked for.
    #[test]
    fn the_configuration_spells_out_every_option_it_needs() {
        let v: Value =
            serde_saphyr::from_str(&configuration(&KwokOptions { pod_parallelism: 32, ..KwokOptions::default() }))
                .unwrap();
        assert_eq!(v["kind"], "KwokConfiguration");
        assert_eq!(v["apiVersion"], "config.kwok.x-k8s.io/v1alpha1");
        let o = &v["options"];
        assert_eq!(o["podPlayStageParallelism"], 32);
        for key in ["nodePlayStageParallelism", "nodeLeaseParallelism", "podsOnNodeSyncParallelism"] {
            assert!(o[key].as_u64().is_some_and(|n| n > 0), "{key}: {o}");
        }
        for key in
            ["manageAllNodes", "enableDebuggingHandlers", "enableProfilingHandler", "enablePodsOnNodeSyncListPager"]
        {
            assert!(o[key].is_boolean(), "{key}: {o}");
        }
    }

    #[test]
    fn nodes_get_distinct_pod_cidrs() {
        let cidrs: std::collections::BTreeSet<String> =
            (0..5000).map(|i| node(&format!("n{i}"), i)["spec"]["podCIDR"].as_str().unwrap().to_string()).collect();
        assert_eq!(cidrs.len(), 5000);
    }
}
