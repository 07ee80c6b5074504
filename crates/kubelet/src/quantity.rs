//! Resource quantities (`500m`, `128Mi`, `1.5`, `2e3`) as integers, rounded up as
//! upstream's `resource.Quantity` `Value()` and `MilliValue()`: the typed front of
//! `ferrokube_apimachinery::quantity`, plus `resourceFieldRef`'s divisor rounding.

use ferrokube_apimachinery::quantity;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The quantity's integer value, rounded up; `None` when it does not parse.
pub fn value(q: &Quantity) -> Option<i64> {
    quantity::value(&q.0)
}

/// The quantity in thousandths, rounded up (`500m` → 500, `2` → 2000).
pub fn milli_value(q: &Quantity) -> Option<i64> {
    quantity::milli_value(&q.0)
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
