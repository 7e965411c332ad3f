//! The chart values users expect from cert-manager's and external-dns's
//! charts, as `helm template` renders them in every operator chart (they
//! live once, in flotilla-common): `image.digest`, `commonLabels`,
//! `namespaceOverride`, the PodDisruptionBudget that comes with a second
//! replica, `logLevel` (down to what the binary logs), probe overrides,
//! Deployment and monitor extras, and which operators the umbrella installs
//! by default.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use flotilla_e2e::{
    UMBRELLA, build_chart_dependencies, charts_dir, helm_ok, operators, required_values, yaml_documents,
};
use serde_json::{Value, json};

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Every object that can render, so that "every object" means every one.
const EVERYTHING: &[&str] = &[
    "--set",
    "metrics.serviceMonitor.enabled=true",
    "--set",
    "metrics.podMonitor.enabled=true",
    "--set",
    "prometheusRule.enabled=true",
    "--set",
    "grafanaDashboard.enabled=true",
    "--set",
    "networkPolicy.enabled=true",
];

fn render(chart: &str, extra: &[&str]) -> Vec<Value> {
    build_chart_dependencies().unwrap();
    let path = charts_dir().join(chart).display().to_string();
    let mut args = vec!["template", "rel", &path, "--namespace", "ops"];
    args.extend(required_values(chart));
    args.extend_from_slice(extra);
    yaml_documents(&helm_ok(None, &args).unwrap_or_else(|e| panic!("{chart}: {e}"))).unwrap()
}

fn deployment(docs: &[Value]) -> &Value {
    docs.iter().find(|d| d["kind"] == "Deployment").expect("a Deployment")
}

fn container(docs: &[Value]) -> &Value {
    &deployment(docs)["spec"]["template"]["spec"]["containers"][0]
}

fn args(docs: &[Value]) -> Vec<String> {
    serde_json::from_value(container(docs)["args"].clone()).unwrap()
}

fn kinds(docs: &[Value]) -> BTreeSet<String> {
    docs.iter().filter_map(|d| d["kind"].as_str().map(str::to_string)).collect()
}

#[test]
fn an_image_digest_pins_the_image_whatever_the_tags_say() {
    for op in operators().unwrap() {
        let docs = render(&op, &["--set", &format!("image.digest={DIGEST}"), "--set", "global.image.tag=v9"]);
        assert_eq!(container(&docs)["image"], format!("ghcr.io/flotilla-dev/flotilla-{op}@{DIGEST}"), "{op}");
        // Without it, the tag as before.
        let docs = render(&op, &[]);
        assert_eq!(container(&docs)["image"], format!("ghcr.io/flotilla-dev/flotilla-{op}:0.1.0"), "{op}");
    }
    let docs = render("load-tester", &["--set", &format!("loadgen.image.digest={DIGEST}")]);
    let loadgen = format!("--loadgen-image=ghcr.io/flotilla-dev/flotilla-loadgen@{DIGEST}");
    assert!(args(&docs).contains(&loadgen), "{:?}", args(&docs));
    // A tag passed as a digest is refused by the schema, not rendered as repo@v1.0.
    let path = charts_dir().join("pod-alert").display().to_string();
    let out = flotilla_e2e::helm(None, &["template", "rel", &path, "--set", "image.digest=v1.0"]).unwrap();
    assert!(!out.status.success(), "a tag passed as a digest is accepted");
}

#[test]
fn common_labels_are_on_every_object_and_the_pods() {
    for op in operators().unwrap() {
        let mut extra = EVERYTHING.to_vec();
        extra.extend(["--set", "commonLabels.team=platform", "--set", "commonLabels.cost-centre=42x"]);
        let docs = render(&op, &extra);
        assert!(docs.len() > 10, "{op}: only {:?}", kinds(&docs));
        for d in &docs {
            let labels = &d["metadata"]["labels"];
            assert_eq!(labels["team"], "platform", "{op}: {} {} lacks it", d["kind"], d["metadata"]["name"]);
            assert_eq!(labels["cost-centre"], "42x", "{op}: {} {}", d["kind"], d["metadata"]["name"]);
            // The chart's own labels are still there.
            assert_eq!(labels["app.kubernetes.io/part-of"], "flotilla", "{op}: {}", d["kind"]);
        }
        assert_eq!(deployment(&docs)["spec"]["template"]["metadata"]["labels"]["team"], "platform", "{op}");
    }
}

