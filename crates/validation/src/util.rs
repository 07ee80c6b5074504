//! Helpers shared by the kinds' validators: immutability, enums, label selectors,
//! int-or-percent, quantities, IPs, and the key/name rules apimachinery does not carry.

use std::collections::BTreeMap;

use ferrokube_apimachinery::errors::{FieldError, FieldPath};
use ferrokube_apimachinery::labels::Selector;
use ferrokube_apimachinery::validation::{
    FIELD_IMMUTABLE_ERROR_MSG, IS_NEGATIVE_ERROR_MSG, is_dns1123_label, is_dns1123_subdomain,
    is_qualified_name, is_valid_port_name, is_valid_port_num, max_len_error, regex_error,
    validate_label_selector_requirement, validate_labels,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde_json::Value;

pub type Errs = Vec<FieldError>;

pub fn p(root: &str) -> FieldPath {
    FieldPath::new(root)
}

pub fn json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

pub fn s(o: &Option<String>) -> &str {
    o.as_deref().unwrap_or("")
}

/// `ValidateImmutableField`.
pub fn immutable<T: PartialEq + Serialize>(new: &T, old: &T, path: &FieldPath, errs: &mut Errs) {
    if new != old {
        errs.push(FieldError::invalid(
            path,
            json(new),
            FIELD_IMMUTABLE_ERROR_MSG,
        ));
    }
}

pub fn nonnegative(v: Option<i64>, path: &FieldPath, errs: &mut Errs) {
    if let Some(v) = v
        && v < 0
    {
        errs.push(FieldError::invalid(path, v, IS_NEGATIVE_ERROR_MSG));
    }
}

/// `Required` when empty, `NotSupported` when not one of `valid`.
pub fn enum_required(value: &str, valid: &[&str], path: &FieldPath, errs: &mut Errs) {
    if value.is_empty() {
        errs.push(FieldError::required(path, ""));
    } else if !valid.contains(&value) {
        errs.push(FieldError::not_supported(path, value, valid));
    }
}

/// `NotSupported` when set and not one of `valid`.
pub fn enum_optional(value: &Option<String>, valid: &[&str], path: &FieldPath, errs: &mut Errs) {
    if let Some(v) = value
        && !valid.contains(&v.as_str())
    {
        errs.push(FieldError::not_supported(path, v.as_str(), valid));
    }
}

pub fn msgs_invalid(msgs: Vec<String>, value: &str, path: &FieldPath, errs: &mut Errs) {
    errs.extend(
        msgs.into_iter()
            .map(|m| FieldError::invalid(path, value, m)),
    );
}

/// A path under a DNS domain, such as `acme.io/foo` (upstream `IsDomainPrefixedPath`).
pub fn domain_prefixed_path(value: &str, path: &FieldPath, errs: &mut Errs) {
    const HTTP_PATH_FMT: &str = r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+";
    if value.is_empty() {
        errs.push(FieldError::required(path, ""));
        return;
    }
    let Some((host, rest)) = value
        .split_once('/')
        .filter(|(h, r)| !h.is_empty() && !r.is_empty())
    else {
        errs.push(FieldError::invalid(
            path,
            value,
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        ));
        return;
    };
    msgs_invalid(is_dns1123_subdomain(host), host, path, errs);
    let path_char = |c: char| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c);
    if !rest.chars().all(path_char) {
        errs.push(FieldError::invalid(
            path,
            rest,
            regex_error("Invalid path", HTTP_PATH_FMT, &[]),
        ));
    }
}

pub fn dns_label(value: &str, path: &FieldPath, errs: &mut Errs) {
    msgs_invalid(is_dns1123_label(value), value, path, errs);
}

pub fn dns_subdomain(value: &str, path: &FieldPath, errs: &mut Errs) {
    msgs_invalid(is_dns1123_subdomain(value), value, path, errs);
}

