//! What a PodDebugger in mode copy does with each pod it matches, and
//! which of its copies go: a pure function of the rule, the namespace's
//! pods as the watch sees them (copies included: their labels are kept in
//! every namespace with a PodDebugger) and what the operator remembers.

use std::time::Instant;

use flotilla_shared::uid::Uid;

use crate::copy::{COPIED_BY, COPY_OF};
use crate::mounts::mounts;
use crate::naming;
use crate::plan::{ADDED_GRACE, Decision, Expiry, Memory, PodPlan, Rule};
use crate::pod::PodView;

/// The key of a copy in [`Memory`] (beside the injected containers'
/// names, which never start with a NUL).
pub const COPY_KEY: &str = "\0copy";

/// One of the PodDebugger's copies, to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    pub name: String,
    pub uid: Uid,
}

/// The plan of a PodDebugger in mode copy.
#[derive(Debug, Default, PartialEq)]
pub struct CopyPlan {
    /// A plan per matched pod (copies are never matched).
    pub pods: Vec<PodPlan>,
    /// Copies of the PodDebugger that exist (not being deleted).
    pub copies: usize,
    /// Copies to delete: all of them once it expired; before, those whose
    /// pod is gone or no longer matched (they would hold a place under
    /// maxCopies that status.pods does not show).
    pub delete: Vec<Stale>,
}

/// Whether `p` is a debug copy (of any PodDebugger).
pub fn is_copy(p: &PodView) -> bool {
    p.labels().get(COPY_OF).is_some()
}

/// The copies of the PodDebugger with UID `uid` among `pods` (by label,
/// less those the API showed are not its own).
fn copies_of<'p>(uid: &str, pods: &[&'p PodView], memory: &Memory) -> Vec<&'p PodView> {
    pods.iter()
        .copied()
        .filter(|p| !p.terminating && p.labels().get(COPIED_BY) == Some(uid) && !memory.not_ours.contains(&p.uid))
        .collect()
}

fn stale(c: &PodView) -> Stale {
    Stale { name: c.name().to_string(), uid: c.uid.clone() }
}

/// The pods labelled as the PodDebugger's copies that the API has not yet
/// shown to be its own or not: each is fetched once ([`crate::copy_apply::verify_copies`]),
/// so a pod someone labelled (or named) as a copy is never shown as one.
pub fn unverified<'p>(uid: &str, pods: impl IntoIterator<Item = &'p PodView>, memory: &Memory) -> Vec<Stale> {
    let pods: Vec<&PodView> = pods.into_iter().collect();
    copies_of(uid, &pods, memory).into_iter().filter(|c| !memory.ours.contains(&c.uid)).map(stale).collect()
}

/// Every copy of the PodDebugger: what goes when it expired or is in mode
/// inject (switched from copy), whatever else is wrong with its spec.
pub fn all_copies<'p>(uid: &str, pods: impl IntoIterator<Item = &'p PodView>, memory: &Memory) -> Vec<Stale> {
    let pods: Vec<&PodView> = pods.into_iter().collect();
    copies_of(uid, &pods, memory).into_iter().map(stale).collect()
}

/// Decides for every pod of the rule's namespace that the selector
/// matches: its copy, or why none (yet).
///
/// A pod is crash-looping when a container waits in CrashLoopBackOff, and
/// stays so for the plan once seen (remembered in `memory`): between its
/// back-offs the container runs for a moment.
pub fn plan_copies<'p>(
    rule: &Rule<'_>,
    uid: &str,
    max_copies: usize,
    pods: impl IntoIterator<Item = &'p PodView>,
    memory: &mut Memory,
    now: Instant,
) -> CopyPlan {
    let pods: Vec<&PodView> = pods.into_iter().filter(|p| p.namespace() == rule.namespace).collect();
    // Only running pods: a failed or evicted pod's containers ended too.
    for p in matched(rule, &pods).filter(|p| p.running && p.crash_looping != 0) {
        memory.crash_looped.insert(p.uid.clone());
    }
    let memory = &*memory;
    let copies = copies_of(uid, &pods, memory);
    if let Expiry::Expired { .. } = rule.expiry {
        let delete = copies.iter().map(|c| stale(c)).collect();
        let mut pods: Vec<PodPlan> = matched(rule, &pods).map(|p| plan_of(p, expired(rule))).collect();
        pods.sort_by(|a, b| a.pod.cmp(&b.pod));
        return CopyPlan { pods, copies: copies.len(), delete };
    }
    // Copies made moments ago that the watch has not shown yet count.
    let mut taken = copies.len()
        + memory
            .added
            .iter()
            .filter(|((src, key), at)| {
                key == COPY_KEY
                    && now.saturating_duration_since(**at) < ADDED_GRACE
                    && !copies.iter().any(|c| c.labels().get(COPY_OF) == Some(&*src.to_string()))
            })
            .count();
    let mut out: Vec<PodPlan> = matched(rule, &pods)
        .map(|p| {
            let d = decide(rule, p, &copies, memory, now, &mut taken, max_copies);
            plan_of(p, d)
        })
        .collect();
    out.sort_by(|a, b| a.pod.cmp(&b.pod));
    let matched: std::collections::HashSet<String> = out.iter().map(|p| p.uid.to_string()).collect();
    let delete = copies
        .iter()
        .filter(|c| c.labels().get(COPY_OF).is_none_or(|src| !matched.contains(src)))
        .map(|c| stale(c))
        .collect();
    CopyPlan { pods: out, copies: copies.len(), delete }
}

