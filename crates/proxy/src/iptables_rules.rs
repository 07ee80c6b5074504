//! The desired iptables ruleset as a pure function of (Services, EndpointSlices, Node,
//! config), in the shape of upstream's iptables proxier (pkg/proxy/iptables, 1.33): the
//! `filter` and `nat` tables' top-level chains (KUBE-SERVICES, KUBE-EXTERNAL-SERVICES,
//! KUBE-NODEPORTS, KUBE-FORWARD, KUBE-PROXY-FIREWALL, KUBE-POSTROUTING, KUBE-MARK-MASQ,
//! and KUBE-FIREWALL for localhost NodePorts), one KUBE-SVC-/KUBE-SVL-/KUBE-EXT- chain
//! per Service port and policy and one KUBE-SEP- chain per endpoint (upstream's names,
//! hashes and comments), `-m statistic` load-balancing, `-m recent` ClientIP affinity,
//! REJECT (or DROP) of Services without (local) endpoints in the filter table,
//! `loadBalancerSourceRanges` (load-balancer traffic through a KUBE-FW- chain that
//! lets the allowed sources on to KUBE-EXT-; what falls through is not DNATed and
//! KUBE-PROXY-FIREWALL drops it in filter), and the mark-and-masquerade pair. The same inputs as the nftables rules ([`crate::model`]),
//! so both modes implement the same Services. Also here: the `iptables-restore` text of
//! a sync, the jumps from the built-in chains, and the `iptables-save` parsing the
//! cleanup and the stale-chain deletion need. No IO.
//!
//! Deviations from upstream: no nfacct counters, no "large cluster mode" (comments are
//! always written), and with several `--cluster-cidr` ranges of one family only the
//! first is the local-traffic range (upstream takes one per family).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::model::{self, Categorized, ChainPlan, EndpointInfo, ServicePortInfo, categorize};
use crate::net::IpFamily;
use crate::rules::{NodePortAddresses, ProxyConfig, nodeport_ips, rules_by_service};

pub const KUBE_SERVICES: &str = "KUBE-SERVICES";
pub const KUBE_EXTERNAL_SERVICES: &str = "KUBE-EXTERNAL-SERVICES";
pub const KUBE_NODEPORTS: &str = "KUBE-NODEPORTS";
pub const KUBE_POSTROUTING: &str = "KUBE-POSTROUTING";
pub const KUBE_MARK_MASQ: &str = "KUBE-MARK-MASQ";
pub const KUBE_FORWARD: &str = "KUBE-FORWARD";
pub const KUBE_PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
/// Upstream's copy of the kubelet's chain with the CVE-2020-8558 rule (localhost
/// NodePorts need `route_localnet`, which this rule makes safe).
pub const KUBE_FIREWALL: &str = "KUBE-FIREWALL";
/// In mangle, nat and filter; gone means someone flushed iptables: resync fully.
pub const KUBE_PROXY_CANARY: &str = "KUBE-PROXY-CANARY";

pub const SVC_PREFIX: &str = "KUBE-SVC-";
pub const SVL_PREFIX: &str = "KUBE-SVL-";
pub const EXT_PREFIX: &str = "KUBE-EXT-";
pub const FW_PREFIX: &str = "KUBE-FW-";
pub const SEP_PREFIX: &str = "KUBE-SEP-";

/// The comment of the NodePorts jump, last in nat KUBE-SERVICES.
pub const NODEPORTS_COMMENT: &str =
    "kubernetes service nodeports; NOTE: this must be the last rule in this chain";

/// Whether `name` is a per-Service chain (upstream's `isServiceChainName`).
pub fn is_service_chain(name: &str) -> bool {
    [SVC_PREFIX, SVL_PREFIX, EXT_PREFIX, FW_PREFIX, SEP_PREFIX]
        .iter()
        .any(|p| name.starts_with(p))
}

/// The first 16 characters of base32(sha256(`input`)): exactly the first 80 bits.
fn hash16(input: &str) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let digest = ring::digest::digest(&ring::digest::SHA256, input.as_bytes());
    let bits = digest.as_ref()[..10]
        .iter()
        .fold(0u128, |acc, b| (acc << 8) | u128::from(*b));
    (0..16)
        .map(|i| ALPHABET[((bits >> (75 - 5 * i)) & 31) as usize] as char)
        .collect()
}

/// Upstream's `portProtoHash`: of `ns/name:port` + `tcp`.
pub fn port_proto_hash(service_port_name: &str, protocol: &str) -> String {
    hash16(&format!("{service_port_name}{protocol}"))
}

/// `KUBE-SVC-<hash>` and friends for one Service port.
pub fn service_chain(prefix: &str, svc: &ServicePortInfo) -> String {
    format!(
        "{prefix}{}",
        port_proto_hash(&svc.name_string(), &svc.protocol)
    )
}

