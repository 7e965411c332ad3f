//! The charts as users meet them: `helm lint --strict`, `helm template` with
//! defaults and with every optional feature, `helm install` of the umbrella
//! and of one operator chart alone into the real test control plane, and
//! `helm uninstall` leaving nothing behind (the CRDs' own lifecycle is
//! tests/chart_crds.rs's). The commands are the README's.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;

use flotilla_e2e::observability::metric_names;
use flotilla_e2e::{
    UMBRELLA, build_chart_dependencies, charts_dir, helm, helm_ok, objects_of_release, operators, required_values,
    yaml_documents,
};
use flotilla_testenv::shared;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::ListParams;
use serde_json::Value;

fn chart(name: &str) -> String {
    build_chart_dependencies().unwrap();
    charts_dir().join(name).display().to_string()
}

/// Values for installing into this binary's control plane, where several
/// releases come and go: the CRDs stay out of them (one release at a time
/// could own them; tests/chart_crds.rs proves their lifecycle).
fn install_values(chart: &str) -> Vec<String> {
    let mut v: Vec<String> = required_values(chart).into_iter().map(str::to_string).collect();
    if chart == UMBRELLA {
        // Every operator, not only those on by default.
        for op in operators().unwrap() {
            v.extend(["--set".to_string(), format!("{op}.enabled=true")]);
        }
    }
    v.extend(flotilla_e2e::without_crds(chart).unwrap());
    v
}

fn kinds(docs: &[Value]) -> BTreeSet<String> {
    docs.iter().filter_map(|d| d["kind"].as_str().map(str::to_string)).collect()
}

#[test]
fn every_chart_passes_helm_lint_strict() {
    let mut charts = operators().unwrap();
    charts.push(UMBRELLA.to_string());
    for c in charts {
        let mut args = vec!["lint", "--strict"];
        let path = chart(&c);
        args.push(&path);
        args.extend(required_values(&c));
        helm_ok(None, &args).unwrap_or_else(|e| panic!("{c}: {e}"));
    }
}

/// The admission policies fail closed. Before, on a cluster (or a `helm
/// template`) without the ValidatingAdmissionPolicy API, every chart
/// rendered without its policy — the powers it guards open to anyone who
/// may write the resource — and NOTES still claimed it. Now: every chart
/// declares Kubernetes 1.30, and a chart with `admissionPolicy.enabled`
/// refuses to render without the API, naming the value and the minimum.
#[test]
fn the_charts_refuse_to_render_without_the_admission_policy_api() {
    let mut charts = operators().unwrap();
    charts.push(UMBRELLA.to_string());
    for c in &charts {
        let path = chart(c);
        let mut old = vec!["template", "rel", &path, "--kube-version", "1.29.0"];
        old.extend(required_values(c));
        let out = helm(None, &old).unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(">=1.30.0-0"), "{c} renders for Kubernetes 1.29: {err}");
    }
    let guarded: Vec<String> = charts.iter().filter(|c| c.as_str() != "service-dns").cloned().collect();
    for c in &guarded {
        let path = chart(c);
        // A 1.31 cluster that does not serve the API (or a bare `helm template`).
        let mut no_api = vec!["template", "rel", &path, "--kube-version", "1.31.0"];
        no_api.extend(required_values(c));
        let out = helm(None, &no_api).unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("admissionPolicy.enabled=true") && err.contains("1.30"),
            "{c} renders without the ValidatingAdmissionPolicy API: {err}"
        );
        // Turned off knowingly, it renders (the umbrella: each operator's value).
        let mut off = no_api.clone();
        let keys: Vec<String> = if c == UMBRELLA {
            guarded
                .iter()
                .filter(|o| o.as_str() != UMBRELLA)
                .map(|o| format!("{o}.admissionPolicy.enabled=false"))
                .collect()
        } else {
            vec!["admissionPolicy.enabled=false".to_string()]
        };
        for k in &keys {
            off.extend(["--set", k.as_str()]);
        }
        let docs = yaml_documents(&helm_ok(None, &off).unwrap()).unwrap();
        assert!(!kinds(&docs).contains("ValidatingAdmissionPolicy"), "{c}: the policy rendered while turned off");
        // And with the API, the policy and its binding are there.
        let mut with_api = vec!["template", "rel", &path];
        with_api.extend(required_values(c));
        let k = kinds(&yaml_documents(&helm_ok(None, &with_api).unwrap()).unwrap());
        assert!(
            k.contains("ValidatingAdmissionPolicy") && k.contains("ValidatingAdmissionPolicyBinding"),
            "{c}: {k:?}"
        );
    }
}

