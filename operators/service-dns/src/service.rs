//! What service-dns keeps of a Service: the few fields it reads, in a struct
//! of its own. A k8s-openapi `Service` takes about 1.2 KiB even with every
//! unused field emptied (ObjectMeta and ServiceSpec are wide structs of
//! options); this takes under a third of that with malloc's costs (363 B
//! for a Helm-installed Service, `heap_budget.rs`), in few allocations: the
//! namespace and name are slices of the store's key, the UID 16 bytes,
//! each string boxed without spare room.

use flotilla_shared::projection::HasKey;
use flotilla_shared::uid::Uid;
use k8s_openapi::api::core::v1::Service;

use crate::desired::resource_id;

/// The fields of a Service that decide its records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceInfo {
    /// Its resource id, `service/<namespace>/<name>` ([`resource_id`]):
    /// the store's key, and the namespace and name as its slices (one
    /// allocation for the three).
    key: Box<str>,
    /// The namespace's length in `key` (a namespace name is at most 63 bytes).
    namespace_len: u8,
    pub uid: Option<Uid>,
    /// `metadata.creationTimestamp` in Unix seconds (`i64::MAX` when
    /// absent): the older Service wins a contested name.
    pub created: i64,
    /// `spec.type: ExternalName` (no ClusterIP, nothing to publish).
    pub external_name: bool,
    /// `spec.publishNotReadyAddresses`: a headless Service publishes its
    /// not-ready endpoints too.
    pub publish_not_ready: bool,
    /// `spec.clusterIPs`, or `spec.clusterIP` when the list is empty.
    pub cluster_ips: Box<[Box<str>]>,
    /// `status.loadBalancer.ingress[].ip`.
    pub ingress_ips: Box<[Box<str>]>,
    /// `status.loadBalancer.ingress[].hostname`.
    pub ingress_hostnames: Box<[Box<str>]>,
    /// The annotations that decide records ([`KEPT`]), each at most its
    /// bound long; of the hostname annotations only the one read.
    pub annotations: Box<[(&'static str, Box<str>)]>,
    /// A kept annotation longer than its bound, and its length: not held,
    /// the Service skipped with a Warning (see [`KEPT`]).
    pub oversized: Oversized,
}

/// The longest hostname annotation read: 16 KiB (some 68 names of the
/// longest allowed, hundreds of usual ones), or 256 bytes a name when
/// `--max-hostnames-per-service` allows more than 64.
pub const MAX_HOSTNAMES_VALUE: usize = 16 * 1024;

/// The hostname annotation's bound under `--max-hostnames-per-service`.
pub fn hostnames_bound(max_hostnames: usize) -> usize {
    MAX_HOSTNAMES_VALUE.max(max_hostnames.saturating_mul(256))
}
/// The longest value of every other kept annotation (a TTL, `true`, a zone id).
pub const MAX_VALUE: usize = 256;

/// The annotations that decide records, each with the longest value read;
/// the hostname ones in the order they are read (ours, then external-dns's
/// newer prefix, then its older one). Everything else on a Service (up to
/// the API server's 256 KiB of annotations) is dropped as it is read, and a
/// value over its bound is not held either: a tenant's Services cannot make
/// the operator hold more than about 18 KiB each, whatever they carry (with
/// the default `--max-hostnames-per-service`; see [`hostnames_bound`]).
pub const KEPT: &[(&str, usize)] = &[
    (crate::desired::ANNOTATION_HOSTNAME, MAX_HOSTNAMES_VALUE),
    (crate::extdns::EXTERNAL_DNS_HOSTNAME, MAX_HOSTNAMES_VALUE),
    (crate::extdns::EXTERNAL_DNS_ALPHA_HOSTNAME, MAX_HOSTNAMES_VALUE),
    (crate::desired::ANNOTATION_TTL, MAX_VALUE),
    (crate::extdns::EXTERNAL_DNS_TTL, MAX_VALUE),
    (crate::extdns::EXTERNAL_DNS_ALPHA_TTL, MAX_VALUE),
    (crate::desired::ANNOTATION_DNS, MAX_VALUE),
    (crate::desired::ANNOTATION_TARGET, MAX_VALUE),
    (crate::desired::ANNOTATION_POD_RECORDS, MAX_VALUE),
    (crate::alias::ANNOTATION_ALIAS, MAX_VALUE),
    (crate::alias::ANNOTATION_ALIAS_ZONE, MAX_VALUE),
    (crate::alias::ANNOTATION_EVALUATE_TARGET_HEALTH, MAX_VALUE),
    (crate::alias::ANNOTATION_IP_ADDRESS_TYPE, MAX_VALUE),
    (crate::zones::ANNOTATION_ZONES, MAX_VALUE),
    (crate::routing::ANNOTATIONS[0], MAX_VALUE),
    (crate::routing::ANNOTATIONS[1], MAX_VALUE),
    (crate::routing::ANNOTATIONS[2], MAX_VALUE),
    (crate::routing::ANNOTATIONS[3], MAX_VALUE),
    (crate::routing::ANNOTATIONS[4], MAX_VALUE),
    (crate::routing::ANNOTATIONS[5], MAX_VALUE),
    (crate::routing::ANNOTATIONS[6], MAX_VALUE),
    (crate::routing::ANNOTATIONS[7], MAX_VALUE),
];

/// How many of [`KEPT`] are hostname annotations (the first ones).
const HOSTNAME_KEYS: usize = 3;

/// The longest value of the kept annotation `key` read under
/// `--max-hostnames-per-service` (0: not kept).
pub fn bound_of(key: &str, max_hostnames: usize) -> usize {
    match KEPT.iter().position(|(k, _)| *k == key) {
        Some(i) if i < HOSTNAME_KEYS => hostnames_bound(max_hostnames),
        Some(i) => KEPT[i].1,
        None => 0,
    }
}

impl HasKey for ServiceInfo {
    fn key(&self) -> &str {
        &self.key
    }
}

/// What [`resource_id`] starts with.
const KEY_PREFIX: &str = "service/";

impl ServiceInfo {
    /// Named `namespace`/`name`. (A namespace name is at most 63 bytes;
    /// a longer one would read back cut, never panic.)
    fn with_name(mut self, namespace: &str, name: &str) -> Self {
        self.key = resource_id(namespace, name).into_boxed_str();
        self.namespace_len = u8::try_from(namespace.len()).unwrap_or(u8::MAX);
        self
    }

    /// Its namespace.
    pub fn namespace(&self) -> &str {
        let end = KEY_PREFIX.len() + usize::from(self.namespace_len);
        self.key.get(KEY_PREFIX.len()..end).unwrap_or_default()
    }

    /// Its name.
    pub fn name(&self) -> &str {
        let start = KEY_PREFIX.len() + usize::from(self.namespace_len) + 1;
        self.key.get(start..).unwrap_or_default()
    }

    /// Its resource id, `service/<namespace>/<name>` ([`resource_id`]).
    pub fn resource_id(&self) -> &str {
        &self.key
    }

    /// `clusterIP: None`: its records come from its EndpointSlices.
    pub fn is_headless(&self) -> bool {
        !self.external_name && self.cluster_ips.iter().any(|ip| &**ip == "None")
    }

    /// An annotation's value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.iter().find(|(k, _)| *k == key).map(|(_, v)| &**v)
    }
}

