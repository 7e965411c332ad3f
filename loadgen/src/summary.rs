//! A runner's summary — counts, errors by kind and its latency histogram —
//! small enough for a container's termination message (4 KiB), and the
//! merge of many: histograms are added bucket by bucket, so the merged
//! percentiles are those of one histogram fed every request. Percentiles
//! are never averaged. Pure.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use serde::{Deserialize, Serialize};

/// The termination message's limit (the kubelet truncates beyond it).
pub const MAX_MESSAGE: usize = 4096;
/// Latencies are recorded in microseconds, 1 µs to 10 min.
pub const MAX_MICROS: u64 = 600_000_000;

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ErrorKind {
    /// The answer was 5xx.
    Http5xx,
    /// The answer was 4xx.
    Http4xx,
    /// No answer within the request timeout.
    Timeout,
    /// The connection could not be made (refused, DNS, reset).
    Connect,
    /// Anything else (a malformed answer, a body read failure).
    Other,
    /// An answer that failed the run's checks: a status not among the
    /// expected ones (`--expect-status`), or a body without the expected
    /// substring (`--expect-body-contains`).
    Check,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Http5xx => "http5xx",
            ErrorKind::Http4xx => "http4xx",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Connect => "connect",
            ErrorKind::Other => "other",
            ErrorKind::Check => "check",
        }
    }
}

/// A new, empty latency histogram (µs, 3 significant digits).
pub fn histogram() -> Histogram<u64> {
    // 1..MAX_MICROS at 3 digits is a valid configuration: this cannot fail.
    Histogram::new_with_bounds(1, MAX_MICROS, 3)
        .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!()))
}

/// Records one latency (clamped into the histogram's range).
pub fn record(h: &mut Histogram<u64>, latency: Duration) {
    let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX).clamp(1, MAX_MICROS);
    h.saturating_record(us);
}

/// What one runner reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Format version.
    pub v: u32,
    /// Requests sent (answered or not).
    pub requests: u64,
    /// Failed requests by kind.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<ErrorKind, u64>,
    /// Requests not sent because the deadline came first, or cut short by
    /// it (in flight at the end: neither answered nor failed).
    #[serde(default)]
    pub not_sent: u64,
    /// Wall time of the run, in milliseconds.
    pub elapsed_ms: u64,
    /// Significant digits the histogram was reduced to (3, or fewer when
    /// the message would not fit otherwise).
    pub digits: u8,
    /// The latency histogram of every answered request, V2 + deflate,
    /// base64.
    pub hist: String,
    /// Requests of an arrival-rate profile not sent because every
    /// connection was busy when they were due.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped: u64,
    /// Per stage of an arrival-rate profile, in order (empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageSummary>,
    /// Whether the runner kept up (absent: it did, or could not tell).
    #[serde(flatten)]
    pub strain: crate::pace::Strain,
    /// Ended early by the operator's stop signal (`thresholds.abortOnFail`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
    /// A scenario's requests, in its order (empty without one).
    #[serde(rename = "q", default, skip_serializing_if = "Vec::is_empty")]
    pub by_request: Vec<RequestSummary>,
    /// Made to fit: precision lowered or histograms left out. The runner
    /// then prints the fuller summary on stdout ([`FULL_PREFIX`]), where
    /// the operator reads it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more: bool,
}

/// The line a runner prints its fuller summary on when its termination
/// message had to leave something out: this, then the JSON.
pub const FULL_PREFIX: &str = "flotilla-summary ";
/// The fuller summary's line, [`FULL_PREFIX`] included: every stage of a
/// 100-step capacity search with its histogram, and a scenario's requests.
pub const MAX_FULL: usize = 64 * 1024;

/// One request's share of a scenario's summary (short keys, as a stage's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestSummary {
    /// Answered or failed.
    #[serde(rename = "r", default)]
    pub requests: u64,
    /// Failed, by kind.
    #[serde(rename = "e", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<ErrorKind, u64>,
    /// Its answers' latency histogram (as `hist`, at the same digits);
    /// absent when the message had no room for it.
    #[serde(rename = "h", default, skip_serializing_if = "Option::is_none")]
    pub hist: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One stage's share of a runner's summary (short keys: 32 of them must
/// fit beside the whole in [`MAX_MESSAGE`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageSummary {
    /// Requests sent whose scheduled time fell in the stage.
    #[serde(rename = "r", default)]
    pub requests: u64,
    /// Of them, failed.
    #[serde(rename = "e", default, skip_serializing_if = "is_zero")]
    pub errors: u64,
    /// Not sent: every connection was busy when they were due.
    #[serde(rename = "d", default, skip_serializing_if = "is_zero")]
    pub dropped: u64,
    /// The stage's latency histogram (as `hist`, at the same digits);
    /// absent when the message had no room for it.
    #[serde(rename = "h", default, skip_serializing_if = "Option::is_none")]
    pub hist: Option<String>,
}

