//! load-tester's attack tests on the one-node cluster, the operator run as
//! the chart's ServiceAccount with the chart's RBAC: a namespace called
//! `svc` cannot capture a LoadTest's traffic through the runners' DNS
//! search path; a target that changes (type, cluster IP, identity) during a
//! run fails it and stops the runners, and only a Service with a cluster IP
//! is a target; header values from Secrets reach the target and appear in
//! no pod environment, status or Event; reruns wait out
//! `--min-rerun-interval` and runner pods per namespace stay within
//! `--max-runners-per-namespace`. Flags are given as environment variables
//! (so that the same tests ran against the code before them, and failed).
//! Needs the loadgen image (`cargo xtask images loadgen`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::{TestEnv, node};
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use load_tester::crd::State;
use serde_json::json;

const T: Duration = Duration::from_secs(180);

fn ready_reason(s: &LoadTestStatus) -> String {
    s.conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.reason.clone()).unwrap_or_default()
}

/// The namespace literally called `svc` (cluster-wide: one test uses it),
/// made fresh and deleted when dropped.
struct SvcNamespace<'a>(&'a TestEnv);

impl<'a> SvcNamespace<'a> {
    async fn create(env: &'a TestEnv) -> SvcNamespace<'a> {
        let namespaces: Api<Namespace> = Api::all(env.client().await);
        // One left by an earlier run goes first.
        let _ = namespaces.delete("svc", &DeleteParams::default()).await;
        flotilla_testenv::wait_for("an old namespace svc to go", T, || async {
            Ok::<_, kube::Error>(namespaces.get_opt("svc").await?.is_none().then_some(()))
        })
        .await
        .unwrap();
        let ns: Namespace = serde_json::from_value(
            json!({"metadata": {"name": "svc", "labels": {flotilla_testenv::harness::TEST_NAMESPACE_LABEL: "true"}}}),
        )
        .unwrap();
        namespaces.create(&PostParams::default(), &ns).await.unwrap();
        SvcNamespace(env)
    }
}

impl Drop for SvcNamespace<'_> {
    fn drop(&mut self) {
        let _ = self.0.kubectl(&["delete", "namespace", "svc", "--wait=false"]);
    }
}

/// Runners used to send to the relative name `<svc>.<ns>.svc`. The pod's
/// resolv.conf (`search <ns>.svc.cluster.local svc.cluster.local
/// cluster.local`, `ndots:5`) tries `web.<ns>.svc.<ns>.svc.cluster.local`
/// first (no such Service: NXDOMAIN), then `web.<ns>.svc.svc.cluster.local`:
/// to CoreDNS that is endpoint `web` of Service `<ns>` in namespace `svc`.
/// Whoever owns a namespace called `svc` makes it exist (a headless Service
/// named after the victim's namespace, a pod with hostname `web` and that
/// subdomain) and receives the load with its headers. Runners now connect
/// to the Service's cluster IP and resolve nothing.
#[tokio::test]
async fn a_namespace_called_svc_does_not_receive_a_loadtests_traffic() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("lt-dns").await.unwrap();
    let _svc_ns = SvcNamespace::create(&env).await;
    capture_pod(&client, &ns, "web", None).await;
    service(&client, &ns, "web", "web", false).await;
    // The trap: web.<ns>.svc.svc.cluster.local is its address.
    capture_pod(&client, "svc", "trap", Some(("web", &ns))).await;
    service(&client, "svc", &ns, "trap", true).await;
    wait_ready_endpoint(&client, &ns, "web", None).await;
    wait_ready_endpoint(&client, "svc", &ns, Some("web")).await;
    let operator = start_operator_with_chart_rbac(&env, &ns, &[]).await;

    let key = format!("key-{:08x}", rand_u32());
    create(
        &client,
        &ns,
        "LoadTest",
        "probe",
        small(
            json!({"replicas": 1, "test": {"serviceName": "web", "port": 8080, "path": "/cgi-bin/capture", "repeat": 3,
               "headers": {"X-Api-Key": key}}}),
        ),
    )
    .await
    .unwrap();
    let s = wait_test(&client, &ns, "probe", "the probe to end", T, |s| s.state.is_terminal().then(|| s.clone())).await;
    let trapped = hits(&env, "svc", "trap");
    assert!(trapped.is_empty(), "namespace svc received the LoadTest's requests: {trapped:?}");
    assert_eq!(s.state, State::Finished, "{s:#?}\n{}", operator.logs());
    let got = hits(&env, &ns, "web");
    assert_eq!(got.len(), 3, "{got:?}");
    for hit in &got {
        assert!(hit.contains(&format!("host=web.{ns}.svc.cluster.local:8080 ")), "{hit}");
        assert!(hit.contains(&format!("key={key}")), "{hit}");
    }
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}

