//! `KubeletConfiguration` (kubelet.config.k8s.io/v1beta1): the fields this kubelet
//! supports, with upstream's names. Unknown fields are accepted and ignored (upstream's
//! lenient decoding of the config file); flags override what the file sets.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

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
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ConfigTaint {
    pub key: String,
    #[serde(default)]
    pub value: Option<String>,
    pub effect: String,
}

/// `authentication`: how clients of the kubelet API on `port` are identified.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletAuthentication {
    pub x509: KubeletX509Authentication,
    pub webhook: KubeletWebhookAuthentication,
    pub anonymous: KubeletAnonymousAuthentication,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct KubeletX509Authentication {
    #[serde(rename = "clientCAFile")]
    pub client_ca_file: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct KubeletWebhookAuthentication {
    pub enabled: Option<bool>,
    #[serde(rename = "cacheTTL")]
    pub cache_ttl: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct KubeletAnonymousAuthentication {
    pub enabled: Option<bool>,
}

/// `authorization`: what the kubelet API lets an identified client do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct KubeletAuthorization {
    pub mode: Option<String>,
    pub webhook: KubeletWebhookAuthorization,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct KubeletWebhookAuthorization {
    #[serde(rename = "cacheAuthorizedTTL")]
    pub cache_authorized_ttl: Option<String>,
    #[serde(rename = "cacheUnauthorizedTTL")]
    pub cache_unauthorized_ttl: Option<String>,
}

/// The supported subset of `KubeletConfiguration`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletConfiguration {
    pub api_version: String,
    pub kind: String,
    pub port: Option<i32>,
    pub read_only_port: Option<u16>,
    pub healthz_port: Option<u16>,
    pub healthz_bind_address: Option<String>,
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: Option<Vec<String>>,
    pub cluster_domain: Option<String>,
    pub resolv_conf: Option<String>,
    pub kube_reserved: Option<BTreeMap<String, String>>,
    pub system_reserved: Option<BTreeMap<String, String>>,
    pub eviction_hard: Option<BTreeMap<String, String>>,
    pub eviction_soft: Option<BTreeMap<String, String>>,
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    pub eviction_minimum_reclaim: Option<BTreeMap<String, String>>,
    pub eviction_pressure_transition_period: Option<String>,
    pub eviction_max_pod_grace_period: Option<i64>,
    pub container_log_max_size: Option<String>,
    pub container_log_max_files: Option<usize>,
    pub container_log_monitor_interval: Option<String>,
    pub cgroup_driver: Option<String>,
    pub cgroup_root: Option<String>,
    pub max_pods: Option<i64>,
    pub node_status_update_frequency: Option<String>,
    pub node_status_report_frequency: Option<String>,
    pub node_lease_duration_seconds: Option<i32>,
    pub sync_frequency: Option<String>,
    pub static_pod_path: Option<String>,
    pub file_check_frequency: Option<String>,
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: Option<u8>,
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: Option<u8>,
    #[serde(rename = "imageMinimumGCAge")]
    pub image_minimum_gc_age: Option<String>,
    pub container_runtime_endpoint: Option<String>,
    pub image_service_endpoint: Option<String>,
    pub register_with_taints: Option<Vec<ConfigTaint>>,
    pub pod_logs_dir: Option<String>,
    pub authentication: Option<KubeletAuthentication>,
    pub authorization: Option<KubeletAuthorization>,
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
}

/// Parses a Go duration (`10s`, `1m0s`, `1h30m`, `500ms`, `1.5s`): the client library's
/// parser, with this module's error.
pub fn parse_go_duration(s: &str) -> Result<Duration, ConfigFileError> {
    ferrokube_client::leaderelection::parse_go_duration(s)
        .map_err(|_| ConfigFileError::Duration(s.to_owned()))
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
             authentication: {anonymous: {enabled: false}}\n",
        )
        .unwrap();
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
}