/// What a runner measured in one stage.
#[derive(Debug, Clone)]
pub struct StageOutcome {
    pub requests: u64,
    pub errors: u64,
    pub dropped: u64,
    pub histogram: Histogram<u64>,
}

/// What a run adds to a summary beyond its counts: an arrival-rate
/// profile's dropped requests and stages, and how the runner kept up.
#[derive(Debug, Clone, Default)]
pub struct Staged {
    pub dropped: u64,
    pub stages: Vec<StageOutcome>,
    pub strain: crate::pace::Strain,
    /// Ended early by the operator's stop signal.
    pub stopped: bool,
    /// A scenario's figures per request, in its order (empty without one).
    pub requests: Vec<crate::scenario::RequestOutcome>,
}

/// Stages a merge takes from one summary at most (the CRD allows 32, and
/// a capacity search of 100 steps makes 200).
pub const MAX_STAGES: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error("the summary is not JSON of the expected shape: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the histogram is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("the histogram cannot be decoded: {0}")]
    Histogram(String),
    #[error(
        "the summary does not fit in its budget ({MAX_MESSAGE} bytes for the termination message) even at 1 significant digit"
    )]
    TooLarge,
}

/// A histogram as V2 + deflate, base64 (what `hist` holds).
pub fn encode(h: &Histogram<u64>) -> Result<String, SummaryError> {
    let mut buf = Vec::new();
    V2DeflateSerializer::new().serialize(h, &mut buf).map_err(|e| SummaryError::Histogram(format!("{e:?}")))?;
    Ok(base64::engine::general_purpose::STANDARD_NO_PAD.encode(buf))
}

/// [`encode`] at `digits` significant digits (3: as recorded).
pub fn encode_at(h: &Histogram<u64>, digits: u8) -> Result<String, SummaryError> {
    if digits >= 3 { encode(h) } else { encode(&reduce(h, digits)) }
}

/// A histogram [`encode`] made (a summary's, or the merged one a
/// LoadTest's status holds), checked as untrusted bytes are: the inflated
/// size capped, the declared payload no longer than what is there, our
/// bounds and precision only.
pub fn decode(encoded: &str) -> Result<Histogram<u64>, SummaryError> {
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD.decode(encoded.trim_end_matches('=').as_bytes())?;
    let v2 = checked_v2(&bytes)?;
    Deserializer::new().deserialize(&mut v2.as_slice()).map_err(|e| SummaryError::Histogram(format!("{e:?}")))
}

/// HdrHistogram V2 cookies (8-byte word size), plain and deflated.
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_DEFLATE_COOKIE: u32 = 0x1c84_9314;
/// V2's header: cookie, payload length, offset, digits (u32 each), lowest,
/// highest (u64 each), integer-to-double ratio (f64).
const V2_HEADER: usize = 40;
/// No histogram of ours inflates past this (1 digit to 3, 1 µs to 10 min).
const MAX_INFLATED: usize = 256 * 1024;

fn be32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4).and_then(|s| s.try_into().ok()).map(u32::from_be_bytes)
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8).and_then(|s| s.try_into().ok()).map(u64::from_be_bytes)
}

/// The plain V2 form of `bytes`, if it is a histogram this module could have
/// written; never inflates more than [`MAX_INFLATED`].
fn checked_v2(bytes: &[u8]) -> Result<Vec<u8>, SummaryError> {
    use std::io::Read;
    let bad = |why: &str| SummaryError::Histogram(why.to_string());
    let inner = match be32(bytes, 0) {
        Some(V2_COOKIE) => bytes.to_vec(),
        Some(V2_DEFLATE_COOKIE) => {
            let len = be32(bytes, 4).ok_or_else(|| bad("truncated"))? as usize;
            let compressed = bytes.get(8..8usize.saturating_add(len)).ok_or_else(|| bad("truncated"))?;
            let mut out = Vec::new();
            let limit = u64::try_from(MAX_INFLATED).unwrap_or(u64::MAX) + 1;
            flate2::read::ZlibDecoder::new(compressed)
                .take(limit)
                .read_to_end(&mut out)
                .map_err(|e| bad(&format!("inflating: {e}")))?;
            if out.len() > MAX_INFLATED {
                return Err(bad("inflates past 256 KiB"));
            }
            out
        }
        _ => return Err(bad("not an HdrHistogram V2 encoding")),
    };
    if be32(&inner, 0) != Some(V2_COOKIE) {
        return Err(bad("not an HdrHistogram V2 encoding"));
    }
    let payload = be32(&inner, 4).ok_or_else(|| bad("truncated"))? as usize;
    let digits = be32(&inner, 12).ok_or_else(|| bad("truncated"))?;
    let (low, high) = (be64(&inner, 16), be64(&inner, 24));
    if payload > inner.len().saturating_sub(V2_HEADER) {
        return Err(bad("declares more payload than it holds"));
    }
    if !(1..=3).contains(&digits) || low != Some(1) || high != Some(MAX_MICROS) {
        return Err(bad("not a loadgen histogram (bounds or precision differ)"));
    }
    Ok(inner)
}

