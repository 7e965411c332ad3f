//! What config-copier watches, kept small: namespaces (metadata only),
//! copies (selected by the ownership labels) and each rule's sources
//! (selected server-side by the rule's selector, in the rule's namespace
//! only). Objects are reduced on arrival (no managedFields, no payload for
//! copies: only hashes), and every change triggers the rules concerned.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use futures::channel::mpsc::UnboundedSender;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use tokio::task::JoinHandle;

use crate::copy::{COPIES_SELECTOR, CopyKey, Existing, NOT_A_COPY, RuleId, Source};
use crate::crd::{CopyRule, SourceKind};
use crate::metrics::CopierMetrics;
use crate::plan::NamespaceInfo;

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}
fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

pub fn api_resource(kind: SourceKind) -> ApiResource {
    match kind {
        SourceKind::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
        SourceKind::Secret => ApiResource::erase::<Secret>(&()),
    }
}

/// Everything the reconciler reads instead of asking the API.
pub struct Caches {
    client: Client,
    trigger: UnboundedSender<ObjectRef<CopyRule>>,
    rules: Store<CopyRule>,
    metrics: CopierMetrics,
    namespaces: RwLock<Option<HashMap<String, NamespaceInfo>>>,
    copies: RwLock<CopyIndex>,
    sources: Mutex<HashMap<RuleId, SourceWatch>>,
}

#[derive(Default)]
struct CopyIndex {
    /// Kinds whose initial list has been seen.
    ready: HashSet<SourceKind>,
    by_key: HashMap<CopyKey, Existing>,
    /// Ownership label value → keys.
    by_owner: HashMap<String, HashSet<CopyKey>>,
}

impl CopyIndex {
    fn insert(&mut self, e: Existing) {
        self.remove(&e.key);
        if let Some(o) = &e.owner {
            self.by_owner.entry(o.label.clone()).or_default().insert(e.key.clone());
        }
        self.by_key.insert(e.key.clone(), e);
    }

    fn remove(&mut self, key: &CopyKey) -> Option<Existing> {
        let old = self.by_key.remove(key)?;
        if let Some(o) = &old.owner
            && let Some(set) = self.by_owner.get_mut(&o.label)
        {
            set.remove(key);
            if set.is_empty() {
                self.by_owner.remove(&o.label);
            }
        }
        Some(old)
    }
}

/// One rule's source watch.
struct SourceWatch {
    kind: SourceKind,
    query: String,
    state: Arc<RwLock<SourceSet>>,
    task: JoinHandle<()>,
}

impl Drop for SourceWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Default)]
struct SourceSet {
    ready: bool,
    last_error: Option<String>,
    items: BTreeMap<String, Arc<Source>>,
}

/// A rule's sources as last seen.
pub enum Sources {
    /// The initial list has not arrived yet (`Some`: why the watch fails).
    NotReady(Option<String>),
    Ready(Vec<Arc<Source>>),
}

impl Caches {
    pub fn new(
        client: Client,
        rules: Store<CopyRule>,
        trigger: UnboundedSender<ObjectRef<CopyRule>>,
        metrics: CopierMetrics,
    ) -> Arc<Self> {
        Arc::new(Self {
            client,
            trigger,
            rules,
            metrics,
            namespaces: RwLock::new(None),
            copies: RwLock::new(CopyIndex::default()),
            sources: Mutex::new(HashMap::new()),
        })
    }

    fn trigger(&self, rule: &RuleId) {
        let _ = self.trigger.unbounded_send(ObjectRef::new(&rule.name).within(&rule.namespace));
    }

    fn trigger_all(&self) {
        for r in self.rules.state() {
            if let Some(ns) = r.namespace() {
                self.trigger(&RuleId::new(ns, r.name_any()));
            }
        }
    }

    /// The rule owning copies labelled `label`, from its annotation or the
    /// known rules.
    fn trigger_owner(&self, e: &Existing) {
        if let Some(o) = &e.owner {
            if let Some(rule) = &o.rule {
                self.trigger(rule);
            } else if let Some(r) = self
                .rules
                .find(|r| r.namespace().is_some_and(|ns| RuleId::new(ns, r.name_any()).label_value() == o.label))
                && let Some(ns) = r.namespace()
            {
                self.trigger(&RuleId::new(ns, r.name_any()));
            }
        }
    }

    /// A snapshot of the namespaces, once listed.
    pub fn namespaces(&self) -> Option<HashMap<String, NamespaceInfo>> {
        read(&self.namespaces).clone()
    }

    /// Whether both copy watches have listed.
    pub fn copies_ready(&self) -> bool {
        read(&self.copies).ready.len() == SourceKind::ALL.len()
    }

