//! Runner pods: the pod a run creates for runner `i`, and what the state
//! machine reads of one. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::crd::{LoadTestSpec, PinnedTarget, RunnerSpec};

/// Label: the LoadTest a runner belongs to.
pub const LOADTEST_LABEL: &str = "flotilla.dev/loadtest";
/// Label: the run a runner belongs to.
pub const RUN_LABEL: &str = "flotilla.dev/run";
/// Annotation the operator sets to "go" once every runner is Running; the
/// runners read it through a downward-API file.
pub const START_ANNOTATION: &str = "flotilla.dev/start";
/// Where runners see it.
pub const START_FILE: &str = "/etc/flotilla/start";
/// The runner pod's one container.
pub const CONTAINER: &str = "loadgen";
/// The start annotation's value that ends a run early: the runner reads
/// it from the same file, writes its summary and exits.
pub const STOP: &str = "stop";
/// How often a runner prints its progress (read into status.progress).
pub const PROGRESS_EVERY: &str = "5s";
pub const MANAGED_BY: &str = "flotilla-load-tester";

/// A name as a label value (at most 63 characters): names longer than that
/// are cut and given a hash of the whole name. Pods are also filtered by
/// owner UID, so a shared cut never mixes two owners' pods.
pub fn label_value(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let start: String = name.chars().take(54).collect();
    format!("{}-{:08x}", start.trim_end_matches(['-', '.']), h >> 32)
}

/// `<test>-r<run>-<i>`, cut to a valid pod name when the test's is long.
pub fn name(test: &str, run: i64, i: usize) -> String {
    let suffix = format!("-r{run}-{i}");
    let keep = 253usize.saturating_sub(suffix.len()).min(test.len());
    format!("{}{suffix}", test[..keep].trim_end_matches(['-', '.']))
}

/// Where runners find the header values and the body read from Secrets (a
/// projected volume: one file per header, `body` for the body).
pub const SECRETS_DIR: &str = "/var/run/flotilla/secrets";
/// Where a runner reads test.tls.caConfigMapRef (`ca.crt`).
pub const CA_DIR: &str = "/var/run/flotilla/ca";

/// The literal headers (`NAME:VALUE` lines, for `HEADERS`), the headers
/// read from files (`NAME:PATH` lines, for `HEADER_FILES`: paths, never
/// values) and the projected volume's sources that put those files there.
fn headers(spec: &LoadTestSpec) -> (Vec<String>, Vec<String>, Vec<Value>) {
    let t = &spec.test;
    let mut literal: Vec<String> = t.headers.iter().map(|(k, v)| format!("{k}:{}", v.0)).collect();
    let (mut files, mut sources) = (Vec::new(), Vec::new());
    for (j, h) in t.http_headers.iter().enumerate() {
        match (&h.value, &h.value_from) {
            (Some(v), _) => literal.push(format!("{}:{}", h.name, v.0)),
            (None, Some(from)) => {
                let file = format!("h{j}");
                files.push(format!("{}:{SECRETS_DIR}/{file}", h.name));
                let r = &from.secret_key_ref;
                sources.push(json!({"secret": {"name": r.name, "items": [{"key": r.key, "path": file}]}}));
            }
            // The schema requires exactly one of them.
            (None, None) => {}
        }
    }
    (literal, files, sources)
}

/// When a run's runners must be done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// When the runner stops sending (Unix seconds), ahead of the run's
    /// deadline so its summary is written in time.
    pub end_at: i64,
    /// The run's deadline (loadgen's own bound, from its start).
    pub deadline: std::time::Duration,
}

/// What the runner pods get when the LoadTest does not say
/// (spec.runner.resources): requests = limits, so Guaranteed QoS.
pub const DEFAULT_CPU: &str = "500m";
pub const DEFAULT_MEMORY: &str = "256Mi";