/// A copy of `h` at fewer significant digits (coarser buckets).
fn reduce(h: &Histogram<u64>, digits: u8) -> Histogram<u64> {
    let mut out = Histogram::new_with_bounds(1, MAX_MICROS, digits).unwrap_or_else(|_| histogram());
    for v in h.iter_recorded() {
        out.saturating_record_n(v.value_iterated_to(), v.count_at_value());
    }
    out
}

impl Summary {
    /// The summary of a run, as JSON of at most [`MAX_MESSAGE`] bytes: the
    /// histogram loses precision (3 → 2 → 1 significant digits) only if it
    /// must, and says so in `digits`.
    pub fn to_message(
        requests: u64,
        errors: BTreeMap<ErrorKind, u64>,
        not_sent: u64,
        elapsed: Duration,
        h: &Histogram<u64>,
    ) -> Result<String, SummaryError> {
        Self::to_message_staged(requests, errors, not_sent, elapsed, h, &Staged::default())
    }

    /// [`Summary::to_message`] with an arrival-rate profile's dropped
    /// requests and stages, and a scenario's requests. Room is made by
    /// lowering every histogram's precision together, then by leaving out
    /// the stages' histograms, then the requests', and at last the stages
    /// and requests themselves (the message then says `more`: see
    /// [`Summary::to_message_and_full`]).
    pub fn to_message_staged(
        requests: u64,
        errors: BTreeMap<ErrorKind, u64>,
        not_sent: u64,
        elapsed: Duration,
        h: &Histogram<u64>,
        staged: &Staged,
    ) -> Result<String, SummaryError> {
        Self::fit(requests, &errors, not_sent, elapsed, h, staged, MAX_MESSAGE)
    }

    /// The termination message ([`Summary::to_message_staged`]) and, when
    /// it had to leave something out (`more`), the fuller summary within
    /// [`MAX_FULL`] for stdout.
    pub fn to_message_and_full(
        requests: u64,
        errors: BTreeMap<ErrorKind, u64>,
        not_sent: u64,
        elapsed: Duration,
        h: &Histogram<u64>,
        staged: &Staged,
    ) -> Result<(String, Option<String>), SummaryError> {
        let message = Self::fit(requests, &errors, not_sent, elapsed, h, staged, MAX_MESSAGE)?;
        if !Self::parse(&message)?.more {
            return Ok((message, None));
        }
        let full = Self::fit(requests, &errors, not_sent, elapsed, h, staged, MAX_FULL - FULL_PREFIX.len())?;
        Ok((message, Some(full)))
    }

    /// The summary as JSON of at most `budget` bytes, made to fit as
    /// [`Summary::to_message_staged`] says (and marked `more` if it had to).
    fn fit(
        requests: u64,
        errors: &BTreeMap<ErrorKind, u64>,
        not_sent: u64,
        elapsed: Duration,
        h: &Histogram<u64>,
        staged: &Staged,
        budget: usize,
    ) -> Result<String, SummaryError> {
        let at = |h: &Histogram<u64>, digits: u8| if digits == 3 { encode(h) } else { encode(&reduce(h, digits)) };
        // Room is made by lowering the precision, then by leaving out the
        // stages' histograms, then the requests' (counts stay), and at last
        // the stages and requests themselves (the log's fuller summary has
        // them; 200 stages of a 100-step search need it, their counts alone
        // past 4 KiB).
        let levels = [(true, true, true), (false, true, true), (false, false, true), (false, false, false)];
        for (k, (stage_hists, request_hists, parts)) in levels.into_iter().enumerate() {
            let nothing_left = match k {
                1 => staged.stages.is_empty(),
                2 => staged.requests.is_empty(),
                3 => staged.stages.is_empty() && staged.requests.is_empty(),
                _ => false,
            };
            if nothing_left {
                continue;
            }
            for digits in [3u8, 2, 1] {
                let mut stages = Vec::with_capacity(staged.stages.len());
                for st in staged.stages.iter().filter(|_| parts) {
                    stages.push(StageSummary {
                        requests: st.requests,
                        errors: st.errors,
                        dropped: st.dropped,
                        hist: if stage_hists { Some(at(&st.histogram, digits)?) } else { None },
                    });
                }
                let mut by_request = Vec::with_capacity(staged.requests.len());
                for r in staged.requests.iter().filter(|_| parts) {
                    by_request.push(RequestSummary {
                        requests: r.requests,
                        errors: r.errors.clone(),
                        hist: if request_hists { Some(at(&r.histogram, digits)?) } else { None },
                    });
                }
                let s = Summary {
                    v: 1,
                    requests,
                    errors: errors.clone(),
                    more: digits < 3 || !stage_hists || !request_hists || !parts,
                    not_sent,
                    elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                    digits,
                    hist: at(h, digits)?,
                    dropped: staged.dropped,
                    stages,
                    strain: staged.strain,
                    stopped: staged.stopped,
                    by_request,
                };
                let json = serde_json::to_string(&s)?;
                if json.len() <= budget {
                    return Ok(json);
                }
            }
        }
        Err(SummaryError::TooLarge)
    }

