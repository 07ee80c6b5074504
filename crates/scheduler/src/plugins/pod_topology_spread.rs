//! PodTopologySpread: hard constraints (`DoNotSchedule`) filter, soft ones
//! (`ScheduleAnyway`) score; pods without constraints get the system default
//! constraints when they belong to a Service, ReplicationController, ReplicaSet or
//! StatefulSet.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use ferrokube_apimachinery::labels::{Operator, Requirement, Selector};
use k8s_openapi::api::core::v1::{Pod, TopologySpreadConstraint};
use serde::Deserialize;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::*;
use crate::status::Status;
use crate::types::{
    PodInfo, labels_of, pod_matches_node_selector_and_affinity, pod_namespace, pod_tolerations,
    tolerates_taint,
};

pub const NAME: &str = "PodTopologySpread";
pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";
const HOSTNAME: &str = "kubernetes.io/hostname";

/// A constraint as the args spell it (`v1.TopologySpreadConstraint` without selector).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DefaultConstraint {
    pub max_skew: i32,
    pub topology_key: String,
    pub when_unsatisfiable: String,
}

/// `PodTopologySpreadArgs`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTopologySpreadArgs {
    #[serde(default)]
    pub default_constraints: Vec<DefaultConstraint>,
    /// `System` (default) or `List`.
    #[serde(default)]
    pub defaulting_type: Option<String>,
}

/// The system default constraints.
pub fn system_default_constraints() -> Vec<DefaultConstraint> {
    vec![
        DefaultConstraint {
            max_skew: 3,
            topology_key: HOSTNAME.into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
        },
        DefaultConstraint {
            max_skew: 5,
            topology_key: "topology.kubernetes.io/zone".into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
        },
    ]
}

#[derive(Debug, Clone)]
struct Constraint {
    max_skew: i32,
    topology_key: String,
    selector: Selector,
    min_domains: i32,
    honor_affinity: bool,
    honor_taints: bool,
}

impl Constraint {
    fn node_included(&self, pod: &Pod, node: &NodeInfo) -> bool {
        if self.honor_affinity && !pod_matches_node_selector_and_affinity(pod, node.node()) {
            return false;
        }
        if self.honor_taints {
            let taints = node
                .node()
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or(&[]);
            if taints
                .iter()
                .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                .any(|t| !tolerates_taint(pod_tolerations(pod), t))
            {
                return false;
            }
        }
        true
    }
}

pub struct PodTopologySpread {
    defaults: Vec<DefaultConstraint>,
    system_defaulted: bool,
    lister: Arc<dyn ClusterLister>,
}

impl std::fmt::Debug for PodTopologySpread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodTopologySpread")
            .field("defaults", &self.defaults)
            .finish()
    }
}

fn count_matching(pods: &[Arc<PodInfo>], sel: &Selector, ns: &str) -> i64 {
    pods.iter()
        .filter(|p| {
            p.pod.metadata.deletion_timestamp.is_none()
                && pod_namespace(&p.pod) == ns
                && sel.matches(labels_of(&p.pod.metadata))
        })
        .count() as i64
}

fn node_has_keys(node: &NodeInfo, cs: &[Constraint]) -> bool {
    let l = node.labels();
    cs.iter().all(|c| l.contains_key(&c.topology_key))
}

#[derive(Debug, Clone, Default)]
struct FilterState {
    constraints: Vec<Constraint>,
    /// (key, value) -> matching pods.
    counts: HashMap<(String, String), i64>,
    /// Per constraint: the two smallest domain counts and the number of domains.
    min: Vec<i64>,
    domains: Vec<usize>,
}

