//! kubelet: upstream's flags over `ferrokube-kubelet`. A `--config` KubeletConfiguration
//! file is read first; flags given on the command line override it. The result, with
//! the defaults filled in, is what the kubelet API serves on `/configz`.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{CommandFactory, FromArgMatches, Parser};
use ferrokube_client::config::{ClientLimits, client_with_limits};
use ferrokube_kubelet::auth::{AuthSettings, KubeletAuth};
use ferrokube_kubelet::eviction::EvictionSettings;
use ferrokube_kubelet::kubelet::KubeletClients;
use ferrokube_kubelet::kubeletconfig::{
    KubeletConfiguration, effective_configuration, flag_map, parse_go_duration,
};
use ferrokube_kubelet::node::{EvictionThresholds, Reserved, parse_labels, parse_taints};
use ferrokube_kubelet::server::Endpoints;
use ferrokube_kubelet::{CriClient, HostDns, Kubelet, KubeletConfig, NodeConfig, RuntimeManager};
use k8s_openapi::api::core::v1::Taint;

#[derive(Debug, Parser)]
#[command(
    name = "kubelet",
    about = "The node agent: runs the pods bound to this node on a CRI runtime."
)]
struct Opts {
    /// Path to a kubeconfig file with the API server's location and credentials.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// A kubeconfig whose (bootstrap token) credentials request a client certificate
    /// when --kubeconfig has no valid one; --kubeconfig is then written to use it.
    #[arg(long = "bootstrap-kubeconfig")]
    bootstrap_kubeconfig: Option<PathBuf>,
    /// Where the client certificates and keys of --bootstrap-kubeconfig's bootstrap and
    /// of --rotate-certificates are kept.
    #[arg(long = "cert-dir", default_value = ferrokube_kubelet::bootstrap::DEFAULT_CERT_DIR)]
    cert_dir: PathBuf,
    /// Renew the client certificate through the certificates API before it expires
    /// (rotateCertificates) [default: false].
    #[arg(
        long = "rotate-certificates",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    rotate_certificates: Option<bool>,
    /// A KubeletConfiguration file (kubelet.config.k8s.io/v1beta1); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The CRI runtime endpoint [default: unix:///run/containerd/containerd.sock].
    #[arg(long = "container-runtime-endpoint")]
    container_runtime_endpoint: Option<String>,
    /// The CRI image endpoint (must equal the runtime endpoint today).
    #[arg(long = "image-service-endpoint")]
    image_service_endpoint: Option<String>,
    /// Use this name instead of the hostname as the node's name.
    #[arg(long = "hostname-override")]
    hostname_override: Option<String>,
    /// The node's IP address(es), comma separated (default: the default route's source).
    #[arg(long = "node-ip")]
    node_ip: Option<String>,
    /// Labels to add when registering the node (key=value,...).
    #[arg(long = "node-labels", default_value = "")]
    node_labels: String,
    /// Taints to register the node with (key=value:Effect,...).
    #[arg(long = "register-with-taints")]
    register_with_taints: Option<String>,
    /// Register the node with the apiserver (else it must exist already; the kubelet
    /// then only keeps its status). Default true, or the config file's registerNode.
    #[arg(long = "register-node", num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    register_node: Option<bool>,
    /// DNS server addresses for ClusterFirst pods, comma separated.
    #[arg(long = "cluster-dns")]
    cluster_dns: Option<String>,
    /// The cluster's DNS domain.
    #[arg(long = "cluster-domain")]
    cluster_domain: Option<String>,
    /// The host resolv.conf for pods with dnsPolicy Default ("" disables).
    #[arg(long = "resolv-conf")]
    resolv_conf: Option<String>,
    /// The kubelet's state directory.
    #[arg(long = "root-dir", default_value = "/var/lib/kubelet")]
    root_dir: PathBuf,
    /// Static pod manifests: a directory (or one file) of Pod/PodList YAML or JSON, run
    /// without the API and shown there as mirror pods.
    #[arg(long = "pod-manifest-path")]
    pod_manifest_path: Option<String>,
    /// Resources reserved for Kubernetes daemons (cpu=..,memory=..,ephemeral-storage=..).
    #[arg(long = "kube-reserved")]
    kube_reserved: Option<String>,
    /// Resources reserved for the OS (cpu=..,memory=..,ephemeral-storage=..).
    #[arg(long = "system-reserved")]
    system_reserved: Option<String>,
    /// What the kubelet holds to its share [default: pods]: pods (kubepods gets the
    /// node's allocatable), system-reserved and kube-reserved (their cgroups get the
    /// reservation; -compressible: CPU only), or none.
    #[arg(long = "enforce-node-allocatable", value_delimiter = ',')]
    enforce_node_allocatable: Option<Vec<String>>,
    /// The existing cgroup system-reserved enforcement limits (e.g. /system.slice).
    #[arg(long = "system-reserved-cgroup")]
    system_reserved_cgroup: Option<String>,
    /// The existing cgroup kube-reserved enforcement limits.
    #[arg(long = "kube-reserved-cgroup")]
    kube_reserved_cgroup: Option<String>,
    /// Hard eviction thresholds [default: memory.available<100Mi,nodefs.available<10%,
    /// imagefs.available<15%,nodefs.inodesFree<5%]; a 0% threshold disables its signal.
    #[arg(long = "eviction-hard")]
    eviction_hard: Option<String>,
    /// Soft eviction thresholds (signal<value,...); each needs a grace period.
    #[arg(long = "eviction-soft")]
    eviction_soft: Option<String>,
    /// How long each soft threshold must hold before it evicts (signal=1m30s,...).
    #[arg(long = "eviction-soft-grace-period")]
    eviction_soft_grace_period: Option<String>,
    /// How much above its threshold a met signal must get back (signal=500Mi,...).
    #[arg(long = "eviction-minimum-reclaim")]
    eviction_minimum_reclaim: Option<String>,
    /// How long a pressure condition stays after its threshold stops being met [5m0s].
    #[arg(long = "eviction-pressure-transition-period")]
    eviction_pressure_transition_period: Option<String>,
    /// A container log file over this size is rotated [default: 10Mi].
    #[arg(long = "container-log-max-size")]
    container_log_max_size: Option<String>,
    /// How many log files a container keeps, the live one included [default: 5].
    #[arg(long = "container-log-max-files")]
    container_log_max_files: Option<usize>,
    /// The most grace (seconds) a pod evicted for a soft threshold gets [0: its own].
    #[arg(long = "eviction-max-pod-grace-period", allow_hyphen_values = true)]
    eviction_max_pod_grace_period: Option<i64>,
    /// The cgroup driver (only cgroupfs is supported).
    #[arg(long = "cgroup-driver")]
    cgroup_driver: Option<String>,
    /// Maximum number of pods on this node.
    #[arg(long = "max-pods")]
    max_pods: Option<i64>,
    /// QPS to use while talking with kubernetes apiserver [default: 50].
    #[arg(long = "kube-api-qps", allow_negative_numbers = true)]
    kube_api_qps: Option<i32>,
    /// Burst to use while talking with kubernetes apiserver [default: 100].
    #[arg(long = "kube-api-burst", allow_negative_numbers = true)]
    kube_api_burst: Option<i32>,
    /// Events the kubelet may create a second (0: client-go's default 5) [default: 50].
    #[arg(long = "event-qps", allow_negative_numbers = true)]
    event_qps: Option<i32>,
    /// How many events may be created at once, above --event-qps [default: 100].
    #[arg(long = "event-burst", allow_negative_numbers = true)]
    event_burst: Option<i32>,
    /// How often the node status is computed (Go duration).
    #[arg(long = "node-status-update-frequency")]
    node_status_update_frequency: Option<String>,
    /// The HTTPS kubelet API port (logs, exec, attach, port-forward; 0 disables), advertised
    /// in the node's daemonEndpoints [default: 10250].
    #[arg(long = "port")]
    port: Option<i32>,
    /// The serving certificate of --port (PEM, chain allowed) (tlsCertFile); without it
    /// a self-signed one is made in <root-dir>/pki.
    #[arg(long = "tls-cert-file")]
    tls_cert_file: Option<PathBuf>,
    /// The key of --tls-cert-file (tlsPrivateKeyFile).
    #[arg(long = "tls-private-key-file")]
    tls_private_key_file: Option<PathBuf>,
    /// Minimum TLS version of --port (tlsMinVersion): VersionTLS10, VersionTLS11,
    /// VersionTLS12, VersionTLS13 (TLS 1.0 and 1.1 are never served).
    #[arg(long = "tls-min-version")]
    tls_min_version: Option<String>,
    /// Comma-separated cipher suites of --port, Go's names (tlsCipherSuites); unset:
    /// rustls's defaults.
    #[arg(long = "tls-cipher-suites", value_delimiter = ',')]
    tls_cipher_suites: Option<Vec<String>>,
    /// The port of the plain-HTTP /healthz endpoint (0 disables).
    #[arg(long = "healthz-port")]
    healthz_port: Option<u16>,
    /// The address of the /healthz endpoint.
    #[arg(long = "healthz-bind-address")]
    healthz_bind_address: Option<IpAddr>,
    /// The read-only port (/healthz, /pods) without authentication (0 disables).
    #[arg(long = "read-only-port")]
    read_only_port: Option<u16>,
    /// The address of the HTTPS port and the read-only port [default: 0.0.0.0].
    #[arg(long = "address")]
    address: Option<IpAddr>,
    /// The sandbox image (containerd's `sandbox_image` runs it); image GC never removes
    /// it [default: registry.k8s.io/pause:3.10].
    #[arg(long = "pod-infra-container-image")]
    pod_infra_container_image: Option<String>,
    /// Image GC runs when the image filesystem's usage reaches this percentage (100
    /// disables it) [default: 85].
    #[arg(long = "image-gc-high-threshold")]
    image_gc_high_threshold: Option<u8>,
    /// Image GC frees space down to this percentage [default: 80].
    #[arg(long = "image-gc-low-threshold")]
    image_gc_low_threshold: Option<u8>,
    /// Images younger than this (Go duration) are never collected [default: 2m].
    #[arg(long = "minimum-image-ttl-duration")]
    minimum_image_ttl_duration: Option<String>,
    /// Dead containers younger than this (Go duration) are kept [default: 0s].
    #[arg(long = "minimum-container-ttl-duration")]
    minimum_container_ttl_duration: Option<String>,
    /// Dead instances kept per container (negative: no limit) [default: 1].
    #[arg(
        long = "maximum-dead-containers-per-container",
        allow_hyphen_values = true
    )]
    maximum_dead_containers_per_container: Option<i32>,
    /// Dead containers kept on the node (negative: no limit) [default: -1].
    #[arg(long = "maximum-dead-containers", allow_hyphen_values = true)]
    maximum_dead_containers: Option<i32>,
    /// A client of --port presenting a certificate signed by this CA is authenticated
    /// as its CommonName, with its Organizations as groups
    /// (authentication.x509.clientCAFile).
    #[arg(long = "client-ca-file")]
    client_ca_file: Option<PathBuf>,
    /// Requests to --port that no other method authenticates are system:anonymous
    /// (authentication.anonymous.enabled) [default: true; false with --config].
    #[arg(long = "anonymous-auth", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    anonymous_auth: Option<bool>,
    /// Bearer tokens to --port are reviewed with the apiserver's TokenReview API
    /// (authentication.webhook.enabled) [default: false; true with --config].
    #[arg(
        long = "authentication-token-webhook",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    authentication_token_webhook: Option<bool>,
    /// How long token reviews are cached [default: 2m0s].
    #[arg(long = "authentication-token-webhook-cache-ttl")]
    authentication_token_webhook_cache_ttl: Option<String>,
    /// AlwaysAllow or Webhook (SubjectAccessReviews of nodes/<subresource> to the
    /// apiserver) (authorization.mode) [default: AlwaysAllow; Webhook with --config].
    #[arg(long = "authorization-mode")]
    authorization_mode: Option<String>,
    /// How long allowed reviews are cached [default: 5m0s].
    #[arg(long = "authorization-webhook-cache-authorized-ttl")]
    authorization_webhook_cache_authorized_ttl: Option<String>,
    /// How long denied reviews are cached [default: 30s].
    #[arg(long = "authorization-webhook-cache-unauthorized-ttl")]
    authorization_webhook_cache_unauthorized_ttl: Option<String>,
    /// Accepted for compatibility: swap is not checked.
    #[arg(long = "fail-swap-on")]
    fail_swap_on: Option<bool>,
    #[command(flatten)]
    component: ferrokube_component_base::ComponentFlags,
    #[command(flatten)]
    content_type: ferrokube_component_base::ClientContentTypeFlag,
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let matches = Opts::command().get_matches();
    let mut opts = Opts::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let file = match &opts.config {
        Some(p) => KubeletConfiguration::from_yaml(
            &std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
        )?,
        None => KubeletConfiguration::default(),
    };
    // The file's featureGates and logging, with the flags over them, as upstream
    // merges them.
    let feature_gates = opts
        .component
        .init_with_config(&matches, &file.logging, &file.feature_gates, &[])
        .map_err(|e| anyhow::anyhow!("logging, featureGates, flags: {e}"))?;
    if let Some(note) = opts.content_type.note() {
        tracing::info!("{note}");
    }
    let auth_settings = auth_settings(&opts, opts.config.is_some().then_some(&file))?;

    let driver = opts
        .cgroup_driver
        .clone()
        .or(file.cgroup_driver.clone())
        .unwrap_or_else(|| "cgroupfs".into());
    if driver != "cgroupfs" {
        bail!("--cgroup-driver={driver}: only cgroupfs is supported");
    }
    let endpoint = opts
        .container_runtime_endpoint
        .clone()
        .or(file.container_runtime_endpoint.clone())
        .unwrap_or_else(|| ferrokube_kubelet::cri::DEFAULT_ENDPOINT.into());
    let image_endpoint = opts
        .image_service_endpoint
        .clone()
        .or(file.image_service_endpoint.clone())
        .filter(|e| !e.is_empty());
    if let Some(ie) = image_endpoint.as_ref().filter(|ie| **ie != endpoint) {
        bail!("--image-service-endpoint={ie}: a separate image service is not supported yet");
    }

    let hostname = ferrokube_kubelet::machine::hostname();
    let node_name = opts
        .hostname_override
        .clone()
        .map(|h| h.trim().to_lowercase())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| hostname.clone());
    let node_ips = match &opts.node_ip {
        Some(s) => {
            let ips = split_list(s);
            for ip in &ips {
                ip.parse::<IpAddr>()
                    .with_context(|| format!("--node-ip: invalid address {ip:?}"))?;
            }
            ips
        }
        None => vec![ferrokube_kubelet::machine::default_node_ip().to_string()],
    };

    let mut cfg = KubeletConfig::new(node_name.clone());
    cfg.hostname = node_name.clone();
    cfg.node_ips = node_ips.clone();
    cfg.node_labels = parse_labels(&opts.node_labels)?;
    cfg.register_node = opts.register_node.or(file.register_node).unwrap_or(true);
    cfg.register_with_taints = match (&opts.register_with_taints, &file.register_with_taints) {
        (Some(s), _) => parse_taints(s)?,
        (None, Some(ts)) => ts
            .iter()
            .map(|t| Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
                time_added: None,
            })
            .collect(),
        (None, None) => vec![],
    };
    cfg.root_dir = opts.root_dir.clone();
    cfg.kube_reserved = match (&opts.kube_reserved, &file.kube_reserved) {
        (Some(s), _) => Reserved::parse("--kube-reserved", s)?,
        (None, Some(m)) => Reserved::from_map("kubeReserved", m)?,
        _ => Reserved::default(),
    };
    cfg.system_reserved = match (&opts.system_reserved, &file.system_reserved) {
        (Some(s), _) => Reserved::parse("--system-reserved", s)?,
        (None, Some(m)) => Reserved::from_map("systemReserved", m)?,
        _ => Reserved::default(),
    };
    cfg.enforce_node_allocatable = ferrokube_kubelet::node_allocatable::Enforcement::parse(
        opts.enforce_node_allocatable
            .as_deref()
            .or(file.enforce_node_allocatable.as_deref())
            .unwrap_or(&[ferrokube_kubelet::node_allocatable::PODS.to_owned()]),
        opts.system_reserved_cgroup
            .as_deref()
            .or(file.system_reserved_cgroup.as_deref())
            .unwrap_or_default(),
        opts.kube_reserved_cgroup
            .as_deref()
            .or(file.kube_reserved_cgroup.as_deref())
            .unwrap_or_default(),
    )
    .map_err(anyhow::Error::msg)?;
    if let Some(s) = &opts.eviction_hard {
        cfg.eviction_hard = EvictionThresholds::parse(s)?;
    } else if let Some(m) = &file.eviction_hard {
        cfg.eviction_hard = EvictionThresholds::from_map(m)?;
    }
    if let Some(s) = &opts.eviction_soft {
        cfg.eviction.soft = EvictionThresholds::parse(s)?;
    } else if let Some(m) = &file.eviction_soft {
        cfg.eviction.soft = EvictionThresholds::from_map(m)?;
    }
    let go_duration = |d: &str| parse_go_duration(d).ok();
    if let Some(s) = &opts.eviction_soft_grace_period {
        cfg.eviction.soft_grace = EvictionSettings::parse_soft_grace(s, go_duration)?;
    } else if let Some(m) = &file.eviction_soft_grace_period {
        cfg.eviction.soft_grace = EvictionSettings::parse_soft_grace(&map_flag(m), go_duration)?;
    }
    if let Some(s) = &opts.eviction_minimum_reclaim {
        cfg.eviction.min_reclaim = EvictionSettings::parse_min_reclaim(s)?;
    } else if let Some(m) = &file.eviction_minimum_reclaim {
        cfg.eviction.min_reclaim = EvictionSettings::parse_min_reclaim(&map_flag(m))?;
    }
    if let Some(d) = opts
        .eviction_pressure_transition_period
        .as_ref()
        .or(file.eviction_pressure_transition_period.as_ref())
    {
        cfg.eviction.pressure_transition = parse_go_duration(d)?;
    }
    if let Some(g) = opts
        .eviction_max_pod_grace_period
        .or(file.eviction_max_pod_grace_period)
    {
        cfg.eviction.max_pod_grace_seconds = g;
    }
    cfg.eviction.validate()?;
    if let Some(s) = opts
        .container_log_max_size
        .as_ref()
        .or(file.container_log_max_size.as_ref())
    {
        cfg.container_log.max_size = ferrokube_kubelet::quantity::value(
            &k8s_openapi::apimachinery::pkg::api::resource::Quantity(s.clone()),
        )
        .filter(|v| *v > 0)
        .with_context(|| format!("invalid --container-log-max-size {s:?}"))?;
    }
    if let Some(n) = opts
        .container_log_max_files
        .or(file.container_log_max_files)
    {
        if n < 2 {
            bail!("--container-log-max-files must be at least 2, got {n}");
        }
        cfg.container_log.max_files = n;
    }
    if let Some(d) = &file.container_log_monitor_interval {
        cfg.container_log.monitor_interval = parse_go_duration(d)?;
    }
    let limits = &mut cfg.client_limits;
    for (flag, field, value) in [
        (
            opts.kube_api_qps,
            file.kube_api_qps,
            &mut limits.kube_api_qps,
        ),
        (
            opts.kube_api_burst,
            file.kube_api_burst,
            &mut limits.kube_api_burst,
        ),
        (
            opts.event_qps,
            file.event_record_qps,
            &mut limits.event_record_qps,
        ),
        (opts.event_burst, file.event_burst, &mut limits.event_burst),
    ] {
        if let Some(v) = flag.or(field) {
            *value = v;
        }
    }
    limits.validate().map_err(anyhow::Error::msg)?;
    if let Some(m) = opts.max_pods.or(file.max_pods) {
        cfg.max_pods = m;
    }
    if let Some(d) = opts
        .node_status_update_frequency
        .as_ref()
        .or(file.node_status_update_frequency.as_ref())
    {
        cfg.node_status_update_frequency = parse_go_duration(d)?;
    }
    if let Some(d) = &file.sync_frequency {
        cfg.sync_frequency = parse_go_duration(d)?;
    }
    cfg.static_pod_path = opts
        .pod_manifest_path
        .clone()
        .or(file.static_pod_path.clone())
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    if let Some(p) = opts
        .image_gc_high_threshold
        .or(file.image_gc_high_threshold_percent)
    {
        cfg.image_gc.high_threshold_percent = p;
    }
    if let Some(p) = opts
        .image_gc_low_threshold
        .or(file.image_gc_low_threshold_percent)
    {
        cfg.image_gc.low_threshold_percent = p;
    }
    if let Some(d) = opts
        .minimum_image_ttl_duration
        .as_ref()
        .or(file.image_minimum_gc_age.as_ref())
    {
        cfg.image_gc.min_age = parse_go_duration(d)?;
    }
    cfg.image_gc.validate().map_err(anyhow::Error::msg)?;
    if let Some(d) = &opts.minimum_container_ttl_duration {
        cfg.container_gc.min_age = parse_go_duration(d)?;
    }
    if let Some(n) = opts.maximum_dead_containers_per_container {
        cfg.container_gc.max_per_pod_container = n;
    }
    if let Some(n) = opts.maximum_dead_containers {
        cfg.container_gc.max_containers = n;
    }
    if let Some(i) = opts
        .pod_infra_container_image
        .clone()
        .filter(|i| !i.is_empty())
    {
        cfg.sandbox_image = i;
    }
    if let Some(d) = &file.file_check_frequency {
        cfg.file_check_frequency = parse_go_duration(d)?;
    }
    if let Some(l) = file.node_lease_duration_seconds {
        cfg.node_lease_duration_seconds = l;
    }
    cfg.kubelet_port = opts.port.or(file.port).unwrap_or(10250);
    let cfg_port = cfg.kubelet_port;
    let node_ips_for_cert = node_ips.clone();

    let mut node = NodeConfig::new(node_name.clone());
    node.node_ips = node_ips;
    if let Some(d) = opts.cluster_dns.as_ref() {
        node.cluster_dns = split_list(d);
    } else if let Some(d) = &file.cluster_dns {
        node.cluster_dns = d.clone();
    }
    if let Some(d) = opts.cluster_domain.clone().or(file.cluster_domain.clone()) {
        node.cluster_domain = d;
    }
    let resolv = opts
        .resolv_conf
        .clone()
        .or(file.resolv_conf.clone())
        .unwrap_or_else(|| "/etc/resolv.conf".into());
    node.host_dns = if resolv.is_empty() {
        None
    } else {
        Some(HostDns::parse(
            &std::fs::read_to_string(&resolv).unwrap_or_default(),
        ))
    };
    if let Some(r) = &file.cgroup_root {
        node.cgroup_root = format!("{}/kubepods", r.trim_end_matches('/'));
    }
    if let Some(d) = &file.pod_logs_dir {
        node.pod_logs_dir = d.into();
    }
    if let Ok(m) = ferrokube_kubelet::machine::read_machine_info(std::path::Path::new("/")) {
        node.memory_capacity = m.memory_bytes;
        node.cpu_capacity_milli = m.num_cpus * 1000;
    }
    if file.enable_system_log_handler == Some(false) {
        cfg.system_log_dir = None;
    }

    // The servers' settings: flags, then the file, then the defaults.
    let healthz_port = opts.healthz_port.or(file.healthz_port).unwrap_or(10248);
    let healthz_bind = opts
        .healthz_bind_address
        .or(file
            .healthz_bind_address
            .as_deref()
            .and_then(|a| a.parse().ok()))
        .unwrap_or(IpAddr::from([127, 0, 0, 1]));
    let read_only_port = opts.read_only_port.or(file.read_only_port).unwrap_or(0);
    let address = match (opts.address, file.address.as_deref()) {
        (Some(a), _) => a,
        (None, Some(a)) if !a.is_empty() => a
            .parse()
            .with_context(|| format!("address {a:?} in the config file"))?,
        _ => IpAddr::from([0, 0, 0, 0]),
    };
    // The config file's paths are relative to the file.
    let config_dir = opts.config.as_deref().and_then(Path::parent);
    let from_file = |p: &Option<String>| {
        p.as_deref()
            .filter(|p| !p.is_empty())
            .map(|p| match config_dir {
                Some(dir) if Path::new(p).is_relative() => dir.join(p),
                _ => PathBuf::from(p),
            })
    };
    let server_tls_bootstrap = file.server_tls_bootstrap.unwrap_or(false);
    let tls_files = if cfg_port == 0 {
        None
    } else {
        let cert = opts
            .tls_cert_file
            .clone()
            .or_else(|| from_file(&file.tls_cert_file));
        let key = opts
            .tls_private_key_file
            .clone()
            .or_else(|| from_file(&file.tls_private_key_file));
        match (cert, key) {
            (Some(c), Some(k)) => {
                if server_tls_bootstrap {
                    tracing::info!("tlsCertFile is set: serverTLSBootstrap is not used");
                }
                Some((c, k))
            }
            // Upstream makes no self-signed pair when the certificates API will serve one.
            (None, None) if server_tls_bootstrap => None,
            (None, None) => {
                let ips: Vec<IpAddr> = node_ips_for_cert
                    .iter()
                    .filter_map(|i| i.parse().ok())
                    .collect();
                Some(ferrokube_kubelet::server::ensure_self_signed(
                    &opts.root_dir,
                    &hostname,
                    &ips,
                )?)
            }
            _ => bail!(
                "--tls-cert-file and --tls-private-key-file (tlsCertFile, tlsPrivateKeyFile) go together"
            ),
        }
    };
    let serving_bootstrap = cfg_port != 0 && tls_files.is_none() && server_tls_bootstrap;

    let mut given = given_configuration(&opts, &file);
    let serving_tls = ferrokube_pki::tls_options::TlsFlags {
        tls_min_version: given.tls_min_version.clone().unwrap_or_default(),
        tls_cipher_suites: given.tls_cipher_suites.clone().unwrap_or_default(),
    }
    .options_logged()
    .context("--tls-min-version, --tls-cipher-suites (tlsMinVersion, tlsCipherSuites)")?;
    given.address = Some(address.to_string());
    given.read_only_port = Some(read_only_port);
    given.healthz_port = Some(healthz_port);
    given.healthz_bind_address = Some(healthz_bind.to_string());
    given.tls_cert_file = tls_files.as_ref().map(|(c, _)| c.display().to_string());
    given.tls_private_key_file = tls_files.as_ref().map(|(_, k)| k.display().to_string());
    given.resolv_conf = Some(resolv.clone());
    given.container_runtime_endpoint = Some(endpoint.clone());
    given.image_service_endpoint = image_endpoint.clone();
    given.feature_gates = feature_gates
        .explicitly_set()
        .map(|(name, value)| (name.to_string(), value))
        .collect();
    let rotate_certificates = opts
        .rotate_certificates
        .or(file.rotate_certificates)
        .unwrap_or(false);
    given.rotate_certificates = Some(rotate_certificates);
    cfg.configz = effective_configuration(&given, &cfg, &node, &auth_settings).to_value();
    // The logging in effect: the file's, with the logging flags over it.
    cfg.configz["logging"] = opts.component.logging.effective_configuration();

    // Upstream bootstraps before it reads --kubeconfig, and treats an empty flag as unset.
    if let Some(bootstrap) = opts
        .bootstrap_kubeconfig
        .as_ref()
        .filter(|p| !p.as_os_str().is_empty())
    {
        let Some(kubeconfig) = opts.kubeconfig.as_ref() else {
            bail!(
                "--bootstrap-kubeconfig needs --kubeconfig, where the bootstrapped kubeconfig is written"
            );
        };
        let bootstrap_opts = ferrokube_kubelet::bootstrap::BootstrapOptions::new(
            kubeconfig,
            bootstrap,
            &opts.cert_dir,
            &node_name,
        );
        ferrokube_kubelet::bootstrap::load_client_cert(&bootstrap_opts)
            .await
            .context("failed to run the kubelet TLS bootstrap")?;
    }
    let kcfg = match &opts.kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)
                .with_context(|| format!("reading {}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    let cert_manager = match (&opts.kubeconfig, rotate_certificates) {
        (Some(kubeconfig), true) => {
            let mut rotation = ferrokube_kubelet::cert_rotation::RotationOptions::new(
                kubeconfig,
                &opts.cert_dir,
                &node_name,
            );
            rotation.bootstrap_kubeconfig = opts
                .bootstrap_kubeconfig
                .clone()
                .filter(|p| !p.as_os_str().is_empty());
            match ferrokube_kubelet::cert_rotation::ClientCertManager::new(&kcfg, rotation) {
                Ok(m) => Some(m),
                Err(e @ ferrokube_kubelet::cert_rotation::RotationError::NoCertificate) => {
                    tracing::warn!("{e}; using the kubeconfig's credentials as they are");
                    None
                }
                Err(e) => return Err(e).context("client certificate rotation"),
            }
        }
        (None, true) => {
            tracing::warn!("--rotate-certificates needs --kubeconfig; not rotating");
            None
        }
        (_, false) => None,
    };
    // As upstream: the API client and the events client each have a bucket, the
    // heartbeat client (node status, Lease) none.
    let (api_limits, event_limits) = (cfg.client_limits.api(), cfg.client_limits.events());
    let clients = match &cert_manager {
        Some(m) => KubeletClients {
            api: m.client_with_limits(api_limits)?,
            heartbeat: m.client(),
            events: m.client_with_limits(event_limits)?,
        },
        None => {
            let limited = |l: ClientLimits| client_with_limits(kcfg.clone(), l.qps, l.burst);
            KubeletClients {
                api: limited(api_limits)?,
                heartbeat: ferrokube_client::config::build_client(kcfg.clone())?,
                events: limited(event_limits)?,
            }
        }
    };
    let client = clients.api.clone();
    let review_client = client.clone();
    let serving_manager = if serving_bootstrap {
        // The addresses the node status reports (its hostname is the node name).
        let addresses = ferrokube_kubelet::node::node_addresses(&node_name, &node_ips_for_cert);
        let m = ferrokube_kubelet::cert_rotation::ServingCertManager::new(
            client.clone(),
            &opts.cert_dir,
            &node_name,
            std::sync::Arc::new(move || addresses.clone()),
        )
        .context("serving certificate bootstrap")?;
        Some(std::sync::Arc::new(m))
    } else {
        None
    };
    let cri = CriClient::connect(&endpoint, Duration::from_secs(10)).await?;
    let v = cri.version().await?;
    tracing::info!(runtime = %v.runtime_name, version = %v.runtime_version, node = %node_name, "connected to the container runtime");
    let kubelet = Kubelet::with_clients(clients, RuntimeManager::new(cri, node), cfg);

    let cancel =
        ferrokube_client::process::cancel_on_termination("shutting down, containers keep running");
    if let Some(m) = cert_manager {
        tokio::spawn(m.clone().run(cancel.clone()));
        // Upstream exits so that its supervisor restarts it into the bootstrap.
        tokio::spawn(async move {
            m.wait_unusable(
                ferrokube_kubelet::cert_rotation::EXIT_AFTER,
                Duration::from_secs(10),
            )
            .await;
            std::process::exit(1);
        });
    }
    if let Some(m) = &serving_manager {
        tokio::spawn(m.clone().run(cancel.clone()));
    }
    let mut servers = vec![];
    if healthz_port != 0 {
        let (addr, t) = ferrokube_kubelet::server::bind(
            SocketAddr::new(healthz_bind, healthz_port),
            kubelet.clone(),
            Endpoints::Healthz,
            cancel.clone(),
        )
        .await
        .context("--healthz-port")?;
        tracing::info!(%addr, "serving /healthz");
        servers.push(t);
    }
    if tls_files.is_some() || serving_manager.is_some() {
        let port = u16::try_from(cfg_port).with_context(|| format!("--port={cfg_port}"))?;
        // The client CA file is read again as it changes (upstream's dynamic CA file
        // content): new handshakes verify against the bundle in force then.
        let client_certificates = match &auth_settings.client_ca_file {
            Some(p) => Some(
                ferrokube_client::extension_authentication::client_certificates(
                    &ferrokube_client::delegated::DelegatedAuthOptions {
                        client_ca_file: Some(p.clone()),
                        skip_lookup: true,
                        ..Default::default()
                    },
                    None,
                    ferrokube_client::extension_authentication::LookupFailure::Tolerate,
                )
                .await
                .with_context(|| format!("--client-ca-file {}", p.display()))?,
            ),
            None => {
                tracing::warn!(
                    "no --client-ca-file: client certificates to the kubelet API are not accepted"
                );
                None
            }
        };
        if auth_settings.anonymous
            && auth_settings.mode == ferrokube_kubelet::auth::AuthorizationMode::AlwaysAllow
        {
            tracing::warn!(
                "--anonymous-auth with --authorization-mode=AlwaysAllow: anyone may use the kubelet API"
            );
        }
        let auth = std::sync::Arc::new(KubeletAuth::new(
            &node_name,
            &auth_settings,
            review_client.clone(),
        ));
        let certificate: ferrokube_kubelet::server::CertificateResolver =
            match (&tls_files, &serving_manager) {
                (Some((cert, key)), _) => ferrokube_kubelet::server::followed_serving_certificate(
                    cert,
                    key,
                    cancel.clone(),
                )?,
                (None, Some(m)) => m.slot().clone(),
                // Not reached (the `if` above), but an error rather than a panic if it were.
                (None, None) => bail!("the kubelet API has no serving certificate"),
            };
        let tls = ferrokube_kubelet::server::tls_config_resolving(
            certificate,
            client_certificates.as_ref().map(|c| c.tls_verifier()),
            &serving_tls,
        )?;
        let (addr, t) = ferrokube_kubelet::server::bind_tls(
            SocketAddr::new(address, port),
            kubelet.clone(),
            tls,
            auth,
            cancel.clone(),
        )
        .await
        .context("--port")?;
        tracing::info!(%addr, "serving the kubelet API (HTTPS)");
        servers.push(t);
    }
    if read_only_port != 0 {
        let (addr, t) = ferrokube_kubelet::server::bind(
            SocketAddr::new(address, read_only_port),
            kubelet.clone(),
            Endpoints::ReadOnly,
            cancel.clone(),
        )
        .await
        .context("--read-only-port")?;
        tracing::info!(%addr, "serving the read-only port");
        servers.push(t);
    }
    kubelet.run(cancel.clone()).await?;
    for s in servers {
        let _ = s.await;
    }
    Ok(())
}