/// The loadgen container's resources.
fn resources(runner: &RunnerSpec) -> Value {
    match &runner.resources {
        None => json!({
            "requests": {"cpu": DEFAULT_CPU, "memory": DEFAULT_MEMORY},
            "limits": {"cpu": DEFAULT_CPU, "memory": DEFAULT_MEMORY}
        }),
        Some(r) => {
            let mut out = serde_json::Map::new();
            if !r.requests.is_empty() {
                out.insert("requests".into(), json!(r.requests));
            }
            if !r.limits.is_empty() {
                out.insert("limits".into(), json!(r.limits));
            }
            Value::Object(out)
        }
    }
}

/// The pod spec's placement fields: nodeSelector, tolerations, affinity
/// as given, and with `spread` a soft spread of this run's runners over
/// the nodes (ScheduleAnyway: one node still takes them all).
fn placement(runner: &RunnerSpec, labels: &Value) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    if !runner.node_selector.is_empty() {
        out.insert("nodeSelector".into(), json!(runner.node_selector));
    }
    if !runner.tolerations.is_empty() {
        out.insert("tolerations".into(), json!(runner.tolerations));
    }
    if let Some(a) = &runner.affinity {
        out.insert("affinity".into(), json!(a));
    }
    if runner.spread {
        out.insert(
            "topologySpreadConstraints".into(),
            json!([{
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": labels}
            }]),
        );
    }
    out
}

/// What the runner pod for `i` of `run` is (an object for the API),
/// to be done within `window`. The runner
/// connects to the pinned cluster IP (`CONNECT_TO`) and never resolves the
/// URL's host: a relative name would go through the pod's DNS search path,
/// where `<svc>.<ns>.svc` can be answered from a namespace called `svc`.
/// `s` as an env value the kubelet passes as written: it expands `$(NAME)`
/// to another variable's value and `$$` to `$` in every value, so a body
/// or header holding `$(URL)` would be sent as the URL. `$$` is a `$`.
pub fn literal_value(s: &str) -> String {
    s.replace('$', "$$")
}

