//! The desired nftables ruleset as a pure function of (Services, EndpointSlices, Node,
//! config), in the shape of upstream's nftables proxier (pkg/proxy/nftables): one table
//! `ip kube-proxy` (or `ip6`), base chains hooked at dstnat/srcnat, the `service-ips` and
//! `service-nodeports` verdict maps dispatching to per-service-port chains, numgen
//! load-balancing over per-endpoint chains, `no-endpoint-*` maps rejecting traffic to
//! Services without endpoints, the `firewall-ips` map sending load-balancer traffic
//! of Services with `loadBalancerSourceRanges` to per-port `firewall-*` chains that
//! drop other sources, and the mark-and-masquerade pair. No IO.
//!
//! The result is a [`Ruleset`]: the base part (identical for every Service) and one
//! [`ServiceRules`] per Service, so a change to one Service can be applied by rewriting
//! only its chains and map elements (see [`crate::render`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::model::{
    self, Categorized, ChainPlan, EndpointInfo, SERVICE_NAME_LABEL, ServicePortInfo, categorize,
};
use crate::net::{Cidr, IpFamily};

/// The table every object lives in (in family `ip` and/or `ip6`).
pub const TABLE: &str = "kube-proxy";

pub const SERVICES_CHAIN: &str = "services";
pub const SERVICE_IPS_MAP: &str = "service-ips";
pub const SERVICE_NODEPORTS_MAP: &str = "service-nodeports";
pub const NODEPORT_IPS_SET: &str = "nodeport-ips";
pub const ENDPOINTS_CHECK_CHAIN: &str = "endpoints-check";
pub const NO_ENDPOINT_SERVICES_MAP: &str = "no-endpoint-services";
pub const NO_ENDPOINT_NODEPORTS_MAP: &str = "no-endpoint-nodeports";
pub const REJECT_CHAIN: &str = "reject-chain";
pub const FIREWALL_CHECK_CHAIN: &str = "firewall-check";
pub const FIREWALL_IPS_MAP: &str = "firewall-ips";
pub const MARK_MASQ_CHAIN: &str = "mark-for-masquerade";
pub const MASQUERADING_CHAIN: &str = "masquerading";

/// Which node addresses accept NodePort traffic (upstream `--nodeport-addresses`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum NodePortAddresses {
    /// The node's own addresses (InternalIP/ExternalIP of the Node object); upstream's
    /// default `primary`.
    #[default]
    Primary,
    /// Every local address (`0.0.0.0/0`, `::/0`): `fib daddr type local`.
    MatchAll,
    /// Host addresses inside these ranges.
    Cidrs(Vec<Cidr>),
}

/// Everything the rules depend on besides the API objects.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyConfig {
    pub family: IpFamily,
    /// This node's name: endpoints with this `nodeName` are local.
    pub hostname: String,
    /// Pod ranges (`--cluster-cidr`): traffic to a ClusterIP from outside them is
    /// masqueraded. Empty: no off-cluster masquerade (unless `masquerade_all`).
    pub cluster_cidrs: Vec<Cidr>,
    /// Masquerade all ClusterIP traffic (`--masquerade-all`).
    pub masquerade_all: bool,
    /// The fwmark bit that marks packets for masquerade (`--nftables-masquerade-bit`, 14).
    pub masquerade_bit: u8,
    pub node_port_addresses: NodePortAddresses,
    /// Serve NodePorts on loopback node addresses too (like iptables mode's
    /// `--iptables-localhost-nodeports`; the host needs `route_localnet=1`).
    pub localhost_nodeports: bool,
    /// iptables mode only: `net.netfilter.nf_conntrack_tcp_be_liberal` is set, so (as
    /// upstream) no rule drops conntrack-INVALID forwarded packets.
    pub conntrack_tcp_liberal: bool,
    /// This node's IP of this family (upstream's `nodeIP`): when a Service's
    /// `loadBalancerSourceRanges` include it, its load-balancer IPs are allowed sources
    /// too. Set from the Node object by the proxiers ([`primary_node_ip`]).
    pub node_ip: Option<IpAddr>,
}

