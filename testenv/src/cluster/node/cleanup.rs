//! Taking the node off the machine: the processes it started (containers
//! included), mounts, network namespaces, veths, the bridge, iptables chains
//! and cgroups — and a report of what is still there, so `cluster down` can
//! prove it left nothing. Idempotent: after a crash it cleans stale state.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::network::{is_node_chain, run};
use super::paths::{BRIDGE, NodePaths};
use crate::cluster::process::{pid_alive, terminate_pid};

/// The programs only the node runs (the control plane's binaries are shared
/// with node-less test control planes, so those are stopped by pid only).
const NODE_PROGRAMS: &[&str] = &["kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2"];

/// What is left on the machine.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Leftovers {
    pub processes: Vec<String>,
    pub mounts: Vec<String>,
    pub links: Vec<String>,
    pub chains: Vec<String>,
    pub cgroups: Vec<String>,
}

impl Leftovers {
    pub fn is_clean(&self) -> bool {
        *self == Leftovers::default()
    }
}

impl std::fmt::Display for Leftovers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_clean() {
            return write!(f, "nothing left");
        }
        let mut parts = Vec::new();
        for (what, list) in [
            ("processes", &self.processes),
            ("mounts", &self.mounts),
            ("network links", &self.links),
            ("iptables chains", &self.chains),
            ("cgroups", &self.cgroups),
        ] {
            if !list.is_empty() {
                parts.push(format!("{what}: {}", list.join(", ")));
            }
        }
        write!(f, "{}", parts.join("; "))
    }
}

/// Every process's pid and executable path.
fn processes() -> Vec<(u32, PathBuf)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let exe = std::fs::read_link(e.path().join("exe")).ok()?;
            Some((pid, exe))
        })
        .collect()
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Processes of the node: its own programs, anything whose command line
/// names the node's directories (its control plane), and every process in
/// the pods' cgroups.
fn node_processes(paths: &NodePaths) -> Vec<(u32, String)> {
    let base = paths.base.display().to_string();
    let run_dir = paths.run.display().to_string();
    let mut found: Vec<(u32, String)> = processes()
        .into_iter()
        .filter_map(|(pid, exe)| {
            let name = exe.file_name()?.to_string_lossy().into_owned();
            let line = cmdline(pid);
            let ours = NODE_PROGRAMS.contains(&name.as_str()) && (line.contains(&base) || line.contains(&run_dir))
                || name == "containerd-shim-runc-v2" && line.contains(&run_dir)
                || line.contains(&format!("{base}/"));
            ours.then_some((pid, format!("{name} (pid {pid})")))
        })
        .collect();
    for dir in pod_cgroups() {
        for pid in cgroup_pids(&dir) {
            if !found.iter().any(|(p, _)| *p == pid) {
                found.push((pid, format!("container process (pid {pid}, cgroup {})", dir.display())));
            }
        }
    }
    found
}

/// `kubepods` cgroup trees in every hierarchy (v1 controllers and v2).
fn pod_cgroups() -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir("/sys/fs/cgroup") else { return Vec::new() };
    let mut out = Vec::new();
    for hierarchy in dir.flatten() {
        for name in ["kubepods", "kubepods.slice"] {
            let p = hierarchy.path().join(name);
            if p.is_dir() {
                out.push(p);
            }
        }
    }
    // Unified hierarchy directly at /sys/fs/cgroup (pure v2 machines).
    for name in ["kubepods", "kubepods.slice"] {
        let p = Path::new("/sys/fs/cgroup").join(name);
        if p.join("cgroup.procs").is_file() && !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// Pids in a cgroup tree.
fn cgroup_pids(dir: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                pids.extend(cgroup_pids(&e.path()));
            }
        }
    }
    pids
}

/// Removes a cgroup tree bottom-up (only empty cgroups can be removed).
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Mount points under the node's directories, deepest first.
fn node_mounts(paths: &NodePaths) -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let roots = [paths.base.display().to_string(), paths.run.display().to_string()];
    let mut mounts: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        // mountinfo escapes spaces as \040; our paths have none.
        .filter(|m| roots.iter().any(|r| m.starts_with(r.as_str())))
        .map(str::to_string)
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    mounts.dedup();
    mounts
}

/// iptables/ip6tables chains of the node, as `tool/table/chain`.
fn node_chains() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for tool in ["iptables", "ip6tables"] {
        for table in ["filter", "nat", "mangle", "raw"] {
            let Ok(saved) = run(&format!("{tool}-save"), &["-t", table]) else { continue };
            for line in saved.lines() {
                if let Some(chain) = line.strip_prefix(':').and_then(|l| l.split_whitespace().next())
                    && is_node_chain(chain)
                {
                    out.push((tool.to_string(), table.to_string(), chain.to_string()));
                }
            }
        }
    }
    out
}

/// Rules (in any chain) that jump to a node chain, as `-A …` lines.
fn rules_jumping_to_node_chains(tool: &str, table: &str) -> Vec<Vec<String>> {
    let Ok(saved) = run(&format!("{tool}-save"), &["-t", table]) else { return Vec::new() };
    saved
        .lines()
        .filter(|l| l.starts_with("-A "))
        .filter_map(|l| {
            let words = shell_words(l);
            let target = words.iter().position(|w| w == "-j" || w == "-g").and_then(|i| words.get(i + 1))?;
            let chain = words.get(1)?;
            (is_node_chain(target) && !is_node_chain(chain)).then_some(words)
        })
        .collect()
}

