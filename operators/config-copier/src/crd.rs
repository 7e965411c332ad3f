//! The `CopyRule` custom resource (`flotilla.dev/v1alpha1`). Every field's
//! doc comment is its `kubectl explain` description; the schema and its CEL
//! rules reject bad rules at admission.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod request;
pub use request::{CopyRequest, CopyRequestSpec, CopyRequestStatus, NamespaceName, PullSource};

pub use flotilla_shared::selector::{
    LABEL_KEY_PATTERN, LABEL_VALUE_PATTERN, LabelKey, LabelSelector, LabelSelectorRequirement, LabelValue,
    SelectorOperator,
};

/// Copies ConfigMaps or Secrets of this rule's own namespace into other
/// namespaces and keeps the copies in sync with their sources.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = kube::core::Rule::new(
    "has(self.selector) || (has(self.names) && size(self.names) > 0)"
).message("a rule needs a selector, names, or both"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.target) || !has(self.target.name) || !has(self.names) || size(self.names) <= 1"
).message("target.name is the name of one copy: a rule with target.name lists at most one source name (use target.namePrefix or target.nameSuffix to copy several)"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.target) || !has(self.names) || self.names.all(n, (has(self.target.namePrefix) ? size(self.target.namePrefix) : 0) + size(n) + (has(self.target.nameSuffix) ? size(self.target.nameSuffix) : 0) <= 253)"
).message("target.namePrefix + a source name + target.nameSuffix must be at most 253 characters (an object name)"))]
#[kube(
    group = "flotilla.dev",
    version = "v1alpha1",
    kind = "CopyRule",
    doc = "A rule copying the ConfigMaps or Secrets of its own namespace that match a selector into other namespaces, keeping the copies in sync.",
    namespaced,
    status = "CopyRuleStatus",
    shortname = "cr",
    category = "flotilla",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.kind"}"#,
    printcolumn = r#"{"name":"Sources","type":"integer","jsonPath":".status.sources"}"#,
    printcolumn = r#"{"name":"Namespaces","type":"integer","jsonPath":".status.namespaces","description":"consenting target namespaces"}"#,
    printcolumn = r#"{"name":"Copies","type":"integer","jsonPath":".status.copies","description":"copies in sync"}"#,
    printcolumn = r#"{"name":"Conflicts","type":"integer","jsonPath":".status.conflicts"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message","description":"the Ready condition's message (kubectl get -o wide)"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CopyRuleSpec {
    /// Kind of object to copy: ConfigMap or Secret.
    pub kind: SourceKind,
    /// Which objects of that kind in this rule's own namespace are sources,
    /// by label. Sources never come from another namespace. An empty
    /// selector selects every object of the kind, except copies made by
    /// config-copier and the default-excluded ones (kube-root-ca.crt, Helm
    /// release objects, objects controlled by another controller, Secrets of
    /// a type the operator does not copy). A selector, names, or both are
    /// required; with both, an object is a source when it matches either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Sources by name, in this rule's own namespace: for objects other
    /// tools make that cannot carry a label (cert-manager, external-secrets).
    /// A named object is copied even when it is controlled by another
    /// controller, is kube-root-ca.crt or looks like a Helm release; the
    /// Secret-type allow-list still applies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub names: Vec<ObjectName>,
    /// Where copies go. Omitted: every namespace except the rule's own.
    /// Whatever this says, a namespace receives copies only when it
    /// consents (label flotilla.dev/accept-copies, unless the operator runs
    /// with --target-consent=none), and never the rule's own namespace,
    /// kube-system, kube-public, kube-node-lease, the operator's namespace or
    /// the operator's --protected-namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<NamespaceTargets>,
    /// What to do when a target namespace already has an object of that
    /// name which this rule does not own. Skip (default): leave it alone and
    /// report it in status and as a Warning Event. Overwrite: adopt it, only
    /// in target namespaces labelled flotilla.dev/accept-overwrite=true (an
    /// object owned by another existing CopyRule is never taken).
    #[serde(default)]
    pub on_conflict: OnConflict,
    /// How copies are named in the target namespaces. Omitted: a copy has
    /// its source's name. Set name (one source only) or namePrefix and/or
    /// nameSuffix (any number of sources), not both. Changing it renames
    /// the copies: the new ones are made and this rule's old ones pruned
    /// (unless prune is false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<CopyTarget>,
    /// Delete copies whose source, rule or namespace match went away
    /// (default true). False leaves such copies in place, no longer updated.
    #[serde(default = "default_true")]
    #[schemars(default = "default_true")]
    pub prune: bool,
    /// Roll the workloads that consume a copy when its data changes
    /// (default false). When an existing copy is updated, the Deployments,
    /// StatefulSets and DaemonSets of its namespace that reference it (env
    /// valueFrom, envFrom, volumes, projected volume sources; containers and
    /// initContainers) get the pod-template annotation
    /// flotilla.dev/copy-hash set to a hash of the copy's data: they roll
    /// once per change of the data, never on a resync. Only in namespaces
    /// labelled flotilla.dev/accept-rollouts=true, and only when the
    /// operator runs with --enable-rollouts (chart value rollouts.enabled);
    /// otherwise the RolloutOnChange condition says why nothing is rolled.
    #[serde(default)]
    pub rollout_on_change: bool,
}

fn default_true() -> bool {
    true
}

/// Kind of object a rule copies.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
pub enum SourceKind {
    ConfigMap,
    Secret,
}

impl SourceKind {
    pub const ALL: [SourceKind; 2] = [SourceKind::ConfigMap, SourceKind::Secret];

    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::ConfigMap => "ConfigMap",
            SourceKind::Secret => "Secret",
        }
    }

    /// The resource's plural, for `ApiResource`s.
    pub fn plural(self) -> &'static str {
        match self {
            SourceKind::ConfigMap => "configmaps",
            SourceKind::Secret => "secrets",
        }
    }
}

