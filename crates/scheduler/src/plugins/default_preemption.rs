//! DefaultPreemption (PostFilter): find nodes where evicting lower-priority pods lets
//! the pod fit (reprieving as many as possible, PDB-violating ones first), pick one
//! by upstream's criteria, and return the victims and the node to nominate. The
//! scheduler performs the evictions.

use std::collections::HashMap;
use std::sync::Arc;

use ferrokube_apimachinery::labels::Selector;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use rayon::prelude::*;
use serde::Deserialize;

use crate::cache::NodeInfo;
use crate::framework::*;
use crate::status::{Code, Diagnosis, FitError, NodeToStatus, Status};
use crate::types::{PodInfo, labels_of, pod_namespace, pod_priority};

pub const NAME: &str = "DefaultPreemption";
pub const MSG_NO_VICTIMS: &str = "No preemption victims found for incoming pod";
pub const MSG_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";

/// `DefaultPreemptionArgs`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DefaultPreemptionArgs {
    #[serde(default = "ten")]
    pub min_candidate_nodes_percentage: i32,
    #[serde(default = "hundred")]
    pub min_candidate_nodes_absolute: i32,
}

fn ten() -> i32 {
    10
}
fn hundred() -> i32 {
    100
}

impl Default for DefaultPreemptionArgs {
    fn default() -> Self {
        DefaultPreemptionArgs {
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
        }
    }
}

pub struct DefaultPreemption {
    args: DefaultPreemptionArgs,
    lister: Arc<dyn ClusterLister>,
}

impl std::fmt::Debug for DefaultPreemption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefaultPreemption")
            .field("args", &self.args)
            .finish()
    }
}

type VictimsResult = Result<(Vec<Arc<Pod>>, usize), Status>;

/// A node where preemption would work, with its victims.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub node: String,
    pub victims: Vec<Arc<Pod>>,
    pub num_pdb_violations: usize,
}

fn start_time(p: &Pod) -> Option<&Time> {
    p.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .or(p.metadata.creation_timestamp.as_ref())
}

/// `MoreImportantPod`: higher priority, then earlier start.
pub fn more_important(a: &Pod, b: &Pod) -> bool {
    let (pa, pb) = (pod_priority(a), pod_priority(b));
    if pa != pb {
        return pa > pb;
    }
    match (start_time(a), start_time(b)) {
        (Some(x), Some(y)) => x.0 < y.0,
        (Some(_), None) => true,
        _ => false,
    }
}

