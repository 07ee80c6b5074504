//! RuntimeClass (upstream `plugin/pkg/admission/runtimeclass`), on pod creation only:
//! - mutating: a pod naming a `runtimeClassName` gets the class's
//!   `overhead.podFixed` as `spec.overhead` (a different overhead the pod already
//!   carries is 403), the class's `scheduling.nodeSelector` merged into its
//!   `nodeSelector` (a key with another value is 403) and the class's
//!   `scheduling.tolerations` merged into its tolerations (upstream
//!   `tolerations.MergeTolerations`: a toleration another one covers is dropped);
//! - validating: the pod's overhead is exactly the class's, and a pod without a class
//!   overhead carries none.
//!
//! A class that does not exist is 403 `pod rejected: RuntimeClass "<name>" not found`.
//! Classes are read from the watch cache (after this apiserver's own writes), with
//! a live read only when the cache does not have the class, as upstream's plugin
//! falls back from its lister to a GET.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_apimachinery::quantity;
use ferrokube_registry::Store;
use k8s_openapi::api::core::v1::Toleration;
use serde_json::{Map, Value};

use super::{Attributes, Operation, Plugin, PluginInit, webhook};

pub(crate) const NAME: &str = "RuntimeClass";

pub(crate) struct RuntimeClass {
    classes: Arc<Store>,
}

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(RuntimeClass {
        classes: init
            .registry
            .store("node.k8s.io", "v1", "runtimeclasses")
            .cloned()
            .ok_or("no runtimeclasses store")?,
    }))
}

impl RuntimeClass {
    /// Upstream `prepareObjects`: the pod's class, `None` when the pod names none; an
    /// unknown class is the 403 reason.
    async fn class_of(&self, a: &Attributes, pod: &Value) -> Result<Option<Arc<Value>>, ApiError> {
        // Any string, even "", names a class (upstream's field is a *string).
        let Some(name) = pod["spec"]["runtimeClassName"].as_str() else {
            return Ok(None);
        };
        match webhook::fresh_get(&self.classes, None, name).await? {
            Some(class) => Ok(Some(class)),
            None => Err(a.forbidden(format!("pod rejected: RuntimeClass {name:?} not found"))),
        }
    }
}

const OVERHEAD_MISMATCH: &str =
    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead";

/// Upstream `setOverhead`: the pod gets the class's `overhead.podFixed`.
pub(crate) fn set_overhead(pod: &mut Value, class: &Value) -> Result<(), String> {
    let Some(overhead) = class.get("overhead").filter(|o| !o.is_null()) else {
        return Ok(());
    };
    let pod_fixed = overhead.get("podFixed").cloned().unwrap_or(Value::Null);
    let given = &pod["spec"]["overhead"];
    if !given.is_null() && !same_resources(&pod_fixed, given) {
        return Err(OVERHEAD_MISMATCH.to_string());
    }
    set_or_remove(pod, "overhead", pod_fixed);
    Ok(())
}

/// Upstream `validateOverhead`: the final pod's overhead is the class's, or none
/// when the class defines none (or the pod names no class).
pub(crate) fn validate_overhead(pod: &Value, class: Option<&Value>) -> Result<(), String> {
    let given = &pod["spec"]["overhead"];
    match class
        .and_then(|c| c.get("overhead"))
        .filter(|o| !o.is_null())
    {
        Some(overhead) => {
            let pod_fixed = overhead.get("podFixed").unwrap_or(&Value::Null);
            if !same_resources(pod_fixed, given) {
                return Err(OVERHEAD_MISMATCH.to_string());
            }
        }
        None if !given.is_null() => {
            return Err(
                "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
                    .to_string(),
            );
        }
        None => {}
    }
    Ok(())
}

/// `apiequality.Semantic.DeepEqual` of two resource lists: a missing and an empty
/// list are equal, quantities compare by value (`1` equals `1000m`).
fn same_resources(a: &Value, b: &Value) -> bool {
    let empty = Map::new();
    let a = a.as_object().unwrap_or(&empty);
    let b = b.as_object().unwrap_or(&empty);
    a.len() == b.len()
        && a.iter().all(|(name, qa)| {
            b.get(name).is_some_and(|qb| {
                let (qa, qb) = (qa.as_str().unwrap_or(""), qb.as_str().unwrap_or(""));
                match (quantity::milli(qa), quantity::milli(qb)) {
                    (Some(x), Some(y)) => x == y,
                    _ => qa == qb,
                }
            })
        })
}

