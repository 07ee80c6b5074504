//! NodeResourcesFit (filter + LeastAllocated / MostAllocated /
//! RequestedToCapacityRatio scoring) and NodeResourcesBalancedAllocation.

use std::collections::HashSet;
use std::sync::Arc;

use serde::Deserialize;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::*;
use crate::resource::{CPU, EPHEMERAL_STORAGE, MEMORY, Resource, is_scalar_resource};
use crate::status::{Code, Status};
use crate::types::PodInfo;

pub const FIT: &str = "NodeResourcesFit";
pub const BALANCED: &str = "NodeResourcesBalancedAllocation";

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSpec {
    pub name: String,
    #[serde(default)]
    pub weight: i64,
}

fn default_resources() -> Vec<ResourceSpec> {
    vec![
        ResourceSpec {
            name: CPU.into(),
            weight: 1,
        },
        ResourceSpec {
            name: MEMORY.into(),
            weight: 1,
        },
    ]
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UtilizationShapePoint {
    pub utilization: i64,
    pub score: i64,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RequestedToCapacityRatioParam {
    #[serde(default)]
    pub shape: Vec<UtilizationShapePoint>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScoringStrategy {
    #[serde(default = "least_allocated", rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub resources: Vec<ResourceSpec>,
    #[serde(default)]
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioParam>,
}

fn least_allocated() -> String {
    "LeastAllocated".into()
}

/// `NodeResourcesFitArgs`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FitArgs {
    #[serde(default)]
    pub ignored_resources: Vec<String>,
    #[serde(default)]
    pub ignored_resource_groups: Vec<String>,
    #[serde(default)]
    pub scoring_strategy: Option<ScoringStrategy>,
}

/// `NodeResourcesBalancedAllocationArgs`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BalancedArgs {
    #[serde(default)]
    pub resources: Vec<ResourceSpec>,
}

#[derive(Debug, Clone)]
enum Strategy {
    Least,
    Most,
    Ratio(Vec<UtilizationShapePoint>),
}

/// `resourceAllocationScorer`: the (allocatable, requested) pair per scored resource.
#[derive(Debug, Clone)]
struct Scorer {
    resources: Vec<ResourceSpec>,
    /// Use the plain requests (BalancedAllocation) instead of the non-zero ones.
    use_requested: bool,
}

impl Scorer {
    /// (allocatable, requested including the pod) per scored resource, in order.
    /// An iterator rather than two vectors: it runs once per node and plugin.
    fn alloc_req<'a>(
        &'a self,
        node: &'a NodeInfo,
        pod: &'a PodInfo,
    ) -> impl Iterator<Item = (i64, i64)> + 'a {
        let (node_req, pod_req): (&Resource, &Resource) = if self.use_requested {
            (&node.requested, &pod.requests)
        } else {
            (&node.non_zero_requested, &pod.non_zero_requests)
        };
        self.resources.iter().map(move |r| {
            let name = r.name.as_str();
            let pr = if is_scalar_resource(name) {
                pod.requests.get(name)
            } else {
                pod_req.get(name)
            };
            match name {
                CPU | MEMORY => (node.allocatable.get(name), node_req.get(name) + pr),
                EPHEMERAL_STORAGE => (
                    node.allocatable.ephemeral_storage,
                    node.requested.ephemeral_storage + pr,
                ),
                other => {
                    if pr == 0 || !node.allocatable.scalar.contains_key(other) {
                        (0, 0)
                    } else {
                        (node.allocatable.get(other), node.requested.get(other) + pr)
                    }
                }
            }
        })
    }
}

fn least_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

fn most_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    requested.min(capacity) * MAX_NODE_SCORE / capacity
}

/// `helper.BuildBrokenLinearFunction` over a shape already scaled to node scores.
fn broken_linear(shape: &[UtilizationShapePoint], p: i64) -> i64 {
    for i in 0..shape.len() {
        if p <= shape[i].utilization {
            if i == 0 {
                return shape[0].score;
            }
            let (a, b) = (&shape[i - 1], &shape[i]);
            return a.score
                + (b.score - a.score) * (p - a.utilization) / (b.utilization - a.utilization);
        }
    }
    shape.last().map(|s| s.score).unwrap_or(0)
}

/// NodeResourcesFit.
#[derive(Debug)]
pub struct Fit {
    ignored: HashSet<String>,
    ignored_groups: HashSet<String>,
    strategy: Strategy,
    scorer: Scorer,
}

pub const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;