    /// The copies carrying `rule`'s ownership label.
    pub fn owned_copies(&self, rule: &RuleId) -> HashMap<CopyKey, Existing> {
        let idx = read(&self.copies);
        idx.by_owner
            .get(&rule.label_value())
            .map(|keys| keys.iter().filter_map(|k| idx.by_key.get(k)).map(|e| (e.key.clone(), e.clone())).collect())
            .unwrap_or_default()
    }

    /// Whether a rule (by ownership label value) exists.
    pub fn rule_exists(&self, label: &str) -> bool {
        self.rules
            .find(|r| r.namespace().is_some_and(|ns| RuleId::new(ns, r.name_any()).label_value() == label))
            .is_some()
    }

    /// Records a copy just written (the watch will confirm it).
    pub fn record_copy(&self, e: Existing) {
        write(&self.copies).insert(e);
    }

    /// Forgets a copy just deleted.
    pub fn forget_copy(&self, key: &CopyKey) {
        write(&self.copies).remove(key);
    }

    /// Starts (or keeps) the source watch for `rule`: objects of `kind` in
    /// the rule's namespace matching `query` (and not copies themselves).
    pub fn sources(self: &Arc<Self>, rule: &RuleId, kind: SourceKind, query: &str) -> Sources {
        let mut watches = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
        let current = watches.get(rule).filter(|w| w.kind == kind && w.query == query);
        let state = match current {
            Some(w) => Arc::clone(&w.state),
            None => {
                let state = Arc::new(RwLock::new(SourceSet::default()));
                let task = tokio::spawn(Arc::clone(self).watch_sources(
                    rule.clone(),
                    kind,
                    query.to_string(),
                    Arc::clone(&state),
                ));
                watches.insert(
                    rule.clone(),
                    SourceWatch { kind, query: query.to_string(), state: Arc::clone(&state), task },
                );
                state
            }
        };
        drop(watches);
        let set = read(&state);
        if set.ready {
            Sources::Ready(set.items.values().cloned().collect())
        } else {
            Sources::NotReady(set.last_error.clone())
        }
    }

    /// Stops a rule's source watch (rule deleted or invalid).
    pub fn stop_sources(&self, rule: &RuleId) {
        self.sources.lock().unwrap_or_else(PoisonError::into_inner).remove(rule);
    }

    /// Stops the source watches of rules that no longer exist.
    pub fn collect_garbage(&self) {
        let live: HashSet<RuleId> =
            self.rules.state().iter().filter_map(|r| r.namespace().map(|ns| RuleId::new(ns, r.name_any()))).collect();
        self.sources.lock().unwrap_or_else(PoisonError::into_inner).retain(|id, _| live.contains(id));
    }

