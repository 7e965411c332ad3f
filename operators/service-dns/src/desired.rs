//! Desired state: which records each Service asks for (its ClusterIPs, or its
//! load balancer's ingress, at its hostnames), or why it asks for none; and
//! what of its wish it may not have (a name its namespace was not granted,
//! too many names, too long a TTL), said as Warnings.

use k8s_openapi::api::core::v1::ObjectReference;

use crate::endpoints::SliceInfo;
use crate::extdns::{EXTERNAL_DNS_ALPHA_HOSTNAME, EXTERNAL_DNS_ALPHA_TTL, EXTERNAL_DNS_HOSTNAME, EXTERNAL_DNS_TTL};
use crate::grant::{Grant, HostnameAnnotations};
use crate::headless;
use crate::hostname::{self, HostnameError, Template, Vars};
use crate::model::{RecordSet, RecordType};
use crate::service::ServiceInfo;
use crate::zones::{ANNOTATION_ZONES, ZoneSet};

mod names;
mod targets;

use names::{Names, check_names, listed, not_allowed};
use targets::{LoadBalancer, cluster_ip_targets, load_balancer_targets, pod_names, split_ips};

pub const ANNOTATION_HOSTNAME: &str = "flotilla.dev/hostname";
pub const ANNOTATION_TTL: &str = "flotilla.dev/ttl";
pub const ANNOTATION_DNS: &str = "flotilla.dev/dns";
pub const ANNOTATION_TARGET: &str = "flotilla.dev/target";
/// `"true"` on a headless Service: a name per pod with a `hostname`.
pub const ANNOTATION_POD_RECORDS: &str = "flotilla.dev/pod-records";

/// A TTL annotation: whole seconds, or (as external-dns takes it) a
/// duration of whole seconds such as `1m`.
fn parse_ttl(v: &str) -> Option<i64> {
    let v = v.trim();
    v.parse::<i64>().ok().or_else(|| {
        let d = flotilla_shared::duration::parse(v).ok()?;
        (d.subsec_nanos() == 0).then(|| i64::try_from(d.as_secs()).ok()).flatten()
    })
}

/// Route53's largest TTL (the largest `--max-ttl`).
pub const MAX_TTL: i64 = 2_147_483_647;

/// How hostnames are made.
#[derive(Debug, Clone)]
pub struct Naming {
    pub template: Template,
    pub prefix: String,
    /// The zone's name (normalized), `{domain}`.
    pub domain: String,
    /// The zone's id, and every zone managed (more than one with
    /// `--hosted-zone-id` repeated): a name goes to its own zones only.
    pub zone_id: String,
    pub zones: std::sync::Arc<ZoneSet>,
    pub default_ttl: i64,
    /// `--max-ttl`: larger annotated TTLs are clamped to it.
    pub max_ttl: i64,
    /// `--max-hostnames-per-service`.
    pub max_hostnames: usize,
    /// `--hostname-annotations`.
    pub annotations: HostnameAnnotations,
    /// `--publish-headless`: off, a headless Service is skipped (as before issue 31).
    pub publish_headless: bool,
    /// `--pod-hostname-template`: a headless Service's pod names.
    pub pod_template: Template,
    /// `--max-endpoints-per-service`: addresses in a headless Service's set, and pod names.
    pub max_endpoints: usize,
    /// `--alias-load-balancers`: an AWS load balancer's hostname is
    /// published as an ALIAS unless the Service says `flotilla.dev/alias: "false"`.
    pub alias_load_balancers: bool,
}

/// Event reasons of the refusals and corrections made here.
pub const HOSTNAME_NOT_ALLOWED: &str = "HostnameNotAllowed";
pub const TOO_MANY_HOSTNAMES: &str = "TooManyHostnames";
pub const TTL_CLAMPED: &str = "TTLClamped";
/// A headless Service with `--publish-headless` off (a Normal Event).
pub const DNS_RECORD_SKIPPED: &str = "DnsRecordSkipped";
pub const HEADLESS_OFF: &str = "headless Service (clusterIP: None): not published (--publish-headless is off)";

/// Something the Service asked for and does not get (a Warning), while the
/// rest of its wish stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub reason: &'static str,
    pub message: String,
}

/// What one Service gets, and what it was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wish {
    pub desired: Desired,
    pub notices: Vec<Notice>,
}

impl From<Desired> for Wish {
    fn from(desired: Desired) -> Self {
        Wish { desired, notices: Vec::new() }
    }
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
    /// no ready endpoint, ExternalName).
    Quiet,
}

pub fn resource_id(namespace: &str, name: &str) -> String {
    format!("service/{namespace}/{name}")
}

/// The records a Service without endpoints asks for (see [`wish`]).
pub fn desired(svc: &ServiceInfo, naming: &Naming, grant: Option<&Grant>) -> Wish {
    wish(svc, naming, grant, &[])
}

