//! Patch engines: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and
//! strategic merge patch (`k8s.io/apimachinery/pkg/util/strategicpatch`).
//!
//! JSON patch and merge patch are the `json-patch` crate's; this module adds
//! upstream's limits and error mapping.

use serde_json::Value;

use crate::errors::ApiError;

pub mod meta;
mod strategic;
mod table;

pub use meta::BuiltinPatchSchema;
pub use strategic::{NoPatchSchema, strategic_merge_patch};

/// A field's `patchStrategy` tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// `merge`: lists merged by merge key (or as sets for primitives).
    Merge,
    /// `replace`: the patch value replaces the field.
    Replace,
    /// `retainKeys`: fields missing from `$retainKeys` are cleared.
    RetainKeys,
    /// `merge,retainKeys`.
    MergeRetainKeys,
}

impl Strategy {
    /// The tag text (`x-kubernetes-patch-strategy`).
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Merge => "merge",
            Strategy::Replace => "replace",
            Strategy::RetainKeys => "retainKeys",
            Strategy::MergeRetainKeys => "merge,retainKeys",
        }
    }

    /// Whether lists with this strategy are merged.
    pub fn merges(self) -> bool {
        matches!(self, Strategy::Merge | Strategy::MergeRetainKeys)
    }
}

/// What a schema knows about one field for strategic merge patch.
#[derive(Default)]
pub struct FieldPatchMeta {
    pub strategy: Option<Strategy>,
    /// `patchMergeKey` for lists of objects with strategy merge.
    pub merge_key: Option<String>,
    /// The schema of the field's type (for lists and maps: of the items/values).
    pub schema: Option<Box<dyn PatchSchema>>,
}

/// Navigates a type for strategic merge patch (upstream's `LookupPatchMeta`).
pub trait PatchSchema {
    /// Metadata of field `name` of this type. Unknown fields have no strategy.
    fn lookup(&self, name: &str) -> FieldPatchMeta;
    /// The type's name, for error messages.
    fn name(&self) -> String {
        String::new()
    }
}

/// Upstream's cap on the number of operations in one JSON patch.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Why a patch could not be applied. [`PatchError::to_api_error`] gives the status
/// upstream's patch handler answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch body is not valid for its patch type (400).
    #[error("{0}")]
    Decode(String),
    /// More than [`MAX_JSON_PATCH_OPERATIONS`] operations (413).
    #[error("The allowed maximum operations in a JSON patch is {max}, got {got}")]
    TooManyOperations { max: usize, got: usize },
    /// A JSON patch operation failed (test failed, path missing...) (422).
    #[error("{0}")]
    Apply(String),
    /// A strategic merge patch is malformed (400), e.g. `invalid patch format of
    /// primitive list`.
    #[error("{0}")]
    BadRequest(String),
    /// A strategic merge patch is well-formed but cannot apply (422), e.g. `lists of
    /// lists are not supported`.
    #[error("{0}")]
    Unprocessable(String),
    /// Any other strategic merge error: a directive or value of the wrong type, a
    /// list entry without its merge key. Upstream passes these through as a 500; the
    /// patch is what is wrong, so this server answers 400 with Go's message.
    #[error("{0}")]
    Malformed(String),
}

impl PatchError {
    /// The API error upstream's patch handler returns for this failure.
    pub fn to_api_error(&self) -> ApiError {
        match self {
            PatchError::Decode(m) | PatchError::BadRequest(m) => ApiError::bad_request(m.clone()),
            PatchError::TooManyOperations { .. } => {
                ApiError::request_entity_too_large(self.to_string())
            }
            PatchError::Apply(_) | PatchError::Unprocessable(_) => ApiError {
                code: 422,
                reason: crate::errors::reason::INVALID.into(),
                message: "the server rejected our request due to an error in our request".into(),
                details: Some(Box::default()),
            },
            // Upstream returns these as plain errors, which its apiserver renders as a
            // 500; bad input never gets a 5xx here, so the same text comes as a 400.
            PatchError::Malformed(m) => ApiError::bad_request(m.clone()),
        }
    }
}

/// Applies an RFC 6902 JSON patch (the raw request body) to `doc`.
pub fn json_patch(doc: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let ops: json_patch::Patch =
        serde_json::from_slice(patch).map_err(|e| PatchError::Decode(e.to_string()))?;
    if ops.0.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooManyOperations {
            max: MAX_JSON_PATCH_OPERATIONS,
            got: ops.0.len(),
        });
    }
    let mut out = doc.clone();
    json_patch::patch(&mut out, &ops).map_err(|e| PatchError::Apply(e.to_string()))?;
    Ok(out)
}

