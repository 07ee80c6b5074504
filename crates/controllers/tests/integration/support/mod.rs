//! Test doubles shared by the controller integration tests: a fake kubelet per node
//! and a bounded poll.
//!
//! The fake kubelet is a bounded polling loop (until cancelled) over the pods of its
//! node: it binds unscheduled pods to itself when told to (tests without a scheduler),
//! reports its pods Running and Ready via `/status` (unless a pod is held unready),
//! finishes graceful deletions, and renews its node's Lease and Ready heartbeat. While
//! `alive` is false it does nothing at all, as a node that lost power.

#![allow(dead_code)] // Not every helper is used by a test today.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// One fake node and the knobs a test turns.
#[derive(Clone)]
pub struct FakeNode {
    pub name: String,
    /// Bind unscheduled pods to this node (no scheduler in the test).
    pub binds: bool,
    /// Pods (by name) reported not ready.
    pub unready: Arc<Mutex<HashSet<String>>>,
    /// Cleared to stop every heartbeat and pod update.
    pub alive: Arc<AtomicBool>,
    /// While set, pods not ready yet stay unready (replacements held back).
    pub hold_new_unready: Arc<AtomicBool>,
}

impl FakeNode {
    /// Registers the node (Ready) and starts its kubelet until `cancel`.
    pub async fn start(
        c: &Client,
        name: &str,
        binds: bool,
        cancel: CancellationToken,
    ) -> anyhow::Result<FakeNode> {
        let nodes: Api<Node> = Api::all(c.clone());
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                    "status": {
                        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
                        "allocatable": {"cpu": "100", "memory": "1000Gi", "pods": "10000"},
                        "capacity": {"cpu": "100", "memory": "1000Gi", "pods": "10000"}
                    }
                }))?,
            )
            .await?;
        let node = FakeNode {
            name: name.to_string(),
            binds,
            unready: Arc::new(Mutex::new(HashSet::new())),
            alive: Arc::new(AtomicBool::new(true)),
            hold_new_unready: Arc::new(AtomicBool::new(false)),
        };
        tokio::spawn(kubelet(c.clone(), cancel, node.clone()));
        Ok(node)
    }

    pub fn stop_heartbeats(&self) {
        self.alive.store(false, Ordering::SeqCst);
    }
}

/// Renews the node's Lease and its Ready heartbeat (what the node lifecycle
/// controller watches), and reports Ready again after a silence.
async fn heartbeat(c: &Client, node: &str) {
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string();
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(c.clone(), "kube-node-lease");
    let renew = json!({"spec": {"renewTime": now}});
    match leases
        .patch(node, &PatchParams::default(), &Patch::Merge(&renew))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 404 => {
            let lease = json!({"metadata": {"name": node, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": now}});
            if let Ok(lease) = serde_json::from_value(lease) {
                let _ = leases.create(&PostParams::default(), &lease).await;
            }
        }
        _ => {}
    }
    let nodes: Api<Node> = Api::all(c.clone());
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    // Capacity too: a create's status may not be kept, as a kubelet's is not.
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "lastHeartbeatTime": now}],
        "allocatable": {"cpu": "100", "memory": "1000Gi", "pods": "10000"},
        "capacity": {"cpu": "100", "memory": "1000Gi", "pods": "10000"}}});
    let _ = nodes
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(status))
        .await;
}

async fn kubelet(c: Client, cancel: CancellationToken, node: FakeNode) {
    let pods: Api<Pod> = Api::all(c.clone());
    let mut ip = 1u32;
    let mut last_beat = Instant::now() - Duration::from_secs(10);
    while !cancel.is_cancelled() {
        if !node.alive.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        if last_beat.elapsed() >= Duration::from_millis(500) {
            heartbeat(&c, &node.name).await;
            last_beat = Instant::now();
        }
        if let Ok(list) = pods.list(&ListParams::default()).await {
            for p in list.items {
                let ns = p.metadata.namespace.clone().unwrap_or_default();
                let name = p.metadata.name.clone().unwrap_or_default();
                let api: Api<Pod> = Api::namespaced(c.clone(), &ns);
                let bound = p.spec.as_ref().and_then(|s| s.node_name.clone());
                match bound.as_deref() {
                    None if node.binds && p.metadata.deletion_timestamp.is_none() => {
                        let binding = json!({"apiVersion": "v1", "kind": "Binding",
                            "metadata": {"name": name, "namespace": ns},
                            "target": {"apiVersion": "v1", "kind": "Node", "name": node.name}});
                        let req = http::Request::post(format!(
                            "/api/v1/namespaces/{ns}/pods/{name}/binding"
                        ))
                        .header("content-type", "application/json")
                        .body(serde_json::to_vec(&binding).unwrap_or_default())
                        .expect("request");
                        let _ = c.request_text(req).await;
                        continue;
                    }
                    Some(n) if n == node.name => {}
                    _ => continue,
                }
                if p.metadata.deletion_timestamp.is_some() {
                    let _ = api
                        .delete(
                            &name,
                            &DeleteParams {
                                grace_period_seconds: Some(0),
                                ..Default::default()
                            },
                        )
                        .await;
                    continue;
                }
                let phase = p
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default();
                let ready = p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                    .map(|c| c.status == "True");
                let held = node.hold_new_unready.load(Ordering::SeqCst) && ready != Some(true);
                let want_ready = !held && !node.unready.lock().contains(&name);
                if phase == "Running" && ready == Some(want_ready) {
                    continue;
                }
                let pod_ip = p
                    .status
                    .as_ref()
                    .and_then(|s| s.pod_ip.clone())
                    .unwrap_or_else(|| {
                        ip += 1;
                        format!("10.{}.{}.{}", (ip >> 16) & 255, (ip >> 8) & 255, ip & 255)
                    });
                let now = k8s_openapi::jiff::Timestamp::now().to_string();
                let st = if want_ready { "True" } else { "False" };
                let patch = json!({"status": {"phase": "Running", "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
                    "conditions": [{"type": "Ready", "status": st, "lastTransitionTime": now},
                                   {"type": "ContainersReady", "status": st, "lastTransitionTime": now}]}});
                let _ = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `f` every 100 ms until it returns `Some`, for at most `secs` seconds.
pub async fn wait_for<T, F, Fut>(secs: u64, what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {secs}s waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