/// The records a Service asks for, given `--hostname-annotations`, its
/// namespace's grant (`None`: the Namespace has no `flotilla.dev/allowed-hostnames`)
/// and, for a headless Service, its EndpointSlices.
pub fn wish(svc: &ServiceInfo, naming: &Naming, grant: Option<&Grant>, slices: &[&SliceInfo]) -> Wish {
    let (namespace, name) = (svc.namespace(), svc.name());
    if svc.annotation(ANNOTATION_DNS).is_some_and(|v| v.trim().eq_ignore_ascii_case("false")) {
        return Desired::Quiet.into();
    }
    if let Some((key, len)) = svc.oversized.as_deref() {
        let bound = crate::service::bound_of(key, naming.max_hostnames);
        return Desired::Invalid {
            reason: "InvalidAnnotation",
            message: format!("{key} is {len} bytes long; at most {bound} are read here; no record published"),
        }
        .into();
    }
    let mut notices = Vec::new();

    let ttl_annotation = [ANNOTATION_TTL, EXTERNAL_DNS_TTL, EXTERNAL_DNS_ALPHA_TTL]
        .into_iter()
        .find_map(|k| svc.annotation(k).map(|v| (k, v)));
    let ttl = match ttl_annotation {
        None => naming.default_ttl,
        Some((key, v)) => match parse_ttl(v) {
            Some(t) if t > naming.max_ttl => {
                notices.push(Notice {
                    reason: TTL_CLAMPED,
                    message: format!(
                        "{key}={v:?} is above the largest TTL allowed here ({}s, --max-ttl); published with {}s",
                        naming.max_ttl, naming.max_ttl
                    ),
                });
                naming.max_ttl
            }
            Some(t) if t >= 0 => t,
            _ => {
                return Desired::Invalid {
                    reason: "InvalidAnnotation",
                    message: format!("{key}={v:?} is not a TTL (whole seconds, or e.g. 1m); no record published"),
                }
                .into();
            }
        },
    };

    let routing = match crate::routing::of(svc) {
        Ok(r) => r,
        Err(e) => {
            return Desired::Invalid { reason: "InvalidAnnotation", message: format!("{e}; no record published") }
                .into();
        }
    };

    // The Service's choice of zones (several zones): applied once its
    // names are known, so that every zone's sync gives the same answer.
    let chosen = match svc.annotation(ANNOTATION_ZONES).map(|v| naming.zones.chosen(v)) {
        Some(Err(message)) => return Desired::Invalid { reason: "InvalidAnnotation", message }.into(),
        Some(Ok(ids)) => Some(ids),
        None => None,
    };
    let here_chosen = chosen.as_ref().is_none_or(|ids| ids.contains(&naming.zone_id.as_str()));

    let template = || naming.template.render(Vars { name, namespace, prefix: &naming.prefix, domain: &naming.domain });
    let mut hostname_annotation = [ANNOTATION_HOSTNAME, EXTERNAL_DNS_HOSTNAME, EXTERNAL_DNS_ALPHA_HOSTNAME]
        .into_iter()
        .find_map(|k| svc.annotation(k).map(|v| (k, v)));
    if let Some((key, _)) = hostname_annotation.filter(|_| naming.annotations == HostnameAnnotations::Off) {
        notices.push(Notice {
            reason: HOSTNAME_NOT_ALLOWED,
            message: format!(
                "{key} is ignored here (--hostname-annotations=off): the Service gets its --hostname-template name"
            ),
        });
        hostname_annotation = None;
    }
    // The Service's names in every zone (the apex check reads them all).
    let all_names: Vec<String>;
    let hostnames: Vec<String> = match hostname_annotation {
        Some((key, v)) => {
            let mut names: Vec<String> = v.split(',').map(hostname::normalize).filter(|h| !h.is_empty()).collect();
            names.sort();
            names.dedup();
            if names.len() > naming.max_hostnames {
                // None of them, rather than the first N: which N would be
                // an accident of spelling, and the author sees at once.
                return Wish {
                    desired: Desired::Quiet,
                    notices: vec![Notice {
                        reason: TOO_MANY_HOSTNAMES,
                        message: format!(
                            "{key} names {} hostnames; at most {} per Service are published here \
                             (--max-hostnames-per-service); none of them published",
                            names.len(),
                            naming.max_hostnames
                        ),
                    }],
                };
            }
            if names.is_empty() {
                return Desired::Invalid {
                    reason: "InvalidHostname",
                    message: format!("{key} names no hostname; no record published"),
                }
                .into();
            }
            // Every name checked against its own zone's domain, whichever
            // zone this sync is for: a bad name is the same answer in every
            // zone, so an Invalid Service keeps what it has in all of them.
            // (The apex is checked once the targets are known: an ALIAS may have it.)
            if let Err(message) = check_names(&names, naming) {
                return Desired::Invalid { reason: "InvalidHostname", message }.into();
            }
            let names = if naming.annotations == HostnameAnnotations::NamespaceAllowed {
                let (allowed, refused): (Vec<String>, Vec<String>) =
                    names.into_iter().partition(|h| grant.is_some_and(|g| g.allows(h)));
                if !refused.is_empty() {
                    notices.push(not_allowed(key, namespace, &refused, grant));
                }
                if allowed.is_empty() {
                    return Wish { desired: Desired::Quiet, notices };
                }
                allowed
            } else {
                names
            };
            if let Some(ids) = &chosen
                && !names.iter().any(|h| naming.zones.homes(h).any(|z| ids.contains(&z.id.as_str())))
            {
                notices.push(Notice {
                    reason: "InvalidAnnotation",
                    message: format!(
                        "{ANNOTATION_ZONES}: the zones it names ({}) hold none of the Service's names ({}); \
                         nothing published",
                        ids.join(", "),
                        listed(&names.iter().map(String::as_str).collect::<Vec<_>>())
                    ),
                });
                return Wish { desired: Desired::Quiet, notices };
            }
            let here: Vec<String> =
                names.iter().filter(|h| naming.zones.is_home(&naming.zone_id, h)).cloned().collect();
            all_names = names;
            here
        }
        None => {
            let h = template();
            if let Err(e) = hostname::validate(&h, &naming.domain) {
                return Desired::Invalid { reason: "InvalidHostname", message: format!("{e}; no record published") }
                    .into();
            }
            all_names = vec![h.clone()];
            // Under a delegated subdomain whose zone is managed too: that zone's.
            if naming.zones.is_home(&naming.zone_id, &h) { vec![h] } else { Vec::new() }
        }
    };
    // A zone the Service did not choose gets nothing (checked after the
    // targets, whose bad input every zone says alike).
    let names = Names { here: hostnames, all: &all_names, chosen: here_chosen };
    let mut desired = publish(svc, names, ttl, naming, slices, &mut notices);
    // Every record of the Service is its set (routing policies).
    if let (Some(routing), Desired::Publish(claim)) = (routing, &mut desired) {
        let records = std::mem::take(&mut claim.records);
        claim.records = records.into_iter().map(|r| r.with_routing(routing.clone())).collect();
    }
    Wish { desired, notices }
}

