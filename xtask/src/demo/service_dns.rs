//! The service-dns part of `cargo xtask demo`: moto (the Route53 emulator)
//! with a hosted zone `demo.example`, the operator running against the demo
//! cluster, and the seed's scenario from `examples/service-dns/`: the
//! NodePort Service `hello-world` in namespace `test` gets
//! `kube-hello-world.demo.example` → its ClusterIP; an annotated Service gets
//! two names; deleting it removes them. Prints the zone and the Events.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_testenv::Lifetime;
use flotilla_testenv::moto::{self, MotoServer, route53};

use super::{DemoEnv, Running};

const DOMAIN: &str = "demo.example";

pub fn start(env: &DemoEnv) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<Vec<Running>>> + '_>> {
    Box::pin(run(env))
}

async fn run(env: &DemoEnv) -> anyhow::Result<Vec<Running>> {
    let binary = env.operator_binary("service-dns");
    if !binary.is_file() {
        bail!("{} is missing (cargo build --workspace --bins)", binary.display());
    }
    let dir = env.root.join("target").join("flotilla-demo");
    moto::locate().context("the Route53 emulator")?;
    let server = MotoServer::start(&dir, Lifetime::DieWithParent).context("starting moto")?;
    let endpoint = server.endpoint.clone();
    let mut running = vec![Running { name: "moto (Route53 emulator)".into(), child: server.process.child }];
    let zone = route53::create_hosted_zone(&endpoint, DOMAIN).context("creating the hosted zone")?;
    eprintln!("    moto on {endpoint}: hosted zone {zone} ({DOMAIN})");

    let (mp, hp) = (flotilla_testenv::process::free_port()?, flotilla_testenv::process::free_port()?);
    let log = dir.join("service-dns.log");
    let child = Command::new(&binary)
        .arg(format!("--metrics-bind-address=127.0.0.1:{mp}"))
        .arg(format!("--health-probe-bind-address=127.0.0.1:{hp}"))
        .arg("--log-format=text")
        .env("KUBECONFIG", &env.kubeconfig)
        .env("HOSTED_ZONE_ID", &zone)
        .env("DOMAIN_NAME", DOMAIN)
        .env("DOMAIN_PREFIX", "kube")
        .env("AWS_ENDPOINT_URL_ROUTE_53", &endpoint)
        .env("AWS_ACCESS_KEY_ID", "demo")
        .env("AWS_SECRET_ACCESS_KEY", "demo")
        .env("AWS_REGION", "us-east-1")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).with_context(|| log.display().to_string())?)
        .spawn()
        .context("starting service-dns")?;
    running.push(Running { name: "service-dns".into(), child });
    eprintln!("    service-dns running: metrics http://127.0.0.1:{mp}/metrics, log {}", log.display());
    eprintln!(
        "    (by hand: AWS_ENDPOINT_URL_ROUTE_53={endpoint} AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x aws route53 list-resource-record-sets --hosted-zone-id {zone})"
    );

    let examples = env.root.join("examples").join("service-dns");
    let kubectl = |args: &[&str]| env.kubectl(args);
    let apply = |file: &str| {
        eprintln!("    kubectl apply -f examples/service-dns/{file}");
        kubectl(&["apply", "--server-side", "-f", &examples.join(file).display().to_string()])
    };

    apply("00-namespace.yaml")?;
    apply("01-hello-world.yaml")?;
    let name = format!("kube-hello-world.{DOMAIN}");
    let (values, took) = wait_record(&endpoint, &zone, &name, true).await?;
    eprintln!("    {name} A {} appeared in {took:.1?}", values.join(", "));

    apply("02-annotated.yaml")?;
    for n in [format!("api.{DOMAIN}"), format!("grpc.{DOMAIN}")] {
        let (values, took) = wait_record(&endpoint, &zone, &n, true).await?;
        eprintln!("    {n} A {} appeared in {took:.1?}", values.join(", "));
    }
    print_zone(&endpoint, &zone)?;
    eprintln!("    kubectl describe service hello-world -n test   (the Events, as in the seed)");
    kubectl(&["describe", "service", "hello-world", "-n", "test"])?;

    eprintln!("    kubectl delete service api -n test");
    kubectl(&["delete", "service", "api", "-n", "test"])?;
    for n in [format!("api.{DOMAIN}"), format!("grpc.{DOMAIN}")] {
        let (_, took) = wait_record(&endpoint, &zone, &n, false).await?;
        eprintln!("    {n} removed in {took:.1?}");
    }
    print_zone(&endpoint, &zone)?;
    // Events are published in the background, after GetChange says INSYNC.
    tokio::time::sleep(Duration::from_secs(2)).await;
    kubectl(&[
        "get",
        "events.events.k8s.io",
        "-n",
        "test",
        "-o",
        "custom-columns=TYPE:.type,REASON:.reason,OBJECT:.regarding.name,NOTE:.note",
    ])?;
    Ok(running)
}

/// Waits until `name` has an A record (`present`) or has none.
async fn wait_record(endpoint: &str, zone: &str, name: &str, present: bool) -> anyhow::Result<(Vec<String>, Duration)> {
    let started = Instant::now();
    loop {
        let found = route53::find(endpoint, zone, name, "A")?;
        match (present, found) {
            (true, Some(v)) => return Ok((v, started.elapsed())),
            (false, None) => return Ok((Vec::new(), started.elapsed())),
            _ => {}
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("{name} did not {} within 60s", if present { "appear" } else { "go away" });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn print_zone(endpoint: &str, zone: &str) -> anyhow::Result<()> {
    eprintln!("    zone {DOMAIN} ({zone}):");
    for (name, rtype, values) in route53::list_record_sets(endpoint, zone)? {
        if rtype == "SOA" || rtype == "NS" {
            continue;
        }
        eprintln!("      {name:<50} {rtype:<5} {}", values.join(" "));
    }
    Ok(())
}
