//! One copy's decision (pure): whose the object there is
//! ([`ownership`]), what to do about it ([`decide`]), and what a refusal
//! of the API as invalid makes of it ([`after_invalid`]).

use crate::claims::OwnerState;
use crate::copy::{Observed, Owner, Payload, RuleId, RuleRef, SourceInfo};
use crate::crd::{OnConflict, SourceKind};

/// Whose an observed object is, from this rule's point of view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// Ours: our label (and our UID, or none: written before UIDs were) or,
    /// the label being gone, our annotations with our UID.
    Mine,
    /// Another live rule of this installation's; `loses_to_us` when it
    /// wants the object too but ranks below this rule.
    OtherRule { rule: String, loses_to_us: bool },
    /// Marked by a rule outside this installation's scope (another
    /// `--watch-namespace` installation): never taken.
    OtherInstallation(String),
    /// No ownership marks, or those of a rule that no longer exists.
    Unowned,
}

/// Classifies `owner` for `me`; `lookup` tells about another rule by its label value.
pub fn ownership(owner: Option<&Owner>, me: &RuleRef, lookup: impl Fn(&str) -> OwnerState) -> Ownership {
    let Some(owner) = owner else { return Ownership::Unowned };
    let my_label = me.id.label_value();
    let label = owner.label_value();
    let uid_is_mine = owner.uid.as_deref() == Some(me.uid.as_str());
    // Our UID is proof enough (the label may have been edited away); our
    // label without a UID is a copy from before UIDs were written; our
    // label with another UID is our deleted predecessor's (same namespace
    // and name, so the same author): ours to take back.
    if uid_is_mine || label.as_deref() == Some(my_label.as_str()) {
        return Ownership::Mine;
    }
    let Some(label) = label else { return Ownership::Unowned };
    let name = owner.rule_name().map(str::to_string).unwrap_or_else(|| label.clone());
    match lookup(&label) {
        OwnerState::OutOfScope => Ownership::OtherInstallation(name),
        OwnerState::Gone => Ownership::Unowned,
        // The marks name a live rule but another incarnation of it: the
        // copy of a deleted rule with the same name; nobody's now.
        OwnerState::Live { uid, .. } if owner.uid.as_ref().is_some_and(|u| **u != *uid) => Ownership::Unowned,
        OwnerState::Live { loses_to_us, .. } => Ownership::OtherRule { rule: name, loses_to_us },
    }
}

/// The desired copy, as far as deciding goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// Hash of payload, labels and annotations (the copy's annotation).
    pub hash: String,
    /// Hash of the payload alone.
    pub content_hash: String,
    pub type_: Option<String>,
}

impl Desired {
    pub fn of(s: &SourceInfo) -> Self {
        Self { hash: s.hash.clone(), content_hash: s.content_hash.clone(), type_: s.type_.clone() }
    }
}

/// What surrounds one copy's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyContext {
    pub on_conflict: OnConflict,
    pub prune: bool,
    /// The target namespace carries `flotilla.dev/accept-overwrite=true`.
    pub accepts_overwrite: bool,
    /// A rule ranking above this one wants the same object.
    pub claimed_by: Option<RuleId>,
}

/// Why a target is left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConflictReason {
    NotOwned,
    OwnedByAnotherRule(String),
    OwnedByAnotherInstallation(String),
    ClaimedByAnotherRule(RuleId),
}

impl ConflictReason {
    pub fn reason(&self) -> &'static str {
        match self {
            ConflictReason::NotOwned => "NotOwned",
            ConflictReason::OwnedByAnotherRule(_) | ConflictReason::OwnedByAnotherInstallation(_) => {
                "OwnedByAnotherRule"
            }
            ConflictReason::ClaimedByAnotherRule(_) => "ClaimedByAnotherRule",
        }
    }
}

/// What to do about one copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing to do: in sync, or not ours and not wanted.
    Nothing,
    /// Ours and right.
    InSync,
    /// Nothing there (as far as the cache knows): create it (a create
    /// fails rather than overwrite something that appeared meanwhile).
    Create,
    /// Ours (or a losing rule's) and stale, edited or with broken marks:
    /// apply at this resourceVersion.
    Update { resource_version: Option<String> },
    /// Not ours, and the namespace and the rule allow adoption.
    Adopt { resource_version: Option<String> },
    /// Ours, but changed by someone and managedFields do not say how: read it.
    Read,
    /// Ours and unwanted: delete at this uid and resourceVersion.
    Delete { uid: Option<String>, resource_version: Option<String> },
    /// Ours and unwanted, but `prune: false`, or wanted by a rule that ranks above us.
    Keep,
    /// Wanted, but left alone.
    Conflict(ConflictReason),
}

