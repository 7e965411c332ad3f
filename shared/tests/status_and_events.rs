//! Status by server-side apply with condition semantics, and Events, against
//! the real API.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::widget::{Widget, WidgetStatus};
use common::{T, install_widget_crd, widget};
use flotilla_shared::conditions::{READY, Status};
use flotilla_shared::{Conditions, Events, apply_status};
use flotilla_testenv::{shared, wait_for};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use serde_json::json;

const MANAGER: &str = "flotilla-toy";

fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap()
}

async fn ready_of(api: &Api<Widget>, name: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    let w = api.get(name).await.unwrap();
    w.status.unwrap().conditions.into_iter().find(|c| c.type_ == READY).expect("Ready present")
}

/// Reads the object, sets Ready as of `at`, applies.
async fn apply_ready(api: &Api<Widget>, name: &str, status: Status, reason: &str, at: Timestamp) -> Widget {
    let w = api.get(name).await.unwrap();
    let existing = w.status.as_ref().map(|s| s.conditions.as_slice());
    let mut c = Conditions::new(existing, w.metadata.generation);
    c.set_at(READY, status, reason, format!("{reason} message"), at);
    let st = WidgetStatus { observed_generation: w.metadata.generation, conditions: c.into_vec() };
    apply_status(api, name, MANAGER, &st).await.unwrap()
}

#[tokio::test]
async fn condition_transition_times_and_observed_generation() {
    let env = shared();
    install_widget_crd(&env).await;
    let ns = env.namespace("status").await.unwrap();
    let api: Api<Widget> = Api::namespaced(env.client().await, &ns);
    api.create(&PostParams::default(), &widget("w", json!({"message": "a"}))).await.unwrap();

    apply_ready(&api, "w", Status::True, "Reconciled", ts(1_000_000)).await;
    let first = ready_of(&api, "w").await;
    assert_eq!(first.last_transition_time.0, ts(1_000_000));
    assert_eq!(first.observed_generation, Some(1));

    // Same status again (later): the transition time stays.
    apply_ready(&api, "w", Status::True, "StillReconciled", ts(2_000_000)).await;
    let second = ready_of(&api, "w").await;
    assert_eq!(second.last_transition_time.0, ts(1_000_000));
    assert_eq!(second.reason, "StillReconciled");

    // A spec change bumps the generation; observedGeneration follows it.
    api.patch("w", &PatchParams::default(), &Patch::Merge(json!({"spec": {"message": "b"}}))).await.unwrap();
    let applied = apply_ready(&api, "w", Status::False, "Broken", ts(3_000_000)).await;
    let third = ready_of(&api, "w").await;
    assert_eq!(third.last_transition_time.0, ts(3_000_000), "status changed: the transition time moves");
    assert_eq!(third.observed_generation, Some(2));
    assert_eq!(applied.status.unwrap().observed_generation, Some(2));
}

#[tokio::test]
async fn another_field_managers_status_fields_survive_our_apply() {
    let env = shared();
    install_widget_crd(&env).await;
    let ns = env.namespace("status").await.unwrap();
    let api: Api<Widget> = Api::namespaced(env.client().await, &ns);
    api.create(&PostParams::default(), &widget("w", json!({}))).await.unwrap();

    let other = json!({
        "apiVersion": "toy.flotilla.dev/v1alpha1", "kind": "Widget",
        "status": {"conditions": [{
            "type": "External", "status": "True", "reason": "SetElsewhere", "message": "",
            "lastTransitionTime": "2020-01-01T00:00:00Z"
        }]}
    });
    api.patch_status("w", &PatchParams::apply("someone-else").force(), &Patch::Apply(&other)).await.unwrap();
    apply_ready(&api, "w", Status::True, "Reconciled", ts(1_000_000)).await;
    apply_ready(&api, "w", Status::False, "Broken", ts(2_000_000)).await;

    let w = api.get("w").await.unwrap();
    let types: Vec<String> = w.status.unwrap().conditions.into_iter().map(|c| c.type_).collect();
    assert!(types.contains(&"External".to_string()), "the other manager's condition was clobbered: {types:?}");
    assert!(types.contains(&READY.to_string()));
    let managers: Vec<String> =
        w.metadata.managed_fields.unwrap_or_default().into_iter().filter_map(|m| m.manager).collect();
    assert!(managers.contains(&MANAGER.to_string()) && managers.contains(&"someone-else".to_string()), "{managers:?}");
}

