//! LimitRanger (upstream `plugin/pkg/admission/limitranger`), mutating and
//! validating, with the LimitRanges of the request's namespace:
//! - pod creation (and in-place resize, `pods/resize`): containers and init containers get the `Container` items'
//!   `default` limits and `defaultRequest` requests they lack (recorded in the
//!   `kubernetes.io/limit-ranger` annotation), then `min`, `max` and
//!   `maxLimitRequestRatio` are enforced per container (`Container`) and on the
//!   pod's sums (`Pod`: containers added up, init containers as a floor, overhead);
//! - PVC create and update: `PersistentVolumeClaim` `min`/`max` on requested storage.
//!
//! Violations are 403 with upstream's messages (`maximum cpu usage per Container is
//! 1, but limit is 2`), several joined as upstream's error aggregate.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_apimachinery::quantity;
use ferrokube_registry::Store;
use serde_json::{Map, Value, json};

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "LimitRanger";
const ANNOTATION: &str = "kubernetes.io/limit-ranger";

pub(crate) struct LimitRanger {
    limit_ranges: Arc<Store>,
}

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(LimitRanger {
        limit_ranges: init
            .registry
            .store("", "v1", "limitranges")
            .cloned()
            .ok_or("no limitranges store")?,
    }))
}

impl LimitRanger {
    fn ranges(&self, namespace: &str) -> Vec<Arc<Value>> {
        crate::security::cached(&self.limit_ranges, &format!("{namespace}/"))
    }
}

#[async_trait]
impl Plugin for LimitRanger {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        // Pod resources change after creation only through an in-place resize.
        let resize =
            a.is_core("pods") && a.operation == Operation::Update && a.subresource == "resize";
        resize
            || (a.subresource.is_empty()
                && ((a.is_core("pods") && a.operation == Operation::Create)
                    || (a.is_core("persistentvolumeclaims")
                        && matches!(a.operation, Operation::Create | Operation::Update))))
    }

    async fn admit(
        &self,
        a: &Attributes,
        object: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if a.is_core("pods") {
            for range in self.ranges(&a.namespace) {
                default_pod(&range, object);
            }
        }
        Ok(())
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
        for range in self.ranges(&a.namespace) {
            let errs = if a.is_core("pods") {
                validate_pod(&range, object)
            } else {
                validate_claim(&range, object)
            };
            if !errs.is_empty() {
                return Err(a.forbidden(aggregate(&errs)));
            }
        }
        Ok(())
    }
}

/// Upstream's `utilerrors.NewAggregate(...).Error()`: one message as is, several
/// (deduplicated) in brackets.
pub(crate) fn aggregate(errs: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errs {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    if seen.len() == 1 {
        seen[0].to_string()
    } else {
        format!("[{}]", seen.join(", "))
    }
}

fn items<'a>(range: &'a Value, ty: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    range["spec"]["limits"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(move |i| i["type"].as_str() == Some(ty))
}

fn list(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, q)| Some((k.clone(), q.as_str()?.to_string())))
        .collect()
}

/// The `Container` items' defaults: (requests, limits).
fn container_defaults(range: &Value) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut requests = BTreeMap::new();
    let mut limits = BTreeMap::new();
    for item in items(range, "Container") {
        requests.extend(list(&item["defaultRequest"]));
        limits.extend(list(&item["default"]));
    }
    (requests, limits)
}