impl ProxyConfig {
    pub fn new(family: IpFamily, hostname: impl Into<String>) -> Self {
        ProxyConfig {
            family,
            hostname: hostname.into(),
            cluster_cidrs: Vec::new(),
            masquerade_all: false,
            masquerade_bit: 14,
            node_port_addresses: NodePortAddresses::Primary,
            localhost_nodeports: true,
            conntrack_tcp_liberal: false,
            node_ip: None,
        }
    }

    fn masquerade_mark(&self) -> String {
        format!("{:#010x}", 1u32 << self.masquerade_bit.min(31))
    }

    pub(crate) fn local_cidrs(&self) -> Vec<&Cidr> {
        self.cluster_cidrs
            .iter()
            .filter(|c| c.family() == self.family)
            .collect()
    }
}

/// One element of a verdict map (or set, with an empty value).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Element {
    pub map: &'static str,
    pub key: String,
    pub value: String,
    pub comment: Option<String>,
}

/// The rules of one Service (all its ports) in one family.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServiceRules {
    /// Chain name -> rules, in order.
    pub chains: BTreeMap<String, Vec<String>>,
    /// Affinity set name -> timeout in seconds.
    pub affinity_sets: BTreeMap<String, u32>,
    pub elements: BTreeSet<Element>,
}

impl ServiceRules {
    fn chain(&mut self, name: &str) -> &mut Vec<String> {
        self.chains.entry(name.to_string()).or_default()
    }
}

/// The part of the ruleset that is the same for every Service.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BaseRules {
    /// `add ...` commands (table, chains, sets, maps, rules) in order, without the
    /// `add ` verb and family/table prefix handled by the renderer.
    pub commands: Vec<String>,
    /// Base chain names (hooked), then regular chain names.
    pub chains: Vec<String>,
    /// Base maps and sets (name -> kind `map`/`set`).
    pub maps: Vec<(String, &'static str)>,
    /// Elements of `nodeport-ips`.
    pub nodeport_ips: BTreeSet<IpAddr>,
}

/// The whole desired state of one family's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruleset {
    pub family: IpFamily,
    pub base: BaseRules,
    /// `namespace/name` -> that Service's rules (Services without rules are absent).
    pub services: BTreeMap<String, ServiceRules>,
}

/// The addresses that accept NodePort traffic, and whether loopback ones are among
/// the node's addresses.
pub(crate) fn nodeport_ips(
    config: &ProxyConfig,
    node: Option<&Node>,
    host_addresses: &[IpAddr],
) -> Vec<IpAddr> {
    let family = config.family;
    let mut ips: Vec<IpAddr> = match &config.node_port_addresses {
        NodePortAddresses::MatchAll => Vec::new(),
        NodePortAddresses::Cidrs(cidrs) => host_addresses
            .iter()
            .filter(|ip| cidrs.iter().any(|c| c.contains(ip)))
            .copied()
            .collect(),
        NodePortAddresses::Primary => node
            .and_then(|n| n.status.as_ref())
            .and_then(|s| s.addresses.as_ref())
            .into_iter()
            .flatten()
            .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
            .filter_map(|a| a.address.parse::<IpAddr>().ok())
            .collect(),
    };
    ips.retain(|ip| IpFamily::of(ip) == family);
    ips.sort();
    ips.dedup();
    ips
}

/// The node's IP of `family`, as upstream's `GetNodeHostIPs` picks it from the Node
/// object: the first InternalIP of the family, else the first ExternalIP.
pub fn primary_node_ip(node: Option<&Node>, family: IpFamily) -> Option<IpAddr> {
    let addresses = node?.status.as_ref()?.addresses.as_ref()?;
    ["InternalIP", "ExternalIP"].iter().find_map(|kind| {
        addresses
            .iter()
            .filter(|a| a.type_ == *kind)
            .filter_map(|a| a.address.parse::<IpAddr>().ok())
            .find(|ip| IpFamily::of(ip) == family)
    })
}

