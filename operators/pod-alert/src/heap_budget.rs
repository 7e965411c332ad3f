//! The guard on pod-alert's memory per pod (issue 28): what its pod cache keeps
//! of realistic pods (`flotilla_testenv::fixtures::deployment_pod`) while
//! a selector references one label key — the view, its key and the map's
//! slot — counted by the test allocator (`flotilla_testenv::heap`), not
//! sampled from RSS. At 150,000 pods (Kubernetes' limit) the budget is what
//! fits the chart's 128Mi next to the idle process; RSS figures are
//! `cargo xtask bench scale`'s.

use flotilla_shared::pods::LabelKeys;
use flotilla_shared::projection;
use flotilla_testenv::fixtures::held_per_pod;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::watcher;

use crate::pod::view;

/// Bytes the cache may hold per pod (malloc's per-chunk cost included):
/// 1,396 measured before `Box<str>` strings and the boxed rare parts
/// (`pod::Trouble`), 1,047 after, 973 with container IDs held as bytes
/// (`pod::ContainerId`) and the usual termination reasons not allocated,
/// 935 with label keys shared (`LabelKeys`), 853 with the namespace, the
/// workload's and containers' names and label values interned
/// (`flotilla_shared::intern`), 809 with the UID as 16 bytes
/// (`flotilla_shared::uid::Uid`), 702 with times as 8-byte seconds
/// (`pod::Stamp`) and a waiting container's reason and message boxed,
/// 685 with the store's keys boxed, 645 with the phase and restart policy
/// held as bytes (`pod::PodPhase`, `pod::RestartPolicy`) and the
/// workload's kind interned; 402 with the key held once, in the view
/// (`projection::keyed_store`), what a workload's pods share held once
/// (`pod::Shape`) and exits older than any restart window not kept; 394
/// with the Ready transition kept only while the pod is not Ready; 363
/// with the containers' names in the shape (a list most workloads share)
/// instead of 16 bytes per container; 365 counted from swept interners
/// (what another test interned is not free: [`crate::pod::sweep_interned`]),
/// 341 with a Deployment pod's own name no longer interned (unique, it sat
/// in the table until the next sweep), 331 with times as 4-byte seconds,
/// 315 with a container in 24 bytes (its state and last exit behind one
/// pointer only when it is not simply running: `pod::ContainerView`), 305
/// with the UID in 16 bytes (`flotilla_shared::uid::Uid`) and the kept
/// labels in 16 (`flotilla_shared::pods::PodLabels`), 289 with a container
/// in 16 (its flags and restart count in one word: `pod::ContainerView`;
/// the fixture's two containers, 48 bytes, were a 64-byte malloc chunk, 32
/// are a 48-byte one). Of those, ~60 B are the interned shapes and names
/// of this fixture's 500 workloads of 4 pods each (fewer per pod with more
/// replicas; the interners' tables, just past a power of two at 500, are
/// ~13 of them); the view in its `Arc` (72 + 16 B), its key (42), the
/// container list (32) and the B-tree's slot are the rest, in three
/// allocations. Issue 28's target is 300.
const BUDGET: usize = 300;

#[test]
fn the_pod_cache_holds_at_most_its_budget_per_pod() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // From interners holding only what is in use: what another test
    // interned would otherwise be counted as free.
    crate::pod::sweep_interned();
    let keys = LabelKeys::new();
    keys.set((0..100).map(|t| (Some(format!("team-{t:03}")), "app.kubernetes.io/name".to_string())));
    // Fed as the pod watch feeds it (shared::pods::watch_pods).
    let (per_pod, with_malloc) = held_per_pod(2000, |pods| {
        let (store, mut writer) = projection::keyed_store();
        for pod in pods {
            writer.apply(watcher::Event::Apply(pod.clone()), |pod: Pod| {
                (format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()), view(&pod, &keys))
            });
        }
        assert_eq!(store.len(), pods.len());
        Box::new((store, writer))
    });
    let at_limit = with_malloc as f64 * 150_000.0 / (1024.0 * 1024.0);
    println!(
        "pod-alert holds {per_pod} B per pod ({with_malloc} B with malloc's per-chunk cost): {at_limit:.0} MiB at 150,000 pods"
    );
    assert!(
        with_malloc <= BUDGET,
        "pod-alert holds {with_malloc} B per pod in its cache, over the budget of {BUDGET} B"
    );
}

