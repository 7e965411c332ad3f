//! Bad input gets a clear answer, on the test control plane: the seed's
//! rule without `checkRunningPods` is refused at admission with "an alert
//! must be set"; an `allNamespaces` rule outside the trusted namespaces, a
//! sink Secret that does not exist and a `logs.redact` pattern that is not
//! RE2 become conditions and Warning Events.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::shared;
use kube::Api;
use serde_json::json;

const T: Duration = Duration::from_secs(40);

#[tokio::test]
async fn the_seeds_rule_without_an_alert_and_bad_values_are_refused_at_admission() {
    let env = shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-admission").await.unwrap();
    // The seed's Orchestr without spec.alerts.checkRunningPods.
    for spec in [json!({}), json!({"alerts": {}}), json!({"alerts": {"pendingAfter": "5m"}})] {
        let e = create_podalert(&client, &ns, "seed", spec.clone()).await.unwrap_err();
        assert!(e.to_string().contains("an alert must be set"), "{spec}: {e}");
    }
    let bad = [
        (json!({"alerts": {"checkRunningPods": true, "pendingAfter": "5 minutes"}}), "pendingAfter"),
        (json!({"alerts": {"checkRunningPods": true, "restartWindow": "48h"}}), "restartWindow"),
        (json!({"alerts": {"checkRunningPods": true, "restartThreshold": 0}}), "restartThreshold"),
        (json!({"alerts": {"checkRunningPods": true, "reasons": ["Sad"]}}), "reasons"),
        (json!({"alerts": {"checkRunningPods": true}, "sinks": {"alertmanager": {"url": "ftp://x"}}}), "url"),
        (json!({"alerts": {"checkRunningPods": true}, "logs": {"tailLines": 100000}}), "tailLines"),
        // logs.redact has ignore.logPatterns' bounds: 32 patterns of 512 characters.
        (json!({"alerts": {"checkRunningPods": true}, "logs": {"redact": vec!["x"; 33]}}), "redact"),
        (json!({"alerts": {"checkRunningPods": true}, "logs": {"redact": ["x".repeat(513)]}}), "redact"),
        (json!({"alerts": {"checkRunningPods": true}, "logs": {"redactDefaults": "no"}}), "redactDefaults"),
        // runbookURL: an http(s) link, nothing Slack would read as markup.
        (json!({"alerts": {"checkRunningPods": true}, "runbookURL": "javascript:alert(1)"}), "runbookURL"),
        (json!({"alerts": {"checkRunningPods": true}, "runbookURL": "https://r.example/a|<!channel>"}), "runbookURL"),
        (json!({"alerts": {"checkRunningPods": true}, "runbookURL": "https://r.example/a b"}), "runbookURL"),
        // Silences: a time, at most 20, a bounded comment.
        (json!({"alerts": {"checkRunningPods": true}, "silences": [{"until": "tomorrow"}]}), "until"),
        (json!({"alerts": {"checkRunningPods": true}, "silences": [{"comment": "no end"}]}), "until"),
        (
            json!({"alerts": {"checkRunningPods": true}, "silences": vec![json!({"until": "2026-11-28T06:00:00Z"}); 21]}),
            "silences",
        ),
        (
            json!({"alerts": {"checkRunningPods": true}, "silences": [{"until": "2026-11-28T06:00:00Z", "comment": "c".repeat(257)}]}),
            "comment",
        ),
    ];
    for (spec, field) in bad {
        let e = create_podalert(&client, &ns, "bad", spec.clone()).await.unwrap_err();
        assert!(e.to_string().contains(field), "{spec}: {e}");
    }
    // Slack: a webhook, or a bot token with its channel — exactly one.
    let hook = json!({"name": "hooks", "key": "slack"});
    let bot = json!({"name": "slack-bot", "key": "token"});
    let slack = |sink: serde_json::Value| json!({"alerts": {"checkRunningPods": true}, "sinks": {"slack": sink}});
    for (sink, says) in [
        (json!({"webhookSecretRef": hook, "botTokenSecretRef": bot, "channel": "C0123456789"}), "not both"),
        (json!({}), "give webhookSecretRef, or botTokenSecretRef with channel"),
        (json!({"botTokenSecretRef": bot}), "botTokenSecretRef and channel go together"),
        (json!({"webhookSecretRef": hook, "channel": "alerts"}), "botTokenSecretRef and channel go together"),
        (json!({"botTokenSecretRef": bot, "channel": "Alerts Prod"}), "channel"),
        (json!({"botTokenSecretRef": bot, "channel": "x".repeat(82)}), "channel"),
    ] {
        let e = create_podalert(&client, &ns, "bad-slack", slack(sink.clone())).await.unwrap_err();
        assert!(e.to_string().contains(says), "{sink}: {e}");
    }
    for (name, sink) in [
        ("slack-hook", json!({"webhookSecretRef": hook})),
        ("slack-bot-id", json!({"botTokenSecretRef": bot, "channel": "C0123456789"})),
        ("slack-bot-name", json!({"botTokenSecretRef": bot, "channel": "#alerts-prod_2"})),
    ] {
        create_podalert(&client, &ns, name, slack(sink)).await.unwrap();
    }
    create_podalert(&client, &ns, "ok", json!({"alerts": {"checkRunningPods": true}})).await.unwrap();
    let runbook =
        json!({"alerts": {"checkRunningPods": true}, "runbookURL": "https://r.example/{reason}?n={namespace}"});
    create_podalert(&client, &ns, "with-runbook", runbook).await.unwrap();
    let silenced = json!({"alerts": {"checkRunningPods": true}, "silences": [
        {"until": "2026-11-28T06:00:00Z", "reasons": ["CrashLoopBackOff"], "selector": {"matchLabels": {"app": "db"}}, "comment": "CHG-1"}
    ]});
    create_podalert(&client, &ns, "with-silence", silenced).await.unwrap();
}

