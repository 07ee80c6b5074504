//! The running kubelet: node registration and status, the node Lease, the pod workers
//! (one task per pod UID, fed by an informer on `spec.nodeName=<node>` and by PLEG), pod
//! cleanup, and graceful deletion (upstream `kubelet.go`, `kubelet_node_status.go`,
//! `nodelease`, `pod_workers.go`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ContainerImage, Node, NodeStatus, ObjectReference, PersistentVolume,
    PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount, Taint,
};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use parking_lot::RwLock;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use ferrokube_client::config::ClientLimits;
use ferrokube_client::events::{EventBroadcaster, EventType};
use ferrokube_client::informer::{InformerConfig, Notification, SharedIndexInformer};

use crate::env::EnvSources;
use crate::lifecycle::{
    DEADLINE_MESSAGE, DEADLINE_REASON, past_active_deadline, until_active_deadline,
};
use crate::node::{
    EvictionThresholds, NodeInputs, Pressures, Reserved, RuntimeHealth, condition_events, go_arch,
    initial_node, node_conditions, node_labels, node_resources, node_status,
    node_status_needs_update,
};
use crate::node_allocatable::{
    NodeCapacity, best_effort_cgroup_limits, burstable_cgroup_limits, pods_cgroup_limits,
    reserved_cgroup_limits,
};
use crate::pleg::GenericPleg;
use crate::probe_manager::ProbeManager;
use crate::runtime::RuntimeManager;
use crate::sandbox::{name, namespace, spec, uid};
use crate::static_pods::{
    MirrorAction, StaticPodSource, StaticPods, is_mirror_pod, is_static_pod, mirror_pod,
    plan_mirrors,
};
use crate::status::RuntimePod;
use crate::status_manager::StatusManager;
use crate::working_pods::{ConfigPod, Lifecycle, OrphanWorker, count_pods};

/// Everything the kubelet is configured with besides the runtime's [`crate::NodeConfig`].
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    pub node_name: String,
    pub hostname: String,
    pub node_ips: Vec<String>,
    pub node_labels: BTreeMap<String, String>,
    pub register_with_taints: Vec<Taint>,
    /// `--register-node` (default true): whether the kubelet creates its Node; when
    /// false it waits for someone else to, and then keeps its status as usual.
    pub register_node: bool,
    pub root_dir: std::path::PathBuf,
    pub kube_reserved: Reserved,
    pub system_reserved: Reserved,
    /// `--enforce-node-allocatable` with `--system-reserved-cgroup` and
    /// `--kube-reserved-cgroup`: what `kubepods` and the reserved cgroups are held to.
    pub enforce_node_allocatable: crate::node_allocatable::Enforcement,
    pub eviction_hard: EvictionThresholds,
    /// Soft thresholds, their grace periods, minimum reclaims, the pressure transition
    /// period and the monitoring interval of the eviction manager.
    pub eviction: crate::eviction::EvictionSettings,
    pub max_pods: i64,
    /// The buckets of the kubelet's clients ([`KubeletClients`]).
    pub client_limits: ClientLimitSettings,
    /// `nodeStatusUpdateFrequency` (10 s).
    pub node_status_update_frequency: Duration,
    /// `nodeLeaseDurationSeconds` (40); the lease is renewed every quarter of it.
    pub node_lease_duration_seconds: i32,
    /// The kubelet's port as advertised in `daemonEndpoints`.
    pub kubelet_port: i32,
    /// How often every pod is re-synced without events (`syncFrequency`).
    pub sync_frequency: Duration,
    /// PLEG relist period (1 s).
    pub pleg_period: Duration,
    /// `--pod-manifest-path` / `staticPodPath`: static pod manifests (a directory or a file).
    pub static_pod_path: Option<std::path::PathBuf>,
    /// `fileCheckFrequency` (20 s): how often the static pod path is read again.
    pub file_check_frequency: Duration,
    /// Dead container and sandbox GC (`--maximum-dead-containers*`,
    /// `--minimum-container-ttl-duration`).
    pub container_gc: crate::gc::ContainerGcPolicy,
    /// Image GC (`--image-gc-high-threshold`, `--image-gc-low-threshold`,
    /// `--minimum-image-ttl-duration`).
    pub image_gc: crate::gc::ImageGcPolicy,
    /// `--pod-infra-container-image`: never removed by image GC.
    pub sandbox_image: String,
    /// `--container-log-max-size` / `--container-log-max-files`.
    pub container_log: crate::log_rotation::LogRotationPolicy,
    /// The directory `/logs/` serves on the kubelet API (upstream: `/var/log`); `None`
    /// when `enableSystemLogHandler` is false.
    pub system_log_dir: Option<std::path::PathBuf>,
    /// The effective configuration served on `/configz` (under `kubeletconfig`): the
    /// binary fills it with [`crate::kubeletconfig::effective_configuration`]; an empty
    /// object by default.
    pub configz: serde_json::Value,
}

impl KubeletConfig {
    pub fn new(node_name: impl Into<String>) -> Self {
        let node_name = node_name.into();
        KubeletConfig {
            hostname: node_name.clone(),
            node_name,
            node_ips: vec![],
            node_labels: BTreeMap::new(),
            register_with_taints: vec![],
            register_node: true,
            root_dir: "/var/lib/kubelet".into(),
            kube_reserved: Reserved::default(),
            system_reserved: Reserved::default(),
            enforce_node_allocatable: Default::default(),
            eviction_hard: EvictionThresholds::parse(crate::node::DEFAULT_EVICTION_HARD)
                .unwrap_or_default(),
            eviction: Default::default(),
            max_pods: crate::node::DEFAULT_MAX_PODS,
            client_limits: ClientLimitSettings::default(),
            node_status_update_frequency: Duration::from_secs(10),
            node_lease_duration_seconds: 40,
            kubelet_port: 10250,
            sync_frequency: Duration::from_secs(60),
            pleg_period: Duration::from_secs(1),
            static_pod_path: None,
            file_check_frequency: crate::static_pods::DEFAULT_FILE_CHECK_FREQUENCY,
            container_gc: Default::default(),
            image_gc: Default::default(),
            sandbox_image: DEFAULT_SANDBOX_IMAGE.into(),
            container_log: Default::default(),
            system_log_dir: Some("/var/log".into()),
            configz: serde_json::Value::Object(Default::default()),
        }
    }
}

/// Upstream's default `--pod-infra-container-image`.
pub const DEFAULT_SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// How often dead containers are collected (upstream `ContainerGCPeriod`).
const CONTAINER_GC_PERIOD: Duration = Duration::from_secs(60);
/// How often image GC runs (upstream `ImageGCPeriod`).
const IMAGE_GC_PERIOD: Duration = Duration::from_secs(300);

/// How often freed heap is handed back to the OS without pod cleanups.
const HEAP_TRIM_PERIOD: Duration = Duration::from_secs(30);
/// How long after the last pod cleanup of a burst the heap is trimmed.
const HEAP_TRIM_SETTLE: Duration = Duration::from_secs(1);

/// Errors that stop the kubelet.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("kubelet root dir {dir}: {source}")]
    RootDir {
        dir: String,
        #[source]
        source: std::io::Error,
    },
    /// A reserved cgroup could not be held to its reservation (upstream fails the
    /// container manager's start).
    #[error("{0}")]
    NodeAllocatable(String),
}

/// How often the QoS tiers' weights are brought up to date without a new pod, and a
/// failed update of `kubepods` is tried again (upstream: a minute for both).
const QOS_CGROUP_UPDATE_PERIOD: Duration = Duration::from_secs(60);

/// The reasons of upstream's node allocatable events.
const NODE_ALLOCATABLE_ENFORCED: &str = "NodeAllocatableEnforced";
const FAILED_NODE_ALLOCATABLE_ENFORCEMENT: &str = "FailedNodeAllocatableEnforcement";

/// How often a pod with configMap or secret volumes is re-synced at most, so content
/// changes reach the mounted files.
const VOLUME_RESYNC: Duration = Duration::from_secs(10);

enum WorkerMsg {
    Update(Arc<Pod>),
    /// The pod as the API has it now, changed in nothing the worker syncs for (its
    /// status, which is mostly the kubelet's own write): taken without a sync.
    Refresh(Arc<Pod>),
    /// The pod is gone from the API (force-deleted or deleted while we were not looking).
    Deleted(Arc<Pod>),
    Kick,
}

struct Worker {
    tx: mpsc::UnboundedSender<WorkerMsg>,
    /// Where the worker is in its pod's lifecycle (a [`Lifecycle`] byte the worker
    /// writes), for `kubelet_working_pods` and `kubelet_active_pods`.
    lifecycle: Arc<AtomicU8>,
    is_static: bool,
    /// Told that its pod left the config (deleted in the API, its manifest removed).
    orphaned: bool,
    /// Its pod came back with the same UID while it was being terminated: upstream
    /// starts such a pod again once the old worker is done with it.
    restart: bool,
}

impl Worker {
    fn lifecycle(&self) -> Lifecycle {
        Lifecycle::from_u8(self.lifecycle.load(Ordering::Relaxed))
    }

    /// Hands the worker a new copy of its pod from the config; a pod it was told had
    /// left is back.
    fn send_config(&mut self, msg: WorkerMsg) {
        if self.orphaned {
            self.restart = true;
        }
        let _ = self.tx.send(msg);
    }

    /// Tells the worker its pod left the config.
    fn send_deleted(&mut self, pod: Arc<Pod>) {
        self.orphaned = true;
        self.restart = false;
        let _ = self.tx.send(WorkerMsg::Deleted(pod));
    }
}

/// `kubeAPIQPS`, `kubeAPIBurst`, `eventRecordQPS` and `eventBurst`, integers as in
/// the configuration file. Zero is client-go's default (5 a second, burst 10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimitSettings {
    pub kube_api_qps: i32,
    pub kube_api_burst: i32,
    pub event_record_qps: i32,
    pub event_burst: i32,
}

impl Default for ClientLimitSettings {
    /// Upstream's defaults.
    fn default() -> Self {
        ClientLimitSettings {
            kube_api_qps: 50,
            kube_api_burst: 100,
            event_record_qps: 50,
            event_burst: 100,
        }
    }
}

