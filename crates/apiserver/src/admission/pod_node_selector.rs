//! PodNodeSelector (upstream `plugin/pkg/admission/podnodeselector`), off by default:
//! a namespace annotated `scheduler.alpha.kubernetes.io/node-selector: k=v,k2=v2`
//! confines its new pods to nodes with those labels. On pod creation the namespace's
//! selector is merged into `spec.nodeSelector` (the pod's own entries win, and one with
//! the same key but another value is refused), and validation checks the pod again.
//!
//! `--admission-control-config-file` may give upstream's configuration,
//! `podNodeSelectorPluginConfig`: `clusterDefaultNodeSelector`, the selector of
//! namespaces without the annotation, and per namespace a whitelist: a pod's
//! `nodeSelector` there may only hold the whitelist's labels. Unlike upstream, which
//! reads the selectors at each request, a selector that does not parse stops the start.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::{ApiError, go_quote, reason};
use ferrokube_apimachinery::validation::{is_qualified_name, is_valid_label_value};
use ferrokube_registry::Store;
use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "PodNodeSelector";
/// Upstream `NamespaceNodeSelectors`.
pub(crate) const NODE_SELECTOR_ANNOTATION: &str = "scheduler.alpha.kubernetes.io/node-selector";
const CONFLICT: &str = "pod node label selector conflicts with its namespace node label selector";
const WHITELIST_CONFLICT: &str =
    "pod node label selector labels conflict with its namespace whitelist";

type LabelSet = BTreeMap<String, String>;

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    let namespaces = ferrokube_api::resources::lookup("", "v1", "namespaces")
        .and_then(|info| init.registry.store_for(info))
        .cloned()
        .ok_or("no namespaces store")?;
    let config = match init.options.configuration(NAME) {
        Some(value) => read_config(value)?,
        None => BTreeMap::new(),
    };
    Ok(Arc::new(PodNodeSelector { namespaces, config }))
}

struct PodNodeSelector {
    namespaces: Arc<Store>,
    /// `clusterDefaultNodeSelector` and the namespaces' whitelists, parsed.
    config: BTreeMap<String, LabelSet>,
}

/// The key of the cluster's default selector in the configuration.
const CLUSTER_DEFAULT: &str = "clusterDefaultNodeSelector";

/// Upstream's `podNodeSelectorPluginConfig`: a map of `clusterDefaultNodeSelector` and
/// namespace names to selectors (`k=v,k2=v2`).
fn read_config(config: &Value) -> Result<BTreeMap<String, LabelSet>, String> {
    let Some(entries) = config["podNodeSelectorPluginConfig"].as_object() else {
        return Err("expected podNodeSelectorPluginConfig, a map of clusterDefaultNodeSelector and namespaces to node selectors".into());
    };
    entries
        .iter()
        .map(|(key, selector)| {
            let text = selector
                .as_str()
                .ok_or_else(|| format!("podNodeSelectorPluginConfig.{key}: not a string"))?;
            let labels = parse_labels(text)
                .map_err(|e| format!("podNodeSelectorPluginConfig.{key}: {e}"))?;
            Ok((key.clone(), labels))
        })
        .collect()
}

/// Upstream `AreLabelsInWhiteList`: every label of the pod's selector is in a
/// non-empty whitelist with the same value.
fn in_whitelist(labels: &LabelSet, whitelist: &LabelSet) -> bool {
    whitelist.is_empty() || labels.iter().all(|(k, v)| whitelist.get(k) == Some(v))
}

/// What a plain Go `error` from an admission plugin becomes on the wire (upstream
/// `ErrorToAPIStatus` for an error that is not a status): 500 with no reason and the
/// error's text as the message.
pub(crate) fn plain_error(message: impl Into<String>) -> ApiError {
    ApiError {
        code: 500,
        reason: reason::UNKNOWN.to_string(),
        message: message.into(),
        details: None,
    }
}

/// Go's `fmt` rendering of a `[]string` (`[a b]`), as in upstream's parse error.
fn go_string_slice(parts: &[&str]) -> String {
    format!("[{}]", parts.join(" "))
}

