//! Container environment (upstream `kubelet_pods.go` `makeEnvironmentVariables`): service
//! variables, then `envFrom`, then `env` with `$(VAR)` expansion and `valueFrom`
//! (fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef). Pure: the ConfigMaps,
//! Secrets and IPs it reads are passed in.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::config::NodeConfig;
use crate::quantity::{divide_ceil, milli_value, value};
use crate::sandbox::{name, namespace, spec, uid};

/// What environment resolution reads besides the pod.
#[derive(Debug, Clone, Default)]
pub struct EnvSources {
    /// ConfigMaps of the pod's namespace by name.
    pub config_maps: BTreeMap<String, ConfigMap>,
    /// Secrets of the pod's namespace by name.
    pub secrets: BTreeMap<String, Secret>,
    /// Service link variables (`<SVC>_SERVICE_HOST`, ...), when the pod enables them.
    pub service_env: BTreeMap<String, String>,
    /// The pod's IPs (sandbox network status), primary first.
    pub pod_ips: Vec<String>,
    /// Projected service account tokens by [`crate::volume::token_key`]: the token from the
    /// TokenRequest API, or why there is none.
    pub service_account_tokens: BTreeMap<String, Result<String, String>>,
    /// The CRI handler of the pod's RuntimeClass (`None` when the pod names no class),
    /// or why the class cannot be read; the sandbox is not created without it.
    pub runtime_handler: Option<Result<String, String>>,
    /// The claims of the pod's `persistentVolumeClaim` volumes by claim name, with their
    /// PersistentVolumes, as read through the API.
    pub claims: BTreeMap<String, crate::volume::ClaimLookup>,
}

/// Why a container's environment cannot be built (the container's waiting reason is then
/// `CreateContainerConfigError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    #[error("configmap \"{0}\" not found")]
    ConfigMapNotFound(String),
    #[error("secret \"{0}\" not found")]
    SecretNotFound(String),
    #[error("couldn't find key {key} in ConfigMap {namespace}/{name}")]
    ConfigMapKeyNotFound {
        namespace: String,
        name: String,
        key: String,
    },
    #[error("couldn't find key {key} in Secret {namespace}/{name}")]
    SecretKeyNotFound {
        namespace: String,
        name: String,
        key: String,
    },
    #[error("unsupported fieldPath: {0}")]
    FieldPath(String),
    #[error("unsupported container resource: {0}")]
    Resource(String),
    #[error("container {0} not found in the pod for resourceFieldRef")]
    ResourceContainer(String),
}

/// Expands `$(VAR)` references from `lookup`; `$$` is a literal `$`; unknown references and
/// other `$` are kept as written (upstream's `expansion.Expand`).
pub fn expand(input: &str, mut lookup: impl FnMut(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    out.push_str(&input[copied..i]);
                    out.push('$');
                    i += 2;
                    copied = i;
                    continue;
                }
                b'(' => {
                    if let Some(end) = input[i + 2..].find(')') {
                        let var = &input[i + 2..i + 2 + end];
                        out.push_str(&input[copied..i]);
                        match lookup(var) {
                            Some(v) => out.push_str(&v),
                            None => {
                                out.push_str("$(");
                                out.push_str(var);
                                out.push(')');
                            }
                        }
                        i += end + 3;
                        copied = i;
                        continue;
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    out.push_str(&input[copied..]);
    out
}

pub(crate) fn field_ref(
    pod: &Pod,
    node: &NodeConfig,
    sources: &EnvSources,
    path: &str,
) -> Result<String, EnvError> {
    let meta = &pod.metadata;
    let subscript = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_prefix("['"))
            .and_then(|r| r.strip_suffix("']"))
    };
    if let Some(k) = subscript("metadata.labels") {
        return Ok(meta
            .labels
            .as_ref()
            .and_then(|l| l.get(k))
            .cloned()
            .unwrap_or_default());
    }
    if let Some(k) = subscript("metadata.annotations") {
        return Ok(meta
            .annotations
            .as_ref()
            .and_then(|l| l.get(k))
            .cloned()
            .unwrap_or_default());
    }
    Ok(match path {
        "metadata.name" => name(pod).to_owned(),
        "metadata.namespace" => namespace(pod).to_owned(),
        "metadata.uid" => uid(pod).to_owned(),
        "spec.nodeName" => spec(pod)
            .node_name
            .clone()
            .unwrap_or_else(|| node.node_name.clone()),
        "spec.serviceAccountName" => spec(pod).service_account_name.clone().unwrap_or_default(),
        "status.hostIP" => node.node_ips.first().cloned().unwrap_or_default(),
        "status.hostIPs" => node.node_ips.join(","),
        "status.podIP" => sources.pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => sources.pod_ips.join(","),
        other => return Err(EnvError::FieldPath(other.to_owned())),
    })
}

