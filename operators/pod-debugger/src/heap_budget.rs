//! The guard on pod-debugger's memory per pod (issue 28): what its pod cache keeps
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
/// 856 measured before a kept label's key was shared (`LabelKeys`), 818
/// after; 649 with the namespace, container names and label values
/// interned (`flotilla_shared::intern`); 597 with the UID as 16 bytes
/// (`flotilla_shared::uid::Uid`), 581 with the store's keys boxed; 589
/// with the slot for volumes (issue 32: kept only in namespaces where a
/// PodDebugger mounts volumes, so not here); 533 with the pod's name and
/// its container lists boxed (`Box<str>`, `Box<[_]>`: no spare capacity,
/// 8 bytes less each); 256 with the key held once, in the view
/// (`projection::keyed_store`), the labels and container names a
/// workload's pods share held once (`pod::Shape`), the running containers
/// as bits and the debug containers boxed (most pods have none); 245 with
/// the UID and the kept labels in 16 bytes each; 252 with the bits of
/// crash-looping containers (issue 32: debug copies).
const BUDGET: usize = 260;

#[test]
fn the_pod_cache_holds_at_most_its_budget_per_pod() {
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
        "pod-debugger holds {per_pod} B per pod ({with_malloc} B with malloc's per-chunk cost): {at_limit:.0} MiB at 150,000 pods"
    );
    assert!(
        with_malloc <= BUDGET,
        "pod-debugger holds {with_malloc} B per pod in its cache, over the budget of {BUDGET} B"
    );
}
