//! Where a sink may send: the operator's own network is refused unless the
//! admin admits it. A PodAlert's author chooses the URL (through a Secret or
//! the Alertmanager field), and the operator sits inside the cluster: without
//! a policy, `http://127.0.0.1:15000/quitquitquit` stops an Istio sidecar,
//! RFC 1918 services are reachable past the tenant's NetworkPolicies, and
//! cloud metadata answers at 169.254.169.254.
//!
//! Refused by default: loopback, unspecified (`0.0.0.0/8`, `::`), RFC 1918,
//! CGNAT (`100.64.0.0/10`), unique-local (`fc00::/7`, which holds AWS's
//! `fd00:ec2::254`), link-local (`169.254.0.0/16`, `fe80::/10`), multicast,
//! broadcast and the reserved `240.0.0.0/4` — also IPv4 written inside IPv6
//! (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`).
//! `--allowed-sink-cidrs` admits ranges (an in-cluster Alertmanager). A host
//! name is resolved by [`SafeResolver`] at connect time and connected only
//! to admitted addresses, so a name that resolves there (`localhost`,
//! `169.254.169.254.nip.io`) is refused like its literal.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;

/// What a refusal says, everywhere (status, Events, logs): the class only.
pub const REFUSED: &str = "refused by policy";

/// The addresses sinks may be sent to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Ranges admitted even though the default refuses them.
    pub allowed: Vec<IpNet>,
}

/// The IPv4 address an IPv6 one carries, for the spellings that reach an
/// IPv4 host: mapped, compatible (deprecated, still routed by some stacks)
/// and the NAT64 well-known prefix.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = v6.segments();
    let o = v6.octets();
    let low = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    // ::a.b.c.d (not :: or ::1, which are IPv6's own).
    if s[..6] == [0; 6] && u32::from(low) > 1 {
        return Some(low);
    }
    // 64:ff9b::/96 (RFC 6052) and 64:ff9b:1::/48 (RFC 8215).
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) {
        return Some(low);
    }
    None
}

fn refused_v4(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    ip.is_loopback()
        || o[0] == 0 // 0.0.0.0/8: "this network", 0.0.0.0 reaches the local host
        || ip.is_private()
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64.0.0/10, carrier-grade NAT
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || o[0] >= 240 // reserved
}

fn refused_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || (first & 0xfe00) == 0xfc00 // fc00::/7, unique local
        || (first & 0xffc0) == 0xfe80 // fe80::/10, link-local
        || (first & 0xffc0) == 0xfec0 // fec0::/10, the old site-local
        || ip.is_multicast()
}

/// Whether the default refuses `ip` (before any `--allowed-sink-cidrs`).
pub fn refused_by_default(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6) || embedded_v4(v6).is_some_and(refused_v4),
    }
}

impl Policy {
    /// Parses `--allowed-sink-cidrs` entries (`10.0.0.0/8`, `fd00::/8`, or a
    /// single address).
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        let mut allowed = Vec::new();
        for e in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            let net = match e.parse::<IpNet>() {
                Ok(n) => n,
                Err(_) => e.parse::<IpAddr>().map(IpNet::from).map_err(|_| format!("{e:?} is not a CIDR"))?,
            };
            allowed.push(net.trunc());
        }
        Ok(Self { allowed })
    }

    /// Whether a sink may connect to `ip`.
    pub fn admits(&self, ip: IpAddr) -> bool {
        if !refused_by_default(ip) {
            return true;
        }
        // An admitted range admits its addresses in every spelling.
        let v4 = match ip {
            IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        self.allowed.iter().any(|n| n.contains(&ip) || v4.is_some_and(|v4| n.contains(&v4)))
    }
}

/// Why a host name was not connected to: every address it resolves to is
/// refused. Carries no name or address (the URL may come from a Secret).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("refused by policy")]
pub struct RefusedByPolicy;

/// The system resolver, keeping only the addresses the policy admits; a
/// name left with none fails with [`RefusedByPolicy`].
#[derive(Debug, Clone, Default)]
pub struct SafeResolver {
    pub policy: Arc<Policy>,
}