#[tokio::test]
async fn cluster_scope_outside_trusted_namespaces_and_missing_secrets_are_conditions() {
    let env = shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-refuse").await.unwrap();
    let trusted = env.namespace("pa-trusted").await.unwrap();
    let _operator = start_operator(&env, &ns, &[&format!("--cluster-scope-namespaces={trusted}")]);
    create_podalert(&client, &ns, "everything", json!({"alerts": {"checkRunningPods": true}, "allNamespaces": true}))
        .await
        .unwrap();
    let ready = wait_status(&client, &ns, "everything", "the refusal", T, |s| {
        condition(s, "Ready").filter(|c| c.1 == "ClusterScopeRefused")
    })
    .await;
    assert_eq!(ready.0, "False");
    assert!(ready.2.contains(&trusted), "{ready:?}");
    // Only an edit (or the operator's flags) helps: Stalled, kstatus's way.
    let stalled = wait_status(&client, &ns, "everything", "Stalled", T, |s| condition(s, "Stalled")).await;
    assert_eq!((stalled.0.as_str(), stalled.1.as_str(), &stalled.2), ("True", "ClusterScopeRefused", &ready.2));

    create_podalert(
        &client,
        &ns,
        "hooked",
        json!({"alerts": {"checkRunningPods": true}, "sinks": {"slack": {"webhookSecretRef": {"name": "nope", "key": "url"}}}}),
    )
    .await
    .unwrap();
    let sinks = wait_status(&client, &ns, "hooked", "the sink condition", T, |s| {
        condition(s, "SinksHealthy").filter(|c| c.1 == "SinkMisconfigured")
    })
    .await;
    assert!(sinks.2.contains("nope") && sinks.2.contains("not found"), "{sinks:?}");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    flotilla_testenv::wait_for("both Warning Events", T, || {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await?;
            let r: Vec<String> = list
                .items
                .into_iter()
                .filter(|e| e.type_.as_deref() == Some("Warning"))
                .filter_map(|e| e.reason)
                .collect();
            let both = r.iter().any(|x| x == "ClusterScopeRefused") && r.iter().any(|x| x == "SinkMisconfigured");
            Ok::<_, kube::Error>(both.then_some(()))
        }
    })
    .await
    .unwrap();

    // Fixed by an edit: Ready, and no longer Stalled.
    let api: Api<pod_alert::crd::PodAlert> = Api::namespaced(client.clone(), &ns);
    let fix = json!({"spec": {"allNamespaces": false}});
    api.patch("everything", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&fix)).await.unwrap();
    wait_status(&client, &ns, "everything", "Ready=True without Stalled", T, |s| {
        let ready = condition(s, "Ready").filter(|c| c.0 == "True")?;
        condition(s, "Stalled").is_none().then_some(ready)
    })
    .await;
}

