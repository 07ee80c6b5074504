//! The Table form of custom resources: a version's `additionalPrinterColumns`
//! (upstream `pkg/registry/customresource/tableconvertor` and the default columns of
//! `pkg/apiserver/helpers.go`).
//!
//! As upstream: the first column is always `Name`; each further column is a
//! client-go JSONPath wrapped in `{...}` ([`jsonpath`]); only the first value the
//! path finds is used (`.a[*].b` shows the first match, not all of them); a missing
//! value or an evaluation error gives a `null` cell; `string` columns print the value
//! as client-go's JSONPath printer does (strings as is, numbers and bools in Go's
//! `fmt` form, lists and objects as JSON, JSON `null` as `<no value>`); `integer`,
//! `number` and `boolean` columns keep a value of that JSON type (a float in an
//! integer column is truncated, an integer in a number column widened) and are
//! `null` otherwise; `date` columns show the age of an RFC 3339 string (`5m`,
//! `2d3h`), `<unknown>` for an empty string and `<invalid>` for an unparsable one.

pub mod jsonpath;

use ferrokube_api::printers::{TableColumnDefinition, human_duration, table_columns};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceColumnDefinition;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use self::jsonpath::JsonPath;

/// The printer columns of one CRD version, parsed once.
#[derive(Clone, Debug)]
pub struct PrinterColumns {
    /// `Name` first, then one per parsed column.
    headers: Vec<TableColumnDefinition>,
    /// One per header after `Name`.
    paths: Vec<JsonPath>,
    /// Upstream's `unrecognized column definition` error, when a path did not parse.
    error: Option<String>,
}

impl PrinterColumns {
    /// From a version's `additionalPrinterColumns`; `None` or empty gives upstream's
    /// default, a single `Age` column of type `date` on `.metadata.creationTimestamp`.
    /// As upstream's `tableconvertor.New`, a JSONPath that does not parse ends the
    /// list there: the columns before it are kept, it and the ones after are dropped
    /// (see [`PrinterColumns::error`]).
    pub fn new(columns: Option<&[CustomResourceColumnDefinition]>) -> PrinterColumns {
        // The ObjectMeta field docs, as the built-in printers carry them.
        let meta_docs = table_columns("", "");
        let doc = |i: usize| {
            meta_docs
                .get(i)
                .map(|c| c.description.clone())
                .unwrap_or_default()
        };
        let default_columns;
        let columns = match columns {
            Some(c) if !c.is_empty() => c,
            _ => {
                default_columns = [CustomResourceColumnDefinition {
                    name: "Age".to_string(),
                    type_: "date".to_string(),
                    description: Some(doc(1)),
                    json_path: ".metadata.creationTimestamp".to_string(),
                    format: None,
                    priority: None,
                }];
                &default_columns[..]
            }
        };
        let mut out = PrinterColumns {
            headers: vec![TableColumnDefinition {
                name: "Name".to_string(),
                type_: "string".to_string(),
                format: "name".to_string(),
                description: doc(0),
                priority: 0,
            }],
            paths: Vec::with_capacity(columns.len()),
            error: None,
        };
        for col in columns {
            let Ok(path) = JsonPath::parse(&format!("{{{}}}", col.json_path)) else {
                out.error = Some(format!(
                    "unrecognized column definition \"{}\"",
                    col.json_path
                ));
                break;
            };
            let description = match col.description.as_deref() {
                Some(d) if !d.is_empty() => d.to_string(),
                _ => format!(
                    "Custom resource definition column (in JSONPath format): {}",
                    col.json_path
                ),
            };
            out.paths.push(path);
            out.headers.push(TableColumnDefinition {
                name: col.name.clone(),
                type_: col.type_.clone(),
                format: col.format.clone().unwrap_or_default(),
                description,
                priority: col.priority.unwrap_or(0),
            });
        }
        out
    }

