//! ResourceQuota accounting of built-in objects, shared by the ResourceQuota
//! admission plugin and the resourcequota controller (upstream
//! `pkg/quota/v1/evaluator/core` and `k8s.io/apiserver/pkg/quota/v1`): which quota
//! resource names an object kind is measured by, the usage one object contributes,
//! quota scopes, sums and upstream's printing of resource lists.
//!
//! Objects are `serde_json::Value`s in their served form.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::quantity;

/// An amount of a resource: thousandths, and whether it prints with binary suffixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Amount {
    pub milli: i128,
    pub binary: bool,
}

impl Amount {
    pub fn parse(q: &str) -> Option<Amount> {
        Some(Amount {
            milli: quantity::milli(q)?,
            binary: quantity::is_binary(q),
        })
    }

    /// A count of objects.
    pub fn count(n: i128) -> Amount {
        Amount {
            milli: n * 1000,
            binary: false,
        }
    }

    /// Upstream `Quantity.String()` of the amount.
    pub fn show(&self) -> String {
        quantity::format_milli(self.milli, self.binary)
    }
}

/// Resource name -> amount (upstream `ResourceList`).
pub type Usage = BTreeMap<String, Amount>;

/// A resource list (`spec.hard`, `status.used`, container requests) from JSON;
/// unparseable quantities are left out.
pub fn parse_list(v: &Value) -> Usage {
    v.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, q)| Some((k.clone(), Amount::parse(q.as_str()?)?)))
        .collect()
}

/// A resource list as JSON, in canonical quantity strings.
pub fn to_json(u: &Usage) -> Value {
    Value::Object(
        u.iter()
            .map(|(k, a)| (k.clone(), Value::String(a.show())))
            .collect(),
    )
}

/// Upstream `quota.Add`: the sum, keeping the first operand's format.
pub fn add(a: &Usage, b: &Usage) -> Usage {
    let mut out = a.clone();
    for (k, v) in b {
        out.entry(k.clone())
            .and_modify(|x| x.milli = x.milli.saturating_add(v.milli))
            .or_insert(*v);
    }
    out
}

/// Upstream `quota.Subtract`.
pub fn subtract(a: &Usage, b: &Usage) -> Usage {
    let mut out = a.clone();
    for (k, v) in b {
        out.entry(k.clone())
            .and_modify(|x| x.milli = x.milli.saturating_sub(v.milli))
            .or_insert(Amount {
                milli: -v.milli,
                binary: v.binary,
            });
    }
    out
}

/// Upstream `quota.Mask`: only the named resources.
pub fn mask(u: &Usage, names: &BTreeSet<String>) -> Usage {
    u.iter()
        .filter(|(k, _)| names.contains(*k))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// Upstream `prettyPrint`: `name=quantity` sorted by name, joined by commas.
pub fn pretty(u: &Usage) -> String {
    u.iter()
        .map(|(k, v)| format!("{k}={}", v.show()))
        .collect::<Vec<_>>()
        .join(",")
}

/// The object-count name of a resource: `count/<plural>` (core) or
/// `count/<plural>.<group>`.
pub fn count_name(group: &str, plural: &str) -> String {
    if group.is_empty() {
        format!("count/{plural}")
    } else {
        format!("count/{plural}.{group}")
    }
}

const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// Whether quota resource `name` measures objects of `group`/`plural` (upstream
/// evaluators' `MatchingResources`, plus the generic `count/*`).
pub fn tracks(group: &str, plural: &str, name: &str) -> bool {
    if name == count_name(group, plural) {
        return true;
    }
    if !group.is_empty() {
        return false;
    }
    match plural {
        "pods" => {
            matches!(
                name,
                "pods"
                    | "cpu"
                    | "memory"
                    | "ephemeral-storage"
                    | "requests.cpu"
                    | "requests.memory"
                    | "requests.ephemeral-storage"
                    | "limits.cpu"
                    | "limits.memory"
                    | "limits.ephemeral-storage"
            ) || name
                .strip_prefix("requests.")
                .is_some_and(|r| r.starts_with("hugepages-") || is_extended(r))
        }
        "services" => matches!(
            name,
            "services" | "services.nodeports" | "services.loadbalancers"
        ),
        "persistentvolumeclaims" => {
            matches!(name, "persistentvolumeclaims" | "requests.storage")
                || name.split_once(STORAGE_CLASS_SUFFIX).is_some_and(|(_, r)| {
                    matches!(r, "requests.storage" | "persistentvolumeclaims")
                })
        }
        "configmaps" | "secrets" | "replicationcontrollers" | "resourcequotas" => name == plural,
        _ => false,
    }
}

/// Extended resources (`example.com/gpu`): a domain outside kubernetes.io.
fn is_extended(name: &str) -> bool {
    name.split_once('/')
        .is_some_and(|(domain, _)| !domain.is_empty() && !domain.ends_with("kubernetes.io"))
}

/// Whether a pod no longer uses compute resources (upstream `QuotaV1Pod` false):
/// terminal, or marked for deletion.
pub fn pod_is_terminal(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded") | Some("Failed")
    ) || (pod["metadata"]["deletionTimestamp"].is_string()
        && pod["metadata"]["deletionGracePeriodSeconds"].is_number())
}

