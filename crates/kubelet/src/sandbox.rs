//! Pod → CRI `PodSandboxConfig` (upstream `kuberuntime_sandbox.go`
//! `generatePodSandboxConfig`, `network/dns/dns.go`, `util/hostname`). Pure functions.

use std::collections::HashMap;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Pod, PodSpec};

use crate::config::{HostDns, NodeConfig};
use crate::qos::{QosClass, qos_of};

/// Labels the kubelet puts on sandboxes and containers (upstream `pkg/kubelet/types`).
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

/// Upstream's limits on resolv.conf contents.
const MAX_DNS_SERVERS: usize = 3;
const MAX_DNS_SEARCHES: usize = 32;
const MAX_DNS_SEARCH_CHARS: usize = 2048;

pub(crate) fn spec(pod: &Pod) -> &PodSpec {
    static EMPTY: std::sync::OnceLock<PodSpec> = std::sync::OnceLock::new();
    pod.spec
        .as_ref()
        .unwrap_or_else(|| EMPTY.get_or_init(PodSpec::default))
}

pub(crate) fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

pub(crate) fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

pub(crate) fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// `/var/log/pods/<namespace>_<name>_<uid>`.
pub fn pod_log_dir(node: &NodeConfig, pod: &Pod) -> std::path::PathBuf {
    node.pod_logs_dir
        .join(format!("{}_{}_{}", namespace(pod), name(pod), uid(pod)))
}

/// The pod cgroup under the cgroupfs driver: `<root>/pod<uid>` for Guaranteed pods,
/// `<root>/burstable/pod<uid>` and `<root>/besteffort/pod<uid>` for the others (upstream's
/// QoS hierarchy).
pub fn pod_cgroup_parent(node: &NodeConfig, qos: QosClass, pod_uid: &str) -> String {
    let root = node.cgroup_root.trim_end_matches('/');
    match qos {
        QosClass::Guaranteed => format!("{root}/pod{pod_uid}"),
        QosClass::Burstable => format!("{root}/burstable/pod{pod_uid}"),
        QosClass::BestEffort => format!("{root}/besteffort/pod{pod_uid}"),
    }
}

/// The pod's hostname and, with a subdomain, its domain (`GeneratePodHostNameAndDomain`):
/// spec.hostname or the pod name, cut to 63 characters without trailing `-` or `.`.
pub fn pod_hostname_and_domain(pod: &Pod, cluster_domain: &str) -> (String, String) {
    let s = spec(pod);
    let mut hostname: String = s
        .hostname
        .as_deref()
        .filter(|h| !h.is_empty())
        .unwrap_or(name(pod))
        .chars()
        .take(63)
        .collect();
    while hostname.ends_with(['-', '.']) {
        hostname.pop();
    }
    let domain = match s.subdomain.as_deref() {
        Some(sub) if !sub.is_empty() => {
            format!("{sub}.{}.svc.{cluster_domain}", namespace(pod))
        }
        _ => String::new(),
    };
    (hostname, domain)
}

/// Where a container sees the hosts file the kubelet manages for its pod.
pub const ETC_HOSTS_PATH: &str = "/etc/hosts";

/// The pod's hosts file (upstream `ensureHostsFile`). A pod on the node's network gets
/// the node's own file (`node_hosts`) under a header; any other pod gets localhost and
/// its IPs under its hostname (and its FQDN when it has a subdomain), so the pod
/// resolves its own name without DNS. The pod's `hostAliases` come last.
pub fn hosts_file(pod: &Pod, pod_ips: &[String], cluster_domain: &str, node_hosts: &str) -> String {
    use std::fmt::Write as _;
    let s = spec(pod);
    let mut out = String::new();
    if s.host_network == Some(true) {
        out.push_str("# Kubernetes-managed hosts file (host network).\n");
        out.push_str(node_hosts);
    } else {
        out.push_str(concat!(
            "# Kubernetes-managed hosts file.\n",
            "127.0.0.1\tlocalhost\n",
            "::1\tlocalhost ip6-localhost ip6-loopback\n",
            "fe00::0\tip6-localnet\n",
            "fe00::0\tip6-mcastprefix\n",
            "fe00::1\tip6-allnodes\n",
            "fe00::2\tip6-allrouters\n",
        ));
        let (hostname, domain) = pod_hostname_and_domain(pod, cluster_domain);
        for ip in pod_ips {
            let _ = if domain.is_empty() {
                writeln!(out, "{ip}\t{hostname}")
            } else {
                writeln!(out, "{ip}\t{hostname}.{domain}\t{hostname}")
            };
        }
    }
    if let Some(aliases) = s.host_aliases.as_ref().filter(|a| !a.is_empty()) {
        out.push_str("\n# Entries added by HostAliases.\n");
        for alias in aliases {
            let names = alias.hostnames.as_deref().unwrap_or_default().join("\t");
            let _ = writeln!(out, "{}\t{names}", alias.ip);
        }
    }
    out
}

