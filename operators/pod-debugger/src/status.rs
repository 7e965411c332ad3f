//! The PodDebugger's status from the plan (or from a refusal of the whole
//! rule). Pure.

use flotilla_shared::Conditions;
use flotilla_shared::conditions::{INVALID_SPEC, READY, Status};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::crd::{MAX_PODS_LISTED, PodDebuggerStatus, PodEntry};
use crate::mounts::describe;
use crate::plan::{Decision, Expiry, PodPlan};

/// The Ready message of an expired PodDebugger (and its Event's): stable,
/// so the Event is sent once.
pub fn expired_message(at: Timestamp) -> String {
    format!(
        "debug access ended at {at}: no debug container is added any more, and those added ran their command under that deadline"
    )
}

/// The refusals that make a PodDebugger Stalled: a spec the operator
/// cannot use, or one its flags say it never honours (a protected
/// namespace, an image off --allowed-images); only an edit changes them.
/// A missing admission policy or a namespace's Pod Security level can
/// change without one: those are not Stalled.
pub const STALLED_ON: [&str; 3] = [INVALID_SPEC, "ProtectedNamespace", "ImageNotAllowed"];

/// The rule-level outcome of a reconcile.
pub enum Outcome<'a> {
    /// The whole PodDebugger is refused: no pod is touched.
    Refused { reason: &'static str, message: String },
    /// The plan for the matched pods, after the additions were made
    /// (failed ones turned into `Refused` decisions).
    Planned(&'a [PodPlan]),
    /// Mode copy: the plan, after the copies were made, and how many
    /// copies of the PodDebugger exist.
    Copies { plans: &'a [PodPlan], copies: usize },
}

fn entry(p: &PodPlan, container: &str) -> PodEntry {
    let mut e = PodEntry { name: p.pod.clone(), ..PodEntry::default() };
    match &p.decision {
        Decision::Has(s) => {
            e.container = container.to_string();
            e.state = if s.state.is_empty() { "Waiting".into() } else { s.state.to_string() };
            e.reason = s.reason.clone();
            e.message = s.message.clone();
        }
        Decision::Added => {
            e.container = container.to_string();
            e.state = "Waiting".into();
            e.reason = "Added".into();
        }
        Decision::Add { .. } => {
            e.state = "Pending".into();
            e.reason = "Adding".into();
        }
        Decision::Wait { reason } => {
            e.state = "Pending".into();
            e.reason = (*reason).into();
        }
        Decision::Skip { reason, message } => {
            e.state = "Skipped".into();
            e.reason = (*reason).into();
            e.message = message.clone();
        }
        Decision::Refused { message, .. } => {
            e.state = "Failed".into();
            e.reason = "Rejected".into();
            e.message = message.clone();
        }
        Decision::Copy { .. } => {
            e.state = "Pending".into();
            e.reason = "Copying".into();
        }
        Decision::Copied { copy, container, running } => {
            e.container = container.clone();
            e.copy = copy.clone();
            e.state = if *running { "Running" } else { "Waiting" }.into();
            if !running {
                e.reason = "CopyStarting".into();
            }
        }
    }
    let has_or_gets = matches!(
        p.decision,
        Decision::Has(_) | Decision::Added | Decision::Add { .. } | Decision::Copy { .. } | Decision::Copied { .. }
    );
    if has_or_gets && !p.skipped_volumes.is_empty() {
        if e.reason.is_empty() {
            e.reason = "VolumesSkipped".into();
        }
        let note = format!("volumes not mounted: {}", describe(&p.skipped_volumes));
        e.message = if e.message.is_empty() { note } else { format!("{}; {note}", e.message) };
    }
    e
}

/// Problems first (Failed, Skipped, containers not running), then pending
/// pods, then running containers; by name within each.
fn rank(e: &PodEntry) -> u8 {
    match e.state.as_str() {
        "Failed" => 0,
        "Skipped" => 1,
        "Terminated" => 2,
        "Waiting" if e.reason != "Added" && !e.reason.is_empty() => 2,
        "Pending" => 3,
        "Waiting" => 4,
        _ => 5,
    }
}

/// Builds the status.
pub fn build(
    old: Option<&PodDebuggerStatus>,
    generation: Option<i64>,
    container: &str,
    expiry: Expiry,
    outcome: Outcome<'_>,
) -> PodDebuggerStatus {
    let mut conditions = Conditions::new(old.map(|s| s.conditions.as_slice()), generation);
    let expires_at = match expiry {
        Expiry::Never => None,
        Expiry::Until { at, .. } | Expiry::Expired { at } => Some(Time(at)),
    };
    let mut status = PodDebuggerStatus {
        observed_generation: generation,
        container: container.into(),
        expires_at,
        ..Default::default()
    };
    match outcome {
        Outcome::Refused { reason, message } => {
            conditions.set(READY, Status::False, reason, message);
        }
        Outcome::Planned(plans) => planned(&mut status, &mut conditions, container, expiry, plans, None),
        Outcome::Copies { plans, copies } => {
            planned(&mut status, &mut conditions, container, expiry, plans, Some(copies));
        }
    }
    conditions.stall_on(&STALLED_ON);
    status.conditions = conditions.into_vec();
    status
}

/// The status of a planned reconcile; `copies`: mode copy, with this many.
fn planned(
    status: &mut PodDebuggerStatus,
    conditions: &mut Conditions,
    container: &str,
    expiry: Expiry,
    plans: &[PodPlan],
    copies: Option<usize>,
) {
    let mut entries: Vec<PodEntry> = plans.iter().map(|p| entry(p, container)).collect();
    status.matched = i32::try_from(plans.len()).unwrap_or(i32::MAX);
    status.copies = copies.map_or(0, |c| i32::try_from(c).unwrap_or(i32::MAX));
    let injected = plans
        .iter()
        .filter(|p| matches!(p.decision, Decision::Has(_) | Decision::Added | Decision::Copied { .. }))
        .count();
    status.injected = i32::try_from(injected).unwrap_or(i32::MAX);
    let failed: Vec<&PodEntry> = entries.iter().filter(|e| e.state == "Failed").collect();
    let skipped = entries.iter().filter(|e| e.state == "Skipped").count();
    // Pods to be added to or copied in this reconcile are not waiting.
    let waiting =
        entries.iter().filter(|e| e.state == "Pending" && e.reason != "Adding" && e.reason != "Copying").count();
    if let Expiry::Expired { at } = expiry {
        conditions.set(READY, Status::False, "Expired", expired_message(at));
    } else if let Some(first) = failed.first() {
        let (reason, what) = match copies {
            None => ("InjectionFailed", container.to_string()),
            Some(_) => ("CopyFailed", "the debug copy".to_string()),
        };
        conditions.set(
            READY,
            Status::False,
            reason,
            format!(
                "the API refused {what} of {} pod(s), retried with back-off; {}: {}",
                failed.len(),
                first.name,
                first.message
            ),
        );
    } else {
        let mut msg = match copies {
            None => format!("{injected} of {} matched pod(s) have {container}", plans.len()),
            Some(c) => {
                format!("{injected} of {} matched pod(s) have a debug copy with {container} ({c} copies)", plans.len())
            }
        };
        if waiting > 0 && copies.is_some() {
            msg.push_str(&format!("; {waiting} not crash-looping (or not listed yet)"));
        } else if waiting > 0 {
            msg.push_str(&format!("; {waiting} waiting for the pod or its target to run"));
        }
        if skipped > 0 {
            msg.push_str(&format!("; {skipped} skipped (see status.pods)"));
        }
        conditions.set(READY, Status::True, "Reconciled", msg);
    }
    entries.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.name.cmp(&b.name)));
    entries.truncate(MAX_PODS_LISTED);
    status.pods = entries;
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::pod::ContainerState;

    fn p(name: &str, decision: Decision) -> PodPlan {
        PodPlan { pod: name.into(), uid: name.into(), decision, skipped_volumes: vec![] }
    }

    #[test]
    fn counts_states_and_problems_first() {
        let running = ContainerState { state: "Running", ..Default::default() };
        let pulling = ContainerState { state: "Waiting", reason: "ImagePullBackOff".into(), message: "no".into() };
        let plans = vec![
            p("a", Decision::Has(running)),
            p("b", Decision::Has(pulling)),
            p("c", Decision::Wait { reason: "PodNotRunning" }),
            p("d", Decision::Skip { reason: "MaxPerPodReached", message: "3".into() }),
            p("e", Decision::Added),
        ];
        let s = build(None, Some(2), "dbg-x", Expiry::Never, Outcome::Planned(&plans));
        assert_eq!((s.matched, s.injected, s.observed_generation), (5, 3, Some(2)));
        let order: Vec<(&str, &str, &str)> =
            s.pods.iter().map(|e| (e.name.as_str(), e.state.as_str(), e.reason.as_str())).collect();
        assert_eq!(
            order,
            [
                ("d", "Skipped", "MaxPerPodReached"),
                ("b", "Waiting", "ImagePullBackOff"),
                ("c", "Pending", "PodNotRunning"),
                ("e", "Waiting", "Added"),
                ("a", "Running", ""),
            ]
        );
        let ready = &s.conditions[0];
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", "Reconciled"));
        assert!(
            ready.message.contains("3 of 5")
                && ready.message.contains("1 waiting")
                && ready.message.contains("1 skipped")
        );
    }

    #[test]
    fn a_refused_addition_makes_ready_false_and_a_refused_rule_lists_no_pods() {
        let plans =
            vec![p("a", Decision::Refused { message: "violates PodSecurity".into(), retry_at: Instant::now() })];
        let s = build(None, Some(1), "dbg-x", Expiry::Never, Outcome::Planned(&plans));
        let ready = &s.conditions[0];
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "InjectionFailed"));
        assert!(ready.message.contains("violates PodSecurity"));
        let s = build(
            Some(&s),
            Some(2),
            "dbg-x",
            Expiry::Never,
            Outcome::Refused { reason: "ImageNotAllowed", message: "no".into() },
        );
        assert!(s.pods.is_empty() && s.matched == 0);
        assert_eq!(s.conditions[0].reason, "ImageNotAllowed");
    }

    #[test]
    fn an_expired_debugger_is_not_ready_and_lists_its_pods_and_skipped_volumes() {
        use crate::mounts::Skipped;
        let at: Timestamp = "2026-11-27T06:00:00Z".parse().unwrap_or_else(|e| panic!("{e}"));
        let ended = ContainerState { state: "Terminated", reason: "Error".into(), message: "exit code 137".into() };
        let mut has = p("a", Decision::Has(ended));
        has.skipped_volumes = vec![Skipped { volume: "creds".into(), reason: "SecretVolumeNotAllowed" }];
        let plans = vec![has, p("b", Decision::Skip { reason: "Expired", message: "ended".into() })];
        let s = build(None, Some(1), "dbg-x", Expiry::Expired { at }, Outcome::Planned(&plans));
        let ready = &s.conditions[0];
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "Expired"));
        assert_eq!(ready.message, expired_message(at));
        assert_eq!(s.expires_at, Some(Time(at)));
        assert_eq!((s.matched, s.injected), (2, 1));
        let a = s.pods.iter().find(|e| e.name == "a").unwrap_or_else(|| panic!("{s:?}"));
        assert_eq!((a.state.as_str(), a.reason.as_str()), ("Terminated", "Error"));
        assert!(a.message.contains("creds (SecretVolumeNotAllowed)"), "{a:?}");
        // Before it, Ready as usual, the expiry shown.
        let left = std::time::Duration::from_secs(5);
        let s = build(None, Some(1), "dbg-x", Expiry::Until { at, left }, Outcome::Planned(&plans[..1]));
        assert_eq!((s.conditions[0].reason.as_str(), s.expires_at), ("Reconciled", Some(Time(at))));
    }

    #[test]
    fn a_refusal_only_an_edit_lifts_is_stalled_the_others_are_not() {
        let stalled = |reason: &'static str| {
            let s = build(None, Some(1), "c", Expiry::Never, Outcome::Refused { reason, message: "m".into() });
            s.conditions.iter().find(|c| c.type_ == "Stalled").map(|c| (c.status.clone(), c.reason.clone()))
        };
        for reason in STALLED_ON {
            assert_eq!(stalled(reason), Some(("True".into(), reason.into())), "{reason}");
        }
        for reason in ["AdmissionPolicyMissing", "ProfileForbidden", "DryRunRejected"] {
            assert_eq!(stalled(reason), None, "{reason}");
        }
        // Fixed: planned again, and no longer stalled.
        let s =
            build(None, Some(1), "c", Expiry::Never, Outcome::Refused { reason: "InvalidSpec", message: "m".into() });
        let s = build(Some(&s), Some(2), "c", Expiry::Never, Outcome::Planned(&[]));
        assert!(!s.conditions.iter().any(|c| c.type_ == "Stalled"), "{:?}", s.conditions);
    }

    #[test]
    fn copies_show_in_status_with_their_copy_and_the_ready_message_counts_them() {
        let plans = vec![
            p("a", Decision::Copied { copy: "a-dbg-1".into(), container: "dbg-x".into(), running: true }),
            p("b", Decision::Copied { copy: "b-dbg-2".into(), container: "dbg-old".into(), running: false }),
            p("c", Decision::Wait { reason: "NotCrashLooping" }),
            p("d", Decision::Skip { reason: "MaxCopiesReached", message: "2".into() }),
        ];
        let s = build(None, Some(1), "dbg-x", Expiry::Never, Outcome::Copies { plans: &plans, copies: 2 });
        assert_eq!((s.matched, s.injected, s.copies), (4, 2, 2));
        let a = s.pods.iter().find(|e| e.name == "a").unwrap_or_else(|| panic!("{s:?}"));
        assert_eq!((a.copy.as_str(), a.container.as_str(), a.state.as_str()), ("a-dbg-1", "dbg-x", "Running"));
        let b = s.pods.iter().find(|e| e.name == "b").unwrap_or_else(|| panic!("{s:?}"));
        assert_eq!((b.state.as_str(), b.reason.as_str()), ("Waiting", "CopyStarting"));
        assert_eq!(b.container, "dbg-old", "the copy's own debug container, from the spec it was made from");
        let ready = &s.conditions[0];
        assert_eq!(ready.reason, "Reconciled");
        assert!(
            ready.message.contains("2 of 4 matched pod(s) have a debug copy")
                && ready.message.contains("1 not crash-looping")
                && ready.message.contains("1 skipped"),
            "{}",
            ready.message
        );
        let failed = vec![p("a", Decision::Refused { message: "forbidden".into(), retry_at: Instant::now() })];
        let s = build(None, Some(1), "dbg-x", Expiry::Never, Outcome::Copies { plans: &failed, copies: 0 });
        assert_eq!(s.conditions[0].reason, "CopyFailed");
    }

    #[test]
    fn the_list_is_capped() {
        let plans: Vec<PodPlan> = (0..80).map(|i| p(&format!("p{i:03}"), Decision::Added)).collect();
        let s = build(None, None, "c", Expiry::Never, Outcome::Planned(&plans));
        assert_eq!((s.pods.len(), s.matched), (MAX_PODS_LISTED, 80));
    }
}
