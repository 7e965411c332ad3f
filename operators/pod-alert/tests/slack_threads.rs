//! Issue 32's Slack threads (a bot token instead of a webhook) on the
//! one-node cluster, against a local fake of Slack's Web API that checks
//! the bearer token and each document's shape, answers with its own
//! channel ID and message timestamps, and records every call: a crash loop
//! is one `chat.postMessage` (no `thread_ts`); the thread survives an
//! operator restart (it is in the incident's status); and the pod's
//! deletion is a reply in that thread and a `chat.update` of its first
//! message saying Resolved. The token is seen by the fake Slack only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use flotilla_testenv::cluster::node::images::TOOLBOX_IMAGE;
use flotilla_testenv::node;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(180);
const TOKEN: &str = "xoxb-1234567890-1234567890123-SeCrEtBoTtOkEnVaLuE";
/// The channel's ID, as the fake Slack answers whatever name it was given:
/// replies and updates must use it, not the spec's name.
const CHANNEL_ID: &str = "C0FLOTILLA1";

/// One call the fake Slack got, and whether it was accepted.
#[derive(Debug, Clone)]
struct Call {
    method: String,
    body: Value,
    /// Why it was refused (Slack's error code), if it was.
    refused: Option<String>,
}

/// A fake of Slack's Web API under `/api`: `chat.postMessage` and
/// `chat.update`, with Slack's shapes and answers.
#[derive(Clone)]
struct FakeSlack {
    addr: std::net::SocketAddr,
    calls: Arc<Mutex<Vec<Call>>>,
}

/// What is wrong with `body` for `method`, as Slack would say it.
fn schema_error(method: &str, body: &Value) -> Option<&'static str> {
    let obj = body.as_object()?;
    let (required, allowed): (&[&str], &[&str]) = match method {
        "chat.postMessage" => (&["channel", "text", "blocks"], &["channel", "text", "blocks", "thread_ts"]),
        "chat.update" => (&["channel", "ts", "text", "blocks"], &["channel", "ts", "text", "blocks"]),
        _ => return Some("unknown_method"),
    };
    if required.iter().any(|k| !obj.contains_key(*k)) || obj.keys().any(|k| !allowed.contains(&k.as_str())) {
        return Some("invalid_arguments");
    }
    let strings = ["channel", "text", "ts", "thread_ts"];
    if strings.iter().any(|k| obj.get(*k).is_some_and(|v| v.as_str().is_none_or(str::is_empty))) {
        return Some("invalid_arguments");
    }
    let blocks = obj["blocks"].as_array()?;
    if blocks.is_empty() || blocks.len() > 50 || blocks.iter().any(|b| !b["type"].is_string()) {
        return Some("invalid_blocks");
    }
    None
}