pub fn port_num(port: i32, path: &FieldPath, errs: &mut Errs) {
    errs.extend(
        is_valid_port_num(port.into())
            .into_iter()
            .map(|m| FieldError::invalid(path, port, m)),
    );
}

/// `ValidatePortNumOrName`.
pub fn port_num_or_name(port: &IntOrString, path: &FieldPath, errs: &mut Errs) {
    match port {
        IntOrString::Int(i) => port_num(*i, path, errs),
        IntOrString::String(name) => msgs_invalid(is_valid_port_name(name), name, path, errs),
    }
}

pub const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

/// `metav1validation.ValidateLabelSelector`.
pub fn label_selector(sel: &LabelSelector, path: &FieldPath, errs: &mut Errs) {
    for (i, req) in sel.match_expressions.iter().flatten().enumerate() {
        let rp = path.child("matchExpressions").index(i);
        errs.extend(validate_label_selector_requirement(req, false, &rp));
    }
    if let Some(l) = &sel.match_labels {
        errs.extend(validate_labels(l, &path.child("matchLabels")));
    }
}

/// Whether a valid, non-empty label selector does not match `labels`. Invalid
/// selectors are reported by [`label_selector`] instead, as upstream only compares
/// when the selector converts.
pub fn selector_mismatch(sel: &LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
    let empty = BTreeMap::new();
    !selector_is_empty(sel)
        && Selector::from_label_selector(sel).is_ok_and(|s| !s.matches(labels.unwrap_or(&empty)))
}

pub fn selector_is_empty(sel: &LabelSelector) -> bool {
    sel.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && sel.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

/// `ValidatePositiveIntOrPercent` plus `IsNotMoreThan100Percent`.
pub fn int_or_percent(v: &IntOrString, path: &FieldPath, errs: &mut Errs) {
    match v {
        IntOrString::Int(i) => {
            if *i < 0 {
                errs.push(FieldError::invalid(path, *i, IS_NEGATIVE_ERROR_MSG));
            }
        }
        IntOrString::String(s) => match percent(s) {
            Some(pct) if pct > 100 => {
                errs.push(FieldError::invalid(
                    path,
                    s.as_str(),
                    "must not be greater than 100%",
                ));
            }
            Some(_) => {}
            None => errs.push(FieldError::invalid(
                path,
                s.as_str(),
                regex_error(
                    "a valid percent string must be a numeric string followed by an ending '%'",
                    "[0-9]+%",
                    &["1%", "93%"],
                ),
            )),
        },
    }
}

/// The value of a `[0-9]+%` string.
pub fn percent(s: &str) -> Option<u64> {
    let digits = s.strip_suffix('%')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse::<u64>().unwrap_or(u64::MAX))
}

/// Whether an int-or-percent is zero (`getIntOrPercentValue == 0`).
pub fn is_zero(v: &IntOrString) -> bool {
    match v {
        IntOrString::Int(i) => *i == 0,
        IntOrString::String(s) => percent(s) == Some(0),
    }
}

/// `validation.IsConfigMapKey` (also Secret keys).
pub fn is_config_map_key(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if key.len() > 253 {
        errs.push(max_len_error(253));
    }
    if key.is_empty()
        || !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        errs.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    errs.extend(has_chars_dots(key));
    errs
}

fn has_chars_dots(key: &str) -> Vec<String> {
    if key == "." {
        vec!["must not be '.'".to_owned()]
    } else if key == ".." {
        vec!["must not be '..'".to_owned()]
    } else if key.starts_with("..") {
        vec!["must not start with '..'".to_owned()]
    } else {
        Vec::new()
    }
}

/// `validation.IsRelaxedEnvVarName` (RelaxedEnvironmentVariableValidation is on by
/// default since 1.32).
pub fn is_env_var_name(name: &str) -> Vec<String> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| (b' '..=b'~').contains(&b) && b != b'=')
    {
        return vec![
            "a valid environment variable name must consist only of printable ASCII characters other than '='"
                .to_owned(),
        ];
    }
    Vec::new()
}

