//! PodTolerationRestriction (upstream `plugin/pkg/admission/podtolerationrestriction`),
//! off by default. On pod creation the namespace's default tolerations
//! (`scheduler.alpha.kubernetes.io/defaultTolerations`, a JSON list) are merged into
//! the pod's; on creation and update a pod that is not BestEffort gets the
//! `node.kubernetes.io/memory-pressure:NoSchedule` toleration; then every toleration
//! of the pod must be covered by one of the namespace's whitelist
//! (`scheduler.alpha.kubernetes.io/tolerationsWhitelist`), when it has a non-empty one.
//! Upstream's merge keeps only the widest of tolerations that cover one another.
//! No namespace is exempt (kube-system neither), as upstream.
//!
//!
//! `--admission-control-config-file` may give the cluster-wide fallbacks, upstream's
//! `Configuration` (`podtolerationrestriction.admission.k8s.io/v1alpha1`): `default`
//! tolerations for namespaces without the defaults annotation, and a `whitelist` for
//! namespaces without the whitelist annotation.

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_registry::Store;
use serde_json::{Map, Value, json};

use super::pod_node_selector::plain_error;
use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "PodTolerationRestriction";
pub(crate) const DEFAULT_TOLERATIONS: &str = "scheduler.alpha.kubernetes.io/defaultTolerations";
pub(crate) const TOLERATIONS_WHITELIST: &str = "scheduler.alpha.kubernetes.io/tolerationsWhitelist";
const MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
const WHITELIST_CONFLICT: &str = "pod tolerations (possibly merged with namespace default tolerations) conflict with its namespace whitelist";

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    let namespaces = ferrokube_api::resources::lookup("", "v1", "namespaces")
        .and_then(|info| init.registry.store_for(info))
        .cloned()
        .ok_or("no namespaces store")?;
    let config = match init.options.configuration(NAME) {
        Some(value) => ClusterTolerations::from_value(value)?,
        None => ClusterTolerations::default(),
    };
    Ok(Arc::new(PodTolerationRestriction { namespaces, config }))
}

struct PodTolerationRestriction {
    namespaces: Arc<Store>,
    config: ClusterTolerations,
}

/// The plugin's configuration: the cluster's default tolerations and whitelist.
#[derive(Debug, Default)]
struct ClusterTolerations {
    default: Vec<Toleration>,
    whitelist: Vec<Toleration>,
}

impl ClusterTolerations {
    const API_VERSION: &str = "podtolerationrestriction.admission.k8s.io/v1alpha1";

    fn from_value(config: &Value) -> Result<ClusterTolerations, String> {
        if config["apiVersion"] != Self::API_VERSION || config["kind"] != "Configuration" {
            return Err(format!(
                "expected kind Configuration in {}, got {}, {}",
                Self::API_VERSION,
                config["apiVersion"],
                config["kind"]
            ));
        }
        let mut errors = Vec::new();
        let mut list = |field: &str| -> Vec<Toleration> {
            let parsed: Vec<k8s_openapi::api::core::v1::Toleration> =
                match serde_json::from_value(config[field].clone()) {
                    Ok(list) => list,
                    Err(_) if config[field].is_null() => Vec::new(),
                    Err(e) => {
                        errors.push(format!("{field}: {e}"));
                        return Vec::new();
                    }
                };
            let path = ferrokube_validation::FieldPath::new(field);
            errors.extend(
                ferrokube_validation::validate_tolerations(&parsed, &path)
                    .iter()
                    .map(ToString::to_string),
            );
            parsed.into_iter().map(Toleration::from_v1).collect()
        };
        let config = ClusterTolerations {
            default: list("default"),
            whitelist: list("whitelist"),
        };
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(errors.join(", "))
        }
    }
}

/// One toleration as upstream's internal type sees it (absent fields are empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Toleration {
    pub key: String,
    pub operator: String,
    pub value: String,
    pub effect: String,
    pub seconds: Option<i64>,
}

impl Toleration {
    fn of(v: &Value) -> Toleration {
        let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
        Toleration {
            key: s("key"),
            operator: s("operator"),
            value: s("value"),
            effect: s("effect"),
            seconds: v["tolerationSeconds"].as_i64(),
        }
    }

    fn from_v1(t: k8s_openapi::api::core::v1::Toleration) -> Toleration {
        Toleration {
            key: t.key.unwrap_or_default(),
            operator: t.operator.unwrap_or_default(),
            value: t.value.unwrap_or_default(),
            effect: t.effect.unwrap_or_default(),
            seconds: t.toleration_seconds,
        }
    }

