//! The node IPAM controller against a real in-process apiserver: with
//! `--allocate-node-cidrs`, nodes get distinct pod CIDRs from `--cluster-cidr` (never
//! one overlapping the service range, never one another node has), and a deleted node's
//! block goes to the next node. Every wait is bounded in time.

use crate::support;

use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_controllers::nodeipam::NodeIpamConfig;
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::wait_for;
use tokio_util::sync::CancellationToken;

fn node(name: &str, pod_cidr: Option<&str>) -> anyhow::Result<Node> {
    let mut n = json!({"metadata": {"name": name}});
    if let Some(cidr) = pod_cidr {
        n["spec"] = json!({"podCIDR": cidr, "podCIDRs": [cidr]});
    }
    Ok(serde_json::from_value(n)?)
}

async fn pod_cidrs(nodes: &Api<Node>, name: &str) -> anyhow::Result<Option<(String, Vec<String>)>> {
    let spec = nodes.get(name).await?.spec.unwrap_or_default();
    Ok(spec
        .pod_cidr
        .map(|c| (c, spec.pod_cidrs.unwrap_or_default())))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_get_distinct_pod_cidrs() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let nodes: Api<Node> = Api::all(c.clone());
    // A node that already has a block, made before the controller starts.
    nodes
        .create(&PostParams::default(), &node("old", Some("10.244.0.0/24"))?)
        .await?;
    let cancel = CancellationToken::new();
    let cfg = ManagerConfig {
        controllers: vec!["nodeipam".into()],
        node_ipam: NodeIpamConfig {
            allocate_node_cidrs: true,
            cluster_cidr: Some("10.244.0.0/16".parse()?),
            node_cidr_mask_size: None,
            // Inside the cluster CIDR: its block is skipped.
            service_cidr: Some("10.244.1.0/24".parse()?),
        },
        ..Default::default()
    };
    let manager = Manager::start(c.clone(), &cfg, cancel.clone()).await?;
    assert_eq!(manager.enabled, vec!["node-ipam-controller"]);

    for name in ["a", "b"] {
        nodes
            .create(&PostParams::default(), &node(name, None)?)
            .await?;
    }
    let mut given = vec![];
    for name in ["a", "b"] {
        let (cidr, cidrs) =
            wait_for(20, "a pod CIDR", || async { pod_cidrs(&nodes, name).await }).await?;
        anyhow::ensure!(cidrs == vec![cidr.clone()], "{cidr} {cidrs:?}");
        given.push(cidr);
    }
    given.sort();
    assert_eq!(given, ["10.244.2.0/24", "10.244.3.0/24"]);
    assert_eq!(
        pod_cidrs(&nodes, "old").await?.map(|(c, _)| c).as_deref(),
        Some("10.244.0.0/24"),
        "a node's block is left as it is"
    );

    // A deleted node's block goes to the next node.
    let freed = pod_cidrs(&nodes, "a").await?.map(|(c, _)| c);
    nodes.delete("a", &DeleteParams::default()).await?;
    wait_for(20, "node a gone", || async {
        Ok(nodes.get_opt("a").await?.is_none().then_some(()))
    })
    .await?;
    // The informer sees the deletion before the next node arrives.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    nodes
        .create(&PostParams::default(), &node("c", None)?)
        .await?;
    let (cidr, _) = wait_for(20, "c's pod CIDR", || async {
        pod_cidrs(&nodes, "c").await
    })
    .await?;
    assert_eq!(Some(cidr), freed);

    cancel.cancel();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}
