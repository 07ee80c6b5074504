//! The declared types of a CRD schema as upstream's cost estimate sees them
//! (`k8s.io/apiserver/pkg/cel/common/schemas.go` `SchemaDeclType` and the `DeclType`s of
//! `pkg/cel/types.go`, v1.33): each node's kind, the most elements its value can have
//! (`MaxElements`: a string's length, a list's items, a map's entries) and the fewest
//! bytes its JSON can take (`MinSerializedSize`). Where the schema sets no bound, the
//! bound is what fits in one request of [`MAX_REQUEST_SIZE_BYTES`].

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

/// Upstream `celconfig.MaxRequestSizeBytes`: the largest request body.
pub(crate) const MAX_REQUEST_SIZE_BYTES: i64 = 3 * 1024 * 1024;

const MAX_DURATION_SIZE_JSON: i64 = 32;
const MAX_DATETIME_SIZE_JSON: i64 = 32;
const MIN_DURATION_SIZE_JSON: i64 = 3;
const JSON_DATE_SIZE: i64 = 12;
const MIN_DATETIME_SIZE_JSON: i64 = 21;
const MIN_STRING_SIZE: i64 = 2;
const MIN_BOOL_SIZE: i64 = 4;
const MIN_NUMBER_SIZE: i64 = 1;

#[derive(Debug)]
pub(crate) enum DeclKind {
    Bool,
    Int,
    Double,
    String,
    Bytes,
    Duration,
    Timestamp,
    /// `x-kubernetes-int-or-string`.
    Dyn,
    List(Box<Decl>),
    /// String keys; the values' type.
    Map(Box<Decl>),
    /// Fields by their CEL (escaped) names.
    Object(BTreeMap<String, Decl>),
}

#[derive(Debug)]
pub(crate) struct Decl {
    pub(crate) kind: DeclKind,
    pub(crate) max_elements: i64,
    pub(crate) min_serialized_size: i64,
}

/// A map's keys: upstream's `StringType`, which declares no maximum.
pub(crate) static MAP_KEY: Decl = Decl {
    kind: DeclKind::String,
    max_elements: 0,
    min_serialized_size: MIN_STRING_SIZE,
};

impl Decl {
    fn simple(kind: DeclKind, min_serialized_size: i64, max_elements: i64) -> Decl {
        Decl {
            kind,
            max_elements,
            min_serialized_size,
        }
    }

    /// Upstream's `SchemaDeclType`: `None` where the schema is not exposed to CEL (an
    /// array without items, a map whose values are not, a type it does not know).
    /// `resource_root` is set for the root of a custom resource and for an embedded
    /// resource, which always have `apiVersion`, `kind` and `metadata.name`.
    pub(crate) fn of_schema(s: &Value, resource_root: bool) -> Option<Decl> {
        if flag(s, "x-kubernetes-int-or-string") {
            return Some(Decl::simple(DeclKind::Dyn, 1, MAX_REQUEST_SIZE_BYTES - 2));
        }
        match s.get("type").and_then(Value::as_str).unwrap_or("") {
            "array" => {
                let items = s.get("items").filter(|i| i.is_object())?;
                let item = Decl::of_schema(items, flag(items, "x-kubernetes-embedded-resource"))?;
                let max = match int(s, "maxItems") {
                    Some(m) => m.max(0),
                    None => (MAX_REQUEST_SIZE_BYTES - 2) / (item.min_serialized_size + 1),
                };
                Some(Decl::simple(DeclKind::List(Box::new(item)), 2, max))
            }
            "object" => {
                if let Some(values) = s.get("additionalProperties").filter(|a| a.is_object()) {
                    let value =
                        Decl::of_schema(values, flag(values, "x-kubernetes-embedded-resource"))?;
                    let max = match int(s, "maxProperties") {
                        Some(m) => m.max(0),
                        None => (MAX_REQUEST_SIZE_BYTES - 2) / (value.min_serialized_size + 6),
                    };
                    return Some(Decl::simple(DeclKind::Map(Box::new(value)), 2, max));
                }
                Some(object(s, resource_root))
            }
            "string" => {
                let max_length = int(s, "maxLength");
                Some(
                    match s.get("format").and_then(Value::as_str).unwrap_or("") {
                        "byte" => Decl::simple(
                            DeclKind::Bytes,
                            MIN_STRING_SIZE,
                            max_length.map_or(MAX_REQUEST_SIZE_BYTES - 2, |m| m.max(0)),
                        ),
                        "duration" => Decl::simple(
                            DeclKind::Duration,
                            MIN_DURATION_SIZE_JSON,
                            MAX_DURATION_SIZE_JSON,
                        ),
                        "date" => Decl::simple(DeclKind::Timestamp, JSON_DATE_SIZE, JSON_DATE_SIZE),
                        "date-time" => Decl::simple(
                            DeclKind::Timestamp,
                            MIN_DATETIME_SIZE_JSON,
                            MAX_DATETIME_SIZE_JSON,
                        ),
                        _ => {
                            // maxLength counts characters; one can take 4 bytes.
                            let max = match max_length {
                                Some(m) => m.max(0).saturating_mul(4),
                                None => match s.get("enum").and_then(Value::as_array) {
                                    Some(values) if !values.is_empty() => values
                                        .iter()
                                        .filter_map(Value::as_str)
                                        .map(|v| v.len() as i64)
                                        .max()
                                        .unwrap_or(0),
                                    _ => MAX_REQUEST_SIZE_BYTES - 2,
                                },
                            };
                            Decl::simple(DeclKind::String, MIN_STRING_SIZE, max)
                        }
                    },
                )
            }
            "boolean" => Some(Decl::simple(DeclKind::Bool, MIN_BOOL_SIZE, 0)),
            "number" => Some(Decl::simple(DeclKind::Double, MIN_NUMBER_SIZE, 0)),
            "integer" => Some(Decl::simple(DeclKind::Int, MIN_NUMBER_SIZE, 0)),
            _ => None,
        }
    }
}