impl Fit {
    pub fn new(args: FitArgs) -> Result<Fit, FrameworkError> {
        let ss = args.scoring_strategy.unwrap_or(ScoringStrategy {
            kind: least_allocated(),
            resources: vec![],
            requested_to_capacity_ratio: None,
        });
        let mut resources = if ss.resources.is_empty() {
            default_resources()
        } else {
            ss.resources.clone()
        };
        for r in &mut resources {
            if r.weight == 0 {
                r.weight = 1;
            }
            if !(1..=100).contains(&r.weight) {
                return Err(FrameworkError::InvalidArgs(
                    FIT.into(),
                    format!(
                        "resource weight of {} should be in the range [1, 100]",
                        r.name
                    ),
                ));
            }
        }
        let strategy = match ss.kind.as_str() {
            "LeastAllocated" => Strategy::Least,
            "MostAllocated" => Strategy::Most,
            "RequestedToCapacityRatio" => {
                let shape = ss
                    .requested_to_capacity_ratio
                    .map(|r| r.shape)
                    .unwrap_or_default();
                if shape.is_empty() {
                    return Err(FrameworkError::InvalidArgs(
                        FIT.into(),
                        "scoringStrategy.requestedToCapacityRatio.shape: Required value".into(),
                    ));
                }
                for w in shape.windows(2) {
                    if w[1].utilization <= w[0].utilization {
                        return Err(FrameworkError::InvalidArgs(
                            FIT.into(),
                            "utilization values must be sorted in increasing order".into(),
                        ));
                    }
                }
                Strategy::Ratio(
                    shape
                        .into_iter()
                        .map(|p| UtilizationShapePoint {
                            utilization: p.utilization,
                            score: p.score * (MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE),
                        })
                        .collect(),
                )
            }
            other => {
                return Err(FrameworkError::InvalidArgs(
                    FIT.into(),
                    format!("scoringStrategy.type: Unsupported value: {other:?}"),
                ));
            }
        };
        Ok(Fit {
            ignored: args.ignored_resources.into_iter().collect(),
            ignored_groups: args.ignored_resource_groups.into_iter().collect(),
            strategy,
            scorer: Scorer {
                resources,
                use_requested: false,
            },
        })
    }

    fn ignored(&self, name: &str) -> bool {
        self.ignored.contains(name)
            || name
                .split_once('/')
                .is_some_and(|(g, _)| self.ignored_groups.contains(g))
    }

    /// `fitsRequest`: the insufficient resources as (reason, unresolvable).
    pub fn insufficient(&self, pod: &PodInfo, node: &NodeInfo) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        let req = &pod.requests;
        if node.pods.len() as i64 + 1 > node.allocatable.allowed_pod_number {
            out.push(("Too many pods".to_string(), false));
        }
        if req.is_zero() {
            return out;
        }
        let a = &node.allocatable;
        let u = &node.requested;
        if req.milli_cpu > 0 && req.milli_cpu > a.milli_cpu - u.milli_cpu {
            out.push(("Insufficient cpu".into(), req.milli_cpu > a.milli_cpu));
        }
        if req.memory > 0 && req.memory > a.memory - u.memory {
            out.push(("Insufficient memory".into(), req.memory > a.memory));
        }
        if req.ephemeral_storage > 0
            && req.ephemeral_storage > a.ephemeral_storage - u.ephemeral_storage
        {
            out.push((
                "Insufficient ephemeral-storage".into(),
                req.ephemeral_storage > a.ephemeral_storage,
            ));
        }
        for (name, q) in &req.scalar {
            if *q == 0 || self.ignored(name) {
                continue;
            }
            let avail = a.get(name) - u.get(name);
            if *q > avail {
                out.push((format!("Insufficient {name}"), *q > a.get(name)));
            }
        }
        out
    }
}

impl FilterPlugin for Fit {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let ins = self.insufficient(pod, node);
        if ins.is_empty() {
            return Status::success();
        }
        let code = if ins.iter().any(|(_, u)| *u) {
            Code::UnschedulableAndUnresolvable
        } else {
            Code::Unschedulable
        };
        Status::with_reasons(code, ins.into_iter().map(|(r, _)| r).collect())
    }
}

impl ScorePlugin for Fit {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        let res = &self.scorer.resources;
        let mut score = 0i64;
        let mut weights = 0i64;
        for (spec, (alloc, req)) in res.iter().zip(self.scorer.alloc_req(node, pod)) {
            if alloc == 0 {
                continue;
            }
            let w = spec.weight;
            let s = match &self.strategy {
                Strategy::Least => least_requested(req, alloc),
                Strategy::Most => most_requested(req, alloc),
                Strategy::Ratio(shape) => {
                    let s = if req > alloc {
                        broken_linear(shape, 100)
                    } else {
                        broken_linear(shape, req * 100 / alloc)
                    };
                    if s <= 0 {
                        continue;
                    }
                    s
                }
            };
            score += s * w;
            weights += w;
        }
        if weights == 0 {
            return (0, Status::success());
        }
        let v = match self.strategy {
            Strategy::Ratio(_) => (score as f64 / weights as f64).round() as i64,
            _ => score / weights,
        };
        (v, Status::success())
    }
}