/// Bytes a cluster-wide PodAlert's kept evaluation ([`crate::evaluation`])
/// may hold per namespace of healthy pods: its key, counts and empty
/// restart history, and its map slot (a namespace with problems holds
/// them besides). 190 measured; 10,000 namespaces are then ~2 MiB per
/// cluster-wide PodAlert.
const EVALUATION_BUDGET_PER_NAMESPACE: usize = 200;

/// Bytes the restart history may hold per container that restarted once
/// (its count sample, to tell later restarts within `restartWindow`):
/// ~230 with the samples in a `Vec`, ~130 with one held inline. Per
/// PodAlert reading the pod.
const HISTORY_BUDGET_PER_RESTARTED_CONTAINER: usize = 150;

/// The budget tests one at a time: both intern the fixture's names, and a
/// table grown by one would be counted on the other's thread.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// What a kept evaluation of 4,000 fixture pods in 1,000 namespaces holds
/// (malloc's per-chunk cost included), and the containers that restarted.
fn kept_evaluation(restarts: bool) -> (usize, usize) {
    use crate::evaluation::{Dirty, Evaluation};

    let keys = LabelKeys::new();
    let (store, mut writer) = projection::keyed_store();
    let mut restarted = 0;
    for i in 0..4000 {
        let mut pod = flotilla_testenv::fixtures::deployment_pod(i);
        pod.metadata.namespace = Some(format!("ns-{:05}", i % 1000));
        for c in pod.status.iter_mut().flat_map(|s| s.container_statuses.iter_mut().flatten()) {
            if !restarts {
                (c.restart_count, c.last_state) = (0, None);
            }
            restarted += usize::from(c.restart_count > 0);
        }
        writer.apply(watcher::Event::Apply(pod), |pod: Pod| {
            (format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()), view(&pod, &keys))
        });
    }
    let r = crate::observe::tests::rules(serde_json::json!({}));
    let now = k8s_openapi::jiff::Timestamp::now();
    let (evaluation, heap) = flotilla_testenv::heap::heap_of(|| {
        let mut e = Box::new(Evaluation::default());
        let out = e.update((None, true), Dirty::All, &r, &store, now);
        assert_eq!((out.pods, out.findings.problems.len()), (4000, 0));
        e
    });
    assert_eq!(evaluation.namespaces(), 1000);
    (heap.with_malloc_overhead(), restarted)
}

#[test]
fn a_kept_evaluation_holds_at_most_its_budget_per_namespace_and_restarted_container() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    crate::pod::sweep_interned();
    let (healthy, _) = kept_evaluation(false);
    let per_namespace = healthy / 1000;
    let (with_restarts, restarted) = kept_evaluation(true);
    let per_restarted = (with_restarts.saturating_sub(healthy)) / restarted.max(1);
    println!(
        "a kept evaluation holds {per_namespace} B per namespace, and {per_restarted} B per restarted container ({restarted} of 8,000) (malloc's per-chunk cost included)"
    );
    assert!(restarted > 1000, "the fixture's sidecars restarted: {restarted}");
    assert!(
        per_namespace <= EVALUATION_BUDGET_PER_NAMESPACE,
        "a kept evaluation holds {per_namespace} B per namespace, over the budget of {EVALUATION_BUDGET_PER_NAMESPACE} B"
    );
    assert!(
        per_restarted <= HISTORY_BUDGET_PER_RESTARTED_CONTAINER,
        "the restart history holds {per_restarted} B per restarted container, over the budget of {HISTORY_BUDGET_PER_RESTARTED_CONTAINER} B"
    );
}
