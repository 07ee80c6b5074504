//! `ferrokube_apiextensions::schema`: pruning, defaulting and validation of custom
//! resources against structural schemas, with upstream's paths and messages.

use ferrokube_apiextensions::schema::StructuralSchema;
use ferrokube_apimachinery::errors::{FieldError, FieldErrorKind};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use serde_json::{Value, json};

fn schema(v: Value) -> StructuralSchema {
    let props: JSONSchemaProps = serde_json::from_value(v).expect("schema parses");
    StructuralSchema::new(&props)
}

/// A root schema with `spec` as given.
fn spec_schema(spec: Value) -> StructuralSchema {
    schema(json!({"type": "object", "properties": {"spec": spec}}))
}

fn cr(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "x"}, "spec": spec})
}

fn errors(s: &StructuralSchema, obj: &Value) -> Vec<String> {
    s.validate(obj, None)
        .iter()
        .map(FieldError::to_string)
        .collect()
}

fn one_error(s: &StructuralSchema, obj: &Value) -> FieldError {
    let errs = s.validate(obj, None);
    assert_eq!(errs.len(), 1, "{errs:?}");
    errs.into_iter().next().unwrap()
}

fn valid(s: &StructuralSchema, obj: &Value) {
    let errs = s.validate(obj, None);
    assert!(errs.is_empty(), "{errs:?}");
}

// ---------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------

#[test]
fn type_mismatch_is_type_invalid_with_upstream_message() {
    let s = spec_schema(json!({"type": "object", "properties": {"replicas": {"type": "integer"}}}));
    let e = one_error(&s, &cr(json!({"replicas": "3"})));
    assert_eq!(e.kind, FieldErrorKind::TypeInvalid);
    assert_eq!(e.field, "spec.replicas");
    assert_eq!(
        e.detail,
        "spec.replicas in body must be of type integer: \"string\""
    );
    assert_eq!(
        e.to_string(),
        "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
    );
    valid(&s, &cr(json!({"replicas": 3})));
    // A float with an integral value passes as integer (upstream's isFloatInt).
    valid(&s, &cr(json!({"replicas": 3.0})));
}

#[test]
fn each_type_accepts_its_values() {
    for (t, good, bad, bad_type) in [
        ("string", json!("a"), json!(1), "integer"),
        ("boolean", json!(true), json!("true"), "string"),
        ("number", json!(1.5), json!("1.5"), "string"),
        ("array", json!([1]), json!({}), "object"),
        ("object", json!({}), json!([]), "array"),
    ] {
        let s = spec_schema(json!({"type": "object", "properties": {"f": {"type": t}}}));
        valid(&s, &cr(json!({"f": good})));
        let e = one_error(&s, &cr(json!({"f": bad})));
        assert_eq!(
            e.detail,
            format!("spec.f in body must be of type {t}: \"{bad_type}\""),
            "{t}"
        );
    }
    // number accepts integers.
    let s = spec_schema(json!({"type": "object", "properties": {"f": {"type": "number"}}}));
    valid(&s, &cr(json!({"f": 2})));
    // A real float is not an integer.
    let s = spec_schema(json!({"type": "object", "properties": {"f": {"type": "integer"}}}));
    let errs = s.validate(&cr(json!({"f": 1.5})), None);
    assert_eq!(
        errs[0].detail,
        "spec.f in body must be of type integer: \"number\""
    );
}

#[test]
fn null_is_allowed_only_when_nullable() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "a": {"type": "string"},
        "b": {"type": "string", "nullable": true}}}));
    let e = one_error(&s, &cr(json!({"a": null})));
    assert_eq!(e.field, "spec.a");
    assert_eq!(e.detail, "spec.a in body must be of type string: \"null\"");
    valid(&s, &cr(json!({"b": null})));
}

#[test]
fn int_or_string_accepts_both_and_nothing_else() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "port": {"x-kubernetes-int-or-string": true}}}));
    valid(&s, &cr(json!({"port": 80})));
    valid(&s, &cr(json!({"port": "http"})));
    let e = one_error(&s, &cr(json!({"port": true})));
    assert_eq!(
        e.detail,
        "spec.port in body must be of type integer,string: \"boolean\""
    );
}

