//! The guard on service-dns's memory per Service (issue 28): what its
//! Service cache keeps for realistic Services — the key, the shared
//! `ServiceInfo` and the map's slot — and what its copy of the zone keeps
//! between listings (the A record and the ownership TXT of each Service),
//! counted by the test allocator (`flotilla_testenv::heap`), not sampled
//! from RSS, against 1 KiB per Service. RSS figures are `cargo xtask bench
//! scale`'s.

use flotilla_shared::projection;
use flotilla_testenv::heap::heap_of;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::watcher;

use std::collections::BTreeSet;

use aws_sdk_route53::types as r53;
use flotilla_testenv::heap::Heap;

use crate::apply::update_zone;
use crate::desired::{Claim, Desired, Naming, desired};
use crate::grant::HostnameAnnotations;
use crate::hostname::Template;
use crate::owner;
use crate::plan::{ChangeGroup, Policy, Rules, plan_with};
use crate::route53::{Listing, to_route53};
use crate::service::ServiceInfo;

/// Bytes the cache may hold per Service.
const BUDGET: usize = 1024;
/// Bytes the cache may hold per Service, malloc's per-chunk cost included,
/// just above what it holds so that it cannot grow unnoticed. Measured at
/// 1,000 Services:
/// - 594 B: namespace, name and the store's key in three strings, the UID
///   as text, `String`s for the addresses and annotations;
/// - 363 B: one key (`service/<namespace>/<name>`) holding the namespace
///   and name as its slices, the UID's 16 bytes (`flotilla_shared::uid`),
///   boxed strings, the annotations' keys as the static ones (service.rs).
const CACHE_BUDGET: usize = 380;
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

/// The Service cache as the watch feeds it (controller.rs), for
/// `services`: each Service becomes its ServiceInfo under its resource id.
/// Returns its heap per Service (without, with malloc's per-chunk cost).
fn service_cache_per_service(services: &[Service]) -> (usize, usize) {
    let ((store, _writer), heap) = heap_of(|| {
        let (store, mut writer) = projection::keyed_store::<ServiceInfo>();
        for svc in services {
            writer.apply(watcher::Event::Apply(svc.clone()), |svc| {
                let info = ServiceInfo::from(svc);
                (info.resource_id().to_string(), info)
            });
        }
        (store, writer)
    });
    assert_eq!(store.state().len(), services.len());
    (heap.bytes / services.len(), heap.with_malloc_overhead() / services.len())
}

#[test]
fn the_service_cache_holds_at_most_1_kib_per_service() {
    let services: Vec<Service> = (0..SERVICES).map(realistic).collect();
    let (per_service, with_malloc) = service_cache_per_service(&services);
    println!("service-dns holds {per_service} B per Service ({with_malloc} B with malloc's per-chunk cost)");
    assert!(
        per_service <= BUDGET,
        "service-dns holds {per_service} B per Service in its cache, over the budget of {BUDGET} B"
    );
    assert!(
        with_malloc <= CACHE_BUDGET,
        "service-dns's Service cache holds {with_malloc} B per Service with malloc's cost, over its budget of \
         {CACHE_BUDGET} B"
    );
}

/// Services whose records are in the measured zone copy.
const ZONE_SERVICES: usize = 2000;
/// Bytes the zone copy may hold per Service, malloc's per-chunk cost
/// included, just above what it holds so that it cannot grow unnoticed.
/// Measured at 2,000 Services, after a listing (after the first sync
/// wrote the records):
/// - 541 B (504 B): `RecordSet` of `String`s and `Vec`s, 88 B inline;
/// - 442 B (423 B): boxed strings and slice, 56 B inline (model.rs);
/// - 420 B (420 B): without the spare room of the copy's growth
///   (route53.rs `Listing::done`, apply.rs `update_zone`);
/// - 372 B: a record set's one value kept without a slice of one
///   (model.rs `Values`).
const ZONE_BUDGET: usize = 380;
/// Issue 28's budget for all service-dns holds per Service: the Service
/// cache and the zone copy, malloc's per-chunk cost included (1,132 B
/// before the zone copy was made smaller, 1,011 B after, 775 B with the
/// smaller Service cache, 727 B with a record set's one value unboxed).
const COMBINED_BUDGET: usize = 1024;

/// The realistic Service `i` as `team-<i>/checkout-api-<i>`: one name per
/// Service, `checkout-api-042.team-042.example.com` with the template below.
fn zone_service(i: usize) -> Service {
    let mut svc = realistic(i);
    svc.metadata.name = Some(format!("checkout-api-{i:03}"));
    svc.metadata.namespace = Some(format!("team-{i:03}"));
    svc
}

/// How the measured Services are named: `{name}.{namespace}.example.com`.
fn naming() -> Naming {
    Naming {
        template: Template::parse("{name}.{namespace}.{domain}").unwrap_or_else(|e| panic!("template: {e}")),
        prefix: String::new(),
        domain: "example.com".to_string(),
        zone_id: "Z1".to_string(),
        zones: std::sync::Arc::new(crate::zones::ZoneSet::new(vec![crate::zone::Zone {
            id: "Z1".into(),
            name: "example.com".into(),
        }])),
        default_ttl: 300,
        max_ttl: 86_400,
        max_hostnames: 10,
        annotations: HostnameAnnotations::Off,
        publish_headless: true,
        pod_template: Template::parse_pod("{hostname}.{name}.{domain}").unwrap_or_else(|e| panic!("template: {e}")),
        max_endpoints: 100,
        alias_load_balancers: true,
    }
}

