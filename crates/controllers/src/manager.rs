//! kube-controller-manager's wiring: which controllers run (`--controllers` with
//! upstream names, `*` and `-name`), with how many workers, on one shared informer
//! factory and one event broadcaster.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::ReplicationController;
use tokio_util::sync::CancellationToken;

use ferrokube_client::config::ClientLimits;
use ferrokube_client::events::{EventApi, EventBroadcaster, EventBroadcasterOptions};
use ferrokube_client::informer::SharedInformerFactory;
use ferrokube_client::workqueue::{QueueMetrics, WorkQueue, render_queues};

use crate::bootstrap::{BootstrapSignerController, TokenCleanerController};
use crate::clientbuilder::{ControllerClients, ServiceAccountClients, client_of_its_own};
use crate::cronjob::CronJobController;
use crate::csrapproving::CsrApprovingController;
use crate::csrcleaner::CsrCleanerController;
use crate::csrsigning::{CsrSigningConfig, CsrSigningController};
use crate::daemonset::DaemonSetController;
use crate::deployment::DeploymentController;
use crate::disruption::DisruptionController;
use crate::endpoints::EndpointsController;
use crate::endpointslice::EndpointSliceController;
use crate::endpointslicemirroring::EndpointSliceMirroringController;
use crate::ephemeral::EphemeralVolumeController;
use crate::events::EventSink;
use crate::garbagecollector::GarbageCollector;
use crate::hostpath::HostPathPlugin;
use crate::job::JobController;
use crate::legacytokencleaner::LegacyTokenCleanerController;
use crate::namespace::NamespaceController;
use crate::nodeipam::{NodeIpamConfig, NodeIpamController};
use crate::nodelifecycle::{NodeLifecycleConfig, NodeLifecycleController};
use crate::persistentvolume::{PersistentVolumeController, PersistentVolumeOptions};
use crate::podautoscaler::{HorizontalController, HpaConfig};
use crate::podgc::PodGcController;
use crate::pvcprotection::PvcProtectionController;
use crate::pvprotection::PvProtectionController;
use crate::replicaset::ReplicaSetController;
use crate::resourcequota::ResourceQuotaController;
use crate::rootcacertpublisher::RootCaCertPublisher;
use crate::serviceaccount::ServiceAccountController;
use crate::serviceaccounttoken::{ServiceAccountTokenController, token_secrets_factory};
use crate::servicecidrs::ServiceCidrController;
use crate::statefulset::StatefulSetController;
use crate::tainteviction::TaintEvictionController;
use crate::ttl::TtlController;
use crate::ttlafterfinished::TtlAfterFinishedController;
use crate::vapstatus::VapStatusController;
use crate::{Controller, Error, Result, run_controller};

/// (canonical upstream name, older alias) of every controller this crate has.
pub const CONTROLLERS: &[(&str, &str)] = &[
    ("replicaset-controller", "replicaset"),
    ("replicationcontroller-controller", "replicationcontroller"),
    ("deployment-controller", "deployment"),
    ("garbage-collector-controller", "garbagecollector"),
    ("namespace-controller", "namespace"),
    ("serviceaccount-controller", "serviceaccount"),
    ("endpoints-controller", "endpoint"),
    ("endpointslice-controller", "endpointslice"),
    (
        "endpointslice-mirroring-controller",
        "endpointslicemirroring",
    ),
    ("node-lifecycle-controller", "nodelifecycle"),
    // Upstream has no alias for it.
    ("taint-eviction-controller", "taint-eviction-controller"),
    ("node-ipam-controller", "nodeipam"),
    ("pod-garbage-collector-controller", "podgc"),
    ("resourcequota-controller", "resourcequota"),
    (
        "root-ca-certificate-publisher-controller",
        "root-ca-cert-publisher",
    ),
    ("disruption-controller", "disruption"),
    ("ttl-after-finished-controller", "ttl-after-finished"),
    ("job-controller", "job"),
    ("cronjob-controller", "cronjob"),
    ("daemonset-controller", "daemonset"),
    ("statefulset-controller", "statefulset"),
    (
        "persistentvolumeclaim-protection-controller",
        "pvc-protection",
    ),
    ("persistentvolume-protection-controller", "pv-protection"),
    ("ephemeral-volume-controller", "ephemeral-volume"),
    ("serviceaccount-token-controller", "serviceaccount-token"),
    ("certificatesigningrequest-signing-controller", "csrsigning"),
    (
        "certificatesigningrequest-approving-controller",
        "csrapproving",
    ),
    ("certificatesigningrequest-cleaner-controller", "csrcleaner"),
    (
        "validatingadmissionpolicy-status-controller",
        "validatingadmissionpolicy-status",
    ),
    (
        "horizontal-pod-autoscaler-controller",
        "horizontalpodautoscaling",
    ),
    (
        "persistentvolume-binder-controller",
        "persistentvolume-binder",
    ),
    // Upstream has no older alias for it.
    ("service-cidr-controller", "service-cidr-controller"),
    ("ttl-controller", "ttl"),
    (
        "legacy-serviceaccount-token-cleaner-controller",
        "legacy-service-account-token-cleaner",
    ),
    // Both in DISABLED_BY_DEFAULT.
    ("bootstrap-signer-controller", "bootstrapsigner"),
    ("token-cleaner-controller", "tokencleaner"),
];

