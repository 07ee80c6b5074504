//! `--register-node=false` against a real in-process apiserver (TestApiServer) and the
//! real containerd of this machine (CI's hack/test.sh starts it; fails, never skips,
//! without it): the kubelet creates no Node, and once someone else has, keeps its
//! status (Ready) and its Lease as a registering kubelet does. Runs no pod.

use std::time::Duration;

mod common;

use common::{start_kubelet_with, stop_kubelet, wait_for};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

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
            Ok(n.filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            }))
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
