//! The `metrics.k8s.io/v1beta1` API as upstream metrics-server serves it
//! (`k8s.io/metrics/pkg/apis/metrics/v1beta1` types, `pkg/api`): discovery (`/apis`,
//! `/apis/metrics.k8s.io`, `/apis/metrics.k8s.io/v1beta1`), NodeMetrics and PodMetrics
//! get and list (pods in all namespaces or one), with `labelSelector` (on the node's or
//! pod's labels, which the objects carry) and `fieldSelector` (`metadata.name`,
//! `metadata.namespace`). Lists are sorted by namespace and name and leave out what has
//! no usage yet; a get of such an object, or of one that does not exist, is a 404
//! `nodes.metrics.k8s.io "x" not found` / `pods.metrics.k8s.io "x" not found`. Pure:
//! the caller passes the nodes' and pods' metadata and the storage.
//!
//! There are no k8s-openapi types for this group, so the types are here, with the
//! field names and order of upstream's JSON.

use std::collections::BTreeMap;

use ferrokube_apimachinery::errors::ApiError;
use ferrokube_apimachinery::fields::FieldSelector;
use ferrokube_apimachinery::labels::Selector;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta, Time};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::decode::PodRef;
use crate::storage::{Storage, Usage, cpu_quantity, memory_quantity};
use ferrokube_apimachinery::duration::go_duration;

pub const GROUP: &str = "metrics.k8s.io";
pub const VERSION: &str = "v1beta1";
pub const GROUP_VERSION: &str = "metrics.k8s.io/v1beta1";

/// `NodeMetrics`: a node's usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeMetrics {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    pub metadata: ObjectMeta,
    pub timestamp: Time,
    pub window: String,
    pub usage: BTreeMap<String, Quantity>,
}

/// `ContainerMetrics`: one container's usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerMetrics {
    pub name: String,
    pub usage: BTreeMap<String, Quantity>,
}

/// `PodMetrics`: a pod's containers' usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodMetrics {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    pub metadata: ObjectMeta,
    pub timestamp: Time,
    pub window: String,
    pub containers: Vec<ContainerMetrics>,
}

/// A list of `T` (`NodeMetricsList`, `PodMetricsList`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricsList<T> {
    pub kind: String,
    pub api_version: String,
    pub metadata: ListMeta,
    pub items: Vec<T>,
}

/// What a request may name of a node or pod: its metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    /// Empty for nodes.
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// What a path asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `/apis`.
    Apis,
    /// `/apis/metrics.k8s.io`.
    Group,
    /// `/apis/metrics.k8s.io/v1beta1`.
    Resources,
    /// `/apis/metrics.k8s.io/v1beta1/nodes[/name]`.
    Nodes(Option<String>),
    /// `/apis/metrics.k8s.io/v1beta1[/namespaces/ns]/pods[/name]`.
    Pods {
        namespace: Option<String>,
        name: Option<String>,
    },
    /// `/healthz`, `/livez`, `/readyz` (and their `/<check>` subpaths).
    Health(&'static str),
    NotFound,
}

impl Target {
    /// The target of a request path.
    pub fn of(path: &str) -> Target {
        let path = path.trim_end_matches('/');
        for check in ["healthz", "livez", "readyz"] {
            let p = path.strip_prefix('/').unwrap_or(path);
            if p == check || p.starts_with(&format!("{check}/")) {
                return Target::Health(check);
            }
        }
        let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let name = |s: &str| Some(s.to_string());
        match parts.as_slice() {
            ["apis"] => Target::Apis,
            ["apis", GROUP] => Target::Group,
            ["apis", GROUP, VERSION] => Target::Resources,
            ["apis", GROUP, VERSION, "nodes"] => Target::Nodes(None),
            ["apis", GROUP, VERSION, "nodes", n] => Target::Nodes(name(n)),
            ["apis", GROUP, VERSION, "pods"] => Target::Pods {
                namespace: None,
                name: None,
            },
            ["apis", GROUP, VERSION, "namespaces", ns, "pods"] => Target::Pods {
                namespace: name(ns),
                name: None,
            },
            ["apis", GROUP, VERSION, "namespaces", ns, "pods", n] => Target::Pods {
                namespace: name(ns),
                name: name(n),
            },
            _ => Target::NotFound,
        }
    }