/// Applies an RFC 7386 JSON merge patch (the raw request body) to `doc`. The body
/// must be a JSON object, as upstream decodes it into a map.
pub fn merge_patch(doc: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let p: Value = serde_json::from_slice(patch).map_err(|e| PatchError::Decode(e.to_string()))?;
    merge_patch_value(doc, &p)
}

/// [`merge_patch`] on an already decoded patch.
pub fn merge_patch_value(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    if !patch.is_object() {
        return Err(PatchError::Decode(
            "json: cannot unmarshal non-object into Go value of type map[string]interface {}"
                .into(),
        ));
    }
    let mut out = doc.clone();
    json_patch::merge(&mut out, patch);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_applies_rfc6902_operations() {
        let doc = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"replicas": 1, "list": [1, 2]}});
        let cases = [
            (
                r#"[{"op":"replace","path":"/spec/replicas","value":3}]"#,
                json!(3),
                "/spec/replicas",
            ),
            (
                r#"[{"op":"add","path":"/metadata/labels/y","value":"2"}]"#,
                json!("2"),
                "/metadata/labels/y",
            ),
            (
                r#"[{"op":"remove","path":"/metadata/labels/x"}]"#,
                json!({}),
                "/metadata/labels",
            ),
            (
                r#"[{"op":"add","path":"/spec/list/-","value":3}]"#,
                json!([1, 2, 3]),
                "/spec/list",
            ),
            (
                r#"[{"op":"copy","from":"/metadata/name","path":"/spec/n"}]"#,
                json!("a"),
                "/spec/n",
            ),
            (
                r#"[{"op":"move","from":"/spec/list","path":"/spec/l2"}]"#,
                json!([1, 2]),
                "/spec/l2",
            ),
            (
                r#"[{"op":"test","path":"/metadata/name","value":"a"},{"op":"replace","path":"/metadata/name","value":"b"}]"#,
                json!("b"),
                "/metadata/name",
            ),
        ];
        for (p, want, at) in cases {
            let out = json_patch(&doc, p.as_bytes()).unwrap();
            assert_eq!(out.pointer(at).unwrap(), &want, "{p}");
        }
    }

    #[test]
    fn json_patch_errors() {
        let doc = json!({"a": 1});
        let e = json_patch(&doc, br#"[{"op":"test","path":"/a","value":2}]"#).unwrap_err();
        assert!(matches!(e, PatchError::Apply(_)));
        assert_eq!(e.to_api_error().code, 422);
        let e = json_patch(&doc, br#"[{"op":"remove","path":"/missing"}]"#).unwrap_err();
        assert!(matches!(e, PatchError::Apply(_)));
        let e = json_patch(&doc, b"{}").unwrap_err();
        assert!(matches!(e, PatchError::Decode(_)));
        assert_eq!(e.to_api_error().code, 400);
        let e = json_patch(&doc, br#"[{"op":"frobnicate","path":"/a"}]"#).unwrap_err();
        assert!(matches!(e, PatchError::Decode(_)));
        let many = format!(
            "[{}]",
            vec![r#"{"op":"test","path":"/a","value":1}"#; MAX_JSON_PATCH_OPERATIONS + 1].join(",")
        );
        let e = json_patch(&doc, many.as_bytes()).unwrap_err();
        assert_eq!(
            e,
            PatchError::TooManyOperations {
                max: 10_000,
                got: 10_001
            }
        );
        let api = e.to_api_error();
        assert_eq!(api.code, 413);
        assert_eq!(
            api.message,
            "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
        );
        // Exactly at the cap is fine.
        let at_cap = format!(
            "[{}]",
            vec![r#"{"op":"test","path":"/a","value":1}"#; MAX_JSON_PATCH_OPERATIONS].join(",")
        );
        assert!(json_patch(&doc, at_cap.as_bytes()).is_ok());
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        // RFC 7386 appendix A examples.
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (doc, patch, want) in cases {
            let got = merge_patch(&doc, patch.to_string().as_bytes()).unwrap();
            assert_eq!(got, want, "{doc} + {patch}");
        }
        assert!(matches!(
            merge_patch(&json!({}), b"[1]"),
            Err(PatchError::Decode(_))
        ));
        assert!(matches!(
            merge_patch(&json!({}), b"{"),
            Err(PatchError::Decode(_))
        ));
    }
}
