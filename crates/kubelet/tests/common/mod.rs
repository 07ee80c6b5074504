//! What the kubelet integration tests share: starting a whole kubelet on this machine's
//! containerd (CI's hack/test.sh starts it; a test fails, never skips, without it),
//! stopping it, and bounded waiting. Each test binary uses a part of it.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use ferrokube_kubelet::cri::{CriClient, DEFAULT_ENDPOINT};
use ferrokube_kubelet::node::EvictionThresholds;
use ferrokube_kubelet::{Kubelet, KubeletConfig, NodeConfig, RuntimeManager};
use tokio_util::sync::CancellationToken;

/// The CRI endpoint: `FERROKUBE_CRI_ENDPOINT`, or containerd's default socket.
pub fn endpoint() -> String {
    std::env::var("FERROKUBE_CRI_ENDPOINT").unwrap_or_else(|_| DEFAULT_ENDPOINT.to_owned())
}

/// The hard eviction thresholds of test kubelets: upstream's memory one, and the disk ones
/// off ("0%"), as kind's kubelet config does (`evictionHard` nodefs.available,
/// imagefs.available and nodefs.inodesFree "0%"): this machine's disk is often fuller
/// than upstream's defaults allow, which would put every test node under DiskPressure
/// and evict its pods.
pub const TEST_EVICTION_HARD: &str =
    "memory.available<100Mi,nodefs.available<0%,imagefs.available<0%,nodefs.inodesFree<0%";

/// A kubelet running in this process.
pub struct Running {
    pub kubelet: Arc<Kubelet>,
    pub cancel: CancellationToken,
    pub task: tokio::task::JoinHandle<()>,
}

/// Connects to containerd (panicking with how to start it when it is not there).
pub async fn connect_cri() -> CriClient {
    let ep = endpoint();
    CriClient::connect(&ep, Duration::from_secs(3))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "containerd is not reachable at {ep}: {e}\n\
                 start it with: sudo bash -c 'source hack/lib/runtime.sh && rt::ensure'"
            )
        })
}

/// Starts a kubelet for `node_name` with its state under `root`, node IP 127.0.0.1 and a
/// 5 s sync period; `customize` adjusts the config before the start.
pub async fn start_kubelet_with(
    client: kube::Client,
    node_name: &str,
    root: &std::path::Path,
    customize: impl FnOnce(&mut KubeletConfig),
) -> Running {
    let cri = connect_cri().await;
    let mut node = NodeConfig::new(node_name);
    node.node_ips = vec!["127.0.0.1".into()];
    let mut cfg = KubeletConfig::new(node_name);
    cfg.node_ips = node.node_ips.clone();
    cfg.root_dir = root.to_owned();
    cfg.node_labels = [("ferrokube.test/role".to_string(), "kubelet-it".to_string())].into();
    cfg.sync_frequency = Duration::from_secs(5);
    cfg.eviction_hard =
        EvictionThresholds::parse(TEST_EVICTION_HARD).expect("test eviction thresholds");
    customize(&mut cfg);
    let kubelet = Kubelet::new(client, RuntimeManager::new(cri, node), cfg);
    let cancel = CancellationToken::new();
    let task = {
        let k = kubelet.clone();
        let c = cancel.clone();
        tokio::spawn(async move {
            k.run(c).await.expect("kubelet run");
        })
    };
    Running {
        kubelet,
        cancel,
        task,
    }
}

/// Stops the kubelet (its containers keep running) within 20 s.
pub async fn stop_kubelet(r: Running) {
    r.cancel.cancel();
    tokio::time::timeout(Duration::from_secs(20), r.task)
        .await
        .expect("kubelet stops within 20 s")
        .expect("kubelet task");
}

/// Polls `f` every 250 ms until it gives a value, for at most `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let start = Instant::now();
    let mut last_err = None;
    while start.elapsed() < timeout {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("timed out after {timeout:?} waiting for {what} (last error: {last_err:?})")
}