fn rand_u32() -> u32 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    t.subsec_nanos() ^ std::process::id().rotate_left(16)
}

/// A Service that turns into an ExternalName (a name anywhere), or is
/// deleted and made again (another cluster IP, perhaps another's), during
/// a run fails it TargetChanged and its runners are stopped; a headless or
/// ExternalName Service is no target at all.
#[tokio::test]
async fn a_target_that_changes_during_the_run_fails_it_and_stops_the_runners() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("lt-target").await.unwrap();
    capture_pod(&client, &ns, "web", None).await;
    for (name, headless) in [("web", false), ("again", false), ("direct", true)] {
        service(&client, &ns, name, "web", headless).await;
    }
    let external: Service = serde_json::from_value(
        json!({"metadata": {"name": "elsewhere"}, "spec": {"type": "ExternalName", "externalName": "example.invalid"}}),
    )
    .unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    services.create(&PostParams::default(), &external).await.unwrap();
    wait_ready_endpoint(&client, &ns, "web", None).await;
    wait_ready_endpoint(&client, &ns, "again", None).await;
    let operator = start_operator_with_chart_rbac(&env, &ns, &[]).await;

    // One request a second for 100 s: long enough to be changed under.
    let long = |svc: &str| {
        small(json!({"replicas": 2, "rate": 1, "deadline": "3m",
               "test": {"serviceName": svc, "port": 8080, "path": "/cgi-bin/capture", "repeat": 100}}))
    };
    create(&client, &ns, "LoadTest", "to-external", long("web")).await.unwrap();
    create(&client, &ns, "LoadTest", "remade", long("again")).await.unwrap();
    for (test, svc) in [("headless", "direct"), ("external", "elsewhere")] {
        create(
            &client,
            &ns,
            "LoadTest",
            test,
            small(json!({"replicas": 1, "test": {"serviceName": svc, "port": 8080, "path": "/cgi-bin/capture"}})),
        )
        .await
        .unwrap();
    }
    for test in ["to-external", "remade"] {
        wait_test(&client, &ns, test, "Executing", T, |s| (s.state == State::Executing).then_some(())).await;
    }

    // web becomes an ExternalName Service; again is deleted and made again.
    let to_external = json!({"spec": {"type": "ExternalName", "externalName": "example.invalid", "selector": null,
                                      "clusterIP": null, "clusterIPs": null, "ipFamilies": null, "ipFamilyPolicy": null,
                                      "internalTrafficPolicy": null}});
    services.patch("web", &PatchParams::default(), &Patch::Merge(&to_external)).await.unwrap();
    services.delete("again", &DeleteParams::default()).await.unwrap();
    service(&client, &ns, "again", "web", false).await;

    for (test, why) in [("to-external", "ExternalName"), ("remade", "deleted")] {
        let s = wait_test(&client, &ns, test, "the run to end", T, |s| s.state.is_terminal().then(|| s.clone())).await;
        assert_eq!((s.state, s.reason.as_str()), (State::Failed, "TargetChanged"), "{test}: {s:#?}");
        assert!(s.message.contains(why), "{test}: {}", s.message);
        flotilla_testenv::wait_for(&format!("{test}'s runners to stop"), T, || async {
            Ok::<_, std::convert::Infallible>(runner_pods(&client, &ns, test).await.is_empty().then_some(()))
        })
        .await
        .unwrap();
    }
    for (test, what) in [("headless", "headless"), ("external", "ExternalName")] {
        let s = wait_test(&client, &ns, test, "the run to end", T, |s| s.state.is_terminal().then(|| s.clone())).await;
        assert_eq!((s.state, s.reason.as_str()), (State::Failed, "TargetNotClusterIP"), "{test}: {s:#?}");
        assert!(s.message.contains(what), "{test}: {}", s.message);
        assert!(runner_pods(&client, &ns, test).await.is_empty(), "{test}: no runner is made");
    }
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}

