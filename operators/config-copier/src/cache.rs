//! What config-copier watches, kept small, each on a
//! [`flotilla_shared::projection`] store: namespaces (metadata only), copies
//! (metadata only, selected by the ownership label: no payload is ever held
//! for a copy) and every possible source ([`SourceIndex`]: one metadata-only
//! watch per kind for all rules). Every change triggers
//! the rules concerned. Beside the stores: what reads of sources taught
//! ([`SourceInfo`] per resourceVersion: size, type, hashes; no payload), the
//! resourceVersions config-copier wrote or verified (a copy at another
//! version was changed by someone else), and the rules' [`Claims`].
//! A reconcile reads all of it once, as a [`Snapshot`], and plans on that.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flotilla_shared::health::WatchHealth;
use flotilla_shared::projection;
use futures::Stream;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

use crate::claims::{Claims, LiveRules};
use crate::copy::{CopyKey, Observed, Payload, ResourceVersion, RuleId, RuleRef, SourceInfo, SourceMeta};
use crate::crd::{CopyRule, SourceKind};
use crate::metrics::CopierMetrics;
use crate::plan::{NamespaceInfo, Naming, SourceSelection};
use crate::sources::SourceIndex;
use crate::targets::TargetFilter;

mod watches;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub fn api_resource(kind: SourceKind) -> ApiResource {
    match kind {
        SourceKind::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
        SourceKind::Secret => ApiResource::erase::<Secret>(&()),
    }
}