/// The pod's effective requests or limits (`field`): containers added up, each init
/// container a floor, overhead added (upstream `resourcehelper.PodRequests`).
pub fn pod_resources(pod: &Value, field: &str) -> Usage {
    let mut total = Usage::new();
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        total = add(&total, &parse_list(&c["resources"][field]));
    }
    for c in pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for (k, a) in parse_list(&c["resources"][field]) {
            total
                .entry(k)
                .and_modify(|t| t.milli = t.milli.max(a.milli))
                .or_insert(a);
        }
    }
    add(&total, &parse_list(&pod["spec"]["overhead"]))
}

/// The usage one object contributes (upstream evaluators' `Usage`).
pub fn usage(group: &str, plural: &str, obj: &Value) -> Usage {
    let mut u = Usage::new();
    u.insert(count_name(group, plural), Amount::count(1));
    if !group.is_empty() {
        return u;
    }
    match plural {
        "pods" => {
            if pod_is_terminal(obj) {
                return u;
            }
            u.insert("pods".into(), Amount::count(1));
            for (k, a) in pod_resources(obj, "requests") {
                if matches!(k.as_str(), "cpu" | "memory" | "ephemeral-storage") {
                    u.insert(k.clone(), a);
                }
                u.insert(format!("requests.{k}"), a);
            }
            for (k, a) in pod_resources(obj, "limits") {
                if matches!(k.as_str(), "cpu" | "memory" | "ephemeral-storage") {
                    u.insert(format!("limits.{k}"), a);
                }
            }
        }
        "services" => {
            u.insert("services".into(), Amount::count(1));
            let ports = obj["spec"]["ports"].as_array().map_or(0, Vec::len) as i128;
            match obj["spec"]["type"].as_str() {
                Some("NodePort") => {
                    u.insert("services.nodeports".into(), Amount::count(ports));
                }
                Some("LoadBalancer") => {
                    u.insert("services.loadbalancers".into(), Amount::count(1));
                    let allocate = obj["spec"]["allocateLoadBalancerNodePorts"]
                        .as_bool()
                        .unwrap_or(true);
                    u.insert(
                        "services.nodeports".into(),
                        Amount::count(if allocate { ports } else { 0 }),
                    );
                }
                _ => {}
            }
        }
        "persistentvolumeclaims" => {
            u.insert("persistentvolumeclaims".into(), Amount::count(1));
            let class = obj["spec"]["storageClassName"].as_str().unwrap_or("");
            if !class.is_empty() {
                u.insert(
                    format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"),
                    Amount::count(1),
                );
            }
            if let Some(storage) = parse_list(&obj["spec"]["resources"]["requests"]).get("storage")
            {
                u.insert("requests.storage".into(), *storage);
                if !class.is_empty() {
                    u.insert(
                        format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"),
                        *storage,
                    );
                }
            }
        }
        "configmaps" | "secrets" | "replicationcontrollers" | "resourcequotas" => {
            u.insert(plural.to_string(), Amount::count(1));
        }
        _ => {}
    }
    u
}

