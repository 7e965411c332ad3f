//! Route53 ALIAS records for AWS load balancers (pure): which hosted zone
//! a load balancer's hostname lies in, and what a Service's annotations ask
//! of its ALIAS.
//!
//! An ALIAS is what a zone apex can hold in place of a CNAME (a CNAME there
//! is illegal), and Route53 answers it free of charge. Route53 refuses an
//! ALIAS whose hosted zone is not the load balancer's, so the zone is read
//! from the hostname's region: each region's load balancers live in one
//! fixed zone (one for Application and Classic, another for Network Load
//! Balancers), published by AWS in "Elastic Load Balancing endpoints and
//! quotas". A region missing here (a new one) is answered by the annotation
//! `flotilla.dev/alias-hosted-zone-id`.

use crate::hostname::normalize;
use crate::model::Alias;

/// `"false"`: a load balancer's hostname is published as a CNAME, as before.
pub const ANNOTATION_ALIAS: &str = "flotilla.dev/alias";
/// The load balancer's canonical hosted zone, when the table has not its region.
pub const ANNOTATION_ALIAS_ZONE: &str = "flotilla.dev/alias-hosted-zone-id";
/// `"true"` (the default) or `"false"`: Route53's `EvaluateTargetHealth`.
pub const ANNOTATION_EVALUATE_TARGET_HEALTH: &str = "flotilla.dev/evaluate-target-health";
/// The AWS Load Balancer Controller's annotation: `dualstack` load
/// balancers answer IPv6 too, so they get an `AAAA` ALIAS beside the `A`.
pub const ANNOTATION_IP_ADDRESS_TYPE: &str = "service.beta.kubernetes.io/aws-load-balancer-ip-address-type";

/// Warning reason: an ELB-looking hostname of a region not in the table.
pub const ALIAS_ZONE_UNKNOWN: &str = "AliasZoneUnknown";

