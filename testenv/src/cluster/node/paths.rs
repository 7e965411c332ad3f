//! Where the one-node cluster lives and which addresses it uses. There is one
//! node per machine: the kubelet's ports, kube-proxy's iptables chains and the
//! bridge are machine-wide, so these are fixed, not per test.

use std::net::Ipv4Addr;
use std::path::PathBuf;

/// The node's name (the kubelet's `--hostname-override`).
pub const NODE_NAME: &str = "flotilla-node";
/// The bridge every pod is attached to.
pub const BRIDGE: &str = "flotilla0";
/// The node's address: the bridge's, so the kubelet has a non-loopback
/// InternalIP and pods reach the host (the API server, moto) on it.
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);
/// This node's pod range (on the bridge); [`CLUSTER_CIDR`] is all pods.
pub const POD_CIDR: &str = "10.244.0.0/24";
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// The IPv4 Service range (the control plane also has an IPv6 one).
pub const SERVICE_CIDR_V4: &str = "10.96.0.0/16";
/// The `kube-dns` Service's ClusterIP.
pub const CLUSTER_DNS: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
/// The `kubernetes` Service's ClusterIP (first of the range).
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// Prefix of every iptables chain the node setup makes itself.
pub const CHAIN_PREFIX: &str = "FLOTILLA-";

/// The node's directories.
#[derive(Debug, Clone)]
pub struct NodePaths {
    /// Persistent state: the control plane's PKI and data, the kubelet's root.
    pub base: PathBuf,
    /// Runtime state: containerd's state and socket, the lock, `state.json`.
    pub run: PathBuf,
}

impl Default for NodePaths {
    fn default() -> Self {
        Self { base: PathBuf::from("/var/lib/flotilla-cluster"), run: PathBuf::from("/run/flotilla-cluster") }
    }
}

impl NodePaths {
    pub fn control_plane(&self) -> PathBuf {
        self.base.join("control-plane")
    }
    pub fn kubeconfig(&self) -> PathBuf {
        self.control_plane().join("kubeconfig")
    }
    pub fn node_dir(&self) -> PathBuf {
        self.base.join("node")
    }
    pub fn logs(&self) -> PathBuf {
        self.node_dir().join("logs")
    }
    pub fn kubelet_root(&self) -> PathBuf {
        self.node_dir().join("kubelet")
    }
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.node_dir().join("cni")
    }
    /// containerd's registry hosts directory (`certs.d` layout).
    pub fn registry_config_dir(&self) -> PathBuf {
        self.node_dir().join("registry")
    }
    pub fn containerd_root(&self) -> PathBuf {
        self.base.join("containerd")
    }
    pub fn containerd_state(&self) -> PathBuf {
        self.run.join("containerd")
    }
    pub fn containerd_socket(&self) -> PathBuf {
        self.containerd_state().join("containerd.sock")
    }
    pub fn cni_ipam_dir(&self) -> PathBuf {
        self.run.join("cni-ipam")
    }
    pub fn lock_file(&self) -> PathBuf {
        self.run.join("lock")
    }
    pub fn state_file(&self) -> PathBuf {
        self.run.join("state.json")
    }
}