impl ClientLimitSettings {
    /// Upstream's validation: none may be negative.
    pub fn validate(&self) -> Result<(), String> {
        for (value, field, flag) in [
            (self.event_record_qps, "eventRecordQPS", "--event-qps"),
            (self.event_burst, "eventBurst", "--event-burst"),
            (self.kube_api_qps, "kubeAPIQPS", "--kube-api-qps"),
            (self.kube_api_burst, "kubeAPIBurst", "--kube-api-burst"),
        ] {
            if value < 0 {
                return Err(format!(
                    "invalid configuration: {field} ({flag}) {value} must not be a negative number"
                ));
            }
        }
        Ok(())
    }

    /// The API client's bucket.
    pub fn api(&self) -> ClientLimits {
        limits(self.kube_api_qps, self.kube_api_burst)
    }

    /// The events client's bucket.
    pub fn events(&self) -> ClientLimits {
        limits(self.event_record_qps, self.event_burst)
    }
}

fn limits(qps: i32, burst: i32) -> ClientLimits {
    let (qps, burst) = ferrokube_client::config::defaulted_limits(qps as f32, burst.max(0) as u32);
    ClientLimits { qps, burst }
}

/// The kubelet's API clients, split as upstream's: each has a bucket of its own.
#[derive(Clone)]
pub struct KubeletClients {
    /// Pods, their volumes' sources, registration and the rest (`kubeAPIQPS`,
    /// `kubeAPIBurst`).
    pub api: kube::Client,
    /// The node status and the node Lease: never limited, so that throttling cannot
    /// make a live node look dead.
    pub heartbeat: kube::Client,
    /// Events (`eventRecordQPS`, `eventBurst`).
    pub events: kube::Client,
}

impl KubeletClients {
    /// One client for everything (tests).
    pub fn shared(client: kube::Client) -> Self {
        KubeletClients {
            api: client.clone(),
            heartbeat: client.clone(),
            events: client,
        }
    }
}

/// The kubelet of one node.
pub struct Kubelet {
    client: kube::Client,
    heartbeat_client: kube::Client,
    event_client: kube::Client,
    /// Every Service, for the containers' service link variables (`KUBERNETES_SERVICE_HOST`
    /// is how in-cluster clients find the API).
    services: SharedIndexInformer<Service>,
    runtime: Arc<RuntimeManager>,
    config: KubeletConfig,
    status: StatusManager,
    /// The pods bound to this node as last seen (for `/pods`), by UID.
    pods: RwLock<BTreeMap<String, Arc<Pod>>>,
    /// The registered Node's UID (the Lease's owner), once known.
    node_uid: tokio::sync::watch::Sender<Option<String>>,
    /// Whether the node has been registered and its first status written.
    registered: std::sync::atomic::AtomicBool,
    /// Liveness, readiness and startup probe workers.
    probes: ProbeManager,
    /// Pod UIDs whose probe results changed (taken by the pod loop).
    probe_changes: parking_lot::Mutex<Option<mpsc::UnboundedReceiver<String>>>,
    /// Projected service account tokens by (pod UID, token key): the token and when to
    /// refresh it (80% of its lifetime, as upstream's token manager).
    tokens: parking_lot::Mutex<HashMap<(String, String), (String, Instant)>>,
    /// The static pods from `--pod-manifest-path`, by UID (their config hash).
    static_pods: RwLock<StaticPods>,
    /// The API's mirror pods bound to this node, by (namespace, name).
    mirrors: RwLock<BTreeMap<(String, String), Arc<Pod>>>,
    /// The node CPU sample of the last `/stats/summary`, for its usage rate.
    cpu_rate: crate::stats::CpuRate,
    /// Whether the pod informer has listed once (GC may only then tell removed pods).
    pods_synced: std::sync::atomic::AtomicBool,
    /// The node pressures the eviction manager last found.
    pressures: RwLock<Pressures>,
    /// Wakes the node status loop when the pressures change.
    node_status_kick: tokio::sync::Notify,
    /// Pods the eviction manager evicted, by UID: the message and the grace override.
    evictions: parking_lot::Mutex<HashMap<String, (String, Option<i64>)>>,
    /// Wakes a pod's worker by UID (the pod loop reads it with the probe changes).
    kicks: mpsc::UnboundedSender<String>,
    /// Container and image GC: the periodic passes and the eviction manager's reclaim
    /// share it (and so its image records: first seen, last used).
    gc: crate::gc::GarbageCollector,
    /// Hands freed heap back to the OS every [`HEAP_TRIM_PERIOD`] and after pods are
    /// cleaned up: glibc keeps what a gone pod's workers, syncs and status writes freed,
    /// and an idle kubelet would never reuse it.
    heap: ferrokube_heap::HeapTrimmer,
}

impl Kubelet {
    pub fn new(client: kube::Client, runtime: RuntimeManager, config: KubeletConfig) -> Arc<Self> {
        Self::with_clients(KubeletClients::shared(client), runtime, config)
    }

    pub fn with_clients(
        clients: KubeletClients,
        runtime: RuntimeManager,
        config: KubeletConfig,
    ) -> Arc<Self> {
        let client = clients.api;
        let mut runtime = runtime;
        runtime.set_root_dir(&config.root_dir);
        let (probe_tx, probe_rx) = mpsc::unbounded_channel();
        let probes = ProbeManager::new(
            runtime.cri().clone(),
            runtime.probe_results().clone(),
            probe_tx.clone(),
            runtime.events().clone(),
        );
        Arc::new(Kubelet {
            services: SharedIndexInformer::new(Api::all(client.clone()), InformerConfig::default()),
            probes,
            probe_changes: parking_lot::Mutex::new(Some(probe_rx)),
            tokens: parking_lot::Mutex::new(HashMap::new()),
            status: StatusManager::new(client.clone(), runtime.cri().metrics().clone()),
            client,
            heartbeat_client: clients.heartbeat,
            event_client: clients.events,
            runtime: Arc::new(runtime),
            pods: RwLock::new(BTreeMap::new()),
            node_uid: tokio::sync::watch::channel(None).0,
            registered: std::sync::atomic::AtomicBool::new(false),
            static_pods: RwLock::new(StaticPods::new()),
            mirrors: RwLock::new(BTreeMap::new()),
            cpu_rate: crate::stats::CpuRate::default(),
            pods_synced: std::sync::atomic::AtomicBool::new(false),
            pressures: RwLock::new(Pressures::default()),
            node_status_kick: tokio::sync::Notify::new(),
            evictions: parking_lot::Mutex::new(HashMap::new()),
            kicks: probe_tx,
            gc: crate::gc::GarbageCollector::new(
                config.container_gc,
                config.image_gc,
                config.sandbox_image.clone(),
            ),
            heap: ferrokube_heap::HeapTrimmer::new(HEAP_TRIM_PERIOD, HEAP_TRIM_SETTLE),
            config,
        })
    }

    pub fn runtime(&self) -> &RuntimeManager {
        &self.runtime
    }

    pub fn config(&self) -> &KubeletConfig {
        &self.config
    }

    /// The probe workers' metrics (`/metrics/probes`).
    pub fn probe_metrics(&self) -> &crate::metrics::ProberMetrics {
        self.probes.metrics()
    }

    /// The node CPU sample `/stats/summary` computes its rate from.
    pub fn cpu_rate(&self) -> &crate::stats::CpuRate {
        &self.cpu_rate
    }

    /// The pods bound to this node the kubelet knows about.
    pub fn pods(&self) -> Vec<Pod> {
        self.pods.read().values().map(|p| (**p).clone()).collect()
    }

    /// Whether the node is registered (for `/healthz`-style checks).
    pub fn is_registered(&self) -> bool {
        self.registered.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Runs until `cancel`; then stops every loop and worker, leaving containers running
    /// (as upstream does on SIGTERM).
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) -> Result<(), KubeletError> {
        self.services.start();
        std::fs::create_dir_all(&self.config.root_dir).map_err(|source| KubeletError::RootDir {
            dir: self.config.root_dir.display().to_string(),
            source,
        })?;
        // Core v1 events, as upstream's kubelet: the Node authorizer lets it write no others.
        let broadcaster = EventBroadcaster::new(
            self.event_client.clone(),
            ferrokube_client::events::EventBroadcasterOptions {
                api: ferrokube_client::events::EventApi::CoreV1,
                ..Default::default()
            },
        );
        let _ = self
            .runtime
            .events()
            .set(broadcaster.new_recorder_with_instance("kubelet", &self.config.node_name));
        if let Err(e) = self.enforce_reserved_cgroups() {
            let _ = tokio::time::timeout(Duration::from_secs(2), broadcaster.shutdown()).await;
            return Err(e);
        }
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(self.clone().node_allocatable_loop(cancel.clone()));
        tasks.spawn(self.clone().node_status_loop(cancel.clone()));
        tasks.spawn(self.clone().lease_loop(cancel.clone()));
        tasks.spawn(self.clone().pod_loop(cancel.clone()));
        tasks.spawn(self.clone().gc_loop(cancel.clone()));
        tasks.spawn(self.clone().eviction_loop(cancel.clone()));
        tasks.spawn(self.clone().log_rotation_loop(cancel.clone()));
        tasks.spawn(self.clone().heap_trim_loop(cancel.clone()));
        cancel.cancelled().await;
        while tasks.join_next().await.is_some() {}
        let _ = tokio::time::timeout(Duration::from_secs(2), broadcaster.shutdown()).await;
        tracing::info!("kubelet stopped; containers are left running");
        Ok(())
    }

    // ------------------------------------------------- node allocatable, QoS cgroups

    /// The machine as `kubepods` is sized from it.
    fn node_capacity(&self) -> NodeCapacity {
        let (machine, _) = self.machine_and_resources();
        NodeCapacity {
            cpu_milli: machine.num_cpus * 1000,
            memory: machine.memory_bytes,
            max_pids: crate::node_allocatable::read_max_pids(),
            hugepages: machine.hugepages,
        }
    }

