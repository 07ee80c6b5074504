//! The running kube-proxy: informers on Services, EndpointSlices and this Node feed
//! one [`FamilyProxier`] per IP family, of either backend ([`Backend`]: nftables or
//! iptables); a sync loop turns their plans into `nft -f` transactions or
//! `iptables-restore` inputs (at most one per `min_sync_period`, at least one check per
//! `sync_period`, a full resync every hour and after any failure); `/healthz`,
//! `/livez` and `/metrics` report on it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use ferrokube_client::events::{
    EventBroadcaster, EventBroadcasterOptions, EventType, hostname as host_name,
};
use ferrokube_client::informer::{InformerConfig, Notification, SharedIndexInformer};
use ferrokube_client::serving::{PlainRespond, serve_plain};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, Client};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::backend::{Backend, FamilyProxier};
use crate::health::{ProxyHealth, SyncMetrics};
use crate::rules::ProxyConfig;
use crate::service_health::{ListenFailure, ServedService, ServiceHealthServers};

/// Upstream's `FullSyncPeriod`: even without failures, rewrite everything hourly.
const FULL_SYNC_PERIOD: Duration = Duration::from_secs(3600);

/// How the proxy runs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// One per IP family served.
    pub proxies: Vec<ProxyConfig>,
    pub sync_period: Duration,
    pub min_sync_period: Duration,
    pub healthz_addr: Option<SocketAddr>,
    pub metrics_addr: Option<SocketAddr>,
    /// nftables or iptables.
    pub backend: Backend,
}

/// Errors that stop the proxy.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
}

struct Shared {
    proxiers: Vec<FamilyProxier>,
    health: Mutex<ProxyHealth>,
    metrics: Mutex<SyncMetrics>,
    changed: Notify,
    initialized: AtomicBool,
}

/// Runs until `cancel`. Rules stay in place when it returns (as upstream; `--cleanup`
/// removes them).
pub async fn run(
    client: Client,
    cfg: RunConfig,
    cancel: CancellationToken,
) -> Result<(), RunError> {
    let hostname = cfg
        .proxies
        .first()
        .map(|p| p.hostname.clone())
        .unwrap_or_default();
    let shared = Arc::new(Shared {
        proxiers: cfg
            .proxies
            .iter()
            .cloned()
            .map(|c| cfg.backend.proxier(c))
            .collect(),
        health: Mutex::new(ProxyHealth::new(cfg.sync_period * 2)),
        metrics: Mutex::new(SyncMetrics::new(cfg.backend.mode())),
        changed: Notify::new(),
        initialized: AtomicBool::new(false),
    });
    let events = EventBroadcaster::new(client.clone(), EventBroadcasterOptions::default());
    let recorder =
        events.new_recorder_with_instance("kube-proxy", &format!("kube-proxy-{}", host_name()));
    let node = node_ref(&hostname);
    let started = start_servers(&cfg, &shared, &cancel).await;
    let servers = match started {
        Ok(servers) => servers,
        Err((reason, err)) => {
            // As upstream: the node shows why this proxy did not come up.
            recorder.event(
                &node,
                None,
                EventType::Warning,
                reason,
                START_ACTION,
                &err.to_string(),
            );
            events.shutdown().await;
            return Err(err);
        }
    };

    // Upstream's informer filters: Services another proxy implements are not ours.
    let selector = InformerConfig {
        label_selector: Some(format!("!{}", crate::model::SERVICE_PROXY_NAME_LABEL)),
        ..InformerConfig::default()
    };
    let services: SharedIndexInformer<Service> =
        SharedIndexInformer::new(Api::all(client.clone()), selector.clone());
    let slices: SharedIndexInformer<EndpointSlice> =
        SharedIndexInformer::new(Api::all(client.clone()), selector);
    let nodes: SharedIndexInformer<Node> = SharedIndexInformer::new(
        Api::all(client.clone()),
        InformerConfig {
            field_selector: Some(format!("metadata.name={hostname}")),
            ..InformerConfig::default()
        },
    );
    let dispatched = tokio::spawn(dispatch(
        shared.clone(),
        services.clone(),
        slices.clone(),
        nodes.clone(),
        cancel.clone(),
    ));
    services.start();
    slices.start();
    nodes.start();
    recorder.event(&node, None, EventType::Normal, "Starting", START_ACTION, "");

    let health = shared.clone();
    let mut service_health = ServiceHealthServers::new(Arc::new(move || {
        health.health.lock().is_healthy(Instant::now())
    }));
    let mut report = |failure: &ListenFailure| {
        let ServedService {
            namespace, name, ..
        } = &failure.service;
        let message = format!(
            "node {hostname} failed to start healthcheck \"{namespace}/{name}\" on port {}: {}",
            failure.port, failure.error
        );
        tracing::error!(%message, "failed to start a service health check server");
        let service = ObjectReference {
            kind: Some("Service".into()),
            namespace: Some(namespace.clone()),
            name: Some(name.clone()),
            uid: Some(format!("{namespace}/{name}")),
            ..ObjectReference::default()
        };
        recorder.event(
            &service,
            None,
            EventType::Warning,
            "FailedToStartServiceHealthcheck",
            "Listen",
            &message,
        );
    };
    sync_loop(&shared, &cfg, &mut service_health, &mut report, &cancel).await;
    service_health.stop();

    services.stop().await;
    slices.stop().await;
    nodes.stop().await;
    let _ = dispatched.await;
    for s in servers {
        let _ = s.await;
    }
    events.shutdown().await;
    Ok(())
}

