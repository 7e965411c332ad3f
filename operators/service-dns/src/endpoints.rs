//! What service-dns keeps of an EndpointSlice: the few bytes per endpoint
//! a headless Service's records are made of (its address, whether it is
//! ready, its `hostname`), held in a projection store like the Services.
//!
//! Only the slices of headless Services are watched: the EndpointSlice
//! controller labels those `service.kubernetes.io/headless`, so the API
//! server filters (a label selector) and the slices of the cluster's other
//! Services (most of them, and the busiest) never reach the operator — not
//! even once at start-up. Slices made by hand (a Service without selector)
//! need the same two labels.

use std::net::IpAddr;

use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label naming a slice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label the EndpointSlice controller puts on the slices of headless Services.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// The watch's label selector: slices of headless Services, with a Service.
pub const SELECTOR: &str = "service.kubernetes.io/headless,kubernetes.io/service-name";

/// The API server's own bound (1,000 endpoints per slice), kept here too:
/// a slice never costs more than this, whoever wrote it.
pub const MAX_PER_SLICE: usize = 1000;

/// One endpoint: its first address (the API lets consumers use only the
/// first; the others are fungible), readiness and hostname.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: IpAddr,
    /// `conditions.ready`; absent means ready (the API's rule).
    pub ready: bool,
    /// `hostname` (a DNS label, checked by the API server; checked again
    /// when rendered into a name).
    pub hostname: Option<Box<str>>,
}

/// One slice: whose it is, and its endpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SliceInfo {
    pub namespace: Box<str>,
    /// The `kubernetes.io/service-name` label.
    pub service: Box<str>,
    pub endpoints: Box<[Endpoint]>,
}

impl From<EndpointSlice> for SliceInfo {
    fn from(s: EndpointSlice) -> Self {
        let m = s.metadata;
        let service = m.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)).cloned().unwrap_or_default();
        // FQDN slices hold names, not addresses: nothing to publish.
        let ip_family = matches!(s.address_type.as_str(), "IPv4" | "IPv6");
        let endpoints: Vec<Endpoint> = if ip_family {
            s.endpoints
                .unwrap_or_default()
                .into_iter()
                .filter_map(|e| {
                    let ip = e.addresses.first()?.parse::<IpAddr>().ok()?;
                    let ready = e.conditions.and_then(|c| c.ready).unwrap_or(true);
                    Some(Endpoint { ip, ready, hostname: e.hostname.map(String::into_boxed_str) })
                })
                .take(MAX_PER_SLICE)
                .collect()
        } else {
            Vec::new()
        };
        SliceInfo {
            namespace: m.namespace.unwrap_or_default().into(),
            service: service.into(),
            endpoints: endpoints.into(),
        }
    }
}

/// A slice's key in the store.
pub fn key(s: &EndpointSlice) -> String {
    format!(
        "{}/{}",
        s.metadata.namespace.as_deref().unwrap_or_default(),
        s.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{Endpoint as ApiEndpoint, EndpointConditions};
    use kube::api::ObjectMeta;

    fn slice(address_type: &str, endpoints: Vec<ApiEndpoint>) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some("web-abc".into()),
                namespace: Some("ns".into()),
                labels: Some([(SERVICE_NAME_LABEL.to_string(), "web".to_string())].into()),
                managed_fields: Some(vec![Default::default()]),
                ..Default::default()
            },
            address_type: address_type.into(),
            endpoints: Some(endpoints),
            ports: None,
        }
    }

    fn ep(addrs: &[&str], ready: Option<bool>, hostname: Option<&str>) -> ApiEndpoint {
        ApiEndpoint {
            addresses: addrs.iter().map(|s| s.to_string()).collect(),
            conditions: Some(EndpointConditions { ready, ..Default::default() }),
            hostname: hostname.map(str::to_string),
            node_name: Some("node-1".into()),
            ..Default::default()
        }
    }

    #[test]
    fn keeps_the_first_address_readiness_and_hostname() {
        let s = slice(
            "IPv4",
            vec![
                ep(&["10.0.0.1", "10.0.0.9"], Some(true), Some("web-0")),
                ep(&["10.0.0.2"], Some(false), None),
                ep(&["10.0.0.3"], None, None),
                ep(&["not-an-ip"], Some(true), None),
            ],
        );
        assert_eq!(key(&s), "ns/web-abc");
        let info = SliceInfo::from(s);
        assert_eq!((&*info.namespace, &*info.service), ("ns", "web"));
        let got: Vec<(String, bool, Option<&str>)> =
            info.endpoints.iter().map(|e| (e.ip.to_string(), e.ready, e.hostname.as_deref())).collect();
        assert_eq!(
            got,
            [
                ("10.0.0.1".to_string(), true, Some("web-0")),
                ("10.0.0.2".to_string(), false, None),
                ("10.0.0.3".to_string(), true, None),
            ],
            "no ready condition is ready; a bad address is dropped"
        );
    }

    #[test]
    fn fqdn_slices_and_oversized_slices_are_bounded() {
        assert!(SliceInfo::from(slice("FQDN", vec![ep(&["a.example"], Some(true), None)])).endpoints.is_empty());
        let many = (0..1500).map(|i| ep(&[&format!("10.1.{}.{}", i / 256, i % 256)], None, None)).collect();
        assert_eq!(SliceInfo::from(slice("IPv4", many)).endpoints.len(), MAX_PER_SLICE);
    }

    #[test]
    fn an_endpoint_is_a_few_dozen_bytes() {
        assert!(std::mem::size_of::<Endpoint>() <= 40, "{}", std::mem::size_of::<Endpoint>());
    }
}