    /// Why the columns were cut short, if a JSONPath did not parse (upstream logs it
    /// and serves the columns it has).
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The Table's `columnDefinitions` (`meta.k8s.io/v1` `TableColumnDefinition`
    /// objects: `name`, `type`, `format`, `description`, `priority`), `Name` first.
    pub fn column_definitions(&self) -> Vec<Value> {
        self.headers
            .iter()
            .map(|h| serde_json::to_value(h).unwrap_or_default())
            .collect()
    }

    /// The typed column definitions, `Name` first.
    pub fn headers(&self) -> &[TableColumnDefinition] {
        &self.headers
    }

    /// One row's cells for an object: its name, then one cell per column. `now` is the
    /// time `date` columns measure ages against.
    pub fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut cells = Vec::with_capacity(1 + self.paths.len());
        cells.push(Value::String(name.to_string()));
        for (path, header) in self.paths.iter().zip(&self.headers[1..]) {
            let first = match path.find_results(obj) {
                Ok(results) => results
                    .into_iter()
                    .next()
                    .and_then(|r| r.into_iter().next()),
                Err(_) => None,
            };
            let Some(value) = first else {
                cells.push(Value::Null);
                continue;
            };
            if header.type_ == "string" {
                cells.push(Value::String(print_value(&value)));
            } else {
                cells.push(cell_for_json_value(&header.type_, &value, now));
            }
        }
        cells
    }
}

/// Upstream's `cellForJSONValue` (non-string columns; `string` columns are printed
/// with [`print_value`] instead, but this handles them as upstream's function does).
pub fn cell_for_json_value(column_type: &str, value: &Value, now: Timestamp) -> Value {
    match (column_type, value) {
        (_, Value::Null) => Value::Null,
        ("integer", Value::Number(n)) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => Value::from(n.as_f64().unwrap_or(0.0) as i64),
        },
        ("number", Value::Number(n)) => go_float_value(n.as_f64().unwrap_or(0.0)),
        ("boolean", Value::Bool(b)) => Value::Bool(*b),
        ("string", Value::String(s)) => Value::String(s.clone()),
        ("date", Value::String(s)) => Value::String(date_cell(s, now)),
        _ => Value::Null,
    }
}

/// `metav1.Time.UnmarshalQueryParameter` then `ConvertToHumanReadableDateType`.
fn date_cell(s: &str, now: Timestamp) -> String {
    if s.is_empty() || s == "null" {
        return "<unknown>".to_string();
    }
    match s.parse::<Timestamp>() {
        Ok(t) => human_duration(now.duration_since(t)),
        Err(_) => "<invalid>".to_string(),
    }
}

/// A float64 cell: integral values become JSON integers so they encode as Go's
/// `encoding/json` writes them (`42`, not `42.0`).
fn go_float_value(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        Value::from(f as i64)
    } else {
        Value::from(f)
    }
}

/// client-go's `JSONPath.PrintResults` of one value: lists and objects as Go's
/// `json.Marshal`, other values with Go's `fmt.Fprint`, JSON `null` as `<no value>`.
pub fn print_value(v: &Value) -> String {
    match v {
        Value::Null => "<no value>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(u)) => u.to_string(),
            _ => go_format_float(n.as_f64().unwrap_or(0.0)),
        },
        Value::Array(_) | Value::Object(_) => {
            let mut out = String::new();
            go_json(v, &mut out);
            out
        }
    }
}

/// The shortest decimal digits of `f` (no sign) and its decimal exponent, as
/// `d.ddd × 10^exp`.
fn shortest_digits(f: f64) -> (String, i32) {
    let e = format!("{:e}", f.abs());
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    (mantissa.replace('.', ""), exp.parse().unwrap_or(0))
}