#[derive(Debug, PartialEq, Eq)]
enum DnsType {
    Cluster,
    Host,
    None,
}

fn omit_duplicates(v: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    v.into_iter().filter(|s| seen.insert(s.clone())).collect()
}

/// Options are `name` or `name:value`; the pod's override the node's by name.
fn merge_dns_options(existing: Vec<String>, pod: &[(String, Option<String>)]) -> Vec<String> {
    let mut order: Vec<String> = vec![];
    let mut values: HashMap<String, Option<String>> = HashMap::new();
    for o in existing {
        let (n, v) = match o.split_once(':') {
            Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
            None => (o, None),
        };
        if !values.contains_key(&n) {
            order.push(n.clone());
        }
        values.insert(n, v);
    }
    for (n, v) in pod {
        if !values.contains_key(n) {
            order.push(n.clone());
        }
        values.insert(n.clone(), v.clone());
    }
    order
        .into_iter()
        .map(|n| match &values[&n] {
            Some(v) => format!("{n}:{v}"),
            None => n,
        })
        .collect()
}

/// The sandbox's resolv.conf contents (`GetPodDNS`).
pub fn pod_dns_config(node: &NodeConfig, pod: &Pod) -> cri::DnsConfig {
    let s = spec(pod);
    let host_network = s.host_network.unwrap_or(false);
    let mut ty = match s.dns_policy.as_deref() {
        Some("None") => DnsType::None,
        Some("ClusterFirstWithHostNet") => DnsType::Cluster,
        Some("Default") => DnsType::Host,
        // ClusterFirst (the default)
        _ if host_network => DnsType::Host,
        _ => DnsType::Cluster,
    };
    if ty == DnsType::Cluster && node.cluster_dns.is_empty() {
        ty = DnsType::Host;
    }
    let host = node.host_dns.clone().unwrap_or_default();
    let mut cfg = match ty {
        DnsType::None => cri::DnsConfig::default(),
        DnsType::Cluster => {
            let d = &node.cluster_domain;
            let mut searches = host.searches.clone();
            if !d.is_empty() {
                let mut cluster = vec![
                    format!("{}.svc.{d}", namespace(pod)),
                    format!("svc.{d}"),
                    d.clone(),
                ];
                cluster.extend(searches);
                searches = omit_duplicates(cluster);
            }
            cri::DnsConfig {
                servers: node.cluster_dns.clone(),
                searches,
                options: vec!["ndots:5".into()],
            }
        }
        DnsType::Host => match &node.host_dns {
            Some(HostDns {
                servers,
                searches,
                options,
            }) => cri::DnsConfig {
                servers: servers.clone(),
                searches: searches.clone(),
                options: options.clone(),
            },
            None => cri::DnsConfig {
                servers: vec!["127.0.0.1".into()],
                searches: vec![".".into()],
                options: vec![],
            },
        },
    };
    if let Some(pc) = &s.dns_config {
        let mut servers = std::mem::take(&mut cfg.servers);
        servers.extend(pc.nameservers.iter().flatten().cloned());
        cfg.servers = omit_duplicates(servers);
        let mut searches = std::mem::take(&mut cfg.searches);
        searches.extend(pc.searches.iter().flatten().cloned());
        cfg.searches = omit_duplicates(searches);
        let opts: Vec<(String, Option<String>)> = pc
            .options
            .iter()
            .flatten()
            .filter_map(|o| o.name.clone().map(|n| (n, o.value.clone())))
            .collect();
        cfg.options = merge_dns_options(std::mem::take(&mut cfg.options), &opts);
    }
    cfg.servers.truncate(MAX_DNS_SERVERS);
    cfg.searches.truncate(MAX_DNS_SEARCHES);
    let mut total = 0;
    cfg.searches.retain(|sr| {
        total += sr.len() + 1;
        total <= MAX_DNS_SEARCH_CHARS
    });
    cfg
}

