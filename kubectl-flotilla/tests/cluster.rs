//! `kubectl flotilla` against the project's real control plane: objects
//! whose status is written as the operators write it (status subresource,
//! the CRDs' schemas), the plugin run as kubectl runs it, with a kubeconfig.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Command;

use flotilla_e2e::apply_crds;
use flotilla_testenv::{TestEnv, shared};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn api(env_client: &kube::Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("flotilla.dev", "v1alpha1", kind));
    Api::namespaced_with(env_client.clone(), ns, &ar)
}

/// Runs the plugin; its stdout, or a panic with stderr when it fails and
/// should not (and the reverse).
fn plugin(env: &TestEnv, ns: &str, args: &[&str], ok: bool) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-flotilla"))
        .args(args)
        .args(["--namespace", ns])
        .arg(format!("--kubeconfig={}", env.kubeconfig.display()))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.success(), ok, "kubectl flotilla {args:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    eprintln!("$ kubectl flotilla {}\n{stdout}{stderr}", args.join(" "));
    if ok { stdout.into_owned() } else { stderr.into_owned() }
}

fn condition(status: &str, reason: &str, message: &str) -> Value {
    json!({"type": "Ready", "status": status, "reason": reason, "message": message,
           "lastTransitionTime": "2026-11-27T10:00:00Z", "observedGeneration": 1})
}

async fn create(api: &Api<DynamicObject>, kind: &str, name: &str, spec: Value, status: Value) -> DynamicObject {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({"status": status}))).await.unwrap()
}

#[tokio::test]
async fn status_results_rerun_and_why_read_what_the_operators_write() {
    let env = shared();
    let client = env.client().await;
    apply_crds(&client).await.unwrap();
    let ns = env.namespace("kubectl-flotilla").await.unwrap();
    let load_tests = api(&client, &ns, "LoadTest");
    let mut h = loadgen::summary::histogram();
    h.record_n(1_500, 950).unwrap();
    h.record_n(30_000, 50).unwrap();
    let results = json!({"runners": 2, "requests": 1000, "errors": {"http5xx": 7}, "notSent": 0, "elapsed": "10.00s",
        "errorRatio": "0.007", "rps": "100.0", "latency": {"p50": "1.5ms", "p90": "1.5ms", "p99": "30ms", "max": "30ms"},
        "histogram": loadgen::summary::encode(&h).unwrap()});
    let smoke = create(
        &load_tests,
        "LoadTest",
        "smoke",
        json!({"replicas": 2, "test": {"serviceName": "web"}}),
        json!({"state": "Finished", "verdict": "Passed", "run": 1, "results": results,
               "conditions": [condition("True", "Finished", "1000 requests, p99 30ms")]}),
    )
    .await;
    create(&api(&client, &ns, "PodAlert"), "PodAlert", "crashes",
        json!({"alerts": {"checkRunningPods": true}, "sinks": {"webhook": {"urlSecretRef": {"name": "hooks", "key": "url"}}}}),
        json!({"conditions": [condition("False", "SinkMisconfigured", "secret hooks: not found")]})).await;

    // status: both kinds, Ready or not, with the reason and message.
    let out = plugin(&env, &ns, &["status"], true);
    let line =
        |name: &str| out.lines().find(|l| l.contains(name)).unwrap_or_else(|| panic!("{name} in:\n{out}")).to_string();
    assert!(out.starts_with("KIND"), "{out}");
    let crashes = line("crashes");
    assert!(
        crashes.starts_with("PodAlert") && crashes.contains("False") && crashes.contains("secret hooks: not found"),
        "{out}"
    );
    assert!(line("smoke").contains("True") && line("smoke").contains("Finished"), "{out}");
    let not_ready = plugin(&env, &ns, &["status", "--not-ready"], true);
    assert!(not_ready.contains("crashes") && !not_ready.contains("smoke"), "{not_ready}");
    let everywhere = plugin(&env, &ns, &["status", "-A"], true);
    assert!(everywhere.lines().next().unwrap().contains("NAMESPACE") && everywhere.contains(&ns), "{everywhere}");

    // results: the figures and the histogram drawn.
    let out = plugin(&env, &ns, &["results", "smoke"], true);
    assert!(
        out.contains("run 1, Finished, verdict Passed")
            && out.contains("errors   http5xx 7")
            && out.contains("p99 30ms"),
        "{out}"
    );
    assert!(out.lines().any(|l| l.contains(" 950 ") && l.contains('█')), "{out}");
    assert!(out.lines().any(|l| l.contains(" 50 ") && l.contains("100.00%")), "{out}");

    // rerun: the annotation the operator starts a new run on.
    let out = plugin(&env, &ns, &["rerun", "smoke"], true);
    assert!(out.contains("rerun requested"), "{out}");
    let after = load_tests.get("smoke").await.unwrap();
    let mark =
        after.metadata.annotations.unwrap_or_default().remove("flotilla.dev/rerun").expect("the rerun annotation");
    assert!(mark.parse::<k8s_openapi::jiff::Timestamp>().is_ok(), "{mark}");

    // why: conditions, the object's Warning Events (not another's), status.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let uid = smoke.metadata.uid.clone().unwrap();
    for (name, uid, kind, reason) in [
        ("e1", uid.as_str(), "Warning", "TargetChanged"),
        ("e2", uid.as_str(), "Normal", "Started"),
        ("e3", "other-uid", "Warning", "Unrelated"),
    ] {
        let e: Event = serde_json::from_value(json!({
            "metadata": {"name": name}, "type": kind, "reason": reason, "message": format!("{reason} happened"),
            "involvedObject": {"apiVersion": "flotilla.dev/v1alpha1", "kind": "LoadTest", "name": "smoke", "namespace": ns, "uid": uid},
            "firstTimestamp": "2026-11-27T10:00:00Z", "lastTimestamp": "2026-11-27T10:01:00Z", "count": 3,
            "source": {"component": "load-tester"}
        }))
        .unwrap();
        events.create(&PostParams::default(), &e).await.unwrap();
    }
    let out = plugin(&env, &ns, &["why", "lt/smoke"], true);
    assert!(out.starts_with(&format!("LoadTest {ns}/smoke")), "{out}");
    assert!(out.contains("Ready") && out.contains("1000 requests, p99 30ms"), "{out}");
    assert!(out.contains("TargetChanged") && out.contains("x3"), "{out}");
    assert!(!out.contains("Started") && !out.contains("Unrelated"), "only this object's Warnings: {out}");
    assert!(out.contains("Status:") && out.contains("verdict: Passed"), "{out}");

    // Mistakes are answered, not guessed at.
    let err = plugin(&env, &ns, &["why", "pods/web"], false);
    assert!(err.contains("not a Flotilla kind"), "{err}");
    let err = plugin(&env, &ns, &["results", "missing"], false);
    assert!(
        err.contains(&format!("reading loadtest {ns}/missing: loadtests.flotilla.dev \"missing\" not found")),
        "{err}"
    );
}