/// Header values and a body from a Secret (valueFrom.secretKeyRef,
/// test.bodyFrom) reach the target, and nothing else holds them: not the
/// runner pods (env or anything else of their spec), not the LoadTest's
/// status, not its Events.
#[tokio::test]
async fn header_values_and_bodies_from_secrets_reach_the_target_and_nowhere_else() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("lt-secret").await.unwrap();
    capture_pod(&client, &ns, "web", None).await;
    service(&client, &ns, "web", "web", false).await;
    let (token, key) = (format!("tok-{:08x}", rand_u32()), format!("key-{:08x}", rand_u32()));
    let pan = format!("pan-{:08x}", rand_u32());
    let body = format!("{{\"card\":\"{pan}\"}}");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "api-token"},
        // As `kubectl create secret --from-file` keeps a file's last newline.
        "stringData": {"header": format!("Bearer {token}\n"), "key": key, "order.json": body}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns).create(&PostParams::default(), &secret).await.unwrap();
    wait_ready_endpoint(&client, &ns, "web", None).await;
    let operator = start_operator_with_chart_rbac(&env, &ns, &[]).await;

    let from = |k: &str| json!({"secretKeyRef": {"name": "api-token", "key": k}});
    create(
        &client,
        &ns,
        "LoadTest",
        "secret",
        small(json!({"replicas": 2, "cleanup": "Never",
               "test": {"serviceName": "web", "port": 8080, "path": "/cgi-bin/capture", "repeat": 2,
                        "method": "POST", "bodyFrom": from("order.json"),
                        "httpHeaders": [{"name": "Authorization", "valueFrom": from("header")},
                                        {"name": "X-Api-Key", "valueFrom": from("key")}]}})),
    )
    .await
    .unwrap();
    let s = wait_test(&client, &ns, "secret", "the run to end", T, |s| s.state.is_terminal().then(|| s.clone())).await;
    let got = hits(&env, &ns, "web");
    assert_eq!(got.len(), 4, "{got:?}\n{s:#?}");
    for hit in &got {
        assert!(hit.contains(&format!("auth=Bearer {token} key={key} body={body}")), "{hit}");
    }
    assert_eq!(s.state, State::Finished, "{s:#?}");
    let pods = runner_pods(&client, &ns, "secret").await;
    assert_eq!(pods.len(), 2, "cleanup: Never keeps them");
    for p in &pods {
        let text = serde_json::to_string(p).unwrap();
        assert!(
            !text.contains(&token) && !text.contains(&key) && !text.contains(&pan),
            "a runner pod holds the value: {text}"
        );
        let env_vars = p.spec.as_ref().unwrap().containers[0].env.clone().unwrap_or_default();
        assert!(env_vars.iter().all(|e| e.value_from.is_none()), "no Secret in env: {env_vars:?}");
    }
    let test = Api::<LoadTest>::namespaced(client.clone(), &ns).get("secret").await.unwrap();
    let text = serde_json::to_string(&test).unwrap();
    assert!(!text.contains(&token) && !text.contains(&key) && !text.contains(&pan), "{text}");
    let events = format!("{:?}", events_about(&client, &ns, "secret").await);
    assert!(!events.contains(&token) && !events.contains(&key) && !events.contains(&pan), "{events}");
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
    assert!(!logs.contains(&token) && !logs.contains(&key) && !logs.contains(&pan), "{logs}");
}