/// (region, Application and Classic Load Balancers' zone, Network Load Balancers' zone).
const ELB_ZONES: &[(&str, &str, &str)] = &[
    ("af-south-1", "Z268VQBMOI5EKX", "Z203XCE67M25HM"),
    ("ap-east-1", "Z3DQVH9N71FHZ0", "Z12Y7K3UBGUAD1"),
    ("ap-northeast-1", "Z14GRHDCWA56QT", "Z31USIVHYNEOWT"),
    ("ap-northeast-2", "ZWKZPGTI48KDX", "ZIBE1TIR4HY56"),
    ("ap-northeast-3", "Z5LXEXXYW11ES", "Z1GWIQ4HH19I5X"),
    ("ap-south-1", "ZP97RAFLXTNZK", "ZVDDRBQ08TROA"),
    ("ap-south-2", "Z0173938T07WNTVAEPZN", "Z0711778386UTO08407HT"),
    ("ap-southeast-1", "Z1LMS91P8CMLE5", "ZKVM4W9LS7TM"),
    ("ap-southeast-2", "Z1GM3OXH4ZPM65", "ZCT6FZBF4DROD"),
    ("ap-southeast-3", "Z08888821HLRG5A9ZRTER", "Z01971771FYVNCOVWJU1G"),
    ("ap-southeast-4", "Z09517862IB2WZLPXG76F", "Z01156963G8MIIL7X90IV"),
    ("ap-southeast-5", "Z06010284QMVVW7WO5J", "Z026317210H9ACVTRO6FB"),
    ("ap-southeast-7", "Z0390008CMBRTHFGWBCB", "Z054363131YWATEMWRG5L"),
    ("ca-central-1", "ZQSVJUPU6J1EY", "Z2EPGBW3API2WT"),
    ("ca-west-1", "Z06473681N0SF6OS049SD", "Z02754302KBB00W2LKWZ9"),
    ("cn-north-1", "Z1GDH35T77C1KE", "Z3QFB96KMJ7ED6"),
    ("cn-northwest-1", "ZM7IZAIOVVDZF", "ZQEIKTCZ8352D"),
    ("eu-central-1", "Z215JYRZR1TBD5", "Z3F0SRJ5LGBH90"),
    ("eu-central-2", "Z06391101F2ZOEP8P5EB3", "Z02239872DOALSIDCX66S"),
    ("eu-north-1", "Z23TAZ6LKFMNIO", "Z1UDT6IFJ4EJM"),
    ("eu-south-1", "Z3ULH7SSC9OV64", "Z23146JA1KNAFP"),
    ("eu-south-2", "Z0956581394HF5D5LXGAP", "Z1011216NVTVYADP1SSV"),
    ("eu-west-1", "Z32O12XQLNTSW2", "Z2IFOLAFXWLO4F"),
    ("eu-west-2", "ZHURV8PSTC4K8", "ZD4D7Y8KGAS4G"),
    ("eu-west-3", "Z3Q77PNBQS71R4", "Z1CMS0P5QUZ6D5"),
    ("il-central-1", "Z09170902867EHPV2DABU", "Z0313266YDI6ZRHTGQY4"),
    ("me-central-1", "Z08230872XQRWHG2XF6I", "Z00282643NTTLPANJJG2P"),
    ("me-south-1", "ZS929ML54UICD", "Z3QSRYVP46NYYV"),
    ("mx-central-1", "Z023552324OKD1BB28BH5", "Z02031231H3ID6HYJ9A7U"),
    ("sa-east-1", "Z2P70J7HTTTPLU", "ZTK26PT1VY4CU"),
    ("us-east-1", "Z35SXDOTRQ7X7K", "Z26RNL4JYFTOTI"),
    ("us-east-2", "Z3AADJGX6KTTL2", "ZLMOA37VPKANP"),
    ("us-gov-east-1", "Z166TLBEWOO7G0", "Z1ZSMQQ6Q24QQ8"),
    ("us-gov-west-1", "Z33AYJ8TM3BH4J", "ZMG1MZ2THAWF1"),
    ("us-west-1", "Z368ELLRRE2KJ0", "Z24FKFUX50B4VW"),
    ("us-west-2", "Z1H1FL5HABSF5", "Z18D5FSROUN65G"),
];

/// Which load balancers a hostname names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// `<name>.<region>.elb.amazonaws.com`: Application and Classic.
    Application,
    /// `<name>.elb.<region>.amazonaws.com`: Network.
    Network,
}

/// An AWS load balancer's hostname: its region and family (`None`: not one).
fn elb_region(hostname: &str) -> Option<(&str, Family)> {
    let host = hostname.strip_suffix(".cn").unwrap_or(hostname);
    if let Some(rest) = host.strip_suffix(".elb.amazonaws.com") {
        let region = rest.rsplit('.').next()?;
        return (region != rest).then_some((region, Family::Application));
    }
    let rest = host.strip_suffix(".amazonaws.com")?;
    let (before, region) = rest.rsplit_once('.')?;
    (before.ends_with(".elb") && !region.is_empty()).then_some((region, Family::Network))
}

/// The canonical hosted zone of the load balancer at `hostname`
/// (normalized). `Err(region)`: an ELB hostname of a region not known
/// here; `Ok(None)`: not an ELB hostname.
pub fn elb_zone(hostname: &str) -> Result<Option<&'static str>, String> {
    let Some((region, family)) = elb_region(hostname) else { return Ok(None) };
    match ELB_ZONES.binary_search_by(|(r, _, _)| (*r).cmp(region)) {
        Ok(i) => Ok(Some(match family {
            Family::Application => ELB_ZONES[i].1,
            Family::Network => ELB_ZONES[i].2,
        })),
        Err(_) => Err(region.to_string()),
    }
}

/// What a Service's annotations ask of an ALIAS to its load balancer.
pub struct Wanted<'a> {
    /// `flotilla.dev/alias`.
    pub alias: Option<&'a str>,
    /// `flotilla.dev/alias-hosted-zone-id`.
    pub zone: Option<&'a str>,
    /// `flotilla.dev/evaluate-target-health`.
    pub evaluate: Option<&'a str>,
    /// `--alias-load-balancers`: ELB hostnames are ALIASed unless a Service says otherwise.
    pub by_default: bool,
}

