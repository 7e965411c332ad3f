//! pod-debugger on the one-node cluster, with real pods: the kubelet really
//! starts the ephemeral container, `kubectl exec` into it sees the target's
//! processes; it is added once (not again after an operator restart), to
//! matching running pods of the rule's namespace only, to a pod that
//! becomes Running later; a spec change adds a second container and
//! maxPerPod holds; a disallowed image is refused; in a namespace enforcing
//! Pod Security `restricted`, `sysadmin` is refused up front and
//! `restricted` gives a compliant container, after which the pod still
//! takes another debugger.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::cluster::node::images::TOOLBOX_IMAGE;
use flotilla_testenv::node;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(120);

/// Each test runs a cluster-wide operator (so that untouched pods of other
/// namespaces mean something): one at a time, or two operators would act
/// on each other's PodDebuggers.
static ONE_OPERATOR: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn pod(name: &str, app: &str, containers: Value, extra_spec: Value) -> Pod {
    let mut spec = json!({"terminationGracePeriodSeconds": 1, "containers": containers});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": app}}, "spec": spec})).unwrap()
}

fn sleeper(name: &str, marker: &str) -> Value {
    json!({"name": name, "image": TOOLBOX_IMAGE, "command": ["sh", "-c", format!("exec sleep {marker}")]})
}

