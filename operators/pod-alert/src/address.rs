//! Addresses a sink may never be sent to, whatever its URL says: link-local
//! ones (the cloud metadata endpoints live there: 169.254.169.254, and AWS's
//! IPv6 fd00:ec2::254), also written as IPv4-mapped IPv6. A PodAlert's author
//! chooses the URL; a name that resolves there (`metadata.google.internal`,
//! `169.254.169.254.nip.io`) is refused as its literal address is, by the
//! HTTP client's resolver below, at connect time.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// AWS's instance metadata service over IPv6 (a unique-local address).
const AWS_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// Whether `ip` is one a sink is never sent to.
pub fn refused(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => {
            (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6 == AWS_METADATA_V6
                || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_link_local())
        }
    }
}

/// The system resolver, without the refused addresses; a name that has
/// only refused ones fails to resolve (the error names no host: the URL may
/// come from a Secret).
#[derive(Debug, Clone, Copy, Default)]
pub struct SafeResolver;

impl reqwest::dns::Resolve for SafeResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found.into_iter().filter(|a| !refused(a.ip())).collect();
            if allowed.is_empty() {
                return Err(
                    "the sink's host resolves only to link-local addresses (cloud metadata); never sent to".into()
                );
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

    #[test]
    fn link_local_and_metadata_addresses_in_every_spelling() {
        for bad in ["169.254.169.254", "169.254.0.1", "fe80::1", "fd00:ec2::254", "::ffff:169.254.169.254"] {
            assert!(refused(bad.parse().unwrap()), "{bad}");
        }
        for ok in ["10.0.0.1", "127.0.0.1", "192.168.1.1", "::1", "fd00:ec2::1", "::ffff:10.0.0.1", "2001:db8::1"] {
            assert!(!refused(ok.parse().unwrap()), "{ok}");
        }
    }

    #[tokio::test]
    async fn the_resolver_keeps_allowed_addresses_and_refuses_a_name_with_none() {
        let got: Vec<SocketAddr> = SafeResolver.resolve("localhost".parse().unwrap()).await.unwrap().collect();
        assert!(!got.is_empty() && got.iter().all(|a| a.ip().is_loopback()), "{got:?}");
        // A name spelled as a link-local address resolves to it.
        let err = match SafeResolver.resolve("169.254.169.254".parse().unwrap()).await {
            Ok(addrs) => panic!("resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("link-local") && !err.contains("169.254"), "{err}");
    }
}
