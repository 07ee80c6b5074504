//! Custom resource conversion by a webhook (`spec.conversion.strategy: Webhook`):
//! upstream's `webhookConverter` and the generic checks of the converter around it
//! (`apiextensions-apiserver/pkg/apiserver/conversion`).
//!
//! The registry knows no HTTP: the ConversionReview round trip is a
//! [`ConversionWebhook`] the apiserver hands in
//! ([`crate::custom::CustomResources::set_conversion_webhook`]).
//! What is generic lives here: objects already in the desired version are not sent
//! (no call at all when none needs converting), a list goes in one review, and the
//! answer is checked as upstream checks it (as many objects as sent, the desired
//! apiVersion, the same kind, name, namespace and uid; of the metadata only labels and
//! annotations may change, the rest is restored from the original). A converted object
//! is then pruned by its version's structural schema, as upstream's
//! `schemaCoercingConverter` does after the webhook.
//!
//! The store reaches this through [`FallibleConversion`], the async and fallible
//! sibling of [`crate::strategy::StorageConversion`]; built-in resources and custom
//! resources with the `None` strategy keep the synchronous one.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use ferrokube_apiextensions::schema::StructuralSchema;
use ferrokube_apimachinery::errors::{ApiError, FieldPath, aggregate_message};
use ferrokube_apimachinery::validation::{validate_annotations, validate_labels};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Map, Value, json};

use crate::custom::StoredSchemas;

/// One ConversionReview round trip to a definition's conversion webhook.
#[async_trait::async_trait]
pub trait ConversionWebhook: Send + Sync {
    /// Sends `objects` to the webhook of `crd` to be converted to
    /// `desired_api_version` and returns `response.convertedObjects`, the review's
    /// uid and result checked. `Err`: why the call failed (the caller words it as
    /// upstream: `conversion webhook for <gvk> failed: <reason>`).
    async fn convert(
        &self,
        crd: &CustomResourceDefinition,
        desired_api_version: &str,
        objects: Vec<Value>,
    ) -> Result<Vec<Value>, String>;
}

/// Where the apiserver puts its [`ConversionWebhook`] once it is built (after the
/// registry, since it reads Services and Endpoints through it).
pub type WebhookSlot = Arc<OnceLock<Arc<dyn ConversionWebhook>>>;

/// A conversion between stored and served forms that may fail and may have to wait
/// (a webhook call).
#[async_trait::async_trait]
pub trait FallibleConversion: Send + Sync {
    /// Stored objects (any version) in the served version, in order. One call for
    /// the whole batch; `list`: they are a list's items (upstream words its errors
    /// with an index per item then).
    async fn served_form(&self, objects: Vec<Value>, list: bool) -> Result<Vec<Value>, ApiError>;
    /// A served object in the storage version.
    async fn stored_form(&self, object: Value) -> Result<Value, ApiError>;
}

/// The webhook conversion of one served version of a custom resource.
pub(crate) struct WebhookConversion {
    pub(crate) definition: Arc<CustomResourceDefinition>,
    pub(crate) kind: String,
    /// `group/version` served.
    pub(crate) served: String,
    /// `group/version` stored.
    pub(crate) stored: String,
    pub(crate) webhook: WebhookSlot,
    /// The structural schemas of the served and the storage version, which prune
    /// what the webhook answers.
    pub(crate) served_schema: Option<StructuralSchema>,
    pub(crate) stored_schema: Option<StructuralSchema>,
    /// Every version's schema, which read a stored object before it is converted.
    pub(crate) stored_schemas: StoredSchemas,
}

/// Go's `schema.GroupVersionKind.String()` of an object's apiVersion and kind.
fn gvk(api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    format!("{group}/{version}, Kind={kind}")
}

/// Go's `%T` of a decoded JSON value.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

fn str_at<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get(field).and_then(Value::as_str).unwrap_or("")
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Upstream `validateConvertedObject`: the same kind, name, namespace and uid.
fn validate_converted(original: &Value, converted: &Value) -> Result<(), String> {
    let same = |what: &str, a: &str, b: &str| {
        if a == b {
            Ok(())
        } else {
            Err(format!("must have the same {what}: {a} != {b}"))
        }
    };
    same("kind", str_at(original, "kind"), str_at(converted, "kind"))?;
    same(
        "name",
        meta_str(original, "name"),
        meta_str(converted, "name"),
    )?;
    same(
        "namespace",
        meta_str(original, "namespace"),
        meta_str(converted, "namespace"),
    )?;
    same("UID", meta_str(original, "uid"), meta_str(converted, "uid"))
}

