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