    pub fn parse(message: &str) -> Result<Summary, SummaryError> {
        Ok(serde_json::from_str(message.trim())?)
    }

    /// Request `k`'s histogram (of a scenario), if the summary holds it
    /// (checked as [`Summary::histogram`] is).
    pub fn request_histogram(&self, k: usize) -> Result<Option<Histogram<u64>>, SummaryError> {
        match self.by_request.get(k).and_then(|r| r.hist.as_deref()) {
            None => Ok(None),
            Some(hist) => decode(hist).map(Some),
        }
    }

    /// Stage `k`'s histogram, if the summary holds it (checked as
    /// [`Summary::histogram`] is).
    pub fn stage_histogram(&self, k: usize) -> Result<Option<Histogram<u64>>, SummaryError> {
        match self.stages.get(k).and_then(|s| s.hist.as_deref()) {
            None => Ok(None),
            Some(hist) => decode(hist).map(Some),
        }
    }

    /// The histogram. The summary comes from a runner pod, which may run
    /// any image its LoadTest names: the bytes are checked before the
    /// decoder sizes anything by them (inflated size capped, the declared
    /// payload no longer than what is there, our bounds and precision only).
    pub fn histogram(&self) -> Result<Histogram<u64>, SummaryError> {
        decode(&self.hist)
    }

    /// Failed requests.
    pub fn error_count(&self) -> u64 {
        self.errors.values().fold(0u64, |a, b| a.saturating_add(*b))
    }
}

/// Several runners' summaries merged.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    pub runners: usize,
    pub requests: u64,
    pub errors: BTreeMap<ErrorKind, u64>,
    pub not_sent: u64,
    /// The longest runner's wall time.
    pub elapsed: Duration,
    /// The lowest precision among the runners' histograms.
    pub digits: u8,
    pub histogram: Histogram<u64>,
    /// Requests dropped: every connection busy when they were due.
    pub dropped: u64,
    /// Per stage of an arrival-rate profile (empty otherwise).
    pub stages: Vec<MergedStage>,
    /// Per request of a scenario (empty otherwise).
    pub by_request: Vec<MergedRequest>,
}

/// One request of a scenario, every runner's share merged.
#[derive(Debug, Clone, PartialEq)]
pub struct MergedRequest {
    pub requests: u64,
    pub errors: BTreeMap<ErrorKind, u64>,
    /// The merged latencies of its answers without error; None when a
    /// runner's summary left its histogram out.
    pub histogram: Option<Histogram<u64>>,
}

impl MergedRequest {
    /// Failed requests.
    pub fn error_count(&self) -> u64 {
        self.errors.values().fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// A latency quantile, if the histogram is known and not empty.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        self.histogram.as_ref().filter(|h| !h.is_empty()).map(|h| Duration::from_micros(h.value_at_quantile(q)))
    }
}

/// One stage, every runner's share merged.
#[derive(Debug, Clone, PartialEq)]
pub struct MergedStage {
    pub requests: u64,
    pub errors: u64,
    pub dropped: u64,
    /// The merged latencies; None when a runner's summary left its
    /// histogram out (percentiles unknown rather than wrong).
    pub histogram: Option<Histogram<u64>>,
}

impl MergedStage {
    /// A latency quantile, if the stage's histogram is known and not empty.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        self.histogram.as_ref().filter(|h| !h.is_empty()).map(|h| Duration::from_micros(h.value_at_quantile(q)))
    }
}

impl Merged {
    /// Nothing merged: no runner, no request.
    pub fn empty() -> Merged {
        Merged {
            runners: 0,
            requests: 0,
            errors: BTreeMap::new(),
            not_sent: 0,
            elapsed: Duration::ZERO,
            digits: 3,
            histogram: histogram(),
            dropped: 0,
            stages: Vec::new(),
            by_request: Vec::new(),
        }
    }

    /// Merges summaries: counts added, histograms added bucket by bucket.
    /// Stages (or a scenario's requests) that some summary left out
    /// altogether (no room even for their counts) are not shown from the
    /// others' share: none are kept, unknown rather than wrong.
    pub fn of(summaries: &[Summary]) -> Result<Merged, SummaryError> {
        let mut m = Merged::of_all(summaries)?;
        // (A runner that sent nothing, stopped before its start, has none to report.)
        let lacks = |has: &dyn Fn(&Summary) -> bool| summaries.iter().any(|s| s.requests > 0 && !has(s));
        if !m.stages.is_empty() && lacks(&|s| !s.stages.is_empty()) {
            m.stages.clear();
        }
        if !m.by_request.is_empty() && lacks(&|s| !s.by_request.is_empty()) {
            m.by_request.clear();
        }
        Ok(m)
    }

