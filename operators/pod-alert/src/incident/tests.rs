#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::observe::tests::{crashing, pod, rules, t};
use crate::observe::{RestartHistory, evaluate};
use crate::pod::PodView;
use proptest::prelude::*;

/// A book and the restart history its evaluations keep (the controller
/// keeps the history per namespace, `crate::evaluation`).
#[derive(Default)]
struct Tracked {
    book: Book,
    history: RestartHistory,
}

impl std::ops::Deref for Tracked {
    type Target = Book;
    fn deref(&self) -> &Book {
        &self.book
    }
}

impl std::ops::DerefMut for Tracked {
    fn deref_mut(&mut self) -> &mut Book {
        &mut self.book
    }
}

fn step(book: &mut Tracked, pods: &[PodView], r: &Rules, now: i64) -> Vec<Transition> {
    let f = evaluate(pods.iter(), r, &mut book.history, t(now));
    book.book.step(&f, r, t(now))
}

fn opened(ts: &[Transition]) -> usize {
    ts.iter().filter(|t| matches!(t.change, Change::Opened { .. })).count()
}

#[test]
fn a_hundred_updates_of_one_crash_loop_open_one_incident() {
    let r = rules(serde_json::json!({}));
    let mut book = Tracked::default();
    let mut all = Vec::new();
    for i in 0..100 {
        // Restarts rise from 3 to 9 (below the next escalation at 10).
        let restarts = 3 + (i / 15);
        all.extend(step(
            &mut book,
            &[crashing(pod("w", "web"), restarts, i64::from(i), "Error")],
            &r,
            i64::from(i) + 1,
        ));
    }
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(opened(&all), 1);
    assert_eq!(book.firing(), 1);
}

#[test]
fn a_deployment_of_five_crashing_pods_is_one_incident() {
    let r = rules(serde_json::json!({}));
    let mut book = Tracked::default();
    let pods: Vec<PodView> = (0..5).map(|i| crashing(pod(&format!("web-{i}"), "web"), 4, 95, "Error")).collect();
    let ts = step(&mut book, &pods, &r, 100);
    assert_eq!(opened(&ts), 1);
    let inc = book.incidents.values().next().unwrap();
    assert_eq!(inc.pods.len(), 5);
}

#[test]
fn stuck_reasons_wait_their_grace_and_recover_silently_within_it() {
    let r = rules(serde_json::json!({"alerts": {"checkRunningPods": true, "pendingAfter": "2m"}}));
    let mut p = pod("w", "web");
    p.phase = crate::pod::PodPhase::Pending;
    p.containers[0].set_state(crate::pod::State::waiting("ImagePullBackOff", ""));
    let mut book = Tracked::default();
    assert!(step(&mut book, &[p.clone()], &r, 60).is_empty());
    assert_eq!(book.pending(), 1);
    assert_eq!(book.next_deadline(&r, t(60)), Some(t(120)));
    // Healthy within the grace: dropped, counted.
    assert!(step(&mut book, &[pod("w", "web")], &r, 90).is_empty());
    assert_eq!(book.held_back.get(RECOVERED_IN_GRACE), Some(&1));
    // Stuck past the grace: opened.
    let mut book = Tracked::default();
    step(&mut book, &[p.clone()], &r, 60);
    assert_eq!(opened(&step(&mut book, &[p], &r, 121)), 1);
}

#[test]
fn resolve_waits_for_the_hold_down_and_flapping_does_not_refire() {
    let r = rules(serde_json::json!({"alerts": {"checkRunningPods": true, "resolveAfter": "5m"}}));
    let mut book = Tracked::default();
    let bad = crashing(pod("w", "web"), 3, 0, "Error");
    assert_eq!(opened(&step(&mut book, std::slice::from_ref(&bad), &r, 1)), 1);
    // The crash ages out of the 10m window: healthy from t=600.
    let healthy = pod("w", "web");
    assert!(step(&mut book, std::slice::from_ref(&healthy), &r, 601).is_empty());
    // Back before the hold-down ends: nothing sent, still one incident.
    let again = crashing(pod("w", "web"), 6, 650, "Error");
    assert!(step(&mut book, &[again], &r, 651).is_empty());
    assert!(step(&mut book, std::slice::from_ref(&healthy), &r, 1300).is_empty());
    let ts = step(&mut book, std::slice::from_ref(&healthy), &r, 1300 + 300);
    assert_eq!(ts.len(), 1);
    assert_eq!(ts[0].change, Change::Resolved);
    assert_eq!(book.firing(), 0);
    // Nothing more, and the tombstone is forgotten after the window.
    assert!(step(&mut book, std::slice::from_ref(&healthy), &r, 1700).is_empty());
    step(&mut book, &[healthy], &r, 1600 + 601);
    assert!(book.incidents.is_empty());
}

