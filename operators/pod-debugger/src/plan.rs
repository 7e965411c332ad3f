//! What to do with each pod a PodDebugger matches: a pure function of the
//! rule, the pods as the watch sees them, and what the operator remembers
//! (additions not yet seen by the watch, refusals in back-off). The
//! executor only carries out `Add`s; every decision is taken here.

use flotilla_shared::uid::Uid;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use flotilla_shared::selector::Selector;
use k8s_openapi::api::core::v1::VolumeMount;
use k8s_openapi::jiff::Timestamp;

use crate::crd::VolumeMounts;
use crate::mounts::{Skipped, mounts};
use crate::naming;
use crate::pod::{ContainerState, PodView};

/// Where a PodDebugger stands with its expiry (spec.expiresAt or
/// spec.ttl) at some `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// No expiry set.
    Never,
    /// Access ends at `at`, `left` from now.
    Until { at: Timestamp, left: Duration },
    /// Access ended at `at`.
    Expired { at: Timestamp },
}

impl Expiry {
    /// The expiry `at` (None: none set) seen at `now`. Exactly at `at` it
    /// has expired: a container added then would have no time to run.
    pub fn at(at: Option<Timestamp>, now: Timestamp) -> Expiry {
        let Some(at) = at else { return Expiry::Never };
        match Duration::try_from(at.duration_since(now)) {
            Ok(left) if !left.is_zero() => Expiry::Until { at, left },
            _ => Expiry::Expired { at },
        }
    }

    /// The time a PodDebugger's access ends: spec.expiresAt, or its
    /// creation plus spec.ttl (None: neither is set). Errors name the field.
    pub fn time(
        expires_at: Option<Timestamp>,
        ttl: Option<Duration>,
        created: Option<Timestamp>,
    ) -> Result<Option<Timestamp>, String> {
        match (expires_at, ttl) {
            (Some(at), _) => Ok(Some(at)),
            (None, None) => Ok(None),
            (None, Some(ttl)) => {
                let created = created.ok_or("ttl: the PodDebugger has no creationTimestamp")?;
                let ttl = k8s_openapi::jiff::SignedDuration::try_from(ttl).map_err(|e| format!("ttl: {e}"))?;
                created.checked_add(ttl).map(Some).map_err(|e| format!("ttl: {e}"))
            }
        }
    }

    /// The deadline a container added now gets: whole seconds, rounded up
    /// (so it never ends before the expiry; `timeout` takes whole seconds
    /// everywhere, and 0 would mean none).
    pub fn deadline_secs(self) -> Option<u64> {
        match self {
            Expiry::Until { left, .. } => Some(left.as_secs() + u64::from(left.subsec_nanos() > 0)),
            _ => None,
        }
    }
}

/// The parts of a rule the plan needs.
pub struct Rule<'a> {
    /// The PodDebugger's name.
    pub name: &'a str,
    pub namespace: &'a str,
    pub selector: &'a Selector,
    /// The current spec's container name.
    pub container: &'a str,
    /// spec.targetContainer (None: the pod's first container).
    pub target: Option<&'a str>,
    pub max_per_pod: usize,
    /// Where the rule stands with its expiry now.
    pub expiry: Expiry,
    /// spec.volumeMounts.
    pub volumes: Option<&'a VolumeMounts>,
    /// Whether Secret volumes may be mounted (spec.volumeMounts.secrets and
    /// the admission policy that checked its author in place).
    pub secrets: bool,
}

/// An addition the API refused, remembered per pod and container so the
/// pod is retried with back-off, never in a hot loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    pub attempts: u32,
    pub retry_at: Instant,
}

impl Refusal {
    /// The next refusal after `previous`: 30 s doubling to 10 min.
    pub fn after(previous: Option<&Refusal>, message: String, now: Instant) -> Refusal {
        let attempts = previous.map_or(1, |p| p.attempts.saturating_add(1));
        let delay = Duration::from_secs(30).saturating_mul(1 << (attempts - 1).min(5)).min(Duration::from_secs(600));
        Refusal { message, attempts, retry_at: now + delay }
    }
}

