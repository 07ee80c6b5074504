//! Priority (upstream `plugin/pkg/admission/priority`):
//! - mutating, on pod create: `spec.priority` (and `spec.preemptionPolicy`) from the
//!   pod's `priorityClassName`, or from the global default class (whose name is then
//!   set) or 0 when there is none; an unknown class, or a `priority` /
//!   `preemptionPolicy` the pod sets that differs from the class's, is 403;
//! - mutating, on pod update: the values set at creation are kept when the update
//!   drops them (pod validation forbids changing them);
//! - validating, on PriorityClass create and update: only one `globalDefault` class.
//!
//! The built-in `system-node-critical` and `system-cluster-critical` classes are the
//! registry's start-up objects (`ferrokube_registry::Registry`'s bootstrap).

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_registry::{Registry, Store};
use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "Priority";
const GROUP: &str = "scheduling.k8s.io";
/// Upstream `scheduling.DefaultPriorityWhenNoDefaultClassExists`.
const PRIORITY_WITHOUT_DEFAULT_CLASS: i64 = 0;
const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";

pub(crate) struct Priority {
    classes: Arc<Store>,
}

fn class_store(registry: &Registry) -> Option<Arc<Store>> {
    registry.store(GROUP, "v1", "priorityclasses").cloned()
}

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(Priority {
        classes: class_store(init.registry).ok_or("no priorityclasses store")?,
    }))
}

/// Upstream `getDefaultPriorityClass`: the `globalDefault` class, the one with the
/// lowest value if a race let several in.
pub(crate) fn default_class(classes: &[Arc<Value>]) -> Option<&Value> {
    classes
        .iter()
        .map(|c| c.as_ref())
        .filter(|c| c["globalDefault"].as_bool() == Some(true))
        .min_by_key(|c| c["value"].as_i64().unwrap_or(0))
}