/// Objects Kubernetes keeps in a namespace.
const NAMESPACED: &[&str] = &[
    "ServiceAccount",
    "Deployment",
    "Service",
    "Role",
    "RoleBinding",
    "PodDisruptionBudget",
    "NetworkPolicy",
    "ServiceMonitor",
    "PodMonitor",
    "PrometheusRule",
    "ConfigMap",
];

#[test]
fn namespace_override_moves_every_namespaced_object_and_the_lease() {
    for op in operators().unwrap() {
        let mut extra = EVERYTHING.to_vec();
        extra.extend(["--set", "namespaceOverride=flotilla-system"]);
        let docs = render(&op, &extra);
        for d in docs.iter().filter(|d| NAMESPACED.contains(&d["kind"].as_str().unwrap())) {
            // Without a namespace, helm would put it in the release's (ops).
            assert_eq!(
                d["metadata"]["namespace"], "flotilla-system",
                "{op}: {} {} stays behind",
                d["kind"], d["metadata"]["name"]
            );
        }
        // Bindings name the ServiceAccount where it now is.
        for d in docs.iter().filter(|d| d["kind"].as_str().unwrap().ends_with("Binding")) {
            for s in d["subjects"].as_array().into_iter().flatten() {
                if s["kind"] == "ServiceAccount" {
                    assert_eq!(s["namespace"], "flotilla-system", "{op}: {}", d["metadata"]["name"]);
                }
            }
        }
        assert!(args(&docs).contains(&"--leader-election-namespace=flotilla-system".to_string()), "{op}");
        for m in docs.iter().filter(|d| d["kind"] == "ServiceMonitor" || d["kind"] == "PodMonitor") {
            assert_eq!(m["spec"]["namespaceSelector"]["matchNames"], json!(["flotilla-system"]), "{op}");
        }
        let rule = docs.iter().find(|d| d["kind"] == "PrometheusRule").unwrap();
        assert!(rule["spec"].to_string().contains(r#"namespace=\"flotilla-system\""#), "{op}: alerts select ops");
    }
}

#[test]
fn a_disruption_budget_comes_with_a_second_replica_and_never_over_one() {
    for op in operators().unwrap() {
        let pdb = |extra: &[&str]| {
            let docs = render(&op, extra);
            docs.iter().find(|d| d["kind"] == "PodDisruptionBudget").cloned().map(|p| (p, docs))
        };
        let (p, docs) = pdb(&["--set", "replicaCount=2"]).unwrap_or_else(|| panic!("{op}: none with 2 replicas"));
        assert_eq!(p["spec"]["minAvailable"], 1, "{op}");
        let pod_labels = &deployment(&docs)["spec"]["template"]["metadata"]["labels"];
        for (k, v) in p["spec"]["selector"]["matchLabels"].as_object().unwrap() {
            assert_eq!(&pod_labels[k], v, "{op}: the budget selects {k}={v}, the pods do not carry it");
        }
        assert!(pdb(&["--set", "replicaCount=1"]).is_none(), "{op}: a budget over one pod blocks drains");
        // Leader election off: one replica runs whatever replicaCount says.
        assert!(pdb(&["--set", "replicaCount=3", "--set", "leaderElection.enabled=false"]).is_none(), "{op}");
        // Said outright, it is obeyed.
        assert!(pdb(&["--set", "replicaCount=1", "--set", "podDisruptionBudget.enabled=true"]).is_some(), "{op}");
        assert!(pdb(&["--set", "replicaCount=2", "--set", "podDisruptionBudget.enabled=false"]).is_none(), "{op}");
    }
}

/// `logLevel` reaches the flags, and the binary logs at that level: run with
/// the rendered args against an API server that is not there (it retries,
/// logging), the debug level shows DEBUG lines and the error level only
/// ERROR ones; RUST_LOG, when set, wins.
#[test]
fn log_level_reaches_the_args_and_the_binary_obeys_it() {
    let dir = std::env::temp_dir().join(format!("flotilla-chart-loglevel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    // Port 1 on loopback: refused at once, every time.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let levels = |op: &str, args: &[String], rust_log: Option<&str>| -> BTreeSet<String> {
        let bin = flotilla_e2e::operator_binary(op).unwrap();
        let mut cmd = std::process::Command::new(&bin);
        cmd.args(args)
            .args(["--metrics-bind-address=0", "--health-probe-bind-address=0", "--log-format=json"])
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if let Some(r) = rust_log {
            cmd.env("RUST_LOG", r);
        }
        let mut child = cmd.spawn().unwrap();
        std::thread::sleep(Duration::from_secs(3));
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        stderr
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| v["level"].as_str().map(str::to_string))
            .collect()
    };
    for op in operators().unwrap() {
        let debug = args(&render(&op, &["--set", "logLevel=debug"]));
        assert!(debug.contains(&"--log-level=debug".to_string()), "{op}: {debug:?}");
        let error = args(&render(&op, &["--set", "logLevel=error"]));
        assert!(error.contains(&"--log-level=error".to_string()), "{op}: {error:?}");

        let seen = levels(&op, &debug, None);
        assert!(seen.contains("DEBUG"), "{op}: --log-level=debug logged only {seen:?}");
        let seen = levels(&op, &error, None);
        assert!(seen.contains("ERROR"), "{op}: nothing logged at all: {seen:?}");
        assert!(seen.iter().all(|l| l == "ERROR"), "{op}: --log-level=error logged {seen:?}");
        let seen = levels(&op, &debug, Some("error"));
        assert!(seen.iter().all(|l| l == "ERROR"), "{op}: RUST_LOG=error lost to --log-level=debug: {seen:?}");
    }
    // The umbrella's global.logLevel reaches every operator.
    let docs = render(UMBRELLA, &["--set", "global.logLevel=warn"]);
    for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
        let a = d["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
        assert!(a.contains("--log-level=warn"), "{}: {a}", d["metadata"]["name"]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn leader_election_timings_reach_the_flags() {
    for op in operators().unwrap() {
        let a = args(&render(
            &op,
            &[
                "--set",
                "leaderElection.leaseDuration=30s",
                "--set",
                "leaderElection.renewDeadline=20s",
                "--set",
                "leaderElection.retryPeriod=4s",
            ],
        ));
        for flag in
            ["--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=4s"]
        {
            assert!(a.contains(&flag.to_string()), "{op}: {flag} not in {a:?}");
        }
    }
}

#[test]
fn a_probe_set_in_values_replaces_the_default_whole() {
    for op in operators().unwrap() {
        let docs = render(
            &op,
            &[
                "--set",
                "livenessProbe.tcpSocket.port=health",
                "--set",
                "livenessProbe.periodSeconds=30",
                "--set",
                "readinessProbe.httpGet.path=/readyz",
                "--set",
                "readinessProbe.httpGet.port=health",
                "--set",
                "readinessProbe.failureThreshold=6",
            ],
        );
        let c = container(&docs);
        // One handler: the default's httpGet would make the probe invalid.
        assert_eq!(c["livenessProbe"], json!({"tcpSocket": {"port": "health"}, "periodSeconds": 30}), "{op}");
        assert_eq!(
            c["readinessProbe"],
            json!({"httpGet": {"path": "/readyz", "port": "health"}, "failureThreshold": 6}),
            "{op}"
        );
        // Unset, the defaults.
        let c = render(&op, &[]);
        let c = container(&c);
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz", "{op}");
        assert_eq!(c["livenessProbe"]["initialDelaySeconds"], 5, "{op}");
        assert_eq!(c["readinessProbe"]["periodSeconds"], 5, "{op}");
    }
}

#[test]
fn deployment_and_monitor_extras_render() {
    for op in operators().unwrap() {
        let docs = render(
            &op,
            &[
                "--set",
                "deploymentAnnotations.reloader\\.stakater\\.com/search=yes",
                "--set",
                "revisionHistoryLimit=2",
                "--set",
                "strategy.type=Recreate",
                "--set",
                "volumes[0].name=ca",
                "--set",
                "volumes[0].configMap.name=ca-bundle",
                "--set",
                "volumeMounts[0].name=ca",
                "--set",
                "volumeMounts[0].mountPath=/etc/ssl/extra",
                "--set",
                "metrics.serviceMonitor.enabled=true",
                "--set",
                "metrics.serviceMonitor.honorLabels=true",
                "--set",
                "metrics.serviceMonitor.annotations.owner=sre",
                "--set",
                "metrics.serviceMonitor.relabelings[0].targetLabel=cluster",
                "--set",
                "metrics.serviceMonitor.relabelings[0].replacement=blue",
                "--set",
                "metrics.serviceMonitor.metricRelabelings[0].action=drop",
                "--set",
                "metrics.serviceMonitor.metricRelabelings[0].regex=go_.*",
                "--set",
                "metrics.serviceMonitor.metricRelabelings[0].sourceLabels[0]=__name__",
                "--set",
                "metrics.podMonitor.enabled=true",
                "--set",
                "metrics.podMonitor.honorLabels=true",
                "--set",
                "metrics.podMonitor.annotations.owner=sre",
                "--set",
                "metrics.podMonitor.relabelings[0].targetLabel=cluster",
                "--set",
                "metrics.podMonitor.relabelings[0].replacement=blue",
            ],
        );
        let d = deployment(&docs);
        assert_eq!(d["metadata"]["annotations"]["reloader.stakater.com/search"], "yes", "{op}");
        assert!(d["spec"]["template"]["metadata"]["annotations"].get("reloader.stakater.com/search").is_none());
        assert_eq!(d["spec"]["revisionHistoryLimit"], 2, "{op}");
        assert_eq!(d["spec"]["strategy"], json!({"type": "Recreate"}), "{op}");
        assert_eq!(
            d["spec"]["template"]["spec"]["volumes"],
            json!([{"name": "ca", "configMap": {"name": "ca-bundle"}}])
        );
        assert_eq!(container(&docs)["volumeMounts"], json!([{"name": "ca", "mountPath": "/etc/ssl/extra"}]));
        let sm = docs.iter().find(|d| d["kind"] == "ServiceMonitor").unwrap();
        let ep = &sm["spec"]["endpoints"][0];
        assert_eq!(sm["metadata"]["annotations"]["owner"], "sre", "{op}");
        assert_eq!(ep["honorLabels"], true, "{op}");
        assert_eq!(ep["relabelings"], json!([{"targetLabel": "cluster", "replacement": "blue"}]), "{op}");
        assert_eq!(
            ep["metricRelabelings"],
            json!([{"action": "drop", "regex": "go_.*", "sourceLabels": ["__name__"]}]),
            "{op}"
        );
        let pm = docs.iter().find(|d| d["kind"] == "PodMonitor").unwrap();
        assert_eq!(pm["metadata"]["annotations"]["owner"], "sre", "{op}");
        assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["honorLabels"], true, "{op}");
        assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["targetLabel"], "cluster", "{op}");
        // Unset: the defaults, nothing extra.
        let docs = render(&op, &["--set", "metrics.serviceMonitor.enabled=true"]);
        let d = deployment(&docs);
        assert_eq!(d["spec"]["revisionHistoryLimit"], 5, "{op}");
        assert!(d["spec"].get("strategy").is_none() && d["metadata"].get("annotations").is_none(), "{op}");
        assert!(d["spec"]["template"]["spec"].get("volumes").is_none(), "{op}");
        let ep = &docs.iter().find(|d| d["kind"] == "ServiceMonitor").unwrap()["spec"]["endpoints"][0];
        assert!(ep.get("honorLabels").is_none() && ep.get("relabelings").is_none(), "{op}: {ep}");
    }
}

/// The umbrella installs, unasked, only the operators whose effect stays in
/// the namespace whose custom resources ask for it (pod-alert, load-tester);
/// the others (DNS records, copies into other namespaces, containers added to
/// running pods) only when enabled.
#[test]
fn the_umbrella_by_default_installs_only_the_namespace_confined_operators() {
    build_chart_dependencies().unwrap();
    let path = charts_dir().join(UMBRELLA).display().to_string();
    let docs = yaml_documents(&helm_ok(None, &["template", "rel", &path]).unwrap()).unwrap();
    let installed: BTreeSet<String> = docs
        .iter()
        .filter(|d| d["kind"] == "Deployment")
        .map(|d| d["metadata"]["labels"]["app.kubernetes.io/name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(installed, BTreeSet::from(["load-tester".to_string(), "pod-alert".to_string()]));
    let crds: BTreeSet<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .map(|d| d["spec"]["names"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(crds, BTreeSet::from(["LoadTest", "PodAlert", "SimpleDeployment"]));
    // Enabled on request.
    let docs = yaml_documents(
        &helm_ok(
            None,
            &["template", "rel", &path, "--set", "pod-debugger.enabled=true", "--set", "config-copier.enabled=true"],
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(docs.iter().filter(|d| d["kind"] == "Deployment").count(), 4);
}

/// `route53.aliasLoadBalancers` reaches service-dns's flag only when turned
/// off (the flag's default is on; config.rs's tests parse this spelling).
#[test]
fn alias_load_balancers_reaches_the_flag() {
    let on = args(&render("service-dns", &[]));
    assert!(!on.iter().any(|a| a.starts_with("--alias-load-balancers")), "{on:?}");
    let off = args(&render("service-dns", &["--set", "route53.aliasLoadBalancers=false"]));
    assert!(off.contains(&"--alias-load-balancers=false".to_string()), "{off:?}");
}
