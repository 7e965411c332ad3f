//! Issue 27's attacks on pod-alert, each run against the operator on the
//! one-node cluster (real pods, logs, kubelet) as a process with the chart's
//! RBAC (a Role in the test namespace, as with `watchNamespace`): the
//! PodAlert's author — and the author of a pod — is untrusted. Memory
//! figures are the benchmark's (`cargo xtask bench pod-alert`); these tests
//! prove the behaviour that bounds them. And issue 29's race: the crashed
//! run's log even when the next run starts before the read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use flotilla_testenv::cluster::node::images::TOOLBOX_IMAGE;
use flotilla_testenv::node;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(180);

/// A bare pod (its own workload) whose container(s) run `script`.
async fn pod(client: &kube::Client, ns: &str, name: &str, labels: Value, containers: &[(&str, &str)]) {
    let containers: Vec<Value> = containers
        .iter()
        .map(|(c, script)| json!({"name": c, "image": TOOLBOX_IMAGE, "command": ["sh", "-c", script]}))
        .collect();
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": containers}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns).create(&PostParams::default(), &p).await.unwrap();
}

fn sink<'a>(s: &'a PodAlertStatus, name: &str) -> Option<&'a pod_alert::crd::SinkStatus> {
    s.sinks.iter().find(|x| x.name == name)
}

/// A webhook Secret of `http://127.0.0.1:<port>/quitquitquit` (an Istio
/// sidecar's shutdown), a Slack Secret naming `localhost`, and an
/// Alertmanager on loopback: with the default flags nothing is sent, the
/// status says "refused by policy", and the receiver never hears a thing.
/// (Before: every one of them was delivered.)
#[tokio::test]
async fn sinks_never_reach_the_operators_own_network_by_default() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-ssrf").await.unwrap();
    let receiver = Receiver::start(0).await;
    let port = receiver.addr.port();
    let operator = start_operator_with_chart_rbac(&env, &ns, &[]).await;
    let slack = format!("http://localhost:{port}/slack");
    secret(&client, &ns, "hooks", &[("webhook", &receiver.url("/quitquitquit")), ("slack", &slack)]).await;
    create_podalert(
        &client,
        &ns,
        "ssrf",
        json!({
            "alerts": {"checkRunningPods": true, "restartThreshold": 1},
            "sinks": {
                "webhook": {"urlSecretRef": {"name": "hooks", "key": "webhook"}},
                "slack": {"webhookSecretRef": {"name": "hooks", "key": "slack"}},
                "alertmanager": {"url": format!("http://127.0.0.1:{port}")},
            }
        }),
    )
    .await
    .unwrap();
    pod(&client, &ns, "crasher", json!({}), &[("app", "echo crashing; exit 1")]).await;
    let s = wait_status(&client, &ns, "ssrf", "the incident, and every sink's attempt refused", T, |s| {
        let firing = s.incidents.iter().any(|i| i.state == "Firing");
        let refused = ["webhook", "slack", "alertmanager"]
            .iter()
            .all(|n| sink(s, n).is_some_and(|x| x.failed >= 1 && x.last_error == "refused by policy"));
        (firing && refused).then(|| s.clone())
    })
    .await;
    let (status, reason, message) = condition(&s, "SinksHealthy").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "SinkMisconfigured"), "{message}");
    assert!(message.contains("refused by policy"), "{message}");
    assert!(!message.contains("127.0.0.1") && !message.contains("localhost"), "{message}");
    // Anything that was going to be sent has been by now.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(receiver.received().is_empty(), "the receiver was reached: {:#?}", receiver.received());
    assert!(!operator.logs().contains("panicked"));
    delete_namespace(&client, &ns).await;
}

