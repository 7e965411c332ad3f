//! The AWS side of service-dns's tests: moto's Route53 ([`moto`]) behind a
//! proxy that answers as Route53 does where moto does not ([`route53_proxy`]).

pub mod moto;
pub mod route53_proxy;