#[tokio::test]
async fn debug_containers_run_once_in_matching_pods_and_see_the_target() {
    let _one = ONE_OPERATOR.lock().await;
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pd-main").await.unwrap();
    let other_ns = env.namespace("pd-other").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let other_pods: Api<Pod> = Api::namespaced(client.clone(), &other_ns);

    // Two matching pods (the target is the second container of one of
    // them), one not matching, one matching in another namespace, and one
    // that becomes Running only after its init container's 12 s.
    let targets = json!([sleeper("side", "31337"), sleeper("app", "31338")]);
    pods.create(&PostParams::default(), &pod("payment-1", "payment", targets, json!({}))).await.unwrap();
    pods.create(&PostParams::default(), &pod("payment-2", "payment", json!([sleeper("app", "31339")]), json!({})))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("cart", "cart", json!([sleeper("app", "3600")]), json!({})))
        .await
        .unwrap();
    other_pods
        .create(&PostParams::default(), &pod("payment-x", "payment", json!([sleeper("app", "3600")]), json!({})))
        .await
        .unwrap();
    let late_init = json!({"initContainers": [{"name": "wait", "image": TOOLBOX_IMAGE, "command": ["sleep", "12"]}]});
    pods.create(&PostParams::default(), &pod("payment-late", "payment", json!([sleeper("app", "3600")]), late_init))
        .await
        .unwrap();

    let mut operator = start_operator(&env, &[]);
    create_debugger(
        &client,
        &ns,
        "payment",
        json!({"selector": {"matchLabels": {"app": "payment"}}, "image": "busybox:latest", "targetContainer": "app"}),
    )
    .await
    .unwrap();

    let status = wait_status(&client, &ns, "payment", "the debugger to run in all three payment pods", T, |s| {
        let running = s.pods.iter().filter(|p| p.state == "Running").count();
        (s.matched == 3 && s.injected == 3 && running == 3).then(|| s.clone())
    })
    .await;
    let c1 = status.container.clone();
    assert!(c1.starts_with("dbg-payment-"), "{c1}");
    assert_eq!(ready(&status).0, "True", "{status:?}");
    for p in ["payment-1", "payment-2", "payment-late"] {
        wait_debug_running(&pods, p, &c1, T).await;
        assert_eq!(ephemeral_names(&pods, p).await, [c1.as_str()], "{p}");
    }
    let spec = pods.get("payment-1").await.unwrap().spec.unwrap();
    let ec = &spec.ephemeral_containers.unwrap()[0];
    assert_eq!(ec.target_container_name.as_deref(), Some("app"));
    assert_eq!((ec.stdin, ec.tty), (Some(true), Some(true)));
    assert_eq!(ec.image.as_deref(), Some("busybox:latest"));

    // --target works: the debug container sees the target's process (and
    // only the target's: sleep 31337 runs in the other container).
    let ps = env.kubectl(&["exec", "-n", &ns, "payment-1", "-c", &c1, "--", "ps", "-o", "args"]).unwrap();
    assert!(ps.contains("sleep 31338"), "ps in {c1}:\n{ps}");
    assert!(!ps.contains("sleep 31337"), "ps sees a container it does not target:\n{ps}");

    // Untouched: the non-matching pod and the other namespace's pod.
    assert!(ephemeral_names(&pods, "cart").await.is_empty());
    assert!(ephemeral_names(&other_pods, "payment-x").await.is_empty());
    // Events are sent after the status that caused them: wait for one.
    let events = flotilla_testenv::wait_event(&client, &ns, "payment-1", "Normal", "DebugContainerAdded", T).await;
    assert!(
        events.iter().any(|(t, r, n)| t == "Normal"
            && r == "DebugContainerAdded"
            && n.contains(&c1)
            && n.contains("targeting app")),
        "{events:?}"
    );

    // An operator restart adds nothing.
    assert_eq!(metric(&operator, "flotilla_pod_debugger_injections_total{result=\"added\"}").await, 3.0);
    let _ = operator.stop();
    operator = start_operator(&env, &[]);
    flotilla_testenv::wait_for("the restarted operator to be ready", T, || async {
        let r = reqwest::get(operator.health_url() + "/readyz").await;
        Ok::<_, std::convert::Infallible>(r.ok().filter(|r| r.status().is_success()).map(|_| ()))
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(metric(&operator, "flotilla_pod_debugger_injections_total{result=\"added\"}").await, 0.0);
    for p in ["payment-1", "payment-2", "payment-late"] {
        assert_eq!(ephemeral_names(&pods, p).await.len(), 1, "{p} got a second container after a restart");
    }

    // A spec change adds a second container, the first stays.
    patch_debugger(&client, &ns, "payment", json!({"image": TOOLBOX_IMAGE, "command": ["sleep", "86400"]})).await;
    let status = wait_status(&client, &ns, "payment", "the new spec's container in every pod", T, |s| {
        (s.container != c1 && s.injected == 3 && s.pods.iter().all(|p| p.state == "Running")).then(|| s.clone())
    })
    .await;
    let c2 = status.container.clone();
    for p in ["payment-1", "payment-2", "payment-late"] {
        // (A strategic merge puts the added container first, as the API
        // orders it; the order carries no meaning.)
        let mut names = ephemeral_names(&pods, p).await;
        names.sort();
        let mut want = [c1.clone(), c2.clone()];
        want.sort();
        assert_eq!(names, want, "{p}");
    }

    // maxPerPod 2: a third spec is not added.
    patch_debugger(&client, &ns, "payment", json!({"maxPerPod": 2, "command": ["sleep", "86401"]})).await;
    let status = wait_status(&client, &ns, "payment", "MaxPerPodReached on every pod", T, |s| {
        let limited = s.pods.iter().filter(|p| p.state == "Skipped" && p.reason == "MaxPerPodReached").count();
        (s.container != c2 && limited == 3).then(|| s.clone())
    })
    .await;
    assert_eq!(status.injected, 0);
    for p in ["payment-1", "payment-2", "payment-late"] {
        assert_eq!(ephemeral_names(&pods, p).await.len(), 2, "{p}: maxPerPod 2 did not hold");
    }

    // An image outside --allowed-images is refused with a reason and a
    // Warning Event; no pod is touched.
    create_debugger(&client, &ns, "alpine", json!({"selector": {"matchLabels": {"app": "cart"}}, "image": "alpine:3"}))
        .await
        .unwrap();
    let status = wait_status(&client, &ns, "alpine", "ImageNotAllowed", T, |s| {
        (ready(s).1 == "ImageNotAllowed").then(|| s.clone())
    })
    .await;
    assert!(ready(&status).2.contains("--allowed-images"), "{status:?}");
    let warned = flotilla_testenv::wait_for("the ImageNotAllowed Warning", T, || async {
        let ev = events_about(&client, &ns, "alpine").await;
        Ok::<_, std::convert::Infallible>(
            ev.iter().any(|(t, r, _)| t == "Warning" && r == "ImageNotAllowed").then_some(()),
        )
    })
    .await;
    assert!(warned.is_ok(), "{warned:?}");
    assert!(ephemeral_names(&pods, "cart").await.is_empty());

    // Deleting the PodDebugger leaves its containers, and says so.
    let api: Api<PodDebugger> = Api::namespaced(client.clone(), &ns);
    api.delete("payment", &Default::default()).await.unwrap();
    let left = flotilla_testenv::wait_for("the DebugContainersLeft Event", T, || async {
        let ev = events_about(&client, &ns, "payment").await;
        Ok::<_, std::convert::Infallible>(
            ev.into_iter().find(|(t, r, _)| t == "Normal" && r == "DebugContainersLeft").map(|(_, _, n)| n),
        )
    })
    .await
    .unwrap();
    assert!(left.contains("3 pod(s)"), "{left}");
    for p in ["payment-1", "payment-2", "payment-late"] {
        assert_eq!(ephemeral_names(&pods, p).await.len(), 2, "{p}");
    }
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}

#[tokio::test]
async fn a_restricted_namespace_refuses_sysadmin_and_gets_compliant_containers() {
    let _one = ONE_OPERATOR.lock().await;
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pd-restricted").await.unwrap();
    let label = json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}});
    Api::<Namespace>::all(client.clone()).patch(&ns, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // A pod the restricted level admits; its pod-level runAsUser also
    // applies to the debug containers, so busybox runs as non-root.
    let compliant = pod(
        "payment",
        "payment",
        json!([{"name": "app", "image": TOOLBOX_IMAGE, "command": ["sleep", "3600"],
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]),
        json!({"securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}}),
    );
    pods.create(&PostParams::default(), &compliant).await.unwrap();
    let operator = start_operator(&env, &[]);

    create_debugger(
        &client,
        &ns,
        "sys",
        json!({"selector": {"matchLabels": {"app": "payment"}}, "image": "busybox:latest", "profile": "sysadmin"}),
    )
    .await
    .unwrap();
    let status = wait_status(&client, &ns, "sys", "ProfileForbidden", T, |s| {
        (ready(s).1 == "ProfileForbidden").then(|| s.clone())
    })
    .await;
    let msg = ready(&status).2;
    assert!(msg.contains("restricted") && msg.contains("accepts: restricted"), "{msg}");

    create_debugger(
        &client,
        &ns,
        "ok",
        json!({"selector": {"matchLabels": {"app": "payment"}}, "image": "busybox:latest", "profile": "restricted",
               "command": ["sleep", "3600"]}),
    )
    .await
    .unwrap();
    let status = wait_status(&client, &ns, "ok", "the restricted debugger to be added", T, |s| {
        (s.injected == 1).then(|| s.clone())
    })
    .await;
    wait_debug_running(&pods, "payment", &status.container, T).await;
    let p = pods.get("payment").await.unwrap();
    let ec = &p.spec.unwrap().ephemeral_containers.unwrap()[0];
    let sc = ec.security_context.clone().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.capabilities.and_then(|c| c.drop), Some(vec!["ALL".to_string()]));
    assert_eq!(sc.seccomp_profile.map(|s| s.type_), Some("RuntimeDefault".to_string()));

    // The pod still takes a later debugger (nothing non-compliant is stuck
    // in it), and the sysadmin one was never added.
    create_debugger(
        &client,
        &ns,
        "later",
        json!({"selector": {"matchLabels": {"app": "payment"}}, "image": TOOLBOX_IMAGE, "profile": "restricted",
               "command": ["sleep", "3601"]}),
    )
    .await
    .unwrap();
    let later =
        wait_status(&client, &ns, "later", "the later debugger", T, |s| (s.injected == 1).then(|| s.container.clone()))
            .await;
    wait_debug_running(&pods, "payment", &later, T).await;
    let names = ephemeral_names(&pods, "payment").await;
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().all(|n| !n.starts_with("dbg-sys-")), "{names:?}");
    flotilla_testenv::wait_event(&client, &ns, "sys", "Warning", "ProfileForbidden", T).await;
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}

/// Issue 27's attack on a missing admission policy: the PodDebugger policy
/// is what keeps debug containers (exec into the pod) to those who may
/// exec there themselves. Rendered without it, every writer of a
/// PodDebugger got them. With `REQUIRE_ADMISSION_POLICY` (the chart's
/// `--require-admission-policy`) every PodDebugger is refused while the
/// policy or its binding is missing, and served once both exist. As
/// environment variables, so that the same test runs against an older
/// build (`POD_DEBUGGER_TEST_BINARY`), which ignores them and injects.
#[tokio::test]
async fn debug_containers_wait_for_the_admission_policy() {
    const POLICY: &str = "test-pod-debugger-poddebuggers";
    let _one = ONE_OPERATOR.lock().await;
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    flotilla_testenv::admission_policy::remove(&client, POLICY).await;
    let ns = env.namespace("pd-guard").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod("guarded", "guarded", json!([sleeper("app", "3600")]), json!({})))
        .await
        .unwrap();
    flotilla_testenv::wait_object(&pods, "guarded", "the pod to run", T, |p| {
        (p.status.as_ref()?.phase.as_deref()? == "Running").then_some(())
    })
    .await;
    let _operator = OPERATOR.start(
        &env.kubeconfig,
        None,
        &[],
        &[("REQUIRE_ADMISSION_POLICY", POLICY), ("ADMISSION_POLICY_CHECK_INTERVAL", "1s")],
    );
    create_debugger(
        &client,
        &ns,
        "dbg",
        json!({"selector": {"matchLabels": {"app": "guarded"}}, "image": "busybox:latest"}),
    )
    .await
    .unwrap();
    let refused = wait_status(&client, &ns, "dbg", "the refusal", T, |s| {
        let r = ready(s);
        (r.1 == "AdmissionPolicyMissing").then_some(r)
    })
    .await;
    assert_eq!(refused.0, "False");
    assert!(refused.2.contains(POLICY), "{refused:?}");
    assert!(ephemeral_names(&pods, "guarded").await.is_empty(), "a debug container while the policy was missing");

    // The policy and a denying binding come (back): the debugger is served.
    flotilla_testenv::admission_policy::install(&client, POLICY, "flotilla.dev", &["poddebuggers"]).await.unwrap();
    let status =
        wait_status(&client, &ns, "dbg", "the debugger to be added", T, |s| (s.injected == 1).then(|| s.clone())).await;
    assert_eq!(ephemeral_names(&pods, "guarded").await, [status.container.as_str()]);
    flotilla_testenv::admission_policy::remove(&client, POLICY).await;
}