/// Upstream names this manager knows but does not run (accepted in `--controllers`).
pub const NOT_IMPLEMENTED: &[&str] = &[
    "persistentvolume-attach-detach-controller",
    "persistentvolume-expander-controller",
    "clusterrole-aggregation-controller",
    "storageversion-garbage-collector-controller",
    "node-route-controller",
    "service-lb-controller",
    "cloud-node-lifecycle-controller",
    "resourceclaim-controller",
];

/// The ServiceAccount in `kube-system` each controller runs as with
/// `--use-service-account-credentials` (upstream's `ClientOrDie` names, bound to the
/// `system:controller:<name>` roles by the bootstrap policy).
pub fn service_account_name(controller: &str) -> &str {
    match controller {
        "replicaset-controller" => "replicaset-controller",
        "replicationcontroller-controller" => "replication-controller",
        "deployment-controller" => "deployment-controller",
        "garbage-collector-controller" => "generic-garbage-collector",
        "namespace-controller" => "namespace-controller",
        "serviceaccount-controller" => "service-account-controller",
        "endpoints-controller" => "endpoint-controller",
        "endpointslice-controller" => "endpointslice-controller",
        "endpointslice-mirroring-controller" => "endpointslicemirroring-controller",
        // Upstream's taint eviction uses the node controller's role.
        "node-lifecycle-controller" | "node-ipam-controller" | "taint-eviction-controller" => {
            "node-controller"
        }
        "pod-garbage-collector-controller" => "pod-garbage-collector",
        "resourcequota-controller" => "resourcequota-controller",
        "root-ca-certificate-publisher-controller" => "root-ca-cert-publisher",
        "disruption-controller" => "disruption-controller",
        "daemonset-controller" => "daemon-set-controller",
        "ttl-after-finished-controller" => "ttl-after-finished-controller",
        "persistentvolumeclaim-protection-controller" => "pvc-protection-controller",
        "persistentvolume-protection-controller" => "pv-protection-controller",
        "certificatesigningrequest-signing-controller"
        | "certificatesigningrequest-approving-controller"
        | "certificatesigningrequest-cleaner-controller" => "certificate-controller",
        "horizontal-pod-autoscaler-controller" => "horizontal-pod-autoscaler",
        "persistentvolume-binder-controller" => "persistent-volume-binder",
        "service-cidr-controller" => "service-cidrs-controller",
        "bootstrap-signer-controller" => "bootstrap-signer",
        "token-cleaner-controller" => "token-cleaner",
        "legacy-serviceaccount-token-cleaner-controller" => "legacy-service-account-token-cleaner",
        other => other,
    }
}

/// The `source.component` (and `reportingComponent`) each controller's events carry:
/// the `EventSource` upstream's controller builds its legacy recorder with.
pub fn event_component(controller: &str) -> &str {
    match controller {
        "replicationcontroller-controller" => "replication-controller",
        "endpoints-controller" => "endpoint-controller",
        "endpointslice-controller" => "endpoint-slice-controller",
        "endpointslice-mirroring-controller" => "endpoint-slice-mirroring-controller",
        "node-lifecycle-controller" => "node-controller",
        "node-ipam-controller" => "cidrAllocator",
        "disruption-controller" => "controllermanager",
        "horizontal-pod-autoscaler-controller" => "horizontal-pod-autoscaler",
        "persistentvolume-binder-controller" => "persistentvolume-controller",
        "ephemeral-volume-controller" => crate::ephemeral::EVENT_COMPONENT,
        other => other,
    }
}

