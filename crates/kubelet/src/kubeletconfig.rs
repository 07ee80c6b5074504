//! `KubeletConfiguration` (kubelet.config.k8s.io/v1beta1): the fields this kubelet
//! supports, with upstream's names. Unknown fields are accepted and ignored (upstream's
//! lenient decoding of the config file); flags override what the file sets.
//!
//! The same type, serialized, is what `/configz` serves: [`effective_configuration`]
//! fills it with the values the kubelet runs with (upstream serves its v1beta1
//! configuration after flags, file and defaults are merged). Fields the kubelet does not
//! implement are absent; the few marked `skip_deserializing` are only reported (a file
//! cannot change them).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::auth::{AuthSettings, AuthorizationMode};
use crate::config::NodeConfig;
use crate::kubelet::KubeletConfig;

/// Errors of the config file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("parsing KubeletConfiguration: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    #[error(
        "unsupported apiVersion/kind {0}/{1} (want kubelet.config.k8s.io/v1beta1, KubeletConfiguration)"
    )]
    Kind(String, String),
    #[error("invalid duration {0:?}")]
    Duration(String),
    #[error("{0}")]
    Invalid(String),
}

/// A taint in the config file (`registerWithTaints`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct ConfigTaint {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: String,
}

/// `authentication`: how clients of the kubelet API on `port` are identified.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletAuthentication {
    pub x509: KubeletX509Authentication,
    pub webhook: KubeletWebhookAuthentication,
    pub anonymous: KubeletAnonymousAuthentication,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct KubeletX509Authentication {
    #[serde(rename = "clientCAFile", skip_serializing_if = "Option::is_none")]
    pub client_ca_file: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct KubeletWebhookAuthentication {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(rename = "cacheTTL", skip_serializing_if = "Option::is_none")]
    pub cache_ttl: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct KubeletAnonymousAuthentication {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// `authorization`: what the kubelet API lets an identified client do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct KubeletAuthorization {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    pub webhook: KubeletWebhookAuthorization,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct KubeletWebhookAuthorization {
    #[serde(rename = "cacheAuthorizedTTL", skip_serializing_if = "Option::is_none")]
    pub cache_authorized_ttl: Option<String>,
    #[serde(
        rename = "cacheUnauthorizedTTL",
        skip_serializing_if = "Option::is_none"
    )]
    pub cache_unauthorized_ttl: Option<String>,
}

