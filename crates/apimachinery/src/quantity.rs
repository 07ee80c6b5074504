//! Resource quantities (`500m`, `128Mi`, `1.5`, `2e3`) as upstream's
//! `resource.Quantity`: exact parsing into integers (`Value()`, `MilliValue()`,
//! rounded up, never through floating point) and the canonical string of an amount
//! (`String()`), for sums and messages (LimitRanger, ResourceQuota).

/// A parsed quantity: `mantissa * 10^exp10 * 2^exp2`, and whether it was written
/// with a binary suffix (`Ki`, `Mi`, ...), which decides how sums print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parsed {
    mantissa: i128,
    exp10: i32,
    exp2: u32,
}

fn parse(s: &str) -> Option<Parsed> {
    let s = s.trim();
    let (sign, rest) = match s.as_bytes().first()? {
        b'-' => (-1, &s[1..]),
        b'+' => (1, &s[1..]),
        _ => (1, s),
    };
    let num_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(num_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return None;
    }
    let mut mantissa: i128 = 0;
    let mut exp10: i32 = 0;
    let mut after_dot = false;
    for c in number.chars() {
        if c == '.' {
            after_dot = true;
            continue;
        }
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(i128::from(c as u8 - b'0'))?;
        if after_dot {
            exp10 -= 1;
        }
    }
    let (e10, e2) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        other => {
            let exp = other.strip_prefix(['e', 'E'])?;
            (exp.parse::<i32>().ok()?, 0)
        }
    };
    Some(Parsed {
        mantissa: sign * mantissa,
        exp10: exp10 + e10,
        exp2: e2,
    })
}

/// `value * 10^scale`, rounded up (towards positive infinity), saturating.
fn scaled(p: Parsed, scale: i32) -> i128 {
    let sat = if p.mantissa < 0 { i128::MIN } else { i128::MAX };
    let Some(mut v) = p.mantissa.checked_mul(1i128 << p.exp2.min(100)) else {
        return sat;
    };
    let exp = p.exp10 + scale;
    if exp >= 0 {
        for _ in 0..exp {
            v = match v.checked_mul(10) {
                Some(v) => v,
                None => return sat,
            };
        }
        v
    } else {
        let mut div: i128 = 1;
        for _ in 0..(-exp).min(38) {
            div *= 10;
        }
        let q = v.div_euclid(div);
        if v.rem_euclid(div) != 0 { q + 1 } else { q }
    }
}

fn clamp(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// `Quantity.Value()`: the integer value, rounded up; None when it does not parse.
pub fn value(q: &str) -> Option<i64> {
    parse(q).map(|p| clamp(scaled(p, 0)))
}

/// `Quantity.MilliValue()`: thousandths, rounded up (`500m` → 500, `2` → 2000).
pub fn milli_value(q: &str) -> Option<i64> {
    parse(q).map(|p| clamp(scaled(p, 3)))
}

/// Thousandths without the i64 bound, for sums.
pub fn milli(q: &str) -> Option<i128> {
    parse(q).map(|p| scaled(p, 3))
}

/// The value as a float, for comparisons and sign checks where exactness does not
/// matter (validation, defaulting); None when it does not parse.
pub fn approx(q: &str) -> Option<f64> {
    parse(q).map(|p| p.mantissa as f64 * 10f64.powi(p.exp10) * 2f64.powi(p.exp2 as i32))
}

/// Whether the quantity is written with a binary suffix (`BinarySI`).
pub fn is_binary(q: &str) -> bool {
    parse(q).is_some_and(|p| p.exp2 > 0)
}

/// The canonical string of `milli` thousandths (upstream `Quantity.String()`):
/// binary suffixes for `binary` amounts that are whole multiples of 1024 (as
/// upstream, amounts under 1024 print in decimal), otherwise the largest decimal
/// suffix that keeps the number whole (`1500m`, `2`, `3k`, `128M`).
pub fn format_milli(milli: i128, binary: bool) -> String {
    if binary && milli % 1000 == 0 && milli.abs() >= 1024 * 1000 {
        let mut v = milli / 1000;
        let mut suffix = 0;
        const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
        while suffix + 1 < SUFFIXES.len() && v != 0 && v % 1024 == 0 {
            v /= 1024;
            suffix += 1;
        }
        return format!("{v}{}", SUFFIXES[suffix]);
    }
    if milli == 0 {
        return "0".into();
    }
    const DECIMAL: [&str; 8] = ["m", "", "k", "M", "G", "T", "P", "E"];
    let mut v = milli;
    let mut suffix = 0;
    while suffix + 1 < DECIMAL.len() && v % 1000 == 0 {
        v /= 1000;
        suffix += 1;
    }
    format!("{v}{}", DECIMAL[suffix])
}

/// `q` in canonical form (`0.5` → `500m`, `2048Ki` → `2Mi`); `q` itself when it
/// does not parse.
pub fn canonical(q: &str) -> String {
    match milli(q) {
        Some(m) => format_milli(m, is_binary(q)),
        None => q.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_millis() {
        let cases: &[(&str, Option<i64>, Option<i64>)] = &[
            ("0", Some(0), Some(0)),
            ("1", Some(1), Some(1000)),
            ("500m", Some(1), Some(500)),
            ("0.5", Some(1), Some(500)),
            ("128Mi", Some(134_217_728), Some(134_217_728_000)),
            ("1k", Some(1000), Some(1_000_000)),
            ("1e3", Some(1000), Some(1_000_000)),
            ("100n", Some(1), Some(1)),
            ("-500m", Some(0), Some(-500)),
            ("", None, None),
            ("1.2.3", None, None),
            ("5Zi", None, None),
            ("100E", Some(i64::MAX), Some(i64::MAX)),
        ];
        for (s, v, m) in cases {
            assert_eq!(value(s), *v, "value({s})");
            assert_eq!(milli_value(s), *m, "milli_value({s})");
        }
    }

    #[test]
    fn canonical_strings() {
        for (input, want) in [
            ("0.5", "500m"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("2000", "2k"),
            ("2048Ki", "2Mi"),
            ("1536Ki", "1536Ki"),
            ("512Ki", "512Ki"),
            ("0", "0"),
            ("128M", "128M"),
            ("1e3", "1k"),
            ("x", "x"),
        ] {
            assert_eq!(canonical(input), want, "{input}");
        }
        assert_eq!(format_milli(1000 * 1000, true), "1k");
        assert_eq!(format_milli(3 * 1024 * 1024 * 1000, true), "3Mi");
    }
}