impl Action {
    /// Whether the action writes to the object.
    pub fn writes(&self) -> bool {
        matches!(self, Action::Create | Action::Update { .. } | Action::Adopt { .. } | Action::Delete { .. })
    }
}

/// The decision for one copy: `desired` (None: not wanted), what is
/// observed there (None: nothing, as far as we know) and whose it is.
pub fn decide(desired: Option<&Desired>, observed: Option<(&Observed, &Ownership)>, ctx: &CopyContext) -> Action {
    let Some((o, owner)) = observed else {
        return match (desired, &ctx.claimed_by) {
            (None, _) => Action::Nothing,
            (Some(_), Some(by)) => Action::Conflict(ConflictReason::ClaimedByAnotherRule(by.clone())),
            (Some(_), None) => Action::Create,
        };
    };
    let rv = || o.resource_version.as_ref().map(ToString::to_string);
    let Some(d) = desired else {
        return match owner {
            Ownership::Mine if ctx.prune => {
                Action::Delete { uid: o.uid.as_ref().map(ToString::to_string), resource_version: rv() }
            }
            Ownership::Mine => Action::Keep,
            _ => Action::Nothing,
        };
    };
    if let Some(by) = &ctx.claimed_by {
        // A better rule wants it: hands off (it takes our copy over, so
        // deleting it here would only open a gap).
        return match owner {
            Ownership::Mine => Action::Keep,
            _ => Action::Conflict(ConflictReason::ClaimedByAnotherRule(by.clone())),
        };
    }
    match owner {
        Ownership::Mine => {
            let marks = o.managed_by_ours && o.annotated_hash.as_deref() == Some(d.hash.as_str());
            let payload = match &o.payload {
                Payload::Read(read) => Some(*read.content_hash == *d.content_hash),
                Payload::Trusted => Some(true),
                Payload::Edited => Some(false),
                Payload::Unexplained => None,
            };
            match payload {
                None if marks => Action::Read,
                Some(true) if marks && o.owner.as_ref().is_some_and(|ow| ow.label.is_some()) => Action::InSync,
                _ => Action::Update { resource_version: rv() },
            }
        }
        Ownership::OtherRule { loses_to_us: true, .. } => Action::Update { resource_version: rv() },
        Ownership::OtherRule { rule, .. } => Action::Conflict(ConflictReason::OwnedByAnotherRule(rule.clone())),
        Ownership::OtherInstallation(rule) => {
            Action::Conflict(ConflictReason::OwnedByAnotherInstallation(rule.clone()))
        }
        Ownership::Unowned if ctx.on_conflict == OnConflict::Overwrite && ctx.accepts_overwrite => {
            Action::Adopt { resource_version: rv() }
        }
        Ownership::Unowned => Action::Conflict(ConflictReason::NotOwned),
    }
}

/// What to do after the API refused an update of our copy as invalid
/// (422), given the object as read again (`None`: gone meanwhile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterInvalid {
    /// Gone meanwhile: create it.
    Create,
    /// Replace it (delete at this uid and version, then create): its
    /// Secret `type` differs from the source's, the one field that cannot
    /// change in place.
    Replace { uid: Option<String>, resource_version: Option<String> },
    /// Anything else (an admission policy, `immutable: true` set by hand,
    /// not ours): reported, nothing deleted.
    Refused,
}

/// See [`AfterInvalid`]; only a Secret is ever replaced.
pub fn after_invalid(kind: SourceKind, observed: Option<(&Observed, &Ownership)>, desired: &Desired) -> AfterInvalid {
    let Some((o, owner)) = observed else { return AfterInvalid::Create };
    let type_changes = matches!(&o.payload, Payload::Read(read) if read.type_.as_deref() != desired.type_.as_deref());
    if kind == SourceKind::Secret && matches!(owner, Ownership::Mine) && type_changes {
        AfterInvalid::Replace {
            uid: o.uid.as_ref().map(ToString::to_string),
            resource_version: o.resource_version.as_ref().map(ToString::to_string),
        }
    } else {
        AfterInvalid::Refused
    }
}
