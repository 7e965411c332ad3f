//! What Route53 does with a change batch and moto does not: the batch is
//! checked whole, in order, against the zone, and applied all or nothing.
//!
//! * `CREATE` of a record set that exists is refused (moto overwrites it);
//! * `DELETE` must name a record set that exists with exactly these values
//!   and TTL;
//! * a CNAME is alone at its name, in both directions;
//! * `DELETE` + `CREATE` of one record set in one batch is fine (moto
//!   refuses it);
//! * a routing set (weighted, failover) has its set identifier and one
//!   policy; a name and type hold sets of one policy or one set of none,
//!   and one failover primary and secondary at most; writing a weighted set
//!   sets the TTL of every weighted set of its name and type (moto keeps
//!   each set's own);
//! * an ALIAS has neither TTL nor values, and an ALIAS to a load balancer
//!   names the load balancer's own hosted zone (moto takes any): checked
//!   for the regions in [`ELB_ZONES`], written here from AWS's published
//!   list independently of the operator's table, so that a wrong entry
//!   there is refused here as Route53 would.
//!
//! A valid batch is handed to moto as its net effect (DELETEs, then
//! UPSERTs), which moto applies faithfully; an invalid one never reaches it.

use std::collections::BTreeMap;

use super::xml::{Change, Key, Rrset};

fn what(r: &Rrset) -> String {
    format!(
        "[name='{}.', type='{}'{}]",
        r.name,
        r.rtype,
        r.set_id.as_ref().map(|s| format!(", set-identifier='{s}'")).unwrap_or_default()
    )
}

/// Load balancers' hosted zones of a few regions: (hostname suffix, zone).
/// Application/Classic load balancers are `<name>.<region>.elb.amazonaws.com`,
/// Network ones `<name>.elb.<region>.amazonaws.com`.
const ELB_ZONES: &[(&str, &str)] = &[
    (".us-east-1.elb.amazonaws.com", "Z35SXDOTRQ7X7K"),
    (".elb.us-east-1.amazonaws.com", "Z26RNL4JYFTOTI"),
    (".eu-west-1.elb.amazonaws.com", "Z32O12XQLNTSW2"),
    (".elb.eu-west-1.amazonaws.com", "Z2IFOLAFXWLO4F"),
];

/// What Route53 says of a malformed or misdirected ALIAS.
fn alias_error(r: &Rrset) -> Option<String> {
    let alias = r.alias.as_ref()?;
    if r.ttl.is_some() || !r.values.is_empty() {
        return Some(format!(
            "Invalid request: Expected exactly one of [AliasTarget, all of [TTL, and ResourceRecords], or TrafficPolicyInstanceId], but found more than one in Change with [Name={}., Type={}]",
            r.name, r.rtype
        ));
    }
    let lb_zone = ELB_ZONES.iter().find(|(suffix, _)| alias.dns_name.ends_with(suffix)).map(|(_, z)| *z)?;
    (lb_zone != alias.zone_id).then(|| {
        format!(
            "Tried to create an alias that targets {}., type {} in zone {}, but the alias target name does not lie within the target zone",
            alias.dns_name, r.rtype, alias.zone_id
        )
    })
}