/// Issue 27's attack on a missing admission policy: the PodAlert policy is
/// what lets only those who may read every namespace's pod logs set
/// `allNamespaces` (the trusted namespaces' other writers included).
/// Rendered without it (a GitOps render without the API, a deleted
/// policy), every writer of a PodAlert there read the whole cluster's
/// logs. With `REQUIRE_ADMISSION_POLICY` (the chart's
/// `--require-admission-policy`) the operator refuses `allNamespaces`
/// while the policy or its binding is missing — other PodAlerts go on —
/// and honours it once both exist. As environment variables, so that the
/// same test runs against an older build (`POD_ALERT_TEST_BINARY`), which
/// ignores them and evaluates the whole cluster at once.
#[tokio::test]
async fn all_namespaces_is_refused_while_the_admission_policy_is_missing() {
    const POLICY: &str = "test-pod-alert-podalerts";
    let env = shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    flotilla_testenv::admission_policy::remove(&client, POLICY).await;
    let ns = env.namespace("pa-guard").await.unwrap();
    let mut vars = LOOPBACK_SINKS.to_vec();
    vars.extend([
        ("REQUIRE_ADMISSION_POLICY", POLICY),
        ("ADMISSION_POLICY_CHECK_INTERVAL", "1s"),
        ("CLUSTER_SCOPE_NAMESPACES", ns.as_str()),
    ]);
    let _operator = start_operator_as(&env.kubeconfig, &ns, &[], &vars);
    create_podalert(&client, &ns, "everything", json!({"alerts": {"checkRunningPods": true}, "allNamespaces": true}))
        .await
        .unwrap();
    create_podalert(&client, &ns, "mine", json!({"alerts": {"checkRunningPods": true}})).await.unwrap();

    let refused = wait_status(&client, &ns, "everything", "the refusal", T, |s| {
        condition(s, "Ready").filter(|c| c.1 == "AdmissionPolicyMissing")
    })
    .await;
    assert_eq!(refused.0, "False");
    assert!(refused.2.contains("allNamespaces") && refused.2.contains(POLICY), "{refused:?}");
    let mine = wait_status(&client, &ns, "mine", "the other PodAlert evaluated", T, |s| {
        condition(s, "Ready").filter(|c| c.0 == "True")
    })
    .await;
    assert_ne!(mine.1, "AdmissionPolicyMissing");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    flotilla_testenv::wait_for("the Warning Event", T, || {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await?;
            let said = list.items.iter().any(|e| {
                e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some("AdmissionPolicyMissing")
            });
            Ok::<_, kube::Error>(said.then_some(()))
        }
    })
    .await
    .unwrap();

    // The policy and a denying binding come (back): allNamespaces is honoured.
    flotilla_testenv::admission_policy::install(&client, POLICY, "flotilla.dev", &["podalerts"]).await.unwrap();
    wait_status(&client, &ns, "everything", "allNamespaces honoured", T, |s| {
        condition(s, "Ready").filter(|c| c.0 == "True")
    })
    .await;
    flotilla_testenv::admission_policy::remove(&client, POLICY).await;
}

/// A `logs.redact` pattern the schema cannot judge (it is not RE2) is
/// reported as a bad `ignore.logPatterns` one is: Ready=False with
/// InvalidSpec naming the field, and a Warning Event — no panic, and the
/// PodAlert is not evaluated half-redacting.
#[tokio::test]
async fn an_invalid_redact_pattern_is_a_condition_and_a_warning() {
    let env = shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-redact-bad").await.unwrap();
    let operator = start_operator(&env, &ns, &[]);
    create_podalert(
        &client,
        &ns,
        "bad-redact",
        json!({"alerts": {"checkRunningPods": true}, "logs": {"redact": ["ok", "(unclosed"]}}),
    )
    .await
    .unwrap();
    let ready = wait_status(&client, &ns, "bad-redact", "the InvalidSpec condition", T, |s| {
        condition(s, "Ready").filter(|c| c.1 == "InvalidSpec")
    })
    .await;
    assert_eq!(ready.0, "False");
    assert!(ready.2.contains("logs.redact") && ready.2.contains("(unclosed"), "{ready:?}");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    flotilla_testenv::wait_for("the InvalidSpec Warning", T, || {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await?;
            let said = list.items.iter().any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("InvalidSpec")
                    && e.note.as_deref().is_some_and(|n| n.contains("logs.redact"))
            });
            Ok::<_, kube::Error>(said.then_some(()))
        }
    })
    .await
    .unwrap();
    let logs = operator.logs();
    assert!(!logs.contains("panicked"), "{logs}");
}
