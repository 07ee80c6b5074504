//! EventRateLimit (upstream `plugin/pkg/admission/eventratelimit`), off by default:
//! token buckets on core/v1 Event creates and updates, configured by
//! `--admission-control-config-file` (`eventratelimit.admission.k8s.io/v1alpha1`
//! `Configuration`, which it requires). Each limit is a bucket of `qps` and `burst` for
//! the whole server (`Server`) or one per namespace, user name or event source and
//! involved object (`Namespace`, `User`, `SourceAndObject`; the `cacheSize` most
//! recently used, 4096 by default). An event over any limit is 429 `Too many requests`.
//! Dry runs and events.k8s.io Events pass, as upstream.

use std::num::NonZeroUsize;
use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_component_base::ratelimit::TokenBucket;
use parking_lot::Mutex;
use serde_json::Value;
use tokio::time::Instant;

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "EventRateLimit";
const API_VERSION: &str = "eventratelimit.admission.k8s.io/v1alpha1";
/// Upstream `defaultCacheSize`.
const DEFAULT_CACHE_SIZE: usize = 4096;

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    let config =
        init.options.configuration(NAME).cloned().unwrap_or_else(
            || serde_json::json!({"apiVersion": API_VERSION, "kind": "Configuration"}),
        );
    Ok(Arc::new(EventRateLimit {
        limits: read_config(&config)?,
    }))
}

struct EventRateLimit {
    limits: Vec<Limit>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LimitType {
    Server,
    Namespace,
    User,
    SourceAndObject,
}

impl LimitType {
    const ALL: [(&str, LimitType); 4] = [
        ("Server", LimitType::Server),
        ("Namespace", LimitType::Namespace),
        ("User", LimitType::User),
        ("SourceAndObject", LimitType::SourceAndObject),
    ];

    fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, t)| *t == self)
            .map_or("", |(n, _)| n)
    }

    /// The bucket an event request draws from (upstream's key functions).
    fn key(self, a: &Attributes, event: Option<&Value>) -> String {
        match self {
            LimitType::Server => String::new(),
            LimitType::Namespace => a.namespace.clone(),
            LimitType::User => a.user.name.clone(),
            LimitType::SourceAndObject => {
                let Some(event) = event else {
                    return String::new();
                };
                let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
                let object = &event["involvedObject"];
                [
                    s(&event["source"]["component"]),
                    s(&event["source"]["host"]),
                    s(&object["kind"]),
                    s(&object["namespace"]),
                    s(&object["name"]),
                    s(&object["uid"]),
                    s(&object["apiVersion"]),
                ]
                .concat()
            }
        }
    }
}

/// One configured limit and its buckets.
struct Limit {
    kind: LimitType,
    qps: f64,
    burst: u32,
    buckets: Mutex<lru::LruCache<String, TokenBucket>>,
}

impl Limit {
    /// Takes a token from the request's bucket; `Err` names the limit reached.
    fn accept(&self, key: String, now: Instant) -> Result<(), String> {
        let mut buckets = self.buckets.lock();
        let bucket = buckets.get_or_insert(key.clone(), || {
            TokenBucket::new_at(self.qps, self.burst, now)
        });
        if bucket.try_acquire_at(now) {
            Ok(())
        } else {
            Err(format!(
                "Too many requests: limit reached on type {} for key {key}",
                self.kind.name()
            ))
        }
    }
}

/// Upstream's `Configuration`, validated as its `ValidateConfiguration` does.
fn read_config(config: &Value) -> Result<Vec<Limit>, String> {
    if config["apiVersion"] != API_VERSION || config["kind"] != "Configuration" {
        return Err(format!(
            "expected kind Configuration in {API_VERSION}, got {}, {}",
            config["apiVersion"], config["kind"]
        ));
    }
    let items = config["limits"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if items.is_empty() {
        return Err("limits: Required value: must not be empty".into());
    }
    let mut errors = Vec::new();
    let mut limits: Vec<Limit> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("limits[{i}]");
        let type_name = item["type"].as_str().unwrap_or_default();
        let Some(kind) = LimitType::ALL
            .iter()
            .find(|(n, _)| *n == type_name)
            .map(|(_, t)| *t)
        else {
            errors.push(format!(
                "{path}.type: Unsupported value: {:?}: supported values: \"Namespace\", \"Server\", \"SourceAndObject\", \"User\"",
                type_name
            ));
            continue;
        };
        let positive = |field: &str, errors: &mut Vec<String>| -> f64 {
            match item[field].as_i64() {
                Some(v) if v > 0 => v as f64,
                _ => {
                    errors.push(format!(
                        "{path}.{field}: Invalid value: {}: must be positive",
                        item[field]
                    ));
                    0.0
                }
            }
        };
        let qps = positive("qps", &mut errors);
        // Upstream's burst is an int32; a float-to-int `as` saturates.
        let burst = positive("burst", &mut errors) as u32;
        let cache_size = match &item["cacheSize"] {
            Value::Null => DEFAULT_CACHE_SIZE,
            v => match v.as_i64() {
                Some(0) => DEFAULT_CACHE_SIZE,
                Some(n) if n > 0 => n as usize,
                _ => {
                    errors.push(format!(
                        "{path}.cacheSize: Invalid value: {v}: must not be negative"
                    ));
                    DEFAULT_CACHE_SIZE
                }
            },
        };
        if limits.iter().any(|l| l.kind == kind) {
            errors.push(format!("{path}.type: Duplicate value: {type_name:?}"));
        }
        // A Server limit has one bucket.
        let capacity = if kind == LimitType::Server {
            1
        } else {
            cache_size
        };
        limits.push(Limit {
            kind,
            qps,
            burst,
            buckets: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
            )),
        });
    }
    if errors.is_empty() {
        Ok(limits)
    } else {
        Err(errors.join(", "))
    }
}

