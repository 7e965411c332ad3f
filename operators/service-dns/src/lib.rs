//! # service-dns
//!
//! A Route53 record for every Service, kept right. Modules, outside in:
//!
//! | module | what |
//! | --- | --- |
//! | [`config`] | flags/env and their checks (bad → exit 2) |
//! | [`zone`] | which hosted zones (and their cross-check with the domain) |
//! | [`zones`] | several zones: which a name goes to, a Service's `flotilla.dev/zones` (pure) |
//! | [`owner`] | the owner id derived from the cluster when none is given |
//! | [`controller`] | wiring (the Service cache, the grants' watch, the zones, the owner id) and a level-triggered loop per zone: syncs when `hold` says, leadership, backoff after an outage, the reconcile metrics |
//! | [`hold`] | the hold rule (pure): when the loop syncs (leading edge, debounce, a stream's pause), in which order changes go, how many go while a stream goes on; nothing held past `--max-batch-delay` |
//! | [`namespaces`] | the Namespace cache: each namespace's hostname grant (metadata watch, only the granted held) |
//! | [`sync`] | one sync: snapshot (the caches read once; the zone listed, or its copy) → plan → apply → report (Events, metrics; accepted changes to `insync`, refused names to `quarantine`); its state private |
//! | [`desired`] | desired state: the records a Service asks for, and what of it is refused (grant, cap, TTL) |
//! | [`grant`] | `flotilla.dev/allowed-hostnames`: parsing and matching a namespace's grant; `--hostname-annotations` |
//! | [`service`] | the few fields of a Service that are kept in the cache |
//! | [`endpoints`] | the few fields of a headless Service's EndpointSlices that are kept in their cache |
//! | [`headless`] | a headless Service's published addresses and pod names from its slices (pure, bounded) |
//! | [`routing`] | weighted and failover routing sets: a Service's `flotilla.dev/set-identifier` and policy (pure) |
//! | [`alias`] | ALIAS records for AWS load balancers: each region's canonical hosted zone, the Service's alias annotations (pure) |
//! | [`route53`] | current state and applying changes (rate limit, retries, INSYNC) |
//! | [`model`] | the record model shared by desired, current and plan: record sets, their keys, changes |
//! | [`plan`] | the pure diff of desired and current (unit + property tests): reading the zone and the claims, conflicts, changes |
//! | [`batch`] | splitting a plan into requests within Route53's limits; what an answer means for the requests that follow (back off, or narrow a refusal down) — pure |
//! | [`apply`] | sending the requests `batch` gives (writes only, each answer handed back to it); the zone copy after the writes |
//! | [`quarantine`] | names Route53 keeps refusing, each with its own backoff |
//! | [`insync`] | waiting for INSYNC off the loop, then the Events |
//! | [`extdns`] | external-dns's TXT registry formats (for adoption) and the annotations taken as aliases of ours |
//! | [`registry`] | the ownership TXT records (and the `freed=` mark of a name held for its namespace) |
//! | [`hostname`] | the hostname template and name checks |
//! | [`metrics`], [`report`] | `flotilla_service_dns_*` metrics; Events on Services |

pub mod alias;
pub mod apply;
pub mod batch;
pub mod config;
pub mod controller;
pub mod desired;
pub mod endpoints;
pub mod extdns;
pub mod grant;
pub mod headless;
pub mod hold;
pub mod hostname;
pub mod insync;
pub mod metrics;
pub mod model;
pub mod namespaces;
pub mod owner;
pub mod plan;
pub mod quarantine;
pub mod registry;
pub mod report;
pub mod route53;
pub mod routing;
pub mod service;
pub mod sync;
pub mod zone;
pub mod zones;

pub use config::{Args, Config};
pub use controller::{Error, run};
pub use plan::{Plan, Policy, plan};

#[cfg(test)]
mod heap_budget;

// Unit tests count heap bytes (heap_budget.rs) through this allocator.
#[cfg(test)]
#[global_allocator]
static HEAP: flotilla_testenv::heap::Counting = flotilla_testenv::heap::Counting;