/// The base chains, maps and static rules (upstream's `setupNFTables`).
pub fn base_rules(
    config: &ProxyConfig,
    node: Option<&Node>,
    host_addresses: &[IpAddr],
) -> BaseRules {
    let ip = config.family.nft();
    let addr = config.family.addr_type();
    let lo = config.family.loopback();
    let mark = config.masquerade_mark();
    let match_all = config.node_port_addresses == NodePortAddresses::MatchAll;
    let all_ips = nodeport_ips(config, node, host_addresses);
    let loopback_nodeports = config.localhost_nodeports && all_ips.iter().any(|i| i.is_loopback());
    let nodeport_ips: BTreeSet<IpAddr> = all_ips.into_iter().filter(|i| !i.is_loopback()).collect();

    let mut b = BaseRules {
        nodeport_ips,
        ..Default::default()
    };
    let mut cmd = |s: String| b.commands.push(s);
    cmd("table { comment \"rules for kube-proxy\" ; }".into());
    // Filters see pre-DNAT destinations, so they run just before DNAT (dstnat - 10).
    let base = [
        ("filter-prerouting", "filter", "prerouting", -110),
        ("filter-input", "filter", "input", -110),
        ("filter-forward", "filter", "forward", -110),
        ("filter-output", "filter", "output", -110),
        ("nat-prerouting", "nat", "prerouting", -100),
        ("nat-output", "nat", "output", -100),
        ("nat-postrouting", "nat", "postrouting", 100),
    ];
    let mut chains = Vec::new();
    for (name, ty, hook, prio) in base {
        cmd(format!(
            "chain {name} {{ type {ty} hook {hook} priority {prio} ; }}"
        ));
        chains.push(name.to_string());
    }
    for name in [
        ENDPOINTS_CHECK_CHAIN,
        FIREWALL_CHECK_CHAIN,
        SERVICES_CHAIN,
        MASQUERADING_CHAIN,
        MARK_MASQ_CHAIN,
        REJECT_CHAIN,
    ] {
        cmd(format!("chain {name}"));
        chains.push(name.to_string());
    }
    let mut maps = vec![];
    if !match_all {
        cmd(format!(
            "set {NODEPORT_IPS_SET} {{ type {addr} ; comment \"IPs that accept NodePort traffic\" ; }}"
        ));
        maps.push((NODEPORT_IPS_SET.to_string(), "set"));
    }
    for (name, key, comment) in [
        (
            NO_ENDPOINT_SERVICES_MAP,
            format!("{addr} . inet_proto . inet_service"),
            "vmap to drop or reject packets to services with no endpoints",
        ),
        (
            NO_ENDPOINT_NODEPORTS_MAP,
            "inet_proto . inet_service".to_string(),
            "vmap to drop or reject packets to service nodeports with no endpoints",
        ),
        (
            FIREWALL_IPS_MAP,
            format!("{addr} . inet_proto . inet_service"),
            "destinations that are subject to LoadBalancerSourceRanges",
        ),
        (
            SERVICE_IPS_MAP,
            format!("{addr} . inet_proto . inet_service"),
            "ClusterIP, ExternalIP and LoadBalancer IP traffic",
        ),
        (
            SERVICE_NODEPORTS_MAP,
            "inet_proto . inet_service".to_string(),
            "NodePort traffic",
        ),
    ] {
        cmd(format!(
            "map {name} {{ type {key} : verdict ; comment \"{comment}\" ; }}"
        ));
        maps.push((name.to_string(), "map"));
    }
    let nodeport_match = if match_all {
        format!("fib daddr type local {ip} daddr != {lo}")
    } else {
        format!("{ip} daddr @{NODEPORT_IPS_SET}")
    };
    // loadBalancerSourceRanges are checked before DNAT, on new connections coming in
    // (prerouting) and made here (output), ahead of the endpoints check: upstream
    // 1.33 runs firewall-check in its pre-DNAT chains (priority -110) and the
    // endpoints check after DNAT, so a dropped source is dropped, not rejected.
    for hook in ["filter-prerouting", "filter-output"] {
        cmd(format!(
            "rule {hook} ct state new jump {FIREWALL_CHECK_CHAIN}"
        ));
    }
    // reject is only valid in input/forward/output, hence three jumps.
    for hook in ["filter-input", "filter-forward", "filter-output"] {
        cmd(format!(
            "rule {hook} ct state new jump {ENDPOINTS_CHECK_CHAIN}"
        ));
    }
    cmd(format!("rule nat-output jump {SERVICES_CHAIN}"));
    cmd(format!("rule nat-prerouting jump {SERVICES_CHAIN}"));
    cmd(format!("rule nat-postrouting jump {MASQUERADING_CHAIN}"));
    cmd(format!("rule {MARK_MASQ_CHAIN} mark set mark or {mark}"));
    cmd(format!(
        "rule {MASQUERADING_CHAIN} mark and {mark} == 0 return"
    ));
    cmd(format!(
        "rule {MASQUERADING_CHAIN} mark set mark xor {mark}"
    ));
    cmd(format!("rule {MASQUERADING_CHAIN} masquerade fully-random"));
    cmd(format!("rule {REJECT_CHAIN} reject"));
    cmd(format!(
        "rule {ENDPOINTS_CHECK_CHAIN} {ip} daddr . meta l4proto . th dport vmap @{NO_ENDPOINT_SERVICES_MAP}"
    ));
    cmd(format!(
        "rule {ENDPOINTS_CHECK_CHAIN} {nodeport_match} meta l4proto . th dport vmap @{NO_ENDPOINT_NODEPORTS_MAP}"
    ));
    cmd(format!(
        "rule {FIREWALL_CHECK_CHAIN} {ip} daddr . meta l4proto . th dport vmap @{FIREWALL_IPS_MAP}"
    ));
    cmd(format!(
        "rule {SERVICES_CHAIN} {ip} daddr . meta l4proto . th dport vmap @{SERVICE_IPS_MAP}"
    ));
    cmd(format!(
        "rule {SERVICES_CHAIN} {nodeport_match} meta l4proto . th dport vmap @{SERVICE_NODEPORTS_MAP}"
    ));
    if loopback_nodeports {
        // Deviation from upstream's nftables mode (which has no localhost NodePorts):
        // NodePorts on the node's loopback address, for host-local traffic only (the
        // output hook), as iptables mode's localhost NodePorts. Packets from other hosts
        // to 127/8 that were not DNATed are dropped (CVE-2020-8558).
        cmd(format!(
            "rule filter-output ct state new {ip} daddr {lo} meta l4proto . th dport vmap @{NO_ENDPOINT_NODEPORTS_MAP}"
        ));
        cmd(format!(
            "rule nat-output {ip} daddr {lo} meta l4proto . th dport vmap @{SERVICE_NODEPORTS_MAP}"
        ));
        cmd(format!(
            "rule filter-input {ip} daddr {lo} {ip} saddr != {lo} ct state != {{ established, related }} ct status & dnat == 0 drop"
        ));
    }
    b.chains = chains;
    b.maps = maps;
    b
}

