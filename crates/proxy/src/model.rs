//! What kube-proxy reads out of Services and EndpointSlices (upstream's
//! `BaseServicePortInfo`, `endpointSliceCache` and `CategorizeEndpoints`), as pure
//! functions of the API objects. No IO.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::net::{Cidr, IpFamily};

/// The label marking a Service another proxy implements; kube-proxy skips it.
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
/// The label tying an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// `spec.sessionAffinityConfig.clientIP.timeoutSeconds` when unset (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT_SECONDS: i32 = 10800;

/// One port of one Service, as upstream's `ServicePortName` + `BaseServicePortInfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePortInfo {
    pub namespace: String,
    pub name: String,
    pub port_name: String,
    /// `tcp`, `udp` or `sctp` (nftables spelling).
    pub protocol: String,
    pub cluster_ip: IpAddr,
    pub port: u16,
    pub node_port: u16,
    pub external_ips: Vec<IpAddr>,
    pub load_balancer_vips: Vec<IpAddr>,
    /// `spec.loadBalancerSourceRanges` of this family (network addresses); empty when
    /// unset or when one of them allows every source (upstream's `IsZeroCIDR`).
    pub load_balancer_source_ranges: Vec<Cidr>,
    /// `Some(timeout_seconds)` for `sessionAffinity: ClientIP`.
    pub affinity_timeout: Option<u32>,
    pub internal_policy_local: bool,
    pub external_policy_local: bool,
}

impl ServicePortInfo {
    /// `namespace/name[:port]`, upstream's `ServicePortName.String()`.
    pub fn name_string(&self) -> String {
        if self.port_name.is_empty() {
            format!("{}/{}", self.namespace, self.name)
        } else {
            format!("{}/{}:{}", self.namespace, self.name, self.port_name)
        }
    }

    pub fn externally_accessible(&self) -> bool {
        self.node_port != 0 || !self.external_ips.is_empty() || !self.load_balancer_vips.is_empty()
    }

    /// Upstream's `UsesClusterEndpoints`: internal traffic policy Cluster, or any
    /// external traffic at all (even with `externalTrafficPolicy: Local`, pod and host
    /// traffic to an external address is short-circuited to the Cluster endpoints).
    pub fn uses_cluster_endpoints(&self) -> bool {
        !self.internal_policy_local || self.externally_accessible()
    }

    pub fn uses_local_endpoints(&self) -> bool {
        self.internal_policy_local || (self.externally_accessible() && self.external_policy_local)
    }
}

/// One endpoint of one Service port, from an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EndpointInfo {
    pub ip: IpAddr,
    pub port: u16,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// On this node (`nodeName` equals the proxy's hostname).
    pub local: bool,
}

impl EndpointInfo {
    /// `ip:port` (`[ip]:port` for IPv6), upstream's `Endpoint.String()`.
    pub fn addr_port(&self) -> String {
        match self.ip {
            IpAddr::V4(ip) => format!("{ip}:{}", self.port),
            IpAddr::V6(ip) => format!("[{ip}]:{}", self.port),
        }
    }
}

/// Whether kube-proxy programs nothing at all for this Service (upstream's
/// `ShouldSkipService`: headless, ExternalName, or claimed by another proxy).
pub fn should_skip_service(svc: &Service) -> bool {
    let labels = svc.metadata.labels.as_ref();
    if labels.is_some_and(|l| l.contains_key(SERVICE_PROXY_NAME_LABEL)) {
        return true;
    }
    let Some(spec) = &svc.spec else { return true };
    if spec.type_.as_deref() == Some("ExternalName") {
        return true;
    }
    matches!(spec.cluster_ip.as_deref(), None | Some("") | Some("None"))
}

fn parse_ips(list: Option<&Vec<String>>, family: IpFamily) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = list
        .into_iter()
        .flatten()
        .filter_map(|s| s.parse::<IpAddr>().ok())
        .filter(|ip| IpFamily::of(ip) == family)
        .collect();
    out.dedup();
    out
}

/// `spec.loadBalancerSourceRanges` in `family`, as upstream's `newBaseServiceInfo`
/// reads them: surrounding whitespace ignored (validation lets it through), ranges that
/// do not parse left out, host bits cleared; a zero-length prefix (`0.0.0.0/0`) means
/// any source, the same as none.
pub fn source_ranges(ranges: Option<&Vec<String>>, family: IpFamily) -> Vec<Cidr> {
    let cidrs: Vec<Cidr> = ranges
        .into_iter()
        .flatten()
        .filter_map(|r| r.trim().parse::<Cidr>().ok())
        .filter(|c| c.family() == family)
        .map(|c| c.network())
        .collect();
    if cidrs.iter().any(Cidr::is_match_all) {
        return Vec::new();
    }
    cidrs
}