// ---------------------------------------------------------------------------
// Objects
// ---------------------------------------------------------------------------

#[test]
fn missing_required_field_is_required() {
    let s = spec_schema(json!({"type": "object", "required": ["cronSpec"],
        "properties": {"cronSpec": {"type": "string"}}}));
    let e = one_error(&s, &cr(json!({})));
    assert_eq!(e.kind, FieldErrorKind::Required);
    assert_eq!(e.to_string(), "spec.cronSpec: Required value");
    valid(&s, &cr(json!({"cronSpec": "* * * * *"})));
}

#[test]
fn additional_properties_schema_validates_each_value() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}}}}));
    valid(&s, &cr(json!({"labels": {"a": "xyz"}})));
    let e = one_error(&s, &cr(json!({"labels": {"a": "ok", "b": 1}})));
    // kube-openapi names map entries with a dot.
    assert_eq!(e.field, "spec.labels.b");
    assert_eq!(
        e.detail,
        "spec.labels.b in body must be of type string: \"integer\""
    );
    let e = one_error(&s, &cr(json!({"labels": {"a": "long"}})));
    assert_eq!(e.kind, FieldErrorKind::TooLong);
}

#[test]
fn min_and_max_properties() {
    let s = spec_schema(
        json!({"type": "object", "properties": {"m": {"type": "object",
        "minProperties": 1, "maxProperties": 2, "additionalProperties": {"type": "string"}}}}),
    );
    valid(&s, &cr(json!({"m": {"a": "1"}})));
    let e = one_error(&s, &cr(json!({"m": {}})));
    assert_eq!(
        e.to_string(),
        "spec.m: Invalid value: 0: spec.m in body should have at least 1 properties"
    );
    let e = one_error(&s, &cr(json!({"m": {"a": "1", "b": "2", "c": "3"}})));
    assert_eq!(e.kind, FieldErrorKind::TooMany);
    assert_eq!(
        e.to_string(),
        "spec.m: Too many: 3: must have at most 2 items"
    );
}

#[test]
fn nested_errors_have_full_paths() {
    let s = spec_schema(
        json!({"type": "object", "properties": {"items": {"type": "array",
        "items": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "size": {"type": "integer"}}}}}}),
    );
    let errs = errors(
        &s,
        &cr(json!({"items": [{"name": "a"}, {"name": "b", "size": "x"}, {"size": 1}]})),
    );
    assert_eq!(
        errs,
        vec![
            "spec.items[1].size: Invalid value: \"string\": spec.items[1].size in body must be of type integer: \"string\"",
            "spec.items[2].name: Required value",
        ]
    );
}

// ---------------------------------------------------------------------------
// Value validations
// ---------------------------------------------------------------------------

#[test]
fn enum_violation_is_not_supported_with_allowed_values() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "mode": {"type": "string", "enum": ["Always", "Never"]},
        "n": {"type": "integer", "enum": [1, 2]}}}));
    valid(&s, &cr(json!({"mode": "Never", "n": 2})));
    let e = one_error(&s, &cr(json!({"mode": "Sometimes"})));
    assert_eq!(e.kind, FieldErrorKind::NotSupported);
    assert_eq!(
        e.to_string(),
        "spec.mode: Unsupported value: \"Sometimes\": supported values: \"Always\", \"Never\""
    );
    let e = one_error(&s, &cr(json!({"n": 3})));
    assert_eq!(
        e.to_string(),
        "spec.n: Unsupported value: 3: supported values: \"1\", \"2\""
    );
}