/// 8 characters of base32(sha256(name)) + "-" + name, truncated as upstream's
/// `hashAndTruncate`, so names are unique and stay under nftables' 256-byte limit.
fn hash_and_truncate(name: &str) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let digest = ring::digest::digest(&ring::digest::SHA256, name.as_bytes());
    let bytes = digest.as_ref();
    // The first 8 base32 characters are exactly the first 40 bits.
    let mut bits: u64 = 0;
    for b in &bytes[..5] {
        bits = (bits << 8) | u64::from(*b);
    }
    let mut out = String::with_capacity(9 + name.len());
    for i in (0..8).rev() {
        out.push(ALPHABET[((bits >> (i * 5)) & 31) as usize] as char);
    }
    out.push('-');
    out.push_str(name);
    const MAX: usize = 256 - 16;
    if out.len() > MAX {
        out.truncate(MAX - 3);
        out.push_str("...");
    }
    out
}

fn port_chain_base(svc: &ServicePortInfo) -> String {
    hash_and_truncate(&format!(
        "{}/{}/{}/{}",
        svc.namespace, svc.name, svc.protocol, svc.port_name
    ))
}

fn endpoint_chain_base(svc: &ServicePortInfo, ep: &EndpointInfo) -> String {
    let ip = ep.ip.to_string().replace(':', ".");
    hash_and_truncate(&format!(
        "{}/{}/{}/{}__{}/{}",
        svc.namespace, svc.name, svc.protocol, svc.port_name, ip, ep.port
    ))
}

