//! `KubeProxyConfiguration` (`kubeproxy.config.k8s.io/v1alpha1`, the `--config` file):
//! the fields this kube-proxy uses, with upstream's defaults. k8s-openapi has no type
//! for it (it is a component config, not an API object). No IO.

use std::time::Duration;

use serde::Deserialize;

pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
pub const KIND: &str = "KubeProxyConfiguration";

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeProxyConfiguration {
    pub api_version: String,
    pub kind: String,
    pub client_connection: ClientConnection,
    pub hostname_override: String,
    pub bind_address: String,
    pub healthz_bind_address: String,
    pub metrics_bind_address: String,
    pub mode: String,
    #[serde(rename = "clusterCIDR")]
    pub cluster_cidr: String,
    pub node_port_addresses: Vec<String>,
    pub nftables: NftablesConfig,
    pub iptables: IptablesConfig,
    /// Top-level `syncPeriod`/`minSyncPeriod` (newer releases); the selected mode's
    /// section (`nftables:` or `iptables:`) wins when both are set.
    pub sync_period: Option<String>,
    pub min_sync_period: Option<String>,
    /// Gates merged under `--feature-gates` (component-base checks them).
    pub feature_gates: std::collections::BTreeMap<String, bool>,
    /// Merged under the logging flags (`-v`, `--logging-format`, ...).
    pub logging: ferrokube_component_base::logs::LoggingConfiguration,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct ClientConnection {
    pub kubeconfig: String,
    pub qps: Option<f32>,
    pub burst: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NftablesConfig {
    pub masquerade_all: bool,
    pub masquerade_bit: u8,
    pub sync_period: Option<String>,
    pub min_sync_period: Option<String>,
}

impl Default for NftablesConfig {
    fn default() -> Self {
        NftablesConfig {
            masquerade_all: false,
            masquerade_bit: 14,
            sync_period: None,
            min_sync_period: None,
        }
    }
}

/// `iptables:` (upstream's `KubeProxyIPTablesConfiguration`); `localhostNodePorts`
/// also governs the nftables mode's loopback NodePorts here.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IptablesConfig {
    pub masquerade_all: bool,
    pub masquerade_bit: u8,
    pub localhost_node_ports: bool,
    pub sync_period: Option<String>,
    pub min_sync_period: Option<String>,
}

impl Default for IptablesConfig {
    fn default() -> Self {
        IptablesConfig {
            masquerade_all: false,
            masquerade_bit: 14,
            localhost_node_ports: true,
            sync_period: None,
            min_sync_period: None,
        }
    }
}

/// The settings of the selected mode's section (`nftables:` or `iptables:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeSettings {
    pub masquerade_all: bool,
    pub masquerade_bit: u8,
}

impl Default for KubeProxyConfiguration {
    fn default() -> Self {
        KubeProxyConfiguration {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            client_connection: ClientConnection::default(),
            hostname_override: String::new(),
            bind_address: "0.0.0.0".into(),
            healthz_bind_address: "0.0.0.0:10256".into(),
            metrics_bind_address: "127.0.0.1:10249".into(),
            mode: String::new(),
            cluster_cidr: String::new(),
            node_port_addresses: Vec::new(),
            nftables: NftablesConfig::default(),
            iptables: IptablesConfig::default(),
            sync_period: None,
            min_sync_period: None,
            feature_gates: Default::default(),
            logging: Default::default(),
        }
    }
}

/// Errors in the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("parsing KubeProxyConfiguration: {0}")]
    Parse(String),
    #[error("{0}")]
    Invalid(String),
}

impl KubeProxyConfiguration {
    /// Parses a YAML (or JSON) file; checks apiVersion and kind.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let cfg: KubeProxyConfiguration =
            serde_yaml_ng::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        if cfg.api_version != API_VERSION || cfg.kind != KIND {
            return Err(ConfigError::Invalid(format!(
                "expected apiVersion {API_VERSION} and kind {KIND}, got {:?} {:?}",
                cfg.api_version, cfg.kind
            )));
        }
        Ok(cfg)
    }

    /// The mode's `syncPeriod` (`nftables.syncPeriod` or `iptables.syncPeriod`), else
    /// the top-level `syncPeriod`; default 30 s.
    pub fn sync_period(&self, mode: ProxyMode) -> Result<Duration, ConfigError> {
        let own = match mode {
            ProxyMode::Nftables => self.nftables.sync_period.as_ref(),
            ProxyMode::Iptables => self.iptables.sync_period.as_ref(),
        };
        duration_or(own.or(self.sync_period.as_ref()), Duration::from_secs(30))
    }

    /// The mode's `minSyncPeriod`, else the top-level one; default 1 s.
    pub fn min_sync_period(&self, mode: ProxyMode) -> Result<Duration, ConfigError> {
        let own = match mode {
            ProxyMode::Nftables => self.nftables.min_sync_period.as_ref(),
            ProxyMode::Iptables => self.iptables.min_sync_period.as_ref(),
        };
        duration_or(
            own.or(self.min_sync_period.as_ref()),
            Duration::from_secs(1),
        )
    }

    /// The mode's masquerade settings (`masqueradeAll`, `masqueradeBit`).
    pub fn mode_settings(&self, mode: ProxyMode) -> ModeSettings {
        match mode {
            ProxyMode::Nftables => ModeSettings {
                masquerade_all: self.nftables.masquerade_all,
                masquerade_bit: self.nftables.masquerade_bit,
            },
            ProxyMode::Iptables => ModeSettings {
                masquerade_all: self.iptables.masquerade_all,
                masquerade_bit: self.iptables.masquerade_bit,
            },
        }
    }
}

