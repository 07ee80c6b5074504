//! The scheduler cache (`internal/cache`): per-node aggregates ([`NodeInfo`]) built
//! from informer events plus *assumed* pods (placed by the scheduler, binding not yet
//! observed), and the per-cycle [`Snapshot`] updated incrementally.
//!
//! Incrementality: every mutation of a node stamps it with a fresh cache generation
//! and files it in a generation-ordered index. [`Cache::update_snapshot`] walks only
//! the entries newer than the snapshot's generation and swaps in their `Arc`s. The
//! `NodeInfo`s are copy-on-write (`Arc::make_mut`): a node is copied only when the
//! cache mutates it while a snapshot still shares it, so an update copies exactly the
//! changed nodes, never the whole cluster.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::resource::Resource;
use crate::types::{PodInfo, labels_of, node_name, pod_key, pod_node_name};

/// An image present on a node, with how many nodes have it (`ImageStateSummary`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageStateSummary {
    pub size: i64,
    pub num_nodes: usize,
}

/// One used host port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

/// The host ports a pod asks for (`schedutil.GetHostPorts`), defaults applied.
pub fn pod_host_ports(pod: &Pod) -> Vec<HostPort> {
    let mut out = Vec::new();
    for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
        for p in c.ports.iter().flatten() {
            if let Some(hp) = p.host_port.filter(|hp| *hp > 0) {
                out.push(HostPort {
                    ip: p
                        .host_ip
                        .clone()
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| "0.0.0.0".into()),
                    protocol: p
                        .protocol
                        .clone()
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| "TCP".into()),
                    port: hp,
                });
            }
        }
    }
    out
}

/// Host ports in use on a node (`HostPortInfo`), as a multiset.
#[derive(Debug, Clone, Default)]
pub struct HostPortInfo {
    ports: HashMap<HostPort, usize>,
}

impl HostPortInfo {
    pub fn add(&mut self, p: &HostPort) {
        *self.ports.entry(p.clone()).or_default() += 1;
    }
    pub fn remove(&mut self, p: &HostPort) {
        if let Some(n) = self.ports.get_mut(p) {
            *n -= 1;
            if *n == 0 {
                self.ports.remove(p);
            }
        }
    }
    /// `CheckConflict`: same protocol and port, and the same IP or either is 0.0.0.0.
    pub fn conflicts(&self, p: &HostPort) -> bool {
        self.ports.keys().any(|u| {
            u.port == p.port
                && u.protocol == p.protocol
                && (u.ip == p.ip || u.ip == "0.0.0.0" || p.ip == "0.0.0.0")
        })
    }
    pub fn len(&self) -> usize {
        self.ports.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty()
    }
}

/// Aggregated information about one node (`framework.NodeInfo`).
#[derive(Debug, Clone, Default)]
pub struct NodeInfo {
    pub node: Option<Arc<Node>>,
    pub pods: Vec<Arc<PodInfo>>,
    pub pods_with_affinity: Vec<Arc<PodInfo>>,
    pub pods_with_required_anti_affinity: Vec<Arc<PodInfo>>,
    pub used_ports: HostPortInfo,
    /// Sum of the pods' requests.
    pub requested: Resource,
    /// Sum of the pods' requests with the non-zero cpu/memory defaults.
    pub non_zero_requested: Resource,
    pub allocatable: Resource,
    pub image_states: HashMap<String, ImageStateSummary>,
    /// `namespace/claim` -> number of pods on this node using it.
    pub pvc_ref_counts: HashMap<String, usize>,
    /// The cache generation of the last change.
    pub generation: u64,
}

impl NodeInfo {
    pub fn new(node: Option<Arc<Node>>) -> NodeInfo {
        let mut ni = NodeInfo::default();
        if let Some(n) = node {
            ni.set_node(n);
        }
        ni
    }