pub(crate) fn resource_field_ref(
    pod: &Pod,
    current: &Container,
    node: &NodeConfig,
    r: &k8s_openapi::api::core::v1::ResourceFieldSelector,
) -> Result<String, EnvError> {
    let s = spec(pod);
    let c = match r.container_name.as_deref() {
        None | Some("") => current,
        Some(n) => s
            .containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .find(|c| c.name == n)
            .ok_or_else(|| EnvError::ResourceContainer(n.to_owned()))?,
    };
    let (kind, res) = r
        .resource
        .split_once('.')
        .ok_or_else(|| EnvError::Resource(r.resource.clone()))?;
    let list = c.resources.as_ref().and_then(|rr| match kind {
        "limits" => rr.limits.as_ref(),
        "requests" => rr.requests.as_ref(),
        _ => None,
    });
    if kind != "limits" && kind != "requests" {
        return Err(EnvError::Resource(r.resource.clone()));
    }
    let q: Option<&Quantity> = list.and_then(|l| l.get(res));
    let divisor = r.divisor.as_ref();
    match res {
        "cpu" => {
            let v = match q.and_then(milli_value) {
                Some(v) => v,
                None if kind == "limits" => node.cpu_capacity_milli,
                None => 0,
            };
            let d = divisor
                .and_then(milli_value)
                .filter(|d| *d > 0)
                .unwrap_or(1000);
            Ok(divide_ceil(v, d).to_string())
        }
        "memory" | "ephemeral-storage" => {
            let v = match q.and_then(value) {
                Some(v) => v,
                None if kind == "limits" && res == "memory" => node.memory_capacity,
                None => 0,
            };
            let d = divisor.and_then(value).filter(|d| *d > 0).unwrap_or(1);
            Ok(divide_ceil(v, d).to_string())
        }
        _ if res.starts_with("hugepages-") => {
            let v = q.and_then(value).unwrap_or(0);
            let d = divisor.and_then(value).filter(|d| *d > 0).unwrap_or(1);
            Ok(divide_ceil(v, d).to_string())
        }
        _ => Err(EnvError::Resource(r.resource.clone())),
    }
}

fn config_map_data(cm: &ConfigMap) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = cm.data.clone().unwrap_or_default();
    for (k, v) in cm.binary_data.iter().flatten() {
        out.entry(k.clone())
            .or_insert_with(|| String::from_utf8_lossy(&v.0).into_owned());
    }
    out
}

fn secret_data(s: &Secret) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect();
    for (k, v) in s.string_data.iter().flatten() {
        out.insert(k.clone(), v.clone());
    }
    out
}

/// Ordered environment with later definitions replacing earlier ones in place.
#[derive(Default)]
struct Env {
    order: Vec<String>,
    values: BTreeMap<String, String>,
}

impl Env {
    fn set(&mut self, k: String, v: String) {
        if !self.values.contains_key(&k) {
            self.order.push(k.clone());
        }
        self.values.insert(k, v);
    }
}

/// The master Service every pod gets variables for, whatever its namespace.
const MASTER_SERVICE: (&str, &str) = ("default", "kubernetes");

