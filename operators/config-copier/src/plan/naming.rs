//! How a rule names its copies (`spec.target`), pure: a source's copy
//! name ([`Naming::copy_name`]), checked as an object name, and a rule's
//! copies named ([`name_copies`]) — refused as a whole when one fixed name
//! would stand for several sources ([`Ambiguous`]: which source's content
//! would it hold?).
//!
//! The name is derived, never stored beside a copy: the plan computes it
//! once per source and reconcile, as the process's shared string
//! ([`flotilla_shared::intern`]), and every key of that source's copies,
//! in every target namespace, and the rule's claim hold that one string.
//! A copy's own record (the copy watch's) holds its name as it always did.

use std::borrow::Cow;
use std::sync::Arc;

use crate::copy::SourceInfo;
use crate::crd::CopyTarget;
use crate::targets::InvalidSpec;

use super::RuleSources;

/// An object name's length limit (a DNS subdomain).
pub const MAX_NAME: usize = 253;

/// How a rule names its copies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Naming {
    /// A copy has its source's name (no `spec.target`, or one that names nothing).
    #[default]
    Same,
    /// `target.name`: the one copy's name.
    Fixed(String),
    /// `target.namePrefix` + the source's name + `target.nameSuffix`.
    Affixed { prefix: String, suffix: String },
}

impl Naming {
    /// From `spec.target`. Both a name and a prefix or suffix is an
    /// invalid spec (admission refuses it; an object stored under an older
    /// schema may still say it).
    pub fn of(target: Option<&CopyTarget>) -> Result<Self, InvalidSpec> {
        let Some(t) = target else { return Ok(Self::Same) };
        let prefix = t.name_prefix.clone().unwrap_or_default();
        let suffix = t.name_suffix.clone().unwrap_or_default();
        match &t.name {
            Some(_) if !prefix.is_empty() || !suffix.is_empty() => {
                Err(InvalidSpec("target.name and target.namePrefix/nameSuffix are mutually exclusive".into()))
            }
            Some(name) => Ok(Self::Fixed(name.0.clone())),
            None if prefix.is_empty() && suffix.is_empty() => Ok(Self::Same),
            None => Ok(Self::Affixed { prefix, suffix }),
        }
    }

    /// The name of `source`'s copies (not checked: [`checked_name`]).
    pub fn copy_name<'a>(&'a self, source: &'a str) -> Cow<'a, str> {
        match self {
            Self::Same => Cow::Borrowed(source),
            Self::Fixed(name) => Cow::Borrowed(name),
            Self::Affixed { prefix, suffix } => Cow::Owned(format!("{prefix}{source}{suffix}")),
        }
    }
}

/// Whether `s` is a valid name for a ConfigMap or Secret: a DNS subdomain
/// (RFC 1123) — at most 253 characters, dot-separated labels of lowercase
/// letters, digits and '-', each starting and ending with a letter or
/// digit.
pub fn is_object_name(s: &str) -> bool {
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        b.first().is_some_and(alnum) && b.last().is_some_and(alnum) && b.iter().all(|c| alnum(c) || *c == b'-')
    };
    !s.is_empty() && s.len() <= MAX_NAME && s.split('.').all(label_ok)
}

/// `source`'s copy name, or why it cannot be one (a message for status).
pub fn checked_name<'a>(naming: &'a Naming, source: &'a str) -> Result<Cow<'a, str>, String> {
    let name = naming.copy_name(source);
    if is_object_name(&name) {
        return Ok(name);
    }
    let shown: String = name.chars().take(60).collect();
    let more = if name.chars().count() > 60 { "…" } else { "" };
    Err(if name.len() > MAX_NAME {
        format!("its copy's name ({shown}{more}) would be {} characters, over {MAX_NAME}", name.len())
    } else {
        format!("its copy's name ({shown}{more}) is not a valid object name (a DNS subdomain)")
    })
}

/// A rule's copies named: each copied source with its copies' name (a
/// shared string), sorted by source; the sources whose copy name is not a
/// valid object name are not copied (source name, why).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NamedCopies {
    pub copies: Vec<(Arc<str>, Arc<SourceInfo>)>,
    pub invalid: Vec<(String, String)>,
}

/// `target.name` set, and the rule copies several sources: the copy would
/// be each in turn. Nothing is decided for the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ambiguous {
    pub name: String,
    /// The sources' names, sorted.
    pub sources: Vec<String>,
}

