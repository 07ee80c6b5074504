//! Node lifecycle (upstream `pkg/controller/nodelifecycle`).
//!
//! A node whose status heartbeat and Lease both stop for longer than
//! `--node-monitor-grace-period` (50 s) gets its conditions set to `Unknown`, its pods
//! marked not ready, and the `node.kubernetes.io/unreachable` (or, for Ready=False,
//! `not-ready`) NoSchedule and NoExecute taints; MemoryPressure, DiskPressure,
//! PIDPressure, NetworkUnavailable and `spec.unschedulable` give their NoSchedule taints
//! (upstream's TaintNodesByCondition pass). NoExecute taints are added at a
//! per-zone rate (`--node-eviction-rate` 0.1/s, `--secondary-node-eviction-rate`
//! 0.01/s for partially disrupted large zones, none when every zone is fully
//! disrupted). The pods on a node with NoExecute taints are evicted by
//! [`crate::tainteviction`], a controller of its own as upstream's.
//!
//! Events as upstream's `node-controller`: `RegisteredNode` for each node it starts
//! watching and `RemovingNode` when one is deleted, `NodeNotReady` about a node that
//! stopped heartbeating and about each of its pods marked not ready.
//!
//! Pure part: [`observe_health`], [`is_stale`], [`unknown_conditions`], [`desired_taints`],
//! [`zone_state`], [`zone_rate`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use parking_lot::Mutex;
use serde_json::json;

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, key_of};
use ferrokube_client::workqueue::WorkQueue;
use ferrokube_component_base::ratelimit::TokenBucket;

use crate::events::{EventSink, EventType, emit};
use crate::replicaset::is_not_found;
use crate::util::{pod_condition, pod_node};
use crate::{Action, Controller, Result, enqueue_live};

pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// Settings (upstream flags).
#[derive(Debug, Clone)]
pub struct NodeLifecycleConfig {
    /// `--node-monitor-grace-period` (50 s).
    pub grace_period: Duration,
    /// `--node-monitor-period` (5 s).
    pub monitor_period: Duration,
    /// `--node-startup-grace-period` (60 s).
    pub startup_grace_period: Duration,
    /// `--node-eviction-rate` (0.1 nodes/s).
    pub eviction_rate: f32,
    /// `--secondary-node-eviction-rate` (0.01 nodes/s).
    pub secondary_eviction_rate: f32,
    /// `--large-cluster-size-threshold` (50).
    pub large_cluster_threshold: usize,
    /// `--unhealthy-zone-threshold` (0.55).
    pub unhealthy_zone_threshold: f32,
}

impl Default for NodeLifecycleConfig {
    fn default() -> Self {
        NodeLifecycleConfig {
            grace_period: Duration::from_secs(50),
            monitor_period: Duration::from_secs(5),
            startup_grace_period: Duration::from_secs(60),
            eviction_rate: 0.1,
            secondary_eviction_rate: 0.01,
            large_cluster_threshold: 50,
            unhealthy_zone_threshold: 0.55,
        }
    }
}

fn node_condition<'a>(node: &'a Node, t: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == t)
}

/// The Ready condition's status (`Unknown` when missing).
pub fn ready_status(node: &Node) -> &str {
    node_condition(node, "Ready")
        .map(|c| c.status.as_str())
        .unwrap_or("Unknown")
}

/// What the controller last saw of a node's signs of life (upstream's `nodeHealthData`).
/// `probed_at` is this controller's clock when it saw one change, so neither the node's
/// clock nor a restart of the controller counts against the node: a node first seen
/// gets a whole grace period from then, as upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeHealth {
    /// The Ready condition's `lastHeartbeatTime` as last seen; `None` with
    /// `has_ready` false when the node had no Ready condition.
    ready_heartbeat: Option<Timestamp>,
    has_ready: bool,
    /// The latest Lease `renewTime` seen.
    lease_renew: Option<Timestamp>,
    /// When a sign of life was last observed.
    pub probed_at: Timestamp,
}

