//! Content negotiation and response encoding: JSON, YAML, `as=Table`,
//! `as=PartialObjectMetadata(List)`.

use std::sync::Arc;

use bytes::Bytes;
use ferrokube_api::resources::ResourceInfo;
use ferrokube_apimachinery::errors::ApiError;
use serde_json::{Value, json};

/// What the client asked for in `Accept`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Json,
    Yaml,
    Table,
    PartialMetadata,
}

/// One media range of an `Accept` header.
#[derive(Debug, Clone)]
pub struct MediaType {
    pub essence: String,
    pub params: Vec<(String, String)>,
}

impl MediaType {
    pub fn param(&self, k: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
}

pub fn parse_accept(header: &str) -> Vec<MediaType> {
    header
        .split(',')
        .filter_map(|part| {
            let mut it = part.split(';');
            let essence = it.next()?.trim().to_ascii_lowercase();
            if essence.is_empty() {
                return None;
            }
            let params = it
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    Some((k.trim().to_string(), v.trim().trim_matches('"').to_string()))
                })
                .collect();
            Some(MediaType { essence, params })
        })
        .collect()
}

/// Picks the first acceptable target in the client's order.
pub fn negotiate(accept: Option<&str>) -> Result<Target, ApiError> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Target::Json);
    };
    for m in parse_accept(accept) {
        let json_like = matches!(
            m.essence.as_str(),
            "application/json" | "*/*" | "application/*"
        );
        match m.param("as") {
            Some("Table")
                if json_like
                    && m.param("g") == Some("meta.k8s.io")
                    && m.param("v") == Some("v1") =>
            {
                return Ok(Target::Table);
            }
            Some("PartialObjectMetadata") | Some("PartialObjectMetadataList")
                if json_like
                    && m.param("g") == Some("meta.k8s.io")
                    && m.param("v") == Some("v1") =>
            {
                return Ok(Target::PartialMetadata);
            }
            Some(_) => continue,
            None => {}
        }
        match m.essence.as_str() {
            "application/json" | "*/*" | "application/*" => return Ok(Target::Json),
            "application/yaml" => return Ok(Target::Yaml),
            _ => {}
        }
    }
    Err(ApiError::not_acceptable(&[
        "application/json",
        "application/yaml",
        "application/vnd.kubernetes.protobuf",
    ]))
}

pub fn content_type(t: Target) -> &'static str {
    match t {
        Target::Yaml => "application/yaml",
        Target::Table => "application/json;as=Table;v=v1;g=meta.k8s.io",
        Target::PartialMetadata => {
            "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
        }
        Target::Json => "application/json",
    }
}

pub fn encode_value(t: Target, v: &Value) -> Bytes {
    match t {
        Target::Yaml => Bytes::from(serde_yaml_ng::to_string(v).unwrap_or_default()),
        _ => Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
    }
}

/// The `Status` body of an error.
pub fn status_value(e: &ApiError) -> Value {
    let mut v = serde_json::to_value(e.to_status()).unwrap_or_else(|_| json!({}));
    if let Some(o) = v.as_object_mut() {
        o.insert("kind".into(), json!("Status"));
        o.insert("apiVersion".into(), json!("v1"));
        o.entry("metadata").or_insert_with(|| json!({}));
    }
    v
}

fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// One object in the asked form.
pub fn object(t: Target, info: &ResourceInfo, obj: &Value, now: jiff::Timestamp) -> Value {
    match t {
        Target::Table => table(info, &[Arc::new(obj.clone())], None, now, true),
        Target::PartialMetadata => partial_metadata(obj),
        _ => obj.clone(),
    }
}

