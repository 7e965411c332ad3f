#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::observe::tests::{crashing, pod, rules, t};
use crate::pod::{PodPhase, Shape, Stamp};

/// A pod cache for the tests: views by `<namespace>/<name>`.
#[derive(Default)]
struct Cache(BTreeMap<String, Arc<PodView>>);

impl Pods for Cache {
    fn in_namespace(&self, namespace: &str, keep: &mut dyn FnMut(&PodView) -> bool) -> Vec<Arc<PodView>> {
        self.0.values().filter(|p| p.namespace() == namespace && keep(p)).cloned().collect()
    }

    fn all(&self, keep: &mut dyn FnMut(&PodView) -> bool) -> Vec<Arc<PodView>> {
        self.0.values().filter(|p| keep(p)).cloned().collect()
    }
}

impl Cache {
    /// Puts `p` in `ns` and returns the namespace touched.
    fn put(&mut self, ns: &str, mut p: PodView) -> Box<str> {
        p.key = format!("{ns}/{}", p.name()).into();
        self.0.insert(p.key.to_string(), Arc::new(p));
        ns.into()
    }
}

fn healthy(ns: usize, n: usize) -> PodView {
    let mut p = pod(&format!("p{n}"), &format!("w{}", n % 3));
    p.uid = format!("uid-{ns}-{n}").into();
    p
}

const NAMESPACES: [&str; 4] = ["a", "b", "c", "d"];

#[test]
fn a_pod_change_in_one_namespace_evaluates_that_namespace_alone() {
    let r = rules(serde_json::json!({"alerts": {"checkRunningPods": true, "restartWindow": "2m"}}));
    let mut cache = Cache::default();
    for (i, ns) in NAMESPACES.iter().enumerate() {
        for n in 0..50 {
            cache.put(ns, healthy(i, n));
        }
    }
    let mut e = Evaluation::default();
    let first = e.update((Some(1), true), Dirty::default(), &r, &cache, t(0));
    assert_eq!((first.evaluated, first.pods), (4, 200), "the first evaluation reads everything");

    let touched = cache.put("c", crashing(healthy(2, 7), 5, 9, "Error"));
    let next = e.update((Some(1), true), Dirty::Namespaces([touched].into()), &r, &cache, t(10));
    assert_eq!(next.evaluated, 1, "only namespace c is read again");
    assert_eq!(next.pods, 200);
    assert_eq!(next.findings.problems.len(), 1);
    assert_eq!(next.findings.problems[0].key.namespace, "c");
    let next = next.findings.clone();

    // Nothing named and nothing due: nothing read, the same findings.
    let quiet = e.update((Some(1), true), Dirty::default(), &r, &cache, t(20));
    assert_eq!(quiet.evaluated, 0);
    assert_eq!(quiet.findings, &next);
    // Time alone ends the crash (it leaves the restart window): that
    // namespace is read again then, without a pod change.
    let due = next.recheck_at.expect("a crash has a time it leaves the window");
    let ended = e.update((Some(1), true), Dirty::default(), &r, &cache, due);
    assert_eq!(ended.evaluated, 1);
    assert!(ended.findings.problems.is_empty(), "{:?}", ended.findings.problems);

    // The rules changed (a new generation): everything again.
    let edited = e.update((Some(2), true), Dirty::default(), &r, &cache, due);
    assert_eq!(edited.evaluated, 4);
    // A list completed: everything again.
    assert_eq!(e.update((Some(2), true), Dirty::All, &r, &cache, due).evaluated, 4);
    // And at least every FULL_EVERY.
    assert_eq!(
        e.update((Some(2), true), Dirty::default(), &r, &cache, crate::pod::after(due, FULL_EVERY)).evaluated,
        4
    );
}

#[test]
fn a_namespaces_podalert_reads_its_namespace_alone() {
    let r = rules(serde_json::json!({}));
    let mut cache = Cache::default();
    cache.put("a", crashing(healthy(0, 0), 5, 9, "Error"));
    cache.put("b", crashing(healthy(1, 0), 5, 9, "Error"));
    let mut e = Evaluation::default();
    let out = e.update((Some(1), false), Dirty::All, &r, &OneNamespace(&cache, "b"), t(10));
    assert_eq!((out.evaluated, out.pods), (1, 1));
    assert_eq!(out.findings.problems.iter().map(|p| p.key.namespace.as_str()).collect::<Vec<_>>(), ["b"]);
}

#[test]
fn namespaces_without_pods_or_findings_are_not_kept() {
    let r = rules(serde_json::json!({}));
    let mut cache = Cache::default();
    let ns = cache.put("gone", healthy(0, 0));
    let mut e = Evaluation::default();
    e.update((None, true), Dirty::All, &r, &cache, t(0));
    assert_eq!(e.namespaces(), 1);
    cache.0.clear();
    let out = e.update((None, true), Dirty::Namespaces([ns].into()), &r, &cache, t(1));
    assert_eq!((out.pods, e.namespaces()), (0, 0), "a namespace emptied is forgotten");
}