/// Upstream `mergePodResourceRequirements`: missing requests and limits from the
/// range's defaults; the annotation says what was set.
pub(crate) fn default_pod(range: &Value, pod: &mut Value) {
    let (requests, limits) = container_defaults(range);
    if requests.is_empty() && limits.is_empty() {
        return;
    }
    let mut notes: Vec<String> = Vec::new();
    for (kind, prefix) in [
        ("containers", "container"),
        ("initContainers", "init container"),
    ] {
        // `pointer_mut`, not indexing: an index would add `kind: null` to a pod without it.
        let containers = pod
            .pointer_mut(&format!("/spec/{kind}"))
            .and_then(Value::as_array_mut);
        for c in containers.into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or("").to_string();
            let resources = &mut c["resources"];
            if !resources.is_object() {
                *resources = json!({});
            }
            let fill = |field: &str, defaults: &BTreeMap<String, String>, r: &mut Value| {
                let mut set = Vec::new();
                if defaults.is_empty() {
                    return set;
                }
                if !r[field].is_object() {
                    r[field] = Value::Object(Map::new());
                }
                for (k, q) in defaults {
                    if r[field].get(k).is_none() {
                        r[field][k] = json!(q);
                        set.push(k.clone());
                    }
                }
                set
            };
            let set_requests = fill("requests", &requests, resources);
            let set_limits = fill("limits", &limits, resources);
            if !set_requests.is_empty() {
                notes.push(format!(
                    "{} request for {prefix} {name}",
                    set_requests.join(", ")
                ));
            }
            if !set_limits.is_empty() {
                notes.push(format!(
                    "{} limit for {prefix} {name}",
                    set_limits.join(", ")
                ));
            }
        }
    }
    if !notes.is_empty() {
        let meta = &mut pod["metadata"];
        if !meta["annotations"].is_object() {
            meta["annotations"] = json!({});
        }
        meta["annotations"][ANNOTATION] =
            json!(format!("LimitRanger plugin set: {}", notes.join("; ")));
    }
}

/// An amount: thousandths and whether it prints with binary suffixes.
#[derive(Clone, Copy)]
struct Amount {
    milli: i128,
    binary: bool,
}

impl Amount {
    fn of(q: &str) -> Option<Amount> {
        Some(Amount {
            milli: quantity::milli(q)?,
            binary: quantity::is_binary(q),
        })
    }
    fn show(self) -> String {
        quantity::format_milli(self.milli, self.binary)
    }
}

type Amounts = BTreeMap<String, Amount>;

fn amounts(v: &Value) -> Amounts {
    list(v)
        .into_iter()
        .filter_map(|(k, q)| Some((k, Amount::of(&q)?)))
        .collect()
}

fn min_constraint(
    ty: &str,
    resource: &str,
    enforced: &str,
    requests: &Amounts,
    limits: &Amounts,
) -> Option<String> {
    let e = Amount::of(enforced)?;
    let enforced = e.show();
    let Some(req) = requests.get(resource) else {
        return Some(format!(
            "minimum {resource} usage per {ty} is {enforced}.  No request is specified"
        ));
    };
    if req.milli < e.milli {
        return Some(format!(
            "minimum {resource} usage per {ty} is {enforced}, but request is {}",
            req.show()
        ));
    }
    if let Some(lim) = limits.get(resource)
        && lim.milli < e.milli
    {
        return Some(format!(
            "minimum {resource} usage per {ty} is {enforced}, but limit is {}",
            lim.show()
        ));
    }
    None
}

fn max_constraint(
    ty: &str,
    resource: &str,
    enforced: &str,
    requests: &Amounts,
    limits: &Amounts,
) -> Option<String> {
    let e = Amount::of(enforced)?;
    let enforced = e.show();
    let Some(lim) = limits.get(resource) else {
        return Some(format!(
            "maximum {resource} usage per {ty} is {enforced}.  No limit is specified"
        ));
    };
    if lim.milli > e.milli {
        return Some(format!(
            "maximum {resource} usage per {ty} is {enforced}, but limit is {}",
            lim.show()
        ));
    }
    if let Some(req) = requests.get(resource)
        && req.milli > e.milli
    {
        return Some(format!(
            "maximum {resource} usage per {ty} is {enforced}, but request is {}",
            req.show()
        ));
    }
    None
}

fn max_request_constraint(
    ty: &str,
    resource: &str,
    enforced: &str,
    requests: &Amounts,
) -> Option<String> {
    let e = Amount::of(enforced)?;
    let enforced = e.show();
    let Some(req) = requests.get(resource) else {
        return Some(format!(
            "maximum {resource} usage per {ty} is {enforced}.  No request is specified"
        ));
    };
    (req.milli > e.milli).then(|| {
        format!(
            "maximum {resource} usage per {ty} is {enforced}, but request is {}",
            req.show()
        )
    })
}