/// Upstream `labels.ConvertSelectorToLabelsMap`: `k=v,k2=v2` with validated keys and
/// values; the empty string is the empty set.
pub(crate) fn parse_labels(selector: &str) -> Result<LabelSet, String> {
    let mut set = LabelSet::new();
    if selector.is_empty() {
        return Ok(set);
    }
    for label in selector.split(',') {
        let parts: Vec<&str> = label.split('=').collect();
        if parts.len() != 2 {
            return Err(format!("invalid selector: {}", go_string_slice(&parts)));
        }
        let key = parts[0].trim();
        let errs = is_qualified_name(key);
        if !errs.is_empty() {
            return Err(format!(
                "key: Invalid value: {}: {}",
                go_quote(key),
                errs.join("; ")
            ));
        }
        let value = parts[1].trim();
        let errs = is_valid_label_value(value);
        if !errs.is_empty() {
            return Err(format!(
                "value: Invalid value: {}: {}",
                go_quote(value),
                errs.join("; ")
            ));
        }
        set.insert(key.to_string(), value.to_string());
    }
    Ok(set)
}

/// Upstream `labels.Conflicts`: a key in both with different values.
pub(crate) fn conflicts(a: &LabelSet, b: &LabelSet) -> bool {
    a.iter().any(|(k, v)| b.get(k).is_some_and(|w| w != v))
}

/// Upstream `getNodeSelectorMap`: the namespace's annotated selector, or the
/// cluster's default (`cluster_default`, empty without a configuration).
pub(crate) fn namespace_selector(
    namespace: &Value,
    cluster_default: Option<&LabelSet>,
) -> Result<LabelSet, String> {
    match namespace["metadata"]["annotations"][NODE_SELECTOR_ANNOTATION].as_str() {
        Some(s) => parse_labels(s),
        None => Ok(cluster_default.cloned().unwrap_or_default()),
    }
}

