//! The node-level settings the runtime manager needs (upstream kubelet flags and
//! `KubeletConfiguration` fields of the same names).

use std::path::PathBuf;

/// DNS settings read from the node's resolv.conf (`--resolv-conf`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostDns {
    pub servers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

impl HostDns {
    /// Parses resolv.conf contents (`nameserver`, `search`/`domain`, `options`; comments
    /// start with `#` or `;`).
    pub fn parse(contents: &str) -> HostDns {
        let mut dns = HostDns::default();
        for line in contents.lines() {
            let line = line.split(['#', ';']).next().unwrap_or("");
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => dns.servers.extend(words.next().map(str::to_owned)),
                Some("search") | Some("domain") => {
                    dns.searches = words.map(|w| w.trim_end_matches('.').to_owned()).collect()
                }
                Some("options") => dns.options.extend(words.map(str::to_owned)),
                _ => {}
            }
        }
        dns
    }
}

/// Node settings used to turn pods into CRI configs.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// `--hostname-override` / the node's name (status.hostIP lookups, fieldRef spec.nodeName).
    pub node_name: String,
    /// `--cluster-dns`: nameservers for ClusterFirst pods (addresses in the Service CIDR).
    pub cluster_dns: Vec<String>,
    /// `--cluster-domain`, e.g. `cluster.local`.
    pub cluster_domain: String,
    /// `--resolv-conf`, parsed; `None` when the flag is empty (pods with host DNS then get
    /// 127.0.0.1 and the search path `.`, as upstream).
    pub host_dns: Option<HostDns>,
    /// Where pod log directories live (`/var/log/pods`).
    pub pod_logs_dir: PathBuf,
    /// The cgroupfs root of the pod hierarchy (`--cgroup-root` + `kubepods`).
    pub cgroup_root: String,
    /// The cgroup v1 mount root (`/sys/fs/cgroup`).
    pub cgroup_mount: PathBuf,
    /// Node memory capacity in bytes (Burstable oom_score_adj, resourceFieldRef defaults).
    pub memory_capacity: i64,
    /// Node CPU capacity in millicores (resourceFieldRef defaults).
    pub cpu_capacity_milli: i64,
    /// The node's IPs (status.hostIP(s)), first is primary.
    pub node_ips: Vec<String>,
    /// CRI runtime handler for sandboxes ("" = runtime default; runtimeClassName overrides).
    pub runtime_handler: String,
}

impl NodeConfig {
    /// Defaults for a node named `node_name` (cluster DNS 10.96.0.10, domain cluster.local).
    pub fn new(node_name: impl Into<String>) -> Self {
        NodeConfig {
            node_name: node_name.into(),
            cluster_dns: vec!["10.96.0.10".into()],
            cluster_domain: "cluster.local".into(),
            host_dns: None,
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            cgroup_root: "/kubepods".into(),
            cgroup_mount: PathBuf::from("/sys/fs/cgroup"),
            memory_capacity: 4 << 30,
            cpu_capacity_milli: 2000,
            node_ips: vec![],
            runtime_handler: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_resolv_conf() {
        let dns = HostDns::parse(
            "# comment\nnameserver 192.0.2.53\nnameserver 192.0.2.54 ; trailing\n\
             search example.com. corp.example\noptions ndots:2 edns0\nsortlist 1.2.3.4\n",
        );
        assert_eq!(dns.servers, ["192.0.2.53", "192.0.2.54"]);
        assert_eq!(dns.searches, ["example.com", "corp.example"]);
        assert_eq!(dns.options, ["ndots:2", "edns0"]);
        let dns = HostDns::parse("domain a.example\nsearch b.example\n");
        assert_eq!(
            dns.searches,
            ["b.example"],
            "the last of search/domain wins"
        );
        assert_eq!(HostDns::parse(""), HostDns::default());
    }
}
