//! The guard on service-dns's memory per Service (issue 28): what its
//! Service cache keeps for realistic Services — the key, the shared
//! `ServiceInfo` and the map's slot — counted by the test allocator
//! (`flotilla_testenv::heap`), not sampled from RSS, against 1 KiB per
//! Service. RSS figures are `cargo xtask bench scale`'s.

use flotilla_shared::projection;
use flotilla_testenv::heap::heap_of;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::watcher;

use crate::desired::resource_id;
use crate::service::ServiceInfo;

/// Bytes the cache may hold per Service.
const BUDGET: usize = 1024;
/// Services in the measured cache (its map's slots are shared out).
const SERVICES: usize = 1000;

/// A Service as Helm installs it: labels, Helm's and kubectl's annotations,
/// managedFields, two ports, a dual-stack-ready spec.
fn realistic(i: usize) -> Service {
    let name = format!("checkout-api-{i:04}");
    let last_applied = format!(
        r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"annotations":{{}},"labels":{{"app.kubernetes.io/name":"{name}"}},"name":"{name}","namespace":"shop-production"}},"spec":{{"ports":[{{"name":"http","port":80,"targetPort":8080}},{{"name":"grpc","port":9090}}],"selector":{{"app.kubernetes.io/name":"{name}"}}}}}}"#
    );
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name,
            "namespace": format!("shop-{:03}-production", i % 100),
            "uid": format!("6f1d8a2e-4b7c-4e0a-9d3f-{i:012}"),
            "resourceVersion": "48213377",
            "creationTimestamp": "2026-01-12T09:14:55Z",
            "labels": {
                "app.kubernetes.io/name": name, "app.kubernetes.io/instance": "shop",
                "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/managed-by": "Helm",
                "helm.sh/chart": "checkout-api-1.4.2"
            },
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": last_applied,
                "meta.helm.sh/release-name": "shop", "meta.helm.sh/release-namespace": "shop-production",
                "flotilla.dev/ttl": "60"
            },
            "managedFields": [{"manager": "helm", "operation": "Update", "apiVersion": "v1",
                "time": "2026-01-12T09:14:55Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}, "f:spec": {"f:ports": {}, "f:selector": {}}}}]
        },
        "spec": {
            "type": "ClusterIP",
            "clusterIP": format!("10.96.{}.{}", i / 250, i % 250 + 1),
            "clusterIPs": [format!("10.96.{}.{}", i / 250, i % 250 + 1)],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                      {"name": "grpc", "port": 9090, "targetPort": 9090, "protocol": "TCP"}],
            "selector": {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": "shop"},
            "sessionAffinity": "None", "internalTrafficPolicy": "Cluster"
        },
        "status": {"loadBalancer": {}}
    }))
    .unwrap_or_else(|e| panic!("a realistic Service: {e}"))
}

#[test]
fn the_service_cache_holds_at_most_1_kib_per_service() {
    let services: Vec<Service> = (0..SERVICES).map(realistic).collect();
    // Fed as the watch feeds it (controller.rs): each Service becomes its
    // ServiceInfo under its resource id.
    let ((store, _writer), heap) = heap_of(|| {
        let (store, mut writer) = projection::store::<ServiceInfo>();
        for svc in &services {
            writer.apply(watcher::Event::Apply(svc.clone()), |svc| {
                let info = ServiceInfo::from(svc);
                (resource_id(&info.namespace, &info.name), info)
            });
        }
        (store, writer)
    });
    assert_eq!(store.state().len(), SERVICES);
    let per_service = heap.bytes / SERVICES;
    let with_malloc = heap.with_malloc_overhead() / SERVICES;
    println!("service-dns holds {per_service} B per Service ({with_malloc} B with malloc's per-chunk cost)");
    assert!(
        per_service <= BUDGET,
        "service-dns holds {per_service} B per Service in its cache, over the budget of {BUDGET} B"
    );
}