/// The records at `names.here` for the Service's targets (and, for a
/// headless Service with `flotilla.dev/pod-records`, at its pods' names).
fn publish(
    svc: &ServiceInfo,
    names: Names<'_>,
    ttl: i64,
    naming: &Naming,
    slices: &[&SliceInfo],
    notices: &mut Vec<Notice>,
) -> Desired {
    let (namespace, name) = (svc.namespace(), svc.name());
    let pod_records = svc.annotation(ANNOTATION_POD_RECORDS).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let mut pods = Vec::new();
    let mut alias_target = None;
    let targets = match svc.annotation(ANNOTATION_TARGET).map(|s| s.trim()) {
        None | Some("") | Some("cluster-ip") if svc.is_headless() && naming.publish_headless => {
            let (addresses, cut) =
                headless::addresses(slices, svc.publish_not_ready, pod_records, naming.max_endpoints);
            notices.extend(cut);
            pods = pod_names(svc, naming, addresses.pods, notices);
            split_ips(addresses.service.into_iter())
        }
        None | Some("") | Some("cluster-ip") => match cluster_ip_targets(svc) {
            Ok(t) => t,
            Err(skip) => return skip,
        },
        Some("load-balancer") => match load_balancer_targets(svc, naming, notices) {
            Ok(LoadBalancer::Addresses(t)) => t,
            Ok(LoadBalancer::Alias(types, a)) => {
                alias_target = Some(a);
                types.into_iter().map(|t| (t, Vec::new())).collect()
            }
            Err(message) => return Desired::Invalid { reason: "InvalidAnnotation", message },
        },
        Some(other) => {
            return Desired::Invalid {
                reason: "InvalidAnnotation",
                message: format!(
                    "{ANNOTATION_TARGET}={other:?} is not a target (cluster-ip or load-balancer); no record published"
                ),
            };
        }
    };
    if pod_records && !svc.is_headless() {
        notices.push(Notice {
            reason: "InvalidAnnotation",
            message: format!("{ANNOTATION_POD_RECORDS} applies to headless Services (clusterIP: None) only; ignored"),
        });
    }
    if targets.is_empty() && pods.is_empty() {
        return Desired::Quiet;
    }
    // The apex: addresses or an ALIAS, never a CNAME — any zone's apex
    // among the Service's names, so that every zone gives the same answer.
    if alias_target.is_none()
        && targets.iter().any(|(t, _)| *t == RecordType::Cname)
        && let Some(apex) = names.all.iter().find(|h| naming.zones.is_apex(h))
    {
        return Desired::Invalid {
            reason: "InvalidHostname",
            message: format!("{}; no record published", HostnameError::Apex(apex.clone())),
        };
    }
    if !names.chosen {
        return Desired::Quiet;
    }
    let hostnames = names.here;

    // Exactly as many as pushed: a Vec grown from empty keeps room for
    // four record sets (224 B), and every sync builds a claim per Service.
    let pod_sets: usize = pods.iter().map(|(_, t)| t.len()).sum();
    let mut records = Vec::with_capacity(hostnames.len() * targets.len() + pod_sets);
    for h in &hostnames {
        for (rtype, values) in &targets {
            records.push(match &alias_target {
                Some(a) => RecordSet::alias(h.clone(), *rtype, a.clone()),
                None => RecordSet::new(h.clone(), *rtype, ttl, values.clone()),
            });
        }
    }
    for (h, targets) in pods {
        for (rtype, values) in targets {
            records.push(RecordSet::new(h.clone(), rtype, ttl, values));
        }
    }
    records.sort();
    records.dedup();
    // Its names all in other zones (several zones).
    if records.is_empty() {
        return Desired::Quiet;
    }
    let resource = resource_id(namespace, name);
    Desired::Publish(Claim { order: (svc.created, resource.clone()), resource, records })
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
    use crate::alias::{self, ANNOTATION_ALIAS, ANNOTATION_ALIAS_ZONE, ANNOTATION_EVALUATE_TARGET_HEALTH};
    use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Service, ServiceSpec, ServiceStatus};
    use kube::api::ObjectMeta;

    /// `--hostname-annotations=any`: the checks of the names themselves.
    fn naming() -> Naming {
        Naming {
            template: Template::parse("{prefix}-{name}.{domain}").unwrap(),
            prefix: "kube".into(),
            domain: "vipmind.me".into(),
            zone_id: "ZVIP".into(),
            zones: std::sync::Arc::new(ZoneSet::new(vec![crate::zone::Zone {
                id: "ZVIP".into(),
                name: "vipmind.me".into(),
            }])),
            default_ttl: 300,
            max_ttl: 86_400,
            max_hostnames: 10,
            annotations: HostnameAnnotations::Any,
            publish_headless: true,
            pod_template: Template::parse_pod("{hostname}.{name}.{domain}").unwrap(),
            max_endpoints: 100,
            alias_load_balancers: true,
        }
    }

    /// The defaults: names need the namespace's grant.
    fn granted() -> Naming {
        Naming { annotations: HostnameAnnotations::NamespaceAllowed, ..naming() }
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
        desired(&ServiceInfo::from(s), naming, None).desired
    }

    fn wish(s: Service, naming: &Naming, grant: &str) -> Wish {
        desired(&ServiceInfo::from(s), naming, Some(&Grant::parse(grant)))
    }

    fn names(d: &Desired) -> Vec<&str> {
        match d {
            Desired::Publish(c) => c.records.iter().map(|r| &*r.name).collect(),
            _ => Vec::new(),
        }
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
        assert_eq!(*r[1].values, [Box::from("fd00:10:96::1")]);
    }

    /// Several zones: each zone's sync gets the Service's names of that zone
    /// (a public and a private zone of one domain both; a delegated
    /// subdomain's zone alone its names), `flotilla.dev/zones` narrows them,
    /// and a name in no zone, or a zone not managed, is refused.
    #[test]
    fn several_zones_each_get_their_own_names() {
        let zone = |id: &str, name: &str| crate::zone::Zone { id: id.into(), name: name.into() };
        let zones = std::sync::Arc::new(ZoneSet::new(vec![
            zone("ZPUB", "vipmind.me"),
            zone("ZPRIV", "vipmind.me"),
            zone("ZSUB", "sub.vipmind.me"),
            zone("ZORG", "example.org"),
        ]));
        let in_zone = |id: &str| {
            let domain = zones.zones().iter().find(|z| z.id == id).map(|z| z.name.clone()).unwrap();
            Naming { domain, zone_id: id.into(), zones: std::sync::Arc::clone(&zones), ..naming() }
        };
        let hosts = (ANNOTATION_HOSTNAME, "a.vipmind.me,b.sub.vipmind.me,c.example.org");
        for (id, want_names) in [
            ("ZPUB", vec!["a.vipmind.me"]),
            ("ZPRIV", vec!["a.vipmind.me"]),
            ("ZSUB", vec!["b.sub.vipmind.me"]),
            ("ZORG", vec!["c.example.org"]),
        ] {
            assert_eq!(names(&want(svc("x", &["10.0.0.1"], &[hosts]), &in_zone(id))), want_names, "{id}");
        }
        // Only the private zone, by id; then a domain (its every zone).
        let private = [hosts, (ANNOTATION_ZONES, "ZPRIV")];
        assert_eq!(want(svc("x", &["10.0.0.1"], &private), &in_zone("ZPUB")), Desired::Quiet);
        assert_eq!(names(&want(svc("x", &["10.0.0.1"], &private), &in_zone("ZPRIV"))), ["a.vipmind.me"]);
        assert_eq!(want(svc("x", &["10.0.0.1"], &private), &in_zone("ZORG")), Desired::Quiet);
        let by_domain = [hosts, (ANNOTATION_ZONES, "vipmind.me")];
        assert_eq!(names(&want(svc("x", &["10.0.0.1"], &by_domain), &in_zone("ZPUB"))), ["a.vipmind.me"]);
        // The template's name: each zone's own domain.
        assert_eq!(names(&want(svc("x", &["10.0.0.1"], &[]), &in_zone("ZORG"))), ["kube-x.example.org"]);
        // Refused: a name in no zone managed; a zone not managed.
        let nowhere =
            want(svc("x", &["10.0.0.1"], &[(ANNOTATION_HOSTNAME, "a.vipmind.me,d.example.net")]), &in_zone("ZPUB"));
        assert!(
            matches!(&nowhere, Desired::Invalid { reason: "InvalidHostname", message } if message.contains("d.example.net is in none of the zones")),
            "{nowhere:?}"
        );
        let unknown = want(svc("x", &["10.0.0.1"], &[(ANNOTATION_ZONES, "ZNOPE")]), &in_zone("ZPUB"));
        assert!(
            matches!(&unknown, Desired::Invalid { reason: "InvalidAnnotation", message } if message.contains("ZNOPE")),
            "{unknown:?}"
        );
        // Bad input is the same answer in every zone (an Invalid Service
        // keeps what it has everywhere): a bad label in one zone's name, a
        // CNAME at one zone's apex.
        let bad_label = [(ANNOTATION_HOSTNAME, "a.vipmind.me,b_x.example.org")];
        let cname_at_apex = behind("lb.example.net", &[(ANNOTATION_HOSTNAME, "vipmind.me,c.example.org")]);
        for id in ["ZPUB", "ZPRIV", "ZSUB", "ZORG"] {
            let d = want(svc("x", &["10.0.0.1"], &bad_label), &in_zone(id));
            assert!(matches!(d, Desired::Invalid { reason: "InvalidHostname", .. }), "{id}: {d:?}");
            let d = want(cname_at_apex.clone(), &in_zone(id));
            assert!(matches!(&d, Desired::Invalid { message, .. } if message.contains("apex")), "{id}: {d:?}");
        }
        // Zones chosen that hold none of its names: said (the same in every
        // zone, one Event), nothing published.
        let none_held = [hosts, (ANNOTATION_ZONES, "ZSUB")];
        let hosts_elsewhere = [(ANNOTATION_HOSTNAME, "a.vipmind.me"), (ANNOTATION_ZONES, "ZORG")];
        for id in ["ZPUB", "ZORG"] {
            let w = desired(&ServiceInfo::from(svc("x", &["10.0.0.1"], &hosts_elsewhere)), &in_zone(id), None);
            assert_eq!(w.desired, Desired::Quiet, "{id}");
            assert!(
                w.notices.iter().any(|n| n.reason == "InvalidAnnotation" && n.message.contains("hold none")),
                "{w:?}"
            );
        }
        assert_eq!(names(&want(svc("x", &["10.0.0.1"], &none_held), &in_zone("ZSUB"))), ["b.sub.vipmind.me"]);
        // One zone: a flotilla.dev/zones naming it changes nothing; another is refused.
        let one = naming();
        assert_eq!(names(&want(svc("x", &["10.0.0.1"], &[(ANNOTATION_ZONES, "ZVIP")]), &one)), ["kube-x.vipmind.me"]);
        let other = want(svc("x", &["10.0.0.1"], &[(ANNOTATION_ZONES, "ZPUB")]), &one);
        assert!(matches!(other, Desired::Invalid { reason: "InvalidAnnotation", .. }), "{other:?}");
    }

    #[test]
    fn annotations() {
        let r = records(want(
            svc("x", &["10.0.0.1"], &[(ANNOTATION_HOSTNAME, "a.vipmind.me, B.vipmind.me."), (ANNOTATION_TTL, "60")]),
            &naming(),
        ));
        assert_eq!(r.iter().map(|r| &*r.name).collect::<Vec<_>>(), ["a.vipmind.me", "b.vipmind.me"]);
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
        assert_eq!((&*r[0].name, r[0].ttl), ("ext.vipmind.me", 60));
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
        assert_eq!((&*r[0].name, r[0].ttl), ("ours.vipmind.me", 30));
        let bad = want(svc("x", &["10.0.0.1"], &[(EXTERNAL_DNS_TTL, "1.5s")]), &naming());
        assert!(matches!(&bad, Desired::Invalid { message, .. } if message.contains(EXTERNAL_DNS_TTL)), "{bad:?}");
    }

    /// external-dns before v0.22 wrote `external-dns.alpha.kubernetes.io/`;
    /// both prefixes name the record, the newer one first.
    #[test]
    fn both_external_dns_prefixes_are_aliases_the_newer_first() {
        let r = records(want(
            svc("x", &["10.0.0.1"], &[(EXTERNAL_DNS_ALPHA_HOSTNAME, "old.vipmind.me"), (EXTERNAL_DNS_ALPHA_TTL, "2m")]),
            &naming(),
        ));
        assert_eq!((&*r[0].name, r[0].ttl), ("old.vipmind.me", 120));
        let both = [
            (EXTERNAL_DNS_ALPHA_HOSTNAME, "old.vipmind.me"),
            (EXTERNAL_DNS_HOSTNAME, "new.vipmind.me"),
            (EXTERNAL_DNS_ALPHA_TTL, "120"),
            (EXTERNAL_DNS_TTL, "90"),
        ];
        let r = records(want(svc("x", &["10.0.0.1"], &both), &naming()));
        assert_eq!((&*r[0].name, r[0].ttl), ("new.vipmind.me", 90));
        let bad = want(svc("x", &["10.0.0.1"], &[(EXTERNAL_DNS_ALPHA_TTL, "soon")]), &naming());
        assert!(
            matches!(&bad, Desired::Invalid { message, .. } if message.contains(EXTERNAL_DNS_ALPHA_TTL)),
            "{bad:?}"
        );
        // Kept by the Service projection, so the watch does not drop them:
        // of the hostnames, the one read.
        let info = ServiceInfo::from(svc("x", &["10.0.0.1"], &both));
        for (k, v) in both {
            let kept = if k == EXTERNAL_DNS_ALPHA_HOSTNAME { None } else { Some(v) };
            assert_eq!(info.annotation(k), kept, "{k}");
        }
    }

    #[test]
    fn annotated_names_need_the_namespace_grant() {
        let login = svc("x", &["10.0.0.1"], &[(ANNOTATION_HOSTNAME, "login.vipmind.me")]);
        // No grant on the namespace: nothing, and the Warning says what to ask for.
        let w = desired(&ServiceInfo::from(login.clone()), &granted(), None);
        assert_eq!(w.desired, Desired::Quiet, "not kept: a name it held is released");
        assert_eq!(w.notices.len(), 1);
        assert_eq!(w.notices[0].reason, HOSTNAME_NOT_ALLOWED);
        assert!(w.notices[0].message.contains(crate::grant::ANNOTATION_ALLOWED_HOSTNAMES), "{}", w.notices[0].message);
        assert!(w.notices[0].message.contains("login.vipmind.me"), "{}", w.notices[0].message);
        // Granted exactly, or by a subtree: published.
        for grant in ["login.vipmind.me", "LOGIN.vipmind.me.", "*.vipmind.me", "other.vipmind.me, login.vipmind.me"] {
            let w = wish(login.clone(), &granted(), grant);
            assert_eq!(names(&w.desired), ["login.vipmind.me"], "{grant}");
            assert!(w.notices.is_empty(), "{grant}: {:?}", w.notices);
        }
        // *.sub.domain does not cover sub.domain; a granted and a refused name: only the granted one.
        let two = svc("x", &["10.0.0.1"], &[(EXTERNAL_DNS_HOSTNAME, "team.vipmind.me, a.team.vipmind.me")]);
        let w = wish(two, &granted(), "*.team.vipmind.me, bad entry");
        assert_eq!(names(&w.desired), ["a.team.vipmind.me"]);
        assert_eq!(w.notices[0].reason, HOSTNAME_NOT_ALLOWED);
        let m = &w.notices[0].message;
        assert!(m.starts_with(EXTERNAL_DNS_HOSTNAME) && m.contains("team.vipmind.me is not granted"), "{m}");
        assert!(m.contains("\"bad entry\" are not names"), "bad entries are pointed out: {m}");
        // Template names need no grant.
        let w = desired(&ServiceInfo::from(svc("y", &["10.0.0.1"], &[])), &granted(), None);
        assert_eq!(names(&w.desired), ["kube-y.vipmind.me"]);
        assert!(w.notices.is_empty());
        // any: today's behaviour; off: the template name, said once.
        assert_eq!(names(&want(login.clone(), &naming())), ["login.vipmind.me"]);
        let off = Naming { annotations: HostnameAnnotations::Off, ..naming() };
        let w = wish(login, &off, "*.vipmind.me");
        assert_eq!(names(&w.desired), ["kube-x.vipmind.me"]);
        assert_eq!(w.notices[0].reason, HOSTNAME_NOT_ALLOWED);
        assert!(w.notices[0].message.contains("--hostname-annotations=off"));
    }

    #[test]
    fn too_many_names_publish_none() {
        let ten: Vec<String> = (0..10).map(|i| format!("n{i}.vipmind.me")).collect();
        let ok = svc("x", &["10.0.0.1"], &[(ANNOTATION_HOSTNAME, &ten.join(","))]);
        assert_eq!(names(&wish(ok, &granted(), "*.vipmind.me").desired).len(), 10);
        // Duplicates count once.
        let dup = format!("{},N0.vipmind.me.", ten.join(","));
        assert_eq!(names(&want(svc("x", &["10.0.0.1"], &[(ANNOTATION_HOSTNAME, &dup)]), &naming())).len(), 10);
        let eleven = format!("{},n10.vipmind.me", ten.join(","));
        for naming in [granted(), naming()] {
            let w = wish(svc("x", &["10.0.0.1"], &[(ANNOTATION_HOSTNAME, &eleven)]), &naming, "*.vipmind.me");
            assert_eq!(w.desired, Desired::Quiet);
            assert_eq!(w.notices[0].reason, TOO_MANY_HOSTNAMES);
            assert!(w.notices[0].message.contains("11 hostnames"), "{}", w.notices[0].message);
        }
    }

    #[test]
    fn a_ttl_above_max_ttl_is_clamped() {
        for v in ["2147483647", "86401", "99999999999", "24000h"] {
            let w = wish(svc("x", &["10.0.0.1"], &[(ANNOTATION_TTL, v)]), &granted(), "");
            let Desired::Publish(c) = &w.desired else { panic!("{v}: {w:?}") };
            assert_eq!(c.records[0].ttl, 86_400, "{v}");
            assert_eq!(w.notices[0].reason, TTL_CLAMPED, "{v}");
        }
        let w = wish(svc("x", &["10.0.0.1"], &[(EXTERNAL_DNS_TTL, "86400")]), &granted(), "");
        assert!(w.notices.is_empty());
        let bad = want(svc("x", &["10.0.0.1"], &[(ANNOTATION_TTL, "-1")]), &naming());
        assert!(matches!(bad, Desired::Invalid { reason: "InvalidAnnotation", .. }), "{bad:?}");
    }

    fn endpoints(eps: &[(&str, bool, Option<&str>)]) -> SliceInfo {
        use crate::endpoints::Endpoint;
        let endpoints = eps
            .iter()
            .map(|(ip, ready, h)| Endpoint { ip: ip.parse().unwrap(), ready: *ready, hostname: h.map(Box::from) })
            .collect();
        SliceInfo { namespace: "test".into(), service: "web".into(), endpoints }
    }

    fn headless(annotations: &[(&str, &str)], publish_not_ready: bool) -> ServiceInfo {
        let mut s = svc("web", &["None"], annotations);
        if let Some(spec) = s.spec.as_mut() {
            spec.publish_not_ready_addresses = Some(publish_not_ready);
        }
        ServiceInfo::from(s)
    }

    fn sets(d: &Desired) -> Vec<(String, RecordType, Vec<String>)> {
        match d {
            Desired::Publish(c) => c
                .records
                .iter()
                .map(|r| (r.name.to_string(), r.rtype, r.values.iter().map(|v| v.to_string()).collect()))
                .collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn headless_publishes_its_ready_endpoints() {
        let s = endpoints(&[
            ("10.0.0.2", true, Some("web-1")),
            ("10.0.0.1", true, Some("web-0")),
            ("10.0.0.3", false, None),
        ]);
        let v6 = endpoints(&[("fd00::1", true, Some("web-0"))]);
        let w = super::wish(&headless(&[], false), &naming(), None, &[&s, &v6]);
        assert_eq!(
            sets(&w.desired),
            [
                (
                    "kube-web.vipmind.me".to_string(),
                    RecordType::A,
                    vec!["10.0.0.1".to_string(), "10.0.0.2".to_string()]
                ),
                ("kube-web.vipmind.me".to_string(), RecordType::Aaaa, vec!["fd00::1".to_string()]),
            ],
            "ready only, no pod names without the annotation"
        );
        assert!(w.notices.is_empty());
        // publishNotReadyAddresses: the not-ready one too.
        let w = super::wish(&headless(&[], true), &naming(), None, &[&s]);
        assert_eq!(sets(&w.desired)[0].2, ["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
        // No endpoint ready: nothing (its records go).
        let down = endpoints(&[("10.0.0.3", false, None)]);
        assert_eq!(super::wish(&headless(&[], false), &naming(), None, &[&down]).desired, Desired::Quiet);
        assert_eq!(super::wish(&headless(&[], false), &naming(), None, &[]).desired, Desired::Quiet);
    }

    #[test]
    fn headless_pod_records() {
        let s = endpoints(&[
            ("10.0.0.1", true, Some("web-0")),
            ("10.0.0.2", true, Some("web-1")),
            ("10.0.0.3", false, Some("web-2")),
        ]);
        let w = super::wish(&headless(&[(ANNOTATION_POD_RECORDS, "true")], false), &naming(), None, &[&s]);
        let names: Vec<(String, Vec<String>)> = sets(&w.desired).into_iter().map(|(n, _, v)| (n, v)).collect();
        assert_eq!(
            names,
            [
                ("kube-web.vipmind.me".to_string(), vec!["10.0.0.1".to_string(), "10.0.0.2".to_string()]),
                ("web-0.web.vipmind.me".to_string(), vec!["10.0.0.1".to_string()]),
                ("web-1.web.vipmind.me".to_string(), vec!["10.0.0.2".to_string()]),
            ]
        );
        // The template is the admin's; a bad rendering leaves only that pod out.
        let odd = Naming { pod_template: Template::parse_pod("{hostname}.{name}.elsewhere.org").unwrap(), ..naming() };
        let w = super::wish(&headless(&[(ANNOTATION_POD_RECORDS, "true")], false), &odd, None, &[&s]);
        assert_eq!(names_of(&w.desired), ["kube-web.vipmind.me"]);
        assert_eq!(w.notices[0].reason, "InvalidHostname");
        // A dotted hostname never reaches a name.
        let dotted = endpoints(&[("10.0.0.1", true, Some("a.b")), ("10.0.0.2", true, Some("web-1"))]);
        let w = super::wish(&headless(&[(ANNOTATION_POD_RECORDS, "true")], false), &naming(), None, &[&dotted]);
        assert_eq!(names_of(&w.desired), ["kube-web.vipmind.me", "web-1.web.vipmind.me"]);
        assert!(w.notices[0].message.contains("not a single label"), "{:?}", w.notices);
        // On a Service with a ClusterIP: ignored, said once.
        let w = super::wish(
            &ServiceInfo::from(svc("x", &["10.0.0.1"], &[(ANNOTATION_POD_RECORDS, "true")])),
            &naming(),
            None,
            &[&s],
        );
        assert_eq!(names_of(&w.desired), ["kube-x.vipmind.me"]);
        assert_eq!(w.notices[0].reason, "InvalidAnnotation");
    }

    fn names_of(d: &Desired) -> Vec<String> {
        let mut n: Vec<String> = sets(d).into_iter().map(|(n, _, _)| n).collect();
        n.dedup();
        n
    }

    /// `--publish-headless` off (the default): skipped with a Normal Event,
    /// as before issue 31, whatever its slices hold.
    #[test]
    fn headless_is_skipped_without_the_flag() {
        let off = Naming { publish_headless: false, ..naming() };
        let s = endpoints(&[("10.0.0.1", true, Some("web-0"))]);
        for annotations in [&[][..], &[(ANNOTATION_POD_RECORDS, "true")], &[(ANNOTATION_TARGET, "cluster-ip")]] {
            let w = super::wish(&headless(annotations, false), &off, None, &[&s]);
            assert_eq!(
                w.desired,
                Desired::Skip { reason: DNS_RECORD_SKIPPED, message: HEADLESS_OFF.to_string() },
                "{annotations:?}"
            );
            assert!(w.notices.is_empty(), "{:?}", w.notices);
        }
        // Opted out: quiet, as any Service.
        let w = super::wish(&headless(&[(ANNOTATION_DNS, "false")], false), &off, None, &[&s]);
        assert_eq!(w.desired, Desired::Quiet);
        // With the flag: published.
        assert!(matches!(super::wish(&headless(&[], false), &naming(), None, &[&s]).desired, Desired::Publish(_)));
    }

    #[test]
    fn headless_is_bounded() {
        let eps: Vec<(String, Option<String>)> =
            (0..30).map(|i| (format!("10.0.0.{}", i + 1), Some(format!("web-{i:02}")))).collect();
        let eps: Vec<(&str, bool, Option<&str>)> = eps.iter().map(|(a, h)| (a.as_str(), true, h.as_deref())).collect();
        let s = endpoints(&eps);
        let small = Naming { max_endpoints: 5, ..naming() };
        let w = super::wish(&headless(&[(ANNOTATION_POD_RECORDS, "true")], false), &small, None, &[&s]);
        let Desired::Publish(c) = &w.desired else { panic!("{w:?}") };
        assert_eq!(c.records.len(), 1 + 5, "the set and five pod names");
        assert_eq!(c.records[0].values.len(), 5);
        assert!(w.notices.iter().all(|n| n.reason == headless::TOO_MANY_ENDPOINTS) && w.notices.len() == 2);
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
        assert_eq!(*r[0].values, [Box::from("lb.aws.example")]);
    }

    #[test]
    fn an_oversized_annotation_is_refused_and_said() {
        let long = "a.vipmind.me,".repeat(2000);
        let d = want(svc("x", &["10.0.0.1"], &[(ANNOTATION_HOSTNAME, &long)]), &naming());
        assert!(
            matches!(&d, Desired::Invalid { reason: "InvalidAnnotation", message }
                if message.contains(ANNOTATION_HOSTNAME) && message.contains("16384")),
            "{d:?}"
        );
    }

    fn behind(hostname: &str, annotations: &[(&str, &str)]) -> Service {
        let mut all = vec![(ANNOTATION_TARGET, "load-balancer")];
        all.extend_from_slice(annotations);
        let mut s = svc("web", &["10.0.0.1"], &all);
        s.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![LoadBalancerIngress { hostname: Some(hostname.into()), ..Default::default() }]),
            }),
            ..Default::default()
        });
        s
    }

    const NLB: &str = "k8s-web-0123.elb.eu-west-1.amazonaws.com";

    #[test]
    fn an_aws_load_balancer_gets_an_alias() {
        let r = records(want(behind(NLB, &[]), &naming()));
        assert_eq!(r.len(), 1);
        assert_eq!((&*r[0].name, r[0].rtype, r[0].ttl), ("kube-web.vipmind.me", RecordType::A, 0));
        let a = r[0].alias_target().expect("an ALIAS");
        assert_eq!((&*a.zone_id, &*a.dns_name, a.evaluate_target_health), ("Z2IFOLAFXWLO4F", NLB, true));
        // Dualstack: A and AAAA.
        let dual = [(alias::ANNOTATION_IP_ADDRESS_TYPE, "dualstack")];
        let r = records(want(behind(NLB, &dual), &naming()));
        assert_eq!(r.iter().map(|r| r.rtype).collect::<Vec<_>>(), [RecordType::A, RecordType::Aaaa]);
        assert!(r.iter().all(|r| r.alias_target().is_some()));
        // Opted out, per Service or by flag: the CNAME as before.
        for (s, n) in [
            (behind(NLB, &[(ANNOTATION_ALIAS, "false")]), naming()),
            (behind(NLB, &[]), Naming { alias_load_balancers: false, ..naming() }),
        ] {
            let r = records(want(s, &n));
            assert_eq!((r[0].rtype, &*r[0].values), (RecordType::Cname, &[Box::from(NLB)][..]));
        }
        // A bad value: nothing published, said.
        let d = want(behind(NLB, &[(ANNOTATION_EVALUATE_TARGET_HEALTH, "maybe")]), &naming());
        assert!(
            matches!(&d, Desired::Invalid { message, .. } if message.contains(ANNOTATION_EVALUATE_TARGET_HEALTH)),
            "{d:?}"
        );
        // A region this operator does not know: a CNAME and a Warning saying how to get the ALIAS.
        let w = desired(&ServiceInfo::from(behind("w-1.xx-mars-1.elb.amazonaws.com", &[])), &naming(), None);
        assert_eq!(records(w.desired)[0].rtype, RecordType::Cname);
        assert_eq!(w.notices[0].reason, alias::ALIAS_ZONE_UNKNOWN);
        assert!(w.notices[0].message.contains(ANNOTATION_ALIAS_ZONE));
    }

    /// A Service's routing set: every record of it (an ALIAS too) is a set
    /// of its identifier and policy; bad routing annotations publish nothing.
    #[test]
    fn a_routing_set_covers_every_record() {
        use crate::model::RoutingPolicy;
        use crate::routing::{ANNOTATION_FAILOVER, ANNOTATION_SET_IDENTIFIER, ANNOTATION_WEIGHT};
        let set = [(ANNOTATION_SET_IDENTIFIER, "eu-1"), (ANNOTATION_WEIGHT, "30")];
        let r = records(want(svc("x", &["10.0.0.1", "fd00:10:96::1"], &set), &naming()));
        assert_eq!(r.len(), 2);
        for rec in &r {
            let ro = rec.routing().expect("a routing set");
            assert_eq!((&*ro.set_id, ro.policy), ("eu-1", RoutingPolicy::Weighted(30)));
        }
        let r = records(want(behind(NLB, &set), &naming()));
        assert!(r[0].alias_target().is_some() && r[0].set_id() == Some("eu-1"), "{r:?}");
        // Without: no routing.
        assert!(records(want(svc("x", &["10.0.0.1"], &[]), &naming()))[0].routing().is_none());
        let d = want(
            svc("x", &["10.0.0.1"], &[(ANNOTATION_SET_IDENTIFIER, "eu-1"), (ANNOTATION_FAILOVER, "maybe")]),
            &naming(),
        );
        assert!(
            matches!(&d, Desired::Invalid { reason: "InvalidAnnotation", message } if message.contains(ANNOTATION_FAILOVER)),
            "{d:?}"
        );
    }

    /// The zone apex: an ALIAS or addresses, never a CNAME, and (by
    /// default) only when granted by its exact name.
    #[test]
    fn the_apex_is_an_alias_or_addresses_never_a_cname() {
        let apex = [(ANNOTATION_HOSTNAME, "vipmind.me")];
        let w = wish(behind(NLB, &apex), &granted(), "vipmind.me");
        assert!(w.notices.is_empty(), "{:?}", w.notices);
        let r = records(w.desired);
        assert_eq!((&*r[0].name, r[0].alias_target().is_some()), ("vipmind.me", true));
        let w = wish(behind(NLB, &apex), &granted(), "*.vipmind.me");
        assert_eq!(
            (w.desired, w.notices[0].reason),
            (Desired::Quiet, HOSTNAME_NOT_ALLOWED),
            "a subtree grant is not the apex"
        );
        let r = records(want(svc("web", &["10.0.0.1"], &apex), &naming()));
        assert_eq!(
            (&*r[0].name, r[0].rtype, &*r[0].values),
            ("vipmind.me", RecordType::A, &[Box::from("10.0.0.1")][..])
        );
        for s in [behind(NLB, &[apex[0], (ANNOTATION_ALIAS, "false")]), behind("lb.example.net", &apex)] {
            let d = want(s, &naming());
            assert!(
                matches!(&d, Desired::Invalid { reason: "InvalidHostname", message } if message.contains("zone apex")),
                "{d:?}"
            );
        }
    }
}