impl FilterState {
    fn recompute_min(&mut self) {
        self.min = vec![i64::MAX; self.constraints.len()];
        self.domains = vec![0; self.constraints.len()];
        for ((k, _), n) in &self.counts {
            for (i, c) in self.constraints.iter().enumerate() {
                if &c.topology_key == k {
                    self.domains[i] += 1;
                    self.min[i] = self.min[i].min(*n);
                }
            }
        }
    }
    fn update(&mut self, pod: &Pod, node: &NodeInfo, other: &Pod, delta: i64) {
        let l = node.labels();
        if !node_has_keys(node, &self.constraints) {
            return;
        }
        if pod_namespace(other) != pod_namespace(pod) {
            return;
        }
        for c in &self.constraints {
            if !c.node_included(pod, node) || !c.selector.matches(labels_of(&other.metadata)) {
                continue;
            }
            let k = (c.topology_key.clone(), l[&c.topology_key].clone());
            *self.counts.entry(k).or_default() += delta;
        }
        self.recompute_min();
    }
}

const FILTER_KEY: &str = "PreFilterPodTopologySpread";
const SCORE_KEY: &str = "PreScorePodTopologySpread";

#[derive(Debug, Clone, Default)]
struct ScoreState {
    constraints: Vec<Constraint>,
    ignored: HashSet<String>,
    pair_counts: HashMap<(String, String), i64>,
    weights: Vec<f64>,
}

impl PodTopologySpread {
    pub fn new(
        args: PodTopologySpreadArgs,
        lister: Arc<dyn ClusterLister>,
    ) -> Result<Self, FrameworkError> {
        let list = args.defaulting_type.as_deref() == Some("List");
        if !list && !args.default_constraints.is_empty() {
            return Err(FrameworkError::InvalidArgs(
                NAME.into(),
                "defaultConstraints: Invalid value: when .defaultingType is \"System\"".into(),
            ));
        }
        Ok(PodTopologySpread {
            defaults: if list {
                args.default_constraints
            } else {
                system_default_constraints()
            },
            system_defaulted: !list,
            lister,
        })
    }

    /// `helper.DefaultSelector`: the union of the selectors of the pod's services,
    /// RCs, ReplicaSets and StatefulSets.
    fn default_selector(&self, pod: &Pod) -> Selector {
        let ns = pod_namespace(pod);
        let labels = labels_of(&pod.metadata);
        let mut merged: BTreeMap<String, String> = BTreeMap::new();
        let mut reqs: Vec<Requirement> = Vec::new();
        for s in self.lister.services(ns) {
            if let Some(sel) = s.spec.as_ref().and_then(|s| s.selector.as_ref())
                && !sel.is_empty()
                && Selector::from_set(sel).matches(labels)
            {
                merged.extend(sel.clone());
            }
        }
        for rc in self.lister.replication_controllers(ns) {
            if let Some(sel) = rc.spec.as_ref().and_then(|s| s.selector.as_ref())
                && !sel.is_empty()
                && Selector::from_set(sel).matches(labels)
            {
                merged.extend(sel.clone());
            }
        }
        let owned_by = |uid: Option<&str>| {
            pod.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
        };
        for rs in self.lister.replica_sets(ns) {
            if owned_by(rs.metadata.uid.as_deref())
                && let Some(sel) = rs
                    .spec
                    .as_ref()
                    .and_then(|s| Selector::from_label_selector(&s.selector).ok())
            {
                reqs.extend(sel.requirements().iter().cloned());
            }
        }
        for ss in self.lister.stateful_sets(ns) {
            if owned_by(ss.metadata.uid.as_deref())
                && let Some(sel) = ss
                    .spec
                    .as_ref()
                    .and_then(|s| Selector::from_label_selector(&s.selector).ok())
            {
                reqs.extend(sel.requirements().iter().cloned());
            }
        }
        let mut sel = Selector::from_set(&merged);
        for r in reqs {
            sel = sel.with_requirement(r);
        }
        sel
    }