impl Ambiguous {
    /// The status message and Warning.
    pub fn message(&self) -> String {
        const SHOWN: usize = 5;
        let mut names = self.sources.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
        if self.sources.len() > SHOWN {
            names.push_str(&format!(" and {} more", self.sources.len() - SHOWN));
        }
        format!(
            "target.name {} names one copy but the rule copies {} sources ({names}); nothing is copied, updated or pruned until it selects one (namePrefix or nameSuffix names the copies of several)",
            self.name,
            self.sources.len()
        )
    }
}

/// The reason (status.skipped, the Ready condition, the Warning) for a
/// source whose copy name is not a valid object name.
pub const TARGET_NAME_INVALID: &str = "TargetNameInvalid";

/// What the Ready condition and the Warning say of the sources `named`
/// could not name (`None`: every one was named). Stable while the
/// situation is: the Warning is sent when it first says so.
pub fn invalid_names_message(named: &NamedCopies) -> Option<String> {
    let (first, why) = named.invalid.first()?;
    let n = named.invalid.len();
    let sources = if n == 1 { "1 source is".to_string() } else { format!("{n} sources are") };
    Some(format!(
        "{sources} not copied because spec.target makes no valid object name of them (see status.skipped); first: {first}: {why}"
    ))
}

/// Names the copies of `sources` as `naming` says.
pub fn name_copies(sources: &RuleSources, naming: &Naming) -> Result<NamedCopies, Ambiguous> {
    if let Naming::Fixed(name) = naming
        && sources.copied.len() > 1
    {
        let sources = sources.copied.iter().map(|s| s.name.clone()).collect();
        return Err(Ambiguous { name: name.clone(), sources });
    }
    let shared = flotilla_shared::intern::names();
    let mut out = NamedCopies::default();
    for s in &sources.copied {
        match checked_name(naming, &s.name) {
            Ok(name) => out.copies.push((shared.get(&name), Arc::clone(s))),
            Err(why) => out.invalid.push((s.name.clone(), why)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;
    use crate::copy::{Content, Source};
    use crate::crd::{ObjectName, SourceKind};

    fn target(name: Option<&str>, prefix: Option<&str>, suffix: Option<&str>) -> CopyTarget {
        CopyTarget {
            name: name.map(|n| ObjectName(n.into())),
            name_prefix: prefix.map(Into::into),
            name_suffix: suffix.map(Into::into),
        }
    }

    fn sources(names: &[&str]) -> RuleSources {
        let info = |n: &str| {
            Arc::new(
                Source::new(
                    SourceKind::ConfigMap,
                    "team-a",
                    n,
                    &Default::default(),
                    &Default::default(),
                    Content::default(),
                )
                .info(),
            )
        };
        RuleSources { copied: names.iter().map(|n| info(n)).collect(), skipped: vec![] }
    }

    fn names(n: &NamedCopies) -> Vec<(&str, &str)> {
        n.copies.iter().map(|(c, s)| (&**c, s.name.as_str())).collect()
    }

    #[test]
    fn without_a_target_a_copy_has_its_sources_name() {
        assert_eq!(Naming::of(None).unwrap(), Naming::Same);
        assert_eq!(Naming::of(Some(&target(None, None, None))).unwrap(), Naming::Same);
        let named = name_copies(&sources(&["a", "ca-crt"]), &Naming::Same).unwrap();
        assert_eq!(names(&named), [("a", "a"), ("ca-crt", "ca-crt")]);
    }

    #[test]
    fn a_prefix_and_a_suffix_surround_the_sources_name() {
        let naming = Naming::of(Some(&target(None, Some("team-a-"), Some(".v1")))).unwrap();
        let named = name_copies(&sources(&["ca-crt", "db"]), &naming).unwrap();
        assert_eq!(names(&named), [("team-a-ca-crt.v1", "ca-crt"), ("team-a-db.v1", "db")]);
        assert!(named.invalid.is_empty());
    }

    #[test]
    fn a_fixed_name_names_one_source_and_is_ambiguous_for_several() {
        let naming = Naming::of(Some(&target(Some("platform-ca"), None, None))).unwrap();
        let named = name_copies(&sources(&["ca-crt"]), &naming).unwrap();
        assert_eq!(names(&named), [("platform-ca", "ca-crt")]);
        assert!(name_copies(&sources(&[]), &naming).unwrap().copies.is_empty(), "no source, no copy");
        let err = name_copies(&sources(&["a", "b"]), &naming).unwrap_err();
        assert_eq!(err, Ambiguous { name: "platform-ca".into(), sources: vec!["a".into(), "b".into()] });
        assert!(err.message().contains("2 sources (a, b)"), "{}", err.message());
        let many: Vec<String> = (0..8).map(|i| format!("s{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(name_copies(&sources(&many), &naming).unwrap_err().message().contains("and 3 more"));
    }

    #[test]
    fn a_name_with_a_prefix_is_an_invalid_spec() {
        for t in [target(Some("x"), Some("p-"), None), target(Some("x"), None, Some("-s"))] {
            let e = Naming::of(Some(&t)).unwrap_err();
            assert!(e.0.contains("mutually exclusive"), "{e:?}");
        }
    }

    #[test]
    fn a_copy_name_over_253_characters_is_not_copied_and_says_why() {
        let long = "s".repeat(200);
        let naming = Naming::of(Some(&target(None, Some(&"p".repeat(40)), Some(&"-x".repeat(10))))).unwrap();
        let named = name_copies(&sources(&["ok", &long]), &naming).unwrap();
        assert_eq!(named.copies.len(), 1);
        let (source, why) = &named.invalid[0];
        assert_eq!(source, &long);
        assert!(why.contains("260 characters, over 253") && why.contains('…'), "{why}");
        // Exactly 253 is a name.
        let naming = Naming::Affixed { prefix: "p".repeat(50), suffix: String::new() };
        assert!(name_copies(&sources(&[&"s".repeat(203)]), &naming).unwrap().invalid.is_empty());
    }

    #[test]
    fn object_names_are_dns_subdomains() {
        for ok in ["a", "ca-crt", "team-a.ca-crt", "a--b", "0", &"a".repeat(253)] {
            assert!(is_object_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a.", ".a", "a..b", "a-.b", "A", "a_b", "a b", &"a".repeat(254)] {
            assert!(!is_object_name(bad), "{bad}");
        }
    }

    /// The schema's patterns (crd.rs), as regexes: what admission lets through.
    const NAME: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
    const PREFIX: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\.|-+)?$";
    const SUFFIX: &str = r"^(\.|-+)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

    #[test]
    fn the_schema_patterns_are_the_ones_tested_here() {
        let crd = serde_json::to_string(&<crate::crd::CopyRule as kube::CustomResourceExt>::crd()).unwrap();
        for p in [NAME, PREFIX, SUFFIX] {
            assert!(crd.contains(&serde_json::to_string(p).unwrap()), "{p} is not in the CRD");
        }
    }

    fn label() -> impl Strategy<Value = String> {
        "[a-z0-9]([-a-z0-9]{0,6}[a-z0-9])?"
    }

    fn object_name() -> impl Strategy<Value = String> {
        proptest::collection::vec(label(), 1..4).prop_map(|l| l.join("."))
    }

    fn prefix() -> impl Strategy<Value = String> {
        (object_name(), "(\\.|-{1,3})?").prop_map(|(n, end)| n + &end)
    }

    fn suffix() -> impl Strategy<Value = String> {
        ("(\\.|-{1,3})?", object_name()).prop_map(|(start, n)| start + &n)
    }

    proptest! {
        /// Whatever prefix and suffix admission lets through, the copy of
        /// a valid source name is a valid object name (or too long, and
        /// said so), and two sources never share a copy name: the copies
        /// of different sources never collide.
        #[test]
        fn affixed_names_are_valid_and_injective(
            p in proptest::option::of(prefix()),
            s in proptest::option::of(suffix()),
            sources_ in proptest::collection::btree_set(object_name(), 0..12),
        ) {
            let (re_p, re_s, re_n) = (regex::Regex::new(PREFIX).unwrap(), regex::Regex::new(SUFFIX).unwrap(), regex::Regex::new(NAME).unwrap());
            prop_assert!(p.as_deref().is_none_or(|p| re_p.is_match(p)) && s.as_deref().is_none_or(|s| re_s.is_match(s)));
            let naming = Naming::of(Some(&target(None, p.as_deref(), s.as_deref()))).unwrap();
            let list: Vec<&str> = sources_.iter().map(String::as_str).collect();
            let named = name_copies(&sources(&list), &naming).unwrap();
            prop_assert_eq!(named.copies.len() + named.invalid.len(), list.len());
            for (copy, _) in &named.copies {
                prop_assert!(is_object_name(copy) && re_n.is_match(copy), "{}", copy);
            }
            for (source, why) in &named.invalid {
                prop_assert!(naming.copy_name(source).len() > MAX_NAME, "{}: {}", source, why);
            }
            let distinct: BTreeSet<&str> = named.copies.iter().map(|(c, _)| &**c).collect();
            prop_assert_eq!(distinct.len(), named.copies.len());
        }
    }
}