/// The kubelet API's authentication and authorization: the config file's (or the
/// flags' legacy defaults), then the flags. A relative clientCAFile in the file is
/// relative to the file.
fn auth_settings(opts: &Opts, file: Option<&KubeletConfiguration>) -> anyhow::Result<AuthSettings> {
    let mut s = AuthSettings::from_file(file)?;
    if let (Some(ca), Some(dir)) = (
        &s.client_ca_file,
        opts.config.as_deref().and_then(std::path::Path::parent),
    ) && ca.is_relative()
    {
        s.client_ca_file = Some(dir.join(ca));
    }
    if let Some(ca) = &opts.client_ca_file {
        s.client_ca_file = Some(ca.clone());
    }
    if let Some(a) = opts.anonymous_auth {
        s.anonymous = a;
    }
    if let Some(w) = opts.authentication_token_webhook {
        s.webhook = w;
    }
    if let Some(d) = &opts.authentication_token_webhook_cache_ttl {
        s.token_cache_ttl = parse_go_duration(d)?;
    }
    if let Some(m) = &opts.authorization_mode {
        s.mode = m.parse().map_err(anyhow::Error::msg)?;
    }
    if let Some(d) = &opts.authorization_webhook_cache_authorized_ttl {
        s.authorized_ttl = parse_go_duration(d)?;
    }
    if let Some(d) = &opts.authorization_webhook_cache_unauthorized_ttl {
        s.unauthorized_ttl = parse_go_duration(d)?;
    }
    Ok(s)
}