    fn constraints(&self, pod: &Pod, hard: bool) -> Vec<Constraint> {
        let want = if hard {
            "DoNotSchedule"
        } else {
            "ScheduleAnyway"
        };
        let spec_cs: &[TopologySpreadConstraint] = pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_deref())
            .unwrap_or(&[]);
        if !spec_cs.is_empty() {
            let labels = labels_of(&pod.metadata);
            return spec_cs
                .iter()
                .filter(|c| c.when_unsatisfiable == want)
                .map(|c| {
                    let mut selector = c
                        .label_selector
                        .as_ref()
                        .map(|s| {
                            Selector::from_label_selector(s).unwrap_or_else(|_| Selector::nothing())
                        })
                        .unwrap_or_else(Selector::nothing);
                    for k in c.match_label_keys.iter().flatten() {
                        if let Some(v) = labels.get(k)
                            && let Ok(r) = Requirement::new(k, Operator::In, vec![v.clone()])
                        {
                            selector = selector.with_requirement(r);
                        }
                    }
                    Constraint {
                        max_skew: c.max_skew,
                        topology_key: c.topology_key.clone(),
                        selector,
                        min_domains: c.min_domains.unwrap_or(1),
                        honor_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                        honor_taints: c.node_taints_policy.as_deref() == Some("Honor"),
                    }
                })
                .collect();
        }
        let defaults: Vec<&DefaultConstraint> = self
            .defaults
            .iter()
            .filter(|c| c.when_unsatisfiable == want)
            .collect();
        if defaults.is_empty() {
            return vec![];
        }
        let sel = self.default_selector(pod);
        if sel.is_empty() {
            return vec![];
        }
        defaults
            .into_iter()
            .map(|c| Constraint {
                max_skew: c.max_skew,
                topology_key: c.topology_key.clone(),
                selector: sel.clone(),
                min_domains: 1,
                honor_affinity: true,
                honor_taints: false,
            })
            .collect()
    }
}

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snap: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let cs = self.constraints(&pod.pod, true);
        if cs.is_empty() {
            return (None, Status::skip());
        }
        let mut st = FilterState {
            constraints: cs,
            ..Default::default()
        };
        let ns = pod_namespace(&pod.pod);
        for n in &snap.node_info_list {
            if !node_has_keys(n, &st.constraints) {
                continue;
            }
            let l = n.labels();
            for c in &st.constraints {
                if !c.node_included(&pod.pod, n) {
                    continue;
                }
                let cnt = count_matching(&n.pods, &c.selector, ns);
                *st.counts
                    .entry((c.topology_key.clone(), l[&c.topology_key].clone()))
                    .or_default() += cnt;
            }
        }
        st.recompute_min();
        state.write(FILTER_KEY, st);
        (None, Status::success())
    }
    fn has_extensions(&self) -> bool {
        true
    }
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        add: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        if let Some(st) = state.read_mut::<FilterState>(FILTER_KEY) {
            st.update(&pod.pod, node, &add.pod, 1);
        }
        Status::success()
    }
    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        rm: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        if let Some(st) = state.read_mut::<FilterState>(FILTER_KEY) {
            st.update(&pod.pod, node, &rm.pod, -1);
        }
        Status::success()
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.read::<FilterState>(FILTER_KEY) else {
            return Status::success();
        };
        let l = node.labels();
        let pod_labels = labels_of(&pod.pod.metadata);
        for (i, c) in st.constraints.iter().enumerate() {
            let Some(v) = l.get(&c.topology_key) else {
                return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
            };
            let self_match = i64::from(c.selector.matches(pod_labels));
            let mut min = if st.min[i] == i64::MAX { 0 } else { st.min[i] };
            if (st.domains[i] as i32) < c.min_domains {
                min = 0;
            }
            let cnt = st
                .counts
                .get(&(c.topology_key.clone(), v.clone()))
                .copied()
                .unwrap_or(0);
            if cnt + self_match - min > c.max_skew as i64 {
                return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }
}

