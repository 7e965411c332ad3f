//! What an evaluation says of silences: spec.silences as applied (for the
//! status), and the Warning for silences refused for ending more than 7
//! days ahead.

use std::collections::BTreeSet;

use k8s_openapi::jiff::Timestamp;
use kube::Resource;

use super::Data;
use crate::crd::{PodAlert, SilenceStatus};
use crate::observe::Findings;
use crate::rules::Rules;
use crate::silence;

/// spec.silences as this evaluation applied them.
pub(super) fn silence_statuses(rules: &Rules, findings: &Findings, now: Timestamp) -> Vec<SilenceStatus> {
    rules
        .silences
        .iter()
        .map(|s| SilenceStatus {
            state: silence::state(s.until, now).as_str().to_string(),
            until: s.until.to_string(),
            comment: s.comment.clone(),
            problems: findings.silence_counts.get(s.index).map_or(0, |&n| i32::try_from(n).unwrap_or(i32::MAX)),
        })
        .collect()
}

/// The first five of `names`, and how many more.
fn first_five(names: &BTreeSet<String>) -> String {
    let shown: Vec<&str> = names.iter().map(String::as_str).take(5).collect();
    match names.len().saturating_sub(shown.len()) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// A Warning (once per change) for silences refused for ending more than
/// 7 days ahead: of spec.silences, and of pods', workloads' and namespaces'
/// annotations.
pub(super) fn warn_refused_silences(
    alert: &PodAlert,
    statuses: &[SilenceStatus],
    findings: &Findings,
    warned: &mut String,
    data: &Data,
) {
    let mut parts: Vec<String> = statuses
        .iter()
        .enumerate()
        .filter(|(_, s)| s.state == silence::State::Refused.as_str())
        .map(|(i, s)| format!("spec.silences[{i}] (until {})", s.until))
        .collect();
    for (kind, names) in [
        ("pod(s)", &findings.refused_annotations),
        ("workload(s)", &findings.refused_workloads),
        ("namespace(s)", &findings.refused_namespaces),
    ] {
        if !names.is_empty() {
            parts.push(format!("the {} annotation of {kind} {}", silence::ANNOTATION, first_five(names)));
        }
    }
    let message = if parts.is_empty() {
        String::new()
    } else {
        format!("silence not applied, it ends more than 7 days ahead: {}", parts.join("; "))
    };
    if message != *warned {
        if !message.is_empty() {
            data.ctx.events.warning(&alert.object_ref(&()), "SilenceRefused", "Evaluate", message.clone());
        }
        *warned = message;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_names_five_and_counts_the_rest() {
        let names = |n: usize| (0..n).map(|i| format!("ns{i}")).collect::<BTreeSet<String>>();
        assert_eq!(first_five(&names(2)), "ns0, ns1");
        assert_eq!(first_five(&names(5)), "ns0, ns1, ns2, ns3, ns4");
        assert_eq!(first_five(&names(7)), "ns0, ns1, ns2, ns3, ns4 and 2 more");
    }
}