#[test]
fn maximum_and_minimum_inclusive_and_exclusive() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 1, "maximum": 10},
        "b": {"type": "number", "minimum": 0.5, "exclusiveMinimum": true, "maximum": 2.5, "exclusiveMaximum": true}}}));
    valid(&s, &cr(json!({"a": 1, "b": 1.0})));
    valid(&s, &cr(json!({"a": 10, "b": 2.4})));
    assert_eq!(
        errors(&s, &cr(json!({"a": 11}))),
        vec!["spec.a: Invalid value: 11: spec.a in body should be less than or equal to 10"]
    );
    assert_eq!(
        errors(&s, &cr(json!({"a": 0}))),
        vec!["spec.a: Invalid value: 0: spec.a in body should be greater than or equal to 1"]
    );
    assert_eq!(
        errors(&s, &cr(json!({"b": 2.5}))),
        vec!["spec.b: Invalid value: 2.5: spec.b in body should be less than 2.5"]
    );
    assert_eq!(
        errors(&s, &cr(json!({"b": 0.5}))),
        vec!["spec.b: Invalid value: 0.5: spec.b in body should be greater than 0.5"]
    );
}

#[test]
fn multiple_of() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "a": {"type": "integer", "multipleOf": 5},
        "b": {"type": "number", "multipleOf": 0.5}}}));
    valid(&s, &cr(json!({"a": 15, "b": 1.5})));
    assert_eq!(
        errors(&s, &cr(json!({"a": 7}))),
        vec!["spec.a: Invalid value: 7: spec.a in body should be a multiple of 5"]
    );
    assert_eq!(
        errors(&s, &cr(json!({"b": 1.2}))),
        vec!["spec.b: Invalid value: 1.2: spec.b in body should be a multiple of 0.5"]
    );
}

#[test]
fn string_lengths_count_characters() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "s": {"type": "string", "minLength": 2, "maxLength": 3}}}));
    valid(&s, &cr(json!({"s": "ééé"})));
    let e = one_error(&s, &cr(json!({"s": "éééé"})));
    assert_eq!(e.kind, FieldErrorKind::TooLong);
    assert_eq!(e.field, "spec.s");
    assert_eq!(
        e.to_string(),
        "spec.s: Too long: may not be more than 3 bytes"
    );
    assert_eq!(
        errors(&s, &cr(json!({"s": "a"}))),
        vec!["spec.s: Invalid value: \"a\": spec.s in body should be at least 2 chars long"]
    );
}

#[test]
fn pattern() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "s": {"type": "string", "pattern": "^[a-z]+$"}}}));
    valid(&s, &cr(json!({"s": "abc"})));
    assert_eq!(
        errors(&s, &cr(json!({"s": "aBc"}))),
        vec!["spec.s: Invalid value: \"aBc\": spec.s in body should match '^[a-z]+$'"]
    );
    // Unanchored patterns search, as Go's regexp.MatchString.
    let s = spec_schema(json!({"type": "object", "properties": {
        "s": {"type": "string", "pattern": "b"}}}));
    valid(&s, &cr(json!({"s": "abc"})));
}

#[test]
fn items_min_max_and_unique() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "l": {"type": "array", "minItems": 1, "maxItems": 2, "uniqueItems": true, "items": {"type": "integer"}}}}));
    valid(&s, &cr(json!({"l": [1, 2]})));
    assert_eq!(
        errors(&s, &cr(json!({"l": []}))),
        vec!["spec.l: Invalid value: 0: spec.l in body should have at least 1 items"]
    );
    let e = one_error(&s, &cr(json!({"l": [1, 2, 3]})));
    assert_eq!(e.kind, FieldErrorKind::TooMany);
    assert_eq!(
        e.to_string(),
        "spec.l: Too many: 3: must have at most 2 items"
    );
    assert_eq!(
        errors(&s, &cr(json!({"l": [1, 1]}))),
        vec!["spec.l: Invalid value: \"\": spec.l in body shouldn't contain duplicates"]
    );
}

