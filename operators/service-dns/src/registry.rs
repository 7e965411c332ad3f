//! The ownership registry: a TXT record at `_flotilla-owner.<name>` holding
//! `"heritage=flotilla,owner=<owner-id>,resource=service/<ns>/<name>"` marks
//! `<name>`'s A/AAAA/CNAME records as ours. Nothing without it, or with
//! another owner id, is ever changed or deleted.

use crate::hostname::owner_txt_name;
use crate::model::{RecordSet, RecordType};

/// What an ownership TXT says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    pub owner: String,
    pub resource: String,
}

/// The TXT value (with Route53's quotes).
pub fn txt_value(owner: &str, resource: &str) -> String {
    format!("\"heritage=flotilla,owner={owner},resource={resource}\"")
}

/// The ownership TXT record for `name`.
pub fn txt_record(name: &str, ttl: i64, owner: &str, resource: &str) -> RecordSet {
    RecordSet::new(owner_txt_name(name), RecordType::Txt, ttl, vec![txt_value(owner, resource)])
}

/// Parses one TXT value; `None` unless it says `heritage=flotilla`.
pub fn parse(value: &str) -> Option<Ownership> {
    let inner = value.trim().trim_matches('"');
    let (mut heritage, mut owner, mut resource) = (None, None, None);
    for kv in inner.split(',') {
        match kv.split_once('=') {
            Some(("heritage", v)) => heritage = Some(v),
            Some(("owner", v)) => owner = Some(v),
            Some(("resource", v)) => resource = Some(v),
            _ => {}
        }
    }
    (heritage? == "flotilla")
        .then(|| Ownership { owner: owner.unwrap_or("").to_string(), resource: resource.unwrap_or("").to_string() })
}

/// What a TXT record set says about ownership: the first flotilla value.
pub fn ownership_of(record: &RecordSet) -> Option<Ownership> {
    if record.rtype != RecordType::Txt || record.foreign.is_some() {
        return None;
    }
    record.values.iter().find_map(|v| parse(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let v = txt_value("cluster-a", "service/test/hello-world");
        assert_eq!(v, "\"heritage=flotilla,owner=cluster-a,resource=service/test/hello-world\"");
        assert_eq!(
            parse(&v),
            Some(Ownership { owner: "cluster-a".into(), resource: "service/test/hello-world".into() })
        );
        assert_eq!(parse("\"heritage=external-dns,external-dns/owner=default\""), None);
        assert_eq!(parse("\"v=spf1 -all\""), None);
    }
}