    /// The v1 JSON form (empty fields omitted, as upstream's serialization).
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        for (k, v) in [
            ("key", &self.key),
            ("operator", &self.operator),
            ("value", &self.value),
            ("effect", &self.effect),
        ] {
            if !v.is_empty() {
                m.insert(k.to_string(), Value::String(v.clone()));
            }
        }
        if let Some(s) = self.seconds {
            m.insert("tolerationSeconds".to_string(), json!(s));
        }
        Value::Object(m)
    }
}

/// Upstream `isSuperset`: whether `ss` tolerates everything `t` does.
pub(crate) fn is_superset(ss: &Toleration, t: &Toleration) -> bool {
    if ss == t {
        return true;
    }
    // An empty key with Exists matches every key.
    if t.key != ss.key && (!ss.key.is_empty() || ss.operator != "Exists") {
        return false;
    }
    // An empty effect matches every effect.
    if t.effect != ss.effect && !ss.effect.is_empty() {
        return false;
    }
    if ss.effect == "NoExecute"
        && let Some(limit) = ss.seconds
        && t.seconds.is_none_or(|s| s > limit)
    {
        return false;
    }
    match ss.operator.as_str() {
        "Equal" | "" => t.operator == "Equal" && t.value == ss.value,
        "Exists" => true,
        _ => false,
    }
}

/// Upstream `tolerations.VerifyAgainstWhitelist`.
pub(crate) fn verify_against_whitelist(
    tolerations: &[Toleration],
    whitelist: &[Toleration],
) -> bool {
    whitelist.is_empty()
        || tolerations
            .iter()
            .all(|t| whitelist.iter().any(|w| is_superset(w, t)))
}

/// Upstream `tolerations.MergeTolerations`: `first` then `second`, leaving out each
/// toleration another one (kept earlier, or a different one later) covers. Items
/// are (parsed, original JSON), so the pod's own tolerations keep their form.
pub(crate) fn merge(
    first: Vec<(Toleration, Value)>,
    second: Vec<(Toleration, Value)>,
) -> Vec<Value> {
    let all: Vec<(Toleration, Value)> = first.into_iter().chain(second).collect();
    let mut merged: Vec<&(Toleration, Value)> = Vec::new();
    'next: for (i, item) in all.iter().enumerate() {
        let t = &item.0;
        if merged.iter().any(|m| is_superset(&m.0, t)) {
            continue;
        }
        for later in &all[i + 1..] {
            // Of equal tolerations the first is kept.
            if later.0 != *t && is_superset(&later.0, t) {
                continue 'next;
            }
        }
        merged.push(item);
    }
    merged.into_iter().map(|(_, v)| v.clone()).collect()
}

/// Upstream `extractNSTolerations`: `None` without the annotation, empty for an empty
/// value, else the JSON list (a parse error is the error's text).
pub(crate) fn namespace_tolerations(
    namespace: &Value,
    annotation: &str,
) -> Result<Option<Vec<Toleration>>, String> {
    let Some(text) = namespace["metadata"]["annotations"][annotation].as_str() else {
        return Ok(None);
    };
    if text.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let list: Vec<k8s_openapi::api::core::v1::Toleration> =
        serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(Some(list.into_iter().map(Toleration::from_v1).collect()))
}

/// Upstream `qos.GetPodQOS`: the recorded class, else the computed one.
fn is_best_effort(pod: &Value) -> bool {
    let class = match pod["status"]["qosClass"].as_str() {
        Some(c) if !c.is_empty() => c,
        _ => ferrokube_registry::kinds::pod_qos_class(pod),
    };
    class == "BestEffort"
}

fn pod_tolerations(pod: &Value) -> Vec<(Toleration, Value)> {
    pod["spec"]["tolerations"]
        .as_array()
        .map(|l| l.iter().map(|v| (Toleration::of(v), v.clone())).collect())
        .unwrap_or_default()
}

/// The mutation's pure logic: `defaults` are the namespace's default tolerations
/// (CREATE only; `None` on UPDATE or without the annotation).
pub(crate) fn add_tolerations(pod: &mut Value, defaults: Option<Vec<Toleration>>) {
    let mut extra = defaults.unwrap_or_default();
    if !is_best_effort(pod) {
        extra.push(Toleration {
            key: MEMORY_PRESSURE.to_string(),
            operator: "Exists".to_string(),
            value: String::new(),
            effect: "NoSchedule".to_string(),
            seconds: None,
        });
    }
    if extra.is_empty() {
        return;
    }
    let extra = extra
        .into_iter()
        .map(|t| {
            let v = t.to_json();
            (t, v)
        })
        .collect();
    let merged = merge(pod_tolerations(pod), extra);
    if !pod["spec"].is_object() {
        pod["spec"] = json!({});
    }
    pod["spec"]["tolerations"] = Value::Array(merged);
}