#[test]
fn formats() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "t": {"type": "string", "format": "date-time"},
        "d": {"type": "string", "format": "date"},
        "b": {"type": "string", "format": "byte"},
        "u": {"type": "string", "format": "uuid"},
        "ip": {"type": "string", "format": "ipv4"},
        "e": {"type": "string", "format": "email"},
        "x": {"type": "string", "format": "no-such-format"}}}));
    valid(
        &s,
        &cr(
            json!({"t": "2024-05-01T10:00:00Z", "d": "2024-05-01", "b": "aGVsbG8=",
            "u": "123e4567-e89b-12d3-a456-426614174000", "ip": "10.0.0.1",
            "e": "a@example.com", "x": "anything"}),
        ),
    );
    let e = one_error(&s, &cr(json!({"t": "yesterday"})));
    assert_eq!(e.kind, FieldErrorKind::TypeInvalid);
    assert_eq!(
        e.to_string(),
        "spec.t: Invalid value: \"yesterday\": spec.t in body must be of type date-time: \"yesterday\""
    );
    for (f, bad) in [
        ("d", "2024-02-30"),
        ("b", "not base64!"),
        ("u", "123"),
        ("ip", "10.0.0.256"),
        ("e", "nobody"),
    ] {
        let e = one_error(&s, &cr(json!({f: bad})));
        assert_eq!(e.field, format!("spec.{f}"));
    }
}

#[test]
fn int32_format_range() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "n": {"type": "integer", "format": "int32"}}}));
    valid(&s, &cr(json!({"n": 2147483647})));
    assert_eq!(
        errors(&s, &cr(json!({"n": 2147483648_i64}))),
        vec![
            ": Invalid value: \"\": Checked value must be of type integer with format int32 in spec.n"
        ]
    );
}

#[test]
fn all_of_any_of_one_of_not() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "all": {"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 5}]},
        "any": {"type": "string", "anyOf": [{"maxLength": 1}, {"pattern": "^x"}]},
        "one": {"type": "integer", "oneOf": [{"minimum": 10}, {"maximum": 20}]},
        "not": {"type": "string", "not": {"enum": ["forbidden"]}}}}));
    valid(
        &s,
        &cr(json!({"all": 3, "any": "xyz", "one": 5, "not": "fine"})),
    );
    assert_eq!(
        errors(&s, &cr(json!({"all": 6}))),
        vec![
            "spec.all: Invalid value: 6: spec.all in body should be less than or equal to 5",
            ": Invalid value: \"\": \"spec.all\" must validate all the schemas (allOf)",
        ]
    );
    let errs = errors(&s, &cr(json!({"any": "abc"})));
    assert_eq!(
        errs[0],
        ": Invalid value: \"\": \"spec.any\" must validate at least one schema (anyOf)"
    );
    assert_eq!(errs.len(), 2);
    assert_eq!(
        errors(&s, &cr(json!({"one": 15}))),
        vec![
            ": Invalid value: \"\": \"spec.one\" must validate one and only one schema (oneOf). Found 2 valid alternatives"
        ]
    );
    assert_eq!(
        errors(&s, &cr(json!({"not": "forbidden"}))),
        vec![": Invalid value: \"\": \"spec.not\" must not validate the schema (not)"]
    );
}

// ---------------------------------------------------------------------------
// List types
// ---------------------------------------------------------------------------

#[test]
fn list_type_set_rejects_duplicates() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "s": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}}));
    valid(&s, &cr(json!({"s": ["a", "b"]})));
    let errs = s.validate(&cr(json!({"s": ["a", "b", "a", "a"]})), None);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].kind, FieldErrorKind::Duplicate);
    assert_eq!(errs[0].to_string(), "spec.s[2]: Duplicate value: \"a\"");
}

#[test]
fn list_type_map_rejects_duplicate_keys() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "ports": {"type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["port", "protocol"],
            "items": {"type": "object", "properties": {
                "port": {"type": "integer"}, "protocol": {"type": "string"}, "name": {"type": "string"}}}}}}));
    valid(
        &s,
        &cr(json!({"ports": [{"port": 80, "protocol": "TCP"}, {"port": 80, "protocol": "UDP"}]})),
    );
    let errs = s.validate(
        &cr(json!({"ports": [{"port": 80, "protocol": "TCP", "name": "a"}, {"port": 80, "protocol": "TCP", "name": "b"}]})),
        None,
    );
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "spec.ports[1]");
    assert_eq!(errs[0].kind, FieldErrorKind::Duplicate);
    assert_eq!(errs[0].value, Some(json!({"port": 80, "protocol": "TCP"})));
}