/// Splits pods (sorted) into PDB-violating and non-violating
/// (`filterPodsWithPDBViolation`).
fn split_by_pdb(
    pods: &[Arc<PodInfo>],
    pdbs: &[Arc<PodDisruptionBudget>],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i32> = pdbs
        .iter()
        .map(|p| {
            p.status
                .as_ref()
                .map(|s| s.disruptions_allowed)
                .unwrap_or(0)
        })
        .collect();
    let selectors: Vec<Option<Selector>> = pdbs
        .iter()
        .map(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .and_then(|s| Selector::from_label_selector(s).ok())
                .filter(|s| !s.is_empty())
        })
        .collect();
    let mut violating = Vec::new();
    let mut ok = Vec::new();
    for pi in pods {
        let labels = labels_of(&pi.pod.metadata);
        let mut violated = false;
        if !labels.is_empty() {
            for (i, pdb) in pdbs.iter().enumerate() {
                if pdb.metadata.namespace.as_deref() != Some(pod_namespace(&pi.pod)) {
                    continue;
                }
                let Some(sel) = &selectors[i] else { continue };
                if !sel.matches(labels) {
                    continue;
                }
                let name = pi.pod.metadata.name.clone().unwrap_or_default();
                if pdb
                    .status
                    .as_ref()
                    .and_then(|s| s.disrupted_pods.as_ref())
                    .is_some_and(|d| d.contains_key(&name))
                {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated {
            violating.push(pi.clone());
        } else {
            ok.push(pi.clone());
        }
    }
    (violating, ok)
}

impl DefaultPreemption {
    pub fn new(args: DefaultPreemptionArgs, lister: Arc<dyn ClusterLister>) -> Self {
        DefaultPreemption { args, lister }
    }

    fn num_candidates(&self, n: usize) -> usize {
        let by_pct = n * self.args.min_candidate_nodes_percentage.max(0) as usize / 100;
        by_pct
            .max(self.args.min_candidate_nodes_absolute.max(0) as usize)
            .min(n)
    }

    /// `SelectVictimsOnNode`.
    fn select_victims(
        &self,
        ctx: &PostFilterContext<'_>,
        node: &NodeInfo,
        pdbs: &[Arc<PodDisruptionBudget>],
    ) -> Result<(Vec<Arc<Pod>>, usize), Status> {
        let fw = ctx.fw;
        let pod = ctx.pod;
        let mut state = ctx.state.clone();
        let mut ni = node.clone();
        let prio = pod_priority(&pod.pod);
        let mut potential: Vec<Arc<PodInfo>> = node
            .pods
            .iter()
            .filter(|p| pod_priority(&p.pod) < prio)
            .cloned()
            .collect();
        for p in &potential {
            ni.remove_pod(&p.pod);
            let s = fw.run_pre_filter_remove_pod(&mut state, pod, p, &ni);
            if !s.is_success() {
                return Err(s);
            }
        }
        if potential.is_empty() {
            return Err(Status::unresolvable(MSG_NO_VICTIMS));
        }
        let s = fw.run_filter_with_nominated_pods(&state, pod, &ni, ctx.nominator);
        if !s.is_success() {
            return Err(s);
        }
        potential.sort_by(|a, b| {
            if more_important(&a.pod, &b.pod) {
                std::cmp::Ordering::Less
            } else if more_important(&b.pod, &a.pod) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        });
        let (violating, non_violating) = split_by_pdb(&potential, pdbs);
        let mut victims: Vec<Arc<Pod>> = Vec::new();
        let mut num_violating = 0;
        let mut reprieve =
            |p: &Arc<PodInfo>, state: &mut CycleState, ni: &mut NodeInfo| -> Result<bool, Status> {
                ni.add_pod(p.clone());
                let s = fw.run_pre_filter_add_pod(state, pod, p, ni);
                if !s.is_success() {
                    return Err(s);
                }
                let fits = fw
                    .run_filter_with_nominated_pods(state, pod, ni, ctx.nominator)
                    .is_success();
                if !fits {
                    ni.remove_pod(&p.pod);
                    let s = fw.run_pre_filter_remove_pod(state, pod, p, ni);
                    if !s.is_success() {
                        return Err(s);
                    }
                    victims.push(p.pod.clone());
                }
                Ok(fits)
            };
        for p in &violating {
            if !reprieve(p, &mut state, &mut ni)? {
                num_violating += 1;
            }
        }
        for p in &non_violating {
            reprieve(p, &mut state, &mut ni)?;
        }
        if !violating.is_empty() && !non_violating.is_empty() {
            victims.sort_by(|a, b| {
                if more_important(a, b) {
                    std::cmp::Ordering::Less
                } else if more_important(b, a) {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            });
        }
        Ok((victims, num_violating))
    }

    fn pdbs(&self) -> Vec<Arc<PodDisruptionBudget>> {
        self.lister.pdbs("")
    }
}

/// `pickOneNodeForPreemption`.
pub fn pick_one(cands: &[Candidate]) -> Option<&Candidate> {
    if cands.is_empty() {
        return None;
    }
    let mut idx: Vec<usize> = (0..cands.len()).collect();
    fn keep_min(idx: &mut Vec<usize>, f: impl Fn(usize) -> i64) {
        let m = idx.iter().map(|i| f(*i)).min().unwrap_or(0);
        idx.retain(|i| f(*i) == m);
    }
    // Zero-victim candidates win at once.
    if let Some(c) = cands.iter().find(|c| c.victims.is_empty()) {
        return Some(c);
    }
    keep_min(&mut idx, |i| cands[i].num_pdb_violations as i64);
    keep_min(&mut idx, |i| pod_priority(&cands[i].victims[0]) as i64);
    keep_min(&mut idx, |i| {
        cands[i]
            .victims
            .iter()
            .map(|v| pod_priority(v) as i64 + i32::MAX as i64 + 1)
            .sum()
    });
    keep_min(&mut idx, |i| cands[i].victims.len() as i64);
    if idx.len() > 1 {
        // The latest "earliest start time of the highest-priority victims".
        let earliest = |i: usize| {
            let hp = pod_priority(&cands[i].victims[0]);
            cands[i]
                .victims
                .iter()
                .filter(|v| pod_priority(v) == hp)
                .filter_map(|v| start_time(v).map(|t| t.0))
                .min()
        };
        let best = idx
            .iter()
            .copied()
            .max_by_key(|i| earliest(*i))
            .unwrap_or(idx[0]);
        return Some(&cands[best]);
    }
    idx.first().map(|i| &cands[*i])
}

impl PostFilterPlugin for DefaultPreemption {
    fn post_filter(&self, ctx: &PostFilterContext<'_>) -> (Option<PostFilterResult>, Status) {
        let (r, s) = self.preempt(ctx);
        if s.reasons.is_empty() {
            return (r, s);
        }
        (
            r,
            Status::with_reasons(s.code, vec![format!("preemption: {}", s.message())]),
        )
    }
}

impl DefaultPreemption {
    fn preempt(&self, ctx: &PostFilterContext<'_>) -> (Option<PostFilterResult>, Status) {
        let pod = &ctx.pod.pod;
        let spec = pod.spec.as_ref();
        if spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
            return (
                None,
                Status::unresolvable("not eligible due to preemptionPolicy=Never."),
            );
        }
        let prio = pod_priority(pod);
        if let Some(nn) = pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .filter(|n| !n.is_empty())
        {
            let unresolvable = ctx
                .statuses
                .get(nn)
                .is_some_and(|s| s.code == Code::UnschedulableAndUnresolvable);
            if !unresolvable
                && let Some(ni) = ctx.snapshot.get(nn)
                && ni.pods.iter().any(|p| {
                    p.pod.metadata.deletion_timestamp.is_some() && pod_priority(&p.pod) < prio
                })
            {
                return (
                    None,
                    Status::unresolvable(
                        "not eligible due to a terminating pod on the nominated node.",
                    ),
                );
            }
        }
        let all = &ctx.snapshot.node_info_list;
        let mut statuses = NodeToStatus::default();
        let mut potential = Vec::new();
        for n in all {
            if ctx
                .statuses
                .get(n.name())
                .is_some_and(|s| s.code == Code::UnschedulableAndUnresolvable)
            {
                statuses
                    .map
                    .insert(n.name().to_string(), Status::unresolvable(MSG_NOT_HELPFUL));
            } else {
                potential.push(n.clone());
            }
        }
        let pdbs = if potential.is_empty() {
            vec![]
        } else {
            self.pdbs()
        };
        let want = self.num_candidates(potential.len());
        let offset = if potential.is_empty() {
            0
        } else {
            (crate::schedule_one::random_u64() as usize) % potential.len()
        };
        let rotated: Vec<Arc<NodeInfo>> = potential
            .iter()
            .cycle()
            .skip(offset)
            .take(potential.len())
            .cloned()
            .collect();
        let results: Vec<(String, VictimsResult)> = rotated
            .par_iter()
            .map(|n| (n.name().to_string(), self.select_victims(ctx, n, &pdbs)))
            .collect();
        let mut candidates = Vec::new();
        for (name, r) in results {
            match r {
                Ok((victims, num_pdb_violations)) if candidates.len() < want => {
                    candidates.push(Candidate {
                        node: name,
                        victims,
                        num_pdb_violations,
                    })
                }
                Ok(_) => {}
                Err(s) => {
                    statuses.map.insert(name, s);
                }
            }
        }
        if candidates.is_empty() {
            let fe = FitError {
                num_all_nodes: all.len(),
                diagnosis: Diagnosis {
                    node_to_status: statuses,
                    ..Default::default()
                },
            };
            let msg = fe.to_string();
            let msg = msg.strip_suffix('.').unwrap_or(&msg).to_string();
            return (
                Some(PostFilterResult::default()),
                Status::unschedulable(msg),
            );
        }
        let Some(best) = pick_one(&candidates) else {
            return (None, Status::error("no candidate selected"));
        };
        // Lower-priority pods nominated to the node lose their nomination.
        let clear = ctx
            .nominator
            .nominated_pods_for_node(&best.node)
            .into_iter()
            .filter(|p| pod_priority(&p.pod) < prio)
            .map(|p| p.pod.clone())
            .collect();
        (
            Some(PostFilterResult {
                nominated_node_name: Some(best.node.clone()),
                victims: best.victims.clone(),
                clear_nominated: clear,
            }),
            Status::success(),
        )
    }
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }
    fn post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
}

/// Victims by node, for tests.
pub fn victims_by_node(c: &[Candidate]) -> HashMap<String, Vec<String>> {
    c.iter()
        .map(|c| {
            (
                c.node.clone(),
                c.victims
                    .iter()
                    .map(|v| v.metadata.name.clone().unwrap_or_default())
                    .collect(),
            )
        })
        .collect()
}