impl Plugin for Fit {
    fn name(&self) -> &'static str {
        FIT
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let node_hint =
            |pod: &k8s_openapi::api::core::v1::Pod, _: EventObject<'_>, new: EventObject<'_>| {
                let EventObject::Node(n) = new else {
                    return QueueingHint::Queue;
                };
                // Only a node whose allocatable could hold the pod helps.
                let pi = PodInfo::new(Arc::new(pod.clone()));
                let ni = NodeInfo::new(Some(Arc::new(n.clone())));
                let fit = Fit::new(FitArgs::default()).expect("default args");
                if fit.insufficient(&pi, &ni).is_empty() {
                    QueueingHint::Queue
                } else {
                    QueueingHint::Skip
                }
            };
        vec![
            ClusterEventWithHint::always(EVENT_ASSIGNED_POD_DELETE),
            ClusterEventWithHint::always(EVENT_ASSIGNED_POD_UPDATE),
            ClusterEventWithHint::with_hint(EVENT_NODE_ADD, node_hint),
            ClusterEventWithHint::with_hint(EVENT_NODE_UPDATE, node_hint),
        ]
    }
}

/// NodeResourcesBalancedAllocation: favors nodes whose resource fractions stay close.
#[derive(Debug)]
pub struct BalancedAllocation {
    scorer: Scorer,
}

impl BalancedAllocation {
    pub fn new(args: BalancedArgs) -> BalancedAllocation {
        let mut resources = if args.resources.is_empty() {
            default_resources()
        } else {
            args.resources
        };
        for r in &mut resources {
            if r.weight == 0 {
                r.weight = 1;
            }
        }
        BalancedAllocation {
            scorer: Scorer {
                resources,
                use_requested: true,
            },
        }
    }
}

impl PreScorePlugin for BalancedAllocation {
    fn pre_score(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
        _: &Snapshot,
    ) -> Status {
        // A best-effort pod changes no fractions.
        if self
            .scorer
            .resources
            .iter()
            .all(|r| pod.requests.get(&r.name) == 0)
        {
            return Status::skip();
        }
        Status::success()
    }
}