impl FakeSlack {
    async fn start() -> Self {
        let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
        let c = calls.clone();
        let app = axum::Router::new().route(
            "/api/{method}",
            axum::routing::post(
                move |axum::extract::Path(method): axum::extract::Path<String>,
                      headers: axum::http::HeaderMap,
                      body: axum::body::Bytes| {
                    let c = c.clone();
                    async move {
                        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
                        let json_type = headers
                            .get("content-type")
                            .and_then(|v| v.to_str().ok())
                            .is_some_and(|t| t.starts_with("application/json"));
                        let refused = if auth != format!("Bearer {TOKEN}") {
                            Some("invalid_auth")
                        } else if !json_type {
                            Some("invalid_form_data")
                        } else {
                            schema_error(&method, &body)
                        };
                        let mut calls = c.lock().unwrap();
                        let answer = match refused {
                            Some(e) => json!({"ok": false, "error": e}),
                            None if method == "chat.postMessage" => {
                                let ts = format!("1712345678.{:06}", calls.len() + 1);
                                json!({"ok": true, "channel": CHANNEL_ID, "ts": ts, "message": {"text": body["text"]}})
                            }
                            None => {
                                json!({"ok": true, "channel": body["channel"], "ts": body["ts"], "text": body["text"]})
                            }
                        };
                        calls.push(Call { method, body, refused: refused.map(str::to_string) });
                        ([(axum::http::header::CONTENT_TYPE, "application/json; charset=utf-8")], answer.to_string())
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, calls }
    }

    fn api_url(&self) -> String {
        format!("http://{}/api", self.addr)
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// Accepted calls of `method` matching `f`.
    fn accepted(&self, method: &str, f: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method && c.refused.is_none() && f(&c.body))
            .map(|c| c.body)
            .collect()
    }
}

async fn crash_looping_pod(client: &kube::Client, ns: &str, name: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [
            {"name": "app", "image": TOOLBOX_IMAGE, "command": ["sh", "-c", "echo 'threaded-run <!channel>'; exit 1"]}
        ]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns).create(&PostParams::default(), &pod).await.unwrap();
}

#[tokio::test]
async fn an_incident_is_one_slack_thread_that_survives_a_restart_and_resolves_in_place() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-slack-threads").await.unwrap();
    let slack = FakeSlack::start().await;
    let kubeconfig = chart_rbac_kubeconfig(&env, &ns).await;
    let api_flag = format!("--slack-api-url={}", slack.api_url());
    let start = || start_operator_as(&kubeconfig, &ns, &[&api_flag], &LOOPBACK_SINKS);
    let operator = start();
    secret(&client, &ns, "slack-bot", &[("token", TOKEN)]).await;
    let spec = json!({
        "alerts": {"checkRunningPods": true, "restartThreshold": 1, "resolveAfter": "5s"},
        "sinks": {"events": false, "slack": {"botTokenSecretRef": {"name": "slack-bot", "key": "token"}, "channel": "#alerts-test"}},
    });
    create_podalert(&client, &ns, "threads", spec).await.unwrap();
    crash_looping_pod(&client, &ns, "crashy").await;

    // The opening: one new message in the spec's channel.
    let opened = flotilla_testenv::wait_for("the opening's chat.postMessage", T, || {
        let s = slack.clone();
        async move {
            Ok::<_, std::convert::Infallible>(
                s.accepted("chat.postMessage", |b| b.get("thread_ts").is_none()).into_iter().next(),
            )
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:#?}\noperator:\n{}", slack.calls(), operator.logs()));
    assert_eq!(opened["channel"], "#alerts-test", "{opened}");
    let text = opened["text"].as_str().unwrap();
    assert!(text.contains("Opened: ") && text.contains("Pod/crashy container app"), "{text}");
    // Escaped as ever: what a pod writes pings no one.
    assert!(!opened["blocks"].to_string().contains("<!channel>"), "{opened}");
    let first_ts = slack
        .calls()
        .iter()
        .position(|c| c.method == "chat.postMessage" && c.refused.is_none())
        .map(|n| format!("1712345678.{:06}", n + 1))
        .unwrap();

    // The thread is kept with the incident in status.
    let kept = wait_status(&client, &ns, "threads", "the incident's slackThread", T, |s| {
        s.incidents.iter().find_map(|i| i.slack_thread.clone())
    })
    .await;
    assert_eq!((kept.channel.as_str(), kept.ts.as_str()), (CHANNEL_ID, first_ts.as_str()));

    // An operator restart: the new one knows the thread from status only.
    let before = operator.logs();
    operator.stop();
    let operator = start();

    // The pod goes: the incident resolves, a reply in its thread and the
    // first message updated to say so.
    Api::<Pod>::namespaced(client.clone(), &ns).delete("crashy", &DeleteParams::default()).await.unwrap();
    let in_thread = |b: &Value| b["thread_ts"] == first_ts.as_str() && b["channel"] == CHANNEL_ID;
    let says_resolved = |b: &Value| b["text"].as_str().is_some_and(|t| t.contains("Resolved: "));
    let reply = flotilla_testenv::wait_for("the resolve's reply in the thread", T, || {
        let s = slack.clone();
        let f = move |b: &Value| in_thread(b) && says_resolved(b);
        async move { Ok::<_, std::convert::Infallible>(s.accepted("chat.postMessage", f).into_iter().next()) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:#?}\noperator:\n{}", slack.calls(), operator.logs()));
    assert!(reply["text"].as_str().unwrap().contains("Pod/crashy"), "{reply}");
    let first = first_ts.clone();
    let update = flotilla_testenv::wait_for("chat.update of the first message", T, || {
        let s = slack.clone();
        let first = first.clone();
        let f = move |b: &Value| b["ts"] == first.as_str() && b["channel"] == CHANNEL_ID && says_resolved(b);
        async move { Ok::<_, std::convert::Infallible>(s.accepted("chat.update", f).into_iter().next()) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:#?}\noperator:\n{}", slack.calls(), operator.logs()));
    assert!(update["text"].as_str().unwrap().starts_with(":large_green_circle: Resolved: "), "{update}");

    // One thread: a single top-level message, every other post a reply in
    // it, every update of its first message; nothing Slack would refuse.
    let calls = slack.calls();
    assert!(calls.iter().all(|c| c.refused.is_none()), "{calls:#?}");
    let top: Vec<_> =
        calls.iter().filter(|c| c.method == "chat.postMessage" && c.body.get("thread_ts").is_none()).collect();
    assert_eq!(top.len(), 1, "{calls:#?}");
    for c in calls.iter().filter(|c| c.method == "chat.postMessage" && c.body.get("thread_ts").is_some()) {
        assert!(in_thread(&c.body), "{c:#?}");
    }
    for c in calls.iter().filter(|c| c.method == "chat.update") {
        assert_eq!((c.body["channel"].as_str(), c.body["ts"].as_str()), (Some(CHANNEL_ID), Some(first_ts.as_str())));
    }

    // The token: in the Authorization header only — not in the logs, the
    // status or the PodAlert's Events.
    let status = wait_status(&client, &ns, "threads", "the sink healthy", T, |s| {
        let (status, _, _) = condition(s, "SinksHealthy")?;
        (status == "True").then(|| serde_json::to_string(s).unwrap())
    })
    .await;
    assert!(!status.contains("SeCrEtBoTtOkEn"), "{status}");
    for logs in [before, operator.logs()] {
        assert!(!logs.contains("SeCrEtBoTtOkEn"), "the token was logged");
    }
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    let events = serde_json::to_string(&events.list(&Default::default()).await.unwrap().items).unwrap();
    assert!(!events.contains("SeCrEtBoTtOkEn"), "{events}");
    delete_namespace(&client, &ns).await;
}
