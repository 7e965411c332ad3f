//! Hostnames: the `--hostname-template`, and the checks every name we write
//! passes (RFC 1123 labels, lengths, inside the zone).

/// Prefix of the ownership TXT record's name: `_flotilla-owner.<name>`.
/// A leading underscore cannot appear in a hostname we accept, so the TXT
/// never collides with a record we manage (nor with a CNAME at `<name>`).
pub const OWNER_LABEL: &str = "_flotilla-owner";

/// Longest hostname we accept: the TXT name (`_flotilla-owner.` + name)
/// must itself fit in 253 characters.
pub const MAX_HOSTNAME: usize = 253 - OWNER_LABEL.len() - 1;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostnameError {
    #[error("{0:?} is empty")]
    Empty(String),
    #[error("{name:?} is {len} characters long; at most {MAX_HOSTNAME} are allowed")]
    TooLong { name: String, len: usize },
    #[error("label {label:?} of {name:?} is longer than 63 characters")]
    LabelTooLong { name: String, label: String },
    #[error("label {label:?} of {name:?} must be letters, digits and '-', not starting or ending with '-'")]
    BadLabel { name: String, label: String },
    #[error("{name:?} is not inside the zone {zone:?}")]
    OutsideZone { name: String, zone: String },
    #[error(
        "{0:?} is the zone apex, where a CNAME cannot stand (beside the zone's SOA and NS): only addresses \
         or an ALIAS (flotilla.dev/target: load-balancer with an AWS load balancer) are published there"
    )]
    Apex(String),
    #[error(
        "unknown variable {{{0}}} in the hostname template (known: {{name}}, {{namespace}}, {{prefix}}, {{domain}})"
    )]
    UnknownVariable(String),
    #[error("unclosed '{{' in the hostname template")]
    Unclosed,
    #[error("the pod hostname template must contain {{hostname}} and {{name}} (one name per pod of one Service)")]
    PodTemplateVariables,
}

/// Lowercase, without a trailing dot.
pub fn normalize(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// Checks a (normalized) hostname: RFC 1123 labels, at most
/// [`MAX_HOSTNAME`] characters, and strictly inside `zone`. The zone apex
/// itself is [`HostnameError::Apex`]: it holds the zone's NS/SOA, beside
/// which a CNAME cannot stand, so only a Service published with addresses
/// or an ALIAS may have it (its annotated names are checked for that once
/// its records are known).
pub fn validate(name: &str, zone: &str) -> Result<(), HostnameError> {
    if name.is_empty() {
        return Err(HostnameError::Empty(name.to_string()));
    }
    if name.len() > MAX_HOSTNAME {
        return Err(HostnameError::TooLong { name: name.to_string(), len: name.len() });
    }
    for label in name.split('.') {
        if label.len() > 63 {
            return Err(HostnameError::LabelTooLong { name: name.to_string(), label: label.to_string() });
        }
        let ok = !label.is_empty()
            && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(HostnameError::BadLabel { name: name.to_string(), label: label.to_string() });
        }
    }
    if name == zone {
        return Err(HostnameError::Apex(name.to_string()));
    }
    let inside =
        name.len() > zone.len() + 1 && name.ends_with(zone) && name.as_bytes()[name.len() - zone.len() - 1] == b'.';
    if !inside {
        return Err(HostnameError::OutsideZone { name: name.to_string(), zone: zone.to_string() });
    }
    Ok(())
}

/// The ownership TXT name of a hostname.
pub fn owner_txt_name(name: &str) -> String {
    format!("{OWNER_LABEL}.{name}")
}

/// The hostname an ownership TXT name stands for, if it is one.
pub fn owned_name_of_txt(txt_name: &str) -> Option<&str> {
    txt_name.strip_prefix(OWNER_LABEL).and_then(|rest| rest.strip_prefix('.'))
}

/// A parsed `--hostname-template`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Name,
    Namespace,
    Prefix,
    Domain,
    /// `{hostname}`: an endpoint's `hostname` (pod templates only).
    Hostname,
}

/// What a template is rendered with.
#[derive(Debug, Clone, Copy)]
pub struct Vars<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub prefix: &'a str,
    pub domain: &'a str,
}

impl Template {
    pub fn parse(s: &str) -> Result<Self, HostnameError> {
        let t = Self::parse_any(s)?;
        match t.parts.contains(&Part::Hostname) {
            true => Err(HostnameError::UnknownVariable("hostname".into())),
            false => Ok(t),
        }
    }

    /// A `--pod-hostname-template`: `{hostname}` and `{name}` required, so
    /// that two pods, or the pods of two Services, never render one name.
    pub fn parse_pod(s: &str) -> Result<Self, HostnameError> {
        let t = Self::parse_any(s)?;
        match t.parts.contains(&Part::Hostname) && t.parts.contains(&Part::Name) {
            true => Ok(t),
            false => Err(HostnameError::PodTemplateVariables),
        }
    }