/// The node's health after observing it and its Lease now (upstream
/// `tryUpdateNodeHealth`'s bookkeeping): a changed Ready heartbeat or a later Lease
/// renewal is a sign of life at `now`; a node seen for the first time without a Ready
/// condition is judged from its creation (with the startup grace period, see
/// [`is_stale`]).
pub fn observe_health(
    saved: Option<&NodeHealth>,
    node: &Node,
    lease_renew: Option<Timestamp>,
    now: Timestamp,
) -> NodeHealth {
    let ready = node_condition(node, "Ready");
    let ready_heartbeat = ready
        .and_then(|c| c.last_heartbeat_time.as_ref())
        .map(|t| t.0);
    let mut probed_at = match saved {
        None if ready.is_none() => {
            Timestamp::from_second(crate::util::created_secs(&node.metadata)).unwrap_or(now)
        }
        None => now,
        Some(s) if s.has_ready != ready.is_some() || s.ready_heartbeat != ready_heartbeat => now,
        Some(s) => s.probed_at,
    };
    let saved_lease = saved.and_then(|s| s.lease_renew);
    if let Some(renewed) = lease_renew
        && saved_lease.is_none_or(|s| s < renewed)
    {
        probed_at = now;
    }
    NodeHealth {
        ready_heartbeat,
        has_ready: ready.is_some(),
        lease_renew: lease_renew.max(saved_lease),
        probed_at,
    }
}

/// Whether the node has shown no sign of life for longer than the grace period (the
/// startup grace period while it has never posted a Ready condition).
pub fn is_stale(health: &NodeHealth, now: Timestamp, cfg: &NodeLifecycleConfig) -> bool {
    let grace = if health.has_ready {
        cfg.grace_period
    } else {
        cfg.startup_grace_period
    };
    now.as_second() - health.probed_at.as_second() > grace.as_secs() as i64
}

/// Upstream `tryUpdateNodeHealth` for a stale node: Ready and the pressure conditions
/// set to Unknown (`None` if they already are).
pub fn unknown_conditions(node: &Node, now: Timestamp) -> Option<Vec<NodeCondition>> {
    let mut conds: Vec<NodeCondition> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut changed = false;
    for t in ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"] {
        match conds.iter_mut().find(|c| c.type_ == t) {
            Some(c) if c.status != "Unknown" => {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some("Kubelet stopped posting node status.".into());
                c.last_transition_time = Some(Time(now));
                changed = true;
            }
            Some(_) => {}
            None => {
                conds.push(NodeCondition {
                    type_: t.into(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: node.metadata.creation_timestamp.clone(),
                    last_transition_time: Some(Time(now)),
                });
                changed = true;
            }
        }
    }
    changed.then_some(conds)
}

fn taint(key: &str, effect: &str, now: Timestamp) -> Taint {
    Taint {
        key: key.into(),
        effect: effect.into(),
        value: None,
        time_added: (effect == "NoExecute").then_some(Time(now)),
    }
}

/// NoSchedule taints for conditions other than Ready (upstream
/// `nodeConditionToTaintKeyStatusMap`): the condition, the status that taints, the key.
const CONDITION_TAINTS: [(&str, &str, &str); 4] = [
    (
        "MemoryPressure",
        "True",
        "node.kubernetes.io/memory-pressure",
    ),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
    (
        "NetworkUnavailable",
        "True",
        "node.kubernetes.io/network-unavailable",
    ),
];
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// The node's taints as upstream's TaintNodesByCondition and taint-based eviction
/// passes want them: not-ready / unreachable (NoSchedule and NoExecute) from its Ready
/// condition, a NoSchedule taint per pressure condition that is True and for
/// `spec.unschedulable`; other taints are kept, and kept taints keep their timeAdded.
pub fn desired_taints(node: &Node, now: Timestamp) -> Vec<Taint> {
    let current: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let mut wanted: Vec<(&str, &str)> = Vec::new();
    let ready_key = match ready_status(node) {
        "False" => Some(TAINT_NOT_READY),
        "Unknown" => Some(TAINT_UNREACHABLE),
        _ => None,
    };
    if let Some(k) = ready_key {
        wanted.push((k, "NoSchedule"));
        wanted.push((k, "NoExecute"));
    }
    for (condition, status, key) in CONDITION_TAINTS {
        if node_condition(node, condition).is_some_and(|c| c.status == status) {
            wanted.push((key, "NoSchedule"));
        }
    }
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        wanted.push((TAINT_UNSCHEDULABLE, "NoSchedule"));
    }
    let managed = |t: &Taint| {
        t.key == TAINT_NOT_READY
            || t.key == TAINT_UNREACHABLE
            || (t.effect == "NoSchedule"
                && (t.key == TAINT_UNSCHEDULABLE
                    || CONDITION_TAINTS.iter().any(|(_, _, k)| t.key == *k)))
    };
    let mut out: Vec<Taint> = current
        .iter()
        .filter(|t| !managed(t) || wanted.iter().any(|(k, e)| t.key == *k && t.effect == *e))
        .cloned()
        .collect();
    for (key, effect) in wanted {
        if !out.iter().any(|t| t.key == key && t.effect == effect) {
            out.push(taint(key, effect, now));
        }
    }
    out
}

