//! kube-controller-manager: upstream flag names over `ferrokube-controllers`, behind
//! leader election, with `/healthz` and `/metrics` over HTTPS on `--bind-address:--secure-port`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use ferrokube_client::config::{ClientLimits, client_with_limits};
use ferrokube_client::leaderelection::{
    LeaderElectionOptions, default_identity, parse_go_duration,
};
use ferrokube_controllers::csrsigning::{CsrSigningConfig, SignerCa};
use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_controllers::nodeipam::NodeIpamConfig;
use ferrokube_controllers::nodelifecycle::NodeLifecycleConfig;
use ferrokube_controllers::podautoscaler::HpaConfig;
use tokio_util::sync::CancellationToken;

/// The metrics text, once the controllers run.
type Shared = Arc<std::sync::Mutex<Option<String>>>;

fn dur(s: &str) -> Result<Duration, String> {
    parse_go_duration(s)
}

/// Upstream kube-controller-manager flags (the subset Ferrokube implements).
#[derive(Debug, Parser)]
#[command(name = "kube-controller-manager", version, about)]
struct Options {
    /// Path to kubeconfig file with authorization and master location information.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// QPS to use while talking with kubernetes apiserver: each controller's client,
    /// the informers' and the manager's own have a bucket of their own.
    #[arg(
        long = "kube-api-qps",
        default_value_t = 20.0,
        allow_negative_numbers = true
    )]
    kube_api_qps: f32,
    /// Burst to use while talking with kubernetes apiserver.
    #[arg(long = "kube-api-burst", default_value_t = 30)]
    kube_api_burst: u32,
    /// The instance prefix for the cluster. Upstream names cloud resources with it
    /// (used by cloud controllers, which Ferrokube does not have): accepted and logged.
    #[arg(long = "cluster-name", default_value = "kubernetes")]
    cluster_name: String,
    #[command(flatten)]
    component: ferrokube_component_base::ComponentFlags,
    #[command(flatten)]
    content_type: ferrokube_component_base::ClientContentTypeFlag,
    /// A list of controllers to enable. '*' enables all on-by-default controllers,
    /// 'foo' enables the controller named 'foo', '-foo' disables the controller named 'foo'.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    controllers: Vec<String>,
    #[arg(long = "concurrent-deployment-syncs", default_value_t = 5)]
    concurrent_deployment_syncs: usize,
    #[arg(long = "concurrent-replicaset-syncs", default_value_t = 5)]
    concurrent_replicaset_syncs: usize,
    #[arg(long = "concurrent-rc-syncs", default_value_t = 5)]
    concurrent_rc_syncs: usize,
    #[arg(long = "concurrent-endpoint-syncs", default_value_t = 5)]
    concurrent_endpoint_syncs: usize,
    /// The number of job objects that are allowed to sync concurrently.
    #[arg(long = "concurrent-job-syncs", default_value_t = 5)]
    concurrent_job_syncs: usize,
    /// The number of cronjob objects that are allowed to sync concurrently.
    #[arg(long = "concurrent-cron-job-syncs", default_value_t = 5)]
    concurrent_cron_job_syncs: usize,
    /// The number of daemonset objects that are allowed to sync concurrently.
    #[arg(long = "concurrent-daemonset-syncs", default_value_t = 2)]
    concurrent_daemonset_syncs: usize,
    /// The number of statefulset objects that are allowed to sync concurrently.
    #[arg(long = "concurrent-statefulset-syncs", default_value_t = 5)]
    concurrent_statefulset_syncs: usize,
    #[arg(long = "concurrent-service-endpoint-syncs", default_value_t = 5)]
    concurrent_service_endpoint_syncs: usize,
    #[arg(long = "concurrent-gc-syncs", default_value_t = 20)]
    concurrent_gc_syncs: usize,
    #[arg(long = "concurrent-namespace-syncs", default_value_t = 10)]
    concurrent_namespace_syncs: usize,
    #[arg(long = "concurrent-serviceaccount-token-syncs", default_value_t = 5)]
    concurrent_serviceaccount_syncs: usize,
    /// Should CIDRs for Pods be allocated and set on the cloud provider.
    #[arg(
        long = "allocate-node-cidrs",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    allocate_node_cidrs: bool,
    /// CIDR Range for Pods in cluster. Requires --allocate-node-cidrs to be true.
    #[arg(long = "cluster-cidr")]
    cluster_cidr: Option<ipnet::IpNet>,
    /// Mask size for node cidr in cluster. Default is 24 for IPv4 and 64 for IPv6.
    #[arg(long = "node-cidr-mask-size")]
    node_cidr_mask_size: Option<u8>,
    /// CIDR Range for Services in cluster; node pod CIDRs never overlap it.
    #[arg(long = "service-cluster-ip-range")]
    service_cluster_ip_range: Option<ipnet::IpNet>,
    /// Amount of time which we allow running Node to be unresponsive before marking it unhealthy.
    #[arg(long = "node-monitor-grace-period", default_value = "50s", value_parser = dur)]
    node_monitor_grace_period: Duration,
    /// The period for syncing NodeStatus in NodeController.
    #[arg(long = "node-monitor-period", default_value = "5s", value_parser = dur)]
    node_monitor_period: Duration,
    /// Amount of time which we allow starting Node to be unresponsive before marking it unhealthy.
    #[arg(long = "node-startup-grace-period", default_value = "1m0s", value_parser = dur)]
    node_startup_grace_period: Duration,
    /// Number of nodes per second on which pods are deleted in case of node failure when a zone is healthy.
    #[arg(long = "node-eviction-rate", default_value_t = 0.1)]
    node_eviction_rate: f32,
    /// Number of nodes per second on which pods are deleted in case of node failure when a zone is unhealthy.
    #[arg(long = "secondary-node-eviction-rate", default_value_t = 0.01)]
    secondary_node_eviction_rate: f32,
    #[arg(long = "large-cluster-size-threshold", default_value_t = 50)]
    large_cluster_size_threshold: usize,
    #[arg(long = "unhealthy-zone-threshold", default_value_t = 0.55)]
    unhealthy_zone_threshold: f32,
    /// Number of terminated pods that can exist before the terminated pod garbage
    /// collector starts deleting terminated pods. If <= 0, it is disabled.
    #[arg(long = "terminated-pod-gc-threshold", default_value_t = 12500)]
    terminated_pod_gc_threshold: i64,
    /// The number of horizontal pod autoscaler objects that are allowed to sync
    /// concurrently.
    #[arg(
        long = "concurrent-horizontal-pod-autoscaler-syncs",
        default_value_t = 5
    )]
    concurrent_horizontal_pod_autoscaler_syncs: usize,
    /// The number of ephemeral volume syncing operations that will be done
    /// concurrently. Larger number = faster ephemeral volume updating, but more CPU (and
    /// network) load.
    #[arg(long = "concurrent-ephemeralvolume-syncs", default_value_t = 5)]
    concurrent_ephemeralvolume_syncs: usize,
    /// The period for syncing persistent volumes and persistent volume claims.
    #[arg(long = "pvclaimbinder-sync-period", default_value = "15s", value_parser = dur)]
    pvclaimbinder_sync_period: Duration,
    /// Enable HostPath PV provisioning when running without a cloud provider. This
    /// allows testing and development of provisioning features. HostPath provisioning
    /// is not supported in any way, won't work in a multi-node cluster, and should not
    /// be used for anything other than testing or development.
    #[arg(
        long = "enable-hostpath-provisioner",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    enable_hostpath_provisioner: bool,
    /// The period of time since the last usage of an legacy service account token
    /// before it can be deleted.
    #[arg(long = "legacy-service-account-token-clean-up-period", default_value = "8760h0m0s", value_parser = dur)]
    legacy_service_account_token_clean_up_period: Duration,
    /// The period for syncing the number of pods in horizontal pod autoscaler.
    #[arg(long = "horizontal-pod-autoscaler-sync-period", default_value = "15s", value_parser = dur)]
    horizontal_pod_autoscaler_sync_period: Duration,
    /// The minimum change (from 1.0) in the desired-to-actual metrics ratio for the
    /// horizontal pod autoscaler to consider scaling.
    #[arg(long = "horizontal-pod-autoscaler-tolerance", default_value_t = 0.1)]
    horizontal_pod_autoscaler_tolerance: f64,
    /// The period for which autoscaler will look backwards and not scale down below
    /// any recommendation it made during that period.
    #[arg(long = "horizontal-pod-autoscaler-downscale-stabilization", default_value = "5m0s", value_parser = dur)]
    horizontal_pod_autoscaler_downscale_stabilization: Duration,
    /// The period after pod start when CPU samples might be skipped.
    #[arg(long = "horizontal-pod-autoscaler-cpu-initialization-period", default_value = "5m0s", value_parser = dur)]
    horizontal_pod_autoscaler_cpu_initialization_period: Duration,
    /// The period after pod start during which readiness changes will be treated as
    /// initial readiness.
    #[arg(long = "horizontal-pod-autoscaler-initial-readiness-delay", default_value = "30s", value_parser = dur)]
    horizontal_pod_autoscaler_initial_readiness_delay: Duration,
    /// The port on which to serve /healthz and /metrics over HTTPS (0 disables).
    #[arg(long = "secure-port", default_value_t = 10257)]
    secure_port: u16,
    /// The IP address on which to listen for the --secure-port port.
    #[arg(long = "bind-address", default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// If set, this root certificate authority will be included in service account's
    /// token secret. This must be a valid PEM-encoded CA bundle. Unset: the CA the
    /// --kubeconfig trusts (as upstream).
    #[arg(long = "root-ca-file")]
    root_ca_file: Option<PathBuf>,
    /// Filename containing a PEM-encoded private RSA or ECDSA key used to sign
    /// service account tokens (Ferrokube: ECDSA P-256 only).
    #[arg(long = "service-account-private-key-file")]
    service_account_private_key_file: Option<PathBuf>,
    /// If true, use individual service account credentials for each controller.
    #[arg(
        long = "use-service-account-credentials",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    use_service_account_credentials: bool,
    #[command(flatten)]
    csr_signing: CsrSigningFlags,
    #[command(flatten)]
    leader_election: LeaderElectionOptions,
    #[command(flatten)]
    serving: ferrokube_client::serving::SecureServingOptions,
    #[command(flatten)]
    auth: ferrokube_client::delegated::DelegatedAuthOptions,
}