/// The outcome of [`target`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Publish an ALIAS to the load balancer.
    Alias(Alias),
    /// Publish a CNAME; `Some(warning)`: an ALIAS was wanted and could not be made.
    Cname(Option<String>),
}

/// Whether (and how) the load balancer at `hostname` (normalized) is
/// published as an ALIAS. `Err`: an annotation that is not a value.
pub fn target(hostname: &str, wanted: &Wanted<'_>) -> Result<Target, String> {
    let on = flag(ANNOTATION_ALIAS, wanted.alias)?.unwrap_or(wanted.by_default);
    let evaluate_target_health = flag(ANNOTATION_EVALUATE_TARGET_HEALTH, wanted.evaluate)?.unwrap_or(true);
    let given = match wanted.zone.map(str::trim) {
        None => None,
        Some(z) if is_zone_id(z) => Some(z),
        Some(z) => return Err(format!("{ANNOTATION_ALIAS_ZONE}={z:?} is not a hosted zone id (e.g. Z35SXDOTRQ7X7K)")),
    };
    if !on {
        return Ok(Target::Cname(None));
    }
    let zone_id = match (given, elb_zone(hostname)) {
        (Some(z), _) => z,
        (None, Ok(Some(z))) => z,
        // Not a load balancer this table knows, and not asked for: the
        // CNAME as before (an ingress controller's own hostname, say).
        (None, Ok(None)) if wanted.alias.is_none() => return Ok(Target::Cname(None)),
        (None, Ok(None)) => {
            return Ok(Target::Cname(Some(format!(
                "{hostname} is not an AWS load balancer's hostname this operator knows; published as a CNAME \
                 (set {ANNOTATION_ALIAS_ZONE} to the target's hosted zone to publish an ALIAS)"
            ))));
        }
        (None, Err(region)) => {
            return Ok(Target::Cname(Some(format!(
                "{hostname} is a load balancer of region {region}, whose hosted zone this operator does not know; \
                 published as a CNAME (set {ANNOTATION_ALIAS_ZONE} to the load balancer's canonical hosted zone \
                 id to publish an ALIAS)"
            ))));
        }
    };
    Ok(Target::Alias(Alias { zone_id: zone_id.into(), dns_name: normalize(hostname).into(), evaluate_target_health }))
}

/// A `"true"`/`"false"` annotation (any case), if set; `Err`: anything else, said.
fn flag(key: &str, value: Option<&str>) -> Result<Option<bool>, String> {
    match value.map(str::trim) {
        None => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(Some(true)),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(Some(false)),
        Some(v) => Err(format!("{key}={v:?} is not true or false")),
    }
}

