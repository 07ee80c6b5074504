//! Patch engines: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and
//! strategic merge patch (`k8s.io/apimachinery/pkg/util/strategicpatch`).
//!
//! JSON patch and merge patch are the `json-patch` crate's; this module adds
//! upstream's limits and error mapping.

use serde_json::Value;

use crate::errors::ApiError;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};

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
    /// A JSON patch would nest the object deeper than this server reads JSON (422,
    /// saying so: upstream reads 10,000 levels, so it has no message of its own).
    #[error("{0}")]
    TooDeep(String),
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
            PatchError::TooDeep(m) => ApiError {
                code: 422,
                reason: crate::errors::reason::INVALID.into(),
                message: m.clone(),
                details: Some(Box::default()),
            },
            // Upstream's `NewGenericServerResponse(422, ...)`: a fixed message, and what
            // went wrong as the one cause.
            PatchError::Apply(m) | PatchError::Unprocessable(m) => ApiError {
                code: 422,
                reason: crate::errors::reason::INVALID.into(),
                message: "the server rejected our request due to an error in our request".into(),
                details: Some(Box::new(StatusDetails {
                    causes: Some(vec![StatusCause {
                        reason: Some("UnexpectedServerResponse".into()),
                        message: Some(m.clone()),
                        field: None,
                    }]),
                    ..StatusDetails::default()
                })),
            },
            // Upstream returns these as plain errors, which its apiserver renders as a
            // 500; bad input never gets a 5xx here, so the same text comes as a 400.
            PatchError::Malformed(m) => ApiError::bad_request(m.clone()),
        }
    }
}

/// Applies an RFC 6902 JSON patch (the raw request body) to `doc`.
///
/// The body must be an array of objects (upstream's `DecodePatch`); each operation is
/// read only when its turn comes, so an unknown `op` or a missing field fails as
/// upstream's does, at applying (422), after the operations before it.
pub fn json_patch(doc: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let ops: Vec<serde_json::Map<String, Value>> =
        serde_json::from_slice(patch).map_err(|e| PatchError::Decode(e.to_string()))?;
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooManyOperations {
            max: MAX_JSON_PATCH_OPERATIONS,
            got: ops.len(),
        });
    }
    let mut out = doc.clone();
    let mut copied = 0;
    for (index, op) in ops.into_iter().enumerate() {
        let op = read_operation(op)?;
        let op = &op;
        guard_operation(&out, op, &mut copied)?;
        // One at a time, so that each is checked against the document it applies to;
        // the document is dropped on failure, so nothing needs undoing.
        json_patch::patch_unsafe(&mut out, std::slice::from_ref(op)).map_err(|mut e| {
            e.operation = index;
            PatchError::Apply(e.to_string())
        })?;
    }
    Ok(out)
}

/// One operation of a JSON patch, refused with evanphx/json-patch's texts (the library
/// upstream applies patches with) when its kind is unknown or a field it needs is
/// missing.
fn read_operation(
    op: serde_json::Map<String, Value>,
) -> Result<json_patch::PatchOperation, PatchError> {
    let kind = match op.get("op") {
        Some(Value::String(k)) => k.clone(),
        _ => "unknown".to_string(),
    };
    let needs: &[&str] = match kind.as_str() {
        "add" | "replace" | "test" => &["path", "value"],
        "remove" => &["path"],
        "move" | "copy" => &["from", "path"],
        _ => return Err(PatchError::Apply(format!("Unexpected kind: {kind}"))),
    };
    for field in needs {
        if !op.contains_key(*field) {
            return Err(PatchError::Apply(match *field {
                "path" => "operation missing path field: missing value".to_string(),
                f => format!("operation, missing {f} field: missing value"),
            }));
        }
    }
    serde_json::from_value(Value::Object(op)).map_err(|e| PatchError::Apply(e.to_string()))
}

/// Upstream's `--json-patch-max-copy-bytes` default (`JSONPatchMaxCopyBytes`): how much
/// `copy` operations may add to a document in one patch.
pub const MAX_JSON_PATCH_COPY_BYTES: usize = 3 * 1024 * 1024;

/// Refuses an operation that would make the document deeper than serde_json reads
/// (a value added at a deep path; a subtree copied or moved under itself), or whose
/// copy takes the patch's copies past [`MAX_JSON_PATCH_COPY_BYTES`] (evanphx/json-patch's
/// `AccumulatedCopySizeLimit`, as upstream arms it; without it, a few dozen copies of
/// the document into itself double it each time).
fn guard_operation(
    doc: &Value,
    op: &json_patch::PatchOperation,
    copied: &mut usize,
) -> Result<(), PatchError> {
    use json_patch::PatchOperation as Op;
    let (path, placed) = match op {
        Op::Add(o) => (&o.path, Some(&o.value)),
        Op::Replace(o) => (&o.path, Some(&o.value)),
        Op::Copy(o) => {
            let from = doc.pointer(o.from.as_str());
            if let Some(value) = from {
                *copied += encoded_len(value);
                if *copied > MAX_JSON_PATCH_COPY_BYTES {
                    return Err(PatchError::Apply(format!(
                        "Unable to complete the copy, the accumulated size increase of copy is {copied}, exceeding the limit {MAX_JSON_PATCH_COPY_BYTES}"
                    )));
                }
            }
            (&o.path, from)
        }
        Op::Move(o) => (&o.path, doc.pointer(o.from.as_str())),
        Op::Remove(_) | Op::Test(_) => return Ok(()),
    };
    let Some(value) = placed else {
        return Ok(());
    };
    let at = path.count();
    let cap = crate::depth::MAX_JSON_DEPTH.saturating_sub(at);
    if at > crate::depth::MAX_JSON_DEPTH || crate::depth::depth_up_to(value, cap) > cap {
        // The path as far as a message needs it: a hostile one is thousands of levels.
        let path = path.as_str();
        let shown = match path.char_indices().nth(64) {
            Some((cut, _)) => format!("{}...", &path[..cut]),
            None => path.to_string(),
        };
        return Err(PatchError::TooDeep(format!(
            "the patched object would be nested more than {} levels deep at {shown}",
            crate::depth::MAX_JSON_DEPTH
        )));
    }
    Ok(())
}