fn plan_of(p: &PodView, decision: Decision) -> PodPlan {
    PodPlan { pod: p.name().to_string(), uid: p.uid.clone(), decision, skipped_volumes: Vec::new() }
}

fn expired(rule: &Rule<'_>) -> Decision {
    match rule.expiry {
        Expiry::Expired { at } => Decision::Skip {
            reason: "Expired",
            message: format!("debug access ended at {at}: no copy is made any more, and the copies were deleted"),
        },
        _ => Decision::Wait { reason: "NotCrashLooping" },
    }
}

/// The pods the rule matches: running or not, never terminating, static or
/// a copy.
fn matched<'a, 'p>(rule: &'a Rule<'_>, pods: &'a [&'p PodView]) -> impl Iterator<Item = &'p PodView> + 'a {
    pods.iter()
        .copied()
        .filter(|p| !p.terminating && !p.mirror && !is_copy(p))
        .filter(|p| p.labels().matched_by(rule.selector))
}

fn decide(
    rule: &Rule<'_>,
    pod: &PodView,
    copies: &[&PodView],
    memory: &Memory,
    now: Instant,
    taken: &mut usize,
    max_copies: usize,
) -> Decision {
    let uid = pod.uid.to_string();
    if let Some(c) = copies.iter().find(|c| c.labels().get(COPY_OF) == Some(uid.as_str())) {
        // Its debug container is named from the spec it was made from.
        let container = c.containers().iter().find(|n| naming::added_by(rule.name, n)).map(|n| n.to_string());
        let container = container.unwrap_or_else(|| rule.container.to_string());
        let running = c.running && c.runs(&container);
        return Decision::Copied { copy: c.name().to_string(), container, running };
    }
    let key = (pod.uid.clone(), COPY_KEY.to_string());
    if memory.added.get(&key).is_some_and(|at| now.saturating_duration_since(*at) < ADDED_GRACE) {
        return Decision::Added;
    }
    if let Some(t) = rule.target
        && !pod.containers().is_empty()
        && !pod.containers().iter().any(|c| **c == *t)
    {
        return Decision::Skip {
            reason: "TargetNotFound",
            message: format!("the pod has no container {t:?} (containers: {})", pod.containers().join(", ")),
        };
    }
    if !memory.crash_looped.contains(&pod.uid) {
        return Decision::Wait { reason: "NotCrashLooping" };
    }
    // The crash-looping container, or (running between back-offs) the
    // first.
    let Some(target) =
        rule.target.or_else(|| pod.first_crash_looping()).or_else(|| pod.containers().first().map(|c| &**c))
    else {
        return Decision::Wait { reason: "NotCrashLooping" };
    };
    if *taken >= max_copies {
        return Decision::Skip {
            reason: "MaxCopiesReached",
            message: format!(
                "this PodDebugger has {taken} debug copies (copy.maxCopies {max_copies}): delete one to get a copy of this pod"
            ),
        };
    }
    if let Some(r) = memory.refused.get(&key).filter(|r| now < r.retry_at) {
        return Decision::Refused { message: r.message.clone(), retry_at: r.retry_at };
    }
    let mounts = match (rule.volumes, &pod.volumes) {
        (None, _) => Vec::new(),
        (Some(want), Some(have)) => mounts(want, have, target, rule.secrets).0,
        (Some(_), None) => return Decision::Wait { reason: "VolumesNotListed" },
    };
    *taken += 1;
    Decision::Copy { target: target.to_string(), deadline: rule.expiry.deadline_secs(), mounts }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::Shape;
    use flotilla_shared::pods::PodLabels;
    use flotilla_shared::selector::{LabelSelector, Selector};

    fn selector() -> Selector {
        let s: LabelSelector = serde_json::from_value(serde_json::json!({"matchExpressions": [
            {"key": "tier", "operator": "DoesNotExist"}]}))
        .unwrap_or_else(|e| panic!("{e}"));
        Selector::new(&s).unwrap_or_else(|e| panic!("{e}"))
    }

    fn pod(name: &str, crash_looping: u64) -> PodView {
        PodView {
            key: format!("shop/{name}").into(),
            shape: Shape {
                labels: PodLabels::from_pairs([("app", "payment")]),
                containers: vec!["app".into(), "side".into()].into(),
            }
            .share(),
            uid: format!("00000000-0000-0000-0000-0000000000{name}").into(),
            running: true,
            running_containers: 0b11 & !crash_looping,
            crash_looping,
            ..PodView::default()
        }
    }

    fn copy_of(src: &PodView, name: &str, by: &str) -> PodView {
        let uid = src.uid.to_string();
        let mut c = pod(name, 0);
        c.shape = Shape {
            labels: PodLabels::from_pairs([(COPY_OF, uid.as_str()), (COPIED_BY, by)]),
            containers: vec!["app".into(), "side".into(), C.into()].into(),
        }
        .share();
        c.running_containers = 0b111;
        c
    }

    const C: &str = "dbg-r-0123456789";
    const UID: &str = "pd-uid";

    fn rule(sel: &Selector) -> Rule<'_> {
        Rule {
            name: "r",
            namespace: "shop",
            selector: sel,
            container: C,
            target: None,
            max_per_pod: 3,
            expiry: Expiry::Never,
            volumes: None,
            secrets: false,
        }
    }

    fn decisions(p: &CopyPlan) -> Vec<(&str, &Decision)> {
        p.pods.iter().map(|p| (p.pod.as_str(), &p.decision)).collect()
    }

    #[test]
    fn a_crash_looping_pod_is_copied_with_its_crash_looping_container_as_the_target() {
        let sel = selector();
        let pods = [pod("01", 0b10), pod("02", 0)];
        let p = plan_copies(&rule(&sel), UID, 3, &pods, &mut Memory::default(), Instant::now());
        assert_eq!(
            decisions(&p),
            [
                ("01", &Decision::Copy { target: "side".into(), deadline: None, mounts: vec![] }),
                ("02", &Decision::Wait { reason: "NotCrashLooping" }),
            ]
        );
        assert!(p.delete.is_empty());
    }

    #[test]
    fn a_pod_seen_crash_looping_stays_one_while_it_runs_between_back_offs() {
        let sel = selector();
        let mut memory = Memory::default();
        let now = Instant::now();
        let mut p = pod("01", 0b01);
        let r = rule(&sel);
        let first = plan_copies(&r, UID, 0, std::slice::from_ref(&p), &mut memory, now);
        assert!(matches!(first.pods[0].decision, Decision::Skip { reason: "MaxCopiesReached", .. }));
        p.crash_looping = 0;
        let between = plan_copies(&r, UID, 0, std::slice::from_ref(&p), &mut memory, now);
        assert_eq!(between.pods, first.pods, "restarted for a moment, it is still crash-looping");
        let never = plan_copies(&r, UID, 0, &[pod("02", 0)], &mut memory, now);
        assert_eq!(never.pods[0].decision, Decision::Wait { reason: "NotCrashLooping" });
        let copied = plan_copies(&r, UID, 1, &[p], &mut memory, now);
        assert_eq!(copied.pods[0].decision, Decision::Copy { target: "app".into(), deadline: None, mounts: vec![] });
    }

    #[test]
    fn a_copied_pod_shows_its_copy_and_copies_are_never_matched_nor_copied() {
        let sel = selector();
        let src = pod("01", 0b01);
        let copy = copy_of(&src, "01-dbg-x", UID);
        let others = copy_of(&pod("02", 0b01), "02-dbg-y", "other-pd");
        let pods = [src, copy, others];
        let p = plan_copies(&rule(&sel), UID, 3, &pods, &mut Memory::default(), Instant::now());
        let copied = Decision::Copied { copy: "01-dbg-x".into(), container: C.into(), running: true };
        assert_eq!(decisions(&p), [("01", &copied)]);
        assert_eq!(p.copies, 1);
        assert!(p.delete.is_empty());
    }

    #[test]
    fn copies_stop_at_max_copies_counting_those_the_watch_has_not_shown() {
        let sel = selector();
        let now = Instant::now();
        let pods = [pod("01", 1), pod("02", 1), pod("03", 1), pod("04", 1)];
        let mut memory = Memory::default();
        memory.added.insert((pods[3].uid.clone(), COPY_KEY.to_string()), now);
        let p = plan_copies(&rule(&sel), UID, 2, &pods, &mut memory, now);
        let reasons: Vec<String> = p
            .pods
            .iter()
            .map(|p| match &p.decision {
                Decision::Copy { .. } => "copy".to_string(),
                Decision::Added => "added".to_string(),
                Decision::Skip { reason, .. } => reason.to_string(),
                d => format!("{d:?}"),
            })
            .collect();
        assert_eq!(reasons, ["copy", "MaxCopiesReached", "MaxCopiesReached", "added"]);
    }

    #[test]
    fn a_copy_whose_pod_is_gone_or_no_longer_matched_is_deleted_and_frees_its_place() {
        let sel = selector();
        let src = pod("01", 1);
        let orphan = copy_of(&pod("09", 1), "09-dbg-z", UID);
        let mut unmatched = pod("02", 1);
        unmatched.shape =
            Shape { labels: PodLabels::from_pairs([("tier", "web")]), ..(*unmatched.shape).clone() }.share();
        let of_unmatched = copy_of(&unmatched, "02-dbg-y", UID);
        let pods = [src, unmatched, orphan, of_unmatched];
        let p = plan_copies(&rule(&sel), UID, 2, &pods, &mut Memory::default(), Instant::now());
        let deleted: Vec<&str> = p.delete.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(deleted, ["09-dbg-z", "02-dbg-y"]);
        // Counted until the watch shows them gone: the next reconcile copies.
        assert!(matches!(p.pods[0].decision, Decision::Skip { reason: "MaxCopiesReached", .. }));
    }

    #[test]
    fn a_copy_from_an_older_spec_shows_its_own_debug_container() {
        let sel = selector();
        let src = pod("01", 0);
        let mut copy = copy_of(&src, "01-dbg-x", UID);
        copy.shape =
            Shape { containers: vec!["app".into(), "dbg-r-aaaaaaaaaa".into()].into(), ..(*copy.shape).clone() }.share();
        copy.running_containers = 0b11;
        let p = plan_copies(&rule(&sel), UID, 3, &[src, copy], &mut Memory::default(), Instant::now());
        let want = Decision::Copied { copy: "01-dbg-x".into(), container: "dbg-r-aaaaaaaaaa".into(), running: true };
        assert_eq!(p.pods[0].decision, want);
    }

    #[test]
    fn a_failed_pod_is_never_taken_for_a_crash_loop() {
        let sel = selector();
        let mut failed = pod("01", 1);
        failed.running = false;
        let p = plan_copies(&rule(&sel), UID, 3, &[failed], &mut Memory::default(), Instant::now());
        assert_eq!(p.pods[0].decision, Decision::Wait { reason: "NotCrashLooping" });
    }

    #[test]
    fn at_the_expiry_every_copy_is_deleted_and_none_made() {
        let sel = selector();
        let src = pod("01", 1);
        let copy = copy_of(&src, "01-dbg-x", UID);
        let orphan = copy_of(&pod("09", 1), "09-dbg-z", UID);
        let pods = [src, pod("02", 1), copy, orphan];
        let mut r = rule(&sel);
        r.expiry = Expiry::Expired { at: k8s_openapi::jiff::Timestamp::UNIX_EPOCH };
        let p = plan_copies(&r, UID, 3, &pods, &mut Memory::default(), Instant::now());
        let deleted: Vec<&str> = p.delete.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(deleted, ["01-dbg-x", "09-dbg-z"]);
        assert!(p.pods.iter().all(|p| matches!(p.decision, Decision::Skip { reason: "Expired", .. })));
        let memory = Memory::default();
        assert_eq!(all_copies(UID, &pods, &memory).len(), 2);
        assert!(all_copies("other", &pods, &memory).is_empty());
        // One the API showed is not ours is never counted again.
        let mut memory = Memory::default();
        memory.not_ours.insert(pods[2].uid.clone());
        assert_eq!(all_copies(UID, &pods, &memory).len(), 1);
    }

    #[test]
    fn a_named_target_the_pod_lacks_is_skipped_and_a_refusal_waits_its_retry() {
        let sel = selector();
        let now = Instant::now();
        let mut r = rule(&sel);
        r.target = Some("nope");
        let p = plan_copies(&r, UID, 3, &[pod("01", 1)], &mut Memory::default(), now);
        assert!(matches!(p.pods[0].decision, Decision::Skip { reason: "TargetNotFound", .. }));
        r.target = Some("app");
        let src = pod("01", 0b10);
        let mut memory = Memory::default();
        let refusal = crate::plan::Refusal::after(None, "forbidden".into(), now);
        memory.refused.insert((src.uid.clone(), COPY_KEY.to_string()), refusal);
        let p = plan_copies(&r, UID, 3, std::slice::from_ref(&src), &mut memory, now);
        assert!(matches!(&p.pods[0].decision, Decision::Refused { message, .. } if message == "forbidden"));
        let later = now + std::time::Duration::from_secs(31);
        let p = plan_copies(&r, UID, 3, &[src], &mut memory, later);
        assert_eq!(p.pods[0].decision, Decision::Copy { target: "app".into(), deadline: None, mounts: vec![] });
    }
}