/// The state of `container` in `pod` once it has terminated: (exit code,
/// finishedAt).
async fn wait_debug_terminated(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
    timeout: Duration,
) -> (i32, k8s_openapi::jiff::Timestamp) {
    flotilla_testenv::wait_object(pods, pod, &format!("{container} to end in {pod}"), timeout, |p| {
        let statuses = p.status.as_ref()?.ephemeral_container_statuses.as_ref()?;
        let t = statuses.iter().find(|c| c.name == container)?.state.as_ref()?.terminated.as_ref()?;
        Some((t.exit_code, t.finished_at.as_ref()?.0))
    })
    .await
}

/// Issue 32 (kubernetes#84764): debug access ends. A PodDebugger with ttl
/// 20s adds its container, whose command runs under `timeout -s KILL`: the
/// kubelet reports it terminated (killed) at the expiry. From then on the
/// PodDebugger is Ready=False Expired (one Normal Event), and a pod that
/// starts after the expiry gets nothing. A PodDebugger that no pod event
/// ever wakes (its namespace has no pods) still turns Expired at its
/// expiry, not at the 5-minute resync: the operator set a timer for it.
#[tokio::test]
async fn an_expiring_debugger_ends_its_containers_at_the_expiry_and_adds_none_after() {
    let _one = ONE_OPERATOR.lock().await;
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pd-expiry").await.unwrap();
    let idle_ns = env.namespace("pd-expiry-idle").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod("early", "exp", json!([sleeper("app", "3600")]), json!({})))
        .await
        .unwrap();
    flotilla_testenv::wait_object(&pods, "early", "the pod to run", T, |p| {
        (p.status.as_ref()?.phase.as_deref()? == "Running").then_some(())
    })
    .await;
    let operator = start_operator(&env, &[]);
    flotilla_testenv::wait_for("the operator to be ready", T, || async {
        let r = reqwest::get(operator.health_url() + "/readyz").await;
        Ok::<_, std::convert::Infallible>(r.ok().filter(|r| r.status().is_success()).map(|_| ()))
    })
    .await
    .unwrap();

    let spec = |sel: &str| {
        json!({"selector": {"matchLabels": {"app": sel}}, "image": "busybox:latest", "stdin": false, "tty": false,
               "command": ["sleep", "3600"], "ttl": "20s"})
    };
    create_debugger(&client, &ns, "exp", spec("exp")).await.unwrap();
    create_debugger(&client, &idle_ns, "idle", spec("none")).await.unwrap();
    let api: Api<PodDebugger> = Api::namespaced(client.clone(), &ns);
    let created = api.get("exp").await.unwrap().metadata.creation_timestamp.unwrap().0;
    let expires = created + std::time::Duration::from_secs(20);

    let status = wait_status(&client, &ns, "exp", "the container in the pod", T, |s| {
        (s.injected == 1 && s.pods.iter().any(|p| p.state == "Running")).then(|| s.clone())
    })
    .await;
    assert_eq!(status.expires_at.as_ref().map(|t| t.0), Some(expires), "{status:?}");
    assert_eq!(ready(&status).0, "True", "{status:?}");
    let c = status.container.clone();
    let p = pods.get("early").await.unwrap();
    let command = p.spec.unwrap().ephemeral_containers.unwrap()[0].command.clone().unwrap();
    assert_eq!(command[..3], ["timeout", "-s", "KILL"], "{command:?}");
    let secs: u64 = command[3].parse().unwrap();
    assert!((1..=20).contains(&secs), "{command:?}");
    assert_eq!(command[4..], ["sleep", "3600"], "{command:?}");

    // The debug container's process is killed at the expiry (its deadline
    // counts from its start, a moment after the addition).
    let (code, finished) = wait_debug_terminated(&pods, "early", &c, T).await;
    assert_eq!(code, 137, "killed by timeout -s KILL");
    let late_by = finished.duration_since(expires).as_secs_f64();
    // Late by the container's start (a busy kubelet's seconds), never by a
    // deadline past the expiry (secs <= 20 above, and the run is 3600 s).
    assert!((-1.0..=30.0).contains(&late_by), "ended {late_by}s after the expiry ({finished} vs {expires})");

    // Expired, with one Normal Event.
    // (The pod's update after the kill is reconciled a moment later.)
    let status = wait_status(&client, &ns, "exp", "Expired, the container terminated", T, |s| {
        let ended = s.pods.iter().any(|p| p.name == "early" && p.state == "Terminated");
        (ready(s).1 == "Expired" && ended).then(|| s.clone())
    })
    .await;
    assert_eq!(ready(&status).0, "False");
    assert!(ready(&status).2.contains("debug access ended"), "{status:?}");
    flotilla_testenv::wait_event(&client, &ns, "exp", "Normal", "Expired", T).await;

    // The idle one turned Expired at its expiry, woken by its timer alone.
    let idle_api: Api<PodDebugger> = Api::namespaced(client.clone(), &idle_ns);
    let idle_expires =
        idle_api.get("idle").await.unwrap().metadata.creation_timestamp.unwrap().0 + std::time::Duration::from_secs(20);
    let turned = wait_status(&client, &idle_ns, "idle", "the idle one Expired", T, |s| {
        s.conditions.iter().find(|c| c.type_ == "Ready" && c.reason == "Expired").map(|c| c.last_transition_time.0)
    })
    .await;
    let after = turned.duration_since(idle_expires).as_secs_f64();
    // A timer, not the 5-minute resync: seconds late at most on a busy node.
    assert!((0.0..=30.0).contains(&after), "Expired {after}s after the expiry: not woken by a timer");

    // A pod that starts after the expiry gets nothing.
    pods.create(&PostParams::default(), &pod("late", "exp", json!([sleeper("app", "3600")]), json!({}))).await.unwrap();
    let status = wait_status(&client, &ns, "exp", "the late pod skipped as Expired", T, |s| {
        s.pods.iter().any(|p| p.name == "late" && p.state == "Skipped" && p.reason == "Expired").then(|| s.clone())
    })
    .await;
    assert_eq!(status.injected, 1, "{status:?}");
    flotilla_testenv::wait_object(&pods, "late", "the late pod to run", T, |p| {
        (p.status.as_ref()?.phase.as_deref()? == "Running").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(ephemeral_names(&pods, "late").await.is_empty(), "a debug container after the expiry");
    let expired_events = events_about(&client, &ns, "exp").await.into_iter().filter(|(_, r, _)| r == "Expired").count();
    assert_eq!(expired_events, 1);
    assert_eq!(metric(&operator, "flotilla_pod_debugger_injections_total{result=\"added\"}").await, 1.0);
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}

/// Issue 32 (kubernetes#114184): `volumeMounts: {mirror: true}` mounts the
/// target container's volumes at its paths, read-only. The target writes a
/// file into an emptyDir and mounts a ConfigMap; the debug container reads
/// both at the target's paths, cannot write (the target sees nothing it
/// tried to write), and does not see the pod's Secret volume, which status
/// reports as skipped (SecretVolumeNotAllowed: no admission policy checked
/// that the author may read Secrets).
#[tokio::test]
async fn mirrored_volumes_are_seen_at_the_targets_paths_read_only_without_secrets() {
    let _one = ONE_OPERATOR.lock().await;
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pd-mirror").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "app-config"}, "data": {"greeting": "hello-from-configmap"}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "creds"}, "stringData": {"token": "s3cret"}})).unwrap(),
        )
        .await
        .unwrap();
    let target = json!([{"name": "app", "image": TOOLBOX_IMAGE,
        "command": ["sh", "-c", "echo from-target > /data/hello && exec sleep 3600"],
        "volumeMounts": [{"name": "data", "mountPath": "/data"},
                         {"name": "config", "mountPath": "/etc/app", "readOnly": true},
                         {"name": "creds", "mountPath": "/creds", "readOnly": true}]}]);
    let volumes = json!({"volumes": [{"name": "data", "emptyDir": {}},
                                     {"name": "config", "configMap": {"name": "app-config"}},
                                     {"name": "creds", "secret": {"secretName": "creds"}}]});
    pods.create(&PostParams::default(), &pod("vols", "vols", target, volumes)).await.unwrap();
    flotilla_testenv::wait_object(&pods, "vols", "the pod to run", T, |p| {
        (p.status.as_ref()?.phase.as_deref()? == "Running").then_some(())
    })
    .await;
    let operator = start_operator(&env, &[]);
    let script = "d=$(cat /data/hello); c=$(cat /etc/app/greeting); \
        if touch /data/debug-wrote 2>/dev/null; then w=writable; else w=read-only; fi; \
        if [ -e /creds ]; then s=creds-visible; else s=no-creds; fi; echo \"$d $c $w $s\"";
    create_debugger(
        &client,
        &ns,
        "mirror",
        json!({"selector": {"matchLabels": {"app": "vols"}}, "image": "busybox:latest", "stdin": false, "tty": false,
               "command": ["sh", "-c", script], "volumeMounts": {"mirror": true}}),
    )
    .await
    .unwrap();
    let status =
        wait_status(&client, &ns, "mirror", "the debug container added", T, |s| (s.injected == 1).then(|| s.clone()))
            .await;
    let c = status.container.clone();
    let (code, _) = wait_debug_terminated(&pods, "vols", &c, T).await;
    let log =
        pods.logs("vols", &kube::api::LogParams { container: Some(c.clone()), ..Default::default() }).await.unwrap();
    assert_eq!(log.trim(), "from-target hello-from-configmap read-only no-creds", "exit {code}");
    assert_eq!(code, 0);

    let p = pods.get("vols").await.unwrap();
    let mounts: Vec<(String, String, Option<bool>)> = p.spec.unwrap().ephemeral_containers.unwrap()[0]
        .volume_mounts
        .clone()
        .unwrap()
        .into_iter()
        .map(|m| (m.name, m.mount_path, m.read_only))
        .collect();
    assert_eq!(
        mounts,
        [
            ("data".to_string(), "/data".to_string(), Some(true)),
            ("config".to_string(), "/etc/app".to_string(), Some(true))
        ]
    );
    // The target, which mounts /data read-write, sees nothing written.
    let ls = env.kubectl(&["exec", "-n", &ns, "vols", "-c", "app", "--", "ls", "/data"]).unwrap();
    assert_eq!(ls.trim(), "hello", "{ls}");
    let status = wait_status(&client, &ns, "mirror", "the skipped Secret volume in status", T, |s| {
        s.pods.iter().find(|p| p.name == "vols" && p.state == "Terminated").cloned()
    })
    .await;
    assert!(status.message.contains("creds (SecretVolumeNotAllowed)"), "{status:?}");

    // The attack: a PodDebugger asking for the Secret volume itself
    // (`secrets: true`), where no admission policy checked that its author
    // may read Secrets (this operator requires none). It gets the
    // container, without the Secret.
    create_debugger(
        &client,
        &ns,
        "steal",
        json!({"selector": {"matchLabels": {"app": "vols"}}, "image": "busybox:latest", "stdin": false, "tty": false,
               "command": ["sh", "-c", "cat /creds/token 2>/dev/null || echo no-creds"],
               "volumeMounts": {"names": ["creds"], "secrets": true}}),
    )
    .await
    .unwrap();
    let entry = wait_status(&client, &ns, "steal", "the container, without the Secret", T, |s| {
        s.pods.iter().find(|p| p.name == "vols" && p.state == "Terminated").cloned()
    })
    .await;
    assert!(entry.message.contains("creds (SecretVolumeNotAllowed)"), "{entry:?}");
    let log = pods
        .logs("vols", &kube::api::LogParams { container: Some(entry.container.clone()), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(log.trim(), "no-creds");
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}

/// Secret volumes are mounted (`secrets: true`) only under the admission
/// policy that checks the author may read Secrets: with the operator
/// requiring it (`REQUIRE_ADMISSION_POLICY`) and the policy in place, the
/// debug container reads the pod's Secret at the target's path.
#[tokio::test]
async fn secret_volumes_are_mounted_under_the_admission_policy() {
    const POLICY: &str = "test-pod-debugger-secret-volumes";
    let _one = ONE_OPERATOR.lock().await;
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    flotilla_testenv::admission_policy::remove(&client, POLICY).await;
    flotilla_testenv::admission_policy::install(&client, POLICY, "flotilla.dev", &["poddebuggers"]).await.unwrap();
    let ns = env.namespace("pd-secret-vol").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "creds"}, "stringData": {"token": "s3cret"}})).unwrap(),
        )
        .await
        .unwrap();
    let target = json!([{"name": "app", "image": TOOLBOX_IMAGE, "command": ["sleep", "3600"],
        "volumeMounts": [{"name": "creds", "mountPath": "/creds", "readOnly": true}]}]);
    let volumes = json!({"volumes": [{"name": "creds", "secret": {"secretName": "creds"}}]});
    pods.create(&PostParams::default(), &pod("sec", "sec", target, volumes)).await.unwrap();
    flotilla_testenv::wait_object(&pods, "sec", "the pod to run", T, |p| {
        (p.status.as_ref()?.phase.as_deref()? == "Running").then_some(())
    })
    .await;
    let operator = OPERATOR.start(
        &env.kubeconfig,
        None,
        &[],
        &[("REQUIRE_ADMISSION_POLICY", POLICY), ("ADMISSION_POLICY_CHECK_INTERVAL", "1s")],
    );
    create_debugger(
        &client,
        &ns,
        "read",
        json!({"selector": {"matchLabels": {"app": "sec"}}, "image": "busybox:latest", "stdin": false, "tty": false,
               "command": ["sh", "-c", "cat /creds/token 2>/dev/null || echo no-creds"],
               "volumeMounts": {"names": ["creds"], "secrets": true}}),
    )
    .await
    .unwrap();
    let entry = wait_status(&client, &ns, "read", "the container, with the Secret", T, |s| {
        s.pods.iter().find(|p| p.name == "sec" && p.state == "Terminated").cloned()
    })
    .await;
    assert!(!entry.message.contains("SecretVolumeNotAllowed"), "{entry:?}");
    let log = pods
        .logs("sec", &kube::api::LogParams { container: Some(entry.container.clone()), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(log.trim(), "s3cret");
    flotilla_testenv::admission_policy::remove(&client, POLICY).await;
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}

/// Issue 32 (`kubectl debug --copy-to`, declared): a PodDebugger in mode
/// copy is refused (CopiesDisabled) by an operator without --debug-copies.
/// With it, the crash-looping pod it matches gets one copy: without the
/// pod's labels or owners (no Service or ReplicaSet adopts it), owned by
/// the PodDebugger, its target running the default `sleep infinity` in
/// the same image, the debug container beside it seeing that process; the
/// pod itself untouched. A healthy matched pod gets none
/// (NotCrashLooping), a second crash-looping one none past maxCopies 1
/// (MaxCopiesReached). At the expiry the copy is deleted and the
/// PodDebugger is Expired.
#[tokio::test]
async fn a_crash_looping_pod_gets_one_debug_copy_deleted_at_the_expiry() {
    let _one = ONE_OPERATOR.lock().await;
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pd-copy").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let crasher = |marker: &str| json!([{"name": "app", "image": TOOLBOX_IMAGE, "command": ["sh", "-c", format!("echo {marker}; exit 1")]}]);
    pods.create(&PostParams::default(), &pod("crash-a", "crash", crasher("a"), json!({}))).await.unwrap();
    pods.create(&PostParams::default(), &pod("crash-b", "crash", crasher("b"), json!({}))).await.unwrap();
    pods.create(&PostParams::default(), &pod("fine", "crash", json!([sleeper("app", "3600")]), json!({})))
        .await
        .unwrap();
    for p in ["crash-a", "crash-b"] {
        // The kubelet shows CrashLoopBackOff only for a moment before each
        // restart (Terminated for the rest of the back-off): restarts tell.
        flotilla_testenv::wait_object(&pods, p, "the pod to crash-loop", T, |p| {
            let s = p.status.as_ref()?.container_statuses.as_ref()?;
            (s.first()?.restart_count >= 2).then_some(())
        })
        .await;
    }

    let spec = json!({"selector": {"matchLabels": {"app": "crash"}}, "image": "busybox:latest", "mode": "copy",
                      "command": ["sh"], "copy": {"maxCopies": 1}});
    let operator = start_operator(&env, &[]);
    create_debugger(&client, &ns, "copier", spec).await.unwrap();
    let status = wait_status(&client, &ns, "copier", "CopiesDisabled", T, |s| {
        (ready(s).1 == "CopiesDisabled").then(|| s.clone())
    })
    .await;
    assert!(ready(&status).2.contains("--debug-copies"), "{status:?}");
    let _ = operator.stop();

    let operator = start_operator(&env, &["--debug-copies"]);
    let debuggers: Api<PodDebugger> = Api::namespaced(client.clone(), &ns);
    let status = flotilla_testenv::wait_for("one copy, running", T, || async {
        let s = debuggers.get("copier").await?.status.unwrap_or_default();
        let running = s.pods.iter().any(|p| !p.copy.is_empty() && p.state == "Running");
        let capped = s.pods.iter().any(|p| p.reason == "MaxCopiesReached");
        Ok::<_, kube::Error>((s.copies == 1 && running && capped && s.matched == 3).then_some(s))
    })
    .await;
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            let now = debuggers.get("copier").await.ok().and_then(|d| d.status);
            panic!("{e}\nstatus: {now:?}\noperator:\n{}", operator.logs())
        }
    };
    assert_eq!(ready(&status).0, "True", "{status:?}");
    let reasons: Vec<(&str, &str)> = status.pods.iter().map(|p| (p.name.as_str(), p.reason.as_str())).collect();
    assert!(reasons.contains(&("fine", "NotCrashLooping")), "{reasons:?}");
    assert!(reasons.iter().any(|(_, r)| *r == "MaxCopiesReached"), "{reasons:?}");
    let entry = status.pods.iter().find(|p| !p.copy.is_empty()).unwrap();
    let (source, copy_name, container) = (entry.name.clone(), entry.copy.clone(), status.container.clone());
    assert!(copy_name.starts_with(&format!("{source}-dbg-")), "{copy_name}");

    let copy = pods.get(&copy_name).await.unwrap();
    let labels = copy.metadata.labels.clone().unwrap_or_default();
    assert!(!labels.contains_key("app"), "a copy keeps no label a Service could select: {labels:?}");
    let owners = copy.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.iter().map(|o| o.kind.as_str()).collect::<Vec<_>>(), ["PodDebugger"]);
    let spec = copy.spec.clone().unwrap();
    assert_eq!(spec.containers[0].command, Some(vec!["sleep".to_string(), "infinity".to_string()]));
    assert_eq!(spec.containers[0].image.as_deref(), Some(TOOLBOX_IMAGE));
    let ps = env.kubectl(&["exec", "-n", &ns, &copy_name, "-c", &container, "--", "ps", "-o", "args"]).unwrap();
    assert!(ps.contains("sleep infinity"), "the debug container sees the held target:\n{ps}");
    // The source is untouched: still crash-looping, nothing added.
    assert!(ephemeral_names(&pods, &source).await.is_empty());
    flotilla_testenv::wait_event(&client, &ns, "copier", "Normal", "DebugCopyCreated", T).await;

    // Expiry: the copy goes, the PodDebugger says why.
    let at = k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(3);
    patch_debugger(&client, &ns, "copier", json!({"expiresAt": at.to_string()})).await;
    let status = wait_status(&client, &ns, "copier", "Expired, no copy left", T, |s| {
        (ready(s).1 == "Expired" && s.copies == 0).then(|| s.clone())
    })
    .await;
    assert_eq!(ready(&status).0, "False");
    flotilla_testenv::wait_for("the copy to be deleted", T, || async {
        Ok::<_, kube::Error>(pods.get_opt(&copy_name).await?.is_none().then_some(()))
    })
    .await
    .unwrap();
    assert!(pods.get_opt(&source).await.unwrap().is_some(), "the source pod is never deleted");
    assert_eq!(metric(&operator, "flotilla_pod_debugger_copies_total{result=\"created\"}").await, 1.0);
    assert_eq!(metric(&operator, "flotilla_pod_debugger_copies_total{result=\"deleted\"}").await, 1.0);
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}