#[test]
fn defaults_render_a_hardened_deployment_with_probes_and_least_privilege() {
    for op in operators().unwrap() {
        let path = chart(&op);
        let mut args = vec!["template", "rel", &path, "--namespace", "ops"];
        args.extend(required_values(&op));
        let docs = yaml_documents(&helm_ok(None, &args).unwrap()).unwrap();
        let k = kinds(&docs);
        for expected in
            ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "Deployment"]
        {
            assert!(k.contains(expected), "{op}: no {expected} in {k:?}");
        }
        assert!(
            !k.contains("ServiceMonitor") && !k.contains("PodMonitor"),
            "{op}: optional objects are off by default"
        );
        // Two replicas by default, so a PodDisruptionBudget (tests/chart_values.rs).
        assert!(k.contains("PodDisruptionBudget"), "{op}: {k:?}");
        let d = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        let pod = &d["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        assert_eq!(d["spec"]["replicas"], 2, "{op}: a standby by default");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["securityContext"]["runAsUser"], 65532);
        assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(c["securityContext"]["capabilities"]["drop"], serde_json::json!(["ALL"]));
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
        let args: Vec<String> = c["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
        for flag in [
            "--leader-elect=true",
            "--leader-election-namespace=ops",
            "--metrics-bind-address=:8080",
            "--health-probe-bind-address=:8081",
            "--log-format=json",
            "--log-level=info",
            "--leader-elect-lease-duration=15s",
            "--leader-elect-renew-deadline=10s",
            "--leader-elect-retry-period=2s",
            "--graceful-shutdown-timeout=25s",
        ] {
            assert!(args.contains(&flag.to_string()), "{op}: {flag} not in {args:?}");
        }
        assert_eq!(c["image"], Value::from(format!("ghcr.io/flotilla-dev/flotilla-{op}:0.1.0")));
        // The lease Role grants only leases, only in the release namespace.
        let role = docs.iter().find(|d| d["kind"] == "Role").unwrap();
        assert_eq!(role["metadata"]["namespace"], "ops");
        assert_eq!(role["rules"][0]["resources"], serde_json::json!(["leases"]));
        // No wildcard anywhere in the RBAC.
        for r in docs.iter().filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role") {
            assert!(!r["rules"].to_string().contains('*'), "{op}: wildcard in {}", r["rules"]);
        }
    }
}

#[test]
fn every_optional_feature_renders() {
    for op in operators().unwrap() {
        let path = chart(&op);
        let mut args = vec![
            "template",
            "rel",
            &path,
            "--namespace",
            "ops",
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "metrics.serviceMonitor.labels.release=prom",
            "--set",
            "metrics.podMonitor.enabled=true",
            "--set",
            "metrics.podMonitor.interval=1m30s",
            "--set",
            "podDisruptionBudget.enabled=true",
            "--set",
            "imagePullSecrets[0]=regcred",
            "--set",
            "global.imagePullSecrets[0]=globalcred",
            "--set",
            "nodeSelector.kubernetes\\.io/os=linux",
            "--set",
            "tolerations[0].operator=Exists",
            "--set",
            "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
            "--set",
            "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey=kubernetes.io/hostname",
            "--set",
            "podAnnotations.team=platform",
            "--set",
            "podLabels.tier=ops",
            "--set",
            "extraArgs[0]=--graceful-shutdown-timeout=20s",
            "--set",
            "extraEnv[0].name=RUST_LOG",
            "--set",
            "extraEnv[0].value=debug",
            "--set",
            "serviceAccount.annotations.owner=me",
            "--set",
            "priorityClassName=system-cluster-critical",
            "--set",
            "global.image.registry=registry.example.com/mirror",
            "--set",
            "global.image.tag=v9.9.9",
            "--set",
            "global.logFormat=text",
        ];
        args.extend(required_values(&op));
        let docs = yaml_documents(&helm_ok(None, &args).unwrap_or_else(|e| panic!("{op}: {e}"))).unwrap();
        let k = kinds(&docs);
        assert!(k.contains("ServiceMonitor") && k.contains("PodDisruptionBudget"), "{op}: {k:?}");
        let d = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        let pod = &d["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        assert_eq!(pod["imagePullSecrets"], serde_json::json!([{"name": "globalcred"}, {"name": "regcred"}]));
        assert_eq!(pod["nodeSelector"]["kubernetes.io/os"], "linux");
        assert_eq!(pod["priorityClassName"], "system-cluster-critical");
        assert_eq!(c["image"], Value::from(format!("registry.example.com/mirror/flotilla-{op}:v9.9.9")));
        assert!(c["args"].to_string().contains("--graceful-shutdown-timeout=20s"));
        assert!(c["args"].to_string().contains("--log-format=text"));
        assert!(c["env"].to_string().contains("RUST_LOG"));
        assert_eq!(d["spec"]["template"]["metadata"]["annotations"]["team"], "platform");
        let sm = docs.iter().find(|d| d["kind"] == "ServiceMonitor").unwrap();
        assert_eq!(sm["metadata"]["labels"]["release"], "prom");
        assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
        // The PodMonitor selects the operator's pods by labels they carry,
        // on the container port named metrics.
        let pm = docs.iter().find(|d| d["kind"] == "PodMonitor").unwrap_or_else(|| panic!("{op}: no PodMonitor"));
        assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["port"], "metrics");
        assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["interval"], "1m30s");
        let pod_labels = &d["spec"]["template"]["metadata"]["labels"];
        for (k, v) in pm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
            assert_eq!(&pod_labels[k], v, "{op}: the PodMonitor selects {k}={v}, the pods do not carry it");
        }
        assert_eq!(c["ports"][0]["name"], "metrics");
    }
}