fn copy_key_str(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

/// Every namespace's labels and state, shared by the reconciles that read
/// them until one changes.
pub type Namespaces = Arc<HashMap<String, NamespaceInfo>>;

/// One reconcile's read of the caches, taken once ([`Caches::snapshot`]):
/// what the plan decides on.
pub struct Snapshot {
    /// Shared by every reconcile until a namespace changes.
    pub namespaces: Arc<HashMap<String, NamespaceInfo>>,
    /// The rule's sources, metadata only.
    pub sources: Vec<SourceMeta>,
    /// The rule's copies and whatever is held where its copies would go,
    /// with what config-copier knows of their payload.
    pub copies: BTreeMap<CopyKey, Observed>,
    /// The live rules those copies' labels name.
    pub rules: LiveRules,
    /// `--watch-namespace`.
    pub scope: Option<String>,
    // The claims are not in it: a plan reads them after its rule has
    // published its own (`Claims::view`), so that no change of another
    // rule's claim falls between the two unseen.
}

/// Everything the reconciler reads instead of asking the API.
pub struct Caches {
    client: Client,
    field_manager: String,
    /// Rules outside this namespace are another installation's.
    scope: Option<String>,
    trigger: UnboundedSender<ObjectRef<CopyRule>>,
    rules: Store<CopyRule>,
    metrics: CopierMetrics,
    namespaces: projection::Store<NamespaceInfo>,
    /// `None` for an object whose metadata could not be read (never seen in practice).
    copies: HashMap<SourceKind, projection::Store<Option<Observed>>>,
    /// The stores' writers until their watches take them.
    writers: Mutex<Writers>,
    /// The namespaces as the last reconcile read them, with the store's
    /// generation they were read at.
    namespace_view: Mutex<Option<(u64, Namespaces)>>,
    /// resourceVersion of each copy as config-copier last wrote or read it.
    known: Mutex<Known>,
    /// Possible sources, by kind.
    sources: HashMap<SourceKind, Arc<SourceIndex>>,
    claims: Claims,
    /// What the last read of each source taught, by kind, namespace and
    /// name (valid for the resourceVersion it names).
    learned: Mutex<HashMap<SourceKey, Arc<SourceInfo>>>,
    /// The caches' watches, to say why one is not ready.
    watches: Mutex<Vec<WatchHealth>>,
}

type SourceKey = (SourceKind, String, String);

/// The resourceVersion of each copy as config-copier last wrote or read
/// it, by interned key (its strings are the copy watch's: no allocation
/// of its own, issue 28).
pub type Known = HashMap<CopyKey, ResourceVersion>;

#[derive(Default)]
struct Writers {
    namespaces: Option<projection::Writer<NamespaceInfo>>,
    copies: HashMap<SourceKind, projection::Writer<Option<Observed>>>,
}

/// Settings of the caches.
pub struct CacheOptions {
    pub field_manager: String,
    /// `--watch-namespace`: copies of rules elsewhere belong to another installation.
    pub scope: Option<String>,
}

impl Caches {
    pub fn new(
        client: Client,
        rules: Store<CopyRule>,
        trigger: UnboundedSender<ObjectRef<CopyRule>>,
        metrics: CopierMetrics,
        options: CacheOptions,
    ) -> Arc<Self> {
        let (namespaces, nw) = projection::store();
        let mut writers = Writers { namespaces: Some(nw), copies: HashMap::new() };
        let mut copies = HashMap::new();
        for kind in SourceKind::ALL {
            let (s, w) = projection::store();
            copies.insert(kind, s);
            writers.copies.insert(kind, w);
        }
        Arc::new(Self {
            client,
            field_manager: options.field_manager,
            scope: options.scope,
            trigger,
            rules,
            metrics,
            namespaces,
            copies,
            writers: Mutex::new(writers),
            namespace_view: Mutex::default(),
            known: Mutex::new(HashMap::new()),
            sources: SourceKind::ALL.into_iter().map(|k| (k, Arc::new(SourceIndex::new(k)))).collect(),
            claims: Claims::default(),
            learned: Mutex::new(HashMap::new()),
            watches: Mutex::default(),
        })
    }

    pub fn metrics(&self) -> &CopierMetrics {
        &self.metrics
    }

    fn trigger(&self, rule: &RuleId) {
        let _ = self.trigger.unbounded_send(ObjectRef::new(&rule.name).within(&rule.namespace));
    }

    /// Wakes `rules` (those a change of claims concerns).
    pub fn wake(&self, rules: Vec<RuleId>) {
        for rule in &rules {
            self.trigger(rule);
        }
    }

    /// The rules' claims (what each wants), shared by the reconciles.
    pub fn claims(&self) -> &Claims {
        &self.claims
    }

    fn trigger_all(&self) {
        for r in self.rules.state() {
            if let Some(ns) = r.namespace() {
                self.trigger(&RuleId::new(ns, r.name_any()));
            }
        }
    }

    fn live_rule(&self, label: &str) -> Option<Arc<CopyRule>> {
        self.rules.find(|r| r.namespace().is_some_and(|ns| RuleId::new(ns, r.name_any()).label_value() == label))
    }

    /// Triggers the rule an observed copy's marks name.
    fn trigger_owner(&self, o: &Observed) {
        let Some(owner) = &o.owner else { return };
        if let Some(rule) = owner.rule() {
            self.trigger(&rule);
        } else if let Some(label) = owner.label_value()
            && let Some(r) = self.live_rule(&label)
            && let Some(ns) = r.namespace()
        {
            self.trigger(&RuleId::new(ns, r.name_any()));
        }
    }

    /// The live rules named by the ownership labels of `copies`.
    fn rules_named<'o>(&self, copies: impl IntoIterator<Item = &'o Observed>) -> LiveRules {
        let mut rules = LiveRules::new();
        for label in copies.into_iter().filter_map(|o| o.owner.as_ref().and_then(|w| w.label_value())) {
            if rules.contains_key(&label) {
                continue;
            }
            if let Some(r) = self.live_rule(&label)
                && let Some(ns) = r.namespace()
            {
                rules.insert(label, (RuleId::new(ns, r.name_any()), r.uid().unwrap_or_default()));
            }
        }
        rules
    }

    /// Whose `o` is, for `rule`, as the caches know the rules and claims
    /// now (an object just read from the API, not from a snapshot).
    pub fn ownership(&self, rule: &RuleRef, o: &Observed) -> crate::plan::Ownership {
        let rules = self.rules_named([o]);
        self.claims.with(|claims| {
            crate::plan::ownership(o.owner.as_deref(), rule, |label| {
                crate::claims::owner_state(label, &rule.id, &o.key, &rules, self.scope.as_deref(), claims)
            })
        })
    }

    /// The rule ranking above `rule` that wants `key`, with the claims as they are now.
    pub fn claimed_by(&self, rule: &RuleId, key: &CopyKey) -> Option<RuleId> {
        self.claims.with(|claims| crate::claims::claimed_by(claims, rule, key))
    }

    /// Reads the caches once for a reconcile of `rule` (its sources of
    /// `kind` as `selection` selects them, their copies named as `naming`
    /// says): `None` while a cache it needs has not listed.
    pub fn snapshot(
        &self,
        rule: &RuleId,
        kind: SourceKind,
        selection: &SourceSelection,
        targets: &TargetFilter,
        naming: &Naming,
    ) -> Option<Snapshot> {
        let (Some(namespaces), true) = (self.namespaces(), self.copies_ready(kind)) else { return None };
        let sources = self.sources(rule, kind, selection)?;
        // The copies the plan may decide on: this rule's own (of either
        // kind: a rule whose kind changed prunes the old kind's; a rule
        // whose target names changed, the old names'), and whatever is
        // held where its copies would go — under its copies' names (the
        // sources', or as spec.target names them) in the namespaces it
        // selects. Looked up by key, not by scanning every copy: a
        // scan cost every reconcile all copies of the cluster, and cloned
        // those of every rule whose sources share a name (issue 28).
        let names: BTreeSet<Cow<'_, str>> = sources.iter().map(|m| naming.copy_name(&m.name)).collect();
        let mut copies: BTreeMap<CopyKey, Observed> =
            self.copies_of(rule).into_iter().map(|o| (o.key.clone(), o)).collect();
        if let Some(store) = self.copies.get(&kind) {
            for (ns, _) in namespaces.iter().filter(|(ns, info)| targets.selects(ns, &info.labels)) {
                for name in &names {
                    let held = store.get(&copy_key_str(ns, name)).and_then(|o| o.as_ref().clone());
                    if let Some(o) = held {
                        copies.entry(o.key.clone()).or_insert_with(|| self.with_knowledge(o));
                    }
                }
            }
        }
        drop(names);
        let rules = self.rules_named(copies.values());
        Some(Snapshot { namespaces, sources, copies, rules, scope: self.scope.clone() })
    }

    /// The namespaces, once listed: one map shared by every reconcile
    /// until a namespace changes. Built per reconcile, 200 rules starting
    /// over 2,000 namespaces held 200 copies of it at once (issue 28).
    fn namespaces(&self) -> Option<Arc<HashMap<String, NamespaceInfo>>> {
        if !self.namespaces.is_ready() {
            return None;
        }
        // The generation first: a map built after it is at least that new.
        let generation = self.namespaces.generation();
        let mut shared = lock(&self.namespace_view);
        if let Some((_, map)) = shared.as_ref().filter(|(g, _)| *g == generation) {
            return Some(Arc::clone(map));
        }
        let map: Arc<HashMap<String, NamespaceInfo>> =
            Arc::new(self.namespaces.entries().into_iter().map(|(k, v)| (k, (*v).clone())).collect());
        *shared = Some((generation, Arc::clone(&map)));
        Some(map)
    }

    /// Whether the copy watch of `kind` has listed. Only the rule's own
    /// kind: an installation whose RBAC withholds Secrets still copies
    /// ConfigMaps. A rule whose kind changed prunes the old kind's copies
    /// it sees; while that watch has not listed it sees none (deleting
    /// nothing is the safe side), and the watch's first list wakes every
    /// rule (`watch_copies_of`).
    pub fn copies_ready(&self, kind: SourceKind) -> bool {
        self.copies.get(&kind).is_some_and(projection::Store::is_ready)
    }

    /// Why a cache a rule of `kind` needs is not ready: the first failing
    /// watch of that kind (or of namespaces) and its last error (`None`
    /// while they flow, e.g. a list still arriving).
    pub fn watch_error(&self, kind: SourceKind) -> Option<String> {
        lock(&self.watches)
            .iter()
            .filter(|w| w.name() == "namespaces" || w.name().ends_with(kind.plural()))
            .find_map(|w| w.error().map(|e| format!("watch of {} failing: {e}", w.name())))
    }

    fn watching(&self, health: &WatchHealth) {
        lock(&self.watches).push(health.clone());
    }

    fn with_knowledge(&self, mut o: Observed) -> Observed {
        if o.payload == Payload::Trusted {
            match lock(&self.known).get(&o.key) {
                Some(rv) if Some(rv) != o.resource_version.as_ref() => o.payload = Payload::Unexplained,
                _ => {}
            }
        }
        o
    }

    /// Every copy whose marks name `rule` (by label value or annotation).
    fn copies_of(&self, rule: &RuleId) -> Vec<Observed> {
        let label = rule.label_value();
        let mut out = Vec::new();
        for store in self.copies.values() {
            for o in store.state().iter().filter_map(|o| o.as_ref().as_ref()) {
                if o.owner.as_ref().is_some_and(|w| w.label_value().as_deref() == Some(label.as_str())) {
                    out.push(self.with_knowledge(o.clone()));
                }
            }
        }
        out
    }

    /// Records the version of a copy config-copier just wrote or read.
    pub fn record_version(&self, key: &CopyKey, resource_version: Option<ResourceVersion>) {
        let mut known = lock(&self.known);
        match resource_version {
            // The copy watch's strings, not the plan's (which go with the reconcile).
            Some(rv) => known.insert(CopyKey::interned(key.kind, &key.namespace, &key.name), rv),
            None => known.remove(key),
        };
    }

    /// Forgets a copy just deleted.
    pub fn forget_copy(&self, key: &CopyKey) {
        lock(&self.known).remove(key);
    }

    /// Forgets a rule (deleted or invalid): its label keys, claim and reports.
    pub fn forget_rule(&self, rule: &RuleId) {
        for index in self.sources.values() {
            index.forget(rule);
        }
        let woken = self.claims.forget(rule);
        self.wake(woken);
    }

    /// `rule`'s sources of `kind` (what `selection` selects in its
    /// namespace), from the shared index ([`SourceIndex`]); `None` until
    /// it is listed with the label keys the rule reads.
    fn sources(&self, rule: &RuleId, kind: SourceKind, selection: &SourceSelection) -> Option<Vec<SourceMeta>> {
        for (k, index) in &self.sources {
            if *k != kind {
                index.forget(rule);
            }
        }
        self.sources.get(&kind).and_then(|index| index.sources(rule, selection))
    }

    /// What a read of this source taught, if it was at `resource_version`.
    pub fn learned(
        &self,
        kind: SourceKind,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
    ) -> Option<Arc<SourceInfo>> {
        let learned = lock(&self.learned);
        let info = learned.get(&(kind, namespace.to_string(), name.to_string()))?;
        (resource_version.is_some() && info.resource_version.as_deref() == resource_version).then(|| Arc::clone(info))
    }

    /// Keeps what a read of a source taught (replacing an older version's).
    pub fn learn(&self, info: SourceInfo) -> Arc<SourceInfo> {
        let info = Arc::new(info);
        lock(&self.learned).insert((info.kind, info.namespace.clone(), info.name.clone()), Arc::clone(&info));
        info
    }

    /// Forgets the label keys of rules that no longer exist, and what was
    /// learned of objects that are no longer possible sources.
    pub fn collect_garbage(&self) -> HashSet<RuleId> {
        let live: HashSet<RuleId> =
            self.rules.state().iter().filter_map(|r| r.namespace().map(|ns| RuleId::new(ns, r.name_any()))).collect();
        for index in self.sources.values() {
            index.retain(&live);
        }
        lock(&self.learned)
            .retain(|(kind, ns, name), _| self.sources.get(kind).is_some_and(|index| index.contains(ns, name)));
        self.wake(self.claims.retain(&live));
        live
    }
}

/// A stream of rule references from the caches, for `Controller::reconcile_on`.
pub fn trigger_channel() -> (UnboundedSender<ObjectRef<CopyRule>>, impl Stream<Item = ObjectRef<CopyRule>> + Send) {
    let (tx, rx) = futures::channel::mpsc::unbounded();
    (tx, rx)
}

/// How often what deleted rules left (label keys, learned sources, claims) is collected.
pub const GC_INTERVAL: Duration = Duration::from_secs(30);