/// Issue 32, the attack: a pod named as a copy would be (the name is
/// computed from UIDs anyone in the namespace can read) and labelled as
/// one is never taken for the copy — not shown in status, not counted,
/// not deleted at the expiry: the operator deletes only what the API
/// shows it owns.
#[tokio::test]
async fn a_pod_posing_as_a_debug_copy_is_never_taken_for_one_nor_deleted() {
    let _one = ONE_OPERATOR.lock().await;
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pd-decoy").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let crasher = json!([{"name": "app", "image": TOOLBOX_IMAGE, "command": ["sh", "-c", "exit 1"]}]);
    pods.create(&PostParams::default(), &pod("crash", "crash", crasher, json!({}))).await.unwrap();
    let spec = json!({"selector": {"matchLabels": {"app": "crash"}}, "image": "busybox:latest", "mode": "copy",
                      "command": ["sh"]});
    create_debugger(&client, &ns, "copier", spec).await.unwrap();
    let debuggers: Api<PodDebugger> = Api::namespaced(client.clone(), &ns);
    let pd_uid = debuggers.get("copier").await.unwrap().metadata.uid.unwrap();
    let src_uid = pods.get("crash").await.unwrap().metadata.uid.unwrap();
    let name = pod_debugger::copy::copy_name("crash", &pd_uid, &src_uid);
    let mut decoy = pod(&name, "decoy", json!([sleeper("app", "3600")]), json!({}));
    decoy.metadata.labels = Some(
        [(pod_debugger::copy::COPY_OF, src_uid.as_str()), (pod_debugger::copy::COPIED_BY, pd_uid.as_str())]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    pods.create(&PostParams::default(), &decoy).await.unwrap();
    let decoy_uid = pods.get(&name).await.unwrap().metadata.uid;

    let operator = start_operator(&env, &["--debug-copies"]);
    let status = wait_status(&client, &ns, "copier", "the copy refused: its name is taken", T, |s| {
        s.pods.iter().any(|p| p.name == "crash" && p.state == "Failed").then(|| s.clone())
    })
    .await;
    let entry = status.pods.iter().find(|p| p.name == "crash").unwrap();
    assert!(entry.message.contains("is not this PodDebugger's copy"), "{entry:?}");
    assert!(entry.copy.is_empty(), "the decoy is not shown as the copy: {entry:?}");
    assert_eq!(status.copies, 0, "the decoy is not counted: {status:?}");
    assert_eq!(ready(&status).1, "CopyFailed", "{status:?}");

    // At the expiry the decoy stays: it is not the operator's.
    let at = k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(2);
    patch_debugger(&client, &ns, "copier", json!({"expiresAt": at.to_string()})).await;
    wait_status(&client, &ns, "copier", "Expired", T, |s| (ready(s).1 == "Expired").then_some(())).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = pods.get_opt(&name).await.unwrap();
    assert!(still.as_ref().is_some_and(|p| p.metadata.deletion_timestamp.is_none() && p.metadata.uid == decoy_uid));
    assert_eq!(metric(&operator, "flotilla_pod_debugger_copies_total{result=\"deleted\"}").await, 0.0);
    let logs = operator.logs();
    let _ = operator.stop();
    assert!(!logs.contains("panicked"), "{logs}");
}
