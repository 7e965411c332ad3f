//! Workload-level signals on the one-node cluster (issue 32), with real
//! controllers and pods, and the operator holding only the chart's RBAC: a
//! Deployment whose rollout passes its progress deadline, a StatefulSet
//! whose rollout does not progress for `rolloutTimeout`, a Job that fails
//! (its failed pod's log tail), a CronJob whose newest run failed (resolved
//! by a later run that completes) and a CronJob whose runs are skipped
//! (concurrencyPolicy Forbid behind a run that never ends) are incidents of
//! the workloads, sent to a webhook.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::cluster::node::images::TOOLBOX_IMAGE;
use flotilla_testenv::node;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

/// The CronJob that misses runs needs up to a minute for its first run, a
/// minute to the next one due, and 30 s of grace.
const T: Duration = Duration::from_secs(240);

const MISSING_IMAGE: &str = "localhost/flotilla/does-not-exist:1";

fn pod_spec(script: &str) -> Value {
    json!({"terminationGracePeriodSeconds": 1, "restartPolicy": "Never", "containers": [
        {"name": "main", "image": TOOLBOX_IMAGE, "command": ["sh", "-c", script]}
    ]})
}

fn job(name: &str, script: &str, owner: Option<&CronJob>) -> Job {
    let owner = owner.map(|c| {
        json!([{"apiVersion": "batch/v1", "kind": "CronJob", "name": c.metadata.name, "uid": c.metadata.uid, "controller": true}])
    });
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": owner},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {"app": "batch"}}, "spec": pod_spec(script)}}
    }))
    .unwrap()
}

fn cronjob(name: &str, schedule: &str, extra: Value) -> CronJob {
    let mut spec = json!({
        "schedule": schedule,
        "jobTemplate": {"spec": {"backoffLimit": 0, "template": {"spec": pod_spec("exec sleep 3600")}}}
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

#[tokio::test]
async fn stalled_rollouts_failed_jobs_and_missed_runs_are_incidents_of_their_workloads() {
    let env = node();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pa-workloads").await.unwrap();
    let receiver = Receiver::start(0).await;
    let _operator = start_operator_with_chart_rbac(&env, &ns, &LOOPBACK_SINKS).await;
    secret(&client, &ns, "hooks", &[("webhook", &receiver.url("/webhook"))]).await;
    create_podalert(
        &client,
        &ns,
        "workloads",
        json!({
            "alerts": {
                "checkRunningPods": true, "rollouts": true, "jobs": true, "rolloutTimeout": "1m", "resolveAfter": "5s",
                "reasons": ["RolloutStuck", "JobFailed", "MissedSchedule"]
            },
            "logs": {"tailLines": 20},
            "sinks": {"webhook": {"urlSecretRef": {"name": "hooks", "key": "webhook"}}}
        }),
    )
    .await
    .unwrap();

    let post = PostParams::default();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let stuck: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "stuck"},
        "spec": {"replicas": 1, "progressDeadlineSeconds": 10, "selector": {"matchLabels": {"app": "stuck"}},
                 "template": {"metadata": {"labels": {"app": "stuck"}}, "spec": {"terminationGracePeriodSeconds": 1,
                   "containers": [{"name": "app", "image": MISSING_IMAGE, "imagePullPolicy": "IfNotPresent"}]}}}
    }))
    .unwrap();
    deployments.create(&post, &stuck).await.unwrap();
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let db: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"terminationGracePeriodSeconds": 1,
                   "containers": [{"name": "db", "image": MISSING_IMAGE, "imagePullPolicy": "IfNotPresent"}]}}}
    }))
    .unwrap();
    statefulsets.create(&post, &db).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    jobs.create(&post, &job("fails", "echo job-broke-here; exit 3", None)).await.unwrap();
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), &ns);
    // A suspended CronJob whose runs the test starts itself (its own
    // Jobs, as the CronJob controller names and owns them).
    let nightly = cronjobs.create(&post, &cronjob("nightly", "0 3 * * *", json!({"suspend": true}))).await.unwrap();
    jobs.create(&post, &job("nightly-1", "echo nightly-broke; exit 1", Some(&nightly))).await.unwrap();
    let minutely = json!({"concurrencyPolicy": "Forbid", "startingDeadlineSeconds": 30});
    cronjobs.create(&post, &cronjob("minutely", "* * * * *", minutely)).await.unwrap();

    let found = wait_status(&client, &ns, "workloads", "the five workload incidents to fire", T, |s| {
        let firing = |workload: &str, reason: &str| {
            s.incidents.iter().find(|i| i.workload == workload && i.reason == reason && i.state == "Firing").cloned()
        };
        Some((
            firing("Deployment/stuck", "RolloutStuck")?,
            firing("StatefulSet/db", "RolloutStuck")?,
            firing("Job/fails", "JobFailed").filter(|i| !i.logs.is_empty())?,
            firing("CronJob/nightly", "JobFailed").filter(|i| !i.logs.is_empty())?,
            firing("CronJob/minutely", "MissedSchedule")?,
        ))
    })
    .await;
    let (deployment, statefulset, failed, nightly_failed, missed) = found;
    assert!(deployment.message.contains("timed out progressing"), "{deployment:?}");
    assert_eq!(statefulset.message, "rollout not progressing for 1m: 1 of 2 pods updated", "{statefulset:?}");
    // A workload's own problem names no pod; a failed Job's, the pod its log is from.
    assert!(statefulset.pods.is_empty() && statefulset.pod_count == 0, "{statefulset:?}");
    assert_eq!(failed.pods.len(), 1, "{failed:?}");
    assert!(failed.message.starts_with("BackoffLimitExceeded: "), "{failed:?}");
    assert!(failed.logs.contains("job-broke-here"), "the failed pod's log: {:?}", failed.logs);
    assert!(
        nightly_failed.message.starts_with("last run nightly-1 failed: BackoffLimitExceeded"),
        "{nightly_failed:?}"
    );
    assert!(nightly_failed.logs.contains("nightly-broke"), "{:?}", nightly_failed.logs);
    assert!(missed.message.contains("concurrencyPolicy Forbid, 1 Job of it still running"), "{missed:?}");
    for workload in ["Deployment/stuck", "StatefulSet/db", "Job/fails", "CronJob/nightly", "CronJob/minutely"] {
        flotilla_testenv::wait_for(&format!("{workload}'s opening at the webhook"), Duration::from_secs(30), || {
            let n = receiver.webhook_events("opened", workload).len();
            async move { Ok::<_, std::convert::Infallible>((n == 1).then_some(())) }
        })
        .await
        .unwrap();
    }

    // The CronJob's next run completes: its newest finished run is a
    // success, and its incident resolves.
    jobs.create(&post, &job("nightly-2", "echo fine", Some(&nightly))).await.unwrap();
    wait_status(&client, &ns, "workloads", "CronJob/nightly's incident to resolve", Duration::from_secs(90), |s| {
        s.incidents.iter().find(|i| i.workload == "CronJob/nightly" && i.state == "Resolved").map(|_| ())
    })
    .await;
    delete_namespace(&client, &ns).await;
}
