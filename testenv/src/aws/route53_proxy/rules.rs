//! What Route53 does with a change batch and moto does not: the batch is
//! checked whole, in order, against the zone, and applied all or nothing.
//!
//! * `CREATE` of a record set that exists is refused (moto overwrites it);
//! * `DELETE` must name a record set that exists with exactly these values
//!   and TTL;
//! * a CNAME is alone at its name, in both directions;
//! * `DELETE` + `CREATE` of one record set in one batch is fine (moto
//!   refuses it).
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
            "CREATE" => {
                if state.contains_key(&r.key()) {
                    errors.push(format!("Tried to create resource record set {} but it already exists", what(r)));
                } else if let Some(e) = cname_conflict(&state, r, zone) {
                    errors.push(e);
                } else {
                    state.insert(r.key(), r.clone());
                }
            }
            "DELETE" => match state.get(&r.key()) {
                None => errors.push(format!("Tried to delete resource record set {} but it was not found", what(r))),
                Some(cur) if cur.ttl != r.ttl || cur.values != r.values || cur.alias != r.alias => errors.push(format!(
                    "Tried to delete resource record set {} but the values provided do not match the current values",
                    what(r)
                )),
                Some(_) => {
                    state.remove(&r.key());
                }
            },
            "UPSERT" => match cname_conflict(&state, r, zone) {
                Some(e) => errors.push(e),
                None => {
                    state.insert(r.key(), r.clone());
                }
            },
            other => errors.push(format!("Invalid action {other} for {}", what(r))),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let touched: std::collections::BTreeSet<Key> = changes.iter().map(|c| c.rrset.key()).collect();
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
        Rrset { name: name.into(), rtype: t.into(), set_id: None, ttl: Some(300), values: vec![v.into()], alias: None }
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
}
