//! NodeAffinity: `nodeSelector` and required node affinity (filter), preferred node
//! affinity (score), plus the profile's `addedAffinity`.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeAffinity as ApiNodeAffinity, Pod, PreferredSchedulingTerm};
use serde::Deserialize;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::*;
use crate::status::Status;
use crate::types::{
    PodInfo, node_selector_matches, node_selector_term_matches,
    pod_matches_node_selector_and_affinity,
};

pub const NAME: &str = "NodeAffinity";
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";
pub const ERR_REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";
pub const ERR_REASON_CONFLICT: &str = "pod affinity terms conflict";

/// `NodeAffinityArgs`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAffinityArgs {
    #[serde(default)]
    pub added_affinity: Option<ApiNodeAffinity>,
}

#[derive(Debug)]
pub struct NodeAffinity {
    added: Option<ApiNodeAffinity>,
}

impl NodeAffinity {
    pub fn new(args: NodeAffinityArgs) -> Self {
        NodeAffinity {
            added: args.added_affinity,
        }
    }

    fn added_matches(&self, node: &k8s_openapi::api::core::v1::Node) -> bool {
        self.added
            .as_ref()
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .is_none_or(|sel| node_selector_matches(sel, node))
    }
}

fn preferred(pod: &Pod) -> &[PreferredSchedulingTerm] {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or(&[])
}

impl PreFilterPlugin for NodeAffinity {
    fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let spec = pod.pod.spec.as_ref();
        let required = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            });
        let has_selector = spec.and_then(|s| s.node_selector.as_ref()).is_some();
        let has_added = self
            .added
            .as_ref()
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .is_some();
        if required.is_none() && !has_selector && !has_added {
            return (None, Status::skip());
        }
        let Some(required) = required else {
            return (None, Status::success());
        };
        // Terms that pin metadata.name narrow the candidate nodes.
        let mut names: Option<HashSet<String>> = None;
        for t in &required.node_selector_terms {
            let mut term_names: Option<HashSet<String>> = None;
            for r in t.match_fields.iter().flatten() {
                if r.key == "metadata.name" && r.operator == "In" {
                    let s: HashSet<String> = r.values.iter().flatten().cloned().collect();
                    term_names = Some(match term_names {
                        None => s,
                        Some(prev) => prev.intersection(&s).cloned().collect(),
                    });
                }
            }
            let Some(tn) = term_names else {
                return (None, Status::success());
            };
            names.get_or_insert_with(HashSet::new).extend(tn);
        }
        match names {
            Some(n) if n.is_empty() => (None, Status::unresolvable(ERR_REASON_CONFLICT)),
            Some(n) => (
                Some(PreFilterResult {
                    node_names: Some(n),
                }),
                Status::success(),
            ),
            None => (None, Status::success()),
        }
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let n = node.node();
        if !self.added_matches(n) {
            return Status::unresolvable(ERR_REASON_ENFORCED);
        }
        if pod_matches_node_selector_and_affinity(&pod.pod, n) {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_POD)
        }
    }
}

impl PreScorePlugin for NodeAffinity {
    fn pre_score(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
        _: &Snapshot,
    ) -> Status {
        let added_pref = self
            .added
            .as_ref()
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .is_some_and(|v| !v.is_empty());
        if preferred(&pod.pod).is_empty() && !added_pref {
            return Status::skip();
        }
        Status::success()
    }
}

