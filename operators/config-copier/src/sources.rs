//! Every object a CopyRule may copy, for all rules at once: one
//! metadata-only watch per kind over the operator's scope, copies left out
//! by the API server (`!flotilla.dev/copy-rule`).
//!
//! Not one watch per rule: each was its own API connection, and 200 rules
//! held 210 connections and about 45 MiB (`cargo xtask bench scale small`,
//! 62 MiB settled at 3,790 copies; 1,000 rules would have held 1,000).
//! Only namespaces with a rule of the kind are held
//! ([`LabelKeys::only_wanted_namespaces`]); there an object is held as its
//! name, resourceVersion and the label keys a rule *in its namespace* reads ([`LabelKeys`]: one tenant's selectors
//! never change what is kept of another's objects; a key no view holds yet
//! starts a new list). No payload: reads fetch that, bounded by the byte
//! budget.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use flotilla_shared::health::WatchHealth;
use flotilla_shared::intern::Interner;
use flotilla_shared::pods::{LabelKeys, NAMESPACE_MARK, PodLabels, Touched, watch_labelled};
use flotilla_shared::projection::{self, ns_key};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use kube::{Api, Client};

use crate::copy::{NOT_A_COPY, ResourceVersion, RuleId, SourceMeta};
use crate::crd::SourceKind;
use crate::plan::SourceSelection;

/// Metadata list pages: no payload, a few hundred bytes an object.
const PAGE_SIZE: u32 = 500;

/// What is held of a possible source, under its key `<namespace>/<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceView {
    /// A number when it is one: no allocation (issue 28).
    pub resource_version: Option<ResourceVersion>,
    /// Only the keys a rule in this namespace reads: shared by every
    /// source that has the same (most have none, or the one value a
    /// selector asks for; issue 28).
    pub labels: Arc<PodLabels>,
}

/// One kind's possible sources, and the label keys the rules read.
pub struct SourceIndex {
    kind: SourceKind,
    store: projection::Store<SourceView>,
    writer: Mutex<Option<projection::Writer<SourceView>>>,
    keys: LabelKeys,
    /// The label keys each rule of this kind reads.
    rules: Mutex<HashMap<RuleId, BTreeSet<String>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SourceIndex {
    pub fn new(kind: SourceKind) -> Self {
        let (store, writer) = projection::store();
        Self {
            kind,
            store,
            writer: Mutex::new(Some(writer)),
            keys: LabelKeys::only_wanted_namespaces(),
            rules: Mutex::default(),
        }
    }

    /// `rule`'s sources (those `selection` selects in its namespace), once
    /// the index is listed with the label keys its selector reads; `None`
    /// until then (the first call asks for a new list when a key is new).
    pub fn sources(&self, rule: &RuleId, selection: &SourceSelection) -> Option<Vec<SourceMeta>> {
        // The mark: the namespace's objects are held even when the rule
        // selects by names alone.
        let keys: BTreeSet<String> =
            selection.selector.iter().flat_map(|s| s.keys()).chain([NAMESPACE_MARK]).map(str::to_string).collect();
        {
            let mut rules = lock(&self.rules);
            if rules.get(rule) != Some(&keys) {
                rules.insert(rule.clone(), keys.clone());
                self.keys.set(wanted(&rules));
            }
        }
        if !self.store.is_ready() || !self.keys.covers(Some(&rule.namespace), keys.iter().map(String::as_str)) {
            return None;
        }
        let ns = rule.namespace.as_str();
        Some(self.store.select_under(&format!("{ns}/"), |key, v| {
            let name = ns_key::name(key);
            selection.selects_kept(name, &v.labels).then(|| SourceMeta {
                name: name.to_string(),
                resource_version: v.resource_version.as_ref().map(ToString::to_string),
            })
        }))
    }

    /// Forgets a rule's label keys (deleted, invalid, or of the other kind now).
    pub fn forget(&self, rule: &RuleId) {
        let mut rules = lock(&self.rules);
        if rules.remove(rule).is_some() {
            self.keys.set(wanted(&rules));
        }
    }

    /// Forgets the keys of rules not in `live`.
    pub fn retain(&self, live: &std::collections::HashSet<RuleId>) {
        let mut rules = lock(&self.rules);
        let before = rules.len();
        rules.retain(|id, _| live.contains(id));
        if rules.len() != before {
            self.keys.set(wanted(&rules));
        }
    }

    /// Whether `namespace/name` is still a possible source.
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        self.store.get(&format!("{namespace}/{name}")).is_some()
    }

    /// Watches the kind (in `scope`, or every namespace) until the stream
    /// ends, handing `changed` what each event touched.
    pub async fn watch(
        self: Arc<Self>,
        client: Client,
        scope: Option<String>,
        health: WatchHealth,
        changed: impl FnMut(Touched<'_>),
    ) {
        match self.kind {
            SourceKind::ConfigMap => self.watch_of::<ConfigMap>(client, scope, health, changed).await,
            SourceKind::Secret => self.watch_of::<Secret>(client, scope, health, changed).await,
        }
    }

    async fn watch_of<K>(
        self: Arc<Self>,
        client: Client,
        scope: Option<String>,
        health: WatchHealth,
        changed: impl FnMut(Touched<'_>),
    ) where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + 'static,
    {
        let Some(writer) = lock(&self.writer).take() else { return };
        let api: Api<PartialObjectMeta<K>> = match &scope {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        };
        let config = watcher::Config::default().labels(NOT_A_COPY).page_size(PAGE_SIZE);
        let keys = self.keys.clone();
        let view = move |o: &PartialObjectMeta<K>| view(&keys, o);
        watch_labelled(api, config, writer, view, self.keys.clone(), health, changed).await;
    }
}

/// The kept labels of every possible source, shared (bounded as
/// [`flotilla_shared::intern::names`] is).
static LABELS: LazyLock<Interner<PodLabels>> = LazyLock::new(Default::default);

/// What is held of `o`.
pub(crate) fn view<K: kube::Resource<DynamicType = ()>>(keys: &LabelKeys, o: &PartialObjectMeta<K>) -> SourceView {
    SourceView {
        labels: LABELS
            .share(keys.keep(o.metadata.namespace.as_deref().unwrap_or_default(), o.metadata.labels.as_ref())),
        resource_version: o.metadata.resource_version.as_deref().map(ResourceVersion::parse),
    }
}

/// The keys every rule reads, scoped to the rule's namespace.
fn wanted(rules: &HashMap<RuleId, BTreeSet<String>>) -> Vec<(Option<String>, String)> {
    rules.iter().flat_map(|(id, keys)| keys.iter().map(|k| (Some(id.namespace.clone()), k.clone()))).collect()
}