/// The supported subset of `KubeletConfiguration`, in upstream's field order. Every
/// field is optional: `None` is "not set" when read and "not shown" when served.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletConfiguration {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Whether the HTTPS kubelet API runs (reported: here `port: 0` turns it off).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub enable_server: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub static_pod_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_logs_dir: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_frequency: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_check_frequency: Option<String>,
    /// The address of the HTTPS port and the read-only port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_port: Option<u16>,
    /// The serving certificate of `port` (relative paths are relative to the file).
    #[serde(rename = "tlsCertFile", skip_serializing_if = "Option::is_none")]
    pub tls_cert_file: Option<String>,
    #[serde(rename = "tlsPrivateKeyFile", skip_serializing_if = "Option::is_none")]
    pub tls_private_key_file: Option<String>,
    /// The versions and suites `port` negotiates (Go's names; see
    /// `ferrokube_pki::tls_options`).
    #[serde(rename = "tlsMinVersion", skip_serializing_if = "Option::is_none")]
    pub tls_min_version: Option<String>,
    #[serde(rename = "tlsCipherSuites", skip_serializing_if = "Option::is_none")]
    pub tls_cipher_suites: Option<Vec<String>>,
    /// Renew the client certificate before it expires (`--rotate-certificates` wins).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rotate_certificates: Option<bool>,
    /// Ask the certificates API for the serving certificate of `port`
    /// (`kubernetes.io/kubelet-serving`); `tlsCertFile` wins when set.
    #[serde(rename = "serverTLSBootstrap", skip_serializing_if = "Option::is_none")]
    pub server_tls_bootstrap: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authentication: Option<KubeletAuthentication>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization: Option<KubeletAuthorization>,
    #[serde(rename = "eventRecordQPS", skip_serializing_if = "Option::is_none")]
    pub event_record_qps: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_burst: Option<i32>,
    /// Logs, exec, attach and port-forward on the kubelet API (reported: always on).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub enable_debugging_handlers: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthz_port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthz_bind_address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_domain: Option<String>,
    #[serde(rename = "clusterDNS", skip_serializing_if = "Option::is_none")]
    pub cluster_dns: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_status_update_frequency: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_status_report_frequency: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_lease_duration_seconds: Option<i32>,
    #[serde(rename = "imageMinimumGCAge", skip_serializing_if = "Option::is_none")]
    pub image_minimum_gc_age: Option<String>,
    #[serde(
        rename = "imageGCHighThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_high_threshold_percent: Option<u8>,
    #[serde(
        rename = "imageGCLowThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_low_threshold_percent: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_root: Option<String>,
    /// Pods in QoS cgroups under `kubepods` (reported: always).
    #[serde(
        rename = "cgroupsPerQOS",
        skip_deserializing,
        skip_serializing_if = "Option::is_none"
    )]
    pub cgroups_per_qos: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_driver: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolv_conf: Option<String>,
    /// CFS quota for CPU limits (reported: always), over `cpuCFSQuotaPeriod`.
    #[serde(
        rename = "cpuCFSQuota",
        skip_deserializing,
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota: Option<bool>,
    #[serde(
        rename = "cpuCFSQuotaPeriod",
        skip_deserializing,
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota_period: Option<String>,
    #[serde(rename = "kubeAPIQPS", skip_serializing_if = "Option::is_none")]
    pub kube_api_qps: Option<i32>,
    #[serde(rename = "kubeAPIBurst", skip_serializing_if = "Option::is_none")]
    pub kube_api_burst: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_soft: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_pressure_transition_period: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_minimum_reclaim: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_log_max_size: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_log_max_files: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_log_monitor_interval: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_reserved: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_reserved: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_reserved_cgroup: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_reserved_cgroup: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforce_node_allocatable: Option<Vec<String>>,
    /// `/logs/` on the kubelet API serves the node's `/var/log`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_system_log_handler: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub register_with_taints: Option<Vec<ConfigTaint>>,
    /// Whether the kubelet creates its Node (`--register-node` wins).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub register_node: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_runtime_endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_service_endpoint: Option<String>,
    /// Gates merged under `--feature-gates` (component-base checks them).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub feature_gates: std::collections::BTreeMap<String, bool>,
    /// Merged under the logging flags (`-v`, `--logging-format`, ...). `/configz`
    /// shows the result (`LoggingFlags::effective_configuration`), not this.
    #[serde(skip_serializing)]
    pub logging: ferrokube_component_base::logs::LoggingConfiguration,
}

impl KubeletConfiguration {
    /// Parses and checks the file's apiVersion and kind.
    pub fn from_yaml(s: &str) -> Result<Self, ConfigFileError> {
        let c: KubeletConfiguration = serde_yaml_ng::from_str(s)?;
        if c.api_version != "kubelet.config.k8s.io/v1beta1" || c.kind != "KubeletConfiguration" {
            return Err(ConfigFileError::Kind(c.api_version, c.kind));
        }
        Ok(c)
    }

