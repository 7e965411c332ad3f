//! The `kubectl` line that creates a PodDebugger for an incident
//! (`--debug-hint`), so the on-call goes from the alert to a shell in one
//! paste. Pure.
//!
//! A PodDebugger selects pods by label, and pod-alert keeps only the labels
//! some PodAlert's selector references; so the line selects by a label
//! Kubernetes' own controllers put on the pod, derived from the workload
//! and the pod's name:
//!
//! | workload | label | selects |
//! | --- | --- | --- |
//! | StatefulSet | `statefulset.kubernetes.io/pod-name` | exactly the incident's pod |
//! | Deployment | `pod-template-hash` (from the pod's name) | the pods of that revision (its ReplicaSet) |
//! | Job | `batch.kubernetes.io/job-name` | the Job's pods |
//!
//! Other workloads (bare pods, DaemonSets, other owners) carry no label
//! that can be known without reading the pod: no line for them.
//!
//! Every value comes from the cluster, whose names the pods' authors pick:
//! each is checked against Kubernetes' own syntax (a value outside it gives
//! no line rather than a strange one), the document is JSON-encoded, and
//! the JSON and the namespace are single-quoted for a POSIX shell, so no
//! value can end the quoting, substitute a command or start a new line.

use serde_json::json;

use crate::pod::Workload;

/// The debug container's image: in pod-debugger's default `--allowed-images`.
pub const IMAGE: &str = "busybox:1.37";
/// How long the debug access lasts (`spec.ttl`).
pub const TTL: &str = "1h";
/// The longest line produced (the values are bounded: this is a guard).
pub const MAX_LINE_BYTES: usize = 1024;

/// What the line's selector picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The incident's pod and no other.
    Pod,
    /// The pods of the Deployment's revision the pod belongs to.
    Revision,
    /// The Job's pods.
    Job,
}

impl Scope {
    /// Shown beside the line: what it will touch.
    pub fn describe(self) -> &'static str {
        match self {
            Scope::Pod => "this pod only",
            Scope::Revision => "every pod of this revision of the Deployment",
            Scope::Job => "every pod of the Job",
        }
    }
}

/// The line and what it selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugHint {
    pub command: String,
    pub scope: Scope,
    /// The PodDebugger makes a debug copy of each crash-looping pod
    /// (`mode: copy`) instead of adding an ephemeral container.
    pub copy: bool,
}

/// The line for an incident of `workload`'s `container` in `namespace`, one
/// of whose pods is `pod`; None when the pod cannot be selected by a known
/// label or a value is not what Kubernetes allows. With `crash_loop` (the
/// container restarts in a loop: an ephemeral container could not join
/// it, it is gone before a shell reaches it) the PodDebugger is in mode
/// copy: one copy, the container held by `sleep infinity`, a shell beside.
pub fn debug_hint(
    namespace: &str,
    workload: &Workload,
    container: &str,
    pod: &str,
    crash_loop: bool,
) -> Option<DebugHint> {
    if !is_dns_label(namespace) || !is_dns_label(container) || !is_subdomain(&workload.name) {
        return None;
    }
    let (label, value, scope) = match &*workload.kind {
        "StatefulSet" => ("statefulset.kubernetes.io/pod-name", pod, Scope::Pod),
        "Deployment" => ("pod-template-hash", template_hash(&workload.name, pod)?, Scope::Revision),
        "Job" => ("batch.kubernetes.io/job-name", &*workload.name, Scope::Job),
        _ => return None,
    };
    if !is_label_value(value) {
        return None;
    }
    let mut spec = json!({
        "selector": {"matchLabels": {label: value}},
        "targetContainer": container,
        "image": IMAGE,
        "command": ["sh"],
        "ttl": TTL,
        "maxPerPod": 1,
    });
    if crash_loop {
        spec["mode"] = json!("copy");
        spec["copy"] = json!({"maxCopies": 1});
    }
    let doc = json!({
        "apiVersion": "flotilla.dev/v1alpha1",
        "kind": "PodDebugger",
        "metadata": {"generateName": format!("debug-{}-", name_part(&workload.name))},
        "spec": spec,
    });
    let command = format!("kubectl -n {} create -f - <<< {}", shell_quote(namespace), shell_quote(&doc.to_string()));
    (command.len() <= MAX_LINE_BYTES).then_some(DebugHint { command, scope, copy: crash_loop })
}