/// The validation's pure logic: whether the pod's tolerations pass `whitelist`.
pub(crate) fn allowed(pod: &Value, whitelist: &[Toleration]) -> bool {
    let tolerations: Vec<Toleration> = pod_tolerations(pod).into_iter().map(|(t, _)| t).collect();
    verify_against_whitelist(&tolerations, whitelist)
}

impl PodTolerationRestriction {
    /// The pod's namespace (`None`: missing; the store refuses writes into missing
    /// namespaces itself).
    async fn namespace(&self, a: &Attributes) -> Result<Option<Arc<Value>>, ApiError> {
        super::webhook::fresh_get(&self.namespaces, None, &a.namespace).await
    }
}

#[async_trait]
impl Plugin for PodTolerationRestriction {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        a.is_pod_write(&[Operation::Create, Operation::Update])
    }

    async fn admit(
        &self,
        a: &Attributes,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let defaults = if a.operation == Operation::Create {
            match self.namespace(a).await? {
                Some(ns) => namespace_tolerations(&ns, DEFAULT_TOLERATIONS)
                    .map_err(plain_error)?
                    // Without the annotation, the cluster's defaults.
                    .or_else(|| Some(self.config.default.clone())),
                None => return Ok(()),
            }
        } else {
            None
        };
        add_tolerations(object, defaults);
        // Upstream's Admit ends with its Validate.
        self.validate(a, Some(object), old).await
    }

    async fn validate(
        &self,
        a: &Attributes,
        object: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(object) = object else {
            return Ok(());
        };
        if object["spec"]["tolerations"]
            .as_array()
            .is_none_or(|l| l.is_empty())
        {
            return Ok(());
        }
        let Some(ns) = self.namespace(a).await? else {
            return Ok(());
        };
        // Without the annotation, the cluster's whitelist.
        let namespace_whitelist =
            namespace_tolerations(&ns, TOLERATIONS_WHITELIST).map_err(plain_error)?;
        let whitelist = namespace_whitelist
            .as_deref()
            .unwrap_or(&self.config.whitelist);
        if !allowed(object, whitelist) {
            // A plain error upstream: 500 with the bare message.
            return Err(plain_error(WHITELIST_CONFLICT));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tol(v: Value) -> Toleration {
        Toleration::of(&v)
    }

    fn pair(v: Value) -> (Toleration, Value) {
        (Toleration::of(&v), v)
    }

    #[test]
    fn superset_rules() {
        let exists_all = tol(json!({"operator": "Exists"}));
        let foo_eq =
            tol(json!({"key": "foo", "operator": "Equal", "value": "bar", "effect": "NoSchedule"}));
        let foo_exists = tol(json!({"key": "foo", "operator": "Exists"}));
        let foo_exists_ns =
            tol(json!({"key": "foo", "operator": "Exists", "effect": "NoSchedule"}));
        assert!(is_superset(&exists_all, &foo_eq));
        assert!(is_superset(&foo_exists, &foo_eq));
        assert!(is_superset(&foo_exists, &foo_exists_ns));
        assert!(!is_superset(&foo_exists_ns, &foo_exists));
        assert!(!is_superset(&foo_eq, &foo_exists_ns));
        assert!(!is_superset(
            &foo_eq,
            &tol(
                json!({"key": "foo", "operator": "Equal", "value": "baz", "effect": "NoSchedule"})
            )
        ));
        // An empty operator is Equal for the wider one, not for the narrower.
        let foo_empty_op = tol(json!({"key": "foo", "value": "bar", "effect": "NoSchedule"}));
        assert!(is_superset(&foo_empty_op, &foo_eq));
        assert!(!is_superset(&foo_eq, &foo_empty_op));
        // NoExecute with seconds covers only shorter ones.
        let ne = |s: Option<i64>| {
            let mut v = json!({"key": "k", "operator": "Exists", "effect": "NoExecute"});
            if let Some(s) = s {
                v["tolerationSeconds"] = json!(s);
            }
            tol(v)
        };
        assert!(is_superset(&ne(Some(300)), &ne(Some(100))));
        assert!(!is_superset(&ne(Some(100)), &ne(Some(300))));
        assert!(!is_superset(&ne(Some(100)), &ne(None)));
        assert!(is_superset(&ne(None), &ne(Some(100))));
    }

    #[test]
    fn merge_keeps_the_widest() {
        let merged = merge(
            vec![
                pair(
                    json!({"key": "foo", "operator": "Equal", "value": "bar", "effect": "NoSchedule"}),
                ),
                pair(json!({"key": "a", "operator": "Exists"})),
            ],
            vec![
                pair(json!({"key": "foo", "operator": "Exists"})),
                pair(json!({"key": "a", "operator": "Exists"})),
                pair(json!({"key": "b", "operator": "Exists", "effect": "NoExecute"})),
            ],
        );
        assert_eq!(
            merged,
            vec![
                json!({"key": "a", "operator": "Exists"}),
                json!({"key": "foo", "operator": "Exists"}),
                json!({"key": "b", "operator": "Exists", "effect": "NoExecute"}),
            ]
        );
    }

    #[test]
    fn whitelist_checks() {
        let wl = vec![tol(json!({"key": "foo", "operator": "Exists"}))];
        let ok =
            tol(json!({"key": "foo", "operator": "Equal", "value": "x", "effect": "NoSchedule"}));
        let bad = tol(json!({"key": "bar", "operator": "Exists"}));
        assert!(verify_against_whitelist(std::slice::from_ref(&ok), &wl));
        assert!(!verify_against_whitelist(&[ok.clone(), bad.clone()], &wl));
        assert!(verify_against_whitelist(&[bad], &[]));
        assert!(verify_against_whitelist(&[], &wl));
    }

    #[test]
    fn reads_namespace_annotations() {
        let ns = json!({"metadata": {"annotations": {
            DEFAULT_TOLERATIONS: r#"[{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}]"#,
            TOLERATIONS_WHITELIST: ""}}});
        assert_eq!(
            namespace_tolerations(&ns, DEFAULT_TOLERATIONS)
                .unwrap()
                .unwrap(),
            vec![tol(
                json!({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"})
            )]
        );
        assert_eq!(
            namespace_tolerations(&ns, TOLERATIONS_WHITELIST).unwrap(),
            Some(vec![])
        );
        assert_eq!(
            namespace_tolerations(&json!({}), DEFAULT_TOLERATIONS).unwrap(),
            None
        );
        let bad = json!({"metadata": {"annotations": {DEFAULT_TOLERATIONS: "nope"}}});
        assert!(namespace_tolerations(&bad, DEFAULT_TOLERATIONS).is_err());
    }

    #[test]
    fn adds_defaults_and_memory_pressure() {
        let defaults = vec![tol(
            json!({"key": "dedicated", "operator": "Equal", "value": "a", "effect": "NoSchedule"}),
        )];
        // BestEffort: defaults only.
        let mut best_effort = json!({"spec": {"containers": [{"name": "c"}]}});
        add_tolerations(&mut best_effort, Some(defaults.clone()));
        assert_eq!(
            best_effort["spec"]["tolerations"],
            json!([{"key": "dedicated", "operator": "Equal", "value": "a", "effect": "NoSchedule"}])
        );
        // Burstable: its own, the defaults and memory pressure.
        let mut burstable = json!({"spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": "100m"}}}],
            "tolerations": [{"key": "own", "operator": "Exists"}]}});
        add_tolerations(&mut burstable, Some(defaults));
        assert_eq!(
            burstable["spec"]["tolerations"],
            json!([
                {"key": "own", "operator": "Exists"},
                {"key": "dedicated", "operator": "Equal", "value": "a", "effect": "NoSchedule"},
                {"key": MEMORY_PRESSURE, "operator": "Exists", "effect": "NoSchedule"},
            ])
        );
        // Nothing to add: the pod is untouched.
        let mut plain = json!({"spec": {"containers": [{"name": "c"}]}});
        add_tolerations(&mut plain, None);
        assert!(plain["spec"].get("tolerations").is_none());
    }

    #[test]
    fn allowed_reads_the_pod() {
        let pod = json!({"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}});
        assert!(!allowed(
            &pod,
            &[tol(json!({"key": "other", "operator": "Exists"}))]
        ));
        assert!(allowed(&pod, &[tol(json!({"operator": "Exists"}))]));
    }

    #[test]
    fn reads_the_cluster_configuration() {
        let config = ClusterTolerations::from_value(&json!({
            "apiVersion": "podtolerationrestriction.admission.k8s.io/v1alpha1",
            "kind": "Configuration",
            "default": [{"key": "a", "operator": "Exists", "effect": "NoSchedule"}]}))
        .unwrap();
        assert_eq!(config.default.len(), 1);
        assert!(config.whitelist.is_empty());
        let err = ClusterTolerations::from_value(&json!({
            "apiVersion": "podtolerationrestriction.admission.k8s.io/v1alpha1",
            "kind": "Configuration",
            "whitelist": [{"key": "a", "operator": "Exists", "value": "x"}]}))
        .unwrap_err();
        assert!(
            err.starts_with("whitelist[0].operator: Invalid value"),
            "{err}"
        );
        assert!(ClusterTolerations::from_value(&json!({"kind": "Configuration"})).is_err());
    }
}
