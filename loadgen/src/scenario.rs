//! A scenario: several weighted requests instead of one (`--scenario`, a
//! LoadTest's `test.requests`), each with its own checks and its own
//! figures in the summary.
//!
//! Which request the run's i-th request is comes from a [`Wheel`]: the
//! weights laid out by smooth weighted round-robin (nginx's), so any run
//! of `sum(weights)` consecutive requests holds each request exactly its
//! weight's times, interleaved (8:2 sends `AABAAAABAA`, not eight A's and
//! then two B's), the same on every runner and in every model. No random
//! numbers: two runs of one LoadTest send the same mix.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::check::{Checks, MAX_STATUSES, Needle};
use crate::summary::{ErrorKind, histogram, record};

/// The most requests a scenario holds (a LoadTest's limit too): with 32
/// stages and every error kind, their counts still fit in 4 KiB.
pub const MAX_REQUESTS: usize = 8;
/// The largest weight (a LoadTest allows 100).
pub const MAX_WEIGHT: u32 = 1000;

/// One request of a scenario as the operator writes it (`SCENARIO`, a JSON
/// list): a value from a Secret is a file named here, never its content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestSpec {
    /// 1-1000.
    pub weight: u32,
    pub method: String,
    /// Path and query, starting with `/` (replacing the URL's).
    pub path: String,
    /// Literal headers, sent after the run's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// Headers whose values are read from these files (mounted Secrets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub header_files: Vec<(String, PathBuf)>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub body: String,
    /// The body from this file instead (a mounted Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_file: Option<PathBuf>,
    /// As `--expect-status`, for this request's answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expect_status: Vec<u16>,
    /// As `--expect-body-contains`, for this request's answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_body_contains: Option<String>,
}

/// One request of a scenario, ready to be built into a request.
#[derive(Clone)]
pub struct Variant {
    pub weight: u32,
    pub method: reqwest::Method,
    /// Path and query, starting with `/`.
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// Values from files: marked sensitive, never printed.
    pub secret_headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub checks: Checks,
}

/// Without the values read from files (nor the body, which may be one).
impl std::fmt::Debug for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret: Vec<(&str, &str)> =
            self.secret_headers.iter().map(|(k, _)| (k.as_str(), "<from a file>")).collect();
        f.debug_struct("Variant")
            .field("weight", &self.weight)
            .field("method", &self.method)
            .field("path", &self.path)
            .field("headers", &self.headers)
            .field("secret_headers", &secret)
            .field("body_bytes", &self.body.len())
            .field("checks", &self.checks)
            .finish()
    }
}

/// Reads a file's text or bytes for a scenario (the caller's bounded readers).
pub struct Files<'a> {
    pub header_value: &'a dyn Fn(&std::path::Path) -> Result<String, String>,
    pub body: &'a dyn Fn(&std::path::Path) -> Result<Vec<u8>, String>,
}

/// The scenario in `json`, its files read; the error names the request
/// (by its place, from 1) and why, never a value read from a file.
pub fn parse(json: &str, files: &Files<'_>) -> Result<Vec<Variant>, String> {
    let specs: Vec<RequestSpec> = serde_json::from_str(json).map_err(|e| format!("not a scenario: {e}"))?;
    if specs.is_empty() || specs.len() > MAX_REQUESTS {
        return Err(format!("{} requests: a scenario holds 1 to {MAX_REQUESTS}", specs.len()));
    }
    specs.iter().enumerate().map(|(i, s)| s.load(files).map_err(|why| format!("request {}: {why}", i + 1))).collect()
}

impl RequestSpec {
    fn load(&self, files: &Files<'_>) -> Result<Variant, String> {
        if !(1..=MAX_WEIGHT).contains(&self.weight) {
            return Err(format!("weight {} is not 1-{MAX_WEIGHT}", self.weight));
        }
        let method = reqwest::Method::from_bytes(self.method.as_bytes()).map_err(|e| format!("method: {e}"))?;
        if !self.path.starts_with('/') || self.path.chars().any(char::is_whitespace) {
            return Err(format!("path {:?} does not start with / or holds a space", self.path));
        }
        for (k, v) in &self.headers {
            reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header {k:?}: {e}"))?;
            reqwest::header::HeaderValue::from_str(v).map_err(|e| format!("header {k}: {e}"))?;
        }
        let mut secret_headers = Vec::new();
        for (k, path) in &self.header_files {
            reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header {k:?}: {e}"))?;
            secret_headers.push((k.clone(), (files.header_value)(path).map_err(|why| format!("header {k}: {why}"))?));
        }
        let body = match &self.body_file {
            Some(_) if !self.body.is_empty() => return Err("a body and a body file".to_string()),
            Some(path) => (files.body)(path)?,
            None => self.body.clone().into_bytes(),
        };
        if self.expect_status.len() > MAX_STATUSES || self.expect_status.iter().any(|s| !(101..=599).contains(s)) {
            return Err(format!("expected statuses: at most {MAX_STATUSES}, each 101-599"));
        }
        let body_contains = match self.expect_body_contains.as_deref().filter(|s| !s.is_empty()) {
            None => None,
            Some(text) => Some(Needle::new(text.as_bytes()).map_err(|e| format!("expected body substring: {e}"))?),
        };
        Ok(Variant {
            weight: self.weight,
            method,
            path: self.path.clone(),
            headers: self.headers.clone(),
            secret_headers,
            body,
            checks: Checks { statuses: self.expect_status.clone(), body_contains },
        })
    }
}

