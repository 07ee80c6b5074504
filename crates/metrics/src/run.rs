//! The running metrics server: informers on Nodes and Pods, a collection every metric
//! resolution (every node scraped at once, the batch stored), and the HTTPS endpoint.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokube_client::delegated::DelegatedAuthOptions;
use ferrokube_client::extension_authentication::{LookupFailure, client_certificates};
use ferrokube_client::informer::{InformerConfig, SharedIndexInformer};
use futures::future::join_all;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use parking_lot::{Mutex, RwLock};
use tokio_util::sync::CancellationToken;

use crate::api::Meta;
use crate::decode::Batch;
use crate::scraper::KubeletClient;
use crate::server::{Auth, State};
use crate::storage::Storage;

/// Upstream's default `--metric-resolution`.
pub const DEFAULT_RESOLUTION: Duration = Duration::from_secs(15);

/// What [`start`] needs.
#[derive(Debug)]
pub struct RunConfig {
    /// `--bind-address`:`--secure-port`.
    pub addr: SocketAddr,
    /// The serving certificate (chain) and key, PEM.
    pub serving_cert: (String, String),
    /// `--tls-min-version`, `--tls-cipher-suites`.
    pub tls: ferrokube_pki::tls_options::TlsOptions,
    /// `--metric-resolution`.
    pub resolution: Duration,
    pub kubelet: KubeletClient,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("authentication: {0}")]
    Auth(String),
    #[error("serving certificate: {0}")]
    Tls(String),
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
}

/// A started server.
#[derive(Debug)]
pub struct Running {
    /// The bound address (the port when 0 was asked for).
    pub addr: SocketAddr,
    pub state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

fn labels(l: &Option<BTreeMap<String, String>>) -> BTreeMap<String, String> {
    l.clone().unwrap_or_default()
}

/// Starts the informers, the collection loop and the endpoint; all stop on `cancel`.
pub async fn start(
    client: kube::Client,
    cfg: RunConfig,
    cancel: CancellationToken,
) -> Result<Running, RunError> {
    // As upstream's metrics-server, how callers are authenticated is what the
    // apiserver publishes in kube-system/extension-apiserver-authentication.
    let certificates = client_certificates(
        &DelegatedAuthOptions::default(),
        Some(&client),
        LookupFailure::Fatal,
    )
    .await
    .map_err(|e| RunError::Auth(e.to_string()))?;
    let auth = Arc::new(Auth::new(certificates.clone(), Some(client.clone())));
    // Client certificates of either CA are asked for (and verified again by the
    // authenticators, each against its own CA); clients without one are served too.
    let verifier = Some(certificates.tls_verifier());
    let tls = ferrokube_pki::serving::server_config(
        &cfg.serving_cert.0,
        &cfg.serving_cert.1,
        verifier,
        ferrokube_pki::serving::ALPN_H2_HTTP1,
        &cfg.tls,
    )
    .map_err(|e| RunError::Tls(e.to_string()))?;

    let nodes: SharedIndexInformer<Node> =
        SharedIndexInformer::new(Api::all(client.clone()), InformerConfig::default());
    let pods: SharedIndexInformer<Pod> =
        SharedIndexInformer::new(Api::all(client), InformerConfig::default());
    let (node_store, pod_store) = (nodes.store(), pods.store());
    let (nodes_synced, pods_synced) = (nodes.clone(), pods.clone());
    let state = Arc::new(State {
        storage: RwLock::new(Storage::new(cfg.resolution)),
        nodes: Box::new(move || {
            node_store
                .list()
                .iter()
                .map(|n| Meta {
                    namespace: String::new(),
                    name: n.metadata.name.clone().unwrap_or_default(),
                    labels: labels(&n.metadata.labels),
                })
                .collect()
        }),
        pods: Box::new(move || {
            pod_store
                .list()
                .iter()
                .map(|p| Meta {
                    namespace: p.metadata.namespace.clone().unwrap_or_default(),
                    name: p.metadata.name.clone().unwrap_or_default(),
                    labels: labels(&p.metadata.labels),
                })
                .collect()
        }),
        synced: Box::new(move || nodes_synced.has_synced() && pods_synced.has_synced()),
        last_tick: Mutex::new(Instant::now()),
        // Upstream's metric-collection-timely: 1.5 resolutions, plus the scrape time.
        live_within: cfg.resolution.mul_f32(1.5) + cfg.kubelet.timeout(),
    });
    let (addr, server) = crate::server::serve(cfg.addr, tls, auth, state.clone(), cancel.clone())
        .await
        .map_err(|e| RunError::Bind(cfg.addr, e))?;
    nodes.start();
    pods.start();

    let task = {
        let state = state.clone();
        let kubelet = cfg.kubelet;
        let resolution = cfg.resolution;
        tokio::spawn(async move {
            let collect = async {
                nodes.wait_for_sync(Duration::from_secs(60)).await;
                let mut tick = tokio::time::interval(resolution);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    if !nodes.has_synced() {
                        continue;
                    }
                    let batch = collect(&kubelet, &nodes.store().list()).await;
                    tracing::debug!(
                        nodes = batch.nodes.len(),
                        pods = batch.pods.len(),
                        "storing metrics"
                    );
                    state.storage.write().store(batch);
                    *state.last_tick.lock() = Instant::now();
                }
            };
            tokio::select! {
                _ = collect => {}
                _ = cancel.cancelled() => {}
            }
            nodes.stop().await;
            pods.stop().await;
            let _ = server.await;
        })
    };
    Ok(Running { addr, state, task })
}

/// Every node scraped at once, into one batch.
pub async fn collect(kubelet: &KubeletClient, nodes: &[Arc<Node>]) -> Batch {
    let scrapes = nodes.iter().map(|n| async move {
        let name = n.metadata.name.clone().unwrap_or_default();
        (name, kubelet.scrape(n).await)
    });
    let mut batch = Batch::default();
    for (node, result) in join_all(scrapes).await {
        match result {
            Ok(b) => batch.merge(b),
            Err(e) => tracing::warn!(node, error = e, "failed to scrape node"),
        }
    }
    batch
}

/// Starts and serves until `cancel`.
pub async fn run(
    client: kube::Client,
    cfg: RunConfig,
    cancel: CancellationToken,
) -> Result<(), RunError> {
    start(client, cfg, cancel).await?.wait().await;
    Ok(())
}