#[allow(clippy::too_many_arguments)]
pub fn pod(
    test: &str,
    uid: &str,
    namespace: &str,
    spec: &LoadTestSpec,
    image: &str,
    run: i64,
    i: usize,
    window: &Window,
    target: &PinnedTarget,
) -> Value {
    let t = &spec.test;
    let runner = spec.runner();
    let url = format!("{}://{}:{}{}", t.scheme.as_str(), target.host, t.port, t.path);
    let (literal, files, sources) = headers(spec);
    let mut env = vec![
        json!({"name": "URL", "value": literal_value(&url)}),
        json!({"name": "CONNECT_TO", "value": target.cluster_ip}),
        json!({"name": "METHOD", "value": t.method.as_str()}),
        json!({"name": "HEADERS", "value": literal_value(&literal.join("\n"))}),
        json!({"name": "HEADER_FILES", "value": files.join("\n")}),
        json!({"name": "BODY", "value": literal_value(&t.body)}),
        json!({"name": "REPEAT", "value": t.repeat().to_string()}),
        json!({"name": "CONCURRENCY", "value": t.concurrency.to_string()}),
        json!({"name": "TIMEOUT", "value": millis(&t.timeout)}),
        json!({"name": "RATE", "value": spec.rate.to_string()}),
        json!({"name": "DEADLINE", "value": format!("{}ms", window.deadline.as_millis())}),
        json!({"name": "END_AT", "value": window.end_at.to_string()}),
        json!({"name": "START_FILE", "value": START_FILE}),
        json!({"name": "PROGRESS_EVERY", "value": PROGRESS_EVERY}),
    ];
    let mut sources = sources;
    if let Some(from) = &t.body_from {
        let r = &from.secret_key_ref;
        env.push(json!({"name": "BODY_FILE", "value": format!("{SECRETS_DIR}/body")}));
        sources.push(json!({"secret": {"name": r.name, "items": [{"key": r.key, "path": "body"}]}}));
    }
    // test.requests: each request's values, its Secrets as files.
    if let Some((scenario, more)) = crate::scenario::runner_env(t) {
        env.push(json!({"name": "SCENARIO", "value": literal_value(&scenario)}));
        sources.extend(more);
    }
    if t.http2 {
        env.push(json!({"name": "HTTP2", "value": "true"}));
    }
    // Only when set: a runner without them counts errors by status class,
    // as runners always did.
    if let Some(checks) = &t.checks {
        if !checks.status_codes.is_empty() {
            let codes: Vec<String> = checks.status_codes.iter().map(i32::to_string).collect();
            env.push(json!({"name": "EXPECT_STATUS", "value": codes.join(",")}));
        }
        if let Some(text) = &checks.body_contains {
            env.push(json!({"name": "EXPECT_BODY_CONTAINS", "value": literal_value(text)}));
        }
    }
    let tls = t.tls.as_ref().filter(|_| t.scheme == crate::crd::Scheme::Https);
    if tls.is_some_and(|tls| tls.insecure_skip_verify) {
        env.push(json!({"name": "INSECURE_SKIP_VERIFY", "value": "true"}));
    }
    let ca = tls.and_then(|tls| tls.ca_config_map_ref.as_ref());
    if ca.is_some() {
        env.push(json!({"name": "CA_FILE", "value": format!("{CA_DIR}/ca.crt")}));
    }
    if let Some(d) = spec.load.as_ref().and_then(|l| l.duration.as_ref()) {
        env.push(json!({"name": "DURATION", "value": millis(d)}));
    }
    // load.stages (or load.capacity's steps): this runner's share of each
    // stage's rate.
    if let Some(load) = spec.load.as_ref().filter(|l| !l.profile().is_empty()) {
        let replicas = usize::try_from(spec.replicas).unwrap_or(1);
        env.push(json!({"name": "STAGES", "value": crate::stages::runner_flag(&load.profile(), replicas, i)}));
        env.push(json!({"name": "MAX_CONNECTIONS", "value": load.max_connections().to_string()}));
    }
    let mut mounts = vec![json!({"name": "start", "mountPath": "/etc/flotilla", "readOnly": true})];
    let mut volumes = vec![json!({"name": "start", "downwardAPI": {"items": [
        {"path": "start", "fieldRef": {"fieldPath": format!("metadata.annotations['{START_ANNOTATION}']")}}
    ]}})];
    if !sources.is_empty() {
        mounts.push(json!({"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": true}));
        volumes.push(json!({"name": "secrets", "projected": {"sources": sources}}));
    }
    if let Some(ca) = ca {
        mounts.push(json!({"name": "ca", "mountPath": CA_DIR, "readOnly": true}));
        volumes
            .push(json!({"name": "ca", "configMap": {"name": ca.name, "items": [{"key": ca.key, "path": "ca.crt"}]}}));
    }
    let run_labels = json!({LOADTEST_LABEL: label_value(test), RUN_LABEL: run.to_string()});
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name(test, run, i),
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/managed-by": MANAGED_BY,
                "app.kubernetes.io/name": "loadgen",
                LOADTEST_LABEL: label_value(test),
                RUN_LABEL: run.to_string(),
            },
            "ownerReferences": [{
                "apiVersion": "flotilla.dev/v1alpha1", "kind": "LoadTest", "name": test, "uid": uid,
                "controller": true
            }]
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "terminationGracePeriodSeconds": 5,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": CONTAINER,
                "image": image,
                "env": env,
                "terminationMessagePolicy": "File",
                "resources": resources(&runner),
                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                    "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": mounts
            }],
            "volumes": volumes
        }
    });
    if let Some(Value::Object(pod_spec)) = pod.get_mut("spec") {
        pod_spec.extend(placement(&runner, &run_labels));
    }
    pod
}

