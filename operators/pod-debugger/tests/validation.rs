//! PodDebugger admission and refusals on the test control plane: the
//! schema and CEL reject at admission what the API would reject later (and
//! an expiry without a command, which could not be bounded); a
//! PodDebugger in a protected namespace is refused with a condition and a
//! Warning Event; an invalid --allowed-images stops the process before it
//! touches the cluster.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::shared;
use serde_json::json;

fn rejected(r: Result<(), kube::Error>, what: &str) -> String {
    match r {
        Err(kube::Error::Api(s)) if s.code == 422 => s.message,
        other => panic!("{what} was not rejected at admission: {other:?}"),
    }
}

#[tokio::test]
async fn admission_rejects_what_the_api_would_reject_later() {
    let env = shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pd-admission").await.unwrap();
    let sel = json!({"matchLabels": {"app": "payment"}});
    let cases = [
        ("empty image", json!({"selector": sel, "image": ""}), "spec.image"),
        ("image with a space", json!({"selector": sel, "image": "busy box"}), "spec.image"),
        ("unknown profile", json!({"selector": sel, "image": "busybox", "profile": "root"}), "spec.profile"),
        ("maxPerPod 0", json!({"selector": sel, "image": "busybox", "maxPerPod": 0}), "spec.maxPerPod"),
        ("maxPerPod 11", json!({"selector": sel, "image": "busybox", "maxPerPod": 11}), "spec.maxPerPod"),
        ("empty selector", json!({"selector": {}, "image": "busybox"}), "selector must not be empty"),
        ("no selector", json!({"image": "busybox"}), "spec.selector"),
        (
            "bad target",
            json!({"selector": sel, "image": "busybox", "targetContainer": "App_1"}),
            "spec.targetContainer",
        ),
        // Issue 32: debug copies.
        ("unknown mode", json!({"selector": sel, "image": "busybox", "mode": "clone"}), "spec.mode"),
        (
            "copy settings in mode inject",
            json!({"selector": sel, "image": "busybox", "copy": {"maxCopies": 2}}),
            "spec.copy applies only with mode: copy",
        ),
        (
            "maxCopies 11",
            json!({"selector": sel, "image": "busybox", "mode": "copy", "copy": {"maxCopies": 11}}),
            "spec.copy.maxCopies",
        ),
        (
            "an empty copy command",
            json!({"selector": sel, "image": "busybox", "mode": "copy", "copy": {"command": []}}),
            "spec.copy.command",
        ),
    ];
    for (i, (what, spec, expect)) in cases.into_iter().enumerate() {
        let msg = rejected(create_debugger(&client, &ns, &format!("bad-{i}"), spec).await, what);
        assert!(msg.contains(expect), "{what}: {msg}");
    }
    // Issue 32: the expiry and the volume mounts.
    let cmd = json!(["sleep", "3600"]);
    let expiring = [
        (
            "expiresAt and ttl",
            json!({"selector": sel, "image": "busybox", "command": cmd, "ttl": "1h", "expiresAt": "2030-01-01T00:00:00Z"}),
            "give expiresAt or ttl, not both",
        ),
        ("ttl without a command", json!({"selector": sel, "image": "busybox", "ttl": "1h"}), "needs spec.command"),
        (
            "expiresAt without a command",
            json!({"selector": sel, "image": "busybox", "expiresAt": "2030-01-01T00:00:00Z"}),
            "needs spec.command",
        ),
        (
            "ttl with an empty command",
            json!({"selector": sel, "image": "busybox", "ttl": "1h", "command": []}),
            "needs spec.command",
        ),
        (
            "ttl not a duration",
            json!({"selector": sel, "image": "busybox", "command": cmd, "ttl": "1 hour"}),
            "spec.ttl",
        ),
        (
            "expiresAt not a time",
            json!({"selector": sel, "image": "busybox", "command": cmd, "expiresAt": "tomorrow"}),
            "spec.expiresAt",
        ),
        (
            "volumeMounts empty",
            json!({"selector": sel, "image": "busybox", "volumeMounts": {}}),
            "mirror: true or a list of names",
        ),
        (
            "mirror off, no names",
            json!({"selector": sel, "image": "busybox", "volumeMounts": {"mirror": false, "readWrite": true}}),
            "mirror: true or a list of names",
        ),
        (
            "mirror and names",
            json!({"selector": sel, "image": "busybox", "volumeMounts": {"mirror": true, "names": ["data"]}}),
            "mirror: true or a list of names",
        ),
        (
            "a bad volume name",
            json!({"selector": sel, "image": "busybox", "volumeMounts": {"names": ["Data_1"]}}),
            "spec.volumeMounts.names",
        ),
    ];
    for (i, (what, spec, expect)) in expiring.into_iter().enumerate() {
        let msg = rejected(create_debugger(&client, &ns, &format!("bad-expiry-{i}"), spec).await, what);
        assert!(msg.contains(expect), "{what}: {msg}");
    }
    for (name, spec) in [
        ("ttl", json!({"selector": sel, "image": "busybox", "command": cmd, "ttl": "1h30m"})),
        ("at", json!({"selector": sel, "image": "busybox", "command": cmd, "expiresAt": "2030-01-01T00:00:00Z"})),
        ("mirror", json!({"selector": sel, "image": "busybox", "volumeMounts": {"mirror": true, "readWrite": true}})),
        ("names", json!({"selector": sel, "image": "busybox", "volumeMounts": {"names": ["data", "config"]}})),
    ] {
        create_debugger(&client, &ns, name, spec).await.unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // The seed's rule, written as ours, is accepted with the defaults.
    create_debugger(&client, &ns, "seed", json!({"selector": sel, "image": "busybox:1.37"})).await.unwrap();
    let api: kube::Api<PodDebugger> = kube::Api::namespaced(client.clone(), &ns);
    let seed = api.get("seed").await.unwrap();
    assert_eq!(seed.spec.profile, pod_debugger::crd::Profile::General);
    assert!(seed.spec.stdin && seed.spec.tty);
    assert_eq!(seed.spec.max_per_pod, 3);
}

#[tokio::test]
async fn a_protected_namespace_is_refused_with_a_condition_and_an_event() {
    let env = shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pd-protected").await.unwrap();
    // The namespace is protected by flag here: the real kube-system is
    // shared by every test and always protected anyway.
    let operator = start_operator(&env, &["--watch-namespace", &ns, "--protected-namespaces", &format!("other,{ns}")]);
    create_debugger(&client, &ns, "p", json!({"selector": {"matchLabels": {"app": "x"}}, "image": "busybox"}))
        .await
        .unwrap();
    let status = wait_status(&client, &ns, "p", "ProtectedNamespace", Duration::from_secs(60), |s| {
        (ready(s).1 == "ProtectedNamespace").then(|| s.clone())
    })
    .await;
    assert_eq!(ready(&status).0, "False");
    assert!(ready(&status).2.contains(&ns));
    // The operator's flags say never: Stalled (kstatus), with Ready's reason.
    let stalled = status.conditions.iter().find(|c| c.type_ == "Stalled").expect("Stalled with the refusal");
    assert_eq!((stalled.status.as_str(), stalled.reason.as_str()), ("True", "ProtectedNamespace"));
    assert_eq!(stalled.message, ready(&status).2);
    let warned = flotilla_testenv::wait_for("the Warning Event", Duration::from_secs(30), || async {
        let ev = events_about(&client, &ns, "p").await;
        Ok::<_, std::convert::Infallible>(
            ev.iter().any(|(t, r, _)| t == "Warning" && r == "ProtectedNamespace").then_some(()),
        )
    })
    .await;
    assert!(warned.is_ok(), "{warned:?}");
    let _ = operator.stop();
}

#[test]
fn bad_flags_exit_2_before_touching_the_cluster() {
    for (args, flag) in [
        (vec!["--allowed-images", ","], "allowed-images"),
        (vec!["--allowed-images", "a b"], "allowed-images"),
        (vec!["--inject-concurrency", "0"], "inject-concurrency"),
        (vec!["--protected-namespaces", "Not_A_Name"], "protected-namespaces"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pod-debugger"))
            .args(&args)
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
}
