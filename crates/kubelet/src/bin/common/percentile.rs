//! Sample statistics shared by the benchmark commands in `src/bin` (included with
//! `#[path]`; not a binary of its own).

use std::time::Duration;

/// Nearest-rank percentile (`p` in 0..=100) of sorted samples; zero when there are none.
pub fn percentile(sorted: &[Duration], p: u32) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (sorted.len() * p as usize).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

/// The samples in milliseconds, in order, then `<label> n=.. p50_ms=.. p99_ms=.. max_ms=..`:
/// the two lines hack/bench-kubelet.sh reads.
pub fn summary(label: &str, samples: &[Duration]) -> String {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let ms: Vec<String> = samples.iter().map(|d| d.as_millis().to_string()).collect();
    format!(
        "samples_ms {}\n{label} n={} p50_ms={} p99_ms={} max_ms={}",
        ms.join(" "),
        sorted.len(),
        percentile(&sorted, 50).as_millis(),
        percentile(&sorted, 99).as_millis(),
        sorted.last().copied().unwrap_or_default().as_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let hundred = ms(&(1..=100).collect::<Vec<_>>());
        assert_eq!(percentile(&hundred, 50), Duration::from_millis(50));
        assert_eq!(percentile(&hundred, 99), Duration::from_millis(99));
        assert_eq!(percentile(&hundred, 100), Duration::from_millis(100));
        let ten = ms(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        // With 10 samples p99 is the maximum.
        assert_eq!(percentile(&ten, 99), Duration::from_millis(10));
        assert_eq!(percentile(&ten, 50), Duration::from_millis(5));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
    }

    #[test]
    fn summary_keeps_sample_order_and_sorts_for_percentiles() {
        assert_eq!(
            summary("floor", &ms(&[30, 10, 20])),
            "samples_ms 30 10 20\nfloor n=3 p50_ms=20 p99_ms=30 max_ms=30"
        );
    }
}