/// The CSR signing controller's CAs and certificate lifetime (upstream's
/// `CSRSigningControllerOptions`).
#[derive(clap::Args, Debug, Clone)]
struct CsrSigningFlags {
    /// Filename containing a PEM-encoded X509 CA certificate used to issue
    /// cluster-scoped certificates. If specified, no more specific
    /// --cluster-signing-* flag may be specified.
    #[arg(long = "cluster-signing-cert-file")]
    cert_file: Option<PathBuf>,
    /// Filename containing a PEM-encoded RSA or ECDSA private key used to sign
    /// cluster-scoped certificates (Ferrokube: PKCS#8). If specified, no more specific
    /// --cluster-signing-* flag may be specified.
    #[arg(long = "cluster-signing-key-file")]
    key_file: Option<PathBuf>,
    /// CA certificate for the kubernetes.io/kubelet-serving signer.
    #[arg(long = "cluster-signing-kubelet-serving-cert-file")]
    kubelet_serving_cert_file: Option<PathBuf>,
    /// CA key for the kubernetes.io/kubelet-serving signer.
    #[arg(long = "cluster-signing-kubelet-serving-key-file")]
    kubelet_serving_key_file: Option<PathBuf>,
    /// CA certificate for the kubernetes.io/kube-apiserver-client-kubelet signer.
    #[arg(long = "cluster-signing-kubelet-client-cert-file")]
    kubelet_client_cert_file: Option<PathBuf>,
    /// CA key for the kubernetes.io/kube-apiserver-client-kubelet signer.
    #[arg(long = "cluster-signing-kubelet-client-key-file")]
    kubelet_client_key_file: Option<PathBuf>,
    /// CA certificate for the kubernetes.io/kube-apiserver-client signer.
    #[arg(long = "cluster-signing-kube-apiserver-client-cert-file")]
    kube_apiserver_client_cert_file: Option<PathBuf>,
    /// CA key for the kubernetes.io/kube-apiserver-client signer.
    #[arg(long = "cluster-signing-kube-apiserver-client-key-file")]
    kube_apiserver_client_key_file: Option<PathBuf>,
    /// CA certificate for the kubernetes.io/legacy-unknown signer.
    #[arg(long = "cluster-signing-legacy-unknown-cert-file")]
    legacy_unknown_cert_file: Option<PathBuf>,
    /// CA key for the kubernetes.io/legacy-unknown signer.
    #[arg(long = "cluster-signing-legacy-unknown-key-file")]
    legacy_unknown_key_file: Option<PathBuf>,
    /// The max length of duration signed certificates will be given. Individual
    /// CSRs may request shorter certs by setting spec.expirationSeconds.
    #[arg(long = "cluster-signing-duration", default_value = "8760h0m0s", value_parser = dur)]
    duration: Duration,
}