    /// `(verb, resource, namespace, name)` of a resource request (`GET` only), for
    /// authorization; `None` for discovery and health paths.
    pub fn resource_attributes(
        &self,
        watch: bool,
    ) -> Option<(&'static str, &'static str, String, String)> {
        let verb = |name: &Option<String>| match (name, watch) {
            (Some(_), _) => "get",
            (None, true) => "watch",
            (None, false) => "list",
        };
        match self {
            Target::Nodes(n) => Some((
                verb(n),
                "nodes",
                String::new(),
                n.clone().unwrap_or_default(),
            )),
            Target::Pods { namespace, name } => Some((
                verb(name),
                "pods",
                namespace.clone().unwrap_or_default(),
                name.clone().unwrap_or_default(),
            )),
            _ => None,
        }
    }
}

/// The `APIGroup` of metrics.k8s.io.
pub fn api_group() -> Value {
    let gv = json!({"groupVersion": GROUP_VERSION, "version": VERSION});
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": GROUP,
        "versions": [gv], "preferredVersion": gv})
}

/// `/apis`: the one group this server serves.
pub fn api_group_list() -> Value {
    let mut group = api_group();
    if let Some(o) = group.as_object_mut() {
        o.remove("kind");
        o.remove("apiVersion");
    }
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]})
}

/// The `APIResourceList` of metrics.k8s.io/v1beta1.
pub fn api_resource_list() -> Value {
    let resource = |name: &str, kind: &str, namespaced: bool| {
        json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind,
            "verbs": ["get", "list"]})
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
        "resources": [resource("nodes", "NodeMetrics", false),
                      resource("pods", "PodMetrics", true)]})
}

fn quantities(u: &Usage) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_string(), Quantity(cpu_quantity(u.cpu_nanocores))),
        (
            "memory".to_string(),
            Quantity(memory_quantity(u.memory_bytes)),
        ),
    ])
}

fn time(nanos: i64) -> Time {
    // metav1.Time is written to the second.
    let secs = nanos.div_euclid(1_000_000_000);
    Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap_or_default())
}

fn now_time() -> Time {
    let secs = k8s_openapi::jiff::Timestamp::now().as_second();
    Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap_or_default())
}

fn meta(m: &Meta) -> ObjectMeta {
    ObjectMeta {
        name: Some(m.name.clone()),
        namespace: (!m.namespace.is_empty()).then(|| m.namespace.clone()),
        labels: (!m.labels.is_empty()).then(|| m.labels.clone()),
        creation_timestamp: Some(now_time()),
        ..Default::default()
    }
}

/// The NodeMetrics of `node`, when its usage is known.
pub fn node_metrics(storage: &Storage, node: &Meta) -> Option<NodeMetrics> {
    let u = storage.node(&node.name)?;
    Some(NodeMetrics {
        kind: None,
        api_version: None,
        metadata: meta(node),
        timestamp: time(u.timestamp_ns),
        window: go_duration(u.window_ns),
        usage: quantities(&u),
    })
}

/// The PodMetrics of `pod`, when its usage is known.
pub fn pod_metrics(storage: &Storage, pod: &Meta) -> Option<PodMetrics> {
    let (containers, ts, window) = storage.pod(&PodRef::new(&pod.namespace, &pod.name))?;
    Some(PodMetrics {
        kind: None,
        api_version: None,
        metadata: meta(pod),
        timestamp: time(ts),
        window: go_duration(window),
        containers: containers
            .iter()
            .map(|(name, u)| ContainerMetrics {
                name: name.clone(),
                usage: quantities(u),
            })
            .collect(),
    })
}

/// A list request's selectors (`labelSelector`, `fieldSelector`), from the query.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub labels: Selector,
    pub fields: FieldSelector,
    pub watch: bool,
}

