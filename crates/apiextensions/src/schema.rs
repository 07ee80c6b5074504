//! A custom resource against its CRD version's structural schema, as upstream's
//! apiextensions-apiserver does it:
//!
//! - pruning ([`StructuralSchema::prune`]): `schema/pruning` (unknown fields dropped,
//!   their paths returned for `fieldValidation=Strict`), then `schema/objectmeta`
//!   coercion of embedded resources' metadata and `schema/defaulting`'s
//!   `PruneNonNullableNullsWithoutDefaults`, as the custom resource decoder runs them;
//! - defaulting ([`StructuralSchema::apply_defaults`]): `schema/defaulting`;
//! - validation ([`StructuralSchema::validate`]): kube-openapi's schema validator (with
//!   upstream's conversion of its errors to field errors), `schema/objectmeta`
//!   validation of embedded resources, `schema/listtype` and `x-kubernetes-validations`
//!   CEL rules.
//!
//! Deviations: errors come in a fixed order (properties sorted) where upstream's follow
//! Go's map order; for `anyOf`/`oneOf` failures the alternative with the fewest errors is
//! reported (upstream: the one with most passing checks); `pattern` runs on the CEL
//! library's regex engine (RE2-like, as Go's); the formats `uri`, `isbn*`,
//! `creditcard`, `rgbcolor` and `duration` are accepted unchecked; no validation
//! ratcheting on update; `optionalOldSelf` rules run only when an old value exists.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use ferrokube_apimachinery::errors::{FieldError, FieldPath, go_quote};
use ferrokube_apimachinery::validation::{
    is_dns1035_label, validate_object_meta, validate_path_segment_name,
};
use ferrokube_cel::{Activation, Budget, Program, RUNTIME_COST_BUDGET};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value};

/// A version's schema, ready to use (built once per CRD version, reused per request).
#[derive(Debug, Clone)]
pub struct StructuralSchema {
    root: Arc<Node>,
}

/// One schema node, with what pruning, defaulting and validation need.
#[derive(Debug, Default)]
struct Node {
    /// `type`, or `integer,string` for `x-kubernetes-int-or-string`; empty: any.
    types: Vec<&'static str>,
    nullable: bool,
    /// The format as written, when upstream keeps it for the node's type.
    format: Option<String>,
    preserve_unknown: bool,
    embedded: bool,
    properties: BTreeMap<String, Node>,
    additional: Additional,
    items: Option<Box<Node>>,
    required: Vec<String>,
    enum_values: Vec<Value>,
    maximum: Option<f64>,
    exclusive_maximum: bool,
    minimum: Option<f64>,
    exclusive_minimum: bool,
    multiple_of: Option<f64>,
    max_length: Option<i64>,
    min_length: Option<i64>,
    pattern: Option<String>,
    max_items: Option<i64>,
    min_items: Option<i64>,
    unique_items: bool,
    max_properties: Option<i64>,
    min_properties: Option<i64>,
    all_of: Vec<Node>,
    any_of: Vec<Node>,
    one_of: Vec<Node>,
    not: Option<Box<Node>>,
    list_type: Option<String>,
    list_map_keys: Vec<String>,
    map_type: Option<String>,
    default: Option<Value>,
    rules: Vec<Rule>,
}

#[derive(Debug, Default)]
enum Additional {
    /// No `additionalProperties`.
    #[default]
    Absent,
    /// `additionalProperties: true|false`.
    Allows(bool),
    Schema(Box<Node>),
}

impl Additional {
    fn schema(&self) -> Option<&Node> {
        match self {
            Additional::Schema(n) => Some(n),
            _ => None,
        }
    }
}

/// One `x-kubernetes-validations` rule, compiled.
#[derive(Debug)]
struct Rule {
    rule: String,
    message: Option<String>,
    message_expression: Option<Program>,
    reason: Option<String>,
    field_path: Option<String>,
    uses_old_self: bool,
    program: Result<Program, String>,
}

const IN: &str = "body";
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];
const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Upstream's string formats (normalized: without `-`) at compatibility version 1.33.
const STRING_FORMATS: [&str; 24] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

impl Node {
    fn new(p: &JSONSchemaProps) -> Node {
        let type_ = p.type_.as_deref().unwrap_or("");
        let int_or_string = p.x_kubernetes_int_or_string.unwrap_or(false);
        let types: Vec<&'static str> = if int_or_string {
            vec!["integer", "string"]
        } else {
            match type_ {
                "object" => vec!["object"],
                "array" => vec!["array"],
                "string" => vec!["string"],
                "integer" => vec!["integer"],
                "number" => vec!["number"],
                "boolean" => vec!["boolean"],
                _ => vec![],
            }
        };
        // StripUnsupportedFormatsPostProcessor.
        let format = p.format.as_ref().filter(|f| {
            let single = if types.len() == 1 { types[0] } else { "" };
            match single {
                "" | "string" => STRING_FORMATS.contains(&f.replace('-', "").as_str()),
                "integer" => *f == "int32" || *f == "int64",
                "number" => *f == "float" || *f == "double",
                _ => false,
            }
        });
        let nodes = |v: &Option<Vec<JSONSchemaProps>>| -> Vec<Node> {
            v.iter().flatten().map(Node::new).collect()
        };
        Node {
            types,
            nullable: p.nullable.unwrap_or(false),
            format: format.cloned(),
            preserve_unknown: p.x_kubernetes_preserve_unknown_fields.unwrap_or(false),
            embedded: p.x_kubernetes_embedded_resource.unwrap_or(false),
            properties: p
                .properties
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), Node::new(v)))
                .collect(),
            additional: match &p.additional_properties {
                None => Additional::Absent,
                Some(JSONSchemaPropsOrBool::Bool(b)) => Additional::Allows(*b),
                Some(JSONSchemaPropsOrBool::Schema(s)) => {
                    Additional::Schema(Box::new(Node::new(s)))
                }
            },
            items: match &p.items {
                Some(JSONSchemaPropsOrArray::Schema(s)) => Some(Box::new(Node::new(s))),
                Some(JSONSchemaPropsOrArray::Schemas(v)) => {
                    v.first().map(|s| Box::new(Node::new(s)))
                }
                None => None,
            },
            required: p.required.clone().unwrap_or_default(),
            enum_values: p.enum_.iter().flatten().map(|j| j.0.clone()).collect(),
            maximum: p.maximum,
            exclusive_maximum: p.exclusive_maximum.unwrap_or(false),
            minimum: p.minimum,
            exclusive_minimum: p.exclusive_minimum.unwrap_or(false),
            multiple_of: p.multiple_of,
            max_length: p.max_length,
            min_length: p.min_length,
            pattern: p.pattern.clone().filter(|s| !s.is_empty()),
            max_items: p.max_items,
            min_items: p.min_items,
            unique_items: p.unique_items.unwrap_or(false),
            max_properties: p.max_properties,
            min_properties: p.min_properties,
            all_of: nodes(&p.all_of),
            any_of: nodes(&p.any_of),
            one_of: nodes(&p.one_of),
            not: p.not.as_ref().map(|n| Box::new(Node::new(n))),
            list_type: p.x_kubernetes_list_type.clone(),
            list_map_keys: p.x_kubernetes_list_map_keys.clone().unwrap_or_default(),
            map_type: p.x_kubernetes_map_type.clone(),
            default: p.default.as_ref().map(|j| j.0.clone()),
            rules: p
                .x_kubernetes_validations
                .iter()
                .flatten()
                .map(Rule::new)
                .collect(),
        }
    }

    /// The schema of field `k` of an object (a property, else `additionalProperties`).
    fn field(&self, k: &str) -> Option<&Node> {
        self.properties.get(k).or_else(|| self.additional.schema())
    }
}

