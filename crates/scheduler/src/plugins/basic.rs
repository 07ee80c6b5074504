//! Small plugins: PrioritySort, SchedulingGates, NodeName, NodeUnschedulable,
//! NodePorts, TaintToleration, ImageLocality, DefaultBinder.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Taint};

use crate::cache::{HostPort, NodeInfo, Snapshot, pod_host_ports};
use crate::framework::*;
use crate::status::Status;
use crate::types::{
    PodInfo, QueuedPodInfo, find_untolerated_taint, pod_node_name, pod_priority, pod_tolerations,
    tolerates_taint,
};

pub const PRIORITY_SORT: &str = "PrioritySort";
pub const SCHEDULING_GATES: &str = "SchedulingGates";
pub const NODE_NAME: &str = "NodeName";
pub const NODE_UNSCHEDULABLE: &str = "NodeUnschedulable";
pub const NODE_PORTS: &str = "NodePorts";
pub const TAINT_TOLERATION: &str = "TaintToleration";
pub const IMAGE_LOCALITY: &str = "ImageLocality";
pub const DEFAULT_BINDER: &str = "DefaultBinder";

fn node_changed_hint() -> Vec<ClusterEventWithHint> {
    vec![
        ClusterEventWithHint::always(EVENT_NODE_ADD),
        ClusterEventWithHint::always(EVENT_NODE_UPDATE),
    ]
}

/// Higher priority first, then earlier queue timestamp.
#[derive(Debug)]
pub struct PrioritySort;
impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        let (pa, pb) = (pod_priority(a.pod()), pod_priority(b.pod()));
        pa > pb || (pa == pb && a.timestamp < b.timestamp)
    }
}
impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        PRIORITY_SORT
    }
    fn queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        Some(self)
    }
}

/// Keeps pods with `spec.schedulingGates` out of activeQ.
#[derive(Debug)]
pub struct SchedulingGates;
impl PreEnqueuePlugin for SchedulingGates {
    fn pre_enqueue(&self, pod: &Pod) -> Status {
        let gates: Vec<&str> = pod
            .spec
            .iter()
            .flat_map(|s| s.scheduling_gates.iter().flatten())
            .map(|g| g.name.as_str())
            .collect();
        if gates.is_empty() {
            return Status::success();
        }
        Status::unresolvable(format!(
            "waiting for scheduling gates: [{}]",
            gates.join(" ")
        ))
    }
}
impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        SCHEDULING_GATES
    }
    fn pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![ClusterEventWithHint::always(EVENT_UNSCHEDULED_POD_UPDATE)]
    }
}

/// `spec.nodeName` must name the node, if set.
#[derive(Debug)]
pub struct NodeName;
pub const ERR_REASON_NODE_NAME: &str = "node(s) didn't match the requested node name";
impl FilterPlugin for NodeName {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let want = pod_node_name(&pod.pod);
        if want.is_empty() || want == node.name() {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_NODE_NAME)
        }
    }
}
impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NODE_NAME
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![ClusterEventWithHint::always(EVENT_NODE_ADD)]
    }
}

/// Unschedulable nodes take only pods tolerating `node.kubernetes.io/unschedulable`.
#[derive(Debug)]
pub struct NodeUnschedulable;
pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let unsched = node
            .node()
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        if !unsched {
            return Status::success();
        }
        let taint = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        if tolerates_taint(pod_tolerations(&pod.pod), &taint) {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_UNSCHEDULABLE)
        }
    }
}
impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NODE_UNSCHEDULABLE
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        node_changed_hint()
    }
}

/// Host ports must be free on the node.
#[derive(Debug)]
pub struct NodePorts;
pub const ERR_REASON_PORTS: &str = "node(s) didn't have free ports for the requested pod ports";
const PORTS_KEY: &str = "PreFilterNodePorts";
impl PreFilterPlugin for NodePorts {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let ports = pod_host_ports(&pod.pod);
        if ports.is_empty() {
            return (None, Status::skip());
        }
        state.write(PORTS_KEY, ports);
        (None, Status::success())
    }
}
impl FilterPlugin for NodePorts {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let computed;
        let ports = match state.read::<Vec<HostPort>>(PORTS_KEY) {
            Some(p) => p,
            None => {
                computed = pod_host_ports(&pod.pod);
                &computed
            }
        };
        if ports.iter().any(|p| node.used_ports.conflicts(p)) {
            Status::unschedulable(ERR_REASON_PORTS)
        } else {
            Status::success()
        }
    }
}
impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NODE_PORTS
    }
    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(EVENT_ASSIGNED_POD_DELETE, |pod, old, _| {
                // Only a deleted pod that freed one of our ports helps.
                let EventObject::Pod(deleted) = old else {
                    return QueueingHint::Queue;
                };
                let freed = pod_host_ports(deleted);
                if pod_host_ports(pod).iter().any(|p| {
                    freed
                        .iter()
                        .any(|f| f.port == p.port && f.protocol == p.protocol)
                }) {
                    QueueingHint::Queue
                } else {
                    QueueingHint::Skip
                }
            }),
            ClusterEventWithHint::always(EVENT_NODE_ADD),
            ClusterEventWithHint::always(EVENT_NODE_UPDATE),
        ]
    }
}