#[test]
fn escalations_at_10_and_50_restarts() {
    let r = rules(serde_json::json!({}));
    let mut book = Tracked::default();
    let mut changes = Vec::new();
    for (i, restarts) in [3u32, 5, 10, 12, 49, 50, 80].into_iter().enumerate() {
        let at = i64::try_from(i).unwrap() * 10;
        changes.extend(step(&mut book, &[crashing(pod("w", "web"), restarts, at, "Error")], &r, at + 1));
    }
    let kinds: Vec<Change> = changes.into_iter().map(|t| t.change).collect();
    assert_eq!(
        kinds,
        vec![Change::Opened { replaces: None }, Change::Escalated { level: 10 }, Change::Escalated { level: 50 }]
    );
}

#[test]
fn an_old_oom_kill_in_last_state_never_fires_twice() {
    let r =
        rules(serde_json::json!({"alerts": {"checkRunningPods": true, "resolveAfter": "1m", "restartWindow": "10m"}}));
    let mut p = crashing(pod("w", "web"), 1, 0, "OOMKilled");
    p.containers[0].set_state(crate::pod::State::Running { started_at: t(1).into() });
    p.containers[0].set_ready(true);
    let mut book = Tracked::default();
    assert_eq!(opened(&step(&mut book, &[p.clone()], &r, 5)), 1);
    // Still in lastState for the whole window: no second opening.
    for s in (10..600).step_by(30) {
        assert!(step(&mut book, &[p.clone()], &r, s).is_empty());
    }
    // Restored from status after an operator restart (incarnations kept): still nothing.
    let mut restored =
        Tracked { book: Book { incidents: book.incidents.clone(), ..Default::default() }, ..Default::default() };
    assert!(step(&mut restored, &[p.clone()], &r, 300).is_empty());
}

#[test]
fn cooldown_holds_back_a_reopening() {
    let r = rules(serde_json::json!({"cooldown": "1h", "alerts": {"checkRunningPods": true, "resolveAfter": "1m"}}));
    let mut book = Tracked::default();
    assert_eq!(opened(&step(&mut book, &[crashing(pod("w", "web"), 3, 0, "Error")], &r, 1)), 1);
    step(&mut book, &[pod("w", "web")], &r, 601);
    assert_eq!(step(&mut book, &[pod("w", "web")], &r, 662).len(), 1, "resolved");
    // Crashing again 20 minutes later: within the cooldown.
    let ts = step(&mut book, &[crashing(pod("w", "web"), 9, 1800, "Error")], &r, 1801);
    assert!(ts.is_empty(), "{ts:?}");
    assert_eq!(book.held_back.get(COOLDOWN), Some(&1));
    assert_eq!(book.firing(), 1, "status still shows it");
}

#[test]
fn a_new_reason_for_the_same_container_says_what_it_replaces() {
    let r = rules(serde_json::json!({}));
    let mut book = Tracked::default();
    step(&mut book, &[crashing(pod("w", "web"), 3, 0, "Error")], &r, 1);
    let ts = step(&mut book, &[crashing(pod("w", "web"), 4, 2, "OOMKilled")], &r, 3);
    assert_eq!(ts.len(), 1);
    assert_eq!(ts[0].change, Change::Opened { replaces: Some(Reason::CrashLoopBackOff) });
}

