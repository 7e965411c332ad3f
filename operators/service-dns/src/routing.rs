//! Routing policies for active/active across clusters: a Service's
//! `flotilla.dev/set-identifier` with `flotilla.dev/weight` (weighted) or
//! `flotilla.dev/failover` (primary/secondary), and an optional
//! `flotilla.dev/health-check-id`, make its records one set among several
//! at the name. Two clusters (two owner ids) then publish one name, each
//! its own set, and each set carries its own ownership TXT (the same set
//! identifier and policy): neither cluster ever changes the other's set.
//! external-dns's annotations are read too (after ours), so a Service
//! annotated for external-dns asks for the same set here. (The sets
//! external-dns published are not adopted: see the migration guide.)

use crate::model::{FailoverRole, Routing, RoutingPolicy};
use crate::service::ServiceInfo;

pub const ANNOTATION_SET_IDENTIFIER: &str = "flotilla.dev/set-identifier";
pub const ANNOTATION_WEIGHT: &str = "flotilla.dev/weight";
pub const ANNOTATION_FAILOVER: &str = "flotilla.dev/failover";
pub const ANNOTATION_HEALTH_CHECK_ID: &str = "flotilla.dev/health-check-id";

pub const EXTERNAL_DNS_SET_IDENTIFIER: &str = "external-dns.alpha.kubernetes.io/set-identifier";
pub const EXTERNAL_DNS_WEIGHT: &str = "external-dns.alpha.kubernetes.io/aws-weight";
pub const EXTERNAL_DNS_FAILOVER: &str = "external-dns.alpha.kubernetes.io/aws-failover";
pub const EXTERNAL_DNS_HEALTH_CHECK_ID: &str = "external-dns.alpha.kubernetes.io/aws-health-check-id";

/// Every annotation read here (ours, then external-dns's), for the
/// Service cache to keep.
pub const ANNOTATIONS: [&str; 8] = [
    ANNOTATION_SET_IDENTIFIER,
    ANNOTATION_WEIGHT,
    ANNOTATION_FAILOVER,
    ANNOTATION_HEALTH_CHECK_ID,
    EXTERNAL_DNS_SET_IDENTIFIER,
    EXTERNAL_DNS_WEIGHT,
    EXTERNAL_DNS_FAILOVER,
    EXTERNAL_DNS_HEALTH_CHECK_ID,
];

/// Route53's longest set identifier.
const MAX_SET_ID: usize = 128;

/// The first of `keys` the Service carries, with its key.
fn first<'a>(svc: &'a ServiceInfo, keys: [&'static str; 2]) -> Option<(&'static str, &'a str)> {
    keys.into_iter().find_map(|k| svc.annotation(k).map(|v| (k, v.trim())))
}

/// The Service's routing policy: `Ok(None)` without a set identifier (and
/// nothing else of routing), an error naming the annotation otherwise.
pub fn of(svc: &ServiceInfo) -> Result<Option<Routing>, String> {
    let set_id = first(svc, [ANNOTATION_SET_IDENTIFIER, EXTERNAL_DNS_SET_IDENTIFIER]);
    let weight = first(svc, [ANNOTATION_WEIGHT, EXTERNAL_DNS_WEIGHT]);
    let failover = first(svc, [ANNOTATION_FAILOVER, EXTERNAL_DNS_FAILOVER]);
    let health = first(svc, [ANNOTATION_HEALTH_CHECK_ID, EXTERNAL_DNS_HEALTH_CHECK_ID]);
    let Some((id_key, id)) = set_id else {
        return match [weight, failover, health].into_iter().flatten().next() {
            Some((key, _)) => Err(format!("{key} needs {ANNOTATION_SET_IDENTIFIER} (the set this cluster publishes)")),
            None => Ok(None),
        };
    };
    check_set_id(id_key, id)?;
    let policy = match (weight, failover) {
        (Some((key, w)), None) => match w.parse::<u8>() {
            Ok(w) => RoutingPolicy::Weighted(w),
            Err(_) => return Err(format!("{key}={w:?} is not a weight (a whole number from 0 to 255)")),
        },
        (None, Some((key, f))) => match f.to_ascii_lowercase().as_str() {
            "primary" => RoutingPolicy::Failover(FailoverRole::Primary),
            "secondary" => RoutingPolicy::Failover(FailoverRole::Secondary),
            _ => return Err(format!("{key}={f:?} is not a failover role (primary or secondary)")),
        },
        (Some((wk, _)), Some((fk, _))) => {
            return Err(format!("{wk} and {fk} are two routing policies; a set has one"));
        }
        (None, None) => {
            return Err(format!(
                "{id_key} needs a routing policy: {ANNOTATION_WEIGHT} (0–255) or {ANNOTATION_FAILOVER} \
                 (primary or secondary)"
            ));
        }
    };
    let health_check_id = match health {
        None => None,
        Some((key, h)) => {
            let ok = !h.is_empty() && h.len() <= 64 && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
            if !ok {
                return Err(format!("{key}={h:?} is not a Route53 health check id"));
            }
            Some(h.into())
        }
    };
    Ok(Some(Routing { set_id: id.into(), policy, health_check_id }))
}