/// What Route53 says of a routing set that is malformed or cannot stand
/// beside the sets at its name and type (one policy per name and type, a
/// set identifier on every set of one, one primary and one secondary).
fn routing_error(state: &BTreeMap<Key, Rrset>, r: &Rrset) -> Option<String> {
    let at = || format!("[Name={}., Type={}]", r.name, r.rtype);
    let kind = |o: &Rrset| match (o.weight, &o.failover) {
        (Some(_), None) => Some("weighted"),
        (None, Some(_)) => Some("failover"),
        _ => None,
    };
    match (&r.set_id, r.weight, &r.failover) {
        (None, None, None) => {}
        (None, _, _) => return Some(format!("Invalid request: Missing field 'SetIdentifier' in Change with {}", at())),
        (Some(_), None, None) => {
            return Some(format!(
                "Invalid request: Expected exactly one of [Weight, Region, Failover, GeoLocation, MultiValueAnswer, GeoProximityLocation, or CidrRoutingConfig], but found none in Change with {}",
                at()
            ));
        }
        (Some(_), Some(_), Some(_)) => {
            return Some(format!(
                "Invalid request: Expected exactly one of [Weight, Region, Failover, GeoLocation, MultiValueAnswer, GeoProximityLocation, or CidrRoutingConfig], but found more than one in Change with {}",
                at()
            ));
        }
        (Some(_), Some(w), None) if !(0..=255).contains(&w) => {
            return Some(format!("Invalid request: Weight must be between 0 and 255 in Change with {}", at()));
        }
        (Some(_), None, Some(f)) if f != "PRIMARY" && f != "SECONDARY" => {
            return Some(format!("Invalid request: Failover must be PRIMARY or SECONDARY in Change with {}", at()));
        }
        _ => {}
    }
    let others = state.values().filter(|o| o.name == r.name && o.rtype == r.rtype && o.key() != r.key());
    for o in others {
        let (mine, theirs) = (kind(r), kind(o));
        if mine.is_none() != theirs.is_none() {
            let (this, that) = if mine.is_some() { ("a ", "a non-") } else { ("a non-", "a ") };
            return Some(format!(
                "RRSet with DNS name {}., type {} cannot be created as {this}routed set because {that}routed set exists with the same name and type",
                r.name, r.rtype
            ));
        }
        if mine != theirs {
            return Some(format!(
                "RRSet with DNS name {}., type {}, SetIdentifier {} cannot be created because a {} set exists with the same name and type",
                r.name,
                r.rtype,
                r.set_id.as_deref().unwrap_or(""),
                theirs.unwrap_or("simple")
            ));
        }
        if r.failover.is_some() && r.failover == o.failover {
            return Some(format!(
                "RRSet with DNS name {}., type {}, SetIdentifier {} cannot be created because a {} failover set already exists with the same name and type",
                r.name,
                r.rtype,
                r.set_id.as_deref().unwrap_or(""),
                r.failover.as_deref().unwrap_or("")
            ));
        }
    }
    None
}

/// Route53 keeps one TTL for the weighted sets of a name and type: writing
/// one with another TTL changes every other one's to it ("Route 53 changes
/// the TTL for all of the records to the value that you specified last").
fn share_weighted_ttl(state: &mut BTreeMap<Key, Rrset>, r: &Rrset) {
    if r.weight.is_none() || r.alias.is_some() {
        return;
    }
    for o in state.values_mut() {
        if o.name == r.name && o.rtype == r.rtype && o.weight.is_some() && o.alias.is_none() && o.key() != r.key() {
            o.ttl = r.ttl;
        }
    }
}

fn cname_conflict(state: &BTreeMap<Key, Rrset>, r: &Rrset, zone: &str) -> Option<String> {
    let at_name = || state.values().filter(|o| o.name == r.name && o.key() != r.key());
    if r.rtype == "CNAME" && at_name().any(|o| o.rtype != "CNAME") {
        return Some(format!(
            "RRSet of type CNAME with DNS name {}. is not permitted as it conflicts with other records with the same DNS name in zone {zone}.",
            r.name
        ));
    }
    if r.rtype != "CNAME" && at_name().any(|o| o.rtype == "CNAME") {
        return Some(format!(
            "RRSet of type {} with DNS name {}. is not permitted because a conflicting RRSet of type CNAME with the same DNS name already exists in zone {zone}.",
            r.rtype, r.name
        ));
    }
    None
}

