//! Deterministic debug container names: `dbg-<rule>-<hash of the container
//! spec>`, at most 63 characters. Re-applying the same spec names the same
//! container (a no-op on pods that have it); any change to what the
//! container would be (image, command, profile, ...) names a new one.
//! Which containers a PodDebugger added is read back from the prefix. Pure.

use serde::Serialize;

use flotilla_shared::duration::GoDuration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::{EnvVar, PodDebuggerSpec, Profile, PullPolicy, VolumeMounts};

/// Kubernetes' limit on a container name (a DNS label).
pub const MAX_NAME: usize = 63;
/// Hex digits of the spec hash.
const HASH_DIGITS: usize = 10;
/// Longest rule name used as is; longer (or non-label) names are cut and
/// given a hash of the full name, so two long names never share a prefix.
const MAX_RULE_PART: usize = 40;

/// What the container name depends on: every field that shapes the
/// container. Field order is fixed here, so the hash never changes for a
/// given spec across releases (a test pins known values).
#[derive(Serialize)]
struct Shape<'a> {
    image: &'a str,
    pull: Option<PullPolicy>,
    target: Option<&'a str>,
    command: &'a [String],
    args: &'a [String],
    env: &'a [EnvVar],
    profile: Profile,
    stdin: bool,
    tty: bool,
    // Added later: omitted when unset, so earlier specs keep their names.
    // The expiry is the command's deadline; a new one is a new container.
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: Option<&'a Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<&'a GoDuration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    volume_mounts: Option<&'a VolumeMounts>,
}

/// FNV-1a, 64 bits: stable across platforms and Rust versions (unlike
/// `DefaultHasher`), and enough to tell specs of one rule apart.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn hex(h: u64, digits: usize) -> String {
    let s = format!("{h:016x}");
    s[..digits.min(16)].to_string()
}

/// The name prefix of every container `rule` adds: `dbg-<rule>-`.
pub fn prefix(rule: &str) -> String {
    let is_label = rule.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if is_label && rule.len() <= MAX_RULE_PART {
        return format!("dbg-{rule}-");
    }
    // A subdomain name ("a.b") or a long one: keep a readable start and add
    // a hash of the whole name.
    let readable: String = rule
        .chars()
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() { c } else { '-' })
        .take(MAX_RULE_PART - 9)
        .collect();
    let readable = readable.trim_end_matches('-');
    format!("dbg-{readable}-{}-", hex(fnv1a(rule.as_bytes()), 8))
}

/// The current spec's container name for `rule`.
pub fn container_name(rule: &str, spec: &PodDebuggerSpec) -> String {
    let shape = Shape {
        image: &spec.image,
        pull: spec.image_pull_policy,
        target: spec.target_container.as_deref(),
        command: &spec.command,
        args: &spec.args,
        env: &spec.env,
        profile: spec.profile,
        stdin: spec.stdin,
        tty: spec.tty,
        expires_at: spec.expires_at.as_ref(),
        ttl: spec.ttl.as_ref(),
        volume_mounts: spec.volume_mounts.as_ref(),
    };
    // Serializing plain strings, bools and enums cannot fail.
    let bytes = serde_json::to_vec(&shape).unwrap_or_default();
    format!("{}{}", prefix(rule), hex(fnv1a(&bytes), HASH_DIGITS))
}

/// Whether `container` was added by `rule` (any spec of it).
pub fn added_by(rule: &str, container: &str) -> bool {
    let p = prefix(rule);
    container
        .strip_prefix(p.as_str())
        .is_some_and(|h| h.len() == HASH_DIGITS && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spec(image: &str) -> PodDebuggerSpec {
        serde_json::from_value(serde_json::json!({"selector": {"matchLabels": {"app": "payment"}}, "image": image}))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn names_are_stable_across_releases() {
        // Pinned: a change here renames every container of every rule, and
        // rules would add a second container to pods after an upgrade.
        assert_eq!(container_name("payment", &spec("busybox:1.37")), "dbg-payment-85612196fe");
    }

    #[test]
    fn the_same_spec_names_the_same_container_and_any_change_a_new_one() {
        let a = spec("busybox:1.37");
        assert_eq!(container_name("r", &a), container_name("r", &a.clone()));
        let mut b = a.clone();
        b.image = "busybox:1.36".into();
        let mut c = a.clone();
        c.profile = Profile::Restricted;
        let mut d = a.clone();
        d.command = vec!["sleep".into(), "1d".into()];
        let mut e = a.clone();
        e.max_per_pod = 5; // not part of the container
        let mut f = d.clone();
        f.ttl = Some(GoDuration::new("1h"));
        let mut g = a.clone();
        g.volume_mounts = Some(VolumeMounts { mirror: true, ..VolumeMounts::default() });
        let names = [&a, &b, &c, &d, &f, &g].map(|s| container_name("r", s));
        for (i, x) in names.iter().enumerate() {
            for y in &names[i + 1..] {
                assert_ne!(x, y);
            }
        }
        assert_eq!(container_name("r", &e), names[0]);
    }

    #[test]
    fn long_and_dotted_rule_names_are_cut_and_told_apart() {
        let long_a = "a".repeat(200) + "-one";
        let long_b = "a".repeat(200) + "-two";
        let s = spec("busybox");
        let (na, nb) = (container_name(&long_a, &s), container_name(&long_b, &s));
        assert!(na.len() <= MAX_NAME && nb.len() <= MAX_NAME);
        assert_ne!(prefix(&long_a), prefix(&long_b));
        assert!(added_by(&long_a, &na) && !added_by(&long_b, &na));
        assert_ne!(prefix("a.b"), prefix("a-b"));
    }

    proptest! {
        #[test]
        fn every_name_is_a_dns_label_recognised_as_its_rules(
            rule in "[a-z0-9]([-a-z0-9.]{0,252}[a-z0-9])?",
            other in "[a-z0-9]([-a-z0-9.]{0,60}[a-z0-9])?",
            image in "[a-z0-9./:@-]{1,100}",
        ) {
            let name = container_name(&rule, &spec(&image));
            prop_assert!(name.len() <= MAX_NAME, "{name} is too long");
            prop_assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
            prop_assert!(!name.ends_with('-') && name.starts_with("dbg-"));
            prop_assert!(added_by(&rule, &name));
            if other != rule {
                prop_assert!(!added_by(&other, &name) || prefix(&other) == prefix(&rule));
                prop_assert_ne!(prefix(&other), prefix(&rule));
            }
        }
    }
}