/// The pure part of pod creation: resolves the pod's priority with `lookup` (class
/// by name) and `default` (the global default class). The error is the 403 reason.
pub(crate) fn admit_new_pod<'a>(
    pod: &mut Value,
    lookup: impl Fn(&str) -> Option<&'a Value>,
    default: Option<&'a Value>,
) -> Result<(), String> {
    let class_name = pod["spec"]["priorityClassName"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let (priority, policy) = if class_name.is_empty() {
        match default {
            Some(class) => {
                pod["spec"]["priorityClassName"] = class["metadata"]["name"].clone();
                (
                    class["value"].as_i64().unwrap_or(0),
                    class["preemptionPolicy"].as_str().map(str::to_string),
                )
            }
            None => (
                PRIORITY_WITHOUT_DEFAULT_CLASS,
                Some(PREEMPT_LOWER_PRIORITY.to_string()),
            ),
        }
    } else {
        let class = lookup(&class_name)
            .ok_or_else(|| format!("no PriorityClass with name {class_name} was found"))?;
        (
            class["value"].as_i64().unwrap_or(0),
            class["preemptionPolicy"].as_str().map(str::to_string),
        )
    };
    if let Some(given) = pod["spec"]["priority"].as_i64()
        && given != priority
    {
        return Err(format!(
            "the integer value of priority ({given}) must not be provided in pod spec; \
             priority admission controller computed {priority} from the given PriorityClass name"
        ));
    }
    pod["spec"]["priority"] = json!(priority);
    if let Some(policy) = policy {
        if let Some(given) = pod["spec"]["preemptionPolicy"].as_str()
            && given != policy
        {
            return Err(format!(
                "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; \
                 priority admission controller computed {policy} from the given PriorityClass name"
            ));
        }
        pod["spec"]["preemptionPolicy"] = json!(policy);
    }
    Ok(())
}

/// Pod update: keeps what creation set when the new object lacks it.
pub(crate) fn keep_on_update(pod: &mut Value, old: &Value) {
    for field in ["priority", "preemptionPolicy"] {
        if pod["spec"].get(field).is_none_or(Value::is_null)
            && let Some(v) = old["spec"].get(field).filter(|v| !v.is_null())
        {
            pod["spec"][field] = v.clone();
        }
    }
}

#[async_trait]
impl Plugin for Priority {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        a.subresource.is_empty()
            && (a.is_core("pods") || a.is(GROUP, "priorityclasses"))
            && matches!(a.operation, Operation::Create | Operation::Update)
    }

    async fn admit(
        &self,
        a: &Attributes,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if !a.is_core("pods") || !object["spec"].is_object() {
            return Ok(());
        }
        if a.operation == Operation::Update {
            if let Some(old) = old {
                keep_on_update(object, old);
            }
            return Ok(());
        }
        let classes = crate::security::cached(&self.classes, "");
        let lookup = |name: &str| {
            classes
                .iter()
                .map(|c| c.as_ref())
                .find(|c| c["metadata"]["name"].as_str() == Some(name))
        };
        admit_new_pod(object, lookup, default_class(&classes)).map_err(|e| a.forbidden(e))
    }

    async fn validate(
        &self,
        a: &Attributes,
        object: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(class) = object.filter(|_| a.is(GROUP, "priorityclasses")) else {
            return Ok(());
        };
        if class["globalDefault"].as_bool() != Some(true) {
            return Ok(());
        }
        let classes = crate::security::cached(&self.classes, "");
        if let Some(current) = default_class(&classes) {
            let current = current["metadata"]["name"].as_str().unwrap_or("");
            if a.operation == Operation::Create || current != super::name_of(class) {
                return Err(a.forbidden(format!(
                    "PriorityClass {current} is already marked as default. Only one default can exist"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, value: i64, default: bool, policy: &str) -> Arc<Value> {
        Arc::new(json!({"metadata": {"name": name}, "value": value,
            "globalDefault": default, "preemptionPolicy": policy}))
    }

    #[test]
    fn resolves_named_default_and_no_class() {
        let classes = [
            class("high", 1000, false, "Never"),
            class("low", 10, true, PREEMPT_LOWER_PRIORITY),
        ];
        let lookup = |n: &str| {
            classes
                .iter()
                .map(|c| c.as_ref())
                .find(|c| c["metadata"]["name"] == n)
        };
        let mut named = json!({"spec": {"priorityClassName": "high"}});
        admit_new_pod(&mut named, lookup, default_class(&classes)).unwrap();
        assert_eq!(named["spec"]["priority"], 1000);
        assert_eq!(named["spec"]["preemptionPolicy"], "Never");

        let mut unnamed = json!({"spec": {}});
        admit_new_pod(&mut unnamed, lookup, default_class(&classes)).unwrap();
        assert_eq!(unnamed["spec"]["priorityClassName"], "low");
        assert_eq!(unnamed["spec"]["priority"], 10);

        let mut bare = json!({"spec": {}});
        admit_new_pod(&mut bare, |_| None, None).unwrap();
        assert_eq!(bare["spec"]["priority"], 0);
        assert_eq!(bare["spec"]["preemptionPolicy"], PREEMPT_LOWER_PRIORITY);
        assert!(bare["spec"].get("priorityClassName").is_none());
    }

    #[test]
    fn rejects_unknown_class_and_conflicting_values() {
        let mut pod = json!({"spec": {"priorityClassName": "nope"}});
        assert_eq!(
            admit_new_pod(&mut pod, |_| None, None).unwrap_err(),
            "no PriorityClass with name nope was found"
        );
        let high = class("high", 1000, false, "Never");
        let mut pod = json!({"spec": {"priorityClassName": "high", "priority": 5}});
        let e = admit_new_pod(&mut pod, |_| Some(high.as_ref()), None).unwrap_err();
        assert_eq!(
            e,
            "the integer value of priority (5) must not be provided in pod spec; priority \
             admission controller computed 1000 from the given PriorityClass name"
        );
        // The same value is accepted (a re-created pod carries it).
        let mut pod = json!({"spec": {"priorityClassName": "high", "priority": 1000}});
        admit_new_pod(&mut pod, |_| Some(high.as_ref()), None).unwrap();
        let mut pod = json!({"spec": {"priorityClassName": "high",
            "preemptionPolicy": PREEMPT_LOWER_PRIORITY}});
        let e = admit_new_pod(&mut pod, |_| Some(high.as_ref()), None).unwrap_err();
        assert!(e.starts_with("the string value of PreemptionPolicy (PreemptLowerPriority)"));
    }

    #[test]
    fn default_is_the_lowest_of_several_and_updates_keep_values() {
        let classes = [
            class("a", 50, true, PREEMPT_LOWER_PRIORITY),
            class("b", 20, true, PREEMPT_LOWER_PRIORITY),
            class("c", 1, false, PREEMPT_LOWER_PRIORITY),
        ];
        assert_eq!(default_class(&classes).unwrap()["metadata"]["name"], "b");
        let old = json!({"spec": {"priority": 7, "preemptionPolicy": "Never"}});
        let mut new = json!({"spec": {"priority": null}});
        keep_on_update(&mut new, &old);
        assert_eq!(new["spec"], old["spec"]);
    }
}
