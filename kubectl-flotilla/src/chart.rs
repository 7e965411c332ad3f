//! A latency histogram drawn with text: one bar per doubling of latency,
//! its count and the share of requests at or below it. Pure.

use hdrhistogram::Histogram;

/// Bars at most this many rows (from the fastest request's doubling).
pub const MAX_ROWS: usize = 24;

/// `micros` as a person reads a latency: 850µs, 12.4ms, 1.50s.
pub fn duration(micros: u64) -> String {
    match micros {
        m if m < 1_000 => format!("{m}µs"),
        m if m < 1_000_000 => {
            let ms = format!("{:.2}", m as f64 / 1e3);
            format!("{}ms", ms.trim_end_matches('0').trim_end_matches('.'))
        }
        m => format!("{:.2}s", m as f64 / 1e6),
    }
}

/// The chart of `h` (latencies in microseconds), bars up to `width` wide.
/// Empty for an empty histogram.
pub fn draw(h: &Histogram<u64>, width: usize) -> Vec<String> {
    if h.is_empty() {
        return Vec::new();
    }
    // Buckets double from the first power of two holding the fastest request.
    let first = h.min().max(1).checked_next_power_of_two().unwrap_or(1 << 63);
    let mut buckets: Vec<(u64, u64)> = Vec::new();
    for v in h.iter_log(first, 2.0) {
        buckets.push((v.value_iterated_to(), v.count_since_last_iteration()));
        if v.value_iterated_to() >= h.max() {
            break;
        }
    }
    // Past MAX_ROWS, the slowest rows are merged into the last one.
    if buckets.len() > MAX_ROWS {
        let tail: u64 = buckets[MAX_ROWS - 1..].iter().map(|(_, c)| c).sum();
        let upto = buckets.last().map_or(0, |(v, _)| *v);
        buckets.truncate(MAX_ROWS - 1);
        buckets.push((upto, tail));
    }
    let most = buckets.iter().map(|(_, c)| *c).max().unwrap_or(1).max(1);
    let total = h.len().max(1);
    let mut seen = 0u64;
    let labels: Vec<String> = buckets.iter().map(|(v, _)| format!("≤ {}", duration(*v))).collect();
    let label_width = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let count_width = buckets.iter().map(|(_, c)| c.to_string().len()).max().unwrap_or(1);
    buckets
        .iter()
        .zip(labels)
        .map(|((_, count), label)| {
            seen += count;
            let bar = usize::try_from(count.saturating_mul(width as u64) / most).unwrap_or(width);
            let bar = if *count > 0 { bar.max(1) } else { 0 };
            let share = seen as f64 * 100.0 / total as f64;
            format!("{label:>label_width$}  {count:>count_width$}  {share:>6.2}%  {}", "█".repeat(bar))
                .trim_end()
                .to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn hist(values: &[(u64, u64)]) -> Histogram<u64> {
        let mut h = loadgen::summary::histogram();
        for (v, n) in values {
            h.record_n(*v, *n).unwrap();
        }
        h
    }

    #[test]
    fn durations_read_as_latencies() {
        assert_eq!(duration(850), "850µs");
        assert_eq!(duration(12_400), "12.4ms");
        assert_eq!(duration(2_000), "2ms");
        assert_eq!(duration(1_500_000), "1.50s");
    }

    #[test]
    fn bars_follow_the_counts_and_the_shares_add_up() {
        // 900 requests at ~1ms, 100 at ~20ms.
        let lines = draw(&hist(&[(1_000, 900), (20_000, 100)]), 40);
        let full = lines.iter().find(|l| l.contains(" 900 ")).unwrap();
        assert_eq!(full.matches('█').count(), 40, "{lines:#?}");
        let slow = lines.iter().find(|l| l.contains(" 100 ")).unwrap();
        assert_eq!(slow.matches('█').count(), 4, "{lines:#?}");
        assert!(lines.last().unwrap().contains("100.00%"), "{lines:#?}");
        // Empty doublings between them are rows without a bar.
        assert!(lines.iter().any(|l| l.contains("  0  ") && !l.contains('█')), "{lines:#?}");
        assert!(lines[0].contains(" 900 "), "the first row holds the fastest request: {lines:#?}");
    }

    #[test]
    fn a_wide_spread_is_cut_to_max_rows_and_nothing_is_lost() {
        let lines = draw(&hist(&[(1, 5), (500_000_000, 7)]), 10);
        assert_eq!(lines.len(), MAX_ROWS);
        assert!(lines.last().unwrap().contains(" 7 ") && lines.last().unwrap().contains("100.00%"), "{lines:#?}");
    }

    #[test]
    fn an_empty_histogram_draws_nothing() {
        assert!(draw(&loadgen::summary::histogram(), 40).is_empty());
    }
}
