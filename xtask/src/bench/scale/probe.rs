//! What the kernel says of a process: resident memory now and at its peak
//! (`VmHWM`, which writing `5` to `/proc/<pid>/clear_refs` starts again),
//! and CPU time.

/// A `/proc/<pid>/status` field in KiB (`VmRSS:`, `VmHWM:`).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Resident memory now, MiB.
pub fn rss_mib(pid: u32) -> f64 {
    status_kib(pid, "VmRSS:").unwrap_or(0) as f64 / 1024.0
}

/// What a process holds between pieces of work: the lowest resident
/// memory, and the lowest anonymous memory (the heap and stacks, without
/// the pages of its binary), MiB (0 for a process never read).
#[derive(Debug, Clone, Copy, Default)]
pub struct Settled {
    pub rss: f64,
    pub anon: f64,
}

/// The [`Settled`] memory of each of `pids`, from `window.as_secs()`
/// samples a second apart. One sample lands on whatever runs at that
/// moment (a Route53 sync's pages, a reconcile's reads) and moved a growth
/// of 1,000 objects by 2-4 MiB from one run to the next; memory kept for
/// good shows in every sample.
pub async fn settled_rss_mib(pids: &[u32], window: std::time::Duration) -> Vec<Settled> {
    let mut lowest: Vec<(Option<u64>, Option<f64>)> = vec![(None, None); pids.len()];
    for second in 0..window.as_secs().max(1) {
        if second > 0 {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
        for ((low, low_anon), pid) in lowest.iter_mut().zip(pids) {
            // A failed read is skipped, not a zero.
            if let Some(kib) = status_kib(*pid, "VmRSS:") {
                *low = Some(low.map_or(kib, |l| l.min(kib)));
            }
            if let Some((anon, _)) = rss_split_mib(*pid) {
                *low_anon = Some(low_anon.map_or(anon, |l| l.min(anon)));
            }
        }
    }
    lowest
        .into_iter()
        .map(|(kib, anon)| Settled { rss: kib.unwrap_or(0) as f64 / 1024.0, anon: anon.unwrap_or(0.0) })
        .collect()
}

/// Resident memory now split as `(anonymous, file-backed)` MiB
/// (`/proc/<pid>/smaps_rollup`): the heap and stacks, and the pages of
/// the binary and libraries it has touched.
pub fn rss_split_mib(pid: u32) -> Option<(f64, f64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let kib = |field: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    let (rss, anon) = (kib("Rss:")?, kib("Anonymous:")?);
    Some((anon as f64 / 1024.0, rss.saturating_sub(anon) as f64 / 1024.0))
}

/// Peak resident memory since start or the last [`reset_peak`], MiB.
pub fn peak_mib(pid: u32) -> f64 {
    status_kib(pid, "VmHWM:").unwrap_or(0) as f64 / 1024.0
}

/// Starts the peak (`VmHWM`) again from the current RSS.
pub fn reset_peak(pid: u32) -> anyhow::Result<()> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .map_err(|e| anyhow::anyhow!("resetting the peak RSS of {pid} (/proc/{pid}/clear_refs): {e}"))
}

/// User + system CPU seconds the process has used (every thread).
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0.0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime 14, stime 15 (1-based); USER_HZ is 100.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) as f64 / 100.0
}