/// Upstream's `servicePortEndpointChainName`: of `ns/name:port` + `tcp` + `ip:port`.
pub fn endpoint_chain(svc: &ServicePortInfo, ep: &EndpointInfo) -> String {
    format!(
        "{SEP_PREFIX}{}",
        hash16(&format!(
            "{}{}{}",
            svc.name_string(),
            svc.protocol,
            ep.addr_port()
        ))
    )
}

/// A jump from a built-in chain to one of ours, kept in place with `iptables -C` /
/// `-I` (upstream's `iptablesJumpChains`, ensured on full syncs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JumpRule {
    pub table: &'static str,
    /// The built-in chain.
    pub chain: &'static str,
    pub target: &'static str,
    pub comment: &'static str,
    pub extra: &'static [&'static str],
}

const NEW: &[&str] = &["-m", "conntrack", "--ctstate", "NEW"];

/// Upstream's `iptablesJumpChains`, in its order.
pub const JUMP_RULES: [JumpRule; 12] = [
    jump(
        "filter",
        "INPUT",
        KUBE_EXTERNAL_SERVICES,
        "kubernetes externally-visible service portals",
        NEW,
    ),
    jump(
        "filter",
        "FORWARD",
        KUBE_EXTERNAL_SERVICES,
        "kubernetes externally-visible service portals",
        NEW,
    ),
    jump(
        "filter",
        "INPUT",
        KUBE_NODEPORTS,
        "kubernetes health check service ports",
        &[],
    ),
    jump(
        "filter",
        "FORWARD",
        KUBE_SERVICES,
        "kubernetes service portals",
        NEW,
    ),
    jump(
        "filter",
        "OUTPUT",
        KUBE_SERVICES,
        "kubernetes service portals",
        NEW,
    ),
    jump(
        "filter",
        "FORWARD",
        KUBE_FORWARD,
        "kubernetes forwarding rules",
        &[],
    ),
    jump(
        "filter",
        "INPUT",
        KUBE_PROXY_FIREWALL,
        "kubernetes load balancer firewall",
        NEW,
    ),
    jump(
        "filter",
        "OUTPUT",
        KUBE_PROXY_FIREWALL,
        "kubernetes load balancer firewall",
        NEW,
    ),
    jump(
        "filter",
        "FORWARD",
        KUBE_PROXY_FIREWALL,
        "kubernetes load balancer firewall",
        NEW,
    ),
    jump(
        "nat",
        "OUTPUT",
        KUBE_SERVICES,
        "kubernetes service portals",
        &[],
    ),
    jump(
        "nat",
        "PREROUTING",
        KUBE_SERVICES,
        "kubernetes service portals",
        &[],
    ),
    jump(
        "nat",
        "POSTROUTING",
        KUBE_POSTROUTING,
        "kubernetes postrouting rules",
        &[],
    ),
];

/// Upstream's `iptablesKubeletJumpChains` (KUBE-FIREWALL, uncommented).
pub const KUBE_FIREWALL_JUMPS: [JumpRule; 2] = [
    jump("filter", "INPUT", KUBE_FIREWALL, "", &[]),
    jump("filter", "OUTPUT", KUBE_FIREWALL, "", &[]),
];

const fn jump(
    table: &'static str,
    chain: &'static str,
    target: &'static str,
    comment: &'static str,
    extra: &'static [&'static str],
) -> JumpRule {
    JumpRule {
        table,
        chain,
        target,
        comment,
        extra,
    }
}

impl JumpRule {
    /// The rule's arguments after `-t <table> -C|-I <chain>`, one per argv entry.
    pub fn args(&self) -> Vec<String> {
        let mut out: Vec<String> = self.extra.iter().map(|s| s.to_string()).collect();
        if !self.comment.is_empty() {
            out.extend(["-m", "comment", "--comment", self.comment].map(String::from));
        }
        out.extend(["-j", self.target].map(String::from));
        out
    }
}

/// One per-Service chain of the nat table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub name: String,
    /// `-A <name> ...` lines.
    pub rules: Vec<String>,
}

/// The rules of one Service (all its ports) in one family.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IptablesServiceRules {
    /// Its `-A ...` lines in the filter table's top-level chains (REJECT/DROP without
    /// endpoints, health check node port ACCEPT).
    pub filter_rules: Vec<String>,
    /// Its `-A ...` lines in nat KUBE-SERVICES and KUBE-NODEPORTS.
    pub nat_rules: Vec<String>,
    /// Its own nat chains, in upstream's order of creation.
    pub chains: Vec<Chain>,
}

impl IptablesServiceRules {
    fn chain(&mut self, name: &str) -> &mut Vec<String> {
        let i = match self.chains.iter().position(|c| c.name == name) {
            Some(i) => i,
            None => {
                self.chains.push(Chain {
                    name: name.to_string(),
                    rules: Vec::new(),
                });
                self.chains.len() - 1
            }
        };
        &mut self.chains[i].rules
    }

