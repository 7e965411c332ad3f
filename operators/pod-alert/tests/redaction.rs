//! Issue 32 on the one-node cluster: a real pod prints one secret of each
//! kind the defaults know (and one only a `logs.redact` pattern knows), then
//! exits non-zero. None of them may reach the PodAlert's status, its Events,
//! the webhook, Slack or Alertmanager — `[redacted]` does — while a second
//! PodAlert over the same pod with `redactDefaults: false` shows a (fake,
//! harmless) value raw: the switch works, and the two never share a tail.
//!
//! Against a build before redaction (`POD_ALERT_TEST_BINARY`) every secret
//! shows up in the status and on every sink, and the test fails there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::cluster::node::images::TOOLBOX_IMAGE;
use flotilla_testenv::node;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

const T: Duration = Duration::from_secs(150);

/// The fake secrets the pod prints: (what must never come out, the line
/// that carries it). Each value is unique in the whole test, so finding it
/// anywhere is a leak.
fn secrets() -> Vec<(&'static str, String)> {
    let aws_secret = "FakeAwsSecretKey0123456789abcdefghij/K+Z";
    assert_eq!(aws_secret.len(), 40);
    vec![
        ("bearer-tok-0123456789", "calling api with Bearer bearer-tok-0123456789 failed".into()),
        ("YXV0aHotdmFsdWUtZmFrZQ", "> Authorization: Basic YXV0aHotdmFsdWUtZmFrZQ".into()),
        ("AKIAFAKEKEYID0000001", "aws key id AKIAFAKEKEYID0000001 loaded".into()),
        (aws_secret, format!("aws_secret_access_key = {aws_secret}")),
        (
            "eyJhbGciOiJub25lIn0.eyJzdWIiOiJmYWtlIn0.ZmFrZS1zaWc",
            "session cookie eyJhbGciOiJub25lIn0.eyJzdWIiOiJmYWtlIn0.ZmFrZS1zaWc".into(),
        ),
        (
            "RkFLRS1QRU0tS0VZLUJPRFkx",
            "-----BEGIN RSA PRIVATE KEY-----\nRkFLRS1QRU0tS0VZLUJPRFkx\n-----END RSA PRIVATE KEY-----".into(),
        ),
        ("url-pass-fake-77", "dial postgres://app:url-pass-fake-77@db:5432/app: refused".into()),
        ("kv-pass-hunter2", "config: password=kv-pass-hunter2 user=app".into()),
        // Only spec.logs.redact knows this one.
        ("4111-1111-1111-1111", "card 4111-1111-1111-1111 declined".into()),
    ]
}

/// The raw PodAlert (redactDefaults: false) shows this one as printed.
const RAW: &str = "kv-pass-hunter2";