/// The pod's `spec.nodeSelector` (string values only; validation refuses others).
fn pod_selector(pod: &Value) -> LabelSet {
    pod["spec"]["nodeSelector"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// The mutation's pure logic: `Err(())` on a conflict, else the namespace's entries
/// are added to the pod's selector (upstream `labels.Merge(namespace, pod)`).
pub(crate) fn merge_into(pod: &mut Value, namespace: &LabelSet) -> Result<(), ()> {
    let own = pod_selector(pod);
    if conflicts(namespace, &own) {
        return Err(());
    }
    if namespace.is_empty() {
        return Ok(());
    }
    if !pod["spec"].is_object() {
        pod["spec"] = json!({});
    }
    if !pod["spec"]["nodeSelector"].is_object() {
        pod["spec"]["nodeSelector"] = json!({});
    }
    if let Some(selector) = pod["spec"]["nodeSelector"].as_object_mut() {
        for (k, v) in namespace {
            selector
                .entry(k.clone())
                .or_insert_with(|| Value::String(v.clone()));
        }
    }
    Ok(())
}

impl PodNodeSelector {
    /// Upstream `getNamespaceNodeSelectorMap`; `None` when the namespace is missing
    /// (the store refuses writes into missing namespaces itself).
    async fn selector(&self, a: &Attributes) -> Result<Option<LabelSet>, ApiError> {
        let Some(ns) = super::webhook::fresh_get(&self.namespaces, None, &a.namespace).await?
        else {
            return Ok(None);
        };
        namespace_selector(&ns, self.config.get(CLUSTER_DEFAULT))
            .map(Some)
            .map_err(plain_error)
    }
}

#[async_trait]
impl Plugin for PodNodeSelector {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Upstream's handler: pods proper, CREATE only.
    fn handles(&self, a: &Attributes) -> bool {
        a.is_pod_write(&[Operation::Create])
    }

    async fn admit(
        &self,
        a: &Attributes,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(selector) = self.selector(a).await? else {
            return Ok(());
        };
        if merge_into(object, &selector).is_err() {
            return Err(a.forbidden_named(super::name_of(object), CONFLICT));
        }
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
        let Some(selector) = self.selector(a).await? else {
            return Ok(());
        };
        let own = pod_selector(object);
        if conflicts(&selector, &own) {
            return Err(a.forbidden_named(super::name_of(object), CONFLICT));
        }
        if let Some(whitelist) = self.config.get(&a.namespace)
            && !in_whitelist(&own, whitelist)
        {
            return Err(a.forbidden_named(super::name_of(object), WHITELIST_CONFLICT));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> LabelSet {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_label_sets_as_upstream() {
        assert_eq!(parse_labels("").unwrap(), LabelSet::new());
        assert_eq!(
            parse_labels("env=prod, zone = a").unwrap(),
            set(&[("env", "prod"), ("zone", "a")])
        );
        assert_eq!(parse_labels("env=").unwrap(), set(&[("env", "")]));
        assert_eq!(parse_labels("env").unwrap_err(), "invalid selector: [env]");
        assert_eq!(
            parse_labels("a=b=c").unwrap_err(),
            "invalid selector: [a b c]"
        );
        assert!(
            parse_labels("bad key=x")
                .unwrap_err()
                .starts_with("key: Invalid value: \"bad key\"")
        );
        assert!(
            parse_labels("k=bad value")
                .unwrap_err()
                .starts_with("value: Invalid value: \"bad value\"")
        );
    }

    #[test]
    fn conflicts_only_on_differing_values() {
        let ns = set(&[("env", "prod")]);
        assert!(!conflicts(&ns, &set(&[("env", "prod"), ("disk", "ssd")])));
        assert!(!conflicts(&ns, &LabelSet::new()));
        assert!(conflicts(&ns, &set(&[("env", "dev")])));
    }

    #[test]
    fn merges_namespace_selector_into_pod() {
        let ns = set(&[("env", "prod"), ("zone", "a")]);
        let mut pod = json!({"spec": {"nodeSelector": {"disk": "ssd", "zone": "a"}}});
        merge_into(&mut pod, &ns).unwrap();
        assert_eq!(
            pod["spec"]["nodeSelector"],
            json!({"disk": "ssd", "env": "prod", "zone": "a"})
        );
        let mut bare = json!({"spec": {"containers": []}});
        merge_into(&mut bare, &ns).unwrap();
        assert_eq!(
            bare["spec"]["nodeSelector"],
            json!({"env": "prod", "zone": "a"})
        );
        let mut untouched = json!({"spec": {}});
        merge_into(&mut untouched, &LabelSet::new()).unwrap();
        assert!(untouched["spec"].get("nodeSelector").is_none());
        let mut conflicting = json!({"spec": {"nodeSelector": {"env": "dev"}}});
        assert!(merge_into(&mut conflicting, &ns).is_err());
        assert_eq!(conflicting["spec"]["nodeSelector"], json!({"env": "dev"}));
    }

    #[test]
    fn reads_the_namespace_annotation_else_the_cluster_default() {
        let ns = json!({"metadata": {"name": "n", "annotations": {
            NODE_SELECTOR_ANNOTATION: "env=prod"}}});
        let cluster = set(&[("zone", "a")]);
        assert_eq!(
            namespace_selector(&ns, Some(&cluster)).unwrap(),
            set(&[("env", "prod")])
        );
        let plain = json!({"metadata": {"name": "n"}});
        assert!(namespace_selector(&plain, None).unwrap().is_empty());
        assert_eq!(namespace_selector(&plain, Some(&cluster)).unwrap(), cluster);
        let bad = json!({"metadata": {"annotations": {NODE_SELECTOR_ANNOTATION: "x"}}});
        assert!(namespace_selector(&bad, None).is_err());
    }

    #[test]
    fn reads_the_configuration_and_checks_whitelists() {
        let config = read_config(&json!({"podNodeSelectorPluginConfig": {
            "clusterDefaultNodeSelector": "zone=a", "team": "env=dev,zone=a"}}))
        .unwrap();
        assert_eq!(config[CLUSTER_DEFAULT], set(&[("zone", "a")]));
        let whitelist = &config["team"];
        assert!(in_whitelist(&set(&[("env", "dev")]), whitelist));
        assert!(!in_whitelist(&set(&[("env", "prod")]), whitelist));
        assert!(!in_whitelist(&set(&[("gpu", "yes")]), whitelist));
        assert!(in_whitelist(&set(&[("gpu", "yes")]), &LabelSet::new()));
        let err = read_config(&json!({"podNodeSelectorPluginConfig": {"team": "x"}})).unwrap_err();
        assert!(
            err.starts_with("podNodeSelectorPluginConfig.team: "),
            "{err}"
        );
        assert!(read_config(&json!({})).is_err());
    }
}