    pub fn chain_names(&self) -> impl Iterator<Item = &str> {
        self.chains.iter().map(|c| c.name.as_str())
    }
}

/// The part of the ruleset that is the same for every Service.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IptablesBase {
    pub filter_chains: Vec<&'static str>,
    /// Filter rules written before the Services' (KUBE-FIREWALL).
    pub filter_head: Vec<String>,
    /// Filter rules written after them (KUBE-FORWARD).
    pub filter_tail: Vec<String>,
    pub nat_chains: Vec<&'static str>,
    /// KUBE-POSTROUTING and KUBE-MARK-MASQ.
    pub nat_head: Vec<String>,
    /// The NodePorts jump(s), last in nat KUBE-SERVICES.
    pub nat_tail: Vec<String>,
    /// The jumps from the built-in chains.
    pub jumps: Vec<JumpRule>,
}

/// The whole desired state of one family's iptables rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IptablesRuleset {
    pub family: IpFamily,
    pub base: IptablesBase,
    /// `namespace/name` -> that Service's rules (Services without rules are absent).
    pub services: BTreeMap<String, IptablesServiceRules>,
}

impl IptablesRuleset {
    /// Every per-Service nat chain.
    pub fn service_chains(&self) -> BTreeSet<&str> {
        self.services
            .values()
            .flat_map(IptablesServiceRules::chain_names)
            .collect()
    }

    /// The number of rules in (filter, nat) (upstream's
    /// `sync_proxy_rules_iptables_total`).
    pub fn rule_counts(&self) -> (usize, usize) {
        let b = &self.base;
        let filter = b.filter_head.len()
            + b.filter_tail.len()
            + self
                .services
                .values()
                .map(|s| s.filter_rules.len())
                .sum::<usize>();
        let nat = b.nat_head.len()
            + b.nat_tail.len()
            + self
                .services
                .values()
                .map(|s| s.nat_rules.len() + s.chains.iter().map(|c| c.rules.len()).sum::<usize>())
                .sum::<usize>();
        (filter, nat)
    }
}

/// `-m comment --comment "<text>"`, quoted when it has spaces (as upstream writes it).
fn comment(text: &str) -> String {
    if text.contains(' ') {
        format!("-m comment --comment \"{text}\"")
    } else {
        format!("-m comment --comment {text}")
    }
}

/// The masquerade mark `1 << bit` (`0x4000` for bit 14).
fn masquerade_mark(config: &ProxyConfig) -> String {
    format!("{:#x}", 1u32 << config.masquerade_bit.min(31))
}

/// The pod range of upstream's `LocalTrafficDetector` (`--cluster-cidr`): the first
/// one of this family.
fn local_cidr(config: &ProxyConfig) -> Option<String> {
    config.local_cidrs().first().map(|c| c.to_string())
}

/// Whether localhost NodePorts are served (upstream: IPv4 only, and only when the
/// NodePort addresses include 127.0.0.1).
fn localhost_nodeports(config: &ProxyConfig, nodeport_ips: &[IpAddr]) -> bool {
    config.localhost_nodeports
        && config.family == IpFamily::V4
        && (config.node_port_addresses == NodePortAddresses::MatchAll
            || nodeport_ips.iter().any(IpAddr::is_loopback))
}

