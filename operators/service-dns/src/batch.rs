//! Splitting a plan into ChangeResourceRecordSets requests within Route53's
//! limits, never separating a name's records from its ownership TXT; and
//! what Route53's answer to a request means for the requests that follow
//! (back off, or narrow a refused request down to the names it refused).

use std::collections::VecDeque;

use crate::plan::{ChangeGroup, ChangeKind};
use crate::route53::{FailureKind, Route53Error};

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

/// What was sent.
#[derive(Default)]
pub struct Applied<'a> {
    /// `(change id, groups)` Route53 accepted.
    pub done: Vec<(String, Vec<&'a ChangeGroup>)>,
    /// Names Route53 refused, each proven alone (or named in its answer).
    pub refused: Vec<(&'a ChangeGroup, Route53Error)>,
    /// Groups not applied because Route53 was unavailable or throttling:
    /// the sync backs off with all of them.
    pub unsent: Vec<&'a ChangeGroup>,
    /// Why `unsent` is not empty.
    pub outage: Option<Route53Error>,
}

/// What to do after a batch failed.
#[derive(Debug, PartialEq, Eq)]
pub enum Next<'a> {
    /// Route53 is unavailable or throttling: stop, back off with this batch
    /// and every one after it. Splitting would send each name into the same
    /// timeout (380 names × 5 s) or throttle.
    BackOff,
    /// Route53 refused the batch, naming these groups: they failed; send
    /// the rest again as one batch.
    Culprits { failed: Vec<&'a ChangeGroup>, rest: Vec<&'a ChangeGroup> },
    /// Route53 refused the batch without saying which name: send each half
    /// on its own (a bad name is found in log2(n) requests, not n).
    Halves(Vec<&'a ChangeGroup>, Vec<&'a ChangeGroup>),
    /// A batch of one name refused: that name failed.
    Failed(&'a ChangeGroup),
}

/// Whether Route53's message names `name` (its messages say
/// `[name='kube-x.example.com.', type='A']`).
fn names(message: &str, name: &str) -> bool {
    message.contains(&format!("name='{name}.'")) || message.contains(&format!("name='{name}'"))
}

/// The decision after `batch` failed with `e`.
pub fn after_failure<'a>(batch: &[&'a ChangeGroup], e: &Route53Error) -> Next<'a> {
    if e.kind() != FailureKind::Refused {
        return Next::BackOff;
    }
    if let [one] = batch {
        return Next::Failed(one);
    }
    let (failed, rest): (Vec<&ChangeGroup>, Vec<&ChangeGroup>) =
        batch.iter().partition(|g| g.changes.iter().any(|c| names(&e.message, &c.record.name)));
    if !failed.is_empty() && !rest.is_empty() {
        return Next::Culprits { failed, rest };
    }
    let (a, b) = batch.split_at(batch.len() / 2);
    Next::Halves(a.to_vec(), b.to_vec())
}

/// The requests of one sync, in the order they go, and what each answer
/// means: pure (the writes are `apply`'s), so that every decision taken
/// after a failed write is taken here, from its answer.
pub struct Requests<'a> {
    queue: VecDeque<Vec<&'a ChangeGroup>>,
    out: Applied<'a>,
}

impl<'a> Requests<'a> {
    /// `groups` in as few requests as `limits` allow, and each of `alone`
    /// in a request of its own (names coming back from quarantine: if one
    /// fails again it must not take a full batch down with it). Deletions go
    /// first (`groups` is ordered so by `hold::Hold::order`): the deletions
    /// among `alone`, then `groups`, then the rest of `alone`.
    pub fn new(groups: &'a [ChangeGroup], alone: &'a [ChangeGroup], limits: Limits) -> Self {
        let deletion = |g: &&ChangeGroup| g.kind == ChangeKind::Deleted;
        let mut queue: VecDeque<Vec<&ChangeGroup>> = alone.iter().filter(deletion).map(|g| vec![g]).collect();
        queue.extend(batches(groups, limits));
        queue.extend(alone.iter().filter(|g| !deletion(g)).map(|g| vec![g]));
        Self { queue, out: Applied::default() }
    }

