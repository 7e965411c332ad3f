//! What the author of a pod — untrusted, with `edit` in one namespace —
//! can do to pod-debugger through the objects it watches. The RBAC and
//! protected-namespace attacks are in `on_node.rs`; admission's in
//! `validation.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use flotilla_testenv::memory_limit::{MemoryLimit, bloat, chart_limit};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;

const T: Duration = Duration::from_secs(180);

/// A tenant cannot push pod-debugger past its chart's memory limit: 320
/// pods with 250 KB of annotations each are 80 MB of objects its pod watch
/// carries. Its list streams (one pod at a time) and keeps a view without
/// the annotations; answered in one piece (a list with
/// `resourceVersion=0`) or held whole, the pods would have the operator
/// killed under the chart's 128Mi at every start. The pods stay Pending
/// (they select no node) and are still matched.
#[tokio::test]
async fn a_tenants_bloated_pods_cannot_push_it_past_the_charts_memory_limit() {
    // Not the one-node cluster the other tests share: nothing here needs a
    // node, and its own pods would only add to what is measured.
    let env = flotilla_testenv::shared();
    OPERATOR.install_crds(&env).await;
    let client = env.client().await;
    let ns = env.namespace("pd-bloat").await.unwrap();
    let pending = flotilla_testenv::fixtures::pending_pod(json!({"app": "bloat"}), "busybox:latest");
    bloat(&Api::<Pod>::namespaced(client.clone(), &ns), 320, pending).await.unwrap();
    create_debugger(
        &client,
        &ns,
        "bloat",
        json!({"selector": {"matchLabels": {"app": "bloat"}}, "image": "busybox:latest"}),
    )
    .await
    .unwrap();
    let limit = MemoryLimit::new("pod-debugger-bloat", chart_limit("pod-debugger").unwrap()).unwrap();
    let mut operator = OPERATOR.start_limited(&env.kubeconfig, Some(&ns), &[], &[], Some(&limit));
    // Ready (its caches listed) with every bloated pod held; then 20 s more.
    let peak = limit
        .outlived_holding(&mut operator, "flotilla_pod_debugger_pods_cached", 320.0, T, Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("peak memory under the chart's limit: {peak:?} bytes");
    let s =
        wait_status(&client, &ns, "bloat", "the bloated pods matched", T, |s| (s.matched == 320).then(|| s.clone()))
            .await;
    assert_eq!(s.injected, 0, "{s:#?}");
    assert!(!operator.logs().contains("panicked"));
    drop(operator);
    let _ = Api::<Namespace>::all(client).delete(&ns, &DeleteParams::default()).await;
}