/// Upstream `restoreObjectMeta`: the original metadata, with the converted object's
/// labels and annotations (validated when they changed).
fn restore_meta(original: &Value, converted: &mut Value) -> Result<(), String> {
    let original_meta = original.get("metadata");
    let converted_meta = match (converted.get("metadata"), original_meta) {
        (None, None) => return Ok(()),
        (None, Some(_)) => return Err("missing metadata in converted object".into()),
        (Some(Value::Object(m)), _) => m.clone(),
        (Some(other), _) => {
            return Err(format!(
                "invalid metadata of type {} in converted object",
                go_type(other)
            ));
        }
    };
    let mut result: Map<String, Value> = match original_meta {
        None => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(format!(
                "invalid metadata of type {} in input object",
                go_type(other)
            ));
        }
    };
    for field in ["labels", "annotations"] {
        let theirs = match converted_meta.get(field) {
            None | Some(Value::Null) => {
                result.remove(field);
                continue;
            }
            Some(Value::Object(m)) => m,
            Some(other) => {
                return Err(format!(
                    "invalid metadata.{field} of type {} in converted object",
                    go_type(other)
                ));
            }
        };
        let ours = result.get(field).and_then(Value::as_object);
        let mut changed = ours.map_or(0, Map::len) != theirs.len();
        let mut strings = BTreeMap::new();
        for (k, v) in theirs {
            let Some(s) = v.as_str() else {
                return Err(format!(
                    "metadata.{field}[{k}] must be a string, but is {} in converted object",
                    go_type(v)
                ));
            };
            changed |= ours.and_then(|o| o.get(k)) != Some(v);
            strings.insert(k.clone(), s.to_string());
        }
        if changed {
            let errs = if field == "labels" {
                validate_labels(&strings, &FieldPath::new("metadata").child("labels"))
            } else {
                validate_annotations(&strings, &FieldPath::new("metadata").child("annotation"))
            };
            if let Some(m) = aggregate_message(&errs) {
                return Err(m);
            }
        }
        result.insert(field.to_string(), Value::Object(theirs.clone()));
    }
    converted["metadata"] = Value::Object(result);
    Ok(())
}

impl WebhookConversion {
    /// Upstream's conversion of `objects` to `desired`: the ones in another version go
    /// to the webhook in one review, the answer is checked and the metadata restored.
    /// `list`: the messages of a list conversion (an index per object).
    pub(crate) async fn convert(
        &self,
        mut objects: Vec<Value>,
        desired: &str,
        schema: Option<&StructuralSchema>,
        list: bool,
    ) -> Result<Vec<Value>, ApiError> {
        let pending: Vec<usize> = (0..objects.len())
            .filter(|i| str_at(&objects[*i], "apiVersion") != desired)
            .collect();
        let Some(first) = pending.first() else {
            return Ok(objects);
        };
        let from = gvk(str_at(&objects[*first], "apiVersion"), &self.kind);
        let failed = |e: String| ApiError::internal(format!("conversion webhook for {from} {e}"));
        let Some(webhook) = self.webhook.get() else {
            return Err(failed("failed: no conversion webhook client".into()));
        };
        let sent: Vec<Value> = pending.iter().map(|i| objects[*i].clone()).collect();
        let converted = webhook
            .convert(&self.definition, desired, sent)
            .await
            .map_err(|e| failed(format!("failed: {e}")))?;
        if converted.len() != pending.len() {
            return Err(failed(format!(
                "returned {} objects, expected {}",
                converted.len(),
                pending.len()
            )));
        }
        for (n, (i, mut out)) in pending.iter().zip(converted).enumerate() {
            let original = &objects[*i];
            // As upstream: a list names the object by its (1-based) place in the
            // answer, a single object by index 0.
            let (invalid_object, invalid_meta) = if list {
                (
                    format!("returned invalid converted object at index {}", n + 1),
                    format!("returned invalid metadata in object at index {}", n + 1),
                )
            } else {
                (
                    "returned invalid object at index 0".to_string(),
                    "returned invalid metadata".to_string(),
                )
            };
            let got = str_at(&out, "apiVersion");
            if got != desired {
                return Err(failed(format!(
                    "{invalid_object}: invalid groupVersion (expected {desired}, received {got})"
                )));
            }
            let (want_kind, got_kind) = (str_at(original, "kind"), str_at(&out, "kind"));
            if want_kind != got_kind {
                return Err(failed(format!(
                    "{invalid_object}: invalid kind (expected {want_kind}, received {got_kind})"
                )));
            }
            if let Err(e) = validate_converted(original, &out) {
                let what = if list {
                    invalid_object
                } else {
                    "returned invalid object".to_string()
                };
                return Err(failed(format!("{what}: {e}")));
            }
            restore_meta(original, &mut out).map_err(|e| failed(format!("{invalid_meta}: {e}")))?;
            if let Some(schema) = schema {
                schema.prune(&mut out);
            }
            objects[*i] = out;
        }
        Ok(objects)
    }

