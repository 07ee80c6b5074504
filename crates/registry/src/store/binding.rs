//! `pods/<name>/binding`: assigning a pod to a node, as upstream's
//! `BindingREST.assignPod` does — one guaranteed update that sets `spec.nodeName`, the
//! binding's annotations and `PodScheduled=True`. Pod update validation does not apply:
//! binding is the one way `spec.nodeName` changes after creation.

use ferrokube_apimachinery::errors::{ApiError, FieldError, FieldPath};
use ferrokube_storage::{Preconditions, Update};
use serde_json::{Value, json};

use super::{Store, WriteOptions, encode};
use crate::cache::decode_stored;
use crate::errors::abort;
use crate::meta;

impl Store {
    /// Binds pod `name` to the node named in `binding.target.name`; returns the pod.
    pub async fn bind(
        &self,
        ns: Option<&str>,
        name: &str,
        binding: &Value,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let target = validate_binding(name, binding)?;
        let annotations = binding["metadata"]["annotations"].clone();
        let preconditions = Preconditions {
            uid: binding["metadata"]["uid"]
                .as_str()
                .filter(|uid| !uid.is_empty())
                .map(str::to_string),
            revision: match binding["metadata"]["resourceVersion"].as_str() {
                Some(rv) if !rv.is_empty() => Some(super::parse_rv(rv)?),
                _ => None,
            },
        };
        let now = self.now();
        let conflict = |why: String| ApiError::conflict("", "pods/binding", name, why);
        let key = self.key(ns, name);
        if opts.dry_run {
            let current = self
                .storage
                .get(&key, None)
                .await
                .map_err(|e| self.err(name, e))?;
            preconditions
                .check(&current)
                .map_err(|e| self.err(name, e))?;
            let mut pod = decode_stored(&current.value, current.mod_revision)
                .ok_or_else(|| ApiError::internal("stored object is not JSON"))?;
            assign_pod(&mut pod, &target, &annotations, &now).map_err(conflict)?;
            return Ok(pod);
        }
        let kv = self
            .storage
            .guaranteed_update(&key, &preconditions, &mut |current| {
                let Some(current) = current else {
                    return Err(abort(ApiError::not_found("", "pods", name)));
                };
                let mut pod = decode_stored(&current.value, current.mod_revision)
                    .ok_or_else(|| abort(ApiError::internal("stored object is not JSON")))?;
                assign_pod(&mut pod, &target, &annotations, &now)
                    .map_err(|why| abort(conflict(why)))?;
                Ok(Update::Write(encode(&pod).map_err(abort)?))
            })
            .await
            .map_err(|e| self.err(name, e))?;
        decode_stored(&kv.value, kv.mod_revision)
            .ok_or_else(|| ApiError::internal("stored object is not JSON"))
    }
}

/// The node a binding targets, after upstream's checks of the Binding object.
fn validate_binding(name: &str, binding: &Value) -> Result<String, ApiError> {
    if let Some(body_name) = binding["metadata"]["name"].as_str()
        && !body_name.is_empty()
        && body_name != name
    {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Binding object",
        ));
    }
    let target = &binding["target"];
    let mut errors = Vec::new();
    let node = target["name"].as_str().unwrap_or_default();
    if node.is_empty() {
        errors.push(FieldError::required(
            &FieldPath::new("target").child("name"),
            "",
        ));
    }
    if let Some(kind) = target["kind"].as_str()
        && !kind.is_empty()
        && kind != "Node"
    {
        errors.push(FieldError::not_supported(
            &FieldPath::new("target").child("kind"),
            json!(kind),
            &["Node"],
        ));
    }
    if errors.is_empty() {
        Ok(node.to_string())
    } else {
        Err(ApiError::invalid("", "Binding", name, errors))
    }
}