impl Rule {
    fn new(
        r: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::ValidationRule,
    ) -> Rule {
        let (program, uses_old_self) = match ferrokube_cel::compile(&r.rule, &["self"]) {
            Ok(p) => (Ok(p), false),
            Err(first) => match ferrokube_cel::compile(&r.rule, &["self", "oldSelf"]) {
                Ok(p) => (Ok(p), true),
                Err(_) => (Err(first.to_string()), false),
            },
        };
        Rule {
            rule: r.rule.clone(),
            message: r.message.clone().filter(|m| !m.trim().is_empty()),
            message_expression: r
                .message_expression
                .as_deref()
                .filter(|m| !m.trim().is_empty())
                .and_then(|m| ferrokube_cel::compile(m, &["self", "oldSelf"]).ok()),
            reason: r.reason.clone(),
            field_path: r.field_path.clone().filter(|f| !f.is_empty()),
            uses_old_self,
            program,
        }
    }

    /// Upstream's `ruleErrorString`.
    fn error_string(&self) -> String {
        match &self.message {
            Some(m) => m.trim().to_string(),
            None => self.rule.trim().to_string(),
        }
    }

    /// Upstream's `ruleMessageOrDefault`.
    fn message_or_default(&self) -> String {
        match &self.message {
            Some(m) => m.trim().to_string(),
            None => format!("failed rule: {}", self.rule.trim()),
        }
    }
}

impl StructuralSchema {
    /// From `spec.versions[].schema.openAPIV3Schema`. Assumes the CRD was validated.
    pub fn new(props: &JSONSchemaProps) -> StructuralSchema {
        StructuralSchema {
            root: Arc::new(Node::new(props)),
        }
    }

    /// Removes every field the schema does not specify (honouring
    /// `x-kubernetes-preserve-unknown-fields`, `additionalProperties` and
    /// `x-kubernetes-embedded-resource`, whose `apiVersion`, `kind` and `metadata` are
    /// kept, the metadata reduced to ObjectMeta's fields as upstream's round trip does,
    /// which also writes `creationTimestamp: null`). At the root `apiVersion`, `kind`
    /// and `metadata` are kept as they are. Non-nullable nulls without a default are
    /// dropped too (upstream's decoder does it right after pruning; not reported).
    ///
    /// Returns the removed fields' paths as upstream reports them for
    /// `fieldValidation=Strict`: the pruned ones sorted, then the embedded metadata's.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut pruned = Vec::new();
        let mut path = String::new();
        prune(obj, Some(&self.root), true, &mut path, &mut pruned);
        pruned.sort();
        let mut meta = Vec::new();
        coerce_embedded(obj, &self.root, &FieldPath::default(), true, &mut meta);
        pruned.extend(meta);
        drop_nulls(obj, Some(&self.root));
        pruned
    }

    /// Applies `default`s (upstream's defaulting algorithm): a missing property with a
    /// default gets it, as does a null one that is not nullable; inside arrays and
    /// `additionalProperties` for each element.
    pub fn apply_defaults(&self, obj: &mut Value) {
        default(obj, &self.root);
    }

    /// Validates the whole object against the schema, with upstream's paths and
    /// messages: kube-openapi's schema validation, embedded resources' type and object
    /// meta, list types and CEL rules (`old`: the previous object, for transition rules).
    /// The root's metadata is left to the registry.
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_schema(&self.root, obj, "", &mut errs);
        validate_embedded(&self.root, obj, &FieldPath::default(), true, &mut errs);
        validate_list_types(&self.root, obj, &FieldPath::default(), &mut errs);
        let mut budget = Budget::new(RUNTIME_COST_BUDGET);
        let _ = validate_cel(
            &self.root,
            obj,
            old,
            &FieldPath::default(),
            &mut budget,
            &mut errs,
        );
        errs
    }
}

// ---------------------------------------------------------------------------
// Pruning
// ---------------------------------------------------------------------------

fn append_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

fn record(path: &str, key: &str, out: &mut Vec<String>) {
    let mut p = path.to_string();
    append_key(&mut p, key);
    out.push(p);
}

