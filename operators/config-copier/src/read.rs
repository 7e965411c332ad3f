//! Reading sources' payloads, within the byte budget ([`crate::budget`]).
//! Source watches are metadata only; a payload is read (GET) when a
//! source's version is new to config-copier (to learn its size, type and
//! hashes, then dropped) or when its copies must be written (held while
//! they are, then dropped). And reading a copy again ([`read_copy`]) when
//! a write's answer says it is not what the plan saw.

pub mod workloads;

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use kube::Client;
use kube::api::{Api, DynamicObject, GetParams};
use serde_json::Value;

use crate::budget::{self, Budget, MAX_SOURCE_BYTES, Share};
use crate::cache::{Caches, api_resource};
use crate::copy::{CopyKey, Observed, Source, SourceInfo, SourceMeta, StripLabels};
use crate::crd::SourceKind;

/// Reads the sources of one namespace and kind.
pub struct Reader<'a> {
    pub client: &'a Client,
    pub caches: &'a Caches,
    pub budget: &'a Budget,
    pub strip: &'a StripLabels,
    pub kind: SourceKind,
    pub namespace: &'a str,
}

/// A source read for writing its copies, and its share of the budget.
pub struct Held<'a> {
    pub source: Arc<Source>,
    /// Writes of its copies that the share covers at once (at least 1).
    pub writes: usize,
    _share: Share<'a>,
}

impl<'a> Reader<'a> {
    /// One GET, as JSON (`None`: not found). The share covering it is the
    /// caller's.
    async fn get(&self, name: &str) -> Result<Option<Source>, kube::Error> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), self.namespace, &api_resource(self.kind));
        let req = kube::core::Request::new(api.resource_url())
            .get(name, &GetParams::default())
            .map_err(kube::Error::BuildRequest)?;
        self.caches.metrics().request("get");
        match self.client.request::<Value>(req).await {
            Ok(v) => Ok(Source::from_json_owned(self.kind, v, self.strip)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What is known of each selected source at its current version: what
    /// was learned before, else learned now by reading it (at most
    /// `concurrency` reads at a time, each holding the budget for the
    /// largest source there can be, its payload dropped once measured).
    /// A source gone meanwhile is left out (its watch says so next).
    pub async fn learn(&self, metas: &[SourceMeta], concurrency: usize) -> Result<Vec<Arc<SourceInfo>>, kube::Error> {
        let mut known = Vec::with_capacity(metas.len());
        let mut unknown = Vec::new();
        for m in metas {
            match self.caches.learned(self.kind, self.namespace, &m.name, m.resource_version.as_deref()) {
                Some(info) => known.push(info),
                None => unknown.push(m.clone()),
            }
        }
        let learn_one = |m: SourceMeta| async move {
            let Some(_share) = self.budget.acquire(budget::read_cost(MAX_SOURCE_BYTES)).await else {
                return Ok(None);
            };
            // Another rule's reconcile may have read it while this one waited.
            if let Some(info) = self.caches.learned(self.kind, self.namespace, &m.name, m.resource_version.as_deref()) {
                return Ok(Some(info));
            }
            Ok::<_, kube::Error>(self.get(&m.name).await?.map(|s| self.caches.learn(s.info())))
        };
        let mut pending = FuturesUnordered::new();
        let mut unknown = unknown.into_iter();
        for m in unknown.by_ref().take(concurrency.max(1)) {
            pending.push(learn_one(m));
        }
        while let Some(result) = pending.next().await {
            known.extend(result?);
            if let Some(m) = unknown.next() {
                pending.push(learn_one(m));
            }
        }
        Ok(known)
    }

    /// Reads `name` to write its copies, `max_writes` at a time at most:
    /// waits for the budget of the largest source there can be, reads, then
    /// keeps what the source and its writes need, or takes what is free
    /// towards it (fewer writes when the budget has no more to give now).
    /// `None`: the source is gone.
    pub async fn read_for_writes(&self, name: &str, max_writes: usize) -> Result<Option<Held<'a>>, kube::Error> {
        let Some(mut share) = self.budget.acquire(budget::read_cost(MAX_SOURCE_BYTES)).await else {
            return Ok(None);
        };
        let Some(source) = self.get(name).await? else { return Ok(None) };
        self.caches.learn(source.info());
        let size = source.size();
        let mut writes = max_writes.max(1);
        let want = budget::writes_cost(size, writes);
        let held = share.bytes();
        if want <= held {
            share.shrink_to(want);
        } else {
            self.budget.try_grow(&mut share, want - held);
            writes = budget::writes_fitting(size, share.bytes(), writes);
        }
        Ok(Some(Held { source: Arc::new(source), writes, _share: share }))
    }
}

/// Reads the object at `key` (its payload's hashes, not the payload), as
/// `field_manager` sees it: the next plan round's input after a write's
/// answer said it is not what the plan saw.
pub async fn read_copy(
    client: &Client,
    caches: &Caches,
    field_manager: &str,
    key: &CopyKey,
) -> Result<Option<Observed>, kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &key.namespace, &api_resource(key.kind));
    caches.metrics().request("get");
    let obj = api.get_opt(&key.name).await?;
    Ok(obj
        .and_then(|o| serde_json::to_value(o).ok())
        .and_then(|v| Observed::from_json(key.kind, &v, true, field_manager)))
}
