//! The toy operator (shared/examples/toy_operator) run as a process, as a
//! user runs an operator: flags, metrics, readiness, leader election,
//! shutdown. Timings are shortened with the leader-election flags.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{T, Toy, install_widget_crd, widget};
use flotilla_testenv::{shared, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

/// Leader election in `ns`, whose Widgets alone the toy watches (the
/// tests of this binary run side by side, each with its own toys).
fn le_flags<'a>(ns: &'a str, id: &'a str, lease: &'a str, renew: &'a str, retry: &'a str) -> Vec<String> {
    vec![
        format!("--watch-namespace={ns}"),
        "--leader-elect".into(),
        format!("--leader-election-namespace={ns}"),
        format!("--leader-election-id={id}"),
        format!("--leader-elect-lease-duration={lease}"),
        format!("--leader-elect-renew-deadline={renew}"),
        format!("--leader-elect-retry-period={retry}"),
    ]
}

fn start(kubeconfig: &std::path::Path, flags: &[String]) -> Toy {
    let refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    Toy::start(kubeconfig, &refs)
}

async fn wait_leader(toy: &Toy, id: &str, timeout: Duration) {
    let series = format!("leader_election_master_status{{name=\"{id}\"}}");
    wait_for(&format!("{series} == 1"), timeout, || async {
        Ok::<_, String>((toy.metric(&series).await == Some(1.0)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
}

/// The `host` label of `rest_client_requests_total` for the cluster of
/// `kubeconfig`: its API server's `host:port`.
fn rest_client_host(kubeconfig: &std::path::Path) -> String {
    let config = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let server = config.clusters[0].cluster.as_ref().and_then(|c| c.server.clone()).unwrap();
    flotilla_shared::rest_client::host_label(&server.parse().unwrap())
}

async fn lease_holder(ns: &str, id: &str) -> Option<String> {
    let api: Api<Lease> = Api::namespaced(shared().client().await, ns);
    api.get(id).await.ok()?.spec?.holder_identity
}

#[test]
fn bad_flags_exit_2_naming_the_flag_without_touching_the_cluster() {
    let cases: &[(&[&str], &str)] = &[
        (&["--leader-elect-lease-duration=5s"], "--leader-elect-lease-duration"),
        (&["--metrics-bind-address=not-an-address"], "--metrics-bind-address"),
        (&["--leader-election-id=Bad_Name"], "--leader-election-id"),
        (&["--leader-elect-retry-period=soon"], "--leader-elect-retry-period"),
        (&["--log-format=xml"], "--log-format"),
    ];
    for (args, flag) in cases {
        let started = Instant::now();
        let out = Command::new(common::toy_binary())
            .args(*args)
            // Unreachable on purpose: touching the cluster would fail differently (exit 1).
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .expect("run toy");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: stderr should name {flag}: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(5), "{args:?} took {:?}", started.elapsed());
    }
}

#[test]
fn help_documents_every_flag_and_its_environment_variable() {
    let out = Command::new(common::toy_binary()).arg("--help").output().expect("run toy");
    let help = String::from_utf8_lossy(&out.stdout);
    for (flag, env) in [
        ("--metrics-bind-address", "METRICS_BIND_ADDRESS"),
        ("--health-probe-bind-address", "HEALTH_PROBE_BIND_ADDRESS"),
        ("--leader-elect", "LEADER_ELECT"),
        ("--leader-election-id", "LEADER_ELECTION_ID"),
        ("--leader-election-namespace", "LEADER_ELECTION_NAMESPACE"),
        ("--log-format", "LOG_FORMAT"),
    ] {
        assert!(
            help.contains(flag) && help.contains(&format!("[env: {env}=")),
            "{flag}/{env} missing from --help:\n{help}"
        );
    }
}

#[tokio::test]
async fn reconcile_metrics_count_successes_and_errors() {
    let env = shared();
    install_widget_crd(&env).await;
    let ns = env.namespace("metrics").await.unwrap();
    let toy = Toy::start(&env.kubeconfig, &[]);
    let api: Api<common::widget::Widget> = Api::namespaced(env.client().await, &ns);
    api.create(&PostParams::default(), &widget("good", json!({"message": "hi"}))).await.unwrap();
    api.create(&PostParams::default(), &widget("bad", json!({"fail": true}))).await.unwrap();

    let ok = r#"controller_runtime_reconcile_total{controller="widget",result="success"}"#;
    let err = r#"controller_runtime_reconcile_total{controller="widget",result="error"}"#;
    let errors = r#"controller_runtime_reconcile_errors_total{controller="widget"}"#;
    let count = r#"controller_runtime_reconcile_time_seconds_count{controller="widget"}"#;
    wait_for("a success and an error in /metrics", T, || async {
        let (s, e, n) = (toy.metric(ok).await, toy.metric(errors).await, toy.metric(count).await);
        Ok::<_, String>((s >= Some(1.0) && e >= Some(1.0) && n >= Some(2.0)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    assert!(toy.metric(err).await >= Some(1.0));
    assert_eq!(
        toy.metric(r#"controller_runtime_reconcile_total{controller="widget",result="requeue"}"#).await,
        Some(0.0)
    );
    // `spec.fail` is terminal (the toy's `ReconcileError`); a success is not.
    let terminal = r#"controller_runtime_terminal_reconcile_errors_total{controller="widget"}"#;
    let (terminal, errors) = (toy.metric(terminal).await, toy.metric(errors).await);
    assert!(terminal >= Some(1.0) && terminal <= errors, "terminal {terminal:?} of {errors:?} errors");
    // No --concurrency: no limit, exported as 0.
    assert_eq!(toy.metric(r#"controller_runtime_max_concurrent_reconciles{controller="widget"}"#).await, Some(0.0));
    // Every request of the client is counted: the watches' lists, the status writes.
    let text = common::get(&toy.metrics_url()).await.unwrap().1;
    let host = rest_client_host(&env.kubeconfig);
    for (code, method) in [("200", "GET"), ("200", "PATCH")] {
        let series = format!(r#"rest_client_requests_total{{code="{code}",host="{host}",method="{method}"}}"#);
        assert!(common::metric_value(&text, &series) >= Some(1.0), "{series}:\n{text}");
    }
    assert!(toy.metric("process_resident_memory_bytes").await.is_some_and(|v| v > 0.0));
    wait_for("/readyz to be 200 once the cache synced", T, || async {
        Ok::<_, String>(toy.ready().await.then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    let (code, body) = common::get(&format!("{}/healthz", toy.health)).await.unwrap();
    assert_eq!((code, body.as_str()), (200, "ok"));
}

#[tokio::test]
async fn two_instances_one_leader_and_the_standby_takes_over_when_the_leader_dies() {
    let env = shared();
    install_widget_crd(&env).await;
    let ns = env.namespace("le-kill").await.unwrap();
    let id = "toy-kill";
    let flags = le_flags(&ns, id, "3s", "2s", "500ms");
    let widgets: Api<common::widget::Widget> = Api::namespaced(env.client().await, &ns);
    widgets.create(&PostParams::default(), &widget("kept", json!({"message": "one"}))).await.unwrap();
    let mut a = start(&env.kubeconfig, &flags);
    wait_leader(&a, id, T).await;
    let b = start(&env.kubeconfig, &flags);
    let series = format!("leader_election_master_status{{name=\"{id}\"}}");
    wait_for("the standby to be ready", T, || async { Ok::<_, String>(b.ready().await.then_some(())) })
        .await
        .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", b.logs()));
    // Warm: the standby's cache synced before it leads, and nothing of it
    // reconciled — not even a Widget created and deleted meanwhile, which
    // its controller scheduled and must drop once leading (gone from the
    // cache), rather than reconcile from the old copy.
    assert!(b.logs().contains("cache synced"), "the standby's cache is synced:\n{}", b.logs());
    widgets.create(&PostParams::default(), &widget("gone", json!({"message": "two"}))).await.unwrap();
    widgets.delete("gone", &DeleteParams::default()).await.unwrap();
    let successes = r#"controller_runtime_reconcile_total{controller="widget",result="success"}"#;
    let errors = r#"controller_runtime_reconcile_errors_total{controller="widget"}"#;
    wait_for("the leader to be ready (cache synced)", T, || async { Ok::<_, String>(a.ready().await.then_some(())) })
        .await
        .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", a.logs()));
    // Several retry periods later, still exactly one leader.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(a.metric(&series).await, Some(1.0));
    assert_eq!(b.metric(&series).await, Some(0.0));
    assert!(b.ready().await, "a healthy standby is ready");

    assert_eq!(b.metric(successes).await, Some(0.0), "a standby reconciles nothing:\n{}", b.logs());
    // …and reports an empty queue, though "kept" waits in its scheduler.
    let (depth, adds) = (
        r#"workqueue_depth{controller="widget",name="widget"}"#,
        r#"workqueue_adds_total{controller="widget",name="widget"}"#,
    );
    assert_eq!((b.metric(depth).await, b.metric(adds).await), (Some(0.0), Some(0.0)), "{}", b.logs());

    // Kill the leader without a chance to release.
    a.child.kill().unwrap();
    let _ = a.child.wait();
    let killed = Instant::now();
    wait_leader(&b, id, Duration::from_secs(15)).await;
    let took = killed.elapsed();
    // Its first reconcile reads the cache the standby's watch already filled.
    wait_for("the new leader's first reconcile", T, || async {
        Ok::<_, String>((b.metric(successes).await >= Some(1.0)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", b.logs()));
    let first = killed.elapsed();
    eprintln!(
        "standby took over {took:?} after the leader was killed (lease 3s, retry 500ms); its first reconcile {first:?} after"
    );
    // Not before the lease could have expired, and within lease + retry (+ jitter and scrape slack).
    assert!(took >= Duration::from_millis(2500), "took over too early: {took:?}");
    // Slack for a loaded machine's API round trips, still short of a second lease (6 s).
    assert!(took <= Duration::from_millis(3000 + 600 + 2300), "took over too late: {took:?}");
    assert_eq!(b.metric(errors).await, Some(0.0), "the deleted Widget was not reconciled:\n{}", b.logs());
    // Leading, it took "kept" (and dropped "gone") from its queue.
    wait_for("the new leader's queue empty, its adds counted", T, || async {
        let (d, n) = (b.metric(depth).await, b.metric(adds).await);
        Ok::<_, String>((d == Some(0.0) && n >= Some(1.0)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", b.logs()));
}

#[tokio::test]
async fn a_released_lease_is_taken_over_within_about_two_retry_periods() {
    let env = shared();
    install_widget_crd(&env).await;
    let ns = env.namespace("le-release").await.unwrap();
    let id = "toy-release";
    // A long lease: only a release explains a fast takeover.
    let flags = le_flags(&ns, id, "20s", "4s", "500ms");
    let mut a = start(&env.kubeconfig, &flags);
    wait_leader(&a, id, T).await;
    let b = start(&env.kubeconfig, &flags);
    wait_for("the standby to be ready", T, || async { Ok::<_, String>(b.ready().await.then_some(())) }).await.unwrap();

    a.signal(flotilla_testenv::cluster::process::Signal::TERM);
    let stopped = Instant::now();
    let status = a.wait_exit(T).await;
    assert_eq!(status.code(), Some(0), "logs:\n{}", a.logs());
    wait_leader(&b, id, T).await;
    let took = stopped.elapsed();
    eprintln!("standby took over {took:?} after SIGTERM released the lease (retry 500ms, lease 20s)");
    // Far below the 20 s lease it would have waited out without the release.
    assert!(took <= Duration::from_millis(2 * 500 + 5000), "took over too late: {took:?}");
    assert!(a.logs().contains("released the leader lease"), "{}", a.logs());
}

/// A leader that cannot renew its lease within the renew deadline (here:
/// its rights on leases revoked; in life, an API server outage) is
/// suspended: the reconcile in flight is cancelled, no other starts, and
/// `/readyz` says why. If nobody took the lease meanwhile, it renews it and
/// resumes in the same process, reconciling what changed; if someone did,
/// it exits 1 (its memory may be stale), as controller-runtime does.
#[tokio::test]
async fn a_leader_that_cannot_renew_is_suspended_resumes_if_nobody_took_the_lease_and_exits_if_someone_did() {
    let env = shared();
    install_widget_crd(&env).await;
    let ns = env.namespace("le-renew").await.unwrap();
    let admin = env.client().await;
    let id = "toy-renew";
    // The toy runs as a ServiceAccount: widgets and events cluster-wide,
    // leases through a RoleBinding the test then deletes.
    let cr: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": format!("toy-{ns}")},
        "rules": [
            {"apiGroups": ["toy.flotilla.dev"], "resources": ["widgets"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["toy.flotilla.dev"], "resources": ["widgets/status"], "verbs": ["patch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}
        ]
    }))
    .unwrap();
    Api::<ClusterRole>::all(admin.clone()).create(&PostParams::default(), &cr).await.unwrap();
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("toy-{ns}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("toy-{ns}")},
        "subjects": [{"kind": "ServiceAccount", "name": "toy", "namespace": ns}]
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone()).create(&PostParams::default(), &crb).await.unwrap();
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "leases"},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}]
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), &ns).create(&PostParams::default(), &role).await.unwrap();
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "leases"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leases"},
        "subjects": [{"kind": "ServiceAccount", "name": "toy", "namespace": ns}]
    }))
    .unwrap();
    let rbs: Api<RoleBinding> = Api::namespaced(admin, &ns);
    rbs.create(&PostParams::default(), &rb).await.unwrap();

    let kubeconfig = env.service_account_kubeconfig(&ns, "toy").await.unwrap();
    let mut toy = start(&kubeconfig, &le_flags(&ns, id, "3s", "2s", "500ms"));
    wait_leader(&toy, id, T).await;
    let widgets: Api<common::widget::Widget> = Api::namespaced(env.client().await, &ns);
    let is_ready = |name: &'static str| {
        let widgets = widgets.clone();
        async move {
            let w = widgets.get(name).await.ok()?;
            let ready = w.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
            (ready.status == "True").then_some(())
        }
    };
    widgets
        .create(&PostParams::default(), &widget("slow", json!({"message": "slow", "sleepSeconds": 6})))
        .await
        .unwrap();
    let active = r#"controller_runtime_active_workers{controller="widget"}"#;
    let leader = format!("leader_election_master_status{{name=\"{id}\"}}");
    wait_for("the slow reconcile to be in flight", T, || async {
        Ok::<_, String>((toy.metric(active).await == Some(1.0)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));

    // Suspended: the slow reconcile is cancelled, /readyz says why.
    rbs.delete("leases", &DeleteParams::default()).await.unwrap();
    let revoked = Instant::now();
    wait_for("the leader to be suspended", T, || async {
        let body = common::get(&format!("{}/readyz", toy.health)).await.map(|r| r.1).unwrap_or_default();
        Ok::<_, String>(body.contains("leading suspended").then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    eprintln!("suspended {:?} after its lease rights were revoked (renew deadline 2s)", revoked.elapsed());
    assert_eq!(toy.metric(&leader).await, Some(0.0), "logs:\n{}", toy.logs());
    wait_for("the reconcile in flight to be cancelled", Duration::from_secs(5), || async {
        Ok::<_, String>((toy.metric(active).await == Some(0.0)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    assert!(toy.logs().contains("reconcile cancelled: leadership suspended"), "{}", toy.logs());
    // Nothing starts while suspended.
    widgets.create(&PostParams::default(), &widget("meanwhile", json!({"message": "meanwhile"}))).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(is_ready("meanwhile").await.is_none(), "reconciled while suspended:\n{}", toy.logs());
    assert!(is_ready("slow").await.is_none(), "the cancelled reconcile wrote:\n{}", toy.logs());
    assert_eq!(toy.exited(), None, "exited while suspended:\n{}", toy.logs());

    // Nobody took the lease: renewed, leading again, both reconciled.
    rbs.create(&PostParams::default(), &rb).await.unwrap();
    let restored = Instant::now();
    wait_leader(&toy, id, T).await;
    eprintln!("leading again {:?} after its lease rights came back", restored.elapsed());
    for name in ["meanwhile", "slow"] {
        wait_for(&format!("{name} to be reconciled after resuming"), T, || async {
            Ok::<_, String>(is_ready(name).await)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    }
    assert_eq!(toy.exited(), None, "{}", toy.logs());
    assert!(toy.logs().contains("nobody took it meanwhile; resuming"), "{}", toy.logs());

    // Suspended again, and this time another candidate takes the lease (as
    // a standby does once it expired): the old leader exits 1.
    rbs.delete("leases", &DeleteParams::default()).await.unwrap();
    wait_for("the leader to be suspended again", T, || async {
        Ok::<_, String>((toy.metric(&leader).await == Some(0.0)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    let other = flotilla_shared::leader::LeaderElector::new(
        env.client().await,
        &ns,
        id,
        "another-replica",
        flotilla_shared::config::LeaseTimings {
            lease_duration: Duration::from_secs(3),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(500),
        },
    );
    let taken = tokio::time::timeout(T, other.acquire()).await.expect("the other candidate acquires the expired lease");
    rbs.create(&PostParams::default(), &rb).await.unwrap();
    let status = toy.wait_exit(T).await;
    assert_eq!(status.code(), Some(1), "logs:\n{}", toy.logs());
    assert!(toy.logs().contains("the leader lease was taken while suspended"), "{}", toy.logs());
    assert!(toy.logs().contains("leader election lost"), "{}", toy.logs());
    taken.abandon();
}

#[tokio::test]
async fn sigterm_lets_the_reconcile_in_flight_finish_releases_the_lease_and_exits_0() {
    let env = shared();
    install_widget_crd(&env).await;
    let ns = env.namespace("sigterm").await.unwrap();
    let id = "toy-sigterm";
    let mut toy = start(&env.kubeconfig, &le_flags(&ns, id, "15s", "10s", "2s"));
    wait_leader(&toy, id, T).await;
    assert!(lease_holder(&ns, id).await.is_some_and(|h| !h.is_empty()));

    let api: Api<common::widget::Widget> = Api::namespaced(env.client().await, &ns);
    api.create(&PostParams::default(), &widget("slow", json!({"message": "slow", "sleepSeconds": 3}))).await.unwrap();
    let active = r#"controller_runtime_active_workers{controller="widget"}"#;
    wait_for("the slow reconcile to be in flight", T, || async {
        Ok::<_, String>((toy.metric(active).await == Some(1.0)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));

    toy.signal(flotilla_testenv::cluster::process::Signal::TERM);
    let status = toy.wait_exit(T).await;
    assert_eq!(status.code(), Some(0), "logs:\n{}", toy.logs());

    // The reconcile completed: it wrote Ready before the process exited.
    let w = api.get("slow").await.unwrap();
    let ready = w.status.and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready"));
    assert_eq!(ready.map(|c| c.status), Some("True".to_string()), "logs:\n{}", toy.logs());
    assert_eq!(lease_holder(&ns, id).await.unwrap_or_default(), "", "the lease is released");
}

#[tokio::test]
async fn a_panicking_reconcile_is_caught_counted_and_retried_while_the_rest_goes_on() {
    let env = shared();
    install_widget_crd(&env).await;
    let ns = env.namespace("panics").await.unwrap();
    let mut toy = Toy::start(&env.kubeconfig, &[]);
    let api: Api<common::widget::Widget> = Api::namespaced(env.client().await, &ns);
    api.create(&PostParams::default(), &widget("boom", json!({"panic": true}))).await.unwrap();
    let panics = r#"controller_runtime_reconcile_panics_total{controller="widget"}"#;
    // Retried with backoff (1 s, then 2 s): a second panic, no crash.
    wait_for("two caught panics", T, || async {
        Ok::<_, String>((toy.metric(panics).await >= Some(2.0)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    api.create(&PostParams::default(), &widget("fine", json!({"message": "still here"}))).await.unwrap();
    wait_for("the other widget to be Ready", T, || async {
        let w = api.get("fine").await.map_err(|e| e.to_string())?;
        let ready = w.status.and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready"));
        Ok::<_, String>(ready.filter(|c| c.status == "True").map(|_| ()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    assert!(toy.child.try_wait().unwrap().is_none(), "the process exited:\n{}", toy.logs());
    assert!(toy.metric(r#"controller_runtime_reconcile_errors_total{controller="widget"}"#).await >= Some(2.0));
    // A panic is a terminal error: a retry only repeats it.
    let terminal = r#"controller_runtime_terminal_reconcile_errors_total{controller="widget"}"#;
    assert!(toy.metric(terminal).await >= Some(2.0), "{:?}", toy.metric(terminal).await);
    assert!(toy.logs().contains("reconcile panicked"), "{}", toy.logs());
    // Backoff, not a hot loop: at most a handful of tries in ~5 s (1+2+4 s).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let tries = toy.metric(panics).await.unwrap_or_default();
    assert!(tries <= 5.0, "{tries} panics: retried too fast");
    api.delete("boom", &DeleteParams::default()).await.unwrap();
}

/// `workqueue_depth`, `_adds_total` and `_queue_duration_seconds` against
/// a real scheduler: one worker, busy with a slow Widget, while others wait.
#[tokio::test]
async fn the_queue_metrics_show_what_waits_for_a_worker() {
    let env = shared();
    install_widget_crd(&env).await;
    let ns = env.namespace("queue").await.unwrap();
    let toy = start(&env.kubeconfig, &[format!("--watch-namespace={ns}"), "--concurrency=1".into()]);
    let api: Api<common::widget::Widget> = Api::namespaced(env.client().await, &ns);
    let (depth, adds) = (
        r#"workqueue_depth{controller="widget",name="widget"}"#,
        r#"workqueue_adds_total{controller="widget",name="widget"}"#,
    );
    let waited = r#"workqueue_queue_duration_seconds_sum{controller="widget",name="widget"}"#;
    let waits = r#"workqueue_queue_duration_seconds_count{controller="widget",name="widget"}"#;
    wait_for("/readyz", T, || async { Ok::<_, String>(toy.ready().await.then_some(())) })
        .await
        .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    assert_eq!(toy.metric(depth).await, Some(0.0), "an empty queue is exported as 0");
    let max = r#"controller_runtime_max_concurrent_reconciles{controller="widget"}"#;
    assert_eq!(toy.metric(max).await, Some(1.0), "--concurrency=1");

    api.create(&PostParams::default(), &widget("slow", json!({"message": "slow", "sleepSeconds": 10}))).await.unwrap();
    let active = r#"controller_runtime_active_workers{controller="widget"}"#;
    wait_for("the slow reconcile to be in flight", T, || async {
        Ok::<_, String>((toy.metric(active).await == Some(1.0)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    let started = Instant::now();
    for name in ["a", "b", "c"] {
        api.create(&PostParams::default(), &widget(name, json!({"message": name}))).await.unwrap();
    }
    // The one worker is busy: the three wait, and the queue says so.
    wait_for("workqueue_depth 3", Duration::from_secs(6), || async {
        Ok::<_, String>((toy.metric(depth).await == Some(3.0)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    // A change to the object being reconciled is depth too (client-go
    // counts a dirty item being processed); it runs again after.
    let patch = json!({"spec": {"message": "changed while slow", "sleepSeconds": 0}});
    api.patch("slow", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
    wait_for("workqueue_depth 4", Duration::from_secs(2), || async {
        Ok::<_, String>((toy.metric(depth).await == Some(4.0)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    assert!(started.elapsed() < Duration::from_secs(9), "the slow reconcile ended before the checks");

    // Every worker free again, too: read together with the queue, not
    // after it (a status write may wake one more reconcile between the
    // two reads: CI caught a worker busy just after the queue was empty).
    wait_for("everything reconciled, the queue empty, every worker free again", T, || async {
        let done = toy.metric(r#"controller_runtime_reconcile_total{controller="widget",result="success"}"#).await;
        let idle = toy.metric(depth).await == Some(0.0) && toy.metric(active).await == Some(0.0);
        Ok::<_, String>((done >= Some(5.0) && idle).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    // slow, a, b, c, slow again; the status writes trigger more.
    assert!(toy.metric(adds).await >= Some(5.0), "adds {:?}", toy.metric(adds).await);
    assert!(toy.metric(waits).await >= Some(5.0), "waits {:?}", toy.metric(waits).await);
    // a, b and c each waited for most of the slow reconcile's 10 s.
    let sum = toy.metric(waited).await.unwrap_or_default();
    assert!(sum > 3.0 * 6.0, "queue time {sum} s: a, b and c waited for the one worker");
}

/// The attack on kube-runtime's debounce: a Widget changed every 150 ms,
/// under a 500 ms debounce, was never reconciled while the changes went on
/// (the debounce restarted with each). With the bound of `debounce.rs` it
/// is reconciled every 2 s or so while the stream goes on.
#[tokio::test]
async fn a_stream_of_changes_does_not_postpone_a_reconcile() {
    let env = shared();
    install_widget_crd(&env).await;
    let ns = env.namespace("stream").await.unwrap();
    let toy = start(&env.kubeconfig, &[format!("--watch-namespace={ns}"), "--debounce=500ms".into()]);
    let api: Api<common::widget::Widget> = Api::namespaced(env.client().await, &ns);
    let ok = r#"controller_runtime_reconcile_total{controller="widget",result="success"}"#;
    api.create(&PostParams::default(), &widget("w", json!({"message": "m0"}))).await.unwrap();
    wait_for("the first reconcile", T, || async { Ok::<_, String>((toy.metric(ok).await >= Some(1.0)).then_some(())) })
        .await
        .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    // Let the first reconcile's own status write settle.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = toy.metric(ok).await.unwrap_or_default();
    let (started, mut i) = (Instant::now(), 0u32);
    let mut during = before;
    while started.elapsed() < Duration::from_secs(7) {
        i += 1;
        let patch = json!({"spec": {"message": format!("m{i}")}});
        api.patch("w", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
        during = toy.metric(ok).await.unwrap_or_default();
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert!(
        during - before >= 2.0,
        "{} reconciles during 7 s of changes every 150 ms ({i} changes): the debounce let a stream postpone them\nlogs:\n{}",
        during - before,
        toy.logs()
    );
}

#[tokio::test]
async fn without_leader_election_there_is_no_leader_status() {
    let env = shared();
    let toy = Toy::start(&env.kubeconfig, &[]);
    wait_for("/metrics", T, || async { Ok::<_, String>(common::get(&toy.metrics_url()).await.ok()) })
        .await
        .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    let (_, text) = common::get(&toy.metrics_url()).await.unwrap();
    assert!(text.contains("controller_runtime_reconcile_total"), "{text}");
    assert!(!text.contains("leader_election_master_status{"), "{text}");
}

#[tokio::test]
async fn a_shutdown_timeout_with_work_in_flight_exits_1() {
    let env = shared();
    install_widget_crd(&env).await;
    let ns = env.namespace("cutoff").await.unwrap();
    // Its own namespace only, so the reconcile in flight is this one.
    let mut toy = Toy::start(&env.kubeconfig, &["--graceful-shutdown-timeout=1s", &format!("--watch-namespace={ns}")]);
    let api: Api<common::widget::Widget> = Api::namespaced(env.client().await, &ns);
    // The toys of this binary that watch every namespace reconcile it too:
    // 8 s of work, well within their 30 s shutdown timeout.
    api.create(&PostParams::default(), &widget("slow", json!({"sleepSeconds": 8}))).await.unwrap();
    let active = r#"controller_runtime_active_workers{controller="widget"}"#;
    wait_for("the slow reconcile to be in flight", T, || async {
        Ok::<_, String>((toy.metric(active).await == Some(1.0)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    let asked = Instant::now();
    toy.signal(flotilla_testenv::cluster::process::Signal::TERM);
    let status = toy.wait_exit(T).await;
    assert_eq!(status.code(), Some(1), "logs:\n{}", toy.logs());
    assert!(asked.elapsed() < Duration::from_secs(6), "exited after {:?}", asked.elapsed());
    assert!(toy.logs().contains("did not finish in time"), "{}", toy.logs());
    api.delete("slow", &DeleteParams::default()).await.unwrap();
}

/// `--metrics-bind-address=:PORT` (Go's form, the chart's default) listens
/// on every address: IPv4 and IPv6 (this machine has both on loopback).
#[tokio::test]
async fn a_port_only_bind_address_serves_ipv4_and_ipv6() {
    let env = shared();
    let (mp, hp) = (
        flotilla_testenv::cluster::process::free_port().unwrap(),
        flotilla_testenv::cluster::process::free_port().unwrap(),
    );
    let log = std::env::temp_dir().join(format!("toy-bind-{}-{mp}.log", std::process::id()));
    let mut child = Command::new(common::toy_binary())
        .args([format!("--metrics-bind-address=:{mp}"), format!("--health-probe-bind-address=:{hp}")])
        .env("KUBECONFIG", &env.kubeconfig)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    for url in [
        format!("http://127.0.0.1:{mp}/metrics"),
        format!("http://[::1]:{mp}/metrics"),
        format!("http://[::1]:{hp}/healthz"),
    ] {
        wait_for(&format!("GET {url}"), T, || async {
            Ok::<_, String>(matches!(common::get(&url).await, Ok((200, _))).then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", logs()));
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&log);
}

/// `--kubeconfig` and `--context` choose the cluster, as with kubectl: a
/// context that does not exist is exit 1 naming it.
#[tokio::test]
async fn kubeconfig_and_context_flags_choose_the_cluster() {
    let env = shared();
    let path = env.kubeconfig.display().to_string();
    let toy = Toy::start(std::path::Path::new("/nonexistent/kubeconfig"), &[&format!("--kubeconfig={path}")]);
    wait_for("/readyz with --kubeconfig", T, || async { Ok::<_, String>(toy.ready().await.then_some(())) })
        .await
        .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", toy.logs()));
    drop(toy);

    let mut toy = Toy::start(&env.kubeconfig, &["--context=no-such-context"]);
    let status = toy.wait_exit(T).await;
    assert_eq!(status.code(), Some(1), "logs:\n{}", toy.logs());
    assert!(toy.logs().contains("no-such-context"), "{}", toy.logs());
}

/// A write to the Lease by someone else while we lead (here: another
/// holder for a moment) is retried until the renew deadline, as client-go
/// does, not an immediate loss of leadership and exit.
#[tokio::test]
async fn a_foreign_write_to_the_lease_is_retried_until_the_renew_deadline() {
    let env = shared();
    install_widget_crd(&env).await;
    let ns = env.namespace("le-foreign").await.unwrap();
    let id = "toy-foreign";
    let mut toy = start(&env.kubeconfig, &le_flags(&ns, id, "15s", "10s", "1s"));
    wait_leader(&toy, id, T).await;
    let leases: Api<Lease> = Api::namespaced(env.client().await, &ns);
    let set_holder = |holder: String| {
        let leases = leases.clone();
        async move {
            let mut lease = leases.get(id).await.unwrap();
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.holder_identity = Some(holder);
            spec.renew_time =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(k8s_openapi::jiff::Timestamp::now()));
            leases.replace(id, &PostParams::default(), &lease).await.unwrap();
        }
    };
    let ours = lease_holder(&ns, id).await.unwrap();
    set_holder("intruder".into()).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(toy.child.try_wait().unwrap().is_none(), "gave up before the renew deadline:\n{}", toy.logs());
    assert!(toy.logs().contains("changed by someone else"), "{}", toy.logs());
    set_holder(ours.clone()).await;
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(toy.child.try_wait().unwrap().is_none(), "exited:\n{}", toy.logs());
    assert_eq!(lease_holder(&ns, id).await.as_deref(), Some(ours.as_str()));
    assert_eq!(toy.metric(&format!("leader_election_master_status{{name=\"{id}\"}}")).await, Some(1.0));
}
