//! Shared pure helpers (upstream's `controller_utils.go`, `podutil`, label selectors,
//! controllerRefs). No IO; time is passed in.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::Timestamp;

/// Whether two ControllerRevisions' data (`{"spec": {"template": ...}}`, the patch a
/// StatefulSet or DaemonSet revision holds) hold the same template, compared as Go
/// compares the structs: an unset non-pointer struct equals its zero value (a
/// container without `resources` and one with `resources: {}`). A revision written
/// before the apiserver stored those zero values still matches its set's template
/// once the set has them, so no rollout follows.
pub fn same_revision_data(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    let go_form = |data: &serde_json::Value| {
        let mut data = data.clone();
        if let Some(template) = data.pointer_mut("/spec/template") {
            to_template_go_form(template);
        }
        data
    };
    a == b || go_form(a) == go_form(b)
}

/// A pod template as Go's JSON encoder writes its struct (unset non-pointer structs as
/// their zero values), for comparing templates as Go compares them.
pub fn to_template_go_form(template: &mut serde_json::Value) {
    ferrokube_protobuf::to_go_json_form("v1", "PodTemplateSpec", template);
}

/// Whether the object still holds `finalizer`.
pub fn has_finalizer(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers.iter().flatten().any(|f| f == finalizer)
}

