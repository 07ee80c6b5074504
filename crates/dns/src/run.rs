//! The running cluster DNS server: informers on Services and EndpointSlices feed the
//! [`DnsIndex`]; the DNS listeners answer from it; `/health`, `/ready` and
//! `/metrics` report on it (CoreDNS's health, ready and prometheus plugins).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ferrokube_client::informer::{InformerConfig, Notification, SharedIndexInformer};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, Client, ResourceExt};
use parking_lot::RwLock;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::index::{DnsConfig, DnsIndex};
use crate::model::{service_model, slice_model};
use crate::server::{ClusterDnsHandler, DnsMetrics, ServeError, bind};
use ferrokube_client::serving::{PlainRespond, serve_plain};

/// The content type of the health and readiness answers.
const TEXT: &str = "text/plain; charset=utf-8";

/// How the server runs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub dns: DnsConfig,
    /// UDP and TCP listen addresses for DNS.
    pub dns_addrs: Vec<SocketAddr>,
    /// `/health` (CoreDNS: :8080).
    pub health_addr: Option<SocketAddr>,
    /// `/ready` (CoreDNS: :8181).
    pub ready_addr: Option<SocketAddr>,
    /// `/metrics` (CoreDNS: :9153).
    pub metrics_addr: Option<SocketAddr>,
}

/// Errors that stop the server.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Dns(#[from] ServeError),
    #[error("binding {0}: {1}")]
    Http(SocketAddr, std::io::Error),
}

/// A started server.
#[derive(Debug)]
pub struct Running {
    /// The DNS addresses bound (UDP and TCP share each).
    pub dns_addrs: Vec<SocketAddr>,
    /// The health, ready and metrics addresses bound, in that order (when enabled).
    pub http_addrs: Vec<SocketAddr>,
    pub index: Arc<RwLock<DnsIndex>>,
    /// Set once Services and EndpointSlices are listed.
    pub ready: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Running {
    /// Waits until the server stops (after its cancellation token fires).
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// Binds every listener and starts watching; serves until `cancel`.
pub async fn start(
    client: Client,
    cfg: RunConfig,
    cancel: CancellationToken,
) -> Result<Running, RunError> {
    let index = Arc::new(RwLock::new(DnsIndex::new(cfg.dns.clone())));
    let ready = Arc::new(AtomicBool::new(false));
    let metrics = Arc::new(DnsMetrics::default());
    let handler = ClusterDnsHandler {
        index: index.clone(),
        metrics: metrics.clone(),
        ready: ready.clone(),
    };
    let (mut server, dns_addrs) = bind(handler, &cfg.dns_addrs).await?;
    tracing::info!(addrs = ?dns_addrs, zone = %cfg.dns.zone, "serving DNS on UDP and TCP");

    let mut http = Vec::new();
    let mut http_addrs = Vec::new();
    let routes: [(Option<SocketAddr>, PlainRespond); 3] = [
        (
            cfg.health_addr,
            Arc::new(|path: &str| match path {
                "/health" => (200, TEXT, "OK".to_string()),
                _ => (404, TEXT, "404 page not found\n".into()),
            }),
        ),
        (cfg.ready_addr, {
            let ready = ready.clone();
            Arc::new(move |path: &str| match path {
                "/ready" if ready.load(Ordering::Acquire) => (200, TEXT, "OK".into()),
                "/ready" => (503, TEXT, "kubernetes\n".into()),
                _ => (404, TEXT, "404 page not found\n".into()),
            })
        }),
        (cfg.metrics_addr, {
            let metrics = metrics.clone();
            let index = index.clone();
            Arc::new(move |path: &str| match path {
                "/metrics" => {
                    let mut out = String::new();
                    metrics.write(&mut out);
                    let (services, slices) = index.read().len();
                    out.push_str(&format!(
                        "# HELP ferrokube_dns_indexed_objects Services and EndpointSlices in the DNS index.\n# TYPE ferrokube_dns_indexed_objects gauge\nferrokube_dns_indexed_objects{{kind=\"service\"}} {services}\nferrokube_dns_indexed_objects{{kind=\"endpointslice\"}} {slices}\n"
                    ));
                    ferrokube_component_base::metrics::process::write_process_metrics(&mut out);
                    ferrokube_client::metrics::write_rest_client_metrics(&mut out);
                    (200, "text/plain; version=0.0.4; charset=utf-8", out)
                }
                _ => (404, TEXT, "404 page not found\n".into()),
            })
        }),
    ];
    for (addr, route) in routes {
        if let Some(addr) = addr {
            let (bound, task) = serve_plain(addr, route, cancel.clone())
                .await
                .map_err(|e| RunError::Http(addr, e))?;
            http_addrs.push(bound);
            http.push(task);
        }
    }

    let services: SharedIndexInformer<Service> =
        SharedIndexInformer::new(Api::all(client.clone()), InformerConfig::default());
    let slices: SharedIndexInformer<EndpointSlice> =
        SharedIndexInformer::new(Api::all(client), InformerConfig::default());
    let task = {
        let index = index.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            let events = tokio::spawn(dispatch(
                index,
                ready,
                services.clone(),
                slices.clone(),
                cancel.clone(),
            ));
            services.start();
            slices.start();
            cancel.cancelled().await;
            services.stop().await;
            slices.stop().await;
            let _ = events.await;
            if let Err(e) = server.shutdown_gracefully().await {
                tracing::warn!(error = %e, "DNS server shutdown");
            }
            for t in http {
                let _ = t.await;
            }
        })
    };
    Ok(Running {
        dns_addrs,
        http_addrs,
        index,
        ready,
        task,
    })
}

/// Starts and serves until `cancel`.
pub async fn run(
    client: Client,
    cfg: RunConfig,
    cancel: CancellationToken,
) -> Result<(), RunError> {
    start(client, cfg, cancel).await?.wait().await;
    Ok(())
}

/// Applies informer notifications to the index; flips `ready` once both synced.
async fn dispatch(
    index: Arc<RwLock<DnsIndex>>,
    ready: Arc<AtomicBool>,
    services: SharedIndexInformer<Service>,
    slices: SharedIndexInformer<EndpointSlice>,
    cancel: CancellationToken,
) {
    let mut svc_events = services.subscribe();
    let mut slice_events = slices.subscribe();
    // has_synced flips inside the streams without an item; look at it now and then.
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
            Some(n) = svc_events.next() => {
                let svc = n.object();
                let ns = svc.namespace().unwrap_or_default();
                let model = match &n {
                    Notification::Deleted { .. } => None,
                    _ => service_model(svc),
                };
                index.write().set_service(&ns, &svc.name_any(), model);
            }
            Some(n) = slice_events.next() => {
                let slice = n.object();
                let ns = slice.namespace().unwrap_or_default();
                let model = match &n {
                    Notification::Deleted { .. } => None,
                    _ => slice_model(slice),
                };
                index.write().set_slice(&ns, &slice.name_any(), model);
            }
        }
        if !ready.load(Ordering::Acquire) && svc_events.has_synced() && slice_events.has_synced() {
            let (s, e) = index.read().len();
            tracing::info!(services = s, endpointslices = e, "caches synced; answering");
            ready.store(true, Ordering::Release);
        }
    }
}
