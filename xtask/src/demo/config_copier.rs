//! The config-copier part of `cargo xtask demo`: the seed's scenario from
//! `examples/config-copier/`. A CopyRule in `default` copies the labelled
//! ConfigMap into the namespaces that exist, then into one created
//! afterwards, then a source update reaches every copy. Prints each step.

use std::time::{Duration, Instant};

use anyhow::bail;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

use super::DemoEnv;

const TEAMS: [&str; 2] = ["team-a", "team-b"];

pub fn start(env: &DemoEnv) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + '_>> {
    Box::pin(run(env))
}

async fn run(env: &DemoEnv) -> anyhow::Result<()> {
    let client =
        flotilla_testenv::cluster::kubeconfig::client_from_yaml(&std::fs::read_to_string(&env.kubeconfig)?).await?;
    let examples = env.root.join("examples").join("config-copier");
    let apply = |file: &str| {
        let path = examples.join(file);
        eprintln!("    kubectl apply -f examples/config-copier/{file}");
        env.kubectl(&["apply", "--server-side", "-f", &path.display().to_string()])
    };

    apply("00-namespaces.yaml")?;
    apply("01-source.yaml")?;
    apply("02-copyrule.yaml")?;
    for ns in TEAMS {
        let took = wait_for_copy(&client, ns, "hello").await?;
        eprintln!("    copied default/app-config -> {ns}/app-config in {took:.1?}");
    }

    apply("03-new-namespace.yaml")?;
    let took = wait_for_copy(&client, "team-c", "hello").await?;
    eprintln!("    new namespace team-c got its copy in {took:.1?}");

    apply("04-source-update.yaml")?;
    for ns in TEAMS.iter().copied().chain(["team-c"]) {
        let took = wait_for_copy(&client, ns, "bonjour").await?;
        eprintln!("    source update reached {ns}/app-config (greeting=bonjour) in {took:.1?}");
    }
    show(env, &["get", "copyrules", "-n", "default"])?;
    show(env, &["get", "configmaps", "-A", "-l", "flotilla.dev/copy-rule=default.main-rule", "-L", "copyrator"])?;
    show(env, &["explain", "copyrule.spec.onConflict"])?;
    Ok(())
}

/// Waits until `ns/app-config` is a copy with `greeting` = `want`.
async fn wait_for_copy(client: &Client, ns: &str, want: &str) -> anyhow::Result<Duration> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let started = Instant::now();
    loop {
        if let Ok(Some(cm)) = api.get_opt("app-config").await
            && cm.data.as_ref().and_then(|d| d.get("greeting")).map(String::as_str) == Some(want)
        {
            return Ok(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("{ns}/app-config did not get greeting={want} within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn show(env: &DemoEnv, args: &[&str]) -> anyhow::Result<()> {
    eprintln!("    kubectl {}", args.join(" "));
    env.kubectl(args)
}