fn exp_form(f: f64, digits: &str, exp: i32, pad: bool) -> String {
    let mut s = String::new();
    if f < 0.0 {
        s.push('-');
    }
    s.push_str(&digits[..1]);
    if digits.len() > 1 {
        s.push('.');
        s.push_str(&digits[1..]);
    }
    s.push('e');
    s.push(if exp < 0 { '-' } else { '+' });
    if pad {
        s.push_str(&format!("{:02}", exp.abs()));
    } else {
        s.push_str(&exp.abs().to_string());
    }
    s
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): `%e` form when the
/// exponent is below -4 or at least 6 (`1e+06`, `1.5e-07`).
fn go_format_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if f == 0.0 {
        return "0".into();
    }
    let (digits, exp) = shortest_digits(f);
    if !(-4..6).contains(&exp) {
        return exp_form(f, &digits, exp, true);
    }
    format!("{f}")
}

/// Go's `encoding/json` float64 form: `%e` (exponent without padding) below 1e-6 or
/// from 1e21, plain decimal otherwise.
fn go_json_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let (digits, exp) = shortest_digits(f);
        return exp_form(f, &digits, exp, false);
    }
    format!("{f}")
}

/// Go's `json.Marshal` of a decoded JSON value: keys sorted, HTML-safe escaping.
fn go_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => out.push_str(&i.to_string()),
            (None, Some(u)) => out.push_str(&u.to_string()),
            _ => out.push_str(&go_json_float(n.as_f64().unwrap_or(0.0))),
        },
        Value::String(s) => go_json_string(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_string(k, out);
                out.push(':');
                go_json(item, out);
            }
            out.push('}');
        }
    }
}

fn go_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_number_formats() {
        assert_eq!(go_format_float(2.75), "2.75");
        assert_eq!(go_format_float(1e6), "1e+06");
        assert_eq!(go_format_float(123456.0), "123456");
        assert_eq!(go_format_float(1234567.0), "1.234567e+06");
        assert_eq!(go_format_float(0.0001), "0.0001");
        assert_eq!(go_format_float(0.00001), "1e-05");
        assert_eq!(go_format_float(-2.5), "-2.5");
        assert_eq!(go_json_float(1e21), "1e+21");
        assert_eq!(go_json_float(1e-7), "1e-7");
        assert_eq!(go_json_float(1e20), "100000000000000000000");
        assert_eq!(go_json_float(2.5), "2.5");
        assert_eq!(
            print_value(&json!({"b": [1, 2.5], "a": "<&>"})),
            r#"{"a":"\u003c\u0026\u003e","b":[1,2.5]}"#
        );
    }

    #[test]
    fn upstream_cell_for_json_value_table() {
        let now: Timestamp = "2024-05-01T12:00:00Z".parse().unwrap();
        let ago = |secs: i64| {
            now.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(secs))
                .unwrap()
                .to_string()
        };
        let cases = [
            ("integer", json!(42), json!(42)),
            ("integer", json!(2.75), json!(2)),
            ("integer", json!(true), Value::Null),
            ("integer", json!("foo"), Value::Null),
            ("number", json!(42), json!(42)),
            ("number", json!(2.75), json!(2.75)),
            ("number", json!(true), Value::Null),
            ("number", json!("foo"), Value::Null),
            ("boolean", json!(42), Value::Null),
            ("boolean", json!(2.75), Value::Null),
            ("boolean", json!(true), json!(true)),
            ("boolean", json!("foo"), Value::Null),
            ("string", json!(42), Value::Null),
            ("string", json!(2.75), Value::Null),
            ("string", json!(true), Value::Null),
            ("string", json!("foo"), json!("foo")),
            ("date", json!(42), Value::Null),
            ("date", json!(2.75), Value::Null),
            ("date", json!(true), Value::Null),
            ("date", json!(ago(12 * 3600 + 30 * 60)), json!("12h")),
            (
                "date",
                json!(ago(-(12 * 3600 + 30 * 60))),
                json!("<invalid>"),
            ),
            ("date", json!(""), json!("<unknown>")),
            ("date", json!("yesterday"), json!("<invalid>")),
            ("unknown", json!("foo"), Value::Null),
        ];
        for (ty, value, want) in cases {
            assert_eq!(cell_for_json_value(ty, &value, now), want, "{ty} {value}");
        }
    }
}