/// The rules of one Service in `config.family` (None when it gets none: skipped,
/// headless, or no cluster IP of this family).
pub fn service_rules(
    svc: &Service,
    slices: &[&EndpointSlice],
    config: &ProxyConfig,
) -> Option<ServiceRules> {
    let ports = model::service_ports(svc, config.family);
    if ports.is_empty() {
        return None;
    }
    let mut out = ServiceRules::default();
    for port in &ports {
        let endpoints = model::endpoints_for(port, slices, config.family, &config.hostname);
        let cat = categorize(&endpoints, port);
        port_rules(&mut out, port, &cat, config);
    }
    Some(out)
}

fn element(map: &'static str, key: String, value: String, comment: Option<&str>) -> Element {
    Element {
        map,
        key,
        value,
        comment: comment.map(str::to_string),
    }
}

/// One service port, as upstream's syncProxyRules loop body.
fn port_rules(
    out: &mut ServiceRules,
    svc: &ServicePortInfo,
    cat: &Categorized,
    config: &ProxyConfig,
) {
    let ip = config.family.nft();
    let proto = svc.protocol.as_str();
    let name_string = svc.name_string();
    let comment = Some(name_string.as_str());
    let base = port_chain_base(svc);
    let cluster_chain = format!("service-{base}");
    let local_chain = format!("local-{base}");
    let external_chain = format!("external-{base}");
    let firewall_chain = format!("firewall-{base}");
    let ep_chain = |ep: &EndpointInfo| format!("endpoint-{}", endpoint_chain_base(svc, ep));
    let affinity_set = |ep: &EndpointInfo| format!("affinity-{}", endpoint_chain_base(svc, ep));

    let plan = ChainPlan::of(svc, cat);
    let (internal_chain, external_policy_chain) =
        plan.policy_chains(cluster_chain.as_str(), local_chain.as_str());
    let ChainPlan {
        uses_cluster_chain,
        uses_local_chain,
        has_internal,
        has_external,
        uses_external_chain,
        ..
    } = plan;

    let (internal_verdict, external_verdict) = if !cat.has_any {
        (
            format!("goto {REJECT_CHAIN}"),
            format!("goto {REJECT_CHAIN}"),
        )
    } else {
        ("drop".to_string(), "drop".to_string())
    };
    let key = |addr: &IpAddr, port: u16| format!("{addr} . {proto} . {port}");

    // ClusterIP
    if has_internal {
        out.elements.insert(element(
            SERVICE_IPS_MAP,
            key(&svc.cluster_ip, svc.port),
            format!("goto {internal_chain}"),
            None,
        ));
    } else {
        out.elements.insert(element(
            NO_ENDPOINT_SERVICES_MAP,
            key(&svc.cluster_ip, svc.port),
            internal_verdict.clone(),
            comment,
        ));
    }
    // loadBalancerSourceRanges: load-balancer traffic goes through the firewall chain
    // first, with or without endpoints (upstream's usesFWChain in nftables mode).
    let uses_firewall_chain =
        !svc.load_balancer_vips.is_empty() && !svc.load_balancer_source_ranges.is_empty();
    // externalIPs and load-balancer VIPs
    for vip in svc.external_ips.iter().chain(&svc.load_balancer_vips) {
        if cat.has_any {
            out.elements.insert(element(
                SERVICE_IPS_MAP,
                key(vip, svc.port),
                format!("goto {external_chain}"),
                None,
            ));
        }
        if !has_external {
            out.elements.insert(element(
                NO_ENDPOINT_SERVICES_MAP,
                key(vip, svc.port),
                external_verdict.clone(),
                comment,
            ));
        }
    }
    if uses_firewall_chain {
        for vip in &svc.load_balancer_vips {
            out.elements.insert(element(
                FIREWALL_IPS_MAP,
                key(vip, svc.port),
                format!("goto {firewall_chain}"),
                None,
            ));
        }
    }
    // NodePort (not subject to loadBalancerSourceRanges, as upstream)
    if svc.node_port != 0 {
        let np_key = format!("{proto} . {}", svc.node_port);
        if cat.has_any {
            out.elements.insert(element(
                SERVICE_NODEPORTS_MAP,
                np_key.clone(),
                format!("goto {external_chain}"),
                None,
            ));
        }
        if !has_external {
            out.elements.insert(element(
                NO_ENDPOINT_NODEPORTS_MAP,
                np_key,
                external_verdict.clone(),
                comment,
            ));
        }
    }

    // Chains are created in upstream's order of ensureChain calls; BTreeMap keeps them
    // sorted by name, which only matters for the dump's readability.
    for ep in &cat.all_reachable {
        out.chain(&ep_chain(ep));
    }
    if uses_cluster_chain {
        out.chain(&cluster_chain);
    }
    if uses_local_chain {
        out.chain(&local_chain);
    }
    if uses_external_chain {
        out.chain(&external_chain);
    }
    if uses_firewall_chain {
        out.chain(&firewall_chain).push(firewall_rule(svc, config));
    }

    // Off-cluster traffic to the ClusterIP is masqueraded (it may leave the node).
    if has_internal {
        let dest = format!("{ip} daddr {} {proto} dport {}", svc.cluster_ip, svc.port);
        if config.masquerade_all {
            out.chain(internal_chain)
                .push(format!("{dest} jump {MARK_MASQ_CHAIN}"));
        } else {
            let locals = config.local_cidrs();
            if !locals.is_empty() {
                out.chain(internal_chain).push(format!(
                    "{dest} {ip} saddr != {} jump {MARK_MASQ_CHAIN}",
                    nft_set(locals.iter().map(|c| c.to_string()))
                ));
            }
        }
    }

    if uses_external_chain {
        let chain = out.chain(&external_chain);
        if !svc.external_policy_local {
            chain.push(format!("jump {MARK_MASQ_CHAIN}"));
        } else {
            let locals = config.local_cidrs();
            if !locals.is_empty() {
                chain.push(format!(
                    "{ip} saddr {} goto {cluster_chain} comment \"short-circuit pod traffic\"",
                    nft_set(locals.iter().map(|c| c.to_string()))
                ));
            }
            chain.push(format!(
                "fib saddr type local jump {MARK_MASQ_CHAIN} comment \"masquerade local traffic\""
            ));
            chain.push(format!(
                "fib saddr type local goto {cluster_chain} comment \"short-circuit local traffic\""
            ));
        }
        if has_external {
            chain.push(format!("goto {external_policy_chain}"));
        }
    }

    if let Some(timeout) = svc.affinity_timeout {
        for ep in &cat.all_reachable {
            out.affinity_sets.insert(affinity_set(ep), timeout);
        }
    }
    if uses_cluster_chain {
        endpoint_dispatch(
            out,
            svc,
            &cluster_chain,
            &cat.cluster,
            config,
            &ep_chain,
            &affinity_set,
        );
    }
    if uses_local_chain {
        endpoint_dispatch(
            out,
            svc,
            &local_chain,
            &cat.local,
            config,
            &ep_chain,
            &affinity_set,
        );
    }
    for ep in &cat.all_reachable {
        let chain = out.chain(&ep_chain(ep));
        // Hairpin: a pod reaching itself through the Service must see the reply come
        // back from the Service, so its own traffic is masqueraded.
        chain.push(format!("{ip} saddr {} jump {MARK_MASQ_CHAIN}", ep.ip));
        if svc.affinity_timeout.is_some() {
            chain.push(format!("update @{} {{ {ip} saddr }}", affinity_set(ep)));
        }
        chain.push(format!("meta l4proto {proto} dnat to {}", ep.addr_port()));
    }
}

