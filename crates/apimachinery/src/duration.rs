//! Durations as Go's `time.Duration.String` prints them, which upstream puts in API
//! fields (`metav1.Duration`) and in messages (events, conditions).

/// A duration as Go's `time.Duration.String` writes it (`metav1.Duration` in JSON):
/// `"15s"`, `"14.998s"`, `"1m0.5s"`, `"500ms"`, `"0s"`.
pub fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let neg = nanos < 0;
    let n = nanos.unsigned_abs();
    let sign = if neg { "-" } else { "" };
    let frac = |v: u64, digits: u32| -> String {
        let unit = 10u64.pow(digits);
        let (whole, rest) = (v / unit, v % unit);
        if rest == 0 {
            whole.to_string()
        } else {
            let f = format!("{rest:0width$}", width = digits as usize);
            format!("{whole}.{}", f.trim_end_matches('0'))
        }
    };
    if n < 1_000 {
        return format!("{sign}{n}ns");
    }
    if n < 1_000_000 {
        return format!("{sign}{}µs", frac(n, 3));
    }
    if n < 1_000_000_000 {
        return format!("{sign}{}ms", frac(n, 6));
    }
    let (h, rest) = (n / 3_600_000_000_000, n % 3_600_000_000_000);
    let (m, s) = (rest / 60_000_000_000, rest % 60_000_000_000);
    let secs = format!("{}s", frac(s, 9));
    match (h, m) {
        (0, 0) => format!("{sign}{secs}"),
        (0, m) => format!("{sign}{m}m{secs}"),
        (h, m) => format!("{sign}{h}h{m}m{secs}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn durations_print_as_go() {
        assert_eq!(go_duration(15 * S), "15s");
        assert_eq!(go_duration(14_998_000_000), "14.998s");
        assert_eq!(go_duration(60_500_000_000), "1m0.5s");
        assert_eq!(go_duration(3_600 * S + 1), "1h0m0.000000001s");
        assert_eq!(go_duration(500_000_000), "500ms");
        assert_eq!(go_duration(1_500), "1.5µs");
        assert_eq!(go_duration(0), "0s");
    }
}