impl ScorePlugin for NodeAffinity {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        let n = node.node();
        let added = self
            .added
            .as_ref()
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_deref()
            })
            .unwrap_or(&[]);
        let score: i64 = preferred(&pod.pod)
            .iter()
            .chain(added.iter())
            .filter(|t| t.weight != 0 && node_selector_term_matches(&t.preference, n))
            .map(|t| t.weight as i64)
            .sum();
        (score, Status::success())
    }
    fn has_normalize(&self) -> bool {
        true
    }
    fn normalize_score(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, false, scores);
        Status::success()
    }
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let hint = |pod: &Pod, _: EventObject<'_>, new: EventObject<'_>| match new {
            EventObject::Node(n) if !pod_matches_node_selector_and_affinity(pod, n) => {
                QueueingHint::Skip
            }
            _ => QueueingHint::Queue,
        };
        vec![
            ClusterEventWithHint::with_hint(EVENT_NODE_ADD, hint),
            ClusterEventWithHint::with_hint(EVENT_NODE_UPDATE, hint),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::*;
    use crate::status::Code;
    use serde_json::json;

    fn snap() -> Snapshot {
        snapshot(vec![
            (
                node(
                    "n1",
                    json!({"metadata": {"labels": {"zone": "a", "disk": "ssd"}}}),
                ),
                vec![],
            ),
            (
                node("n2", json!({"metadata": {"labels": {"zone": "b"}}})),
                vec![],
            ),
            (
                node(
                    "n3",
                    json!({"metadata": {"labels": {"zone": "c", "disk": "ssd"}}}),
                ),
                vec![],
            ),
        ])
    }

    fn ok(v: &[(String, Status)]) -> Vec<bool> {
        v.iter().map(|(_, s)| s.is_success()).collect()
    }

    #[test]
    fn filter_table() {
        let pl = NodeAffinity::new(NodeAffinityArgs::default());
        let required = |terms: serde_json::Value| json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}});
        let cases = [
            (json!({}), vec![true, true, true]),
            (
                json!({"spec": {"nodeSelector": {"disk": "ssd"}}}),
                vec![true, false, true],
            ),
            (
                json!({"spec": {"nodeSelector": {"disk": "hdd"}}}),
                vec![false, false, false],
            ),
            (
                required(
                    json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]),
                ),
                vec![true, true, false],
            ),
            // Terms are ORed.
            (
                required(json!([
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["c"]}]}])),
                vec![true, false, true],
            ),
            // nodeSelector and affinity are ANDed.
            (
                json!({"spec": {"nodeSelector": {"disk": "ssd"}, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}]}}}}}),
                vec![false, false, true],
            ),
            // An empty term list matches nothing.
            (required(json!([])), vec![false, false, false]),
            (
                required(
                    json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]),
                ),
                vec![false, true, false],
            ),
        ];
        for (p, want) in cases {
            let got = filter_all(&pl, &pod("p", p.clone()), &snap());
            assert_eq!(ok(&got), want, "{p}");
            for (_, s) in got.iter().filter(|(_, s)| !s.is_success()) {
                assert_eq!(s.code, Code::UnschedulableAndUnresolvable);
                assert_eq!(s.message(), ERR_REASON_POD);
            }
        }
    }

    #[test]
    fn prefilter_narrows_by_node_name() {
        let pl = NodeAffinity::new(NodeAffinityArgs::default());
        let p = pod(
            "p",
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n3"]}]}]}}}}}),
        );
        let (r, s) = PreFilterPlugin::pre_filter(&pl, &mut CycleState::new(), &pi(&p), &snap());
        assert!(s.is_success());
        let names = r.unwrap().node_names.unwrap();
        assert_eq!(names.len(), 3);
        let plain = pod("q", json!({}));
        assert!(
            PreFilterPlugin::pre_filter(&pl, &mut CycleState::new(), &pi(&plain), &snap())
                .1
                .is_skip()
        );
    }

    #[test]
    fn added_affinity() {
        let pl = NodeAffinity::new(
            serde_json::from_value(json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}))
            .unwrap(),
        );
        let got = filter_all(&pl, &pod("p", json!({})), &snap());
        assert_eq!(ok(&got), vec![false, true, false]);
        assert_eq!(got[0].1.message(), ERR_REASON_ENFORCED);
    }

    #[test]
    fn score_preferred() {
        let pl = NodeAffinity::new(NodeAffinityArgs::default());
        let p = pod(
            "p",
            json!({"spec": {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 2, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}},
                {"weight": 8, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["c"]}]}}]}}}}),
        );
        assert_eq!(
            score_all(&pl, &p, &snap()),
            vec![("n1".into(), 20), ("n2".into(), 0), ("n3".into(), 100)]
        );
    }
}