    /// Upstream's `enforceNodeAllocatableCgroups` for the reserved cgroups: each one
    /// asked for is held to its reservation, or the kubelet does not start.
    fn enforce_reserved_cgroups(&self) -> Result<(), KubeletError> {
        let enforcement = &self.config.enforce_node_allocatable;
        for (reserved_cgroup, reserved, what) in [
            (
                &enforcement.system_reserved,
                &self.config.system_reserved,
                ("System", "system"),
            ),
            (
                &enforcement.kube_reserved,
                &self.config.kube_reserved,
                ("Kube", "kube"),
            ),
        ] {
            let Some(rc) = reserved_cgroup else { continue };
            let limits = reserved_cgroup_limits(reserved, rc.compressible_only);
            match self
                .runtime
                .cgroups()
                .set_limits(&rc.cgroup, &limits, false)
            {
                Ok(()) => self.node_event(
                    EventType::Normal,
                    NODE_ALLOCATABLE_ENFORCED,
                    &format!("Updated limits on {} reserved cgroup {}", what.1, rc.cgroup),
                ),
                Err(e) => {
                    let message = format!(
                        "Failed to enforce {} Reserved Cgroup Limits on {:?}: {e}",
                        what.0, rc.cgroup
                    );
                    self.node_event(
                        EventType::Warning,
                        FAILED_NODE_ALLOCATABLE_ENFORCEMENT,
                        &message,
                    );
                    return Err(KubeletError::NodeAllocatable(message));
                }
            }
        }
        Ok(())
    }