/// The top-level chains and their Service-independent rules (upstream's start of
/// `syncProxyRules` and its end: the NodePorts jump and KUBE-FORWARD).
pub fn base_rules(
    config: &ProxyConfig,
    node: Option<&Node>,
    host_addresses: &[IpAddr],
) -> IptablesBase {
    let v6 = config.family == IpFamily::V6;
    let mark = masquerade_mark(config);
    let match_all = config.node_port_addresses == NodePortAddresses::MatchAll;
    let ips = if match_all {
        Vec::new()
    } else {
        nodeport_ips(config, node, host_addresses)
    };
    let localhost = localhost_nodeports(config, &ips);
    let mut b = IptablesBase {
        filter_chains: vec![
            KUBE_SERVICES,
            KUBE_EXTERNAL_SERVICES,
            KUBE_FORWARD,
            KUBE_NODEPORTS,
            KUBE_PROXY_FIREWALL,
        ],
        nat_chains: vec![
            KUBE_SERVICES,
            KUBE_NODEPORTS,
            KUBE_POSTROUTING,
            KUBE_MARK_MASQ,
        ],
        jumps: JUMP_RULES.to_vec(),
        ..Default::default()
    };
    b.nat_head = vec![
        format!("-A {KUBE_POSTROUTING} -m mark ! --mark {mark}/{mark} -j RETURN"),
        // Clear the mark so a packet that goes through the stack again is not
        // masqueraded twice.
        format!("-A {KUBE_POSTROUTING} -j MARK --xor-mark {mark}"),
        format!(
            "-A {KUBE_POSTROUTING} {} -j MASQUERADE --random-fully",
            comment("kubernetes service traffic requiring SNAT")
        ),
        format!("-A {KUBE_MARK_MASQ} -j MARK --or-mark {mark}"),
    ];
    if localhost {
        // route_localnet lets 127/8 be routed off lo; this drops what other hosts send
        // to 127/8 unless it was DNATed (CVE-2020-8558), as upstream and its kubelet.
        b.filter_chains.push(KUBE_FIREWALL);
        b.filter_head.push(format!(
            "-A {KUBE_FIREWALL} {} -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP",
            comment("block incoming localnet connections")
        ));
        b.jumps.extend(KUBE_FIREWALL_JUMPS);
    }
    let np_comment = comment(NODEPORTS_COMMENT);
    if match_all {
        let exclude = if v6 {
            " ! -d ::1/128"
        } else if !localhost {
            " ! -d 127.0.0.0/8"
        } else {
            ""
        };
        b.nat_tail.push(format!(
            "-A {KUBE_SERVICES} {np_comment} -m addrtype --dst-type LOCAL{exclude} -j {KUBE_NODEPORTS}"
        ));
    } else {
        for ip in ips {
            if ip.is_loopback() && (v6 || !localhost) {
                continue;
            }
            b.nat_tail.push(format!(
                "-A {KUBE_SERVICES} {np_comment} -d {ip} -j {KUBE_NODEPORTS}"
            ));
        }
    }
    if !config.conntrack_tcp_liberal {
        // Packets conntrack marks INVALID would otherwise reach the pod un-DNATed and
        // be answered with a reset (kubernetes#74839).
        b.filter_tail.push(format!(
            "-A {KUBE_FORWARD} -m conntrack --ctstate INVALID -j DROP"
        ));
    }
    b.filter_tail.push(format!(
        "-A {KUBE_FORWARD} {} -m mark --mark {mark}/{mark} -j ACCEPT",
        comment("kubernetes forwarding rules")
    ));
    b.filter_tail.push(format!(
        "-A {KUBE_FORWARD} {} -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        comment("kubernetes forwarding conntrack rule")
    ));
    b
}

/// The rules of one Service in `config.family` (None when it gets none: skipped,
/// headless, or no cluster IP of this family).
pub fn service_rules(
    svc: &Service,
    slices: &[&EndpointSlice],
    config: &ProxyConfig,
) -> Option<IptablesServiceRules> {
    let ports = model::service_ports(svc, config.family);
    if ports.is_empty() {
        return None;
    }
    // Upstream's NeedsHealthCheck: only LoadBalancers with externalTrafficPolicy Local.
    let health_check_node_port = svc
        .spec
        .as_ref()
        .filter(|s| {
            s.type_.as_deref() == Some("LoadBalancer")
                && s.external_traffic_policy.as_deref() == Some("Local")
        })
        .and_then(|s| s.health_check_node_port)
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(0);
    let mut out = IptablesServiceRules::default();
    for port in &ports {
        let endpoints = model::endpoints_for(port, slices, config.family, &config.hostname);
        let cat = categorize(&endpoints, port);
        port_rules(&mut out, port, &cat, config, health_check_node_port);
    }
    Some(out)
}