/// An annotation over its bound: its key and length.
type Oversized = Option<Box<(&'static str, usize)>>;

/// The kept annotations of `all` (see [`KEPT`]), moved out of it, and the
/// first one over its bound under `--max-hostnames-per-service`.
fn kept_annotations(
    mut all: std::collections::BTreeMap<String, String>,
    max_hostnames: usize,
) -> (Vec<(&'static str, Box<str>)>, Oversized) {
    let mut kept = Vec::new();
    let mut oversized = None;
    let mut hostname_read = false;
    for (i, (key, _)) in KEPT.iter().enumerate() {
        let Some(value) = all.remove(*key) else { continue };
        if i < HOSTNAME_KEYS {
            // Only the first hostname annotation present is ever read.
            if hostname_read {
                continue;
            }
            hostname_read = true;
        }
        if value.len() > bound_of(key, max_hostnames) {
            oversized.get_or_insert_with(|| Box::new((*key, value.len())));
        } else {
            kept.push((*key, value.into_boxed_str()));
        }
    }
    (kept, oversized)
}

/// With the default `--max-hostnames-per-service` (tests).
impl From<Service> for ServiceInfo {
    fn from(svc: Service) -> Self {
        Self::read(svc, 10)
    }
}

impl ServiceInfo {
    /// What is kept of `svc` under `--max-hostnames-per-service`.
    pub fn read(svc: Service, max_hostnames: usize) -> Self {
        let m = svc.metadata;
        let spec = svc.spec.unwrap_or_default();
        let mut cluster_ips = spec.cluster_ips.unwrap_or_default();
        if cluster_ips.is_empty()
            && let Some(ip) = spec.cluster_ip
        {
            cluster_ips.push(ip);
        }
        let ingress = svc.status.and_then(|s| s.load_balancer).and_then(|lb| lb.ingress).unwrap_or_default();
        let (mut ingress_ips, mut ingress_hostnames) = (Vec::new(), Vec::new());
        for i in ingress {
            ingress_ips.extend(i.ip);
            ingress_hostnames.extend(i.hostname);
        }
        let (annotations, oversized) = kept_annotations(m.annotations.unwrap_or_default(), max_hostnames);
        let info = ServiceInfo {
            key: Box::default(),
            namespace_len: 0,
            uid: m.uid.as_deref().map(Uid::parse),
            created: m.creation_timestamp.map(|t| t.0.as_second()).unwrap_or(i64::MAX),
            external_name: spec.type_.as_deref() == Some("ExternalName"),
            publish_not_ready: spec.publish_not_ready_addresses.unwrap_or(false),
            cluster_ips: boxed(cluster_ips),
            ingress_ips: boxed(ingress_ips),
            ingress_hostnames: boxed(ingress_hostnames),
            annotations: annotations.into(),
            oversized,
        };
        info.with_name(m.namespace.as_deref().unwrap_or_default(), m.name.as_deref().unwrap_or_default())
    }
}

/// Strings kept without spare room, in a slice without spare room: 8
/// bytes less each than a `String`, and no capacity left over.
fn boxed(v: Vec<String>) -> Box<[Box<str>]> {
    v.into_iter().map(String::into_boxed_str).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceSpec, ServiceStatus};
    use kube::api::ObjectMeta;

    #[test]
    fn keeps_only_what_is_read() {
        let svc = Service {
            metadata: ObjectMeta {
                name: Some("x".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                annotations: Some(
                    [
                        ("kubectl.kubernetes.io/last-applied-configuration".to_string(), "{}".to_string()),
                        ("flotilla.dev/ttl".to_string(), "5".to_string()),
                    ]
                    .into(),
                ),
                managed_fields: Some(vec![Default::default()]),
                labels: Some([("app".to_string(), "x".to_string())].into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                cluster_ip: Some("10.0.0.1".into()),
                ..Default::default()
            }),
            status: Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(vec![
                        LoadBalancerIngress { ip: Some("192.0.2.1".into()), ..Default::default() },
                        LoadBalancerIngress { hostname: Some("lb.example".into()), ..Default::default() },
                    ]),
                }),
                ..Default::default()
            }),
        };
        let info = ServiceInfo::from(svc);
        assert_eq!(
            (info.namespace(), info.name(), info.uid.as_ref().map(Uid::to_string).as_deref()),
            ("ns", "x", Some("u"))
        );
        assert_eq!(&*info.annotations, &[("flotilla.dev/ttl", Box::from("5"))]);
        assert_eq!(info.annotation("flotilla.dev/ttl"), Some("5"));
        assert_eq!(&*info.cluster_ips, &[Box::from("10.0.0.1")], "clusterIP when clusterIPs is empty");
        assert_eq!(&*info.ingress_ips, &[Box::from("192.0.2.1")]);
        assert_eq!(&*info.ingress_hostnames, &[Box::from("lb.example")]);
        assert_eq!(info.created, i64::MAX, "no creation time: loses any contest");
        assert!(!info.external_name);
    }

    /// The attack: a Service carrying the API server's most annotations
    /// (256 KiB), in a junk `flotilla.dev/` key and in the hostname
    /// annotation. Before the bound, every byte of both was held in the
    /// cache, for every such Service (a thousand of them: 256 MiB, twice the
    /// chart's limit); now neither is, and the Service is told why.
    #[test]
    fn a_service_cannot_make_the_cache_hold_its_annotations() {
        let big = |n: usize| "a".repeat(n);
        let hostnames = (0..9_000).map(|i| format!("h{i}.example.com")).collect::<Vec<_>>().join(",");
        let svc = Service {
            metadata: ObjectMeta {
                name: Some("x".into()),
                namespace: Some("ns".into()),
                annotations: Some(
                    [
                        ("flotilla.dev/junk".to_string(), big(100 * 1024)),
                        ("flotilla.dev/hostname".to_string(), hostnames[..150 * 1024].to_string()),
                        ("external-dns.alpha.kubernetes.io/hostname".to_string(), "b.example.com".to_string()),
                        ("flotilla.dev/ttl".to_string(), "60".to_string()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        // Cloned inside: what the watch decodes is allocated there too, and
        // only what the projection keeps stays.
        let (info, heap) = flotilla_testenv::heap::heap_of(|| ServiceInfo::from(svc.clone()));
        assert!(heap.bytes < 1024, "{} B held", heap.bytes);
        assert_eq!(info.oversized.as_deref(), Some(&("flotilla.dev/hostname", 150 * 1024)));
        assert_eq!(info.annotation("external-dns.alpha.kubernetes.io/hostname"), None, "never read beside ours");
        assert_eq!(info.annotation("flotilla.dev/ttl"), Some("60"));
        assert_eq!(info.annotation("flotilla.dev/junk"), None);
        // An admin who allows 1,000 names per Service allows their length.
        let mut many = Service::default();
        let list = hostnames[..18 * 1024].to_string();
        many.metadata.annotations = Some([("flotilla.dev/hostname".to_string(), list.clone())].into());
        assert_eq!(ServiceInfo::read(many.clone(), 1000).annotation("flotilla.dev/hostname"), Some(list.as_str()));
        assert!(ServiceInfo::read(many, 10).oversized.is_some());
    }

    #[test]
    fn much_smaller_than_a_service() {
        assert!(
            std::mem::size_of::<ServiceInfo>() * 4 < std::mem::size_of::<Service>(),
            "{} vs {}",
            std::mem::size_of::<ServiceInfo>(),
            std::mem::size_of::<Service>()
        );
    }

    proptest::proptest! {
        /// The namespace and name read back from the one key they are
        /// kept in, whatever their lengths (a namespace of up to 63 bytes,
        /// a name of up to 253), and the key is the resource id.
        #[test]
        fn the_namespace_and_name_read_back_from_the_key(
            namespace in "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?",
            name in "[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?",
        ) {
            let info = ServiceInfo::default().with_name(&namespace, &name);
            proptest::prop_assert_eq!(info.namespace(), namespace.as_str());
            proptest::prop_assert_eq!(info.name(), name.as_str());
            proptest::prop_assert_eq!(info.resource_id(), resource_id(&namespace, &name));
        }
    }

    #[test]
    fn a_view_without_a_name_reads_empty_and_does_not_panic() {
        let info = ServiceInfo::default();
        assert_eq!((info.namespace(), info.name()), ("", ""));
    }
}