/// The action of upstream's start-up events (`birthCry` and its failures).
const START_ACTION: &str = "StartKubeProxy";

/// The node this proxy runs on, as upstream's `NodeRef` names it (its UID is the
/// name).
fn node_ref(name: &str) -> ObjectReference {
    ObjectReference {
        kind: Some("Node".into()),
        name: Some(name.to_string()),
        uid: Some(name.to_string()),
        ..ObjectReference::default()
    }
}

/// The healthz and metrics servers; a failure to bind comes with the reason of
/// upstream's event for it.
async fn start_servers(
    cfg: &RunConfig,
    shared: &Arc<Shared>,
    cancel: &CancellationToken,
) -> Result<Vec<tokio::task::JoinHandle<()>>, (&'static str, RunError)> {
    let mut servers = Vec::new();
    if let Some(addr) = cfg.healthz_addr {
        let s = shared.clone();
        servers.push(
            serve(
                addr,
                Arc::new(move |path: &str| match path {
                    "/healthz" | "/livez" => {
                        let (code, body) = s.health.lock().respond(
                            Instant::now(),
                            SystemTime::now(),
                            path == "/livez",
                        );
                        (code, "application/json", body)
                    }
                    _ => (404, "text/plain", "404 page not found\n".into()),
                }),
                cancel.clone(),
            )
            .await
            .map_err(|e| ("FailedToStartProxierHealthcheck", e))?,
        );
    }
    if let Some(addr) = cfg.metrics_addr {
        let s = shared.clone();
        servers.push(
            serve(
                addr,
                Arc::new(move |path: &str| match path {
                    "/metrics" => {
                        let mut out = String::new();
                        s.metrics.lock().write(&mut out);
                        s.health.lock().metrics(&mut out);
                        ferrokube_component_base::metrics::process::write_process_metrics(&mut out);
                        ferrokube_client::metrics::write_rest_client_metrics(&mut out);
                        (200, "text/plain; version=0.0.4", out)
                    }
                    "/healthz" => (200, "text/plain", "ok".into()),
                    _ => (404, "text/plain", "404 page not found\n".into()),
                }),
                cancel.clone(),
            )
            .await
            .map_err(|e| ("FailedToStartMetricServer", e))?,
        );
    }
    Ok(servers)
}