#[test]
fn too_many_namespaces_named_become_all_of_them() {
    let changes = Changes::default();
    let names: Vec<String> = (0..=MAX_NAMED).map(|i| format!("ns-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    changes.touched("uid", &refs[..10], false);
    assert_eq!(changes.take("uid"), Dirty::Namespaces(refs[..10].iter().map(|n| Box::from(*n)).collect()));
    assert_eq!(changes.take("uid"), Dirty::default(), "taken once");
    changes.touched("uid", &refs, false);
    assert_eq!(changes.take("uid"), Dirty::All, "the set stays bounded");
    changes.touched("uid", &[], true);
    assert_eq!(changes.take("uid"), Dirty::All, "a list: everything");
    changes.touched("gone", &refs[..1], false);
    changes.retain(|uid| uid != "gone");
    assert_eq!(changes.take("gone"), Dirty::default());
}

/// One step of a cluster's life: a pod of a namespace changes, or only time passes.
#[derive(Debug, Clone)]
enum Op {
    /// Pod `n` of namespace `ns` crashes (restart count grows by `by`).
    Crash { ns: usize, n: usize, by: u32 },
    /// Pod `n` of namespace `ns` is healthy again (a new pod, count 0).
    Recover { ns: usize, n: usize },
    /// Pod `n` of namespace `ns` is replaced by one that stays Pending (a
    /// problem that only a pod change or a silence changes).
    Pending { ns: usize, n: usize },
    /// Pod `n` of namespace `ns` is deleted.
    Delete { ns: usize, n: usize },
    /// Pod `n` of namespace `ns` is silenced by annotation until `until` seconds ahead.
    Annotate { ns: usize, n: usize, until: i64 },
    /// Only time passes.
    Wait,
}

fn op() -> impl Strategy<Value = Op> {
    let at = (0..NAMESPACES.len(), 0..4usize);
    prop_oneof![
        (at.clone(), 1..3u32).prop_map(|((ns, n), by)| Op::Crash { ns, n, by }),
        at.clone().prop_map(|(ns, n)| Op::Recover { ns, n }),
        at.clone().prop_map(|(ns, n)| Op::Pending { ns, n }),
        at.clone().prop_map(|(ns, n)| Op::Delete { ns, n }),
        (at, until()).prop_map(|((ns, n), until)| Op::Annotate { ns, n, until }),
        Just(Op::Wait),
        Just(Op::Wait),
    ]
}

/// A silence's end, seconds ahead: soon, or about seven days ahead (refused
/// until it comes within them).
fn until() -> impl Strategy<Value = i64> {
    const WEEK: i64 = 7 * 24 * 3600;
    prop_oneof![10..400i64, (WEEK - 200)..(WEEK + 400)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The kept evaluation, told only which namespaces changed, finds what
    /// one evaluation of every pod finds, step after step, while crashes
    /// leave the restart window, silences end and pods come and go.
    #[test]
    fn the_kept_evaluation_finds_what_a_full_one_finds(
        ops in prop::collection::vec((op(), 5..90i64), 1..60),
        silenced_until in until(),
        namespace_until in until(),
    ) {
        let mut r = rules(serde_json::json!({
            "alerts": {"checkRunningPods": true, "restartThreshold": 3, "restartWindow": "2m"},
            "silences": [{"until": t(silenced_until).to_string(), "reasons": ["OOMKilled"]}],
        }));
        // Namespace b's silence annotation, as the namespace watch saw it.
        r.namespace_silences = Arc::new([(Arc::from("b"), t(namespace_until))].into_iter().collect());
        let mut cache = Cache::default();
        let mut restarts: BTreeMap<(usize, usize), u32> = BTreeMap::new();
        let mut kept = Evaluation::default();
        let mut reference = RestartHistory::default();
        let mut now = 0;
        for (op, wait) in ops {
            now += wait;
            let mut dirty = BTreeSet::new();
            match op {
                Op::Crash { ns, n, by } => {
                    let count = restarts.entry((ns, n)).or_default();
                    *count += by;
                    let reason = if count.is_multiple_of(5) { "OOMKilled" } else { "Error" };
                    dirty.insert(cache.put(NAMESPACES[ns], crashing(healthy(ns, n), *count, now - 30, reason)));
                }
                Op::Recover { ns, n } => {
                    restarts.remove(&(ns, n));
                    let mut p = healthy(ns, n);
                    p.uid = format!("uid-{ns}-{n}-{now}").into();
                    dirty.insert(cache.put(NAMESPACES[ns], p));
                }
                Op::Pending { ns, n } => {
                    restarts.remove(&(ns, n));
                    let mut p = healthy(ns, n);
                    p.uid = format!("uid-{ns}-{n}-{now}").into();
                    p.phase = PodPhase::Pending;
                    p.containers[0].set_ready(false);
                    p.containers[0].set_state(crate::pod::State::waiting("ContainerCreating", ""));
                    dirty.insert(cache.put(NAMESPACES[ns], p));
                }
                Op::Delete { ns, n } => {
                    restarts.remove(&(ns, n));
                    if cache.0.remove(&format!("{}/p{n}", NAMESPACES[ns])).is_some() {
                        dirty.insert(NAMESPACES[ns].into());
                    }
                }
                Op::Annotate { ns, n, until } => {
                    if let Some(p) = cache.0.get(&format!("{}/p{n}", NAMESPACES[ns])) {
                        let mut p = (**p).clone();
                        let stamp = Stamp::from(t(now + until));
                        p.shape = Shape { silence_until: stamp, ..(*p.shape).clone() }.share();
                        dirty.insert(cache.put(NAMESPACES[ns], p));
                    }
                }
                Op::Wait => {}
            }
            let all = cache.all(&mut |_| true);
            let full = evaluate(all.iter().map(AsRef::as_ref), &r, &mut reference, t(now));
            let got = kept.update((Some(1), true), Dirty::Namespaces(dirty), &r, &cache, t(now));
            prop_assert_eq!(got.findings, &full, "at {}s", now);
            prop_assert_eq!(got.pods, all.len());
        }
    }
}
