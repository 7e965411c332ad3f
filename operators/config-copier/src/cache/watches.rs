//! The watches that feed [`Caches`]: possible sources (through their
//! [`crate::sources::SourceIndex`]), namespaces and copies (metadata only,
//! on [`flotilla_shared::projection`] stores), and whom each change wakes.

use std::sync::Arc;

use flotilla_shared::health::WatchHealth;
use flotilla_shared::pods::{Touched, concerned};
use flotilla_shared::projection::{Change, Fed};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde::de::DeserializeOwned;

use super::{Caches, copy_key_str, lock};
use crate::copy::{COPIES_SELECTOR, Observed, RuleId};
use crate::crd::SourceKind;
use crate::plan::NamespaceInfo;

impl Caches {
    /// Watches `kind`'s possible sources until the stream ends; a change
    /// wakes the rules of that kind in the namespaces it touched, a
    /// complete list every rule of that kind (those waiting for it).
    pub async fn watch_sources(self: Arc<Self>, kind: SourceKind, health: WatchHealth) {
        let Some(index) = self.sources.get(&kind).cloned() else { return };
        self.watching(&health);
        let this = Arc::clone(&self);
        let changed = move |touched: Touched<'_>| {
            if touched.namespaces.is_empty() && !touched.listed {
                return;
            }
            let rules: Vec<_> = this.rules.state().into_iter().filter(|r| r.spec.kind == kind).collect();
            // No rule reads other namespaces' sources: none is woken by all.
            for rule in concerned(&rules, touched, |_| false) {
                if let Some(ns) = &rule.namespace {
                    this.trigger(&RuleId::new(ns, &rule.name));
                }
            }
        };
        index.watch(self.client.clone(), self.scope.clone(), health, changed).await;
    }

    /// Watches namespaces (metadata only) until the stream ends. Every
    /// complete list (a relist too) and every change wakes every rule: any
    /// rule may target any namespace.
    pub async fn watch_namespaces(self: Arc<Self>, health: WatchHealth) {
        let Some(writer) = lock(&self.writers).namespaces.take() else { return };
        self.watching(&health);
        let api: Api<PartialObjectMeta<Namespace>> = Api::all(self.client.clone());
        let cfg = watcher::Config::default();
        let project = |o: PartialObjectMeta<Namespace>| {
            let info =
                NamespaceInfo { labels: o.labels().clone(), terminating: o.metadata.deletion_timestamp.is_some() };
            (o.name_any(), info)
        };
        writer
            .feed(health.watcher(api, cfg), project, |fed| match fed {
                Fed::Listed(_) => {
                    health.synced();
                    self.trigger_all();
                }
                Fed::Changed(changes) if !changes.is_empty() => self.trigger_all(),
                Fed::Changed(_) => {}
            })
            .await;
    }

    /// Watches the copies of one kind: metadata only, by the ownership label.
    pub async fn watch_copies(self: Arc<Self>, kind: SourceKind, health: WatchHealth) {
        match kind {
            SourceKind::ConfigMap => self.watch_copies_of::<ConfigMap>(kind, health).await,
            SourceKind::Secret => self.watch_copies_of::<Secret>(kind, health).await,
        }
    }

    async fn watch_copies_of<K>(self: Arc<Self>, kind: SourceKind, health: WatchHealth)
    where
        K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let Some(writer) = lock(&self.writers).copies.remove(&kind) else { return };
        self.watching(&health);
        let api: Api<PartialObjectMeta<K>> = Api::all(self.client.clone());
        let cfg = watcher::Config::default().labels(COPIES_SELECTOR);
        let fm = self.field_manager.clone();
        let project = |o: PartialObjectMeta<K>| {
            let key = copy_key_str(&o.namespace().unwrap_or_default(), &o.name_any());
            let observed = serde_json::to_value(&o).ok().and_then(|v| Observed::from_json(kind, &v, false, &fm));
            (key, observed)
        };
        writer
            .feed(health.watcher(api, cfg), project, |fed| {
                for c in fed.changes() {
                    self.copy_changed(c);
                }
                // Every complete list wakes every rule: the first ends the
                // wait of the rules of this kind (`copies_ready`); a relist
                // follows a lost watch, after which every rule converges again.
                if let Fed::Listed(_) = fed {
                    health.synced();
                    self.trigger_all();
                }
            })
            .await;
    }

    /// A copy changed: its owner (old and new) reconciles, unless it is the
    /// echo of our own write. A copy gone or changed hands also wakes the
    /// rules that want its key: one that found it another rule's may now
    /// take it (without this it waited for its conflict re-check).
    fn copy_changed(&self, c: &Change<Option<Observed>>) {
        let old = c.old.as_deref().and_then(Option::as_ref);
        if let Some(new) = c.new.as_deref().and_then(Option::as_ref) {
            let ours = lock(&self.known).get(&new.key) == new.resource_version.as_ref();
            if !ours {
                self.trigger_owner(new);
            }
            if let Some(old) = old
                && old.owner != new.owner
            {
                self.trigger_owner(old);
                self.wake(self.claims().wanting(&new.key));
            }
        } else if let Some(old) = old {
            self.trigger_owner(old);
            self.wake(self.claims().wanting(&old.key));
        }
    }
}
