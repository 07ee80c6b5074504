//! OpenAPI 3.0 per group-version documents, converted from the Swagger 2.0 model:
//! `#/components/schemas/` references, request bodies and response contents, and only
//! the schemas the group-version's paths reach.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::definitions::{V2_REF, refs};

/// `#/components/schemas/` prefix of OpenAPI 3 references.
pub(crate) const V3_REF: &str = "#/components/schemas/";

/// Rewrites every Swagger 2.0 `$ref` in `value` to its OpenAPI 3 form.
pub(crate) fn rewrite_refs(value: &mut Value) {
    match value {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                if k == "$ref" {
                    if let Some(target) = v.as_str().and_then(|s| s.strip_prefix(V2_REF)) {
                        *v = Value::String(format!("{V3_REF}{target}"));
                    }
                } else {
                    rewrite_refs(v);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(rewrite_refs),
        _ => {}
    }
}

fn parameter(p: &Value) -> Value {
    let mut out = Map::new();
    for key in ["name", "in", "description", "required"] {
        if let Some(v) = p.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    let mut schema = Map::new();
    for key in ["type", "uniqueItems"] {
        if let Some(v) = p.get(key) {
            schema.insert(key.into(), v.clone());
        }
    }
    out.insert("schema".into(), Value::Object(schema));
    Value::Object(out)
}

fn content(mimes: &[Value], schema: &Value) -> Value {
    let mut out = Map::new();
    for mime in mimes.iter().filter_map(Value::as_str) {
        out.insert(mime.into(), json!({"schema": schema}));
    }
    Value::Object(out)
}

fn operation(op: &Value) -> Value {
    let empty = Vec::new();
    let consumes = op
        .get("consumes")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let produces = op
        .get("produces")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let mut out = Map::new();
    for (k, v) in op.as_object().into_iter().flatten() {
        match k.as_str() {
            "consumes" | "produces" | "schemes" => {}
            "parameters" => {
                let mut params = Vec::new();
                for p in v.as_array().into_iter().flatten() {
                    if p["in"] == "body" {
                        out.insert(
                            "requestBody".into(),
                            json!({"content": content(consumes, &p["schema"]), "required": true}),
                        );
                    } else {
                        params.push(parameter(p));
                    }
                }
                if !params.is_empty() {
                    out.insert("parameters".into(), Value::Array(params));
                }
            }
            "responses" => {
                let mut responses = Map::new();
                for (code, r) in v.as_object().into_iter().flatten() {
                    let mut resp = json!({"description": r["description"]});
                    if let Some(schema) = r.get("schema") {
                        resp["content"] = content(produces, schema);
                    }
                    responses.insert(code.clone(), resp);
                }
                out.insert("responses".into(), Value::Object(responses));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

/// Converts Swagger 2.0 path items to OpenAPI 3.
pub(crate) fn paths(v2_paths: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (path, item) in v2_paths {
        let mut converted = Map::new();
        for (k, v) in item.as_object().into_iter().flatten() {
            let v = if k == "parameters" {
                Value::Array(v.as_array().into_iter().flatten().map(parameter).collect())
            } else {
                operation(v)
            };
            converted.insert(k.clone(), v);
        }
        out.insert(path.clone(), Value::Object(converted));
    }
    out
}

/// The definitions `paths` reach, transitively.
pub(crate) fn reachable(
    v2_paths: &Map<String, Value>,
    defs: &Map<String, Value>,
) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<String> = Vec::new();
    let mut found = Vec::new();
    for item in v2_paths.values() {
        refs(item, V2_REF, &mut found);
    }
    stack.extend(found.into_iter().map(str::to_string));
    while let Some(name) = stack.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(def) = defs.get(&name) {
            let mut next = Vec::new();
            refs(def, V2_REF, &mut next);
            stack.extend(
                next.into_iter()
                    .filter(|n| !seen.contains(*n))
                    .map(str::to_string),
            );
        }
    }
    seen
}