/// Feeds informer notifications into the proxiers and wakes the sync loop.
async fn dispatch(
    shared: Arc<Shared>,
    services: SharedIndexInformer<Service>,
    slices: SharedIndexInformer<EndpointSlice>,
    nodes: SharedIndexInformer<Node>,
    cancel: CancellationToken,
) {
    let mut svc_events = services.subscribe();
    let mut slice_events = slices.subscribe();
    let mut node_events = nodes.subscribe();
    // has_synced flips inside the streams without an item; look at it now and then.
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        let changed = tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => false,
            Some(n) = svc_events.next() => {
                for p in &shared.proxiers {
                    p.objects(|o| match &n {
                        Notification::Deleted { obj, .. } => o.service_deleted(obj),
                        _ => o.service_updated(n.object().clone()),
                    });
                }
                true
            }
            Some(n) = slice_events.next() => {
                for p in &shared.proxiers {
                    p.objects(|o| match &n {
                        Notification::Deleted { obj, .. } => o.slice_deleted(obj),
                        _ => o.slice_updated(n.object().clone()),
                    });
                }
                true
            }
            Some(n) = node_events.next() => {
                let node = match &n {
                    Notification::Deleted { .. } => None,
                    _ => Some(n.object().clone()),
                };
                if let Some(node) = &node {
                    shared.health.lock().sync_node(node);
                }
                for p in &shared.proxiers {
                    p.objects(|o| o.node_updated(node.clone()));
                }
                true
            }
        };
        if changed {
            shared.health.lock().queued(Instant::now());
        }
        let ready = svc_events.has_synced() && slice_events.has_synced();
        if ready && !shared.initialized.swap(true, Ordering::AcqRel) {
            tracing::info!("services and endpoint slices synced; programming rules");
            shared.changed.notify_one();
        } else if changed && ready {
            shared.changed.notify_one();
        }
    }
}

async fn sync_loop(
    shared: &Shared,
    cfg: &RunConfig,
    service_health: &mut ServiceHealthServers,
    report: &mut (dyn FnMut(&ListenFailure) + Send),
    cancel: &CancellationToken,
) {
    // Ports whose listener failed: reported once, tried again at each sync.
    let mut failed_ports = std::collections::HashSet::new();
    let mut last_sync: Option<Instant> = None;
    let mut last_full = Instant::now();
    let mut retry_after: Option<Instant> = None;
    loop {
        let deadline = retry_after.unwrap_or_else(|| Instant::now() + cfg.sync_period);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = shared.changed.notified() => {}
            _ = tokio::time::sleep_until(deadline.into()) => {}
        }
        if !shared.initialized.load(Ordering::Acquire) {
            continue;
        }
        // Bounded frequency: at most one sync per min_sync_period.
        if let Some(last) = last_sync {
            let next = last + cfg.min_sync_period;
            if next > Instant::now() {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep_until(next.into()) => {}
                }
            }
        }
        if last_full.elapsed() >= FULL_SYNC_PERIOD {
            for p in &shared.proxiers {
                p.invalidate();
            }
        }
        last_sync = Some(Instant::now());
        let (ok, any_full) = sync_once(shared, cfg.sync_period).await;
        // The primary family's proxier says which health check ports to serve.
        let plan = shared.proxiers.first().map(FamilyProxier::service_health);
        let failures = service_health.sync(plan.unwrap_or_default()).await;
        let now_failed: std::collections::HashSet<u16> = failures.iter().map(|f| f.port).collect();
        for f in failures.iter().filter(|f| !failed_ports.contains(&f.port)) {
            report(f);
        }
        failed_ports = now_failed;
        if any_full && ok {
            last_full = Instant::now();
        }
        retry_after = (!ok).then(|| Instant::now() + cfg.sync_period.min(Duration::from_secs(5)));
    }
}

/// One sync of every family; returns (all succeeded, any was full).
async fn sync_once(shared: &Shared, sync_period: Duration) -> (bool, bool) {
    let mut all_ok = true;
    let mut any_full = false;
    for proxier in &shared.proxiers {
        let done = proxier.sync(sync_period).await;
        any_full |= done.full;
        all_ok &= done.ok;
        if !done.trigger_times.is_empty() {
            // Both backends: the EndpointSlice changes this sync programmed.
            shared
                .metrics
                .lock()
                .observe_network_programming(SystemTime::now(), &done.trigger_times);
        }
        if !done.counted {
            continue;
        }
        let family = proxier.family();
        let mut metrics = shared.metrics.lock();
        metrics.observe(
            done.elapsed.as_secs_f64(),
            done.full,
            done.ok,
            SystemTime::now(),
            done.services,
        );
        metrics.observe_iptables(family, done.full, done.restore_failed, done.iptables);
    }
    if all_ok {
        shared
            .health
            .lock()
            .updated(Instant::now(), SystemTime::now());
    }
    (all_ok, any_full)
}

/// A plain-HTTP server answering by path until `cancel`.
async fn serve(
    addr: SocketAddr,
    respond: PlainRespond,
    cancel: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, RunError> {
    serve_plain(addr, respond, cancel)
        .await
        .map(|(_, task)| task)
        .map_err(|e| RunError::Bind(addr, e))
}