    /// `kubepods` held to the node's allocatable (upstream retries every minute until
    /// it takes: a lower memory limit fails while the pods use more, until evictions
    /// bring them under it), then the QoS tiers' weights kept up every minute
    /// (upstream's `periodicQOSCgroupUpdateInterval`).
    async fn node_allocatable_loop(self: Arc<Self>, cancel: CancellationToken) {
        let mut pods_enforced = false;
        let mut every = tokio::time::interval(QOS_CGROUP_UPDATE_PERIOD);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = every.tick() => {}
            }
            if !pods_enforced {
                pods_enforced = self.enforce_pods_cgroup();
            }
            self.update_qos_cgroups();
        }
    }

    /// Upstream's update of `kubepods` to the node's allocatable; true once it took.
    fn enforce_pods_cgroup(&self) -> bool {
        let root = &self.runtime.node().cgroup_root;
        let limits = pods_cgroup_limits(
            &self.node_capacity(),
            &self.config.system_reserved,
            &self.config.kube_reserved,
            &self.config.enforce_node_allocatable,
        );
        match self.runtime.cgroups().set_limits(root, &limits, true) {
            Ok(()) => {
                self.node_event(
                    EventType::Normal,
                    NODE_ALLOCATABLE_ENFORCED,
                    "Updated Node Allocatable limit across pods",
                );
                true
            }
            Err(e) => {
                tracing::warn!(cgroup = %root, error = %e, "updating node allocatable limits");
                self.node_event(
                    EventType::Warning,
                    FAILED_NODE_ALLOCATABLE_ENFORCEMENT,
                    &format!("Failed to update Node Allocatable Limits {root:?}: {e}"),
                );
                false
            }
        }
    }

    /// Upstream's `UpdateQOSCgroups`: `besteffort` at the minimum CPU weight, `burstable`
    /// at the weight of its active pods' allocated CPU requests.
    fn update_qos_cgroups(&self) {
        let burstable_requests: Vec<i64> = self
            .pods()
            .iter()
            .filter(|p| !is_terminal(p) && crate::qos::qos_of(p) == crate::qos::QosClass::Burstable)
            .map(|p| crate::qos::pod_cpu_request_milli(&self.runtime.allocated_pod(p)))
            .collect();
        let root = self.runtime.node().cgroup_root.trim_end_matches('/');
        for (tier, limits) in [
            ("besteffort", best_effort_cgroup_limits()),
            ("burstable", burstable_cgroup_limits(burstable_requests)),
        ] {
            let cgroup = format!("{root}/{tier}");
            if let Err(e) = self.runtime.cgroups().set_limits(&cgroup, &limits, true) {
                tracing::warn!(%cgroup, error = %e, "updating QoS cgroup");
            }
        }
    }

    // ---------------------------------------------------------------- node status

    async fn runtime_health(&self) -> RuntimeHealth {
        match self.runtime.cri().status().await {
            Err(e) => RuntimeHealth {
                status_error: Some(e.to_string()),
                ..Default::default()
            },
            Ok(s) => {
                let mut h = RuntimeHealth::default();
                let conds = s.status.map(|s| s.conditions).unwrap_or_default();
                for c in conds {
                    match c.r#type.as_str() {
                        "RuntimeReady" => {
                            h.runtime_ready = c.status;
                            h.runtime_reason = c.reason;
                            h.runtime_message = c.message;
                        }
                        "NetworkReady" => {
                            h.network_ready = c.status;
                            h.network_reason = c.reason;
                            h.network_message = c.message;
                        }
                        _ => {}
                    }
                }
                h
            }
        }
    }

    /// The machine as it is now, and the node's capacity and allocatable from it.
    fn machine_and_resources(&self) -> (crate::node::MachineInfo, crate::node::Resources) {
        let machine = crate::machine::read_machine_info(&self.config.root_dir)
            .map_err(|e| tracing::warn!(error = %e, "reading machine info"))
            .unwrap_or_default();
        let resources = node_resources(
            &machine,
            self.config.max_pods,
            &self.config.kube_reserved,
            &self.config.system_reserved,
            &self.config.eviction_hard,
        );
        (machine, resources)
    }

    async fn node_inputs(&self) -> NodeInputs {
        let (machine, resources) = self.machine_and_resources();
        let container_runtime_version = match self.runtime.cri().version().await {
            Ok(v) => format!("{}://{}", v.runtime_name, v.runtime_version),
            Err(_) => String::new(),
        };
        let mut images: Vec<ContainerImage> = match self.runtime.cri().list_images().await {
            Ok(imgs) => imgs
                .into_iter()
                .map(|i| ContainerImage {
                    names: Some(i.repo_digests.into_iter().chain(i.repo_tags).collect()),
                    size_bytes: Some(i.size as i64),
                })
                .collect(),
            Err(_) => vec![],
        };
        images.sort_by_key(|i| std::cmp::Reverse(i.size_bytes));
        images.truncate(50);
        NodeInputs {
            node_name: self.config.node_name.clone(),
            hostname: self.config.hostname.clone(),
            node_ips: self.config.node_ips.clone(),
            labels: self.config.node_labels.clone(),
            taints: self.config.register_with_taints.clone(),
            os: std::env::consts::OS.into(),
            arch: go_arch(std::env::consts::ARCH),
            container_runtime_version,
            kubelet_port: self.config.kubelet_port,
            machine,
            resources: Some(resources),
            images,
        }
    }

    /// Creates the Node, or (it exists) brings its default labels up to date (upstream
    /// `tryRegisterWithAPIServer` + `reconcileDefaultLabels`).
    async fn register(&self, inputs: &NodeInputs, now: &Time) -> Result<Node, kube::Error> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        if !self.config.register_node {
            // Upstream's registerNode=false: the Node is made by someone else; until it
            // exists, this is retried like a failed registration.
            return nodes.get(&self.config.node_name).await;
        }
        let health = self.runtime_health().await;
        let conditions = node_conditions(&health, Pressures::default(), &[], now);
        // Upstream builds the node it registers with the status setters, so every
        // registration attempt reports the conditions (`NodeHasSufficientMemory`, ...).
        for reason in condition_events(&[], &conditions) {
            self.node_status_event(reason);
        }
        let node = initial_node(inputs, conditions);
        match nodes.create(&PostParams::default(), &node).await {
            Ok(n) => {
                tracing::info!(node = %self.config.node_name, "successfully registered node");
                Ok(n)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let patch = serde_json::json!({"metadata": {"labels": node_labels(inputs)}});
                nodes
                    .patch(
                        &self.config.node_name,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
            }
            Err(e) => Err(e),
        }
    }

    /// Records an event about this node as upstream's kubelet does: the reference's UID
    /// is the node's name (kubectl's node describer looks for both UIDs).
    fn node_event(&self, type_: EventType, reason: &str, note: &str) {
        if let Some(rec) = self.runtime.events().get() {
            let node_ref = ObjectReference {
                kind: Some("Node".into()),
                name: Some(self.config.node_name.clone()),
                uid: Some(self.config.node_name.clone()),
                ..Default::default()
            };
            rec.event(&node_ref, None, type_, reason, reason, note);
        }
    }

    /// Upstream's `recordNodeStatusEvent`.
    fn node_status_event(&self, reason: &str) {
        let note = format!("Node {} status is now: {reason}", self.config.node_name);
        self.node_event(EventType::Normal, reason, &note);
    }

    async fn node_status_loop(self: Arc<Self>, cancel: CancellationToken) {
        self.node_event(EventType::Normal, "Starting", "Starting kubelet.");
        let nodes: Api<Node> = Api::all(self.heartbeat_client.clone());
        let mut backoff = Duration::from_millis(100);
        let registered = loop {
            let inputs = self.node_inputs().await;
            match self.register(&inputs, &now()).await {
                Ok(n) => break n,
                Err(e) => {
                    tracing::warn!(error = %e, "unable to register node; retrying");
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(7));
                }
            }
        };
        self.node_uid.send_replace(registered.metadata.uid.clone());
        tokio::spawn(publish_csi_node(
            self.client.clone(),
            registered.clone(),
            cancel.clone(),
        ));
        let mut last: Option<NodeStatus> = registered.status.clone();
        let mut last_report = Instant::now();
        let mut first = true;
        loop {
            // As upstream's tryUpdateNodeStatus: the node as the apiserver has it now is
            // what the new status is compared with (someone else may have changed it);
            // when it cannot be read, the status this kubelet last saw.
            if !first {
                match nodes.get(&self.config.node_name).await {
                    Ok(n) => last = n.status,
                    Err(e) => tracing::warn!(error = %e, "error getting the node"),
                }
            }
            let inputs = self.node_inputs().await;
            let health = self.runtime_health().await;
            let old_conds = last
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default();
            let conditions = node_conditions(&health, *self.pressures.read(), &old_conds, &now());
            for reason in condition_events(&old_conds, &conditions) {
                self.node_status_event(reason);
            }
            let new = node_status(&inputs, conditions);
            if first || node_status_needs_update(last.as_ref(), &new, last_report.elapsed()) {
                let patch = serde_json::json!({ "status": new });
                match nodes
                    .patch_status(
                        &self.config.node_name,
                        &PatchParams::default(),
                        &Patch::Strategic(&patch),
                    )
                    .await
                {
                    Ok(n) => {
                        last = n.status;
                        last_report = Instant::now();
                        first = false;
                        self.registered
                            .store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                    Err(e) => tracing::warn!(error = %e, "error updating node status"),
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(self.config.node_status_update_frequency) => {}
                _ = self.node_status_kick.notified() => {}
            }
        }
    }

    /// Container log rotation every monitoring interval (upstream's container log
    /// manager).
    async fn log_rotation_loop(self: Arc<Self>, cancel: CancellationToken) {
        let policy = self.config.container_log;
        let mut tick = tokio::time::interval(policy.monitor_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            crate::log_rotation::rotate_logs(self.runtime.cri(), &policy).await;
        }
    }

    async fn heap_trim_loop(self: Arc<Self>, cancel: CancellationToken) {
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = self.heap.run() => {}
        }
    }

    // ---------------------------------------------------------------- eviction

    /// The eviction manager (upstream `managerImpl.synchronize`), every monitoring
    /// interval: observe the node, report its pressures, evict the pods over their local
    /// storage limits, else, while a threshold is met, the first pod of upstream's ranking.
    async fn eviction_loop(self: Arc<Self>, cancel: CancellationToken) {
        let cpu_rate = crate::stats::CpuRate::default();
        let mut tracker = crate::eviction::ThresholdTracker::default();
        // The machine's memory capacity does not change while the kubelet runs.
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| crate::node::mem_total(&m))
            .unwrap_or(0);
        let mut tick = tokio::time::interval(self.config.eviction.monitoring_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let summary = crate::stats::summary(&self, &cpu_rate).await;
            let obs = crate::eviction::observations(&summary, memory, pid_usage());
            let eval = tracker.evaluate(
                &self.config.eviction_hard,
                &self.config.eviction,
                &obs,
                Instant::now(),
            );
            let changed = {
                let mut current = self.pressures.write();
                std::mem::replace(&mut *current, eval.pressures) != eval.pressures
            };
            if changed {
                tracing::info!(pressures = ?eval.pressures, "node pressures changed");
                self.node_status_kick.notify_one();
            }
            // Only pods the informer has shown can be ranked against each other.
            if !self.pods_synced.load(std::sync::atomic::Ordering::SeqCst) {
                continue;
            }
            let active: Vec<Arc<Pod>> = {
                let evicted = self.evictions.lock();
                self.pods
                    .read()
                    .values()
                    .filter(|p| {
                        !is_terminal(p)
                            && p.metadata.deletion_timestamp.is_none()
                            && !evicted.contains_key(uid(p))
                    })
                    .cloned()
                    .collect()
            };
            let stats: HashMap<&str, &crate::stats::PodStats> = summary
                .pods
                .iter()
                .map(|p| (p.pod_ref.uid.as_str(), p))
                .collect();
            let mut evicted_for_storage = false;
            for p in &active {
                if let Some((signal, message)) = stats
                    .get(uid(p))
                    .and_then(|st| crate::eviction::local_storage_violation(p, st))
                {
                    self.evict(p, message, Some(0));
                    self.runtime.cri().metrics().observe_eviction(signal);
                    evicted_for_storage = true;
                }
            }
            if evicted_for_storage {
                continue;
            }
            let Some(threshold) = eval.reclaim.first() else {
                continue;
            };
            // Disk first goes back through dead containers and unused images; pods are
            // evicted only when that is not enough (upstream reclaimNodeLevelResources).
            let reclaimer = NodeReclaimer {
                kubelet: &self,
                cpu_rate: &cpu_rate,
                memory,
            };
            let dedicated_image_fs = self.dedicated_image_fs().await;
            if crate::eviction::reclaim_node_level(
                &reclaimer,
                &eval.reclaim,
                dedicated_image_fs,
                &self.config.eviction_hard,
                &self.config.eviction,
            )
            .await
            {
                tracing::info!(signal = %threshold.signal, "eviction manager: able to reduce resource pressure without evicting pods");
                continue;
            }
            let mut over_requests = HashMap::new();
            let candidates = active
                .iter()
                .map(|p| {
                    let (c, over) = crate::eviction::candidate(
                        p,
                        stats.get(uid(p)).copied(),
                        &threshold.signal,
                    );
                    over_requests.insert(c.uid.clone(), over);
                    c
                })
                .collect();
            let Some(victim) = crate::eviction::rank(candidates).into_iter().next() else {
                tracing::warn!(signal = %threshold.signal, "eviction threshold met but no pod can be evicted");
                continue;
            };
            let Some(pod) = active.iter().find(|p| uid(p) == victim.uid) else {
                continue;
            };
            let message = crate::eviction::eviction_message(
                &threshold.signal,
                &threshold.threshold,
                &threshold.available,
                over_requests
                    .get(&victim.uid)
                    .map(Vec::as_slice)
                    .unwrap_or_default(),
            );
            // Hard thresholds kill at once; soft ones with the pod's grace, at most
            // --eviction-max-pod-grace-period (upstream).
            let grace = if threshold.hard {
                Some(0)
            } else {
                let own = spec(pod).termination_grace_period_seconds.unwrap_or(30);
                let max = self.config.eviction.max_pod_grace_seconds;
                Some(if max > 0 { own.min(max) } else { own })
            };
            self.evict(pod, message, grace);
            self.runtime
                .cri()
                .metrics()
                .observe_eviction(&threshold.signal);
        }
    }

    /// Whether the runtime's image filesystem is another device than the kubelet's root
    /// directory (upstream `HasDedicatedImageFs`); false when either cannot be read.
    async fn dedicated_image_fs(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Some(mountpoint) = crate::gc::image_fs_mountpoint(self.runtime.cri()).await else {
            return false;
        };
        match (
            std::fs::metadata(&self.config.root_dir),
            std::fs::metadata(&mountpoint),
        ) {
            (Ok(root), Ok(images)) => root.dev() != images.dev(),
            _ => false,
        }
    }

    /// Marks the pod evicted and wakes its worker, which kills it with `grace` and writes
    /// the Failed/Evicted status.
    fn evict(&self, pod: &Pod, message: String, grace: Option<i64>) {
        tracing::warn!(
            pod = name(pod),
            namespace = namespace(pod),
            %message,
            "evicting pod"
        );
        if let Some(rec) = self.runtime.events().get() {
            rec.event_for(
                pod,
                EventType::Warning,
                crate::eviction::EVICTED_REASON,
                "Evict",
                &message,
            );
        }
        self.evictions
            .lock()
            .insert(uid(pod).to_owned(), (message, grace));
        let _ = self.kicks.send(uid(pod).to_owned());
    }

    // ---------------------------------------------------------------- node lease

    fn lease(&self, existing: Option<Lease>) -> Lease {
        let mut lease = existing.unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.config.node_name.clone()),
                namespace: Some("kube-node-lease".into()),
                ..Default::default()
            },
            spec: None,
        });
        if let Some(node_uid) = self.node_uid.borrow().clone() {
            lease.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: self.config.node_name.clone(),
                uid: node_uid,
                ..Default::default()
            }]);
        }
        let mut spec = lease.spec.take().unwrap_or_default();
        spec.holder_identity = Some(self.config.node_name.clone());
        spec.lease_duration_seconds = Some(self.config.node_lease_duration_seconds);
        spec.renew_time = Some(MicroTime(now().0));
        lease.spec = Some(LeaseSpec { ..spec });
        lease
    }

    async fn renew_lease(&self) -> Result<(), kube::Error> {
        let leases: Api<Lease> = Api::namespaced(self.heartbeat_client.clone(), "kube-node-lease");
        match leases.get_opt(&self.config.node_name).await? {
            None => {
                leases
                    .create(&PostParams::default(), &self.lease(None))
                    .await?;
            }
            Some(l) => {
                leases
                    .replace(
                        &self.config.node_name,
                        &PostParams::default(),
                        &self.lease(Some(l)),
                    )
                    .await?;
            }
        }
        Ok(())
    }

    async fn lease_loop(self: Arc<Self>, cancel: CancellationToken) {
        let interval =
            Duration::from_secs_f64(f64::from(self.config.node_lease_duration_seconds) * 0.25);
        // The lease is owned by the Node: wait for the registration to know its UID.
        let mut uid_rx = self.node_uid.subscribe();
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = uid_rx.wait_for(Option::is_some) => {}
        }
        loop {
            let wait = match self.renew_lease().await {
                Ok(()) => interval,
                Err(e) => {
                    tracing::warn!(error = %e, "failed to renew node lease");
                    Duration::from_millis(200).min(interval)
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    // ---------------------------------------------------------------- pods

    async fn pod_loop(self: Arc<Self>, cancel: CancellationToken) {
        let api: Api<Pod> = Api::all(self.client.clone());
        let informer = SharedIndexInformer::new(
            api,
            InformerConfig {
                field_selector: Some(format!("spec.nodeName={}", self.config.node_name)),
                ..Default::default()
            },
        );
        let mut stream = informer.subscribe();
        informer.start();
        let (pleg_tx, mut pleg_rx) = mpsc::channel(1024);
        let pleg = tokio::spawn(
            GenericPleg::new(self.runtime.cri().clone()).run(self.config.pleg_period, pleg_tx),
        );
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
        let mut probe_rx = self
            .probe_changes
            .lock()
            .take()
            .unwrap_or_else(|| mpsc::unbounded_channel().1);
        let mut workers: HashMap<String, Worker> = HashMap::new();
        // Pods whose worker finished while the informer still has them (terminated and
        // deleted through the API; the informer's last update and its deletion are yet to
        // come): as upstream's pod workers keep a terminated pod's state until the pod
        // leaves the config, their late events start no second termination.
        let mut finished: HashSet<String> = HashSet::new();
        let workers_cancel = cancel.child_token();
        let (static_tx, mut static_rx) = tokio::sync::watch::channel(StaticPods::new());
        if let Some(path) = self.config.static_pod_path.clone() {
            let source = StaticPodSource {
                path,
                node_name: self.config.node_name.clone(),
                check_frequency: self.config.file_check_frequency,
            };
            tokio::spawn(source.run(static_tx, workers_cancel.clone()));
        } else {
            drop(static_tx);
        }
        let mut static_open = self.config.static_pod_path.is_some();
        let mut housekeeping = tokio::time::interval(Duration::from_secs(2));
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                n = stream.next() => {
                    let Some(n) = n else { break };
                    let (pod, deleted, needs_sync, finishing) = match n {
                        Notification::Added { obj, .. } => (obj, false, true, false),
                        Notification::Updated { old, new } => {
                            let needs_sync = pod_needs_sync(&old, &new);
                            let finishing = !is_terminal(&old) && is_terminal(&new);
                            (new, false, needs_sync, finishing)
                        }
                        Notification::Deleted { obj, .. } => (obj, true, true, false),
                    };
                    // Mirror pods too, as upstream's config source: a static pod's
                    // startup is the mirror pod's, whose status the kubelet writes.
                    if deleted {
                        self.runtime.cri().metrics().forget_pod_startup(uid(&pod));
                    } else {
                        self.runtime.cri().metrics().observe_pod_on_watch(&pod);
                    }
                    if is_mirror_pod(&pod) {
                        self.mirror_changed(pod, deleted, &workers);
                        continue;
                    }
                    let pod_uid = uid(&pod).to_owned();
                    if deleted {
                        self.pods.write().remove(&pod_uid);
                    } else {
                        self.pods.write().insert(pod_uid.clone(), pod.clone());
                    }
                    // A Burstable pod that stops being active leaves its tier's weight now,
                    // not at the next periodic update.
                    if (deleted || finishing)
                        && crate::qos::qos_of(&pod) == crate::qos::QosClass::Burstable
                    {
                        self.update_qos_cgroups();
                    }
                    if finished.contains(&pod_uid) {
                        if deleted {
                            finished.remove(&pod_uid);
                        }
                        continue;
                    }
                    let msg = if needs_sync {
                        WorkerMsg::Update(pod.clone())
                    } else {
                        WorkerMsg::Refresh(pod.clone())
                    };
                    match workers.get_mut(&pod_uid) {
                        Some(w) if deleted => w.send_deleted(pod),
                        Some(w) => w.send_config(msg),
                        None if deleted => {
                            // No worker: make sure nothing of it is left running.
                            let mut w = self.spawn_worker(pod.clone(), workers_cancel.clone(), done_tx.clone());
                            w.send_deleted(pod);
                            workers.insert(pod_uid, w);
                        }
                        None => {
                            let w = self.spawn_worker(pod, workers_cancel.clone(), done_tx.clone());
                            workers.insert(pod_uid, w);
                        }
                    }
                }
                changed = static_rx.changed(), if static_open => {
                    if changed.is_err() {
                        static_open = false;
                        continue;
                    }
                    let current = static_rx.borrow_and_update().clone();
                    self.static_pods_changed(current, &mut workers, &workers_cancel, &done_tx);
                }
                Some(ev) = pleg_rx.recv() => {
                    if let Some(w) = workers.get(&ev.pod_uid) {
                        let _ = w.tx.send(WorkerMsg::Kick);
                    }
                }
                Some(pod_uid) = probe_rx.recv() => {
                    if let Some(w) = workers.get(&pod_uid) {
                        let _ = w.tx.send(WorkerMsg::Kick);
                    }
                }
                Some(done) = done_rx.recv() => {
                    let ended = workers.remove(&done);
                    self.evictions.lock().remove(&done);
                    let metrics = self.runtime.cri().metrics();
                    metrics.forget_pod(&done);
                    self.status.forget(&done);
                    let in_config = self.pods.read().get(&done).cloned();
                    match in_config {
                        Some(pod) if ended.as_ref().is_some_and(|w| w.restart) => {
                            tracing::info!(pod = name(&pod), namespace = namespace(&pod), uid = %done, "pod came back with the same UID while it was terminated: starting it again");
                            let is_static = is_static_pod(&pod);
                            metrics.add_restarted_pods(u64::from(!is_static), u64::from(is_static));
                            let w = self.spawn_worker(pod, workers_cancel.clone(), done_tx.clone());
                            workers.insert(done, w);
                        }
                        Some(_) => {
                            finished.insert(done);
                        }
                        None => {}
                    }
                    self.heap.request();
                }
                _ = housekeeping.tick() => {
                    if stream.has_synced() {
                        if !self.pods_synced.swap(true, std::sync::atomic::Ordering::SeqCst) {
                            // The pods already running count from the start, not from
                            // the first periodic update.
                            self.update_qos_cgroups();
                        }
                        let runtime_only = self.cleanup_orphans(&workers).await;
                        self.reconcile_mirrors().await;
                        self.record_pod_counts(&workers, &finished, runtime_only);
                    }
                }
            }
        }
        workers_cancel.cancel();
        pleg.abort();
        informer.stop().await;
    }

    /// Container GC every minute and image GC every five, once the pod informer has
    /// synced (upstream `StartGarbageCollection`).
    async fn gc_loop(self: Arc<Self>, cancel: CancellationToken) {
        let gc = &self.gc;
        let mut containers = tokio::time::interval(CONTAINER_GC_PERIOD);
        let mut images = tokio::time::interval(IMAGE_GC_PERIOD);
        containers.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        images.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let images_due = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = containers.tick() => false,
                _ = images.tick() => true,
            };
            if !self.pods_synced.load(std::sync::atomic::Ordering::SeqCst) {
                continue;
            }
            let Ok(rt) = self.runtime.runtime_pods().await else {
                continue;
            };
            if images_due {
                gc.collect_images(self.runtime.cri(), &rt).await;
            } else {
                let known: BTreeSet<String> = self.pods.read().keys().cloned().collect();
                gc.collect_containers(
                    self.runtime.cri(),
                    &rt,
                    &known,
                    &self.runtime.node().pod_logs_dir,
                )
                .await;
            }
        }
    }

    /// A new static pod set: workers for new static pods, deletion for removed ones (their
    /// containers stop; nothing is deleted in the API but their mirror pods).
    fn static_pods_changed(
        self: &Arc<Self>,
        current: StaticPods,
        workers: &mut HashMap<String, Worker>,
        workers_cancel: &CancellationToken,
        done_tx: &mpsc::UnboundedSender<String>,
    ) {
        let previous = std::mem::replace(&mut *self.static_pods.write(), current.clone());
        for (pod_uid, pod) in &previous {
            if current.contains_key(pod_uid) {
                continue;
            }
            tracing::info!(
                pod = name(pod),
                namespace = namespace(pod),
                "static pod removed"
            );
            self.pods.write().remove(pod_uid);
            if let Some(w) = workers.get_mut(pod_uid) {
                w.send_deleted(pod.clone());
            }
        }
        for (pod_uid, pod) in current {
            if previous.contains_key(&pod_uid) {
                continue;
            }
            tracing::info!(pod = name(&pod), namespace = namespace(&pod), uid = %pod_uid, "static pod added");
            self.pods.write().insert(pod_uid.clone(), pod.clone());
            match workers.get_mut(&pod_uid) {
                Some(w) => w.send_config(WorkerMsg::Update(pod)),
                None => {
                    let w = self.spawn_worker(pod, workers_cancel.clone(), done_tx.clone());
                    workers.insert(pod_uid, w);
                }
            }
        }
    }

    /// A mirror pod appeared, changed or went in the API: remember it and wake its static
    /// pod's worker (its status is written to the mirror).
    fn mirror_changed(&self, mirror: Arc<Pod>, deleted: bool, workers: &HashMap<String, Worker>) {
        let key = (namespace(&mirror).to_owned(), name(&mirror).to_owned());
        if deleted {
            self.mirrors.write().remove(&key);
        } else {
            self.mirrors.write().insert(key.clone(), mirror);
        }
        let static_uid = self
            .static_pods
            .read()
            .iter()
            .find(|(_, s)| namespace(s) == key.0 && name(s) == key.1)
            .map(|(u, _)| u.clone());
        if let Some(w) = static_uid.and_then(|u| workers.get(&u)) {
            let _ = w.tx.send(WorkerMsg::Kick);
        }
    }

    /// Creates missing mirror pods and deletes outdated or orphaned ones.
    async fn reconcile_mirrors(&self) {
        let statics = self.static_pods.read().clone();
        let mirrors: Vec<Arc<Pod>> = self.mirrors.read().values().cloned().collect();
        let node_uid = self.node_uid.borrow().clone();
        for action in plan_mirrors(&statics, &mirrors) {
            match action {
                MirrorAction::Create { static_uid } => {
                    let Some(s) = statics.get(&static_uid) else {
                        continue;
                    };
                    let mirror = mirror_pod(s, node_uid.as_deref());
                    let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace(s));
                    match api.create(&PostParams::default(), &mirror).await {
                        Ok(created) => {
                            tracing::info!(
                                pod = name(s),
                                namespace = namespace(s),
                                "created mirror pod"
                            );
                            let key = (namespace(s).to_owned(), name(s).to_owned());
                            self.mirrors.write().insert(key, Arc::new(created));
                        }
                        // The informer has not shown it yet: the next round sees it.
                        Err(kube::Error::Api(e)) if e.code == 409 => {}
                        Err(e) => tracing::warn!(pod = name(s), error = %e, "creating mirror pod"),
                    }
                }
                MirrorAction::Delete {
                    namespace: ns,
                    name: pod_name,
                    uid: mirror_uid,
                } => {
                    tracing::info!(pod = %pod_name, namespace = %ns, "deleting mirror pod (outdated, being deleted or without static pod)");
                    let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
                    let dp = DeleteParams {
                        grace_period_seconds: Some(0),
                        preconditions: Some(Preconditions {
                            uid: Some(mirror_uid),
                            resource_version: None,
                        }),
                        ..Default::default()
                    };
                    match api.delete(&pod_name, &dp).await {
                        Ok(_) => {
                            self.mirrors.write().remove(&(ns, pod_name));
                        }
                        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
                            self.mirrors.write().remove(&(ns, pod_name));
                        }
                        Err(e) => {
                            tracing::warn!(pod = %pod_name, error = %e, "deleting mirror pod")
                        }
                    }
                }
            }
        }
    }

    /// The pod whose status the kubelet writes for `pod`: itself, or for a static pod its
    /// mirror pod (none until the mirror exists).
    fn status_target(&self, pod: &Pod) -> Option<Pod> {
        if !is_static_pod(pod) {
            return Some(pod.clone());
        }
        let key = (namespace(pod).to_owned(), name(pod).to_owned());
        let mirror = self.mirrors.read().get(&key).cloned()?;
        crate::static_pods::is_mirror_of(&mirror, pod).then(|| (*mirror).clone())
    }

    /// Kills runtime pods no worker owns (deleted while the kubelet was down, or left over
    /// from another kubelet): upstream `HandlePodCleanups`. Returns how many of them were
    /// running (upstream's orphaned runtime pods, counted in
    /// `kubelet_orphaned_runtime_pods_total`).
    async fn cleanup_orphans(&self, workers: &HashMap<String, Worker>) -> u64 {
        let Ok(rt) = self.runtime.runtime_pods().await else {
            return 0;
        };
        let mut running_orphans = 0;
        let known: BTreeSet<String> = self.pods.read().keys().cloned().collect();
        // Pod directories (volumes, termination messages) of pods no longer here.
        let runtime_uids: BTreeSet<&String> = rt.keys().collect();
        for pod_uid in self.runtime.volumes().pod_uids_on_disk() {
            if !workers.contains_key(&pod_uid)
                && !known.contains(&pod_uid)
                && !runtime_uids.contains(&pod_uid)
            {
                tracing::info!(uid = %pod_uid, "removing orphaned pod directory");
                if let Err(e) = self.runtime.volumes().teardown(&pod_uid) {
                    tracing::warn!(uid = %pod_uid, error = %e, "removing orphaned pod directory");
                }
            }
        }
        self.runtime.retain_allocations(|pod_uid| {
            workers.contains_key(pod_uid) || known.contains(pod_uid) || rt.contains_key(pod_uid)
        });
        for (pod_uid, rp) in rt {
            if workers.contains_key(&pod_uid) || known.contains(&pod_uid) {
                continue;
            }
            // Upstream looks only at the runtime cache's running pods; what is left of
            // one already stopped would otherwise count again every pass.
            if rp.sandboxes.iter().any(|s| s.ready)
                || rp
                    .containers
                    .iter()
                    .any(|c| c.state == crate::status::RuntimeState::Running)
            {
                running_orphans += 1;
            }
            if rp.sandboxes.is_empty() {
                if rp.containers.is_empty() {
                    continue;
                }
                // Containers without a sandbox: remove them directly.
                for c in &rp.containers {
                    let _ = self.runtime.cri().stop_container(&c.id, 2).await;
                    let _ = self.runtime.cri().remove_container(&c.id).await;
                }
                continue;
            }
            let pod = Pod {
                metadata: ObjectMeta {
                    name: Some(rp.name.clone()),
                    namespace: Some(rp.namespace.clone()),
                    uid: Some(pod_uid.clone()),
                    ..Default::default()
                },
                spec: Some(Default::default()),
                status: None,
            };
            tracing::info!(pod = %rp.name, namespace = %rp.namespace, uid = %pod_uid, "killing orphaned pod");
            if let Err(e) = self.runtime.kill_pod(&pod, Some(2)).await {
                tracing::warn!(error = %e, uid = %pod_uid, "cleaning up orphaned pod");
            }
        }
        running_orphans
    }

    /// Upstream's summary at the end of `HandlePodCleanups`: the config's pods, the
    /// active ones, the mirror pods and the pod workers by lifecycle and config state;
    /// `runtime_only` is the running orphans this pass handed to termination.
    fn record_pod_counts(
        &self,
        workers: &HashMap<String, Worker>,
        finished: &HashSet<String>,
        runtime_only: u64,
    ) {
        let metrics = self.runtime.cri().metrics();
        metrics.add_orphaned_runtime_pods(runtime_only);
        // Counted as the restarts happen; added here too so both series show from the
        // first pass, as upstream's.
        metrics.add_restarted_pods(0, 0);
        let mirrors = self.mirrors.read().len() as u64;
        let pods = self.pods.read();
        let config = pods.iter().map(|(pod_uid, pod)| ConfigPod {
            pod,
            lifecycle: if finished.contains(pod_uid) {
                Some(Lifecycle::Terminated)
            } else {
                workers.get(pod_uid).map(Worker::lifecycle)
            },
        });
        let orphans = workers
            .iter()
            .filter(|(pod_uid, _)| !pods.contains_key(*pod_uid))
            .map(|(_, w)| OrphanWorker {
                lifecycle: w.lifecycle(),
                is_static: w.is_static,
            });
        let counts = count_pods(config, orphans, runtime_only, mirrors);
        drop(pods);
        metrics.set_pod_counts(&counts);
    }

    fn spawn_worker(
        self: &Arc<Self>,
        pod: Arc<Pod>,
        cancel: CancellationToken,
        done: mpsc::UnboundedSender<String>,
    ) -> Worker {
        let (tx, rx) = mpsc::unbounded_channel();
        let this = self.clone();
        let lifecycle = Arc::new(AtomicU8::new(Lifecycle::Sync.as_u8()));
        let is_static = is_static_pod(&pod);
        let state = lifecycle.clone();
        tokio::spawn(async move {
            let pod_uid = uid(&pod).to_owned();
            this.worker(pod, rx, &state, cancel).await;
            let _ = done.send(pod_uid);
        });
        Worker {
            tx,
            lifecycle,
            is_static,
            orphaned: false,
            restart: false,
        }
    }

    /// One pod's worker: syncs on every update, PLEG event and `syncFrequency`, until the
    /// pod is terminated and gone from the API (or the kubelet stops).
    async fn worker(
        &self,
        mut pod: Arc<Pod>,
        mut rx: mpsc::UnboundedReceiver<WorkerMsg>,
        lifecycle: &AtomicU8,
        cancel: CancellationToken,
    ) {
        let set_lifecycle = |l: Lifecycle| lifecycle.store(l.as_u8(), Ordering::Relaxed);
        let mut deleted = false;
        let mut retry = Duration::from_millis(500);
        let first_seen = Instant::now();
        let mut retry_soon = false;
        // Upstream's sync types, the label of kubelet_pod_worker_duration_seconds.
        let mut operation = "create";
        loop {
            let started = Instant::now();
            let finished = if deleted {
                operation = "kill";
                set_lifecycle(Lifecycle::Terminating);
                self.terminate(&pod, true).await
            } else if pod.metadata.deletion_timestamp.is_some() {
                operation = "kill";
                set_lifecycle(Lifecycle::Terminating);
                self.terminate(&pod, false).await
            } else {
                retry_soon = self.sync(&pod, first_seen).await;
                // A terminal pod's sync stops what is left of it.
                set_lifecycle(if is_terminal(&pod) {
                    Lifecycle::Terminated
                } else {
                    Lifecycle::Sync
                });
                false
            };
            self.runtime
                .cri()
                .metrics()
                .observe_pod_worker(operation, started.elapsed());
            operation = "sync";
            if finished {
                return;
            }
            let wait = if pod.metadata.deletion_timestamp.is_some() || deleted {
                retry = (retry * 2).min(Duration::from_secs(10));
                retry
            } else {
                // Wake at the active deadline (a moment after, so it has passed).
                let until = until_active_deadline(&pod, k8s_openapi::jiff::Timestamp::now())
                    .filter(|_| !is_terminal(&pod));
                // Pods with configMap/secret volumes resync more often, so updates reach
                // their files within VOLUME_RESYNC (upstream: about a minute); so do pods
                // whose sync failed (volumes not ready, a container that could not start),
                // as upstream's pod worker retries a failed sync after its back-off period.
                let (cms, secrets) = crate::volume::volume_references(&pod);
                let base = if cms.is_empty() && secrets.is_empty() && !retry_soon {
                    self.config.sync_frequency
                } else {
                    self.config.sync_frequency.min(VOLUME_RESYNC)
                };
                until.map_or(base, |d| base.min(d + Duration::from_millis(100)))
            };
            let deadline = tokio::time::Instant::now() + wait;
            let mut apply = |m: WorkerMsg| match m {
                WorkerMsg::Update(p) => {
                    pod = p;
                    operation = "update";
                    true
                }
                WorkerMsg::Refresh(p) => {
                    // Mostly the kubelet's own status write: a terminal phase there was
                    // written once the pod's containers had all ended. The pod is synced
                    // once more then, which frees its volumes and cgroup.
                    let finishing = is_terminal(&p) && !is_terminal(&pod);
                    if is_terminal(&p) && !deleted && p.metadata.deletion_timestamp.is_none() {
                        set_lifecycle(Lifecycle::Terminated);
                    }
                    pod = p;
                    finishing
                }
                WorkerMsg::Deleted(p) => {
                    pod = p;
                    deleted = true;
                    true
                }
                WorkerMsg::Kick => true,
            };
            let mut sync_now = false;
            while !sync_now {
                let next = tokio::select! {
                    _ = cancel.cancelled() => return,
                    m = rx.recv() => m,
                    _ = tokio::time::sleep_until(deadline) => Some(WorkerMsg::Kick),
                };
                let Some(next) = next else { return };
                sync_now = apply(next);
                while let Ok(m) = rx.try_recv() {
                    sync_now |= apply(m);
                }
            }
        }
    }

    /// ConfigMaps and Secrets the pod's environment refers to, read through the API.
    async fn env_sources(&self, pod: &Pod) -> EnvSources {
        let s = spec(pod);
        let mut cms = BTreeSet::new();
        let mut secrets = BTreeSet::new();
        let ephemeral: Vec<_> = s
            .ephemeral_containers
            .iter()
            .flatten()
            .map(crate::container::ephemeral_container)
            .collect();
        for c in s
            .containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .chain(&ephemeral)
        {
            for e in c.env.iter().flatten() {
                if let Some(vf) = &e.value_from {
                    if let Some(r) = &vf.config_map_key_ref {
                        cms.insert(r.name.clone());
                    }
                    if let Some(r) = &vf.secret_key_ref {
                        secrets.insert(r.name.clone());
                    }
                }
            }
            for e in c.env_from.iter().flatten() {
                if let Some(r) = &e.config_map_ref {
                    cms.insert(r.name.clone());
                }
                if let Some(r) = &e.secret_ref {
                    secrets.insert(r.name.clone());
                }
            }
        }
        let (volume_cms, volume_secrets) = crate::volume::volume_references(pod);
        cms.extend(volume_cms);
        secrets.extend(volume_secrets);
        secrets.extend(
            s.image_pull_secrets
                .iter()
                .flatten()
                .map(|r| r.name.clone()),
        );
        let mut out = EnvSources::default();
        let cm_api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace(pod));
        for n in cms {
            if let Ok(Some(cm)) = cm_api.get_opt(&n).await {
                out.config_maps.insert(n, cm);
            }
        }
        let sec_api: Api<Secret> = Api::namespaced(self.client.clone(), namespace(pod));
        for n in secrets {
            if let Ok(Some(sec)) = sec_api.get_opt(&n).await {
                out.secrets.insert(n, sec);
            }
        }
        out.claims = self.claims(pod).await;
        for t in crate::volume::token_requests(pod) {
            let key = crate::volume::token_key(&t);
            let token = self.service_account_token(pod, &t, &key).await;
            out.service_account_tokens.insert(key, token);
        }
        out.service_env = self.service_links(pod).await;
        if let Some(class) = &spec(pod).runtime_class_name {
            let classes: Api<RuntimeClass> = Api::all(self.client.clone());
            out.runtime_handler = Some(match classes.get_opt(class).await {
                Ok(Some(rc)) => Ok(rc.handler),
                Ok(None) => Err(format!("runtimeclass.node.k8s.io {class:?} not found")),
                Err(e) => Err(format!(
                    "failed to lookup RuntimeClass {class}: {}",
                    ferrokube_client::error_message(&e)
                )),
            });
        }
        out
    }

    /// The claims of the pod's `persistentVolumeClaim` volumes and the PersistentVolumes they
    /// are bound to, each read by name (upstream's populator reads them on every sync; the
    /// Node authorizer allows exactly these: a claim a pod of this node names, the volume a
    /// bound claim names).
    async fn claims(&self, pod: &Pod) -> BTreeMap<String, crate::volume::ClaimLookup> {
        fn message(e: kube::Error) -> String {
            ferrokube_client::error_message(&e).into_owned()
        }
        let mut out = BTreeMap::new();
        let names = crate::volume::claim_names(pod);
        if names.is_empty() {
            return out;
        }
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), namespace(pod));
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        for n in names {
            let claim = claims.get(&n).await.map_err(message);
            let volume = match claim.as_ref().map(crate::volume::bound_volume_name) {
                Ok(Ok(pv)) => Some(volumes.get(pv).await.map_err(message)),
                _ => None,
            };
            out.insert(n, crate::volume::ClaimLookup { claim, volume });
        }
        out
    }

    /// The pod's service link variables. Like upstream, containers wait for the first
    /// list of Services (bounded here: after 10 s they start without the variables
    /// rather than never).
    async fn service_links(&self, pod: &Pod) -> BTreeMap<String, String> {
        for _ in 0..100 {
            if self.services.has_synced() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let services = self.services.store().list();
        let enable = spec(pod).enable_service_links.unwrap_or(true);
        crate::env::service_links(services.iter().map(|s| &**s), namespace(pod), enable)
    }

    /// A token for a projected volume: cached until 80% of its lifetime, then requested
    /// again through TokenRequest, bound to the pod (upstream's token manager).
    async fn service_account_token(
        &self,
        pod: &Pod,
        t: &crate::volume::TokenSpec,
        key: &str,
    ) -> Result<String, String> {
        let cache_key = (uid(pod).to_owned(), key.to_owned());
        if let Some((token, refresh_at)) = self.tokens.lock().get(&cache_key)
            && Instant::now() < *refresh_at
        {
            return Ok(token.clone());
        }
        let request = TokenRequest {
            metadata: ObjectMeta::default(),
            spec: TokenRequestSpec {
                audiences: if t.audience.is_empty() {
                    vec![]
                } else {
                    vec![t.audience.clone()]
                },
                expiration_seconds: Some(t.expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(name(pod).to_owned()),
                    uid: Some(uid(pod).to_owned()),
                }),
            },
            status: None,
        };
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace(pod));
        let answer: TokenRequest = api
            .create_subresource(
                "token",
                &t.service_account,
                &PostParams::default(),
                &request,
            )
            .await
            .map_err(|e| {
                format!(
                    "failed to fetch token: {}",
                    ferrokube_client::error_message(&e)
                )
            })?;
        let status = answer
            .status
            .ok_or_else(|| "the TokenRequest answer has no status".to_owned())?;
        let lifetime = status
            .expiration_timestamp
            .0
            .duration_since(k8s_openapi::jiff::Timestamp::now())
            .as_secs()
            .max(0) as u64;
        let refresh_at = Instant::now() + Duration::from_secs(lifetime * 8 / 10);
        self.tokens
            .lock()
            .insert(cache_key, (status.token.clone(), refresh_at));
        Ok(status.token)
    }

    /// One sync of a live pod; true when it failed (volumes not set up, a container not
    /// started: retry soon).
    async fn sync(&self, pod: &Arc<Pod>, first_seen: Instant) -> bool {
        let terminal = is_terminal(pod);
        let deadline = !terminal && past_active_deadline(pod, k8s_openapi::jiff::Timestamp::now());
        let evicted = self.evictions.lock().get(uid(pod)).cloned();
        if terminal || deadline || evicted.is_some() {
            // Nothing of a finished pod runs again: stop what is left, keep the phase.
            if deadline {
                tracing::info!(
                    pod = name(pod),
                    namespace = namespace(pod),
                    "pod exceeded activeDeadlineSeconds"
                );
                if let Some(rec) = self.runtime.events().get() {
                    rec.event_for(
                        &**pod,
                        EventType::Normal,
                        DEADLINE_REASON,
                        "Killing",
                        DEADLINE_MESSAGE,
                    );
                }
            }
            match self.runtime.runtime_pod(uid(pod)).await {
                Ok(rt) => {
                    let (evicted_message, grace) = match evicted {
                        Some((message, grace)) if !terminal => (Some(message), grace),
                        _ => (None, None),
                    };
                    let stopped = self.runtime.stop_pod(pod, &rt, grace).await;
                    if let Err(e) = &stopped {
                        tracing::warn!(pod = name(pod), error = %e, "error stopping finished pod");
                    }
                    let st = self
                        .runtime
                        .status_finished(pod, &rt, deadline, evicted_message);
                    self.probes.set_status(uid(pod), &st);
                    if let Err(e) = self.write_status(pod, st).await {
                        tracing::warn!(pod = name(pod), error = %e, "error updating pod status");
                    }
                    // Once nothing of it runs, its volumes and cgroup go, as upstream's
                    // syncTerminatedPod does; the phase written above keeps it from
                    // running again.
                    if stopped.is_ok()
                        && let Err(e) = self.runtime.release_finished_pod(pod).await
                    {
                        tracing::warn!(pod = name(pod), error = %e, "error releasing finished pod");
                    }
                }
                Err(e) => tracing::warn!(pod = name(pod), error = %e, "error reading pod status"),
            }
            return false;
        }
        self.probes.add_pod(pod);
        // Upstream writes the status at the start of each sync: a pod whose images are
        // still being pulled shows its containers as ContainerCreating meanwhile, and one
        // whose containers this sync stops (sidecars once the regular containers have
        // finished, a container whose spec changed) shows what has already ended while
        // the stop waits out its grace period.
        let rt = match self.runtime.runtime_pod(uid(pod)).await {
            Ok(rt) => {
                if let Err(e) = self
                    .write_status(pod, self.runtime.status_from(pod, &rt))
                    .await
                {
                    tracing::warn!(pod = name(pod), error = %e, "error updating pod status");
                }
                Some(rt)
            }
            Err(e) => {
                tracing::warn!(pod = name(pod), error = %e, "error reading pod status");
                None
            }
        };
        self.runtime
            .allocate(pod, |wanted| self.decide_resize(wanted));
        // A new pod cgroup goes below QoS tiers that count it (upstream's syncPod).
        if !self.runtime.cgroups().exists(&self.runtime.pod_cgroup(pod)) {
            self.update_qos_cgroups();
        }
        let sources = self.env_sources(pod).await;
        let synced = match rt {
            Some(rt) => self.runtime.sync_pod_from(pod, rt, &sources).await,
            None => self.runtime.sync_pod(pod, &sources).await,
        };
        let retry_soon = match synced {
            Ok(result) => !result.failed.is_empty(),
            Err(e) => {
                tracing::warn!(pod = name(pod), namespace = namespace(pod), error = %e, "error syncing pod");
                true
            }
        };
        match self.runtime.pod_status(pod).await {
            Ok(st) => {
                if st.phase.as_deref() == Some("Running") {
                    self.runtime
                        .cri()
                        .metrics()
                        .observe_pod_start(uid(pod), first_seen.elapsed());
                }
                self.probes.set_status(uid(pod), &st);
                if let Err(e) = self.write_status(pod, st).await {
                    tracing::warn!(pod = name(pod), error = %e, "error updating pod status");
                }
            }
            Err(e) => tracing::warn!(pod = name(pod), error = %e, "error reading pod status"),
        }
        retry_soon
    }

    /// Upstream `canResizePod`: whether `wanted` (a pod with the resources its spec now
    /// asks for) fits the node's allocatable cpu and memory next to the other active
    /// pods' allocations.
    fn decide_resize(&self, wanted: &Pod) -> crate::resize::Decision {
        use crate::resize::{decide, pod_requests};
        let (_, resources) = self.machine_and_resources();
        let allocatable = |name: &str, f: fn(&Quantity) -> Option<i64>| {
            resources.allocatable.get(name).and_then(f).unwrap_or(0)
        };
        let used = self
            .pods()
            .iter()
            .filter(|p| uid(p) != uid(wanted) && !is_terminal(p))
            .map(|p| pod_requests(&self.runtime.allocated_pod(p)))
            .fold((0, 0), |(c, m), (pc, pm)| (c + pc, m + pm));
        decide(
            wanted,
            used,
            (
                allocatable("cpu", crate::quantity::milli_value),
                allocatable("memory", crate::quantity::value),
            ),
        )
    }

    /// Writes the pod's status, to its mirror pod for a static pod (skipped until the
    /// mirror exists; its creation wakes the worker again).
    async fn write_status(
        &self,
        pod: &Pod,
        st: k8s_openapi::api::core::v1::PodStatus,
    ) -> Result<bool, kube::Error> {
        match self.status_target(pod) {
            Some(target) => self.status.set(&target, st).await,
            None => Ok(false),
        }
    }

    /// Stops the pod's containers and writes its terminal phase (upstream's kubelet
    /// does so before its last delete), so that whatever keeps the pod by a finalizer,
    /// the Job controller for one, sees how it ended. A failure here is left to
    /// `kill_pod`, which stops the containers again and reports it.
    async fn write_terminal_status(&self, pod: &Pod, rt: &RuntimePod, grace: Option<i64>) {
        if self.runtime.stop_pod(pod, rt, grace).await.is_err() {
            return;
        }
        let Ok(mut st) = self.runtime.pod_status(pod).await else {
            return;
        };
        st.phase = Some(crate::status::terminal_phase(&st).to_owned());
        if let Err(e) = self.write_status(pod, st).await {
            tracing::warn!(pod = name(pod), error = %e, "error writing the terminal pod status");
        }
    }

    /// Kills the pod with its grace period, then finishes the API deletion (a DELETE with
    /// grace 0 and a UID precondition) unless the object is already gone. Returns whether
    /// the pod is done.
    async fn terminate(&self, pod: &Pod, gone_from_api: bool) -> bool {
        // What is left of the grace: a kubelet (re)started after the DELETE does not
        // give the pod its whole grace again (the stop never goes below the minimum).
        let grace =
            crate::lifecycle::remaining_deletion_grace(pod, k8s_openapi::jiff::Timestamp::now())
                .or(pod.metadata.deletion_grace_period_seconds);
        tracing::info!(
            pod = name(pod),
            namespace = namespace(pod),
            ?grace,
            "killing pod"
        );
        let rt = self.runtime.runtime_pod(uid(pod)).await.ok();
        let container_ids: Vec<String> = rt
            .iter()
            .flat_map(|rt| rt.containers.iter().map(|c| c.id.clone()))
            .collect();
        if let Some(rt) = rt.filter(|_| !gone_from_api && !crate::static_pods::is_static_pod(pod)) {
            self.write_terminal_status(pod, &rt, grace).await;
        }
        if let Err(e) = self.runtime.kill_pod(pod, grace).await {
            tracing::warn!(pod = name(pod), error = %e, "error killing pod; will retry");
            return false;
        }
        self.probes.remove_pod(uid(pod), &container_ids);
        self.tokens
            .lock()
            .retain(|(pod_uid, _), _| pod_uid != uid(pod));
        if gone_from_api {
            return true;
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace(pod));
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid(pod).to_owned()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(name(pod), &dp).await {
            Ok(_) => true,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => true,
            Err(e) => {
                tracing::warn!(pod = name(pod), error = %e, "error deleting pod; will retry");
                false
            }
        }
    }
}