/// A list in the asked form, as bytes (items serialized once, straight from the
/// shared objects).
pub fn list(
    t: Target,
    info: &ResourceInfo,
    items: &[Arc<Value>],
    list_meta: Value,
    now: jiff::Timestamp,
) -> Bytes {
    match t {
        Target::Table => encode_value(
            Target::Json,
            &table(info, items, Some(list_meta), now, true),
        ),
        Target::PartialMetadata => encode_value(
            Target::Json,
            &json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": list_meta,
                "items": items.iter().map(|o| partial_metadata(o)).collect::<Vec<_>>(),
            }),
        ),
        Target::Yaml => encode_value(
            Target::Yaml,
            &json!({
                "kind": info.list_kind(), "apiVersion": info.api_version(),
                "metadata": list_meta, "items": items.iter().map(|o| (**o).clone()).collect::<Vec<_>>(),
            }),
        ),
        Target::Json => {
            let mut out = Vec::with_capacity(64 + items.len() * 512);
            out.extend_from_slice(b"{\"kind\":");
            serde_json::to_writer(&mut out, &info.list_kind()).unwrap_or_default();
            out.extend_from_slice(b",\"apiVersion\":");
            serde_json::to_writer(&mut out, &info.api_version()).unwrap_or_default();
            out.extend_from_slice(b",\"metadata\":");
            serde_json::to_writer(&mut out, &list_meta).unwrap_or_default();
            out.extend_from_slice(b",\"items\":[");
            for (i, o) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut out, &**o).unwrap_or_default();
            }
            out.extend_from_slice(b"]}");
            Bytes::from(out)
        }
    }
}

/// `translateTimestampSince`: `5s`, `3m12s`, `4h`, `2d5h`, `400d`.
pub fn human_age(created: Option<&str>, now: jiff::Timestamp) -> String {
    let Some(t) = created.and_then(|c| c.parse::<jiff::Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let secs = (now.as_second() - t.as_second()).max(0);
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        let s = secs % 60;
        if s == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{s}s")
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        let mm = m % 60;
        if mm == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{mm}m")
        }
    } else if d < 2 {
        format!("{h}h")
    } else if d < 8 {
        let hh = h % 24;
        if hh == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{hh}h")
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else {
        format!("{}y", d / 365)
    }
}

struct Column {
    name: &'static str,
    ty: &'static str,
    format: &'static str,
    description: &'static str,
    priority: i32,
}

const fn col(name: &'static str, ty: &'static str, priority: i32) -> Column {
    Column {
        name,
        ty,
        format: "",
        description: "",
        priority,
    }
}

const NAME: Column = Column {
    name: "Name",
    ty: "string",
    format: "name",
    description: "Name must be unique within a namespace.",
    priority: 0,
};
const AGE: Column = Column {
    name: "Age",
    ty: "string",
    format: "",
    description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
    priority: 0,
};

fn s(v: &Value) -> Value {
    match v {
        Value::Null => json!("<none>"),
        Value::String(x) if x.is_empty() => json!("<none>"),
        other => other.clone(),
    }
}

fn n(v: &Value) -> Value {
    json!(v.as_i64().unwrap_or(0))
}

fn count_map(v: &Value) -> Value {
    json!(v.as_object().map(|m| m.len()).unwrap_or(0))
}