/// The Service's ports in `family` (empty when it has no cluster IP of that family or
/// must be skipped).
pub fn service_ports(svc: &Service, family: IpFamily) -> Vec<ServicePortInfo> {
    if should_skip_service(svc) {
        return Vec::new();
    }
    let Some(spec) = &svc.spec else {
        return Vec::new();
    };
    let mut cluster_ips = spec.cluster_ips.clone().unwrap_or_default();
    if cluster_ips.is_empty() {
        cluster_ips.extend(spec.cluster_ip.clone());
    }
    let Some(cluster_ip) = parse_ips(Some(&cluster_ips), family).into_iter().next() else {
        return Vec::new();
    };
    let external_ips = parse_ips(spec.external_ips.as_ref(), family);
    let lb_ips: Vec<String> = if spec.type_.as_deref() == Some("LoadBalancer") {
        // Only VIP-like load balancers (upstream's IsVIPMode: `ipMode` unset or `VIP`;
        // a `Proxy` load balancer sends traffic to the node, not to its IP).
        svc.status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .into_iter()
            .flatten()
            .filter(|i| i.ip_mode.as_deref().is_none_or(|m| m == "VIP"))
            .filter_map(|i| i.ip.clone())
            .collect()
    } else {
        Vec::new()
    };
    let load_balancer_vips = parse_ips(Some(&lb_ips), family);
    let load_balancer_source_ranges =
        source_ranges(spec.load_balancer_source_ranges.as_ref(), family);
    let affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .unwrap_or(DEFAULT_AFFINITY_TIMEOUT_SECONDS)
            .max(1) as u32
    });
    // upstream's apiservice.ExternallyAccessible: only these types can have external
    // traffic, so only they honour externalTrafficPolicy.
    let type_ = spec.type_.as_deref().unwrap_or("ClusterIP");
    let externally_accessible = matches!(type_, "NodePort" | "LoadBalancer")
        || (type_ == "ClusterIP" && spec.external_ips.as_ref().is_some_and(|e| !e.is_empty()));
    let external_policy_local =
        externally_accessible && spec.external_traffic_policy.as_deref() == Some("Local");
    let internal_policy_local = spec.internal_traffic_policy.as_deref() == Some("Local");
    let namespace = svc.metadata.namespace.clone().unwrap_or_default();
    let name = svc.metadata.name.clone().unwrap_or_default();
    spec.ports
        .iter()
        .flatten()
        .filter_map(|p| {
            let port = u16::try_from(p.port).ok()?;
            Some(ServicePortInfo {
                namespace: namespace.clone(),
                name: name.clone(),
                port_name: p.name.clone().unwrap_or_default(),
                protocol: p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase(),
                cluster_ip,
                port,
                node_port: p.node_port.and_then(|n| u16::try_from(n).ok()).unwrap_or(0),
                external_ips: external_ips.clone(),
                load_balancer_vips: load_balancer_vips.clone(),
                load_balancer_source_ranges: load_balancer_source_ranges.clone(),
                affinity_timeout,
                internal_policy_local,
                external_policy_local,
            })
        })
        .collect()
}

/// The endpoints of one Service port from the Service's EndpointSlices in `family`, as
/// upstream's endpointSliceCache: matched by port name and protocol, the first address
/// of each endpoint, conditions defaulted (ready unset = ready, serving unset = ready,
/// terminating unset = false), deduplicated by `ip:port` (later slices, in name order,
/// win), sorted.
pub fn endpoints_for(
    port: &ServicePortInfo,
    slices: &[&EndpointSlice],
    family: IpFamily,
    hostname: &str,
) -> Vec<EndpointInfo> {
    let mut sorted: Vec<&&EndpointSlice> = slices.iter().collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut by_addr: BTreeMap<(IpAddr, u16), EndpointInfo> = BTreeMap::new();
    for slice in sorted {
        if slice.address_type != family.k8s() {
            continue;
        }
        let Some(slice_port) = slice.ports.iter().flatten().find(|p| {
            p.name.as_deref().unwrap_or("") == port.port_name
                && p.protocol
                    .as_deref()
                    .unwrap_or("TCP")
                    .eq_ignore_ascii_case(&port.protocol)
        }) else {
            continue;
        };
        let Some(number) = slice_port.port.and_then(|n| u16::try_from(n).ok()) else {
            continue;
        };
        for ep in &slice.endpoints {
            let Some(ip) = ep.addresses.first().and_then(|a| a.parse::<IpAddr>().ok()) else {
                continue;
            };
            if IpFamily::of(&ip) != family {
                continue;
            }
            let cond = ep.conditions.as_ref();
            let ready = cond.and_then(|c| c.ready).unwrap_or(true);
            let serving = cond.and_then(|c| c.serving).unwrap_or(ready);
            let terminating = cond.and_then(|c| c.terminating).unwrap_or(false);
            let local = ep.node_name.as_deref() == Some(hostname);
            by_addr.insert(
                (ip, number),
                EndpointInfo {
                    ip,
                    port: number,
                    ready,
                    serving,
                    terminating,
                    local,
                },
            );
        }
    }
    by_addr.into_values().collect()
}