/// Which request of a scenario each of a run's requests is (see the
/// module's comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wheel(Vec<u16>);

impl Wheel {
    /// The wheel of `weights` (each at least 1; at most [`MAX_REQUESTS`]
    /// of them). One weight: always the first.
    pub fn new(weights: &[u32]) -> Self {
        let weights: Vec<i64> =
            weights.iter().take(MAX_REQUESTS).map(|w| i64::from((*w).clamp(1, MAX_WEIGHT))).collect();
        if weights.len() <= 1 {
            return Wheel(vec![0]);
        }
        let total: i64 = weights.iter().sum();
        let mut current = vec![0i64; weights.len()];
        let mut slots = Vec::new();
        for _ in 0..total {
            for (c, w) in current.iter_mut().zip(&weights) {
                *c += w;
            }
            // The largest current value; the first of equals.
            let mut best = 0;
            for (k, c) in current.iter().enumerate() {
                if *c > current[best] {
                    best = k;
                }
            }
            current[best] -= total;
            slots.push(u16::try_from(best).unwrap_or(0));
        }
        Wheel(slots)
    }

    /// The request the run's `i`-th request is.
    pub fn pick(&self, i: u64) -> usize {
        let len = u64::try_from(self.0.len()).unwrap_or(1).max(1);
        usize::try_from(i % len).ok().and_then(|at| self.0.get(at)).map_or(0, |k| usize::from(*k))
    }
}

/// What one request of a scenario measured over a run.
#[derive(Debug, Clone)]
pub struct RequestOutcome {
    /// Answered or failed.
    pub requests: u64,
    pub errors: BTreeMap<ErrorKind, u64>,
    /// Latencies of its answers without error.
    pub histogram: Histogram<u64>,
}

/// Each request's figures while a run goes on, in a few shards (a worker
/// records into its own, `worker % shards`) so that workers on different
/// cores rarely wait for one another's lock; merged at the end. Only for
/// a scenario: a single request's figures are the run's.
pub struct Tallies {
    /// `shards[s][k]`: request `k`'s figures recorded through shard `s`.
    shards: Vec<Vec<Mutex<RequestOutcome>>>,
}

