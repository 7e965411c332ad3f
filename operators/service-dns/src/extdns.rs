//! external-dns's TXT registry, read only: enough to recognise what one
//! external-dns owner published for a Service, so that
//! `--adopt-external-dns-owner` can take it over (see `plan`).
//!
//! external-dns marks a record it owns with a TXT record whose value is
//! `"heritage=external-dns,external-dns/owner=<id>,external-dns/resource=service/<ns>/<name>"`
//! (the labels after `heritage` sorted by key). Where that TXT lives depends
//! on its version and flags (`--txt-prefix`, `--txt-suffix`):
//!
//! * newer versions: one TXT per record type, the type in the name — the
//!   first label of the record's name becomes `<type>-<label>` (`a-`,
//!   `aaaa-`, `cname-`), or, when the prefix/suffix holds `%{record_type}`,
//!   the type is written there instead;
//! * the prefix goes before the first label, the suffix after it
//!   (`<prefix><label><suffix>.<rest of the name>`);
//! * older versions (before the typed names): the same without a type —
//!   with neither prefix nor suffix, the TXT sits at the record's own name.

use crate::model::{RecordSet, RecordType};

/// external-dns's annotations, accepted as aliases of ours (ours win when
/// both are set), so that Services annotated for external-dns keep their
/// names after a switch. external-dns v0.22 moved its default prefix from
/// `external-dns.alpha.kubernetes.io/` to `external-dns.kubernetes.io/`
/// (with no fallback); both are read here, the newer first, so a Service
/// annotated for either version keeps its name.
pub const EXTERNAL_DNS_HOSTNAME: &str = "external-dns.kubernetes.io/hostname";
pub const EXTERNAL_DNS_TTL: &str = "external-dns.kubernetes.io/ttl";
pub const EXTERNAL_DNS_ALPHA_HOSTNAME: &str = "external-dns.alpha.kubernetes.io/hostname";
pub const EXTERNAL_DNS_ALPHA_TTL: &str = "external-dns.alpha.kubernetes.io/ttl";
/// external-dns's hostname and TTL annotations, in the order they are read.
pub const EXTERNAL_DNS_ALIASES: [&str; 4] =
    [EXTERNAL_DNS_HOSTNAME, EXTERNAL_DNS_ALPHA_HOSTNAME, EXTERNAL_DNS_TTL, EXTERNAL_DNS_ALPHA_TTL];

/// `%{record_type}` in external-dns's prefix/suffix.
const TYPE_TEMPLATE: &str = "%{record_type}";

/// The external-dns installation whose records may be adopted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalDnsOwner {
    /// Its `--txt-owner-id`.
    pub owner: String,
    /// Its `--txt-prefix` (lowercase), if any.
    pub prefix: String,
    /// Its `--txt-suffix` (lowercase), if any.
    pub suffix: String,
}

/// What an external-dns TXT value says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labels {
    pub owner: String,
    pub resource: Option<String>,
}

/// Parses one TXT value; `None` unless it says `heritage=external-dns`.
pub fn parse(value: &str) -> Option<Labels> {
    let inner = value.trim().trim_matches('"');
    let (mut heritage, mut owner, mut resource) = (false, None, None);
    for kv in inner.split(',') {
        match kv.split_once('=') {
            Some(("heritage", "external-dns")) => heritage = true,
            Some(("external-dns/owner", v)) => owner = Some(v.to_string()),
            Some(("external-dns/resource", v)) => resource = Some(v.to_string()),
            _ => {}
        }
    }
    heritage.then(|| Labels { owner: owner.unwrap_or_default(), resource })
}

/// What an external-dns TXT record set says (its first external-dns value).
pub fn labels_of(record: &RecordSet) -> Option<Labels> {
    if record.rtype != RecordType::Txt || record.extra.is_some() {
        return None;
    }
    record.values.iter().find_map(|v| parse(v))
}

impl ExternalDnsOwner {
    fn typed_affix(&self) -> bool {
        self.prefix.contains(TYPE_TEMPLATE) || self.suffix.contains(TYPE_TEMPLATE)
    }

    /// `<prefix><label><suffix>.<rest>` with the type `t` (lowercase) put
    /// where this installation puts it; `t` empty: the older, untyped name.
    fn txt_name(&self, name: &str, t: &str) -> String {
        let (first, rest) = match name.split_once('.') {
            Some((f, r)) => (f, Some(r)),
            None => (name, None),
        };
        let (prefix, suffix) = (self.prefix.replace(TYPE_TEMPLATE, t), self.suffix.replace(TYPE_TEMPLATE, t));
        let label = if t.is_empty() || self.typed_affix() { first.to_string() } else { format!("{t}-{first}") };
        // external-dns uses the suffix only when there is no prefix.
        let head = if prefix.is_empty() { format!("{label}{suffix}") } else { format!("{prefix}{label}") };
        match rest {
            Some(r) => format!("{head}.{r}"),
            None => head,
        }
    }

    /// Every name where this installation may keep the ownership TXT of
    /// `name`'s records of our types: the typed names, then the untyped one.
    pub fn txt_names(&self, name: &str) -> Vec<String> {
        let mut out: Vec<String> = ["a", "aaaa", "cname"].iter().map(|t| self.txt_name(name, t)).collect();
        out.push(self.txt_name(name, ""));
        out.dedup();
        out
    }
}

/// The external-dns TXT value for `owner` and `resource`, exactly as
/// external-dns writes it (for tests and the docs).
pub fn txt_value(owner: &str, resource: &str) -> String {
    format!("\"heritage=external-dns,external-dns/owner={owner},external-dns/resource={resource}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(prefix: &str, suffix: &str) -> ExternalDnsOwner {
        ExternalDnsOwner { owner: "ext".into(), prefix: prefix.into(), suffix: suffix.into() }
    }

    #[test]
    fn labels() {
        let v = txt_value("ext", "service/ns/web");
        assert_eq!(parse(&v), Some(Labels { owner: "ext".into(), resource: Some("service/ns/web".into()) }));
        assert_eq!(parse("\"heritage=flotilla,owner=a\""), None);
        assert_eq!(
            parse("\"heritage=external-dns,external-dns/owner=x\""),
            Some(Labels { owner: "x".into(), resource: None })
        );
    }

    #[test]
    fn txt_names_follow_external_dns_naming() {
        let n = "kube-web.example.com";
        assert_eq!(
            owner("", "").txt_names(n),
            ["a-kube-web.example.com", "aaaa-kube-web.example.com", "cname-kube-web.example.com", n]
        );
        assert_eq!(owner("txt.", "").txt_names(n)[0], "txt.a-kube-web.example.com");
        assert_eq!(owner("txt.", "").txt_names(n)[3], "txt.kube-web.example.com");
        assert_eq!(owner("", "-txt").txt_names(n)[0], "a-kube-web-txt.example.com");
        assert_eq!(owner("", "-txt").txt_names(n)[3], "kube-web-txt.example.com");
        assert_eq!(owner("%{record_type}-reg.", "").txt_names(n)[2], "cname-reg.kube-web.example.com");
        assert_eq!(owner("%{record_type}-reg.", "").txt_names(n)[3], "-reg.kube-web.example.com");
        assert_eq!(owner("", ".%{record_type}").txt_names(n)[1], "kube-web.aaaa.example.com");
    }
}