/// `(pid_max, threads)` of the machine for `pid.available` (upstream `pidlimit`: the
/// kernel's pid_max and the task count of /proc/loadavg).
fn pid_usage() -> Option<(i64, i64)> {
    let max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let loadavg = std::fs::read_to_string("/proc/loadavg").ok()?;
    let running = loadavg
        .split_whitespace()
        .nth(3)?
        .split_once('/')?
        .1
        .parse()
        .ok()?;
    Some((max, running))
}

/// Whether the pod's phase is Succeeded or Failed.
fn is_terminal(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// The eviction manager's node-level reclaim over the kubelet's GC and stats.
struct NodeReclaimer<'a> {
    kubelet: &'a Kubelet,
    cpu_rate: &'a crate::stats::CpuRate,
    memory: i64,
}

impl crate::eviction::NodeReclaimer for NodeReclaimer<'_> {
    async fn reclaim(&self, step: crate::eviction::NodeReclaim) {
        let k = self.kubelet;
        let Ok(rt) = k.runtime.runtime_pods().await else {
            return;
        };
        tracing::info!(?step, "eviction manager: reclaiming node-level resources");
        match step {
            crate::eviction::NodeReclaim::DeleteUnusedContainers => {
                // Pods gone from the kubelet or terminated lose every dead container.
                let live: BTreeSet<String> = k
                    .pods
                    .read()
                    .iter()
                    .filter(|(_, p)| !is_terminal(p))
                    .map(|(u, _)| u.clone())
                    .collect();
                k.gc.delete_all_unused_containers(k.runtime.cri(), &rt, |u| !live.contains(u))
                    .await;
            }
            crate::eviction::NodeReclaim::DeleteUnusedImages => {
                k.gc.delete_unused_images(k.runtime.cri(), &rt).await;
            }
        }
    }

    async fn observe(&self) -> crate::eviction::Observations {
        let summary = crate::stats::summary(self.kubelet, self.cpu_rate).await;
        crate::eviction::observations(&summary, self.memory, pid_usage())
    }
}