    /// A NodeInfo for `node` with `pods` on it (tests, preemption).
    pub fn with_pods(node: Arc<Node>, pods: impl IntoIterator<Item = Arc<Pod>>) -> NodeInfo {
        let mut ni = NodeInfo::new(Some(node));
        for p in pods {
            ni.add_pod(Arc::new(PodInfo::new(p)));
        }
        ni
    }

    pub fn name(&self) -> &str {
        self.node.as_deref().map(node_name).unwrap_or("")
    }

    pub fn node(&self) -> &Node {
        static EMPTY: std::sync::OnceLock<Node> = std::sync::OnceLock::new();
        self.node
            .as_deref()
            .unwrap_or_else(|| EMPTY.get_or_init(Node::default))
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        labels_of(&self.node().metadata)
    }

    pub fn set_node(&mut self, node: Arc<Node>) {
        self.allocatable =
            Resource::from_list(node.status.as_ref().and_then(|s| s.allocatable.as_ref()));
        self.node = Some(node);
    }

    pub fn add_pod(&mut self, pi: Arc<PodInfo>) {
        self.update_usage(&pi, true);
        if pi.has_affinity() {
            self.pods_with_affinity.push(pi.clone());
        }
        if !pi.required_anti_affinity.is_empty() {
            self.pods_with_required_anti_affinity.push(pi.clone());
        }
        self.pods.push(pi);
    }

    /// Removes the pod with `pod`'s UID (or key when it has none); false if absent.
    pub fn remove_pod(&mut self, pod: &Pod) -> bool {
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let key = pod_key(pod);
        let same = |p: &Arc<PodInfo>| {
            if uid.is_empty() {
                p.key() == key
            } else {
                p.uid() == uid
            }
        };
        self.pods_with_affinity.retain(|p| !same(p));
        self.pods_with_required_anti_affinity.retain(|p| !same(p));
        if let Some(i) = self.pods.iter().position(same) {
            let pi = self.pods.swap_remove(i);
            self.update_usage(&pi, false);
            true
        } else {
            false
        }
    }

    fn update_usage(&mut self, pi: &PodInfo, add: bool) {
        if add {
            self.requested.add(&pi.requests);
            self.non_zero_requested.add(&pi.non_zero_requests);
        } else {
            self.requested.sub(&pi.requests);
            self.non_zero_requested.sub(&pi.non_zero_requests);
        }
        for hp in pod_host_ports(&pi.pod) {
            if add {
                self.used_ports.add(&hp);
            } else {
                self.used_ports.remove(&hp);
            }
        }
        let ns = pi.pod.metadata.namespace.as_deref().unwrap_or("");
        // Upstream's updatePVCRefCounts: an ephemeral volume uses its generated claim.
        for v in pi.pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            if let Some((claim, _)) = ferrokube_api::ephemeral::claim_of_volume(&pi.pod, v) {
                let k = format!("{ns}/{claim}");
                if add {
                    *self.pvc_ref_counts.entry(k).or_default() += 1;
                } else if let Some(n) = self.pvc_ref_counts.get_mut(&k) {
                    *n -= 1;
                    if *n == 0 {
                        self.pvc_ref_counts.remove(&k);
                    }
                }
            }
        }
    }
}

#[derive(Debug, Clone)]
struct PodState {
    pod: Arc<PodInfo>,
    node: String,
    /// Set once binding finished for an assumed pod: it expires after the TTL.
    deadline: Option<Instant>,
    binding_finished: bool,
}

/// Errors of cache operations (`cache.Cache` returns these as errors upstream).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CacheError {
    #[error("pod {0} is in the cache, so can't be assumed")]
    AlreadyInCache(String),
    #[error("pod {0} wasn't assumed so cannot be forgotten")]
    NotAssumed(String),
    #[error("pod {0} was assumed on {1} but assigned to {2}")]
    WrongNode(String, String, String),
}