/// The length of `v` as compact JSON, without building it.
fn encoded_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, v);
    count.0
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
    fn json_patch_cannot_nest_deeper_than_serde_json_reads_or_copy_without_bound() {
        let deep_value = (0..100).fold(json!("x"), |v, _| json!({"a": v}));
        let mut ops = Vec::new();
        let mut path = "/spec".to_string();
        for _ in 0..100 {
            ops.push(json!({"op": "add", "path": path.clone(), "value": deep_value.clone()}));
            path.push_str(&"/a".repeat(100));
        }
        let err = json_patch(&json!({}), &serde_json::to_vec(&ops).unwrap()).unwrap_err();
        assert!(
            matches!(&err, PatchError::TooDeep(m) if m.starts_with("the patched object would be nested more than 128 levels deep at /spec/a/a/") && m.ends_with("...") && m.len() < 150),
            "{err:?}"
        );
        // Up to the limit, it applies: 8 segments and 120 levels make 128.
        let value = (0..120).fold(json!("x"), |v, _| json!({"a": v}));
        let at = |path: &str| {
            let op = json!([{"op": "add", "path": path, "value": value.clone()}]);
            json_patch(
                &json!({"a": {"a": {"a": {"a": {"a": {"a": {"a": {}}}}}}}}),
                &serde_json::to_vec(&op).unwrap(),
            )
        };
        let applied = at("/a/a/a/a/a/a/a/b");
        assert!(applied.is_ok(), "{applied:?}");
        let refused = at("/a/a/a/a/a/a/a/b/c");
        assert!(
            matches!(&refused, Err(PatchError::TooDeep(m)) if m.contains("nested more than 128")),
            "{refused:?}"
        );

        // A document copied into itself doubles each time, until the copies pass
        // upstream's 3 MiB.
        let doc = json!({"spec": {"data": "x".repeat(1000)}});
        let copies: Vec<Value> = (0..40)
            .map(|i| json!({"op": "copy", "from": "/spec", "path": format!("/spec/c{i}")}))
            .collect();
        let err = json_patch(&doc, &serde_json::to_vec(&copies).unwrap()).unwrap_err();
        assert!(
            matches!(&err, PatchError::Apply(m) if m.starts_with("Unable to complete the copy, the accumulated size increase of copy is ") && m.ends_with(", exceeding the limit 3145728")),
            "{err:?}"
        );
        // The failing operation keeps its index in the patch.
        let bad = json!([{"op": "add", "path": "/a", "value": 1}, {"op": "remove", "path": "/b"}]);
        let err = json_patch(&json!({}), &serde_json::to_vec(&bad).unwrap()).unwrap_err();
        assert!(
            matches!(&err, PatchError::Apply(m) if m.starts_with("operation '/1' failed at path '/b'")),
            "{err:?}"
        );
    }

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
        let status = e.to_api_error();
        assert_eq!(status.code, 422);
        // What failed is told in the one cause, as upstream's generic 422 tells it.
        let causes = status.causes();
        assert_eq!(causes.len(), 1);
        assert_eq!(
            causes[0].reason.as_deref(),
            Some("UnexpectedServerResponse")
        );
        assert_eq!(causes[0].message.as_deref(), Some(e.to_string().as_str()));
        let e = json_patch(&doc, br#"[{"op":"remove","path":"/missing"}]"#).unwrap_err();
        assert!(matches!(e, PatchError::Apply(_)));
        let e = json_patch(&doc, b"{}").unwrap_err();
        assert!(matches!(e, PatchError::Decode(_)));
        assert_eq!(e.to_api_error().code, 400);
        // An unknown kind or a missing field fails at its turn, after the operations
        // before it, as evanphx/json-patch fails it: the first failure is reported.
        let e = json_patch(&doc, br#"[{"op":"frobnicate","path":"/a"}]"#).unwrap_err();
        assert_eq!(e, PatchError::Apply("Unexpected kind: frobnicate".into()));
        assert_eq!(e.to_api_error().code, 422);
        let e = json_patch(&doc, br#"[{"path":"/a"}]"#).unwrap_err();
        assert_eq!(e, PatchError::Apply("Unexpected kind: unknown".into()));
        let e = json_patch(&doc, br#"[{"op":"add","value":1}]"#).unwrap_err();
        assert_eq!(
            e,
            PatchError::Apply("operation missing path field: missing value".into())
        );
        let e = json_patch(&doc, br#"[{"op":"copy","path":"/b"}]"#).unwrap_err();
        assert_eq!(
            e,
            PatchError::Apply("operation, missing from field: missing value".into())
        );
        let e =
            json_patch(&doc, br#"[{"op":"test","path":"/a","value":2},{"op":"x"}]"#).unwrap_err();
        assert!(e.to_string().contains("/a"), "{e}");
        let e = json_patch(&doc, br#"[1]"#).unwrap_err();
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
