//! An extension apiserver's Swagger 2.0 document merged into the served
//! `/openapi/v2`, as upstream kube-aggregator's v2 aggregation does: only its paths
//! under `/apis/` are taken (upstream's `FilterSpecByPathsWithoutSideEffects`), with
//! the definitions they reach; a path the document already has is kept as it is
//! (upstream ignores path conflicts).
//!
//! Deviations: a definition the document already has is kept and the extension's of
//! the same name dropped (upstream renames a differing one and its references); the
//! extension's shared parameters (`#/parameters/...`) are written into the operations
//! that refer to them rather than merged as shared parameters, so the gnostic
//! protobuf form (which this crate encodes without parameter references) stays whole.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::definitions::{V2_REF, refs};

/// The prefix of a shared parameter's reference.
const PARAMETER_REF: &str = "#/parameters/";

/// Adds `remote`'s paths under `/apis/` that `local` lacks, and the definitions they
/// reach that `local` lacks, to `local` (both Swagger 2.0 documents as JSON).
pub fn merge_v2(local: &mut Value, remote: &Value) {
    let empty = Map::new();
    let shared = remote["parameters"].as_object().unwrap_or(&empty);
    let remote_definitions = remote["definitions"].as_object().unwrap_or(&empty);
    let mut paths = Map::new();
    for (path, item) in remote["paths"].as_object().unwrap_or(&empty) {
        if !path.starts_with("/apis/") || local["paths"].get(path).is_some() {
            continue;
        }
        let mut item = item.clone();
        inline_parameters(&mut item, shared);
        paths.insert(path.clone(), item);
    }
    // The definitions the taken paths reach, directly or through other definitions.
    let mut reached = BTreeSet::new();
    let mut pending: Vec<String> = Vec::new();
    for item in paths.values() {
        let mut out = Vec::new();
        refs(item, V2_REF, &mut out);
        pending.extend(out.into_iter().map(str::to_string));
    }
    while let Some(name) = pending.pop() {
        let Some(definition) = remote_definitions.get(&name) else {
            continue;
        };
        if !reached.insert(name) {
            continue;
        }
        let mut out = Vec::new();
        refs(definition, V2_REF, &mut out);
        pending.extend(out.into_iter().map(str::to_string));
    }
    if !local["paths"].is_object() {
        local["paths"] = Value::Object(Map::new());
    }
    if !local["definitions"].is_object() {
        local["definitions"] = Value::Object(Map::new());
    }
    if let Value::Object(defs) = &mut local["definitions"] {
        for name in reached {
            if !defs.contains_key(&name)
                && let Some(d) = remote_definitions.get(&name)
            {
                defs.insert(name, d.clone());
            }
        }
    }
    if let Value::Object(all) = &mut local["paths"] {
        all.extend(paths);
    }
}

/// Replaces every `{"$ref": "#/parameters/<name>"}` in the parameter lists of a path
/// item (its own and its operations') by the shared parameter it names; a reference
/// to a parameter `shared` lacks is dropped.
fn inline_parameters(item: &mut Value, shared: &Map<String, Value>) {
    let resolve = |list: &mut Value| {
        if let Value::Array(params) = list {
            let resolved: Vec<Value> = params
                .drain(..)
                .filter_map(|p| {
                    match p
                        .get("$ref")
                        .and_then(Value::as_str)
                        .and_then(|r| r.strip_prefix(PARAMETER_REF))
                    {
                        Some(name) => shared.get(name).cloned(),
                        None => Some(p),
                    }
                })
                .collect();
            *params = resolved;
        }
    };
    let Value::Object(item) = item else {
        return;
    };
    for (key, value) in item.iter_mut() {
        if key == "parameters" {
            resolve(value);
        } else if let Some(list) = value.get_mut("parameters") {
            resolve(list);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn local() -> Value {
        json!({
            "swagger": "2.0",
            "paths": {
                "/apis/": {"get": {"operationId": "getAPIVersions"}},
                "/api/v1/pods": {"get": {"operationId": "listPods"}},
            },
            "definitions": {
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "description": "local"},
            },
        })
    }

    fn remote() -> Value {
        json!({
            "swagger": "2.0",
            "paths": {
                "/apis/": {"get": {"operationId": "remoteGetAPIVersions"}},
                "/version/": {"get": {"operationId": "getCodeVersion"}},
                "/apis/metrics.k8s.io/v1beta1/nodes": {
                    "parameters": [{"$ref": "#/parameters/pretty"}, {"$ref": "#/parameters/missing"}],
                    "get": {
                        "operationId": "listNodeMetrics",
                        "parameters": [{"name": "limit", "in": "query", "type": "integer"}],
                        "responses": {"200": {"schema": {"$ref": "#/definitions/io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetricsList"}}},
                    },
                },
            },
            "parameters": {"pretty": {"name": "pretty", "in": "query", "type": "string", "uniqueItems": true}},
            "definitions": {
                "io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetricsList": {
                    "type": "object",
                    "properties": {
                        "items": {"type": "array", "items": {"$ref": "#/definitions/io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics"}},
                        "metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"},
                    },
                },
                "io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics": {
                    "type": "object",
                    "properties": {"metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}},
                },
                "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta": {"type": "object"},
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "description": "remote"},
                "io.k8s.apimachinery.pkg.version.Info": {"type": "object"},
            },
        })
    }

    #[test]
    fn extension_paths_under_apis_and_their_definitions_are_added() {
        let mut doc = local();
        merge_v2(&mut doc, &remote());
        let paths = doc["paths"].as_object().unwrap();
        let names: Vec<&str> = paths.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "/api/v1/pods",
                "/apis/",
                "/apis/metrics.k8s.io/v1beta1/nodes"
            ]
        );
        // A path both have stays the local one.
        assert_eq!(
            doc["paths"]["/apis/"]["get"]["operationId"],
            "getAPIVersions"
        );
        let nodes = &doc["paths"]["/apis/metrics.k8s.io/v1beta1/nodes"];
        assert_eq!(nodes["get"]["operationId"], "listNodeMetrics");
        // Shared parameters are written where they are used.
        assert_eq!(
            nodes["parameters"],
            json!([{"name": "pretty", "in": "query", "type": "string", "uniqueItems": true}])
        );
        let defs = doc["definitions"].as_object().unwrap();
        let names: Vec<&str> = defs.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta",
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
                "io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics",
                "io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetricsList",
            ]
        );
        // A definition both have stays the local one; one no taken path reaches
        // (version.Info, of /version/) is not added.
        assert_eq!(
            defs["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["description"],
            "local"
        );
    }

    #[test]
    fn a_document_without_paths_or_definitions_changes_nothing() {
        let mut doc = local();
        merge_v2(&mut doc, &json!({"swagger": "2.0"}));
        assert_eq!(doc, local());
        let mut bare = json!({});
        merge_v2(&mut bare, &remote());
        assert_eq!(bare["paths"].as_object().unwrap().len(), 2);
    }
}
