//! Splitting a plan into ChangeResourceRecordSets requests within Route53's
//! limits, never separating a name's records from its ownership TXT.

use crate::plan::ChangeGroup;

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
}