/// One Service port: upstream's `syncProxyRules` loop body.
fn port_rules(
    out: &mut IptablesServiceRules,
    svc: &ServicePortInfo,
    cat: &Categorized,
    config: &ProxyConfig,
    health_check_node_port: u16,
) {
    let proto = svc.protocol.as_str();
    let name = svc.name_string();
    let cluster_chain = service_chain(SVC_PREFIX, svc);
    let local_chain = service_chain(SVL_PREFIX, svc);
    let external_chain = service_chain(EXT_PREFIX, svc);
    let firewall_chain = service_chain(FW_PREFIX, svc);
    let local_cidr = local_cidr(config);

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
    // loadBalancerSourceRanges: load-balancer traffic goes through the firewall chain.
    let uses_firewall_chain = cat.has_any
        && !svc.load_balancer_vips.is_empty()
        && !svc.load_balancer_source_ranges.is_empty();
    let load_balancer_chain = if uses_firewall_chain {
        &firewall_chain
    } else {
        &external_chain
    };

    let (internal_target, internal_comment, external_target, external_comment) = if !cat.has_any {
        let c = format!("{name} has no endpoints");
        ("REJECT", c.clone(), "REJECT", c)
    } else {
        let c = format!("{name} has no local endpoints");
        ("DROP", c.clone(), "DROP", c)
    };
    let dst = |ip: &IpAddr, port: u16| format!("-m {proto} -p {proto} -d {ip} --dport {port}");

    // The ClusterIP.
    if has_internal {
        out.nat_rules.push(format!(
            "-A {KUBE_SERVICES} {} {} -j {internal_chain}",
            comment(&format!("{name} cluster IP")),
            dst(&svc.cluster_ip, svc.port)
        ));
    } else {
        out.filter_rules.push(format!(
            "-A {KUBE_SERVICES} {} {} -j {internal_target}",
            comment(&internal_comment),
            dst(&svc.cluster_ip, svc.port)
        ));
    }
    // externalIPs.
    for ip in &svc.external_ips {
        if cat.has_any {
            out.nat_rules.push(format!(
                "-A {KUBE_SERVICES} {} {} -j {external_chain}",
                comment(&format!("{name} external IP")),
                dst(ip, svc.port)
            ));
        }
        if !has_external {
            out.filter_rules.push(format!(
                "-A {KUBE_EXTERNAL_SERVICES} {} {} -j {external_target}",
                comment(&external_comment),
                dst(ip, svc.port)
            ));
        }
    }
    // Load-balancer ingress IPs.
    for ip in &svc.load_balancer_vips {
        if cat.has_any {
            out.nat_rules.push(format!(
                "-A {KUBE_SERVICES} {} {} -j {load_balancer_chain}",
                comment(&format!("{name} loadbalancer IP")),
                dst(ip, svc.port)
            ));
        }
        if uses_firewall_chain {
            // What the firewall chain did not let on is still un-DNATed here.
            out.filter_rules.push(format!(
                "-A {KUBE_PROXY_FIREWALL} {} {} -j DROP",
                comment(&format!("{name} traffic not accepted by {firewall_chain}")),
                dst(ip, svc.port)
            ));
        }
    }
    if !has_external {
        for ip in &svc.load_balancer_vips {
            out.filter_rules.push(format!(
                "-A {KUBE_EXTERNAL_SERVICES} {} {} -j {external_target}",
                comment(&external_comment),
                dst(ip, svc.port)
            ));
        }
    }
    // The NodePort.
    if svc.node_port != 0 {
        if cat.has_any {
            out.nat_rules.push(format!(
                "-A {KUBE_NODEPORTS} {} -m {proto} -p {proto} --dport {} -j {external_chain}",
                comment(&name),
                svc.node_port
            ));
        }
        if !has_external {
            out.filter_rules.push(format!(
                "-A {KUBE_EXTERNAL_SERVICES} {} -m addrtype --dst-type LOCAL -m {proto} -p {proto} --dport {} -j {external_target}",
                comment(&external_comment),
                svc.node_port
            ));
        }
    }
    // The health check node port is accepted whether or not there are local endpoints.
    if health_check_node_port != 0 {
        out.filter_rules.push(format!(
            "-A {KUBE_NODEPORTS} {} -m tcp -p tcp --dport {health_check_node_port} -j ACCEPT",
            comment(&format!("{name} health check node port"))
        ));
    }

    // The chains, created in upstream's order.
    if uses_external_chain {
        out.chain(&external_chain);
    }
    if uses_firewall_chain {
        out.chain(&firewall_chain);
    }
    if uses_cluster_chain {
        out.chain(&cluster_chain);
    }
    if uses_local_chain {
        out.chain(&local_chain);
    }
    for ep in &cat.all_reachable {
        out.chain(&endpoint_chain(svc, ep));
    }

    // Internal traffic: off-cluster sources of ClusterIP traffic are masqueraded (the
    // node may be a router into the Service range).
    if has_internal {
        let args = format!(
            "{} {}",
            comment(&format!("{name} cluster IP")),
            dst(&svc.cluster_ip, svc.port)
        );
        if config.masquerade_all {
            out.chain(internal_chain)
                .push(format!("-A {internal_chain} {args} -j {KUBE_MARK_MASQ}"));
        } else if let Some(cidr) = &local_cidr {
            out.chain(internal_chain).push(format!(
                "-A {internal_chain} {args} ! -s {cidr} -j {KUBE_MARK_MASQ}"
            ));
        }
    }

    // External traffic: every external destination jumps to the EXT chain.
    if uses_external_chain {
        let rules = out.chain(&external_chain);
        if !svc.external_policy_local {
            // Cluster endpoints may be on other nodes: masquerade.
            rules.push(format!(
                "-A {external_chain} {} -j {KUBE_MARK_MASQ}",
                comment(&format!(
                    "masquerade traffic for {name} external destinations"
                ))
            ));
        } else {
            if let Some(cidr) = &local_cidr {
                // Pod traffic to an external destination is as if it went out to the
                // load balancer and came back: neither traffic policy applies.
                rules.push(format!(
                    "-A {external_chain} {} -s {cidr} -j {cluster_chain}",
                    comment(&format!("pod traffic for {name} external destinations"))
                ));
            }
            // Host traffic keeps the source IP choice of the local address: masquerade
            // it, and send it to the Cluster endpoints.
            rules.push(format!(
                "-A {external_chain} {} -m addrtype --src-type LOCAL -j {KUBE_MARK_MASQ}",
                comment(&format!(
                    "masquerade LOCAL traffic for {name} external destinations"
                ))
            ));
            rules.push(format!(
                "-A {external_chain} {} -m addrtype --src-type LOCAL -j {cluster_chain}",
                comment(&format!(
                    "route LOCAL traffic for {name} external destinations"
                ))
            ));
        }
        if has_external {
            rules.push(format!("-A {external_chain} -j {external_policy_chain}"));
        }
    }

    // The firewall chain: the allowed sources go on to the EXT chain. When a range
    // holds this node's IP, so do the load-balancer IPs (a VIP-like load balancer
    // often makes its IP local, and the node's own connections then come from it).
    if uses_firewall_chain {
        let c = comment(&format!("{name} loadbalancer IP"));
        let rules = out.chain(&firewall_chain);
        let mut allow_from_node = false;
        for cidr in &svc.load_balancer_source_ranges {
            rules.push(format!(
                "-A {firewall_chain} {c} -s {cidr} -j {external_chain}"
            ));
            allow_from_node |= config.node_ip.is_some_and(|ip| cidr.contains(&ip));
        }
        if allow_from_node {
            for ip in &svc.load_balancer_vips {
                rules.push(format!(
                    "-A {firewall_chain} {c} -s {ip} -j {external_chain}"
                ));
            }
        }
        rules.push(format!(
            "-A {firewall_chain} {}",
            comment(&format!(
                "other traffic to {name} will be dropped by KUBE-PROXY-FIREWALL"
            ))
        ));
    }

    if uses_cluster_chain {
        endpoint_dispatch(out, svc, &name, &cluster_chain, &cat.cluster);
    }
    if uses_local_chain {
        endpoint_dispatch(out, svc, &name, &local_chain, &cat.local);
    }

    // The per-endpoint chains.
    for ep in &cat.all_reachable {
        let sep = endpoint_chain(svc, ep);
        let c = comment(&name);
        let rules = out.chain(&sep);
        // Hairpin: a pod reaching itself through the Service must see the reply come
        // back from the Service, so its own traffic is masqueraded.
        rules.push(format!("-A {sep} {c} -s {} -j {KUBE_MARK_MASQ}", ep.ip));
        let affinity = if svc.affinity_timeout.is_some() {
            format!(" -m recent --name {sep} --set")
        } else {
            String::new()
        };
        rules.push(format!(
            "-A {sep} {c}{affinity} -m {proto} -p {proto} -j DNAT --to-destination {}",
            ep.addr_port()
        ));
    }
}

