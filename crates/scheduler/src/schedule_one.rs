//! The scheduling algorithm of one cycle (`schedule_one.go`: `schedulePod`,
//! `findNodesThatFitPod`, `prioritizeNodes`, `selectHost`), without IO: PreFilter,
//! Filter in parallel over the nodes (stopping at `numFeasibleNodesToFind`), Score,
//! and a random pick among the best.

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::Arc;

use rayon::prelude::*;

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{CycleState, Framework, NoNominator, NodeScore, Nominator};
use crate::status::{Code, Diagnosis, FitError, Status};
use crate::types::PodInfo;

pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: i64 = 5;

thread_local! {
    static RNG: Cell<u64> = Cell::new({
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9E37_79B9_7F4A_7C15);
        let local = 0u8;
        (t ^ (&local as *const u8 as u64).rotate_left(32)) | 1
    });
}

/// A fast per-thread pseudo-random number (xorshift64*); not for cryptography.
pub fn random_u64() -> u64 {
    RNG.with(|r| {
        let mut x = r.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        r.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

/// `numFeasibleNodesToFind`: all nodes below 100; otherwise the percentage
/// (adaptive when 0: 50% minus 1% per 125 nodes, at least 5%), at least 100.
pub fn num_feasible_nodes_to_find(percentage: i32, num_all: usize) -> usize {
    if num_all < MIN_FEASIBLE_NODES_TO_FIND {
        return num_all;
    }
    let mut pct = percentage as i64;
    if pct <= 0 {
        pct = (50 - num_all as i64 / 125).max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
    }
    if pct >= 100 {
        return num_all;
    }
    let n = num_all * pct as usize / 100;
    n.max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// The outcome of a successful cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleResult {
    pub suggested_host: String,
    pub evaluated_nodes: usize,
    pub feasible_nodes: usize,
}

/// Why a cycle failed.
#[derive(Debug, Clone)]
pub enum ScheduleError {
    /// No node fits: the diagnosis says why.
    Fit(Box<FitError>),
    /// A plugin or internal error.
    Error(Status),
    /// The cluster has no nodes.
    NoNodes,
}

impl std::fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScheduleError::Fit(e) => e.fmt(f),
            ScheduleError::Error(s) => f.write_str(&s.message()),
            ScheduleError::NoNodes => f.write_str("no nodes available to schedule pods"),
        }
    }
}

/// State that survives between cycles.
#[derive(Debug, Default)]
pub struct Algorithm {
    /// Where the next cycle starts its node search (round-robin fairness).
    pub next_start_node_index: usize,
    /// The global `percentageOfNodesToScore` (a profile's own wins).
    pub percentage_of_nodes_to_score: i32,
}

impl Algorithm {
    /// `schedulePod`.
    pub fn schedule_pod(
        &mut self,
        fw: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
        snap: &Snapshot,
        nominator: &dyn Nominator,
    ) -> Result<ScheduleResult, ScheduleError> {
        if snap.num_nodes() == 0 {
            return Err(ScheduleError::NoNodes);
        }
        let (feasible, diagnosis) = self.find_nodes_that_fit(fw, state, pod, snap, nominator)?;
        if feasible.is_empty() {
            return Err(ScheduleError::Fit(Box::new(FitError {
                num_all_nodes: snap.num_nodes(),
                diagnosis,
            })));
        }
        let evaluated = feasible.len() + diagnosis.node_to_status.map.len();
        if feasible.len() == 1 {
            return Ok(ScheduleResult {
                suggested_host: feasible[0].name().to_string(),
                evaluated_nodes: evaluated,
                feasible_nodes: 1,
            });
        }
        let scores =
            prioritize_nodes(fw, state, pod, &feasible, snap).map_err(ScheduleError::Error)?;
        Ok(ScheduleResult {
            suggested_host: select_host(&scores),
            evaluated_nodes: evaluated,
            feasible_nodes: feasible.len(),
        })
    }