/// Checks `changes` against `current` (at least every record set at the
/// names they touch). `Ok`: the net changes to apply; `Err`: Route53's
/// messages, one per refused change.
pub fn check(current: &[Rrset], changes: &[Change], zone: &str) -> Result<Vec<Change>, Vec<String>> {
    // Route53's per-request limits, UPSERT counted twice.
    let weight = |c: &Change| if c.action == "UPSERT" { 2 } else { 1 };
    let records: usize = changes.iter().map(|c| c.rrset.values.len().max(1) * weight(c)).sum();
    let chars: usize = changes.iter().map(|c| c.rrset.values.iter().map(String::len).sum::<usize>() * weight(c)).sum();
    if records > 1000 {
        return Err(vec!["Number of records limit of 1000 exceeded.".into()]);
    }
    if chars > 32_000 {
        return Err(vec!["Number of characters limit of 32000 exceeded.".into()]);
    }
    let original: BTreeMap<Key, Rrset> = current.iter().map(|r| (r.key(), r.clone())).collect();
    let mut state = original.clone();
    let mut errors = Vec::new();
    for c in changes {
        let r = &c.rrset;
        match c.action.as_str() {
            "CREATE" | "UPSERT" if alias_error(r).is_some() => errors.extend(alias_error(r)),
            "CREATE" | "UPSERT" if routing_error(&state, r).is_some() => errors.extend(routing_error(&state, r)),
            "CREATE" => {
                if state.contains_key(&r.key()) {
                    errors.push(format!("Tried to create resource record set {} but it already exists", what(r)));
                } else if let Some(e) = cname_conflict(&state, r, zone) {
                    errors.push(e);
                } else {
                    state.insert(r.key(), r.clone());
                    share_weighted_ttl(&mut state, r);
                }
            }
            "DELETE" => match state.get(&r.key()) {
                None => errors.push(format!("Tried to delete resource record set {} but it was not found", what(r))),
                Some(cur)
                    if cur.ttl != r.ttl
                        || cur.values != r.values
                        || cur.alias != r.alias
                        || cur.weight != r.weight
                        || cur.failover != r.failover
                        || cur.health_check_id != r.health_check_id =>
                {
                    errors.push(format!(
                        "Tried to delete resource record set {} but the values provided do not match the current \
                         values",
                        what(r)
                    ))
                }
                Some(_) => {
                    state.remove(&r.key());
                }
            },
            "UPSERT" => match cname_conflict(&state, r, zone) {
                Some(e) => errors.push(e),
                None => {
                    state.insert(r.key(), r.clone());
                    share_weighted_ttl(&mut state, r);
                }
            },
            other => errors.push(format!("Invalid action {other} for {}", what(r))),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // And the weighted sets whose TTL Route53 rewrote (below).
    let touched: std::collections::BTreeSet<Key> = changes
        .iter()
        .map(|c| c.rrset.key())
        .chain(state.iter().filter(|(k, r)| original.get(*k).is_some_and(|o| o != *r)).map(|(k, _)| k.clone()))
        .collect();
    let mut net = Vec::new();
    for k in &touched {
        if let (Some(before), None) = (original.get(k), state.get(k)) {
            net.push(Change { action: "DELETE".into(), rrset: before.clone() });
        }
    }
    // New sets as CREATE, replaced ones as UPSERT: moto counts an UPSERT
    // twice against the 1,000-record limit, as Route53 does.
    for k in &touched {
        if let Some(after) = state.get(k) {
            let action = if original.contains_key(k) { "UPSERT" } else { "CREATE" };
            net.push(Change { action: action.into(), rrset: after.clone() });
        }
    }
    Ok(net)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rr(name: &str, t: &str, v: &str) -> Rrset {
        Rrset { name: name.into(), rtype: t.into(), ttl: Some(300), values: vec![v.into()], ..Rrset::default() }
    }
    fn ch(action: &str, r: &Rrset) -> Change {
        Change { action: action.into(), rrset: r.clone() }
    }

    #[test]
    fn route53_rules() {
        let a = rr("x.z", "A", "1.1.1.1");
        let txt = rr("_o.x.z", "TXT", "\"mine\"");
        let zone = [a.clone(), txt.clone()];
        // CREATE of an existing set: refused, naming it.
        let e = check(&zone, &[ch("CREATE", &rr("x.z", "A", "2.2.2.2"))], "z").unwrap_err();
        assert_eq!(e, ["Tried to create resource record set [name='x.z.', type='A'] but it already exists"]);
        // DELETE must match exactly.
        assert!(
            check(&zone, &[ch("DELETE", &rr("x.z", "A", "9.9.9.9"))], "z").unwrap_err()[0].contains("do not match")
        );
        assert!(check(&zone, &[ch("DELETE", &rr("y.z", "A", "9.9.9.9"))], "z").unwrap_err()[0].contains("not found"));
        // A CNAME is alone, both ways.
        assert!(check(&zone, &[ch("CREATE", &rr("x.z", "CNAME", "lb"))], "z").is_err());
        assert!(check(&[rr("c.z", "CNAME", "lb")], &[ch("UPSERT", &rr("c.z", "A", "1.1.1.1"))], "z").is_err());
        // DELETE + CREATE of the same set, and A → CNAME in order: fine, net effect only.
        let net = check(
            &zone,
            &[ch("DELETE", &txt), ch("CREATE", &txt), ch("DELETE", &a), ch("CREATE", &rr("x.z", "CNAME", "lb"))],
            "z",
        )
        .unwrap();
        let actions: Vec<(&str, &str)> = net.iter().map(|c| (c.action.as_str(), c.rrset.rtype.as_str())).collect();
        assert_eq!(actions, [("DELETE", "A"), ("UPSERT", "TXT"), ("CREATE", "CNAME")]);
        // All or nothing: one bad change refuses the batch.
        let e =
            check(&zone, &[ch("CREATE", &rr("new.z", "A", "1.1.1.1")), ch("DELETE", &rr("x.z", "A", "0.0.0.0"))], "z");
        assert_eq!(e.unwrap_err().len(), 1);
    }

    #[test]
    fn routing_sets_follow_route53s_rules() {
        let set = |id: &str, weight: Option<i64>, failover: Option<&str>| Rrset {
            set_id: Some(id.into()),
            weight,
            failover: failover.map(Into::into),
            ..rr("w.z", "A", "1.1.1.1")
        };
        let (a, b) = (set("a", Some(10), None), set("b", Some(0), None));
        // Two weighted sets side by side; then a third, and one's weight changed.
        assert!(check(&[], &[ch("CREATE", &a), ch("CREATE", &b)], "z").is_ok());
        assert!(check(std::slice::from_ref(&a), &[ch("UPSERT", &set("a", Some(200), None))], "z").is_ok());
        // A DELETE names the set's weight as it is.
        assert!(check(std::slice::from_ref(&a), &[ch("DELETE", &set("a", Some(11), None))], "z").is_err());
        assert!(check(&[a.clone(), b.clone()], &[ch("DELETE", &a)], "z").is_ok());
        // No policy beside a policy, either way; two policies; two primaries.
        let refused = |zone: &[Rrset], r: &Rrset, says: &str| {
            let e = check(zone, &[ch("CREATE", r)], "z").unwrap_err();
            assert!(e[0].contains(says), "{e:?}");
        };
        refused(std::slice::from_ref(&a), &rr("w.z", "A", "2.2.2.2"), "because a routed set exists");
        refused(&[rr("w.z", "A", "2.2.2.2")], &a, "as a routed set because a non-routed set exists");
        refused(std::slice::from_ref(&a), &set("p", None, Some("PRIMARY")), "a weighted set exists");
        let primary = set("p", None, Some("PRIMARY"));
        refused(
            std::slice::from_ref(&primary),
            &set("q", None, Some("PRIMARY")),
            "PRIMARY failover set already exists",
        );
        assert!(check(&[primary], &[ch("CREATE", &set("s", None, Some("SECONDARY")))], "z").is_ok());
        // Malformed: a set without a policy, a policy without a set, a weight out of range.
        refused(&[], &set("x", None, None), "but found none");
        refused(&[], &Rrset { weight: Some(1), ..rr("w.z", "A", "1.1.1.1") }, "Missing field 'SetIdentifier'");
        refused(&[], &set("x", Some(256), None), "between 0 and 255");
        // One TTL per weighted group: writing a set rewrites the others'.
        let b60 = Rrset { ttl: Some(60), ..b.clone() };
        let net = check(&[a.clone(), b.clone()], &[ch("UPSERT", &b60)], "z").unwrap();
        let ttls: Vec<(Option<String>, Option<i64>)> =
            net.iter().map(|c| (c.rrset.set_id.clone(), c.rrset.ttl)).collect();
        assert_eq!(ttls, [(Some("a".into()), Some(60)), (Some("b".into()), Some(60))]);
        // A TXT set beside the other TXT sets at its name, not beside an A.
        let txt = Rrset { rtype: "TXT".into(), values: vec!["\"o\"".into()], ..a.clone() };
        assert!(check(&[a.clone(), b.clone()], &[ch("CREATE", &txt)], "z").is_ok());
    }

    #[test]
    fn an_alias_names_its_load_balancers_zone() {
        use super::super::xml::AliasTarget;
        let alias = |zone: &str, dns: &str| Rrset {
            name: "z".into(),
            rtype: "A".into(),
            alias: Some(AliasTarget { zone_id: zone.into(), dns_name: dns.into(), evaluate_target_health: true }),
            ..Rrset::default()
        };
        let nlb = "web-1.elb.us-east-1.amazonaws.com";
        assert!(check(&[], &[ch("CREATE", &alias("Z26RNL4JYFTOTI", nlb))], "z").is_ok());
        let e = check(&[], &[ch("UPSERT", &alias("Z35SXDOTRQ7X7K", nlb))], "z").unwrap_err();
        assert!(e[0].contains("does not lie within the target zone"), "{e:?}");
        // Not a load balancer of the regions known here: taken as moto would.
        assert!(check(&[], &[ch("CREATE", &alias("ZX", "d1.cloudfront.net"))], "z").is_ok());
        let mut both = alias("Z26RNL4JYFTOTI", nlb);
        both.ttl = Some(60);
        assert!(check(&[], &[ch("CREATE", &both)], "z").unwrap_err()[0].contains("Expected exactly one of"));
        // An ALIAS is an A record: not beside a CNAME.
        assert!(check(&[rr("z", "CNAME", "lb")], &[ch("CREATE", &alias("Z26RNL4JYFTOTI", nlb))], "z").is_err());
    }
}