/// `1/n` with ten decimals (upstream's `computeProbability`).
pub fn probability(n: usize) -> String {
    format!("{:.10}", 1.0 / n as f64)
}

/// Affinity checks, then the statistic load-balancing rules (upstream's
/// `writeServiceToEndpointRules`): endpoint i of n is taken with probability
/// 1/(n-i), the last one always.
fn endpoint_dispatch(
    out: &mut IptablesServiceRules,
    svc: &ServicePortInfo,
    name: &str,
    chain: &str,
    endpoints: &[EndpointInfo],
) {
    let rules = out.chain(chain);
    if let Some(timeout) = svc.affinity_timeout {
        for ep in endpoints {
            let sep = endpoint_chain(svc, ep);
            rules.push(format!(
                "-A {chain} {} -m recent --name {sep} --rcheck --seconds {timeout} --reap -j {sep}",
                comment(&format!("{name} -> {}", ep.addr_port()))
            ));
        }
    }
    let n = endpoints.len();
    for (i, ep) in endpoints.iter().enumerate() {
        let sep = endpoint_chain(svc, ep);
        let statistic = if i + 1 < n {
            format!(
                " -m statistic --mode random --probability {}",
                probability(n - i)
            )
        } else {
            String::new()
        };
        rules.push(format!(
            "-A {chain} {}{statistic} -j {sep}",
            comment(&format!("{name} -> {}", ep.addr_port()))
        ));
    }
}

/// The whole desired ruleset: the pure function the iptables proxier applies.
pub fn desired_ruleset(
    services: &[Service],
    slices: &[EndpointSlice],
    node: Option<&Node>,
    host_addresses: &[IpAddr],
    config: &ProxyConfig,
) -> IptablesRuleset {
    IptablesRuleset {
        family: config.family,
        base: base_rules(config, node, host_addresses),
        services: rules_by_service(services, slices, |svc, slices| {
            service_rules(svc, slices, config)
        }),
    }
}

/// What one `iptables-restore --noflush` writes besides the top-level chains (which
/// every restore declares, so flushes, and fills).
#[derive(Debug, Clone, Copy)]
pub struct RestoreScope<'a> {
    /// Services whose own chains are written; `None`: all of them (a full sync).
    pub services: Option<&'a BTreeSet<String>>,
    /// nat chains to flush and delete.
    pub stale: &'a BTreeSet<String>,
    /// Declare the canary chains (mangle, nat, filter): full syncs.
    pub canary: bool,
}

/// A rendered restore input and how many rules it writes per table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restore {
    pub text: String,
    pub filter_rules: usize,
    pub nat_rules: usize,
}