/// Host port mappings of the pod's containers (ports without a hostPort are not mapped).
pub fn port_mappings(pod: &Pod) -> Vec<cri::PortMapping> {
    let mut out = vec![];
    for c in &spec(pod).containers {
        for p in c.ports.iter().flatten() {
            let host_port = p.host_port.unwrap_or(0);
            if host_port <= 0 {
                continue;
            }
            let protocol = match p.protocol.as_deref() {
                Some("UDP") => cri::Protocol::Udp,
                Some("SCTP") => cri::Protocol::Sctp,
                _ => cri::Protocol::Tcp,
            };
            out.push(cri::PortMapping {
                protocol: protocol as i32,
                container_port: p.container_port,
                host_port,
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    out
}

/// Kubernetes labels of the sandbox: the pod's own plus name, namespace and uid.
pub fn sandbox_labels(pod: &Pod) -> HashMap<String, String> {
    let mut l: HashMap<String, String> = pod
        .metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    l.insert(POD_NAME_LABEL.into(), name(pod).into());
    l.insert(POD_NAMESPACE_LABEL.into(), namespace(pod).into());
    l.insert(POD_UID_LABEL.into(), uid(pod).into());
    l
}

fn has_privileged_container(pod: &Pod) -> bool {
    let s = spec(pod);
    s.containers
        .iter()
        .chain(s.init_containers.iter().flatten())
        .any(|c| c.security_context.as_ref().and_then(|sc| sc.privileged) == Some(true))
}

/// Namespace modes for the pod (`namespacesForPod`).
pub fn namespace_options(pod: &Pod) -> cri::NamespaceOption {
    let s = spec(pod);
    let node_or = |host: Option<bool>, other: cri::NamespaceMode| {
        if host == Some(true) {
            cri::NamespaceMode::Node
        } else {
            other
        }
    };
    let pid_default = if s.share_process_namespace == Some(true) {
        cri::NamespaceMode::Pod
    } else {
        cri::NamespaceMode::Container
    };
    cri::NamespaceOption {
        network: node_or(s.host_network, cri::NamespaceMode::Pod) as i32,
        pid: node_or(s.host_pid, pid_default) as i32,
        ipc: node_or(s.host_ipc, cri::NamespaceMode::Pod) as i32,
        ..Default::default()
    }
}

/// The seccomp profile from a `SeccompProfile`; unconfined unless asked for (upstream's
/// default with the SeccompDefault gate off).
pub(crate) fn seccomp_profile(
    p: Option<&k8s_openapi::api::core::v1::SeccompProfile>,
) -> cri::SecurityProfile {
    match p.map(|p| p.type_.as_str()) {
        Some("RuntimeDefault") => cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        },
        Some("Localhost") => cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::Localhost as i32,
            localhost_ref: p
                .and_then(|p| p.localhost_profile.clone())
                .unwrap_or_default(),
        },
        _ => cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::Unconfined as i32,
            localhost_ref: String::new(),
        },
    }
}

/// The whole sandbox config for `attempt` (0 for the pod's first sandbox).
pub fn sandbox_config(node: &NodeConfig, pod: &Pod, attempt: u32) -> cri::PodSandboxConfig {
    let s = spec(pod);
    let host_network = s.host_network.unwrap_or(false);
    let (hostname, _) = pod_hostname_and_domain(pod, &node.cluster_domain);
    let psc = s.security_context.as_ref();
    let mut supplemental: Vec<i64> = psc
        .and_then(|sc| sc.supplemental_groups.clone())
        .unwrap_or_default();
    if let Some(fs_group) = psc.and_then(|sc| sc.fs_group) {
        supplemental.push(fs_group);
    }
    let sysctls = psc
        .and_then(|sc| sc.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (s.name.clone(), s.value.clone()))
        .collect();
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name(pod).into(),
            uid: uid(pod).into(),
            namespace: namespace(pod).into(),
            attempt,
        }),
        // A host-network sandbox has no UTS namespace of its own: it must not set one.
        hostname: if host_network {
            String::new()
        } else {
            hostname
        },
        log_directory: pod_log_dir(node, pod).to_string_lossy().into_owned(),
        dns_config: Some(pod_dns_config(node, pod)),
        port_mappings: port_mappings(pod),
        labels: sandbox_labels(pod),
        annotations: pod
            .metadata
            .annotations
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: pod_cgroup_parent(node, qos_of(pod), uid(pod)),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                run_as_user: psc
                    .and_then(|sc| sc.run_as_user)
                    .map(|value| cri::Int64Value { value }),
                run_as_group: psc
                    .and_then(|sc| sc.run_as_group)
                    .map(|value| cri::Int64Value { value }),
                supplemental_groups: supplemental,
                privileged: has_privileged_container(pod),
                seccomp: Some(seccomp_profile(
                    psc.and_then(|sc| sc.seccomp_profile.as_ref()),
                )),
                ..Default::default()
            }),
            sysctls,
            ..Default::default()
        }),
        windows: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, HostAlias, PodDNSConfig, PodDNSConfigOption, PodSecurityContext,
        SecurityContext,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(f: impl FnOnce(&mut PodSpec)) -> Pod {
        let mut spec = PodSpec {
            containers: vec![Container {
                name: "app".into(),
                image: Some("nginx".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        f(&mut spec);
        Pod {
            metadata: ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("prod".into()),
                uid: Some("1234-abcd".into()),
                labels: Some([("app".to_string(), "web".to_string())].into()),
                annotations: Some([("note".to_string(), "x".to_string())].into()),
                ..Default::default()
            },
            spec: Some(spec),
            status: None,
        }
    }

    fn node() -> NodeConfig {
        let mut n = NodeConfig::new("node-a");
        n.host_dns = Some(HostDns {
            servers: vec!["192.0.2.53".into()],
            searches: vec!["corp.example".into()],
            options: vec!["ndots:2".into(), "edns0".into()],
        });
        n
    }

    #[test]
    fn dns_per_policy() {
        let cluster_search = [
            "prod.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
            "corp.example",
        ];
        type Case<'a> = (&'a str, Pod, Vec<&'a str>, Vec<&'a str>, Vec<&'a str>);
        let cases: Vec<Case<'_>> = vec![
            (
                "default policy is ClusterFirst",
                pod(|_| {}),
                vec!["10.96.0.10"],
                cluster_search.to_vec(),
                vec!["ndots:5"],
            ),
            (
                "ClusterFirst on host network falls back to the host",
                pod(|s| s.host_network = Some(true)),
                vec!["192.0.2.53"],
                vec!["corp.example"],
                vec!["ndots:2", "edns0"],
            ),
            (
                "ClusterFirstWithHostNet",
                pod(|s| {
                    s.host_network = Some(true);
                    s.dns_policy = Some("ClusterFirstWithHostNet".into());
                }),
                vec!["10.96.0.10"],
                cluster_search.to_vec(),
                vec!["ndots:5"],
            ),
            (
                "Default",
                pod(|s| s.dns_policy = Some("Default".into())),
                vec!["192.0.2.53"],
                vec!["corp.example"],
                vec!["ndots:2", "edns0"],
            ),
            (
                "None with a pod dnsConfig",
                pod(|s| {
                    s.dns_policy = Some("None".into());
                    s.dns_config = Some(PodDNSConfig {
                        nameservers: Some(vec!["10.96.0.53".into()]),
                        searches: Some(vec!["a.example".into()]),
                        options: Some(vec![PodDNSConfigOption {
                            name: Some("timeout".into()),
                            value: Some("1".into()),
                        }]),
                    });
                }),
                vec!["10.96.0.53"],
                vec!["a.example"],
                vec!["timeout:1"],
            ),
            (
                "ClusterFirst merged with dnsConfig",
                pod(|s| {
                    s.dns_config = Some(PodDNSConfig {
                        nameservers: Some(vec!["10.96.0.10".into(), "10.96.0.11".into()]),
                        searches: Some(vec!["svc.cluster.local".into(), "extra.example".into()]),
                        options: Some(vec![
                            PodDNSConfigOption {
                                name: Some("ndots".into()),
                                value: Some("2".into()),
                            },
                            PodDNSConfigOption {
                                name: Some("single-request".into()),
                                value: None,
                            },
                        ]),
                    });
                }),
                vec!["10.96.0.10", "10.96.0.11"],
                vec![
                    "prod.svc.cluster.local",
                    "svc.cluster.local",
                    "cluster.local",
                    "corp.example",
                    "extra.example",
                ],
                vec!["ndots:2", "single-request"],
            ),
        ];
        for (name, p, servers, searches, options) in cases {
            let d = pod_dns_config(&node(), &p);
            assert_eq!(d.servers, servers, "{name}: servers");
            assert_eq!(d.searches, searches, "{name}: searches");
            assert_eq!(d.options, options, "{name}: options");
        }
    }

    #[test]
    fn dns_without_cluster_dns_or_resolv_conf() {
        let mut n = NodeConfig::new("n");
        n.cluster_dns.clear();
        let d = pod_dns_config(&n, &pod(|_| {}));
        assert_eq!(
            (d.servers, d.searches),
            (vec!["127.0.0.1".to_string()], vec![".".to_string()])
        );
    }

    #[test]
    fn dns_limits() {
        let p = pod(|s| {
            s.dns_policy = Some("None".into());
            s.dns_config = Some(PodDNSConfig {
                nameservers: Some((1..=5).map(|i| format!("10.96.0.{i}")).collect()),
                searches: Some((0..40).map(|i| format!("s{i}.example")).collect()),
                options: None,
            });
        });
        let d = pod_dns_config(&node(), &p);
        assert_eq!(d.servers.len(), 3);
        assert_eq!(d.searches.len(), 32);
    }

    #[test]
    fn hostname_and_domain() {
        let (h, d) = pod_hostname_and_domain(&pod(|_| {}), "cluster.local");
        assert_eq!((h.as_str(), d.as_str()), ("web-0", ""));
        let p = pod(|s| {
            s.hostname = Some(format!("{}-.", "a".repeat(61)));
            s.subdomain = Some("db".into());
        });
        let (h, d) = pod_hostname_and_domain(&p, "cluster.local");
        assert_eq!(h, "a".repeat(61));
        assert_eq!(d, "db.prod.svc.cluster.local");
    }

    #[test]
    fn hosts_file_names_the_pod_and_its_aliases() {
        let ips = ["10.244.0.7".to_string(), "fd00::7".to_string()];
        let plain = hosts_file(&pod(|_| {}), &ips[..1], "cluster.local", "ignored");
        assert_eq!(
            plain,
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n\
             ::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n\
             fe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
             10.244.0.7\tweb-0\n"
        );
        let p = pod(|s| {
            s.subdomain = Some("db".into());
            s.host_aliases = Some(vec![
                HostAlias {
                    ip: "10.1.2.3".into(),
                    hostnames: Some(vec!["foo.local".into(), "bar.local".into()]),
                },
                HostAlias {
                    ip: "127.0.0.1".into(),
                    hostnames: None,
                },
            ]);
        });
        let full = hosts_file(&p, &ips, "cluster.local", "ignored");
        assert!(
            full.ends_with(
                "fe00::2\tip6-allrouters\n\
                 10.244.0.7\tweb-0.db.prod.svc.cluster.local\tweb-0\n\
                 fd00::7\tweb-0.db.prod.svc.cluster.local\tweb-0\n\
                 \n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n127.0.0.1\t\n"
            ),
            "{full}"
        );
    }

    #[test]
    fn a_host_network_pod_gets_the_nodes_hosts_file_and_its_aliases() {
        let p = pod(|s| {
            s.host_network = Some(true);
            s.host_aliases = Some(vec![HostAlias {
                ip: "10.1.2.3".into(),
                hostnames: Some(vec!["foo.local".into()]),
            }]);
        });
        let node = "127.0.0.1 localhost\n192.168.1.5 vm\n";
        assert_eq!(
            hosts_file(&p, &["192.168.1.5".into()], "cluster.local", node),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n\
             192.168.1.5 vm\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\n"
        );
    }

    #[test]
    fn full_sandbox_config() {
        let p = pod(|s| {
            s.containers[0].ports = Some(vec![
                ContainerPort {
                    container_port: 80,
                    host_port: Some(8080),
                    ..Default::default()
                },
                ContainerPort {
                    container_port: 53,
                    host_port: Some(5353),
                    protocol: Some("UDP".into()),
                    host_ip: Some("127.0.0.1".into()),
                    ..Default::default()
                },
                ContainerPort {
                    container_port: 9090,
                    ..Default::default()
                },
            ]);
            s.security_context = Some(PodSecurityContext {
                run_as_user: Some(1000),
                fs_group: Some(2000),
                supplemental_groups: Some(vec![3000]),
                ..Default::default()
            });
        });
        let c = sandbox_config(&node(), &p, 2);
        let m = c.metadata.as_ref().unwrap();
        assert_eq!(
            (
                m.name.as_str(),
                m.namespace.as_str(),
                m.uid.as_str(),
                m.attempt
            ),
            ("web-0", "prod", "1234-abcd", 2)
        );
        assert_eq!(c.hostname, "web-0");
        assert_eq!(c.log_directory, "/var/log/pods/prod_web-0_1234-abcd");
        assert_eq!(c.labels["app"], "web");
        assert_eq!(c.labels[POD_UID_LABEL], "1234-abcd");
        assert_eq!(c.annotations["note"], "x");
        assert_eq!(c.port_mappings.len(), 2);
        assert_eq!(
            (
                c.port_mappings[0].container_port,
                c.port_mappings[0].host_port
            ),
            (80, 8080)
        );
        assert_eq!(c.port_mappings[1].protocol, cri::Protocol::Udp as i32);
        assert_eq!(c.port_mappings[1].host_ip, "127.0.0.1");
        let linux = c.linux.unwrap();
        assert_eq!(linux.cgroup_parent, "/kubepods/besteffort/pod1234-abcd");
        let sc = linux.security_context.unwrap();
        assert_eq!(sc.run_as_user, Some(cri::Int64Value { value: 1000 }));
        assert_eq!(sc.supplemental_groups, [3000, 2000]);
        assert!(!sc.privileged);
        let ns = sc.namespace_options.unwrap();
        assert_eq!(
            (ns.network, ns.pid, ns.ipc),
            (
                cri::NamespaceMode::Pod as i32,
                cri::NamespaceMode::Container as i32,
                cri::NamespaceMode::Pod as i32
            )
        );
        assert_eq!(
            sc.seccomp.unwrap().profile_type,
            cri::security_profile::ProfileType::Unconfined as i32
        );
    }

    #[test]
    fn host_network_and_privileged() {
        let p = pod(|s| {
            s.host_network = Some(true);
            s.host_pid = Some(true);
            s.containers[0].security_context = Some(SecurityContext {
                privileged: Some(true),
                ..Default::default()
            });
        });
        let c = sandbox_config(&node(), &p, 0);
        assert_eq!(c.hostname, "", "host-network sandboxes set no hostname");
        let sc = c.linux.unwrap().security_context.unwrap();
        assert!(sc.privileged);
        let ns = sc.namespace_options.unwrap();
        assert_eq!(
            (ns.network, ns.pid, ns.ipc),
            (
                cri::NamespaceMode::Node as i32,
                cri::NamespaceMode::Node as i32,
                cri::NamespaceMode::Pod as i32
            )
        );
        let shared = pod(|s| s.share_process_namespace = Some(true));
        assert_eq!(
            namespace_options(&shared).pid,
            cri::NamespaceMode::Pod as i32
        );
    }

    #[test]
    fn cgroup_parents() {
        let n = NodeConfig::new("n");
        assert_eq!(
            pod_cgroup_parent(&n, QosClass::Guaranteed, "u"),
            "/kubepods/podu"
        );
        assert_eq!(
            pod_cgroup_parent(&n, QosClass::Burstable, "u"),
            "/kubepods/burstable/podu"
        );
        assert_eq!(
            pod_cgroup_parent(&n, QosClass::BestEffort, "u"),
            "/kubepods/besteffort/podu"
        );
    }
}
