//! Desired state: which records each Service asks for (its ClusterIPs, or its
//! load balancer's ingress, at its hostnames), or why it asks for none.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::ObjectReference;

use crate::hostname::{self, Template, Vars};
use crate::model::{RecordSet, RecordType};
use crate::service::ServiceInfo;

pub const ANNOTATION_HOSTNAME: &str = "flotilla.dev/hostname";
pub const ANNOTATION_TTL: &str = "flotilla.dev/ttl";
pub const ANNOTATION_DNS: &str = "flotilla.dev/dns";
pub const ANNOTATION_TARGET: &str = "flotilla.dev/target";
/// external-dns's annotations, accepted as aliases of ours (ours win when
/// both are set), so that Services annotated for external-dns keep their
/// names after a switch.
pub const EXTERNAL_DNS_HOSTNAME: &str = "external-dns.alpha.kubernetes.io/hostname";
pub const EXTERNAL_DNS_TTL: &str = "external-dns.alpha.kubernetes.io/ttl";

/// A TTL annotation: whole seconds, or (as external-dns takes it) a
/// duration of whole seconds such as `1m`.
fn parse_ttl(v: &str) -> Option<i64> {
    let v = v.trim();
    v.parse::<i64>().ok().or_else(|| {
        let d = humantime::parse_duration(v).ok()?;
        (d.subsec_nanos() == 0).then(|| i64::try_from(d.as_secs()).ok()).flatten()
    })
}

/// Route53's largest TTL.
pub const MAX_TTL: i64 = 2_147_483_647;

/// How hostnames are made.
#[derive(Debug, Clone)]
pub struct Naming {
    pub template: Template,
    pub prefix: String,
    /// The zone's name (normalized), `{domain}`.
    pub domain: String,
    pub default_ttl: i64,
}

/// What one Service wants: records (grouped by nothing; the plan groups by
/// name) and who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// `service/<namespace>/<name>`, written into the ownership TXT.
    pub resource: String,
    /// Older Services win a contested name: (creation time, resource).
    pub order: (i64, String),
    pub records: Vec<RecordSet>,
}

/// The outcome of reading one Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Desired {
    Publish(Claim),
    /// Nothing to publish, said with a Normal event (reason, message).
    Skip {
        reason: &'static str,
        message: String,
    },
    /// Bad input, said with a Warning event (reason, message).
    Invalid {
        reason: &'static str,
        message: String,
    },
    /// Nothing to publish and nothing worth saying (opted out, no IP yet,
    /// ExternalName).
    Quiet,
}

pub fn resource_id(namespace: &str, name: &str) -> String {
    format!("service/{namespace}/{name}")
}

/// The records a Service asks for.
pub fn desired(svc: &ServiceInfo, naming: &Naming) -> Desired {
    let (namespace, name) = (svc.namespace.as_str(), svc.name.as_str());
    if svc.annotation(ANNOTATION_DNS).is_some_and(|v| v.trim().eq_ignore_ascii_case("false")) {
        return Desired::Quiet;
    }

    let ttl_annotation = [ANNOTATION_TTL, EXTERNAL_DNS_TTL].into_iter().find_map(|k| svc.annotation(k).map(|v| (k, v)));
    let ttl = match ttl_annotation {
        None => naming.default_ttl,
        Some((key, v)) => match parse_ttl(v) {
            Some(t) if (0..=MAX_TTL).contains(&t) => t,
            _ => {
                return Desired::Invalid {
                    reason: "InvalidAnnotation",
                    message: format!("{key}={v:?} is not a TTL (whole seconds, 0..={MAX_TTL}); no record published"),
                };
            }
        },
    };

    let hostname_annotation = svc.annotation(ANNOTATION_HOSTNAME).or_else(|| svc.annotation(EXTERNAL_DNS_HOSTNAME));
    let hostnames: Vec<String> = match hostname_annotation {
        Some(v) => v.split(',').map(hostname::normalize).filter(|h| !h.is_empty()).collect(),
        None => vec![naming.template.render(Vars { name, namespace, prefix: &naming.prefix, domain: &naming.domain })],
    };
    if hostnames.is_empty() {
        return Desired::Invalid {
            reason: "InvalidHostname",
            message: format!("{ANNOTATION_HOSTNAME} names no hostname; no record published"),
        };
    }
    for h in &hostnames {
        if let Err(e) = hostname::validate(h, &naming.domain) {
            return Desired::Invalid { reason: "InvalidHostname", message: format!("{e}; no record published") };
        }
    }

    let targets = match svc.annotation(ANNOTATION_TARGET).map(|s| s.trim()) {
        None | Some("") | Some("cluster-ip") => match cluster_ip_targets(svc) {
            Ok(t) => t,
            Err(skip) => return skip,
        },
        Some("load-balancer") => load_balancer_targets(svc),
        Some(other) => {
            return Desired::Invalid {
                reason: "InvalidAnnotation",
                message: format!(
                    "{ANNOTATION_TARGET}={other:?} is not a target (cluster-ip or load-balancer); no record published"
                ),
            };
        }
    };
    if targets.is_empty() {
        return Desired::Quiet;
    }

    let mut records = Vec::new();
    for h in &hostnames {
        for (rtype, values) in &targets {
            records.push(RecordSet::new(h.clone(), *rtype, ttl, values.clone()));
        }
    }
    records.sort();
    records.dedup();
    let resource = resource_id(namespace, name);
    Desired::Publish(Claim { order: (svc.created, resource.clone()), resource, records })
}