/// Upstream zone states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneState {
    Initial,
    Normal,
    PartialDisruption,
    FullDisruption,
}

/// Upstream `ComputeZoneState`: full when no node is ready, partial when more than
/// two are not ready and they are at least `threshold` of the zone.
pub fn zone_state(ready: usize, not_ready: usize, threshold: f32) -> ZoneState {
    let total = ready + not_ready;
    if total == 0 {
        return ZoneState::Initial;
    }
    if ready == 0 {
        return ZoneState::FullDisruption;
    }
    if not_ready > 2 && (not_ready as f32) / (total as f32) >= threshold {
        return ZoneState::PartialDisruption;
    }
    ZoneState::Normal
}

/// Upstream `setLimiterInZone` / `handleDisruption`: the NoExecute tainting rate of a
/// zone (nodes/s); 0 stops it. `all_full`: every zone is fully disrupted (the
/// controller then assumes its own connectivity is at fault).
pub fn zone_rate(
    state: ZoneState,
    zone_size: usize,
    all_full: bool,
    cfg: &NodeLifecycleConfig,
) -> f32 {
    if all_full {
        return 0.0;
    }
    match state {
        ZoneState::Normal | ZoneState::Initial | ZoneState::FullDisruption => cfg.eviction_rate,
        ZoneState::PartialDisruption => {
            if zone_size > cfg.large_cluster_threshold {
                cfg.secondary_eviction_rate
            } else {
                0.0
            }
        }
    }
}

/// The node lifecycle controller.
pub struct NodeLifecycleController {
    client: kube::Client,
    nodes: Store<Node>,
    leases: Store<Lease>,
    pods: Store<Pod>,
    cfg: NodeLifecycleConfig,
    limiters: Mutex<HashMap<String, (f32, Arc<TokenBucket>)>>,
    events: Arc<dyn EventSink>,
    /// The nodes seen so far by name, with their UIDs (upstream's `knownNodeSet`).
    known: Mutex<HashMap<String, String>>,
    /// Each node's signs of life as last observed (upstream's `nodeHealthMap`).
    health: Mutex<HashMap<String, NodeHealth>>,
}

/// Upstream's `RecordNodeEvent` note.
fn node_event_note(node: &str, event: &str) -> String {
    format!("Node {node} event: {event}")
}

impl NodeLifecycleController {
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        cfg: NodeLifecycleConfig,
        events: Arc<dyn EventSink>,
    ) -> Arc<Self> {
        Arc::new(NodeLifecycleController {
            client,
            nodes: factory.informer::<Node>().store(),
            leases: factory
                .namespaced_informer::<Lease>(LEASE_NAMESPACE)
                .store(),
            pods: factory.informer::<Pod>().store(),
            cfg,
            limiters: Mutex::new(HashMap::new()),
            events,
            known: Mutex::new(HashMap::new()),
            health: Mutex::new(HashMap::new()),
        })
    }

    /// An event about the node `name` (`uid`) itself.
    fn node_event(&self, name: &str, uid: &str, type_: EventType, reason: &str, note: String) {
        self.events.publish(crate::events::Event {
            regarding: k8s_openapi::api::core::v1::ObjectReference {
                kind: Some("Node".into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            type_,
            reason: reason.into(),
            action: reason.into(),
            note,
        });
    }

    fn zone_of(n: &Node) -> String {
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(ZONE_LABEL).cloned())
            .unwrap_or_default()
    }

    /// May a NoExecute taint be added in `zone` now?
    fn allow_taint(&self, zone: &str) -> bool {
        let mut zones: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for n in self.nodes.list() {
            let e = zones.entry(Self::zone_of(&n)).or_default();
            if ready_status(&n) == "True" {
                e.0 += 1
            } else {
                e.1 += 1
            }
        }
        let states: BTreeMap<&String, ZoneState> = zones
            .iter()
            .map(|(z, (r, nr))| (z, zone_state(*r, *nr, self.cfg.unhealthy_zone_threshold)))
            .collect();
        let all_full =
            !states.is_empty() && states.values().all(|s| *s == ZoneState::FullDisruption);
        let (r, nr) = zones.get(zone).copied().unwrap_or_default();
        let state = states
            .get(&zone.to_string())
            .copied()
            .unwrap_or(ZoneState::Initial);
        let rate = zone_rate(state, r + nr, all_full, &self.cfg);
        if rate <= 0.0 {
            return false;
        }
        let mut l = self.limiters.lock();
        let entry = l
            .entry(zone.to_string())
            .or_insert_with(|| (rate, Arc::new(TokenBucket::new(f64::from(rate), 1))));
        if entry.0 != rate {
            *entry = (rate, Arc::new(TokenBucket::new(f64::from(rate), 1)));
        }
        entry.1.try_acquire()
    }
}

