//! A real Prometheus (Debian's package) scrapes a running operator: `up` is 1
//! and the controller-runtime reconcile metrics of its controller are there.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use flotilla_e2e::{apply_crds, start_operator};
use flotilla_testenv::{shared, tools, wait_for};
use serde_json::Value;

struct Prometheus(Child, std::path::PathBuf);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

async fn query(port: u16, q: &str) -> Result<Vec<Value>, String> {
    let url = format!("http://127.0.0.1:{port}/api/v1/query");
    let r = reqwest::Client::new()
        .get(url)
        .query(&[("query", q)])
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let body: Value = r.json().await.map_err(|e| e.to_string())?;
    Ok(body["data"]["result"].as_array().cloned().unwrap_or_default())
}

#[tokio::test]
async fn prometheus_scrapes_the_operator_metrics() {
    let prometheus = tools::prometheus().unwrap_or_else(|e| panic!("{e}"));
    let env = shared();
    apply_crds(&env.client().await).await.unwrap();
    let op = "config-copier";
    let operator = start_operator(op, &env.kubeconfig, &["--log-format=json".to_string()], &[]).unwrap();

    let dir = std::env::temp_dir().join(format!("flotilla-prometheus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: flotilla-{op}\n    static_configs:\n      - targets: ['{}']\n",
        operator.metrics_address()
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let port = flotilla_testenv::process::free_port().unwrap();
    let child = Command::new(prometheus)
        .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .spawn()
        .expect("starting prometheus");
    let _prom = Prometheus(child, dir.clone());

    let job = format!("flotilla-{op}");
    wait_for("Prometheus to see the operator up", Duration::from_secs(60), || async {
        let r = query(port, &format!("up{{job=\"{job}\"}}")).await?;
        Ok::<_, String>(r.first().filter(|s| s["value"][1] == "1").map(|_| ()))
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}\nprometheus log:\n{}\noperator log:\n{}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default(),
            operator.logs()
        )
    });

    let series = wait_for("controller_runtime_reconcile_total in Prometheus", Duration::from_secs(30), || async {
        let r = query(port, &format!("controller_runtime_reconcile_total{{job=\"{job}\"}}")).await?;
        Ok::<_, String>((!r.is_empty()).then_some(r))
    })
    .await
    .unwrap();
    let results: Vec<&str> = series.iter().filter_map(|s| s["metric"]["result"].as_str()).collect();
    for r in ["success", "error", "requeue", "requeue_after"] {
        assert!(results.contains(&r), "result={r} missing: {results:?}");
    }
    assert!(series.iter().all(|s| s["metric"]["controller"] == "copyrule"), "{series:?}");
    let rss = query(port, &format!("process_resident_memory_bytes{{job=\"{job}\"}}")).await.unwrap();
    assert!(!rss.is_empty(), "process metrics are scraped too");
}