/// With the receiver admitted, a sink's error in status is its class, not
/// what the sink answered: `HTTP 4xx`, not the 404 and its body with a token.
#[tokio::test]
async fn sink_errors_in_status_are_classes() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-classes").await.unwrap();
    let receiver = Receiver::start(0).await;
    let _operator = start_operator_with_chart_rbac(&env, &ns, &LOOPBACK_SINKS).await;
    secret(&client, &ns, "hooks", &[("webhook", &receiver.url("/gone"))]).await;
    create_podalert(
        &client,
        &ns,
        "classes",
        json!({
            "alerts": {"checkRunningPods": true, "restartThreshold": 1},
            "sinks": {"webhook": {"urlSecretRef": {"name": "hooks", "key": "webhook"}}},
        }),
    )
    .await
    .unwrap();
    pod(&client, &ns, "crasher", json!({}), &[("app", "exit 1")]).await;
    let s = wait_status(&client, &ns, "classes", "the webhook refused", T, |s| {
        sink(s, "webhook").filter(|x| x.failed >= 1).map(|_| s.clone())
    })
    .await;
    assert_eq!(sink(&s, "webhook").unwrap().last_error, "HTTP 4xx");
    let sinks = serde_json::to_string(&s.sinks).unwrap();
    assert!(!sinks.contains("hunter2") && !sinks.contains("127.0.0.1") && !sinks.contains("gone"), "{sinks}");
    assert!(receiver.received().iter().any(|r| r.path == "/gone"), "the webhook was asked");
    delete_namespace(&client, &ns).await;
}

/// A log line holding Slack's control syntax reaches Slack escaped: shown,
/// never interpreted (no `@channel` ping, no disguised link).
#[tokio::test]
async fn slack_shows_what_pods_write_uninterpreted() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-slack").await.unwrap();
    let receiver = Receiver::start(0).await;
    let _operator = start_operator_with_chart_rbac(&env, &ns, &LOOPBACK_SINKS).await;
    secret(&client, &ns, "hooks", &[("slack", &receiver.url("/slack"))]).await;
    create_podalert(
        &client,
        &ns,
        "escapes",
        json!({
            "alerts": {"checkRunningPods": true, "restartThreshold": 1},
            "sinks": {"slack": {"webhookSecretRef": {"name": "hooks", "key": "slack"}}},
        }),
    )
    .await
    .unwrap();
    let script = "echo '<!channel> deploy broke, see <https://evil.example/x|runbook> & rerun'; exit 1";
    pod(&client, &ns, "mention", json!({}), &[("app", script)]).await;
    let msg = flotilla_testenv::wait_for("the Slack message", T, || {
        let r = receiver.clone();
        async move { Ok::<_, std::convert::Infallible>(r.slack_messages("Pod/mention").into_iter().next()) }
    })
    .await
    .unwrap();
    let body = msg.body.to_string();
    assert!(body.contains("&lt;!channel&gt; deploy broke"), "{body}");
    assert!(body.contains("&lt;https://evil.example/x|runbook&gt; &amp; rerun"), "{body}");
    assert!(!body.contains("<!channel>") && !body.contains("<https://evil"), "interpreted by Slack: {body}");
    delete_namespace(&client, &ns).await;
}

/// One line per PodAlert: its Ready condition and its incidents counted
/// by (state, reason) — what a failed wait saw.
fn describe_alerts(list: &[PodAlert]) -> String {
    let mut out = String::new();
    for a in list {
        let s = a.status.as_ref();
        let ready = s.and_then(|s| condition(s, "Ready")).map(|c| format!("{}/{}", c.0, c.1));
        let mut counts = std::collections::BTreeMap::<(String, String), usize>::new();
        for i in s.map(|s| s.incidents.as_slice()).unwrap_or_default() {
            *counts.entry((i.state.clone(), i.reason.clone())).or_default() += 1;
        }
        out += &format!("  {}: Ready {ready:?}, incidents {counts:?}\n", a.metadata.name.as_deref().unwrap_or(""));
    }
    out
}

/// One line per container of `pod`: restarts, state, last termination.
fn describe_containers(pod: Option<&Pod>) -> String {
    let statuses = pod.and_then(|p| p.status.as_ref()).and_then(|s| s.container_statuses.clone()).unwrap_or_default();
    statuses
        .iter()
        .map(|c| {
            let state = serde_json::to_string(&c.state).unwrap_or_default();
            let last = serde_json::to_string(&c.last_state).unwrap_or_default();
            format!("  {}: restarts {}, state {state}, last {last}\n", c.name, c.restart_count)
        })
        .collect()
}

