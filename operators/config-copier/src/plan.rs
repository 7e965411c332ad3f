//! Every write decision, as pure functions: which namespaces may receive a
//! rule's copies (protection and consent), which selected objects may be
//! copied (Secret types, default exclusions), whether a rule's sources fit
//! its byte budget, what the copies are named ([`naming`]: `spec.target`),
//! which copies should exist, the rule's claim (who wins
//! a name two rules want: [`crate::claims`]), and — for one copy — what to do from
//! the desired copy, the observed object's metadata and the policy
//! ([`decide`]). `apply.rs` only carries the [`Action`] out.
//!
//! The properties tested below: ownership is never lost (a copy of ours is
//! only deleted by us when unwanted, never handed to a foreign object) and
//! nothing this rule does not own is ever written without the namespace's
//! consent and `onConflict: Overwrite` with `accept-overwrite`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::claims::{Claim, Rank};
use crate::copy::{CopyKey, RuleRef, SA_TOKEN_TYPE, SourceInfo};
use crate::crd::{OnConflict, SourceKind};
use crate::targets::{Selector, TargetFilter};

/// Namespace label: the namespace accepts copies (`true`, or the source
/// namespaces it accepts from, separated by `.` or `_`).
pub const ACCEPT_COPIES: &str = "flotilla.dev/accept-copies";
/// Namespace label: `true` lets `onConflict: Overwrite` adopt objects there.
pub const ACCEPT_OVERWRITE: &str = "flotilla.dev/accept-overwrite";
/// Never targets, whatever the flags say.
pub const ALWAYS_PROTECTED: [&str; 3] = flotilla_shared::config::ALWAYS_PROTECTED_NAMESPACES;
/// The Secret types copied unless `--secret-types` says otherwise.
pub const DEFAULT_SECRET_TYPES: [&str; 6] = [
    "Opaque",
    "kubernetes.io/tls",
    "kubernetes.io/dockerconfigjson",
    "kubernetes.io/dockercfg",
    "kubernetes.io/basic-auth",
    "kubernetes.io/ssh-auth",
];
/// Never copied, even when listed in `--secret-types`: credentials of the
/// cluster itself, or another tool's records.
pub const NEVER_COPIED_TYPES: [&str; 3] = [SA_TOKEN_TYPE, "bootstrap.kubernetes.io/token", "helm.sh/release.v1"];

/// Whether namespaces must consent to receive copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Consent {
    /// Only namespaces labelled `flotilla.dev/accept-copies` receive copies.
    #[default]
    Label,
    /// Every unprotected namespace does (every CopyRule author can write
    /// into every unprotected namespace).
    None,
}

/// The operator-wide policy (from flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Never targets: the built-in ones, the operator's namespace, `--protected-namespaces`.
    pub protected: BTreeSet<String>,
    pub consent: Consent,
    /// Secret types that are copied.
    pub secret_types: BTreeSet<String>,
}

impl Default for Policy {
    fn default() -> Self {
        Self::new(None, &[], Consent::Label, DEFAULT_SECRET_TYPES.iter().map(|s| s.to_string()).collect())
    }
}

impl Policy {
    pub fn new(
        operator_namespace: Option<&str>,
        protected: &[String],
        consent: Consent,
        secret_types: BTreeSet<String>,
    ) -> Self {
        let mut all: BTreeSet<String> = ALWAYS_PROTECTED.iter().map(|s| s.to_string()).collect();
        all.extend(operator_namespace.map(str::to_string));
        all.extend(protected.iter().cloned());
        let secret_types = secret_types.into_iter().filter(|t| !NEVER_COPIED_TYPES.contains(&t.as_str())).collect();
        Self { protected: all, consent, secret_types }
    }

    /// Whether config-copier may write or delete anything in `namespace`:
    /// never in a protected one, whatever labels an object there carries
    /// (someone may plant a copy-looking object in kube-system; pruning it
    /// would be a delete there).
    pub fn may_touch(&self, namespace: &str) -> bool {
        !self.protected.contains(namespace)
    }
}

/// A namespace as the metadata-only watch sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NamespaceInfo {
    pub labels: BTreeMap<String, String>,
    /// Has a deletionTimestamp: never a target.
    pub terminating: bool,
}

impl NamespaceInfo {
    /// Whether it accepts copies from rules in `source_namespace`.
    pub fn accepts_from(&self, source_namespace: &str, consent: Consent) -> bool {
        if consent == Consent::None {
            return true;
        }
        self.labels
            .get(ACCEPT_COPIES)
            .is_some_and(|v| v == "true" || v.split(['.', '_']).any(|n| n == source_namespace))
    }