/// A rerun requested right after a run started waits out
/// `--min-rerun-interval` (30 s, the default) with Ready=False RerunTooSoon
/// and one Warning Event, while the current run goes on.
#[tokio::test]
async fn a_rerun_waits_out_the_min_rerun_interval() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("lt-rerun").await.unwrap();
    capture_pod(&client, &ns, "web", None).await;
    service(&client, &ns, "web", "web", false).await;
    wait_ready_endpoint(&client, &ns, "web", None).await;
    let operator = start_operator_with_chart_rbac(&env, &ns, &[]).await;
    let tests = api(&client, &ns, "LoadTest");

    let quick = small(
        json!({"replicas": 1, "test": {"serviceName": "web", "port": 8080, "path": "/cgi-bin/capture", "repeat": 1}}),
    );
    create(&client, &ns, "LoadTest", "quick", quick).await.unwrap();
    let run1 = wait_test(&client, &ns, "quick", "run 1", T, |s| (s.run == 1).then(|| s.clone())).await;
    let rerun = json!({"metadata": {"annotations": {"flotilla.dev/rerun": "now"}}});
    tests.patch("quick", &PatchParams::default(), &Patch::Merge(&rerun)).await.unwrap();
    let waiting = wait_test(&client, &ns, "quick", "Ready=False RerunTooSoon", T, |s| {
        (ready_reason(s) == "RerunTooSoon" || s.run > 1).then(|| s.clone())
    })
    .await;
    assert_eq!((waiting.run, ready_reason(&waiting).as_str()), (1, "RerunTooSoon"), "{waiting:#?}");
    let run2 = wait_test(&client, &ns, "quick", "run 2 to finish", T, |s| {
        (s.run == 2 && s.state.is_terminal()).then(|| s.clone())
    })
    .await;
    assert_eq!(run2.state, State::Finished, "{run2:#?}");
    let started = |s: &LoadTestStatus| s.start_time.as_ref().unwrap().0;
    let gap = started(&run2).duration_since(started(&run1));
    assert!(gap.as_secs() >= 30, "run 2 started {gap:?} after run 1");
    flotilla_testenv::wait_event(&client, &ns, "quick", "Warning", "RerunTooSoon", T).await;
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}

