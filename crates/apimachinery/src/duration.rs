//! Durations as Go's `time.Duration.String` prints them, which upstream puts in API
//! fields (`metav1.Duration`) and in messages (events, conditions), and as
//! `time.ParseDuration` reads them (flags, config files, `?timeout=`).

use std::time::Duration;

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

/// The longest Go duration: `time.Duration` is an int64 of nanoseconds
/// (`2562047h47m16.854775807s`, about 292 years).
const GO_MAX_SECS: f64 = i64::MAX as f64 / 1e9;

/// Parses a Go duration (`15s`, `1m30s`, `500ms`, `1.5h`, `0`). Like Go, one longer
/// than about 292 years is invalid, so a duration from a flag or a file always fits
/// an `Instant` added to now.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() || s.starts_with('-') {
        return Err(format!("invalid duration {s:?}"));
    }
    let mut total = 0f64;
    let mut rest = s.trim_start_matches('+');
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("missing unit in duration {s:?}"))?;
        let n: f64 = rest[..num_end]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}"))?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => return Err(format!("unknown unit {u:?} in duration {s:?}")),
        };
        rest = &rest[unit_end..];
        total += n * unit;
    }
    if total > GO_MAX_SECS {
        return Err(format!("invalid duration {s:?}"));
    }
    Duration::try_from_secs_f64(total).map_err(|_| format!("invalid duration {s:?}"))
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

    #[test]
    fn durations_parse_as_go() {
        let ok = |s: &str| parse_go_duration(s).unwrap();
        assert_eq!(ok("15s"), Duration::from_secs(15));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(
            ok("2562047h47m16s"),
            Duration::from_secs(2_562_047 * 3600 + 47 * 60 + 16)
        );
        for bad in [
            "",
            "15",
            "-1s",
            "1x",
            "s",
            "2562048h",
            "9223372036854775807s",
            "1e400s",
        ] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }
}