/// The one rule of a Service port's firewall chain: sources outside its
/// `loadBalancerSourceRanges` are dropped. When a range holds this node's IP, the
/// load-balancer IPs are allowed sources too: a VIP-like load balancer often makes its
/// IP local to the node, and the node's own connections to it then come from it.
fn firewall_rule(svc: &ServicePortInfo, config: &ProxyConfig) -> String {
    let ip = config.family.nft();
    let mut sources: Vec<String> = svc
        .load_balancer_source_ranges
        .iter()
        .map(ToString::to_string)
        .collect();
    let allow_from_node = config.node_ip.is_some_and(|node| {
        svc.load_balancer_source_ranges
            .iter()
            .any(|c| c.contains(&node))
    });
    if allow_from_node {
        sources.extend(svc.load_balancer_vips.iter().map(ToString::to_string));
    }
    format!("{ip} saddr != {{ {} }} drop", sources.join(", "))
}

/// A one-element value or an anonymous set.
fn nft_set(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    if items.len() == 1 {
        items.into_iter().next().unwrap_or_default()
    } else {
        format!("{{ {} }}", items.join(", "))
    }
}

/// Affinity lookups, then the numgen load-balancing rule (upstream's
/// `writeServiceToEndpointRules`).
fn endpoint_dispatch(
    out: &mut ServiceRules,
    svc: &ServicePortInfo,
    chain: &str,
    endpoints: &[EndpointInfo],
    config: &ProxyConfig,
    ep_chain: &dyn Fn(&EndpointInfo) -> String,
    affinity_set: &dyn Fn(&EndpointInfo) -> String,
) {
    let ip = config.family.nft();
    let rules = out.chain(chain);
    if svc.affinity_timeout.is_some() {
        for ep in endpoints {
            rules.push(format!(
                "{ip} saddr @{} goto {}",
                affinity_set(ep),
                ep_chain(ep)
            ));
        }
    }
    let vmap: Vec<String> = endpoints
        .iter()
        .enumerate()
        .map(|(i, ep)| format!("{i} : goto {}", ep_chain(ep)))
        .collect();
    rules.push(format!(
        "numgen random mod {} vmap {{ {} }}",
        endpoints.len(),
        vmap.join(", ")
    ));
}