#[async_trait]
impl Plugin for EventRateLimit {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Core/v1 Events (upstream compares the kind's group), CREATE and UPDATE.
    fn handles(&self, a: &Attributes) -> bool {
        a.is_core("events")
            && a.subresource.is_empty()
            && matches!(a.operation, Operation::Create | Operation::Update)
    }

    async fn validate(
        &self,
        a: &Attributes,
        object: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        // A dry run stores nothing, so it spends no tokens.
        if a.dry_run {
            return Ok(());
        }
        let now = Instant::now();
        let errors: Vec<String> = self
            .limits
            .iter()
            .filter_map(|l| l.accept(l.kind.key(a, object), now).err())
            .collect();
        match errors.as_slice() {
            [] => Ok(()),
            // Upstream wraps the aggregate of the limits' errors once more.
            [one] => Err(ApiError::too_many_requests_error(one)),
            many => Err(ApiError::too_many_requests_error(format!(
                "[{}]",
                many.join(", ")
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn config(limits: Value) -> Value {
        json!({"apiVersion": API_VERSION, "kind": "Configuration", "limits": limits})
    }

    #[test]
    fn buckets_start_full_and_refill_at_qps() {
        let limits = read_config(&config(
            json!([{"type": "Namespace", "qps": 2, "burst": 3}]),
        ))
        .unwrap();
        let limit = &limits[0];
        let t0 = Instant::now();
        for _ in 0..3 {
            limit.accept("a".into(), t0).unwrap();
        }
        assert_eq!(
            limit.accept("a".into(), t0).unwrap_err(),
            "Too many requests: limit reached on type Namespace for key a"
        );
        // Another key has its own bucket.
        limit.accept("b".into(), t0).unwrap();
        // Half a second at 2 qps is one token.
        let later = t0 + Duration::from_millis(500);
        limit.accept("a".into(), later).unwrap();
        assert!(limit.accept("a".into(), later).is_err());
    }

    #[test]
    fn the_least_recently_used_bucket_is_dropped_when_the_cache_is_full() {
        let limits = read_config(&config(
            json!([{"type": "User", "qps": 1, "burst": 1, "cacheSize": 1}]),
        ))
        .unwrap();
        let t0 = Instant::now();
        limits[0].accept("alice".into(), t0).unwrap();
        limits[0].accept("bob".into(), t0).unwrap();
        // alice's empty bucket was evicted: she starts full again.
        limits[0].accept("alice".into(), t0).unwrap();
    }

    #[test]
    fn invalid_configurations_are_named() {
        let err = read_config(&config(json!([]))).err().unwrap();
        assert_eq!(err, "limits: Required value: must not be empty");
        let err = read_config(&config(json!([
            {"type": "Pod", "qps": 1, "burst": 1},
            {"type": "Server", "qps": 0, "burst": 1},
            {"type": "User", "qps": 1, "burst": 1, "cacheSize": -1},
            {"type": "User", "qps": 1, "burst": 1}
        ])))
        .err()
        .unwrap();
        assert!(
            err.contains("limits[0].type: Unsupported value: \"Pod\""),
            "{err}"
        );
        assert!(
            err.contains("limits[1].qps: Invalid value: 0: must be positive"),
            "{err}"
        );
        assert!(
            err.contains("limits[2].cacheSize: Invalid value: -1"),
            "{err}"
        );
        assert!(
            err.contains("limits[3].type: Duplicate value: \"User\""),
            "{err}"
        );
        assert!(read_config(&json!({"kind": "Configuration"})).is_err());
    }
}
