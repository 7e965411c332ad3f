//! Which hosted zones: each `--hosted-zone-id`, the one zone named
//! `--domain-name`, or both — then cross-checked, so that a zone id and a
//! domain that do not match exit 2 instead of writing names of one domain
//! into another's zone.

use std::time::Duration;

use flotilla_shared::ConfigError;
use tokio_util::sync::CancellationToken;

use crate::config::ZoneSource;
use crate::route53::{Route53, Route53Error, jittered_backoff};

/// Which zone, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    pub id: String,
    pub name: String,
}

/// One attempt: the zone, a configuration error, or Route53's error (retried).
async fn attempt(r53: &Route53, source: &ZoneSource) -> Result<Result<Zone, ConfigError>, Route53Error> {
    match source {
        ZoneSource::Id { id, domain } => match r53.zone_name(id).await {
            Ok(name) => Ok(match domain {
                Some(d) if *d != name => Err(ConfigError::new(
                    "hosted-zone-id",
                    format!("hosted zone {id} is {name}, not --domain-name {d}"),
                )),
                _ => Ok(Zone { id: id.clone(), name }),
            }),
            Err(e) if e.code == "NoSuchHostedZone" => {
                Ok(Err(ConfigError::new("hosted-zone-id", format!("no hosted zone {id}: {}", e.message))))
            }
            Err(e) => Err(e),
        },
        ZoneSource::Domain(d) => {
            let zones = r53.zones_named(d).await?;
            Ok(match zones.as_slice() {
                [z] => Ok(Zone { id: z.id.clone(), name: z.name.clone() }),
                [] => Err(ConfigError::new("domain-name", format!("no hosted zone is named {d}"))),
                _ => {
                    let ids: Vec<&str> = zones.iter().map(|z| z.id.as_str()).collect();
                    Err(ConfigError::new(
                        "domain-name",
                        format!(
                            "{} hosted zones are named {d} ({}); choose one with --hosted-zone-id",
                            zones.len(),
                            ids.join(", ")
                        ),
                    ))
                }
            })
        }
    }
}

/// Finds every zone (see [`resolve_zone`]), in the order given.
pub async fn resolve_zones(
    r53: &Route53,
    sources: &[ZoneSource],
    shutdown: &CancellationToken,
) -> Result<Option<Vec<Zone>>, ConfigError> {
    let mut zones = Vec::with_capacity(sources.len());
    for source in sources {
        match resolve_zone(r53, source, shutdown).await? {
            Some(zone) => zones.push(zone),
            None => return Ok(None),
        }
    }
    Ok(Some(zones))
}

/// Finds the zone. Route53 being unreachable is retried until `shutdown`
/// (`Ok(None)`); a zone that does not exist, several with the name, or an
/// id and a domain that disagree are configuration errors.
pub async fn resolve_zone(
    r53: &Route53,
    source: &ZoneSource,
    shutdown: &CancellationToken,
) -> Result<Option<Zone>, ConfigError> {
    let mut failures = 0;
    loop {
        let e = match attempt(r53, source).await {
            Ok(found) => return found.map(Some),
            Err(e) => e,
        };
        failures += 1;
        let wait = jittered_backoff(failures, Duration::from_secs(1), Duration::from_secs(60));
        let zone = match source {
            ZoneSource::Id { id, .. } => id.as_str(),
            ZoneSource::Domain(d) => d.as_str(),
        };
        tracing::warn!(%zone, error = %e, retry_in = ?wait, "looking up the hosted zone failed; retrying (the operator starts once every zone is read)");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return Ok(None),
        }
    }
}
