//! Applying a plan: its batches in order; a batch that fails is split and
//! its names sent one by one, so one bad record never blocks the others.

use std::future::Future;

use std::collections::HashSet;

use crate::batch::{Limits, batches};
use crate::model::{Action, RecordSet, RecordType};
use crate::plan::ChangeGroup;
use crate::route53::Route53Error;

/// What was sent: `(change id, groups)` that succeeded, and the groups that
/// failed with their error.
pub struct Applied<'a> {
    pub done: Vec<(String, Vec<&'a ChangeGroup>)>,
    pub failed: Vec<(&'a ChangeGroup, Route53Error)>,
}

/// Sends `groups` with `send` (one ChangeResourceRecordSets request per call).
pub async fn apply<'a, F, Fut>(groups: &'a [ChangeGroup], limits: Limits, mut send: F) -> Applied<'a>
where
    F: FnMut(Vec<&'a ChangeGroup>) -> Fut,
    Fut: Future<Output = Result<String, Route53Error>>,
{
    let mut out = Applied { done: Vec::new(), failed: Vec::new() };
    for batch in batches(groups, limits) {
        match send(batch.clone()).await {
            Ok(id) => out.done.push((id, batch)),
            Err(e) if batch.len() > 1 => {
                tracing::warn!(error = %e, names = batch.len(), "change batch failed; retrying name by name");
                for g in batch {
                    match send(vec![g]).await {
                        Ok(id) => out.done.push((id, vec![g])),
                        Err(e) => out.failed.push((g, e)),
                    }
                }
            }
            Err(e) => out.failed.push((batch[0], e)),
        }
    }
    out
}

/// The zone after `groups` were applied to `zone`: the in-memory copy of
/// the zone kept between full listings.
pub fn update_zone(mut zone: Vec<RecordSet>, groups: &[&ChangeGroup]) -> Vec<RecordSet> {
    let touched: HashSet<(&str, RecordType)> =
        groups.iter().flat_map(|g| g.changes.iter().map(|c| (c.record.name.as_str(), c.record.rtype))).collect();
    zone.retain(|r| r.foreign.is_some() || !touched.contains(&(r.name.as_str(), r.rtype)));
    for g in groups {
        for c in &g.changes {
            if c.action != Action::Delete {
                zone.push(c.record.clone());
            }
        }
    }
    zone
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::Claim;
    use crate::model::{RecordSet, RecordType};
    use crate::plan::{Policy, plan};

    fn groups(n: usize) -> Vec<ChangeGroup> {
        let claims: Vec<Claim> = (0..n)
            .map(|i| {
                let resource = format!("service/ns/s{i}");
                Claim {
                    order: (0, resource.clone()),
                    records: vec![RecordSet::new(format!("s{i}.z"), RecordType::A, 300, vec![format!("10.0.0.{i}")])],
                    resource,
                }
            })
            .collect();
        plan(&claims, &[], "me", Policy::Sync).groups
    }

    /// A request refused when it holds the bad name (`s3.z`), as Route53
    /// refuses a whole batch.
    fn refuse_bad(batch: &[&ChangeGroup]) -> Result<String, Route53Error> {
        if batch.iter().any(|g| g.name == "s3.z") {
            Err(Route53Error {
                operation: "ChangeResourceRecordSets",
                code: "InvalidChangeBatch".into(),
                message: "bad".into(),
            })
        } else {
            Ok(format!("C{}", batch.len()))
        }
    }

    #[tokio::test]
    async fn one_bad_name_does_not_block_the_others() {
        let gs = groups(10);
        let mut calls = Vec::new();
        let limits = Limits { max_records: 8, max_chars: 10_000 }; // 4 names per request
        let out = apply(&gs, limits, |b| {
            calls.push(b.iter().map(|g| g.name.clone()).collect::<Vec<_>>());
            std::future::ready(refuse_bad(&b))
        })
        .await;
        assert_eq!(out.failed.len(), 1);
        assert_eq!(out.failed[0].0.name, "s3.z");
        let sent: usize = out.done.iter().map(|(_, g)| g.len()).sum();
        assert_eq!(sent, 9, "every other name was applied");
        // 3 batches, the first one (s0..s3) failing and split into 4.
        assert_eq!(calls.len(), 3 + 4, "{calls:?}");
        assert_eq!(calls[0].len(), 4);
        assert!(calls[1..5].iter().all(|c| c.len() == 1));
    }

    #[test]
    fn the_zone_copy_follows_the_changes() {
        let gs = groups(3);
        let refs: Vec<&ChangeGroup> = gs.iter().collect();
        let zone = update_zone(Vec::new(), &refs);
        assert_eq!(zone.len(), 6, "3 A + 3 TXT: {zone:?}");
        let claims: Vec<Claim> = Vec::new();
        let p = plan(&claims, &zone, "me", Policy::Sync);
        assert_eq!(p.groups.len(), 3, "all deleted");
        let refs: Vec<&ChangeGroup> = p.groups.iter().collect();
        assert!(update_zone(zone, &refs).is_empty());
    }

    #[tokio::test]
    async fn nothing_to_do_sends_nothing() {
        let mut calls = 0;
        let out = apply(&[], Limits::default(), |_| {
            calls += 1;
            std::future::ready(Ok::<_, Route53Error>("C".to_string()))
        })
        .await;
        assert_eq!(calls, 0);
        assert!(out.done.is_empty() && out.failed.is_empty());
    }
}