fn prune(x: &mut Value, s: Option<&Node>, root: bool, path: &mut String, out: &mut Vec<String>) {
    if let Some(s) = s
        && s.preserve_unknown
    {
        skip_prune(x, s, root, path, out);
        return;
    }
    let len = path.len();
    match x {
        Value::Object(m) => {
            let Some(s) = s else {
                for k in m.keys() {
                    record(path, k, out);
                }
                m.clear();
                return;
            };
            let embedded = s.embedded || root;
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let v = m.get_mut(&k).expect("key listed");
                if let Some(prop) = s.properties.get(&k) {
                    append_key(path, &k);
                    prune(v, Some(prop), false, path, out);
                    path.truncate(len);
                } else if !matches!(s.additional, Additional::Absent) {
                    append_key(path, &k);
                    prune(v, s.additional.schema(), false, path, out);
                    path.truncate(len);
                } else {
                    if !META_FIELDS.contains(&k.as_str()) || !path.is_empty() {
                        record(path, &k, out);
                    }
                    m.remove(&k);
                }
            }
        }
        Value::Array(a) => {
            let items = s.and_then(|s| s.items.as_deref());
            for (i, v) in a.iter_mut().enumerate() {
                path.push_str(&format!("[{i}]"));
                prune(v, items, false, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

fn skip_prune(x: &mut Value, s: &Node, root: bool, path: &mut String, out: &mut Vec<String>) {
    let len = path.len();
    match x {
        Value::Object(m) => {
            let embedded = s.embedded || root;
            for (k, v) in m.iter_mut() {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(prop) = s.properties.get(k) {
                    append_key(path, k);
                    prune(v, Some(prop), false, path, out);
                    path.truncate(len);
                } else if !matches!(s.additional, Additional::Absent) {
                    append_key(path, k);
                    prune(v, s.additional.schema(), false, path, out);
                    path.truncate(len);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for (i, v) in a.iter_mut().enumerate() {
                    path.push_str(&format!("[{i}]"));
                    skip_prune(v, items, false, path, out);
                    path.truncate(len);
                }
            }
        }
        _ => {}
    }
}

/// `objectmeta.Coerce` of embedded resources: their metadata round-trips through
/// ObjectMeta (unknown fields dropped and reported, malformed ones dropped).
fn coerce_embedded(x: &mut Value, s: &Node, path: &FieldPath, root: bool, out: &mut Vec<String>) {
    match x {
        Value::Object(m) => {
            if s.embedded
                && !root
                && let Some(Value::Object(meta)) = m.get_mut("metadata")
            {
                let prefix = path.child("metadata");
                let keys: Vec<String> = meta.keys().cloned().collect();
                for k in keys {
                    if !OBJECT_META_FIELDS.contains(&k.as_str()) {
                        out.push(format!("{prefix}.{k}"));
                        meta.remove(&k);
                        continue;
                    }
                    let mut single = Map::new();
                    single.insert(k.clone(), meta[&k].clone());
                    if serde_json::from_value::<ObjectMeta>(Value::Object(single)).is_err() {
                        meta.remove(&k);
                    }
                }
                meta.entry("creationTimestamp").or_insert(Value::Null);
            }
            for (k, v) in m.iter_mut() {
                if let Some(prop) = s.properties.get(k) {
                    coerce_embedded(v, prop, &path.child(k), false, out);
                } else if let Some(a) = s.additional.schema() {
                    coerce_embedded(v, a, &path.key(k), false, out);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for (i, v) in a.iter_mut().enumerate() {
                    coerce_embedded(v, items, &path.index(i), false, out);
                }
            }
        }
        _ => {}
    }
}

/// `PruneNonNullableNullsWithoutDefaults`.
fn drop_nulls(x: &mut Value, s: Option<&Node>) {
    match x {
        Value::Object(m) => {
            m.retain(|k, v| {
                let f = s.and_then(|s| s.field(k));
                if v.is_null() && f.is_some_and(|f| !f.nullable && f.default.is_none()) {
                    return false;
                }
                drop_nulls(v, f);
                true
            });
        }
        Value::Array(a) => {
            let items = s.and_then(|s| s.items.as_deref());
            for v in a {
                drop_nulls(v, items);
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// Defaulting
// ---------------------------------------------------------------------------

fn non_nullable_null(x: &Value, s: &Node) -> bool {
    x.is_null() && !s.nullable
}

fn default(x: &mut Value, s: &Node) {
    match x {
        Value::Object(m) => {
            for (k, prop) in &s.properties {
                let Some(d) = &prop.default else { continue };
                if m.get(k).is_none_or(|v| non_nullable_null(v, prop)) {
                    m.insert(k.clone(), d.clone());
                }
            }
            for (k, v) in m.iter_mut() {
                if let Some(prop) = s.properties.get(k) {
                    default(v, prop);
                } else if let Some(a) = s.additional.schema() {
                    if non_nullable_null(v, a) {
                        *v = a.default.clone().unwrap_or(Value::Null);
                    }
                    default(v, a);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for v in a {
                    if non_nullable_null(v, items) {
                        *v = items.default.clone().unwrap_or(Value::Null);
                    }
                    default(v, items);
                }
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// Schema validation (kube-openapi)
// ---------------------------------------------------------------------------

/// The field path of a kube-openapi error name (`strings.TrimPrefix(name, ".")`).
fn err_path(name: &str) -> FieldPath {
    if name == "." {
        return FieldPath::default();
    }
    FieldPath::new(name.strip_prefix('.').unwrap_or(name))
}

fn child_name(name: &str, key: &str) -> String {
    if name.is_empty() {
        key.to_string()
    } else {
        format!("{name}.{key}")
    }
}

/// kube-openapi's name of a value's JSON type.
fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Go's `%v` of a float64.
fn go_float(f: f64) -> String {
    let a = f.abs();
    if a != 0.0 && !(1e-4..1e21).contains(&a) {
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        return format!("{mantissa}e{sign}{digits:0>2}");
    }
    format!("{f}")
}

fn invalid(name: &str, value: Value, detail: String) -> FieldError {
    FieldError::invalid(&err_path(name), value, detail)
}

/// An error that is not a kube-openapi `Validation`: Invalid at the root path.
fn composite(detail: String) -> FieldError {
    FieldError::invalid(&FieldPath::default(), "", detail)
}

fn validate_schema(s: &Node, data: &Value, name: &str, errs: &mut Vec<FieldError>) {
    // Type.
    if data.is_null() {
        if !s.types.is_empty() && !s.nullable {
            errs.push(type_error(name, &s.types.join(","), "null"));
        }
        validate_enum(s, data, name, errs);
        return;
    }
    if !s.types.is_empty() {
        let t = type_of(data);
        let float_int = t == "number"
            && data.as_f64().is_some_and(|f| f.fract() == 0.0)
            && s.types.contains(&"integer");
        let int_float = t == "integer" && s.types.contains(&"number");
        if !(s.types.contains(&t) || float_int || int_float) {
            errs.push(type_error(name, &s.types.join(","), t));
        }
    }
    validate_schema_props(s, data, name, errs);
    match data {
        Value::String(str) => {
            validate_string(s, str, name, errs);
            validate_format(s, str, name, errs);
        }
        Value::Number(_) => validate_number(s, data, name, errs),
        Value::Array(a) => validate_array(s, a, name, errs),
        _ => {}
    }
    validate_enum(s, data, name, errs);
    if let Value::Object(m) = data {
        validate_object(s, m, name, errs);
    }
}

fn type_error(name: &str, type_name: &str, actual: &str) -> FieldError {
    FieldError::type_invalid(
        &err_path(name),
        actual,
        format!(
            "{name} in {IN} must be of type {type_name}: {}",
            go_quote(actual)
        ),
    )
}

fn validate_schema_props(s: &Node, data: &Value, name: &str, errs: &mut Vec<FieldError>) {
    let run = |n: &Node| {
        let mut e = Vec::new();
        validate_schema(n, data, name, &mut e);
        e
    };
    if !s.any_of.is_empty() {
        let mut best: Option<Vec<FieldError>> = None;
        let mut ok = false;
        for n in &s.any_of {
            let e = run(n);
            if e.is_empty() {
                ok = true;
                break;
            }
            if best.as_ref().is_none_or(|b| e.len() < b.len()) {
                best = Some(e);
            }
        }
        if !ok {
            errs.push(composite(format!(
                "{} must validate at least one schema (anyOf)",
                go_quote(name)
            )));
            errs.extend(best.unwrap_or_default());
        }
    }
    if !s.one_of.is_empty() {
        let mut best: Option<Vec<FieldError>> = None;
        let mut valid = 0;
        for n in &s.one_of {
            let e = run(n);
            if e.is_empty() {
                valid += 1;
                best = None;
            } else if valid == 0 && best.as_ref().is_none_or(|b| e.len() < b.len()) {
                best = Some(e);
            }
        }
        if valid != 1 {
            let more = if valid == 0 {
                "Found none valid".to_string()
            } else {
                format!("Found {valid} valid alternatives")
            };
            errs.push(composite(format!(
                "{} must validate one and only one schema (oneOf). {more}",
                go_quote(name)
            )));
            errs.extend(best.unwrap_or_default());
        }
    }
    if !s.all_of.is_empty() {
        let mut valid = 0;
        for n in &s.all_of {
            let e = run(n);
            if e.is_empty() {
                valid += 1;
            }
            errs.extend(e);
        }
        if valid != s.all_of.len() {
            let more = if valid == 0 { ". None validated" } else { "" };
            errs.push(composite(format!(
                "{} must validate all the schemas (allOf){more}",
                go_quote(name)
            )));
        }
    }
    if let Some(n) = &s.not
        && run(n).is_empty()
    {
        errs.push(composite(format!(
            "{} must not validate the schema (not)",
            go_quote(name)
        )));
    }
}

fn validate_string(s: &Node, data: &str, name: &str, errs: &mut Vec<FieldError>) {
    let len = data.chars().count() as i64;
    if let Some(max) = s.max_length
        && len > max
    {
        errs.push(FieldError::too_long(
            &err_path(name),
            usize::try_from(max).ok(),
        ));
        return;
    }
    if let Some(min) = s.min_length
        && len < min
    {
        errs.push(invalid(
            name,
            data.into(),
            format!("{name} in {IN} should be at least {min} chars long"),
        ));
        return;
    }
    if let Some(pattern) = &s.pattern {
        match regex_match(pattern, data) {
            Ok(true) => {}
            Ok(false) => errs.push(invalid(
                name,
                data.into(),
                format!("{name} in {IN} should match '{pattern}'"),
            )),
            Err(e) => errs.push(invalid(
                name,
                data.into(),
                format!("{name} in {IN} should match '{pattern}, but pattern is invalid: {e}'"),
            )),
        }
    }
}

/// `s.matches(p)` on the CEL library's regex engine.
fn regex_match(pattern: &str, s: &str) -> Result<bool, String> {
    static PROGRAM: OnceLock<Option<Program>> = OnceLock::new();
    let Some(p) = PROGRAM
        .get_or_init(|| ferrokube_cel::compile("s.matches(p)", &["s", "p"]).ok())
        .as_ref()
    else {
        return Ok(true);
    };
    let mut a = Activation::new();
    a.bind_json("s", &Value::String(s.to_string()))
        .bind_json("p", &Value::String(pattern.to_string()));
    a.eval_bool(p)
}

fn validate_format(s: &Node, data: &str, name: &str, errs: &mut Vec<FieldError>) {
    let Some(format) = &s.format else { return };
    let normalized = format.replace('-', "");
    if !STRING_FORMATS.contains(&normalized.as_str()) {
        return;
    }
    if !formats::valid(&normalized, data) {
        errs.push(FieldError::type_invalid(
            &err_path(name),
            data,
            format!(
                "{name} in {IN} must be of type {format}: {}",
                go_quote(data)
            ),
        ));
    }
}

fn validate_number(s: &Node, data: &Value, name: &str, errs: &mut Vec<FieldError>) {
    let Value::Number(n) = data else { return };
    let f = n.as_f64().unwrap_or(f64::NAN);
    let int = n.as_i64().map(i128::from).or(n.as_u64().map(i128::from));
    let type_ = if s.types.len() == 1 { s.types[0] } else { "" };
    let format = s.format.as_deref().unwrap_or("");
    // IsValueValidAgainstRange.
    let in_range = |v: f64, v_int: Option<i128>| -> bool {
        match type_ {
            "integer" => {
                let Some(i) = v_int.or((v.fract() == 0.0 && v.abs() < 9.3e18).then_some(v as i128))
                else {
                    return false;
                };
                if format == "int32" {
                    i32::try_from(i).is_ok()
                } else {
                    i64::try_from(i).is_ok()
                }
            }
            _ => format != "float" || v.abs() <= f64::from(f32::MAX),
        }
    };
    if !in_range(f, int) {
        let detail = if format.is_empty() {
            format!("Checked value must be of type {type_} (default format) in {name}")
        } else {
            format!("Checked value must be of type {type_} with format {format} in {name}")
        };
        errs.push(composite(detail));
    }
    let is_int = n.is_i64() || n.is_u64();
    let native = |bound: f64| is_int && in_range(bound, None);
    if let Some(m) = s.multiple_of {
        if native(m) && m as i128 != 0 {
            let i = int.unwrap_or_default();
            if i % (m as i128) != 0 {
                errs.push(invalid(
                    name,
                    data.clone(),
                    format!("{name} in {IN} should be a multiple of {}", m as i128),
                ));
            }
        } else if m <= 0.0 {
            errs.push(invalid(
                name,
                data.clone(),
                format!(
                    "factor MultipleOf declared for {name} must be positive: {}",
                    go_float(m)
                ),
            ));
        } else {
            let mult = if m < 1.0 { 1.0 / m * f } else { f / m };
            if mult.fract() != 0.0 {
                errs.push(invalid(
                    name,
                    data.clone(),
                    format!("{name} in {IN} should be a multiple of {}", go_float(m)),
                ));
            }
        }
    }
    if let Some(min) = s.minimum {
        let (fails, shown) = if native(min) {
            let (i, b) = (int.unwrap_or_default(), min as i128);
            (
                if s.exclusive_minimum { i <= b } else { i < b },
                b.to_string(),
            )
        } else {
            (
                if s.exclusive_minimum {
                    f <= min
                } else {
                    f < min
                },
                go_float(min),
            )
        };
        if fails {
            let op = if s.exclusive_minimum {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errs.push(invalid(
                name,
                data.clone(),
                format!("{name} in {IN} should be {op} {shown}"),
            ));
        }
    }
    if let Some(max) = s.maximum {
        let (fails, shown) = if native(max) {
            let (i, b) = (int.unwrap_or_default(), max as i128);
            (
                if s.exclusive_maximum { i >= b } else { i > b },
                b.to_string(),
            )
        } else {
            (
                if s.exclusive_maximum {
                    f >= max
                } else {
                    f > max
                },
                go_float(max),
            )
        };
        if fails {
            let op = if s.exclusive_maximum {
                "less than"
            } else {
                "less than or equal to"
            };
            errs.push(invalid(
                name,
                data.clone(),
                format!("{name} in {IN} should be {op} {shown}"),
            ));
        }
    }
}

/// kube-openapi's `minItems`/`maxItems` and `minProperties`/`maxProperties` checks:
/// `count` against `(min, max)`, `what` naming the counted things.
fn validate_count(
    name: &str,
    count: usize,
    (min, max): (Option<i64>, Option<i64>),
    what: &str,
    errs: &mut Vec<FieldError>,
) {
    let n = count as i64;
    if let Some(min) = min
        && n < min
    {
        errs.push(invalid(
            name,
            n.into(),
            format!("{name} in {IN} should have at least {min} {what}"),
        ));
    }
    if let Some(max) = max
        && n > max
    {
        errs.push(FieldError::too_many(
            &err_path(name),
            Some(count),
            usize::try_from(max).ok(),
        ));
    }
}

fn validate_array(s: &Node, a: &[Value], name: &str, errs: &mut Vec<FieldError>) {
    if let Some(items) = s.items.as_deref() {
        for (i, v) in a.iter().enumerate() {
            validate_schema(items, v, &format!("{name}[{i}]"), errs);
        }
    }
    validate_count(name, a.len(), (s.min_items, s.max_items), "items", errs);
    if s.unique_items {
        let dup = a
            .iter()
            .enumerate()
            .any(|(i, v)| a[..i].iter().any(|u| u == v));
        if dup {
            errs.push(invalid(
                name,
                "".into(),
                format!("{name} in {IN} shouldn't contain duplicates"),
            ));
        }
    }
}

/// Equality as reflect's conversion then DeepEqual: numbers by value.
fn enum_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => a == b,
    }
}

fn validate_enum(s: &Node, data: &Value, name: &str, errs: &mut Vec<FieldError>) {
    if s.enum_values.is_empty() || s.enum_values.iter().any(|e| enum_eq(data, e)) {
        return;
    }
    let allowed: Vec<String> = s
        .enum_values
        .iter()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    errs.push(FieldError::not_supported(
        &err_path(name),
        data.clone(),
        &allowed,
    ));
}

fn validate_object(s: &Node, m: &Map<String, Value>, name: &str, errs: &mut Vec<FieldError>) {
    validate_count(
        name,
        m.len(),
        (s.min_properties, s.max_properties),
        "properties",
        errs,
    );
    match &s.additional {
        Additional::Allows(false) => {
            let mut keys: Vec<&String> = m
                .keys()
                .filter(|k| !s.properties.contains_key(*k))
                .collect();
            keys.sort();
            for k in keys {
                errs.push(invalid(
                    name,
                    k.as_str().into(),
                    format!("{name}.{k} in {IN} is a forbidden property"),
                ));
            }
        }
        Additional::Schema(a) => {
            let mut keys: Vec<&String> = m
                .keys()
                .filter(|k| !s.properties.contains_key(*k))
                .collect();
            keys.sort();
            for k in keys {
                validate_schema(a, &m[k], &format!("{name}.{k}"), errs);
            }
        }
        _ => {}
    }
    for (k, prop) in &s.properties {
        if let Some(v) = m.get(k) {
            validate_schema(prop, v, &child_name(name, k), errs);
        }
    }
    for k in &s.required {
        if !m.contains_key(k) {
            errs.push(FieldError::required(&err_path(&format!("{name}.{k}")), ""));
        }
    }
}

// ---------------------------------------------------------------------------
// Embedded resources (objectmeta validation)
// ---------------------------------------------------------------------------

fn validate_embedded(
    s: &Node,
    x: &Value,
    path: &FieldPath,
    root: bool,
    errs: &mut Vec<FieldError>,
) {
    match x {
        Value::Object(m) => {
            if s.embedded && !root {
                validate_embedded_resource(m, path, errs);
            }
            for (k, v) in m {
                if let Some(prop) = s.properties.get(k) {
                    validate_embedded(prop, v, &path.child(k), false, errs);
                } else if let Some(a) = s.additional.schema() {
                    validate_embedded(a, v, &path.key(k), false, errs);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for (i, v) in a.iter().enumerate() {
                    validate_embedded(items, v, &path.index(i), false, errs);
                }
            }
        }
        _ => {}
    }
}

fn validate_embedded_resource(
    m: &Map<String, Value>,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    for k in ["apiVersion", "kind"] {
        if !m.contains_key(k) {
            errs.push(FieldError::required(&path.child(k), ""));
        }
    }
    if let Some(v) = m.get("apiVersion") {
        let p = path.child("apiVersion");
        match v.as_str() {
            None => errs.push(FieldError::invalid(&p, v.clone(), "must be a string")),
            Some("") => errs.push(FieldError::invalid(&p, "", "must not be empty")),
            Some(av) => {
                if av.matches('/').count() > 1 {
                    errs.push(FieldError::invalid(
                        &p,
                        av,
                        format!("unexpected GroupVersion string: {av}"),
                    ));
                }
            }
        }
    }
    if let Some(v) = m.get("kind") {
        let p = path.child("kind");
        match v.as_str() {
            None => errs.push(FieldError::invalid(&p, v.clone(), "must be a string")),
            Some("") => errs.push(FieldError::invalid(&p, "", "must not be empty")),
            Some(kind) => {
                let e = is_dns1035_label(&kind.to_lowercase());
                if !e.is_empty() {
                    errs.push(FieldError::invalid(
                        &p,
                        kind,
                        format!(
                            "may have mixed case, but should otherwise match: {}",
                            e.join(",")
                        ),
                    ));
                }
            }
        }
    }
    if let Some(v) = m.get("metadata") {
        let p = path.child("metadata");
        match serde_json::from_value::<ObjectMeta>(v.clone()) {
            Err(e) => errs.push(FieldError::invalid(&p, v.clone(), e.to_string())),
            Ok(mut meta) => {
                if meta.name.as_deref().unwrap_or("").is_empty() {
                    meta.name = Some("fakename".into());
                }
                let namespaced = !meta.namespace.as_deref().unwrap_or("").is_empty();
                errs.extend(validate_object_meta(
                    &meta,
                    namespaced,
                    validate_path_segment_name,
                    &p,
                ));
            }
        }
    }
}

// ---------------------------------------------------------------------------
// List types
// ---------------------------------------------------------------------------

fn validate_list_types(s: &Node, x: &Value, path: &FieldPath, errs: &mut Vec<FieldError>) {
    match x {
        Value::Object(m) => {
            if let Some(a) = s.additional.schema() {
                for (k, v) in m {
                    validate_list_types(a, v, &path.key(k), errs);
                }
            }
            for (k, v) in m {
                if let Some(prop) = s.properties.get(k) {
                    validate_list_types(prop, v, &path.child(k), errs);
                }
            }
        }
        Value::Array(a) => {
            match s.list_type.as_deref() {
                Some("set") => {
                    for i in non_unique(a) {
                        errs.push(FieldError::duplicate(&path.index(i), a[i].clone()));
                    }
                }
                Some("map") => validate_list_map(s, a, path, errs),
                _ => {}
            }
            if let Some(items) = s.items.as_deref() {
                for (i, v) in a.iter().enumerate() {
                    validate_list_types(items, v, &path.index(i), errs);
                }
            }
        }
        _ => {}
    }
}

/// The indices of second occurrences (upstream reports each duplicated value once).
fn non_unique(a: &[Value]) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, v) in a.iter().enumerate() {
        let seen = a[..i].iter().filter(|u| *u == v).count();
        if seen == 1 {
            out.push(i);
        }
    }
    out
}

fn list_map_key(s: &Node, x: &Value) -> Map<String, Value> {
    let mut key = Map::new();
    if let Value::Object(m) = x {
        for k in &s.list_map_keys {
            if let Some(v) = m.get(k) {
                key.insert(k.clone(), v.clone());
            }
        }
    }
    key
}

fn validate_list_map(s: &Node, a: &[Value], path: &FieldPath, errs: &mut Vec<FieldError>) {
    for (i, x) in a.iter().enumerate() {
        if !x.is_null() && !x.is_object() {
            errs.push(FieldError::invalid(
                &path.index(i),
                x.clone(),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    if a.len() <= 1 {
        return;
    }
    let keys: Vec<Value> = a
        .iter()
        .map(|x| Value::Object(list_map_key(s, x)))
        .collect();
    for i in non_unique(&keys) {
        errs.push(FieldError::duplicate(&path.index(i), keys[i].clone()));
    }
}

// ---------------------------------------------------------------------------
// CEL rules
// ---------------------------------------------------------------------------

struct Stop;

fn validate_cel(
    s: &Node,
    x: &Value,
    old: Option<&Value>,
    path: &FieldPath,
    budget: &mut Budget,
    errs: &mut Vec<FieldError>,
) -> Result<(), Stop> {
    if x.is_null() {
        return Ok(());
    }
    validate_rules(s, x, old, path, budget, errs)?;
    for a in &s.all_of {
        validate_cel(a, x, old, path, budget, errs)?;
    }
    match x {
        Value::Object(m) => {
            let correlatable = matches!(s.map_type.as_deref(), None | Some("granular" | "atomic"));
            let old_of = |k: &str| -> Option<&Value> {
                if !correlatable {
                    return None;
                }
                old.and_then(|o| o.get(k)).filter(|v| !v.is_null())
            };
            if let Some(a) = s.additional.schema() {
                for (k, v) in m {
                    validate_cel(a, v, old_of(k), &path.key(k), budget, errs)?;
                }
            }
            for (k, v) in m {
                if let Some(prop) = s.properties.get(k) {
                    validate_cel(prop, v, old_of(k), &path.child(k), budget, errs)?;
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                let old_items = old.and_then(Value::as_array);
                for (i, v) in a.iter().enumerate() {
                    // Only map lists correlate old items (by their keys).
                    let old_item = match (s.list_type.as_deref(), old_items) {
                        (Some("map"), Some(olds)) if v.is_object() => {
                            let key = list_map_key(s, v);
                            olds.iter()
                                .find(|o| o.is_object() && list_map_key(s, o) == key)
                        }
                        _ => None,
                    };
                    validate_cel(items, v, old_item, &path.index(i), budget, errs)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// The schema type upstream shows as the value of a rule's error.
fn type_value(s: &Node) -> Value {
    // x-kubernetes-int-or-string (and a node without a type) has no single type.
    match s.types.as_slice() {
        [t] => (*t).into(),
        _ => "".into(),
    }
}

fn validate_rules(
    s: &Node,
    x: &Value,
    old: Option<&Value>,
    path: &FieldPath,
    budget: &mut Budget,
    errs: &mut Vec<FieldError>,
) -> Result<(), Stop> {
    if s.rules.is_empty() {
        return Ok(());
    }
    let ty = type_value(s);
    let mut activation = Activation::new();
    activation.bind_json("self", x);
    if let Some(o) = old {
        activation.bind_json("oldSelf", o);
    }
    for rule in &s.rules {
        let program = match &rule.program {
            Ok(p) => p,
            Err(e) => {
                errs.push(FieldError::invalid(
                    path,
                    ty.clone(),
                    format!("rule compile error: {e}"),
                ));
                continue;
            }
        };
        if rule.uses_old_self && old.is_none() {
            // Transition rules run only against an existing old value.
            continue;
        }
        let result = match budget.eval_bool(&activation, program) {
            Ok(r) => r,
            Err(_) => {
                errs.push(FieldError::invalid(
                    path,
                    ty.clone(),
                    "validation failed due to running out of cost budget, no further validation rules will be run",
                ));
                return Err(Stop);
            }
        };
        match result {
            Ok(true) => continue,
            Ok(false) => {}
            Err(e) => {
                if e.starts_with("no such overload") {
                    errs.push(FieldError::invalid(
                        path,
                        ty.clone(),
                        format!(
                            "'{e}': call arguments did not match a supported operator, function or macro signature for rule: {}",
                            rule.error_string()
                        ),
                    ));
                } else if e.starts_with(ferrokube_cel::COST_LIMIT_EXCEEDED) {
                    errs.push(FieldError::invalid(
                        path,
                        ty.clone(),
                        format!(
                            "'{e}': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                            rule.error_string()
                        ),
                    ));
                    return Err(Stop);
                } else {
                    errs.push(FieldError::invalid(
                        path,
                        ty.clone(),
                        format!("{e} evaluating rule: {}", rule.error_string()),
                    ));
                }
                continue;
            }
        }
        let err_path = match &rule.field_path {
            Some(fp) => path.child(fp.strip_prefix('.').unwrap_or(fp)),
            None => path.clone(),
        };
        let detail = rule
            .message_expression
            .as_ref()
            .and_then(|m| match budget.eval_string(&activation, m) {
                Ok(Ok(msg)) => {
                    let msg = msg.trim().to_string();
                    (!msg.is_empty() && !msg.contains('\n')).then_some(msg)
                }
                _ => None,
            })
            .unwrap_or_else(|| rule.message_or_default());
        // Objects and arrays are omitted from the message; scalars shown as they are.
        let value = if matches!(x, Value::Object(_) | Value::Array(_)) {
            None
        } else {
            Some(x.clone())
        };
        let mut e = match rule.reason.as_deref() {
            Some("FieldValueForbidden") => FieldError::forbidden(&err_path, detail),
            Some("FieldValueRequired") => FieldError::required(&err_path, detail),
            Some("FieldValueDuplicate") => FieldError::duplicate(&err_path, Value::Null),
            _ => FieldError::invalid(&err_path, Value::Null, detail),
        };
        if matches!(
            e.kind,
            ferrokube_apimachinery::errors::FieldErrorKind::Invalid
                | ferrokube_apimachinery::errors::FieldErrorKind::Duplicate
        ) {
            e.value = value;
        }
        errs.push(e);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Formats (kube-openapi strfmt)
// ---------------------------------------------------------------------------

mod formats {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    /// Whether `s` is valid for the (normalized) format.
    pub(super) fn valid(format: &str, s: &str) -> bool {
        match format {
            "datetime" => is_date_time(s),
            "date" => is_date(s),
            "byte" => is_base64(s),
            "uuid" => is_uuid(s, None),
            "uuid3" => is_uuid(s, Some('3')),
            "uuid4" => is_uuid(s, Some('4')),
            "uuid5" => is_uuid(s, Some('5')),
            "ipv4" => s.contains('.') && s.parse::<IpAddr>().is_ok(),
            "ipv6" => s.contains(':') && s.parse::<Ipv6Addr>().is_ok(),
            "cidr" => is_cidr(s),
            "mac" => is_mac(s),
            "hostname" => is_hostname(s),
            "email" => is_email(s),
            "hexcolor" => {
                let h = s.strip_prefix('#').unwrap_or(s);
                (h.len() == 3 || h.len() == 6) && h.chars().all(|c| c.is_ascii_hexdigit())
            }
            "bsonobjectid" => s.len() == 24 && s.chars().all(|c| c.is_ascii_hexdigit()),
            "ssn" => is_ssn(s),
            // password: any string; the others are not checked here.
            _ => true,
        }
    }

    fn digits(s: &str, n: usize) -> Option<u32> {
        (s.len() == n && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
    }

    pub(super) fn is_date(s: &str) -> bool {
        let b = s.as_bytes();
        if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
            return false;
        }
        let (Some(y), Some(m), Some(d)) = (
            digits(&s[0..4], 4),
            digits(&s[5..7], 2),
            digits(&s[8..10], 2),
        ) else {
            return false;
        };
        let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
        let days = match m {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if leap => 29,
            2 => 28,
            _ => return false,
        };
        (1..=days).contains(&d)
    }

    fn is_time(s: &str) -> bool {
        let b = s.as_bytes();
        if b.len() < 8 || b[2] != b':' || b[5] != b':' {
            return false;
        }
        let (Some(h), Some(m), Some(sec)) = (
            digits(&s[0..2], 2),
            digits(&s[3..5], 2),
            digits(&s[6..8], 2),
        ) else {
            return false;
        };
        if h > 23 || m > 59 || sec > 60 {
            return false;
        }
        let mut rest = &s[8..];
        if let Some(frac) = rest.strip_prefix('.') {
            let n = frac.bytes().take_while(u8::is_ascii_digit).count();
            if n == 0 {
                return false;
            }
            rest = &frac[n..];
        }
        match rest {
            "" | "Z" | "z" => true,
            zone => {
                let zb = zone.as_bytes();
                (zb[0] == b'+' || zb[0] == b'-')
                    && zone.len() == 6
                    && zb[3] == b':'
                    && digits(&zone[1..3], 2).is_some_and(|h| h < 24)
                    && digits(&zone[4..6], 2).is_some_and(|m| m < 60)
            }
        }
    }

    pub(super) fn is_date_time(s: &str) -> bool {
        if s.len() < 11 || !s.is_char_boundary(10) {
            return false;
        }
        let (date, rest) = s.split_at(10);
        let Some(time) = rest.strip_prefix(['T', 't', ' ']) else {
            return false;
        };
        is_date(date) && is_time(time)
    }

    fn is_base64(s: &str) -> bool {
        let b = s.as_bytes();
        if !b.len().is_multiple_of(4) {
            return false;
        }
        let pad = b.iter().rev().take_while(|c| **c == b'=').count();
        if pad > 2 {
            return false;
        }
        b[..b.len() - pad]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
    }

    fn is_uuid(s: &str, version: Option<char>) -> bool {
        let hex: String = s.to_ascii_lowercase();
        let groups: Vec<&str> = if hex.contains('-') {
            hex.split('-').collect()
        } else if hex.len() == 32 {
            vec![
                &hex[0..8],
                &hex[8..12],
                &hex[12..16],
                &hex[16..20],
                &hex[20..32],
            ]
        } else {
            return false;
        };
        let lens = [8, 4, 4, 4, 12];
        if groups.len() != 5
            || groups
                .iter()
                .zip(lens)
                .any(|(g, l)| g.len() != l || !g.chars().all(|c| c.is_ascii_hexdigit()))
        {
            return false;
        }
        match version {
            None => true,
            Some(v) => {
                groups[2].starts_with(v)
                    && (v == '3' || groups[3].starts_with(['8', '9', 'a', 'b']))
            }
        }
    }

    fn is_cidr(s: &str) -> bool {
        let Some((ip, bits)) = s.split_once('/') else {
            return false;
        };
        let Ok(bits) = bits.parse::<u8>() else {
            return false;
        };
        if ip.parse::<Ipv4Addr>().is_ok() {
            bits <= 32
        } else {
            ip.parse::<Ipv6Addr>().is_ok() && bits <= 128
        }
    }

    fn is_mac(s: &str) -> bool {
        for sep in [':', '-'] {
            let parts: Vec<&str> = s.split(sep).collect();
            if matches!(parts.len(), 6 | 8 | 20)
                && parts
                    .iter()
                    .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
            {
                return true;
            }
        }
        let parts: Vec<&str> = s.split('.').collect();
        matches!(parts.len(), 3 | 4 | 10)
            && parts
                .iter()
                .all(|p| p.len() == 4 && p.chars().all(|c| c.is_ascii_hexdigit()))
    }

    fn is_hostname(s: &str) -> bool {
        if s.is_empty() || s.len() > 255 {
            return false;
        }
        s.split('.').all(|l| {
            !l.is_empty()
                && l.chars().count() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_alphanumeric() || c == '-')
        })
    }

    fn is_email(s: &str) -> bool {
        let addr = match (s.find('<'), s.rfind('>')) {
            (Some(a), Some(b)) if a < b => &s[a + 1..b],
            _ => s.trim(),
        };
        match addr.rsplit_once('@') {
            Some((local, domain)) => {
                !local.is_empty()
                    && !domain.is_empty()
                    && !addr.contains(char::is_whitespace)
                    && !domain.contains('@')
            }
            None => false,
        }
    }

    fn is_ssn(s: &str) -> bool {
        let d: Vec<char> = s.chars().collect();
        let is_d = |c: &char| c.is_ascii_digit();
        match d.len() {
            9 => d.iter().all(is_d),
            11 => {
                d[..3].iter().all(is_d)
                    && (d[3] == '-' || d[3] == ' ')
                    && d[4..6].iter().all(is_d)
                    && (d[6] == '-' || d[6] == ' ')
                    && d[7..].iter().all(is_d)
            }
            10 => {
                // One separator of the two.
                (d[3] == '-' || d[3] == ' ') && d[..3].iter().chain(&d[4..]).all(is_d)
                    || (d[5] == '-' || d[5] == ' ') && d[..5].iter().chain(&d[6..]).all(is_d)
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_is_send_sync_and_formats_print_like_go() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<StructuralSchema>();
        assert_eq!(go_float(10.0), "10");
        assert_eq!(go_float(0.5), "0.5");
        assert_eq!(go_float(0.00001), "1e-05");
        assert!(formats::is_date_time("2024-01-02T03:04:05Z"));
        assert!(formats::is_date_time("2024-01-02T03:04:05.123+01:00"));
        assert!(!formats::is_date_time("2024-13-02T03:04:05Z"));
        assert!(formats::is_date("2024-02-29"));
        assert!(!formats::is_date("2023-02-29"));
    }
}