/// Letters, digits and `-_.:`, 1 to 128 of them: Route53 takes more, but
/// these are safe in every Event, log line and metric label.
fn check_set_id(key: &str, id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= MAX_SET_ID
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    if ok {
        Ok(())
    } else {
        Err(format!("{key}={id:?} is not a set identifier (1 to {MAX_SET_ID} letters, digits, '-', '_', '.' or ':')"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read as the Service cache reads it: the annotations must be kept.
    fn svc(annotations: &[(&str, &str)]) -> ServiceInfo {
        let s: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "annotations":
                annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<std::collections::BTreeMap<_, _>>()},
            "spec": {"clusterIP": "10.0.0.1"},
        }))
        .unwrap();
        ServiceInfo::from(s)
    }

    #[test]
    fn a_set_needs_exactly_one_policy() {
        assert_eq!(of(&svc(&[])), Ok(None));
        let weighted = of(&svc(&[(ANNOTATION_SET_IDENTIFIER, "cluster-a"), (ANNOTATION_WEIGHT, "10")])).unwrap();
        assert_eq!(
            weighted,
            Some(Routing { set_id: "cluster-a".into(), policy: RoutingPolicy::Weighted(10), health_check_id: None })
        );
        let failover = of(&svc(&[
            (ANNOTATION_SET_IDENTIFIER, "b"),
            (ANNOTATION_FAILOVER, "Secondary"),
            (ANNOTATION_HEALTH_CHECK_ID, "0f6f2c3e-8a1b-4f7e-9c1d-2b3a4c5d6e7f"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(failover.policy, RoutingPolicy::Failover(FailoverRole::Secondary));
        assert!(failover.health_check_id.is_some());
        // external-dns's, for a migrated Service.
        let migrated = of(&svc(&[(EXTERNAL_DNS_SET_IDENTIFIER, "x"), (EXTERNAL_DNS_WEIGHT, "0")])).unwrap();
        assert_eq!(migrated.map(|r| r.policy), Some(RoutingPolicy::Weighted(0)));

        for (bad, says) in [
            (vec![(ANNOTATION_WEIGHT, "10")], "needs flotilla.dev/set-identifier"),
            (vec![(ANNOTATION_SET_IDENTIFIER, "a")], "needs a routing policy"),
            (vec![(ANNOTATION_SET_IDENTIFIER, "a"), (ANNOTATION_WEIGHT, "256")], "not a weight"),
            (vec![(ANNOTATION_SET_IDENTIFIER, "a"), (ANNOTATION_WEIGHT, "-1")], "not a weight"),
            (vec![(ANNOTATION_SET_IDENTIFIER, "a"), (ANNOTATION_FAILOVER, "tertiary")], "not a failover role"),
            (
                vec![(ANNOTATION_SET_IDENTIFIER, "a"), (ANNOTATION_WEIGHT, "1"), (ANNOTATION_FAILOVER, "primary")],
                "two routing policies",
            ),
            (vec![(ANNOTATION_SET_IDENTIFIER, "a b"), (ANNOTATION_WEIGHT, "1")], "not a set identifier"),
            (vec![(ANNOTATION_SET_IDENTIFIER, &"x".repeat(129)), (ANNOTATION_WEIGHT, "1")], "not a set identifier"),
            (
                vec![(ANNOTATION_SET_IDENTIFIER, "a"), (ANNOTATION_WEIGHT, "1"), (ANNOTATION_HEALTH_CHECK_ID, "<x>")],
                "not a Route53 health check id",
            ),
        ] {
            let e = of(&svc(&bad)).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
