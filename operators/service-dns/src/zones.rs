//! Several hosted zones (`--hosted-zone-id` given more than once): which
//! of them a name goes to, and a Service's own choice among them
//! (`flotilla.dev/zones`). Pure.
//!
//! A name goes to the zones whose domain holds it (or is it: the apex)
//! with the longest such domain: every zone of that domain, so a public and
//! a private zone of one domain (split horizon) both get it, while a name
//! under a delegated subdomain whose zone is managed too goes to that zone
//! only — in the parent zone it would be shadowed by the delegation and
//! never answered (external-dns decides the same way).

use crate::zone::Zone;

/// A Service's choice of zones: ids or domains, comma-separated.
pub const ANNOTATION_ZONES: &str = "flotilla.dev/zones";

/// The zones this operator manages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneSet {
    zones: Vec<Zone>,
}

/// Whether `name` is `domain` or under it.
fn holds(domain: &str, name: &str) -> bool {
    name == domain
        || (name.len() > domain.len() + 1
            && name.ends_with(domain)
            && name.as_bytes()[name.len() - domain.len() - 1] == b'.')
}

impl ZoneSet {
    pub fn new(zones: Vec<Zone>) -> Self {
        Self { zones }
    }

    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    pub fn is_several(&self) -> bool {
        self.zones.len() > 1
    }

    /// The zones `name` goes to (empty: none holds it).
    pub fn homes<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a Zone> {
        let longest = self.zones.iter().filter(|z| holds(&z.name, name)).map(|z| z.name.len()).max();
        let name = name.to_string();
        self.zones.iter().filter(move |z| Some(z.name.len()) == longest && holds(&z.name, &name))
    }

    /// Whether `name` is a managed zone's apex.
    pub fn is_apex(&self, name: &str) -> bool {
        self.zones.iter().any(|z| z.name == name)
    }

    /// Whether `name` goes to the zone `id`.
    pub fn is_home(&self, id: &str, name: &str) -> bool {
        self.homes(name).any(|z| z.id == id)
    }

    /// The zones as people read them: `Z1 (example.com), Z2 (example.org)`.
    pub fn describe(&self) -> String {
        self.zones.iter().map(|z| format!("{} ({})", z.id, z.name)).collect::<Vec<_>>().join(", ")
    }

    /// The zones a `flotilla.dev/zones` value chooses (each entry a zone id
    /// or a zone's domain, which chooses every zone of that domain), by id.
    /// `Err`: what it names that is not a zone managed here.
    pub fn chosen(&self, value: &str) -> Result<Vec<&str>, String> {
        let mut ids = Vec::new();
        let mut unknown = Vec::new();
        for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let id = crate::route53::short_zone_id(entry);
            let domain = crate::hostname::normalize(entry);
            let matched: Vec<&str> =
                self.zones.iter().filter(|z| z.id == id || z.name == domain).map(|z| z.id.as_str()).collect();
            if matched.is_empty() {
                unknown.push(entry.to_string());
            }
            ids.extend(matched);
        }
        if !unknown.is_empty() {
            return Err(format!(
                "{ANNOTATION_ZONES} names {}, not a zone managed here ({}); no record published",
                unknown.join(", "),
                self.describe()
            ));
        }
        if ids.is_empty() {
            return Err(format!("{ANNOTATION_ZONES} names no zone; no record published"));
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(id: &str, name: &str) -> Zone {
        Zone { id: id.into(), name: name.into() }
    }

    fn set() -> ZoneSet {
        ZoneSet::new(vec![
            zone("ZPUB", "example.com"),
            zone("ZPRIV", "example.com"),
            zone("ZSUB", "sub.example.com"),
            zone("ZORG", "example.org"),
        ])
    }

    fn homes(s: &ZoneSet, name: &str) -> Vec<String> {
        s.homes(name).map(|z| z.id.clone()).collect()
    }

    #[test]
    fn a_name_goes_to_every_zone_of_its_most_specific_domain() {
        let s = set();
        assert_eq!(homes(&s, "web.example.com"), ["ZPUB", "ZPRIV"], "split horizon: both");
        assert_eq!(homes(&s, "example.com"), ["ZPUB", "ZPRIV"], "the apex");
        assert_eq!(homes(&s, "api.sub.example.com"), ["ZSUB"], "the delegated subdomain's zone only");
        assert_eq!(homes(&s, "sub.example.com"), ["ZSUB"], "its apex");
        assert_eq!(homes(&s, "web.example.org"), ["ZORG"]);
        assert!(homes(&s, "web.example.net").is_empty());
        assert!(homes(&s, "badexample.com").is_empty(), "a suffix is not a domain");
        assert!(s.is_home("ZPRIV", "web.example.com"));
        assert!(!s.is_home("ZPUB", "api.sub.example.com"));
    }

    #[test]
    fn a_services_choice_names_zones_by_id_or_domain() {
        let s = set();
        assert_eq!(s.chosen("ZPUB").unwrap(), ["ZPUB"]);
        assert_eq!(s.chosen(" /hostedzone/ZPRIV , example.org ").unwrap(), ["ZORG", "ZPRIV"]);
        assert_eq!(s.chosen("Example.COM.").unwrap(), ["ZPRIV", "ZPUB"], "a domain chooses its every zone");
        let e = s.chosen("ZPUB,ZNOPE").unwrap_err();
        assert!(e.contains("ZNOPE") && e.contains("not a zone managed here"), "{e}");
        assert!(s.chosen(" , ").unwrap_err().contains("names no zone"));
    }
}