// ---------------------------------------------------------------------------
// Embedded resources
// ---------------------------------------------------------------------------

fn embedded_schema() -> StructuralSchema {
    spec_schema(json!({"type": "object", "properties": {
        "template": {"type": "object", "x-kubernetes-embedded-resource": true,
            "x-kubernetes-preserve-unknown-fields": true}}}))
}

#[test]
fn embedded_resources_need_api_version_and_kind_and_valid_metadata() {
    let s = embedded_schema();
    valid(
        &s,
        &cr(json!({"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}})),
    );
    assert_eq!(
        errors(&s, &cr(json!({"template": {"metadata": {}}}))),
        vec![
            "spec.template.apiVersion: Required value",
            "spec.template.kind: Required value"
        ]
    );
    let errs = s.validate(
        &cr(json!({"template": {"apiVersion": "a/b/c", "kind": "Pod_x",
            "metadata": {"name": "p", "labels": {"bad key!": "x"}}}})),
        None,
    );
    let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
    assert!(fields.contains(&"spec.template.apiVersion"), "{errs:?}");
    assert!(fields.contains(&"spec.template.kind"), "{errs:?}");
    assert!(
        fields.contains(&"spec.template.metadata.labels"),
        "{errs:?}"
    );
}

// ---------------------------------------------------------------------------
// Pruning
// ---------------------------------------------------------------------------

#[test]
fn prune_removes_unknown_fields_nested_and_in_arrays() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "a": {"type": "string"},
        "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
        "nested": {"type": "object", "properties": {"x": {"type": "integer"}}}}}));
    let mut obj = json!({"apiVersion": "example.com/v1", "kind": "Foo",
        "metadata": {"name": "x", "whatever": 1},
        "spec": {"a": "1", "foo": 2, "items": [{"name": "n", "bar": 1}, {"name": "m"}],
            "nested": {"x": 1, "y": {"z": 1}}},
        "status": {"s": 1}});
    let pruned = s.prune(&mut obj);
    assert_eq!(
        pruned,
        vec!["spec.foo", "spec.items[0].bar", "spec.nested.y", "status"]
    );
    assert_eq!(
        obj,
        json!({"apiVersion": "example.com/v1", "kind": "Foo",
            "metadata": {"name": "x", "whatever": 1},
            "spec": {"a": "1", "items": [{"name": "n"}, {"name": "m"}], "nested": {"x": 1}}})
    );
}

#[test]
fn prune_honours_additional_properties_and_preserve_unknown_fields() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "labels": {"type": "object", "additionalProperties": {"type": "object",
            "properties": {"v": {"type": "string"}}}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"known": {"type": "object", "properties": {"k": {"type": "string"}}}}}}}));
    let mut obj = cr(json!({
        "labels": {"a": {"v": "1", "drop": 2}},
        "free": {"anything": {"deep": [1, 2]}, "known": {"k": "x", "gone": 1}}}));
    let pruned = s.prune(&mut obj);
    assert_eq!(pruned, vec!["spec.free.known.gone", "spec.labels.a.drop"]);
    assert_eq!(
        obj["spec"],
        json!({"labels": {"a": {"v": "1"}}, "free": {"anything": {"deep": [1, 2]}, "known": {"k": "x"}}})
    );
}

#[test]
fn prune_keeps_embedded_type_meta_and_reduces_its_metadata() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "template": {"type": "object", "x-kubernetes-embedded-resource": true,
            "properties": {"spec": {"type": "object", "properties": {"image": {"type": "string"}}}}}}}));
    let mut obj = cr(json!({"template": {"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "labels": {"a": "b"}, "bogus": true},
        "spec": {"image": "nginx", "other": 1}, "extra": 1}}));
    let pruned = s.prune(&mut obj);
    assert_eq!(
        pruned,
        vec![
            "spec.template.extra",
            "spec.template.spec.other",
            "spec.template.metadata.bogus"
        ]
    );
    assert_eq!(
        obj["spec"]["template"],
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "creationTimestamp": null},
            "spec": {"image": "nginx"}})
    );
}

