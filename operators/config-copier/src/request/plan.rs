//! One CopyRequest's decision (pure): whether the source's owner allows
//! the request's namespace ([`allows`]), and what to do about the copy
//! ([`decide`]) from what the reconcile read.
//!
//! What the requester learns is chosen here. A source that does not exist,
//! one in a protected namespace, a copy made by config-copier, and one
//! whose owner does not allow the request's namespace all give the same
//! condition (reason `NotAllowed`, one message): the requester cannot
//! probe another namespace for the names of objects it may not read. Only
//! once the source's owner has allowed the namespace does the status say
//! more of the source (its Secret type, its size).

use crate::copy::SourceInfo;
use crate::plan::{Policy, SkipReason, admit_source, human_bytes};
use crate::targets::{check_glob, glob_match};

/// At most this many globs of an `allow-pull-to` annotation are read (the
/// rest ignored): the annotation's author is a tenant.
pub const MAX_ALLOW_GLOBS: usize = 64;

/// Whether the annotation `allow-pull-to` (comma-separated namespace
/// globs: '*' any run of characters, '?' one) admits `namespace`. An
/// invalid glob admits nothing; only the first [`MAX_ALLOW_GLOBS`] count.
pub fn allows(annotation: Option<&str>, namespace: &str) -> bool {
    let Some(a) = annotation else { return false };
    a.split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .take(MAX_ALLOW_GLOBS)
        .any(|g| check_glob(g).is_ok() && glob_match(g, namespace))
}

/// What a reconcile read of the source (nothing is read in a protected
/// namespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSeen {
    /// Not found, not read (a protected namespace), or a copy config-copier made.
    Unavailable,
    /// The object, its `allow-pull-to` annotation and what a copy would carry.
    Found { allow_pull_to: Option<String>, info: Box<SourceInfo> },
}

/// What is at the copy's place in the request's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSeen {
    Absent,
    /// Marked as this request's; `in_sync` when it holds the source's
    /// current content and marks; `type_` its Secret type.
    Mine {
        in_sync: bool,
        type_: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
    },
    /// Anything else: never written nor deleted.
    NotOurs,
}

/// The write the decision asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    Nothing,
    Create,
    /// Ours and stale: patch at this resourceVersion.
    Update {
        resource_version: Option<String>,
    },
    /// Ours and unwanted (or of another Secret type, which the API cannot
    /// change in place: the next reconcile creates it again).
    Delete {
        uid: Option<String>,
        resource_version: Option<String>,
    },
}

/// The Ready condition the decision reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub ready: bool,
    pub reason: &'static str,
    pub message: String,
}

/// A decision: the write, and what to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub act: Act,
    pub verdict: Verdict,
}

pub const NOT_ALLOWED: &str = "NotAllowed";
pub const CONFLICT: &str = "Conflict";
pub const SOURCE_TOO_LARGE: &str = "SourceTooLarge";
pub const PROTECTED_NAMESPACE: &str = "ProtectedNamespace";
pub const TOO_MANY_REQUESTS: &str = "TooManyRequests";

/// A request's place in its namespace's queue: its creation time (seconds;
/// none sorts first) and name, so that every reconcile ranks the same way.
pub type Place<'a> = (Option<i64>, &'a str);

/// How many of `namespace_requests` (the namespace's requests, `me`
/// included or not) come before `me`.
pub fn older_than<'a>(me: Place<'_>, namespace_requests: impl IntoIterator<Item = Place<'a>>) -> usize {
    namespace_requests.into_iter().filter(|other| *other < me).count()
}

/// The refusal of a request that `older` requests of its namespace come
/// before, when the namespace may have only `max` served
/// (`--max-requests-per-namespace`): its copy, if one was made, is kept as
/// it is, neither updated nor pruned, until it is served again. The
/// message does not carry the count, so it stays the same while the
/// request waits and its Warning is given once.
pub fn over_limit(namespace: &str, older: usize, max: usize) -> Option<Verdict> {
    (older >= max).then(|| Verdict {
        ready: false,
        reason: TOO_MANY_REQUESTS,
        message: format!(
            "namespace {namespace} has more than {max} CopyRequests (--max-requests-per-namespace): the {max} oldest \
             are served and this one waits; it is served when an older one is deleted (a copy made before is kept \
             as it is meanwhile)"
        ),
    })
}

