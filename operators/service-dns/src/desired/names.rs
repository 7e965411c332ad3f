//! A Service's names: checked against their zones, refused when not
//! granted (the Warning that says so), and as one zone's sync sees them.

use super::{HOSTNAME_NOT_ALLOWED, Naming, Notice};
use crate::grant::{ANNOTATION_ALLOWED_HOSTNAMES, Grant};
use crate::hostname::{self, HostnameError};

/// At most this many refused names are listed in an Event.
const LISTED: usize = 5;

pub(super) fn listed(names: &[&str]) -> String {
    let mut out = names.iter().take(LISTED).copied().collect::<Vec<_>>().join(", ");
    if names.len() > LISTED {
        out.push_str(&format!(" and {} more", names.len() - LISTED));
    }
    out
}

/// Checks each name against its own zone's domain (with one zone, that
/// zone's; with several, the most specific holding it — a name in none is
/// refused). The apex passes here: it is checked once the targets are known.
pub(super) fn check_names(names: &[String], naming: &Naming) -> Result<(), String> {
    for h in names {
        let domain = if naming.zones.is_several() {
            match naming.zones.homes(h).next() {
                Some(home) => home.name.as_str(),
                None => {
                    return Err(format!(
                        "{h} is in none of the zones managed here ({}); no record published",
                        naming.zones.describe()
                    ));
                }
            }
        } else {
            naming.domain.as_str()
        };
        match hostname::validate(h, domain) {
            Ok(()) | Err(HostnameError::Apex(_)) => {}
            Err(e) => return Err(format!("{e}; no record published")),
        }
    }
    Ok(())
}

/// The Warning for names the namespace was not granted.
pub(super) fn not_allowed(key: &str, namespace: &str, refused: &[String], grant: Option<&Grant>) -> Notice {
    let names: Vec<&str> = refused.iter().map(String::as_str).collect();
    let (verb, them) = if names.len() == 1 { ("is", "it") } else { ("are", "them") };
    let mut message = format!(
        "{key}: {} {verb} not granted to namespace {namespace}; nothing is published for {them}. Ask a cluster \
         admin to grant {them} with the Namespace annotation {ANNOTATION_ALLOWED_HOSTNAMES} (comma-separated \
         exact names or *.sub.domain subtrees)",
        listed(&names),
    );
    match grant {
        None => message.push_str(&format!("; namespace {namespace} has none")),
        Some(g) if !g.bad_entries().is_empty() => {
            let bad: Vec<String> = g.bad_entries().iter().map(|b| format!("{b:?}")).collect();
            message.push_str(&format!("; its entries {} are not names and were ignored", bad.join(", ")));
        }
        Some(_) => {}
    }
    Notice { reason: HOSTNAME_NOT_ALLOWED, message }
}

/// A Service's names as one zone's sync sees them.
pub(super) struct Names<'a> {
    /// Those that go to this zone (may be none: another zone's).
    pub here: Vec<String>,
    /// All of them, in every zone (the apex rule reads them all).
    pub all: &'a [String],
    /// This zone is among those the Service chose (or it chose none).
    pub chosen: bool,
}