impl Tallies {
    /// For `n` requests (0: none kept), in as many shards as cores (at
    /// most 4: each request's histogram is some 170 KB a shard).
    pub fn new(n: usize) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let shards = if n == 0 { 0 } else { cores.clamp(1, 4) };
        let blank = || Mutex::new(RequestOutcome { requests: 0, errors: BTreeMap::new(), histogram: histogram() });
        Tallies { shards: (0..shards).map(|_| (0..n).map(|_| blank()).collect()).collect() }
    }

    /// Request `k` completed: answered (`None`) after `latency`, or failed;
    /// recorded by `worker` (any number: it picks the shard).
    pub fn record(&self, worker: u64, k: usize, result: Option<ErrorKind>, latency: Duration) {
        let Some(shard) = self.shards.get(usize::try_from(worker).unwrap_or(0) % self.shards.len().max(1)) else {
            return;
        };
        let Some(t) = shard.get(k) else { return };
        let mut t = t.lock().unwrap_or_else(PoisonError::into_inner);
        t.requests += 1;
        match result {
            None => record(&mut t.histogram, latency),
            Some(kind) => *t.errors.entry(kind).or_default() += 1,
        }
    }

    /// Every request's figures, in the scenario's order.
    pub fn outcomes(&self) -> Vec<RequestOutcome> {
        let Some((first, rest)) = self.shards.split_first() else { return Vec::new() };
        let mut out: Vec<RequestOutcome> =
            first.iter().map(|t| t.lock().unwrap_or_else(PoisonError::into_inner).clone()).collect();
        for shard in rest {
            for (o, t) in out.iter_mut().zip(shard) {
                let t = t.lock().unwrap_or_else(PoisonError::into_inner);
                o.requests += t.requests;
                for (kind, n) in &t.errors {
                    *o.errors.entry(*kind).or_default() += n;
                }
                let _ = o.histogram.add(&t.histogram);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn files() -> Files<'static> {
        Files {
            header_value: &|p| {
                if p.ends_with("token") { Ok("s3cret".into()) } else { Err(format!("reading {}", p.display())) }
            },
            body: &|p| {
                if p.ends_with("body") { Ok(b"{\"a\":1}".to_vec()) } else { Err(format!("reading {}", p.display())) }
            },
        }
    }

    #[test]
    fn eight_to_two_interleaves() {
        let w = Wheel::new(&[8, 2]);
        let picks: String = (0..10).map(|i| if w.pick(i) == 0 { 'A' } else { 'B' }).collect();
        assert_eq!(picks, "AABAAAABAA");
        assert_eq!(Wheel::new(&[5]).pick(7), 0);
        assert_eq!(Wheel::new(&[]).pick(3), 0);
    }

    proptest! {
        /// Any sum(weights) consecutive requests hold each request exactly
        /// its weight's times.
        #[test]
        fn every_window_holds_each_weight(weights in proptest::collection::vec(1u32..=100, 1..=8), from in 0u64..10_000) {
            let w = Wheel::new(&weights);
            let total: u64 = weights.iter().map(|w| u64::from(*w)).sum();
            let mut counts = vec![0u32; weights.len()];
            for i in from..from + total {
                counts[w.pick(i)] += 1;
            }
            prop_assert_eq!(counts, weights);
        }
    }

    #[test]
    fn a_scenario_reads_its_files_and_names_what_is_wrong() {
        let json = r#"[{"weight":8,"method":"GET","path":"/"},
            {"weight":2,"method":"POST","path":"/cart?x=1","headers":[["X-A","1"]],
             "headerFiles":[["Authorization","/s/token"]],"bodyFile":"/s/body","expectStatus":[201],
             "expectBodyContains":"ok"}]"#;
        let v = parse(json, &files()).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!((v[1].method.as_str(), v[1].path.as_str()), ("POST", "/cart?x=1"));
        assert_eq!(v[1].secret_headers, [("Authorization".to_string(), "s3cret".to_string())]);
        assert_eq!(v[1].body, b"{\"a\":1}");
        assert_eq!(v[1].checks.statuses, [201]);
        assert!(v[1].checks.body_contains.is_some() && v[0].checks.body_contains.is_none());
        for (wrong, says) in [
            (r#"[]"#, "0 requests"),
            (r#"[{"weight":0,"method":"GET","path":"/"}]"#, "request 1: weight 0"),
            (r#"[{"weight":1,"method":"GET","path":"x"}]"#, "request 1: path"),
            (r#"[{"weight":1,"method":"GET","path":"/"},{"weight":1,"method":"G T","path":"/"}]"#, "request 2: method"),
            (r#"[{"weight":1,"method":"GET","path":"/","headerFiles":[["A","/s/other"]]}]"#, "reading /s/other"),
            (r#"[{"weight":1,"method":"GET","path":"/","body":"b","bodyFile":"/s/body"}]"#, "a body and a body file"),
            (r#"[{"weight":1,"method":"GET","path":"/","expectStatus":[99]}]"#, "expected statuses"),
            (r#"[{"weight":1,"method":"GET","path":"/","extra":1}]"#, "unknown field"),
        ] {
            let err = parse(wrong, &files()).unwrap_err();
            assert!(err.contains(says), "{wrong}: {err}");
            assert!(!err.contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn tallies_count_answers_and_errors_per_request() {
        let t = Tallies::new(2);
        t.record(0, 0, None, Duration::from_millis(3));
        t.record(1, 1, Some(ErrorKind::Check), Duration::from_millis(1));
        t.record(7, 1, None, Duration::from_millis(9));
        t.record(3, 5, None, Duration::from_millis(9));
        let o = t.outcomes();
        assert_eq!((o[0].requests, o[1].requests), (1, 2));
        assert_eq!(o[1].errors, BTreeMap::from([(ErrorKind::Check, 1)]));
        assert_eq!((o[0].histogram.len(), o[1].histogram.len()), (1, 1));
    }
}
