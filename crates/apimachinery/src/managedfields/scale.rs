//! Field ownership through the `scale` subresource (upstream's `ScaleHandler`).
//!
//! A `Scale` has one field a manager can own, `spec.replicas`, which is the parent's
//! replicas field (`spec.replicas`, or the path a custom resource's definition names).
//! A write through `scale` sees the parent's managers that own that field as owners of
//! the Scale's `spec.replicas`, and its outcome goes back onto the parent's entries.

use serde_json::Value;

use super::{FieldSet, Managed, with_managed_fields};

/// The one field of a `Scale` anybody owns.
const SCALE_REPLICAS: [&str; 2] = ["f:spec", "f:replicas"];

/// The parent's replicas field as a field path (`["spec", "replicas"]` →
/// `f:spec.f:replicas`).
fn replicas_path(replicas: &[String]) -> Vec<String> {
    replicas.iter().map(|f| format!("f:{f}")).collect()
}

/// `scale` with the managed fields the parent's give it: each manager of the parent
/// that owns the replicas field owns the Scale's `spec.replicas`, under the Scale's
/// group-version (upstream's `ToSubresource`).
pub fn scale_with_parent_managers(scale: Value, parent: &Value, replicas: &[String]) -> Value {
    let path = replicas_path(replicas);
    let mut managed = Managed::of(parent).unwrap_or_default();
    managed.entries.retain(|e| e.fields.contains(&path));
    for e in &mut managed.entries {
        e.api_version = "autoscaling/v1".into();
        e.fields = FieldSet::new();
        e.fields.insert(&SCALE_REPLICAS);
    }
    with_managed_fields(scale, managed)
}

/// The parent's `managedFields` after a write through `scale` left the Scale's
/// managers as `scale_after` has them (upstream's `ToParent`): a manager of the parent
/// that no longer owns the Scale's replicas loses the parent's replicas field; a
/// manager that owns them only through the Scale (the writer) owns the parent's
/// replicas field, under the parent's `api_version`.
pub fn parent_managed_fields(
    parent: &Value,
    scale_after: &Value,
    replicas: &[String],
    api_version: &str,
) -> Value {
    let path = replicas_path(replicas);
    let parent_managed = Managed::of(parent).unwrap_or_default();
    let mut scale_managed = Managed::of(scale_after).unwrap_or_default();
    let mut out = Managed::default();
    for mut e in parent_managed.entries {
        if !e.fields.contains(&path) {
            out.entries.push(e);
            continue;
        }
        match scale_managed
            .position(&e.manager, e.operation, &e.subresource)
            .filter(|&i| scale_managed.entries[i].fields.contains(&SCALE_REPLICAS))
        {
            Some(i) => {
                scale_managed.entries.remove(i);
            }
            None => {
                let path: Vec<&str> = path.iter().map(String::as_str).collect();
                e.fields.remove(&path);
            }
        }
        out.entries.push(e);
    }
    for mut e in scale_managed.entries {
        if !e.fields.contains(&SCALE_REPLICAS) {
            continue;
        }
        e.api_version = api_version.to_string();
        e.fields = FieldSet::new();
        e.fields.insert(&path);
        out.entries.push(e);
    }
    out.into_value()
}