impl ListOptions {
    /// Parses the query string; a selector that does not parse is a 400.
    pub fn from_query(query: Option<&str>) -> Result<ListOptions, ApiError> {
        let mut opts = ListOptions {
            labels: Selector::everything(),
            fields: FieldSelector::everything(),
            watch: false,
        };
        for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            match k.as_ref() {
                "labelSelector" => {
                    opts.labels =
                        Selector::parse(&v).map_err(|e| ApiError::bad_request(e.to_string()))?
                }
                "fieldSelector" => {
                    opts.fields = FieldSelector::parse(&v)
                        .map_err(|e| ApiError::bad_request(e.to_string()))?
                }
                "watch" => opts.watch = v == "true" || v == "1",
                _ => {}
            }
        }
        Ok(opts)
    }

    fn matches(&self, m: &Meta, namespaced: bool) -> bool {
        let mut fields = BTreeMap::from([("metadata.name".to_string(), m.name.clone())]);
        if namespaced {
            fields.insert("metadata.namespace".into(), m.namespace.clone());
        }
        self.labels.matches(&m.labels) && self.fields.matches_map(&fields)
    }
}

/// The answer to a `GET` of a metrics target: status code and JSON body. `nodes` and
/// `pods` are every node's and pod's metadata (pods of all namespaces).
pub fn get(
    target: &Target,
    query: Option<&str>,
    storage: &Storage,
    nodes: &[Meta],
    pods: &[Meta],
) -> Result<Value, ApiError> {
    let to_value = |v: Result<Value, serde_json::Error>| v.map_err(ApiError::internal);
    match target {
        Target::Apis => Ok(api_group_list()),
        Target::Group => Ok(api_group()),
        Target::Resources => Ok(api_resource_list()),
        Target::Nodes(Some(name)) => {
            let not_found = || ApiError::not_found(GROUP, "nodes", name);
            let node = nodes
                .iter()
                .find(|n| &n.name == name)
                .ok_or_else(not_found)?;
            let mut m = node_metrics(storage, node).ok_or_else(not_found)?;
            m.kind = Some("NodeMetrics".into());
            m.api_version = Some(GROUP_VERSION.into());
            to_value(serde_json::to_value(m))
        }
        Target::Nodes(None) => {
            let opts = ListOptions::from_query(query)?;
            if opts.watch {
                return Err(ApiError::method_not_supported(GROUP, "nodes", "watch"));
            }
            let mut selected: Vec<&Meta> =
                nodes.iter().filter(|n| opts.matches(n, false)).collect();
            selected.sort_by(|a, b| a.name.cmp(&b.name));
            let items = selected
                .into_iter()
                .filter_map(|n| node_metrics(storage, n))
                .collect();
            to_value(serde_json::to_value(MetricsList::<NodeMetrics> {
                kind: "NodeMetricsList".into(),
                api_version: GROUP_VERSION.into(),
                metadata: ListMeta::default(),
                items,
            }))
        }
        Target::Pods {
            namespace: Some(ns),
            name: Some(name),
        } => {
            let not_found = || ApiError::not_found(GROUP, "pods", name);
            let pod = pods
                .iter()
                .find(|p| &p.namespace == ns && &p.name == name)
                .ok_or_else(not_found)?;
            let mut m = pod_metrics(storage, pod).ok_or_else(not_found)?;
            m.kind = Some("PodMetrics".into());
            m.api_version = Some(GROUP_VERSION.into());
            to_value(serde_json::to_value(m))
        }
        Target::Pods { namespace, name: _ } => {
            let opts = ListOptions::from_query(query)?;
            if opts.watch {
                return Err(ApiError::method_not_supported(GROUP, "pods", "watch"));
            }
            let mut selected: Vec<&Meta> = pods
                .iter()
                .filter(|p| namespace.as_ref().is_none_or(|ns| &p.namespace == ns))
                .filter(|p| opts.matches(p, true))
                .collect();
            selected.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            let items = selected
                .into_iter()
                .filter_map(|p| pod_metrics(storage, p))
                .collect();
            to_value(serde_json::to_value(MetricsList::<PodMetrics> {
                kind: "PodMetricsList".into(),
                api_version: GROUP_VERSION.into(),
                metadata: ListMeta::default(),
                items,
            }))
        }
        Target::Health(_) | Target::NotFound => Err(ApiError {
            code: 404,
            reason: "NotFound".into(),
            message: "the server could not find the requested resource".into(),
            details: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::decode::{Batch, Point};

    const S: i64 = 1_000_000_000;

    fn meta(ns: &str, name: &str, labels: &[(&str, &str)]) -> Meta {
        Meta {
            namespace: ns.into(),
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// Nodes a (1 core) and b (only one point); pods ns/web-1, ns/web-2 (two
    /// containers), other/db at 250m each container.
    fn storage() -> Storage {
        let mut st = Storage::new(Duration::from_secs(15));
        for (t, cpu) in [(100, 0u64), (115, 1)] {
            let mut b = Batch::default();
            let p = |cpu_s: f64| Point {
                timestamp_ns: t * S,
                cpu_ns: (cpu_s * 1e9) as u64 + 1,
                memory_bytes: 64 << 20,
                start_ns: S,
            };
            b.nodes.insert("a".into(), p(cpu as f64 * 15.0));
            if t == 115 {
                b.nodes.insert("b".into(), p(1.0));
            }
            for (ns, pod, containers) in [
                ("ns", "web-1", &["c"][..]),
                ("ns", "web-2", &["c", "d"][..]),
                ("other", "db", &["c"][..]),
            ] {
                let pod = b.pods.entry(PodRef::new(ns, pod)).or_default();
                for c in containers {
                    pod.insert(c.to_string(), p(cpu as f64 * 3.75));
                }
            }
            st.store(b);
        }
        st
    }

    fn nodes() -> Vec<Meta> {
        vec![
            meta("", "b", &[("role", "worker")]),
            meta("", "a", &[("role", "control-plane")]),
            meta("", "c", &[]),
        ]
    }

    fn pods() -> Vec<Meta> {
        vec![
            meta("other", "db", &[("app", "db")]),
            meta("ns", "web-2", &[("app", "web")]),
            meta("ns", "web-1", &[("app", "web")]),
            meta("ns", "idle", &[("app", "web")]),
        ]
    }

    #[test]
    fn paths_name_their_targets() {
        assert_eq!(Target::of("/apis"), Target::Apis);
        assert_eq!(Target::of("/apis/metrics.k8s.io/"), Target::Group);
        assert_eq!(
            Target::of("/apis/metrics.k8s.io/v1beta1"),
            Target::Resources
        );
        assert_eq!(
            Target::of("/apis/metrics.k8s.io/v1beta1/nodes/n1"),
            Target::Nodes(Some("n1".into()))
        );
        assert_eq!(
            Target::of("/apis/metrics.k8s.io/v1beta1/namespaces/ns/pods"),
            Target::Pods {
                namespace: Some("ns".into()),
                name: None
            }
        );
        assert_eq!(Target::of("/readyz/log"), Target::Health("readyz"));
        assert_eq!(
            Target::of("/apis/metrics.k8s.io/v1/nodes"),
            Target::NotFound
        );
        assert_eq!(
            Target::of("/apis/metrics.k8s.io/v1beta1/pods").resource_attributes(false),
            Some(("list", "pods", String::new(), String::new()))
        );
        assert_eq!(
            Target::of("/apis/metrics.k8s.io/v1beta1/namespaces/x/pods/p")
                .resource_attributes(false),
            Some(("get", "pods", "x".into(), "p".into()))
        );
        assert_eq!(Target::Apis.resource_attributes(false), None);
    }

    #[test]
    fn node_metrics_list_and_get() {
        let st = storage();
        let list = get(&Target::Nodes(None), None, &st, &nodes(), &[]).unwrap();
        assert_eq!(list["kind"], "NodeMetricsList");
        assert_eq!(list["apiVersion"], GROUP_VERSION);
        let items = list["items"].as_array().unwrap();
        // b has a single point and c none: only a.
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["metadata"]["name"], "a");
        assert_eq!(items[0]["metadata"]["labels"]["role"], "control-plane");
        assert_eq!(items[0]["usage"], json!({"cpu": "1", "memory": "64Mi"}));
        assert_eq!(items[0]["window"], "15s");
        assert_eq!(items[0]["timestamp"], "1970-01-01T00:01:55Z");
        assert!(items[0].get("kind").is_none());
        let typed: MetricsList<NodeMetrics> = serde_json::from_value(list).unwrap();
        assert_eq!(typed.items[0].usage["cpu"].0, "1");

        let one = get(&Target::Nodes(Some("a".into())), None, &st, &nodes(), &[]).unwrap();
        assert_eq!(one["kind"], "NodeMetrics");
        for missing in ["b", "zz"] {
            let err = get(
                &Target::Nodes(Some(missing.into())),
                None,
                &st,
                &nodes(),
                &[],
            )
            .unwrap_err();
            assert_eq!(err.code, 404);
            assert_eq!(
                err.message,
                format!("nodes.metrics.k8s.io \"{missing}\" not found")
            );
        }
        let none = get(
            &Target::Nodes(None),
            Some("labelSelector=role%3Dworker"),
            &st,
            &nodes(),
            &[],
        )
        .unwrap();
        assert_eq!(none["items"], json!([]));
        let by_name = get(
            &Target::Nodes(None),
            Some("fieldSelector=metadata.name%3Da"),
            &st,
            &nodes(),
            &[],
        )
        .unwrap();
        assert_eq!(by_name["items"].as_array().unwrap().len(), 1);
        let err = get(
            &Target::Nodes(None),
            Some("labelSelector=a%3D%3D%3D"),
            &st,
            &nodes(),
            &[],
        )
        .unwrap_err();
        assert_eq!(err.code, 400);
    }

    #[test]
    fn pod_metrics_by_namespace_and_selectors() {
        let st = storage();
        let all = get(
            &Target::Pods {
                namespace: None,
                name: None,
            },
            None,
            &st,
            &[],
            &pods(),
        )
        .unwrap();
        let names: Vec<(&str, &str)> = all["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (
                    i["metadata"]["namespace"].as_str().unwrap(),
                    i["metadata"]["name"].as_str().unwrap(),
                )
            })
            .collect();
        // Sorted by namespace then name; idle has no metrics.
        assert_eq!(
            names,
            vec![("ns", "web-1"), ("ns", "web-2"), ("other", "db")]
        );
        let web2 = &all["items"][1];
        assert_eq!(
            web2["containers"],
            json!([{"name": "c", "usage": {"cpu": "250m", "memory": "64Mi"}},
                   {"name": "d", "usage": {"cpu": "250m", "memory": "64Mi"}}])
        );
        let ns = Target::Pods {
            namespace: Some("ns".into()),
            name: None,
        };
        let web = get(&ns, Some("labelSelector=app+in+(web)"), &st, &[], &pods()).unwrap();
        assert_eq!(web["items"].as_array().unwrap().len(), 2);
        let one = get(
            &ns,
            Some("fieldSelector=metadata.name=web-1"),
            &st,
            &[],
            &pods(),
        )
        .unwrap();
        assert_eq!(one["items"][0]["metadata"]["name"], "web-1");
        let pod = Target::Pods {
            namespace: Some("other".into()),
            name: Some("db".into()),
        };
        let db = get(&pod, None, &st, &[], &pods()).unwrap();
        assert_eq!(db["kind"], "PodMetrics");
        assert_eq!(db["metadata"]["labels"]["app"], "db");
        let idle = Target::Pods {
            namespace: Some("ns".into()),
            name: Some("idle".into()),
        };
        let err = get(&idle, None, &st, &[], &pods()).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (404, "pods.metrics.k8s.io \"idle\" not found")
        );
        let err = get(&ns, Some("watch=true"), &st, &[], &pods()).unwrap_err();
        assert_eq!(err.code, 405);
    }

    #[test]
    fn discovery_documents() {
        assert_eq!(
            api_group()["preferredVersion"]["groupVersion"],
            GROUP_VERSION
        );
        assert_eq!(api_group_list()["groups"][0]["name"], GROUP);
        let r = api_resource_list();
        assert_eq!(r["resources"][0]["name"], "nodes");
        assert_eq!(r["resources"][1]["namespaced"], true);
        assert_eq!(r["resources"][1]["verbs"], json!(["get", "list"]));
    }
}
