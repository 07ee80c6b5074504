//! InterPodAffinity: required pod affinity / anti-affinity (filter, including existing
//! pods' anti-affinity toward the incoming pod) and preferred terms (score).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::*;
use crate::status::Status;
use crate::types::{AffinityTerm, PodInfo, pod_namespace};

pub const NAME: &str = "InterPodAffinity";
pub const ERR_REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";
pub const ERR_REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
pub const ERR_REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";

/// `InterPodAffinityArgs`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterPodAffinityArgs {
    #[serde(default = "one")]
    pub hard_pod_affinity_weight: i32,
    #[serde(default)]
    pub ignore_preferred_terms_of_existing_pods: bool,
}

fn one() -> i32 {
    1
}

impl Default for InterPodAffinityArgs {
    fn default() -> Self {
        InterPodAffinityArgs {
            hard_pod_affinity_weight: 1,
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

pub struct InterPodAffinity {
    args: InterPodAffinityArgs,
    lister: Arc<dyn ClusterLister>,
}

impl std::fmt::Debug for InterPodAffinity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterPodAffinity")
            .field("args", &self.args)
            .finish()
    }
}

type Pair = (String, String);

#[derive(Debug, Clone, Default)]
struct FilterState {
    existing_anti: HashMap<Pair, i64>,
    affinity: HashMap<Pair, i64>,
    anti: HashMap<Pair, i64>,
}

const FILTER_KEY: &str = "PreFilterInterPodAffinity";
const SCORE_KEY: &str = "PreScoreInterPodAffinity";

impl InterPodAffinity {
    pub fn new(args: InterPodAffinityArgs, lister: Arc<dyn ClusterLister>) -> Self {
        InterPodAffinity { args, lister }
    }

    fn ns_labels(&self, pod: &Pod) -> Option<BTreeMap<String, String>> {
        self.lister
            .namespace(pod_namespace(pod))
            .and_then(|n| n.metadata.labels.clone())
    }

    fn matches(&self, term: &AffinityTerm, pod: &Pod) -> bool {
        if term.namespace_selector.is_some() {
            term.matches(pod, self.ns_labels(pod).as_ref())
        } else {
            term.matches(pod, None)
        }
    }

    fn update_with_pod(
        &self,
        st: &mut FilterState,
        pod: &PodInfo,
        existing: &PodInfo,
        node: &NodeInfo,
        delta: i64,
    ) {
        let l = node.labels();
        for t in &existing.required_anti_affinity {
            if let Some(v) = l.get(&t.topology_key)
                && self.matches(t, &pod.pod)
            {
                *st.existing_anti
                    .entry((t.topology_key.clone(), v.clone()))
                    .or_default() += delta;
            }
        }
        let all_aff = !pod.required_affinity.is_empty()
            && pod
                .required_affinity
                .iter()
                .all(|t| self.matches(t, &existing.pod));
        if all_aff {
            for t in &pod.required_affinity {
                if let Some(v) = l.get(&t.topology_key) {
                    *st.affinity
                        .entry((t.topology_key.clone(), v.clone()))
                        .or_default() += delta;
                }
            }
        }
        for t in &pod.required_anti_affinity {
            if let Some(v) = l.get(&t.topology_key)
                && self.matches(t, &existing.pod)
            {
                *st.anti
                    .entry((t.topology_key.clone(), v.clone()))
                    .or_default() += delta;
            }
        }
    }
}

fn has_pair(m: &HashMap<Pair, i64>, k: &str, v: &str) -> i64 {
    m.get(&(k.to_string(), v.to_string())).copied().unwrap_or(0)
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snap: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let mut st = FilterState::default();
        // Existing pods' required anti-affinity against the incoming pod.
        for n in &snap.have_pods_with_required_anti_affinity {
            for e in &n.pods_with_required_anti_affinity {
                let l = n.labels();
                for t in &e.required_anti_affinity {
                    if let Some(v) = l.get(&t.topology_key)
                        && self.matches(t, &pod.pod)
                    {
                        *st.existing_anti
                            .entry((t.topology_key.clone(), v.clone()))
                            .or_default() += 1;
                    }
                }
            }
        }
        if !pod.required_affinity.is_empty() || !pod.required_anti_affinity.is_empty() {
            for n in &snap.node_info_list {
                let l = n.labels();
                for e in &n.pods {
                    if !pod.required_affinity.is_empty()
                        && pod
                            .required_affinity
                            .iter()
                            .all(|t| self.matches(t, &e.pod))
                    {
                        for t in &pod.required_affinity {
                            if let Some(v) = l.get(&t.topology_key) {
                                *st.affinity
                                    .entry((t.topology_key.clone(), v.clone()))
                                    .or_default() += 1;
                            }
                        }
                    }
                    for t in &pod.required_anti_affinity {
                        if let Some(v) = l.get(&t.topology_key)
                            && self.matches(t, &e.pod)
                        {
                            *st.anti
                                .entry((t.topology_key.clone(), v.clone()))
                                .or_default() += 1;
                        }
                    }
                }
            }
        }
        if st.existing_anti.is_empty()
            && pod.required_affinity.is_empty()
            && pod.required_anti_affinity.is_empty()
        {
            return (None, Status::skip());
        }
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
        let mut st = state
            .read::<FilterState>(FILTER_KEY)
            .cloned()
            .unwrap_or_default();
        self.update_with_pod(&mut st, pod, add, node, 1);
        state.write(FILTER_KEY, st);
        Status::success()
    }
    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        rm: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        let mut st = state
            .read::<FilterState>(FILTER_KEY)
            .cloned()
            .unwrap_or_default();
        self.update_with_pod(&mut st, pod, rm, node, -1);
        state.write(FILTER_KEY, st);
        Status::success()
    }
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.read::<FilterState>(FILTER_KEY) else {
            return Status::success();
        };
        let l = node.labels();
        // Existing pods' anti-affinity.
        if l.iter().any(|(k, v)| has_pair(&st.existing_anti, k, v) > 0) {
            return Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY);
        }
        // The pod's anti-affinity.
        for t in &pod.required_anti_affinity {
            if let Some(v) = l.get(&t.topology_key)
                && has_pair(&st.anti, &t.topology_key, v) > 0
            {
                return Status::unschedulable(ERR_REASON_ANTI_AFFINITY);
            }
        }
        // The pod's affinity.
        let mut pods_exist = true;
        for t in &pod.required_affinity {
            match l.get(&t.topology_key) {
                Some(v) => {
                    if has_pair(&st.affinity, &t.topology_key, v) <= 0 {
                        pods_exist = false;
                    }
                }
                None => return Status::unresolvable(ERR_REASON_AFFINITY),
            }
        }
        if !pods_exist {
            // The first pod of a group that matches its own terms may go anywhere.
            let self_match = st.affinity.values().all(|v| *v <= 0)
                && pod
                    .required_affinity
                    .iter()
                    .all(|t| self.matches(t, &pod.pod));
            if !self_match {
                return Status::unresolvable(ERR_REASON_AFFINITY);
            }
        }
        Status::success()
    }
}