fn pod_cells(pod: &Value) -> Vec<Value> {
    let statuses = pod["status"]["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let total = pod["spec"]["containers"]
        .as_array()
        .map(|a| a.len())
        .unwrap_or(0);
    let ready = statuses
        .iter()
        .filter(|c| c["ready"].as_bool() == Some(true))
        .count();
    let restarts: i64 = statuses
        .iter()
        .map(|c| c["restartCount"].as_i64().unwrap_or(0))
        .sum();
    let mut reason = pod["status"]["reason"]
        .as_str()
        .or(pod["status"]["phase"].as_str())
        .unwrap_or("Unknown")
        .to_string();
    for c in &statuses {
        if let Some(r) = c["state"]["waiting"]["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
        {
            reason = r.to_string();
        } else if let Some(r) = c["state"]["terminated"]["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
        {
            reason = r.to_string();
        }
    }
    if pod["metadata"]["deletionTimestamp"].is_string() {
        reason = "Terminating".into();
    }
    vec![
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts),
    ]
}

/// Kind-specific columns between Name and Age (upstream's printers), then wide
/// columns (priority 1) after Age.
fn columns(info: &ResourceInfo) -> (Vec<Column>, Vec<Column>) {
    match (info.group, info.kind) {
        ("", "Pod") => (
            vec![
                col("Ready", "string", 0),
                col("Status", "string", 0),
                col("Restarts", "string", 0),
            ],
            vec![col("IP", "string", 1), col("Node", "string", 1)],
        ),
        ("", "Namespace") => (vec![col("Status", "string", 0)], vec![]),
        ("", "ConfigMap") => (vec![col("Data", "integer", 0)], vec![]),
        ("", "Secret") => (
            vec![col("Type", "string", 0), col("Data", "integer", 0)],
            vec![],
        ),
        ("", "Service") => (
            vec![
                col("Type", "string", 0),
                col("Cluster-IP", "string", 0),
                col("External-IP", "string", 0),
                col("Port(s)", "string", 0),
            ],
            vec![col("Selector", "string", 1)],
        ),
        ("", "Node") => (
            vec![col("Status", "string", 0), col("Roles", "string", 0)],
            vec![col("Version", "string", 0)],
        ),
        ("apps", "Deployment") => (
            vec![
                col("Ready", "string", 0),
                col("Up-to-date", "string", 0),
                col("Available", "string", 0),
            ],
            vec![],
        ),
        ("apps", "ReplicaSet") | ("", "ReplicationController") => (
            vec![
                col("Desired", "integer", 0),
                col("Current", "integer", 0),
                col("Ready", "integer", 0),
            ],
            vec![],
        ),
        ("apps", "StatefulSet") => (vec![col("Ready", "string", 0)], vec![]),
        ("apps", "DaemonSet") => (
            vec![
                col("Desired", "integer", 0),
                col("Current", "integer", 0),
                col("Ready", "integer", 0),
                col("Up-to-date", "integer", 0),
                col("Available", "integer", 0),
            ],
            vec![],
        ),
        ("batch", "Job") => (
            vec![col("Status", "string", 0), col("Completions", "string", 0)],
            vec![],
        ),
        ("batch", "CronJob") => (
            vec![
                col("Schedule", "string", 0),
                col("Suspend", "boolean", 0),
                col("Active", "integer", 0),
            ],
            vec![],
        ),
        ("coordination.k8s.io", "Lease") => (vec![col("Holder", "string", 0)], vec![]),
        ("", "Endpoints") => (vec![col("Endpoints", "string", 0)], vec![]),
        ("discovery.k8s.io", "EndpointSlice") => (
            vec![
                col("AddressType", "string", 0),
                col("Ports", "string", 0),
                col("Endpoints", "string", 0),
            ],
            vec![],
        ),
        ("scheduling.k8s.io", "PriorityClass") => (
            vec![
                col("Value", "integer", 0),
                col("Global-Default", "boolean", 0),
            ],
            vec![],
        ),
        ("", "ServiceAccount") => (vec![col("Secrets", "integer", 0)], vec![]),
        _ => (vec![], vec![]),
    }
}

fn ports(svc: &Value) -> String {
    let ps: Vec<String> = svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let proto = p["protocol"].as_str().unwrap_or("TCP");
            match p["nodePort"].as_i64() {
                Some(np) => format!("{}:{np}/{proto}", p["port"]),
                None => format!("{}/{proto}", p["port"]),
            }
        })
        .collect();
    if ps.is_empty() {
        "<none>".into()
    } else {
        ps.join(",")
    }
}