    /// As JSON (what `/configz` serves under `kubeletconfig`).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// Parses a Go duration (`10s`, `1m0s`, `1h30m`, `500ms`, `1.5s`): the client library's
/// parser, with this module's error.
pub fn parse_go_duration(s: &str) -> Result<Duration, ConfigFileError> {
    ferrokube_client::leaderelection::parse_go_duration(s)
        .map_err(|_| ConfigFileError::Duration(s.to_owned()))
}

/// Formats a duration as Go's `time.Duration.String()` does (how upstream writes
/// durations in JSON): `0s`, `100ms`, `1.5s`, `10s`, `1m0s`, `5m0s`, `1h30m0s`.
pub fn format_go_duration(d: Duration) -> String {
    ferrokube_apimachinery::duration::go_duration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// A map flag as the config file's map: `key=value,...` (`--kube-reserved`,
/// `--eviction-soft-grace-period`, `--eviction-minimum-reclaim`) with `sep` `=`, or
/// `signal<value,...` (`--eviction-hard`, `--eviction-soft`) with `<`. Entries are
/// trimmed; one without `sep` is left out (the flag's own parser refuses it).
pub fn flag_map(s: &str, sep: char) -> BTreeMap<String, String> {
    s.split(',')
        .map(str::trim)
        .filter_map(|e| e.split_once(sep))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// Bytes as a quantity: the largest binary suffix that divides them (`10Mi`).
fn binary_quantity(bytes: i64) -> String {
    let mut n = bytes;
    for suffix in ["", "Ki", "Mi", "Gi", "Ti", "Pi"] {
        if n == 0 || n % 1024 != 0 {
            return format!("{n}{suffix}");
        }
        n /= 1024;
    }
    format!("{n}Ei")
}

/// The configuration this kubelet runs with, as upstream's `/configz` shows it (the
/// v1beta1 fields after flags, config file and defaults are merged): durations, numbers
/// and names from the settings the kubelet was built with (`cfg`, `node`, `auth`), so
/// this kubelet's own defaults show where nothing was set; maps (reservations, eviction
/// thresholds), `cgroupRoot`, `resolvConf`, endpoints, ports, addresses and TLS files
/// from `given` (the config file with the flags over it, strings as given; the kubelet
/// parsed its settings from the same values), with the defaults the binary uses where
/// `given` has none. Empty values are left out as upstream's `omitempty` does; fields
/// the kubelet does not implement are absent.
pub fn effective_configuration(
    given: &KubeletConfiguration,
    cfg: &KubeletConfig,
    node: &NodeConfig,
    auth: &AuthSettings,
) -> KubeletConfiguration {
    let d = |d: Duration| Some(format_go_duration(d));
    let non_empty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
    let map = |m: &Option<BTreeMap<String, String>>| m.clone().filter(|m| !m.is_empty());
    let path = |p: &std::path::Path| Some(p.display().to_string());
    KubeletConfiguration {
        api_version: String::new(),
        kind: String::new(),
        enable_server: Some(cfg.kubelet_port != 0),
        static_pod_path: cfg.static_pod_path.as_deref().and_then(path),
        pod_logs_dir: path(&node.pod_logs_dir),
        sync_frequency: d(cfg.sync_frequency),
        file_check_frequency: d(cfg.file_check_frequency),
        address: non_empty(&given.address).or_else(|| Some("0.0.0.0".into())),
        port: Some(cfg.kubelet_port).filter(|p| *p != 0),
        read_only_port: given.read_only_port.filter(|p| *p != 0),
        tls_cert_file: non_empty(&given.tls_cert_file),
        tls_private_key_file: non_empty(&given.tls_private_key_file),
        tls_min_version: non_empty(&given.tls_min_version),
        tls_cipher_suites: given.tls_cipher_suites.clone().filter(|s| !s.is_empty()),
        // A plain bool with omitempty upstream: shown only when on.
        rotate_certificates: given.rotate_certificates.filter(|r| *r),
        server_tls_bootstrap: given.server_tls_bootstrap.filter(|r| *r),
        authentication: Some(KubeletAuthentication {
            x509: KubeletX509Authentication {
                client_ca_file: auth.client_ca_file.as_deref().and_then(path),
            },
            webhook: KubeletWebhookAuthentication {
                enabled: Some(auth.webhook),
                cache_ttl: d(auth.token_cache_ttl),
            },
            anonymous: KubeletAnonymousAuthentication {
                enabled: Some(auth.anonymous),
            },
        }),
        authorization: Some(KubeletAuthorization {
            mode: Some(
                match auth.mode {
                    AuthorizationMode::AlwaysAllow => "AlwaysAllow",
                    AuthorizationMode::Webhook => "Webhook",
                }
                .into(),
            ),
            webhook: KubeletWebhookAuthorization {
                cache_authorized_ttl: d(auth.authorized_ttl),
                cache_unauthorized_ttl: d(auth.unauthorized_ttl),
            },
        }),
        event_record_qps: Some(cfg.client_limits.event_record_qps),
        event_burst: Some(cfg.client_limits.event_burst),
        enable_debugging_handlers: Some(true),
        healthz_port: Some(given.healthz_port.unwrap_or(10248)),
        healthz_bind_address: non_empty(&given.healthz_bind_address)
            .or_else(|| Some("127.0.0.1".into())),
        cluster_domain: Some(node.cluster_domain.clone()).filter(|d| !d.is_empty()),
        cluster_dns: Some(node.cluster_dns.clone()).filter(|d| !d.is_empty()),
        node_status_update_frequency: d(cfg.node_status_update_frequency),
        node_status_report_frequency: d(crate::node::NODE_STATUS_REPORT_FREQUENCY),
        node_lease_duration_seconds: Some(cfg.node_lease_duration_seconds),
        image_minimum_gc_age: d(cfg.image_gc.min_age),
        image_gc_high_threshold_percent: Some(cfg.image_gc.high_threshold_percent),
        image_gc_low_threshold_percent: Some(cfg.image_gc.low_threshold_percent),
        cgroup_root: non_empty(&given.cgroup_root),
        cgroups_per_qos: Some(true),
        // The only driver the kubelet starts with.
        cgroup_driver: Some("cgroupfs".into()),
        max_pods: Some(cfg.max_pods),
        resolv_conf: given
            .resolv_conf
            .clone()
            .or_else(|| Some("/etc/resolv.conf".into())),
        cpu_cfs_quota: Some(true),
        cpu_cfs_quota_period: d(Duration::from_micros(
            crate::qos::QUOTA_PERIOD.unsigned_abs(),
        )),
        kube_api_qps: Some(cfg.client_limits.kube_api_qps),
        kube_api_burst: Some(cfg.client_limits.kube_api_burst),
        eviction_hard: match &given.eviction_hard {
            Some(_) => map(&given.eviction_hard),
            None => Some(flag_map(crate::node::DEFAULT_EVICTION_HARD, '<')),
        },
        eviction_soft: map(&given.eviction_soft),
        eviction_soft_grace_period: map(&given.eviction_soft_grace_period),
        eviction_pressure_transition_period: d(cfg.eviction.pressure_transition),
        eviction_max_pod_grace_period: Some(cfg.eviction.max_pod_grace_seconds).filter(|g| *g != 0),
        eviction_minimum_reclaim: map(&given.eviction_minimum_reclaim),
        container_log_max_size: non_empty(&given.container_log_max_size)
            .or_else(|| Some(binary_quantity(cfg.container_log.max_size))),
        container_log_max_files: Some(cfg.container_log.max_files),
        container_log_monitor_interval: d(cfg.container_log.monitor_interval),
        system_reserved: map(&given.system_reserved),
        kube_reserved: map(&given.kube_reserved),
        system_reserved_cgroup: non_empty(&given.system_reserved_cgroup),
        kube_reserved_cgroup: non_empty(&given.kube_reserved_cgroup),
        enforce_node_allocatable: Some(cfg.enforce_node_allocatable.keys()),
        enable_system_log_handler: Some(cfg.system_log_dir.is_some()),
        register_with_taints: Some(
            cfg.register_with_taints
                .iter()
                .map(|t| ConfigTaint {
                    key: t.key.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                })
                .collect::<Vec<_>>(),
        )
        .filter(|t| !t.is_empty()),
        register_node: Some(cfg.register_node),
        container_runtime_endpoint: non_empty(&given.container_runtime_endpoint)
            .or_else(|| Some(crate::cri::DEFAULT_ENDPOINT.into())),
        image_service_endpoint: non_empty(&given.image_service_endpoint),
        feature_gates: given.feature_gates.clone(),
        logging: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_config_file() {
        let c = KubeletConfiguration::from_yaml(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             clusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\nreadOnlyPort: 10255\n\
             kubeReserved: {cpu: 100m, memory: 100Mi}\nevictionHard: {memory.available: 200Mi}\n\
             nodeStatusUpdateFrequency: 5s\nmaxPods: 50\ncgroupDriver: cgroupfs\n\
             registerWithTaints: [{key: a, value: b, effect: NoSchedule}]\n\
             kubeAPIQPS: 25\nkubeAPIBurst: 40\neventRecordQPS: 7\neventBurst: 9\n\
             authentication: {anonymous: {enabled: false}}\n\
             logging: {flushFrequency: 0, verbosity: 4, format: text,\n\
               vmodule: [{filePattern: ferrokube_kubelet, verbosity: 5}],\n\
               options: {json: {infoBufferSize: \"0\"}, text: {infoBufferSize: \"0\"}}}\n",
        )
        .unwrap();
        assert_eq!(
            (
                c.kube_api_qps,
                c.kube_api_burst,
                c.event_record_qps,
                c.event_burst
            ),
            (Some(25), Some(40), Some(7), Some(9))
        );
        assert_eq!(c.logging.verbosity, Some(4));
        assert_eq!(c.logging.format.as_deref(), Some("text"));
        assert_eq!(c.logging.vmodule[0].file_pattern, "ferrokube_kubelet");
        assert_eq!(c.logging.vmodule[0].verbosity, 5);
        assert_eq!(
            c.cluster_dns.as_deref(),
            Some(&["10.96.0.10".to_string()][..])
        );
        assert_eq!(c.read_only_port, Some(10255));
        assert_eq!(c.kube_reserved.unwrap()["memory"], "100Mi");
        assert_eq!(c.eviction_hard.unwrap()["memory.available"], "200Mi");
        assert_eq!(c.max_pods, Some(50));
        assert_eq!(c.register_with_taints.unwrap()[0].effect, "NoSchedule");
        assert_eq!(c.authentication.unwrap().anonymous.enabled, Some(false));
        assert_eq!(c.authorization, None);
        assert_eq!(c.rotate_certificates, None);
        let c = KubeletConfiguration::from_yaml(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nrotateCertificates: true\n",
        )
        .unwrap();
        assert_eq!(c.rotate_certificates, Some(true));
        assert!(KubeletConfiguration::from_yaml("apiVersion: v1\nkind: Pod\n").is_err());
        assert!(KubeletConfiguration::from_yaml("apiVersion: [").is_err());
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_go_duration("1m0s").unwrap(), Duration::from_secs(60));
        assert_eq!(
            parse_go_duration("1h30m").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(
            parse_go_duration("500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
        for bad in ["", "10", "5x", "s"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_go_durations() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(1), "1ns"),
            (Duration::from_nanos(1500), "1.5µs"),
            (Duration::from_micros(1), "1µs"),
            (Duration::from_millis(100), "100ms"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(10), "10s"),
            (Duration::from_secs(30), "30s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(120), "2m0s"),
            (Duration::from_secs(300), "5m0s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(5400), "1h30m0s"),
            (Duration::from_secs(4 * 3600), "4h0m0s"),
            (Duration::from_millis(61_250), "1m1.25s"),
            (Duration::new(3601, 1), "1h0m1.000000001s"),
        ];
        for (d, want) in cases {
            assert_eq!(format_go_duration(d), want, "{d:?}");
        }
        // What the formatter writes, the parser reads back (upstream's durations in
        // the config file and on /configz are the same strings).
        for d in [
            Duration::from_millis(100),
            Duration::from_millis(1500),
            Duration::from_secs(10),
            Duration::from_secs(60),
            Duration::from_secs(90),
            Duration::from_secs(300),
            Duration::from_secs(5400),
            Duration::from_secs(86_400),
            Duration::from_micros(250),
        ] {
            let s = format_go_duration(d);
            assert_eq!(parse_go_duration(&s).unwrap(), d, "{s}");
        }
        for s in ["1m0s", "10s", "5m0s", "2m0s", "100ms", "1h30m0s", "1.5s"] {
            assert_eq!(format_go_duration(parse_go_duration(s).unwrap()), s);
        }
        // Inputs in other spellings come out in Go's.
        assert_eq!(
            format_go_duration(parse_go_duration("90s").unwrap()),
            "1m30s"
        );
        assert_eq!(format_go_duration(parse_go_duration("1m").unwrap()), "1m0s");
    }

    #[test]
    fn map_flags_as_maps() {
        assert_eq!(
            flag_map("memory.available<100Mi, nodefs.available < 10%,", '<'),
            BTreeMap::from([
                ("memory.available".to_string(), "100Mi".to_string()),
                ("nodefs.available".to_string(), "10%".to_string()),
            ])
        );
        assert_eq!(
            flag_map("cpu=100m,memory=1Gi,bogus", '='),
            BTreeMap::from([
                ("cpu".to_string(), "100m".to_string()),
                ("memory".to_string(), "1Gi".to_string()),
            ])
        );
        assert!(flag_map("", '=').is_empty());
        assert_eq!(binary_quantity(10 << 20), "10Mi");
        assert_eq!(binary_quantity(3 << 30), "3Gi");
        assert_eq!(binary_quantity(1536), "1536");
        assert_eq!(binary_quantity(0), "0");
    }

    #[test]
    fn served_without_empty_fields() {
        let c = KubeletConfiguration {
            port: Some(10250),
            ..Default::default()
        };
        assert_eq!(c.to_value(), serde_json::json!({"port": 10250}));
        let c = KubeletConfiguration::from_yaml(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nregisterNode: false\n",
        )
        .unwrap();
        assert_eq!(c.register_node, Some(false));
        // Reported-only fields are not read from a file.
        let c = KubeletConfiguration::from_yaml(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             enableServer: false\naddress: 127.0.0.1\n\
             tlsCertFile: a.crt\nenableSystemLogHandler: false\n\
             tlsMinVersion: VersionTLS13\ntlsCipherSuites: [TLS_AES_128_GCM_SHA256]\n",
        )
        .unwrap();
        assert_eq!(c.tls_min_version.as_deref(), Some("VersionTLS13"));
        assert_eq!(
            c.tls_cipher_suites.as_deref(),
            Some(&["TLS_AES_128_GCM_SHA256".to_string()][..])
        );
        assert_eq!(c.enable_server, None);
        assert_eq!(c.address.as_deref(), Some("127.0.0.1"));
        assert_eq!(c.tls_cert_file.as_deref(), Some("a.crt"));
        assert_eq!(c.enable_system_log_handler, Some(false));
        let v = c.to_value();
        assert_eq!(v["apiVersion"], "kubelet.config.k8s.io/v1beta1");
        assert_eq!(v["tlsCertFile"], "a.crt");
    }

    /// With nothing set, the served configuration is this kubelet's defaults, which are
    /// upstream's v1beta1 defaults (pkg/kubelet/apis/config/v1beta1/defaults.go) except
    /// where noted.
    #[test]
    fn effective_configuration_defaults() {
        let cfg = KubeletConfig::new("node-a");
        let node = NodeConfig::new("node-a");
        let auth = AuthSettings::defaults(true);
        let c = effective_configuration(&KubeletConfiguration::default(), &cfg, &node, &auth);
        assert_eq!(
            c.to_value(),
            serde_json::json!({
                "enableServer": true,
                "podLogsDir": "/var/log/pods",
                "syncFrequency": "1m0s",
                "fileCheckFrequency": "20s",
                "address": "0.0.0.0",
                "port": 10250,
                "authentication": {
                    "x509": {},
                    "webhook": {"enabled": true, "cacheTTL": "2m0s"},
                    "anonymous": {"enabled": false},
                },
                "authorization": {
                    "mode": "Webhook",
                    "webhook": {"cacheAuthorizedTTL": "5m0s", "cacheUnauthorizedTTL": "30s"},
                },
                "eventRecordQPS": 50,
                "eventBurst": 100,
                "enableDebuggingHandlers": true,
                "healthzPort": 10248,
                "healthzBindAddress": "127.0.0.1",
                // Upstream has none by default; NodeConfig::new has these.
                "clusterDomain": "cluster.local",
                "clusterDNS": ["10.96.0.10"],
                "nodeStatusUpdateFrequency": "10s",
                "nodeStatusReportFrequency": "5m0s",
                "nodeLeaseDurationSeconds": 40,
                "imageMinimumGCAge": "2m0s",
                "imageGCHighThresholdPercent": 85,
                "imageGCLowThresholdPercent": 80,
                "cgroupsPerQOS": true,
                "cgroupDriver": "cgroupfs",
                "maxPods": 110,
                "resolvConf": "/etc/resolv.conf",
                "cpuCFSQuota": true,
                "cpuCFSQuotaPeriod": "100ms",
                "kubeAPIQPS": 50,
                "kubeAPIBurst": 100,
                "evictionHard": {
                    "memory.available": "100Mi",
                    "nodefs.available": "10%",
                    "imagefs.available": "15%",
                    "nodefs.inodesFree": "5%",
                },
                "evictionPressureTransitionPeriod": "5m0s",
                "containerLogMaxSize": "10Mi",
                "containerLogMaxFiles": 5,
                "containerLogMonitorInterval": "10s",
                "enforceNodeAllocatable": ["pods"],
                "enableSystemLogHandler": true,
                "registerNode": true,
                "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
            })
        );
        // Without a config file: the flags' legacy authentication defaults.
        let legacy = effective_configuration(
            &KubeletConfiguration::default(),
            &cfg,
            &node,
            &AuthSettings::defaults(false),
        )
        .to_value();
        assert_eq!(legacy["authentication"]["anonymous"]["enabled"], true);
        assert_eq!(legacy["authentication"]["webhook"]["enabled"], false);
        assert_eq!(legacy["authorization"]["mode"], "AlwaysAllow");
    }

    #[test]
    fn effective_configuration_settings() {
        let mut cfg = KubeletConfig::new("node-a");
        cfg.kubelet_port = 0;
        cfg.sync_frequency = Duration::from_secs(90);
        cfg.node_status_update_frequency = Duration::from_secs(4);
        cfg.max_pods = 50;
        cfg.static_pod_path = Some("/etc/kubernetes/manifests".into());
        cfg.eviction.max_pod_grace_seconds = 30;
        cfg.eviction.pressure_transition = Duration::from_secs(60);
        cfg.system_log_dir = None;
        cfg.enforce_node_allocatable = crate::node_allocatable::Enforcement::parse(
            &["pods".into(), "kube-reserved".into()],
            "",
            "/kube.slice",
        )
        .unwrap();
        cfg.register_with_taints = vec![k8s_openapi::api::core::v1::Taint {
            key: "a".into(),
            value: None,
            effect: "NoSchedule".into(),
            time_added: None,
        }];
        let mut node = NodeConfig::new("node-a");
        node.cluster_dns = vec![];
        node.cluster_domain = "example.internal".into();
        let mut auth = AuthSettings::defaults(true);
        auth.client_ca_file = Some("/etc/kubernetes/pki/ca.crt".into());
        auth.token_cache_ttl = Duration::from_secs(10);
        let given = KubeletConfiguration {
            read_only_port: Some(0),
            healthz_port: Some(0),
            address: Some("10.0.0.5".into()),
            tls_cert_file: Some("/var/lib/kubelet/pki/kubelet.crt".into()),
            tls_private_key_file: Some("/var/lib/kubelet/pki/kubelet.key".into()),
            rotate_certificates: Some(true),
            eviction_hard: Some(BTreeMap::new()),
            eviction_soft: Some(flag_map("memory.available<1Gi", '<')),
            eviction_soft_grace_period: Some(flag_map("memory.available=1m30s", '=')),
            kube_reserved: Some(flag_map("cpu=100m,memory=100Mi", '=')),
            system_reserved: Some(BTreeMap::new()),
            kube_reserved_cgroup: Some("/kube.slice".into()),
            system_reserved_cgroup: Some(String::new()),
            container_log_max_size: Some("5Mi".into()),
            cgroup_root: Some("/custom".into()),
            resolv_conf: Some(String::new()),
            container_runtime_endpoint: Some("unix:///run/other.sock".into()),
            ..Default::default()
        };
        let v = effective_configuration(&given, &cfg, &node, &auth).to_value();
        let obj = v.as_object().unwrap();
        assert_eq!(v["enableServer"], false);
        for absent in [
            "port",
            "readOnlyPort",
            "evictionHard",
            "systemReserved",
            "systemReservedCgroup",
            "clusterDNS",
            "evictionMinimumReclaim",
            "imageServiceEndpoint",
        ] {
            assert!(!obj.contains_key(absent), "{absent}: {v}");
        }
        assert_eq!(v["healthzPort"], 0, "a pointer upstream: 0 is shown");
        assert_eq!(v["address"], "10.0.0.5");
        assert_eq!(v["tlsCertFile"], "/var/lib/kubelet/pki/kubelet.crt");
        assert_eq!(v["tlsPrivateKeyFile"], "/var/lib/kubelet/pki/kubelet.key");
        assert_eq!(v["rotateCertificates"], true);
        let text =
            serde_json::to_string(&effective_configuration(&given, &cfg, &node, &auth)).unwrap();
        let at = |k: &str| text.find(&format!("\"{k}\"")).unwrap();
        assert!(
            at("tlsPrivateKeyFile") < at("rotateCertificates")
                && at("rotateCertificates") < at("authentication"),
            "upstream's field order: {text}"
        );
        assert_eq!(v["syncFrequency"], "1m30s");
        assert_eq!(v["nodeStatusUpdateFrequency"], "4s");
        assert_eq!(v["maxPods"], 50);
        assert_eq!(v["staticPodPath"], "/etc/kubernetes/manifests");
        assert_eq!(v["evictionMaxPodGracePeriod"], 30);
        assert_eq!(v["evictionPressureTransitionPeriod"], "1m0s");
        assert_eq!(
            v["evictionSoft"],
            serde_json::json!({"memory.available": "1Gi"})
        );
        assert_eq!(
            v["evictionSoftGracePeriod"],
            serde_json::json!({"memory.available": "1m30s"})
        );
        assert_eq!(
            v["kubeReserved"],
            serde_json::json!({"cpu": "100m", "memory": "100Mi"})
        );
        assert_eq!(v["kubeReservedCgroup"], "/kube.slice");
        assert_eq!(
            v["enforceNodeAllocatable"],
            serde_json::json!(["pods", "kube-reserved"])
        );
        assert_eq!(v["containerLogMaxSize"], "5Mi");
        assert_eq!(v["cgroupRoot"], "/custom");
        assert_eq!(v["resolvConf"], "", "a pointer upstream: empty is shown");
        assert_eq!(v["clusterDomain"], "example.internal");
        assert_eq!(v["containerRuntimeEndpoint"], "unix:///run/other.sock");
        assert_eq!(v["enableSystemLogHandler"], false);
        assert_eq!(
            v["registerWithTaints"],
            serde_json::json!([{"key": "a", "effect": "NoSchedule"}])
        );
        assert_eq!(
            v["authentication"]["x509"]["clientCAFile"],
            "/etc/kubernetes/pki/ca.crt"
        );
        assert_eq!(v["authentication"]["webhook"]["cacheTTL"], "10s");
        assert!(!obj.contains_key("apiVersion") && !obj.contains_key("kind"));
    }
}
