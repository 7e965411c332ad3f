//! The load-tester part of `cargo xtask demo`: the seed's scenarios from
//! `examples/load-tester/`. example-02 sends 5 × 10 requests to an nginx
//! Service and prints its merged results; example-01 keeps one pod.

use std::time::{Duration, Instant};

use anyhow::bail;

use super::DemoEnv;

pub fn start(env: &DemoEnv) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + '_>> {
    Box::pin(run(env))
}

async fn run(env: &DemoEnv) -> anyhow::Result<()> {
    let examples = env.root.join("examples").join("load-tester");
    let target = examples.join("00-nginx.yaml").display().to_string();
    eprintln!("    kubectl apply -f examples/load-tester/00-nginx.yaml");
    env.kubectl(&["apply", "--server-side", "-f", &target])?;
    env.kubectl(&["wait", "--for=condition=Ready", "pod/nginx", "-n", "default", "--timeout=120s"])?;
    for file in ["01-example-02.yaml", "02-example-01.yaml"] {
        eprintln!("    kubectl apply -f examples/load-tester/{file}");
        env.kubectl(&["apply", "--server-side", "-f", &examples.join(file).display().to_string()])?;
    }
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let state =
            env.kubectl_output(&["get", "loadtest", "example-02", "-n", "default", "-o", "jsonpath={.status.state}"])?;
        if state != last {
            eprintln!("    example-02: {state} ({:.1?})", started.elapsed());
            last = state.clone();
        }
        if state == "Finished" || state == "Failed" {
            break;
        }
        if started.elapsed() > Duration::from_secs(180) {
            bail!("example-02 did not end within 180 s");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    eprintln!("    kubectl get loadtests -n default");
    env.kubectl(&["get", "loadtests", "-n", "default"])?;
    eprintln!("    kubectl get loadtest example-02 -o jsonpath='{{.status.results}}'");
    env.kubectl(&["get", "loadtest", "example-02", "-n", "default", "-o", "jsonpath={.status.results}"])?;
    eprintln!();
    eprintln!("    kubectl get simpledeployments -n default");
    env.kubectl(&["get", "simpledeployments", "-n", "default"])
}