    /// `findNodesThatFitPod`.
    pub fn find_nodes_that_fit(
        &mut self,
        fw: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
        snap: &Snapshot,
        nominator: &dyn Nominator,
    ) -> Result<(Vec<Arc<NodeInfo>>, Diagnosis), ScheduleError> {
        let mut diagnosis = Diagnosis::default();
        let (pre_result, s, rejectors) = fw.run_pre_filter(state, pod, snap);
        diagnosis.unschedulable_plugins = rejectors;
        if !s.is_success() {
            if !s.is_rejected() {
                return Err(ScheduleError::Error(s));
            }
            diagnosis.pre_filter_msg = s.message();
            if !s.plugin.is_empty() {
                diagnosis.unschedulable_plugins.insert(s.plugin.clone());
            }
            diagnosis.node_to_status.absent = Some(s);
            return Ok((vec![], diagnosis));
        }
        // A nominated node (from an earlier preemption) is tried first.
        if let Some(nn) = pod
            .pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .filter(|n| !n.is_empty())
            && let Some(ni) = snap.get(nn)
            && ni.node.is_some()
            && fw
                .run_filter_with_nominated_pods(state, pod, ni, nominator)
                .is_success()
        {
            return Ok((vec![ni.clone()], diagnosis));
        }
        // The snapshot's own list unless PreFilter narrowed it (no per-cycle copy of
        // 5,000 `Arc`s).
        let narrowed: Vec<Arc<NodeInfo>>;
        let nodes: &[Arc<NodeInfo>] = match pre_result.as_ref().and_then(|r| r.node_names.as_ref())
        {
            None => &snap.node_info_list,
            Some(names) => {
                diagnosis.node_to_status.absent = Some(Status::unresolvable(
                    "node(s) didn't satisfy plugin(s) PreFilter result",
                ));
                narrowed = snap
                    .node_info_list
                    .iter()
                    .filter(|n| names.contains(n.name()))
                    .cloned()
                    .collect();
                &narrowed
            }
        };
        // Nominations are read once per cycle: with none, the filters skip the
        // per-node lookup (and the queue lock it takes).
        let nominator: &dyn Nominator = if nominator.has_nominated_pods() {
            nominator
        } else {
            &NoNominator
        };
        let pct = fw
            .percentage_of_nodes_to_score
            .unwrap_or(self.percentage_of_nodes_to_score);
        let (feasible, statuses, processed) = find_feasible(
            fw,
            state,
            pod,
            nodes,
            self.next_start_node_index,
            num_feasible_nodes_to_find(pct, nodes.len()),
            nominator,
        );
        if !nodes.is_empty() {
            self.next_start_node_index = (self.next_start_node_index + processed) % nodes.len();
        }
        for (name, s) in statuses {
            if s.code == Code::Error {
                return Err(ScheduleError::Error(s));
            }
            if !s.plugin.is_empty() {
                diagnosis.unschedulable_plugins.insert(s.plugin.clone());
            }
            diagnosis.node_to_status.map.insert(name, s);
        }
        Ok((feasible, diagnosis))
    }
}

type FeasibleResult = (Vec<Arc<NodeInfo>>, Vec<(String, Status)>, usize);

/// Rounds of the node search smaller than this are filtered on the calling thread:
/// handing a few hundred cheap filter calls to the thread pool costs more (wake-ups,
/// stealing, a result buffer) than it saves on two cores.
pub const PARALLEL_FILTER_MIN_NODES: usize = 1024;

/// The smallest round of the node search (when only a few more feasible nodes are
/// wanted, evaluate a handful at once rather than one by one).
const MIN_FILTER_ROUND: usize = 32;

/// Runs the filters over `nodes` from `start` (wrapping around) until `want`
/// feasible nodes are found. Each round evaluates as many nodes as feasible ones
/// are still missing (all of them may fit), inline when the round is small and in
/// parallel otherwise. Returns the feasible nodes in search order, the failed
/// statuses, and how many nodes were processed (where the next search starts).
fn find_feasible(
    fw: &Framework,
    state: &CycleState,
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
    start: usize,
    want: usize,
    nominator: &dyn Nominator,
) -> FeasibleResult {
    let n = nodes.len();
    let mut feasible = Vec::with_capacity(want.min(n));
    let mut failed = Vec::new();
    let mut processed = 0;
    let eval = |offset: usize| {
        let idx = (start + offset) % n;
        let s = fw.run_filter_with_nominated_pods(state, pod, &nodes[idx], nominator);
        (idx, s)
    };
    let mut next = 0;
    while next < n && feasible.len() < want {
        let round = (want - feasible.len()).max(MIN_FILTER_ROUND).min(n - next);
        // Records one evaluated node; false once enough feasible ones are found.
        let mut take = |(idx, s): (usize, Status)| {
            if feasible.len() >= want {
                return false;
            }
            processed += 1;
            if s.is_success() {
                feasible.push(nodes[idx].clone());
            } else {
                failed.push((nodes[idx].name().to_string(), s));
            }
            true
        };
        if round < PARALLEL_FILTER_MIN_NODES {
            for offset in next..next + round {
                if !take(eval(offset)) {
                    break;
                }
            }
        } else {
            let results: Vec<(usize, Status)> = (next..next + round)
                .into_par_iter()
                .with_min_len(PARALLEL_FILTER_MIN_NODES / 4)
                .map(eval)
                .collect();
            for r in results {
                if !take(r) {
                    break;
                }
            }
        }
        next += round;
    }
    (feasible, failed, processed)
}

/// `prioritizeNodes`: PreScore + Score over the feasible nodes.
pub fn prioritize_nodes(
    fw: &Framework,
    state: &mut CycleState,
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
    snap: &Snapshot,
) -> Result<Vec<NodeScore>, Status> {
    let s = fw.run_pre_score(state, pod, nodes, snap);
    if !s.is_success() {
        return Err(s);
    }
    fw.run_score(state, pod, nodes)
}

/// `selectHost`: the highest total score, ties broken uniformly at random
/// (reservoir sampling).
pub fn select_host(scores: &[NodeScore]) -> String {
    let mut best = 0;
    let mut count = 0u64;
    for (i, s) in scores.iter().enumerate() {
        if i == 0 || s.score > scores[best].score {
            best = i;
            count = 1;
        } else if s.score == scores[best].score {
            count += 1;
            if random_u64().is_multiple_of(count) {
                best = i;
            }
        }
    }
    scores.get(best).map(|s| s.name.clone()).unwrap_or_default()
}

/// The names of the plugins that rejected a pod.
pub fn rejectors(d: &Diagnosis) -> HashSet<String> {
    d.unschedulable_plugins.clone()
}