/// Upstream controllers that `*` does not enable.
pub const DISABLED_BY_DEFAULT: &[&str] =
    &["bootstrap-signer-controller", "token-cleaner-controller"];

fn canonical(name: &str) -> Option<&'static str> {
    CONTROLLERS
        .iter()
        .find(|(c, a)| *c == name || *a == name)
        .map(|(c, _)| *c)
        .or_else(|| NOT_IMPLEMENTED.iter().find(|c| **c == name).copied())
}

/// Upstream `IsControllerEnabled` over `--controllers`: an exact name (or alias)
/// enables, `-name` disables, `*` enables everything not disabled by default.
/// Unknown names are an error, as upstream's validation.
pub fn enabled_controllers(spec: &[String]) -> Result<Vec<&'static str>> {
    for s in spec {
        let n = s.strip_prefix('-').unwrap_or(s);
        if n != "*" && canonical(n).is_none() {
            return Err(Error::Invalid(format!(
                "{s:?} is not in the list of known controllers"
            )));
        }
    }
    let enabled = |name: &str| {
        let mut star = false;
        for s in spec {
            let (neg, n) = match s.strip_prefix('-') {
                Some(n) => (true, n),
                None => (false, s.as_str()),
            };
            if n == "*" {
                star = true;
                continue;
            }
            if canonical(n) == Some(name) {
                return !neg;
            }
        }
        star && !DISABLED_BY_DEFAULT.contains(&name)
    };
    Ok(CONTROLLERS
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| enabled(c))
        .collect())
}