/// The `iptables-restore --noflush` input of a sync (upstream's layout: `*filter` then
/// `*nat`, chain lines first, then rules; stale chains flushed and deleted; the
/// NodePorts jump last in KUBE-SERVICES).
pub fn restore_input(rs: &IptablesRuleset, scope: RestoreScope<'_>) -> Restore {
    let b = &rs.base;
    let written = |key: &String| scope.services.is_none_or(|s| s.contains(key));
    let mut text = String::new();
    let mut filter_rules = 0;
    let mut nat_rules = 0;
    if scope.canary {
        let _ = writeln!(text, "*mangle\n:{KUBE_PROXY_CANARY} - [0:0]\nCOMMIT");
    }
    text.push_str("*filter\n");
    for c in &b.filter_chains {
        let _ = writeln!(text, ":{c} - [0:0]");
    }
    if scope.canary {
        let _ = writeln!(text, ":{KUBE_PROXY_CANARY} - [0:0]");
    }
    let rule = |text: &mut String, count: &mut usize, line: &str| {
        text.push_str(line);
        text.push('\n');
        *count += 1;
    };
    for r in &b.filter_head {
        rule(&mut text, &mut filter_rules, r);
    }
    for svc in rs.services.values() {
        for r in &svc.filter_rules {
            rule(&mut text, &mut filter_rules, r);
        }
    }
    for r in &b.filter_tail {
        rule(&mut text, &mut filter_rules, r);
    }
    text.push_str("COMMIT\n*nat\n");
    for c in &b.nat_chains {
        let _ = writeln!(text, ":{c} - [0:0]");
    }
    if scope.canary {
        let _ = writeln!(text, ":{KUBE_PROXY_CANARY} - [0:0]");
    }
    for (key, svc) in &rs.services {
        if written(key) {
            for c in svc.chain_names() {
                let _ = writeln!(text, ":{c} - [0:0]");
            }
        }
    }
    for c in scope.stale {
        let _ = writeln!(text, ":{c} - [0:0]");
    }
    for r in &b.nat_head {
        rule(&mut text, &mut nat_rules, r);
    }
    for (key, svc) in &rs.services {
        for r in &svc.nat_rules {
            rule(&mut text, &mut nat_rules, r);
        }
        if written(key) {
            for c in &svc.chains {
                for r in &c.rules {
                    rule(&mut text, &mut nat_rules, r);
                }
            }
        }
    }
    for c in scope.stale {
        let _ = writeln!(text, "-X {c}");
    }
    for r in &b.nat_tail {
        rule(&mut text, &mut nat_rules, r);
    }
    text.push_str("COMMIT\n");
    Restore {
        text,
        filter_rules,
        nat_rules,
    }
}

/// The full-sync restore input with no stale chains: what a fresh node gets (and what
/// the table tests compare).
pub fn dump(rs: &IptablesRuleset) -> String {
    restore_input(
        rs,
        RestoreScope {
            services: None,
            stale: &BTreeSet::new(),
            canary: false,
        },
    )
    .text
}

/// One table of `iptables-save` output.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SavedTable {
    pub name: String,
    /// Chain name -> built-in (has a policy).
    pub chains: BTreeMap<String, bool>,
    /// The `-A ...` lines, as printed.
    pub rules: Vec<String>,
}

/// Parses `iptables-save` output (any tables).
pub fn parse_save(text: &str) -> Vec<SavedTable> {
    let mut out: Vec<SavedTable> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix('*') {
            out.push(SavedTable {
                name: name.trim().to_string(),
                ..Default::default()
            });
        } else if let Some(table) = out.last_mut() {
            if let Some(decl) = line.strip_prefix(':') {
                let mut parts = decl.split_whitespace();
                if let Some(chain) = parts.next() {
                    let builtin = parts.next().is_some_and(|p| p != "-");
                    table.chains.insert(chain.to_string(), builtin);
                }
            } else if line.starts_with("-A ") {
                table.rules.push(line.to_string());
            }
        }
    }
    out
}

/// The chains of `table` in `iptables-save` output.
pub fn saved_chains(text: &str, table: &str) -> BTreeSet<String> {
    parse_save(text)
        .into_iter()
        .filter(|t| t.name == table)
        .flat_map(|t| t.chains.into_keys())
        .collect()
}

/// Splits an `iptables-save` rule line into arguments (double quotes group, `\` escapes).
pub fn split_args(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_arg = false;
    let mut quoted = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
                in_arg = true;
            }
            '"' => {
                quoted = !quoted;
                in_arg = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_arg {
                    out.push(std::mem::take(&mut cur));
                    in_arg = false;
                }
            }
            c => {
                cur.push(c);
                in_arg = true;
            }
        }
    }
    if in_arg {
        out.push(cur);
    }
    out
}

/// The `-j` target of a rule line.
pub fn rule_target(line: &str) -> Option<String> {
    let args = split_args(line);
    let i = args.iter().position(|a| a == "-j" || a == "--jump")?;
    args.get(i + 1).cloned()
}