/// Forty PodAlerts over one pod whose twenty containers crash-loop with
/// 64 KiB of `"` each: twenty are evaluated, the others refused; the
/// twenty incidents' tails are held once whatever the PodAlerts (not 20 x
/// 20), and each status stays under 256 KiB with at most 4 KiB of tail per
/// incident (before: 20 x 128 KiB escaped, past etcd's limit: the status
/// write failed for good). When one of the twenty is deleted, the oldest
/// refused one takes its place.
#[tokio::test]
async fn forty_podalerts_over_one_crash_loop_hold_each_tail_once_in_small_statuses() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-tails").await.unwrap();
    let operator = start_operator_with_chart_rbac(&env, &ns, &[]).await;
    let script = "echo start; head -c 65536 /dev/zero | tr '\\0' '\"'; echo; exit 1";
    let names: Vec<String> = (0..20).map(|i| format!("c{i:02}")).collect();
    let containers: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), script)).collect();
    pod(&client, &ns, "noisy", json!({"app": "noisy"}), &containers).await;
    for i in 0..40 {
        let spec = json!({
            "alerts": {"checkRunningPods": true, "restartThreshold": 1},
            "selector": {"matchLabels": {"app": "noisy"}},
            "logs": {"tailLines": 1000, "maxBytes": 65536},
        });
        create_podalert(&client, &ns, &format!("pa-{i:02}"), spec).await.unwrap();
    }
    let api: Api<PodAlert> = Api::namespaced(client.clone(), &ns);
    let started = Instant::now();
    let (served, refused) = loop {
        let list = api.list(&Default::default()).await.unwrap().items;
        let served: Vec<&PodAlert> = list
            .iter()
            .filter(|a| {
                a.status.as_ref().is_some_and(|s| s.incidents.iter().filter(|i| i.state == "Firing").count() == 20)
            })
            .collect();
        let refused = list
            .iter()
            .filter(|a| {
                a.status
                    .as_ref()
                    .and_then(|s| condition(s, "Ready"))
                    .is_some_and(|c| c.0 == "False" && c.1 == "TooManyPodAlerts")
            })
            .count();
        if served.len() == 20 && refused == 20 {
            break (served.into_iter().cloned().collect::<Vec<_>>(), refused);
        }
        if started.elapsed() >= Duration::from_secs(300) {
            let pod = Api::<Pod>::namespaced(client.clone(), &ns).get("noisy").await.ok();
            panic!(
                "{} PodAlerts with 20 incidents firing, {refused} refused\nPodAlerts:\n{}\nthe pod's containers:\n{}\nlogs:\n{}",
                served.len(),
                describe_alerts(&list),
                describe_containers(pod.as_ref()),
                operator.logs()
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    assert_eq!(refused, 20);
    // The oldest twenty are served.
    let mut served_names: Vec<String> = served.iter().map(|a| a.metadata.name.clone().unwrap()).collect();
    served_names.sort();
    assert_eq!(served_names, (0..20).map(|i| format!("pa-{i:02}")).collect::<Vec<_>>());
    for a in &served {
        let s = a.status.as_ref().unwrap();
        let bytes = serde_json::to_vec(s).unwrap().len();
        assert!(bytes <= 256 << 10, "{}'s status is {bytes} bytes", a.metadata.name.as_deref().unwrap_or(""));
        for i in &s.incidents {
            let escaped = serde_json::to_string(&i.logs).unwrap().len() - 2;
            assert!(escaped <= 4096, "{} bytes of tail in status", escaped);
        }
        // (A crash loop this fast can lose a run's log before it is read:
        // "logs unavailable" is then the honest tail.)
        assert!(s.incidents.iter().any(|i| i.logs.contains("\"\"\"")), "no tail in status: {:#?}", s.incidents);
    }
    // Twenty incident keys, each tail held once: at most 20 x 64 KiB (and a
    // little), not 20 x 20 x 64 KiB.
    let held = metric(&operator, "flotilla_pod_alert_log_tail_bytes").await.expect("the log tail gauge");
    // A figure for the note, not a bound: how many reads the twenty
    // PodAlerts' forty-odd openings and escalations cost.
    let reads = metric(&operator, "flotilla_pod_alert_log_reads_total").await;
    eprintln!("log reads: {reads:?} in {:.1?}", started.elapsed());
    assert!(held > 0.0 && held <= 20.0 * 70_000.0, "{held} bytes of tails held");
    // One of the twenty deleted: the oldest refused one is served in its
    // place (the served set is derived again when the PodAlerts change,
    // not kept from before the deletion).
    api.delete("pa-00", &Default::default()).await.unwrap();
    let started = Instant::now();
    loop {
        let next = api.get("pa-20").await.unwrap();
        if next.status.as_ref().is_some_and(|s| s.incidents.iter().filter(|i| i.state == "Firing").count() == 20) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "pa-20 not served after pa-00 was deleted: {:?}; logs:\n{}",
            next.status.as_ref().and_then(|s| condition(s, "Ready")),
            operator.logs()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    delete_namespace(&client, &ns).await;
}

/// Ten crash loops at once with a limit of 3 notifications a minute for
/// the namespace: 3 go out, the rest wait (Throttled=True) and then go out
/// together as one summary — none lost, none flooding the receiver.
/// (Before: ten webhook requests at once.)
#[tokio::test]
async fn notifications_over_the_namespace_rate_limit_wait_and_go_out_as_a_summary() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-flood").await.unwrap();
    let receiver = Receiver::start(0).await;
    let vars = [LOOPBACK_SINKS[0], LOOPBACK_SINKS[1], ("MAX_NOTIFICATIONS_PER_MINUTE_PER_NAMESPACE", "3")];
    let _operator = start_operator_with_chart_rbac(&env, &ns, &vars).await;
    secret(&client, &ns, "hooks", &[("webhook", &receiver.url("/webhook"))]).await;
    // The PodAlert first, then the pods: they crash within seconds of each other.
    create_podalert(
        &client,
        &ns,
        "flood",
        json!({
            "alerts": {"checkRunningPods": true, "restartThreshold": 1},
            "sinks": {"events": false, "webhook": {"urlSecretRef": {"name": "hooks", "key": "webhook"}}},
        }),
    )
    .await
    .unwrap();
    wait_status(&client, &ns, "flood", "the PodAlert evaluated", T, |s| {
        condition(s, "Ready").filter(|c| c.0 == "True")
    })
    .await;
    for i in 0..10 {
        pod(&client, &ns, &format!("crash-{i}"), json!({}), &[("app", "exit 1")]).await;
    }
    let documents = |kind: &str| -> Vec<Value> {
        receiver
            .received()
            .into_iter()
            .filter(|r| r.path == "/webhook" && r.body["kind"] == kind)
            .map(|r| r.body)
            .collect()
    };
    let opened = || documents("PodAlertNotification").into_iter().filter(|d| d["event"] == "opened").count();
    flotilla_testenv::wait_for("the first openings", T, || {
        let n = opened();
        async move { Ok::<_, std::convert::Infallible>((n >= 3).then_some(())) }
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    // On the receiver's clock: a fourth opening may come 20 s after the
    // first (a token), which a slow start can put inside this wait.
    let at: Vec<Instant> = receiver
        .received()
        .into_iter()
        .filter(|r| r.path == "/webhook" && r.body["kind"] == "PodAlertNotification" && r.body["event"] == "opened")
        .map(|r| r.at)
        .collect();
    let at_once = at.iter().filter(|t| t.saturating_duration_since(at[0]) < Duration::from_secs(15)).count();
    assert!(at_once <= 3, "{at_once} openings went out at once");
    wait_status(&client, &ns, "flood", "notifications throttled", T, |s| {
        condition(s, "Throttled").filter(|c| c.0 == "True")
    })
    .await;
    let workloads = |docs: &[Value]| -> std::collections::BTreeSet<String> {
        docs.iter()
            .filter(|d| d["event"] == "opened")
            .map(|d| d["incident"]["workload"].as_str().unwrap().to_string())
            .collect()
    };
    // A token every 20 s: the rest go out as summaries.
    let (seen, requests) =
        flotilla_testenv::wait_for("every opening, alone or in a summary", Duration::from_secs(150), || {
            let mut seen = workloads(&documents("PodAlertNotification"));
            let summaries = documents("PodAlertNotificationSummary");
            for s in &summaries {
                assert_eq!(s["reason"], "NamespaceRateLimit");
                seen.extend(workloads(s["notifications"].as_array().unwrap()));
            }
            let requests = receiver.received().iter().filter(|r| r.path == "/webhook").count();
            async move {
                Ok::<_, std::convert::Infallible>(
                    (seen.len() == 10 && !summaries.is_empty()).then_some((seen, requests)),
                )
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}: {:#?}", receiver.received()));
    // Three a minute is a token every 20 s, the bucket full (3) at first:
    // whatever went out after the first three waited for a token, counted
    // from the first request on the receiver's clock (not from when this
    // test saw the third, which a busy machine may see late).
    let sent: Vec<Instant> = receiver.received().iter().filter(|r| r.path == "/webhook").map(|r| r.at).collect();
    let waited = sent[3].saturating_duration_since(sent[0]);
    assert!(
        waited >= Duration::from_secs(15),
        "the fourth request waited for a token: only {waited:?} after the first"
    );
    assert_eq!(seen.len(), 10);
    assert!(requests < 10, "{requests} requests for 10 openings: nothing merged");
    delete_namespace(&client, &ns).await;
}

/// Pods with ~12,000 labels each (create-pods rights only): the views keep
/// only the keys selectors of their namespace reference, so a selector on a
/// new key works once the watch lists again, and one reading more than a
/// view keeps is told (`LabelsTooLarge`) instead of matching wrong. The
/// memory is the benchmark's (`cargo xtask bench pod-alert`, attack phase).
#[tokio::test]
async fn pods_with_thousands_of_labels_are_matched_on_the_keys_selectors_use() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-labels").await.unwrap();
    let operator = start_operator_with_chart_rbac(&env, &ns, &[]).await;
    let long = |i: usize| format!("long-{i:02}-{}", "k".repeat(55));
    let mut labels = serde_json::Map::new();
    for i in 0..12_000 {
        labels.insert(format!("label-{i:05}"), Value::from("x"));
    }
    for i in 0..40 {
        labels.insert(long(i), Value::from("v".repeat(63)));
    }
    for i in 0..5 {
        // Unschedulable: Pending for good, never started.
        let mut p = flotilla_testenv::fixtures::pending_pod(Value::Object(labels.clone()), TOOLBOX_IMAGE);
        p["metadata"]["name"] = json!(format!("big-{i}"));
        let p: Pod = serde_json::from_value(p).unwrap();
        Api::<Pod>::namespaced(client.clone(), &ns).create(&PostParams::default(), &p).await.unwrap();
    }
    pod(&client, &ns, "crasher", json!({"tier": "backend"}), &[("app", "echo backend-crash; exit 1")]).await;
    // A selector on an ordinary key: the crash loop, not the big pods.
    create_podalert(
        &client,
        &ns,
        "backend",
        json!({"alerts": {"checkRunningPods": true, "restartThreshold": 1, "pendingAfter": "5s"}, "selector": {"matchLabels": {"tier": "backend"}}}),
    )
    .await
    .unwrap();
    let s = wait_status(&client, &ns, "backend", "the crash loop to fire", T, |s| {
        s.incidents.iter().find(|i| i.workload == "Pod/crasher" && i.state == "Firing").map(|_| s.clone())
    })
    .await;
    assert!(s.incidents.iter().all(|i| !i.workload.starts_with("Pod/big-")), "{:#?}", s.incidents);
    // A key no selector referenced when the pods were listed: the views get it.
    create_podalert(
        &client,
        &ns,
        "by-label",
        json!({"alerts": {"checkRunningPods": true, "pendingAfter": "5s"}, "selector": {"matchLabels": {"label-04242": "x"}}}),
    )
    .await
    .unwrap();
    let s = wait_status(&client, &ns, "by-label", "the big pods matched on a new key", T, |s| {
        (s.incidents.iter().filter(|i| i.workload.starts_with("Pod/big-") && i.reason == "Pending").count() == 5)
            .then(|| s.clone())
    })
    .await;
    assert!(s.incidents.iter().all(|i| i.workload != "Pod/crasher"));
    let cached = metric(&operator, "flotilla_pod_alert_pods_cached").await.unwrap();
    assert!(cached >= 6.0, "{cached}");
    // A selector reading more label bytes than a view keeps (40 keys of 63
    // bytes with values of 63): the big pods are told, not matched.
    let exprs: Vec<Value> = (0..32).map(|i| json!({"key": long(i), "operator": "Exists"})).collect();
    let match_labels: serde_json::Map<String, Value> =
        (32..40).map(|i| (long(i), Value::from("v".repeat(63)))).collect();
    create_podalert(
        &client,
        &ns,
        "too-many-keys",
        json!({
            "alerts": {"checkRunningPods": true, "pendingAfter": "5s"},
            "selector": {"matchExpressions": exprs, "matchLabels": match_labels},
        }),
    )
    .await
    .unwrap();
    let s = wait_status(&client, &ns, "too-many-keys", "the big pods told apart", T, |s| {
        (s.suppressed.get("LabelsTooLarge") == Some(&5)).then(|| s.clone())
    })
    .await;
    assert_eq!(s.pending + s.firing, 0, "{s:#?}");
    assert!(!operator.logs().contains("panicked"));
    delete_namespace(&client, &ns).await;
}

/// Issue 29: the view the operator decides from says the container's
/// crashed run is the newest (terminated, or waiting in back-off), and the
/// next run starts before the log read — here the API's log reads are held
/// until the next run is up, as a slow kubelet would. The incident still
/// carries the crashed run's lines, never the next run's. (Before:
/// "later-run-line".) The kubelet restarts a container 10 s or more after
/// its crash, when its pod is next synced: an attempt whose read did not
/// reach the kubelet after the restart did not provoke the race, and the
/// next attempt (a new pod, a new PodAlert) tries again.
#[tokio::test]
async fn the_crashed_runs_log_even_when_the_next_run_starts_before_the_read() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-race").await.unwrap();
    let kubeconfig = chart_rbac_kubeconfig(&env, &ns).await;
    let (release, released) = tokio::sync::watch::channel(false);
    let slow = SlowLogs::start(&env, &kubeconfig, released).await;
    let operator = start_operator_as(&slow.kubeconfig, &ns, &[], &[]);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let container = |p: Pod| p.status.and_then(|s| s.container_statuses).and_then(|c| c.into_iter().next());
    for attempt in 0..5 {
        let name = format!("flaky-{attempt}");
        release.send_replace(false);
        // Runs 1 and 2 crash, each printing its number; run 3 stays up.
        let script = "n=$(cat /d/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /d/n; \
                      if [ $n -le 2 ]; then echo crashed-run-$n; exit 1; fi; echo later-run-line; exec sleep 3600";
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"attempt": attempt.to_string()}},
            "spec": {"terminationGracePeriodSeconds": 1, "volumes": [{"name": "d", "emptyDir": {}}], "containers": [{
                "name": "app", "image": TOOLBOX_IMAGE, "volumeMounts": [{"name": "d", "mountPath": "/d"}],
                "command": ["sh", "-c", script]
            }]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &p).await.unwrap();
        // The second crash (restart count 1, the container terminated or
        // waiting in back-off).
        let crashed = flotilla_testenv::wait_for("the second crash", T, || {
            let (pods, name) = (pods.clone(), name.clone());
            async move {
                let Some(c) = container(pods.get(&name).await?) else { return Ok::<_, kube::Error>(None) };
                let state = c.state.clone().unwrap_or_default();
                let ended = state.terminated.as_ref().filter(|t| t.exit_code != 0).and_then(|t| t.finished_at.clone());
                let waited = state
                    .waiting
                    .as_ref()
                    .filter(|w| w.reason.as_deref() == Some("CrashLoopBackOff"))
                    .and_then(|_| c.last_state.as_ref()?.terminated.as_ref()?.finished_at.clone());
                Ok(ended.or(waited).filter(|_| c.restart_count == 1).map(|t| t.0))
            }
        })
        .await
        .unwrap();
        // The PodAlert just before the first back-off (10 s) ends: its view
        // of the pod is "the crashed run is the newest"; its reads are held
        // until the next run is up.
        let at = crashed.as_millisecond() + 9000 - k8s_openapi::jiff::Timestamp::now().as_millisecond();
        tokio::time::sleep(Duration::from_millis(u64::try_from(at).unwrap_or(0))).await;
        let spec = json!({"alerts": {"checkRunningPods": true, "restartThreshold": 1}, "selector": {"matchLabels": {"attempt": attempt.to_string()}}});
        create_podalert(&client, &ns, &format!("race-{attempt}"), spec).await.unwrap();
        let up = flotilla_testenv::wait_for("the next run", T, || {
            let (pods, name) = (pods.clone(), name.clone());
            async move {
                let c = container(pods.get(&name).await?);
                Ok::<_, kube::Error>(c.and_then(|c| c.state?.running).map(|_| Instant::now()))
            }
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        release.send_replace(true);
        let alerts: Api<PodAlert> = Api::namespaced(client.clone(), &ns);
        let inc = flotilla_testenv::wait_for("the incident with its log", T, || {
            let (alerts, name, attempt) = (alerts.clone(), name.clone(), attempt);
            async move {
                let a = alerts.get(&format!("race-{attempt}")).await?;
                let incidents = a.status.map(|s| s.incidents).unwrap_or_default();
                Ok::<_, kube::Error>(
                    incidents.into_iter().find(|i| i.workload == format!("Pod/{name}") && !i.logs.is_empty()),
                )
            }
        })
        .await;
        let inc = match inc {
            Ok(inc) => inc,
            Err(e) => {
                let status = alerts.get(&format!("race-{attempt}")).await.map(|a| a.status);
                let reads = slow.log_reads.lock().unwrap().clone();
                panic!("{e}\nstatus: {status:#?}\nlog reads: {reads:?}\noperator logs:\n{}", operator.logs())
            }
        };
        let reads: Vec<(String, Instant)> =
            slow.log_reads.lock().unwrap().iter().filter(|(r, _)| r.contains(&format!("/{name}/"))).cloned().collect();
        let provoked = reads.first().is_some_and(|(q, at)| !q.contains("previous=true") && *at > up);
        if !provoked {
            eprintln!("attempt {attempt}: the race was not provoked (reads {reads:?}); again");
            continue;
        }
        assert!(inc.logs.contains("crashed-run-2"), "the crashed run's lines: {:?} (reads {reads:?})", inc.logs);
        assert!(!inc.logs.contains("later-run-line"), "the next run's lines: {:?}", inc.logs);
        delete_namespace(&client, &ns).await;
        return;
    }
    panic!("the race was provoked in none of 5 attempts\n{}", operator.logs());
}

/// A tenant with `edit` in one namespace cannot push pod-alert past its
/// chart's memory limit: 320 pods and 320 Deployments (no replicas) with
/// 250 KB of annotations each are 160 MB of objects its pod and workload
/// watches carry. Their lists stream (one object at a time) and keep
/// views without the annotations; answered in one piece (a list with
/// `resourceVersion=0`) or held whole, they would have the operator killed
/// under the chart's 128Mi at every start. The pods stay Pending (they
/// select no node): the bloated pods are still evaluated, as Pending
/// incidents.
#[tokio::test]
async fn a_tenants_bloated_pods_and_workloads_cannot_push_it_past_the_charts_memory_limit() {
    use flotilla_testenv::memory_limit::{MemoryLimit, bloat, chart_limit};
    use k8s_openapi::api::apps::v1::Deployment;
    // Not the one-node cluster the other tests share: nothing here needs a
    // node, and its own pods would only add to what is measured.
    let env = flotilla_testenv::shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-bloat").await.unwrap();
    let pending = flotilla_testenv::fixtures::pending_pod(json!({"app": "bloat"}), TOOLBOX_IMAGE);
    bloat(&Api::<Pod>::namespaced(client.clone(), &ns), 320, pending).await.unwrap();
    let idle = json!({"metadata": {}, "spec": {
        "replicas": 0,
        "selector": {"matchLabels": {"app": "idle"}},
        "template": {"metadata": {"labels": {"app": "idle"}}, "spec": {"containers": [{"name": "app", "image": TOOLBOX_IMAGE}]}},
    }});
    bloat(&Api::<Deployment>::namespaced(client.clone(), &ns), 320, idle).await.unwrap();
    create_podalert(
        &client,
        &ns,
        "bloat",
        json!({"alerts": {"checkRunningPods": true, "pendingAfter": "5s"}, "selector": {"matchLabels": {"app": "bloat"}}}),
    )
    .await
    .unwrap();
    let limit = MemoryLimit::new("pod-alert-bloat", chart_limit("pod-alert").unwrap()).unwrap();
    let mut operator = OPERATOR.start_limited(&env.kubeconfig, Some(&ns), &[], &LOOPBACK_SINKS, Some(&limit));
    // Ready (its caches listed) with every bloated pod held; then 20 s more.
    let peak = limit
        .outlived_holding(&mut operator, "flotilla_pod_alert_pods_cached", 320.0, T, Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("peak memory under the chart's limit: {peak:?} bytes");
    let s = wait_status(&client, &ns, "bloat", "the bloated pods' Pending incidents", T, |s| {
        s.incidents.iter().any(|i| i.workload.starts_with("Pod/bloat-") && i.reason == "Pending").then(|| s.clone())
    })
    .await;
    assert!(s.incidents.iter().all(|i| i.workload.starts_with("Pod/bloat-")), "{:#?}", s.incidents);
    assert!(!operator.logs().contains("panicked"));
    drop(operator);
    delete_namespace(&client, &ns).await;
}