/// Route53's hosted zone ids: upper-case letters and digits, at most 32.
fn is_zone_id(z: &str) -> bool {
    !z.is_empty() && z.len() <= 32 && z.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// Whether the Service's load balancer answers IPv6 too (an `AAAA` ALIAS).
pub fn is_dualstack(ip_address_type: Option<&str>) -> bool {
    ip_address_type.is_some_and(|v| v.trim().to_ascii_lowercase().starts_with("dualstack"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_for_the_binary_search() {
        assert!(ELB_ZONES.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(ELB_ZONES.iter().all(|(_, a, n)| is_zone_id(a) && is_zone_id(n) && a != n));
    }

    #[test]
    fn load_balancer_hostnames_give_their_zone() {
        // Application / Classic, internal and dualstack spellings included.
        assert_eq!(elb_zone("k8s-web-0123456789.us-east-1.elb.amazonaws.com"), Ok(Some("Z35SXDOTRQ7X7K")));
        assert_eq!(elb_zone("internal-k8s-web-01.eu-west-1.elb.amazonaws.com"), Ok(Some("Z32O12XQLNTSW2")));
        assert_eq!(elb_zone("dualstack.web-01.eu-west-1.elb.amazonaws.com"), Ok(Some("Z32O12XQLNTSW2")));
        assert_eq!(elb_zone("web-01.cn-north-1.elb.amazonaws.com.cn"), Ok(Some("Z1GDH35T77C1KE")));
        // Network.
        assert_eq!(elb_zone("k8s-web-0123456789.elb.us-east-1.amazonaws.com"), Ok(Some("Z26RNL4JYFTOTI")));
        assert_eq!(elb_zone("web-01.elb.eu-west-1.amazonaws.com"), Ok(Some("Z2IFOLAFXWLO4F")));
        // A region not in the table, and names that are no load balancer's.
        assert_eq!(elb_zone("web-01.xx-mars-1.elb.amazonaws.com"), Err("xx-mars-1".into()));
        assert_eq!(elb_zone("abc.elb.amazonaws.com"), Ok(None), "no region");
        assert_eq!(elb_zone("elb.amazonaws.com"), Ok(None));
        assert_eq!(elb_zone("lb.example.com"), Ok(None));
        assert_eq!(elb_zone("bucket.s3.us-east-1.amazonaws.com"), Ok(None));
    }

    fn wanted<'a>(alias: Option<&'a str>, zone: Option<&'a str>, evaluate: Option<&'a str>) -> Wanted<'a> {
        Wanted { alias, zone, evaluate, by_default: true }
    }

    #[test]
    fn annotations_choose_the_record() {
        let elb = "web-01.us-west-2.elb.amazonaws.com";
        let Ok(Target::Alias(a)) = target(elb, &wanted(None, None, None)) else { panic!("an ALIAS by default") };
        assert_eq!((&*a.zone_id, &*a.dns_name, a.evaluate_target_health), ("Z1H1FL5HABSF5", elb, true));
        assert_eq!(target(elb, &wanted(Some("false"), None, None)), Ok(Target::Cname(None)));
        let off = Wanted { by_default: false, ..wanted(None, None, None) };
        assert_eq!(target(elb, &off), Ok(Target::Cname(None)), "--alias-load-balancers=false");
        let Ok(Target::Alias(a)) = target(elb, &wanted(None, Some("ZOTHER1"), Some("False"))) else { panic!() };
        assert_eq!((&*a.zone_id, a.evaluate_target_health), ("ZOTHER1", false));
        // Not a load balancer: a CNAME, silently unless an ALIAS was asked for.
        assert_eq!(target("lb.example.net", &wanted(None, None, None)), Ok(Target::Cname(None)));
        assert!(matches!(target("lb.example.net", &wanted(Some("true"), None, None)), Ok(Target::Cname(Some(_)))));
        let Ok(Target::Alias(a)) = target("lb.example.net", &wanted(Some("true"), Some("Z2FDTNDATAQYW2"), None)) else {
            panic!("any target, given its zone")
        };
        assert_eq!(&*a.zone_id, "Z2FDTNDATAQYW2");
        assert!(
            matches!(target("w.xx-mars-1.elb.amazonaws.com", &wanted(None, None, None)), Ok(Target::Cname(Some(m))) if m.contains("xx-mars-1"))
        );
        // Bad values are refused, naming the annotation.
        assert!(target(elb, &wanted(Some("yes"), None, None)).unwrap_err().contains(ANNOTATION_ALIAS));
        assert!(target(elb, &wanted(None, Some("z35/../x"), None)).unwrap_err().contains(ANNOTATION_ALIAS_ZONE));
        assert!(target(elb, &wanted(None, None, Some("1"))).unwrap_err().contains(ANNOTATION_EVALUATE_TARGET_HEALTH));
    }

    #[test]
    fn dualstack_is_read_from_the_load_balancer_controllers_annotation() {
        assert!(is_dualstack(Some("dualstack")));
        assert!(is_dualstack(Some("dualstack-without-public-ipv4")));
        assert!(!is_dualstack(Some("ipv4")));
        assert!(!is_dualstack(None));
    }
}
