//! `KubeSchedulerConfiguration` (`kubescheduler.config.k8s.io/v1`): the serde types,
//! upstream's defaults, and the resolution of a profile's plugin sets into the plugins
//! enabled at each extension point (`mergePlugins` + multiPoint expansion).

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";
pub const KIND: &str = "KubeSchedulerConfiguration";
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// Errors loading a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("decoding KubeSchedulerConfiguration: {0}")]
    Decode(String),
    #[error("unsupported apiVersion/kind {0}/{1}; want {API_VERSION}/{KIND}")]
    Kind(String, String),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LeaderElectionConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_elect: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_deadline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_period: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_lock: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_namespace: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClientConnectionConfiguration {
    #[serde(default)]
    pub kubeconfig: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qps: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
}

/// One plugin in a plugin set.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PluginRef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PluginSet {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enabled: Vec<PluginRef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled: Vec<PluginRef>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Plugins {
    #[serde(default)]
    pub pre_enqueue: PluginSet,
    #[serde(default)]
    pub queue_sort: PluginSet,
    #[serde(default)]
    pub pre_filter: PluginSet,
    #[serde(default)]
    pub filter: PluginSet,
    #[serde(default)]
    pub post_filter: PluginSet,
    #[serde(default)]
    pub pre_score: PluginSet,
    #[serde(default)]
    pub score: PluginSet,
    #[serde(default)]
    pub reserve: PluginSet,
    #[serde(default)]
    pub permit: PluginSet,
    #[serde(default)]
    pub pre_bind: PluginSet,
    #[serde(default)]
    pub bind: PluginSet,
    #[serde(default)]
    pub post_bind: PluginSet,
    #[serde(default)]
    pub multi_point: PluginSet,
}

/// The extension points, in the order a pod meets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtensionPoint {
    PreEnqueue,
    QueueSort,
    PreFilter,
    Filter,
    PostFilter,
    PreScore,
    Score,
    Reserve,
    Permit,
    PreBind,
    Bind,
    PostBind,
}

impl ExtensionPoint {
    pub const ALL: [ExtensionPoint; 12] = [
        ExtensionPoint::PreEnqueue,
        ExtensionPoint::QueueSort,
        ExtensionPoint::PreFilter,
        ExtensionPoint::Filter,
        ExtensionPoint::PostFilter,
        ExtensionPoint::PreScore,
        ExtensionPoint::Score,
        ExtensionPoint::Reserve,
        ExtensionPoint::Permit,
        ExtensionPoint::PreBind,
        ExtensionPoint::Bind,
        ExtensionPoint::PostBind,
    ];
}