impl CsrSigningFlags {
    /// Upstream's `getKubeletServingSignerFiles` and friends: each signer's
    /// (cert, key) files, from its own flags or else the cluster-wide pair; both
    /// kinds at once, or half a pair, is an error.
    fn signer_files(&self) -> anyhow::Result<Vec<(&'static str, PathBuf, PathBuf)>> {
        use ferrokube_controllers::csr::{
            KUBE_APISERVER_CLIENT, KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING, LEGACY_UNKNOWN,
        };
        let specific = [
            (
                KUBELET_SERVING,
                "kubelet-serving",
                &self.kubelet_serving_cert_file,
                &self.kubelet_serving_key_file,
            ),
            (
                KUBE_APISERVER_CLIENT_KUBELET,
                "kubelet-client",
                &self.kubelet_client_cert_file,
                &self.kubelet_client_key_file,
            ),
            (
                KUBE_APISERVER_CLIENT,
                "kube-apiserver-client",
                &self.kube_apiserver_client_cert_file,
                &self.kube_apiserver_client_key_file,
            ),
            (
                LEGACY_UNKNOWN,
                "legacy-unknown",
                &self.legacy_unknown_cert_file,
                &self.legacy_unknown_key_file,
            ),
        ];
        let any_specific = specific
            .iter()
            .any(|(_, _, c, k)| c.is_some() || k.is_some());
        let pair = |flag: &str, cert: &Option<PathBuf>, key: &Option<PathBuf>| match (cert, key) {
            (Some(c), Some(k)) => Ok(Some((c.clone(), k.clone()))),
            (None, None) => Ok(None),
            _ => Err(anyhow::anyhow!(
                "--cluster-signing-{flag}cert-file and --cluster-signing-{flag}key-file must be set together"
            )),
        };
        let default = pair("", &self.cert_file, &self.key_file)?;
        if default.is_some() && any_specific {
            anyhow::bail!(
                "cannot specify --cluster-signing-{{cert,key}}-file and other --cluster-signing-*-file flags at the same time"
            );
        }
        let mut files = Vec::new();
        for (signer, flag, cert, key) in specific {
            let chosen = match &default {
                Some(d) => Some(d.clone()),
                None => pair(&format!("{flag}-"), cert, key)?,
            };
            if let Some((c, k)) = chosen {
                files.push((signer, c, k));
            }
        }
        Ok(files)
    }