/// The chains kube-proxy's iptables mode creates in `table` (upstream's
/// `CleanupLeftovers` set, plus KUBE-MARK-MASQ, the canaries, KUBE-PROXY-FIREWALL and
/// KUBE-FIREWALL: here no kubelet shares them).
pub fn owned_chain(table: &str, chain: &str) -> bool {
    match table {
        "nat" => {
            [
                KUBE_SERVICES,
                KUBE_NODEPORTS,
                KUBE_POSTROUTING,
                KUBE_MARK_MASQ,
                KUBE_PROXY_CANARY,
            ]
            .contains(&chain)
                || is_service_chain(chain)
        }
        "filter" => [
            KUBE_SERVICES,
            KUBE_EXTERNAL_SERVICES,
            KUBE_FORWARD,
            KUBE_NODEPORTS,
            KUBE_PROXY_FIREWALL,
            KUBE_FIREWALL,
            KUBE_PROXY_CANARY,
        ]
        .contains(&chain),
        "mangle" => chain == KUBE_PROXY_CANARY,
        _ => false,
    }
}

/// The restore input removing everything of iptables mode that `iptables-save` output
/// shows: the jumps from built-in chains into our chains deleted, our chains flushed
/// and deleted, one table at a time. `None` when there is nothing of ours.
pub fn cleanup_input(save: &str) -> Option<String> {
    let mut out = String::new();
    for table in parse_save(save) {
        let ours: Vec<&String> = table
            .chains
            .iter()
            .filter(|(c, builtin)| !**builtin && owned_chain(&table.name, c))
            .map(|(c, _)| c)
            .collect();
        if ours.is_empty() {
            continue;
        }
        let _ = writeln!(out, "*{}", table.name);
        for c in &ours {
            let _ = writeln!(out, ":{c} - [0:0]");
        }
        for r in &table.rules {
            let chain = r.split_whitespace().nth(1).unwrap_or_default();
            let from_builtin = table.chains.get(chain).copied().unwrap_or(false);
            let into_ours = rule_target(r).is_some_and(|t| ours.iter().any(|c| **c == t));
            if from_builtin && into_ours {
                let _ = writeln!(out, "-D {}", &r[3..]);
            }
        }
        for c in &ours {
            let _ = writeln!(out, "-X {c}");
        }
        out.push_str("COMMIT\n");
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_names_are_upstreams() {
        // From upstream's proxier_test.go: ns1/svc1:p80 (TCP) and its endpoint
        // 10.180.0.1:80.
        assert_eq!(port_proto_hash("ns1/svc1:p80", "tcp"), "XPGD46QRK7WJZT7O");
        assert_eq!(
            format!("{SEP_PREFIX}{}", hash16("ns1/svc1:p80tcp10.180.0.1:80")),
            "KUBE-SEP-SXIVWICOYRO3J4NJ"
        );
    }

    #[test]
    fn probabilities() {
        assert_eq!(probability(2), "0.5000000000");
        assert_eq!(probability(3), "0.3333333333");
        assert_eq!(probability(1), "1.0000000000");
    }

    #[test]
    fn splits_saved_rules() {
        let line = r#"-A INPUT -m comment --comment "a \"quoted\" -j X" -j KUBE-FIREWALL"#;
        assert_eq!(
            split_args(line),
            [
                "-A",
                "INPUT",
                "-m",
                "comment",
                "--comment",
                "a \"quoted\" -j X",
                "-j",
                "KUBE-FIREWALL"
            ]
        );
        assert_eq!(rule_target(line).as_deref(), Some("KUBE-FIREWALL"));
        assert_eq!(rule_target("-A X -p tcp"), None);
    }

    #[test]
    fn cleanup_removes_only_ours() {
        let save = "\
# Generated by iptables-save
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
:OTHER - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL
-A INPUT -j KUBE-FIREWALL
-A INPUT -j OTHER
-A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.0.0.1/32 -p tcp -m comment --comment \"a/b has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SVC-AAAA - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
-A PREROUTING -j CNI-HOSTPORT-DNAT
COMMIT
*raw
:PREROUTING ACCEPT [0:0]
COMMIT
";
        let got = cleanup_input(save).unwrap();
        assert_eq!(
            got,
            "*filter
:KUBE-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
-D INPUT -j KUBE-FIREWALL
-D FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-X KUBE-FIREWALL
-X KUBE-SERVICES
COMMIT
*nat
:KUBE-SVC-AAAA - [0:0]
-X KUBE-SVC-AAAA
COMMIT
"
        );
        assert_eq!(
            cleanup_input("*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n"),
            None
        );
        assert_eq!(
            saved_chains(save, "nat").into_iter().collect::<Vec<_>>(),
            [
                "CNI-HOSTPORT-DNAT",
                "KUBE-KUBELET-CANARY",
                "KUBE-SVC-AAAA",
                "PREROUTING"
            ]
        );
    }
}
