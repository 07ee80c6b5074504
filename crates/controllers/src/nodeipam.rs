//! Node IPAM (upstream `pkg/controller/nodeipam`, the `RangeAllocator`): with
//! `--allocate-node-cidrs`, each node without a pod CIDR gets the next free block of
//! `--node-cidr-mask-size` bits from `--cluster-cidr` in `spec.podCIDR` and
//! `spec.podCIDRs`, as CNI plugins such as flannel expect. Blocks overlapping
//! `--service-cluster-ip-range` are never handed out; a deleted node's block is free
//! again. One worker, so two nodes never get the same block.
//!
//! Pure part: [`next_free_block`]. IO part: [`NodeIpamController`].

use std::collections::HashMap;
use std::sync::Arc;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use parking_lot::Mutex;
use serde_json::json;

use ferrokube_client::informer::{SharedInformerFactory, Store};
use ferrokube_client::workqueue::WorkQueue;

use crate::events::{EventSink, EventType, emit};
use crate::replicaset::is_not_found;
use crate::{Action, Controller, Result, enqueue_live};

/// Settings (upstream flags).
#[derive(Debug, Clone, Default)]
pub struct NodeIpamConfig {
    /// `--allocate-node-cidrs`: nothing is allocated without it.
    pub allocate_node_cidrs: bool,
    /// `--cluster-cidr`.
    pub cluster_cidr: Option<IpNet>,
    /// `--node-cidr-mask-size` (24 for IPv4, 64 for IPv6 by default).
    pub node_cidr_mask_size: Option<u8>,
    /// `--service-cluster-ip-range`.
    pub service_cidr: Option<IpNet>,
}

impl NodeIpamConfig {
    /// The block size: the flag, or upstream's default for the family.
    pub fn mask(&self) -> Option<u8> {
        let cluster = self.cluster_cidr?;
        Some(self.node_cidr_mask_size.unwrap_or(match cluster {
            IpNet::V4(_) => 24,
            IpNet::V6(_) => 64,
        }))
    }

    /// Why the settings cannot work (upstream's start-up checks), if they cannot.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !self.allocate_node_cidrs {
            return Ok(());
        }
        let Some(cluster) = self.cluster_cidr else {
            return Err("--cluster-cidr is required with --allocate-node-cidrs".into());
        };
        let mask = self.mask().unwrap_or_default();
        if mask < cluster.prefix_len() || mask > cluster.max_prefix_len() {
            return Err(format!(
                "--node-cidr-mask-size {mask} does not fit in --cluster-cidr {cluster}"
            ));
        }
        if mask - cluster.prefix_len() > 16 {
            // Upstream's cidrset limit: at most 2^16 blocks.
            return Err(format!(
                "--node-cidr-mask-size {mask} gives more than 65536 blocks of --cluster-cidr {cluster}"
            ));
        }
        Ok(())
    }
}

fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// The first block of `mask` bits in `cluster` that no `used` block and no `reserved`
/// range overlaps.
pub fn next_free_block(
    cluster: IpNet,
    mask: u8,
    used: &[IpNet],
    reserved: Option<IpNet>,
) -> Option<IpNet> {
    cluster.subnets(mask).ok()?.find(|block| {
        !used.iter().any(|u| overlaps(u, block)) && !reserved.is_some_and(|r| overlaps(&r, block))
    })
}

fn node_cidrs(n: &Node) -> Vec<IpNet> {
    let Some(spec) = n.spec.as_ref() else {
        return vec![];
    };
    spec.pod_cidrs
        .iter()
        .flatten()
        .chain(spec.pod_cidr.iter())
        .filter_map(|c| c.parse().ok())
        .collect()
}

/// The node IPAM controller.
pub struct NodeIpamController {
    client: kube::Client,
    nodes: Store<Node>,
    cfg: NodeIpamConfig,
    events: Arc<dyn EventSink>,
    /// Blocks this controller handed out that its informer may not show yet.
    given: Mutex<HashMap<String, IpNet>>,
}

impl NodeIpamController {
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        cfg: NodeIpamConfig,
        events: Arc<dyn EventSink>,
    ) -> Arc<Self> {
        Arc::new(NodeIpamController {
            client,
            nodes: factory.informer::<Node>().store(),
            cfg,
            events,
            given: Mutex::new(HashMap::new()),
        })
    }
}