/// With `--max-runners-per-namespace` 3: of two 2-runner runs created at
/// once, exactly one waits; a 2-runner run waits (TooManyRunners, no pod
/// made, one Warning Event) while another's 2 runners run, and starts once
/// they are gone; 4 runners fail at once.
#[tokio::test]
async fn runner_pods_per_namespace_stay_within_the_bound() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("lt-room").await.unwrap();
    capture_pod(&client, &ns, "web", None).await;
    service(&client, &ns, "web", "web", false).await;
    wait_ready_endpoint(&client, &ns, "web", None).await;
    let operator = start_operator_with_chart_rbac(&env, &ns, &[("MAX_RUNNERS_PER_NAMESPACE", "3")]).await;
    let tests = api(&client, &ns, "LoadTest");

    // Two 2-runner runs asking at once: one is counted first and reserves
    // its room, the other waits (not both made: 4 pods).
    let short = small(
        json!({"replicas": 2, "test": {"serviceName": "web", "port": 8080, "path": "/cgi-bin/capture", "repeat": 1}}),
    );
    let (a, b) = tokio::join!(
        create(&client, &ns, "LoadTest", "first", short.clone()),
        create(&client, &ns, "LoadTest", "second", short.clone())
    );
    a.unwrap();
    b.unwrap();
    for t in ["first", "second"] {
        let s = wait_test(&client, &ns, t, "both to finish", T, |s| s.state.is_terminal().then(|| s.clone())).await;
        assert_eq!(s.state, State::Finished, "{t}: {s:#?}");
    }
    let mut waited = Vec::new();
    for t in ["first", "second"] {
        let events = events_about(&client, &ns, t).await;
        if events.iter().any(|(_, r, _)| r == "TooManyRunners") {
            waited.push(t);
        }
    }
    assert_eq!(waited.len(), 1, "exactly one of the two waited: {waited:?}");

    // Room for 3 runner pods: the hog's 2 leave none for the waiter's 2.
    let hog = small(json!({"replicas": 2, "rate": 1, "deadline": "3m",
                     "test": {"serviceName": "web", "port": 8080, "path": "/cgi-bin/capture", "repeat": 100}}));
    create(&client, &ns, "LoadTest", "hog", hog).await.unwrap();
    wait_test(&client, &ns, "hog", "the hog Executing", T, |s| (s.state == State::Executing).then_some(())).await;
    let waiter = small(json!({"replicas": 2, "startTimeout": "3m",
                        "test": {"serviceName": "web", "port": 8080, "path": "/cgi-bin/capture", "repeat": 1}}));
    create(&client, &ns, "LoadTest", "waiter", waiter).await.unwrap();
    let w = wait_test(&client, &ns, "waiter", "Ready=False TooManyRunners", T, |s| {
        (ready_reason(s) == "TooManyRunners" || s.state != State::Pending || s.children > 0).then(|| s.clone())
    })
    .await;
    assert_eq!((w.state, ready_reason(&w).as_str(), w.children), (State::Pending, "TooManyRunners", 0), "{w:#?}");
    assert!(runner_pods(&client, &ns, "waiter").await.is_empty());
    create(
        &client,
        &ns,
        "LoadTest",
        "huge",
        small(json!({"replicas": 4, "test": {"serviceName": "web", "port": 8080, "path": "/cgi-bin/capture"}})),
    )
    .await
    .unwrap();
    let h =
        wait_test(&client, &ns, "huge", "the huge run to end", T, |s| s.state.is_terminal().then(|| s.clone())).await;
    assert_eq!((h.state, h.reason.as_str()), (State::Failed, "TooManyRunners"), "{h:#?}");
    assert!(runner_pods(&client, &ns, "huge").await.is_empty());
    // The hog goes: the waiter gets its room and runs.
    tests.delete("hog", &DeleteParams::default()).await.unwrap();
    let w = wait_test(&client, &ns, "waiter", "the waiter to finish", T, |s| s.state.is_terminal().then(|| s.clone()))
        .await;
    assert_eq!(w.state, State::Finished, "{w:#?}");
    flotilla_testenv::wait_event(&client, &ns, "waiter", "Warning", "TooManyRunners", T).await;
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}