/// NoSchedule/NoExecute taints must be tolerated; untolerated PreferNoSchedule taints
/// lower the score.
#[derive(Debug)]
pub struct TaintToleration;
impl FilterPlugin for TaintToleration {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let taints = node
            .node()
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or(&[]);
        match find_untolerated_taint(
            taints,
            pod_tolerations(&pod.pod),
            &["NoSchedule", "NoExecute"],
        ) {
            None => Status::success(),
            Some(t) => Status::unresolvable(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                t.key,
                t.value.as_deref().unwrap_or("")
            )),
        }
    }
}
impl ScorePlugin for TaintToleration {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        let tols: Vec<_> = pod_tolerations(&pod.pod)
            .iter()
            .filter(|t| {
                matches!(
                    t.effect.as_deref(),
                    None | Some("") | Some("PreferNoSchedule")
                )
            })
            .cloned()
            .collect();
        let n = node
            .node()
            .spec
            .iter()
            .flat_map(|s| s.taints.iter().flatten())
            .filter(|t| t.effect == "PreferNoSchedule" && !tolerates_taint(&tols, t))
            .count();
        (n as i64, Status::success())
    }
    fn has_normalize(&self) -> bool {
        true
    }
    fn normalize_score(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, true, scores);
        Status::success()
    }
}
impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        TAINT_TOLERATION
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let hint = |pod: &Pod, _old: EventObject<'_>, new: EventObject<'_>| {
            let EventObject::Node(n) = new else {
                return QueueingHint::Queue;
            };
            let taints = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or(&[]);
            if find_untolerated_taint(taints, pod_tolerations(pod), &["NoSchedule", "NoExecute"])
                .is_none()
            {
                QueueingHint::Queue
            } else {
                QueueingHint::Skip
            }
        };
        vec![
            ClusterEventWithHint::with_hint(EVENT_NODE_ADD, hint),
            ClusterEventWithHint::with_hint(EVENT_NODE_UPDATE, hint),
        ]
    }
}

/// Favors nodes that already have the pod's images.
#[derive(Debug)]
pub struct ImageLocality;
const MB: i64 = 1024 * 1024;
const MIN_THRESHOLD: i64 = 23 * MB;
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// `normalizedImageName`: images without a tag or digest get `:latest`.
pub fn normalized_image_name(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    if !last.contains(':') && !name.contains('@') {
        format!("{name}:latest")
    } else {
        name.to_string()
    }
}

const PRE_SCORE_KEY: &str = "PreScoreImageLocality";

/// What ImageLocality's Score needs per node, computed once per cycle: the node
/// count and the pod's normalized image names (not re-normalized per node).
#[derive(Debug, Clone)]
struct ImageLocalityState {
    total_nodes: usize,
    /// Init and regular containers counted, with or without an image.
    containers: i64,
    images: Vec<String>,
}

impl ImageLocalityState {
    fn new(pod: &PodInfo, total_nodes: usize) -> Self {
        let mut containers = 0;
        let mut images = Vec::new();
        if let Some(s) = pod.pod.spec.as_ref() {
            for c in s
                .init_containers
                .iter()
                .flatten()
                .chain(s.containers.iter())
            {
                containers += 1;
                if let Some(img) = c.image.as_deref() {
                    images.push(normalized_image_name(img));
                }
            }
        }
        ImageLocalityState {
            total_nodes,
            containers,
            images,
        }
    }
}

impl PreScorePlugin for ImageLocality {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
        snap: &Snapshot,
    ) -> Status {
        state.write(
            PRE_SCORE_KEY,
            ImageLocalityState::new(pod, snap.num_nodes()),
        );
        Status::success()
    }
}