#[test]
fn prune_drops_non_nullable_nulls_without_default() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "a": {"type": "string"},
        "b": {"type": "string", "nullable": true},
        "c": {"type": "string", "default": "x"}}}));
    let mut obj = cr(json!({"a": null, "b": null, "c": null}));
    assert!(s.prune(&mut obj).is_empty());
    assert_eq!(obj["spec"], json!({"b": null, "c": null}));
    s.apply_defaults(&mut obj);
    assert_eq!(obj["spec"], json!({"b": null, "c": "x"}));
    valid(&s, &obj);
}

#[test]
fn prune_without_a_schema_for_the_root_keeps_type_and_object_meta() {
    let s = schema(json!({"type": "object"}));
    let mut obj = json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a"}, "spec": {}});
    assert_eq!(s.prune(&mut obj), vec!["spec"]);
    assert_eq!(
        obj,
        json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a"}})
    );
}

// ---------------------------------------------------------------------------
// Defaulting
// ---------------------------------------------------------------------------

#[test]
fn defaults_apply_nested_in_arrays_and_in_additional_properties() {
    let s = spec_schema(json!({"type": "object", "default": {}, "properties": {
        "replicas": {"type": "integer", "default": 1},
        "set": {"type": "integer", "default": 5},
        "nested": {"type": "object", "default": {}, "properties": {
            "mode": {"type": "string", "default": "Auto"}}},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "weight": {"type": "integer", "default": 10}}}},
        "byName": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "enabled": {"type": "boolean", "default": true}}}}}}));
    let mut obj = cr(json!({"set": 7, "items": [{}, {"weight": 3}],
        "byName": {"a": {}, "b": {"enabled": false}}}));
    s.apply_defaults(&mut obj);
    assert_eq!(
        obj["spec"],
        json!({"replicas": 1, "set": 7, "nested": {"mode": "Auto"},
            "items": [{"weight": 10}, {"weight": 3}],
            "byName": {"a": {"enabled": true}, "b": {"enabled": false}}})
    );
    // A missing spec with a default is created and defaulted inside.
    let mut obj = json!({"apiVersion": "v1", "kind": "K", "metadata": {}});
    s.apply_defaults(&mut obj);
    assert_eq!(
        obj["spec"],
        json!({"replicas": 1, "set": 5, "nested": {"mode": "Auto"}})
    );
}

#[test]
fn null_items_with_default_get_it() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "l": {"type": "array", "items": {"type": "string", "default": "d"}}}}));
    let mut obj = cr(json!({"l": ["a", null]}));
    s.apply_defaults(&mut obj);
    assert_eq!(obj["spec"]["l"], json!(["a", "d"]));
}

// ---------------------------------------------------------------------------
// CEL rules
// ---------------------------------------------------------------------------

#[test]
fn cel_rule_failure_uses_default_message() {
    let s = spec_schema(json!({"type": "object",
        "x-kubernetes-validations": [{"rule": "self.min <= self.max"}],
        "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}}}));
    valid(&s, &cr(json!({"min": 1, "max": 2})));
    let e = one_error(&s, &cr(json!({"min": 3, "max": 2})));
    assert_eq!(e.kind, FieldErrorKind::Invalid);
    assert_eq!(e.field, "spec");
    // The object itself is omitted from the message (upstream's OmitValueType).
    assert_eq!(e.value, None);
    assert_eq!(
        e.to_string(),
        "spec: Invalid value: failed rule: self.min <= self.max"
    );
}

#[test]
fn cel_rule_message_reason_and_field_path() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "name": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self.startsWith('a')", "message": "must start with a"}]},
        "cfg": {"type": "object", "x-kubernetes-validations": [
            {"rule": "has(self.x)", "message": "x is needed", "reason": "FieldValueRequired", "fieldPath": ".x"},
            {"rule": "!has(self.y)", "messageExpression": "'y is ' + string(self.y)", "reason": "FieldValueForbidden"}],
            "properties": {"x": {"type": "string"}, "y": {"type": "integer"}}}}}));
    valid(&s, &cr(json!({"name": "abc", "cfg": {"x": "1"}})));
    assert_eq!(
        errors(&s, &cr(json!({"name": "bcd"}))),
        vec!["spec.name: Invalid value: \"bcd\": must start with a"]
    );
    assert_eq!(
        errors(&s, &cr(json!({"cfg": {"y": 3}}))),
        vec![
            "spec.cfg.x: Required value: x is needed",
            "spec.cfg: Forbidden: y is 3"
        ]
    );
}

