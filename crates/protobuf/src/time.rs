//! RFC 3339 timestamps as metav1.Time (`2006-01-02T15:04:05Z`) and metav1.MicroTime
//! (`2006-01-02T15:04:05.000000Z`) write them, always in UTC; parsing accepts any
//! offset and fraction, as Go's `time.Parse(time.RFC3339, ..)` does.

/// Days since 1970-01-01 -> (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats Unix seconds (+ microseconds when `micros` is set) as RFC 3339 UTC.
/// `None` when the year is outside 0..=9999 (Go's MarshalJSON fails there too).
pub fn format(seconds: i64, micros: Option<u32>) -> Option<String> {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        return None;
    }
    let (h, mi, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    Some(match micros {
        None => format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z"),
        Some(us) => format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{us:06}Z"),
    })
}

/// Parses RFC 3339 into (Unix seconds, nanoseconds).
pub fn parse(s: &str) -> Option<(i64, i32)> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = b.get(r)?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || d == 0 || d > 31 || h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    let mut i = 19;
    let mut nanos: u32 = 0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start || i - start > 9 {
            return None;
        }
        let frac = num(start..i)?;
        nanos = frac * 10u32.pow(9 - (i - start) as u32);
    }
    let offset: i64 = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let o = i64::from(oh) * 3600 + i64::from(om) * 60;
            if *sign == b'+' { o } else { -o }
        }
        _ => return None,
    };
    let days = days_from_civil(i64::from(y), mo, d);
    let secs = days * 86_400 + i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(sec) - offset;
    Some((secs, nanos as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses() {
        assert_eq!(format(0, None).unwrap(), "1970-01-01T00:00:00Z");
        assert_eq!(format(1_700_000_000, None).unwrap(), "2023-11-14T22:13:20Z");
        assert_eq!(
            format(951_782_400, Some(5)).unwrap(),
            "2000-02-29T00:00:00.000005Z"
        );
        assert_eq!(parse("2023-11-14T22:13:20Z"), Some((1_700_000_000, 0)));
        assert_eq!(
            parse("2023-11-14T23:13:20.5+01:00"),
            Some((1_700_000_000, 500_000_000))
        );
        assert_eq!(
            parse("2000-02-29T00:00:00.000005Z"),
            Some((951_782_400, 5000))
        );
        assert_eq!(parse("1969-12-31T23:59:59Z"), Some((-1, 0)));
        for bad in [
            "",
            "2023-11-14",
            "2023-13-14T22:13:20Z",
            "2023-11-14T22:13:20",
            "2023-11-14T22:13:20.Z",
            "2023-11-14T22:13:20+0100",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert_eq!(
            format(-62_167_219_200, None).unwrap(),
            "0000-01-01T00:00:00Z"
        );
        assert_eq!(format(-62_167_219_201, None), None);
    }

    #[test]
    fn every_day_round_trips() {
        for day in -800_000..800_000i64 {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day);
        }
    }
}