/// The scheduler cache.
#[derive(Debug)]
pub struct Cache {
    ttl: Duration,
    generation: u64,
    nodes: HashMap<String, Arc<NodeInfo>>,
    /// Node names by the generation of their last change.
    by_generation: BTreeMap<u64, String>,
    /// Bumped whenever a node is added to or removed from the node list.
    node_set_generation: u64,
    pod_states: HashMap<String, PodState>,
    assumed: HashSet<String>,
    /// image name -> (size, nodes with it).
    image_states: HashMap<String, (i64, HashSet<String>)>,
}

impl Cache {
    /// A cache whose assumed pods expire `ttl` after binding finished (zero: never).
    pub fn new(ttl: Duration) -> Cache {
        Cache {
            ttl,
            generation: 0,
            nodes: HashMap::new(),
            by_generation: BTreeMap::new(),
            node_set_generation: 0,
            pod_states: HashMap::new(),
            assumed: HashSet::new(),
            image_states: HashMap::new(),
        }
    }

    fn touch(&mut self, name: &str) -> &mut NodeInfo {
        self.generation += 1;
        let g = self.generation;
        let entry = self
            .nodes
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(NodeInfo::default()));
        let old = entry.generation;
        let ni = Arc::make_mut(entry);
        ni.generation = g;
        self.by_generation.remove(&old);
        self.by_generation.insert(g, name.to_string());
        ni
    }

    pub fn node_count(&self) -> usize {
        self.nodes.values().filter(|n| n.node.is_some()).count()
    }

    pub fn pod_count(&self) -> usize {
        self.nodes.values().map(|n| n.pods.len()).sum()
    }

    pub fn is_assumed(&self, key: &str) -> bool {
        self.assumed.contains(key)
    }

    pub fn node_info(&self, name: &str) -> Option<&NodeInfo> {
        self.nodes.get(name).map(|a| a.as_ref())
    }

    fn add_pod_to_node(&mut self, pi: Arc<PodInfo>, node: &str) {
        self.touch(node).add_pod(pi);
    }

    fn remove_pod_from_node(&mut self, pod: &Pod, node: &str) {
        if !self.nodes.contains_key(node) {
            return;
        }
        let ni = self.touch(node);
        ni.remove_pod(pod);
        if ni.node.is_none() && ni.pods.is_empty() {
            self.remove_node_entry(node);
        }
    }

    fn remove_node_entry(&mut self, node: &str) {
        if let Some(ni) = self.nodes.remove(node) {
            self.by_generation.remove(&ni.generation);
        }
        self.generation += 1;
        self.node_set_generation = self.generation;
    }

    /// `AssumePod`: the scheduler placed the pod on `node`; count it there now.
    pub fn assume_pod(&mut self, pi: Arc<PodInfo>, node: &str) -> Result<(), CacheError> {
        let key = pi.key();
        if self.pod_states.contains_key(&key) {
            return Err(CacheError::AlreadyInCache(key));
        }
        self.add_pod_to_node(pi.clone(), node);
        self.pod_states.insert(
            key.clone(),
            PodState {
                pod: pi,
                node: node.to_string(),
                deadline: None,
                binding_finished: false,
            },
        );
        self.assumed.insert(key);
        Ok(())
    }

    /// `FinishBinding`: start the assumed pod's expiry clock.
    pub fn finish_binding(&mut self, pod: &Pod, now: Instant) {
        let key = pod_key(pod);
        if self.assumed.contains(&key)
            && let Some(ps) = self.pod_states.get_mut(&key)
        {
            ps.binding_finished = true;
            if !self.ttl.is_zero() {
                ps.deadline = Some(now + self.ttl);
            }
        }
    }

    /// `ForgetPod`: undo an assumption (binding failed).
    pub fn forget_pod(&mut self, pod: &Pod) -> Result<(), CacheError> {
        let key = pod_key(pod);
        if !self.assumed.contains(&key) {
            return Err(CacheError::NotAssumed(key));
        }
        if let Some(ps) = self.pod_states.remove(&key) {
            self.remove_pod_from_node(&ps.pod.pod, &ps.node);
        }
        self.assumed.remove(&key);
        Ok(())
    }

    /// Expires assumed pods whose binding finished more than the TTL ago; returns them.
    pub fn cleanup_assumed(&mut self, now: Instant) -> Vec<String> {
        let expired: Vec<String> = self
            .assumed
            .iter()
            .filter(|k| {
                self.pod_states
                    .get(*k)
                    .is_some_and(|ps| ps.binding_finished && ps.deadline.is_some_and(|d| now >= d))
            })
            .cloned()
            .collect();
        for k in &expired {
            if let Some(ps) = self.pod_states.remove(k) {
                self.remove_pod_from_node(&ps.pod.pod, &ps.node);
            }
            self.assumed.remove(k);
        }
        expired
    }

    /// `AddPod`: an informer saw a bound pod (confirms an assumed one).
    pub fn add_pod(&mut self, pod: Arc<Pod>) {
        let key = pod_key(&pod);
        let node = pod_node_name(&pod).to_string();
        let pi = Arc::new(PodInfo::new(pod));
        if let Some(ps) = self.pod_states.remove(&key) {
            // Assumed (or added before): replace with the informer's version.
            self.remove_pod_from_node(&ps.pod.pod, &ps.node);
        }
        self.assumed.remove(&key);
        self.add_pod_to_node(pi.clone(), &node);
        self.pod_states.insert(
            key,
            PodState {
                pod: pi,
                node,
                deadline: None,
                binding_finished: false,
            },
        );
    }

    /// `UpdatePod`.
    pub fn update_pod(&mut self, new: Arc<Pod>) {
        self.add_pod(new);
    }

    /// `RemovePod`.
    pub fn remove_pod(&mut self, pod: &Pod) {
        let key = pod_key(pod);
        if let Some(ps) = self.pod_states.remove(&key) {
            self.remove_pod_from_node(&ps.pod.pod, &ps.node);
        }
        self.assumed.remove(&key);
    }

    fn image_summaries(&mut self, node: &Node, add: bool) -> HashMap<String, ImageStateSummary> {
        let name = node_name(node).to_string();
        let mut out = HashMap::new();
        for img in node.status.iter().flat_map(|s| s.images.iter().flatten()) {
            for n in img.names.iter().flatten() {
                let e = self
                    .image_states
                    .entry(n.clone())
                    .or_insert_with(|| (img.size_bytes.unwrap_or(0), HashSet::new()));
                if add {
                    e.1.insert(name.clone());
                }
                out.insert(
                    n.clone(),
                    ImageStateSummary {
                        size: e.0,
                        num_nodes: e.1.len(),
                    },
                );
            }
        }
        out
    }

    fn remove_node_images(&mut self, node: &Node) {
        let name = node_name(node);
        for img in node.status.iter().flat_map(|s| s.images.iter().flatten()) {
            for n in img.names.iter().flatten() {
                if let Some(e) = self.image_states.get_mut(n) {
                    e.1.remove(name);
                    if e.1.is_empty() {
                        self.image_states.remove(n);
                    }
                }
            }
        }
    }

    /// `AddNode` / `UpdateNode`.
    pub fn add_node(&mut self, node: Arc<Node>) {
        let name = node_name(&node).to_string();
        let existed = self.nodes.get(&name).is_some_and(|n| n.node.is_some());
        if let Some(old) = self.nodes.get(&name).and_then(|n| n.node.clone()) {
            self.remove_node_images(&old);
        }
        let images = self.image_summaries(&node, true);
        let ni = self.touch(&name);
        ni.set_node(node);
        ni.image_states = images;
        if !existed {
            self.node_set_generation = self.generation;
        }
    }

    pub fn update_node(&mut self, node: Arc<Node>) {
        self.add_node(node);
    }

    /// `RemoveNode`: pods still on it keep a node-less entry until they are deleted.
    pub fn remove_node(&mut self, node: &Node) {
        let name = node_name(node).to_string();
        self.remove_node_images(node);
        let Some(ni) = self.nodes.get(&name) else {
            return;
        };
        if ni.pods.is_empty() {
            self.remove_node_entry(&name);
        } else {
            self.touch(&name).node = None;
            self.node_set_generation = self.generation;
        }
    }

    /// `UpdateSnapshot`: brings `snap` up to date, touching only nodes changed since
    /// its generation. Returns how many node entries were refreshed.
    pub fn update_snapshot(&self, snap: &mut Snapshot) -> usize {
        let mut refreshed = 0;
        let mut update_lists = false;
        let mut changed_in_place = Vec::new();
        for (_, name) in self.by_generation.range(snap.generation + 1..) {
            let Some(ni) = self.nodes.get(name) else {
                continue;
            };
            let old = snap.node_info_map.insert(name.clone(), ni.clone());
            refreshed += 1;
            let had_aff = old
                .as_ref()
                .is_some_and(|o| !o.pods_with_affinity.is_empty());
            let had_anti = old
                .as_ref()
                .is_some_and(|o| !o.pods_with_required_anti_affinity.is_empty());
            if had_aff == ni.pods_with_affinity.is_empty()
                || had_anti == ni.pods_with_required_anti_affinity.is_empty()
            {
                update_lists = true;
            }
            if !ni.pvc_ref_counts.is_empty() || old.is_some_and(|o| !o.pvc_ref_counts.is_empty()) {
                update_lists = true;
            }
            changed_in_place.push(name.clone());
        }
        if snap.node_set_generation != self.node_set_generation {
            snap.node_info_map.retain(|k, _| self.nodes.contains_key(k));
            snap.rebuild_node_list();
            snap.node_set_generation = self.node_set_generation;
            update_lists = true;
        } else {
            for name in changed_in_place {
                if let Some(&i) = snap.index.get(&name) {
                    snap.node_info_list[i] = snap.node_info_map[&name].clone();
                }
            }
        }
        if update_lists {
            snap.rebuild_affinity_lists();
        } else {
            // Refresh the Arcs held by the affinity lists in place.
            for l in [
                &mut snap.have_pods_with_affinity,
                &mut snap.have_pods_with_required_anti_affinity,
            ] {
                for e in l.iter_mut() {
                    if let Some(n) = snap.node_info_map.get(e.name()) {
                        *e = n.clone();
                    }
                }
            }
        }
        snap.generation = self.generation;
        refreshed
    }
}