    /// The next request to send (None: done, or backing off).
    pub fn next_request(&mut self) -> Option<Vec<&'a ChangeGroup>> {
        self.queue.pop_front()
    }

    /// Route53's answer to `batch`: accepted (its change id), or what the
    /// failure means ([`after_failure`]) — the requests that follow change
    /// accordingly.
    pub fn answered(&mut self, batch: Vec<&'a ChangeGroup>, answer: Result<String, Route53Error>) {
        let e = match answer {
            Ok(id) => {
                self.out.done.push((id, batch));
                return;
            }
            Err(e) => e,
        };
        match after_failure(&batch, &e) {
            Next::BackOff => {
                tracing::warn!(error = %e, names = batch.len(), "Route53 unavailable; backing off with the whole batch");
                self.out.unsent.extend(batch);
                self.out.unsent.extend(self.queue.drain(..).flatten());
                self.out.outage = Some(e);
            }
            Next::Culprits { failed, rest } => {
                tracing::warn!(error = %e, refused = failed.len(), "change batch refused; sending the rest again");
                self.out.refused.extend(failed.into_iter().map(|g| (g, e.clone())));
                self.queue.push_front(rest);
            }
            Next::Halves(a, b) => {
                tracing::warn!(error = %e, names = batch.len(), "change batch refused; sending each half");
                self.queue.push_front(b);
                self.queue.push_front(a);
            }
            Next::Failed(g) => self.out.refused.push((g, e)),
        }
    }

    /// What was sent, once [`Requests::next_request`] has nothing more.
    pub fn finish(self) -> Applied<'a> {
        self.out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::desired::Claim;
    use crate::model::{RecordSet, RecordType};
    use crate::plan::tests::{ME, arb_claims, arb_zone};
    use crate::plan::{Policy, plan};
    use proptest::prelude::*;

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

    /// The change groups of one A record (and its TXT) per name in `names`.
    pub(crate) fn groups(names: &[&str]) -> Vec<ChangeGroup> {
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

    fn err(code: &str, message: &str) -> Route53Error {
        Route53Error::new("ChangeResourceRecordSets", code, message)
    }

    #[test]
    fn decisions() {
        let gs = groups(&["s0", "s1", "s2"]);
        let refs: Vec<&ChangeGroup> = gs.iter().collect();
        assert_eq!(after_failure(&refs, &err("Throttling", "")), Next::BackOff);
        assert_eq!(after_failure(&refs[..1], &err("InvalidChangeBatch", "")), Next::Failed(refs[0]));
        let txt_named = err(
            "InvalidChangeBatch",
            "Tried to delete resource record set [name='_flotilla-owner.s1.z.', type='TXT'] but the values provided do not match the current values",
        );
        assert_eq!(
            after_failure(&refs, &txt_named),
            Next::Culprits { failed: vec![refs[1]], rest: vec![refs[0], refs[2]] },
            "the TXT of s1 names the group of s1"
        );
        assert!(
            matches!(after_failure(&refs, &err("InvalidInput", "?")), Next::Halves(a, b) if a.len() == 1 && b.len() == 2)
        );
    }

    #[test]
    fn a_refused_request_is_narrowed_from_its_answer() {
        let gs = groups(&["s0", "s1", "s2", "s3", "s4"]);
        let limits = Limits { max_records: 8, max_chars: 10_000 }; // 4 names per request
        let mut r = Requests::new(&gs, &[], limits);
        let first = r.next_request().unwrap_or_default();
        assert_eq!(first.len(), 4);
        // Refused, naming s1: s1 failed, s0, s2, s3 go again before s4.
        let named = err(
            "InvalidChangeBatch",
            "Tried to create resource record set [name='s1.z.', type='A'] but it already exists",
        );
        r.answered(first, Err(named));
        let again = r.next_request().unwrap_or_default();
        assert_eq!(again.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(), ["s0.z", "s2.z", "s3.z"]);
        r.answered(again, Ok("C1".into()));
        // Throttled: back off with it and everything after it.
        let last = r.next_request().unwrap_or_default();
        r.answered(last, Err(err("Throttling", "slow down")));
        assert!(r.next_request().is_none());
        let out = r.finish();
        assert_eq!(out.refused.iter().map(|(g, _)| g.name.as_str()).collect::<Vec<_>>(), ["s1.z"]);
        assert_eq!(out.done.len(), 1);
        assert_eq!(out.unsent.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(), ["s4.z"]);
        assert_eq!(out.outage.map(|e| e.code), Some("Throttling".to_string()));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Batches respect Route53's limits and keep each name's records
        /// with its TXT; together they are the whole plan, in order.
        #[test]
        fn batches_respect_limits(
            zone in arb_zone(),
            claims in arb_claims(),
            max_records in 2usize..12,
            max_chars in 60usize..400,
        ) {
            let p = plan(&claims, &zone, ME, Policy::Sync);
            let limits = Limits { max_records, max_chars };
            let bs = batches(&p.groups, limits);
            let mut flat = Vec::new();
            for b in &bs {
                let (recs, chars): (usize, usize) =
                    b.iter().map(|g| (g.cost_records(), g.cost_chars())).fold((0, 0), |a, x| (a.0 + x.0, a.1 + x.1));
                prop_assert!(b.len() == 1 || (recs <= max_records && chars <= max_chars), "batch over limits: {recs} {chars}");
                prop_assert!(!b.is_empty());
                flat.extend(b.iter().cloned().cloned());
            }
            prop_assert_eq!(flat, p.groups);
        }
    }
}