type Targets = Vec<(RecordType, Vec<String>)>;

fn cluster_ip_targets(svc: &ServiceInfo) -> Result<Targets, Desired> {
    if svc.external_name {
        return Err(Desired::Quiet);
    }
    let ips = &svc.cluster_ips;
    if ips.iter().any(|ip| ip == "None") {
        return Err(Desired::Skip {
            reason: "DnsRecordSkipped",
            message: "headless Service (clusterIP: None): no ClusterIP to publish".to_string(),
        });
    }
    Ok(split_ips(ips.iter().filter_map(|s| s.parse::<IpAddr>().ok())))
}

fn split_ips(ips: impl Iterator<Item = IpAddr>) -> Targets {
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

/// IPs → A/AAAA; else the first hostname → CNAME (a CNAME has one value).
fn load_balancer_targets(svc: &ServiceInfo) -> Targets {
    let ips = split_ips(svc.ingress_ips.iter().filter_map(|s| s.parse::<IpAddr>().ok()));
    if !ips.is_empty() {
        return ips;
    }
    let mut hosts: Vec<String> =
        svc.ingress_hostnames.iter().map(|h| hostname::normalize(h)).filter(|h| !h.is_empty()).collect();
    hosts.sort();
    match hosts.into_iter().next() {
        Some(h) => vec![(RecordType::Cname, vec![h])],
        None => Vec::new(),
    }
}

/// The Service as the object of an Event.
pub fn object_ref(namespace: &str, name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Service".into()),
        namespace: Some(namespace.to_string()),
        name: Some(name.to_string()),
        uid,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Service, ServiceSpec, ServiceStatus};
    use kube::api::ObjectMeta;

    fn naming() -> Naming {
        Naming {
            template: Template::parse("{prefix}-{name}.{domain}").unwrap(),
            prefix: "kube".into(),
            domain: "vipmind.me".into(),
            default_ttl: 300,
        }
    }

    fn svc(name: &str, ips: &[&str], annotations: &[(&str, &str)]) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("test".into()),
                annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                managed_fields: Some(vec![Default::default()]),
                labels: Some([("app".to_string(), "x".to_string())].into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("NodePort".into()),
                cluster_ip: ips.first().map(|s| s.to_string()),
                cluster_ips: Some(ips.iter().map(|s| s.to_string()).collect()),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn want(s: Service, naming: &Naming) -> Desired {
        desired(&ServiceInfo::from(s), naming)
    }

    fn records(d: Desired) -> Vec<RecordSet> {
        match d {
            Desired::Publish(c) => c.records,
            other => panic!("expected records, got {other:?}"),
        }
    }

    #[test]
    fn seed_service_gets_an_a_record() {
        let r = records(want(svc("hello-world", &["10.108.222.86"], &[]), &naming()));
        assert_eq!(
            r,
            vec![RecordSet::new("kube-hello-world.vipmind.me", RecordType::A, 300, vec!["10.108.222.86".into()])]
        );
    }

    #[test]
    fn dual_stack_gets_a_and_aaaa() {
        let r = records(want(svc("x", &["10.0.0.1", "fd00:10:96::1"], &[]), &naming()));
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].rtype, RecordType::A);
        assert_eq!(r[1].rtype, RecordType::Aaaa);
        assert_eq!(r[1].values, vec!["fd00:10:96::1".to_string()]);
    }

    #[test]
    fn annotations() {
        let r = records(want(
            svc("x", &["10.0.0.1"], &[(ANNOTATION_HOSTNAME, "a.vipmind.me, B.vipmind.me."), (ANNOTATION_TTL, "60")]),
            &naming(),
        ));
        assert_eq!(r.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["a.vipmind.me", "b.vipmind.me"]);
        assert!(r.iter().all(|r| r.ttl == 60));
        assert_eq!(want(svc("x", &["10.0.0.1"], &[(ANNOTATION_DNS, "false")]), &naming()), Desired::Quiet);
        let bad = want(svc("x", &["10.0.0.1"], &[(ANNOTATION_HOSTNAME, "a.example.com")]), &naming());
        assert!(matches!(bad, Desired::Invalid { reason: "InvalidHostname", .. }), "{bad:?}");
        let bad = want(svc("x", &["10.0.0.1"], &[(ANNOTATION_TTL, "-1")]), &naming());
        assert!(matches!(bad, Desired::Invalid { reason: "InvalidAnnotation", .. }), "{bad:?}");
        let bad = want(svc("x", &["10.0.0.1"], &[(ANNOTATION_TARGET, "node")]), &naming());
        assert!(matches!(bad, Desired::Invalid { reason: "InvalidAnnotation", .. }), "{bad:?}");
    }

    #[test]
    fn external_dns_annotations_are_aliases() {
        let r = records(want(
            svc("x", &["10.0.0.1"], &[(EXTERNAL_DNS_HOSTNAME, "ext.vipmind.me"), (EXTERNAL_DNS_TTL, "1m")]),
            &naming(),
        ));
        assert_eq!((r[0].name.as_str(), r[0].ttl), ("ext.vipmind.me", 60));
        // Ours win when both are set.
        let r = records(want(
            svc(
                "x",
                &["10.0.0.1"],
                &[
                    (EXTERNAL_DNS_HOSTNAME, "ext.vipmind.me"),
                    (ANNOTATION_HOSTNAME, "ours.vipmind.me"),
                    (EXTERNAL_DNS_TTL, "60"),
                    (ANNOTATION_TTL, "30"),
                ],
            ),
            &naming(),
        ));
        assert_eq!((r[0].name.as_str(), r[0].ttl), ("ours.vipmind.me", 30));
        let bad = want(svc("x", &["10.0.0.1"], &[(EXTERNAL_DNS_TTL, "1.5s")]), &naming());
        assert!(matches!(&bad, Desired::Invalid { message, .. } if message.contains(EXTERNAL_DNS_TTL)), "{bad:?}");
    }

    #[test]
    fn headless_is_skipped_with_a_reason() {
        assert!(matches!(want(svc("x", &["None"], &[]), &naming()), Desired::Skip { .. }));
    }

    #[test]
    fn load_balancer_target() {
        let mut s = svc("x", &["10.0.0.1"], &[(ANNOTATION_TARGET, "load-balancer")]);
        assert_eq!(want(s.clone(), &naming()), Desired::Quiet, "no ingress yet: nothing");
        s.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![LoadBalancerIngress {
                    hostname: Some("lb.aws.example".into()),
                    ..Default::default()
                }]),
            }),
            ..Default::default()
        });
        let r = records(want(s.clone(), &naming()));
        assert_eq!(r[0].rtype, RecordType::Cname);
        assert_eq!(r[0].values, vec!["lb.aws.example".to_string()]);
    }
}
