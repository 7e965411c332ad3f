//! A headless Service's addresses (pure): from its EndpointSlices, the
//! endpoints that are published (ready ones; all of them with
//! `publishNotReadyAddresses`), the set of their IPs, and — for pod
//! records — each `hostname`'s addresses. Bounded: at most
//! `--max-endpoints-per-service` addresses in the set and as many pod
//! names, the lowest first (sorted, so the cut does not flap between
//! syncs), the cut said as a Warning.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::desired::Notice;
use crate::endpoints::SliceInfo;

pub const TOO_MANY_ENDPOINTS: &str = "TooManyEndpoints";

/// What a headless Service publishes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Addresses {
    /// The set at the Service's names, sorted.
    pub service: Vec<IpAddr>,
    /// `(hostname, addresses)`, sorted by hostname; each with at most one
    /// address per family (a pod has one of each), the lowest.
    pub pods: Vec<(Box<str>, Vec<IpAddr>)>,
}

/// The published addresses of a headless Service's `slices`; `pods`: the
/// pod names are wanted (`flotilla.dev/pod-records`); `max`: the bound on
/// addresses and on pod names.
pub fn addresses(slices: &[&SliceInfo], publish_not_ready: bool, pods: bool, max: usize) -> (Addresses, Vec<Notice>) {
    let eligible = || slices.iter().flat_map(|s| s.endpoints.iter()).filter(|e| e.ready || publish_not_ready);
    let mut notices = Vec::new();

    let all: BTreeSet<IpAddr> = eligible().map(|e| e.ip).collect();
    if all.len() > max {
        notices.push(Notice {
            reason: TOO_MANY_ENDPOINTS,
            message: format!(
                "{} endpoint addresses; at most {max} per Service are published here \
                 (--max-endpoints-per-service): the {max} lowest",
                all.len()
            ),
        });
    }
    let service: Vec<IpAddr> = all.into_iter().take(max).collect();

    let mut by_host: BTreeMap<&str, (Option<IpAddr>, Option<IpAddr>)> = BTreeMap::new();
    if pods {
        for e in eligible() {
            let Some(h) = e.hostname.as_deref() else { continue };
            let (v4, v6) = by_host.entry(h).or_default();
            let slot = if e.ip.is_ipv4() { v4 } else { v6 };
            if slot.is_none_or(|ip| e.ip < ip) {
                *slot = Some(e.ip);
            }
        }
    }
    if by_host.len() > max {
        notices.push(Notice {
            reason: TOO_MANY_ENDPOINTS,
            message: format!(
                "{} pod hostnames; at most {max} pod names per Service are published here \
                 (--max-endpoints-per-service): the first {max} in alphabetical order",
                by_host.len()
            ),
        });
    }
    let pods =
        by_host.into_iter().take(max).map(|(h, (v4, v6))| (Box::from(h), v4.into_iter().chain(v6).collect())).collect();
    (Addresses { service, pods }, notices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoints::Endpoint;

    fn slice(eps: &[(&str, bool, Option<&str>)]) -> SliceInfo {
        SliceInfo {
            namespace: "ns".into(),
            service: "web".into(),
            endpoints: eps
                .iter()
                .map(|(ip, ready, h)| Endpoint { ip: ip.parse().unwrap(), ready: *ready, hostname: h.map(Box::from) })
                .collect(),
        }
    }

    fn ips(a: &Addresses) -> Vec<String> {
        a.service.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn ready_endpoints_of_every_slice_make_the_set() {
        let a = slice(&[("10.0.0.2", true, None), ("10.0.0.1", true, None), ("10.0.0.3", false, None)]);
        let b = slice(&[("fd00::1", true, None), ("10.0.0.1", true, None)]);
        let (got, notices) = addresses(&[&a, &b], false, false, 100);
        assert_eq!(ips(&got), ["10.0.0.1", "10.0.0.2", "fd00::1"], "not-ready left out, duplicates once");
        assert!(got.pods.is_empty(), "no pod names unless asked");
        assert!(notices.is_empty());
    }

    #[test]
    fn publish_not_ready_addresses_takes_them_all() {
        let a = slice(&[("10.0.0.2", false, None), ("10.0.0.1", true, None)]);
        assert_eq!(ips(&addresses(&[&a], true, false, 100).0), ["10.0.0.1", "10.0.0.2"]);
        let none = slice(&[("10.0.0.2", false, None)]);
        assert!(addresses(&[&none], false, true, 100).0 == Addresses::default(), "nothing ready: nothing");
    }

    #[test]
    fn pod_names_from_hostnames() {
        let v4 = slice(&[
            ("10.0.0.1", true, Some("web-0")),
            ("10.0.0.2", true, Some("web-1")),
            ("10.0.0.3", false, Some("web-2")),
        ]);
        let v6 = slice(&[("fd00::1", true, Some("web-0")), ("10.0.0.9", true, None)]);
        let (got, _) = addresses(&[&v4, &v6], false, true, 100);
        let pods: Vec<(&str, Vec<String>)> =
            got.pods.iter().map(|(h, ips)| (&**h, ips.iter().map(ToString::to_string).collect())).collect();
        assert_eq!(
            pods,
            [("web-0", vec!["10.0.0.1".to_string(), "fd00::1".to_string()]), ("web-1", vec!["10.0.0.2".to_string()])],
            "dual-stack: A and AAAA; not-ready and hostname-less endpoints have no name"
        );
        let (got, _) = addresses(&[&v4], true, true, 100);
        assert_eq!(got.pods.len(), 3, "publishNotReadyAddresses names the not-ready pod too");
        // One hostname on many endpoints (a hand-made slice): one address per family, the lowest.
        let dup = slice(&[("10.0.0.7", true, Some("x")), ("10.0.0.5", true, Some("x")), ("10.0.0.6", true, Some("x"))]);
        assert_eq!(addresses(&[&dup], false, true, 100).0.pods, [(Box::from("x"), vec!["10.0.0.5".parse().unwrap()])]);
    }

    #[test]
    fn bounded_with_a_warning() {
        let eps: Vec<(String, bool, Option<String>)> =
            (0..50).map(|i| (format!("10.0.1.{}", 100 - i), true, Some(format!("web-{i:02}")))).collect();
        let eps: Vec<(&str, bool, Option<&str>)> = eps.iter().map(|(a, r, h)| (a.as_str(), *r, h.as_deref())).collect();
        let s = slice(&eps);
        let (got, notices) = addresses(&[&s], false, true, 10);
        assert_eq!(got.service.len(), 10);
        assert_eq!(ips(&got)[0], "10.0.1.51", "the lowest");
        assert_eq!(got.pods.len(), 10);
        assert_eq!(&*got.pods[0].0, "web-00");
        assert_eq!(notices.len(), 2);
        assert!(notices.iter().all(|n| n.reason == TOO_MANY_ENDPOINTS));
        assert!(notices[0].message.contains("50 endpoint addresses"), "{}", notices[0].message);
        assert!(addresses(&[&s], false, true, 50).1.is_empty(), "at the bound: no warning");
    }
}
