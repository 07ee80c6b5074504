//! The registry: the server-side store logic of every built-in resource.
//!
//! One generic [`Store`] (create/get/list/watch/update/patch/delete/deletecollection)
//! per resource, driven by a [`Strategy`] ([`TypedStrategy<K>`] over the k8s-openapi
//! type, with the per-kind hooks in [`kinds`]). Objects are `serde_json::Value`s at
//! the edges; stored values are JSON without `resourceVersion`, which is the storage
//! revision set on read. A watch cache ([`cache`]) fed by one storage watch serves
//! watches and RV=0 lists. Storage errors become API errors in [`errors`] only.
//!
//! Layer: below `apiserver`, above `storage`, `api`, `apimachinery` and `protobuf`
//! (whose field table says which zeros Go leaves out of JSON). It knows no
//! HTTP (no URLs, query strings or content types) and never chooses a storage
//! backend: the caller hands one in.

pub mod allocator;
pub mod api_endpoints;
pub mod cache;
pub mod conversion;
pub mod custom;
pub mod errors;
mod event_ttl;
pub mod kinds;
pub mod meta;
pub mod service_claims;
pub mod store;
pub mod stored_json;
pub mod strategy;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ferrokube_api::resources::{RESOURCES, ResourceInfo};
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_storage::Storage;
use serde_json::json;
use tokio::task::JoinHandle;

pub use allocator::{Cidr, ServiceAllocator};
pub use cache::{CachedEvent, CachedObject, EventType, WatchItem};
pub use meta::{Clock, SystemClock};
pub use store::{
    Admission, Admit, DeleteOptions, Deleted, FieldValidation, ListParams, Listed, Part, PatchFn,
    PatchType, Store, UpdateInput, WatchParams, WriteOptions, Written,
};
pub use strategy::{Hooks, StorageCodec, Strategy, TypedStrategy};

/// The storage prefix everything lives under.
pub const ROOT: &str = "/registry/";

/// The watch cache of every key no built-in resource has: custom resources.
const CUSTOM_RESOURCES_CACHE: &str = "/registry";

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    Range(#[from] allocator::RangeError),
    #[error("no strategy for resource {0}")]
    NoStrategy(String),
    #[error("creating built-in object: {0}")]
    Bootstrap(ApiError),
    #[error("the watch cache did not start")]
    CacheStart,
}

/// What the registry needs from the apiserver's options.
#[derive(Clone)]
pub struct RegistryConfig {
    /// `--service-cluster-ip-range`.
    pub service_cluster_ip_range: String,
    /// `--service-node-port-range`.
    pub service_node_port_range: String,
    /// Address and port of the `kubernetes` Service's endpoints.
    pub advertise_address: IpAddr,
    pub secure_port: u16,
    /// How often an idle watch with `allowWatchBookmarks` gets a bookmark.
    pub bookmark_interval: Duration,
    /// How often storage history is compacted (to the revision of the previous run;
    /// zero: never).
    pub compaction_interval: Duration,
    /// The patch engines ([`store::builtin_patch`]: JSON, merge and strategic merge
    /// patch with the built-in types' patch metadata).
    pub patch: PatchFn,
    pub clock: Arc<dyn Clock>,
    /// `--allow-privileged`: false refuses privileged containers in pods and pod
    /// templates ("disallowed by cluster policy").
    pub allow_privileged: bool,
    /// `--event-ttl`: how long an Event is kept after its last write.
    pub event_ttl: Duration,
    /// `--endpoint-reconciler-type` (and `--apiserver-count`).
    pub endpoint_reconciler: api_endpoints::EndpointReconciler,
}

impl std::fmt::Debug for RegistryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryConfig")
            .field("service_cluster_ip_range", &self.service_cluster_ip_range)
            .field("service_node_port_range", &self.service_node_port_range)
            .field("advertise_address", &self.advertise_address)
            .field("secure_port", &self.secure_port)
            .finish()
    }
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            service_cluster_ip_range: "10.96.0.0/12".into(),
            service_node_port_range: "30000-32767".into(),
            advertise_address: IpAddr::from([127, 0, 0, 1]),
            secure_port: 6443,
            bookmark_interval: Duration::from_secs(60),
            compaction_interval: Duration::from_secs(300),
            patch: store::builtin_patch,
            clock: Arc::new(SystemClock),
            allow_privileged: false,
            event_ttl: Duration::from_secs(3600),
            endpoint_reconciler: Default::default(),
        }
    }
}