/// An object's fields, and its smallest JSON: `{}` plus each required field without
/// a default (its name, quotes, colon and comma, and its own smallest value).
fn object(s: &Value, resource_root: bool) -> Decl {
    let empty = serde_json::Map::new();
    let properties = s
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: HashSet<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // Upstream's `WithTypeAndObjectMeta`: unless the schema declares them all as
    // strings, `kind` and `apiVersion` become plain strings and `metadata` an object
    // of `name` and `generateName` only.
    let implied = resource_root && !declares_type_and_object_meta(properties);
    let string = serde_json::json!({"type": "string"});
    let metadata = serde_json::json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "generateName": {"type": "string"}},
    });
    let implied_props = [
        ("kind", &string),
        ("apiVersion", &string),
        ("metadata", &metadata),
    ];
    let declared = properties
        .iter()
        .filter(|(name, _)| {
            !implied || !matches!(name.as_str(), "kind" | "apiVersion" | "metadata")
        })
        .map(|(name, prop)| (name.as_str(), prop));
    let implied_iter = implied_props.into_iter().filter(|_| implied);
    let mut fields = BTreeMap::new();
    let mut min_size = 2i64;
    for (name, prop) in declared.chain(implied_iter) {
        let Some(field) = Decl::of_schema(prop, flag(prop, "x-kubernetes-embedded-resource"))
        else {
            continue;
        };
        if required.contains(name) && prop.get("default").is_none() {
            min_size = min_size
                .saturating_add(name.len() as i64)
                .saturating_add(field.min_serialized_size)
                .saturating_add(4);
        }
        if let Some(escaped) = escape(name) {
            fields.insert(escaped, field);
        }
    }
    Decl::simple(DeclKind::Object(fields), min_size, 0)
}

fn declares_type_and_object_meta(properties: &serde_json::Map<String, Value>) -> bool {
    let is = |s: Option<&Value>, t: &str| {
        s.and_then(|s| s.get("type")).and_then(Value::as_str) == Some(t)
    };
    let metadata = properties.get("metadata");
    let meta_props = metadata.and_then(|m| m.get("properties"));
    is(properties.get("kind"), "string")
        && is(properties.get("apiVersion"), "string")
        && is(metadata, "object")
        && is(meta_props.and_then(|p| p.get("name")), "string")
        && is(meta_props.and_then(|p| p.get("generateName")), "string")
}

fn flag(s: &Value, name: &str) -> bool {
    s.get(name).and_then(Value::as_bool) == Some(true)
}

fn int(s: &Value, name: &str) -> Option<i64> {
    s.get(name).and_then(Value::as_i64)
}

/// Upstream's `cel.Escape`: the CEL name of a property, or `None` for a name CEL
/// cannot spell (such a property is not declared to CEL).
pub(crate) fn escape(name: &str) -> Option<String> {
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    if crate::RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
    {
        return None;
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("__") {
            out.push_str("__underscores__");
            rest = &rest[2..];
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}