/// Settings of the controllers (upstream flags).
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    pub controllers: Vec<String>,
    pub concurrent_deployment_syncs: usize,
    pub concurrent_replicaset_syncs: usize,
    pub concurrent_rc_syncs: usize,
    pub concurrent_endpoint_syncs: usize,
    pub concurrent_service_endpoint_syncs: usize,
    pub concurrent_gc_syncs: usize,
    pub concurrent_namespace_syncs: usize,
    pub concurrent_serviceaccount_syncs: usize,
    pub concurrent_job_syncs: usize,
    pub concurrent_cron_job_syncs: usize,
    pub concurrent_daemonset_syncs: usize,
    pub concurrent_statefulset_syncs: usize,
    pub terminated_pod_gc_threshold: usize,
    pub node_lifecycle: NodeLifecycleConfig,
    pub node_ipam: NodeIpamConfig,
    pub informer_sync_timeout: Duration,
    /// The cluster CA bundle (PEM) the root CA publisher puts in every namespace and
    /// the tokens controller in each token Secret (`--root-ca-file`, else the CA the
    /// manager's kubeconfig trusts); without one the publisher does not run.
    pub root_ca: Option<String>,
    /// The manager's connection settings (its kubeconfig). With them each controller
    /// gets a client of its own, and the informers one more, each with a bucket of
    /// [`ManagerConfig::client_limits`], as upstream's client builders give each
    /// clientset its own. `None` (tests): everything uses the client `start` is given.
    pub connection: Option<kube::Config>,
    /// `--use-service-account-credentials`: each controller's client authenticates as
    /// its own ServiceAccount (the connection's credentials dropped, tokens from
    /// TokenRequest) instead of with the manager's credentials. Needs `connection`.
    pub use_service_account_credentials: bool,
    /// `--kube-api-qps`, `--kube-api-burst` of each client built from `connection`;
    /// `None`: not limited.
    pub client_limits: Option<ClientLimits>,
    /// `--service-account-private-key-file` (PEM): the key the tokens controller
    /// signs legacy Secret tokens with; without it that controller does not run.
    pub service_account_private_key: Option<String>,
    /// `--cluster-signing-*`: the CSR signers' CAs and the longest certificate;
    /// without a CA the signing controller does not run.
    pub csr_signing: CsrSigningConfig,
    /// `--concurrent-horizontal-pod-autoscaler-syncs`.
    pub concurrent_horizontal_pod_autoscaler_syncs: usize,
    /// `--concurrent-ephemeralvolume-syncs`.
    pub concurrent_ephemeralvolume_syncs: usize,
    /// The `--horizontal-pod-autoscaler-*` settings.
    pub hpa: HpaConfig,
    /// `--pvclaimbinder-sync-period`: how often every claim and volume is synced again.
    pub pv_claim_binder_sync_period: Duration,
    /// `--enable-hostpath-provisioner`: the binder provisions `kubernetes.io/host-path`
    /// claims (crate::hostpath).
    pub enable_hostpath_provisioner: bool,
    /// `--legacy-service-account-token-clean-up-period`: how long an auto-generated
    /// Secret token may go unused before the cleaner invalidates it (and as long again
    /// before it deletes it).
    pub legacy_service_account_token_clean_up_period: Duration,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            controllers: vec!["*".into()],
            concurrent_deployment_syncs: 5,
            concurrent_replicaset_syncs: 5,
            concurrent_rc_syncs: 5,
            concurrent_endpoint_syncs: 5,
            concurrent_service_endpoint_syncs: 5,
            concurrent_gc_syncs: 20,
            concurrent_job_syncs: 5,
            concurrent_cron_job_syncs: 5,
            concurrent_daemonset_syncs: 2,
            concurrent_statefulset_syncs: 5,
            concurrent_namespace_syncs: 10,
            concurrent_serviceaccount_syncs: 5,
            terminated_pod_gc_threshold: crate::podgc::DEFAULT_THRESHOLD,
            node_lifecycle: NodeLifecycleConfig::default(),
            node_ipam: NodeIpamConfig::default(),
            informer_sync_timeout: Duration::from_secs(60),
            root_ca: None,
            connection: None,
            use_service_account_credentials: false,
            client_limits: None,
            service_account_private_key: None,
            csr_signing: CsrSigningConfig::default(),
            concurrent_horizontal_pod_autoscaler_syncs: 5,
            concurrent_ephemeralvolume_syncs: 5,
            hpa: HpaConfig::default(),
            pv_claim_binder_sync_period: crate::persistentvolume::DEFAULT_SYNC_PERIOD,
            enable_hostpath_provisioner: false,
            legacy_service_account_token_clean_up_period:
                crate::legacytokencleaner::DEFAULT_CLEAN_UP_PERIOD,
        }
    }
}

/// A running set of controllers.
pub struct Manager {
    queues: Vec<WorkQueue<String>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    factory: SharedInformerFactory,
    /// Token Secrets only, for the tokens controller (a field-selected informer).
    token_secrets: SharedInformerFactory,
    broadcaster: EventBroadcaster,
    pub enabled: Vec<&'static str>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("enabled", &self.enabled)
            .finish()
    }
}