/// The claims of `infos` as a sync builds them (sync.rs `wanted`).
fn claims_of(infos: &[ServiceInfo]) -> Vec<Claim> {
    let naming = naming();
    let mut claims = Vec::new();
    for info in infos {
        if let Desired::Publish(c) = desired(info, &naming, None).desired {
            claims.push(c);
        }
    }
    assert_eq!(claims.len(), infos.len(), "every Service publishes");
    claims
}

/// The changes that publish `services` into an empty zone (`plan_with`):
/// the A record and the ownership TXT the registry writes, per Service.
fn first_sync(services: &[Service]) -> Vec<ChangeGroup> {
    let infos: Vec<ServiceInfo> = services.iter().cloned().map(ServiceInfo::from).collect();
    let claims = claims_of(&infos);
    // The owner id as derived from a cluster's UID (owner.rs).
    let owner_id = owner::derive("0f6f2c3e-8a1b-4f7e-9c1d-2b3a4c5d6e7f", None, None);
    let rules = Rules { owner_id: &owner_id, policy: Policy::Sync, adopt: None, grace: 0, now: 0 };
    plan_with(&claims, &BTreeSet::new(), &[], &rules).groups
}

/// The zone copy's heap per Service (without, with malloc's per-chunk
/// cost), as held after a full listing (route53.rs `list`: Route53's
/// record sets read page by page) and after the first sync wrote them
/// (apply.rs `update_zone` over an empty zone); the larger of the two.
fn zone_copy_per_service(services: &[Service]) -> (usize, usize) {
    let groups = first_sync(services);
    let written: Vec<&ChangeGroup> = groups.iter().collect();
    // What Route53 hands back: the records written, as its SDK types.
    let listed: Vec<r53::ResourceRecordSet> = groups
        .iter()
        .flat_map(|g| &g.changes)
        .map(|c| {
            let change = to_route53(c.action, &c.record).unwrap_or_else(|e| panic!("{e}"));
            change.resource_record_set().cloned().unwrap_or_else(|| panic!("a change without its record set"))
        })
        .collect();
    assert_eq!(listed.len(), 2 * services.len(), "an A record and its ownership TXT per Service");
    let (after_list, list_heap) = heap_of(|| {
        let mut listing = Listing::default();
        for page in listed.chunks(300) {
            listing.add(page);
        }
        listing.done()
    });
    let (after_write, write_heap) = heap_of(|| update_zone(Vec::new(), &written));
    assert_eq!((after_list.len(), after_write.len()), (listed.len(), listed.len()));
    let n = services.len();
    let per = |h: Heap| (h.bytes / n, h.with_malloc_overhead() / n);
    println!(
        "zone copy per Service: listed {:?} B, written {:?} B (without, with malloc)",
        per(list_heap),
        per(write_heap)
    );
    let worst =
        if list_heap.with_malloc_overhead() >= write_heap.with_malloc_overhead() { list_heap } else { write_heap };
    per(worst)
}

#[test]
fn the_zone_copy_and_the_service_cache_hold_at_most_1_kib_per_service() {
    let services: Vec<Service> = (0..ZONE_SERVICES).map(zone_service).collect();
    let (zone, zone_malloc) = zone_copy_per_service(&services);
    let (cache, cache_malloc) = service_cache_per_service(&services);
    println!(
        "per Service: zone copy {zone} B ({zone_malloc} B with malloc), Service cache {cache} B ({cache_malloc} B), \
         both {} B ({} B)",
        zone + cache,
        zone_malloc + cache_malloc
    );
    assert!(
        zone_malloc <= ZONE_BUDGET,
        "the zone copy holds {zone_malloc} B per Service with malloc's cost, over its budget of {ZONE_BUDGET} B"
    );
    assert!(
        zone_malloc + cache_malloc <= COMBINED_BUDGET,
        "service-dns holds {} B per Service with malloc's cost (zone copy {zone_malloc} B, Service cache \
         {cache_malloc} B), over issue 28's {COMBINED_BUDGET} B",
        zone_malloc + cache_malloc
    );
}

/// Bytes the claims a sync builds may hold per Service, malloc's per-chunk
/// cost included. Not kept between syncs, but built for every Service at
/// every sync: 536 B when each claim's records kept a Vec's room for four
/// record sets, 368 B with room for what it holds (desired.rs `publish`),
/// 344 B with a record set's one value kept without a slice.
const CLAIMS_BUDGET: usize = 350;

#[test]
fn the_claims_a_sync_builds_stay_within_their_budget_per_service() {
    let infos: Vec<ServiceInfo> = (0..ZONE_SERVICES).map(|i| ServiceInfo::from(zone_service(i))).collect();
    let (claims, heap) = heap_of(|| claims_of(&infos));
    let per_service = heap.with_malloc_overhead() / claims.len();
    println!("a sync's claims: {} B per Service ({per_service} B with malloc's cost)", heap.bytes / claims.len());
    assert!(
        per_service <= CLAIMS_BUDGET,
        "a sync's claims hold {per_service} B per Service with malloc's cost, over their budget of {CLAIMS_BUDGET} B"
    );
}