// Property: whatever the sequence of pod states, (1) no container
// incarnation is in two notifications, (2) per incident key, notifications
// alternate opened → resolved (escalations only while open), and (3) the
// step never panics. Terminations are faithful to the kubelet: an
// incarnation only appears while its end is within the restart window.
#[derive(Debug, Clone)]
enum Ev {
    Crash {
        pod: u8,
        workload: u8,
        oom: bool,
    },
    Heal {
        pod: u8,
    },
    /// The pod looks healthy for a while (a stale or partial status), its
    /// last termination unchanged when it shows again.
    Hide {
        pod: u8,
        secs: u16,
    },
    Wait {
        secs: u16,
    },
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        (0u8..4, 0u8..2, any::<bool>()).prop_map(|(pod, workload, oom)| Ev::Crash { pod, workload, oom }),
        (0u8..4).prop_map(|pod| Ev::Heal { pod }),
        (0u8..4, 1u16..400).prop_map(|(pod, secs)| Ev::Hide { pod, secs }),
        (1u16..900).prop_map(|secs| Ev::Wait { secs }),
    ]
}

/// Per pod: workload, restarts, last crash (time, OOM).
type PodState = (u8, u32, Option<(i64, bool)>);

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn no_incarnation_is_notified_twice(events in proptest::collection::vec(ev(), 1..120), restart_book in any::<bool>()) {
        let r = rules(serde_json::json!({"cooldown": "0s", "alerts": {"checkRunningPods": true, "resolveAfter": "2m", "restartThreshold": 2}}));
        let mut book = Tracked::default();
        let mut now = 0i64;
        // Per pod: restarts, last crash time and reason.
        let mut state: BTreeMap<u8, PodState> = BTreeMap::new();
        let mut notified: BTreeSet<String> = BTreeSet::new();
        let mut open: BTreeMap<Key, bool> = BTreeMap::new();
        // A healed pod is replaced by a new one (a new UID, new container IDs).
        let mut generation: BTreeMap<u8, u32> = BTreeMap::new();
        let mut hidden_until: BTreeMap<u8, i64> = BTreeMap::new();
        for (i, e) in events.iter().enumerate() {
            match e {
                Ev::Crash { pod: p, workload, oom } => {
                    let s = state.entry(*p).or_insert((*workload, 0, None));
                    s.1 += 1;
                    s.2 = Some((now, *oom));
                }
                Ev::Heal { pod: p } => { state.remove(p); *generation.entry(*p).or_default() += 1; }
                Ev::Hide { pod: p, secs } => { hidden_until.insert(*p, now + i64::from(*secs)); }
                Ev::Wait { secs } => now += i64::from(*secs),
            }
            now += 1;
            let pods: Vec<PodView> = state.iter().map(|(p, (w, restarts, last))| {
                let base = pod(&format!("p{p}g{}", generation.get(p).copied().unwrap_or(0)), &format!("w{w}"));
                let hidden = hidden_until.get(p).is_some_and(|&u| now < u);
                match last {
                    Some((at, oom)) if !hidden => crashing(base, *restarts, *at, if *oom { "OOMKilled" } else { "Error" }),
                    _ => base,
                }
            }).collect();
            if restart_book && i == events.len() / 2 {
                // An operator restart: incidents survive (through status), the rest does not.
                book = Tracked { book: Book { incidents: book.incidents.clone(), ..Default::default() }, ..Default::default() };
            }
            for tr in step(&mut book, &pods, &r, now) {
                for inc in &tr.incarnations {
                    prop_assert!(notified.insert(inc.clone()), "incarnation {} notified twice", inc);
                }
                let was_open = open.get(&tr.key).copied().unwrap_or(false);
                match tr.change {
                    Change::Opened { .. } => { prop_assert!(!was_open, "{} opened twice", tr.key); open.insert(tr.key.clone(), true); }
                    Change::Escalated { .. } => prop_assert!(was_open, "{} escalated while not open", tr.key),
                    Change::Resolved => { prop_assert!(was_open, "{} resolved while not open", tr.key); open.insert(tr.key.clone(), false); }
                }
            }
        }
    }
}

/// `t(s)` as the RFC 3339 text a spec carries.
fn rfc(s: i64) -> String {
    t(s).to_string()
}