#[test]
fn a_watch_namespace_turns_the_cluster_role_into_a_role() {
    let path = chart("service-dns");
    let docs = yaml_documents(
        &helm_ok(
            None,
            &[
                "template",
                "rel",
                &path,
                "--namespace",
                "ops",
                "--set",
                "route53.hostedZoneId=Z1",
                "--set",
                "watchNamespace=team-a",
            ],
        )
        .unwrap(),
    )
    .unwrap();
    // The only cluster-wide grants: reading the kube-system Namespace, for
    // the owner id derived from it (no ownerId set), and the watched
    // Namespace's metadata, for its hostname grant.
    let cluster_roles: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "ClusterRole").collect();
    assert_eq!(cluster_roles.len(), 2, "{:?}", kinds(&docs));
    let rules: Vec<&Value> = cluster_roles.iter().map(|r| &r["rules"]).collect();
    assert!(
        rules.contains(&&serde_json::json!([{"apiGroups": [""], "resources": ["namespaces"], "resourceNames": ["kube-system"], "verbs": ["get"]}])),
        "{rules:?}"
    );
    assert!(
        rules.contains(&&serde_json::json!([{"apiGroups": [""], "resources": ["namespaces"], "resourceNames": ["team-a"], "verbs": ["list", "watch"]}])),
        "{rules:?}"
    );
    let pinned = yaml_documents(
        &helm_ok(
            None,
            &[
                "template",
                "rel",
                &path,
                "--set",
                "route53.hostedZoneId=Z1",
                "--set",
                "watchNamespace=team-a",
                "--set",
                "route53.ownerId=blue",
            ],
        )
        .unwrap(),
    )
    .unwrap();
    let pinned_roles: Vec<&Value> = pinned.iter().filter(|d| d["kind"] == "ClusterRole").collect();
    assert!(
        pinned_roles.len() == 1 && pinned_roles[0]["metadata"]["name"] == "rel-service-dns-namespaces",
        "a pinned owner id needs no read of kube-system: {:?}",
        kinds(&pinned)
    );
    let no_grants = yaml_documents(
        &helm_ok(
            None,
            &[
                "template",
                "rel",
                &path,
                "--set",
                "route53.hostedZoneId=Z1",
                "--set",
                "watchNamespace=team-a",
                "--set",
                "route53.ownerId=blue",
                "--set",
                "route53.hostnameAnnotations=any",
            ],
        )
        .unwrap(),
    )
    .unwrap();
    assert!(
        !kinds(&no_grants).contains("ClusterRole"),
        "without grants to read, no cluster-wide read at all: {:?}",
        kinds(&no_grants)
    );
    let scoped =
        docs.iter().find(|d| d["kind"] == "Role" && d["metadata"]["namespace"] == "team-a").expect("a Role in team-a");
    assert!(scoped["rules"].to_string().contains("services"));
    let d = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    assert!(d["spec"]["template"]["spec"]["containers"][0]["args"].to_string().contains("--watch-namespace=team-a"));
}

/// The container args of the chart's Deployment, rendered with `values`
/// (a values file's text) on top of the required values.
fn rendered_args(op: &str, values: &str) -> Vec<String> {
    let dir = tempfile_dir(op);
    let file = dir.join("values.yaml");
    std::fs::write(&file, values).unwrap();
    let path = chart(op);
    let file = file.display().to_string();
    let mut args = vec!["template", "rel", &path, "--namespace", "ops", "-f", &file];
    args.extend(required_values(op));
    let docs = yaml_documents(&helm_ok(None, &args).unwrap_or_else(|e| panic!("{op}: {e}"))).unwrap();
    let d = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    serde_json::from_value(d["spec"]["template"]["spec"]["containers"][0]["args"].clone()).unwrap()
}

