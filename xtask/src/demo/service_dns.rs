//! The service-dns part of `cargo xtask demo`: with the operator running as
//! a pod (installed by the umbrella chart) against moto's hosted zone
//! `demo.example`, the seed's scenario from `examples/service-dns/`: the
//! NodePort Service `hello-world` in namespace `test` gets
//! `kube-hello-world.demo.example` → its ClusterIP, then TTL 120 by
//! annotation (an UPSERT, through the Route53-faithful proxy); an annotated
//! Service gets the two names its namespace was granted
//! (`flotilla.dev/allowed-hostnames` in `00-namespace.yaml`); deleting it
//! removes them. Prints the zone and the Events.

use std::time::{Duration, Instant};

use anyhow::bail;
use flotilla_testenv::aws::moto::route53;

use super::DemoEnv;

pub const DOMAIN: &str = "demo.example";

pub fn start(env: &DemoEnv) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + '_>> {
    Box::pin(run(env))
}

async fn run(env: &DemoEnv) -> anyhow::Result<()> {
    let (endpoint, zone) = (env.moto_endpoint.clone(), env.zone.clone());
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

    // An update is an UPSERT guarded by our ownership TXT in the same batch.
    eprintln!("    kubectl annotate service hello-world -n test flotilla.dev/ttl=120");
    kubectl(&["annotate", "--overwrite", "service", "hello-world", "-n", "test", "flotilla.dev/ttl=120"])?;
    let took = wait_ttl(&endpoint, &zone, &name, 120).await?;
    eprintln!("    {name} A now has TTL 120, {took:.1?} after the annotation");

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
    Ok(())
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

/// Waits until `name`'s A record has TTL `ttl`.
async fn wait_ttl(endpoint: &str, zone: &str, name: &str, ttl: u64) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        if route53::find_set(endpoint, zone, name, "A")?.is_some_and(|(t, _)| t == Some(ttl)) {
            return Ok(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("{name} did not get TTL {ttl} within 60s");
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
