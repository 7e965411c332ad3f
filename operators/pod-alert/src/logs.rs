//! The failing container's log tail: the previous run's when it has
//! restarted, capped by lines and bytes (the end is kept), or "logs
//! unavailable: <reason>" when the API cannot serve them.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::LogParams;

/// A log read never holds a reconcile longer than this.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes read at most per tail (1,000 lines of 4 KiB).
const READ_LIMIT: i64 = 4 << 20;

/// What the kubelet answers, with status 200, when a run's log file is gone.
const KUBELET_FAILURES: [&str; 2] = ["unable to retrieve container logs", "failed to try resolving symlinks"];

/// Cuts `text` to its last `max_bytes` bytes (on a character boundary,
/// starting at a line when one begins within the kept part).
pub fn cap(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let mut start = text.len() - max_bytes;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let kept = &text[start..];
    match kept.find('\n') {
        Some(nl) if nl + 1 < kept.len() => kept[nl + 1..].to_string(),
        _ => kept.to_string(),
    }
}

/// Log tails one PodAlert holds at most, across its incidents. Its incidents
/// are as many as its namespace's failing workloads, containers and reasons,
/// and each carries up to `logs.maxBytes` (64 KiB): without a bound, a
/// namespace's author could make the operator hold as much as they like.
pub const BUDGET: usize = 4 << 20;

/// Bytes a new tail may take: `max_bytes`, less when the PodAlert's other
/// tails (`held`) leave less of `budget`.
pub fn room(held: usize, budget: usize, max_bytes: usize) -> usize {
    max_bytes.min(budget.saturating_sub(held))
}

/// Reads the tail of `container`'s log in `pod`.
pub async fn tail(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    container: &str,
    previous: bool,
    lines: u32,
    max_bytes: usize,
) -> Result<String, String> {
    if lines == 0 || max_bytes == 0 {
        return Ok(String::new());
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = LogParams {
        container: (!container.is_empty()).then(|| container.to_string()),
        previous,
        tail_lines: Some(i64::from(lines)),
        // limitBytes cuts the *end* of the tail, the lines that matter: it
        // is only a guard against huge lines; `cap` keeps the end.
        limit_bytes: Some(READ_LIMIT),
        ..LogParams::default()
    };
    match tokio::time::timeout(READ_TIMEOUT, api.logs(pod, &params)).await {
        // The kubelet answers 200 with this when the run's log is gone
        // (it keeps one dead container per container).
        Ok(Ok(text)) if KUBELET_FAILURES.iter().any(|f| text.starts_with(f)) => {
            Err(format!("logs unavailable: {}", text.trim()))
        }
        Ok(Ok(text)) => Ok(cap(&text, max_bytes)),
        Ok(Err(kube::Error::Api(s))) => Err(format!("logs unavailable: {}", s.message)),
        Ok(Err(e)) => Err(format!("logs unavailable: {e}")),
        Err(_) => Err(format!("logs unavailable: no answer within {}s", READ_TIMEOUT.as_secs())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_gets_what_the_budget_leaves() {
        assert_eq!(room(0, BUDGET, 65536), 65536);
        assert_eq!(room(BUDGET - 1000, BUDGET, 65536), 1000);
        assert_eq!(room(BUDGET, BUDGET, 65536), 0);
        assert_eq!(room(BUDGET + 5, BUDGET, 65536), 0, "over the budget (a smaller budget than held) is no room");
        assert_eq!(room(0, BUDGET, 0), 0);
    }

    #[test]
    fn cap_keeps_the_end_from_a_line_start() {
        assert_eq!(cap("a\nb\nc\n", 100), "a\nb\nc\n");
        let text = "first line\nsecond line\nthird line\n";
        assert_eq!(cap(text, 16), "third line\n");
        let s = "é".repeat(10);
        let c = cap(&s, 5);
        assert!(c.len() <= 5 && c.chars().all(|ch| ch == 'é'));
    }
}