/// A directory of its own per call (tests run in parallel in one process).
fn tempfile_dir(op: &str) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("flotilla-chart-values-{}-{op}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// extraArgs, as a list or a map, add flags and override the chart's own:
/// the chart renders them last and every operator takes the last of a
/// repeated flag (but service-dns's `--hosted-zone-id`, a list, which the
/// chart refuses there: `values_accept_what_the_binary_accepts…`). Proven by
/// running each operator's binary with the rendered args: it accepts them
/// (no exit 2) and logs in the overriding format.
#[test]
fn extra_args_add_flags_and_override_the_charts_own() {
    for op in operators().unwrap() {
        for values in ["extraArgs: [\"--log-format=text\"]\n", "extraArgs: {log-format: text}\n"] {
            let args = rendered_args(&op, values);
            let json = args.iter().position(|a| a == "--log-format=json").unwrap_or_else(|| panic!("{op}: {args:?}"));
            let text = args.iter().rposition(|a| a == "--log-format=text").unwrap_or_else(|| panic!("{op}: {args:?}"));
            assert!(json < text, "{op}: extraArgs must come after the chart's flags: {args:?}");

            // The binary: flags accepted, the last --log-format wins. It then
            // fails to find a cluster (exit 1, logged as text, not JSON).
            let bin = flotilla_e2e::operator_binary(&op).unwrap();
            let out = std::process::Command::new(&bin)
                .args(&args)
                .args(["--metrics-bind-address=0", "--health-probe-bind-address=0"])
                .env("KUBECONFIG", tempfile_dir(&op).join("no-such-kubeconfig"))
                .env_remove("RUST_LOG")
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{op} {values}: {args:?}\n{stderr}");
            assert!(stderr.contains("no-such-kubeconfig"), "{op}: {stderr}");
            assert!(!stderr.trim_start().starts_with('{'), "{op}: logged as JSON, the override lost: {stderr}");
        }
    }
}

/// Numbers from a values file reach templates as floats: a large one must
/// still render as an integer (`2000000`, not `2e+06`), in the chart's own
/// flags and in extraArgs.
#[test]
fn large_numbers_render_as_integers() {
    let args = rendered_args("service-dns", "route53:\n  ttl: 2000000\nextraArgs: {route53-rps: 1000000}\n");
    assert!(args.contains(&"--ttl=2000000".to_string()), "{args:?}");
    assert!(args.contains(&"--route53-rps=1000000".to_string()), "{args:?}");
    let args = rendered_args("config-copier", "copyConcurrency: 200\nextraArgs: [--copy-concurrency=100]\n");
    assert!(args.contains(&"--copy-concurrency=200".to_string()), "{args:?}");
    assert!(args.contains(&"--copy-concurrency=100".to_string()), "{args:?}");
    let args = rendered_args("service-dns", "route53:\n  rps: 0.5\n");
    assert!(args.contains(&"--route53-rps=0.5".to_string()), "a fraction stays one: {args:?}");
}

/// Values whose meaning is more than their text: without leader election
/// the chart runs one replica (two would both act); the operator's shutdown
/// timeout follows the pod's grace period (5 s less, so the process exits
/// on its own); a release name as long as Helm allows (53) still gives
/// every object a name of at most 63 characters (the `-metrics` Service
/// and Roles included).
#[test]
fn replicas_shutdown_timeout_and_long_names_follow_the_values() {
    let long = "r".repeat(53);
    for op in operators().unwrap() {
        let args = rendered_args(
            &op,
            "leaderElection: {enabled: false}\nreplicaCount: 3\nterminationGracePeriodSeconds: 45\n",
        );
        assert!(args.contains(&"--leader-elect=false".to_string()), "{op}: {args:?}");
        assert!(args.contains(&"--graceful-shutdown-timeout=40s".to_string()), "{op}: {args:?}");
        let path = chart(&op);
        let mut cmd =
            vec!["template", "rel", &path, "--set", "leaderElection.enabled=false", "--set", "replicaCount=3"];
        cmd.extend(required_values(&op));
        let docs = yaml_documents(&helm_ok(None, &cmd).unwrap()).unwrap();
        let d = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        assert_eq!(d["spec"]["replicas"], 1, "{op}: leader election off must mean one replica");
        let mut cmd = vec!["template", "rel", &path, "--set", "replicaCount=3"];
        cmd.extend(required_values(&op));
        let docs = yaml_documents(&helm_ok(None, &cmd).unwrap()).unwrap();
        let d = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        assert_eq!(d["spec"]["replicas"], 3, "{op}");

        let mut cmd = vec![
            "template",
            &long,
            &path,
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "podDisruptionBudget.enabled=true",
        ];
        cmd.extend(required_values(&op));
        let docs = yaml_documents(&helm_ok(None, &cmd).unwrap_or_else(|e| panic!("{op}: {e}"))).unwrap();
        let mut names = BTreeSet::new();
        for doc in &docs {
            let name = doc["metadata"]["name"].as_str().unwrap_or_default();
            assert!(name.len() <= 63, "{op}: {} {name} is {} characters", doc["kind"], name.len());
            assert!(!name.ends_with('-') && !name.contains("--"), "{op}: {name}");
            names.insert((doc["kind"].to_string(), name.to_string()));
        }
        assert_eq!(names.len(), docs.len(), "{op}: two objects of one kind share a shortened name");
    }
}

/// The umbrella's NOTES give each enabled operator's status command, and no
/// NOTES point at a moving branch (CRD links name the release's tag); pods
/// carry `app.kubernetes.io/part-of`, so the NOTES' `-l` selector finds them.
#[test]
fn notes_show_status_commands_and_pods_carry_part_of() {
    // A client-side dry run still asks the cluster for its version.
    let env = shared();
    let kubeconfig = Some(env.kubeconfig.as_path());
    let path = chart(UMBRELLA);
    // A dry run still checks that cluster-scoped objects are not another
    // release's: the fixed-name CopyRule roles may be installed by the tests
    // that install charts, so they are left out here.
    let mut args = vec![
        "install",
        "rel",
        &path,
        "--dry-run=client",
        "--namespace",
        "ops",
        "--set",
        "config-copier.copyRuleRoles.create=false",
    ];
    args.extend(required_values(UMBRELLA));
    let out = helm_ok(kubeconfig, &args).unwrap();
    let notes = out.split("NOTES:").nth(1).unwrap_or_else(|| panic!("no NOTES in {out}"));
    assert!(notes.contains("pod-alert: enabled; status: kubectl get podalerts -A"), "{notes}");
    assert!(notes.contains("config-copier: disabled (enable with --set config-copier.enabled=true)"), "{notes}");
    assert!(notes.contains("service-dns: enabled; status: kubectl -n ops logs deploy/rel-service-dns"), "{notes}");
    for op in operators().unwrap() {
        let path = chart(&op);
        let mut args = vec!["install", "rel", &path, "--dry-run=client", "--namespace", "ops"];
        if op == "config-copier" {
            args.extend(["--set", "copyRuleRoles.create=false"]);
        }
        args.extend(required_values(&op));
        let out = helm_ok(kubeconfig, &args).unwrap();
        assert!(!out.contains("/raw/main/") && !out.contains("/blob/main/"), "{op}: NOTES point at main:\n{out}");
        let mut args = vec!["template", "rel", &path];
        args.extend(required_values(&op));
        let docs = yaml_documents(&helm_ok(None, &args).unwrap()).unwrap();
        let d = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        assert_eq!(d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/part-of"], "flotilla", "{op}");
    }
}

/// The umbrella as a parent chart's dependency: its root is closed (a typo
/// such as `servicedns.enabled` fails), `global` is open (a parent's own
/// global keys pass) and `global.imageRegistry`, the key parents commonly
/// set, moves every image.
#[test]
fn the_umbrella_root_is_closed_and_global_is_open() {
    let path = chart(UMBRELLA);
    let out = helm(None, &["template", "rel", &path, "--set", "servicedns.enabled=true"]).unwrap();
    assert!(!out.status.success(), "a misspelt operator key is accepted");
    assert!(String::from_utf8_lossy(&out.stderr).contains("servicedns"), "{}", String::from_utf8_lossy(&out.stderr));
    let args = [
        "template",
        "rel",
        &path,
        "--set",
        "global.parentOnly=x",
        "--set",
        "global.imageRegistry=mirror.example/flotilla",
    ];
    let docs = yaml_documents(&helm_ok(None, &args).unwrap()).unwrap();
    let images: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "Deployment")
        .filter_map(|d| d["spec"]["template"]["spec"]["containers"][0]["image"].as_str())
        .collect();
    // pod-alert and load-tester, the two on by default.
    assert_eq!(images.len(), 2, "{images:?}");
    assert!(images.iter().all(|i| i.starts_with("mirror.example/flotilla/flotilla-")), "{images:?}");
}

/// The schemas accept what the binaries accept (`/hostedzone/Z…` as the
/// AWS CLI prints it, Go-style durations such as `1m30s`) and the chart
/// refuses what the binaries refuse (one port for metrics and health).
#[test]
fn values_accept_what_the_binary_accepts_and_refuse_what_it_refuses() {
    let path = chart("service-dns");
    let args = [
        "template",
        "rel",
        &path,
        "--set",
        "route53.hostedZoneId=/hostedzone/Z0123456789ABC",
        "--set",
        "route53.interval=1m30s",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.serviceMonitor.interval=1m30s",
    ];
    let docs = yaml_documents(&helm_ok(None, &args).unwrap()).unwrap();
    let d = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let flags = d["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        flags.contains("--hosted-zone-id=/hostedzone/Z0123456789ABC") && flags.contains("--interval=1m30s"),
        "{flags}"
    );
    // Several zones: one flag per zone, which the binary takes (each
    // repetition adds a zone): its flags are checked before the cluster is
    // looked for, so exit 1 for the missing kubeconfig, not 2.
    let zones = rendered_args("service-dns", "route53:\n  hostedZoneIds: [ZPRIVATE1, /hostedzone/ZORG2]\n");
    let zone_flags: Vec<&String> = zones.iter().filter(|a| a.starts_with("--hosted-zone-id=")).collect();
    assert_eq!(
        zone_flags,
        ["--hosted-zone-id=Z0123456789ABC", "--hosted-zone-id=ZPRIVATE1", "--hosted-zone-id=/hostedzone/ZORG2"]
    );
    let out = std::process::Command::new(flotilla_e2e::operator_binary("service-dns").unwrap())
        .args(&zones)
        .args(["--metrics-bind-address=0", "--health-probe-bind-address=0"])
        .env("KUBECONFIG", tempfile_dir("service-dns").join("no-such-kubeconfig"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{zones:?}\n{stderr}");
    assert!(stderr.contains("no-such-kubeconfig"), "{stderr}");
    // extraArgs cannot override the zone (it would add one): refused, as a
    // list or a map.
    for values in ["extraArgs: [\"--hosted-zone-id=Z2\"]\n", "extraArgs: {hosted-zone-id: Z2}\n"] {
        let dir = tempfile_dir("service-dns");
        std::fs::write(dir.join("values.yaml"), values).unwrap();
        let file = dir.join("values.yaml").display().to_string();
        let path = chart("service-dns");
        let mut args = vec!["template", "rel", &path, "-f", &file];
        args.extend(required_values("service-dns"));
        let out = helm(None, &args).unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains("adds a zone"), "{values}: {stderr}");
    }
    for op in operators().unwrap() {
        let path = chart(&op);
        let mut args = vec!["template", "rel", &path, "--set", "metrics.port=9000", "--set", "healthProbePort=9000"];
        args.extend(required_values(&op));
        let out = helm(None, &args).unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains("two ports"), "{op}: one port for both accepted: {stderr}");
    }
}

/// The opt-in NetworkPolicy: it selects the operator's pods, lets scrapes
/// (from `metricsFrom` only, when set) and probes in, and DNS, the API
/// server and the operator's own egress out; the API server accepts it
/// (a server-side dry run on the real control plane). This cluster's CNI does
/// not enforce NetworkPolicies, so what is tested is the object, not traffic.
#[tokio::test]
async fn the_network_policy_selects_the_pods_and_is_accepted_by_the_api_server() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let env = shared();
    let client = env.client().await;
    let ns = env.namespace("netpol").await.unwrap();
    for op in operators().unwrap() {
        let path = chart(&op);
        let mut args = vec![
            "template",
            "rel",
            &path,
            "--namespace",
            &ns,
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring",
            "--set",
            "networkPolicy.apiServer.cidrs={10.0.0.1/32}",
            "--set",
            "networkPolicy.extraEgress[0].ports[0].port=8443",
        ];
        args.extend(required_values(&op));
        let docs = yaml_documents(&helm_ok(None, &args).unwrap_or_else(|e| panic!("{op}: {e}"))).unwrap();
        let np = docs.iter().find(|d| d["kind"] == "NetworkPolicy").unwrap_or_else(|| panic!("{op}: none"));
        let d = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        let pod_labels = &d["spec"]["template"]["metadata"]["labels"];
        for (k, v) in np["spec"]["podSelector"]["matchLabels"].as_object().unwrap() {
            assert_eq!(&pod_labels[k], v, "{op}: selects {k}={v}, the pods do not carry it");
        }
        let ports: Vec<&str> = d["spec"]["template"]["spec"]["containers"][0]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        for rule in np["spec"]["ingress"].as_array().unwrap() {
            let port = rule["ports"][0]["port"].as_str().unwrap();
            assert!(ports.contains(&port), "{op}: ingress on port {port}, not a container port {ports:?}");
        }
        assert_eq!(np["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]["team"], "monitoring");
        let egress = np["spec"]["egress"].to_string();
        assert!(
            egress.contains("\"port\":53") && egress.contains("10.0.0.1/32") && egress.contains("\"port\":6443"),
            "{op}: {egress}"
        );
        assert!(egress.contains("\"port\":8443"), "{op}: extraEgress missing: {egress}");
        if op == "service-dns" {
            let route53 = &np["spec"]["egress"][2];
            assert!(
                route53.get("to").is_none() && route53["ports"][0]["port"] == 443,
                "{op}: Route53 egress: {egress}"
            );
        }
        let object: NetworkPolicy = serde_json::from_value(np.clone()).unwrap();
        let api: Api<NetworkPolicy> = Api::namespaced(client.clone(), &ns);
        api.create(&kube::api::PostParams { dry_run: true, field_manager: None }, &object)
            .await
            .unwrap_or_else(|e| panic!("{op}: the API server refuses the NetworkPolicy: {e}"));
    }
}

/// The opt-in PrometheusRule of every chart: `promtool check rules` accepts
/// it, `promtool test rules` runs each alert's unit tests
/// (`e2e/alerts/<operator>.test.yaml`: firing and quiet cases), every
/// metric an alert reads is one the operator (or the shared runtime)
/// defines, and every alert has its runbook section on the documentation
/// site's alerts page, which its `runbook_url` links to.
#[test]
fn every_alert_passes_promtool_and_has_a_runbook() {
    let prometheus = flotilla_testenv::build::tools::prometheus().unwrap_or_else(|e| panic!("{e}"));
    let promtool = prometheus.with_file_name("promtool");
    assert!(promtool.is_file(), "{} is missing: it comes with Debian's prometheus package", promtool.display());
    let root = flotilla_e2e::root();
    let runbooks = std::fs::read_to_string(root.join("docs/operating/alerts.md")).unwrap();
    for op in operators().unwrap() {
        let path = chart(&op);
        let mut args = vec!["template", "rel", &path, "--namespace", "ops", "--set", "prometheusRule.enabled=true"];
        args.extend(required_values(&op));
        let docs = yaml_documents(&helm_ok(None, &args).unwrap_or_else(|e| panic!("{op}: {e}"))).unwrap();
        let rule = docs.iter().find(|d| d["kind"] == "PrometheusRule").unwrap_or_else(|| panic!("{op}: none"));
        let dir = tempfile_dir(&op);
        let rules = dir.join("rules.yaml");
        std::fs::write(
            &rules,
            serde_saphyr::to_string(&serde_json::json!({"groups": rule["spec"]["groups"]})).unwrap(),
        )
        .unwrap();
        let tests = dir.join("alerts.test.yaml");
        std::fs::copy(root.join("e2e/alerts").join(format!("{op}.test.yaml")), &tests).unwrap();
        for cmd in [vec!["check", "rules", "rules.yaml"], vec!["test", "rules", "alerts.test.yaml"]] {
            let out = std::process::Command::new(&promtool).args(&cmd).current_dir(&dir).output().unwrap();
            assert!(
                out.status.success(),
                "{op}: promtool {}:\n{}{}",
                cmd.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }

        let defined = Defined::of(&root, &op);
        for group in rule["spec"]["groups"].as_array().unwrap() {
            for r in group["rules"].as_array().unwrap() {
                let alert = r["alert"].as_str().unwrap();
                let heading = format!("## {alert}");
                assert!(
                    runbooks.lines().any(|l| l.trim_end() == heading),
                    "{op}: {alert} has no runbook section ({heading}) in docs/operating/alerts.md"
                );
                let url = r["annotations"]["runbook_url"].as_str().unwrap();
                assert!(url.ends_with(&format!("/docs/operating/alerts.md#{}", alert.to_lowercase())), "{op}: {url}");
                let names = metric_names(r["expr"].as_str().unwrap());
                assert!(!names.is_empty(), "{op}: {alert} reads no metric: {}", r["expr"]);
                for name in names {
                    assert!(defined.knows(&name), "{op}: {alert} reads {name}, which no Flotilla code defines");
                }
            }
        }
    }
}

/// The opt-in Grafana dashboard of every chart: valid JSON in a ConfigMap
/// the Grafana sidecar picks up, every panel's PromQL accepted by promtool
/// (as recording rules), and every metric it reads defined by the operator
/// or the shared runtime (the same check as the alerts').
#[test]
fn every_dashboard_panel_is_valid_promql_on_metrics_the_operator_defines() {
    let prometheus = flotilla_testenv::build::tools::prometheus().unwrap_or_else(|e| panic!("{e}"));
    let promtool = prometheus.with_file_name("promtool");
    let root = flotilla_e2e::root();
    for op in operators().unwrap() {
        let path = chart(&op);
        let mut args = vec!["template", "rel", &path, "--namespace", "ops", "--set", "grafanaDashboard.enabled=true"];
        args.extend(required_values(&op));
        let docs = yaml_documents(&helm_ok(None, &args).unwrap_or_else(|e| panic!("{op}: {e}"))).unwrap();
        let cm = docs
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"] == "1")
            .unwrap_or_else(|| panic!("{op}: no dashboard ConfigMap"));
        let json = cm["data"].as_object().unwrap().values().next().unwrap().as_str().unwrap();
        let dashboard: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{op}: {e}"));
        let panels = dashboard["panels"].as_array().unwrap();
        assert!(panels.len() > 8, "{op}: only the shared panels");
        let ids: BTreeSet<i64> = panels.iter().map(|p| p["id"].as_i64().unwrap()).collect();
        assert_eq!(ids.len(), panels.len(), "{op}: panel ids repeat");
        let exprs: Vec<&str> = panels.iter().map(|p| p["targets"][0]["expr"].as_str().unwrap()).collect();

        let rules: Vec<serde_json::Value> = exprs
            .iter()
            .enumerate()
            .map(|(i, e)| serde_json::json!({"record": format!("flotilla:panel_{i}"), "expr": e}))
            .collect();
        let dir = tempfile_dir(&op);
        let file = dir.join("panels.yaml");
        let groups = serde_json::json!({"groups": [{"name": "panels", "rules": rules}]});
        std::fs::write(&file, serde_saphyr::to_string(&groups).unwrap()).unwrap();
        let out = std::process::Command::new(&promtool).args(["check", "rules"]).arg(&file).output().unwrap();
        assert!(
            out.status.success(),
            "{op}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );

        let defined = Defined::of(&root, &op);
        for e in exprs {
            let names = metric_names(e);
            assert!(!names.is_empty(), "{op}: a panel reads no metric: {e}");
            for name in names {
                assert!(defined.knows(&name), "{op}: a panel reads {name}, which no Flotilla code defines");
            }
        }
    }
}

/// The metric names an operator exposes, as its code (and the shared
/// runtime's) spells them.
struct Defined {
    code: String,
    prefix: String,
}

impl Defined {
    fn of(root: &std::path::Path, op: &str) -> Self {
        let code = sources(&root.join("shared/src")) + &sources(&root.join("operators").join(op).join("src"));
        Self { code, prefix: format!("flotilla_{}_", op.replace('-', "_")) }
    }

    fn knows(&self, name: &str) -> bool {
        // Prometheus's own `up`, and the process collector the shared runtime registers.
        if name == "up" || name.starts_with("process_") {
            return true;
        }
        // service-dns spells its names as format!("{p}…") with p = its prefix.
        let spelled = name.strip_prefix(&self.prefix).map(|rest| format!("\"{{p}}{rest}\""));
        self.code.contains(&format!("\"{name}\"")) || spelled.is_some_and(|s| self.code.contains(&s))
    }
}

/// Every `.rs` file under `dir`, concatenated.
fn sources(dir: &std::path::Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.push_str(&sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    out
}

/// service-dns without a hosted zone fails at render, saying what to set,
/// not at run time in a crash-looping pod.
#[test]
fn service_dns_without_a_zone_fails_at_render() {
    let out = helm(None, &["template", "rel", &chart("service-dns")]).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "rendered without a zone");
    assert!(stderr.contains("route53.hostedZoneId") && stderr.contains("route53.domainName"), "{stderr}");
}

#[test]
fn bad_values_are_rejected_by_the_schema_with_a_clear_message() {
    for op in operators().unwrap() {
        let path = chart(&op);
        let render = |extra: &[&str]| {
            let mut args = vec!["template", "rel", path.as_str()];
            args.extend(required_values(&op));
            args.extend_from_slice(extra);
            helm(None, &args).unwrap()
        };
        // The same values without the bad one render: what fails below is
        // the bad value, not something else.
        let out = render(&[]);
        assert!(out.status.success(), "{op}: {}", String::from_utf8_lossy(&out.stderr));
        let out = render(&["--set", "logFormat=xml"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{op}: logFormat=xml accepted");
        assert!(stderr.contains("logFormat"), "{op}: {stderr}");
        let out = render(&["--set", "logLevel=loud"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains("logLevel"), "{op}: logLevel=loud accepted: {stderr}");
        let out = render(&["--set", "replicasCount=3"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{op}: a misspelt key is accepted");
        assert!(stderr.contains("replicasCount"), "{op}: the error does not name the misspelt key: {stderr}");
    }
}

/// config-copier's chart creates cluster-scoped ClusterRoles with fixed names
/// (`flotilla-copyrule-edit`, `-view`, `-admin`: users bind them by name), so
/// two releases that both create them cannot be installed at once; the tests
/// that install it take turns.
static CLUSTER_SCOPED_NAMES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn the_umbrella_installs_and_uninstalls_leaving_nothing() {
    let _turn = CLUSTER_SCOPED_NAMES.lock().await;
    let env = shared();
    let ns = env.namespace("umbrella").await.unwrap();
    let client = env.client().await;
    let path = chart(UMBRELLA);
    let values = install_values(UMBRELLA);
    let mut args = vec!["install", "flotilla", &path, "--namespace", &ns];
    args.extend(values.iter().map(String::as_str));
    helm_ok(Some(&env.kubeconfig), &args).unwrap();

    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns).list(&ListParams::default()).await.unwrap();
    let names: BTreeSet<String> = deployments.items.iter().filter_map(|d| d.metadata.name.clone()).collect();
    for op in operators().unwrap() {
        assert!(names.contains(&format!("flotilla-{op}")), "no Deployment flotilla-{op}: {names:?}");
    }
    for d in &deployments.items {
        let c = &d.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0];
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert!(c.args.as_ref().unwrap().contains(&format!("--leader-election-namespace={ns}")));
        assert!(c.readiness_probe.is_some() && c.liveness_probe.is_some());
    }
    assert!(!objects_of_release(&client, &ns, "flotilla").await.unwrap().is_empty());

    helm_ok(Some(&env.kubeconfig), &["uninstall", "flotilla", "--namespace", &ns, "--wait"]).unwrap();
    let left = objects_of_release(&client, &ns, "flotilla").await.unwrap();
    assert!(left.is_empty(), "left after uninstall: {left:?}");
}

#[tokio::test]
async fn one_operator_chart_installs_alone() {
    let _turn = CLUSTER_SCOPED_NAMES.lock().await;
    let env = shared();
    for op in operators().unwrap() {
        let ns = env.namespace(&format!("alone-{op}")).await.unwrap();
        let path = chart(&op);
        let values = install_values(&op);
        let mut args = vec!["install", "alone", &path, "--namespace", &ns];
        args.extend(values.iter().map(String::as_str));
        helm_ok(Some(&env.kubeconfig), &args).unwrap_or_else(|e| panic!("{op}: {e}"));
        let d = Api::<Deployment>::namespaced(env.client().await, &ns).get(&format!("alone-{op}")).await;
        assert!(d.is_ok(), "{op}: {d:?}");
        helm_ok(Some(&env.kubeconfig), &["uninstall", "alone", "--namespace", &ns]).unwrap();
    }
}

/// config-copier's `rollouts.enabled` (issue 31): off by default, the
/// operator may neither list nor patch workloads and runs without
/// `--enable-rollouts`; on, it gets exactly list and patch on the three
/// apps kinds it rolls, and the flag.
#[test]
fn config_copier_rollout_rules_appear_only_with_rollouts_enabled() {
    let path = chart("config-copier");
    let render = |extra: &[&str]| {
        let mut args = vec!["template", "rel", path.as_str(), "--namespace", "ops"];
        args.extend(required_values("config-copier"));
        args.extend(extra);
        yaml_documents(&helm_ok(None, &args).unwrap()).unwrap()
    };
    let apps_rules = |docs: &[Value]| -> Vec<Value> {
        docs.iter()
            .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
            .flat_map(|r| r["rules"].as_array().cloned().unwrap_or_default())
            .filter(|rule| rule["apiGroups"].as_array().is_some_and(|g| g.iter().any(|g| g == "apps")))
            .collect()
    };
    let args = |docs: &[Value]| -> String {
        let d = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        d["spec"]["template"]["spec"]["containers"][0]["args"].to_string()
    };
    let off = render(&[]);
    assert_eq!(apps_rules(&off), Vec::<Value>::new(), "no workload access by default");
    assert!(!args(&off).contains("--enable-rollouts"), "{}", args(&off));
    let on = render(&["--set", "rollouts.enabled=true"]);
    assert_eq!(
        apps_rules(&on),
        vec![
            serde_json::json!({"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "daemonsets"], "verbs": ["list", "patch"]})
        ]
    );
    assert!(args(&on).contains("\"--enable-rollouts\""), "{}", args(&on));
}