    fn of_all(summaries: &[Summary]) -> Result<Merged, SummaryError> {
        let mut m = Merged { runners: summaries.len(), ..Merged::empty() };
        for s in summaries {
            m.dropped = m.dropped.saturating_add(s.dropped);
            for (k, st) in s.stages.iter().take(MAX_STAGES).enumerate() {
                if m.stages.len() <= k {
                    m.stages.push(MergedStage { requests: 0, errors: 0, dropped: 0, histogram: Some(histogram()) });
                }
                let hist = s.stage_histogram(k)?;
                let Some(ms) = m.stages.get_mut(k) else { continue };
                ms.requests = ms.requests.saturating_add(st.requests);
                ms.errors = ms.errors.saturating_add(st.errors);
                ms.dropped = ms.dropped.saturating_add(st.dropped);
                match (ms.histogram.as_mut(), hist) {
                    (Some(acc), Some(h)) => {
                        acc.add(h).map_err(|e| SummaryError::Histogram(format!("{e:?}")))?;
                    }
                    _ => ms.histogram = None,
                }
            }
            for (k, r) in s.by_request.iter().take(crate::scenario::MAX_REQUESTS).enumerate() {
                if m.by_request.len() <= k {
                    m.by_request.push(MergedRequest {
                        requests: 0,
                        errors: BTreeMap::new(),
                        histogram: Some(histogram()),
                    });
                }
                let hist = s.request_histogram(k)?;
                let Some(mr) = m.by_request.get_mut(k) else { continue };
                mr.requests = mr.requests.saturating_add(r.requests);
                for (kind, n) in &r.errors {
                    let e = mr.errors.entry(*kind).or_default();
                    *e = e.saturating_add(*n);
                }
                match (mr.histogram.as_mut(), hist) {
                    (Some(acc), Some(h)) => {
                        acc.add(h).map_err(|e| SummaryError::Histogram(format!("{e:?}")))?;
                    }
                    _ => mr.histogram = None,
                }
            }
            m.requests = m.requests.saturating_add(s.requests);
            m.not_sent = m.not_sent.saturating_add(s.not_sent);
            for (k, n) in &s.errors {
                let e = m.errors.entry(*k).or_default();
                *e = e.saturating_add(*n);
            }
            m.elapsed = m.elapsed.max(Duration::from_millis(s.elapsed_ms));
            m.digits = m.digits.min(s.digits);
            m.histogram.add(s.histogram()?).map_err(|e| SummaryError::Histogram(format!("{e:?}")))?;
        }
        Ok(m)
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// Failed requests over requests sent (0 when none were sent).
    pub fn error_ratio(&self) -> f64 {
        if self.requests == 0 { 0.0 } else { self.error_count() as f64 / self.requests as f64 }
    }

    /// Answered requests per second over the longest runner's wall time.
    pub fn rps(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 { self.requests as f64 / secs } else { 0.0 }
    }

    /// A latency quantile (0.0..=1.0) of every recorded request.
    pub fn quantile(&self, q: f64) -> Duration {
        Duration::from_micros(self.histogram.value_at_quantile(q))
    }

    pub fn max(&self) -> Duration {
        Duration::from_micros(self.histogram.max())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn summary_of(values: &[u64], errors: u64) -> Summary {
        let mut h = histogram();
        for v in values {
            record(&mut h, Duration::from_micros(*v));
        }
        let errs = if errors > 0 { BTreeMap::from([(ErrorKind::Http5xx, errors)]) } else { BTreeMap::new() };
        let msg = Summary::to_message(values.len() as u64 + errors, errs, 0, Duration::from_secs(2), &h)
            .unwrap_or_else(|e| panic!("{e}"));
        Summary::parse(&msg).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A runner whose message had no room even for its stages' counts:
    /// the merge shows no stage rather than the others' share as the whole.
    #[test]
    fn stages_one_runner_left_out_are_unknown_not_partial() {
        let stage = |n: u64| StageSummary { requests: n, errors: 0, dropped: 0, hist: None };
        let mut with = summary_of(&[1_000; 4], 0);
        with.stages = vec![stage(2), stage(2)];
        let mut without = summary_of(&[1_000; 4], 0);
        without.more = true;
        let m = Merged::of(&[with.clone(), with.clone()]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.stages.iter().map(|s| s.requests).collect::<Vec<_>>(), [4, 4]);
        let m = Merged::of(&[with.clone(), without]).unwrap_or_else(|e| panic!("{e}"));
        assert!(m.stages.is_empty(), "{:?}", m.stages);
        assert_eq!(m.requests, 8, "the run's own counts stay");
        // One that sent nothing (stopped before its start) has none to report.
        let mut idle = summary_of(&[], 0);
        idle.stages.clear();
        assert_eq!(Merged::of(&[with, idle]).unwrap_or_else(|e| panic!("{e}")).stages.len(), 2);
    }

    #[test]
    fn a_summary_round_trips_through_its_message() {
        let s = summary_of(&[1_000, 2_000, 3_000, 250_000], 2);
        assert_eq!(s.requests, 6);
        assert_eq!(s.error_count(), 2);
        assert_eq!(s.digits, 3);
        let h = s.histogram().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(h.len(), 4);
        assert!(h.equivalent(h.max(), 250_000));
    }

    /// Failed checks travel as their own kind, "check", and merge apart
    /// from the status classes.
    #[test]
    fn check_errors_are_carried_by_name_and_merged() {
        let errors = BTreeMap::from([(ErrorKind::Check, 4), (ErrorKind::Http5xx, 1)]);
        let msg =
            Summary::to_message(10, errors, 0, Duration::from_secs(1), &histogram()).unwrap_or_else(|e| panic!("{e}"));
        assert!(msg.contains(r#""errors":{"http5xx":1,"check":4}"#), "{msg}");
        let s = Summary::parse(&msg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.error_count(), 5);
        let m = Merged::of(&[s.clone(), s]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.errors, BTreeMap::from([(ErrorKind::Http5xx, 2), (ErrorKind::Check, 8)]));
        assert!((m.error_ratio() - 0.5).abs() < 1e-12);
        assert_eq!(ErrorKind::Check.as_str(), "check");
    }

    #[test]
    fn a_wide_histogram_still_fits_in_the_termination_message() {
        // Latencies spread over every order of magnitude, as a bad run has.
        let h = wide();
        let msg = Summary::to_message(h.len(), BTreeMap::new(), 0, Duration::from_secs(1), &h)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(msg.len() <= MAX_MESSAGE, "{} bytes", msg.len());
        let s = Summary::parse(&msg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.histogram().map(|h| h.len()).unwrap_or(0), h.len());
    }

    #[test]
    fn a_hostile_histogram_is_refused_before_anything_is_sized_by_it() {
        let mut s = summary_of(&[1_000], 0);
        // Plain V2 declaring a 4 GiB payload.
        let mut v2 = Vec::new();
        for w in [V2_COOKIE, u32::MAX, 0, 3] {
            v2.extend(w.to_be_bytes());
        }
        for w in [1u64, MAX_MICROS, 1f64.to_bits()] {
            v2.extend(w.to_be_bytes());
        }
        s.hist = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&v2);
        assert!(s.histogram().is_err());
        // Other bounds or precision than ours (a 50 MB histogram to allocate).
        let mut other = histogram_with(1, u64::MAX / 2, 5);
        other.saturating_record(5);
        s.hist = encode(&other).unwrap_or_default();
        assert!(s.histogram().is_err());
        // A deflate bomb: megabytes of zeros in a few KiB.
        let mut bomb = Vec::new();
        {
            use std::io::Write;
            let mut z = flate2::write::ZlibEncoder::new(&mut bomb, flate2::Compression::best());
            let _ = z.write_all(&V2_COOKIE.to_be_bytes());
            let _ = z.write_all(&vec![0u8; 8 << 20]);
            let _ = z.finish();
        }
        let mut wrapped = V2_DEFLATE_COOKIE.to_be_bytes().to_vec();
        wrapped.extend(u32::try_from(bomb.len()).unwrap_or(0).to_be_bytes());
        wrapped.extend(&bomb);
        s.hist = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&wrapped);
        let e = s.histogram().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("256 KiB"), "{e}");
        assert!(Summary::parse("not json").is_err());
    }

    fn histogram_with(low: u64, high: u64, digits: u8) -> Histogram<u64> {
        Histogram::new_with_bounds(low, high, digits).unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn merging_adds_counts_and_takes_the_longest_run() {
        let a = summary_of(&[1_000; 10], 1);
        let mut b = summary_of(&[5_000; 30], 0);
        b.elapsed_ms = 5_000;
        let m = Merged::of(&[a, b]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((m.runners, m.requests, m.error_count()), (2, 41, 1));
        assert_eq!(m.elapsed, Duration::from_secs(5));
        assert!((m.error_ratio() - 1.0 / 41.0).abs() < 1e-12);
        // 40 answered: the median is the slower runner's latency, which
        // averaging the two runners' medians (3 ms) would never show.
        assert!(m.histogram.equivalent(m.quantile(0.5).as_micros() as u64, 5_000));
    }

    fn wide() -> Histogram<u64> {
        let mut h = histogram();
        let mut v = 1u64;
        while v < MAX_MICROS {
            for k in 0..50 {
                h.saturating_record(v + k * (v / 50).max(1));
            }
            v = v * 11 / 10 + 1;
        }
        h
    }

    fn stage_of(values: &[u64], dropped: u64) -> StageOutcome {
        let mut h = histogram();
        for v in values {
            record(&mut h, Duration::from_micros(*v));
        }
        StageOutcome { requests: values.len() as u64, errors: 0, dropped, histogram: h }
    }

    #[test]
    fn stages_fit_beside_the_whole_and_lose_their_histograms_last() {
        // A few stages of a tidy run: every histogram at full precision.
        let staged = Staged {
            dropped: 3,
            stages: (0..3).map(|k| stage_of(&[1_000 * (k + 1); 20], 1)).collect(),
            ..Staged::default()
        };
        let msg = Summary::to_message_staged(60, BTreeMap::new(), 0, Duration::from_secs(9), &wide(), &staged)
            .unwrap_or_else(|e| panic!("{e}"));
        let s = Summary::parse(&msg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((s.dropped, s.stages.len()), (3, 3));
        assert!(s.stages.iter().all(|st| st.hist.is_some() && st.dropped == 1 && st.requests == 20));
        // Only the wide whole lost precision, and it says so.
        assert_eq!(s.more, s.digits < 3, "{msg}");
        assert_eq!(s.stage_histogram(2).ok().flatten().map(|h| h.len()), Some(20));
        // 32 stages as wide as can be: the counts stay, within the limit.
        let staged = Staged {
            dropped: 0,
            stages: (0..32).map(|_| StageOutcome { histogram: wide(), ..stage_of(&[], 7) }).collect(),
            ..Staged::default()
        };
        let msg = Summary::to_message_staged(9, BTreeMap::new(), 0, Duration::from_secs(9), &wide(), &staged)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(msg.len() <= MAX_MESSAGE, "{}", msg.len());
        let s = Summary::parse(&msg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.stages.len(), 32);
        assert!(s.stages.iter().all(|st| st.dropped == 7));
        // It says it left something out; the fuller summary (for the log)
        // holds every stage's histogram, at no less precision.
        assert!(s.more);
        let (message, full) =
            Summary::to_message_and_full(9, BTreeMap::new(), 0, Duration::from_secs(9), &wide(), &staged)
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(message, msg);
        let full = Summary::parse(&full.unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"));
        assert!(full.digits >= s.digits && full.stages.iter().all(|st| st.hist.is_some()), "{}", full.digits);
        assert_eq!(full.stage_histogram(31).ok().flatten().map(|h| h.len()), Some(wide().len()));
        // Beside a scenario's eight wide requests: the stages' histograms go
        // first, the requests' last; every count stays.
        let requests: Vec<crate::scenario::RequestOutcome> = (0..8)
            .map(|k| crate::scenario::RequestOutcome {
                requests: k + 1,
                errors: BTreeMap::from([(ErrorKind::Check, k)]),
                histogram: wide(),
            })
            .collect();
        let staged = Staged { requests, ..staged };
        let msg = Summary::to_message_staged(9, BTreeMap::new(), 0, Duration::from_secs(9), &wide(), &staged)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(msg.len() <= MAX_MESSAGE, "{}", msg.len());
        let s = Summary::parse(&msg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.by_request.iter().map(|r| r.requests).collect::<Vec<_>>(), (1..=8).collect::<Vec<_>>());
        assert_eq!(s.by_request[3].errors, BTreeMap::from([(ErrorKind::Check, 3)]));
        let with_stage_hists = s.stages.iter().filter(|st| st.hist.is_some()).count();
        let with_request_hists = s.by_request.iter().filter(|r| r.hist.is_some()).count();
        assert!(with_stage_hists == 0 || with_request_hists == 8, "{with_stage_hists} {with_request_hists}");
        // A few narrow requests keep their histograms at full precision.
        let narrow = Staged {
            requests: (0..3)
                .map(|k| crate::scenario::RequestOutcome {
                    requests: 20,
                    errors: BTreeMap::new(),
                    histogram: stage_of(&[1_000 * (k + 1); 20], 0).histogram,
                })
                .collect(),
            ..Staged::default()
        };
        let msg = Summary::to_message_staged(60, BTreeMap::new(), 0, Duration::from_secs(9), &wide(), &narrow)
            .unwrap_or_else(|e| panic!("{e}"));
        let s = Summary::parse(&msg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.request_histogram(2).ok().flatten().map(|h| h.len()), Some(20));
        // The worst a LoadTest can ask: 8 requests with every error kind,
        // 32 stages, counts in the billions, a wide whole: the counts fit.
        let kinds = [
            ErrorKind::Http5xx,
            ErrorKind::Http4xx,
            ErrorKind::Timeout,
            ErrorKind::Connect,
            ErrorKind::Other,
            ErrorKind::Check,
        ];
        let worst = Staged {
            dropped: u64::MAX / 3,
            stages: (0..32)
                .map(|_| StageOutcome {
                    requests: u64::MAX / 3,
                    errors: u64::MAX / 5,
                    dropped: u64::MAX / 7,
                    histogram: wide(),
                })
                .collect(),
            requests: (0..crate::scenario::MAX_REQUESTS)
                .map(|_| crate::scenario::RequestOutcome {
                    requests: u64::MAX / 3,
                    errors: kinds.iter().map(|k| (*k, u64::MAX / 11)).collect(),
                    histogram: wide(),
                })
                .collect(),
            ..Staged::default()
        };
        let errors: BTreeMap<ErrorKind, u64> = kinds.iter().map(|k| (*k, u64::MAX / 13)).collect();
        let msg =
            Summary::to_message_staged(u64::MAX / 2, errors, u64::MAX / 9, Duration::from_secs(9), &wide(), &worst)
                .unwrap_or_else(|e| panic!("{e}"));
        assert!(msg.len() <= MAX_MESSAGE, "{}", msg.len());
        assert!(Summary::parse(&msg).is_ok_and(|s| s.more), "{msg}");
        // Counts a runner can reach (a million a second for a day): the
        // stages and requests stay, with their counts.
        let day = 86_400_000_000u64;
        let mut real = worst.clone();
        for st in &mut real.stages {
            (st.requests, st.errors, st.dropped) = (day, day, day);
        }
        for r in &mut real.requests {
            r.requests = day;
            r.errors.values_mut().for_each(|n| *n = day);
        }
        let errors: BTreeMap<ErrorKind, u64> = kinds.iter().map(|k| (*k, day)).collect();
        let msg = Summary::to_message_staged(day, errors, day, Duration::from_secs(9), &wide(), &real)
            .unwrap_or_else(|e| panic!("{e}"));
        let s = Summary::parse(&msg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((s.stages.len(), s.by_request.len()), (32, 8), "{msg}");
        // A summary without stages reads as before (and old ones still parse).
        let old = summary_of(&[1_000], 0);
        assert!(old.stages.is_empty() && old.dropped == 0);
        assert!(!serde_json::to_string(&old).unwrap_or_default().contains("stages"));
    }

    #[test]
    fn stages_merge_bucket_by_bucket_and_a_missing_histogram_is_unknown() {
        let message = |stages: Vec<StageOutcome>| {
            let staged = Staged { dropped: stages.iter().map(|s| s.dropped).sum(), stages, ..Staged::default() };
            let m = Summary::to_message_staged(0, BTreeMap::new(), 0, Duration::from_secs(1), &histogram(), &staged)
                .unwrap_or_else(|e| panic!("{e}"));
            Summary::parse(&m).unwrap_or_else(|e| panic!("{e}"))
        };
        let a = message(vec![stage_of(&[1_000; 10], 1), stage_of(&[2_000; 10], 0)]);
        let b = message(vec![stage_of(&[1_000; 10], 0), stage_of(&[90_000; 10], 2)]);
        let m = Merged::of(&[a.clone(), b]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.dropped, 3);
        assert_eq!(m.stages.len(), 2);
        assert_eq!((m.stages[0].requests, m.stages[0].dropped), (20, 1));
        assert_eq!((m.stages[1].requests, m.stages[1].dropped), (20, 2));
        // The second stage's p90 is the slow runner's: merged, not averaged.
        let p90 = m.stages[1].quantile(0.9).unwrap_or_default();
        assert!(p90 >= Duration::from_millis(89), "{p90:?}");
        let mut cut = a.clone();
        cut.stages[1].hist = None;
        let m = Merged::of(&[a, cut]).unwrap_or_else(|e| panic!("{e}"));
        assert!(m.stages[0].quantile(0.5).is_some());
        assert_eq!(m.stages[1].quantile(0.5), None);
    }

    proptest! {
        /// Merged percentiles equal those of one histogram fed every value,
        /// however the values were split among runners.
        #[test]
        fn merged_percentiles_equal_one_histograms(
            values in proptest::collection::vec(1u64..60_000_000, 1..400),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let mut bounds: Vec<usize> = cuts.iter().map(|c| c.index(values.len() + 1)).collect();
            bounds.push(0);
            bounds.push(values.len());
            bounds.sort_unstable();
            let parts: Vec<Summary> = bounds.windows(2).map(|w| summary_of(&values[w[0]..w[1]], 0)).collect();
            let merged = Merged::of(&parts).unwrap_or_else(|e| panic!("{e}"));
            let mut one = histogram();
            for v in &values {
                record(&mut one, Duration::from_micros(*v));
            }
            for q in [0.0, 0.5, 0.9, 0.99, 0.999, 1.0] {
                prop_assert_eq!(merged.histogram.value_at_quantile(q), one.value_at_quantile(q), "q {}", q);
            }
            prop_assert_eq!(merged.histogram.len(), values.len() as u64);
        }
    }
}
