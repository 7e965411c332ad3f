//! kubectl debug's profiles as security contexts, and what a namespace's
//! Pod Security enforce level would say of them — checked on the security
//! context itself, with the Pod Security Standards' container rules, so
//! the table and the check cannot drift apart. Pure.
//!
//! Pod Security Admission re-checks the whole pod when an ephemeral
//! container is added, and the container can never be removed: one
//! non-compliant debug container would block every later one on that pod.
//! So a profile the level rejects is refused before any pod is touched.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Capabilities, SeccompProfile, SecurityContext};

use crate::crd::Profile;

/// The namespace label Pod Security Admission enforces.
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

/// A Pod Security Standards level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    /// The enforce level of a namespace with these labels. No label is
    /// privileged, Pod Security's own default (a cluster whose admission
    /// configuration defaults otherwise is caught by the dry-run before the
    /// first real addition); a value Pod Security cannot parse counts as
    /// restricted, as Pod Security itself treats it.
    pub fn of(labels: &BTreeMap<String, String>) -> Level {
        match labels.get(ENFORCE_LABEL).map(String::as_str) {
            None | Some("privileged") => Level::Privileged,
            Some("baseline") => Level::Baseline,
            Some(_) => Level::Restricted,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// The debug container's security context for `profile` (None: unset), as
/// kubectl debug sets it on an ephemeral container.
pub fn security_context(profile: Profile) -> Option<SecurityContext> {
    let caps = |add: &[&str]| SecurityContext {
        capabilities: Some(Capabilities { add: Some(add.iter().map(|c| (*c).to_string()).collect()), drop: None }),
        ..SecurityContext::default()
    };
    match profile {
        Profile::Legacy | Profile::Baseline => None,
        Profile::General => Some(caps(&["SYS_PTRACE"])),
        Profile::Netadmin => Some(caps(&["NET_ADMIN", "NET_RAW"])),
        Profile::Sysadmin => Some(SecurityContext { privileged: Some(true), ..SecurityContext::default() }),
        Profile::Restricted => Some(SecurityContext {
            run_as_non_root: Some(true),
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities { add: None, drop: Some(vec!["ALL".into()]) }),
            seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
            ..SecurityContext::default()
        }),
    }
}

/// Capabilities the baseline level allows to be added.
const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Why `level` would reject a container with `sc` (None: it would not).
/// The Pod Security Standards' container-level rules; pod-level fields
/// cannot make our profiles compliant (drop ALL and no privilege
/// escalation exist only per container).
pub fn violation(level: Level, sc: Option<&SecurityContext>) -> Option<String> {
    let default = SecurityContext::default();
    let sc = sc.unwrap_or(&default);
    let added: Vec<&str> =
        sc.capabilities.as_ref().and_then(|c| c.add.as_ref()).into_iter().flatten().map(String::as_str).collect();
    if level >= Level::Baseline {
        if sc.privileged == Some(true) {
            return Some("privileged containers are not allowed".into());
        }
        let bad: Vec<&str> = added.iter().copied().filter(|c| !BASELINE_CAPABILITIES.contains(c)).collect();
        if !bad.is_empty() {
            return Some(format!("non-default capabilities {bad:?} are not allowed"));
        }
        if sc.seccomp_profile.as_ref().is_some_and(|s| s.type_ == "Unconfined") {
            return Some("seccompProfile Unconfined is not allowed".into());
        }
    }
    if level == Level::Restricted {
        if sc.allow_privilege_escalation != Some(false) {
            return Some("allowPrivilegeEscalation must be false".into());
        }
        let drops_all =
            sc.capabilities.as_ref().and_then(|c| c.drop.as_ref()).is_some_and(|d| d.iter().any(|c| c == "ALL"));
        if !drops_all {
            return Some("capabilities must drop ALL".into());
        }
        if added.iter().any(|c| *c != "NET_BIND_SERVICE") {
            return Some("only NET_BIND_SERVICE may be added".into());
        }
        if sc.run_as_non_root != Some(true) {
            return Some("runAsNonRoot must be true".into());
        }
        if sc.run_as_user == Some(0) {
            return Some("runAsUser must not be 0".into());
        }
        if !sc.seccomp_profile.as_ref().is_some_and(|s| s.type_ == "RuntimeDefault" || s.type_ == "Localhost") {
            return Some("seccompProfile must be RuntimeDefault or Localhost".into());
        }
    }
    None
}

/// Whether a namespace at `level` accepts `profile`; the refusal says why
/// and which profile would do.
pub fn check_profile(level: Level, profile: Profile) -> Result<(), String> {
    match violation(level, security_context(profile).as_ref()) {
        None => Ok(()),
        Some(why) => {
            let fits: Vec<&str> = Profile::ALL
                .iter()
                .filter(|p| violation(level, security_context(**p).as_ref()).is_none())
                .map(|p| p.as_str())
                .collect();
            Err(format!(
                "profile {} is refused: the namespace enforces Pod Security level {} ({why}); a debug container it rejects would block every later one on the pod. Profiles it accepts: {}",
                profile.as_str(),
                level.as_str(),
                fits.join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_table_matches_kubectl_debug() {
        assert_eq!(security_context(Profile::Legacy), None);
        assert_eq!(security_context(Profile::Baseline), None);
        let general = security_context(Profile::General).unwrap_or_default();
        assert_eq!(general.capabilities.and_then(|c| c.add), Some(vec!["SYS_PTRACE".to_string()]));
        let net = security_context(Profile::Netadmin).unwrap_or_default();
        assert_eq!(net.capabilities.and_then(|c| c.add), Some(vec!["NET_ADMIN".to_string(), "NET_RAW".to_string()]));
        assert_eq!(security_context(Profile::Sysadmin).and_then(|s| s.privileged), Some(true));
        let r = security_context(Profile::Restricted).unwrap_or_default();
        assert_eq!(r.run_as_non_root, Some(true));
        assert_eq!(r.allow_privilege_escalation, Some(false));
        assert_eq!(r.capabilities.and_then(|c| c.drop), Some(vec!["ALL".to_string()]));
        assert_eq!(r.seccomp_profile.map(|s| s.type_), Some("RuntimeDefault".to_string()));
    }

    #[test]
    fn each_level_accepts_exactly_the_profiles_the_pod_security_standards_allow() {
        use Profile::*;
        let accepted =
            |level| Profile::ALL.into_iter().filter(|p| check_profile(level, *p).is_ok()).collect::<Vec<_>>();
        assert_eq!(accepted(Level::Privileged), Profile::ALL.to_vec());
        assert_eq!(accepted(Level::Baseline), vec![Legacy, Baseline, Restricted]);
        assert_eq!(accepted(Level::Restricted), vec![Restricted]);
    }

    #[test]
    fn a_refusal_says_why_and_what_would_do() {
        let e = check_profile(Level::Restricted, Profile::Sysadmin).err().unwrap_or_default();
        assert!(e.contains("restricted") && e.contains("privileged") && e.contains("accepts: restricted"), "{e}");
        let e = check_profile(Level::Baseline, Profile::General).err().unwrap_or_default();
        assert!(e.contains("SYS_PTRACE"), "{e}");
    }

    #[test]
    fn the_level_comes_from_the_enforce_label() {
        let labels = |v: &str| BTreeMap::from([(ENFORCE_LABEL.to_string(), v.to_string())]);
        assert_eq!(Level::of(&BTreeMap::new()), Level::Privileged);
        assert_eq!(Level::of(&labels("baseline")), Level::Baseline);
        assert_eq!(Level::of(&labels("restricted")), Level::Restricted);
        assert_eq!(Level::of(&labels("privileged")), Level::Privileged);
        assert_eq!(Level::of(&labels("Restrikted")), Level::Restricted);
        // A warn or audit label is not enforcement.
        let warn = BTreeMap::from([("pod-security.kubernetes.io/warn".to_string(), "restricted".to_string())]);
        assert_eq!(Level::of(&warn), Level::Privileged);
    }
}
