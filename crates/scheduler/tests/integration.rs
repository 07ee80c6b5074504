//! The scheduler against a real in-process apiserver.

use std::time::Duration;

use ferrokube_scheduler::KubeSchedulerConfiguration;
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn node(name: &str, cpu: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                   "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}
    }))
    .unwrap()
}

/// A pod of priority `prio`: 0 is the default, any other value names the class
/// `prio-<prio>` (the Priority admission plugin resolves the value from it).
fn pod(name: &str, cpu: &str, prio: i32) -> Pod {
    let class = if prio == 0 {
        String::new()
    } else {
        format!("prio-{prio}")
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"priority": prio, "priorityClassName": class,
            "containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": cpu}}}]}
    }))
    .unwrap()
}

async fn create_node(nodes: &Api<Node>, n: Node) -> anyhow::Result<()> {
    let status = n.status.clone();
    let created = nodes.create(&PostParams::default(), &n).await?;
    // Status is not writable on create: set it through the status subresource.
    let name = created.metadata.name.clone().unwrap();
    nodes
        .patch_status(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": status})),
        )
        .await?;
    Ok(())
}

async fn wait_for<F: Fn(&Pod) -> bool>(pods: &Api<Pod>, name: &str, f: F) -> anyhow::Result<Pod> {
    for _ in 0..300 {
        let p = pods.get(name).await?;
        if f(&p) {
            return Ok(p);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!(
        "pod {name} never reached the expected state: {:?}",
        pods.get(name).await?.status
    )
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_waits_for_nodes_and_preempts() -> anyhow::Result<()> {
    // As upstream's scheduler integration tests: no node lifecycle controller runs
    // here to lift the not-ready taint that TaintNodesByCondition puts on new nodes.
    let srv = TestApiServer::start_with(|o| {
        o.admission_plugins
            .set("TaintNodesByCondition", false)
            .expect("a known plugin")
    })
    .await?;
    let client = srv.client.clone();
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_node(&nodes, node("small", "1")).await?;
    create_node(&nodes, node("large", "4")).await?;

    let running = ferrokube_scheduler::run::build(
        client.clone(),
        &KubeSchedulerConfiguration::default_config(),
    )?;
    let cancel = CancellationToken::new();
    let task = tokio::spawn(running.run(cancel.clone()));

    // Fits only on the large node.
    pods.create(&PostParams::default(), &pod("fits-large", "2", 0))
        .await?;
    let p = wait_for(&pods, "fits-large", |p| node_of(p).is_some()).await?;
    assert_eq!(node_of(&p), Some("large"));

    // Fits nowhere: PodScheduled=False, Unschedulable, upstream's message.
    pods.create(&PostParams::default(), &pod("too-big", "3", 0))
        .await?;
    let p = wait_for(&pods, "too-big", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable")
                })
            })
    })
    .await?;
    let cond = p
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "PodScheduled")
        .unwrap();
    assert_eq!(cond.status, "False");
    assert_eq!(
        cond.message.as_deref(),
        // small can never hold 3 cpu (unresolvable); large holds an equal-priority pod.
        Some(
            "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
        )
    );

    // A node that fits appears: the pod is placed there.
    create_node(&nodes, node("huge", "8")).await?;
    let p = wait_for(&pods, "too-big", |p| node_of(p).is_some()).await?;
    assert_eq!(node_of(&p), Some("huge"));

    // Preemption: a high-priority pod evicts the low-priority pod on the large node.
    pods.create(&PostParams::default(), &pod("filler", "4", 0))
        .await?;
    wait_for(&pods, "filler", |p| node_of(p).is_some()).await?;
    let hog = wait_for(&pods, "fits-large", |_| true).await?;
    assert_eq!(node_of(&hog), Some("large"));
    Api::<PriorityClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "prio-1000"}, "value": 1000}))?,
        )
        .await?;
    // The admission plugin sees the class through the watch cache, a moment later.
    for attempt in 0.. {
        match pods
            .create(&PostParams::default(), &pod("important", "3", 1000))
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 403 && attempt < 100 => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => {
                r?;
                break;
            }
        }
    }
    let p = wait_for(&pods, "important", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .is_some()
            || node_of(p).is_some()
    })
    .await?;
    let target = p
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.clone())
        .or_else(|| node_of(&p).map(str::to_string))
        .unwrap();
    // huge (8 cpu) holds too-big (3) and filler (4): evicting filler alone makes room,
    // and too-big (the earlier, so more important, of equal priority) is reprieved.
    assert_eq!(target, "huge");
    let mut evicted = Vec::new();
    for _ in 0..100 {
        evicted = pods
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .map(|p| p.metadata.name.unwrap())
            .collect::<Vec<_>>();
        if !evicted.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(evicted, vec!["filler".to_string()]);
    // Marked first with why it goes, as upstream's preemption does.
    let filler = pods.get("filler").await?;
    let disruption = filler
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget"))
        .cloned()
        .expect("the victim's DisruptionTarget condition");
    assert_eq!(
        (
            disruption.status.as_str(),
            disruption.reason.as_deref(),
            disruption.message.as_deref()
        ),
        (
            "True",
            Some("PreemptionByScheduler"),
            Some("default-scheduler: preempting to accommodate a higher priority pod")
        )
    );
    // No kubelet here finishes the graceful delete; the test does, as upstream's do.
    let dp = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    pods.delete("filler", &dp).await?;
    let p = wait_for(&pods, "important", |p| node_of(p).is_some()).await?;
    assert_eq!(node_of(&p), Some("huge"));
    assert!(
        pods.get("too-big")
            .await?
            .metadata
            .deletion_timestamp
            .is_none()
    );

    cancel.cancel();
    task.await??;
    Ok(())
}
