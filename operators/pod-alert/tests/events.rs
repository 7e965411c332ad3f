//! Issue 32 on the one-node cluster: a crash-looping pod gets the kubelet's
//! Warning Events ("BackOff: Back-off restarting failed container …"); a
//! PodAlert sends them beside the log tail (webhook `incident.events`,
//! status `incidents[].events`), read with the chart's RBAC (`list` on core
//! Events), while a PodAlert over the same pod with `logs.events: false`
//! shows none — though both share the one tail that holds them. The
//! IncidentOpened/Escalated Event notes never carry them.
//!
//! Against a build before the events (`POD_ALERT_TEST_BINARY`) no document
//! carries `incident.events` and the test fails there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::cluster::node::images::TOOLBOX_IMAGE;
use flotilla_testenv::node;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

/// Back-offs of 10 s, 20 s, 40 s: the third restart (an escalation, read
/// again) is about 80 s in.
const T: Duration = Duration::from_secs(180);

fn backoff(line: &Value) -> bool {
    line.as_str().is_some_and(|l| l.starts_with("BackOff: ") && l.contains("Back-off restarting failed container"))
}

/// The webhook documents `podalert` sent about Pod/crashy.
fn documents(receiver: &Receiver, podalert: &str) -> Vec<Value> {
    receiver
        .received()
        .into_iter()
        .filter(|r| r.path == "/webhook" && r.answered == 200)
        .map(|r| r.body)
        .filter(|b| b["podAlert"]["name"] == podalert && b["incident"]["workload"] == "Pod/crashy")
        .collect()
}

#[tokio::test]
async fn a_crash_loops_backoff_events_go_beside_its_log_unless_switched_off() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-events").await.unwrap();
    let receiver = Receiver::start(0).await;
    let operator = start_operator_with_chart_rbac(&env, &ns, &LOOPBACK_SINKS).await;
    secret(&client, &ns, "hooks", &[("webhook", &receiver.url("/webhook"))]).await;
    for (name, events) in [("with-events", true), ("without-events", false)] {
        create_podalert(
            &client,
            &ns,
            name,
            json!({
                "alerts": {"checkRunningPods": true, "restartThreshold": 1},
                "logs": {"events": events},
                "sinks": {"webhook": {"urlSecretRef": {"name": "hooks", "key": "webhook"}}}
            }),
        )
        .await
        .unwrap();
    }
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "crashy"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [
            {"name": "app", "image": TOOLBOX_IMAGE, "command": ["sh", "-c", "echo crashy-run; exit 1"]}
        ]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), &ns).create(&PostParams::default(), &pod).await.unwrap();

    // The opening, or an escalation (read again) when the kubelet had not
    // yet written its BackOff Event at the opening's read.
    let sent = flotilla_testenv::wait_for("a webhook document with a BackOff event", T, || {
        let r = receiver.clone();
        async move {
            let found = documents(&r, "with-events")
                .into_iter()
                // The tail too (an escalation's when the kubelet's container
                // GC took the first crashed run before it was read).
                .find(|d| {
                    d["incident"]["events"].as_array().is_some_and(|e| e.iter().any(backoff))
                        && d["incident"]["logs"].as_str().is_some_and(|l| l.contains("crashy-run"))
                });
            Ok::<_, std::convert::Infallible>(found)
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:#?}\noperator:\n{}", receiver.received(), operator.logs()));
    let events = sent["incident"]["events"].as_array().unwrap();
    assert!(events.len() <= 5, "{events:?}");
    assert!(events.iter().all(|e| e.as_str().is_some_and(|l| l.len() <= 256 && !l.contains('\n'))), "{events:?}");
    assert!(
        !events.iter().any(|e| e.as_str().unwrap_or_default().contains("events unavailable")),
        "the chart's RBAC lets the operator list Events: {events:?}"
    );
    assert!(sent["incident"]["logs"].as_str().unwrap_or_default().contains("crashy-run"), "{sent}");

    // Status carries them too.
    let status_events = wait_status(&client, &ns, "with-events", "the incident's events in status", T, |s| {
        let i = s.incidents.iter().find(|i| i.workload == "Pod/crashy")?;
        i.events.iter().any(|l| backoff(&Value::from(l.as_str()))).then(|| i.events.clone())
    })
    .await;
    assert!(status_events.len() <= 5, "{status_events:?}");

    // logs.events: false: none, in any document or in status, though the
    // tail it shares holds them.
    let off = flotilla_testenv::wait_for("the other PodAlert's documents", T, || {
        let r = receiver.clone();
        async move {
            let docs = documents(&r, "without-events");
            Ok::<_, std::convert::Infallible>((!docs.is_empty()).then_some(docs))
        }
    })
    .await
    .unwrap();
    for d in &off {
        assert!(d["incident"].get("events").is_none(), "{d}");
    }
    let off_status = wait_status(&client, &ns, "without-events", "its incident", T, |s| {
        s.incidents.iter().find(|i| i.workload == "Pod/crashy" && !i.logs.is_empty()).cloned()
    })
    .await;
    assert!(off_status.events.is_empty(), "{off_status:?}");

    // Never in the Event note.
    let notes: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    let list = notes.list(&Default::default()).await.unwrap();
    let ours: Vec<_> =
        list.items.iter().filter(|e| e.reason.as_deref().is_some_and(|r| r.starts_with("Incident"))).collect();
    assert!(!ours.is_empty(), "{list:?}");
    for e in ours {
        assert!(!e.note.as_deref().unwrap_or_default().contains("Back-off restarting"), "{e:?}");
    }
    drop(operator);
    delete_namespace(&client, &ns).await;
}