#[test]
fn a_silenced_crash_loop_opens_nothing_until_its_silence_ends_then_opens() {
    let r = rules(serde_json::json!({"silences": [{"until": rfc(600), "comment": "node upgrade"}]}));
    let mut book = Tracked::default();
    let bad = |now: i64| crashing(pod("w", "web"), 4, now - 5, "Error");
    assert!(step(&mut book, &[bad(100)], &r, 100).is_empty(), "silenced: nothing sent");
    assert_eq!((book.firing(), book.pending(), book.silenced()), (0, 0, 1));
    let inc = book.incidents.values().next().unwrap();
    assert_eq!(inc.silencing.as_ref().unwrap().by, "spec.silences[0] (node upgrade)");
    // Woken when the silence ends, not every second while it lasts.
    assert_eq!(book.next_deadline(&r, t(100)), Some(t(600)));
    assert!(step(&mut book, &[bad(300)], &r, 300).is_empty());
    // Still crashing when it ends: it opens then.
    let ts = step(&mut book, &[bad(601)], &r, 601);
    assert_eq!(opened(&ts), 1, "{ts:?}");
    assert_eq!(book.silenced(), 0);
}

#[test]
fn a_problem_gone_within_its_silence_is_never_sent() {
    let r = rules(serde_json::json!({"silences": [{"until": rfc(600)}]}));
    let mut book = Tracked::default();
    assert!(step(&mut book, &[crashing(pod("w", "web"), 4, 95, "Error")], &r, 100).is_empty());
    let mut all = Vec::new();
    for now in [200, 700, 1400, 2000] {
        all.extend(step(&mut book, &[pod("w", "web")], &r, now));
    }
    assert!(all.is_empty(), "{all:?}");
    assert!(book.incidents.is_empty());
}

#[test]
fn a_silence_holds_back_escalations_of_a_firing_incident_but_not_its_resolve() {
    let until = 400;
    let silenced = rules(serde_json::json!({"silences": [{"until": rfc(until), "reasons": ["CrashLoopBackOff"]}]}));
    let open = rules(serde_json::json!({}));
    let mut book = Tracked::default();
    assert_eq!(opened(&step(&mut book, &[crashing(pod("w", "web"), 4, 95, "Error")], &open, 100)), 1);
    // The silence is added: ten restarts escalate nothing while it lasts.
    let ts = step(&mut book, &[crashing(pod("w", "web"), 12, 195, "Error")], &silenced, 200);
    assert!(ts.is_empty(), "{ts:?}");
    // It ends with the incident still firing: the escalation goes then.
    let ts = step(&mut book, &[crashing(pod("w", "web"), 12, 395, "Error")], &silenced, until + 1);
    assert!(matches!(ts.as_slice(), [Transition { change: Change::Escalated { level: 10 }, .. }]), "{ts:?}");
    // Silenced again and healthy: the resolve of a notified incident is sent.
    let again = rules(serde_json::json!({"silences": [{"until": rfc(5000)}]}));
    step(&mut book, &[pod("w", "web")], &again, 1700);
    let ts = step(&mut book, &[pod("w", "web")], &again, 2100);
    assert!(matches!(ts.as_slice(), [Transition { change: Change::Resolved, .. }]), "{ts:?}");
}

#[test]
fn a_silence_covers_only_its_pods_and_reasons() {
    let r = rules(serde_json::json!({"silences": [
        {"until": rfc(600), "selector": {"matchLabels": {"tier": "db"}}},
        {"until": rfc(600), "reasons": ["OOMKilled"]},
    ]}));
    let mut db = crashing(pod("db-0", "db"), 4, 95, "Error");
    let mut shape = (*db.shape).clone();
    shape.labels = flotilla_shared::pods::PodLabels::from_pairs([("tier", "db")]);
    db.shape = shape.share();
    let web = crashing(pod("web-0", "web"), 4, 95, "Error");
    let oom = crashing(pod("cache-0", "cache"), 4, 95, "OOMKilled");
    let mut book = Tracked::default();
    let ts = step(&mut book, &[db, web, oom], &r, 100);
    assert_eq!(ts.len(), 1, "only web opens: {ts:?}");
    assert_eq!(ts[0].key.workload.name.as_ref(), "web");
    assert_eq!(book.silenced(), 2);
}

