//! The TTL controller (upstream `pkg/controller/ttl`, the `ttl-controller`): every
//! Node carries `node.alpha.kubernetes.io/ttl`, the seconds a kubelet may cache the
//! Secrets and ConfigMaps its pods use before fetching them again, chosen by the
//! cluster's size: 0 up to 100 nodes, then 15, 30, 60 and 300 s. The size bands
//! overlap (upstream's `ttlBoundaries`) so that a cluster at a boundary does not
//! rewrite every node as one node comes and goes.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use parking_lot::Mutex;
use serde_json::json;

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store};
use ferrokube_client::workqueue::WorkQueue;

use crate::{Action, Controller, Result, done_unless_failed};

/// Upstream `v1.ObjectTTLAnnotationKey`.
pub const TTL_ANNOTATION: &str = "node.alpha.kubernetes.io/ttl";

/// Upstream `ttlBoundaries`: (smallest size, largest size, TTL seconds) of each band.
const BOUNDARIES: [(usize, usize, u32); 5] = [
    (0, 100, 0),
    (90, 500, 15),
    (450, 1000, 30),
    (900, 2000, 60),
    (1800, usize::MAX, 300),
];

/// The band for `nodes` nodes, moving from `band` only when the count leaves it
/// (upstream steps one band per added or deleted node; counting from the informer's
/// store instead, the count may jump, so this steps as far as it takes).
pub fn band_for(nodes: usize, mut band: usize) -> usize {
    band = band.min(BOUNDARIES.len() - 1);
    while nodes > BOUNDARIES[band].1 && band + 1 < BOUNDARIES.len() {
        band += 1;
    }
    while nodes < BOUNDARIES[band].0 && band > 0 {
        band -= 1;
    }
    band
}

/// The TTL of a band.
pub fn ttl_seconds(band: usize) -> u32 {
    BOUNDARIES[band.min(BOUNDARIES.len() - 1)].2
}

/// The annotation patch `node` needs for `ttl`, if any (upstream
/// `updateNodeIfNeeded`: a missing or unparsable value is rewritten too).
pub fn patch_for(node: &Node, ttl: u32) -> Option<serde_json::Value> {
    let current = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TTL_ANNOTATION))
        .and_then(|v| v.parse::<i64>().ok());
    (current != Some(i64::from(ttl)))
        .then(|| json!({"metadata": {"annotations": {TTL_ANNOTATION: ttl.to_string()}}}))
}

/// The controller.
pub struct TtlController {
    client: kube::Client,
    nodes: Store<Node>,
    band: Arc<Mutex<usize>>,
}

impl TtlController {
    pub fn new(factory: &SharedInformerFactory, client: kube::Client) -> Arc<Self> {
        Arc::new(TtlController {
            client,
            nodes: factory.informer::<Node>().store(),
            band: Arc::new(Mutex::new(0)),
        })
    }
}

#[async_trait::async_trait]
impl Controller for TtlController {
    fn name(&self) -> &'static str {
        "ttlcontroller"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let (q, nodes, band) = (queue.clone(), self.nodes.clone(), self.band.clone());
        // As upstream: every added or updated node is looked at (kubelets update their
        // nodes every few seconds, so a changed TTL reaches every node soon), and a
        // deleted one only moves the count.
        factory.informer::<Node>().add_event_handler(
            move |n: Notification<Node>| {
                let mut b = band.lock();
                *b = band_for(nodes.len(), *b);
                drop(b);
                if !matches!(n, Notification::Deleted { .. })
                    && let Some(name) = n.object().metadata.name.clone()
                {
                    q.add(name);
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(node) = self.nodes.get(key) else {
            return Ok(Action::Done);
        };
        let ttl = ttl_seconds(*self.band.lock());
        let Some(patch) = patch_for(&node, ttl) else {
            return Ok(Action::Done);
        };
        let api: Api<Node> = Api::all(self.client.clone());
        done_unless_failed(
            api.patch(key, &PatchParams::default(), &Patch::Strategic(&patch))
                .await,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_move_only_when_the_count_leaves_them() {
        assert_eq!(band_for(0, 0), 0);
        assert_eq!(band_for(100, 0), 0);
        assert_eq!(band_for(101, 0), 1);
        // Back under 100 but not under 90: still the 15 s band.
        assert_eq!(band_for(95, 1), 1);
        assert_eq!(band_for(89, 1), 0);
        // A jump crosses several bands at once, either way.
        assert_eq!(band_for(5000, 0), 4);
        assert_eq!(band_for(3, 4), 0);
        assert_eq!(
            [0, 1, 2, 3, 4, 9].map(ttl_seconds),
            [0, 15, 30, 60, 300, 300]
        );
    }

    #[test]
    fn a_node_is_patched_unless_it_has_the_ttl() {
        let node = |annotations: serde_json::Value| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n", "annotations": annotations}}))
                .unwrap()
        };
        assert_eq!(
            patch_for(&node(json!({})), 0),
            Some(json!({"metadata": {"annotations": {TTL_ANNOTATION: "0"}}}))
        );
        assert_eq!(patch_for(&node(json!({TTL_ANNOTATION: "0"})), 0), None);
        assert!(patch_for(&node(json!({TTL_ANNOTATION: "0"})), 15).is_some());
        assert!(patch_for(&node(json!({TTL_ANNOTATION: "zero"})), 0).is_some());
    }
}
