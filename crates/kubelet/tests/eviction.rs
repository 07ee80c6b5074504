//! The eviction manager in a whole kubelet against a real in-process apiserver
//! (TestApiServer) and this machine's containerd: an emptyDir over its `sizeLimit` gets its
//! pod evicted; a memory threshold above what the machine has raises MemoryPressure and
//! evicts a pod as Failed/Evicted with upstream's message and a DisruptionTarget condition.
//! Run it under `flock /run/ferrokube-e2e.lock`.

mod common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use ferrokube_kubelet::node::EvictionThresholds;
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use common::{TEST_EVICTION_HARD, start_kubelet_with, stop_kubelet, wait_for};

const BUSYBOX: &str = "docker.io/library/busybox:latest";

fn pod(name: &str, node: &str, spec: serde_json::Value) -> Result<Pod> {
    let mut spec = spec;
    spec["nodeName"] = json!(node);
    spec["terminationGracePeriodSeconds"] = json!(2);
    for c in spec["containers"].as_array_mut().context("containers")? {
        c["imagePullPolicy"] = json!("IfNotPresent");
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))?)
}

/// Waits until the pod is Failed with reason Evicted; returns it.
async fn evicted(pods: &Api<Pod>, name: &str) -> Result<Pod> {
    wait_for(
        &format!("{name} evicted"),
        Duration::from_secs(90),
        || async {
            let p = pods.get(name).await?;
            let st = p.status.clone().unwrap_or_default();
            Ok(
                (st.phase.as_deref() == Some("Failed") && st.reason.as_deref() == Some("Evicted"))
                    .then_some(p),
            )
        },
    )
    .await
}

fn condition(node: &Node, type_: &str) -> Option<(String, String)> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

fn disruption_target(p: &Pod) -> Option<(String, String)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_dir_limits_and_memory_pressure_evict_pods() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-ev-{}", std::process::id());
    let root = tempfile::tempdir().expect("root dir");
    let fast = |cfg: &mut ferrokube_kubelet::KubeletConfig| {
        cfg.eviction.monitoring_interval = Duration::from_secs(1);
        cfg.node_status_update_frequency = Duration::from_secs(2);
    };
    let mut kubelet = Some(start_kubelet_with(client.clone(), &node_name, root.path(), fast).await);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    let mut created: Vec<Pod> = vec![];

    let result = async {
        // ---- local storage: 4 MiB written into an emptyDir limited to 1Mi
        created.push(
            pods.create(
                &PostParams::default(),
                &pod(
                    "filler",
                    &node_name,
                    json!({
                        "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}],
                        "containers": [{"name": "c", "image": BUSYBOX,
                            "command": ["sh", "-c", "dd if=/dev/zero of=/scratch/fill bs=1M count=4; sleep 3600"],
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
                    }),
                )?,
            )
            .await?,
        );
        // A pod within its limit stays.
        created.push(
            pods.create(
                &PostParams::default(),
                &pod(
                    "modest",
                    &node_name,
                    json!({
                        "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "8Mi"}}],
                        "containers": [{"name": "c", "image": BUSYBOX,
                            "command": ["sh", "-c", "dd if=/dev/zero of=/scratch/fill bs=1M count=1; sleep 3600"],
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
                    }),
                )?,
            )
            .await?,
        );
        let filler = evicted(&pods, "filler").await?;
        let st = filler.status.clone().unwrap_or_default();
        ensure!(
            st.message.as_deref() == Some("Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". "),
            "{:?}",
            st.message
        );
        ensure!(
            disruption_target(&filler)
                == Some(("True".into(), "TerminationByKubelet".into())),
            "{:?}",
            st.conditions
        );
        let filler_uid = filler.metadata.uid.clone().unwrap_or_default();
        let k = kubelet.as_ref().context("kubelet")?.kubelet.clone();
        wait_for("filler's containers stopped", Duration::from_secs(30), || {
            let k = k.clone();
            let filler_uid = filler_uid.clone();
            async move {
                let rt = k.runtime().runtime_pod(&filler_uid).await?;
                Ok(rt
                    .containers
                    .iter()
                    .all(|c| c.state != ferrokube_kubelet::status::RuntimeState::Running)
                    .then_some(()))
            }
        })
        .await?;
        let modest = pods.get("modest").await?;
        ensure!(
            modest.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"),
            "{:?}",
            modest.status
        );
        let node = nodes.get(&node_name).await?;
        ensure!(
            condition(&node, "MemoryPressure").map(|c| c.0) == Some("False".into())
                && condition(&node, "DiskPressure").map(|c| c.0) == Some("False".into()),
            "no pressure with the test thresholds: {:?}",
            node.status.and_then(|s| s.conditions)
        );
        stop_kubelet(kubelet.take().context("kubelet")?).await;

        // ---- memory.available below a threshold larger than any machine
        let mut thresholds = format!("{TEST_EVICTION_HARD},memory.available<64Ti");
        thresholds = thresholds.replace("memory.available<100Mi,", "");
        let hard = EvictionThresholds::parse(&thresholds)?;
        kubelet = Some(
            start_kubelet_with(client.clone(), &node_name, root.path(), |cfg| {
                fast(cfg);
                cfg.eviction_hard = hard;
            })
            .await,
        );
        let node = wait_for("MemoryPressure", Duration::from_secs(30), || async {
            let n = nodes.get(&node_name).await?;
            Ok((condition(&n, "MemoryPressure")
                == Some(("True".into(), "KubeletHasInsufficientMemory".into())))
            .then_some(n))
        })
        .await?;
        ensure!(
            condition(&node, "Ready").map(|c| c.0) == Some("True".into()),
            "pressure leaves the node Ready"
        );
        let modest = evicted(&pods, "modest").await?;
        let st = modest.status.clone().unwrap_or_default();
        let message = st.message.clone().unwrap_or_default();
        ensure!(
            message.starts_with(
                "The node was low on resource: memory. Threshold quantity: 64Ti, available: "
            ),
            "{message}"
        );
        ensure!(
            message.contains("Container c was using "),
            "the container over its (zero) request is named: {message}"
        );
        ensure!(
            disruption_target(&modest) == Some(("True".into(), "TerminationByKubelet".into())),
            "{:?}",
            st.conditions
        );
        Ok::<(), anyhow::Error>(())
    }
    .await;

    if let Some(r) = kubelet.take() {
        for p in &created {
            let _ = r.kubelet.runtime().kill_pod(p, Some(0)).await;
        }
        stop_kubelet(r).await;
    }
    server.stop().await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}