#[test]
fn a_pods_annotation_silences_it_unless_it_ends_more_than_seven_days_ahead() {
    let r = rules(serde_json::json!({}));
    let annotated = |until: i64| {
        let mut p = crashing(pod("w", "web"), 4, 95, "Error");
        let mut shape = (*p.shape).clone();
        shape.silence_until = t(until).into();
        p.shape = shape.share();
        p
    };
    let mut history = RestartHistory::default();
    let f = evaluate([&annotated(600)], &r, &mut history, t(100));
    let s = f.silenced.values().next().expect("silenced");
    assert_eq!(s.by, format!("pod w annotation {}", crate::silence::ANNOTATION));
    assert_eq!(s.until, t(600));
    assert_eq!(f.skipped.get(&crate::observe::Skip::Silenced), Some(&1));
    // Ended: nothing silenced.
    assert!(evaluate([&annotated(50)], &r, &mut history, t(100)).silenced.is_empty());
    // Eight days ahead: refused, the pod alerts.
    let far = evaluate([&annotated(100 + 8 * 86_400)], &r, &mut history, t(100));
    assert!(far.silenced.is_empty());
    assert_eq!(far.refused_annotations.iter().collect::<Vec<_>>(), ["w"]);
}

/// A tenant annotating its own pods cannot mute the platform team's
/// cluster-wide PodAlert: the annotation counts only for PodAlerts of the
/// pod's namespace.
#[test]
fn a_pods_annotation_does_not_silence_a_podalert_of_another_namespace() {
    let spec: crate::crd::PodAlertSpec =
        serde_json::from_value(serde_json::json!({"alerts": {"checkRunningPods": true}, "allNamespaces": true}))
            .unwrap();
    let platform = Rules::new(&spec, "platform", &["platform".to_string()]).unwrap();
    let mut p = crashing(pod("w", "web"), 4, 95, "Error");
    let mut shape = (*p.shape).clone();
    shape.silence_until = t(600).into();
    p.shape = shape.share();
    let mut history = RestartHistory::default();
    let f = evaluate([&p], &platform, &mut history, t(100));
    assert!(f.silenced.is_empty(), "the pod is in namespace a, the PodAlert in platform");
    assert!(!evaluate([&p], &rules(serde_json::json!({})), &mut history, t(100)).silenced.is_empty());
}

/// A namespace's annotation (only who may edit the Namespace object sets
/// it: an admin) silences its problems for every PodAlert, the platform
/// team's cluster-wide one too, within the same seven days.
#[test]
fn a_namespaces_annotation_silences_it_for_every_podalert() {
    let spec: crate::crd::PodAlertSpec =
        serde_json::from_value(serde_json::json!({"alerts": {"checkRunningPods": true}, "allNamespaces": true}))
            .unwrap();
    let silenced = |until: i64| {
        let mut map = crate::silence::NamespaceSilences::new();
        map.insert("a".into(), t(until));
        std::sync::Arc::new(map)
    };
    let mut platform = Rules::new(&spec, "platform", &["platform".to_string()]).unwrap();
    let mut own = rules(serde_json::json!({}));
    let p = crashing(pod("w", "web"), 4, 95, "Error");
    let mut history = RestartHistory::default();
    assert!(evaluate([&p], &own, &mut history, t(100)).silenced.is_empty(), "no annotation: not silenced");
    for r in [&mut platform, &mut own] {
        r.namespace_silences = silenced(600);
        let f = evaluate([&p], r, &mut history, t(100));
        let s = f.silenced.values().next().expect("silenced");
        assert_eq!(s.by, format!("namespace a annotation {}", crate::silence::ANNOTATION));
        assert_eq!(s.until, t(600));
        // Ended, and eight days ahead (refused, said so): not silenced.
        r.namespace_silences = silenced(50);
        assert!(evaluate([&p], r, &mut history, t(100)).silenced.is_empty());
        r.namespace_silences = silenced(100 + 8 * 86_400);
        let far = evaluate([&p], r, &mut history, t(100));
        assert!(far.silenced.is_empty());
        assert_eq!(far.refused_namespaces.iter().collect::<Vec<_>>(), ["a"]);
    }
    // Another namespace's silence does not cover namespace a.
    own.namespace_silences = std::sync::Arc::new([("b".into(), t(600))].into_iter().collect());
    assert!(evaluate([&p], &own, &mut history, t(100)).silenced.is_empty());
}