/// Issue 27's attack on a missing admission policy: the LoadTest policy is
/// what keeps a LoadTest's or SimpleDeployment's own image to those who may
/// create pods themselves, and a header from a Secret to those who may read
/// it. Rendered without it, every writer of a LoadTest had both. With
/// `REQUIRE_ADMISSION_POLICY` (the chart's `--require-admission-policy`)
/// neither is made while the policy or its binding is missing (Ready=False
/// AdmissionPolicyMissing, a Warning Event, no pod), and both are once the
/// policy exists. As environment variables, so that the same test runs
/// against an older build (`LOAD_TESTER_TEST_BINARY`), which ignores them
/// and makes the pods at once.
#[tokio::test]
async fn own_images_wait_for_the_admission_policy() {
    const POLICY: &str = "test-load-tester-loadtests";
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    flotilla_testenv::admission_policy::remove(&client, POLICY).await;
    let ns = env.namespace("lt-guard").await.unwrap();
    capture_pod(&client, &ns, "web", None).await;
    service(&client, &ns, "web", "web", false).await;
    wait_ready_endpoint(&client, &ns, "web", None).await;
    let operator = OPERATOR.start(
        &env.kubeconfig,
        Some(&ns),
        &[],
        &[("REQUIRE_ADMISSION_POLICY", POLICY), ("ADMISSION_POLICY_CHECK_INTERVAL", "1s")],
    );
    // The runners' usual image, named: that is enough to be guarded.
    let image = concat!("ghcr.io/flotilla-dev/flotilla-loadgen:", env!("CARGO_PKG_VERSION"));
    let spec = small(json!({"replicas": 1, "image": image,
        "test": {"serviceName": "web", "port": 8080, "path": "/cgi-bin/capture", "repeat": 1}}));
    create(&client, &ns, "LoadTest", "custom", spec).await.unwrap();
    create(
        &client,
        &ns,
        "SimpleDeployment",
        "own",
        json!({"sleepytime": "120", "image": flotilla_testenv::cluster::node::images::TOOLBOX_IMAGE}),
    )
    .await
    .unwrap();

    let waiting = wait_test(&client, &ns, "custom", "Ready=False AdmissionPolicyMissing", T, |s| {
        (ready_reason(s) == "AdmissionPolicyMissing" || s.run > 0).then(|| s.clone())
    })
    .await;
    assert_eq!((waiting.run, ready_reason(&waiting).as_str()), (0, "AdmissionPolicyMissing"), "{waiting:#?}");
    let sds: Api<SimpleDeployment> = Api::namespaced(client.clone(), &ns);
    flotilla_testenv::wait_object(&sds, "own", "the SimpleDeployment refused", T, |sd| {
        let s = sd.status.as_ref()?;
        s.conditions.iter().any(|c| c.type_ == "Ready" && c.reason == "AdmissionPolicyMissing").then_some(())
    })
    .await;
    assert!(runner_pods(&client, &ns, "custom").await.is_empty(), "runners while the policy was missing");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    assert!(
        pods.get_opt("own-child").await.unwrap().is_none(),
        "the SimpleDeployment's pod while the policy was missing"
    );
    flotilla_testenv::wait_event(&client, &ns, "custom", "Warning", "AdmissionPolicyMissing", T).await;

    // The policy and a denying binding come (back): both are made.
    flotilla_testenv::admission_policy::install(&client, POLICY, "flotilla.dev", &["loadtests", "simpledeployments"])
        .await
        .unwrap();
    let done =
        wait_test(&client, &ns, "custom", "the run to finish", T, |s| s.state.is_terminal().then(|| s.clone())).await;
    assert_eq!((done.run, done.state), (1, State::Finished), "{done:#?}");
    flotilla_testenv::wait_object(&sds, "own", "the SimpleDeployment's pod", T, |sd| {
        (!sd.status.as_ref()?.child.is_empty()).then_some(())
    })
    .await;
    flotilla_testenv::admission_policy::remove(&client, POLICY).await;
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}

/// A tenant with `edit` in the namespace cannot push the operator past its
/// chart's memory limit: 320 Services with 250 KB of annotations each (the
/// API allows 256 KiB) are 80 MB of metadata. The target-Service watch
/// listed them with `resourceVersion=0`, which the API server answers from
/// its cache in one piece: the body and its decoded objects, ~160 MB, and
/// the operator was OOM-killed under the chart's 128Mi at every start. Its
/// lists now stream, one object at a time. (Headless: no cluster IP each.)
#[tokio::test]
async fn a_tenants_bloated_services_cannot_push_it_past_the_charts_memory_limit() {
    use flotilla_testenv::memory_limit::{MemoryLimit, bloat, chart_limit};
    // Not the one-node cluster every test binary shares: its CoreDNS and
    // kube-proxy watch every Service too. Nothing here needs a node.
    let env = flotilla_testenv::shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("lt-bloat").await.unwrap();
    let headless = json!({"metadata": {}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}});
    bloat(&Api::<Service>::namespaced(client.clone(), &ns), 320, headless).await.unwrap();
    let limit = MemoryLimit::new("load-tester-bloat", chart_limit("load-tester").unwrap()).unwrap();
    let mut operator = OPERATOR.start_limited(&env.kubeconfig, Some(&ns), &[], &[], Some(&limit));
    // Ready: its caches listed (the Services' among them); then 20 s more.
    let ready = operator.health_url() + "/readyz";
    let peak = limit
        .outlived(&mut operator, "readiness", T, Duration::from_secs(20), || {
            let ready = ready.clone();
            async move { reqwest::get(&ready).await.is_ok_and(|r| r.status().is_success()) }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("peak memory under the chart's limit: {peak:?} bytes");
    drop(operator);
    let _ = Api::<Namespace>::all(client).delete(&ns, &DeleteParams::default()).await;
}