#[derive(Debug, Clone, Default)]
struct ScoreState {
    /// topology key -> value -> score.
    scores: HashMap<String, HashMap<String, i64>>,
}

impl InterPodAffinity {
    fn process_existing(
        &self,
        st: &mut ScoreState,
        pod: &PodInfo,
        existing: &PodInfo,
        node: &NodeInfo,
    ) {
        let l = node.labels();
        let mut add = |t: &AffinityTerm, w: i64| {
            if let Some(v) = l.get(&t.topology_key) {
                *st.scores
                    .entry(t.topology_key.clone())
                    .or_default()
                    .entry(v.clone())
                    .or_default() += w;
            }
        };
        for t in &pod.preferred_affinity {
            if self.matches(&t.term, &existing.pod) {
                add(&t.term, t.weight as i64);
            }
        }
        for t in &pod.preferred_anti_affinity {
            if self.matches(&t.term, &existing.pod) {
                add(&t.term, -(t.weight as i64));
            }
        }
        if self.args.hard_pod_affinity_weight > 0 {
            for t in &existing.required_affinity {
                if self.matches(t, &pod.pod) {
                    add(t, self.args.hard_pod_affinity_weight as i64);
                }
            }
        }
        if !self.args.ignore_preferred_terms_of_existing_pods {
            for t in &existing.preferred_affinity {
                if self.matches(&t.term, &pod.pod) {
                    add(&t.term, t.weight as i64);
                }
            }
            for t in &existing.preferred_anti_affinity {
                if self.matches(&t.term, &pod.pod) {
                    add(&t.term, -(t.weight as i64));
                }
            }
        }
    }
}

impl PreScorePlugin for InterPodAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
        snap: &Snapshot,
    ) -> Status {
        let has_constraints =
            !pod.preferred_affinity.is_empty() || !pod.preferred_anti_affinity.is_empty();
        let nodes = if has_constraints {
            &snap.node_info_list
        } else {
            &snap.have_pods_with_affinity
        };
        if nodes.is_empty() {
            return Status::skip();
        }
        let mut st = ScoreState::default();
        for n in nodes {
            let pods = if has_constraints {
                &n.pods
            } else {
                &n.pods_with_affinity
            };
            for e in pods {
                self.process_existing(&mut st, pod, e, n);
            }
        }
        if st.scores.is_empty() {
            return Status::skip();
        }
        state.write(SCORE_KEY, st);
        Status::success()
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        let Some(st) = state.read::<ScoreState>(SCORE_KEY) else {
            return (0, Status::success());
        };
        let l = node.labels();
        let s = st
            .scores
            .iter()
            .filter_map(|(k, m)| l.get(k).and_then(|v| m.get(v)))
            .sum();
        (s, Status::success())
    }
    fn has_normalize(&self) -> bool {
        true
    }
    fn normalize_score(&self, state: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        if state.read::<ScoreState>(SCORE_KEY).is_none() {
            return Status::success();
        }
        let min = scores.iter().map(|s| s.score).min().unwrap_or(0);
        let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
        let diff = max - min;
        for s in scores.iter_mut() {
            s.score = if diff > 0 {
                (MAX_NODE_SCORE as f64 * ((s.score - min) as f64 / diff as f64)) as i64
            } else {
                0
            };
        }
        Status::success()
    }
}