#[test]
fn cel_rules_in_arrays_and_maps_use_their_element_paths() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "l": {"type": "array", "items": {"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0"}]}},
        "m": {"type": "object", "additionalProperties": {"type": "string",
            "x-kubernetes-validations": [{"rule": "self != ''"}]}}}}));
    assert_eq!(
        errors(&s, &cr(json!({"l": [1, -1], "m": {"k": ""}}))),
        vec![
            "spec.l[1]: Invalid value: -1: failed rule: self > 0",
            "spec.m[k]: Invalid value: \"\": failed rule: self != ''"
        ]
    );
}

#[test]
fn cel_transition_rules_run_only_on_update() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "id": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": "id is immutable"}]}}}));
    let new = cr(json!({"id": "b"}));
    assert!(s.validate(&new, None).is_empty());
    let old = cr(json!({"id": "a"}));
    let errs = s.validate(&new, Some(&old));
    assert_eq!(errs.len(), 1);
    assert_eq!(
        errs[0].to_string(),
        "spec.id: Invalid value: \"b\": id is immutable"
    );
    assert!(s.validate(&new, Some(&new)).is_empty());
    // No old value at that path: the rule does not run.
    let old = cr(json!({}));
    assert!(s.validate(&new, Some(&old)).is_empty());
}

#[test]
fn cel_compile_and_runtime_errors_are_reported() {
    let s = spec_schema(json!({"type": "object", "x-kubernetes-validations": [
        {"rule": "self.a >"}, {"rule": "self.missing == 1"}],
        "properties": {"a": {"type": "integer"}}}));
    let errs = s.validate(&cr(json!({"a": 1})), None);
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs[0]
            .detail
            .starts_with("rule compile error: compilation failed"),
        "{errs:?}"
    );
    assert!(
        errs[1]
            .detail
            .ends_with("evaluating rule: self.missing == 1"),
        "{errs:?}"
    );
    assert_eq!(errs[1].field, "spec");
}

#[test]
fn cel_rule_at_root_sees_the_whole_object() {
    let s = schema(json!({"type": "object", "x-kubernetes-validations": [
        {"rule": "self.metadata.name.startsWith('x') && self.spec.n > 0"}],
        "properties": {"spec": {"type": "object", "properties": {"n": {"type": "integer"}}}}}));
    valid(&s, &cr(json!({"n": 1})));
    let e = one_error(&s, &cr(json!({"n": 0})));
    assert_eq!(e.field, "");
}

#[test]
fn cel_transition_rules_correlate_map_list_items_by_key() {
    let s = spec_schema(json!({"type": "object", "properties": {
        "l": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "x-kubernetes-validations": [
                {"rule": "self.v >= oldSelf.v", "message": "v may not decrease"}],
                "properties": {"name": {"type": "string"}, "v": {"type": "integer"}}}}}}));
    let old = cr(json!({"l": [{"name": "a", "v": 5}, {"name": "b", "v": 1}]}));
    let new =
        cr(json!({"l": [{"name": "b", "v": 2}, {"name": "a", "v": 4}, {"name": "c", "v": 0}]}));
    assert_eq!(
        s.validate(&new, Some(&old))
            .iter()
            .map(|e| e.field.clone())
            .collect::<Vec<_>>(),
        vec!["spec.l[1]"]
    );
}
