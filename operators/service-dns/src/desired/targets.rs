//! What a Service's names point at: its ClusterIPs, its load balancer's
//! ingress (addresses, an ALIAS or a CNAME), a headless Service's pods.

use std::net::IpAddr;

use super::{DNS_RECORD_SKIPPED, Desired, HEADLESS_OFF, Naming, Notice};
use crate::alias::{self, ANNOTATION_ALIAS, ANNOTATION_ALIAS_ZONE, ANNOTATION_EVALUATE_TARGET_HEALTH};
use crate::hostname::{self, Vars};
use crate::model::{Alias, RecordType};
use crate::service::ServiceInfo;

pub(super) type Targets = Vec<(RecordType, Vec<String>)>;

pub(super) fn cluster_ip_targets(svc: &ServiceInfo) -> Result<Targets, Desired> {
    if svc.external_name {
        return Err(Desired::Quiet);
    }
    // Reached by a headless Service only with `--publish-headless` off.
    if svc.is_headless() {
        return Err(Desired::Skip { reason: DNS_RECORD_SKIPPED, message: HEADLESS_OFF.to_string() });
    }
    Ok(split_ips(svc.cluster_ips.iter().filter_map(|s| s.parse::<IpAddr>().ok())))
}

/// The pods' names (`--pod-hostname-template`) and their records; a
/// hostname that gives no valid name is left out, said as a Warning.
pub(super) fn pod_names(
    svc: &ServiceInfo,
    naming: &Naming,
    pods: Vec<(Box<str>, Vec<IpAddr>)>,
    notices: &mut Vec<Notice>,
) -> Vec<(String, Targets)> {
    let vars = Vars { name: svc.name(), namespace: svc.namespace(), prefix: &naming.prefix, domain: &naming.domain };
    let mut bad = Vec::new();
    let mut out = Vec::with_capacity(pods.len());
    for (hostname, ips) in pods {
        // One label: the API server checks it, checked again here (defence
        // in depth) since a dotted one would reach names of another shape.
        if hostname.contains('.') {
            bad.push(format!("hostname {hostname:?} is not a single label"));
            continue;
        }
        let h = naming.pod_template.render_pod(vars, &hostname);
        match hostname::validate(&h, &naming.domain) {
            // Under a delegated subdomain whose zone is managed too: that zone's.
            Ok(()) if !naming.zones.is_home(&naming.zone_id, &h) => {}
            Ok(()) => out.push((h, split_ips(ips.into_iter()))),
            Err(e) => bad.push(e.to_string()),
        }
    }
    if let Some(first) = bad.first() {
        notices.push(Notice {
            reason: "InvalidHostname",
            message: format!("{} pod name(s) not published (--pod-hostname-template), e.g. {first}", bad.len()),
        });
    }
    out
}

pub(super) fn split_ips(ips: impl Iterator<Item = IpAddr>) -> Targets {
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for ip in ips {
        match ip {
            IpAddr::V4(a) => v4.push(a.to_string()),
            IpAddr::V6(a) => v6.push(a.to_string()),
        }
    }
    let mut out = Vec::new();
    if !v4.is_empty() {
        out.push((RecordType::A, v4));
    }
    if !v6.is_empty() {
        out.push((RecordType::Aaaa, v6));
    }
    out
}

/// What a load balancer's ingress publishes.
pub(super) enum LoadBalancer {
    Addresses(Targets),
    /// ALIAS record sets of these types (`A`, and `AAAA` for a dualstack
    /// load balancer) to the load balancer.
    Alias(Vec<RecordType>, Alias),
}

/// IPs → A/AAAA; else the first hostname → an ALIAS (an AWS load balancer,
/// see [`alias::target`]) or a CNAME (a CNAME has one value). `Err`: a bad
/// alias annotation.
pub(super) fn load_balancer_targets(
    svc: &ServiceInfo,
    naming: &Naming,
    notices: &mut Vec<Notice>,
) -> Result<LoadBalancer, String> {
    let ips = split_ips(svc.ingress_ips.iter().filter_map(|s| s.parse::<IpAddr>().ok()));
    if !ips.is_empty() {
        return Ok(LoadBalancer::Addresses(ips));
    }
    let mut hosts: Vec<String> =
        svc.ingress_hostnames.iter().map(|h| hostname::normalize(h)).filter(|h| !h.is_empty()).collect();
    hosts.sort();
    let Some(host) = hosts.into_iter().next() else { return Ok(LoadBalancer::Addresses(Vec::new())) };
    let wanted = alias::Wanted {
        alias: svc.annotation(ANNOTATION_ALIAS),
        zone: svc.annotation(ANNOTATION_ALIAS_ZONE),
        evaluate: svc.annotation(ANNOTATION_EVALUATE_TARGET_HEALTH),
        by_default: naming.alias_load_balancers,
    };
    match alias::target(&host, &wanted).map_err(|e| format!("{e}; no record published"))? {
        alias::Target::Alias(a) => {
            let mut types = vec![RecordType::A];
            if alias::is_dualstack(svc.annotation(alias::ANNOTATION_IP_ADDRESS_TYPE)) {
                types.push(RecordType::Aaaa);
            }
            Ok(LoadBalancer::Alias(types, a))
        }
        alias::Target::Cname(warning) => {
            notices.extend(warning.map(|message| Notice { reason: alias::ALIAS_ZONE_UNKNOWN, message }));
            Ok(LoadBalancer::Addresses(vec![(RecordType::Cname, vec![host])]))
        }
    }
}