/// The config file with the flags given on the command line over it, map flags in the
/// file's form (`a<b,c<d` and `a=b,c=d` as maps): the strings `/configz` reports for the
/// maps and `containerLogMaxSize`, as the kubelet parsed them. The binary sets the
/// resolved ports, addresses, files and endpoints itself.
fn given_configuration(opts: &Opts, file: &KubeletConfiguration) -> KubeletConfiguration {
    let mut g = file.clone();
    for (flag, sep, field) in [
        (&opts.kube_reserved, '=', &mut g.kube_reserved),
        (&opts.system_reserved, '=', &mut g.system_reserved),
        (&opts.eviction_hard, '<', &mut g.eviction_hard),
        (&opts.eviction_soft, '<', &mut g.eviction_soft),
        (
            &opts.eviction_soft_grace_period,
            '=',
            &mut g.eviction_soft_grace_period,
        ),
        (
            &opts.eviction_minimum_reclaim,
            '=',
            &mut g.eviction_minimum_reclaim,
        ),
    ] {
        if let Some(s) = flag {
            *field = Some(flag_map(s, sep));
        }
    }
    if let Some(s) = &opts.container_log_max_size {
        g.container_log_max_size = Some(s.clone());
    }
    if let Some(s) = &opts.system_reserved_cgroup {
        g.system_reserved_cgroup = Some(s.clone());
    }
    if let Some(s) = &opts.kube_reserved_cgroup {
        g.kube_reserved_cgroup = Some(s.clone());
    }
    if let Some(v) = &opts.tls_min_version {
        g.tls_min_version = Some(v.clone());
    }
    if let Some(v) = &opts.tls_cipher_suites {
        g.tls_cipher_suites = Some(v.clone());
    }
    g
}

/// A config file's `signal: value` map as the flags' `signal=value,...`.
fn map_flag(m: &std::collections::BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}
