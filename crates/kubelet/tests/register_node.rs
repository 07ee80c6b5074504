//! The kubelet's Node, against a real in-process apiserver (TestApiServer) and the real
//! containerd of this machine (CI's hack/test.sh starts it; fails, never skips, without
//! it). Runs no pod.
//! - `--register-node=false`: the kubelet creates no Node, and once someone else has,
//!   keeps its status (Ready) and its Lease as a registering kubelet does.
//! - A status someone else changed (the node lifecycle controller's `Unknown`, written
//!   when it started before the kubelet after a restart) is written over at the next
//!   status sync, as upstream compares with the Node the apiserver has, not with what
//!   the kubelet last wrote (which would wait for the 5 min report period).

use std::time::Duration;

mod common;

use common::{start_kubelet_with, stop_kubelet, wait_for};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn ready_status(n: &Node) -> Option<&str> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_that_does_not_register_waits_for_its_node() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-noreg-{}", std::process::id());
    let root = tempfile::tempdir().expect("root dir");
    let kubelet = start_kubelet_with(client.clone(), &node_name, root.path(), |c| {
        c.register_node = false
    })
    .await;
    let nodes: Api<Node> = Api::all(client.clone());

    let result = async {
        // A registering kubelet has its Node within a second or two; this one must not.
        tokio::time::sleep(Duration::from_secs(3)).await;
        anyhow::ensure!(
            nodes.get_opt(&node_name).await?.is_none(),
            "the kubelet registered its node despite register_node = false"
        );
        // An administrator (or a provisioner) creates it.
        let node = Node {
            metadata: ObjectMeta {
                name: Some(node_name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        nodes.create(&PostParams::default(), &node).await?;
        wait_for("node Ready", Duration::from_secs(30), || async {
            let n = nodes.get_opt(&node_name).await?;
            Ok(n.filter(|n| ready_status(n) == Some("True")))
        })
        .await?;
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
        wait_for("node lease", Duration::from_secs(15), || async {
            Ok(leases.get_opt(&node_name).await?)
        })
        .await?;
        Ok(())
    }
    .await;

    stop_kubelet(kubelet).await;
    let _ = nodes.delete(&node_name, &DeleteParams::default()).await;
    result.expect("register_node = false");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_changed_by_someone_else_is_written_over_at_the_next_sync() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-resync-{}", std::process::id());
    let root = tempfile::tempdir().expect("root dir");
    let kubelet = start_kubelet_with(client.clone(), &node_name, root.path(), |c| {
        c.node_status_update_frequency = Duration::from_secs(1)
    })
    .await;
    let nodes: Api<Node> = Api::all(client.clone());

    let result = async {
        wait_for("node Ready", Duration::from_secs(30), || async {
            let n = nodes.get_opt(&node_name).await?;
            Ok(n.filter(|n| ready_status(n) == Some("True")))
        })
        .await?;
        // As the node lifecycle controller marks a node it has not heard from.
        let unknown = json!({"status": {"conditions": [{
            "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
        }]}});
        let marked = nodes
            .patch_status(
                &node_name,
                &PatchParams::default(),
                &Patch::Strategic(&unknown),
            )
            .await?;
        anyhow::ensure!(ready_status(&marked) == Some("Unknown"));
        // The next syncs (every second here) see the change; the report period (5 min)
        // is far beyond this wait.
        let back = wait_for("node Ready again", Duration::from_secs(20), || async {
            let n = nodes.get(&node_name).await?;
            Ok((ready_status(&n) == Some("True")).then_some(n))
        })
        .await?;
        let ready = back
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .expect("Ready condition");
        anyhow::ensure!(
            ready.reason.as_deref() == Some("KubeletReady"),
            "the kubelet's own condition is back: {ready:?}"
        );
        Ok(())
    }
    .await;

    stop_kubelet(kubelet).await;
    let _ = nodes.delete(&node_name, &DeleteParams::default()).await;
    result.expect("status written over");
}
