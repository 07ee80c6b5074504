//! Definitions and paths of the served custom resources, as upstream's
//! apiextensions-apiserver builds them (`controller/openapi/builder`): each version's
//! kind named `<reversed group>.<version>.<Kind>` with the schema of
//! `spec.versions[].schema.openAPIV3Schema` plus `apiVersion`, `kind` and `metadata`,
//! its `<Kind>List`, and the resource's REST paths. The v2 form of a schema is made
//! Swagger-2.0-safe as upstream's `ToStructuralOpenAPIV2` does (no `allOf`/`anyOf`/
//! `oneOf`/`not`, untyped nullable and preserve-unknown-fields nodes); the v3 form is
//! the schema as written.

use std::collections::BTreeMap;

use ferrokube_api::resources::ResourceInfo;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Map, Value, json};

use crate::definitions::{V2_REF, list_name};
use crate::v3::V3_REF;

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DESCRIPTION: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const LIST_METADATA_DESCRIPTION: &str = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// One served version of one custom resource.
#[derive(Clone, Copy, Debug)]
pub struct CustomResourceVersion<'a> {
    /// What is served (group, version, kind, plural, scope, subresources).
    pub info: &'a ResourceInfo,
    /// The definition it is served from.
    pub definition: &'a CustomResourceDefinition,
}

/// Upstream's definition name of a custom kind (`util.ToRESTFriendlyName`):
/// `stable.example.com`, `v1`, `CronTab` → `com.example.stable.v1.CronTab`.
pub fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let mut parts: Vec<&str> = group.split('.').filter(|p| !p.is_empty()).collect();
    parts.reverse();
    parts.push(version);
    parts.push(kind);
    parts.join(".")
}

/// The custom resources' part of the documents.
#[derive(Debug, Default)]
pub(crate) struct CustomModel {
    /// Swagger 2.0 definitions (v2-safe schemas, `#/definitions/` references).
    pub v2_definitions: Map<String, Value>,
    /// The same definitions in OpenAPI 3 form (schemas as written,
    /// `#/components/schemas/` references).
    pub v3_definitions: Map<String, Value>,
    /// Swagger 2.0 paths by group-version path (`apis/stable.example.com/v1`).
    pub group_versions: BTreeMap<String, Map<String, Value>>,
}

impl CustomModel {
    pub(crate) fn build(resources: &[CustomResourceVersion<'_>]) -> CustomModel {
        let mut sorted: Vec<&CustomResourceVersion<'_>> = resources.iter().collect();
        sorted.sort_by_key(|r| (r.info.group, r.info.version, r.info.plural));
        let mut model = CustomModel::default();
        for r in sorted {
            let info = r.info;
            let name = definition_name(info.group, info.version, info.kind);
            let schema = r
                .definition
                .spec
                .versions
                .iter()
                .find(|v| v.name == info.version)
                .and_then(|v| v.schema.as_ref())
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .and_then(|s| serde_json::to_value(s).ok())
                .unwrap_or_else(
                    || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                );
            let gvk = json!([{"group": info.group, "kind": info.kind, "version": info.version}]);
            let list_gvk =
                json!([{"group": info.group, "kind": info.list_kind(), "version": info.version}]);

            let mut v2 = schema.clone();
            to_v2(&mut v2);
            model.v2_definitions.insert(
                name.clone(),
                with_type_meta(v2, &format!("{V2_REF}{OBJECT_META}"), &gvk),
            );
            model.v3_definitions.insert(
                name.clone(),
                with_type_meta(schema, &format!("{V3_REF}{OBJECT_META}"), &gvk),
            );
            let list = list_name(&name);
            model.v2_definitions.insert(
                list.clone(),
                list_definition(info, &name, V2_REF, &list_gvk),
            );
            model.v3_definitions.insert(
                list.clone(),
                list_definition(info, &name, V3_REF, &list_gvk),
            );

            let paths = model
                .group_versions
                .entry(crate::gv_path(info.group, info.version))
                .or_default();
            crate::paths::custom_resource_paths(paths, info, &name);
        }
        model
    }
}

/// The kind's schema with upstream's `apiVersion`, `kind`, `metadata` and gvk.
fn with_type_meta(mut schema: Value, object_meta_ref: &str, gvk: &Value) -> Value {
    if !schema.is_object() {
        schema = json!({"type": "object"});
    }
    let Value::Object(s) = &mut schema else {
        return schema;
    };
    let properties = s
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if !properties.is_object() {
        *properties = Value::Object(Map::new());
    }
    if let Value::Object(p) = properties {
        p.insert(
            "apiVersion".into(),
            json!({"description": API_VERSION_DESCRIPTION, "type": "string"}),
        );
        p.insert(
            "kind".into(),
            json!({"description": KIND_DESCRIPTION, "type": "string"}),
        );
        p.insert(
            "metadata".into(),
            json!({"$ref": object_meta_ref, "description": METADATA_DESCRIPTION}),
        );
    }
    s.insert("x-kubernetes-group-version-kind".into(), gvk.clone());
    schema
}

fn list_definition(info: &ResourceInfo, item: &str, prefix: &str, gvk: &Value) -> Value {
    json!({
        "description": format!("{} is a list of {}", info.list_kind(), info.kind),
        "type": "object",
        "properties": {
            "apiVersion": {"description": API_VERSION_DESCRIPTION, "type": "string"},
            "items": {
                "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/api-conventions.md", info.plural),
                "type": "array",
                "items": {"$ref": format!("{prefix}{item}")},
            },
            "kind": {"description": KIND_DESCRIPTION, "type": "string"},
            "metadata": {"$ref": format!("{prefix}{LIST_META}"), "description": LIST_METADATA_DESCRIPTION},
        },
        "required": ["items"],
        "x-kubernetes-group-version-kind": gvk,
    })
}