impl ScorePlugin for ImageLocality {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        let computed;
        let st = match state.read::<ImageLocalityState>(PRE_SCORE_KEY) {
            Some(st) => st,
            None => {
                computed = ImageLocalityState::new(pod, 1);
                &computed
            }
        };
        let total = st.total_nodes.max(1);
        let mut sum = 0i64;
        if !node.image_states.is_empty() {
            for img in &st.images {
                if let Some(is) = node.image_states.get(img) {
                    sum += (is.size as f64 * is.num_nodes as f64 / total as f64) as i64;
                }
            }
        }
        let max_threshold = MAX_CONTAINER_THRESHOLD * st.containers.max(1);
        let sum = sum.clamp(MIN_THRESHOLD, max_threshold);
        (
            MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max_threshold - MIN_THRESHOLD),
            Status::success(),
        )
    }
}
impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        IMAGE_LOCALITY
    }
    fn pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

/// Binds through the API (`pods/binding`).
pub struct DefaultBinder {
    pub binder: Option<Arc<dyn PodBinder>>,
}
impl std::fmt::Debug for DefaultBinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DefaultBinder")
    }
}
#[async_trait::async_trait]
impl BindPlugin for DefaultBinder {
    async fn bind(&self, pod: &PodInfo, node: &str) -> Status {
        match &self.binder {
            None => Status::error("DefaultBinder has no API client"),
            Some(b) => match b.bind(&pod.pod, node).await {
                Ok(()) => Status::success(),
                Err(e) => Status::error(e),
            },
        }
    }
}
impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        DEFAULT_BINDER
    }
    fn bind(&self) -> Option<&dyn BindPlugin> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::*;
    use crate::status::Code;
    use serde_json::json;
    use std::time::Instant;

    #[test]
    fn priority_sort() {
        let t = Instant::now();
        let q = |prio: i32, dt: u64| {
            let mut q = QueuedPodInfo::new(
                pod("p", json!({"spec": {"priority": prio}})),
                t + std::time::Duration::from_secs(dt),
            );
            q.attempts = 0;
            q
        };
        let cases = [
            ((10, 5), (1, 0), true),
            ((1, 0), (10, 5), false),
            ((1, 0), (1, 5), true),
            ((1, 5), (1, 0), false),
        ];
        for ((pa, ta), (pb, tb), want) in cases {
            assert_eq!(PrioritySort.less(&q(pa, ta), &q(pb, tb)), want);
        }
    }

    #[test]
    fn scheduling_gates() {
        assert!(PreEnqueuePlugin::pre_enqueue(&SchedulingGates, &pod("p", json!({}))).is_success());
        let s = PreEnqueuePlugin::pre_enqueue(
            &SchedulingGates,
            &pod(
                "p",
                json!({"spec": {"schedulingGates": [{"name": "a"}, {"name": "b"}]}}),
            ),
        );
        assert_eq!(s.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "waiting for scheduling gates: [a b]");
    }

    #[test]
    fn node_name() {
        let snap = snapshot(vec![
            (node("n1", json!({})), vec![]),
            (node("n2", json!({})), vec![]),
        ]);
        let cases = [
            (json!({}), vec![true, true]),
            (json!({"spec": {"nodeName": "n2"}}), vec![false, true]),
        ];
        for (p, want) in cases {
            let got = filter_all(&NodeName, &pod("p", p), &snap);
            let ok: Vec<bool> = got.iter().map(|(_, s)| s.is_success()).collect();
            assert_eq!(ok, want);
            for (_, s) in got.iter().filter(|(_, s)| !s.is_success()) {
                assert_eq!(s.message(), ERR_REASON_NODE_NAME);
                assert_eq!(s.code, Code::UnschedulableAndUnresolvable);
            }
        }
    }

    #[test]
    fn node_unschedulable() {
        let snap = snapshot(vec![
            (node("n1", json!({"spec": {"unschedulable": true}})), vec![]),
            (
                node("n2", json!({"spec": {"unschedulable": false}})),
                vec![],
            ),
        ]);
        let plain = filter_all(&NodeUnschedulable, &pod("p", json!({})), &snap);
        assert_eq!(plain[0].1.message(), ERR_REASON_UNSCHEDULABLE);
        assert!(plain[1].1.is_success());
        let tolerant = pod(
            "p",
            json!({"spec": {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}}),
        );
        assert!(
            filter_all(&NodeUnschedulable, &tolerant, &snap)
                .iter()
                .all(|(_, s)| s.is_success())
        );
    }

    #[test]
    fn node_ports() {
        let with_port = |name: &str, ip: &str, port: i32, proto: &str| {
            pod(
                name,
                json!({"spec": {"containers": [{"name": "c", "ports": [
                    {"containerPort": 80, "hostPort": port, "hostIP": ip, "protocol": proto}]}]}}),
            )
        };
        let existing = with_port("e", "127.0.0.1", 8080, "TCP");
        let snap = snapshot(vec![(node("n1", json!({})), vec![existing])]);
        let cases = [
            (with_port("a", "127.0.0.1", 8080, "TCP"), false),
            (with_port("b", "127.0.0.2", 8080, "TCP"), true),
            (with_port("c", "0.0.0.0", 8080, "TCP"), false),
            (with_port("d", "127.0.0.1", 8080, "UDP"), true),
            (with_port("e2", "127.0.0.1", 8081, "TCP"), true),
            (pod("none", json!({})), true),
        ];
        for (p, want) in cases {
            let got = filter_all(&NodePorts, &p, &snap);
            assert_eq!(got[0].1.is_success(), want, "{:?}", p.metadata.name);
            if !want {
                assert_eq!(got[0].1.message(), ERR_REASON_PORTS);
                assert_eq!(got[0].1.code, Code::Unschedulable);
            }
        }
    }

    #[test]
    fn taint_toleration_filter_and_score() {
        let cp = node(
            "cp",
            json!({"spec": {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}}),
        );
        let soft = node(
            "soft",
            json!({"spec": {"taints": [{"key": "a", "value": "1", "effect": "PreferNoSchedule"},
                                       {"key": "b", "value": "2", "effect": "PreferNoSchedule"}]}}),
        );
        let soft1 = node(
            "soft1",
            json!({"spec": {"taints": [{"key": "a", "value": "1", "effect": "PreferNoSchedule"}]}}),
        );
        let clean = node("clean", json!({}));
        let snap = snapshot(vec![
            (cp, vec![]),
            (soft, vec![]),
            (soft1, vec![]),
            (clean, vec![]),
        ]);
        let p = pod("p", json!({}));
        let f = filter_all(&TaintToleration, &p, &snap);
        assert_eq!(
            f[1].1.message(),
            "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }"
        );
        assert_eq!(f[1].1.code, Code::UnschedulableAndUnresolvable);
        assert!(
            f.iter()
                .filter(|(n, _)| n != "cp")
                .all(|(_, s)| s.is_success())
        );
        let tol = pod(
            "t",
            json!({"spec": {"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]}}),
        );
        assert!(
            filter_all(&TaintToleration, &tol, &snap)
                .iter()
                .all(|(_, s)| s.is_success())
        );

        let scores = score_all(&TaintToleration, &p, &snap);
        assert_eq!(
            scores,
            vec![
                ("clean".into(), 100),
                ("cp".into(), 100),
                ("soft".into(), 0),
                ("soft1".into(), 50)
            ]
        );
        let tol_a = pod(
            "ta",
            json!({"spec": {"tolerations": [{"key": "a", "operator": "Equal", "value": "1", "effect": "PreferNoSchedule"}]}}),
        );
        let scores = score_all(&TaintToleration, &tol_a, &snap);
        assert_eq!(scores[2], ("soft".into(), 0));
        assert_eq!(scores[3], ("soft1".into(), 100));
    }

    #[test]
    fn image_locality() {
        assert_eq!(normalized_image_name("nginx"), "nginx:latest");
        assert_eq!(
            normalized_image_name("reg:5000/nginx"),
            "reg:5000/nginx:latest"
        );
        assert_eq!(normalized_image_name("nginx:1.2"), "nginx:1.2");
        assert_eq!(
            normalized_image_name("nginx@sha256:abc"),
            "nginx@sha256:abc"
        );
        let big = node(
            "big",
            json!({"status": {"images": [{"names": ["gcr.io/40:latest"], "sizeBytes": 40 * MB},
                                         {"names": ["gcr.io/300:latest"], "sizeBytes": 300 * MB}]}}),
        );
        let small = node(
            "small",
            json!({"status": {"images": [{"names": ["gcr.io/10:latest"], "sizeBytes": 10 * MB}]}}),
        );
        let mut cache = crate::cache::Cache::new(std::time::Duration::ZERO);
        cache.add_node(big);
        cache.add_node(small);
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        let p = pod(
            "p",
            json!({"spec": {"containers": [{"name": "a", "image": "gcr.io/40"}, {"name": "b", "image": "gcr.io/300"}]}}),
        );
        let s = score_all(&ImageLocality, &p, &snap);
        // big: (40+300)/2 MB scaled by 1/2 nodes = 170MB; (170-23)*100/(2000-23) = 7.
        assert_eq!(s, vec![("big".into(), 7), ("small".into(), 0)]);
    }
}