    /// Reads every signer's CA files.
    fn config(&self) -> anyhow::Result<CsrSigningConfig> {
        let mut signers = BTreeMap::new();
        for (signer, cert, key) in self.signer_files()? {
            let read = |p: &PathBuf| {
                std::fs::read_to_string(p)
                    .with_context(|| format!("reading {} (signer {signer})", p.display()))
            };
            signers.insert(
                signer.to_string(),
                SignerCa {
                    cert_pem: read(&cert)?,
                    key_pem: read(&key)?,
                },
            );
        }
        Ok(CsrSigningConfig {
            signers,
            duration: self.duration,
        })
    }
}

impl Options {
    fn manager_config(&self) -> ManagerConfig {
        ManagerConfig {
            controllers: self.controllers.clone(),
            concurrent_deployment_syncs: self.concurrent_deployment_syncs,
            concurrent_replicaset_syncs: self.concurrent_replicaset_syncs,
            concurrent_rc_syncs: self.concurrent_rc_syncs,
            concurrent_endpoint_syncs: self.concurrent_endpoint_syncs,
            concurrent_job_syncs: self.concurrent_job_syncs,
            concurrent_cron_job_syncs: self.concurrent_cron_job_syncs,
            concurrent_daemonset_syncs: self.concurrent_daemonset_syncs,
            concurrent_statefulset_syncs: self.concurrent_statefulset_syncs,
            concurrent_service_endpoint_syncs: self.concurrent_service_endpoint_syncs,
            concurrent_gc_syncs: self.concurrent_gc_syncs,
            concurrent_namespace_syncs: self.concurrent_namespace_syncs,
            concurrent_serviceaccount_syncs: self.concurrent_serviceaccount_syncs,
            terminated_pod_gc_threshold: self.terminated_pod_gc_threshold.max(0) as usize,
            node_lifecycle: NodeLifecycleConfig {
                grace_period: self.node_monitor_grace_period,
                monitor_period: self.node_monitor_period,
                startup_grace_period: self.node_startup_grace_period,
                eviction_rate: self.node_eviction_rate,
                secondary_eviction_rate: self.secondary_node_eviction_rate,
                large_cluster_threshold: self.large_cluster_size_threshold,
                unhealthy_zone_threshold: self.unhealthy_zone_threshold,
            },
            node_ipam: NodeIpamConfig {
                allocate_node_cidrs: self.allocate_node_cidrs,
                cluster_cidr: self.cluster_cidr,
                node_cidr_mask_size: self.node_cidr_mask_size,
                service_cidr: self.service_cluster_ip_range,
            },
            informer_sync_timeout: Duration::from_secs(120),
            root_ca: None,
            // The kubeconfig, once loaded.
            connection: None,
            use_service_account_credentials: self.use_service_account_credentials,
            client_limits: Some(ClientLimits {
                qps: self.kube_api_qps,
                burst: self.kube_api_burst,
            }),
            service_account_private_key: None,
            csr_signing: CsrSigningConfig::default(),
            concurrent_horizontal_pod_autoscaler_syncs: self
                .concurrent_horizontal_pod_autoscaler_syncs,
            concurrent_ephemeralvolume_syncs: self.concurrent_ephemeralvolume_syncs,
            hpa: HpaConfig {
                sync_period: self.horizontal_pod_autoscaler_sync_period,
                tolerance: self.horizontal_pod_autoscaler_tolerance,
                downscale_stabilization: self.horizontal_pod_autoscaler_downscale_stabilization,
                cpu_initialization_period: self.horizontal_pod_autoscaler_cpu_initialization_period,
                initial_readiness_delay: self.horizontal_pod_autoscaler_initial_readiness_delay,
            },
            pv_claim_binder_sync_period: self.pvclaimbinder_sync_period,
            enable_hostpath_provisioner: self.enable_hostpath_provisioner,
            legacy_service_account_token_clean_up_period: self
                .legacy_service_account_token_clean_up_period,
        }
    }
}