impl PreScorePlugin for PodTopologySpread {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        snap: &Snapshot,
    ) -> Status {
        let cs = self.constraints(&pod.pod, false);
        if cs.is_empty() {
            return Status::skip();
        }
        let has_spec = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .is_some_and(|v| !v.is_empty());
        let require_all = has_spec || !self.system_defaulted;
        let mut st = ScoreState {
            constraints: cs,
            ..Default::default()
        };
        let mut sizes = vec![0usize; st.constraints.len()];
        for n in nodes {
            if require_all && !node_has_keys(n, &st.constraints) {
                st.ignored.insert(n.name().to_string());
                continue;
            }
            for (i, c) in st.constraints.iter().enumerate() {
                if c.topology_key == HOSTNAME {
                    continue;
                }
                if let Some(v) = n.labels().get(&c.topology_key) {
                    let k = (c.topology_key.clone(), v.clone());
                    if let std::collections::hash_map::Entry::Vacant(e) = st.pair_counts.entry(k) {
                        e.insert(0);
                        sizes[i] += 1;
                    }
                }
            }
        }
        let filtered = nodes.len() - st.ignored.len();
        st.weights = st
            .constraints
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let sz = if c.topology_key == HOSTNAME {
                    filtered
                } else {
                    sizes[i]
                };
                ((sz + 2) as f64).ln()
            })
            .collect();
        let ns = pod_namespace(&pod.pod);
        for n in &snap.node_info_list {
            for c in &st.constraints {
                if c.topology_key == HOSTNAME || !c.node_included(&pod.pod, n) {
                    continue;
                }
                if require_all && !node_has_keys(n, &st.constraints) {
                    continue;
                }
                let Some(v) = n.labels().get(&c.topology_key) else {
                    continue;
                };
                let k = (c.topology_key.clone(), v.clone());
                if st.pair_counts.contains_key(&k) {
                    let cnt = count_matching(&n.pods, &c.selector, ns);
                    *st.pair_counts.get_mut(&k).expect("present") += cnt;
                }
            }
        }
        state.write(SCORE_KEY, st);
        Status::success()
    }
}

impl ScorePlugin for PodTopologySpread {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        let Some(st) = state.read::<ScoreState>(SCORE_KEY) else {
            return (0, Status::success());
        };
        if st.ignored.contains(node.name()) {
            return (0, Status::success());
        }
        let ns = pod_namespace(&pod.pod);
        let mut score = 0.0;
        for (i, c) in st.constraints.iter().enumerate() {
            let Some(v) = node.labels().get(&c.topology_key) else {
                continue;
            };
            let cnt = if c.topology_key == HOSTNAME {
                count_matching(&node.pods, &c.selector, ns)
            } else {
                st.pair_counts
                    .get(&(c.topology_key.clone(), v.clone()))
                    .copied()
                    .unwrap_or(0)
            };
            score += cnt as f64 * st.weights[i] + (c.max_skew - 1) as f64;
        }
        (score.round() as i64, Status::success())
    }
    fn has_normalize(&self) -> bool {
        true
    }
    fn normalize_score(&self, state: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        let Some(st) = state.read::<ScoreState>(SCORE_KEY) else {
            return Status::success();
        };
        let mut min = i64::MAX;
        let mut max = 0i64;
        for s in scores.iter() {
            if st.ignored.contains(&s.name) {
                continue;
            }
            min = min.min(s.score);
            max = max.max(s.score);
        }
        for s in scores.iter_mut() {
            if st.ignored.contains(&s.name) {
                s.score = 0;
                continue;
            }
            if max == 0 {
                s.score = MAX_NODE_SCORE;
                continue;
            }
            s.score = MAX_NODE_SCORE * (max + min - s.score) / max;
        }
        Status::success()
    }
}

