//! Realistic objects for per-object memory budgets (issue 28): what a
//! Deployment's pod looks like on a busy cluster — Helm's and the
//! Deployment controller's labels, a few annotations, managedFields of two
//! managers, two containers with env and mounts, a crash-looping sidecar's
//! last state. What an operator keeps of one is what it holds per pod.

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

/// Pod `i` of a Deployment in namespace `team-<i % 100>`.
pub fn deployment_pod(i: usize) -> Pod {
    let app = format!("checkout-api-{:03}", i % 500);
    let ns = format!("team-{:03}", i % 100);
    let hash = format!("7d9f8c{:04x}", i % 4096);
    let container = |name: &str, image: &str| {
        json!({"name": name, "image": image, "imagePullPolicy": "IfNotPresent",
            "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
            "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
            "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}]})
    };
    let status = |name: &str, image: &str, restarts: i32| {
        json!({"name": name, "image": image, "imageID": format!("{image}@sha256:{:064x}", i),
            "containerID": format!("containerd://{:064x}", i * 2 + 1), "ready": true, "started": true,
            "restartCount": restarts, "state": {"running": {"startedAt": "2026-11-20T08:00:00Z"}},
            "lastState": if restarts > 0 { json!({"terminated": {"exitCode": 137, "reason": "OOMKilled",
                "startedAt": "2026-11-20T07:00:00Z", "finishedAt": "2026-11-20T07:59:00Z",
                "containerID": format!("containerd://{:064x}", i * 2)}}) } else { json!({}) }})
    };
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("{app}-{hash}-{:05}", i), "namespace": ns,
            "uid": format!("9b2c4e1a-0d3f-4a8b-b7e6-{i:012}"),
            "resourceVersion": format!("{}", 48_000_000 + i), "creationTimestamp": "2026-11-20T07:00:00Z",
            "generateName": format!("{app}-{hash}-"),
            "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": "shop",
                "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/managed-by": "Helm",
                "app.kubernetes.io/version": "1.4.2", "helm.sh/chart": "checkout-api-1.4.2",
                "pod-template-hash": hash, "team": "payments", "tier": "backend"},
            "annotations": {"checksum/config": format!("{:064x}", i % 500),
                "kubectl.kubernetes.io/restartedAt": "2026-11-19T12:00:00Z",
                "prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-{hash}"),
                "uid": format!("1f0e2d3c-4b5a-6978-8a9b-{i:012}"), "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": "2026-11-20T07:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}}}, "f:spec": {"f:containers": {}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-20T08:00:00Z",
                 "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}}}}
            ]
        },
        "spec": {
            "containers": [container("app", "registry.example.com/shop/checkout-api:1.4.2"), container("envoy", "registry.example.com/mesh/envoy:1.31.0")],
            "volumes": [{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "checkout-api", "nodeName": format!("node-{:04}", i % 1000),
            "schedulerName": "default-scheduler", "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.3.17", "podIP": format!("10.244.{}.{}", i / 250 % 250, i % 250 + 1),
            "podIPs": [{"ip": format!("10.244.{}.{}", i / 250 % 250, i % 250 + 1)}], "qosClass": "Burstable",
            "startTime": "2026-11-20T07:00:01Z",
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": "2026-11-20T07:00:03Z"},
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-20T07:00:01Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T08:00:05Z"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-11-20T08:00:05Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-20T07:00:00Z"}
            ],
            "containerStatuses": [status("app", "registry.example.com/shop/checkout-api:1.4.2", 0), status("envoy", "registry.example.com/mesh/envoy:1.31.0", (i % 7) as i32)]
        }
    }))
    .unwrap_or_else(|e| panic!("a realistic pod: {e}"))
}

/// What a pod cache holds per pod: `build` makes the cache from `count`
/// realistic pods ([`deployment_pod`]) and returns how many it holds; the
/// heap bytes it keeps (`crate::heap`, counted, not sampled) are shared
/// out over them, without and with malloc's per-chunk cost. Needs the
/// counting allocator as the test binary's global allocator.
pub fn held_per_pod(count: usize, build: impl FnOnce(&[Pod]) -> Box<dyn std::any::Any>) -> (usize, usize) {
    let pods: Vec<Pod> = (0..count).map(deployment_pod).collect();
    let (cache, heap) = crate::heap::heap_of(|| build(&pods));
    drop(cache);
    (heap.bytes / count.max(1), heap.with_malloc_overhead() / count.max(1))
}

/// A pod that stays Pending for good (it selects a node label no node
/// has), so never started: `labels` on it, one container of `image`.
/// Name it in `metadata` (or let `memory_limit::bloat` do).
pub fn pending_pod(labels: serde_json::Value, image: &str) -> serde_json::Value {
    json!({"metadata": {"labels": labels}, "spec": {
        "nodeSelector": {"flotilla.dev/no-such-node": "x"},
        "containers": [{"name": "app", "image": image}],
    }})
}