/// What the operator remembers between reconciles, keyed by (pod UID,
/// container name).
#[derive(Debug, Default)]
pub struct Memory {
    /// Additions made but not yet in the watch's view of the pod.
    pub added: HashMap<(Uid, String), Instant>,
    /// Refused additions.
    pub refused: HashMap<(Uid, String), Refusal>,
    /// Matched pods seen crash-looping (mode copy): a crash-looping
    /// container is Running between its back-offs, and the pod stays one
    /// to copy then.
    pub crash_looped: std::collections::HashSet<Uid>,
    /// Pods labelled as this PodDebugger's copies that the API showed are
    /// not (no owner reference to it): never looked at again.
    pub not_ours: std::collections::HashSet<Uid>,
    /// Pods labelled as its copies that the API showed are (owned by it).
    pub ours: std::collections::HashSet<Uid>,
}

/// How long an addition the watch has not shown yet counts as done.
pub const ADDED_GRACE: Duration = Duration::from_secs(60);

/// One matched pod's decision.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// The pod has the current container, in this state.
    Has(ContainerState),
    /// Added moments ago; the watch has not shown it yet.
    Added,
    /// Add the container, joining `target`'s process namespace, its command
    /// ending after `deadline` seconds (the expiry), with these mounts.
    Add { target: String, deadline: Option<u64>, mounts: Vec<VolumeMount> },
    /// Not yet: the pod or its target container is not running.
    Wait { reason: &'static str },
    /// Never, as things are: the reason says why.
    Skip { reason: &'static str, message: String },
    /// The API refused the addition; retried at `retry_at`.
    Refused { message: String, retry_at: Instant },
    /// Mode copy: make the pod's debug copy, whose `target` runs
    /// spec.copy.command (ending after `deadline` seconds), the debug
    /// container with these mounts beside it.
    Copy { target: String, deadline: Option<u64>, mounts: Vec<VolumeMount> },
    /// Mode copy: the pod has its debug copy, whose debug container is
    /// `container` (named from the spec the copy was made from);
    /// `running`: it runs.
    Copied { copy: String, container: String, running: bool },
}

/// The plan for one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodPlan {
    pub pod: String,
    pub uid: Uid,
    pub decision: Decision,
    /// Volumes of spec.volumeMounts the container does not (or would not)
    /// mount in this pod, and why.
    pub skipped_volumes: Vec<Skipped>,
}

/// Decides for every pod of the rule's namespace that the selector
/// matches; terminating and static pods are not matched.
pub fn plan<'p>(
    rule: &Rule<'_>,
    pods: impl IntoIterator<Item = &'p PodView>,
    memory: &Memory,
    now: Instant,
) -> Vec<PodPlan> {
    let mut out: Vec<PodPlan> = pods
        .into_iter()
        .filter(|p| p.namespace() == rule.namespace && !p.terminating && !p.mirror && !crate::copy_plan::is_copy(p))
        // Labels past what a view keeps match no selector.
        .filter(|p| p.labels().matched_by(rule.selector))
        .map(|p| {
            let (decision, skipped_volumes) = decide(rule, p, memory, now);
            PodPlan { pod: p.name().to_string(), uid: p.uid.clone(), decision, skipped_volumes }
        })
        .collect();
    out.sort_by(|a, b| a.pod.cmp(&b.pod));
    out
}

/// The pod's decision, and the volumes its container does not mount.
fn decide(rule: &Rule<'_>, pod: &PodView, memory: &Memory, now: Instant) -> (Decision, Vec<Skipped>) {
    let target = rule.target.map(str::to_string).or_else(|| pod.containers().first().map(|c| c.to_string()));
    // Volumes are only known where the view keeps them (namespaces with a
    // PodDebugger that mounts some): without, the pod waits.
    let volumes = match (rule.volumes, &pod.volumes, &target) {
        (Some(want), Some(have), Some(t)) => Some(mounts(want, have, t, rule.secrets)),
        _ => None,
    };
    let (mounts, skipped) = volumes.clone().unwrap_or_default();
    let d = decide_container(rule, pod, memory, now, target, mounts, volumes.is_some());
    (d, skipped)
}

