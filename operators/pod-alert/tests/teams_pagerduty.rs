//! Issue 32's two sinks on the one-node cluster, against a local receiver
//! that checks each document's shape: a crash loop becomes a Teams Adaptive
//! Card and a PagerDuty trigger (the routing key read from the Secret into
//! the document at send time), and the pod's deletion a PagerDuty resolve
//! under the same dedup key. And the attacks: a Teams URL outside
//! `--teams-hosts` and a Secret that holds no integration key send nothing
//! and say why (`SinksHealthy=False SinkMisconfigured`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::cluster::node::images::TOOLBOX_IMAGE;
use flotilla_testenv::node;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(180);
const KEY: &str = "R0123456789abcdefABCDEF012345678";

/// Accepted documents at `path`.
fn at(receiver: &Receiver, path: &str) -> Vec<Value> {
    receiver.received().into_iter().filter(|r| r.path == path && r.answered == 200).map(|r| r.body).collect()
}

/// Every text run of a Teams message, checking the message's shape on the
/// way: a message with one Adaptive Card 1.4 whose body is RichTextBlocks
/// of TextRuns (what Teams never reads as markdown).
fn card_text(message: &Value) -> String {
    assert_eq!(message["type"], "message", "{message}");
    let attachments = message["attachments"].as_array().unwrap();
    assert_eq!(attachments.len(), 1, "{message}");
    assert_eq!(attachments[0]["contentType"], "application/vnd.microsoft.card.adaptive");
    let card = &attachments[0]["content"];
    assert_eq!((card["type"].as_str(), card["version"].as_str()), (Some("AdaptiveCard"), Some("1.4")), "{card}");
    let mut runs = Vec::new();
    for block in card["body"].as_array().unwrap() {
        assert_eq!(block["type"], "RichTextBlock", "{block}");
        for run in block["inlines"].as_array().unwrap() {
            assert_eq!(run["type"], "TextRun", "{run}");
            runs.push(run["text"].as_str().unwrap().to_string());
        }
    }
    runs.join("\n")
}

async fn pods_crash(client: &kube::Client, ns: &str, name: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [
            {"name": "app", "image": TOOLBOX_IMAGE, "command": ["sh", "-c", "echo 'crashy-run [see](https://evil.example)'; exit 1"]}
        ]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns).create(&PostParams::default(), &pod).await.unwrap();
}

