//! The growth phase: each operator's memory per object **added**.
//!
//! The start-up figure (RSS above idle divided by the objects held) charges
//! every fixed cost to the objects: the rules and their state, a
//! cluster-wide rule's per-namespace evaluation, the code first run at
//! scale, the queues. Here the objects grow by half again while everything
//! else stays (the same rules and namespaces): half as many pods again (each
//! namespace's Deployment scaled up), half as many Services again, and a
//! second config per team (about as many team copies again). The RSS
//! growth over the objects added is the marginal cost, the figure a
//! projection to a larger cluster needs.

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use super::populate::{self, Layout};
use crate::util::say;

/// Grows the cluster from `layout` to `layout.grown()` and waits for the
/// new pods to be in place.
pub async fn grow(client: &Client, layout: &Layout) -> anyhow::Result<()> {
    let grown = layout.grown();
    let (p, g) = (&layout.preset, &grown.preset);
    say(&format!(
        "growth: {} more pods, {} more Services, a second config for each of {} teams",
        g.pods - p.pods,
        g.services - p.services,
        layout.rule_teams().len()
    ));
    let scaled: Vec<(String, usize)> = (0..p.namespaces)
        .filter(|i| grown.replicas(*i) > layout.replicas(*i))
        .map(|i| (Layout::namespace(i), grown.replicas(i)))
        .collect();
    let started = std::time::Instant::now();
    let n = scaled.len();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(scaled.into_iter().map(|(ns, replicas)| {
        let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        async move {
            let patch = json!({"spec": {"replicas": replicas}});
            api.patch("app", &PatchParams::default(), &Patch::Merge(&patch)).await?;
            anyhow::Ok(())
        }
    }))
    .buffer_unordered(populate::CREATES)
    .collect()
    .await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    eprintln!("    {n} Deployments scaled up in {:.1?}", started.elapsed());

    let services = (p.services..g.services)
        .map(|k| populate::service_number(&grown, k))
        .collect::<anyhow::Result<Vec<Service>>>()?;
    populate::create_all(populate::namespaced(client), services, "more Services").await?;

    let configs = layout
        .rule_teams()
        .map(|t| populate::team_config(t, "team-config-2"))
        .collect::<anyhow::Result<Vec<ConfigMap>>>()?;
    populate::create_all(populate::namespaced(client), configs, "more team configs").await?;

    populate::wait_for_pods(client, &grown).await
}

/// Objects added at least for a per-object figure: RSS moves by about
/// ±0.5 MiB between runs, ±5 KiB over 100 objects.
const MIN_ADDED: usize = 100;

/// The marginal bytes per object: RSS growth (MiB) over the objects added
/// (negative when the allocator gave back more than the growth took: the
/// noise shows, it is not hidden).
pub fn per_object_added(rss_before: f64, rss_after: f64, held_before: usize, held_after: usize) -> Option<f64> {
    let added = held_after.saturating_sub(held_before);
    (added >= MIN_ADDED).then(|| (rss_after - rss_before) * 1024.0 * 1024.0 / added as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::scale::Preset;

    #[test]
    fn growth_adds_half_the_pods_and_services_and_keeps_the_rest() {
        let layout = Layout { preset: Preset::named("small").unwrap(), team_configs: 1 };
        let grown = layout.grown();
        assert_eq!(grown.preset.pods, 15_000);
        assert_eq!(grown.preset.services, 3_000);
        assert_eq!(grown.preset.namespaces, layout.preset.namespaces);
        let pods: usize = (0..grown.preset.namespaces).map(|i| grown.replicas(i)).sum();
        assert_eq!(pods, 15_000, "the scaled Deployments make exactly the grown count");
        assert!((0..layout.preset.namespaces).all(|i| grown.replicas(i) >= layout.replicas(i)));
        assert_eq!(grown.crashing_deployments(), layout.crashing_deployments());
        // 199 team rules into 9 namespaces each, the platform's into 1,999
        // (what the small run's operator made: 3,790, then 5,581).
        assert_eq!(layout.expected_copies(), 3_790);
        assert_eq!(grown.expected_copies(), 5_581);
    }

    #[test]
    fn the_marginal_cost_is_the_growth_over_the_objects_added() {
        assert_eq!(per_object_added(20.0, 21.0, 10_000, 12_048), Some(512.0));
        assert_eq!(per_object_added(20.0, 21.0, 10_000, 10_000), None);
        assert_eq!(per_object_added(20.0, 21.0, 30, 32), None, "too few added to say");
    }
}
