//! Reading a run's progress: the last lines of each running runner's log
//! (loadgen prints a progress line every 5 s), a few at a time, each read
//! bounded in time and size; and, once they ended, the fuller summaries
//! their termination messages had no room for. What they say is the machine's to judge
//! ([`crate::machine::step`]).

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};

use crate::machine::RunnerLog;

/// Log reads in flight at once (each goes through the runner's kubelet).
const READS_AT_ONCE: usize = 8;
/// A read that takes longer is given up (the runner is named in
/// status.progress.message; the next read is 5 s later).
const READ_TIMEOUT: Duration = Duration::from_secs(4);
/// The last lines read: the progress line is among them (warnings or the
/// final summary may follow it).
const TAIL_LINES: i64 = 4;
/// At most this much of a runner's log is read: the tail's lines whole
/// (a progress line is at most loadgen::progress::MAX_LINE, 16 KiB), and
/// room to spare; a newest line cut short leaves the one before it.
const LIMIT_BYTES: i64 = 4 * (16 * 1024 + 1) + 4096;

/// A round of reads ends by then, however many runners: the reads hold
/// one of the controller's reconciles, which other namespaces' tests need
/// too (runners read later are named in status.progress.message).
const ROUND: Duration = Duration::from_secs(8);

/// The last lines of each runner's log, or why they could not be read.
pub async fn read(pods: &Api<Pod>, runners: Vec<String>) -> Vec<RunnerLog> {
    read_tail(pods, runners, TAIL_LINES, LIMIT_BYTES).await
}

/// Lines read for a fuller summary: the kubelet's tailLines counts the
/// runtime's log entries, and a runtime splits a long line into several
/// (containerd every 16 KiB, CRI-O every 8 KiB): a 64 KiB summary line is up
/// to 9 of them, with the termination message's copy and a few short lines
/// after or before it.
const SUMMARY_TAIL_LINES: i64 = 24;

/// The last lines of each ended runner's log, where its fuller summary is
/// (its last line but for a late progress line; a warning may come before it).
pub async fn read_summaries(pods: &Api<Pod>, runners: Vec<String>) -> Vec<RunnerLog> {
    let limit = i64::try_from(loadgen::summary::MAX_FULL + 4096).unwrap_or(i64::MAX) + LIMIT_BYTES;
    read_tail(pods, runners, SUMMARY_TAIL_LINES, limit).await
}

async fn read_tail(pods: &Api<Pod>, runners: Vec<String>, tail_lines: i64, limit_bytes: i64) -> Vec<RunnerLog> {
    let end = tokio::time::Instant::now() + ROUND;
    futures::stream::iter(runners.into_iter().map(|runner| async move {
        let within = READ_TIMEOUT.min(end.saturating_duration_since(tokio::time::Instant::now()));
        if within.is_zero() {
            return RunnerLog { runner, log: Err(format!("not read within this round's {ROUND:?}")) };
        }
        let params = LogParams {
            container: Some(crate::runner::CONTAINER.to_string()),
            tail_lines: Some(tail_lines),
            limit_bytes: Some(limit_bytes),
            ..LogParams::default()
        };
        let log = match tokio::time::timeout(within, pods.logs(&runner, &params)).await {
            Ok(Ok(text)) => Ok(text),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, runner, "reading a runner's progress (its log)");
                Err(match &e {
                    kube::Error::Api(s) => format!("log not readable ({}): {}", s.code, s.message),
                    other => format!("log not readable: {other}"),
                })
            }
            Err(_) => Err(format!("log not read within {within:?}")),
        };
        RunnerLog { runner, log }
    }))
    .buffer_unordered(READS_AT_ONCE)
    .collect()
    .await
}
