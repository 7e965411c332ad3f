//! Splitting a plan into ChangeResourceRecordSets requests within Route53's
//! limits, never separating a name's records from its ownership TXT.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::plan::{ChangeGroup, ChangeKind};

/// Route53's per-request limits (UPSERT counted twice, as Route53 does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// ResourceRecord elements per request.
    pub max_records: usize,
    /// Characters in all Value elements per request.
    pub max_chars: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_records: 1000, max_chars: 32_000 }
    }
}

/// Greedy, in order: a batch is closed when the next group would push it
/// over a limit. A group larger than a limit on its own goes alone (Route53
/// will refuse it and the error is reported for that Service only).
pub fn batches(groups: &[ChangeGroup], limits: Limits) -> Vec<Vec<&ChangeGroup>> {
    let mut out: Vec<Vec<&ChangeGroup>> = Vec::new();
    let mut current: Vec<&ChangeGroup> = Vec::new();
    let (mut records, mut chars) = (0usize, 0usize);
    for g in groups {
        let (r, c) = (g.cost_records(), g.cost_chars());
        if !current.is_empty() && (records + r > limits.max_records || chars + c > limits.max_chars) {
            out.push(std::mem::take(&mut current));
            records = 0;
            chars = 0;
        }
        current.push(g);
        records += r;
        chars += c;
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// How many of `groups`, from the front, fill whole requests: all but the
/// last request, which may still have room for changes yet to come.
pub fn full_batches(groups: &[ChangeGroup], limits: Limits) -> usize {
    let batches = batches(groups, limits);
    batches.iter().rev().skip(1).map(Vec::len).sum()
}

/// How many of `groups` (ordered by [`oldest_first`], their times in
/// `since`) a sync sends. When the stream of changes has ended (`hold`
/// false): all. While it goes on: the full requests — and the last, partial
/// one too when it holds a change first planned `max_wait`
/// (`--max-batch-delay`) or longer before `now`: that change has waited long enough, and
/// the request it goes in might as well carry everything pending. The
/// oldest change is always in the first request, so a change that falls
/// overdue while full requests exist goes with them, costing no request.
pub fn sending(
    groups: &[ChangeGroup],
    limits: Limits,
    hold: bool,
    since: &HashMap<String, Instant>,
    now: Instant,
    max_wait: Duration,
) -> usize {
    if !hold {
        return groups.len();
    }
    let full = full_batches(groups, limits);
    let late = groups[full..]
        .iter()
        .any(|g| since.get(&g.name).is_some_and(|t| now.saturating_duration_since(*t) >= max_wait));
    if late { groups.len() } else { full }
}

/// Orders `groups` deletions first, then oldest first — by when each
/// name's change was first planned (`first_planned`; new ones at `now`),
/// then by name — so that a change held back for a fuller request goes out
/// in the next one. Returns those times.
///
/// Deletions first: after an outage or a restart, a record of a Service
/// deleted meanwhile still points at its ClusterIP, which the cluster may
/// have given to another Service since; it must not wait behind thousands
/// of creations (at `--route53-rps` a request or two a second).
pub fn oldest_first(
    groups: &mut [ChangeGroup],
    first_planned: &HashMap<String, Instant>,
    now: Instant,
) -> HashMap<String, Instant> {
    let since: HashMap<String, Instant> =
        groups.iter().map(|g| (g.name.clone(), first_planned.get(&g.name).copied().unwrap_or(now))).collect();
    groups.sort_by_cached_key(|g| (g.kind != ChangeKind::Deleted, since.get(&g.name).copied(), g.name.clone()));
    since
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::Claim;
    use crate::model::{RecordSet, RecordType};
    use crate::plan::{Policy, plan};

    #[test]
    fn five_thousand_services_fit_in_few_requests() {
        let claims: Vec<Claim> = (0..5000)
            .map(|i| {
                let resource = format!("service/bench/svc-{i:05}");
                Claim {
                    order: (0, resource.clone()),
                    records: vec![RecordSet::new(
                        format!("kube-svc-{i:05}.bench.example"),
                        RecordType::A,
                        300,
                        vec![format!("10.96.{}.{}", i / 250, i % 250)],
                    )],
                    resource,
                }
            })
            .collect();
        let p = plan(&claims, &[], "default", Policy::Sync);
        let bs = batches(&p.groups, Limits::default());
        assert!(bs.len() <= 15, "{} requests", bs.len());
        assert!(bs.len() >= 10, "1000 records per request at most: {} requests", bs.len());
        for b in &bs {
            assert!(b.iter().map(|g| g.cost_records()).sum::<usize>() <= 1000);
            assert!(b.iter().map(|g| g.cost_chars()).sum::<usize>() <= 32_000);
        }
    }

    #[test]
    fn empty_plan_no_request() {
        assert!(batches(&[], Limits::default()).is_empty());
        assert_eq!(full_batches(&[], Limits::default()), 0);
    }

    fn groups(names: &[&str]) -> Vec<ChangeGroup> {
        let claims: Vec<Claim> = names
            .iter()
            .map(|n| {
                let resource = format!("service/ns/{n}");
                Claim {
                    order: (0, resource.clone()),
                    records: vec![RecordSet::new(format!("{n}.z"), RecordType::A, 300, vec!["10.0.0.1".into()])],
                    resource,
                }
            })
            .collect();
        plan(&claims, &[], "me", Policy::Sync).groups
    }

    #[test]
    fn only_whole_requests_are_full() {
        let gs = groups(&["a", "b", "c", "d", "e"]);
        let limits = Limits { max_records: 4, max_chars: 10_000 }; // 2 names (A + TXT each) per request
        assert_eq!(full_batches(&gs, limits), 4, "a+b, c+d full; e waits");
        assert_eq!(full_batches(&gs[..4], limits), 2, "the last request is never counted full");
        assert_eq!(full_batches(&gs[..1], limits), 0);
        // Sending the full prefix makes exactly the full requests.
        assert_eq!(batches(&gs[..4], limits).len(), 2);
    }

    #[test]
    fn a_partial_request_goes_mid_stream_only_with_an_overdue_change() {
        let t0 = Instant::now();
        let limits = Limits { max_records: 4, max_chars: 10_000 }; // 2 names per request
        let mut gs = groups(&["a", "b", "c", "d", "e"]);
        let first: HashMap<String, Instant> = [("a.z".to_string(), t0)].into();
        let later = t0 + Duration::from_secs(10);
        let since = oldest_first(&mut gs, &first, later);
        let (now, wait) = (later + Duration::from_secs(5), Duration::from_secs(15));
        // The stream has ended: everything.
        assert_eq!(sending(&gs, limits, false, &since, now, wait), 5);
        // Mid-stream, nothing overdue in the partial request: the full ones.
        assert_eq!(sending(&gs, limits, true, &since, now, wait), 4, "a (overdue) goes in the first full request");
        assert_eq!(
            sending(&gs[..1], limits, true, &since, now, wait),
            1,
            "a alone is overdue: its partial request goes"
        );
        assert_eq!(sending(&gs[1..], limits, true, &since, now, wait), 2, "b..e: nothing overdue, d and e wait");
        // 15 s after b..e were planned, e is overdue too: the partial goes.
        assert_eq!(sending(&gs, limits, true, &since, later + wait, wait), 5);
    }

    #[test]
    fn deletions_go_before_creations_and_updates() {
        // After a restart every change is new: by name, the deletion of
        // zz.z (its Service gone, its ClusterIP maybe someone else's now)
        // would go last.
        let mut zone = Vec::new();
        for g in groups(&["zz", "m"]) {
            zone.extend(g.changes.into_iter().map(|c| c.record));
        }
        let mut claims: Vec<Claim> = ["a", "b", "c"]
            .iter()
            .map(|n| {
                let resource = format!("service/ns/{n}");
                let records = vec![RecordSet::new(format!("{n}.z"), RecordType::A, 300, vec!["10.0.0.9".into()])];
                Claim { order: (0, resource.clone()), records, resource }
            })
            .collect();
        claims.push(Claim {
            resource: "service/ns/m".into(),
            order: (0, "service/ns/m".into()),
            records: vec![RecordSet::new("m.z", RecordType::A, 300, vec!["10.0.0.2".into()])],
        });
        let mut p = plan(&claims, &zone, "me", Policy::Sync).groups;
        let since = oldest_first(&mut p, &HashMap::new(), Instant::now());
        let order: Vec<(&str, ChangeKind)> = p.iter().map(|g| (g.name.as_str(), g.kind)).collect();
        assert_eq!(
            order,
            [
                ("zz.z", ChangeKind::Deleted),
                ("a.z", ChangeKind::Created),
                ("b.z", ChangeKind::Created),
                ("c.z", ChangeKind::Created),
                ("m.z", ChangeKind::Updated)
            ]
        );
        // In requests of two names, the deletion is in the first.
        let limits = Limits { max_records: 4, max_chars: 10_000 };
        assert_eq!(batches(&p, limits)[0][0].name, "zz.z");
        assert_eq!(sending(&p, limits, false, &since, Instant::now(), Duration::from_secs(15)), 5);
    }

    #[test]
    fn held_changes_go_first() {
        let t0 = Instant::now();
        let later = t0 + std::time::Duration::from_secs(5);
        let mut gs = groups(&["a", "b", "c"]);
        let first: HashMap<String, Instant> = [("c.z".to_string(), t0)].into();
        let since = oldest_first(&mut gs, &first, later);
        let order: Vec<&str> = gs.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(order, ["c.z", "a.z", "b.z"], "c was held: it goes first; then by name");
        assert_eq!(since["c.z"], t0);
        assert_eq!(since["a.z"], later);
    }
}
