//! Node selector matching (upstream `component-helpers/scheduling/corev1/nodeaffinity`),
//! shared by the scheduler, the DaemonSet controller and PersistentVolume node affinity.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec,
};

/// The one field a `matchFields` requirement may name.
pub const NAME_FIELD: &str = "metadata.name";

fn node_labels(node: &Node) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// A `NodeSelectorRequirement` against one value (a label's or a field's; `None` when
/// the node has none). `Gt`/`Lt` take exactly one integer on both sides.
pub fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let ([bound], Some(v)) = (values, value) else {
                return false;
            };
            let (Ok(v), Ok(bound)) = (v.parse::<i64>(), bound.parse::<i64>()) else {
                return false;
            };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// A term matches when all its label expressions and all its fields (only
/// `metadata.name` exists) match; an empty term matches nothing.
pub fn node_selector_term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let labels = node_labels(node);
    exprs
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields
            .iter()
            .all(|r| r.key == NAME_FIELD && requirement_matches(r, node.metadata.name.as_deref()))
}

/// A selector matches when any of its terms does.
pub fn node_selector_matches(selector: &NodeSelector, node: &Node) -> bool {
    selector
        .node_selector_terms
        .iter()
        .any(|t| node_selector_term_matches(t, node))
}

/// `GetRequiredNodeAffinity(pod).Match(node)`: the pod's `nodeSelector` and its
/// required node affinity both match.
pub fn pod_spec_matches_node(spec: &PodSpec, node: &Node) -> bool {
    let labels = node_labels(node);
    if let Some(wanted) = &spec.node_selector
        && !wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    spec.affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_none_or(|required| node_selector_matches(required, node))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(labels: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1", "labels": labels}})).unwrap()
    }

    fn term(v: serde_json::Value) -> NodeSelectorTerm {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn operators() {
        let n = node(json!({"zone": "a", "gpus": "4"}));
        let cases = [
            (
                json!({"key": "zone", "operator": "In", "values": ["a", "b"]}),
                true,
            ),
            (
                json!({"key": "zone", "operator": "In", "values": ["b"]}),
                false,
            ),
            (
                json!({"key": "zone", "operator": "NotIn", "values": ["b"]}),
                true,
            ),
            (
                json!({"key": "rack", "operator": "NotIn", "values": ["b"]}),
                true,
            ),
            (json!({"key": "zone", "operator": "Exists"}), true),
            (json!({"key": "zone", "operator": "DoesNotExist"}), false),
            (
                json!({"key": "gpus", "operator": "Gt", "values": ["3"]}),
                true,
            ),
            (
                json!({"key": "gpus", "operator": "Lt", "values": ["3"]}),
                false,
            ),
            (
                json!({"key": "gpus", "operator": "Gt", "values": ["3", "1"]}),
                false,
            ),
            (
                json!({"key": "zone", "operator": "Gt", "values": ["3"]}),
                false,
            ),
            (
                json!({"key": "zone", "operator": "Near", "values": ["a"]}),
                false,
            ),
        ];
        for (req, want) in cases {
            let t = term(json!({"matchExpressions": [req.clone()]}));
            assert_eq!(node_selector_term_matches(&t, &n), want, "{req}");
        }
    }

    #[test]
    fn fields_terms_and_selectors() {
        let n = node(json!({"zone": "a"}));
        let by_name = term(
            json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}),
        );
        assert!(node_selector_term_matches(&by_name, &n));
        let other_field = term(
            json!({"matchFields": [{"key": "spec.unschedulable", "operator": "NotIn", "values": ["x"]}]}),
        );
        assert!(!node_selector_term_matches(&other_field, &n));
        assert!(!node_selector_term_matches(&term(json!({})), &n));
        let selector: NodeSelector = serde_json::from_value(json!({"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}))
        .unwrap();
        assert!(node_selector_matches(&selector, &n));
    }

    #[test]
    fn pod_node_selector_and_required_affinity() {
        let n = node(json!({"zone": "a", "disk": "ssd"}));
        let spec = |v: serde_json::Value| -> PodSpec {
            serde_json::from_value(
                json!({"containers": []})
                    .as_object()
                    .unwrap()
                    .clone()
                    .into_iter()
                    .chain(v.as_object().unwrap().clone())
                    .collect::<serde_json::Map<_, _>>()
                    .into(),
            )
            .unwrap()
        };
        assert!(pod_spec_matches_node(&spec(json!({})), &n));
        assert!(pod_spec_matches_node(
            &spec(json!({"nodeSelector": {"disk": "ssd"}})),
            &n
        ));
        assert!(!pod_spec_matches_node(
            &spec(json!({"nodeSelector": {"disk": "hdd"}})),
            &n
        ));
        let affinity = |zone: &str| {
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "zone", "operator": "In", "values": [zone]}]}]}}}})
        };
        assert!(pod_spec_matches_node(&spec(affinity("a")), &n));
        assert!(!pod_spec_matches_node(&spec(affinity("b")), &n));
    }
}