/// The endpoints each traffic policy uses (upstream's `CategorizeEndpoints`, without
/// topology hints): Cluster uses the ready endpoints, falling back to serving and
/// terminating ones when none is ready; Local uses this node's ready endpoints, else
/// this node's serving and terminating ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Categorized {
    pub cluster: Vec<EndpointInfo>,
    pub local: Vec<EndpointInfo>,
    /// Every endpoint some rule of this node may DNAT to (cluster ∪ local).
    pub all_reachable: Vec<EndpointInfo>,
    /// Any usable endpoint anywhere in the cluster.
    pub has_any: bool,
}

/// Which of a Service port's chains exist and where its traffic goes, as upstream's
/// proxiers decide it (the same in both modes; each names the chains its own way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainPlan {
    pub uses_cluster_chain: bool,
    pub uses_local_chain: bool,
    /// ClusterIP traffic goes to the local chain (internalTrafficPolicy Local), else to
    /// the cluster chain.
    pub internal_local: bool,
    /// ClusterIP traffic has an endpoint to go to.
    pub has_internal: bool,
    /// External traffic goes to the local chain (externalTrafficPolicy Local).
    pub external_local: bool,
    /// External traffic has an endpoint to go to.
    pub has_external: bool,
    /// The external chain exists: even without externally usable endpoints it
    /// short-circuits pod and host traffic.
    pub uses_external_chain: bool,
}

impl ChainPlan {
    pub fn of(svc: &ServicePortInfo, cat: &Categorized) -> ChainPlan {
        ChainPlan {
            uses_cluster_chain: !cat.cluster.is_empty() && svc.uses_cluster_endpoints(),
            uses_local_chain: !cat.local.is_empty() && svc.uses_local_endpoints(),
            internal_local: svc.internal_policy_local,
            has_internal: cat.has_any && (!svc.internal_policy_local || !cat.local.is_empty()),
            external_local: svc.external_policy_local,
            has_external: cat.has_any && (!svc.external_policy_local || !cat.local.is_empty()),
            uses_external_chain: cat.has_any && svc.externally_accessible(),
        }
    }

    /// The chains ClusterIP traffic and external traffic go to, in that order: the
    /// local chain for a `Local` traffic policy, else the cluster chain.
    pub fn policy_chains<'a, T: ?Sized>(&self, cluster: &'a T, local: &'a T) -> (&'a T, &'a T) {
        let pick = |is_local: bool| if is_local { local } else { cluster };
        (pick(self.internal_local), pick(self.external_local))
    }
}

pub fn categorize(endpoints: &[EndpointInfo], svc: &ServicePortInfo) -> Categorized {
    let mut out = Categorized::default();
    let serving_terminating = |e: &&EndpointInfo| e.serving && e.terminating;
    if svc.uses_cluster_endpoints() {
        out.cluster = endpoints.iter().filter(|e| e.ready).cloned().collect();
        if out.cluster.is_empty() {
            out.cluster = endpoints
                .iter()
                .filter(serving_terminating)
                .cloned()
                .collect();
        }
        out.has_any = !out.cluster.is_empty();
    }
    if !svc.uses_local_endpoints() {
        out.all_reachable = out.cluster.clone();
        return out;
    }
    let mut local_ready = false;
    let mut local_serving_terminating = false;
    for e in endpoints {
        if e.ready {
            out.has_any = true;
            local_ready |= e.local;
        } else if e.serving && e.terminating {
            out.has_any = true;
            local_serving_terminating |= e.local;
        }
    }
    let mut used_terminating = false;
    if local_ready {
        out.local = endpoints
            .iter()
            .filter(|e| e.local && e.ready)
            .cloned()
            .collect();
    } else if local_serving_terminating {
        used_terminating = true;
        out.local = endpoints
            .iter()
            .filter(|e| e.local && e.serving && e.terminating)
            .cloned()
            .collect();
    }
    if !svc.uses_cluster_endpoints() {
        out.all_reachable = out.local.clone();
        return out;
    }
    if !used_terminating {
        // Local holds only ready endpoints, all of which Cluster has too.
        out.all_reachable = out.cluster.clone();
        return out;
    }
    let mut all: BTreeMap<(IpAddr, u16), EndpointInfo> = BTreeMap::new();
    for e in out.cluster.iter().chain(out.local.iter()) {
        all.insert((e.ip, e.port), e.clone());
    }
    out.all_reachable = all.into_values().collect();
    out
}