impl Manager {
    /// Builds every enabled controller, starts the informers, waits for their caches,
    /// then starts the workers. Runs until `cancel`.
    pub async fn start(
        client: kube::Client,
        cfg: &ManagerConfig,
        cancel: CancellationToken,
    ) -> Result<Manager> {
        let enabled = enabled_controllers(&cfg.controllers)?;
        // Upstream's "shared-informers" client: the manager's credentials and a bucket
        // of its own, so that lists and watches do not wait behind events.
        let informer_client = match &cfg.connection {
            Some(config) => {
                let mut config = config.clone();
                ferrokube_client::config::add_user_agent(&mut config, "shared-informers");
                client_of_its_own(&config, cfg.client_limits)?
            }
            None => client.clone(),
        };
        let factory = SharedInformerFactory::new(informer_client.clone());
        let token_secrets = token_secrets_factory(informer_client);
        // Upstream's controller manager records through client-go's legacy
        // `tools/record`: core v1 Events with source, count and first/lastTimestamp,
        // which `kubectl get events --sort-by=.lastTimestamp` sorts on.
        let broadcaster = EventBroadcaster::new(
            client.clone(),
            EventBroadcasterOptions {
                api: EventApi::CoreV1,
                ..Default::default()
            },
        );
        let limits = cfg.client_limits;
        let clients = match &cfg.connection {
            Some(config) if cfg.use_service_account_credentials => {
                ControllerClients::ServiceAccounts(Arc::new(ServiceAccountClients::new(
                    config.clone(),
                    client.clone(),
                    limits,
                )))
            }
            Some(config) => ControllerClients::PerController {
                config: Box::new(config.clone()),
                limits,
            },
            None => ControllerClients::Shared(client.clone()),
        };
        let mut built: Vec<(Arc<dyn Controller>, usize)> = Vec::new();
        for name in &enabled {
            // Upstream's controllers record through client-go's legacy recorder with
            // a component and no host, so their events name no reporting instance.
            let rec: Arc<dyn EventSink> =
                Arc::new(broadcaster.new_recorder_with_instance(event_component(name), ""));
            // Upstream runs the tokens controller with the manager's own credentials
            // (a controller's ServiceAccount credentials may be what it must provide).
            let client = if *name == "serviceaccount-token-controller" {
                client.clone()
            } else {
                clients.client(service_account_name(name)).await?
            };
            let c: (Arc<dyn Controller>, usize) = match *name {
                "replicaset-controller" => (
                    ReplicaSetController::<ReplicaSet>::new(&factory, client.clone(), rec),
                    cfg.concurrent_replicaset_syncs,
                ),
                "replicationcontroller-controller" => (
                    ReplicaSetController::<ReplicationController>::new(
                        &factory,
                        client.clone(),
                        rec,
                    ),
                    cfg.concurrent_rc_syncs,
                ),
                "deployment-controller" => (
                    DeploymentController::new(&factory, client.clone(), rec),
                    cfg.concurrent_deployment_syncs,
                ),
                "garbage-collector-controller" => (
                    GarbageCollector::new(client.clone()),
                    cfg.concurrent_gc_syncs,
                ),
                "namespace-controller" => (
                    NamespaceController::new(&factory, client.clone()),
                    cfg.concurrent_namespace_syncs,
                ),
                "serviceaccount-controller" => (
                    ServiceAccountController::new(&factory, client.clone()),
                    cfg.concurrent_serviceaccount_syncs,
                ),
                "endpoints-controller" => (
                    EndpointsController::new(&factory, client.clone()),
                    cfg.concurrent_endpoint_syncs,
                ),
                "endpointslice-controller" => (
                    EndpointSliceController::new(&factory, client.clone()),
                    cfg.concurrent_service_endpoint_syncs,
                ),
                // Upstream's --mirroring-concurrent-service-endpoint-syncs default.
                "endpointslice-mirroring-controller" => (
                    EndpointSliceMirroringController::new(&factory, client.clone()),
                    5,
                ),
                "node-lifecycle-controller" => (
                    NodeLifecycleController::new(
                        &factory,
                        client.clone(),
                        cfg.node_lifecycle.clone(),
                        rec,
                    ),
                    1,
                ),
                // Upstream's taint manager runs 8 eviction workers (UpdateWorkerSize).
                "taint-eviction-controller" => (
                    TaintEvictionController::new(&factory, client.clone(), rec),
                    8,
                ),
                "node-ipam-controller" => (
                    NodeIpamController::new(&factory, client.clone(), cfg.node_ipam.clone(), rec),
                    1,
                ),
                "pod-garbage-collector-controller" => (
                    PodGcController::new(&factory, client.clone(), cfg.terminated_pod_gc_threshold),
                    1,
                ),
                // Upstream's --concurrent-resource-quota-syncs default.
                "resourcequota-controller" => {
                    (ResourceQuotaController::new(&factory, client.clone()), 5)
                }
                "daemonset-controller" => (
                    DaemonSetController::new(&factory, client.clone(), rec),
                    cfg.concurrent_daemonset_syncs,
                ),
                "statefulset-controller" => (
                    StatefulSetController::new(&factory, client.clone(), rec),
                    cfg.concurrent_statefulset_syncs,
                ),
                "job-controller" => (
                    JobController::new(&factory, client.clone(), rec),
                    cfg.concurrent_job_syncs,
                ),
                "cronjob-controller" => (
                    CronJobController::new(&factory, client.clone(), rec),
                    cfg.concurrent_cron_job_syncs,
                ),
                // Upstream's --concurrent-ttl-after-finished-syncs default.
                "ttl-after-finished-controller" => {
                    (TtlAfterFinishedController::new(&factory, client.clone()), 5)
                }
                // Upstream runs one worker for each.
                "persistentvolumeclaim-protection-controller" => {
                    (PvcProtectionController::new(&factory, client.clone())?, 1)
                }
                "persistentvolume-protection-controller" => {
                    (PvProtectionController::new(&factory, client.clone()), 1)
                }
                // Its events come from component `ephemeral_volume`, as upstream's.
                "ephemeral-volume-controller" => (
                    EphemeralVolumeController::new(&factory, client.clone(), rec)?,
                    cfg.concurrent_ephemeralvolume_syncs,
                ),
                "serviceaccount-token-controller" => match &cfg.service_account_private_key {
                    // Upstream's --concurrent-serviceaccount-token-syncs default.
                    Some(key) => (
                        ServiceAccountTokenController::new(
                            &factory,
                            &token_secrets,
                            client.clone(),
                            key,
                            cfg.root_ca.clone(),
                        )?,
                        5,
                    ),
                    None => {
                        tracing::warn!(
                            controller = name,
                            "no --service-account-private-key-file: not filling token Secrets"
                        );
                        continue;
                    }
                },
                // Upstream runs 5 workers for the signer and the approver, 1 cleaner.
                "certificatesigningrequest-signing-controller" => {
                    if cfg.csr_signing.signers.is_empty() {
                        tracing::warn!(
                            controller = name,
                            "no --cluster-signing-cert-file/--cluster-signing-key-file: not signing CSRs"
                        );
                        continue;
                    }
                    (
                        CsrSigningController::new(&factory, client.clone(), &cfg.csr_signing)?,
                        5,
                    )
                }
                "certificatesigningrequest-approving-controller" => {
                    (CsrApprovingController::new(&factory, client.clone()), 5)
                }
                "certificatesigningrequest-cleaner-controller" => {
                    (CsrCleanerController::new(&factory, client.clone()), 1)
                }
                // Upstream's --concurrent-validating-admission-policy-status-syncs default.
                "validatingadmissionpolicy-status-controller" => {
                    (VapStatusController::new(&factory, client.clone()), 5)
                }
                "horizontal-pod-autoscaler-controller" => (
                    HorizontalController::new(&factory, client.clone(), rec, cfg.hpa.clone()),
                    cfg.concurrent_horizontal_pod_autoscaler_syncs,
                ),
                // One worker: upstream's claim sync is not reentrant.
                "persistentvolume-binder-controller" => (
                    PersistentVolumeController::with_options(
                        &factory,
                        client.clone(),
                        rec,
                        PersistentVolumeOptions {
                            sync_period: cfg.pv_claim_binder_sync_period,
                            hostpath: HostPathPlugin::new(cfg.enable_hostpath_provisioner),
                        },
                    )?,
                    1,
                ),
                // Upstream runs 5 workers (no flag).
                "service-cidr-controller" => {
                    (ServiceCidrController::new(&factory, client.clone(), rec), 5)
                }
                // Upstream runs one worker (`--concurrent-disruption-syncs` is not a flag).
                "disruption-controller" => {
                    (DisruptionController::new(&factory, client.clone(), rec), 1)
                }
                // Upstream runs one worker for each.
                "bootstrap-signer-controller" => {
                    (BootstrapSignerController::new(&factory, client.clone()), 1)
                }
                "token-cleaner-controller" => {
                    (TokenCleanerController::new(&factory, client.clone()), 1)
                }
                // Upstream runs 5 workers (no flag).
                "ttl-controller" => (TtlController::new(&factory, client.clone()), 5),
                // Upstream refuses to start without a positive period.
                "legacy-serviceaccount-token-cleaner-controller"
                    if cfg.legacy_service_account_token_clean_up_period.is_zero() =>
                {
                    return Err(Error::Invalid(
                        "invalid CleanUpPeriod: 0s (--legacy-service-account-token-clean-up-period)"
                            .into(),
                    ));
                }
                "legacy-serviceaccount-token-cleaner-controller" => (
                    LegacyTokenCleanerController::new(
                        &factory,
                        client.clone(),
                        cfg.legacy_service_account_token_clean_up_period,
                    ),
                    1,
                ),
                "root-ca-certificate-publisher-controller" => match &cfg.root_ca {
                    // Upstream runs one worker.
                    Some(ca) => (
                        RootCaCertPublisher::new(&factory, client.clone(), ca.clone()),
                        1,
                    ),
                    None => {
                        tracing::warn!(
                            controller = name,
                            "no root CA (--root-ca-file, or a CA in the kubeconfig): not publishing kube-root-ca.crt"
                        );
                        continue;
                    }
                },
                _ => continue,
            };
            built.push(c);
        }
        let mut queues = Vec::new();
        for (c, _) in &built {
            let q = WorkQueue::new(c.name());
            c.clone().watch(&factory, &q);
            queues.push(q);
        }
        factory.start();
        token_secrets.start();
        factory
            .wait_for_cache_sync(cfg.informer_sync_timeout)
            .await?;
        token_secrets
            .wait_for_cache_sync(cfg.informer_sync_timeout)
            .await?;
        let mut tasks = Vec::new();
        for ((c, workers), q) in built.into_iter().zip(&queues) {
            tasks.push(tokio::spawn(run_controller(
                c,
                q.clone(),
                workers,
                cancel.clone(),
            )));
        }
        Ok(Manager {
            queues,
            tasks,
            factory,
            token_secrets,
            broadcaster,
            enabled,
        })
    }