/// The service link variables of a pod in `namespace` (upstream `getServiceEnvVarMap` and
/// `envvars.FromServices`): the `kubernetes` Service's always (in-cluster clients find the
/// API by `KUBERNETES_SERVICE_HOST`/`_PORT`), and, with `enableServiceLinks` (default
/// true), those of every Service in the pod's namespace that has a cluster IP; a
/// same-named Service in the pod's namespace wins over the master Service.
pub fn service_links<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    namespace: &str,
    enable_service_links: bool,
) -> BTreeMap<String, String> {
    let mut chosen: BTreeMap<&str, &Service> = BTreeMap::new();
    for svc in services {
        let spec = svc.spec.as_ref();
        let ip = spec.and_then(|s| s.cluster_ip.as_deref()).unwrap_or("");
        if ip.is_empty() || ip == "None" {
            continue;
        }
        let name = svc.metadata.name.as_deref().unwrap_or("");
        let ns = svc.metadata.namespace.as_deref().unwrap_or("");
        if (ns, name) == MASTER_SERVICE {
            chosen.entry(name).or_insert(svc);
        } else if ns == namespace && enable_service_links {
            chosen.insert(name, svc);
        }
    }
    let mut out = BTreeMap::new();
    for (name, svc) in chosen {
        let Some(spec) = svc.spec.as_ref() else {
            continue;
        };
        let ip = spec.cluster_ip.as_deref().unwrap_or("");
        let ports = spec.ports.as_deref().unwrap_or(&[]);
        let Some(first) = ports.first() else { continue };
        let prefix = name.replace('-', "_").to_uppercase();
        out.insert(format!("{prefix}_SERVICE_HOST"), ip.to_string());
        out.insert(format!("{prefix}_SERVICE_PORT"), first.port.to_string());
        for p in ports {
            if let Some(port_name) = p.name.as_deref().filter(|n| !n.is_empty()) {
                let port_name = port_name.replace('-', "_").to_uppercase();
                out.insert(
                    format!("{prefix}_SERVICE_PORT_{port_name}"),
                    p.port.to_string(),
                );
            }
        }
        // Docker link variables, the first port also as <SVC>_PORT.
        let host_port = |port: i32| match ip.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V6(_)) => format!("[{ip}]:{port}"),
            _ => format!("{ip}:{port}"),
        };
        for (i, p) in ports.iter().enumerate() {
            let protocol = p.protocol.as_deref().unwrap_or("TCP");
            let (lower, upper) = (protocol.to_lowercase(), protocol.to_uppercase());
            let url = format!("{lower}://{}", host_port(p.port));
            if i == 0 {
                out.insert(format!("{prefix}_PORT"), url.clone());
            }
            let port_prefix = format!("{prefix}_PORT_{}_{upper}", p.port);
            out.insert(format!("{port_prefix}_PROTO"), lower);
            out.insert(format!("{port_prefix}_PORT"), p.port.to_string());
            out.insert(format!("{port_prefix}_ADDR"), ip.to_string());
            out.insert(port_prefix, url);
        }
    }
    out
}