/// `validateLocalDescendingPath`: relative, no `..` element.
pub fn local_descending_path(path_value: &str, path: &FieldPath, errs: &mut Errs) {
    if path_value.starts_with('/') {
        errs.push(FieldError::invalid(
            path,
            path_value,
            "must be a relative path",
        ));
    }
    if path_value.split(['/', '\\']).any(|e| e == "..") {
        errs.push(FieldError::invalid(
            path,
            path_value,
            "must not contain '..'",
        ));
    }
}

pub fn is_ip(s: &str) -> bool {
    s.parse::<std::net::IpAddr>().is_ok()
}

pub fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

pub fn ip(value: &str, path: &FieldPath, errs: &mut Errs) {
    if !is_ip(value) {
        errs.push(FieldError::invalid(
            path,
            value,
            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        ));
    }
}

pub fn cidr(value: &str, path: &FieldPath, errs: &mut Errs) {
    if !is_cidr(value) {
        errs.push(FieldError::invalid(
            path,
            value,
            "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
        ));
    }
}

/// `IsQualifiedName` as field errors.
pub fn qualified_name(value: &str, path: &FieldPath, errs: &mut Errs) {
    msgs_invalid(is_qualified_name(value), value, path, errs);
}

// --- quantities ---

/// The regular expression upstream's quantity parser reports.
pub const QUANTITY_FORMAT_MSG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// Parses a quantity into its value (as f64; enough to compare and check signs).
pub fn parse_quantity(q: &str) -> Option<f64> {
    ferrokube_apimachinery::quantity::approx(q)
}

/// Validates a resource quantity: parseable and (optionally) not negative.
pub fn quantity(q: &str, path: &FieldPath, errs: &mut Errs) -> Option<f64> {
    match parse_quantity(q) {
        None => {
            errs.push(FieldError::invalid(path, q, QUANTITY_FORMAT_MSG));
            None
        }
        Some(v) if v < 0.0 => {
            errs.push(FieldError::invalid(path, q, IS_NEGATIVE_ERROR_MSG));
            Some(v)
        }
        Some(v) => Some(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        let cases = [
            ("1", Some(1.0)),
            ("100m", Some(0.1)),
            ("1Gi", Some(1073741824.0)),
            ("1.5k", Some(1500.0)),
            ("2e3", Some(2000.0)),
            ("-1", Some(-1.0)),
            ("abc", None),
            ("1Xi", None),
            ("", None),
            (".", None),
        ];
        for (q, want) in cases {
            assert_eq!(parse_quantity(q), want, "{q}");
        }
    }

    #[test]
    fn keys_and_env_names() {
        assert!(is_config_map_key("a.b-c_D").is_empty());
        assert_eq!(is_config_map_key("a/b").len(), 1);
        assert_eq!(
            is_config_map_key("..a"),
            vec!["must not start with '..'".to_owned()]
        );
        assert!(is_env_var_name("1FOO.bar").is_empty());
        assert_eq!(is_env_var_name("A=B").len(), 1);
        assert_eq!(is_env_var_name("").len(), 1);
    }

    #[test]
    fn percents_and_cidrs() {
        let mut errs = Vec::new();
        int_or_percent(&IntOrString::String("101%".into()), &p("x"), &mut errs);
        int_or_percent(&IntOrString::String("abc".into()), &p("y"), &mut errs);
        int_or_percent(&IntOrString::Int(-1), &p("z"), &mut errs);
        int_or_percent(&IntOrString::String("25%".into()), &p("ok"), &mut errs);
        let fields: Vec<_> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["x", "y", "z"]);
        assert!(is_cidr("10.0.0.0/8") && is_cidr("fd00::/64"));
        assert!(!is_cidr("10.0.0.0/33") && !is_cidr("10.0.0.0"));
    }
}
