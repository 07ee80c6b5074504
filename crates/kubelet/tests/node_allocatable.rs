//! `--enforce-node-allocatable` with reserved cgroups, against a real in-process
//! apiserver (TestApiServer), this machine's cgroup v1 hierarchies and its containerd
//! (CI's hack/test.sh starts it; fails, never skips, without it). Runs no pod.
//! - `system-reserved` on an existing cgroup: the kubelet holds it to the reservation
//!   (CPU weight and memory limit) and says so in a `NodeAllocatableEnforced` event.
//! - on a cgroup that does not exist: the kubelet does not start, with upstream's
//!   message, also reported as a `FailedNodeAllocatableEnforcement` event.

use std::time::Duration;

mod common;

use common::{connect_cri, start_kubelet_with, stop_kubelet, wait_for};
use ferrokube_kubelet::cgroup::CgroupManager;
use ferrokube_kubelet::node::Reserved;
use ferrokube_kubelet::node_allocatable::{CgroupLimits, Enforcement};
use ferrokube_kubelet::{Kubelet, KubeletConfig, NodeConfig, RuntimeManager};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use tokio_util::sync::CancellationToken;

fn system_reserved() -> Reserved {
    Reserved {
        cpu_milli: 250,
        memory: 256 << 20,
        ..Default::default()
    }
}

async fn event_messages(client: &kube::Client, node: &str, reason: &str) -> Vec<String> {
    let events: Api<Event> = Api::all(client.clone());
    let selector = format!("involvedObject.name={node},reason={reason}");
    events
        .list(&ListParams::default().fields(&selector))
        .await
        .map(|l| l.items.into_iter().filter_map(|e| e.message).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_system_reserved_cgroup_is_held_to_the_reservation() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-reserved-{}", std::process::id());
    let cgroup = format!("/fk-system-reserved-{}", std::process::id());
    let cgroups = CgroupManager::new("/sys/fs/cgroup");
    cgroups
        .set_limits(&cgroup, &CgroupLimits::default(), true)
        .expect("a cgroup standing in for system.slice");
    let root = tempfile::tempdir().expect("root dir");
    let kubelet = start_kubelet_with(client.clone(), &node_name, root.path(), |c| {
        c.system_reserved = system_reserved();
        c.enforce_node_allocatable =
            Enforcement::parse(&["pods".into(), "system-reserved".into()], &cgroup, "")
                .expect("enforcement");
    })
    .await;

    let result = async {
        let read = |file: &str, controller: &str| {
            cgroups
                .read(controller, &cgroup, file)
                .map(|s| s.trim().to_owned())
                .unwrap_or_default()
        };
        // 250m reserved is a weight of 256; the memory limit is the reservation.
        let want = ("256".to_owned(), (256u64 << 20).to_string());
        wait_for(
            "the reserved cgroup's limits",
            Duration::from_secs(15),
            || async {
                let got = (
                    read("cpu.shares", "cpu"),
                    read("memory.limit_in_bytes", "memory"),
                );
                Ok((got == want).then_some(()))
            },
        )
        .await?;
        let expected = format!("Updated limits on system reserved cgroup {cgroup}");
        wait_for(
            "NodeAllocatableEnforced events",
            Duration::from_secs(15),
            || async {
                let messages = event_messages(&client, &node_name, "NodeAllocatableEnforced").await;
                Ok((messages.contains(&expected)
                    && messages
                        .iter()
                        .any(|m| m == "Updated Node Allocatable limit across pods"))
                .then_some(()))
            },
        )
        .await?;
        anyhow::Ok(())
    }
    .await;

    stop_kubelet(kubelet).await;
    let _ = cgroups.remove(&cgroup);
    let nodes: Api<Node> = Api::all(client.clone());
    let _ = nodes.delete(&node_name, &DeleteParams::default()).await;
    result.expect("system-reserved enforced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_reserved_cgroup_stops_the_start() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-reserved-missing-{}", std::process::id());
    let missing = format!("/fk-no-such-cgroup-{}", std::process::id());
    let mut cfg = KubeletConfig::new(&node_name);
    cfg.system_reserved = system_reserved();
    cfg.enforce_node_allocatable =
        Enforcement::parse(&["pods".into(), "system-reserved".into()], &missing, "")
            .expect("enforcement");
    let root = tempfile::tempdir().expect("root dir");
    cfg.root_dir = root.path().to_owned();
    let kubelet = Kubelet::new(
        client.clone(),
        RuntimeManager::new(connect_cri().await, NodeConfig::new(&node_name)),
        cfg,
    );
    let err = tokio::time::timeout(
        Duration::from_secs(20),
        kubelet.run(CancellationToken::new()),
    )
    .await
    .expect("the kubelet gives up at once")
    .expect_err("no start without the reserved cgroup");
    let expected = format!(
        "Failed to enforce System Reserved Cgroup Limits on {missing:?}: {missing:?} cgroup does not exist"
    );
    assert_eq!(err.to_string(), expected);
    assert!(
        !CgroupManager::new("/sys/fs/cgroup").exists(&missing),
        "the kubelet made the reserved cgroup instead of refusing"
    );
    assert_eq!(
        event_messages(&client, &node_name, "FailedNodeAllocatableEnforcement").await,
        vec![expected]
    );
}