/// Where the request is and what it asks for.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The request's namespace (where the copy goes).
    pub namespace: &'a str,
    pub kind: &'a str,
    pub source_namespace: &'a str,
    pub source_name: &'a str,
    /// The copy's name.
    pub copy_name: &'a str,
}

/// Whether the operator may read the source at all: never in a protected
/// namespace (whatever its annotation says).
pub fn may_read_source(policy: &Policy, ask: &Ask<'_>) -> bool {
    policy.may_touch(ask.source_namespace) && policy.may_touch(ask.namespace)
}

fn refused(act: Act, reason: &'static str, message: String) -> Decision {
    Decision { act, verdict: Verdict { ready: false, reason, message } }
}

/// What to do about one request's copy. `max_bytes`: the per-rule source
/// budget (`--max-rule-source-bytes`), which a request's one source keeps too.
pub fn decide(ask: &Ask<'_>, source: &SourceSeen, target: &TargetSeen, policy: &Policy, max_bytes: u64) -> Decision {
    // Ours, and no longer wanted: pruned.
    let prune = match target {
        TargetSeen::Mine { uid, resource_version, .. } => {
            Act::Delete { uid: uid.clone(), resource_version: resource_version.clone() }
        }
        _ => Act::Nothing,
    };
    if !policy.may_touch(ask.namespace) {
        // Nothing is written or deleted in a protected namespace, ever.
        let message = format!("namespace {} is protected: config-copier makes no copies in it", ask.namespace);
        return refused(Act::Nothing, PROTECTED_NAMESPACE, message);
    }
    let info = match source {
        SourceSeen::Found { allow_pull_to, info }
            if policy.may_touch(ask.source_namespace) && allows(allow_pull_to.as_deref(), ask.namespace) =>
        {
            info
        }
        // One answer for "absent", "protected" and "not allowed".
        _ => {
            let message = format!(
                "{} {}/{} does not exist or does not allow copies into namespace {} (its owner allows them with \
                 the annotation flotilla.dev/allow-pull-to)",
                ask.kind, ask.source_namespace, ask.source_name, ask.namespace
            );
            return refused(prune, NOT_ALLOWED, message);
        }
    };
    // Named: the request names its one source, so only the Secret-type
    // allow-list applies (as for a CopyRule's spec.names).
    if let Err(why @ SkipReason::SecretTypeNotAllowed(_)) = admit_source(info, true, policy) {
        return refused(prune, why.reason(), why.message());
    }
    if info.size > max_bytes {
        // Nothing decided: a copy made before stays as it is.
        let message = format!(
            "the source holds {}, over the limit of {} (--max-rule-source-bytes); the copy is neither made nor updated",
            human_bytes(info.size),
            human_bytes(max_bytes)
        );
        return refused(Act::Nothing, SOURCE_TOO_LARGE, message);
    }
    let copied = |act: Act| Decision {
        act,
        verdict: Verdict {
            ready: true,
            reason: "Copied",
            message: format!(
                "{} {} is a copy of {}/{}, in sync",
                ask.kind, ask.copy_name, ask.source_namespace, ask.source_name
            ),
        },
    };
    match target {
        TargetSeen::Absent => copied(Act::Create),
        TargetSeen::NotOurs => refused(
            Act::Nothing,
            CONFLICT,
            format!(
                "{} {}/{} exists and was not made by this request: it is left alone (delete it, or name the copy \
                 otherwise with spec.name)",
                ask.kind, ask.namespace, ask.copy_name
            ),
        ),
        TargetSeen::Mine { type_, .. } if *type_ != info.type_ => copied(prune),
        TargetSeen::Mine { in_sync: true, .. } => copied(Act::Nothing),
        TargetSeen::Mine { resource_version, .. } => copied(Act::Update { resource_version: resource_version.clone() }),
    }
}

#[cfg(test)]
mod tests;
