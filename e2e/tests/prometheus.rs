//! A real Prometheus (Debian's package) scrapes a running operator: `up` is 1
//! and the controller-runtime reconcile metrics of its controller are there.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use flotilla_e2e::{Prometheus, apply_crds, start_operator};
use flotilla_testenv::build::tools;
use flotilla_testenv::{shared, wait_for};

#[tokio::test]
async fn prometheus_scrapes_the_operator_metrics() {
    tools::prometheus().unwrap_or_else(|e| panic!("{e}"));
    let env = shared();
    apply_crds(&env.client().await).await.unwrap();
    let op = "config-copier";
    let operator = start_operator(op, &env.kubeconfig, &["--log-format=json".to_string()], &[]).unwrap();

    let prom = Prometheus::start(&[(&format!("flotilla-{op}"), vec![operator.metrics_address()])]).unwrap();
    let job = format!("flotilla-{op}");
    wait_for("Prometheus to see the operator up", Duration::from_secs(60), || async {
        let r = prom.query(&format!("up{{job=\"{job}\"}}")).await?;
        Ok::<_, String>(r.first().filter(|s| s["value"][1] == "1").map(|_| ()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nprometheus log:\n{}\noperator log:\n{}", prom.log(), operator.logs()));

    let series = wait_for("controller_runtime_reconcile_total in Prometheus", Duration::from_secs(30), || async {
        let r = prom.query(&format!("controller_runtime_reconcile_total{{job=\"{job}\"}}")).await?;
        Ok::<_, String>((!r.is_empty()).then_some(r))
    })
    .await
    .unwrap();
    let results: Vec<&str> = series.iter().filter_map(|s| s["metric"]["result"].as_str()).collect();
    for r in ["success", "error", "requeue", "requeue_after"] {
        assert!(results.contains(&r), "result={r} missing: {results:?}");
    }
    // config-copier runs two controllers: CopyRule's and CopyRequest's.
    let controllers: std::collections::BTreeSet<&str> =
        series.iter().filter_map(|s| s["metric"]["controller"].as_str()).collect();
    assert_eq!(controllers, ["copyrequest", "copyrule"].into(), "{series:?}");
    let rss = prom.query(&format!("process_resident_memory_bytes{{job=\"{job}\"}}")).await.unwrap();
    assert!(!rss.is_empty(), "process metrics are scraped too");
}
