//! The pod-debugger part of `cargo xtask demo`: the seed's scenario from
//! `examples/pod-debugger/`. The `payment` pod gets a busybox debug
//! container; the demo shows it running, `ps` in it seeing the app's
//! process, and prints the `kubectl exec` line to use.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::DemoEnv;

pub fn start(env: &DemoEnv) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + '_>> {
    Box::pin(run(env))
}

async fn run(env: &DemoEnv) -> anyhow::Result<()> {
    let examples = env.root.join("examples").join("pod-debugger");
    for file in ["00-payment-pod.yaml", "01-poddebugger.yaml"] {
        eprintln!("    kubectl apply -f examples/pod-debugger/{file}");
        env.kubectl(&["apply", "--server-side", "-f", &examples.join(file).display().to_string()])?;
    }
    let started = Instant::now();
    let state = "jsonpath={.status.ephemeralContainerStatuses[0].state.running.startedAt}";
    loop {
        if !env.kubectl_output(&["get", "pod", "payment", "-n", "default", "-o", state])?.is_empty() {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            bail!("no running debug container in pod payment within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let container =
        env.kubectl_output(&["get", "pdbg", "payment", "-n", "default", "-o", "jsonpath={.status.container}"])?;
    eprintln!(
        "    debug container {container} running in pod payment, {:.1?} after the rule was applied",
        started.elapsed()
    );
    eprintln!("    kubectl get pdbg -n default");
    env.kubectl(&["get", "pdbg", "-n", "default"])?;
    eprintln!("    kubectl exec -n default payment -c {container} -- ps -o pid,args   (it sees the app's process)");
    env.kubectl(&["exec", "-n", "default", "payment", "-c", &container, "--", "ps", "-o", "pid,args"])
        .context("ps in the debug container")?;
    eprintln!();
    eprintln!("    for a shell:  kubectl exec -it -n default payment -c {container} -- sh");
    eprintln!("    kubectl explain poddebugger.spec.profile");
    env.kubectl(&["explain", "poddebugger.spec.profile"])
}