/// What to do with an existing object the rule does not own.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OnConflict {
    /// Leave it alone; report it (status, Warning Event, metric).
    #[default]
    Skip,
    /// Adopt it: write the copy over it and mark it as this rule's.
    Overwrite,
}

/// Where copies go: namespaces matching the selector AND any include glob,
/// minus those matching an exclude glob.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceTargets {
    /// Only namespaces whose labels match this selector. Omitted: any labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Only namespaces whose name matches one of these globs ('*' any run of
    /// characters, '?' one character). Omitted or empty: any name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub include: Vec<NamespaceGlob>,
    /// Never namespaces whose name matches one of these globs (applied last).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub exclude: Vec<NamespaceGlob>,
}

/// How a rule names its copies: one fixed name, or the source's name
/// between a prefix and a suffix. A name that is not a valid object name,
/// or a fixed name for a rule selecting several sources, is refused at
/// admission where the schema can know it; otherwise at run time with
/// Ready=False (TargetNameInvalid, TargetNameAmbiguous) and a Warning
/// Event, and nothing is copied under that name.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.name) || (!has(self.namePrefix) && !has(self.nameSuffix))"
).message("target.name and target.namePrefix/nameSuffix are mutually exclusive"))]
#[x_kube(validation = kube::core::Rule::new(
    "(has(self.namePrefix) ? size(self.namePrefix) : 0) + (has(self.nameSuffix) ? size(self.nameSuffix) : 0) <= 252"
).message("target.namePrefix and target.nameSuffix together must leave room for the source's name (at most 252 characters)"))]
pub struct CopyTarget {
    /// The copy's name, instead of its source's (a DNS subdomain). Only
    /// for a rule that copies exactly one source: admission refuses it
    /// with more than one entry in names, and a rule whose selector
    /// matches several sources is Ready=False (TargetNameAmbiguous) and
    /// copies, updates and prunes nothing until it matches one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<ObjectName>,
    /// Put before each source's name: the copy of ca-crt with namePrefix
    /// team-a- is team-a-ca-crt. Lowercase letters, digits, '-' and '.';
    /// it starts with a letter or digit and ends with a letter, a digit,
    /// '-' or a single '.', so that the copy's name is a valid object
    /// name. A copy name over 253 characters (a long source name) is not
    /// copied: status.skipped, Ready=False TargetNameInvalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 252),
        pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\.|-+)?$")
    )]
    pub name_prefix: Option<String>,
    /// Put after each source's name: the copy of ca-crt with nameSuffix
    /// -team-a is ca-crt-team-a. Lowercase letters, digits, '-' and '.';
    /// it starts with a letter, a digit, '-' or a single '.' and ends with
    /// a letter or digit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 252),
        pattern(r"^(\.|-+)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name_suffix: Option<String>,
}

/// An object's name (a DNS subdomain).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
#[serde(transparent)]
pub struct ObjectName(
    #[schemars(
        length(min = 1, max = 253),
        pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub String,
);

/// A namespace-name glob: lowercase letters, digits, '-', '*' and '?'.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(transparent)]
pub struct NamespaceGlob(#[schemars(length(min = 1, max = 63), pattern(r"^[a-z0-9*?-]+$"))] pub String);

/// What config-copier observed and did for this rule.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopyRuleStatus {
    /// The rule generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready (all wanted copies in sync) and Conflicting (some targets are
    /// held by objects this rule does not own).
    #[serde(default)]
    #[schemars(schema_with = "flotilla_shared::conditions::schema")]
    pub conditions: Vec<Condition>,
    /// Sources: objects in the rule's namespace matching its selector.
    #[serde(default)]
    pub sources: i32,
    /// Target namespaces the rule currently selects.
    #[serde(default)]
    pub namespaces: i32,
    /// Copies that should exist (sources × target namespaces).
    #[serde(default)]
    pub desired: i32,
    /// Copies that exist with the sources' current content.
    #[serde(default)]
    pub copies: i32,
    /// Targets held by an object this rule does not own (left alone).
    #[serde(default)]
    pub conflicts: i32,
    /// Protected namespaces the rule's namespace selection matched; they
    /// never receive copies (kube-system, kube-public, kube-node-lease, the
    /// operator's namespace, --protected-namespaces).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protected_namespaces: Vec<String>,
    /// Objects in the rule's namespace the rule selected but does not copy,
    /// and why (at most 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedSource>,
    /// The first conflicts (at most 20), by namespace and name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicting: Vec<ConflictEntry>,
    /// When the rule last changed a copy or its status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<Time>,
}

/// A target this rule did not write, and why.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConflictEntry {
    /// The target namespace.
    pub namespace: String,
    /// The object's name (the copy's: its source's, or as spec.target names it).
    pub name: String,
    /// NotOwned (no ownership marks), OwnedByAnotherRule, ClaimedByAnotherRule
    /// (an older rule wants the same object) or Invalid (the API refused the write).
    pub reason: String,
    /// Details, e.g. which rule owns it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// A selected object that is not copied.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkippedSource {
    /// The object's name (in the rule's namespace).
    pub name: String,
    /// SecretTypeNotAllowed, KubeRootCa, HelmRelease,
    /// ControlledByAnotherController or TargetNameInvalid (the copy's name
    /// spec.target makes of it is not a valid object name).
    pub reason: String,
    /// Details, e.g. the Secret type or the controller.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// At most this many entries in `status.conflicting`.
pub const MAX_CONFLICTS_LISTED: usize = 20;