/// Groups EndpointSlices by the `namespace/name` of the Service they belong to.
pub fn slices_by_service(slices: &[EndpointSlice]) -> BTreeMap<String, Vec<&EndpointSlice>> {
    let mut out: BTreeMap<String, Vec<&EndpointSlice>> = BTreeMap::new();
    for s in slices {
        if let Some(key) = service_key_of_slice(s) {
            out.entry(key).or_default().push(s);
        }
    }
    out
}

/// `namespace/service-name` of the Service an EndpointSlice belongs to.
pub fn service_key_of_slice(slice: &EndpointSlice) -> Option<String> {
    let svc = slice.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
    Some(format!(
        "{}/{}",
        slice.metadata.namespace.as_deref().unwrap_or_default(),
        svc
    ))
}

/// `namespace/name` of a Service.
pub fn service_key(svc: &Service) -> String {
    format!(
        "{}/{}",
        svc.metadata.namespace.as_deref().unwrap_or_default(),
        svc.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Each Service's rules by `namespace/name`, as `rules_of` makes them from the Service
/// and its EndpointSlices (either mode's); Services that get none are left out.
pub fn rules_by_service<R>(
    services: &[Service],
    slices: &[EndpointSlice],
    rules_of: impl Fn(&Service, &[&EndpointSlice]) -> Option<R>,
) -> BTreeMap<String, R> {
    let by_service = slices_by_service(slices);
    services
        .iter()
        .filter_map(|svc| {
            let key = service_key(svc);
            let slices = by_service.get(&key).map(Vec::as_slice).unwrap_or(&[]);
            rules_of(svc, slices).map(|rules| (key, rules))
        })
        .collect()
}

/// The whole desired ruleset: the pure function the proxier applies.
pub fn desired_ruleset(
    services: &[Service],
    slices: &[EndpointSlice],
    node: Option<&Node>,
    host_addresses: &[IpAddr],
    config: &ProxyConfig,
) -> Ruleset {
    Ruleset {
        family: config.family,
        base: base_rules(config, node, host_addresses),
        services: rules_by_service(services, slices, |svc, slices| {
            service_rules(svc, slices, config)
        }),
    }
}
