//! What service-dns keeps of a Service: the few fields it reads, in a struct
//! of its own. A k8s-openapi `Service` takes about 1.2 KiB even with every
//! unused field emptied (ObjectMeta and ServiceSpec are wide structs of
//! options); this takes a fifth of that, which is most of the cache's
//! memory at thousands of Services.

use k8s_openapi::api::core::v1::Service;

/// The fields of a Service that decide its records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceInfo {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    /// `metadata.creationTimestamp` in Unix seconds (`i64::MAX` when
    /// absent): the older Service wins a contested name.
    pub created: i64,
    /// `spec.type: ExternalName` (no ClusterIP, nothing to publish).
    pub external_name: bool,
    /// `spec.publishNotReadyAddresses`: a headless Service publishes its
    /// not-ready endpoints too.
    pub publish_not_ready: bool,
    /// `spec.clusterIPs`, or `spec.clusterIP` when the list is empty.
    pub cluster_ips: Box<[String]>,
    /// `status.loadBalancer.ingress[].ip`.
    pub ingress_ips: Box<[String]>,
    /// `status.loadBalancer.ingress[].hostname`.
    pub ingress_hostnames: Box<[String]>,
    /// The `flotilla.dev/*` annotations, external-dns's hostname/ttl
    /// (accepted as aliases), and the load balancer's IP address type.
    pub annotations: Box<[(String, String)]>,
}

impl ServiceInfo {
    /// `clusterIP: None`: its records come from its EndpointSlices.
    pub fn is_headless(&self) -> bool {
        !self.external_name && self.cluster_ips.iter().any(|ip| ip == "None")
    }

    /// An annotation's value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// The annotations that decide records: ours, external-dns's aliases, and
/// the AWS Load Balancer Controller's IP address type (an `AAAA` ALIAS).
fn kept_annotation(key: &str) -> bool {
    key.starts_with("flotilla.dev/")
        || crate::extdns::EXTERNAL_DNS_ALIASES.contains(&key)
        || key == crate::alias::ANNOTATION_IP_ADDRESS_TYPE
}

impl From<Service> for ServiceInfo {
    fn from(svc: Service) -> Self {
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
        let annotations: Vec<(String, String)> =
            m.annotations.unwrap_or_default().into_iter().filter(|(k, _)| kept_annotation(k)).collect();
        ServiceInfo {
            namespace: m.namespace.unwrap_or_default(),
            name: m.name.unwrap_or_default(),
            uid: m.uid,
            created: m.creation_timestamp.map(|t| t.0.as_second()).unwrap_or(i64::MAX),
            external_name: spec.type_.as_deref() == Some("ExternalName"),
            publish_not_ready: spec.publish_not_ready_addresses.unwrap_or(false),
            cluster_ips: cluster_ips.into(),
            ingress_ips: ingress_ips.into(),
            ingress_hostnames: ingress_hostnames.into(),
            annotations: annotations.into(),
        }
    }
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
        assert_eq!((info.namespace.as_str(), info.name.as_str(), info.uid.as_deref()), ("ns", "x", Some("u")));
        assert_eq!(&*info.annotations, &[("flotilla.dev/ttl".to_string(), "5".to_string())]);
        assert_eq!(info.annotation("flotilla.dev/ttl"), Some("5"));
        assert_eq!(&*info.cluster_ips, &["10.0.0.1".to_string()], "clusterIP when clusterIPs is empty");
        assert_eq!(&*info.ingress_ips, &["192.0.2.1".to_string()]);
        assert_eq!(&*info.ingress_hostnames, &["lb.example".to_string()]);
        assert_eq!(info.created, i64::MAX, "no creation time: loses any contest");
        assert!(!info.external_name);
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
}