fn ratio_constraint(
    ty: &str,
    resource: &str,
    enforced: &str,
    requests: &Amounts,
    limits: &Amounts,
) -> Option<String> {
    let e = Amount::of(enforced)?;
    let enforced = e.show();
    let req = requests.get(resource).map_or(0, |a| a.milli);
    if req == 0 {
        return Some(format!(
            "{resource} max limit to request ratio per {ty} is {enforced}, but no request is specified or request is 0"
        ));
    }
    let lim = limits.get(resource).map_or(0, |a| a.milli);
    if lim == 0 {
        return Some(format!(
            "{resource} max limit to request ratio per {ty} is {enforced}, but no limit is specified or limit is 0"
        ));
    }
    // lim / req > enforced, in integers: lim * 1000 > enforced_milli * req.
    let over = lim
        .checked_mul(1000)
        .zip(e.milli.checked_mul(req))
        .is_some_and(|(l, r)| l > r);
    over.then(|| {
        format!(
            "{resource} max limit to request ratio per {ty} is {enforced}, but provided ratio is {:.6}",
            lim as f64 / req as f64
        )
    })
}

/// min, max and maxLimitRequestRatio of one item against requests and limits.
fn check_item(ty: &str, item: &Value, requests: &Amounts, limits: &Amounts) -> Vec<String> {
    let mut errs = Vec::new();
    for (k, q) in list(&item["min"]) {
        errs.extend(min_constraint(ty, &k, &q, requests, limits));
    }
    for (k, q) in list(&item["max"]) {
        errs.extend(max_constraint(ty, &k, &q, requests, limits));
    }
    for (k, q) in list(&item["maxLimitRequestRatio"]) {
        errs.extend(ratio_constraint(ty, &k, &q, requests, limits));
    }
    errs
}

/// Upstream `podRequests`/`podLimits`: containers added up, each init container a
/// floor, overhead added.
fn pod_totals(pod: &Value, field: &str) -> Amounts {
    let mut total = Amounts::new();
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        for (k, a) in amounts(&c["resources"][field]) {
            total
                .entry(k)
                .and_modify(|t| t.milli = t.milli.saturating_add(a.milli))
                .or_insert(a);
        }
    }
    for c in pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for (k, a) in amounts(&c["resources"][field]) {
            total
                .entry(k)
                .and_modify(|t| t.milli = t.milli.max(a.milli))
                .or_insert(a);
        }
    }
    for (k, a) in amounts(&pod["spec"]["overhead"]) {
        total
            .entry(k)
            .and_modify(|t| t.milli = t.milli.saturating_add(a.milli))
            .or_insert(a);
    }
    total
}

/// Upstream `PodValidateLimitFunc`.
pub(crate) fn validate_pod(range: &Value, pod: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    for item in range["spec"]["limits"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("Container") => {
                for kind in ["containers", "initContainers"] {
                    for c in pod["spec"][kind].as_array().into_iter().flatten() {
                        let requests = amounts(&c["resources"]["requests"]);
                        let limits = amounts(&c["resources"]["limits"]);
                        errs.extend(check_item("Container", item, &requests, &limits));
                    }
                }
            }
            Some("Pod") => {
                let requests = pod_totals(pod, "requests");
                let limits = pod_totals(pod, "limits");
                errs.extend(check_item("Pod", item, &requests, &limits));
            }
            _ => {}
        }
    }
    errs
}