/// Publishes the node's CSINode, retrying with a backoff until it is there (upstream
/// keeps the node from reporting Ready until then; this kubelet does not wait for it,
/// having no CSI driver that could need it).
async fn publish_csi_node(client: kube::Client, node: Node, cancel: CancellationToken) {
    let mut backoff = Duration::from_millis(500);
    loop {
        match crate::csi_node::ensure(&client, &node).await {
            Ok(()) => return,
            Err(e) => tracing::warn!(error = %e, "failed to publish CSINode; retrying"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(60));
    }
}

/// Whether an update of a pod from the API is one its worker syncs for. As upstream's
/// config source (`checkAndUpdatePod`), a change of the spec, labels, annotations or
/// deletion is an update; a change of the status alone (mostly the kubelet's own
/// write coming back) is a reconcile, which syncs only a pod with readiness gates,
/// whose conditions other writers set (`NeedToReconcilePodReadiness`).
fn pod_needs_sync(old: &Pod, new: &Pod) -> bool {
    let (o, n) = (&old.metadata, &new.metadata);
    let empty = BTreeMap::new();
    let has_readiness_gates = new
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| !g.is_empty());
    old.spec != new.spec
        || o.labels.as_ref().unwrap_or(&empty) != n.labels.as_ref().unwrap_or(&empty)
        || o.annotations.as_ref().unwrap_or(&empty) != n.annotations.as_ref().unwrap_or(&empty)
        || o.deletion_timestamp != n.deletion_timestamp
        || o.deletion_grace_period_seconds != n.deletion_grace_period_seconds
        || (has_readiness_gates && old.status != new.status)
}