impl Plugin for PodTopologySpread {
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
        vec![
            ClusterEventWithHint::always(EVENT_ASSIGNED_POD_ADD),
            ClusterEventWithHint::always(EVENT_ASSIGNED_POD_UPDATE),
            ClusterEventWithHint::always(EVENT_ASSIGNED_POD_DELETE),
            ClusterEventWithHint::always(EVENT_NODE_ADD),
            ClusterEventWithHint::always(EVENT_NODE_UPDATE),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::EmptyLister;
    use crate::plugins::testutil::*;
    use crate::status::Code;
    use serde_json::json;

    fn pl() -> PodTopologySpread {
        PodTopologySpread::new(PodTopologySpreadArgs::default(), Arc::new(EmptyLister)).unwrap()
    }

    fn zn(name: &str, zone: &str) -> Arc<k8s_openapi::api::core::v1::Node> {
        node(name, json!({"metadata": {"labels": {"zone": zone}}}))
    }

    fn foo(name: &str) -> Arc<Pod> {
        pod(name, json!({"metadata": {"labels": {"foo": ""}}}))
    }

    fn spread(when: &str, key: &str, skew: i32) -> serde_json::Value {
        json!({"metadata": {"labels": {"foo": ""}}, "spec": {"topologySpreadConstraints": [
            {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when,
             "labelSelector": {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}}]}})
    }

    #[test]
    fn filter_zone_skew() {
        // zone1: node-a (2 foo), node-b (1 foo); zone2: node-x (0), node-y (0)
        let snap = snapshot(vec![
            (zn("node-a", "zone1"), vec![foo("a1"), foo("a2")]),
            (zn("node-b", "zone1"), vec![foo("b1")]),
            (zn("node-x", "zone2"), vec![]),
            (zn("node-y", "zone2"), vec![]),
        ]);
        let p = pod("p", spread("DoNotSchedule", "zone", 1));
        let got = filter_all(&pl(), &p, &snap);
        let ok: Vec<bool> = got.iter().map(|(_, s)| s.is_success()).collect();
        assert_eq!(ok, vec![false, false, true, true]);
        assert_eq!(got[0].1.message(), ERR_REASON_CONSTRAINTS_NOT_MATCH);
        assert_eq!(got[0].1.code, Code::Unschedulable);
        // maxSkew 4 lets zone1 in too (3 + 1 - 0 <= 4).
        let p3 = pod("p", spread("DoNotSchedule", "zone", 4));
        assert!(
            filter_all(&pl(), &p3, &snap)
                .iter()
                .all(|(_, s)| s.is_success())
        );
    }

    #[test]
    fn filter_missing_label_and_min_domains() {
        let snap = snapshot(vec![
            (zn("node-a", "zone1"), vec![foo("a1")]),
            (node("node-n", json!({})), vec![]),
        ]);
        let p = pod("p", spread("DoNotSchedule", "zone", 1));
        let got = filter_all(&pl(), &p, &snap);
        assert!(got[0].1.is_success());
        assert_eq!(got[1].1.message(), ERR_REASON_NODE_LABEL_NOT_MATCH);
        assert_eq!(got[1].1.code, Code::UnschedulableAndUnresolvable);
        // minDomains 2 with one domain: global min counts as 0, so 1+1-0 > 1 fails.
        let mut v = spread("DoNotSchedule", "zone", 1);
        v["spec"]["topologySpreadConstraints"][0]["minDomains"] = json!(2);
        let got = filter_all(&pl(), &pod("p", v), &snap);
        assert!(!got[0].1.is_success());
    }

    #[test]
    fn score_hostname_spread() {
        let snap = snapshot(vec![
            (node("n1", json!({})), vec![foo("a1"), foo("a2")]),
            (node("n2", json!({})), vec![foo("b1")]),
            (node("n3", json!({})), vec![]),
        ]);
        let p = pod("p", spread("ScheduleAnyway", HOSTNAME, 1));
        let s = score_all(&pl(), &p, &snap);
        // Fewer matching pods scores higher.
        assert!(s[2].1 > s[1].1 && s[1].1 > s[0].1, "{s:?}");
        assert_eq!(s[2].1, 100);
    }

    #[test]
    fn system_defaults_need_an_owner() {
        // Without services/owners the pod gets no default constraints: Skip.
        let snap = snapshot(vec![(node("n1", json!({})), vec![])]);
        let s = score_all(&pl(), &pod("p", json!({})), &snap);
        assert_eq!(s, vec![("n1".into(), 0)]);
        let list = PodTopologySpread::new(
            serde_json::from_value(json!({"defaultingType": "System",
                "defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}))
            .unwrap(),
            Arc::new(EmptyLister),
        );
        assert!(list.is_err());
    }
}