/// `s` as one word of a POSIX shell (bash, zsh, sh), taken literally:
/// inside single quotes nothing is special but the closing quote, which is
/// written as `'\''` (end, an escaped quote, start again).
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A Deployment's pod is `<deployment>-<pod-template-hash>-<suffix>`; None
/// when the name was cut (long names) or is not of that form.
fn template_hash<'a>(deployment: &str, pod: &'a str) -> Option<&'a str> {
    let rest = pod.strip_prefix(deployment)?.strip_prefix('-')?;
    let (hash, suffix) = rest.split_once('-')?;
    let alnum = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric());
    (alnum(hash) && alnum(suffix)).then_some(hash)
}

/// The PodDebugger's name prefix from the workload's name: at most 40
/// characters (the API adds 5 and caps generateName), lowercase, no dots.
fn name_part(name: &str) -> String {
    let s: String =
        name.chars().map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() { c } else { '-' }).take(40).collect();
    let s = s.trim_matches('-');
    if s.is_empty() { "pod".to_string() } else { s.to_string() }
}

/// RFC 1123 label: 1-63 of `[a-z0-9-]`, alphanumeric at both ends.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
fn is_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A label value: at most 63 of `[A-Za-z0-9._-]`, alphanumeric at both ends
/// (empty is valid for the API, but selects nothing useful here).
fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::process::Command;

    fn workload(kind: &str, name: &str) -> Workload {
        Workload { kind: kind.into(), name: name.into() }
    }

    /// What a shell makes of `line` when `kubectl` is a function printing
    /// its arguments (NUL-separated) and its stdin: the words the real
    /// kubectl would get, with nothing else run.
    fn run_in_bash(line: &str) -> (Vec<String>, String) {
        let script = format!("kubectl() {{ printf '%s\\0' \"$@\"; printf '\\1'; cat; }}\n{line}\nprintf '\\2'");
        let out = Command::new("bash").arg("--noprofile").arg("--norc").arg("-c").arg(&script).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let out = String::from_utf8(out.stdout).unwrap();
        let (args, rest) = out.split_once('\u{1}').unwrap();
        let stdin = rest.strip_suffix('\u{2}').expect("the script went on to its end after the line");
        (args.split_terminator('\0').map(String::from).collect(), stdin.to_string())
    }

    fn spec_of(stdin: &str) -> pod_debugger::crd::PodDebugger {
        serde_json::from_str(stdin).unwrap()
    }

    fn labels(pd: &pod_debugger::crd::PodDebugger) -> Vec<(String, String)> {
        assert!(pd.spec.selector.match_expressions.is_empty());
        pd.spec.selector.match_labels.iter().map(|(k, v)| (k.0.clone(), v.0.clone())).collect()
    }

    #[test]
    fn a_deployment_pod_is_selected_by_its_revision_and_the_line_creates_a_valid_poddebugger() {
        let h = debug_hint("team-a", &workload("Deployment", "web"), "app", "web-5d8f9c7b6d-x2x7q", false).unwrap();
        assert_eq!(h.scope, Scope::Revision);
        assert!(h.command.starts_with("kubectl -n 'team-a' create -f - <<< '{"), "{}", h.command);
        assert!(!h.command.contains('\n'));
        let (args, stdin) = run_in_bash(&h.command);
        assert_eq!(args, ["-n", "team-a", "create", "-f", "-"]);
        let pd = spec_of(&stdin);
        assert_eq!(pd.metadata.generate_name.as_deref(), Some("debug-web-"));
        assert_eq!(labels(&pd), [("pod-template-hash".to_string(), "5d8f9c7b6d".to_string())]);
        assert_eq!(pd.spec.target_container.as_deref(), Some("app"));
        assert_eq!(pd.spec.ttl.as_ref().map(|t| t.0.as_str()), Some(TTL));
        assert!(pd.spec.expires_at.is_none());
        assert_eq!(pd.spec.command, ["sh"], "an expiring PodDebugger needs a command");
        assert_eq!(pd.spec.image, IMAGE);
        assert_eq!(pd.spec.max_per_pod, 1);
        assert!(pd.spec.stdin && pd.spec.tty, "a shell stays up");
    }

    #[test]
    fn a_crash_loop_gets_a_debug_copy_of_the_pod() {
        let h = debug_hint("team-a", &workload("StatefulSet", "db"), "pg", "db-2", true).unwrap();
        assert!(h.copy);
        let pd = spec_of(&run_in_bash(&h.command).1);
        assert_eq!(pd.spec.mode, pod_debugger::crd::Mode::Copy);
        assert_eq!(pd.spec.copy.as_ref().map(|c| c.max_copies), Some(1));
        assert_eq!(pd.spec.copy.as_ref().map(|c| c.command.join(" ")).as_deref(), Some("sleep infinity"));
        assert_eq!(pd.spec.target_container.as_deref(), Some("pg"));
        assert_eq!(pd.spec.ttl.as_ref().map(|t| t.0.as_str()), Some(TTL));
        assert!(!debug_hint("team-a", &workload("StatefulSet", "db"), "pg", "db-2", false).unwrap().copy);
    }

    #[test]
    fn statefulset_pods_exactly_and_jobs_by_name_and_nothing_else() {
        let h = debug_hint("ns", &workload("StatefulSet", "db"), "pg", "db-2", false).unwrap();
        assert_eq!(h.scope, Scope::Pod);
        let pd = spec_of(&run_in_bash(&h.command).1);
        assert_eq!(labels(&pd), [("statefulset.kubernetes.io/pod-name".to_string(), "db-2".to_string())]);
        let h = debug_hint("ns", &workload("Job", "migrate.v2"), "run", "migrate.v2-abcde", false).unwrap();
        assert_eq!(h.scope, Scope::Job);
        let pd = spec_of(&run_in_bash(&h.command).1);
        assert_eq!(pd.metadata.generate_name.as_deref(), Some("debug-migrate-v2-"));
        for kind in ["Pod", "DaemonSet", "ReplicaSet", "CronJob"] {
            assert_eq!(debug_hint("ns", &workload(kind, "w"), "c", "w-abcde", false), None, "{kind}");
        }
        // A Deployment pod whose name was cut (long names) or is not of the form.
        assert_eq!(debug_hint("ns", &workload("Deployment", "web"), "c", "web-5d8f9c7b6d", false), None);
        assert_eq!(debug_hint("ns", &workload("Deployment", "web"), "c", "other-5d8f9c7b6d-abcde", false), None);
        assert_eq!(debug_hint("ns", &workload("Deployment", "web"), "", "web-5d8f9c7b6d-abcde", false), None);
    }

    const HOSTILE: [&str; 9] = [
        "a'b",
        "'; touch /tmp/pwned-debugline; '",
        "$(touch /tmp/pwned-debugline)",
        "`touch /tmp/pwned-debugline`",
        "a\nkubectl delete ns prod\n",
        "\\'\"${HOME}\"",
        "x' <<< 'y",
        "'\\''",
        "\u{0}\r\t!",
    ];

    /// Whatever the cluster names, the shell gets it as one literal word.
    #[test]
    fn shell_quoting_keeps_hostile_values_literal() {
        for v in HOSTILE.iter().filter(|v| !v.contains('\0')) {
            let (args, stdin) = run_in_bash(&format!("kubectl {} {}", shell_quote(v), shell_quote("2nd")));
            assert_eq!(args, [*v, "2nd"], "{v:?}");
            assert_eq!(stdin, "");
        }
        assert!(!std::path::Path::new("/tmp/pwned-debugline").exists());
    }

    /// Names the API would refuse, in every place a value goes: no line at
    /// all (not a line with a strange value).
    #[test]
    fn hostile_names_give_no_line() {
        for v in HOSTILE {
            let hints = [
                debug_hint(v, &workload("StatefulSet", "db"), "c", "db-0", false),
                debug_hint("ns", &workload("StatefulSet", v), "c", "db-0", false),
                debug_hint("ns", &workload("StatefulSet", "db"), v, "db-0", false),
                debug_hint("ns", &workload("StatefulSet", "db"), "c", v, false),
                debug_hint("ns", &workload("Deployment", "web"), "c", &format!("web-{v}-abcde"), false),
                debug_hint("ns", &workload("Job", v), "c", "j-abcde", false),
            ];
            assert!(hints.iter().all(Option::is_none), "{v:?}: {hints:?}");
        }
        let long = "a".repeat(64);
        assert_eq!(debug_hint(&long, &workload("Job", "j"), "c", "j-x", false), None);
        assert_eq!(debug_hint("ns", &workload("StatefulSet", "s"), "c", &long, false), None);
    }

    /// The longest values Kubernetes allows still make a bounded line.
    #[test]
    fn the_line_is_bounded() {
        let ns = "n".repeat(63);
        let name = ["a".repeat(63), "b".repeat(63), "c".repeat(63)].join(".");
        let h = debug_hint(&ns, &workload("Job", &name[..63]), &"c".repeat(63), "x", false).unwrap();
        assert!(h.command.len() <= MAX_LINE_BYTES);
        let pd = spec_of(&run_in_bash(&h.command).1);
        assert_eq!(pd.metadata.generate_name.unwrap().len(), "debug-".len() + 40 + 1);
        assert!(debug_hint("ns", &workload("StatefulSet", &name), "c", &"p".repeat(63), false).is_some());
        // A debug copy's line is longer, and still within the bound.
        let h = debug_hint(&ns, &workload("Job", &name[..63]), &"c".repeat(63), "x", true).unwrap();
        assert!(h.command.len() <= MAX_LINE_BYTES && h.copy);
    }
}