/// The view of the cluster one scheduling cycle works on.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub node_info_map: HashMap<String, Arc<NodeInfo>>,
    /// Nodes (with a Node object), interleaved by zone like upstream's node tree.
    pub node_info_list: Vec<Arc<NodeInfo>>,
    pub have_pods_with_affinity: Vec<Arc<NodeInfo>>,
    pub have_pods_with_required_anti_affinity: Vec<Arc<NodeInfo>>,
    /// `namespace/claim` of every PVC used by a pod in the cluster.
    pub used_pvcs: HashSet<String>,
    pub generation: u64,
    node_set_generation: u64,
    index: HashMap<String, usize>,
}

impl Snapshot {
    /// A snapshot of fixed nodes and pods (tests, benchmarks).
    pub fn from_nodes(nodes: Vec<NodeInfo>) -> Snapshot {
        let mut s = Snapshot::default();
        for n in nodes {
            s.node_info_map.insert(n.name().to_string(), Arc::new(n));
        }
        s.rebuild_node_list();
        s.rebuild_affinity_lists();
        s
    }

    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.node_info_map.get(name)
    }

    pub fn num_nodes(&self) -> usize {
        self.node_info_list.len()
    }

    fn rebuild_node_list(&mut self) {
        // Zone round-robin: nodes of each zone in name order, zones interleaved.
        let mut zones: BTreeMap<String, Vec<Arc<NodeInfo>>> = BTreeMap::new();
        let mut names: Vec<&String> = self.node_info_map.keys().collect();
        names.sort();
        for n in names {
            let ni = &self.node_info_map[n];
            if ni.node.is_none() {
                continue;
            }
            let l = ni.labels();
            let zone = format!(
                "{}:\x00:{}",
                l.get("topology.kubernetes.io/region").map_or("", |s| s),
                l.get("topology.kubernetes.io/zone").map_or("", |s| s)
            );
            zones.entry(zone).or_default().push(ni.clone());
        }
        let mut list = Vec::with_capacity(self.node_info_map.len());
        let mut iters: Vec<_> = zones.into_values().map(|v| v.into_iter()).collect();
        loop {
            let mut any = false;
            for it in iters.iter_mut() {
                if let Some(n) = it.next() {
                    list.push(n);
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        self.index = list
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name().to_string(), i))
            .collect();
        self.node_info_list = list;
    }

    fn rebuild_affinity_lists(&mut self) {
        self.have_pods_with_affinity = self
            .node_info_list
            .iter()
            .filter(|n| !n.pods_with_affinity.is_empty())
            .cloned()
            .collect();
        self.have_pods_with_required_anti_affinity = self
            .node_info_list
            .iter()
            .filter(|n| !n.pods_with_required_anti_affinity.is_empty())
            .cloned()
            .collect();
        self.used_pvcs = self
            .node_info_map
            .values()
            .flat_map(|n| n.pvc_ref_counts.keys().cloned())
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                           "images": [{"names": ["nginx:latest"], "sizeBytes": 1000}]}
            }))
            .unwrap(),
        )
    }

    fn pod(name: &str, node: &str, cpu: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
                "spec": {"nodeName": node, "containers": [{"name": "c",
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": cpu}}}]}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn node_info_accounts_pods() {
        let mut ni = NodeInfo::new(Some(node("n1")));
        ni.add_pod(Arc::new(PodInfo::new(pod("a", "n1", "500m"))));
        ni.add_pod(Arc::new(PodInfo::new(pod("b", "n1", "1"))));
        assert_eq!(ni.requested.milli_cpu, 1500);
        assert_eq!(ni.non_zero_requested.memory, 2 * 200 * 1024 * 1024);
        assert_eq!(ni.allocatable.milli_cpu, 4000);
        assert_eq!(ni.used_ports.len(), 1);
        assert!(ni.remove_pod(&pod("a", "n1", "500m")));
        assert_eq!(ni.requested.milli_cpu, 1000);
        assert_eq!(ni.used_ports.len(), 1);
        assert!(ni.remove_pod(&pod("b", "n1", "1")));
        assert!(ni.used_ports.is_empty());
        assert!(!ni.remove_pod(&pod("b", "n1", "1")));
    }

    #[test]
    fn assume_forget_confirm_expire() {
        let mut c = Cache::new(Duration::from_secs(30));
        c.add_node(node("n1"));
        let p = pod("a", "", "1");
        c.assume_pod(Arc::new(PodInfo::new(p.clone())), "n1")
            .unwrap();
        assert_eq!(
            c.assume_pod(Arc::new(PodInfo::new(p.clone())), "n1"),
            Err(CacheError::AlreadyInCache("default/a".into()))
        );
        assert_eq!(c.node_info("n1").unwrap().requested.milli_cpu, 1000);
        c.forget_pod(&p).unwrap();
        assert_eq!(c.node_info("n1").unwrap().requested.milli_cpu, 0);
        assert!(c.forget_pod(&p).is_err());

        // Assume, finish binding, expire.
        let t0 = Instant::now();
        c.assume_pod(Arc::new(PodInfo::new(p.clone())), "n1")
            .unwrap();
        c.finish_binding(&p, t0);
        assert!(c.cleanup_assumed(t0 + Duration::from_secs(29)).is_empty());
        assert_eq!(
            c.cleanup_assumed(t0 + Duration::from_secs(30)),
            vec!["default/a".to_string()]
        );
        assert_eq!(c.pod_count(), 0);

        // Assume, then the informer confirms the binding: no longer assumed, no expiry.
        c.assume_pod(Arc::new(PodInfo::new(p.clone())), "n1")
            .unwrap();
        c.finish_binding(&p, t0);
        c.add_pod(pod("a", "n1", "1"));
        assert!(!c.is_assumed("default/a"));
        assert!(c.cleanup_assumed(t0 + Duration::from_secs(3600)).is_empty());
        assert_eq!(c.node_info("n1").unwrap().requested.milli_cpu, 1000);
        c.remove_pod(&pod("a", "n1", "1"));
        assert_eq!(c.pod_count(), 0);
    }

    #[test]
    fn snapshot_is_incremental() {
        let mut c = Cache::new(Duration::ZERO);
        for i in 0..10 {
            c.add_node(node(&format!("n{i}")));
        }
        let mut s = Snapshot::default();
        assert_eq!(c.update_snapshot(&mut s), 10);
        assert_eq!(s.num_nodes(), 10);
        let before: Vec<*const NodeInfo> = s.node_info_list.iter().map(Arc::as_ptr).collect();
        // Nothing changed: nothing refreshed.
        assert_eq!(c.update_snapshot(&mut s), 0);

        c.add_pod(pod("a", "n3", "1"));
        assert_eq!(c.update_snapshot(&mut s), 1);
        assert_eq!(s.get("n3").unwrap().requested.milli_cpu, 1000);
        let after: Vec<*const NodeInfo> = s.node_info_list.iter().map(Arc::as_ptr).collect();
        let changed: Vec<usize> = (0..10).filter(|i| before[*i] != after[*i]).collect();
        assert_eq!(changed.len(), 1, "only the changed node is replaced");
        assert_eq!(s.node_info_list[changed[0]].name(), "n3");

        // The old snapshot copy is unaffected by later cache changes (copy on write).
        let held = s.get("n3").unwrap().clone();
        c.add_pod(pod("b", "n3", "1"));
        assert_eq!(held.requested.milli_cpu, 1000);
        assert_eq!(c.update_snapshot(&mut s), 1);
        assert_eq!(s.get("n3").unwrap().requested.milli_cpu, 2000);

        // Node removal and addition rebuild the list.
        c.remove_node(&node("n0"));
        c.add_node(node("n10"));
        c.update_snapshot(&mut s);
        assert_eq!(s.num_nodes(), 10);
        assert!(s.get("n0").is_none());
        assert!(s.get("n10").is_some());
        // Image state counts nodes with the image.
        assert_eq!(
            s.get("n10").unwrap().image_states["nginx:latest"].num_nodes,
            10
        );
    }

    #[test]
    fn snapshot_tracks_affinity_lists() {
        let mut c = Cache::new(Duration::ZERO);
        c.add_node(node("n1"));
        c.add_node(node("n2"));
        let mut s = Snapshot::default();
        c.update_snapshot(&mut s);
        assert!(s.have_pods_with_affinity.is_empty());
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "aff", "namespace": "default", "uid": "u-aff"},
            "spec": {"nodeName": "n2", "containers": [{"name": "c"}],
              "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}}
        }))
        .unwrap();
        c.add_pod(Arc::new(p.clone()));
        c.update_snapshot(&mut s);
        assert_eq!(s.have_pods_with_affinity.len(), 1);
        assert_eq!(s.have_pods_with_required_anti_affinity[0].name(), "n2");
        c.remove_pod(&p);
        c.update_snapshot(&mut s);
        assert!(s.have_pods_with_required_anti_affinity.is_empty());
    }
}