#[cfg(test)]
mod pod_update_tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodReadinessGate, PodStatus};

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "uid": "u1", "resourceVersion": "5", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            "status": {"phase": "Pending"}
        }))
        .unwrap()
    }

    #[test]
    fn a_status_write_is_not_a_sync_but_spec_metadata_and_deletion_are() {
        let old = pod();
        let mut status_only = pod();
        status_only.metadata.resource_version = Some("6".into());
        status_only.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        assert!(!pod_needs_sync(&old, &status_only));
        assert!(!pod_needs_sync(&old, &old), "a resync");

        let mut image = pod();
        image.spec.as_mut().unwrap().containers[0].image = Some("nginx:2".into());
        assert!(pod_needs_sync(&old, &image));
        let mut label = pod();
        label.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
        assert!(pod_needs_sync(&old, &label));
        let mut annotated = pod();
        annotated.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
        assert!(pod_needs_sync(&old, &annotated));
        let mut no_annotations = pod();
        no_annotations.metadata.annotations = Some(BTreeMap::new());
        assert!(
            !pod_needs_sync(&old, &no_annotations),
            "none and empty are equal"
        );
        let mut deleting = pod();
        deleting.metadata.deletion_grace_period_seconds = Some(30);
        assert!(pod_needs_sync(&old, &deleting));

        // Another writer's condition for a readiness gate: the kubelet recomputes Ready.
        let mut gated = pod();
        gated.spec.as_mut().unwrap().readiness_gates = Some(vec![PodReadinessGate {
            condition_type: "example.com/lb".into(),
        }]);
        let mut gate_set = gated.clone();
        gate_set.status = status_only.status.clone();
        assert!(pod_needs_sync(&gated, &gate_set));
    }
}

#[cfg(test)]
mod client_limit_tests {
    use super::*;

    #[test]
    fn client_limits_default_and_validate_as_upstream() {
        let d = ClientLimitSettings::default();
        assert_eq!(
            d.api(),
            ClientLimits {
                qps: 50.0,
                burst: 100
            }
        );
        assert_eq!(
            d.events(),
            ClientLimits {
                qps: 50.0,
                burst: 100
            }
        );
        assert_eq!(d.validate(), Ok(()));
        // Zero is client-go's default, not "unlimited".
        let zero = ClientLimitSettings {
            event_record_qps: 0,
            event_burst: 0,
            ..d
        };
        assert_eq!(
            zero.events(),
            ClientLimits {
                qps: 5.0,
                burst: 10
            }
        );
        let negative = ClientLimitSettings {
            kube_api_burst: -1,
            ..d
        };
        assert_eq!(
            negative.validate(),
            Err(
                "invalid configuration: kubeAPIBurst (--kube-api-burst) -1 must not be a negative number"
                    .into()
            )
        );
    }
}