#[async_trait::async_trait]
impl Controller for NodeIpamController {
    fn name(&self) -> &'static str {
        "node-ipam"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        if self.cfg.allocate_node_cidrs {
            enqueue_live(factory, queue, |n: &Node| node_cidrs(n).is_empty());
        }
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (Some(cluster), Some(mask)) = (self.cfg.cluster_cidr, self.cfg.mask()) else {
            return Ok(Action::Done);
        };
        let Some(node) = self.nodes.get(key) else {
            return Ok(Action::Done);
        };
        if !node_cidrs(&node).is_empty() {
            return Ok(Action::Done);
        }
        let nodes = self.nodes.list();
        let used: Vec<IpNet> = {
            let mut given = self.given.lock();
            if let Some(block) = given.get(key) {
                // Given before but not seen yet: the patch is on its way.
                tracing::debug!(node = key, %block, "pod CIDR already given");
                return Ok(Action::Done);
            }
            // A deleted node's block is free again.
            given.retain(|name, _| nodes.iter().any(|n| n.metadata.name.as_ref() == Some(name)));
            nodes
                .iter()
                .flat_map(|n| node_cidrs(n))
                .chain(given.values().copied())
                .collect()
        };
        let Some(block) = next_free_block(cluster, mask, &used, self.cfg.service_cidr) else {
            emit(
                &*self.events,
                &*node,
                EventType::Normal,
                "CIDRNotAvailable",
                format!("Node {key} status is now: CIDRNotAvailable"),
            );
            return Ok(Action::RequeueAfter(std::time::Duration::from_secs(30)));
        };
        let api: Api<Node> = Api::all(self.client.clone());
        let patch =
            json!({"spec": {"podCIDR": block.to_string(), "podCIDRs": [block.to_string()]}});
        match api
            .patch(key, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {
                tracing::info!(node = key, %block, "pod CIDR allocated");
                self.given.lock().insert(key.to_owned(), block);
                Ok(Action::Done)
            }
            Err(e) if is_not_found(&e) => Ok(Action::Done),
            Err(e) => {
                emit(
                    &*self.events,
                    &*node,
                    EventType::Normal,
                    "CIDRAssignmentFailed",
                    format!("Node {key} status is now: CIDRAssignmentFailed"),
                );
                Err(e.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn blocks_in_order_skipping_used_and_reserved() {
        let cluster = net("10.244.0.0/16");
        assert_eq!(
            next_free_block(cluster, 24, &[], None),
            Some(net("10.244.0.0/24"))
        );
        let used = [net("10.244.0.0/24"), net("10.244.2.0/24")];
        assert_eq!(
            next_free_block(cluster, 24, &used, None),
            Some(net("10.244.1.0/24"))
        );
        // A service range inside the cluster CIDR is never handed out.
        assert_eq!(
            next_free_block(cluster, 24, &used, Some(net("10.244.1.0/25"))),
            Some(net("10.244.3.0/24"))
        );
        let all: Vec<IpNet> = net("10.0.0.0/23").subnets(24).unwrap().collect();
        assert_eq!(next_free_block(net("10.0.0.0/23"), 24, &all, None), None);
        assert_eq!(
            next_free_block(net("fd00::/48"), 64, &[], None),
            Some(net("fd00::/64"))
        );
    }

    #[test]
    fn settings_are_checked_as_upstream() {
        let mut cfg = NodeIpamConfig {
            allocate_node_cidrs: true,
            ..Default::default()
        };
        assert!(cfg.validate().unwrap_err().contains("--cluster-cidr"));
        cfg.cluster_cidr = Some(net("10.244.0.0/16"));
        assert_eq!((cfg.validate(), cfg.mask()), (Ok(()), Some(24)));
        cfg.node_cidr_mask_size = Some(8);
        assert!(cfg.validate().is_err());
        cfg.node_cidr_mask_size = Some(30);
        assert_eq!(cfg.validate(), Ok(()));
        cfg.cluster_cidr = Some(net("10.0.0.0/8"));
        assert!(cfg.validate().unwrap_err().contains("65536"));
        assert_eq!(
            NodeIpamConfig {
                cluster_cidr: Some(net("fd00::/48")),
                ..Default::default()
            }
            .mask(),
            Some(64)
        );
    }
}