fn duration_or(v: Option<&String>, default: Duration) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(default),
        Some(s) => parse_go_duration(s).map_err(ConfigError::Invalid),
    }
}

/// The proxy modes, as `--proxy-mode` / `mode` spell them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    Nftables,
    Iptables,
}

impl ProxyMode {
    /// `nftables` / `iptables`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyMode::Nftables => "nftables",
            ProxyMode::Iptables => "iptables",
        }
    }
}

/// `--proxy-mode`: empty and `nftables` select nftables (this kube-proxy's default),
/// `iptables` selects iptables; `ipvs` is refused with the reason.
pub fn parse_proxy_mode(mode: &str) -> Result<ProxyMode, ConfigError> {
    match mode {
        "" | "nftables" => Ok(ProxyMode::Nftables),
        "iptables" => Ok(ProxyMode::Iptables),
        "ipvs" => Err(ConfigError::Invalid(
            "--proxy-mode=ipvs is not supported: this kernel has no IPVS (CONFIG_IP_VS); use --proxy-mode=nftables or iptables".into(),
        )),
        other => Err(ConfigError::Invalid(format!(
            "invalid --proxy-mode {other:?}: supported modes are \"nftables\" and \"iptables\""
        ))),
    }
}

/// Parses Go's `time.Duration` text (`30s`, `1m30s`, `500ms`, `1h`): the client
/// library's parser.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    ferrokube_client::leaderelection::parse_go_duration(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_configuration_file() {
        let cfg = KubeProxyConfiguration::from_yaml(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clusterCIDR: 10.244.0.0/16
hostnameOverride: node-a
healthzBindAddress: 127.0.0.1:10256
clientConnection:
  kubeconfig: /etc/kp.kubeconfig
nftables:
  masqueradeBit: 13
  syncPeriod: 1m0s
  minSyncPeriod: 500ms
nodePortAddresses: [primary]
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: \"0\"
    text:
      infoBufferSize: \"0\"
  verbosity: 2
",
        )
        .unwrap();
        assert_eq!(cfg.logging.verbosity, Some(2));
        assert_eq!(cfg.logging.flush_frequency, Some(serde_json::json!(0)));
        assert_eq!(
            cfg.logging.options.json.info_buffer_size,
            Some(serde_json::json!("0"))
        );
        assert_eq!(cfg.cluster_cidr, "10.244.0.0/16");
        assert_eq!(cfg.client_connection.kubeconfig, "/etc/kp.kubeconfig");
        assert_eq!(cfg.nftables.masquerade_bit, 13);
        assert_eq!(
            cfg.sync_period(ProxyMode::Nftables).unwrap(),
            Duration::from_secs(60)
        );
        assert_eq!(
            cfg.min_sync_period(ProxyMode::Nftables).unwrap(),
            Duration::from_millis(500)
        );
        // The iptables section has its own (defaulted) periods and masquerade bit.
        assert_eq!(
            cfg.sync_period(ProxyMode::Iptables).unwrap(),
            Duration::from_secs(30)
        );
        assert_eq!(cfg.mode_settings(ProxyMode::Iptables).masquerade_bit, 14);
        assert_eq!(cfg.mode_settings(ProxyMode::Nftables).masquerade_bit, 13);
        assert_eq!(cfg.metrics_bind_address, "127.0.0.1:10249", "default kept");
        assert!(KubeProxyConfiguration::from_yaml("kind: Pod\napiVersion: v1\n").is_err());
        assert!(KubeProxyConfiguration::from_yaml("mode: [").is_err());
    }

    #[test]
    fn proxy_modes() {
        assert_eq!(parse_proxy_mode("").unwrap(), ProxyMode::Nftables);
        assert_eq!(parse_proxy_mode("nftables").unwrap(), ProxyMode::Nftables);
        assert_eq!(parse_proxy_mode("iptables").unwrap(), ProxyMode::Iptables);
        let e = parse_proxy_mode("ipvs").unwrap_err().to_string();
        assert!(e.contains("no IPVS"), "{e}");
        assert!(e.contains("nftables or iptables"), "{e}");
        assert!(parse_proxy_mode("userspace").is_err());
    }

    #[test]
    fn iptables_section() {
        let cfg = KubeProxyConfiguration::from_yaml(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
syncPeriod: 45s
iptables:
  masqueradeAll: true
  masqueradeBit: 12
  localhostNodePorts: false
  minSyncPeriod: 2s
",
        )
        .unwrap();
        assert_eq!(parse_proxy_mode(&cfg.mode).unwrap(), ProxyMode::Iptables);
        assert_eq!(
            cfg.mode_settings(ProxyMode::Iptables),
            ModeSettings {
                masquerade_all: true,
                masquerade_bit: 12
            }
        );
        assert!(!cfg.iptables.localhost_node_ports);
        assert_eq!(
            cfg.sync_period(ProxyMode::Iptables).unwrap(),
            Duration::from_secs(45),
            "top-level syncPeriod"
        );
        assert_eq!(
            cfg.min_sync_period(ProxyMode::Iptables).unwrap(),
            Duration::from_secs(2)
        );
        assert_eq!(
            cfg.min_sync_period(ProxyMode::Nftables).unwrap(),
            Duration::from_secs(1)
        );
        assert!(!cfg.mode_settings(ProxyMode::Nftables).masquerade_all);
    }

    #[test]
    fn go_durations() {
        assert_eq!(
            parse_go_duration("1h2m3s").unwrap(),
            Duration::from_secs(3723)
        );
        assert_eq!(
            parse_go_duration("1.5s").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_go_duration("5").is_err());
        assert!(parse_go_duration("5d").is_err());
    }
}
