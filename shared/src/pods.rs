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

/// The rules (namespaced objects of an operator) that a change of the pods
/// in `namespaces` (sorted, as `watch_pods` hands them) concerns: those in
/// one of those namespaces, and those `everywhere` says look at every
/// namespace.
pub fn concerned<'a, K>(
    rules: &'a [std::sync::Arc<K>],
    namespaces: &'a [&str],
    everywhere: impl Fn(&K) -> bool + 'a,
) -> impl Iterator<Item = kube::runtime::reflector::ObjectRef<K>> + 'a
where
    K: kube::Resource<DynamicType = ()> + 'a,
{
    rules
        .iter()
        .filter(move |rule| {
            everywhere(rule) || namespaces.binary_search(&rule.meta().namespace.as_deref().unwrap_or_default()).is_ok()
        })
        .map(|rule| kube::runtime::reflector::ObjectRef::from_obj(rule.as_ref()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::sync::Arc;

    fn rule(ns: &str, name: &str) -> Arc<ConfigMap> {
        let mut cm = ConfigMap::default();
        cm.metadata.namespace = Some(ns.into());
        cm.metadata.name = Some(name.into());
        Arc::new(cm)
    }

    #[test]
    fn the_rules_of_the_touched_namespaces_and_those_of_every_namespace() {
        let rules = [rule("a", "r1"), rule("b", "r2"), rule("c", "everywhere"), rule("d", "r4")];
        let names = |namespaces: &[&str]| -> Vec<String> {
            concerned(&rules, namespaces, |r: &ConfigMap| r.metadata.name.as_deref() == Some("everywhere"))
                .map(|r| r.name)
                .collect()
        };
        assert_eq!(names(&["a", "d"]), ["r1", "everywhere", "r4"]);
        assert_eq!(names(&["b"]), ["r2", "everywhere"]);
        assert_eq!(names(&[]), ["everywhere"]);
    }
}