    /// Whether objects there may be adopted.
    pub fn accepts_overwrite(&self) -> bool {
        self.labels.get(ACCEPT_OVERWRITE).is_some_and(|v| v == "true")
    }

    /// Whether rules with `rolloutOnChange` may roll its workloads (a
    /// label, read as `accept-overwrite` is).
    pub fn accepts_rollouts(&self) -> bool {
        self.labels.get(rollouts::ACCEPT_ROLLOUTS).is_some_and(|v| v == "true")
    }
}

/// How a rule selects its sources.
#[derive(Debug, Clone, Default)]
pub struct SourceSelection {
    pub selector: Option<Selector>,
    pub names: BTreeSet<String>,
}

impl SourceSelection {
    /// Selected by name or by label.
    pub fn selects(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.names.contains(name) || self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }

    /// [`Self::selects`] on the label keys a source view keeps.
    pub fn selects_kept(&self, name: &str, labels: &flotilla_shared::pods::PodLabels) -> bool {
        self.names.contains(name) || self.selector.as_ref().is_some_and(|s| labels.matched_by(s))
    }
}

/// A checked rule: what the planner needs.
#[derive(Debug, Clone)]
pub struct RulePlan<'a> {
    pub rule: &'a RuleRef,
    pub kind: SourceKind,
    pub sources: &'a SourceSelection,
    pub targets: &'a TargetFilter,
}

/// Where a rule's copies go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Targets<'n> {
    /// Selected, consenting, unprotected, not terminating, not the rule's
    /// own namespace. Sorted.
    pub accepted: Vec<&'n str>,
    /// Protected namespaces the selection matched (reported in status).
    pub protected: Vec<&'n str>,
}

/// The namespaces a rule copies into. Namespaces that did not consent are
/// neither targets nor reported: status must not reveal them.
pub fn target_namespaces<'n>(
    rule: &RulePlan<'_>,
    namespaces: &'n HashMap<String, NamespaceInfo>,
    policy: &Policy,
) -> Targets<'n> {
    let own = rule.rule.id.namespace.as_str();
    let mut t = Targets::default();
    for (name, ns) in namespaces {
        if ns.terminating || name == own || !rule.targets.selects(name, &ns.labels) {
            continue;
        }
        if policy.protected.contains(name) {
            t.protected.push(name);
        } else if ns.accepts_from(own, policy.consent) {
            t.accepted.push(name);
        }
    }
    t.accepted.sort_unstable();
    t.protected.sort_unstable();
    t
}

/// What of `spec` only the CopyRule admission policy lets the right people
/// ask for (the same two rules as `copyrule-access.yaml`): `Some` names it.
/// Such a rule is refused while that policy is missing.
pub fn guarded_power(spec: &crate::crd::CopyRuleSpec) -> Option<&'static str> {
    if spec.on_conflict == OnConflict::Overwrite {
        return Some("onConflict: Overwrite");
    }
    let explicit = spec
        .namespaces
        .as_ref()
        .is_some_and(|n| !n.include.is_empty() && n.include.iter().all(|g| !g.0.contains('*') && !g.0.contains('?')));
    (!explicit).then_some("a target list that is not explicit namespace names")
}

/// Why a selected object is not copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    SecretTypeNotAllowed(String),
    KubeRootCa,
    HelmRelease,
    ControlledByAnotherController(String),
}

impl SkipReason {
    pub fn reason(&self) -> &'static str {
        match self {
            SkipReason::SecretTypeNotAllowed(_) => "SecretTypeNotAllowed",
            SkipReason::KubeRootCa => "KubeRootCa",
            SkipReason::HelmRelease => "HelmRelease",
            SkipReason::ControlledByAnotherController(_) => "ControlledByAnotherController",
        }
    }

    pub fn message(&self) -> String {
        match self {
            SkipReason::SecretTypeNotAllowed(t) => format!("Secrets of type {t} are not copied"),
            SkipReason::KubeRootCa => "kube-root-ca.crt is in every namespace already; name it to copy it".into(),
            SkipReason::HelmRelease => "a Helm release record; name it to copy it".into(),
            SkipReason::ControlledByAnotherController(c) => format!("controlled by {c}; name it to copy it"),
        }
    }
}

