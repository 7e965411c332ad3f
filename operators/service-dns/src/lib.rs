//! # service-dns
//!
//! A Route53 record for every Service, kept right. Modules, outside in:
//!
//! | module | what |
//! | --- | --- |
//! | [`config`] | flags/env and their checks (bad → exit 2) |
//! | [`sync`] | the Service cache and the level-triggered sync loop |
//! | [`desired`] | desired state: the records a Service asks for |
//! | [`service`] | the few fields of a Service that are kept in the cache |
//! | [`route53`] | current state and applying changes (rate limit, retries, INSYNC) |
//! | [`plan`] | the pure diff of desired and current (unit + property tests) |
//! | [`batch`] | splitting a plan into requests within Route53's limits |
//! | [`apply`] | sending the batches; a failed one is retried name by name |
//! | [`registry`] | the ownership TXT records |
//! | [`hostname`] | the hostname template and name checks |
//! | [`metrics`], [`report`] | `flotilla_service_dns_*` metrics; Events on Services |

pub mod apply;
pub mod batch;
pub mod config;
pub mod desired;
pub mod hostname;
pub mod metrics;
pub mod model;
pub mod plan;
pub mod registry;
pub mod report;
pub mod route53;
pub mod service;
pub mod sync;

pub use config::{Args, Config};
pub use plan::{Plan, Policy, plan};
pub use sync::{Error, run};