#[async_trait::async_trait]
impl Controller for NodeLifecycleController {
    fn name(&self) -> &'static str {
        "node-lifecycle"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        enqueue_live(factory, queue, |_: &Node| true);
        let this = self.clone();
        factory.informer::<Node>().add_event_handler(
            move |n: Notification<Node>| {
                if let Notification::Deleted { obj, .. } = &n {
                    let name = obj.metadata.name.clone().unwrap_or_default();
                    this.health.lock().remove(&name);
                    if let Some(uid) = this.known.lock().remove(&name) {
                        let note = node_event_note(
                            &name,
                            &format!("Removing Node {name} from Controller"),
                        );
                        this.node_event(&name, &uid, EventType::Normal, "RemovingNode", note);
                    }
                }
            },
            None,
        );
        let _ = factory.namespaced_informer::<Lease>(LEASE_NAMESPACE);
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(node) = self.nodes.get(key) else {
            return Ok(Action::Done);
        };
        let now = Timestamp::now();
        let api: Api<Node> = Api::all(self.client.clone());
        let lease = self
            .leases
            .get(&key_of(Some(LEASE_NAMESPACE), key))
            .and_then(|l| l.spec.as_ref()?.renew_time.as_ref().map(|t| t.0));
        let mut node = (*node).clone();
        let mut next = self.cfg.monitor_period;
        let uid = node.metadata.uid.clone().unwrap_or_default();
        if self
            .known
            .lock()
            .insert(key.to_owned(), uid.clone())
            .is_none()
        {
            let note = node_event_note(key, &format!("Registered Node {key} in Controller"));
            self.node_event(key, &uid, EventType::Normal, "RegisteredNode", note);
        }

        // 1. Health.
        let health = {
            let mut seen = self.health.lock();
            let health = observe_health(seen.get(key), &node, lease, now);
            seen.insert(key.to_owned(), health.clone());
            health
        };
        if is_stale(&health, now, &self.cfg)
            && let Some(conds) = unknown_conditions(&node, now)
        {
            let was_ready = ready_status(&node) == "True";
            // Written against the version judged (upstream's UpdateStatus), so a status
            // the kubelet posted meanwhile is never overwritten: the conflict requeues,
            // and the next look sees its heartbeat.
            let patch = json!({
                "metadata": {"resourceVersion": node.metadata.resource_version},
                "status": {"conditions": conds},
            });
            node = match api
                .patch_status(key, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(n) => n,
                Err(e) if is_not_found(&e) => return Ok(Action::Done),
                Err(e) => return Err(e.into()),
            };
            // The controller's own write is no sign of life.
            let written = NodeHealth {
                probed_at: health.probed_at,
                ..observe_health(Some(&health), &node, lease, now)
            };
            self.health.lock().insert(key.to_owned(), written);
            if was_ready {
                // Upstream's RecordNodeStatusChange.
                let note = format!("Node {key} status is now: NodeNotReady");
                self.node_event(key, &uid, EventType::Normal, "NodeNotReady", note);
            }
            // Upstream MarkPodsNotReady.
            for p in self.pods.list() {
                if pod_node(&p) != Some(key)
                    || pod_condition(&p, "Ready").is_none_or(|c| c.status == "False")
                {
                    continue;
                }
                let mut conds = p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.clone())
                    .unwrap_or_default();
                for c in conds.iter_mut().filter(|c| c.type_ == "Ready") {
                    c.status = "False".into();
                    c.last_transition_time = Some(Time(now));
                }
                let pods: Api<Pod> = Api::namespaced(
                    self.client.clone(),
                    p.metadata.namespace.as_deref().unwrap_or_default(),
                );
                let patch = json!({"status": {"conditions": conds}});
                if let Err(e) = pods
                    .patch_status(
                        p.metadata.name.as_deref().unwrap_or_default(),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await
                    && !is_not_found(&e)
                {
                    return Err(e.into());
                }
                emit(
                    &*self.events,
                    &*p,
                    EventType::Warning,
                    "NodeNotReady",
                    "Node is not ready".into(),
                );
            }
        }