    fn parse_any(s: &str) -> Result<Self, HostnameError> {
        let mut parts = Vec::new();
        let mut rest = s;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            let after = &rest[open + 1..];
            let close = after.find('}').ok_or(HostnameError::Unclosed)?;
            parts.push(match &after[..close] {
                "name" => Part::Name,
                "namespace" => Part::Namespace,
                "prefix" => Part::Prefix,
                "domain" => Part::Domain,
                "hostname" => Part::Hostname,
                other => return Err(HostnameError::UnknownVariable(other.to_string())),
            });
            rest = &after[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        Ok(Self { parts })
    }

    /// The rendered, normalized hostname (not yet validated).
    pub fn render(&self, v: Vars<'_>) -> String {
        self.render_pod(v, "")
    }

    /// The rendered, normalized name of a pod's endpoint `hostname` (not
    /// yet validated).
    pub fn render_pod(&self, v: Vars<'_>, hostname: &str) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Name => out.push_str(v.name),
                Part::Namespace => out.push_str(v.namespace),
                Part::Prefix => out.push_str(v.prefix),
                Part::Domain => out.push_str(v.domain),
                Part::Hostname => out.push_str(hostname),
            }
        }
        normalize(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn vars<'a>(name: &'a str, namespace: &'a str) -> Vars<'a> {
        Vars { name, namespace, prefix: "kube", domain: "vipmind.me" }
    }

    #[test]
    fn default_template_gives_the_seed_name() {
        let t = Template::parse("{prefix}-{name}.{domain}").unwrap();
        assert_eq!(t.render(vars("hello-world", "test")), "kube-hello-world.vipmind.me");
        let t = Template::parse("{name}.{namespace}.svc.{domain}.").unwrap();
        assert_eq!(t.render(vars("Api", "team-a")), "api.team-a.svc.vipmind.me");
    }

    #[test]
    fn bad_templates_are_refused() {
        assert_eq!(Template::parse("{nme}.{domain}"), Err(HostnameError::UnknownVariable("nme".into())));
        assert_eq!(Template::parse("{name.{domain}"), Err(HostnameError::UnknownVariable("name.{domain".into())));
        assert_eq!(Template::parse("{name"), Err(HostnameError::Unclosed));
        assert_eq!(Template::parse("{hostname}.{domain}"), Err(HostnameError::UnknownVariable("hostname".into())));
    }

    #[test]
    fn pod_templates() {
        let t = Template::parse_pod("{hostname}.{name}.{domain}").unwrap();
        assert_eq!(t.render_pod(vars("web", "test"), "web-0"), "web-0.web.vipmind.me");
        for bad in ["{hostname}.{domain}", "{name}.{domain}", "pod.{name}.{domain}"] {
            assert_eq!(Template::parse_pod(bad), Err(HostnameError::PodTemplateVariables), "{bad}");
        }
    }

    #[test]
    fn validation() {
        let z = "vipmind.me";
        assert!(validate("kube-a.vipmind.me", z).is_ok());
        assert!(validate("a.b.vipmind.me", z).is_ok());
        assert_eq!(validate("vipmind.me", z), Err(HostnameError::Apex("vipmind.me".into())));
        assert!(matches!(validate("xvipmind.me", z), Err(HostnameError::OutsideZone { .. })));
        assert!(matches!(validate("a.example.com", z), Err(HostnameError::OutsideZone { .. })));
        assert!(matches!(validate("a_b.vipmind.me", z), Err(HostnameError::BadLabel { .. })));
        assert!(matches!(validate("-a.vipmind.me", z), Err(HostnameError::BadLabel { .. })));
        assert!(matches!(validate("a..vipmind.me", z), Err(HostnameError::BadLabel { .. })));
        assert!(matches!(validate("*.vipmind.me", z), Err(HostnameError::BadLabel { .. })));
        let long = format!("{}.vipmind.me", "a".repeat(64));
        assert!(matches!(validate(&long, z), Err(HostnameError::LabelTooLong { .. })));
        let many = format!("{}vipmind.me", "abcdefghi.".repeat(25));
        assert!(matches!(validate(&many, z), Err(HostnameError::TooLong { .. })));
        assert_eq!(owned_name_of_txt(&owner_txt_name("a.vipmind.me")), Some("a.vipmind.me"));
        assert_eq!(owned_name_of_txt("_flotilla-ownerx.a"), None);
    }

    proptest! {
        #[test]
        fn every_valid_name_has_a_valid_txt_name(labels in proptest::collection::vec("[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", 1..6)) {
            let name = format!("{}.example.com", labels.join("."));
            if validate(&name, "example.com").is_ok() {
                let txt = owner_txt_name(&name);
                prop_assert!(txt.len() <= 253);
                prop_assert_eq!(owned_name_of_txt(&txt), Some(name.as_str()));
            }
        }

        #[test]
        fn validation_never_panics(s in "\\PC{0,300}") {
            let _ = validate(&normalize(&s), "example.com");
            let _ = Template::parse(&s);
        }
    }
}
