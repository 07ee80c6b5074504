//! Helpers for plugin tests: objects from JSON, and running one plugin the way the
//! framework does.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use crate::cache::{NodeInfo, Snapshot};
use crate::framework::{CycleState, NodeScore, Plugin};
use crate::status::Status;
use crate::types::PodInfo;

fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o,
    }
}

/// A pod named `name` in `default` with one container; `over` is merged over it.
pub fn pod(name: &str, over: Value) -> Arc<Pod> {
    let mut base = json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    });
    merge(&mut base, over);
    Arc::new(serde_json::from_value(base).expect("pod json"))
}

/// A node named `name` with 4 cpu, 8Gi, 110 pods allocatable; `over` merged over it.
pub fn node(name: &str, over: Value) -> Arc<Node> {
    let mut base = json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
    });
    merge(&mut base, over);
    Arc::new(serde_json::from_value(base).expect("node json"))
}

/// Requests of one container.
pub fn requests(cpu: &str, mem: &str) -> Value {
    json!({"spec": {"containers": [{"name": "c", "image": "busybox",
        "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}})
}

pub fn pi(p: &Arc<Pod>) -> PodInfo {
    PodInfo::new(p.clone())
}

pub fn snapshot(nodes: Vec<(Arc<Node>, Vec<Arc<Pod>>)>) -> Snapshot {
    Snapshot::from_nodes(
        nodes
            .into_iter()
            .map(|(n, ps)| NodeInfo::with_pods(n, ps))
            .collect(),
    )
}

/// PreFilter (if any) then Filter on every node of the snapshot, in list order by name.
pub fn filter_all(p: &dyn Plugin, pod: &Arc<Pod>, snap: &Snapshot) -> Vec<(String, Status)> {
    let info = pi(pod);
    let mut state = CycleState::new();
    if let Some(pf) = p.pre_filter() {
        let (_, s) = pf.pre_filter(&mut state, &info, snap);
        if s.is_skip() {
            return snap
                .node_info_list
                .iter()
                .map(|n| (n.name().to_string(), Status::success()))
                .collect();
        }
        if !s.is_success() {
            return snap
                .node_info_list
                .iter()
                .map(|n| (n.name().to_string(), s.clone()))
                .collect();
        }
    }
    let mut out: Vec<(String, Status)> = snap
        .node_info_list
        .iter()
        .map(|n| {
            (
                n.name().to_string(),
                p.filter().expect("filter").filter(&state, &info, n),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// PreScore (if any), Score, NormalizeScore over all nodes; sorted by node name.
pub fn score_all(p: &dyn Plugin, pod: &Arc<Pod>, snap: &Snapshot) -> Vec<(String, i64)> {
    let info = pi(pod);
    let mut state = CycleState::new();
    let nodes = snap.node_info_list.clone();
    if let Some(ps) = p.pre_score() {
        let s = ps.pre_score(&mut state, &info, &nodes, snap);
        if s.is_skip() {
            let mut v: Vec<(String, i64)> =
                nodes.iter().map(|n| (n.name().to_string(), 0)).collect();
            v.sort();
            return v;
        }
        assert!(s.is_success(), "pre_score: {s}");
    }
    let sp = p.score().expect("score");
    let mut scores: Vec<NodeScore> = nodes
        .iter()
        .map(|n| {
            let (v, s) = sp.score(&state, &info, n);
            assert!(s.is_success(), "score: {s}");
            NodeScore {
                name: n.name().to_string(),
                score: v,
            }
        })
        .collect();
    if sp.has_normalize() {
        let s = sp.normalize_score(&state, &info, &mut scores);
        assert!(s.is_success(), "normalize: {s}");
    }
    let mut v: Vec<(String, i64)> = scores.into_iter().map(|s| (s.name, s.score)).collect();
    v.sort();
    v
}