        // 2. Taints (NoExecute ones added at the zone's rate).
        let current: Vec<Taint> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let mut want = desired_taints(&node, now);
        let adds_no_execute = want.iter().any(|t| {
            t.effect == "NoExecute"
                && !current
                    .iter()
                    .any(|c| c.key == t.key && c.effect == t.effect)
        });
        if adds_no_execute && !self.allow_taint(&Self::zone_of(&node)) {
            want.retain(|t| {
                t.effect != "NoExecute"
                    || current
                        .iter()
                        .any(|c| c.key == t.key && c.effect == t.effect)
            });
            next = next.min(Duration::from_secs(1));
        }
        if want != current {
            let patch = json!({"metadata": {"resourceVersion": node.metadata.resource_version}, "spec": {"taints": want}});
            api.patch(key, &PatchParams::default(), &Patch::Merge(patch))
                .await?;
        }
        Ok(Action::RequeueAfter(next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn node(ready: &str, heartbeat: i64) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "creationTimestamp": "1970-01-01T00:00:00Z"},
            "spec": {"taints": [{"key": "dedicated", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": ready,
                "lastHeartbeatTime": Time(ts(heartbeat))}]},
        }))
        .unwrap()
    }

    #[test]
    fn staleness_counts_from_what_the_controller_saw() {
        let cfg = NodeLifecycleConfig::default();
        // A heartbeat long before the controller started: the node still gets a whole
        // grace period from its first observation.
        let n = node("True", 1000);
        let first = observe_health(None, &n, None, ts(5000));
        assert!(!is_stale(&first, ts(5050), &cfg));
        assert!(is_stale(&first, ts(5051), &cfg));
        // Seeing the same heartbeat again is no sign of life; a new one is.
        let again = observe_health(Some(&first), &n, None, ts(5040));
        assert_eq!(again.probed_at, ts(5000));
        let beat = observe_health(Some(&again), &node("True", 1010), None, ts(5045));
        assert!(!is_stale(&beat, ts(5090), &cfg));
        // A Lease renewal keeps the node healthy; the same renewal seen again does not.
        let leased = observe_health(Some(&first), &n, Some(ts(3)), ts(5040));
        assert_eq!(leased.probed_at, ts(5040));
        let same_lease = observe_health(Some(&leased), &n, Some(ts(3)), ts(5080));
        assert_eq!(same_lease.probed_at, ts(5040));
        assert!(is_stale(&same_lease, ts(5091), &cfg));
        let renewed = observe_health(Some(&same_lease), &n, Some(ts(4)), ts(5085));
        assert_eq!(renewed.probed_at, ts(5085));
        // A node that never posted a Ready condition: from its creation, with the
        // startup grace period.
        let mut fresh = n.clone();
        fresh.status = None;
        let unborn = observe_health(None, &fresh, None, ts(30));
        assert_eq!(unborn.probed_at, ts(0));
        assert!(!is_stale(&unborn, ts(60), &cfg));
        assert!(is_stale(&unborn, ts(61), &cfg));

        let conds = unknown_conditions(&n, ts(2000)).unwrap();
        let r = conds.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(
            (r.status.as_str(), r.reason.as_deref()),
            ("Unknown", Some("NodeStatusUnknown"))
        );
        assert_eq!(conds.len(), 4);
        let never = conds.iter().find(|c| c.type_ == "DiskPressure").unwrap();
        assert_eq!(
            never.last_heartbeat_time, n.metadata.creation_timestamp,
            "a condition never posted is dated from the node's creation"
        );
        let mut u = n.clone();
        u.status.as_mut().unwrap().conditions = Some(conds);
        assert!(unknown_conditions(&u, ts(2001)).is_none());
    }

    #[test]
    fn taints_follow_ready() {
        let keys = |n: &Node| -> Vec<(String, String)> {
            desired_taints(n, ts(5))
                .into_iter()
                .map(|t| (t.key, t.effect))
                .collect()
        };
        assert_eq!(
            keys(&node("True", 0)),
            vec![("dedicated".into(), "NoSchedule".into())]
        );
        let unk = keys(&node("Unknown", 0));
        assert!(unk.contains(&(TAINT_UNREACHABLE.into(), "NoExecute".into())));
        assert!(unk.contains(&(TAINT_UNREACHABLE.into(), "NoSchedule".into())));
        let nr = keys(&node("False", 0));
        assert!(nr.contains(&(TAINT_NOT_READY.into(), "NoExecute".into())));
        // Flipping from Unknown to False swaps the taint; back to True removes it.
        let mut n = node("Unknown", 0);
        n.spec.as_mut().unwrap().taints = Some(desired_taints(&n, ts(5)));
        n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
        assert!(!keys(&n).iter().any(|(k, _)| k == TAINT_UNREACHABLE));
        n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "True".into();
        assert_eq!(keys(&n).len(), 1);
    }

    #[test]
    fn taints_follow_pressure_conditions_and_unschedulable() {
        let mut n = node("True", 0);
        n.status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .extend([
                NodeCondition {
                    type_: "DiskPressure".into(),
                    status: "True".into(),
                    ..Default::default()
                },
                NodeCondition {
                    type_: "MemoryPressure".into(),
                    status: "False".into(),
                    ..Default::default()
                },
            ]);
        n.spec.as_mut().unwrap().unschedulable = Some(true);
        let keys = |n: &Node| -> Vec<(String, String)> {
            let mut k: Vec<_> = desired_taints(n, ts(5))
                .into_iter()
                .map(|t| (t.key, t.effect))
                .collect();
            k.sort();
            k
        };
        let no_schedule = |k: &str| (k.to_string(), "NoSchedule".to_string());
        assert_eq!(
            keys(&n),
            vec![
                no_schedule("dedicated"),
                no_schedule("node.kubernetes.io/disk-pressure"),
                no_schedule(TAINT_UNSCHEDULABLE),
            ]
        );
        // Pressure gone and the node uncordoned: only the user's taint stays.
        n.spec.as_mut().unwrap().taints = Some(desired_taints(&n, ts(5)));
        n.status.as_mut().unwrap().conditions.as_mut().unwrap()[1].status = "False".into();
        n.spec.as_mut().unwrap().unschedulable = None;
        assert_eq!(keys(&n), vec![no_schedule("dedicated")]);
    }

    #[test]
    fn zones() {
        let cfg = NodeLifecycleConfig::default();
        assert_eq!(zone_state(0, 0, 0.55), ZoneState::Initial);
        assert_eq!(zone_state(10, 0, 0.55), ZoneState::Normal);
        assert_eq!(zone_state(0, 3, 0.55), ZoneState::FullDisruption);
        assert_eq!(
            zone_state(1, 2, 0.55),
            ZoneState::Normal,
            "at most two not ready is never partial"
        );
        assert_eq!(zone_state(2, 3, 0.55), ZoneState::PartialDisruption);
        assert_eq!(zone_rate(ZoneState::Normal, 10, false, &cfg), 0.1);
        assert_eq!(
            zone_rate(ZoneState::PartialDisruption, 10, false, &cfg),
            0.0
        );
        assert_eq!(
            zone_rate(ZoneState::PartialDisruption, 100, false, &cfg),
            0.01
        );
        assert_eq!(zone_rate(ZoneState::FullDisruption, 10, false, &cfg), 0.1);
        assert_eq!(zone_rate(ZoneState::FullDisruption, 10, true, &cfg), 0.0);
    }
}