/// A resource found by its path, with its store.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub info: &'static ResourceInfo,
    pub store: Arc<Store>,
    /// For a custom resource: its served version.
    pub custom: Option<Arc<custom::CustomResource>>,
}

/// All stores, the watch cache and the background tasks.
pub struct Registry {
    /// One per built-in resource, in [`RESOURCES`] order: `stores[i]` serves
    /// `RESOURCES[i]`.
    stores: Vec<Arc<Store>>,
    storage: Arc<dyn Storage>,
    tasks: Vec<JoinHandle<()>>,
    /// The resources CustomResourceDefinitions declare.
    custom: Arc<custom::CustomResources>,
    /// Services' cluster IPs and node ports.
    service_claims: Arc<service_claims::ServiceClaims>,
    /// This apiserver in the `kubernetes` Service's endpoints.
    api_endpoint: api_endpoints::ApiEndpoint,
    /// The expiry of Events (`--event-ttl`); `None` when they are kept forever.
    event_ttl: Option<event_ttl::EventTtl>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("stores", &self.stores.len())
            .finish()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Registry {
    /// Builds every store over `storage`, fills the watch cache and creates the
    /// built-in objects.
    pub async fn new(
        storage: Arc<dyn Storage>,
        config: RegistryConfig,
    ) -> Result<Self, RegistryError> {
        let cidr = Cidr::parse(&config.service_cluster_ip_range)?;
        let ports = allocator::parse_port_range(&config.service_node_port_range)?;
        let services = Arc::new(service_claims::ServiceClaims::new(
            ServiceAllocator::new(cidr, ports),
            config.clock.clone(),
        ));
        // One cache per storage prefix (resources served from another's storage
        // share its cache).
        let mut prefixes: Vec<String> = Vec::new();
        for r in RESOURCES {
            if !prefixes.iter().any(|p| p == r.storage_prefix) {
                prefixes.push(r.storage_prefix.to_string());
            }
        }
        // Last, so every built-in prefix matches first: the custom resources' objects
        // (`/registry/<group>/<plural>/...`), whatever definitions come and go.
        prefixes.push(CUSTOM_RESOURCES_CACHE.to_string());
        let hub = Arc::new(cache::CacheHub::new(prefixes));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let mut tasks = vec![tokio::spawn(hub.clone().run(
            storage.clone(),
            ROOT.to_string(),
            ready_tx,
        ))];
        ready_rx.await.map_err(|_| RegistryError::CacheStart)?;
        let ns_prefix = RESOURCES
            .iter()
            .find(|r| r.group.is_empty() && r.kind == "Namespace")
            .map(|r| r.storage_prefix)
            .unwrap_or("/registry/namespaces");
        let ns_cache = hub.cache(ns_prefix).ok_or(RegistryError::CacheStart)?;
        let mut stores = Vec::new();
        for info in RESOURCES {
            let strategy = kinds::strategy_for(info)
                .ok_or_else(|| RegistryError::NoStrategy(info.plural.to_string()))?;
            let is_service = info.group.is_empty() && info.kind == "Service";
            let cache = hub
                .cache(info.storage_prefix)
                .ok_or(RegistryError::CacheStart)?;
            if is_service {
                let (items, _) = cache.snapshot(&format!("{}/", info.storage_prefix));
                for s in items {
                    services.allocator().restore(&s);
                }
            }
            // Through WriteTracking, so admission can read its own writes from the cache.
            let tracked: Arc<dyn ferrokube_storage::Storage> =
                Arc::new(cache::WriteTracking::new(storage.clone(), cache.clone()));
            stores.push(Arc::new(Store::new(
                strategy,
                tracked,
                cache,
                config.clock.clone(),
                is_service.then(|| services.clone()),
                config.patch,
                config.bookmark_interval,
                ns_prefix,
                ns_cache.clone(),
                config.allow_privileged,
            )));
        }
        tasks.push(tokio::spawn(compactor(
            storage.clone(),
            config.compaction_interval,
        )));
        let event_ttl = event_ttl::EventTtl::start(&stores, storage.clone(), &config).map(
            |(handle, expiry)| {
                tasks.push(tokio::spawn(expiry));
                handle
            },
        );
        let custom_cache = hub
            .cache(CUSTOM_RESOURCES_CACHE)
            .ok_or(RegistryError::CacheStart)?;
        let factory = {
            let (storage, config) = (storage.clone(), config.clone());
            custom::StoreFactory(Box::new(move |strategy| {
                let tracked: Arc<dyn ferrokube_storage::Storage> = Arc::new(
                    cache::WriteTracking::new(storage.clone(), custom_cache.clone()),
                );
                Store::new(
                    strategy,
                    tracked,
                    custom_cache.clone(),
                    config.clock.clone(),
                    None,
                    config.patch,
                    config.bookmark_interval,
                    ns_prefix,
                    ns_cache.clone(),
                    // Custom resources carry no pod spec the policy knows of.
                    true,
                )
            }))
        };
        let custom = Arc::new(custom::CustomResources::new(factory));
        let definitions = RESOURCES
            .iter()
            .position(custom::is_definition)
            .map(|i| stores[i].clone())
            .ok_or_else(|| RegistryError::NoStrategy(custom::GROUP.into()))?;
        tasks.push(tokio::spawn(custom::run_definitions(
            definitions,
            custom.clone(),
        )));
        let mut reg = Registry {
            stores,
            storage,
            tasks,
            custom,
            service_claims: services.clone(),
            api_endpoint: api_endpoints::ApiEndpoint {
                ip: config.advertise_address,
                port: config.secure_port,
                clock: config.clock.clone(),
                reconciler: config.endpoint_reconciler,
            },
            event_ttl,
        };
        let service_store = reg
            .core("services")
            .map_err(RegistryError::Bootstrap)?
            .clone();
        if let Some(addresses) = reg.store("networking.k8s.io", "v1", "ipaddresses") {
            let cidrs = reg
                .store("networking.k8s.io", "v1", "servicecidrs")
                .cloned();
            services.claim_in(addresses.clone(), cidrs, reg.storage.clone());
        }
        reg.bootstrap(&config, cidr)
            .await
            .map_err(RegistryError::Bootstrap)?;
        services
            .reconcile(&service_store)
            .await
            .map_err(RegistryError::Bootstrap)?;
        reg.tasks.push(tokio::spawn(service_claims::repair_loop(
            services,
            service_store,
        )));
        Ok(reg)
    }

    /// One pass of the repair of Services' cluster IP and node port claims and the
    /// default ServiceCIDR (run every [`service_claims::REPAIR_INTERVAL`] anyway).
    pub async fn repair_service_claims(&self) -> Result<(), ApiError> {
        self.service_claims.reconcile(self.core("services")?).await
    }

    /// One expiry pass over Events now (run every `min(--event-ttl / 20, 60 s)`
    /// anyway): deletes those last written longer than `--event-ttl` ago and returns
    /// how many; 0 when the TTL is 0 (events are kept).
    pub async fn expire_events(&self) -> Result<usize, ApiError> {
        match &self.event_ttl {
            Some(expiry) => expiry.expire_now().await,
            None => Ok(0),
        }
    }

    /// Renews this apiserver's lease and points the `kubernetes` Service's Endpoints
    /// and EndpointSlice at every live apiserver; run every
    /// [`api_endpoints::ENDPOINT_INTERVAL`] by the apiserver.
    pub async fn reconcile_api_endpoints(&self) -> Result<(), ApiError> {
        self.api_endpoints_round(false).await
    }

    /// Takes this apiserver out of the `kubernetes` Service's endpoints (a graceful
    /// shutdown).
    pub async fn remove_api_endpoint(&self) -> Result<(), ApiError> {
        self.api_endpoints_round(true).await
    }

    async fn api_endpoints_round(&self, leaving: bool) -> Result<(), ApiError> {
        let slices = self.store("discovery.k8s.io", "v1", "endpointslices");
        self.api_endpoint
            .reconcile(
                self.storage.as_ref(),
                self.core("endpoints")?,
                slices.map(AsRef::as_ref),
                leaving,
            )
            .await
    }

    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    pub fn stores(&self) -> &[Arc<Store>] {
        &self.stores
    }

    /// The store of `group/version` `plural`.
    pub fn store(&self, group: &str, version: &str, plural: &str) -> Option<&Arc<Store>> {
        let store = self
            .stores
            .get(ferrokube_api::resources::position(group, version, plural)?)?;
        debug_assert_eq!(store.info().plural, plural);
        Some(store)
    }

    pub fn store_for(&self, info: &ResourceInfo) -> Option<&Arc<Store>> {
        self.store(info.group, info.version, info.plural)
    }

    /// The served custom resources.
    pub fn custom(&self) -> &Arc<custom::CustomResources> {
        &self.custom
    }

    /// The resource at `group/version/plural` and its store: a built-in one, else a
    /// served custom resource.
    pub fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<Resolved> {
        if let Some(store) = self.store(group, version, plural) {
            return Some(Resolved {
                info: store.info(),
                store: store.clone(),
                custom: None,
            });
        }
        let served = self.custom.served();
        let r = served.get(group, version, plural)?;
        Some(Resolved {
            info: r.info,
            store: r.store.clone(),
            custom: Some(r.clone()),
        })
    }

    fn core(&self, plural: &str) -> Result<&Arc<Store>, ApiError> {
        self.store("", "v1", plural)
            .ok_or_else(|| ApiError::internal(format!("no store for {plural}")))
    }

    /// Creates the system namespaces that are missing (upstream's system namespaces
    /// controller); one being deleted is left to go.
    pub async fn ensure_system_namespaces(&self) -> Result<(), ApiError> {
        let ns = self.core("namespaces")?;
        // Concurrent, so that a fresh store commits them together.
        futures::future::try_join_all(
            ["default", "kube-system", "kube-public", "kube-node-lease"]
                .map(|name| ns.ensure(None, json!({"metadata": {"name": name}}))),
        )
        .await?;
        Ok(())
    }

    /// Upstream's built-in objects: system namespaces, the `kubernetes` Service and its
    /// Endpoints, the default priority classes.
    async fn bootstrap(&self, config: &RegistryConfig, cidr: Cidr) -> Result<(), ApiError> {
        self.ensure_system_namespaces().await?;
        let svc = self.core("services")?;
        svc.ensure(
            Some("default"),
            json!({
                "metadata": {"name": "kubernetes", "namespace": "default",
                    "labels": {"component": "apiserver", "provider": "kubernetes"}},
                "spec": {
                    "type": "ClusterIP",
                    "clusterIP": cidr.first().to_string(),
                    "sessionAffinity": "None",
                    "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                        "targetPort": config.secure_port}]
                }
            }),
        )
        .await?;
        self.reconcile_api_endpoints().await?;
        // Upstream's `scheduling/bootstrap-system-priority-classes` hook
        // (`scheduling.SystemPriorityClasses()`); existing ones are left as they are.
        if let Some(pc) = self.store("scheduling.k8s.io", "v1", "priorityclasses") {
            futures::future::try_join_all(
                [
                    (
                        "system-node-critical",
                        2_000_001_000,
                        "Used for system critical pods that must not be moved from their current node.",
                    ),
                    (
                        "system-cluster-critical",
                        2_000_000_000,
                        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
                    ),
                ]
                .map(|(name, value, desc)| {
                    pc.ensure(
                        None,
                        json!({"metadata": {"name": name}, "value": value, "description": desc,
                            "preemptionPolicy": "PreemptLowerPriority"}),
                    )
                }),
            )
            .await?;
        }
        Ok(())
    }
}

/// Compacts storage history every `interval` to the revision seen one interval ago,
/// as upstream's apiserver does for etcd.
async fn compactor(storage: Arc<dyn Storage>, interval: Duration) {
    // `--etcd-compaction-interval=0`: this apiserver never compacts.
    if interval.is_zero() {
        return;
    }
    let mut previous = 0;
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        if previous > 0
            && let Err(e) = storage.compact(previous).await
        {
            tracing::warn!(error = %e, "compaction failed");
        }
        match storage.current_revision().await {
            Ok(r) => previous = r,
            Err(e) => tracing::warn!(error = %e, "reading the current revision failed"),
        }
    }
}