async fn client_config(kubeconfig: Option<&PathBuf>) -> anyhow::Result<kube::Config> {
    let cfg = match kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)
                .with_context(|| format!("reading {}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(cfg)
}

/// What the controller manager's `--secure-port` answers: health once running, and the
/// metrics the controllers last rendered.
fn health_responder(metrics: Shared) -> ferrokube_client::serving::Respond {
    Arc::new(move |path| match path {
        "/healthz" | "/livez" | "/readyz" => (200, "ok".to_string()),
        "/metrics" => {
            let mut page = metrics
                .lock()
                .map(|m| m.clone().unwrap_or_default())
                .unwrap_or_default();
            ferrokube_component_base::metrics::process::write_process_metrics(&mut page);
            ferrokube_client::metrics::write_rest_client_metrics(&mut page);
            ferrokube_client::leaderelection::write_leader_election_metrics(&mut page);
            (200, page)
        }
        _ => (404, "404 page not found".to_string()),
    })
}

async fn run_controllers(
    client: kube::Client,
    cfg: ManagerConfig,
    metrics: Shared,
    cancel: CancellationToken,
) {
    let manager = match Manager::start(client, &cfg, cancel.clone()).await {
        Ok(m) => m,
        Err(e) => {
            tracing::error!(error = %e, "starting controllers failed");
            cancel.cancel();
            return;
        }
    };
    tracing::info!(controllers = ?manager.enabled, "controllers started");
    let manager = Arc::new(tokio::sync::Mutex::new(Some(manager)));
    let m2 = manager.clone();
    let updater = tokio::spawn(async move {
        loop {
            if let Some(m) = m2.lock().await.as_ref()
                && let Ok(mut slot) = metrics.lock()
            {
                *slot = Some(m.metrics());
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    });
    cancel.cancelled().await;
    updater.abort();
    if let Some(m) = manager.lock().await.take() {
        m.wait().await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let opts = Options::parse();
    let _feature_gates = opts
        .component
        .init(&Default::default(), &[])
        .map_err(anyhow::Error::msg)?;
    if let Some(note) = opts.content_type.note() {
        tracing::info!("{note}");
    }
    tracing::info!(cluster_name = %opts.cluster_name, "starting kube-controller-manager");
    let mut cfg = opts.manager_config();
    cfg.node_ipam.validate().map_err(anyhow::Error::msg)?;
    if let Some(path) = &opts.root_ca_file {
        let pem = std::fs::read_to_string(path)
            .with_context(|| format!("reading --root-ca-file {}", path.display()))?;
        anyhow::ensure!(
            pem.contains("-----BEGIN CERTIFICATE-----"),
            "--root-ca-file {} holds no PEM certificate",
            path.display()
        );
        cfg.root_ca = Some(pem);
    }
    if let Some(path) = &opts.service_account_private_key_file {
        let pem = std::fs::read_to_string(path).with_context(|| {
            format!(
                "reading --service-account-private-key-file {}",
                path.display()
            )
        })?;
        // Refuse a key the signer cannot use now rather than at the first Secret.
        ferrokube_controllers::serviceaccounttoken::check_private_key(&pem)
            .with_context(|| format!("--service-account-private-key-file {}", path.display()))?;
        cfg.service_account_private_key = Some(pem);
    }
    cfg.csr_signing = opts.csr_signing.config()?;
    // Refuse a CA that does not load now rather than once elected.
    cfg.csr_signing.check()?;
    ferrokube_controllers::manager::enabled_controllers(&cfg.controllers)?;
    let config = client_config(opts.kubeconfig.as_ref()).await?;
    if cfg.root_ca.is_none() {
        // As upstream: without --root-ca-file, the CA the manager's kubeconfig trusts.
        cfg.root_ca = ferrokube_controllers::rootcacertpublisher::bundle_of(&config);
    }
    // The manager's own client (events, ServiceAccounts and their tokens); leader
    // election has one of its own, so that renewals never wait behind the rest.
    let (qps, burst) = (opts.kube_api_qps, opts.kube_api_burst);
    // Each names itself in the User-Agent as upstream's clients do.
    let named = |name: &str| {
        let mut config = config.clone();
        ferrokube_client::config::add_user_agent(&mut config, name);
        client_with_limits(config, qps, burst)
    };
    let client = named("kube-controller-manager")?;
    let election_client = named("leader-election")?;
    cfg.connection = Some(config);
    let cancel = CancellationToken::new();
    {
        let c = cancel.clone();
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            c.cancel();
        });
    }
    let metrics: Shared = Arc::new(std::sync::Mutex::new(None));
    if opts.secure_port != 0 {
        let addr = SocketAddr::new(opts.bind_address, opts.secure_port);
        let (tls, gate) = ferrokube_client::serving::endpoint(
            &opts.serving,
            &opts.auth,
            "kube-controller-manager",
            opts.bind_address,
            // Upstream's TolerateInClusterLookupFailure for this component.
            ferrokube_client::extension_authentication::LookupFailure::Fatal,
        )
        .await?;
        let serving = ferrokube_client::serving::serve(
            addr,
            tls,
            health_responder(metrics.clone()),
            Some(gate),
            cancel.clone(),
        );
        tokio::spawn(async move {
            if let Err(e) = serving.await {
                tracing::error!(error = %e, "health server failed");
            }
        });
    }
    if opts.leader_election.leader_elect {
        let elector = Arc::new(opts.leader_election.build(
            election_client,
            "kube-controller-manager",
            default_identity(),
        )?);
        let (c2, m2) = (client.clone(), metrics.clone());
        elector
            .run(cancel.clone(), move |leading| {
                run_controllers(c2, cfg, m2, leading)
            })
            .await?;
    } else {
        run_controllers(client, cfg, metrics, cancel.clone()).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_flags_default_as_upstream() {
        let opts = Options::try_parse_from(["kube-controller-manager"]).unwrap();
        assert_eq!((opts.kube_api_qps, opts.kube_api_burst), (20.0, 30));
        let opts = Options::try_parse_from([
            "kube-controller-manager",
            "--kube-api-qps=100",
            "--kube-api-burst",
            "200",
        ])
        .unwrap();
        assert_eq!((opts.kube_api_qps, opts.kube_api_burst), (100.0, 200));
    }

    #[test]
    fn ephemeral_volume_syncs_default_to_upstreams_five() {
        let default = Options::try_parse_from(["kube-controller-manager"]).unwrap();
        assert_eq!(default.manager_config().concurrent_ephemeralvolume_syncs, 5);
        let two = Options::try_parse_from([
            "kube-controller-manager",
            "--concurrent-ephemeralvolume-syncs=2",
        ])
        .unwrap();
        assert_eq!(two.manager_config().concurrent_ephemeralvolume_syncs, 2);
    }

    #[test]
    fn horizontal_pod_autoscaler_flags_default_as_upstream() {
        let opts = Options::try_parse_from(["kube-controller-manager"]).unwrap();
        let cfg = opts.manager_config();
        assert_eq!(cfg.hpa, HpaConfig::default());
        assert_eq!(cfg.hpa.sync_period, Duration::from_secs(15));
        assert_eq!(cfg.hpa.downscale_stabilization, Duration::from_secs(300));
        assert_eq!(cfg.concurrent_horizontal_pod_autoscaler_syncs, 5);
        assert_eq!(cfg.pv_claim_binder_sync_period, Duration::from_secs(15));
        assert!(!cfg.enable_hostpath_provisioner);
        for on in [
            &["kube-controller-manager", "--enable-hostpath-provisioner"][..],
            &[
                "kube-controller-manager",
                "--enable-hostpath-provisioner=true",
            ],
        ] {
            assert!(
                Options::try_parse_from(on)
                    .unwrap()
                    .manager_config()
                    .enable_hostpath_provisioner
            );
        }
        let opts =
            Options::try_parse_from(["kube-controller-manager", "--pvclaimbinder-sync-period=2s"])
                .unwrap();
        assert_eq!(
            opts.manager_config().pv_claim_binder_sync_period,
            Duration::from_secs(2)
        );
        let opts = Options::try_parse_from([
            "kube-controller-manager",
            "--horizontal-pod-autoscaler-sync-period=1s",
            "--horizontal-pod-autoscaler-tolerance=0.2",
            "--horizontal-pod-autoscaler-downscale-stabilization=1m",
            "--horizontal-pod-autoscaler-cpu-initialization-period=10s",
            "--horizontal-pod-autoscaler-initial-readiness-delay=5s",
        ])
        .unwrap();
        let hpa = opts.manager_config().hpa;
        assert_eq!(hpa.sync_period, Duration::from_secs(1));
        assert_eq!(hpa.tolerance, 0.2);
        assert_eq!(hpa.downscale_stabilization, Duration::from_secs(60));
        assert_eq!(hpa.cpu_initialization_period, Duration::from_secs(10));
        assert_eq!(hpa.initial_readiness_delay, Duration::from_secs(5));
    }

    #[test]
    fn flags_are_well_formed() {
        // clap's own checks (unique names, valid defaults) of the flattened groups.
        use clap::CommandFactory;
        Options::command().debug_assert();
    }

    /// kubeadm 1.33's static pod command line, with the hard way's `--v=2`.
    #[test]
    fn kubeadm_command_line_parses() {
        let opts = Options::try_parse_from([
            "kube-controller-manager",
            "--allocate-node-cidrs=true",
            "--authentication-kubeconfig=/etc/kubernetes/controller-manager.conf",
            "--authorization-kubeconfig=/etc/kubernetes/controller-manager.conf",
            "--bind-address=127.0.0.1",
            "--client-ca-file=/etc/kubernetes/pki/ca.crt",
            "--cluster-cidr=10.244.0.0/16",
            "--cluster-name=kubernetes",
            "--cluster-signing-cert-file=/etc/kubernetes/pki/ca.crt",
            "--cluster-signing-key-file=/etc/kubernetes/pki/ca.key",
            "--controllers=*,bootstrapsigner,tokencleaner",
            "--kubeconfig=/etc/kubernetes/controller-manager.conf",
            "--leader-elect=true",
            "--requestheader-client-ca-file=/etc/kubernetes/pki/front-proxy-ca.crt",
            "--root-ca-file=/etc/kubernetes/pki/ca.crt",
            "--service-account-private-key-file=/etc/kubernetes/pki/sa.key",
            "--service-cluster-ip-range=10.96.0.0/12",
            "--use-service-account-credentials=true",
            "--v=2",
        ])
        .unwrap();
        assert_eq!(opts.cluster_name, "kubernetes");
        assert_eq!(opts.component.logging.verbosity, 2);
        assert_eq!(opts.controllers, ["*", "bootstrapsigner", "tokencleaner"]);
        assert!(opts.leader_election.leader_elect);
        assert!(opts.use_service_account_credentials);
        assert_eq!(opts.bind_address, IpAddr::from([127, 0, 0, 1]));
        let rh = &opts.auth.request_header;
        assert_eq!(
            rh.client_ca_file.as_deref(),
            Some(std::path::Path::new(
                "/etc/kubernetes/pki/front-proxy-ca.crt"
            ))
        );
        // The delegating defaults fill in the headers kubeadm leaves out.
        assert_eq!(rh.username_headers, ["x-remote-user"]);
        assert_eq!(rh.group_headers, ["x-remote-group"]);
        assert_eq!(rh.extra_headers_prefix, ["x-remote-extra-"]);
        assert_eq!(
            opts.auth.client_ca_file.as_deref(),
            Some(std::path::Path::new("/etc/kubernetes/pki/ca.crt"))
        );
        let cfg = opts.manager_config();
        assert!(cfg.node_ipam.allocate_node_cidrs);
        assert_eq!(
            cfg.node_ipam.cluster_cidr,
            Some("10.244.0.0/16".parse().unwrap())
        );
        assert_eq!(opts.csr_signing.signer_files().unwrap().len(), 4);
        // The short form, and the defaults.
        let opts = Options::try_parse_from(["kube-controller-manager", "-v", "4"]).unwrap();
        assert_eq!(
            (opts.component.logging.verbosity, opts.cluster_name.as_str()),
            (4, "kubernetes")
        );
    }

    fn files(args: &[&str]) -> anyhow::Result<Vec<(&'static str, PathBuf, PathBuf)>> {
        let opts = Options::try_parse_from(
            std::iter::once("kube-controller-manager").chain(args.iter().copied()),
        )?;
        opts.csr_signing.signer_files()
    }

    #[test]
    fn cluster_signing_flags_as_upstream() {
        // None: no signer.
        assert!(files(&[]).unwrap().is_empty());
        // The cluster-wide pair serves every signer.
        let all = files(&[
            "--cluster-signing-cert-file=/ca.crt",
            "--cluster-signing-key-file=/ca.key",
        ])
        .unwrap();
        assert_eq!(all.len(), 4);
        assert!(
            all.iter()
                .all(|(_, c, k)| c == &PathBuf::from("/ca.crt") && k == &PathBuf::from("/ca.key"))
        );
        // A per-signer pair serves its signer only.
        let one = files(&[
            "--cluster-signing-kubelet-client-cert-file=/k.crt",
            "--cluster-signing-kubelet-client-key-file=/k.key",
        ])
        .unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].0, "kubernetes.io/kube-apiserver-client-kubelet");
        // Both kinds, or half a pair: errors.
        let both = files(&[
            "--cluster-signing-cert-file=/ca.crt",
            "--cluster-signing-key-file=/ca.key",
            "--cluster-signing-kubelet-serving-cert-file=/s.crt",
        ]);
        assert!(both.unwrap_err().to_string().contains("at the same time"));
        assert!(files(&["--cluster-signing-cert-file=/ca.crt"]).is_err());
        // The duration flag takes Go durations, 8760h by default.
        let opts = Options::try_parse_from([
            "kube-controller-manager",
            "--cluster-signing-duration=1h30m",
        ])
        .unwrap();
        assert_eq!(opts.csr_signing.duration, Duration::from_secs(5400));
        let opts = Options::try_parse_from(["kube-controller-manager"]).unwrap();
        assert_eq!(opts.csr_signing.duration, Duration::from_secs(8760 * 3600));
    }
}