#[tokio::test]
async fn events_are_published_as_the_operator_without_blocking() {
    let env = shared();
    install_widget_crd(&env).await;
    let ns = env.namespace("events").await.unwrap();
    let client = env.client().await;
    let api: Api<Widget> = Api::namespaced(client.clone(), &ns);
    let w = api.create(&PostParams::default(), &widget("w", json!({}))).await.unwrap();
    let events = Events::new(client.clone(), "toy", "toy-pod-0");
    for _ in 0..3 {
        events.normal(&w.object_ref(&()), "Reconciled", "Reconcile", "widget w is ready");
    }
    events.warning(&w.object_ref(&()), "Refused", "Reconcile", "x".repeat(5000));

    // Publishing never waits for the API server: against one that accepts
    // connections and never answers, 10,000 Events (more than the queue
    // holds) are handed over and the calls return.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config = kube::Config::new(format!("http://{}", silent.local_addr().unwrap()).parse().unwrap());
    let stuck = Events::new(kube::Client::try_from(config).unwrap(), "toy", "toy-pod-0");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let oref = w.object_ref(&());
    std::thread::spawn(move || {
        for i in 0..10_000 {
            stuck.warning(&oref, "Refused", "Reconcile", format!("attempt {i}"));
        }
        let _ = done_tx.send(());
    });
    done_rx.recv_timeout(T).expect("publishing waited for an API server that never answers");
    drop(silent);

    let ev_api: Api<Event> = Api::namespaced(client, &ns);
    let found = wait_for("both events", T, || async {
        let list = ev_api.list(&ListParams::default()).await?;
        let has = |r: &str| list.items.iter().any(|e| e.reason.as_deref() == Some(r));
        Ok::<_, kube::Error>((has("Reconciled") && has("Refused")).then_some(list.items))
    })
    .await
    .unwrap();
    for e in &found {
        assert_eq!(e.reporting_controller.as_deref(), Some("flotilla-toy"));
        assert_eq!(e.reporting_instance.as_deref(), Some("toy-pod-0"));
        assert_eq!(e.regarding.as_ref().and_then(|r| r.name.as_deref()), Some("w"));
        assert!(e.note.as_deref().unwrap_or_default().len() <= 1024, "notes are cut to the API limit");
    }
    let warning = found.iter().find(|e| e.reason.as_deref() == Some("Refused")).unwrap();
    assert_eq!(warning.type_.as_deref(), Some("Warning"));

    // The three identical events are one Event with a series of three.
    let series = wait_for("the repeats to be aggregated", T, || async {
        let list = ev_api.list(&ListParams::default()).await?;
        let same: Vec<Event> = list.items.into_iter().filter(|e| e.reason.as_deref() == Some("Reconciled")).collect();
        let count = same.first().and_then(|e| e.series.as_ref()).map(|s| s.count);
        Ok::<_, kube::Error>((same.len() == 1 && count == Some(3)).then_some(count))
    })
    .await;
    assert!(series.is_ok(), "{series:?}");

    // Same reason, another message: a new Event, never hidden in the first one's count.
    events.normal(&w.object_ref(&()), "Reconciled", "Reconcile", "widget w changed");
    wait_for("the second message", T, || async {
        let list = ev_api.list(&ListParams::default()).await?;
        let notes: Vec<String> = list
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("Reconciled"))
            .filter_map(|e| e.note)
            .collect();
        Ok::<_, kube::Error>((notes.len() == 2 && notes.iter().any(|n| n == "widget w changed")).then_some(()))
    })
    .await
    .unwrap();
}