/// Splits an iptables-save line into words, honouring double quotes.
pub fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            '\\' if quoted => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

fn remove_node_chains() {
    for tool in ["iptables", "ip6tables"] {
        for table in ["filter", "nat", "mangle", "raw"] {
            for rule in rules_jumping_to_node_chains(tool, table) {
                let mut args: Vec<&str> = vec!["-t", table, "-D"];
                args.extend(rule.iter().skip(1).map(String::as_str));
                let _ = run(tool, &args);
            }
        }
    }
    let chains = node_chains();
    for (tool, table, chain) in &chains {
        let _ = run(tool, &["-t", table, "-F", chain]);
    }
    for (tool, table, chain) in &chains {
        let _ = run(tool, &["-t", table, "-X", chain]);
    }
}

fn node_links() -> Vec<String> {
    let mut links = Vec::new();
    if run("ip", &["link", "show", BRIDGE]).is_ok() {
        links.push(BRIDGE.to_string());
    }
    // The bridge plugin names the host ends `veth<8 hex>`; nothing else on
    // these machines makes such links.
    if let Ok(out) = run("ip", &["-o", "link", "show", "type", "veth"]) {
        links.extend(
            out.lines()
                .filter_map(|l| l.split(':').nth(1).map(|n| n.trim().split('@').next().unwrap_or("").to_string()))
                .filter(|n| n.starts_with("veth")),
        );
    }
    links
}

/// What of the node is still on the machine.
pub fn leftovers(paths: &NodePaths) -> Leftovers {
    Leftovers {
        processes: node_processes(paths).into_iter().map(|(_, d)| d).collect(),
        mounts: node_mounts(paths),
        links: node_links(),
        chains: node_chains().into_iter().map(|(tool, table, chain)| format!("{tool}/{table}/{chain}")).collect(),
        cgroups: pod_cgroups().into_iter().map(|p| p.display().to_string()).collect(),
    }
}

/// Removes everything the node made, then reports what is left.
/// `kube_proxy` (when built) runs `--cleanup` for its own rules first.
pub fn clean(paths: &NodePaths, kube_proxy: Option<&Path>, progress: &dyn Fn(&str)) -> Leftovers {
    // Processes: containers first (SIGKILL: they are being thrown away), then
    // the node's daemons and control plane (SIGTERM, then SIGKILL).
    for dir in pod_cgroups() {
        for pid in cgroup_pids(&dir) {
            terminate_pid(pid, Duration::ZERO);
        }
    }
    let procs = node_processes(paths);
    if !procs.is_empty() {
        progress(&format!("stopping {} node processes", procs.len()));
    }
    for (pid, _) in &procs {
        terminate_pid(*pid, Duration::from_secs(5));
    }
    for (pid, _) in &procs {
        for _ in 0..100 {
            if !pid_alive(*pid) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // Mounts (rootfs overlays, netns bind mounts, volume tmpfs), deepest first.
    for m in node_mounts(paths) {
        let _ = run("umount", &["-l", &m]);
    }
    // Network: with the netns gone, the veths went with them.
    if let Some(kp) = kube_proxy.filter(|p| p.is_file()) {
        let _ = run(&kp.display().to_string(), &["--cleanup"]);
    }
    remove_node_chains();
    let _ = run("ip", &["link", "del", BRIDGE]);
    for l in node_links() {
        let _ = run("ip", &["link", "del", &l]);
    }
    for dir in pod_cgroups() {
        remove_cgroup_tree(&dir);
    }
    // Files: everything but the lock (held by whoever is cleaning).
    let _ = std::fs::remove_dir_all(&paths.base);
    if let Ok(entries) = std::fs::read_dir(&paths.run) {
        for e in entries.flatten() {
            if e.path() != paths.lock_file() {
                let _ = std::fs::remove_dir_all(e.path()).or_else(|_| std::fs::remove_file(e.path()));
            }
        }
    }
    leftovers(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iptables_save_lines_split_like_the_shell() {
        let line = r#"-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS"#;
        let w = shell_words(line);
        assert_eq!(w[0], "-A");
        assert_eq!(w[4], "--comment");
        assert_eq!(w[5], "kubernetes health check service ports");
        assert_eq!(w.last().map(String::as_str), Some("KUBE-NODEPORTS"));
    }

    #[test]
    fn node_chains_are_ours_kubernetes_and_cni() {
        assert!(is_node_chain("KUBE-FIREWALL"));
        assert!(is_node_chain("CNI-HOSTPORT-DNAT"));
        assert!(is_node_chain("FLOTILLA-EGRESS"));
        assert!(!is_node_chain("DOCKER"));
        assert!(!is_node_chain("INPUT"));
    }

    #[test]
    fn a_clean_machine_says_so() {
        assert_eq!(Leftovers::default().to_string(), "nothing left");
        let l = Leftovers { links: vec!["flotilla0".into()], ..Default::default() };
        assert_eq!(l.to_string(), "network links: flotilla0");
    }
}