impl ScorePlugin for BalancedAllocation {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        // Recomputed rather than collected: no allocation per node.
        let fractions = || {
            self.scorer
                .alloc_req(node, pod)
                .filter(|(alloc, _)| *alloc != 0)
                .map(|(alloc, req)| (req as f64 / alloc as f64).min(1.0))
        };
        // One pass gives the count, the sum and the first two fractions (the default
        // cpu + memory case needs nothing more).
        let (n, total, first_two) =
            fractions().fold((0usize, 0.0, [0.0; 2]), |(n, t, mut two), f| {
                if n < 2 {
                    two[n] = f;
                }
                (n + 1, t + f, two)
            });
        let std = match n {
            0 | 1 => 0.0,
            2 => ((first_two[0] - first_two[1]) / 2.0).abs(),
            n => {
                let mean = total / n as f64;
                (fractions().map(|f| (f - mean) * (f - mean)).sum::<f64>() / n as f64).sqrt()
            }
        };
        (
            ((1.0 - std) * MAX_NODE_SCORE as f64) as i64,
            Status::success(),
        )
    }
}

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        BALANCED
    }
    fn pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::*;
    use serde_json::json;

    fn fit(args: serde_json::Value) -> Fit {
        Fit::new(serde_json::from_value(args).unwrap()).unwrap()
    }

    #[test]
    fn fit_filter_table() {
        let n = node(
            "n1",
            json!({"status": {"allocatable": {"cpu": "10", "memory": "20", "pods": "3", "example.com/gpu": "2"}}}),
        );
        let existing = pod(
            "e",
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "5", "memory": "19"}}}]}}),
        );
        let snap = snapshot(vec![(n, vec![existing])]);
        let req = |cpu: &str, mem: &str| pod("p", requests(cpu, mem));
        let cases: Vec<(Arc<k8s_openapi::api::core::v1::Pod>, Vec<&str>, Code)> = vec![
            (pod("be", json!({})), vec![], Code::Success),
            (req("1", "1"), vec![], Code::Success),
            (req("6", "1"), vec!["Insufficient cpu"], Code::Unschedulable),
            (
                req("1", "2"),
                vec!["Insufficient memory"],
                Code::Unschedulable,
            ),
            (
                req("6", "2"),
                vec!["Insufficient cpu", "Insufficient memory"],
                Code::Unschedulable,
            ),
            (
                req("11", "1"),
                vec!["Insufficient cpu"],
                Code::UnschedulableAndUnresolvable,
            ),
            (
                pod(
                    "g",
                    json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"example.com/gpu": "3"}}}]}}),
                ),
                vec!["Insufficient example.com/gpu"],
                Code::UnschedulableAndUnresolvable,
            ),
            (
                pod(
                    "init",
                    json!({"spec": {"initContainers": [{"name": "i", "resources": {"requests": {"cpu": "6"}}}]}}),
                ),
                vec!["Insufficient cpu"],
                Code::Unschedulable,
            ),
            (
                pod("oh", json!({"spec": {"overhead": {"cpu": "5500m"}}})),
                vec!["Insufficient cpu"],
                Code::Unschedulable,
            ),
        ];
        let f = fit(json!({}));
        for (p, reasons, code) in cases {
            let s = &filter_all(&f, &p, &snap)[0].1;
            assert_eq!(s.code, code, "{:?}", p.metadata.name);
            assert_eq!(s.reasons, reasons, "{:?}", p.metadata.name);
        }
        // Too many pods.
        let full = snapshot(vec![(
            node("n", json!({"status": {"allocatable": {"pods": "1"}}})),
            vec![pod("x", json!({}))],
        )]);
        assert_eq!(
            filter_all(&f, &pod("p", json!({})), &full)[0].1.reasons,
            vec!["Too many pods"]
        );
        // Ignored resources.
        let ig = fit(json!({"ignoredResourceGroups": ["example.com"]}));
        let g = pod(
            "g",
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"example.com/gpu": "3"}}}]}}),
        );
        assert!(filter_all(&ig, &g, &snap)[0].1.is_success());
    }

    fn two_nodes() -> crate::cache::Snapshot {
        // Upstream's LeastAllocated case: node1 4000m/10000, node2 6000m/10000.
        let n1 = node(
            "machine1",
            json!({"status": {"allocatable": {"cpu": "4", "memory": "10000"}}}),
        );
        let n2 = node(
            "machine2",
            json!({"status": {"allocatable": {"cpu": "6", "memory": "10000"}}}),
        );
        let e1 = pod("e1", requests("1", "2000"));
        let e2 = pod("e2", requests("2", "3000"));
        snapshot(vec![(n1, vec![e1]), (n2, vec![e2])])
    }

    #[test]
    fn least_most_ratio_scores() {
        let snap = two_nodes();
        let p = pod("p", requests("1", "2000"));
        // machine1: cpu (4000-2000)*100/4000=50, mem (10000-4000)*100/10000=60 -> 55
        // machine2: cpu (6000-3000)*100/6000=50, mem (10000-5000)*100/10000=50 -> 50
        assert_eq!(
            score_all(&fit(json!({})), &p, &snap),
            vec![("machine1".into(), 55), ("machine2".into(), 50)]
        );
        let most = fit(json!({"scoringStrategy": {"type": "MostAllocated"}}));
        assert_eq!(
            score_all(&most, &p, &snap),
            vec![("machine1".into(), 45), ("machine2".into(), 50)]
        );
        let weighted = fit(json!({"scoringStrategy": {"type": "LeastAllocated",
            "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 3}]}}));
        // machine1: (50 + 60*3)/4 = 57
        assert_eq!(score_all(&weighted, &p, &snap)[0], ("machine1".into(), 57));
        let ratio = fit(
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
            "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]}}}),
        );
        // Same as least-allocated for this linear shape, rounded: machine1 (50+60)/2=55.
        assert_eq!(score_all(&ratio, &p, &snap)[0], ("machine1".into(), 55));
        let bad = serde_json::from_value::<FitArgs>(json!({"scoringStrategy": {"type": "Nope"}}))
            .unwrap();
        assert!(Fit::new(bad).is_err());
    }

    #[test]
    fn best_effort_pods_score_with_defaults() {
        let snap = two_nodes();
        // 100m/200Mi defaults: memory over allocatable on both -> 0; cpu machine1 (4000-1100)*100/4000=72 -> 36.
        let s = score_all(&fit(json!({})), &pod("be", json!({})), &snap);
        assert_eq!(s[0], ("machine1".into(), 36));
    }

    #[test]
    fn balanced_allocation() {
        let snap = two_nodes();
        let p = pod("p", requests("1", "2000"));
        // machine1: cpu 2000/4000=.5 mem 4000/10000=.4 -> std .05 -> 95
        // machine2: cpu 3000/6000=.5 mem 5000/10000=.5 -> 100
        assert_eq!(
            score_all(&BalancedAllocation::new(BalancedArgs::default()), &p, &snap),
            vec![("machine1".into(), 95), ("machine2".into(), 100)]
        );
        // Best-effort pods skip the plugin.
        assert_eq!(
            score_all(
                &BalancedAllocation::new(BalancedArgs::default()),
                &pod("be", json!({})),
                &snap
            ),
            vec![("machine1".into(), 0), ("machine2".into(), 0)]
        );
    }
}