    pub fn source_watch_count(&self) -> usize {
        self.sources.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    async fn watch_sources(
        self: Arc<Self>,
        rule: RuleId,
        kind: SourceKind,
        query: String,
        state: Arc<RwLock<SourceSet>>,
    ) {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &rule.namespace, &api_resource(kind));
        let full = if query.is_empty() { NOT_A_COPY.to_string() } else { format!("{query},{NOT_A_COPY}") };
        let cfg = watcher::Config::default().labels(&full).any_semantic();
        let mut stream = std::pin::pin!(watcher::watcher(api, cfg).default_backoff());
        let mut buffer: Option<BTreeMap<String, Arc<Source>>> = None;
        let parse = |o: &DynamicObject| serde_json::to_value(o).ok().and_then(|v| Source::from_json(kind, &v));
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Init) => buffer = Some(BTreeMap::new()),
                Ok(Event::InitApply(o)) => {
                    if let (Some(b), Some(s)) = (buffer.as_mut(), parse(&o)) {
                        b.insert(s.name.clone(), Arc::new(s));
                    }
                }
                Ok(Event::InitDone) => {
                    let mut set = write(&state);
                    set.items = buffer.take().unwrap_or_default();
                    set.ready = true;
                    set.last_error = None;
                    drop(set);
                    self.trigger(&rule);
                }
                Ok(Event::Apply(o)) => {
                    let changed = match parse(&o) {
                        Some(s) => {
                            let mut set = write(&state);
                            let same = set.items.get(&s.name).is_some_and(|old| **old == s);
                            set.items.insert(s.name.clone(), Arc::new(s));
                            !same
                        }
                        None => write(&state).items.remove(&o.name_any()).is_some(),
                    };
                    if changed {
                        self.trigger(&rule);
                    }
                }
                Ok(Event::Delete(o)) => {
                    write(&state).items.remove(&o.name_any());
                    self.trigger(&rule);
                }
                Err(e) => {
                    tracing::warn!(rule = %rule, error = %e, "watching sources");
                    let first = {
                        let mut set = write(&state);
                        let first = set.last_error.is_none();
                        set.last_error = Some(e.to_string());
                        first
                    };
                    if first {
                        self.trigger(&rule);
                    }
                }
            }
        }
    }

    /// Watches namespaces (metadata only) until the stream ends.
    pub async fn watch_namespaces(self: Arc<Self>, on_synced: impl Fn()) {
        let api: Api<PartialObjectMeta<Namespace>> = Api::all(self.client.clone());
        let mut stream =
            std::pin::pin!(watcher::watcher(api, watcher::Config::default().any_semantic()).default_backoff());
        let info = |o: &PartialObjectMeta<Namespace>| NamespaceInfo {
            labels: o.labels().clone(),
            terminating: o.metadata.deletion_timestamp.is_some(),
        };
        let mut buffer: Option<HashMap<String, NamespaceInfo>> = None;
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Init) => buffer = Some(HashMap::new()),
                Ok(Event::InitApply(o)) => {
                    if let Some(b) = buffer.as_mut() {
                        b.insert(o.name_any(), info(&o));
                    }
                }
                Ok(Event::InitDone) => {
                    *write(&self.namespaces) = Some(buffer.take().unwrap_or_default());
                    on_synced();
                    self.trigger_all();
                }
                Ok(Event::Apply(o)) => {
                    let new = info(&o);
                    let changed = {
                        let mut guard = write(&self.namespaces);
                        let map = guard.get_or_insert_with(HashMap::new);
                        map.insert(o.name_any(), new.clone()).is_none_or(|old| old != new)
                    };
                    if changed {
                        self.trigger_all();
                    }
                }
                Ok(Event::Delete(o)) => {
                    if let Some(map) = write(&self.namespaces).as_mut() {
                        map.remove(&o.name_any());
                    }
                    self.trigger_all();
                }
                Err(e) => tracing::warn!(error = %e, "watching namespaces"),
            }
        }
    }

    /// Watches the copies of one kind (by the ownership labels only).
    pub async fn watch_copies(self: Arc<Self>, kind: SourceKind, on_synced: impl Fn()) {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &api_resource(kind));
        let cfg = watcher::Config::default().labels(COPIES_SELECTOR).any_semantic();
        let mut stream = std::pin::pin!(watcher::watcher(api, cfg).default_backoff());
        let parse = |o: &DynamicObject| serde_json::to_value(o).ok().and_then(|v| Existing::from_json(kind, &v));
        let mut buffer: Option<Vec<Existing>> = None;
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Init) => buffer = Some(Vec::new()),
                Ok(Event::InitApply(o)) => {
                    if let (Some(b), Some(e)) = (buffer.as_mut(), parse(&o)) {
                        b.push(e);
                    }
                }
                Ok(Event::InitDone) => {
                    let items = buffer.take().unwrap_or_default();
                    {
                        let mut idx = write(&self.copies);
                        let stale: Vec<CopyKey> = idx.by_key.keys().filter(|k| k.kind == kind).cloned().collect();
                        for k in stale {
                            idx.remove(&k);
                        }
                        for e in items {
                            idx.insert(e);
                        }
                        idx.ready.insert(kind);
                    }
                    on_synced();
                    self.trigger_all();
                }
                Ok(Event::Apply(o)) => {
                    if let Some(e) = parse(&o) {
                        let old = write(&self.copies).by_key.get(&e.key).cloned();
                        let changed = old.as_ref() != Some(&e)
                            && !old.as_ref().is_some_and(|old| {
                                old.owner == e.owner
                                    && old.annotated_hash == e.annotated_hash
                                    && old.content_hash == e.content_hash
                            });
                        if let Some(old) = &old
                            && old.owner != e.owner
                        {
                            self.trigger_owner(old);
                        }
                        write(&self.copies).insert(e.clone());
                        if changed {
                            self.trigger_owner(&e);
                        }
                    }
                }
                Ok(Event::Delete(o)) => {
                    if let Some(e) = parse(&o) {
                        write(&self.copies).remove(&e.key);
                        self.trigger_owner(&e);
                    }
                }
                Err(e) => tracing::warn!(kind = kind.as_str(), error = %e, "watching copies"),
            }
        }
    }

    pub fn metrics(&self) -> &CopierMetrics {
        &self.metrics
    }
}

/// A stream of rule references from the caches, for `Controller::reconcile_on`.
pub fn trigger_channel() -> (UnboundedSender<ObjectRef<CopyRule>>, impl Stream<Item = ObjectRef<CopyRule>> + Send) {
    let (tx, rx) = futures::channel::mpsc::unbounded();
    (tx, rx)
}

/// How often source watches of deleted rules are collected.
pub const GC_INTERVAL: Duration = Duration::from_secs(30);