/// Whether a selected object may be copied. The Secret-type allow-list
/// always applies; the other exclusions are lifted by naming the object.
pub fn admit_source(source: &SourceInfo, named: bool, policy: &Policy) -> Result<(), SkipReason> {
    if source.kind == SourceKind::Secret {
        let t = source.type_.as_deref().unwrap_or("Opaque");
        if !policy.secret_types.contains(t) || NEVER_COPIED_TYPES.contains(&t) {
            return Err(SkipReason::SecretTypeNotAllowed(t.to_string()));
        }
    }
    if named {
        return Ok(());
    }
    if source.kind == SourceKind::ConfigMap && source.name == "kube-root-ca.crt" {
        return Err(SkipReason::KubeRootCa);
    }
    if source.helm_release {
        return Err(SkipReason::HelmRelease);
    }
    if let Some(c) = &source.controller {
        return Err(SkipReason::ControlledByAnotherController(c.clone()));
    }
    Ok(())
}

/// A rule's sources, sorted by name: those copied, and those selected but skipped.
#[derive(Debug, Clone, Default)]
pub struct RuleSources {
    pub copied: Vec<Arc<SourceInfo>>,
    pub skipped: Vec<(String, SkipReason)>,
}

impl RuleSources {
    /// Bytes the copied sources carry together.
    pub fn bytes(&self) -> u64 {
        self.copied.iter().map(|s| s.size).sum()
    }
}

/// The sources a rule copies: of its kind, in its own namespace (whatever
/// the caller passed), admitted by the policy. Selection is the source
/// watch's (the rule's selector sent to the API server, or its names):
/// `sources` holds the selected objects only.
pub fn rule_sources(rule: &RulePlan<'_>, sources: &[Arc<SourceInfo>], policy: &Policy) -> RuleSources {
    let mut out = RuleSources::default();
    let mut seen = BTreeSet::new();
    let mut sorted: Vec<&Arc<SourceInfo>> =
        sources.iter().filter(|s| s.kind == rule.kind && s.namespace == rule.rule.id.namespace).collect();
    sorted.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    for s in sorted {
        if !seen.insert(s.name.clone()) {
            continue;
        }
        match admit_source(s, rule.sources.names.contains(&s.name), policy) {
            Ok(()) => out.copied.push(Arc::clone(s)),
            Err(why) => out.skipped.push((s.name.clone(), why)),
        }
    }
    out
}

/// Why a rule's sources are too large to copy (`limit`: the per-rule
/// budget in bytes), or None when they fit. The sources copied count, not
/// those skipped.
pub fn sources_too_large(sources: &RuleSources, limit: u64) -> Option<String> {
    let bytes = sources.bytes();
    (bytes > limit).then(|| {
        format!(
            "the {} sources this rule copies hold {}, over the per-rule limit of {} (--max-rule-source-bytes); nothing is copied, updated or pruned until they fit",
            sources.copied.len(),
            human_bytes(bytes),
            human_bytes(limit)
        )
    })
}

/// `1.5 MiB`, `700.0 KiB`, `12 bytes`.
pub fn human_bytes(b: u64) -> String {
    const KI: u64 = 1024;
    if b >= KI * KI {
        format!("{:.1} MiB", b as f64 / (KI * KI) as f64)
    } else if b >= KI {
        format!("{:.1} KiB", b as f64 / KI as f64)
    } else {
        format!("{b} bytes")
    }
}

/// Every copy that should exist: each named copy ([`name_copies`]) in
/// each target namespace, under its copy name (one shared string for all
/// the namespaces).
pub fn desired_copies(
    named: &NamedCopies,
    targets: &Targets<'_>,
    kind: SourceKind,
) -> BTreeMap<CopyKey, Arc<SourceInfo>> {
    let mut out = BTreeMap::new();
    for (name, source) in &named.copies {
        for ns in &targets.accepted {
            let key = CopyKey { kind, namespace: (*ns).into(), name: Arc::clone(name) };
            out.insert(key, Arc::clone(source));
        }
    }
    out
}

/// The claim `rule` publishes for the copies it wants (`created`: its
/// creationTimestamp, which ranks it): their names, not their sources'
/// (two rules whose sources share a name but whose copies do not, say
/// by prefix, want different objects).
pub fn claim(rule: &RulePlan<'_>, created: Option<String>, named: &NamedCopies, targets: &Targets<'_>) -> Claim {
    let names = flotilla_shared::intern::names();
    Claim {
        rank: Rank { created, rule: rule.rule.id.clone() },
        kind: rule.kind,
        names: named.copies.iter().map(|(name, _)| Arc::clone(name)).collect(),
        namespaces: targets.accepted.iter().map(|ns| names.get(ns)).collect(),
    }
}

mod copies;
mod decide;
mod naming;
pub mod rollouts;
pub use copies::*;
pub use decide::*;
pub use naming::*;

#[cfg(test)]
mod tests;