    /// The object with its type set to `api_version` if it names none (a request body
    /// may leave it out).
    fn typed(&self, mut obj: Value, api_version: &str) -> Value {
        if let Some(o) = obj.as_object_mut() {
            if o.get("apiVersion")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                o.insert("apiVersion".into(), json!(api_version));
            }
            if o.get("kind")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                o.insert("kind".into(), json!(self.kind));
            }
        }
        obj
    }
}

#[async_trait::async_trait]
impl FallibleConversion for WebhookConversion {
    async fn served_form(&self, objects: Vec<Value>, list: bool) -> Result<Vec<Value>, ApiError> {
        let objects = objects
            .into_iter()
            .map(|o| {
                let mut o = self.typed(o, &self.stored);
                self.stored_schemas.read(&mut o);
                o
            })
            .collect();
        self.convert(objects, &self.served, self.served_schema.as_ref(), list)
            .await
    }

    async fn stored_form(&self, object: Value) -> Result<Value, ApiError> {
        let object = self.typed(object, &self.served);
        let mut out = self
            .convert(
                vec![object],
                &self.stored,
                self.stored_schema.as_ref(),
                false,
            )
            .await?;
        out.pop()
            .ok_or_else(|| ApiError::internal("conversion returned no object"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A webhook that renames `spec.a` <-> `spec.b` and counts its calls; `tamper`
    /// changes each answer.
    struct Fake {
        calls: Mutex<Vec<usize>>,
        tamper: fn(&mut Value),
    }

    #[async_trait::async_trait]
    impl ConversionWebhook for Fake {
        async fn convert(
            &self,
            _crd: &CustomResourceDefinition,
            desired: &str,
            objects: Vec<Value>,
        ) -> Result<Vec<Value>, String> {
            self.calls.lock().unwrap().push(objects.len());
            Ok(objects
                .into_iter()
                .map(|mut o| {
                    let spec = o["spec"].as_object_mut().unwrap();
                    if desired.ends_with("v2") {
                        let a = spec.remove("a").unwrap_or_default();
                        spec.insert("b".into(), a);
                    } else {
                        let b = spec.remove("b").unwrap_or_default();
                        spec.insert("a".into(), b);
                    }
                    o["apiVersion"] = json!(desired);
                    o["metadata"]["generation"] = json!(99);
                    (self.tamper)(&mut o);
                    o
                })
                .collect())
        }
    }

    fn conversion(tamper: fn(&mut Value)) -> (WebhookConversion, Arc<Fake>) {
        let fake = Arc::new(Fake {
            calls: Mutex::new(Vec::new()),
            tamper,
        });
        let slot: WebhookSlot = Arc::new(OnceLock::new());
        let _ = slot.set(fake.clone());
        (
            WebhookConversion {
                definition: Arc::new(CustomResourceDefinition::default()),
                kind: "Widget".into(),
                served: "ex.com/v2".into(),
                stored: "ex.com/v1".into(),
                webhook: slot,
                served_schema: Some(schema("b")),
                stored_schema: Some(schema("a")),
                stored_schemas: StoredSchemas::default(),
            },
            fake,
        )
    }

    /// An object with a `spec` of one integer field.
    fn schema(field: &str) -> StructuralSchema {
        StructuralSchema::new(
            &serde_json::from_value(json!({"type": "object", "properties": {
                "spec": {"type": "object", "properties": {field: {"type": "integer"}}}}}))
            .unwrap(),
        )
    }

    fn stored(name: &str, version: &str) -> Value {
        json!({"apiVersion": format!("ex.com/{version}"), "kind": "Widget",
            "metadata": {"name": name, "uid": "u", "generation": 1, "labels": {"x": "y"}},
            "spec": {"a": 1}})
    }

    #[tokio::test]
    async fn only_objects_in_other_versions_are_sent_in_one_review() {
        let (c, fake) = conversion(|_| {});
        let mut already = stored("b", "v2");
        already["spec"] = json!({"b": 2});
        let out = c
            .served_form(
                vec![stored("a", "v1"), already.clone(), stored("c", "v1")],
                true,
            )
            .await
            .unwrap();
        assert_eq!(*fake.calls.lock().unwrap(), [2]);
        assert_eq!(out[0]["spec"], json!({"b": 1}));
        assert_eq!(out[1], already);
        // The metadata is the original's.
        assert_eq!(out[2]["metadata"]["generation"], 1);
        assert_eq!(out[2]["apiVersion"], "ex.com/v2");
        // What the served version's schema does not have is pruned.
        let (c, _) = conversion(|o| o["spec"]["extra"] = json!(1));
        let out = c.served_form(vec![stored("a", "v1")], false).await.unwrap();
        assert_eq!(out[0]["spec"], json!({"b": 1}));
        let out = c.stored_form(out[0].clone()).await.unwrap();
        assert_eq!(out["spec"], json!({"a": 1}));
        // Nothing to convert: no call.
        c.served_form(vec![already], true).await.unwrap();
        assert_eq!(fake.calls.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn answers_are_checked_as_upstream() {
        let (c, _) = conversion(|o| o["apiVersion"] = json!("ex.com/v3"));
        let e = c
            .served_form(vec![stored("a", "v1")], false)
            .await
            .unwrap_err();
        assert_eq!(e.code, 500);
        assert_eq!(
            e.message,
            "Internal error occurred: conversion webhook for ex.com/v1, Kind=Widget returned invalid object at index 0: invalid groupVersion (expected ex.com/v2, received ex.com/v3)"
        );
        let (c, _) = conversion(|o| o["metadata"]["name"] = json!("other"));
        let e = c
            .served_form(vec![stored("a", "v1"), stored("a", "v1")], true)
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "Internal error occurred: conversion webhook for ex.com/v1, Kind=Widget returned invalid converted object at index 1: must have the same name: a != other"
        );
        let (c, _) = conversion(|o| o["kind"] = json!("Gadget"));
        let e = c.stored_form(stored("a", "v2")).await.unwrap_err();
        assert!(
            e.message
                .ends_with("invalid kind (expected Widget, received Gadget)"),
            "{}",
            e.message
        );
        // Labels and annotations may change (and are validated); the rest is restored.
        let (c, _) = conversion(|o| {
            o["metadata"]["labels"] = json!({"new": "label"});
            o["metadata"]["resourceVersion"] = json!("7");
        });
        let out = c.served_form(vec![stored("a", "v1")], false).await.unwrap();
        assert_eq!(out[0]["metadata"]["labels"], json!({"new": "label"}));
        assert!(out[0]["metadata"].get("resourceVersion").is_none());
        let (c, _) = conversion(|o| o["metadata"]["labels"] = json!({"bad key!": "x"}));
        let e = c
            .served_form(vec![stored("a", "v1")], false)
            .await
            .unwrap_err();
        assert!(
            e.message.contains(
                "returned invalid metadata: metadata.labels: Invalid value: \"bad key!\""
            ),
            "{}",
            e.message
        );
        let (c, _) = conversion(|o| o["metadata"]["annotations"] = json!({"a": 1}));
        let e = c
            .served_form(vec![stored("a", "v1")], false)
            .await
            .unwrap_err();
        assert!(
            e.message.ends_with(
                "metadata.annotations[a] must be a string, but is int64 in converted object"
            ),
            "{}",
            e.message
        );
    }

    #[tokio::test]
    async fn without_a_webhook_client_conversion_fails() {
        let (mut c, _) = conversion(|_| {});
        c.webhook = Arc::new(OnceLock::new());
        let e = c
            .served_form(vec![stored("a", "v1")], false)
            .await
            .unwrap_err();
        assert_eq!(e.code, 500);
        assert!(
            e.message.starts_with(
                "Internal error occurred: conversion webhook for ex.com/v1, Kind=Widget failed: "
            ),
            "{}",
            e.message
        );
        // An object in the desired version needs no webhook.
        assert!(c.served_form(vec![stored("a", "v2")], false).await.is_ok());
    }
}