/// Whether the quota's scopes select the object (upstream `Matches`): a quota with
/// scopes only ever selects pods.
pub fn scopes_match(quota: &Value, group: &str, plural: &str, obj: &Value) -> bool {
    let scopes: Vec<&str> = quota["spec"]["scopes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let selector: Vec<&Value> = quota["spec"]["scopeSelector"]["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    if scopes.is_empty() && selector.is_empty() {
        return true;
    }
    if !(group.is_empty() && plural == "pods") {
        return false;
    }
    let best_effort = || {
        ["containers", "initContainers"].iter().all(|k| {
            obj["spec"][*k].as_array().into_iter().flatten().all(|c| {
                c["resources"]["requests"]
                    .as_object()
                    .is_none_or(|m| m.is_empty())
                    && c["resources"]["limits"]
                        .as_object()
                        .is_none_or(|m| m.is_empty())
            })
        })
    };
    let terminating = || obj["spec"]["activeDeadlineSeconds"].is_number();
    let scope_matches = |scope: &str, operator: &str, values: &[&str]| -> bool {
        match scope {
            "Terminating" => terminating(),
            "NotTerminating" => !terminating(),
            "BestEffort" => best_effort(),
            "NotBestEffort" => !best_effort(),
            "PriorityClass" => {
                let class = obj["spec"]["priorityClassName"].as_str().unwrap_or("");
                match operator {
                    "In" => values.contains(&class),
                    "NotIn" => !values.contains(&class),
                    "Exists" => !class.is_empty(),
                    "DoesNotExist" => class.is_empty(),
                    _ => false,
                }
            }
            _ => false,
        }
    };
    scopes.iter().all(|s| scope_matches(s, "Exists", &[]))
        && selector.iter().all(|e| {
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            scope_matches(
                e["scopeName"].as_str().unwrap_or(""),
                e["operator"].as_str().unwrap_or(""),
                &values,
            )
        })
}

/// Upstream pod evaluator `Constraints`: a quota on cpu or memory requires every
/// container to state that request or limit. The error is upstream's `must specify
/// ...` text.
pub fn pod_constraints(hard: &BTreeSet<String>, pod: &Value) -> Result<(), String> {
    let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for name in [
        "cpu",
        "memory",
        "requests.cpu",
        "requests.memory",
        "limits.cpu",
        "limits.memory",
    ] {
        if !hard.contains(name) {
            continue;
        }
        let (field, resource) = match name.split_once('.') {
            Some(("limits", r)) => ("limits", r),
            Some((_, r)) => ("requests", r),
            None => ("requests", name),
        };
        for kind in ["containers", "initContainers"] {
            for c in pod["spec"][kind].as_array().into_iter().flatten() {
                if c["resources"][field].get(resource).is_none() {
                    missing
                        .entry(name)
                        .or_default()
                        .insert(c["name"].as_str().unwrap_or("").to_string());
                }
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(r, names)| {
            format!(
                "{r} for: {}",
                names.iter().cloned().collect::<Vec<_>>().join(",")
            )
        })
        .collect();
    Err(format!("must specify {}", parts.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_usage_counts_requests_limits_and_objects() {
        let pod = json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "500m"}}},
                {"name": "b", "resources": {"requests": {"cpu": "250m", "example.com/gpu": "1"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]}});
        let u = usage("", "pods", &pod);
        let shown: BTreeMap<&str, String> = u.iter().map(|(k, v)| (k.as_str(), v.show())).collect();
        assert_eq!(shown["pods"], "1");
        assert_eq!(shown["count/pods"], "1");
        assert_eq!(shown["requests.cpu"], "2");
        assert_eq!(shown["cpu"], "2");
        assert_eq!(shown["requests.memory"], "64Mi");
        assert_eq!(shown["limits.cpu"], "500m");
        assert_eq!(shown["requests.example.com/gpu"], "1");
        assert!(tracks("", "pods", "requests.example.com/gpu"));
        assert!(!tracks("", "pods", "requests.storage"));
        let done = json!({"spec": {}, "status": {"phase": "Succeeded"}});
        assert_eq!(usage("", "pods", &done).len(), 1);
    }

    #[test]
    fn services_claims_and_generic_counts() {
        let svc = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 443}]}});
        let u = usage("", "services", &svc);
        assert_eq!(u["services.nodeports"].show(), "2");
        let pvc = json!({"spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "1Gi"}}}});
        let u = usage("", "persistentvolumeclaims", &pvc);
        assert_eq!(u["requests.storage"].show(), "1Gi");
        assert_eq!(
            u["fast.storageclass.storage.k8s.io/requests.storage"].show(),
            "1Gi"
        );
        assert!(tracks(
            "",
            "persistentvolumeclaims",
            "fast.storageclass.storage.k8s.io/persistentvolumeclaims"
        ));
        let u = usage("apps", "deployments", &json!({}));
        assert_eq!(u["count/deployments.apps"].show(), "1");
        assert!(tracks("apps", "deployments", "count/deployments.apps"));
        assert!(!tracks("apps", "deployments", "pods"));
    }

    #[test]
    fn sums_and_printing() {
        let used = parse_list(&json!({"requests.cpu": "1", "requests.memory": "1Gi"}));
        let more = parse_list(&json!({"requests.cpu": "500m", "requests.memory": "512Mi"}));
        let sum = add(&used, &more);
        assert_eq!(pretty(&sum), "requests.cpu=1500m,requests.memory=1536Mi");
        assert_eq!(pretty(&subtract(&sum, &more)), pretty(&used));
        let names: BTreeSet<String> = ["requests.cpu".to_string()].into();
        assert_eq!(pretty(&mask(&sum, &names)), "requests.cpu=1500m");
        assert_eq!(to_json(&sum)["requests.memory"], "1536Mi");
    }

    #[test]
    fn scopes_and_constraints() {
        let quota = json!({"spec": {"scopes": ["BestEffort"]}});
        let bare = json!({"spec": {"containers": [{"name": "a"}]}});
        let sized = json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}});
        assert!(scopes_match(&quota, "", "pods", &bare));
        assert!(!scopes_match(&quota, "", "pods", &sized));
        assert!(!scopes_match(&quota, "", "services", &bare));
        let by_class = json!({"spec": {"scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}});
        let high = json!({"spec": {"priorityClassName": "high"}});
        assert!(scopes_match(&by_class, "", "pods", &high));
        assert!(!scopes_match(&by_class, "", "pods", &bare));
        let hard: BTreeSet<String> =
            ["limits.cpu".to_string(), "requests.memory".to_string()].into();
        assert_eq!(
            pod_constraints(&hard, &sized).unwrap_err(),
            "must specify limits.cpu for: a; requests.memory for: a"
        );
    }
}
