//! Which names a namespace's Services may claim by annotation: the
//! Namespace annotation `flotilla.dev/allowed-hostnames`, written by whoever
//! may edit Namespaces (a cluster admin), never by a Service author.
//!
//! The value is comma-separated entries, each an exact name (`login.example.com`)
//! or a subtree (`*.team-a.example.com`: any name strictly below
//! `team-a.example.com`, not `team-a.example.com` itself — the convention of
//! external-dns's domain filters and of certificate wildcards). Case and a
//! trailing dot are ignored. An entry that is neither (`foo bar`, `a.*.b`,
//! a bare `*`) is ignored and reported; it never grants anything.

use crate::hostname::normalize;

/// The Namespace annotation that grants names to its Services.
pub const ANNOTATION_ALLOWED_HOSTNAMES: &str = "flotilla.dev/allowed-hostnames";

/// `--hostname-annotations`: what a Service's `flotilla.dev/hostname` (and
/// external-dns's alias) may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum HostnameAnnotations {
    /// Only names its Namespace's `flotilla.dev/allowed-hostnames` grants.
    #[default]
    NamespaceAllowed,
    /// Any name in the zone: trusts every Service author with the whole zone.
    Any,
    /// Ignored: every Service gets its `--hostname-template` name.
    Off,
}

impl HostnameAnnotations {
    /// The flag's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            HostnameAnnotations::NamespaceAllowed => "namespace-allowed",
            HostnameAnnotations::Any => "any",
            HostnameAnnotations::Off => "off",
        }
    }
}

/// A namespace's grant, parsed once per change of its annotation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grant {
    /// Exact names, sorted.
    exact: Box<[Box<str>]>,
    /// Subtrees (`*.sub.domain` kept as `.sub.domain`), sorted.
    subtrees: Box<[Box<str>]>,
    /// Entries that are not names, as written (at most [`MAX_BAD_KEPT`]).
    bad: Box<[Box<str>]>,
}

/// How many bad entries are kept to be reported (the rest are counted only).
pub const MAX_BAD_KEPT: usize = 3;

/// Whether `name` (normalized) is made of DNS labels: letters, digits and
/// `-`, 1-63 characters each, not starting or ending with `-`.
fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

impl Grant {
    /// Parses the annotation's value; never fails (bad entries are kept aside).
    pub fn parse(value: &str) -> Grant {
        let (mut exact, mut subtrees, mut bad) = (Vec::new(), Vec::new(), Vec::new());
        for raw in value.split(',') {
            let entry = normalize(raw);
            if entry.is_empty() {
                continue;
            }
            match entry.strip_prefix("*.") {
                // A subtree needs at least two labels under the star: `*.com`
                // would grant a whole top-level domain.
                Some(base) if is_name(base) && base.contains('.') => subtrees.push(format!(".{base}").into_boxed_str()),
                None if is_name(&entry) => exact.push(entry.into_boxed_str()),
                _ => bad.push(raw.trim().chars().take(100).collect::<String>().into_boxed_str()),
            }
        }
        exact.sort();
        exact.dedup();
        subtrees.sort();
        subtrees.dedup();
        bad.truncate(MAX_BAD_KEPT);
        Grant { exact: exact.into(), subtrees: subtrees.into(), bad: bad.into() }
    }

    /// Whether `name` (normalized: lowercase, no trailing dot) is granted.
    pub fn allows(&self, name: &str) -> bool {
        self.exact.binary_search_by(|e| e.as_ref().cmp(name)).is_ok()
            || self.subtrees.iter().any(|s| name.len() > s.len() && name.ends_with(s.as_ref()))
    }

    /// Whether it grants nothing at all.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.subtrees.is_empty()
    }

    /// Entries that are not names (ignored), as written; the first few.
    pub fn bad_entries(&self) -> &[Box<str>] {
        &self.bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn exact_names_and_subtrees() {
        let g = Grant::parse(" Login.Example.com. , *.team-a.example.com,api.example.com,,");
        assert!(g.allows("login.example.com"));
        assert!(g.allows("api.example.com"));
        assert!(g.allows("x.team-a.example.com"));
        assert!(g.allows("a.b.team-a.example.com"), "any depth below the subtree");
        assert!(!g.allows("team-a.example.com"), "*.sub.domain does not cover sub.domain itself");
        assert!(!g.allows("xteam-a.example.com"), "a label boundary, not a string suffix");
        assert!(!g.allows("www.example.com"));
        assert!(!g.allows("example.com"));
        assert!(g.bad_entries().is_empty());
        assert!(!g.is_empty());
    }

    #[test]
    fn bad_entries_grant_nothing_and_are_kept_to_be_reported() {
        let g =
            Grant::parse("foo bar, *, *.com, a.*.example.com, **.example.com, under_score.example.com, ok.example.com");
        assert!(g.allows("ok.example.com"));
        for refused in ["foo", "bar", "x.com", "a.b.example.com", "under_score.example.com", "q.example.com"] {
            assert!(!g.allows(refused), "{refused}");
        }
        assert_eq!(g.bad_entries().len(), MAX_BAD_KEPT);
        assert_eq!(&*g.bad_entries()[0], "foo bar");
        assert!(Grant::parse("").is_empty());
        assert!(Grant::parse(" , ").bad_entries().is_empty());
    }

    proptest! {
        #[test]
        fn parsing_never_panics_and_grants_only_what_it_lists(s in "\\PC{0,200}", name in "[a-z]{1,5}(\\.[a-z]{1,5}){0,3}") {
            let g = Grant::parse(&s);
            if g.allows(&name) {
                let listed = s.split(',').map(normalize).any(|e| e == name || e.strip_prefix('*').is_some_and(|base| name.ends_with(base) && name.len() > base.len()));
                prop_assert!(listed, "{name} allowed by {s:?}");
            }
        }
    }
}