/// Upstream `setScheduling`: the class's node selector merged into the pod's (a
/// conflicting value is the error) and its tolerations merged with the pod's.
pub(crate) fn set_scheduling(pod: &mut Value, class: &Value) -> Result<(), String> {
    let Some(scheduling) = class.get("scheduling").filter(|s| !s.is_null()) else {
        return Ok(());
    };
    let class_selector: BTreeMap<String, String> =
        serde_json::from_value(scheduling["nodeSelector"].clone()).unwrap_or_default();
    let selector = match pod["spec"]["nodeSelector"].as_object() {
        None => scheduling["nodeSelector"].clone(),
        Some(pod_selector) => {
            let mut merged = pod_selector.clone();
            for (key, class_value) in &class_selector {
                if let Some(pod_value) = merged.get(key).and_then(Value::as_str)
                    && pod_value != class_value
                {
                    return Err(format!(
                        "conflict: runtimeClass.scheduling.nodeSelector[{key}] = {class_value}; \
                         pod.spec.nodeSelector[{key}] = {pod_value}"
                    ));
                }
                merged.insert(key.clone(), Value::String(class_value.clone()));
            }
            Value::Object(merged)
        }
    };
    let tolerations_of =
        |v: &Value| -> Vec<Toleration> { serde_json::from_value(v.clone()).unwrap_or_default() };
    let merged = merge_tolerations(
        tolerations_of(&pod["spec"]["tolerations"]),
        tolerations_of(&scheduling["tolerations"]),
    );
    set_or_remove(pod, "nodeSelector", selector);
    let merged = if merged.is_empty() {
        Value::Null
    } else {
        serde_json::to_value(merged).unwrap_or(Value::Null)
    };
    set_or_remove(pod, "tolerations", merged);
    Ok(())
}

/// Sets `spec.<field>`, or removes it for null (as Go's omitempty leaves a nil out).
fn set_or_remove(pod: &mut Value, field: &str, value: Value) {
    if !pod["spec"].is_object() {
        pod["spec"] = Value::Object(Map::new());
    }
    if let Some(spec) = pod["spec"].as_object_mut() {
        if value.is_null() {
            spec.remove(field);
        } else {
            spec.insert(field.to_string(), value);
        }
    }
}

/// A toleration's fields as Go compares them (unset and empty are the same).
fn toleration_fields(t: &Toleration) -> (&str, &str, &str, &str, Option<i64>) {
    (
        t.key.as_deref().unwrap_or(""),
        t.operator.as_deref().unwrap_or(""),
        t.value.as_deref().unwrap_or(""),
        t.effect.as_deref().unwrap_or(""),
        t.toleration_seconds,
    )
}

/// Upstream `isSuperset`: whether `ss` tolerates everything `t` does.
fn is_superset(ss: &Toleration, t: &Toleration) -> bool {
    let (ss_key, ss_op, ss_value, ss_effect, ss_seconds) = toleration_fields(ss);
    let (t_key, t_op, t_value, t_effect, t_seconds) = toleration_fields(t);
    if toleration_fields(ss) == toleration_fields(t) {
        return true;
    }
    // An empty key with Exists matches every key.
    if t_key != ss_key && (!ss_key.is_empty() || ss_op != "Exists") {
        return false;
    }
    // An empty effect matches every effect.
    if t_effect != ss_effect && !ss_effect.is_empty() {
        return false;
    }
    if ss_effect == "NoExecute"
        && let Some(ss_seconds) = ss_seconds
        && t_seconds.is_none_or(|t| t > ss_seconds)
    {
        return false;
    }
    match ss_op {
        "" | "Equal" => t_op == "Equal" && t_value == ss_value,
        "Exists" => true,
        _ => false,
    }
}

/// Upstream `tolerations.MergeTolerations`: the pod's then the class's tolerations,
/// without those another one covers (of two equal ones, the first is kept).
pub(crate) fn merge_tolerations(
    first: Vec<Toleration>,
    second: Vec<Toleration>,
) -> Vec<Toleration> {
    let all: Vec<Toleration> = first.into_iter().chain(second).collect();
    let mut merged: Vec<Toleration> = Vec::new();
    for (i, t) in all.iter().enumerate() {
        if merged.iter().any(|m| is_superset(m, t)) {
            continue;
        }
        let covered_later = all[i + 1..]
            .iter()
            .any(|later| toleration_fields(later) != toleration_fields(t) && is_superset(later, t));
        if !covered_later {
            merged.push(t.clone());
        }
    }
    merged
}