/// The container's environment, in order, as `(name, value)` pairs.
pub fn container_env(
    pod: &Pod,
    container: &Container,
    node: &NodeConfig,
    sources: &EnvSources,
) -> Result<Vec<(String, String)>, EnvError> {
    let ns = namespace(pod);
    let mut env = Env::default();
    for (k, v) in &sources.service_env {
        env.set(k.clone(), v.clone());
    }
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            match sources.config_maps.get(&r.name) {
                Some(cm) => {
                    for (k, v) in config_map_data(cm) {
                        env.set(format!("{prefix}{k}"), v);
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(EnvError::ConfigMapNotFound(r.name.clone())),
            }
        }
        if let Some(r) = &from.secret_ref {
            match sources.secrets.get(&r.name) {
                Some(s) => {
                    for (k, v) in secret_data(s) {
                        env.set(format!("{prefix}{k}"), v);
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(EnvError::SecretNotFound(r.name.clone())),
            }
        }
    }
    for e in container.env.iter().flatten() {
        let value = match &e.value_from {
            None => {
                let v = e.value.clone().unwrap_or_default();
                expand(&v, |k| env.values.get(k).cloned())
            }
            Some(from) => {
                if let Some(f) = &from.field_ref {
                    field_ref(pod, node, sources, &f.field_path)?
                } else if let Some(r) = &from.resource_field_ref {
                    resource_field_ref(pod, container, node, r)?
                } else if let Some(r) = &from.config_map_key_ref {
                    let optional = r.optional == Some(true);
                    match sources.config_maps.get(&r.name) {
                        None if optional => continue,
                        None => return Err(EnvError::ConfigMapNotFound(r.name.clone())),
                        Some(cm) => match config_map_data(cm).remove(&r.key) {
                            Some(v) => v,
                            None if optional => continue,
                            None => {
                                return Err(EnvError::ConfigMapKeyNotFound {
                                    namespace: ns.into(),
                                    name: r.name.clone(),
                                    key: r.key.clone(),
                                });
                            }
                        },
                    }
                } else if let Some(r) = &from.secret_key_ref {
                    let optional = r.optional == Some(true);
                    match sources.secrets.get(&r.name) {
                        None if optional => continue,
                        None => return Err(EnvError::SecretNotFound(r.name.clone())),
                        Some(s) => match secret_data(s).remove(&r.key) {
                            Some(v) => v,
                            None if optional => continue,
                            None => {
                                return Err(EnvError::SecretKeyNotFound {
                                    namespace: ns.into(),
                                    name: r.name.clone(),
                                    key: r.key.clone(),
                                });
                            }
                        },
                    }
                } else {
                    String::new()
                }
            }
        };
        env.set(e.name.clone(), value);
    }
    let Env { order, mut values } = env;
    Ok(order
        .into_iter()
        .map(|k| {
            let v = values.remove(&k).unwrap_or_default();
            (k, v)
        })
        .collect())
}

/// Command and args with `$(VAR)` references expanded from the container's environment.
pub fn expand_command_and_args(
    container: &Container,
    env: &[(String, String)],
) -> (Vec<String>, Vec<String>) {
    let map: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let ex = |v: &Option<Vec<String>>| -> Vec<String> {
        v.iter()
            .flatten()
            .map(|s| expand(s, |k| map.get(k).map(|v| (*v).to_owned())))
            .collect()
    };
    (ex(&container.command), ex(&container.args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVar, EnvVarSource,
        ObjectFieldSelector, PodSpec, ResourceFieldSelector, ResourceRequirements, SecretEnvSource,
        SecretKeySelector,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn expansion() {
        let lookup = |k: &str| match k {
            "A" => Some("alpha".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        let cases = [
            ("plain", "plain"),
            ("$(A)", "alpha"),
            ("x-$(A)-y", "x-alpha-y"),
            ("$(A)$(A)", "alphaalpha"),
            ("$(MISSING)", "$(MISSING)"),
            ("$$(A)", "$(A)"),
            ("$$", "$"),
            ("$", "$"),
            ("a$b", "a$b"),
            ("$(A", "$(A"),
            ("[$(EMPTY)]", "[]"),
            ("$(A)$", "alpha$"),
            ("ünï$(A)", "ünïalpha"),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, lookup), want, "{input}");
        }
    }

    fn env_var(name: &str, value: Option<&str>, from: Option<EnvVarSource>) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: value.map(str::to_owned),
            value_from: from,
        }
    }

    fn fixture() -> (Pod, NodeConfig, EnvSources) {
        let container = Container {
            name: "app".into(),
            resources: Some(ResourceRequirements {
                requests: Some([("cpu".to_string(), Quantity("250m".into()))].into()),
                limits: Some([("memory".to_string(), Quantity("64Mi".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                uid: Some("u-1".into()),
                labels: Some([("tier".to_string(), "web".to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![container],
                node_name: Some("node-a".into()),
                service_account_name: Some("sa".into()),
                ..Default::default()
            }),
            status: None,
        };
        let mut node = NodeConfig::new("node-a");
        node.node_ips = vec!["192.168.1.5".into()];
        let sources = EnvSources {
            config_maps: [(
                "cm".to_string(),
                ConfigMap {
                    data: Some(
                        [
                            ("k1".to_string(), "v1".to_string()),
                            ("k2".to_string(), "v2".to_string()),
                        ]
                        .into(),
                    ),
                    ..Default::default()
                },
            )]
            .into(),
            secrets: [(
                "sec".to_string(),
                Secret {
                    data: Some([("pw".to_string(), ByteString(b"hunter2".to_vec()))].into()),
                    ..Default::default()
                },
            )]
            .into(),
            service_env: [(
                "KUBERNETES_SERVICE_HOST".to_string(),
                "10.96.0.1".to_string(),
            )]
            .into(),
            pod_ips: vec!["10.244.0.7".into()],
            ..Default::default()
        };
        (pod, node, sources)
    }

    fn service(ns: &str, name: &str, ip: &str, ports: &[(&str, i32, &str)]) -> Service {
        use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(ip.into()),
                ports: Some(
                    ports
                        .iter()
                        .map(|(n, port, proto)| ServicePort {
                            name: (!n.is_empty()).then(|| n.to_string()),
                            port: *port,
                            protocol: (!proto.is_empty()).then(|| proto.to_string()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn service_links_as_upstream() {
        let services = [
            service(
                "default",
                "kubernetes",
                "10.96.0.1",
                &[("https", 443, "TCP")],
            ),
            service(
                "app",
                "my-db",
                "10.96.0.20",
                &[("", 5432, ""), ("metrics-http", 9187, "TCP")],
            ),
            service("app", "dns", "10.96.0.30", &[("dns", 53, "UDP")]),
            service("app", "headless", "None", &[("web", 80, "TCP")]),
            service("other", "elsewhere", "10.96.0.40", &[("web", 80, "TCP")]),
        ];
        let env = service_links(&services, "app", true);
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some("10.96.0.1"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT"), Some("443"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT_HTTPS"), Some("443"));
        assert_eq!(get("KUBERNETES_PORT"), Some("tcp://10.96.0.1:443"));
        assert_eq!(get("KUBERNETES_PORT_443_TCP"), Some("tcp://10.96.0.1:443"));
        assert_eq!(get("KUBERNETES_PORT_443_TCP_PROTO"), Some("tcp"));
        assert_eq!(get("KUBERNETES_PORT_443_TCP_PORT"), Some("443"));
        assert_eq!(get("KUBERNETES_PORT_443_TCP_ADDR"), Some("10.96.0.1"));
        assert_eq!(get("MY_DB_SERVICE_HOST"), Some("10.96.0.20"));
        assert_eq!(get("MY_DB_SERVICE_PORT"), Some("5432"));
        assert_eq!(get("MY_DB_SERVICE_PORT_METRICS_HTTP"), Some("9187"));
        assert_eq!(get("MY_DB_PORT_9187_TCP"), Some("tcp://10.96.0.20:9187"));
        assert_eq!(get("DNS_PORT"), Some("udp://10.96.0.30:53"));
        assert_eq!(get("DNS_PORT_53_UDP_PROTO"), Some("udp"));
        assert!(
            env.keys().all(|k| !k.starts_with("HEADLESS_")),
            "headless: no variables"
        );
        assert!(
            env.keys().all(|k| !k.starts_with("ELSEWHERE_")),
            "other namespaces: none"
        );

        // enableServiceLinks: false keeps only the master Service's.
        let env = service_links(&services, "app", false);
        assert!(env.keys().all(|k| k.starts_with("KUBERNETES_")), "{env:?}");
        assert_eq!(env.len(), 8);

        // In `default`, a pod sees `kubernetes` once.
        let env = service_links(&services, "default", true);
        assert_eq!(
            env.get("KUBERNETES_SERVICE_HOST").map(String::as_str),
            Some("10.96.0.1")
        );
    }

    fn field(path: &str) -> Option<EnvVarSource> {
        Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..Default::default()
        })
    }

    fn res(resource: &str, divisor: Option<&str>) -> Option<EnvVarSource> {
        Some(EnvVarSource {
            resource_field_ref: Some(ResourceFieldSelector {
                resource: resource.into(),
                divisor: divisor.map(|d| Quantity(d.into())),
                container_name: None,
            }),
            ..Default::default()
        })
    }

    #[test]
    fn resolves_every_source() {
        let (mut pod, node, sources) = fixture();
        let c = &mut pod.spec.as_mut().unwrap().containers[0];
        c.env_from = Some(vec![
            EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: "cm".into(),
                    optional: None,
                }),
                prefix: Some("CM_".into()),
                secret_ref: None,
            },
            EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name: "missing".into(),
                    optional: Some(true),
                }),
                ..Default::default()
            },
        ]);
        c.env = Some(vec![
            env_var("GREETING", Some("hi $(CM_k1) $(NOPE)"), None),
            env_var("NAME", None, field("metadata.name")),
            env_var("NS", None, field("metadata.namespace")),
            env_var("UID", None, field("metadata.uid")),
            env_var("TIER", None, field("metadata.labels['tier']")),
            env_var("NODE", None, field("spec.nodeName")),
            env_var("SA", None, field("spec.serviceAccountName")),
            env_var("POD_IP", None, field("status.podIP")),
            env_var("HOST_IP", None, field("status.hostIP")),
            env_var("CPU_REQ_M", None, res("requests.cpu", Some("1m"))),
            env_var("CPU_REQ", None, res("requests.cpu", None)),
            env_var("CPU_LIM", None, res("limits.cpu", None)),
            env_var("MEM_LIM_MI", None, res("limits.memory", Some("1Mi"))),
            env_var(
                "FROM_CM",
                None,
                Some(EnvVarSource {
                    config_map_key_ref: Some(ConfigMapKeySelector {
                        name: "cm".into(),
                        key: "k2".into(),
                        optional: None,
                    }),
                    ..Default::default()
                }),
            ),
            env_var(
                "PW",
                None,
                Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: "sec".into(),
                        key: "pw".into(),
                        optional: None,
                    }),
                    ..Default::default()
                }),
            ),
            env_var(
                "SKIPPED",
                None,
                Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: "sec".into(),
                        key: "nope".into(),
                        optional: Some(true),
                    }),
                    ..Default::default()
                }),
            ),
            env_var("CM_k1", Some("overridden"), None),
        ]);
        let c = pod.spec.as_ref().unwrap().containers[0].clone();
        let env = container_env(&pod, &c, &node, &sources).unwrap();
        let got: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            got,
            vec![
                ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
                ("CM_k1", "overridden"),
                ("CM_k2", "v2"),
                ("GREETING", "hi v1 $(NOPE)"),
                ("NAME", "p"),
                ("NS", "ns"),
                ("UID", "u-1"),
                ("TIER", "web"),
                ("NODE", "node-a"),
                ("SA", "sa"),
                ("POD_IP", "10.244.0.7"),
                ("HOST_IP", "192.168.1.5"),
                ("CPU_REQ_M", "250"),
                ("CPU_REQ", "1"),
                ("CPU_LIM", "2"),
                ("MEM_LIM_MI", "64"),
                ("FROM_CM", "v2"),
                ("PW", "hunter2"),
            ]
        );
    }

    #[test]
    fn errors() {
        let (pod, node, sources) = fixture();
        let with = |e: EnvVar| {
            let mut c = pod.spec.as_ref().unwrap().containers[0].clone();
            c.env = Some(vec![e]);
            container_env(&pod, &c, &node, &sources)
        };
        let cm = |name: &str, key: &str| {
            Some(EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    name: name.into(),
                    key: key.into(),
                    optional: None,
                }),
                ..Default::default()
            })
        };
        assert_eq!(
            with(env_var("X", None, cm("nope", "k"))),
            Err(EnvError::ConfigMapNotFound("nope".into()))
        );
        assert!(matches!(
            with(env_var("X", None, cm("cm", "nope"))),
            Err(EnvError::ConfigMapKeyNotFound { .. })
        ));
        assert!(matches!(
            with(env_var("X", None, field("spec.bogus"))),
            Err(EnvError::FieldPath(_))
        ));
        assert!(matches!(
            with(env_var("X", None, res("limits.bogus", None))),
            Err(EnvError::Resource(_))
        ));
        let mut c = pod.spec.as_ref().unwrap().containers[0].clone();
        c.env_from = Some(vec![EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: "gone".into(),
                optional: None,
            }),
            ..Default::default()
        }]);
        assert_eq!(
            container_env(&pod, &c, &node, &sources),
            Err(EnvError::SecretNotFound("gone".into()))
        );
    }

    #[test]
    fn command_expansion() {
        let c = Container {
            name: "c".into(),
            command: Some(vec!["sh".into(), "-c".into(), "echo $(MSG) $$HOME".into()]),
            args: Some(vec!["$(MSG)".into(), "$(UNSET)".into()]),
            ..Default::default()
        };
        let (cmd, args) = expand_command_and_args(&c, &[("MSG".into(), "hello".into())]);
        assert_eq!(cmd, ["sh", "-c", "echo hello $HOME"]);
        assert_eq!(args, ["hello", "$(UNSET)"]);
    }
}