/// What the state machine reads of a runner pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Runner {
    pub name: String,
    pub run: i64,
    /// Its index in the run (from the name).
    pub index: Option<usize>,
    pub phase: String,
    pub terminating: bool,
    /// The loadgen container runs.
    pub running: bool,
    /// The start annotation is set ("go", or "stop" since).
    pub signalled: bool,
    /// The start annotation says "stop" (thresholds.abortOnFail).
    pub stopping: bool,
    /// A waiting reason and message (ImagePullBackOff, ...).
    pub waiting: Option<(String, String)>,
    /// Exit code, reason and termination message once it ended.
    pub terminated: Option<(i32, String, String)>,
    /// The scheduler's reason it was not placed.
    pub unschedulable: Option<String>,
}

/// Projects a runner pod.
pub fn view(pod: &Pod) -> Runner {
    let meta = &pod.metadata;
    let labels = meta.labels.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let run: i64 = labels.get(RUN_LABEL).and_then(|r| r.parse().ok()).unwrap_or(0);
    let index = name.rsplit('-').next().and_then(|i| i.parse().ok());
    let status = pod.status.as_ref();
    let cs = status.and_then(|s| s.container_statuses.as_ref()).and_then(|c| c.first());
    let state = cs.and_then(|c| c.state.as_ref());
    let annotations: BTreeMap<String, String> = meta.annotations.clone().unwrap_or_default();
    let unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
        .map(|c| c.message.clone().unwrap_or_else(|| "Unschedulable".into()));
    Runner {
        run,
        index,
        phase: status.and_then(|s| s.phase.clone()).unwrap_or_default(),
        terminating: meta.deletion_timestamp.is_some(),
        running: state.is_some_and(|s| s.running.is_some()),
        signalled: annotations.get(START_ANNOTATION).is_some_and(|v| v == "go" || v == STOP),
        stopping: annotations.get(START_ANNOTATION).is_some_and(|v| v == STOP),
        waiting: state
            .and_then(|s| s.waiting.as_ref())
            .map(|w| (w.reason.clone().unwrap_or_default(), w.message.clone().unwrap_or_default())),
        terminated: state
            .and_then(|s| s.terminated.as_ref())
            .map(|t| (t.exit_code, t.reason.clone().unwrap_or_default(), t.message.clone().unwrap_or_default())),
        unschedulable,
        name,
    }
}

