//! Applying a plan: writes and nothing else. It sends the requests
//! [`Requests`] (pure, in `batch.rs`) gives, and hands each answer back to
//! it: what a failed write means — back off with everything, or narrow a
//! refused request down to the names Route53 refused — is decided there,
//! never here. Also the zone copy kept between listings, after the writes.

use std::collections::HashSet;
use std::future::Future;

use crate::batch::{Applied, Limits, Requests};
use crate::model::{Action, RecordSet, RecordType};
use crate::plan::ChangeGroup;
use crate::route53::Route53Error;

/// Sends `groups` in as few requests as `limits` allow, and each of `alone`
/// in a request of its own (names coming back from quarantine: if one
/// fails again it must not take a full batch down with it), in the order
/// [`Requests`] gives them; what each answer means (back off, narrow a
/// refused request down) is [`Requests::answered`]'s to decide.
pub async fn apply<'a, F, Fut>(
    groups: &'a [ChangeGroup],
    alone: &'a [ChangeGroup],
    limits: Limits,
    mut send: F,
) -> Applied<'a>
where
    F: FnMut(Vec<&'a ChangeGroup>) -> Fut,
    Fut: Future<Output = Result<String, Route53Error>>,
{
    let mut requests = Requests::new(groups, alone, limits);
    while let Some(batch) = requests.next_request() {
        let answer = send(batch.clone()).await;
        requests.answered(batch, answer);
    }
    requests.finish()
}

/// The zone after `groups` were applied to `zone`: the in-memory copy of
/// the zone kept between full listings.
pub fn update_zone(mut zone: Vec<RecordSet>, groups: &[&ChangeGroup]) -> Vec<RecordSet> {
    // A record set is (name, type, set identifier): another cluster's set
    // at a name of ours stays.
    let touched: HashSet<(&str, RecordType, Option<&str>)> = groups
        .iter()
        .flat_map(|g| g.changes.iter().map(|c| (&*c.record.name, c.record.rtype, c.record.set_id())))
        .collect();
    zone.retain(|r| r.is_foreign() || !touched.contains(&(&*r.name, r.rtype, r.set_id())));
    for g in groups {
        for c in &g.changes {
            if c.action != Action::Delete {
                zone.push(c.record.clone());
            }
        }
    }
    // Kept until the next sync: without the room its growth left (up to
    // as much again as it holds). Nothing applied: no reallocation.
    zone.shrink_to_fit();
    zone
}

/// `zone` with the records at `names` replaced by `fresh` (a name read
/// again after Route53 refused a change to it).
pub fn refresh_names(mut zone: Vec<RecordSet>, names: &HashSet<String>, fresh: Vec<RecordSet>) -> Vec<RecordSet> {
    zone.retain(|r| !names.contains(&*r.name));
    zone.extend(fresh);
    // As in `update_zone`: kept until the next sync, without spare room.
    zone.shrink_to_fit();
    zone
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::Claim;
    use crate::model::{RecordSet, RecordType};
    use crate::plan::{ChangeKind, Policy, plan};

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

    fn err(code: &str, message: &str) -> Route53Error {
        Route53Error::new("ChangeResourceRecordSets", code, message)
    }

    /// Refuses a request holding the bad name (`s3.z`) as Route53 refuses a
    /// whole batch; `named`: whether the answer says which record.
    fn refuse_bad(batch: &[&ChangeGroup], named: bool) -> Result<String, Route53Error> {
        if batch.iter().any(|g| g.name == "s3.z") {
            let msg = if named {
                "Tried to create resource record set [name='s3.z.', type='A'] but it already exists"
            } else {
                "bad"
            };
            Err(err("InvalidChangeBatch", msg))
        } else {
            Ok(format!("C{}", batch.len()))
        }
    }

    fn limits4() -> Limits {
        Limits { max_records: 8, max_chars: 10_000 } // 4 names (A + TXT) per request
    }

    #[tokio::test]
    async fn a_named_bad_name_costs_one_more_request() {
        let gs = groups(10);
        let mut calls = Vec::new();
        let out = apply(&gs, &[], limits4(), |b| {
            calls.push(b.len());
            std::future::ready(refuse_bad(&b, true))
        })
        .await;
        assert_eq!(out.refused.len(), 1);
        assert_eq!(out.refused[0].0.name, "s3.z");
        assert_eq!(out.done.iter().map(|(_, g)| g.len()).sum::<usize>(), 9, "every other name was applied");
        assert_eq!(calls, [4, 3, 4, 2], "the refused batch is sent again without s3");
    }

    #[tokio::test]
    async fn an_unnamed_bad_name_is_found_by_halving() {
        let gs = groups(10);
        let mut calls = Vec::new();
        let out = apply(&gs, &[], limits4(), |b| {
            calls.push(b.iter().map(|g| g.name.clone()).collect::<Vec<_>>());
            std::future::ready(refuse_bad(&b, false))
        })
        .await;
        assert_eq!(out.refused.len(), 1);
        assert_eq!(out.refused[0].0.name, "s3.z");
        assert_eq!(out.done.iter().map(|(_, g)| g.len()).sum::<usize>(), 9);
        // s0..s3 refused → s0,s1 ok; s2,s3 refused → s2 ok, s3 refused; then the other batches.
        assert_eq!(calls.len(), 1 + 2 + 2 + 2, "{calls:?}");
    }

    #[tokio::test]
    async fn an_outage_backs_off_with_everything_instead_of_name_by_name() {
        for code in ["Unreachable", "Throttling", "ServiceUnavailable"] {
            let gs = groups(10);
            let mut calls = 0;
            let out = apply(&gs, &[], limits4(), |_| {
                calls += 1;
                std::future::ready(Err::<String, _>(err(code, "timeout")))
            })
            .await;
            assert_eq!(calls, 1, "{code}: one request, then back off");
            assert_eq!(out.unsent.len(), 10, "{code}");
            assert!(out.refused.is_empty() && out.done.is_empty());
            assert_eq!(out.outage.map(|e| e.code), Some(code.to_string()));
        }
    }

    #[tokio::test]
    async fn names_back_from_quarantine_go_alone() {
        let gs = groups(6);
        let (alone, rest) = gs.split_at(1);
        let mut calls = Vec::new();
        let out = apply(rest, alone, Limits::default(), |b| {
            calls.push(b.len());
            std::future::ready(Ok::<_, Route53Error>("C".to_string()))
        })
        .await;
        assert_eq!(calls, [5, 1], "a creation back from quarantine goes after the deletions, alone");
        assert_eq!(out.done.len(), 2);
        // A deletion back from quarantine goes first, alone.
        let zone = update_zone(Vec::new(), &gs.iter().collect::<Vec<_>>());
        let claims: Vec<Claim> = Vec::new();
        let deletions = plan(&claims, &zone, "me", Policy::Sync).groups;
        let (alone, _) = deletions.split_at(1);
        let mut calls = Vec::new();
        apply(rest, alone, Limits::default(), |b| {
            calls.push((b.len(), b[0].kind));
            std::future::ready(Ok::<_, Route53Error>("C".to_string()))
        })
        .await;
        assert_eq!(calls, [(1, ChangeKind::Deleted), (5, ChangeKind::Created)]);
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
        let out = apply(&[], &[], Limits::default(), |_| {
            calls += 1;
            std::future::ready(Ok::<_, Route53Error>("C".to_string()))
        })
        .await;
        assert_eq!(calls, 0);
        assert!(out.done.is_empty() && out.refused.is_empty());
    }
}