/// Upstream's `setPodNodeNameAndMetadata` on a decoded pod.
fn assign_pod(pod: &mut Value, node: &str, annotations: &Value, now: &str) -> Result<(), String> {
    let pod_name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if meta::has_deletion_timestamp(pod) {
        return Err(format!(
            "pod {pod_name} is being deleted, cannot be assigned to a host"
        ));
    }
    if let Some(existing) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return Err(format!(
            "pod {pod_name} is already assigned to node {existing:?}"
        ));
    }
    if pod["spec"]["schedulingGates"]
        .as_array()
        .is_some_and(|gates| !gates.is_empty())
    {
        return Err(format!(
            "pod {pod_name} has non-empty .spec.schedulingGates"
        ));
    }
    pod["spec"]["nodeName"] = json!(node);
    if let Some(extra) = annotations.as_object().filter(|a| !a.is_empty()) {
        let metadata = &mut pod["metadata"];
        if !metadata["annotations"].is_object() {
            metadata["annotations"] = json!({});
        }
        for (k, v) in extra {
            metadata["annotations"][k] = v.clone();
        }
    }
    set_pod_scheduled(pod, now);
    Ok(())
}

/// Upstream's `UpdatePodCondition` for `PodScheduled=True`: the transition time moves
/// only when the status changes.
fn set_pod_scheduled(pod: &mut Value, now: &str) {
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    let conditions = &mut pod["status"]["conditions"];
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let list = conditions.as_array_mut().expect("conditions is an array");
    match list.iter_mut().find(|c| c["type"] == "PodScheduled") {
        Some(existing) => {
            if existing["status"] != "True" {
                existing["lastTransitionTime"] = json!(now);
            }
            existing["status"] = json!("True");
            if let Some(c) = existing.as_object_mut() {
                c.remove("reason");
                c.remove("message");
            }
        }
        None => list.push(json!({
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": null,
            "lastTransitionTime": now,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending_pod() -> Value {
        json!({
            "metadata": {"name": "p", "annotations": {"a": "1"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            "status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/1 nodes are available", "lastTransitionTime": "2026-01-01T00:00:00Z"
            }]}
        })
    }

    #[test]
    fn assigns_node_annotations_and_condition() {
        let mut pod = pending_pod();
        assign_pod(&mut pod, "n1", &json!({"b": "2"}), "2026-11-21T00:00:00Z").unwrap();
        assert_eq!(pod["spec"]["nodeName"], "n1");
        assert_eq!(pod["metadata"]["annotations"], json!({"a": "1", "b": "2"}));
        let conditions = pod["status"]["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0]["status"], "True");
        assert_eq!(conditions[0]["lastTransitionTime"], "2026-11-21T00:00:00Z");
        assert!(conditions[0].get("reason").is_none());
    }

    #[test]
    fn refuses_bound_deleting_and_gated_pods() {
        let mut bound = pending_pod();
        bound["spec"]["nodeName"] = json!("n0");
        let err = assign_pod(&mut bound, "n1", &Value::Null, "t").unwrap_err();
        assert_eq!(err, "pod p is already assigned to node \"n0\"");

        let mut deleting = pending_pod();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-11-21T00:00:00Z");
        let err = assign_pod(&mut deleting, "n1", &Value::Null, "t").unwrap_err();
        assert!(err.contains("is being deleted"), "{err}");

        let mut gated = pending_pod();
        gated["spec"]["schedulingGates"] = json!([{"name": "g"}]);
        let err = assign_pod(&mut gated, "n1", &Value::Null, "t").unwrap_err();
        assert!(err.contains("schedulingGates"), "{err}");
    }

    #[test]
    fn binding_object_checks() {
        assert_eq!(
            validate_binding("p", &json!({"target": {"kind": "Node", "name": "n1"}})).unwrap(),
            "n1"
        );
        let err = validate_binding("p", &json!({"target": {}})).unwrap_err();
        assert_eq!(err.code, 422);
        let err =
            validate_binding("p", &json!({"target": {"kind": "Pod", "name": "x"}})).unwrap_err();
        assert_eq!(err.code, 422);
        let err = validate_binding(
            "p",
            &json!({"metadata": {"name": "q"}, "target": {"name": "n"}}),
        )
        .unwrap_err();
        assert_eq!(err.code, 400);
    }
}
