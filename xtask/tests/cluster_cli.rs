//! `cargo xtask cluster up|status|down` as a user runs them: the binary,
//! then kubectl against the kubeconfig it prints, then no process left.

use std::path::PathBuf;
use std::process::Command;

use flotilla_testenv::Assets;
use flotilla_testenv::cluster::process::pid_alive;

fn xtask(dir: &PathBuf, args: &[&str]) -> std::process::Output {
    match Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).env("FLOTILLA_CLUSTER_DIR", dir).output() {
        Ok(out) => out,
        Err(e) => panic!("running xtask {args:?}: {e}"),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn cluster_up_gives_a_working_kubectl_and_down_leaves_no_process() {
    let assets = match Assets::locate() {
        Ok(a) => a,
        Err(e) => panic!("{e}"),
    };
    let dir = std::env::temp_dir().join(format!("flotilla-cluster-cli-{}", std::process::id()));

    let up = xtask(&dir, &["cluster", "up", "--control-plane-only"]);
    assert!(up.status.success(), "cluster up failed:\n{}", text(&up.stderr));
    let stdout = text(&up.stdout);
    let kubeconfig = dir.join("kubeconfig");
    assert_eq!(stdout.trim(), format!("export KUBECONFIG={}", kubeconfig.display()));
    assert!(text(&up.stderr).contains("kubectl:"), "up should say where kubectl is");

    let pids: Vec<u32> = std::fs::read_to_string(dir.join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' ')?.1.parse().ok())
        .collect();
    assert_eq!(pids.len(), 4, "four components recorded");

    let status = xtask(&dir, &["cluster", "status"]);
    assert!(status.status.success(), "status: {}", text(&status.stderr));

    let get_ns = Command::new(assets.bin("kubectl")).args(["get", "ns"]).env("KUBECONFIG", &kubeconfig).output();
    let get_ns = match get_ns {
        Ok(o) => o,
        Err(e) => panic!("kubectl: {e}"),
    };
    // Not the machine's one-node cluster: other tests may be running on it.
    let down = xtask(&dir, &["cluster", "down", "--control-plane-only"]);
    assert!(get_ns.status.success(), "kubectl get ns failed: {}", text(&get_ns.stderr));
    assert!(text(&get_ns.stdout).contains("kube-system"), "{}", text(&get_ns.stdout));

    assert!(down.status.success(), "cluster down failed: {}", text(&down.stderr));
    let alive: Vec<u32> = pids.into_iter().filter(|p| pid_alive(*p)).collect();
    assert!(alive.is_empty(), "processes left after `cluster down`: {alive:?}");
    // The machine's one-node cluster may be running meanwhile (`cargo xtask
    // test` runs the tests on it), so status is asked about this one only.
    let status = xtask(&dir, &["cluster", "status"]);
    assert!(!text(&status.stderr).contains("control plane only"), "status after down: {}", text(&status.stderr));
    let _ = std::fs::remove_dir_all(dir);
}
