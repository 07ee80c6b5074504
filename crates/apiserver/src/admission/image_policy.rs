//! ImagePolicyWebhook (upstream `plugin/pkg/admission/imagepolicy`), off by default:
//! a pod's images are sent to a webhook as an `imagepolicy.k8s.io/v1alpha1`
//! ImageReview, and a pod whose review is not allowed is refused (403). Pods
//! created or updated are reviewed with their containers and init containers, the
//! `ephemeralcontainers` subresource with its ephemeral containers; other
//! subresources and resources are not.
//!
//! The configuration (`imagePolicy` in the plugin's AdmissionConfiguration entry)
//! names the webhook's kubeconfig (`kubeConfigFile`, an absolute path) and, as
//! upstream, how long answers are cached (`allowTTL`, default 300 s; `denyTTL`, 30 s;
//! `-1` turns a cache off), how long to wait before retrying (`retryBackoff`, in ms,
//! default 500) and whether a webhook that cannot be reached admits
//! (`defaultAllow`).
//!
//! When the webhook fails and `defaultAllow` admits, the pod is marked
//! `alpha.image-policy.k8s.io/failed-open: "true"` and the audit event
//! `imagepolicywebhook.image-policy.k8s.io/failed-open: "true"`, as upstream.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use super::{Attributes, Operation, Plugin, PluginInit};
use crate::webhook_client::KubeconfigWebhook;

pub(crate) const NAME: &str = "ImagePolicyWebhook";

/// The prefix of the audit annotations the plugin adds (upstream `AuditKeyPrefix`).
const AUDIT_PREFIX: &str = "imagepolicywebhook.image-policy.k8s.io/";
/// Upstream `api.ImagePolicyFailedOpenKey`: the mark on a pod admitted without an answer.
const FAILED_OPEN_ANNOTATION: &str = "alpha.image-policy.k8s.io/failed-open";
/// Upstream's answer cache (`cache.NewLRUExpireCache(1024)`).
const CACHE_SIZE: NonZeroUsize = NonZeroUsize::new(1024).unwrap();
/// Each call's timeout, as upstream's generic webhook.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The plugin's settings, normalized as upstream's `normalizeWebhookConfig`.
#[derive(Debug, Clone, PartialEq)]
struct Settings {
    kubeconfig: PathBuf,
    /// Zero: allowed answers are not cached.
    allow_ttl: Duration,
    /// Zero: denials are not cached.
    deny_ttl: Duration,
    retry_backoff: Duration,
    default_allow: bool,
}

/// Upstream `normalizeConfigDuration`: `-1` turns the setting off (zero), `0` (or
/// absent) is the default, anything else is `value` units and must lie in
/// `[min, max]`.
fn duration_setting(
    config: &Value,
    field: &str,
    unit: Duration,
    (min, max, default): (Duration, Duration, Duration),
) -> Result<Duration, String> {
    let value = match &config[field] {
        Value::Null => 0,
        v => v
            .as_i64()
            .ok_or_else(|| format!("imagePolicy.{field}: not an integer: {v}"))?,
    };
    match value {
        -1 => Ok(Duration::ZERO),
        0 => Ok(default),
        v if v < 0 => Err(format!(
            "imagePolicy.{field}: valid value is between {min:?} and {max:?}, got {v}"
        )),
        v => {
            let d = unit.saturating_mul(u32::try_from(v).unwrap_or(u32::MAX));
            if d < min || d > max {
                return Err(format!(
                    "imagePolicy.{field}: valid value is between {min:?} and {max:?}, got {d:?}"
                ));
            }
            Ok(d)
        }
    }
}

fn read_settings(configuration: Option<&Value>) -> Result<Settings, String> {
    let config = configuration
        .map(|c| &c["imagePolicy"])
        .filter(|c| c.is_object())
        .ok_or("no imagePolicy configuration in --admission-control-config-file")?;
    let kubeconfig = config["kubeConfigFile"].as_str().unwrap_or_default();
    let kubeconfig = PathBuf::from(kubeconfig);
    if !kubeconfig.is_absolute() {
        return Err(format!(
            "kubeConfigFile {:?} must be an absolute file path",
            kubeconfig.display()
        ));
    }
    // Read now, so that a missing or broken file stops the server from starting; the
    // client itself is made on first use (making it waits on I/O).
    kube::config::Kubeconfig::read_from(&kubeconfig)
        .map_err(|e| format!("kubeConfigFile {}: {e}", kubeconfig.display()))?;
    let (second, minute) = (Duration::from_secs(1), Duration::from_secs(60));
    Ok(Settings {
        kubeconfig,
        allow_ttl: duration_setting(
            config,
            "allowTTL",
            second,
            (second, 30 * minute, 300 * second),
        )?,
        deny_ttl: duration_setting(
            config,
            "denyTTL",
            second,
            (second, 30 * minute, 30 * second),
        )?,
        retry_backoff: duration_setting(
            config,
            "retryBackoff",
            Duration::from_millis(1),
            (
                Duration::from_nanos(1),
                5 * minute,
                Duration::from_millis(500),
            ),
        )?,
        default_allow: config["defaultAllow"].as_bool().unwrap_or(false),
    })
}

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    let settings = read_settings(init.options.configuration(NAME))?;
    Ok(Arc::new(ImagePolicyWebhook {
        settings,
        webhook: OnceCell::new(),
        cache: Mutex::new(lru::LruCache::new(CACHE_SIZE)),
    }))
}

