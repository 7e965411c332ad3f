//! # loadgen
//!
//! The load-tester's runner. Each runner pod sends `repeat` requests on each
//! of `concurrency` connections to one URL, records the latencies in an HDR
//! histogram and writes a [`summary::Summary`] (counts, errors by kind, the
//! serialized histogram) to its termination message, which the operator
//! reads and merges bucket by bucket with the other runners'.
//!
//! | module | concern |
//! | --- | --- |
//! | [`summary`] | the summary, its ≤ 4 KiB encoding, the merge (pure) |
//! | [`run`] | sending the load: closed or open model, timeouts, deadline |
//! | [`progress`] | live progress lines while a run goes on, their merge, the stop signal |
//! | [`pace`] | whether the runner kept up: seconds behind its rate, CPU throttled |
//! | [`scenario`] | several weighted requests: their spec, the order they go in (pure), their figures |
//! | [`schedule`] | when each request of a ramping arrival-rate profile is due (pure) |
//! | [`stages`] | sending a ramping arrival-rate profile with bounded connections |
//! | [`check`] | what an answer must show (statuses, a body substring), the substring searched across reads (pure) |
//! | [`send`] | one request and its whole answer: a worker's own connection for `http://`, reqwest otherwise |
//! | [`inputs`] | values read from mounted files, bounded, errors without content |
//! | [`http1`] | that connection's HTTP/1.1 exchange: the answer's head parsed, its body framed and discarded |

/// The latency histogram type every module and the operator share.
pub use hdrhistogram::Histogram;

pub mod check;
pub mod http1;
pub mod inputs;
pub mod pace;
pub mod progress;
pub mod run;
pub mod scenario;
pub mod schedule;
pub mod send;
pub mod stages;
pub mod summary;