impl Plugins {
    pub fn set(&self, ep: ExtensionPoint) -> &PluginSet {
        match ep {
            ExtensionPoint::PreEnqueue => &self.pre_enqueue,
            ExtensionPoint::QueueSort => &self.queue_sort,
            ExtensionPoint::PreFilter => &self.pre_filter,
            ExtensionPoint::Filter => &self.filter,
            ExtensionPoint::PostFilter => &self.post_filter,
            ExtensionPoint::PreScore => &self.pre_score,
            ExtensionPoint::Score => &self.score,
            ExtensionPoint::Reserve => &self.reserve,
            ExtensionPoint::Permit => &self.permit,
            ExtensionPoint::PreBind => &self.pre_bind,
            ExtensionPoint::Bind => &self.bind,
            ExtensionPoint::PostBind => &self.post_bind,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PluginConfig {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage_of_nodes_to_score: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<Plugins>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugin_config: Vec<PluginConfig>,
}

impl Profile {
    pub fn name(&self) -> &str {
        self.scheduler_name
            .as_deref()
            .unwrap_or(DEFAULT_SCHEDULER_NAME)
    }
    pub fn args(&self, plugin: &str) -> Option<&Value> {
        self.plugin_config
            .iter()
            .find(|c| c.name == plugin)
            .and_then(|c| c.args.as_ref())
    }
}

/// `KubeSchedulerConfiguration` (v1).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KubeSchedulerConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<i32>,
    #[serde(default)]
    pub leader_election: LeaderElectionConfiguration,
    #[serde(default)]
    pub client_connection: ClientConnectionConfiguration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage_of_nodes_to_score: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_initial_backoff_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_max_backoff_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<Profile>,
}

impl KubeSchedulerConfiguration {
    /// Parses YAML (or JSON) and applies the v1 defaults.
    pub fn from_yaml(s: &str) -> Result<Self, ConfigError> {
        let mut c: KubeSchedulerConfiguration =
            serde_yaml_ng::from_str(s).map_err(|e| ConfigError::Decode(e.to_string()))?;
        let av = c.api_version.clone().unwrap_or_default();
        let kind = c.kind.clone().unwrap_or_default();
        if av != API_VERSION || kind != KIND {
            return Err(ConfigError::Kind(av, kind));
        }
        c.set_defaults();
        c.validate()?;
        Ok(c)
    }

    /// The configuration the scheduler runs with when given none.
    pub fn default_config() -> Self {
        let mut c = KubeSchedulerConfiguration {
            api_version: Some(API_VERSION.into()),
            kind: Some(KIND.into()),
            ..Default::default()
        };
        c.set_defaults();
        c
    }

    /// `SetDefaults_KubeSchedulerConfiguration`.
    pub fn set_defaults(&mut self) {
        self.parallelism.get_or_insert(16);
        self.percentage_of_nodes_to_score.get_or_insert(0);
        self.pod_initial_backoff_seconds.get_or_insert(1);
        self.pod_max_backoff_seconds.get_or_insert(10);
        let le = &mut self.leader_election;
        le.leader_elect.get_or_insert(true);
        le.lease_duration.get_or_insert_with(|| "15s".into());
        le.renew_deadline.get_or_insert_with(|| "10s".into());
        le.retry_period.get_or_insert_with(|| "2s".into());
        le.resource_lock.get_or_insert_with(|| "leases".into());
        le.resource_name
            .get_or_insert_with(|| "kube-scheduler".into());
        le.resource_namespace
            .get_or_insert_with(|| "kube-system".into());
        // Upstream defaults a zero as unset.
        let cc = &mut self.client_connection;
        cc.qps = Some(cc.qps.filter(|q| *q != 0.0).unwrap_or(50.0));
        cc.burst = Some(cc.burst.filter(|b| *b != 0).unwrap_or(100));
        if self.profiles.is_empty() {
            self.profiles.push(Profile::default());
        }
        for p in &mut self.profiles {
            p.scheduler_name
                .get_or_insert_with(|| DEFAULT_SCHEDULER_NAME.into());
        }
    }

    /// `clientConnection.qps` and `burst` after defaulting (50 and 100): the limit on
    /// each of the scheduler's clients, as client-go's token bucket applies them.
    pub fn client_limits(&self) -> (f32, u32) {
        let qps = self.client_connection.qps.unwrap_or(50.0);
        let burst = self.client_connection.burst.unwrap_or(100).max(0) as u32;
        (qps, burst)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut names = std::collections::HashSet::new();
        for p in &self.profiles {
            if !names.insert(p.name().to_string()) {
                return Err(ConfigError::Invalid(format!(
                    "profiles[].schedulerName: Duplicate value: {:?}",
                    p.name()
                )));
            }
            if let Some(pct) = p.percentage_of_nodes_to_score
                && !(0..=100).contains(&pct)
            {
                return Err(ConfigError::Invalid(format!(
                    "percentageOfNodesToScore: Invalid value: {pct}: not in valid range [0-100]"
                )));
            }
        }
        if let Some(pct) = self.percentage_of_nodes_to_score
            && !(0..=100).contains(&pct)
        {
            return Err(ConfigError::Invalid(format!(
                "percentageOfNodesToScore: Invalid value: {pct}: not in valid range [0-100]"
            )));
        }
        if let Some(burst) = self.client_connection.burst
            && burst < 0
        {
            return Err(ConfigError::Invalid(format!(
                "clientConnection.burst: Invalid value: {burst}: must be non-negative"
            )));
        }
        if self.pod_initial_backoff_seconds.unwrap_or(1) <= 0 {
            return Err(ConfigError::Invalid(
                "podInitialBackoffSeconds: must be greater than 0".into(),
            ));
        }
        if self.pod_max_backoff_seconds.unwrap_or(10)
            < self.pod_initial_backoff_seconds.unwrap_or(1)
        {
            return Err(ConfigError::Invalid(
                "podMaxBackoffSeconds: must be greater than or equal to PodInitialBackoffSeconds"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// The default multiPoint plugins with their score weights (`getDefaultPlugins`).
pub fn default_multi_point() -> Vec<PluginRef> {
    let p = |name: &str, weight: Option<i32>| PluginRef {
        name: name.into(),
        weight,
    };
    vec![
        p("SchedulingGates", None),
        p("PrioritySort", None),
        p("NodeUnschedulable", None),
        p("NodeName", None),
        p("TaintToleration", Some(3)),
        p("NodeAffinity", Some(2)),
        p("NodePorts", None),
        p("NodeResourcesFit", Some(1)),
        p("VolumeRestrictions", None),
        p("VolumeBinding", None),
        p("PodTopologySpread", Some(2)),
        p("InterPodAffinity", Some(2)),
        p("DefaultPreemption", None),
        p("NodeResourcesBalancedAllocation", Some(1)),
        p("ImageLocality", Some(1)),
        p("DefaultBinder", None),
    ]
}

/// A profile's plugin sets merged over the defaults (`mergePlugins`): the user's
/// multiPoint `disabled` removes defaults (`*` all of them), its `enabled` adds or
/// re-weights; the per-point sets are the user's (v1 has no per-point defaults).
pub fn merged_plugins(profile: &Profile) -> Plugins {
    let user = profile.plugins.clone().unwrap_or_default();
    let mut mp = default_multi_point();
    let disabled_all = user.multi_point.disabled.iter().any(|d| d.name == "*");
    mp.retain(|p| !disabled_all && !user.multi_point.disabled.iter().any(|d| d.name == p.name));
    for e in &user.multi_point.enabled {
        if let Some(x) = mp.iter_mut().find(|p| p.name == e.name) {
            *x = e.clone();
        } else {
            mp.push(e.clone());
        }
    }
    Plugins {
        multi_point: PluginSet {
            enabled: mp,
            disabled: vec![],
        },
        ..user
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_defaults() {
        let c = KubeSchedulerConfiguration::from_yaml(
            r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 30
leaderElection:
  leaderElect: false
profiles:
- schedulerName: default-scheduler
- schedulerName: bin-packer
  plugins:
    multiPoint:
      disabled:
      - name: ImageLocality
    score:
      enabled:
      - name: NodeResourcesFit
        weight: 5
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
"#,
        )
        .unwrap();
        assert_eq!(c.percentage_of_nodes_to_score, Some(30));
        assert_eq!(c.pod_initial_backoff_seconds, Some(1));
        assert_eq!(c.pod_max_backoff_seconds, Some(10));
        assert_eq!(c.leader_election.leader_elect, Some(false));
        assert_eq!(c.leader_election.lease_duration.as_deref(), Some("15s"));
        assert_eq!(c.profiles.len(), 2);
        let bp = &c.profiles[1];
        assert_eq!(bp.name(), "bin-packer");
        assert_eq!(
            bp.args("NodeResourcesFit").unwrap()["scoringStrategy"]["type"],
            "MostAllocated"
        );
        let m = merged_plugins(bp);
        assert!(
            !m.multi_point
                .enabled
                .iter()
                .any(|p| p.name == "ImageLocality")
        );
        assert_eq!(m.score.enabled[0].weight, Some(5));
    }

    #[test]
    fn rejects_bad_configs() {
        assert!(matches!(
            KubeSchedulerConfiguration::from_yaml("apiVersion: v1\nkind: Pod\n"),
            Err(ConfigError::Kind(..))
        ));
        let dup = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: a\n- schedulerName: a\n";
        assert!(matches!(
            KubeSchedulerConfiguration::from_yaml(dup),
            Err(ConfigError::Invalid(_))
        ));
        let pct = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npercentageOfNodesToScore: 101\n";
        assert!(KubeSchedulerConfiguration::from_yaml(pct).is_err());
        assert!(KubeSchedulerConfiguration::from_yaml("{{{").is_err());
        let burst = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  burst: -1\n";
        assert_eq!(
            KubeSchedulerConfiguration::from_yaml(burst)
                .unwrap_err()
                .to_string(),
            ConfigError::Invalid(
                "clientConnection.burst: Invalid value: -1: must be non-negative".into()
            )
            .to_string()
        );
    }

    #[test]
    fn client_limits_default_as_upstream() {
        let c = KubeSchedulerConfiguration::default_config();
        assert_eq!(c.client_limits(), (50.0, 100));
        let c = KubeSchedulerConfiguration::from_yaml(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  qps: 2000\n  burst: 4000\n",
        )
        .unwrap();
        assert_eq!(c.client_limits(), (2000.0, 4000));
    }
}
