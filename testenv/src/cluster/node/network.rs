//! The node's network on the host: the pods' bridge (created before the
//! kubelet, which needs a non-loopback node IP, and before the API server,
//! which listens on it), the kernel settings kube-proxy needs, and the rule
//! that keeps pods' traffic on this machine.

use std::process::Command;

use super::paths::{BRIDGE, CHAIN_PREFIX, CLUSTER_CIDR, NODE_IP, POD_CIDR};

/// The chain (in the `mangle` table, which the packet filter passes before
/// kube-proxy's `filter` rules can accept anything) that drops forwarded
/// pod traffic not going back to the bridge.
pub const EGRESS_CHAIN: &str = "FLOTILLA-EGRESS";

#[derive(Debug, thiserror::Error)]
#[error("{what}: {detail}")]
pub struct NetworkError {
    pub what: String,
    pub detail: String,
}

/// Runs a command; its stderr is the error.
pub fn run(program: &str, args: &[&str]) -> Result<String, NetworkError> {
    let out = Command::new(program).args(args).output().map_err(|e| NetworkError {
        what: format!("{program} {}", args.join(" ")),
        detail: format!("{e} (is it installed? `cargo xtask setup` installs the node's Debian packages)"),
    })?;
    if !out.status.success() {
        return Err(NetworkError {
            what: format!("{program} {}", args.join(" ")),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn sysctl(key: &str, value: &str) -> Result<(), NetworkError> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    std::fs::write(&path, value).map_err(|e| NetworkError {
        what: format!("setting {key}={value}"),
        detail: if std::path::Path::new(&path).exists() {
            e.to_string()
        } else {
            format!("{path} does not exist: the kernel lacks the module (br_netfilter for net.bridge.*)")
        },
    })
}

/// The bridge with the node's address, forwarding on, bridged traffic
/// through iptables (kube-proxy's DNAT must see pod-to-Service packets),
/// and the egress guard. Idempotent.
pub fn setup() -> Result<(), NetworkError> {
    if run("ip", &["link", "show", BRIDGE]).is_err() {
        run("ip", &["link", "add", BRIDGE, "type", "bridge"])?;
    }
    let prefix = POD_CIDR.split('/').nth(1).unwrap_or("24");
    let address = format!("{NODE_IP}/{prefix}");
    let shown = run("ip", &["-4", "addr", "show", "dev", BRIDGE])?;
    if !shown.contains(&address) {
        run("ip", &["addr", "add", &address, "dev", BRIDGE])?;
    }
    run("ip", &["link", "set", BRIDGE, "up"])?;
    sysctl("net.ipv4.ip_forward", "1")?;
    sysctl("net.bridge.bridge-nf-call-iptables", "1")?;
    sysctl("net.bridge.bridge-nf-call-ip6tables", "1")?;
    install_egress_guard()
}

/// Forwarded packets from the pod range that do not leave through the
/// bridge are dropped: pods reach each other, Services and the host, never
/// an address outside the machine (nor, through a Service, one outside).
pub fn install_egress_guard() -> Result<(), NetworkError> {
    if run("iptables", &["-t", "mangle", "-n", "-L", EGRESS_CHAIN]).is_err() {
        run("iptables", &["-t", "mangle", "-N", EGRESS_CHAIN])?;
    }
    run("iptables", &["-t", "mangle", "-F", EGRESS_CHAIN])?;
    #[rustfmt::skip]
    run("iptables", &[
        "-t", "mangle", "-A", EGRESS_CHAIN, "-s", CLUSTER_CIDR, "!", "-o", BRIDGE,
        "-m", "comment", "--comment", "flotilla: pod traffic stays on this machine", "-j", "DROP",
    ])?;
    if run("iptables", &["-t", "mangle", "-C", "FORWARD", "-j", EGRESS_CHAIN]).is_err() {
        run("iptables", &["-t", "mangle", "-I", "FORWARD", "1", "-j", EGRESS_CHAIN])?;
    }
    Ok(())
}

/// Whether the egress guard's DROP rule is in place (tests check it before
/// they try to leave the machine from a pod).
pub fn egress_guard_installed() -> bool {
    run("iptables", &["-t", "mangle", "-C", "FORWARD", "-j", EGRESS_CHAIN]).is_ok()
        && run("iptables", &["-t", "mangle", "-S", EGRESS_CHAIN]).is_ok_and(|s| s.contains("-j DROP"))
}

/// Packets the egress guard dropped so far.
pub fn egress_guard_drops() -> u64 {
    run("iptables", &["-t", "mangle", "-L", EGRESS_CHAIN, "-v", "-x", "-n"])
        .ok()
        .and_then(|out| {
            out.lines().find(|l| l.contains("DROP")).and_then(|l| l.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Chains the node's components and CNI plugins make: ours, kube-proxy's and
/// the kubelet's (`KUBE-*`), the CNI plugins' (`CNI-*`).
pub fn is_node_chain(name: &str) -> bool {
    name.starts_with(CHAIN_PREFIX) || name.starts_with("KUBE-") || name.starts_with("CNI-")
}