impl Plugin for InterPodAffinity {
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

    fn pl() -> InterPodAffinity {
        InterPodAffinity::new(InterPodAffinityArgs::default(), Arc::new(EmptyLister))
    }

    fn zn(name: &str, zone: &str) -> Arc<k8s_openapi::api::core::v1::Node> {
        node(name, json!({"metadata": {"labels": {"zone": zone}}}))
    }

    fn labeled(name: &str, app: &str) -> Arc<Pod> {
        pod(name, json!({"metadata": {"labels": {"app": app}}}))
    }

    fn term(kind: &str, app: &str, key: &str) -> serde_json::Value {
        json!({"spec": {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}}})
    }

    fn ok(v: &[(String, Status)]) -> Vec<bool> {
        v.iter().map(|(_, s)| s.is_success()).collect()
    }

    #[test]
    fn required_affinity() {
        let snap = snapshot(vec![
            (zn("n1", "z1"), vec![labeled("db", "db")]),
            (zn("n2", "z1"), vec![]),
            (zn("n3", "z2"), vec![]),
        ]);
        let p = pod("p", term("podAffinity", "db", "zone"));
        let got = filter_all(&pl(), &p, &snap);
        assert_eq!(ok(&got), vec![true, true, false]);
        assert_eq!(got[2].1.message(), ERR_REASON_AFFINITY);
        assert_eq!(got[2].1.code, Code::UnschedulableAndUnresolvable);
        // No pod matches anywhere, but the pod matches its own term: allowed anywhere.
        let mut selfish = term("podAffinity", "web", "zone");
        selfish["metadata"] = json!({"labels": {"app": "web"}});
        assert_eq!(
            ok(&filter_all(&pl(), &pod("w", selfish), &snap)),
            vec![true, true, true]
        );
        // Missing topology key on the node.
        let snap2 = snapshot(vec![(node("bare", json!({})), vec![labeled("db", "db")])]);
        assert!(!filter_all(&pl(), &p, &snap2)[0].1.is_success());
    }

    #[test]
    fn required_anti_affinity_both_ways() {
        let snap = snapshot(vec![
            (zn("n1", "z1"), vec![labeled("db", "db")]),
            (zn("n2", "z1"), vec![]),
            (zn("n3", "z2"), vec![]),
        ]);
        let p = pod("p", term("podAntiAffinity", "db", "zone"));
        let got = filter_all(&pl(), &p, &snap);
        assert_eq!(ok(&got), vec![false, false, true]);
        assert_eq!(got[0].1.message(), ERR_REASON_ANTI_AFFINITY);
        assert_eq!(got[0].1.code, Code::Unschedulable);

        // An existing pod's anti-affinity repels the incoming pod.
        let mut guard = term("podAntiAffinity", "web", "kubernetes.io/hostname");
        guard["metadata"] = json!({"labels": {"app": "guard"}});
        let snap = snapshot(vec![
            (zn("n1", "z1"), vec![pod("g", guard)]),
            (zn("n2", "z1"), vec![]),
        ]);
        let got = filter_all(&pl(), &labeled("w", "web"), &snap);
        assert_eq!(ok(&got), vec![false, true]);
        assert_eq!(got[0].1.message(), ERR_REASON_EXISTING_ANTI_AFFINITY);
        // Other namespaces are not affected.
        let other = pod(
            "o",
            json!({"metadata": {"namespace": "other", "labels": {"app": "web"}}}),
        );
        assert_eq!(ok(&filter_all(&pl(), &other, &snap)), vec![true, true]);
    }

    #[test]
    fn preferred_scores() {
        let snap = snapshot(vec![
            (zn("n1", "z1"), vec![labeled("db", "db")]),
            (zn("n2", "z2"), vec![labeled("cache", "cache")]),
            (zn("n3", "z3"), vec![]),
        ]);
        let p = pod(
            "p",
            json!({"spec": {"affinity": {
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}}]},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "zone"}}]}}}}),
        );
        // n1: +5, n2: -5, n3: 0 -> normalized 100, 0, 50.
        assert_eq!(
            score_all(&pl(), &p, &snap),
            vec![("n1".into(), 100), ("n2".into(), 0), ("n3".into(), 50)]
        );
        // No affinity anywhere: skipped.
        let plain = snapshot(vec![(zn("n1", "z1"), vec![])]);
        assert_eq!(
            score_all(&pl(), &pod("q", json!({})), &plain),
            vec![("n1".into(), 0)]
        );
    }
}