struct ImagePolicyWebhook {
    settings: Settings,
    webhook: OnceCell<Result<KubeconfigWebhook, String>>,
    /// Review specs (as JSON) to their answer's status and when it expires.
    cache: Mutex<lru::LruCache<String, (Instant, Value)>>,
}

/// The review's spec: the images of the containers the request can change, the
/// pod's `*.image-policy.k8s.io/*` annotations and the namespace.
fn review_spec(a: &Attributes, pod: &Value) -> Value {
    let lists: &[&str] = if a.subresource == "ephemeralcontainers" {
        &["ephemeralContainers"]
    } else {
        &["containers", "initContainers"]
    };
    let containers: Vec<Value> = lists
        .iter()
        .filter_map(|l| pod["spec"][*l].as_array())
        .flatten()
        .map(|c| json!({"image": c["image"].as_str().unwrap_or_default()}))
        .collect();
    let annotations: BTreeMap<&str, &Value> = pod["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.contains(".image-policy.k8s.io/"))
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let mut spec = serde_json::Map::new();
    if !containers.is_empty() {
        spec.insert("containers".into(), containers.into());
    }
    if !annotations.is_empty() {
        spec.insert("annotations".into(), json!(annotations));
    }
    if !a.namespace.is_empty() {
        spec.insert("namespace".into(), json!(a.namespace));
    }
    Value::Object(spec)
}

impl ImagePolicyWebhook {
    fn cached(&self, key: &str) -> Option<Value> {
        let mut cache = self.cache.lock();
        match cache.get(key) {
            Some((expires, status)) if *expires > Instant::now() => Some(status.clone()),
            Some(_) => {
                cache.pop(key);
                None
            }
            None => None,
        }
    }

    /// The webhook's answer for `spec`: its ImageReview status.
    async fn review(&self, spec: &Value) -> Result<Value, String> {
        let webhook = self
            .webhook
            .get_or_init(|| KubeconfigWebhook::from_file(&self.settings.kubeconfig))
            .await
            .as_ref()
            .map_err(|e| format!("kubeConfigFile {}: {e}", self.settings.kubeconfig.display()))?;
        let body = json!({
            "apiVersion": "imagepolicy.k8s.io/v1alpha1",
            "kind": "ImageReview",
            "metadata": {"creationTimestamp": null},
            "spec": spec,
            "status": {"allowed": false},
        });
        let answer = webhook
            .post_json_retrying(
                CALL_TIMEOUT,
                self.settings.retry_backoff,
                body.to_string().into_bytes(),
            )
            .await
            .map_err(|e| e.to_string())?;
        let review: Value = serde_json::from_slice(&answer)
            .map_err(|e| format!("the webhook's answer is not an ImageReview: {e}"))?;
        Ok(review["status"].clone())
    }

    /// Upstream `webhookError`: a failed call admits when `defaultAllow` says so.
    fn webhook_failed(&self, a: &Attributes, err: String) -> Result<(), ApiError> {
        if self.settings.default_allow {
            tracing::info!(error = %err, "image policy webhook failed; admitting (defaultAllow)");
            a.audit_annotations
                .add(format!("{AUDIT_PREFIX}failed-open"), "true");
            a.object_annotations.add(FAILED_OPEN_ANNOTATION, "true");
            return Ok(());
        }
        Err(a.forbidden(err))
    }
}

#[async_trait]
impl Plugin for ImagePolicyWebhook {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        a.is_core("pods")
            && matches!(a.subresource.as_str(), "" | "ephemeralcontainers")
            && matches!(a.operation, Operation::Create | Operation::Update)
    }

    async fn validate(
        &self,
        a: &Attributes,
        pod: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(pod) = pod else {
            return Ok(());
        };
        let spec = review_spec(a, pod);
        let key = spec.to_string();
        let status = match self.cached(&key) {
            Some(status) => status,
            None => match self.review(&spec).await {
                Ok(status) => {
                    let allowed = status["allowed"].as_bool() == Some(true);
                    let ttl = if allowed {
                        self.settings.allow_ttl
                    } else {
                        self.settings.deny_ttl
                    };
                    if !ttl.is_zero() {
                        self.cache
                            .lock()
                            .put(key, (Instant::now() + ttl, status.clone()));
                    }
                    status
                }
                Err(e) => return self.webhook_failed(a, e),
            },
        };
        for (k, v) in status["auditAnnotations"].as_object().into_iter().flatten() {
            a.audit_annotations
                .add(format!("{AUDIT_PREFIX}{k}"), v.as_str().unwrap_or_default());
        }
        if status["allowed"].as_bool() == Some(true) {
            return Ok(());
        }
        Err(
            a.forbidden(match status["reason"].as_str().filter(|r| !r.is_empty()) {
                Some(reason) => {
                    format!("image policy webhook backend denied one or more images: {reason}")
                }
                None => "one or more images rejected by webhook backend".to_string(),
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig_file() -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            file.path(),
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {}\n",
        )
        .unwrap();
        file
    }

    fn settings(policy: Value) -> Result<Settings, String> {
        read_settings(Some(&json!({ "imagePolicy": policy })))
    }

    #[test]
    fn settings_take_upstream_defaults_units_and_ranges() {
        let file = kubeconfig_file();
        let path = file.path().to_str().unwrap();
        let s = settings(json!({"kubeConfigFile": path})).unwrap();
        assert_eq!(s.allow_ttl, Duration::from_secs(300));
        assert_eq!(s.deny_ttl, Duration::from_secs(30));
        assert_eq!(s.retry_backoff, Duration::from_millis(500));
        assert!(!s.default_allow);

        let s = settings(
            json!({"kubeConfigFile": path, "allowTTL": 50, "denyTTL": -1,
            "retryBackoff": 100, "defaultAllow": true}),
        )
        .unwrap();
        assert_eq!(s.allow_ttl, Duration::from_secs(50));
        assert_eq!(s.deny_ttl, Duration::ZERO);
        assert_eq!(s.retry_backoff, Duration::from_millis(100));
        assert!(s.default_allow);

        let err = settings(json!({"kubeConfigFile": path, "allowTTL": 1801})).unwrap_err();
        assert!(err.contains("allowTTL: valid value is between"), "{err}");
        let err = settings(json!({"kubeConfigFile": path, "retryBackoff": 300001})).unwrap_err();
        assert!(err.contains("retryBackoff"), "{err}");
        let err = settings(json!({"kubeConfigFile": "relative/kubeconfig"})).unwrap_err();
        assert!(err.contains("must be an absolute file path"), "{err}");
        let err = settings(json!({"kubeConfigFile": "/no/such/kubeconfig"})).unwrap_err();
        assert!(err.contains("/no/such/kubeconfig"), "{err}");
        let err = read_settings(None).unwrap_err();
        assert!(err.contains("no imagePolicy configuration"), "{err}");
    }

    #[test]
    fn the_review_carries_the_images_policy_annotations_and_namespace() {
        let resource = ferrokube_api::resources::lookup("", "v1", "pods").unwrap();
        let user = || ferrokube_auth::UserInfo::new("alice", ["dev"]);
        let a = Attributes::new(user(), Operation::Create, resource).in_namespace(Some("ns"));
        let pod = json!({
            "metadata": {"annotations": {
                "mycluster.image-policy.k8s.io/ticket-1234": "break-glass",
                "other.example.com/x": "y"}},
            "spec": {
                "containers": [{"image": "app:1"}],
                "initContainers": [{"image": "init:1"}],
                "ephemeralContainers": [{"image": "debug:1"}]}});
        assert_eq!(
            review_spec(&a, &pod),
            json!({"containers": [{"image": "app:1"}, {"image": "init:1"}],
                "annotations": {"mycluster.image-policy.k8s.io/ticket-1234": "break-glass"},
                "namespace": "ns"})
        );
        let mut debug =
            Attributes::new(user(), Operation::Update, resource).in_namespace(Some("ns"));
        debug.subresource = "ephemeralcontainers".into();
        assert_eq!(
            review_spec(&debug, &pod)["containers"],
            json!([{"image": "debug:1"}])
        );
    }
}