    /// Workqueue metrics of every controller, in Prometheus text format.
    pub fn metrics(&self) -> String {
        let queues: Vec<QueueMetrics> = self.queues.iter().map(|q| q.metrics()).collect();
        let mut out = render_queues(&queues);
        if self.enabled.contains(&"ephemeral-volume-controller") {
            crate::ephemeral::write_metrics(&mut out);
        }
        out
    }

    /// Queue depths by controller (tests, debugging).
    pub fn depths(&self) -> BTreeMap<String, u64> {
        self.queues
            .iter()
            .map(|q| (q.name().to_string(), q.metrics().depth))
            .collect()
    }

    /// Rate-limited retries (failed reconciles) by controller (tests, debugging).
    pub fn retries(&self) -> BTreeMap<String, u64> {
        self.queues
            .iter()
            .map(|q| (q.name().to_string(), q.metrics().retries))
            .collect()
    }

    /// Waits for the workers (after `cancel`), then stops informers and events.
    pub async fn wait(self) {
        for t in self.tasks {
            let _ = t.await;
        }
        self.factory.shutdown().await;
        self.token_secrets.shutdown().await;
        self.broadcaster.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn controllers_flag() {
        assert_eq!(
            enabled_controllers(&s(&["*"])).unwrap().len(),
            CONTROLLERS.len() - DISABLED_BY_DEFAULT.len()
        );
        let e = enabled_controllers(&s(&["*", "-garbagecollector", "-podgc"])).unwrap();
        assert!(!e.contains(&"garbage-collector-controller"));
        assert!(!e.contains(&"pod-garbage-collector-controller"));
        assert!(e.contains(&"deployment-controller"));
        assert_eq!(
            enabled_controllers(&s(&["deployment", "replicaset-controller"])).unwrap(),
            vec!["replicaset-controller", "deployment-controller"]
        );
        assert!(enabled_controllers(&s(&[])).unwrap().is_empty());
        // The first match wins, as upstream.
        assert!(
            enabled_controllers(&s(&["-deployment", "deployment"]))
                .unwrap()
                .is_empty()
        );
        assert!(enabled_controllers(&s(&["nonsense"])).is_err());
        assert!(enabled_controllers(&s(&["*", "-job-controller"])).is_ok());
    }

    #[test]
    fn the_bootstrap_controllers_run_only_when_named() {
        let star = enabled_controllers(&s(&["*"])).unwrap();
        assert!(!star.contains(&"bootstrap-signer-controller"));
        assert!(!star.contains(&"token-cleaner-controller"));
        // kubeadm's --controllers.
        let kubeadm = enabled_controllers(&s(&["*", "bootstrapsigner", "tokencleaner"])).unwrap();
        assert!(kubeadm.contains(&"bootstrap-signer-controller"));
        assert!(kubeadm.contains(&"token-cleaner-controller"));
        assert_eq!(kubeadm.len(), CONTROLLERS.len());
        for c in DISABLED_BY_DEFAULT {
            assert!(!NOT_IMPLEMENTED.contains(c));
        }
        assert_eq!(
            service_account_name("bootstrap-signer-controller"),
            "bootstrap-signer"
        );
        assert_eq!(
            service_account_name("token-cleaner-controller"),
            "token-cleaner"
        );
        // Their writes, as their namespaced roles grant them (the informers use the
        // manager's own credentials).
        let grants = |ns: &str, role: &str, verb: &str, resource: &str, name: &str| {
            ferrokube_auth::bootstrap::namespace_roles()
                .into_iter()
                .any(|r| {
                    r.metadata.namespace.as_deref() == Some(ns)
                        && r.metadata.name.as_deref() == Some(role)
                        && r.rules.iter().flatten().any(|rule| {
                            rule.verbs.iter().any(|v| v == verb)
                                && rule.resources.iter().flatten().any(|x| x == resource)
                                && rule
                                    .resource_names
                                    .as_ref()
                                    .is_none_or(|n| n.iter().any(|x| x == name))
                        })
                })
        };
        assert!(grants(
            "kube-system",
            "system:controller:token-cleaner",
            "delete",
            "secrets",
            "bootstrap-token-abcdef"
        ));
        assert!(grants(
            "kube-public",
            "system:controller:bootstrap-signer",
            "update",
            "configmaps",
            "cluster-info"
        ));
    }

    #[test]
    fn the_service_cidr_controller_is_on_by_default_under_its_role() {
        assert!(
            enabled_controllers(&s(&["*"]))
                .unwrap()
                .contains(&"service-cidr-controller")
        );
        assert!(!NOT_IMPLEMENTED.contains(&"service-cidr-controller"));
        assert_eq!(
            service_account_name("service-cidr-controller"),
            "service-cidrs-controller"
        );
        let role = ferrokube_auth::bootstrap::controller_roles()
            .into_iter()
            .find(|r| {
                r.metadata.name.as_deref() == Some("system:controller:service-cidrs-controller")
            })
            .expect("the service-cidrs controller's role");
        let rules = role.rules.unwrap_or_default();
        let allows = |verb: &str, resource: &str| {
            rules.iter().any(|r| {
                r.api_groups
                    .iter()
                    .flatten()
                    .any(|g| g == "networking.k8s.io")
                    && r.resources.iter().flatten().any(|x| x == resource)
                    && r.verbs.iter().any(|v| v == verb)
            })
        };
        for (verb, resource) in [
            ("list", "servicecidrs"),
            ("watch", "servicecidrs"),
            ("patch", "servicecidrs"),
            ("patch", "servicecidrs/status"),
            ("list", "ipaddresses"),
            ("watch", "ipaddresses"),
        ] {
            assert!(allows(verb, resource), "{verb} {resource}");
        }
    }

    #[test]
    fn the_autoscaler_runs_as_upstreams_service_account() {
        assert_eq!(
            enabled_controllers(&s(&["horizontalpodautoscaling"])).unwrap(),
            vec!["horizontal-pod-autoscaler-controller"]
        );
        assert!(!NOT_IMPLEMENTED.contains(&"horizontal-pod-autoscaler-controller"));
        assert_eq!(
            service_account_name("horizontal-pod-autoscaler-controller"),
            "horizontal-pod-autoscaler"
        );
        // Its role is in the bootstrap policy, bound to that account.
        let role = ferrokube_auth::bootstrap::controller_roles()
            .into_iter()
            .find(|r| {
                r.metadata.name.as_deref() == Some("system:controller:horizontal-pod-autoscaler")
            })
            .expect("the autoscaler's role");
        let rules = role.rules.unwrap_or_default();
        assert!(rules.iter().any(|r| {
            r.resources.as_deref() == Some(&["*/scale".to_string()][..])
                && r.verbs == ["get", "update"]
        }));
        assert!(rules.iter().any(|r| {
            r.api_groups.as_deref() == Some(&["metrics.k8s.io".to_string()][..])
                && r.verbs == ["list"]
        }));
    }
}