fn decide_container(
    rule: &Rule<'_>,
    pod: &PodView,
    memory: &Memory,
    now: Instant,
    target: Option<String>,
    mounts: Vec<VolumeMount>,
    volumes_known: bool,
) -> Decision {
    if pod.ephemeral().iter().any(|c| c == rule.container) {
        return Decision::Has(pod.ephemeral_state(rule.container).cloned().unwrap_or_default());
    }
    let key = (pod.uid.clone(), rule.container.to_string());
    if memory.added.get(&key).is_some_and(|at| now.saturating_duration_since(*at) < ADDED_GRACE) {
        return Decision::Added;
    }
    if let Expiry::Expired { at } = rule.expiry {
        return Decision::Skip {
            reason: "Expired",
            message: format!("debug access ended at {at}: no debug container is added any more"),
        };
    }
    let Some(target) = target else { return Decision::Wait { reason: "PodNotRunning" } };
    if !pod.containers().is_empty() && !pod.containers().iter().any(|c| **c == *target) {
        return Decision::Skip {
            reason: "TargetNotFound",
            message: if pod.containers().len() < crate::pod::MAX_CONTAINERS {
                format!("the pod has no container {target:?} (containers: {})", pod.containers().join(", "))
            } else {
                format!(
                    "no container {target:?} among the pod's first {} containers (the only ones pod-debugger keeps)",
                    crate::pod::MAX_CONTAINERS
                )
            },
        };
    }
    let ours = pod.ephemeral().iter().filter(|c| naming::added_by(rule.name, c)).count();
    if ours >= rule.max_per_pod {
        return Decision::Skip {
            reason: "MaxPerPodReached",
            message: format!(
                "the pod has {ours} debug containers from this PodDebugger (maxPerPod {}); ephemeral containers cannot be removed: recreate the pod to clear them",
                rule.max_per_pod
            ),
        };
    }
    if !pod.running {
        return Decision::Wait { reason: "PodNotRunning" };
    }
    if !pod.runs(&target) {
        return Decision::Wait { reason: "TargetNotRunning" };
    }
    if let Some(r) = memory.refused.get(&key).filter(|r| now < r.retry_at) {
        return Decision::Refused { message: r.message.clone(), retry_at: r.retry_at };
    }
    if rule.volumes.is_some() && !volumes_known {
        return Decision::Wait { reason: "VolumesNotListed" };
    }
    Decision::Add { target, deadline: rule.expiry.deadline_secs(), mounts }
}

/// When the plan wants to be looked at again (a refusal's retry, an
/// addition the watch should have shown by then, or the expiry: exactly
/// then, as a timer, never by polling).
pub fn next_wake(expiry: Expiry, plans: &[PodPlan], memory: &Memory, now: Instant) -> Option<Instant> {
    let expires = match expiry {
        Expiry::Until { left, .. } => Some(now + left),
        _ => None,
    };
    let refusals = plans.iter().filter_map(|p| match &p.decision {
        Decision::Refused { retry_at, .. } => Some(*retry_at),
        _ => None,
    });
    let added = plans
        .iter()
        .filter(|p| p.decision == Decision::Added)
        .filter_map(|p| memory.added.iter().find(|((uid, _), _)| *uid == p.uid).map(|(_, at)| *at + ADDED_GRACE));
    refusals.chain(added).chain(expires).filter(|t| *t > now).min()
}