impl reqwest::dns::Resolve for SafeResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found.into_iter().filter(|a| policy.admits(a.ip())).collect();
            if allowed.is_empty() {
                return Err(Box::new(RefusedByPolicy) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use reqwest::dns::Resolve;

    const REFUSED_SPELLINGS: [&str; 34] = [
        // loopback
        "127.0.0.1",
        "127.1.2.3",
        "::1",
        "::ffff:127.0.0.1",
        "::127.0.0.1",
        "64:ff9b::127.0.0.1",
        // unspecified
        "0.0.0.0",
        "0.1.2.3",
        "::",
        "::ffff:0.0.0.0",
        // RFC 1918
        "10.0.0.1",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "::ffff:10.96.0.1",
        "::ffff:192.168.0.1",
        // CGNAT
        "100.64.0.1",
        "100.127.255.254",
        // unique local, AWS metadata over IPv6
        "fd00::1",
        "fc00::1",
        "fd00:ec2::254",
        // link-local, cloud metadata
        "169.254.169.254",
        "169.254.0.1",
        "fe80::1",
        "::ffff:169.254.169.254",
        "64:ff9b:1::a9fe:a9fe",
        // multicast, broadcast, reserved, site-local
        "224.0.0.1",
        "239.255.255.250",
        "ff02::1",
        "255.255.255.255",
        "240.0.0.1",
        "fec0::1",
        "::ffff:224.0.0.1",
        "::ffff:100.64.0.1",
    ];

    #[test]
    fn the_default_refuses_every_spelling_of_the_operators_own_network() {
        let p = Policy::default();
        for bad in REFUSED_SPELLINGS {
            assert!(!p.admits(bad.parse().unwrap()), "{bad} admitted");
        }
        for ok in ["8.8.8.8", "100.63.0.1", "100.128.0.1", "172.32.0.1", "2001:db8::1", "2600::1", "::ffff:8.8.8.8"] {
            assert!(p.admits(ok.parse().unwrap()), "{ok} refused");
        }
    }

    #[test]
    fn allowed_cidrs_admit_their_ranges_in_every_spelling_and_nothing_else() {
        let p =
            Policy::parse(&["10.96.0.0/12".into(), "127.0.0.1".into(), " fd00::/8 ".into(), String::new()]).unwrap();
        for ok in ["10.96.0.10", "10.111.255.255", "::ffff:10.96.0.10", "127.0.0.1", "::ffff:127.0.0.1", "fd00::5"] {
            assert!(p.admits(ok.parse().unwrap()), "{ok} refused");
        }
        for bad in ["10.0.0.1", "127.0.0.2", "::1", "169.254.169.254", "fc00::1", "192.168.0.1"] {
            assert!(!p.admits(bad.parse().unwrap()), "{bad} admitted");
        }
        assert!(Policy::parse(&["10.0.0.0/33".into()]).is_err());
        assert!(Policy::parse(&["nonsense".into()]).is_err());
        // A host part is ignored: 10.1.2.3/8 is 10.0.0.0/8.
        assert!(Policy::parse(&["10.1.2.3/8".into()]).unwrap().admits("10.200.0.1".parse().unwrap()));
    }

    #[tokio::test]
    async fn the_resolver_refuses_names_that_resolve_to_refused_addresses() {
        let default = SafeResolver::default();
        for name in ["localhost", "127.0.0.1", "169.254.169.254", "0.0.0.0"] {
            let err = match default.resolve(name.parse().unwrap()).await {
                Ok(addrs) => panic!("{name} resolved to {:?}", addrs.collect::<Vec<_>>()),
                Err(e) => e,
            };
            assert!(err.downcast_ref::<RefusedByPolicy>().is_some(), "{name}: {err}");
            assert_eq!(err.to_string(), REFUSED);
        }
        let loopback = SafeResolver { policy: Arc::new(Policy::parse(&["127.0.0.0/8".into()]).unwrap()) };
        let got: Vec<SocketAddr> = loopback.resolve("localhost".parse().unwrap()).await.unwrap().collect();
        assert!(!got.is_empty() && got.iter().all(|a| a.ip().is_loopback() && a.is_ipv4()), "{got:?}");
    }
}
