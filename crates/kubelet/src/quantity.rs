//! Exact parsing of resource quantities (`500m`, `128Mi`, `1.5`, `2e3`) into integers, as
//! upstream's `resource.Quantity` `Value()` and `MilliValue()` do: rounded up, never via
//! floating point.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A parsed quantity: `mantissa * 10^exp10 * 2^exp2`.
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

/// `value * 10^scale`, rounded up (towards positive infinity), saturating at i64 bounds.
fn scaled(p: Parsed, scale: i32) -> i64 {
    let mut v = p.mantissa;
    let exp = p.exp10 + scale;
    let sat = |v: i128| v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    v = match v.checked_mul(1i128 << p.exp2.min(100)) {
        Some(v) => v,
        None => return if p.mantissa < 0 { i64::MIN } else { i64::MAX },
    };
    if exp >= 0 {
        for _ in 0..exp {
            v = match v.checked_mul(10) {
                Some(v) => v,
                None => return if v < 0 { i64::MIN } else { i64::MAX },
            };
        }
        sat(v)
    } else {
        let mut div: i128 = 1;
        for _ in 0..(-exp).min(38) {
            div *= 10;
        }
        let q = v.div_euclid(div);
        let r = v.rem_euclid(div);
        sat(if r != 0 { q + 1 } else { q })
    }
}

/// The quantity's integer value, rounded up; `None` when it does not parse.
pub fn value(q: &Quantity) -> Option<i64> {
    parse(&q.0).map(|p| scaled(p, 0))
}

/// The quantity in thousandths, rounded up (`500m` → 500, `2` → 2000).
pub fn milli_value(q: &Quantity) -> Option<i64> {
    parse(&q.0).map(|p| scaled(p, 3))
}

/// `ceil(value / divisor)`, the way upstream converts a resource for `resourceFieldRef`
/// (`ExtractContainerResourceValue`): CPU divisors are compared in millis.
pub fn divide_ceil(value_milli: i64, divisor_milli: i64) -> i64 {
    if divisor_milli <= 0 {
        return value_milli;
    }
    let q = value_milli.div_euclid(divisor_milli);
    if value_milli.rem_euclid(divisor_milli) != 0 {
        q + 1
    } else {
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.to_owned())
    }

    #[test]
    fn values_and_millis() {
        let cases: &[(&str, Option<i64>, Option<i64>)] = &[
            ("0", Some(0), Some(0)),
            ("1", Some(1), Some(1000)),
            ("500m", Some(1), Some(500)),
            ("1500m", Some(2), Some(1500)),
            ("0.5", Some(1), Some(500)),
            ("2.25", Some(3), Some(2250)),
            ("128Mi", Some(134_217_728), Some(134_217_728_000)),
            ("1Gi", Some(1 << 30), Some((1 << 30) * 1000)),
            ("1k", Some(1000), Some(1_000_000)),
            ("64M", Some(64_000_000), Some(64_000_000_000)),
            ("1e3", Some(1000), Some(1_000_000)),
            ("1E-3", Some(1), Some(1)),
            ("100n", Some(1), Some(1)),
            ("1.5Ki", Some(1536), Some(1_536_000)),
            ("-1", Some(-1), Some(-1000)),
            ("-500m", Some(0), Some(-500)),
            ("+2", Some(2), Some(2000)),
            ("", None, None),
            ("abc", None, None),
            ("1.2.3", None, None),
            ("5Zi", None, None),
            (".", None, None),
            ("9E", Some(9_000_000_000_000_000_000), Some(i64::MAX)),
            ("100E", Some(i64::MAX), Some(i64::MAX)),
        ];
        for (s, v, m) in cases {
            assert_eq!(value(&q(s)), *v, "value({s})");
            assert_eq!(milli_value(&q(s)), *m, "milli_value({s})");
        }
    }

    #[test]
    fn divide_rounds_up() {
        assert_eq!(divide_ceil(1500, 1000), 2);
        assert_eq!(divide_ceil(2000, 1000), 2);
        assert_eq!(divide_ceil(1, 1000), 1);
        assert_eq!(divide_ceil(0, 1000), 0);
        assert_eq!(divide_ceil(7, 0), 7);
    }
}