/// Upstream `PersistentVolumeClaimValidateLimitFunc`: min against requests and no
/// limits, max against requests.
pub(crate) fn validate_claim(range: &Value, claim: &Value) -> Vec<String> {
    let ty = "PersistentVolumeClaim";
    let requests = amounts(&claim["spec"]["resources"]["requests"]);
    let mut errs = Vec::new();
    for item in items(range, ty) {
        for (k, q) in list(&item["min"]) {
            errs.extend(min_constraint(ty, &k, &q, &requests, &Amounts::new()));
        }
        for (k, q) in list(&item["max"]) {
            errs.extend(max_request_constraint(ty, &k, &q, &requests));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range() -> Value {
        json!({"spec": {"limits": [
            {"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"},
             "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
             "max": {"cpu": "1"}, "min": {"cpu": "50m"}, "maxLimitRequestRatio": {"cpu": "5"}},
            {"type": "Pod", "max": {"memory": "1Gi"}}]}})
    }

    #[test]
    fn defaults_fill_what_containers_lack_and_annotate() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "a", "image": "x"},
                {"name": "b", "image": "x", "resources": {"limits": {"cpu": "800m"}, "requests": {"cpu": "400m"}}}],
            "initContainers": [{"name": "i", "image": "x"}]}});
        default_pod(&range(), &mut pod);
        let a = &pod["spec"]["containers"][0]["resources"];
        assert_eq!(a["requests"], json!({"cpu": "100m", "memory": "128Mi"}));
        assert_eq!(a["limits"], json!({"cpu": "500m", "memory": "256Mi"}));
        let b = &pod["spec"]["containers"][1]["resources"];
        assert_eq!(b["limits"], json!({"cpu": "800m", "memory": "256Mi"}));
        assert_eq!(b["requests"], json!({"cpu": "400m", "memory": "128Mi"}));
        assert_eq!(
            pod["spec"]["initContainers"][0]["resources"]["limits"]["cpu"],
            "500m"
        );
        assert_eq!(
            pod["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: cpu, memory request for container a; cpu, memory limit for container a; \
             memory request for container b; memory limit for container b; \
             cpu, memory request for init container i; cpu, memory limit for init container i"
        );
        assert!(validate_pod(&range(), &pod).is_empty());
    }

    #[test]
    fn a_pod_without_init_containers_gets_no_init_containers_member() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "a", "image": "x"}]}});
        default_pod(&range(), &mut pod);
        let spec = pod["spec"].as_object().unwrap();
        assert_eq!(spec.keys().collect::<Vec<_>>(), ["containers"], "{pod}");
    }

    #[test]
    fn container_and_pod_bounds_with_upstream_messages() {
        let pod = |cpu_req: &str, cpu_lim: &str, mem: &str| {
            json!({"spec": {"containers": [
                {"name": "a", "resources": {"requests": {"cpu": cpu_req, "memory": mem}, "limits": {"cpu": cpu_lim, "memory": mem}}},
                {"name": "b", "resources": {"requests": {"cpu": "100m", "memory": mem}, "limits": {"cpu": "100m", "memory": mem}}}]}})
        };
        assert_eq!(
            validate_pod(&range(), &pod("100m", "2", "128Mi")),
            vec![
                "maximum cpu usage per Container is 1, but limit is 2",
                "cpu max limit to request ratio per Container is 5, but provided ratio is 20.000000",
            ]
        );
        assert_eq!(
            validate_pod(&range(), &pod("10m", "20m", "128Mi")),
            vec!["minimum cpu usage per Container is 50m, but request is 10m"]
        );
        assert_eq!(
            validate_pod(&range(), &pod("100m", "100m", "768Mi")),
            vec!["maximum memory usage per Pod is 1Gi, but limit is 1536Mi"]
        );
        let bare = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(
            aggregate(&validate_pod(&range(), &bare)),
            "[minimum cpu usage per Container is 50m.  No request is specified, \
             maximum cpu usage per Container is 1.  No limit is specified, \
             cpu max limit to request ratio per Container is 5, but no request is specified or request is 0, \
             maximum memory usage per Pod is 1Gi.  No limit is specified]"
        );
    }

    #[test]
    fn claims_are_bounded_on_requested_storage() {
        let range = json!({"spec": {"limits": [{"type": "PersistentVolumeClaim",
            "min": {"storage": "1Gi"}, "max": {"storage": "2Gi"}}]}});
        let claim = |s: &str| json!({"spec": {"resources": {"requests": {"storage": s}}}});
        assert!(validate_claim(&range, &claim("1Gi")).is_empty());
        assert_eq!(
            validate_claim(&range, &claim("3Gi")),
            vec!["maximum storage usage per PersistentVolumeClaim is 2Gi, but request is 3Gi"]
        );
        assert_eq!(
            validate_claim(&range, &claim("500Mi")),
            vec!["minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi"]
        );
    }
}