/// Matches `labels` against a `metav1.LabelSelector` (matchLabels AND every
/// matchExpression). An empty selector matches everything, as upstream's
/// `LabelSelectorAsSelector`; callers that treat an empty selector as "nothing"
/// (ReplicaSets, Services) check [`selector_is_empty`] first.
pub fn selector_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if let Some(ml) = &sel.match_labels {
        for (k, v) in ml {
            if labels.get(k) != Some(v) {
                return false;
            }
        }
    }
    for e in sel.match_expressions.iter().flatten() {
        let val = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        let ok = match e.operator.as_str() {
            "In" => val.is_some_and(|v| values.contains(v)),
            "NotIn" => val.is_none_or(|v| !values.contains(v)),
            "Exists" => val.is_some(),
            "DoesNotExist" => val.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Whether a selector has neither matchLabels nor matchExpressions.
pub fn selector_is_empty(sel: &LabelSelector) -> bool {
    sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && sel.match_expressions.as_ref().is_none_or(|m| m.is_empty())
}

/// Matches a plain map selector (Services, ReplicationControllers).
pub fn map_selector_matches(
    sel: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> bool {
    sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The object's labels (empty when unset).
pub fn labels(meta: &ObjectMeta) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

/// The owner reference with `controller: true` (upstream `metav1.GetControllerOf`).
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// A controllerRef to an owner (upstream `metav1.NewControllerRef`):
/// `controller: true`, `blockOwnerDeletion: true`.
pub fn new_controller_ref(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        name: name.to_string(),
        uid: uid.to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether the object is being deleted.
pub fn is_deleting(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
}

/// The pod's phase (`Pending` when unset).
pub fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// The pod's node (`None` when unscheduled).
pub fn pod_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Upstream `controller.IsPodActive`: not Succeeded/Failed and not being deleted.
pub fn is_pod_active(pod: &Pod) -> bool {
    let phase = pod_phase(pod);
    phase != "Succeeded" && phase != "Failed" && pod.metadata.deletion_timestamp.is_none()
}

/// Whether the pod reached a terminal phase.
pub fn is_pod_terminal(pod: &Pod) -> bool {
    matches!(pod_phase(pod), "Succeeded" | "Failed")
}

/// The pod condition of type `type_`.
pub fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Upstream `podutil.IsPodReady`: the Ready condition is True.
pub fn is_pod_ready(pod: &Pod) -> bool {
    pod_condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

/// Upstream `podutil.IsPodAvailable`: ready for at least `min_ready_seconds` at `now`.
pub fn is_pod_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    let Some(c) = pod_condition(pod, "Ready").filter(|c| c.status == "True") else {
        return false;
    };
    if min_ready_seconds <= 0 {
        return true;
    }
    match &c.last_transition_time {
        Some(Time(t)) => t.as_second() + i64::from(min_ready_seconds) <= now.as_second(),
        None => false,
    }
}

/// Seconds until a ready pod becomes available (`None` if not ready or already available).
pub fn seconds_until_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> Option<i64> {
    if min_ready_seconds <= 0 {
        return None;
    }
    let c = pod_condition(pod, "Ready").filter(|c| c.status == "True")?;
    let t = c.last_transition_time.as_ref()?.0.as_second();
    let left = t + i64::from(min_ready_seconds) - now.as_second();
    (left > 0).then_some(left)
}

/// The creation timestamp in seconds (0 when unset).
pub fn created_secs(meta: &ObjectMeta) -> i64 {
    meta.creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .unwrap_or(0)
}

/// Upstream's `intstr.GetScaledValueFromIntOrPercent`: an absolute value, or
/// `percent * total / 100` rounded up or down.
pub fn scaled_value(
    v: Option<&k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
    total: i32,
    round_up: bool,
) -> Result<i32, String> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match v {
        None => Ok(0),
        Some(IntOrString::Int(i)) => Ok(*i),
        Some(IntOrString::String(s)) => {
            let p = s
                .strip_suffix('%')
                .and_then(|p| p.parse::<i64>().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            let prod = p * i64::from(total);
            let v = if round_up {
                (prod + 99).div_euclid(100)
            } else {
                prod.div_euclid(100)
            };
            Ok(v as i32)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn l(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors() {
        let sel = LabelSelector {
            match_labels: Some(l(&[("app", "web")])),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["a".into(), "b".into()]),
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        };
        let cases: &[(&[(&str, &str)], bool)] = &[
            (&[("app", "web"), ("tier", "a")], true),
            (&[("app", "web"), ("tier", "c")], false),
            (&[("app", "web")], false),
            (&[("app", "web"), ("tier", "b"), ("canary", "1")], false),
            (&[("app", "db"), ("tier", "a")], false),
        ];
        for (labels, want) in cases {
            assert_eq!(selector_matches(&sel, &l(labels)), *want, "{labels:?}");
        }
        assert!(selector_is_empty(&LabelSelector::default()));
        assert!(!selector_is_empty(&sel));
    }

    #[test]
    fn scaled_values_round_like_upstream() {
        let p = |s: &str| IntOrString::String(s.into());
        let cases = [
            (Some(IntOrString::Int(3)), 10, true, 3),
            (Some(p("25%")), 10, true, 3),
            (Some(p("25%")), 10, false, 2),
            (Some(p("10%")), 1, true, 1),
            (Some(p("10%")), 1, false, 0),
            (Some(p("100%")), 7, false, 7),
            (None, 7, true, 0),
        ];
        for (v, total, up, want) in cases {
            assert_eq!(
                scaled_value(v.as_ref(), total, up).unwrap(),
                want,
                "{v:?} {total} {up}"
            );
        }
        assert!(scaled_value(Some(&p("x%")), 10, true).is_err());
    }

    #[test]
    fn revision_data_compares_as_go_compares_templates() {
        let data = |container: serde_json::Value| {
            serde_json::json!({"spec": {"template": {"$patch": "replace",
                "metadata": {"labels": {"app": "a"}},
                "spec": {"containers": [container]}}}})
        };
        let bare = data(serde_json::json!({"name": "c", "image": "i"}));
        let zero = data(serde_json::json!({"name": "c", "image": "i", "resources": {}}));
        assert_ne!(bare, zero);
        assert!(same_revision_data(&bare, &zero));
        assert!(same_revision_data(&zero, &bare));
        let other = data(serde_json::json!({"name": "c", "image": "j", "resources": {}}));
        assert!(!same_revision_data(&bare, &other));
        let limited = data(serde_json::json!({"name": "c", "image": "i",
            "resources": {"limits": {"cpu": "1"}}}));
        assert!(!same_revision_data(&zero, &limited));
    }
}