#[tokio::test]
async fn a_crash_loop_is_a_teams_card_and_a_pagerduty_incident_that_resolves_with_ours() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-teams-pd").await.unwrap();
    let receiver = Receiver::start(0).await;
    let pagerduty = receiver.url("/v2/enqueue");
    let mut vars = LOOPBACK_SINKS.to_vec();
    vars.extend([("TEAMS_HOSTS", "127.0.0.1"), ("PAGERDUTY_URL", pagerduty.as_str())]);
    let operator = start_operator_with_chart_rbac(&env, &ns, &vars).await;
    // localhost reaches the receiver too (loopback is admitted), but is not
    // one of the --teams-hosts.
    let elsewhere = format!("http://localhost:{}/elsewhere", receiver.addr.port());
    secret(
        &client,
        &ns,
        "hooks",
        &[("teams", &receiver.url("/teams")), ("pd", KEY), ("not-a-key", "hunter2"), ("elsewhere", &elsewhere)],
    )
    .await;
    let sinks = |teams: &str, pd: &str| {
        json!({"events": false,
               "teams": {"webhookSecretRef": {"name": "hooks", "key": teams}},
               "pagerduty": {"routingKeySecretRef": {"name": "hooks", "key": pd}, "severity": "critical"}})
    };
    let alerts = json!({"checkRunningPods": true, "restartThreshold": 1, "resolveAfter": "5s"});
    create_podalert(&client, &ns, "oncall", json!({"alerts": alerts, "sinks": sinks("teams", "pd")})).await.unwrap();
    create_podalert(&client, &ns, "misused", json!({"alerts": alerts, "sinks": sinks("elsewhere", "not-a-key")}))
        .await
        .unwrap();
    pods_crash(&client, &ns, "crashy").await;

    // PagerDuty: a trigger with the Secret's key, for the incident.
    let trigger = flotilla_testenv::wait_for("a PagerDuty trigger", T, || {
        let r = receiver.clone();
        async move {
            Ok::<_, std::convert::Infallible>(
                // The first trigger's tail, or an escalation's when the
                // kubelet's container GC took the first crashed run before
                // it was read ("unable to retrieve container logs": a GC
                // pass in the restart's create-to-start window).
                at(&r, "/v2/enqueue").into_iter().find(|d| {
                    d["event_action"] == "trigger"
                        && d["payload"]["custom_details"]["logs"].as_str().is_some_and(|l| l.contains("crashy-run"))
                }),
            )
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:#?}\noperator:\n{}", receiver.received(), operator.logs()));
    assert_eq!(trigger["routing_key"], KEY);
    let dedup = trigger["dedup_key"].as_str().unwrap().to_string();
    assert!(dedup.starts_with("flotilla-"), "{trigger}");
    let payload = &trigger["payload"];
    assert_eq!(
        (payload["severity"].as_str(), payload["source"].as_str()),
        (Some("critical"), Some(&*format!("{ns}/Pod/crashy"))),
        "{trigger}"
    );
    assert!(payload["summary"].as_str().unwrap().contains("Pod/crashy container app"), "{trigger}");
    assert!(payload["custom_details"]["logs"].as_str().unwrap().contains("crashy-run"), "{trigger}");

    // Teams: the card, the pod's markdown shown as written.
    let card = flotilla_testenv::wait_for("a Teams card", T, || {
        let r = receiver.clone();
        // As for PagerDuty: the opening's tail, or an escalation's.
        async move {
            Ok::<_, std::convert::Infallible>(
                at(&r, "/teams").into_iter().find(|c| card_text(c).contains("crashy-run")),
            )
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:#?}", receiver.received()));
    let text = card_text(&card);
    assert!(text.contains("Pod/crashy"), "{text}");
    assert!(text.contains("crashy-run [see](https://evil.example)"), "{text}");
    let opened = at(&receiver, "/teams").into_iter().map(|c| card_text(&c)).find(|t| t.contains("Opened: "));
    assert!(opened.is_some_and(|t| t.contains("Pod/crashy")), "an Opened card first");

    // The misused PodAlert: nothing sent, and why in its status.
    let why = wait_status(&client, &ns, "misused", "both sinks misconfigured", T, |s| {
        let (status, reason, message) = condition(s, "SinksHealthy")?;
        (status == "False"
            && reason == "SinkMisconfigured"
            && message.contains("teams")
            && message.contains("pagerduty"))
        .then_some(message)
    })
    .await;
    assert!(why.contains("--teams-hosts") && why.contains("not a PagerDuty integration key"), "{why}");
    assert!(!why.contains("hunter2"), "a Secret's value is never repeated: {why}");

    // The pod goes: the incident resolves, and PagerDuty's with it.
    Api::<Pod>::namespaced(client.clone(), &ns).delete("crashy", &DeleteParams::default()).await.unwrap();
    let resolve = flotilla_testenv::wait_for("a PagerDuty resolve", T, || {
        let r = receiver.clone();
        async move {
            Ok::<_, std::convert::Infallible>(
                at(&r, "/v2/enqueue").into_iter().find(|d| d["event_action"] == "resolve"),
            )
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:#?}\noperator:\n{}", receiver.received(), operator.logs()));
    assert_eq!(resolve, json!({"event_action": "resolve", "dedup_key": dedup, "routing_key": KEY}));
    let resolved_card = flotilla_testenv::wait_for("a Teams resolved card", T, || {
        let r = receiver.clone();
        async move {
            Ok::<_, std::convert::Infallible>(
                at(&r, "/teams").into_iter().map(|m| card_text(&m)).find(|t| t.contains("Resolved: ")),
            )
        }
    })
    .await
    .unwrap();
    assert!(!resolved_card.contains("crashy-run"), "no log tail on a resolve: {resolved_card}");
    // Every PagerDuty document was the oncall PodAlert's; nothing reached
    // the host outside --teams-hosts.
    assert!(at(&receiver, "/v2/enqueue").iter().all(|d| d["routing_key"] == KEY && d["dedup_key"] == dedup.as_str()));
    assert!(at(&receiver, "/elsewhere").is_empty(), "{:#?}", receiver.received());
    delete_namespace(&client, &ns).await;
}