/// Makes a schema Swagger-2.0-safe as upstream's `ToStructuralOpenAPIV2` does, at
/// every level.
fn to_v2(schema: &mut Value) {
    let Value::Object(s) = schema else {
        return;
    };
    for key in ["allOf", "anyOf", "oneOf", "not"] {
        s.remove(key);
    }
    let untyped = |s: &mut Map<String, Value>| {
        s.remove("type");
        s.remove("items");
        s.remove("properties");
    };
    if s.remove("nullable") == Some(Value::Bool(true)) {
        untyped(s);
    }
    if s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        s.remove("items");
        s.remove("properties");
    }
    if s.get("type").and_then(Value::as_str) == Some("array") && !s.contains_key("items") {
        s.remove("type");
    }
    // A nullable property is not required.
    let nullable: Vec<String> = s
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(_, p)| p.get("nullable") == Some(&Value::Bool(true)))
        .map(|(k, _)| k.clone())
        .collect();
    if !nullable.is_empty()
        && let Some(Value::Array(required)) = s.get_mut("required")
    {
        required.retain(|f| f.as_str().is_none_or(|f| !nullable.iter().any(|n| n == f)));
        if required.is_empty() {
            s.remove("required");
        }
    }
    if let Some(Value::Object(props)) = s.get_mut("properties") {
        props.values_mut().for_each(to_v2);
    }
    match s.get_mut("items") {
        Some(Value::Array(items)) => items.iter_mut().for_each(to_v2),
        Some(items) => to_v2(items),
        None => {}
    }
    if let Some(additional) = s.get_mut("additionalProperties")
        && additional.is_object()
    {
        to_v2(additional);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_reverse_the_group() {
        assert_eq!(
            definition_name("stable.example.com", "v1", "CronTab"),
            "com.example.stable.v1.CronTab"
        );
    }

    #[test]
    fn v2_schemas_drop_what_swagger_cannot_say() {
        let mut s = json!({
            "type": "object",
            "required": ["a", "b"],
            "properties": {
                "a": {"type": "string", "nullable": true},
                "b": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true},
                "c": {"type": "array", "x-kubernetes-preserve-unknown-fields": true, "items": {"type": "string"}},
                "d": {"type": "object", "additionalProperties": {"type": "object", "nullable": true, "properties": {"x": {}}}},
            }
        });
        to_v2(&mut s);
        assert_eq!(
            s,
            json!({
                "type": "object",
                "required": ["b"],
                "properties": {
                    "a": {},
                    "b": {"x-kubernetes-int-or-string": true},
                    "c": {"x-kubernetes-preserve-unknown-fields": true},
                    "d": {"type": "object", "additionalProperties": {}},
                }
            })
        );
    }
}