/// Forgets what no longer matters: additions the watch now shows or that
/// are older than the grace, refusals of pods that are gone.
pub fn forget(memory: &mut Memory, plans: &[PodPlan], now: Instant) {
    memory.added.retain(|(uid, _), at| {
        now.saturating_duration_since(*at) < ADDED_GRACE
            && plans.iter().any(|p| p.uid == *uid && p.decision == Decision::Added)
    });
    memory.refused.retain(|(uid, _), _| plans.iter().any(|p| p.uid == *uid));
    memory.crash_looped.retain(|uid| plans.iter().any(|p| p.uid == *uid));
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::pod::Shape;
    use flotilla_shared::selector::LabelSelector;
    use proptest::prelude::*;

    fn selector() -> Selector {
        let s: LabelSelector = serde_json::from_value(serde_json::json!({"matchLabels": {"app": "payment"}}))
            .unwrap_or_else(|e| panic!("{e}"));
        Selector::new(&s).unwrap_or_else(|e| panic!("{e}"))
    }

    fn pod(name: &str) -> PodView {
        PodView {
            key: format!("shop/{name}").into(),
            shape: Shape {
                labels: flotilla_shared::pods::PodLabels::from_pairs([("app", "payment")]),
                containers: vec!["app".into(), "side".into()].into(),
            }
            .share(),
            uid: format!("uid-{name}").into(),
            running: true,
            running_containers: 0b11,
            ..PodView::default()
        }
    }

    /// `p` with `labels` (its shape replaced).
    fn relabel(p: &mut PodView, labels: flotilla_shared::pods::PodLabels) {
        p.shape = Shape { labels, ..(*p.shape).clone() }.share();
    }

    /// `p`'s ephemeral containers set to `names`.
    fn with_ephemeral(p: &mut PodView, names: Vec<String>) {
        p.ephemeral = Some(Box::new(crate::pod::Ephemeral { names, ..Default::default() }));
    }

    const C: &str = "dbg-r-0123456789";

    fn rule<'a>(sel: &'a Selector, target: Option<&'a str>) -> Rule<'a> {
        Rule {
            name: "r",
            namespace: "shop",
            selector: sel,
            container: C,
            target,
            max_per_pod: 2,
            expiry: Expiry::Never,
            volumes: None,
            secrets: false,
        }
    }

    fn add(target: &str) -> Decision {
        Decision::Add { target: target.into(), deadline: None, mounts: vec![] }
    }

    fn one(r: &Rule<'_>, p: &PodView, m: &Memory, now: Instant) -> Decision {
        let plans = plan(r, [p], m, now);
        assert_eq!(plans.len(), 1, "{p:?} was not matched");
        plans[0].decision.clone()
    }

    #[test]
    fn a_running_pod_gets_the_container_targeting_its_first_container() {
        let sel = selector();
        let now = Instant::now();
        assert_eq!(one(&rule(&sel, None), &pod("a"), &Memory::default(), now), add("app"));
        assert_eq!(one(&rule(&sel, Some("side")), &pod("a"), &Memory::default(), now), add("side"));
    }

    #[test]
    fn other_pods_are_not_matched() {
        let sel = selector();
        let r = rule(&sel, None);
        let mut other_ns = pod("a");
        other_ns.key = "bank/a".into();
        let mut other_label = pod("b");
        relabel(&mut other_label, flotilla_shared::pods::PodLabels::from_pairs([("app", "cart")]));
        let mut cut = pod("e");
        let cut_labels = flotilla_shared::pods::PodLabels::cut();
        relabel(&mut cut, cut_labels);
        let mut terminating = pod("c");
        terminating.terminating = true;
        let mut mirror = pod("d");
        mirror.mirror = true;
        let pods = [other_ns, other_label, terminating, mirror, cut];
        assert!(plan(&r, pods.iter(), &Memory::default(), Instant::now()).is_empty());
    }

    #[test]
    fn a_pod_waits_until_it_and_its_target_run() {
        let sel = selector();
        let r = rule(&sel, Some("side"));
        let now = Instant::now();
        let mut p = pod("a");
        p.running = false;
        p.running_containers = 0;
        assert_eq!(one(&r, &p, &Memory::default(), now), Decision::Wait { reason: "PodNotRunning" });
        p.running = true;
        p.running_containers = 0b01;
        assert_eq!(one(&r, &p, &Memory::default(), now), Decision::Wait { reason: "TargetNotRunning" });
        p.running_containers = 0b11;
        assert_eq!(one(&r, &p, &Memory::default(), now), add("side"));
    }

    #[test]
    fn a_missing_target_is_skipped_with_the_pods_containers() {
        let sel = selector();
        let d = one(&rule(&sel, Some("nope")), &pod("a"), &Memory::default(), Instant::now());
        assert!(
            matches!(&d, Decision::Skip { reason: "TargetNotFound", message } if message.contains("app, side")),
            "{d:?}"
        );
    }

    #[test]
    fn the_current_container_is_added_once_and_the_limit_holds() {
        let sel = selector();
        let r = rule(&sel, None);
        let now = Instant::now();
        let mut p = pod("a");
        with_ephemeral(&mut p, vec![C.into()]);
        assert_eq!(one(&r, &p, &Memory::default(), now), Decision::Has(ContainerState::default()));
        // An older spec's container: the current one is still added...
        let older = vec!["dbg-r-aaaaaaaaaa".into(), "dbg-other-bbbbbbbbbb".into(), "debugger-x".into()];
        with_ephemeral(&mut p, older.clone());
        assert_eq!(one(&r, &p, &Memory::default(), now), add("app"));
        // ...until this rule's own containers reach maxPerPod.
        with_ephemeral(&mut p, [older, vec!["dbg-r-cccccccccc".into()]].concat());
        assert!(matches!(one(&r, &p, &Memory::default(), now), Decision::Skip { reason: "MaxPerPodReached", .. }));
    }

    #[test]
    fn an_addition_the_watch_has_not_shown_is_not_made_again() {
        let sel = selector();
        let r = rule(&sel, None);
        let now = Instant::now();
        let p = pod("a");
        let mut m = Memory::default();
        m.added.insert((p.uid.clone(), C.into()), now);
        assert_eq!(one(&r, &p, &m, now), Decision::Added);
        let plans = plan(&r, [&p], &m, now);
        assert_eq!(next_wake(Expiry::Never, &plans, &m, now), Some(now + ADDED_GRACE));
        // After the grace (the watch never showed it), it is tried again.
        let later = now + ADDED_GRACE + Duration::from_secs(1);
        assert_eq!(one(&r, &p, &m, later), add("app"));
        let plans = plan(&r, [&p], &m, later);
        forget(&mut m, &plans, later);
        assert!(m.added.is_empty());
    }

    #[test]
    fn a_refusal_backs_off_and_is_forgotten_with_its_pod() {
        let sel = selector();
        let r = rule(&sel, None);
        let now = Instant::now();
        let p = pod("a");
        let mut m = Memory::default();
        let first = Refusal::after(None, "forbidden".into(), now);
        assert_eq!(first.retry_at, now + Duration::from_secs(30));
        let mut last = first.clone();
        for _ in 0..10 {
            last = Refusal::after(Some(&last), "forbidden".into(), now);
        }
        assert_eq!(last.retry_at, now + Duration::from_secs(600));
        m.refused.insert((p.uid.clone(), C.into()), first);
        let d = one(&r, &p, &m, now);
        assert!(matches!(d, Decision::Refused { .. }));
        let plans = plan(&r, [&p], &m, now);
        assert_eq!(next_wake(Expiry::Never, &plans, &m, now), Some(now + Duration::from_secs(30)));
        assert_eq!(one(&r, &p, &m, now + Duration::from_secs(31)), add("app"));
        forget(&mut m, &[], now);
        assert!(m.refused.is_empty());
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_expiry_is_expires_at_or_creation_plus_ttl() {
        let created = Some(ts("2026-11-27T06:00:00Z"));
        let at = ts("2026-11-27T07:00:00Z");
        assert_eq!(Expiry::time(Some(at), None, created), Ok(Some(at)));
        assert_eq!(Expiry::time(None, Some(Duration::from_secs(20)), created), Ok(Some(ts("2026-11-27T06:00:20Z"))));
        assert_eq!(Expiry::time(None, None, created), Ok(None));
        assert!(Expiry::time(None, Some(Duration::from_secs(1)), None).is_err());
        assert!(Expiry::time(None, Some(Duration::MAX), created).is_err(), "an overflow is an error, not a panic");
    }

    #[test]
    fn before_the_expiry_containers_get_a_deadline_rounded_up_and_at_it_none_are_added() {
        let sel = selector();
        let mut r = rule(&sel, None);
        r.expiry = Expiry::at(Some(ts("2026-11-27T06:00:20Z")), ts("2026-11-27T06:00:02.5Z"));
        assert_eq!(r.expiry, Expiry::Until { at: ts("2026-11-27T06:00:20Z"), left: Duration::from_millis(17_500) });
        let now = Instant::now();
        let d = one(&r, &pod("a"), &Memory::default(), now);
        assert_eq!(d, Decision::Add { target: "app".into(), deadline: Some(18), mounts: vec![] });
        // The reconcile is woken exactly at the expiry, by a timer.
        let plans = plan(&r, [&pod("a")], &Memory::default(), now);
        assert_eq!(next_wake(r.expiry, &plans, &Memory::default(), now), Some(now + Duration::from_millis(17_500)));

        // At the expiry (and after), nothing is added, what was added is
        // still shown, and no wake is asked for.
        for now_wall in ["2026-11-27T06:00:20Z", "2026-11-27T09:00:00Z"] {
            r.expiry = Expiry::at(Some(ts("2026-11-27T06:00:20Z")), ts(now_wall));
            assert_eq!(r.expiry, Expiry::Expired { at: ts("2026-11-27T06:00:20Z") });
            let d = one(&r, &pod("a"), &Memory::default(), now);
            assert!(
                matches!(&d, Decision::Skip { reason: "Expired", message } if message.contains("06:00:20")),
                "{d:?}"
            );
            let mut has = pod("b");
            with_ephemeral(&mut has, vec![C.into()]);
            assert_eq!(one(&r, &has, &Memory::default(), now), Decision::Has(ContainerState::default()));
            let plans = plan(&r, [&pod("a"), &has], &Memory::default(), now);
            assert_eq!(next_wake(r.expiry, &plans, &Memory::default(), now), None);
        }
        assert_eq!(Expiry::at(None, ts("2026-11-27T09:00:00Z")), Expiry::Never);
    }

    #[test]
    fn volumes_are_mounted_where_the_view_keeps_them_and_skipped_ones_are_told() {
        use crate::crd::{VolumeMounts, VolumeName};
        use crate::mounts::{Mount, PodVolumes};
        let sel = selector();
        let want =
            VolumeMounts { names: vec![VolumeName("data".into()), VolumeName("gone".into())], ..Default::default() };
        let mut r = rule(&sel, None);
        r.volumes = Some(&want);
        let mut p = pod("a");
        assert_eq!(one(&r, &p, &Memory::default(), Instant::now()), Decision::Wait { reason: "VolumesNotListed" });
        let mount = Mount { volume: "data".into(), path: "/data".into(), read_only: false, sub_path: false };
        p.volumes = Some(std::sync::Arc::new(PodVolumes {
            volumes: vec![("data".into(), false)],
            mounts: vec![("app".into(), mount)],
        }));
        let plans = plan(&r, [&p], &Memory::default(), Instant::now());
        let Decision::Add { mounts, .. } = &plans[0].decision else { panic!("{plans:?}") };
        assert_eq!((mounts[0].mount_path.as_str(), mounts[0].read_only), ("/data", Some(true)));
        assert_eq!(crate::mounts::describe(&plans[0].skipped_volumes), "gone (NotInPod)");
    }

    proptest! {
        /// Whatever the pods look like, a pod is only ever given a container
        /// when it runs, its target runs, it lacks the current container and
        /// this rule's containers on it are below the limit.
        #[test]
        fn additions_are_only_planned_where_they_are_safe(
            running in any::<bool>(),
            target_running in any::<bool>(),
            terminating in any::<bool>(),
            have_current in any::<bool>(),
            ours in 0usize..4,
            theirs in 0usize..3,
            max in 1usize..4,
        ) {
            let sel = selector();
            let mut r = rule(&sel, None);
            r.max_per_pod = max;
            let mut p = pod("a");
            p.running = running;
            p.terminating = terminating;
            if !target_running { p.running_containers = 0b10; }
            let mut eph: Vec<String> = (0..ours).map(|i| format!("dbg-r-{i:010}")).collect();
            eph.extend((0..theirs).map(|i| format!("dbg-x-{i:010}")));
            if have_current { eph.push(C.into()); }
            with_ephemeral(&mut p, eph);
            let plans = plan(&r, [&p], &Memory::default(), Instant::now());
            let ours_total = ours + usize::from(have_current);
            for pp in plans {
                if let Decision::Add { .. } = pp.decision {
                    prop_assert!(running && target_running && !terminating && !have_current && ours_total < max);
                }
            }
        }
    }
}