#[tokio::test]
async fn secrets_printed_by_a_crashing_pod_reach_no_status_event_or_sink() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-redact").await.unwrap();
    let receiver = Receiver::start(0).await;
    let am = Alertmanager::start().await;
    let operator = start_operator(&env, &ns, &[]);
    secret(&client, &ns, "hooks", &[("webhook", &receiver.url("/webhook")), ("slack", &receiver.url("/slack"))]).await;

    create_podalert(
        &client,
        &ns,
        "redacting",
        json!({
            "alerts": {"checkRunningPods": true},
            "logs": {"redact": [r"\b\d{4}-\d{4}-\d{4}-\d{4}\b"]},
            // Every sink also carries the runbook link, filled in.
            "runbookURL": "https://runbooks.example.com/pods/{reason}?ns={namespace}&w={workload}",
            "sinks": {
                "webhook": {"urlSecretRef": {"name": "hooks", "key": "webhook"}},
                "slack": {"webhookSecretRef": {"name": "hooks", "key": "slack"}},
                "alertmanager": {"url": am.url},
            }
        }),
    )
    .await
    .unwrap();
    create_podalert(
        &client,
        &ns,
        "raw",
        json!({"alerts": {"checkRunningPods": true}, "logs": {"redactDefaults": false}, "sinks": {"events": false}}),
    )
    .await
    .unwrap();

    let secrets = secrets();
    let lines: Vec<String> = secrets.iter().flat_map(|(_, l)| l.lines().map(|l| format!("'{l}'"))).collect();
    let script = format!("echo starting; printf '%s\\n' {}; echo leaky-done; exit 3", lines.join(" "));
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "leaky"},
        "spec": {"terminationGracePeriodSeconds": 1, "restartPolicy": "Never", "containers": [
            {"name": "app", "image": TOOLBOX_IMAGE, "command": ["sh", "-c", script]}
        ]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), &ns).create(&PostParams::default(), &pod).await.unwrap();

    let tail_of = |name: &'static str| {
        let (client, ns) = (client.clone(), ns.clone());
        async move {
            wait_status(&client, &ns, name, "the incident with its log tail", T, |s| {
                let i = s.incidents.iter().find(|i| i.workload == "Pod/leaky" && i.logs.contains("leaky-done"))?;
                Some((i.clone(), serde_json::to_string(s).unwrap()))
            })
            .await
        }
    };
    let (incident, status) = tail_of("redacting").await;
    assert_eq!(incident.reason, "Error", "{incident:?}");
    let (raw_incident, _) = tail_of("raw").await;

    // The sinks: the webhook, Slack and Alertmanager got the opening.
    let webhook = flotilla_testenv::wait_for("the webhook and Slack documents", T, || {
        let r = receiver.clone();
        async move {
            let w = r.webhook_events("opened", "Pod/leaky");
            let done = !w.is_empty() && !r.slack_messages("Pod/leaky").is_empty();
            Ok::<_, std::convert::Infallible>(done.then(|| w[0].body.clone()))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:#?}", receiver.received()));
    let alert = flotilla_testenv::wait_for("Alertmanager's alert", T, || {
        let am = &am;
        async move { Ok::<_, std::convert::Infallible>(am.alert_for("Pod/leaky").await) }
    })
    .await
    .unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    let event_list = flotilla_testenv::wait_for("the IncidentOpened Event", Duration::from_secs(30), || {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await?;
            let opened = list.items.iter().any(|e| e.reason.as_deref() == Some("IncidentOpened"));
            Ok::<_, kube::Error>(opened.then_some(list.items))
        }
    })
    .await
    .unwrap();

    // What was shown carries the tail: the redactions are there, the
    // ordinary lines around them too.
    let logs = &incident.logs;
    assert!(logs.contains("starting") && logs.contains("[redacted]"), "{logs}");
    assert!(logs.contains("calling api with Bearer [redacted] failed"), "{logs}");
    assert!(logs.contains("dial postgres://[redacted]@db:5432/app: refused"), "{logs}");
    assert!(logs.contains("card [redacted] declined"), "{logs}");
    let hook_logs = webhook["incident"]["logs"].as_str().unwrap();
    assert!(hook_logs.contains("password=[redacted] user=app"), "{hook_logs}");
    let am_logs = alert["annotations"]["logs"].as_str().unwrap_or_default();
    assert!(am_logs.contains("[redacted]"), "{alert}");

    // spec.runbookURL, filled in for the incident, on every sink.
    let runbook = format!("https://runbooks.example.com/pods/Error?ns={ns}&w=Pod/leaky");
    assert_eq!(webhook["incident"]["runbookURL"], runbook.as_str(), "{webhook}");
    assert_eq!(alert["annotations"]["runbook_url"], runbook.as_str(), "{alert}");
    let slack = receiver.slack_messages("Pod/leaky");
    assert!(slack[0].body.to_string().contains(&format!("<{runbook}|Runbook>")), "{:?}", slack[0].body);
    let opened = event_list.iter().find(|e| e.reason.as_deref() == Some("IncidentOpened")).unwrap();
    assert!(opened.note.as_deref().unwrap_or_default().ends_with(&format!("runbook: {runbook}")), "{opened:?}");

    let everything = [
        ("status", status),
        (
            "webhook and Slack",
            serde_json::to_string(&receiver.received().iter().map(|r| &r.body).collect::<Vec<_>>()).unwrap(),
        ),
        ("Alertmanager", am.alerts().await.iter().map(|a| a.to_string()).collect::<Vec<_>>().join("\n")),
        ("Events", serde_json::to_string(&event_list).unwrap()),
        ("the operator's own log", operator.logs()),
    ];
    for (kind, _) in &secrets {
        for (place, text) in &everything {
            assert!(!text.contains(kind), "{kind:?} leaked to {place}: {text}");
        }
    }

    // redactDefaults: false shows the defaults' kinds as printed, from its
    // own read: the redacting PodAlert's tail was not shared with it.
    assert!(raw_incident.logs.contains(&format!("password={RAW} user=app")), "{:?}", raw_incident.logs);
    assert!(!raw_incident.logs.contains("[redacted]"), "{:?}", raw_incident.logs);
    drop(operator);
    delete_namespace(&client, &ns).await;
}