/// A duration for loadgen's environment: whole milliseconds, which every
/// loadgen parses (the spec's Go dialect, e.g. `1.5s`, it does not).
fn millis(d: &flotilla_shared::duration::GoDuration) -> String {
    d.get().map_or_else(|_| d.0.clone(), |d| format!("{}ms", d.as_millis()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_are_http_tokens() {
        use crate::crd::is_header_name;
        assert!(is_header_name("X-Request-Id") && is_header_name("authorization"));
        for bad in ["", "X A", "X:A", "X\nA", "é"] {
            assert!(!is_header_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn long_names_become_valid_distinct_label_values() {
        assert_eq!(label_value("example-02"), "example-02");
        let (a, b) = ("a".repeat(100) + "-one", "a".repeat(100) + "-two");
        assert!(label_value(&a).len() <= 63 && label_value(&b).len() <= 63);
        assert_ne!(label_value(&a), label_value(&b));
    }

    #[test]
    fn names_fit_and_carry_run_and_index() {
        assert_eq!(name("example-02", 3, 4), "example-02-r3-4");
        let long = "a".repeat(253);
        let n = name(&long, 12, 499);
        assert!(n.len() <= 253 && n.ends_with("-r12-499"), "{n}");
    }

    fn pinned() -> PinnedTarget {
        PinnedTarget {
            uid: "svc-uid".into(),
            type_: "ClusterIP".into(),
            cluster_ip: "10.96.0.20".into(),
            host: "nginx.shop.svc.cluster.local".into(),
        }
    }

    fn window(end_at: i64) -> Window {
        Window { end_at, deadline: std::time::Duration::from_secs(600) }
    }

    fn env_of(p: &Value) -> BTreeMap<String, String> {
        p["spec"]["containers"][0]["env"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| (e["name"].as_str().unwrap_or("").into(), e["value"].as_str().unwrap_or("").into()))
            .collect()
    }

    #[test]
    fn the_runner_pod_is_owned_unprivileged_and_waits_for_the_start_signal() {
        let spec: LoadTestSpec = serde_json::from_value(json!({
            "replicas": 5, "test": {"serviceName": "nginx", "headers": {"X-A": "1"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let p = pod("example-02", "uid-1", "shop", &spec, "loadgen:1", 2, 0, &window(1_900_000_000), &pinned());
        assert_eq!(p["metadata"]["name"], "example-02-r2-0");
        assert_eq!(p["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(p["metadata"]["labels"][RUN_LABEL], "2");
        assert_eq!(p["spec"]["restartPolicy"], "Never");
        let c = &p["spec"]["containers"][0];
        let env = env_of(&p);
        // The pinned address, and the Service's full name as the Host: no
        // relative name for the pod's DNS search path to complete.
        assert_eq!(env["URL"], "http://nginx.shop.svc.cluster.local:80/");
        assert_eq!(env["CONNECT_TO"], "10.96.0.20");
        assert_eq!((env["REPEAT"].as_str(), env["CONCURRENCY"].as_str()), ("10", "1"));
        assert_eq!(env["HEADERS"], "X-A:1");
        assert_eq!(env["HEADER_FILES"], "");
        assert_eq!(env["START_FILE"], START_FILE);
        assert_eq!(env["END_AT"], "1900000000");
        assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL");
        assert_eq!(p["spec"]["securityContext"]["runAsNonRoot"], true);
        assert_eq!(p["spec"]["volumes"].as_array().map(Vec::len), Some(1), "no header volume without Secrets");
        assert!(!env.contains_key("DURATION"), "repeat, not a duration");
        assert_eq!(env["DEADLINE"], "600000ms");
        let _: Pod = serde_json::from_value(p).unwrap_or_else(|e| panic!("not a Pod: {e}"));
    }

    #[test]
    fn durations_reach_loadgen_as_whole_milliseconds() {
        // Go's 1.5s passes admission and the operator; loadgen's parser
        // takes whole units only, so it gets milliseconds.
        let spec: LoadTestSpec = serde_json::from_value(json!({
            "replicas": 1, "load": {"duration": "1.5m"}, "test": {"serviceName": "nginx", "timeout": "1.5s"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let w = Window { end_at: 0, deadline: std::time::Duration::from_millis(90_500) };
        let env = env_of(&pod("t", "u", "shop", &spec, "loadgen:1", 1, 0, &w, &pinned()));
        assert_eq!(
            (env["TIMEOUT"].as_str(), env["DEADLINE"].as_str(), env["DURATION"].as_str()),
            ("1500ms", "90500ms", "90000ms")
        );
    }

    #[test]
    fn each_runner_gets_its_share_of_the_stages() {
        let spec: LoadTestSpec = serde_json::from_value(json!({
            "replicas": 3, "test": {"serviceName": "nginx"},
            "load": {"stages": [{"duration": "10s", "rate": 40}, {"duration": "1m", "rate": 100}], "maxConnections": 7}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let w = Window { end_at: 0, deadline: std::time::Duration::from_secs(600) };
        let flags: Vec<String> = (0..3)
            .map(|i| {
                let env = env_of(&pod("t", "u", "shop", &spec, "loadgen:1", 1, i, &w, &pinned()));
                assert_eq!(env["MAX_CONNECTIONS"], "7");
                env["STAGES"].clone()
            })
            .collect();
        assert_eq!(flags, ["10000ms:14,60000ms:34", "10000ms:13,60000ms:33", "10000ms:13,60000ms:33"]);
        let plain: LoadTestSpec = serde_json::from_value(json!({"replicas": 1, "test": {"serviceName": "nginx"}}))
            .unwrap_or_else(|e| panic!("{e}"));
        let env = env_of(&pod("t", "u", "shop", &plain, "loadgen:1", 1, 0, &w, &pinned()));
        assert!(!env.contains_key("STAGES") && !env.contains_key("MAX_CONNECTIONS"));
    }

    #[test]
    fn secret_header_values_are_mounted_files_never_env() {
        let spec: LoadTestSpec = serde_json::from_value(json!({
            "replicas": 1, "test": {"serviceName": "nginx", "httpHeaders": [
                {"name": "X-Plain", "value": "1"},
                {"name": "Authorization", "valueFrom": {"secretKeyRef": {"name": "api-token", "key": "header"}}},
                {"name": "Cookie", "valueFrom": {"secretKeyRef": {"name": "api-token", "key": "cookie"}}}
            ]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let p = pod("t", "u", "shop", &spec, "loadgen:1", 1, 0, &window(0), &pinned());
        let env = env_of(&p);
        assert_eq!(env["HEADERS"], "X-Plain:1");
        assert_eq!(env["HEADER_FILES"], format!("Authorization:{SECRETS_DIR}/h1\nCookie:{SECRETS_DIR}/h2"));
        let env_text = serde_json::to_string(&p["spec"]["containers"][0]["env"]).unwrap_or_default();
        assert!(!env_text.contains("api-token") && !env_text.contains("secretKeyRef"), "{env_text}");
        let c = &p["spec"]["containers"][0];
        assert_eq!(c["volumeMounts"][1], json!({"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": true}));
        assert_eq!(
            p["spec"]["volumes"][1]["projected"]["sources"],
            json!([
                {"secret": {"name": "api-token", "items": [{"key": "header", "path": "h1"}]}},
                {"secret": {"name": "api-token", "items": [{"key": "cookie", "path": "h2"}]}}
            ])
        );
        let _: Pod = serde_json::from_value(p).unwrap_or_else(|e| panic!("not a Pod: {e}"));
    }

    #[test]
    fn an_https_test_mounts_its_ca_and_asks_for_http2() {
        let spec: LoadTestSpec = serde_json::from_value(json!({
            "replicas": 1, "test": {"serviceName": "nginx", "port": 443, "scheme": "https", "http2": true,
                "tls": {"caConfigMapRef": {"name": "shop-ca", "key": "ca.pem"}}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let p = pod("t", "u", "shop", &spec, "loadgen:1", 1, 0, &window(0), &pinned());
        let env = env_of(&p);
        assert_eq!(env["URL"], "https://nginx.shop.svc.cluster.local:443/");
        assert_eq!((env["CA_FILE"].as_str(), env["HTTP2"].as_str()), ("/var/run/flotilla/ca/ca.crt", "true"));
        assert!(!env.contains_key("INSECURE_SKIP_VERIFY"));
        assert_eq!(
            p["spec"]["containers"][0]["volumeMounts"][1],
            json!({"name": "ca", "mountPath": CA_DIR, "readOnly": true})
        );
        assert_eq!(
            p["spec"]["volumes"][1],
            json!({"name": "ca", "configMap": {"name": "shop-ca", "items": [{"key": "ca.pem", "path": "ca.crt"}]}})
        );
        let _: Pod = serde_json::from_value(p).unwrap_or_else(|e| panic!("not a Pod: {e}"));
        // Without TLS settings: none of it; with insecureSkipVerify: only that.
        let plain: LoadTestSpec = serde_json::from_value(json!({"replicas": 1, "test": {"serviceName": "nginx"}}))
            .unwrap_or_else(|e| panic!("{e}"));
        let env = env_of(&pod("t", "u", "shop", &plain, "loadgen:1", 1, 0, &window(0), &pinned()));
        assert!(["CA_FILE", "HTTP2", "INSECURE_SKIP_VERIFY"].iter().all(|k| !env.contains_key(*k)), "{env:?}");
        let insecure: LoadTestSpec = serde_json::from_value(json!({"replicas": 1, "test": {"serviceName": "nginx",
            "scheme": "https", "tls": {"insecureSkipVerify": true}}}))
        .unwrap_or_else(|e| panic!("{e}"));
        let env = env_of(&pod("t", "u", "shop", &insecure, "loadgen:1", 1, 0, &window(0), &pinned()));
        assert_eq!(env.get("INSECURE_SKIP_VERIFY").map(String::as_str), Some("true"));
        assert!(!env.contains_key("CA_FILE"));
    }

    #[test]
    fn checks_reach_loadgen_only_when_set() {
        let spec = |checks: Value| -> LoadTestSpec {
            serde_json::from_value(json!({"replicas": 1, "test": {"serviceName": "nginx", "checks": checks}}))
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let env_for = |s: &LoadTestSpec| env_of(&pod("t", "u", "shop", s, "loadgen:1", 1, 0, &window(0), &pinned()));
        let env = env_for(&spec(json!({"statusCodes": [200, 204], "bodyContains": "\"status\": \"ok\""})));
        assert_eq!(env["EXPECT_STATUS"], "200,204");
        assert_eq!(env["EXPECT_BODY_CONTAINS"], "\"status\": \"ok\"");
        let env = env_for(&spec(json!({"bodyContains": "ok"})));
        assert!(!env.contains_key("EXPECT_STATUS"), "no statuses: the classes count, as before");
        assert_eq!(env["EXPECT_BODY_CONTAINS"], "ok");
        for none in [
            spec(json!({})),
            serde_json::from_value(json!({"replicas": 1, "test": {"serviceName": "n"}}))
                .unwrap_or_else(|e| panic!("{e}")),
        ] {
            let env = env_for(&none);
            assert!(!env.contains_key("EXPECT_STATUS") && !env.contains_key("EXPECT_BODY_CONTAINS"), "{env:?}");
        }
    }

    #[test]
    fn text_from_the_spec_reaches_loadgen_as_written_not_expanded_by_the_kubelet() {
        let spec: LoadTestSpec = serde_json::from_value(json!({"replicas": 1, "test": {
            "serviceName": "nginx", "method": "POST", "path": "/q?a=$(URL)",
            "headers": {"X-Sig": "a$$b"}, "body": "{\"v\": \"$(CONNECT_TO)\"}",
            "checks": {"bodyContains": "$(METHOD)"}}}))
        .unwrap_or_else(|e| panic!("{e}"));
        let env = env_of(&pod("t", "u", "shop", &spec, "loadgen:1", 1, 0, &window(0), &pinned()));
        assert_eq!(env["BODY"], r#"{"v": "$$(CONNECT_TO)"}"#);
        assert_eq!(env["EXPECT_BODY_CONTAINS"], "$$(METHOD)");
        assert!(env["HEADERS"].contains("a$$$$b"), "{env:?}");
        assert!(env["URL"].ends_with("/q?a=$$(URL)"), "{env:?}");
        // What the kubelet makes of them: `$$` is `$`.
        assert_eq!(env["EXPECT_BODY_CONTAINS"].replace("$$", "$"), "$(METHOD)");
    }

    #[test]
    fn a_secret_body_is_a_mounted_file_never_env() {
        let spec: LoadTestSpec = serde_json::from_value(json!({
            "replicas": 1, "test": {"serviceName": "nginx", "method": "POST",
                "bodyFrom": {"secretKeyRef": {"name": "payload", "key": "order.json"}}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let p = pod("t", "u", "shop", &spec, "loadgen:1", 1, 0, &window(0), &pinned());
        let env = env_of(&p);
        assert_eq!((env["BODY"].clone(), env["BODY_FILE"].clone()), (String::new(), format!("{SECRETS_DIR}/body")));
        let env_text = serde_json::to_string(&p["spec"]["containers"][0]["env"]).unwrap_or_default();
        assert!(!env_text.contains("payload") && !env_text.contains("secretKeyRef"), "{env_text}");
        assert_eq!(
            p["spec"]["containers"][0]["volumeMounts"][1],
            json!({"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": true})
        );
        assert_eq!(
            p["spec"]["volumes"][1]["projected"]["sources"],
            json!([{"secret": {"name": "payload", "items": [{"key": "order.json", "path": "body"}]}}])
        );
        assert_eq!(crate::crd::guarded_power(&spec), Some("a body from a Secret (test.bodyFrom)"));
        let _: Pod = serde_json::from_value(p).unwrap_or_else(|e| panic!("not a Pod: {e}"));
    }

    #[test]
    fn runners_are_guaranteed_qos_and_spread_by_default() {
        let spec: LoadTestSpec = serde_json::from_value(json!({"replicas": 3, "test": {"serviceName": "nginx"}}))
            .unwrap_or_else(|e| panic!("{e}"));
        let p = pod("example-02", "u", "shop", &spec, "loadgen:1", 4, 1, &window(0), &pinned());
        // Requests = limits for CPU and memory: the Guaranteed QoS class.
        let both = json!({"cpu": "500m", "memory": "256Mi"});
        assert_eq!(p["spec"]["containers"][0]["resources"], json!({"requests": both, "limits": both}));
        assert_eq!(
            p["spec"]["topologySpreadConstraints"],
            json!([{
                "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {LOADTEST_LABEL: "example-02", RUN_LABEL: "4"}}
            }])
        );
        // The selector matches the pod's own labels: this run's runners.
        for (k, v) in
            p["spec"]["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"].as_object().into_iter().flatten()
        {
            assert_eq!(&p["metadata"]["labels"][k], v, "{k}");
        }
        for absent in ["nodeSelector", "tolerations", "affinity"] {
            assert!(p["spec"].get(absent).is_none(), "{absent}");
        }
        let _: Pod = serde_json::from_value(p).unwrap_or_else(|e| panic!("not a Pod: {e}"));
    }

    #[test]
    fn the_runner_spec_places_and_sizes_the_pods_as_written() {
        let affinity = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["load"]}]}
        ]}}});
        let tolerations = json!([{"key": "dedicated", "operator": "Equal", "value": "load", "effect": "NoSchedule"}]);
        let spec: LoadTestSpec = serde_json::from_value(json!({
            "replicas": 2, "test": {"serviceName": "nginx"},
            "runner": {
                "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "memory": "64Mi"}},
                "nodeSelector": {"pool": "load"}, "tolerations": tolerations, "affinity": affinity,
                "spread": false
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let p = pod("t", "u", "shop", &spec, "loadgen:1", 1, 0, &window(0), &pinned());
        assert_eq!(
            p["spec"]["containers"][0]["resources"],
            json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "memory": "64Mi"}})
        );
        assert_eq!(p["spec"]["nodeSelector"], json!({"pool": "load"}));
        assert_eq!(p["spec"]["tolerations"], tolerations);
        assert_eq!(p["spec"]["affinity"], affinity);
        assert!(p["spec"].get("topologySpreadConstraints").is_none(), "spread: false");
        // The rest of the pod is as ever: unprivileged, waiting for the signal.
        assert_eq!(p["spec"]["securityContext"]["runAsNonRoot"], true);
        assert_eq!(p["spec"]["restartPolicy"], "Never");
        let _: Pod = serde_json::from_value(p).unwrap_or_else(|e| panic!("not a Pod: {e}"));
        // Resources given without limits: as written (Burstable), no default mixed in.
        let spec: LoadTestSpec = serde_json::from_value(json!({
            "replicas": 1, "test": {"serviceName": "nginx"}, "runner": {"resources": {"requests": {"cpu": "50m"}}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let p = pod("t", "u", "shop", &spec, "loadgen:1", 1, 0, &window(0), &pinned());
        assert_eq!(p["spec"]["containers"][0]["resources"], json!({"requests": {"cpu": "50m"}}));
        assert!(p["spec"]["topologySpreadConstraints"].is_array(), "spread defaults to true");
    }
}