#[async_trait]
impl Plugin for RuntimeClass {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        a.is_pod_write(&[Operation::Create])
    }

    async fn admit(
        &self,
        a: &Attributes,
        pod: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(class) = self.class_of(a, pod).await? else {
            return Ok(());
        };
        set_overhead(pod, &class).map_err(|e| a.forbidden(e))?;
        set_scheduling(pod, &class).map_err(|e| a.forbidden(e))
    }

    async fn validate(
        &self,
        a: &Attributes,
        pod: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(pod) = pod else { return Ok(()) };
        let class = self.class_of(a, pod).await?;
        validate_overhead(pod, class.as_deref()).map_err(|e| a.forbidden(e))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn toleration(v: Value) -> Toleration {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn overhead_is_set_and_must_match() {
        let class = json!({"overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}}});
        let mut pod = json!({"spec": {"runtimeClassName": "kata"}});
        set_overhead(&mut pod, &class).unwrap();
        assert_eq!(
            pod["spec"]["overhead"],
            json!({"cpu": "250m", "memory": "120Mi"})
        );
        validate_overhead(&pod, Some(&class)).unwrap();

        // The same amounts written differently are the same overhead.
        let mut same = json!({"spec": {"overhead": {"cpu": "0.25", "memory": "120Mi"}}});
        set_overhead(&mut same, &class).unwrap();
        let mut other = json!({"spec": {"overhead": {"cpu": "1"}}});
        assert_eq!(
            set_overhead(&mut other, &class).unwrap_err(),
            OVERHEAD_MISMATCH
        );

        let bare = json!({"handler": "runc"});
        let mut pod = json!({"spec": {"overhead": {"cpu": "1"}}});
        set_overhead(&mut pod, &bare).unwrap();
        assert_eq!(
            validate_overhead(&pod, Some(&bare)).unwrap_err(),
            "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
        );
        assert!(validate_overhead(&pod, None).is_err());
        validate_overhead(&json!({"spec": {}}), None).unwrap();
    }

    #[test]
    fn node_selector_merges_and_conflicts() {
        let class = json!({"scheduling": {"nodeSelector": {"runtime": "kata", "zone": "a"}}});
        let mut none = json!({"spec": {}});
        set_scheduling(&mut none, &class).unwrap();
        assert_eq!(
            none["spec"]["nodeSelector"],
            json!({"runtime": "kata", "zone": "a"})
        );
        assert!(none["spec"].get("tolerations").is_none());

        let mut own = json!({"spec": {"nodeSelector": {"disk": "ssd", "zone": "a"}}});
        set_scheduling(&mut own, &class).unwrap();
        assert_eq!(
            own["spec"]["nodeSelector"],
            json!({"disk": "ssd", "runtime": "kata", "zone": "a"})
        );

        let mut conflict = json!({"spec": {"nodeSelector": {"zone": "b"}}});
        assert_eq!(
            set_scheduling(&mut conflict, &class).unwrap_err(),
            "conflict: runtimeClass.scheduling.nodeSelector[zone] = a; pod.spec.nodeSelector[zone] = b"
        );
    }

    #[test]
    fn tolerations_merge_as_upstream() {
        let exists_all = toleration(json!({"operator": "Exists"}));
        let kata = toleration(json!({"key": "kata", "operator": "Exists", "effect": "NoSchedule"}));
        let kata_equal = toleration(
            json!({"key": "kata", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}),
        );
        let gpu = toleration(json!({"key": "gpu", "operator": "Equal", "value": "x"}));
        // Appended after the pod's own.
        assert_eq!(
            merge_tolerations(vec![gpu.clone()], vec![kata.clone()]),
            vec![gpu.clone(), kata.clone()]
        );
        // A covered toleration is dropped wherever it is; equal ones are kept once.
        assert_eq!(
            merge_tolerations(vec![kata_equal.clone(), gpu.clone()], vec![kata.clone()]),
            vec![gpu.clone(), kata.clone()]
        );
        assert_eq!(
            merge_tolerations(vec![kata.clone()], vec![kata.clone()]),
            vec![kata.clone()]
        );
        assert_eq!(
            merge_tolerations(vec![gpu, kata], vec![exists_all.clone()]),
            vec![exists_all]
        );
        // NoExecute with a bound only covers tighter bounds.
        let bounded = |s: i64| {
            toleration(
                json!({"key": "k", "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": s}),
            )
        };
        assert_eq!(
            merge_tolerations(vec![bounded(60)], vec![bounded(30)]),
            vec![bounded(60)]
        );
        assert_eq!(
            merge_tolerations(vec![bounded(30)], vec![bounded(60)]),
            vec![bounded(60)]
        );
        let mut pod = json!({"spec": {"tolerations": [{"key": "a", "operator": "Exists"}]}});
        let class = json!({"scheduling": {"tolerations": [{"key": "b", "operator": "Exists"}]}});
        set_scheduling(&mut pod, &class).unwrap();
        assert_eq!(
            pod["spec"]["tolerations"],
            json!([{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}])
        );
    }
}
