//! A projection of the Pods an operator watches, and the namespaces each
//! change touched: how pod-alert and pod-debugger keep their pod caches
//! small and trigger the rules of the namespaces whose pods changed.

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use crate::health::WatchHealth;
use crate::projection::{Writer, touched};

/// Feeds `writer` with `view` of each Pod `api` lists and watches (keyed
/// `<namespace>/<name>`), marks `health` synced after the first list, and
/// after each event hands `changed` the namespaces whose pods' views
/// changed (sorted, without repeats; empty when nothing did).
///
/// Lists in pages of 50: a page of full Pods is what peaks memory at start,
/// and each becomes its small view at once.
pub async fn watch_pods<T: PartialEq>(
    api: Api<Pod>,
    writer: Writer<T>,
    view: impl Fn(&Pod) -> T,
    namespace_of: impl for<'a> Fn(&'a T) -> &'a str,
    health: WatchHealth,
    mut changed: impl FnMut(&[&str]),
) {
    let watch = health.track(watcher(api, watcher::Config::default().any_semantic().page_size(50)));
    let project = |pod: Pod| (format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()), view(&pod));
    writer.run(watch, project, move || health.synced(), |changes| changed(&touched(changes, &namespace_of))).await;
}
