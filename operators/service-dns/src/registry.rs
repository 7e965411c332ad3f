//! The ownership registry: a TXT record at `_flotilla-owner.<name>` holding
//! `"heritage=flotilla,owner=<owner-id>,resource=service/<ns>/<name>"` marks
//! `<name>`'s A/AAAA/CNAME records as ours. Nothing without it, or with
//! another owner id, is ever changed or deleted.
//!
//! A name its Service stopped publishing keeps its TXT, with `,freed=<Unix
//! seconds>` added, for `--handover-grace`: held for that Service's
//! namespace (see `plan`). The time is in the zone, not in memory, so that
//! neither a restart nor a new leader hands the name over early.

use crate::hostname::owner_txt_name;
use crate::model::{RecordSet, RecordType};

/// What an ownership TXT says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    pub owner: String,
    pub resource: String,
    /// When its Service stopped publishing it (Unix seconds): held for its
    /// namespace since then.
    pub freed: Option<i64>,
}

/// The TXT value (with Route53's quotes).
pub fn txt_value(owner: &str, resource: &str) -> String {
    format!("\"heritage=flotilla,owner={owner},resource={resource}\"")
}

/// The TXT value of a name freed at `at` (Unix seconds).
pub fn txt_value_freed(owner: &str, resource: &str, at: i64) -> String {
    format!("\"heritage=flotilla,owner={owner},resource={resource},freed={at}\"")
}

/// The ownership TXT record for `name`.
pub fn txt_record(name: &str, ttl: i64, owner: &str, resource: &str) -> RecordSet {
    RecordSet::new(owner_txt_name(name), RecordType::Txt, ttl, vec![txt_value(owner, resource)])
}

/// The ownership TXT record of `name`, freed at `at`.
pub fn txt_record_freed(name: &str, ttl: i64, owner: &str, resource: &str, at: i64) -> RecordSet {
    RecordSet::new(owner_txt_name(name), RecordType::Txt, ttl, vec![txt_value_freed(owner, resource, at)])
}

/// The namespace of a `service/<namespace>/<name>` resource.
pub fn namespace_of(resource: &str) -> Option<&str> {
    resource.strip_prefix("service/").and_then(|r| r.split_once('/')).map(|(ns, _)| ns)
}

/// Parses one TXT value; `None` unless it says `heritage=flotilla`.
pub fn parse(value: &str) -> Option<Ownership> {
    let inner = value.trim().trim_matches('"');
    let (mut heritage, mut owner, mut resource, mut freed) = (None, None, None, None);
    for kv in inner.split(',') {
        match kv.split_once('=') {
            Some(("heritage", v)) => heritage = Some(v),
            Some(("owner", v)) => owner = Some(v),
            Some(("resource", v)) => resource = Some(v),
            Some(("freed", v)) => freed = v.parse::<i64>().ok(),
            _ => {}
        }
    }
    (heritage? == "flotilla").then(|| Ownership {
        owner: owner.unwrap_or("").to_string(),
        resource: resource.unwrap_or("").to_string(),
        freed,
    })
}

/// What a TXT record set says about ownership: the first flotilla value.
pub fn ownership_of(record: &RecordSet) -> Option<Ownership> {
    // A routing set's TXT (beside its records, with their set identifier)
    // counts; an alias or a foreign TXT does not.
    if record.rtype != RecordType::Txt || record.is_foreign() || record.alias_target().is_some() {
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
            Some(Ownership { owner: "cluster-a".into(), resource: "service/test/hello-world".into(), freed: None })
        );
        let freed = txt_value_freed("cluster-a", "service/test/hello-world", 1_700_000_000);
        assert_eq!(parse(&freed).and_then(|o| o.freed), Some(1_700_000_000));
        assert_eq!(namespace_of("service/test/hello-world"), Some("test"));
        assert_eq!(namespace_of("pod/x"), None);
        assert_eq!(parse("\"heritage=external-dns,external-dns/owner=default\""), None);
        assert_eq!(parse("\"v=spf1 -all\""), None);
    }
}