fn cells(info: &ResourceInfo, o: &Value) -> (Vec<Value>, Vec<Value>) {
    match (info.group, info.kind) {
        ("", "Pod") => (
            pod_cells(o),
            vec![s(&o["status"]["podIP"]), s(&o["spec"]["nodeName"])],
        ),
        ("", "Namespace") => (vec![s(&o["status"]["phase"])], vec![]),
        ("", "ConfigMap") => (
            vec![json!(
                count_map(&o["data"]).as_u64().unwrap_or(0)
                    + count_map(&o["binaryData"]).as_u64().unwrap_or(0)
            )],
            vec![],
        ),
        ("", "Secret") => (vec![s(&o["type"]), count_map(&o["data"])], vec![]),
        ("", "Service") => {
            let ext = o["status"]["loadBalancer"]["ingress"]
                .as_array()
                .and_then(|a| a.first())
                .and_then(|i| i["ip"].as_str().or(i["hostname"].as_str()))
                .map(str::to_string)
                .or_else(|| o["spec"]["externalName"].as_str().map(str::to_string))
                .unwrap_or_else(|| {
                    if o["spec"]["type"] == "LoadBalancer" {
                        "<pending>".into()
                    } else {
                        "<none>".into()
                    }
                });
            let selector = o["spec"]["selector"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .filter(|x| !x.is_empty())
                .unwrap_or_else(|| "<none>".into());
            (
                vec![
                    s(&o["spec"]["type"]),
                    s(&o["spec"]["clusterIP"]),
                    json!(ext),
                    json!(ports(o)),
                ],
                vec![json!(selector)],
            )
        }
        ("", "Node") => {
            let ready = o["status"]["conditions"]
                .as_array()
                .and_then(|a| a.iter().find(|c| c["type"] == "Ready"))
                .map(|c| {
                    if c["status"] == "True" {
                        "Ready"
                    } else {
                        "NotReady"
                    }
                })
                .unwrap_or("Unknown");
            let mut roles: Vec<String> = o["metadata"]["labels"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, _)| {
                    k.strip_prefix("node-role.kubernetes.io/")
                        .map(str::to_string)
                })
                .collect();
            roles.sort();
            let roles = if roles.is_empty() {
                "<none>".to_string()
            } else {
                roles.join(",")
            };
            (
                vec![json!(ready), json!(roles)],
                vec![s(&o["status"]["nodeInfo"]["kubeletVersion"])],
            )
        }
        ("apps", "Deployment") => (
            vec![
                json!(format!(
                    "{}/{}",
                    o["status"]["readyReplicas"].as_i64().unwrap_or(0),
                    o["spec"]["replicas"].as_i64().unwrap_or(0)
                )),
                n(&o["status"]["updatedReplicas"]),
                n(&o["status"]["availableReplicas"]),
            ],
            vec![],
        ),
        ("apps", "ReplicaSet") | ("", "ReplicationController") => (
            vec![
                n(&o["spec"]["replicas"]),
                n(&o["status"]["replicas"]),
                n(&o["status"]["readyReplicas"]),
            ],
            vec![],
        ),
        ("apps", "StatefulSet") => (
            vec![json!(format!(
                "{}/{}",
                o["status"]["readyReplicas"].as_i64().unwrap_or(0),
                o["spec"]["replicas"].as_i64().unwrap_or(0)
            ))],
            vec![],
        ),
        ("apps", "DaemonSet") => (
            vec![
                n(&o["status"]["desiredNumberScheduled"]),
                n(&o["status"]["currentNumberScheduled"]),
                n(&o["status"]["numberReady"]),
                n(&o["status"]["updatedNumberScheduled"]),
                n(&o["status"]["numberAvailable"]),
            ],
            vec![],
        ),
        ("batch", "Job") => {
            let conds = o["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let has = |t: &str| {
                conds
                    .iter()
                    .any(|c| c["type"] == t && c["status"] == "True")
            };
            let status = if has("Complete") {
                "Complete"
            } else if has("Failed") {
                "Failed"
            } else {
                "Running"
            };
            (
                vec![
                    json!(status),
                    json!(format!(
                        "{}/{}",
                        o["status"]["succeeded"].as_i64().unwrap_or(0),
                        o["spec"]["completions"].as_i64().unwrap_or(1)
                    )),
                ],
                vec![],
            )
        }
        ("batch", "CronJob") => (
            vec![
                s(&o["spec"]["schedule"]),
                json!(o["spec"]["suspend"].as_bool().unwrap_or(false)),
                json!(
                    o["status"]["active"]
                        .as_array()
                        .map(|a| a.len())
                        .unwrap_or(0)
                ),
            ],
            vec![],
        ),
        ("coordination.k8s.io", "Lease") => (vec![s(&o["spec"]["holderIdentity"])], vec![]),
        ("", "Endpoints") => {
            let mut eps = Vec::new();
            for sub in o["subsets"].as_array().into_iter().flatten() {
                for a in sub["addresses"].as_array().into_iter().flatten() {
                    for p in sub["ports"].as_array().into_iter().flatten() {
                        eps.push(format!("{}:{}", a["ip"].as_str().unwrap_or(""), p["port"]));
                    }
                }
            }
            (
                vec![json!(if eps.is_empty() {
                    "<none>".to_string()
                } else {
                    eps.join(",")
                })],
                vec![],
            )
        }
        ("discovery.k8s.io", "EndpointSlice") => {
            let ports: Vec<String> = o["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| p["port"].to_string())
                .collect();
            let eps: Vec<String> = o["endpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect();
            (
                vec![
                    s(&o["addressType"]),
                    json!(if ports.is_empty() {
                        "<unset>".into()
                    } else {
                        ports.join(",")
                    }),
                    json!(if eps.is_empty() {
                        "<unset>".into()
                    } else {
                        eps.join(",")
                    }),
                ],
                vec![],
            )
        }
        ("scheduling.k8s.io", "PriorityClass") => (
            vec![
                n(&o["value"]),
                json!(o["globalDefault"].as_bool().unwrap_or(false)),
            ],
            vec![],
        ),
        ("", "ServiceAccount") => (
            vec![json!(o["secrets"].as_array().map(|a| a.len()).unwrap_or(0))],
            vec![],
        ),
        _ => (vec![], vec![]),
    }
}

fn column_json(c: &Column) -> Value {
    json!({"name": c.name, "type": c.ty, "format": c.format, "description": c.description, "priority": c.priority})
}

/// A `meta.k8s.io/v1` Table of `items` with upstream's default columns.
pub fn table(
    info: &ResourceInfo,
    items: &[Arc<Value>],
    list_meta: Option<Value>,
    now: jiff::Timestamp,
    with_columns: bool,
) -> Value {
    let (mid, wide) = columns(info);
    let mut defs = vec![column_json(&NAME)];
    defs.extend(mid.iter().map(column_json));
    defs.push(column_json(&AGE));
    defs.extend(wide.iter().map(column_json));
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let (mut c, w) = cells(info, o);
            let mut cells = vec![json!(o["metadata"]["name"].as_str().unwrap_or(""))];
            cells.append(&mut c);
            cells.push(json!(human_age(
                o["metadata"]["creationTimestamp"].as_str(),
                now
            )));
            cells.extend(w);
            json!({"cells": cells, "object": partial_metadata(o)})
        })
        .collect();
    let mut t = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta.unwrap_or_else(|| json!({})),
        "rows": rows,
    });
    if with_columns {
        t["columnDefinitions"] = json!(defs);
    } else {
        t["columnDefinitions"] = json!([]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrokube_api::resources::lookup;

    #[test]
    fn negotiation() {
        assert_eq!(negotiate(None).unwrap(), Target::Json);
        assert_eq!(
            negotiate(Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")).unwrap(),
            Target::Table
        );
        assert_eq!(
            negotiate(Some(
                "application/vnd.kubernetes.protobuf, application/json"
            ))
            .unwrap(),
            Target::Json
        );
        assert_eq!(negotiate(Some("application/yaml")).unwrap(), Target::Yaml);
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf"))
                .unwrap_err()
                .code,
            406
        );
        assert_eq!(
            negotiate(Some("application/json;as=Table;v=v1beta1;g=meta.k8s.io"))
                .unwrap_err()
                .code,
            406
        );
    }

    #[test]
    fn ages() {
        let now = jiff::Timestamp::from_second(1_000_000).unwrap();
        let at = |secs: i64| {
            crate::output::human_age(
                Some(
                    &jiff::Timestamp::from_second(1_000_000 - secs)
                        .unwrap()
                        .to_string(),
                ),
                now,
            )
        };
        assert_eq!(at(5), "5s");
        assert_eq!(at(192), "3m12s");
        assert_eq!(at(3600 * 5), "5h");
        assert_eq!(at(86400 * 3 + 3600), "3d1h");
    }

    #[test]
    fn pod_table() {
        let pods = lookup("", "v1", "pods").unwrap();
        let pod = Arc::new(
            json!({"metadata": {"name": "p", "creationTimestamp": "1970-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}}),
        );
        let t = table(
            pods,
            &[pod],
            None,
            jiff::Timestamp::from_second(30).unwrap(),
            true,
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["p", "0/1", "Pending", 0, "30s", "<none>", "<none>"])
        );
        assert_eq!(t["columnDefinitions"].as_array().unwrap().len(), 7);
    }
}
