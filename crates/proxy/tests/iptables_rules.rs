//! Table tests of the pure iptables rule generation (iptables mode) and its
//! `iptables-restore` text, against upstream's pkg/proxy/iptables expectations.

use std::collections::{BTreeMap, BTreeSet};

mod common;

use common::objects::{Ep, NODE, node, ready, service};
use ferrokube_proxy::iptables_rules::{
    IptablesRuleset, JUMP_RULES, KUBE_FIREWALL_JUMPS, RestoreScope, desired_ruleset, dump,
    restore_input,
};
use ferrokube_proxy::net::{IpFamily, parse_cidrs};
use ferrokube_proxy::rules::{NodePortAddresses, ProxyConfig};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};

/// Upstream's iptables default: NodePorts on every local address.
fn config() -> ProxyConfig {
    let mut c = ProxyConfig::new(IpFamily::V4, NODE);
    c.cluster_cidrs = parse_cidrs("10.244.0.0/16").unwrap();
    c.node_port_addresses = NodePortAddresses::MatchAll;
    c
}

fn slice(service: &str, eps: &[Ep<'_>]) -> EndpointSlice {
    slice_family(service, "IPv4", eps)
}

fn slice_family(service: &str, family: &str, eps: &[Ep<'_>]) -> EndpointSlice {
    common::objects::slice_family(service, &format!("{service}-abc"), family, eps)
}

fn build(services: &[Service], slices: &[EndpointSlice], cfg: &ProxyConfig) -> IptablesRuleset {
    desired_ruleset(services, slices, Some(&node(&["192.168.1.10"])), &[], cfg)
}

/// `table -> chain -> rules in order`, and the declared chains, of a restore text.
type Tables = BTreeMap<String, (BTreeSet<String>, BTreeMap<String, Vec<String>>)>;

fn tables(text: &str) -> Tables {
    let mut out = Tables::new();
    let mut table = String::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
            out.entry(table.clone()).or_default();
        } else if let Some(c) = line.strip_prefix(':') {
            let name = c.split_whitespace().next().unwrap().to_string();
            out.get_mut(&table).unwrap().0.insert(name);
        } else if line.starts_with("-A ") {
            let chain = line.split_whitespace().nth(1).unwrap().to_string();
            out.get_mut(&table)
                .unwrap()
                .1
                .entry(chain)
                .or_default()
                .push(line.to_string());
        }
    }
    out
}

/// The rules of `chain` in `table` of a dump.
fn chain(rs: &IptablesRuleset, table: &str, chain: &str) -> Vec<String> {
    tables(&dump(rs))
        .get(table)
        .and_then(|t| t.1.get(chain).cloned())
        .unwrap_or_default()
}

fn all_rules(rs: &IptablesRuleset) -> Vec<String> {
    dump(rs)
        .lines()
        .filter(|l| l.starts_with("-A "))
        .map(str::to_string)
        .collect()
}

/// Upstream's TestOverallIPTablesRules (pkg/proxy/iptables/proxier_test.go), with the
/// deviations of this implementation applied to upstream's expected text: no nfacct
/// (no `-m nfacct` INVALID counter, no nfacct-counted 127.0.0.0/8 NodePort rules; the
/// addrtype LOCAL jump serves localhost NodePorts) and MASQUERADE `--random-fully`
/// (the test's fake iptables has no random-fully).
#[test]
fn upstreams_overall_rules() {
    let mut cfg = ProxyConfig::new(IpFamily::V4, "test-node");
    cfg.cluster_cidrs = parse_cidrs("10.0.0.0/8").unwrap();
    cfg.node_port_addresses = NodePortAddresses::MatchAll;
    let svc = |ns: &str, name: &str, spec: Value, status: Value| -> Service {
        serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name},
            "spec": spec, "status": status,
        }))
        .unwrap()
    };
    let p80 = |node_port: Option<u16>| {
        let mut p = json!({"name": "p80", "port": 80, "protocol": "TCP"});
        if let Some(n) = node_port {
            p["nodePort"] = json!(n);
        }
        json!([p])
    };
    let services = [
        svc(
            "ns1",
            "svc1",
            json!({"clusterIP": "172.30.0.41", "ports": p80(None)}),
            json!({}),
        ),
        svc(
            "ns2",
            "svc2",
            json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "clusterIP": "172.30.0.42",
                   "ports": p80(Some(3001)), "externalIPs": ["192.168.99.22"], "healthCheckNodePort": 30000}),
            json!({"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}),
        ),
        svc(
            "ns3",
            "svc3",
            json!({"type": "NodePort", "clusterIP": "172.30.0.43", "ports": p80(Some(3003))}),
            json!({}),
        ),
        svc(
            "ns4",
            "svc4",
            json!({"type": "NodePort", "clusterIP": "172.30.0.44", "externalIPs": ["192.168.99.33"],
                   "ports": [{"name": "p80", "port": 80, "protocol": "TCP", "targetPort": 80}]}),
            json!({}),
        ),
        svc(
            "ns5",
            "svc5",
            json!({"type": "LoadBalancer", "externalTrafficPolicy": "Cluster", "clusterIP": "172.30.0.45",
                   "ports": p80(Some(3002)), "healthCheckNodePort": 30000,
                   // Extra whitespace, as upstream's test: validation lets it through.
                   "loadBalancerSourceRanges": [" 203.0.113.0/25"],
                   "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}}}),
            json!({"loadBalancer": {"ingress": [{"ip": "5.6.7.8"}]}}),
        ),
        svc(
            "ns6",
            "svc6",
            json!({"type": "ClusterIP", "clusterIP": "172.30.0.46",
                   "ports": [{"name": "p80", "port": 80, "protocol": "TCP", "targetPort": 80}]}),
            json!({}),
        ),
    ];
    let eps = |ns: &str, name: &str, endpoints: Value| -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": format!("{name}-1"),
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "ports": [{"name": "p80", "port": 80, "protocol": "TCP"}],
            "endpoints": endpoints,
        }))
        .unwrap()
    };
    let slices = [
        eps("ns1", "svc1", json!([{"addresses": ["10.180.0.1"]}])),
        eps("ns2", "svc2", json!([{"addresses": ["10.180.0.2"]}])),
        eps("ns3", "svc3", json!([{"addresses": ["10.180.0.3"]}])),
        eps(
            "ns4",
            "svc4",
            json!([{"addresses": ["10.180.0.4"]}, {"addresses": ["10.180.0.5"], "nodeName": "test-node"}]),
        ),
        eps("ns5", "svc5", json!([{"addresses": ["10.180.0.3"]}])),
    ];
    let rs = desired_ruleset(&services, &slices, None, &[], &cfg);

    let expected = r#"
*filter
:KUBE-NODEPORTS - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
-A KUBE-NODEPORTS -m comment --comment "ns2/svc2:p80 health check node port" -m tcp -p tcp --dport 30000 -j ACCEPT
-A KUBE-SERVICES -m comment --comment "ns6/svc6:p80 has no endpoints" -m tcp -p tcp -d 172.30.0.46 --dport 80 -j REJECT
-A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m tcp -p tcp -d 192.168.99.22 --dport 80 -j DROP
-A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j DROP
-A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 3001 -j DROP
-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-PROXY-FIREWALL -m comment --comment "ns5/svc5:p80 traffic not accepted by KUBE-FW-NUKIZ6OKUXPJNT4C" -m tcp -p tcp -d 5.6.7.8 --dport 80 -j DROP
COMMIT
*nat
:KUBE-NODEPORTS - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-EXT-4SW47YFZTEDKD3PK - [0:0]
:KUBE-EXT-GNZBNJ2PO5MGZ6GT - [0:0]
:KUBE-EXT-NUKIZ6OKUXPJNT4C - [0:0]
:KUBE-EXT-X27LE4BHSL4DOUIK - [0:0]
:KUBE-FW-NUKIZ6OKUXPJNT4C - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SEP-C6EBXVWJJZMIWKLZ - [0:0]
:KUBE-SEP-I77PXRDZVX7PMWMN - [0:0]
:KUBE-SEP-OYPFS5VJICHGATKP - [0:0]
:KUBE-SEP-RS4RBKLTHTF2IUXJ - [0:0]
:KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]
:KUBE-SEP-UKSFD7AGPMPPLUHC - [0:0]
:KUBE-SVC-4SW47YFZTEDKD3PK - [0:0]
:KUBE-SVC-GNZBNJ2PO5MGZ6GT - [0:0]
:KUBE-SVC-NUKIZ6OKUXPJNT4C - [0:0]
:KUBE-SVC-X27LE4BHSL4DOUIK - [0:0]
:KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
-A KUBE-NODEPORTS -m comment --comment ns2/svc2:p80 -m tcp -p tcp --dport 3001 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
-A KUBE-NODEPORTS -m comment --comment ns3/svc3:p80 -m tcp -p tcp --dport 3003 -j KUBE-EXT-X27LE4BHSL4DOUIK
-A KUBE-NODEPORTS -m comment --comment ns5/svc5:p80 -m tcp -p tcp --dport 3002 -j KUBE-EXT-NUKIZ6OKUXPJNT4C
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 80 -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
-A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 external IP" -m tcp -p tcp -d 192.168.99.22 --dport 80 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
-A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 loadbalancer IP" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
-A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
-A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 -j KUBE-SVC-4SW47YFZTEDKD3PK
-A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 external IP" -m tcp -p tcp -d 192.168.99.33 --dport 80 -j KUBE-EXT-4SW47YFZTEDKD3PK
-A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 cluster IP" -m tcp -p tcp -d 172.30.0.45 --dport 80 -j KUBE-SVC-NUKIZ6OKUXPJNT4C
-A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 loadbalancer IP" -m tcp -p tcp -d 5.6.7.8 --dport 80 -j KUBE-FW-NUKIZ6OKUXPJNT4C
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-EXT-4SW47YFZTEDKD3PK -m comment --comment "masquerade traffic for ns4/svc4:p80 external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-4SW47YFZTEDKD3PK -j KUBE-SVC-4SW47YFZTEDKD3PK
-A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "pod traffic for ns2/svc2:p80 external destinations" -s 10.0.0.0/8 -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
-A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "masquerade LOCAL traffic for ns2/svc2:p80 external destinations" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ
-A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "route LOCAL traffic for ns2/svc2:p80 external destinations" -m addrtype --src-type LOCAL -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
-A KUBE-EXT-NUKIZ6OKUXPJNT4C -m comment --comment "masquerade traffic for ns5/svc5:p80 external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-NUKIZ6OKUXPJNT4C -j KUBE-SVC-NUKIZ6OKUXPJNT4C
-A KUBE-EXT-X27LE4BHSL4DOUIK -m comment --comment "masquerade traffic for ns3/svc3:p80 external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-X27LE4BHSL4DOUIK -j KUBE-SVC-X27LE4BHSL4DOUIK
-A KUBE-FW-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 loadbalancer IP" -s 203.0.113.0/25 -j KUBE-EXT-NUKIZ6OKUXPJNT4C
-A KUBE-FW-NUKIZ6OKUXPJNT4C -m comment --comment "other traffic to ns5/svc5:p80 will be dropped by KUBE-PROXY-FIREWALL"
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SEP-C6EBXVWJJZMIWKLZ -m comment --comment ns4/svc4:p80 -s 10.180.0.5 -j KUBE-MARK-MASQ
-A KUBE-SEP-C6EBXVWJJZMIWKLZ -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.5:80
-A KUBE-SEP-I77PXRDZVX7PMWMN -m comment --comment ns5/svc5:p80 -s 10.180.0.3 -j KUBE-MARK-MASQ
-A KUBE-SEP-I77PXRDZVX7PMWMN -m comment --comment ns5/svc5:p80 -m recent --name KUBE-SEP-I77PXRDZVX7PMWMN --set -m tcp -p tcp -j DNAT --to-destination 10.180.0.3:80
-A KUBE-SEP-OYPFS5VJICHGATKP -m comment --comment ns3/svc3:p80 -s 10.180.0.3 -j KUBE-MARK-MASQ
-A KUBE-SEP-OYPFS5VJICHGATKP -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.3:80
-A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -s 10.180.0.2 -j KUBE-MARK-MASQ
-A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.2:80
-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ
-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80
-A KUBE-SEP-UKSFD7AGPMPPLUHC -m comment --comment ns4/svc4:p80 -s 10.180.0.4 -j KUBE-MARK-MASQ
-A KUBE-SEP-UKSFD7AGPMPPLUHC -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.4:80
-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.180.0.4:80" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-UKSFD7AGPMPPLUHC
-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.180.0.5:80" -j KUBE-SEP-C6EBXVWJJZMIWKLZ
-A KUBE-SVC-GNZBNJ2PO5MGZ6GT -m comment --comment "ns2/svc2:p80 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-GNZBNJ2PO5MGZ6GT -m comment --comment "ns2/svc2:p80 -> 10.180.0.2:80" -j KUBE-SEP-RS4RBKLTHTF2IUXJ
-A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 cluster IP" -m tcp -p tcp -d 172.30.0.45 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 -> 10.180.0.3:80" -m recent --name KUBE-SEP-I77PXRDZVX7PMWMN --rcheck --seconds 10800 --reap -j KUBE-SEP-I77PXRDZVX7PMWMN
-A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 -> 10.180.0.3:80" -j KUBE-SEP-I77PXRDZVX7PMWMN
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.180.0.3:80" -j KUBE-SEP-OYPFS5VJICHGATKP
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -j KUBE-SEP-SXIVWICOYRO3J4NJ
COMMIT
"#;
    // Same chains, and the same rules in the same order within each chain (upstream's
    // comparison sorts chains, and orders top-level rules by Service as here).
    let got = tables(&dump(&rs));
    let want = tables(expected);
    assert_eq!(got.keys().collect::<Vec<_>>(), ["filter", "nat"]);
    for (table, (want_chains, want_rules)) in &want {
        let (got_chains, got_rules) = &got[table];
        assert_eq!(got_chains, want_chains, "{table} chains");
        for (chain, rules) in want_rules {
            assert_eq!(
                got_rules.get(chain).unwrap_or(&Vec::new()),
                rules,
                "{table} {chain}"
            );
        }
        assert_eq!(
            got_rules.keys().collect::<Vec<_>>(),
            want_rules.keys().collect::<Vec<_>>(),
            "{table}: chains with rules"
        );
    }
    // The NodePorts jump is the last rule of nat KUBE-SERVICES.
    assert!(
        got["nat"].1["KUBE-SERVICES"]
            .last()
            .unwrap()
            .contains("NOTE: this must be the last rule")
    );
    // Rule counts (upstream's sync_proxy_rules_iptables_total).
    let n_filter = want["filter"].1.values().map(Vec::len).sum::<usize>();
    let n_nat = want["nat"].1.values().map(Vec::len).sum::<usize>();
    assert_eq!(rs.rule_counts(), (n_filter, n_nat));
}

/// The same chains, and the same rules in the same order within each chain.
fn assert_same_tables(got: &str, expected: &str) {
    let got = tables(got);
    let want = tables(expected);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (table, (want_chains, want_rules)) in &want {
        let (got_chains, got_rules) = &got[table];
        assert_eq!(got_chains, want_chains, "{table} chains");
        for (chain, rules) in want_rules {
            assert_eq!(
                got_rules.get(chain).unwrap_or(&Vec::new()),
                rules,
                "{table} {chain}"
            );
        }
        assert_eq!(
            got_rules.keys().collect::<Vec<_>>(),
            want_rules.keys().collect::<Vec<_>>(),
            "{table}: chains with rules"
        );
    }
}

/// Upstream's TestLoadBalancer (pkg/proxy/iptables/proxier_test.go): two load-balancer
/// IPs, loadBalancerSourceRanges of which one holds the node's IP (192.168.0.2), so the
/// load-balancer IPs are allowed sources too; the deviations of the overall test.
#[test]
fn upstreams_load_balancer_source_ranges() {
    let mut cfg = ProxyConfig::new(IpFamily::V4, "test-node");
    cfg.cluster_cidrs = parse_cidrs("10.0.0.0/8").unwrap();
    cfg.node_port_addresses = NodePortAddresses::MatchAll;
    cfg.node_ip = Some("192.168.0.2".parse().unwrap());
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"namespace": "ns1", "name": "svc1"},
        "spec": {"type": "LoadBalancer", "clusterIP": "172.30.0.41",
                 "ports": [{"name": "p80", "port": 80, "protocol": "TCP", "nodePort": 3001}],
                 // Regression test that excess whitespace gets ignored (upstream's).
                 "loadBalancerSourceRanges": ["192.168.0.0/24", " 203.0.113.0/25"]},
        "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}, {"ip": "5.6.7.8"}]}},
    }))
    .unwrap();
    let sl: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"namespace": "ns1", "name": "svc1-1",
                     "labels": {"kubernetes.io/service-name": "svc1"}},
        "addressType": "IPv4",
        "ports": [{"name": "p80", "port": 80, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.180.0.1"]}],
    }))
    .unwrap();
    let rs = desired_ruleset(
        std::slice::from_ref(&svc),
        std::slice::from_ref(&sl),
        None,
        &[],
        &cfg,
    );
    let expected = r#"
*filter
:KUBE-NODEPORTS - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-PROXY-FIREWALL -m comment --comment "ns1/svc1:p80 traffic not accepted by KUBE-FW-XPGD46QRK7WJZT7O" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j DROP
-A KUBE-PROXY-FIREWALL -m comment --comment "ns1/svc1:p80 traffic not accepted by KUBE-FW-XPGD46QRK7WJZT7O" -m tcp -p tcp -d 5.6.7.8 --dport 80 -j DROP
COMMIT
*nat
:KUBE-NODEPORTS - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-EXT-XPGD46QRK7WJZT7O - [0:0]
:KUBE-FW-XPGD46QRK7WJZT7O - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]
:KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
-A KUBE-NODEPORTS -m comment --comment ns1/svc1:p80 -m tcp -p tcp --dport 3001 -j KUBE-EXT-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 loadbalancer IP" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j KUBE-FW-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 loadbalancer IP" -m tcp -p tcp -d 5.6.7.8 --dport 80 -j KUBE-FW-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-EXT-XPGD46QRK7WJZT7O -m comment --comment "masquerade traffic for ns1/svc1:p80 external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-XPGD46QRK7WJZT7O -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-FW-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 loadbalancer IP" -s 192.168.0.0/24 -j KUBE-EXT-XPGD46QRK7WJZT7O
-A KUBE-FW-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 loadbalancer IP" -s 203.0.113.0/25 -j KUBE-EXT-XPGD46QRK7WJZT7O
-A KUBE-FW-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 loadbalancer IP" -s 1.2.3.4 -j KUBE-EXT-XPGD46QRK7WJZT7O
-A KUBE-FW-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 loadbalancer IP" -s 5.6.7.8 -j KUBE-EXT-XPGD46QRK7WJZT7O
-A KUBE-FW-XPGD46QRK7WJZT7O -m comment --comment "other traffic to ns1/svc1:p80 will be dropped by KUBE-PROXY-FIREWALL"
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ
-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -j KUBE-SEP-SXIVWICOYRO3J4NJ
COMMIT
"#;
    assert_same_tables(&dump(&rs), expected);

    // The node's IP outside the ranges: the load-balancer IPs are no allowed sources.
    cfg.node_ip = Some("192.168.1.2".parse().unwrap());
    let rs = desired_ruleset(std::slice::from_ref(&svc), &[sl], None, &[], &cfg);
    let fw = chain(&rs, "nat", "KUBE-FW-XPGD46QRK7WJZT7O");
    assert_eq!(fw.len(), 3, "{fw:#?}");
    assert!(!fw.iter().any(|r| r.contains("-s 1.2.3.4")));

    // Without endpoints there is nothing to firewall: the LB IPs are rejected in
    // filter (upstream's usesFWChain needs endpoints in iptables mode).
    let rs = desired_ruleset(&[svc], &[], None, &[], &cfg);
    let rules = all_rules(&rs);
    assert!(!rules.iter().any(|r| r.contains("KUBE-FW-")), "{rules:#?}");
    assert!(
        rules.contains(&"-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns1/svc1:p80 has no endpoints\" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j REJECT".to_string()),
        "{rules:#?}"
    );
}

/// loadBalancerSourceRanges as upstream reads them: of this family only, host bits
/// cleared, unparsable ones left out, and a zero-length prefix allowing everyone (no
/// firewall at all); `ipMode: Proxy` ingress IPs get no rules.
#[test]
fn load_balancer_source_ranges_are_read_as_upstream() {
    let lb = |ranges: Value, ingress: Value| {
        let mut s = service(
            "lb",
            "10.96.0.30",
            json!({"type": "LoadBalancer", "loadBalancerSourceRanges": ranges}),
        );
        s.status =
            Some(serde_json::from_value(json!({"loadBalancer": {"ingress": ingress}})).unwrap());
        s
    };
    let sl = slice("lb", &[ready("10.244.0.5", NODE)]);
    let fw_rules = |svc: Service| -> Vec<String> {
        all_rules(&build(&[svc], std::slice::from_ref(&sl), &config()))
            .into_iter()
            .filter(|r| r.contains("KUBE-FW-") || r.contains("KUBE-PROXY-FIREWALL"))
            .collect()
    };
    let vip = json!([{"ip": "198.51.100.10"}]);
    let got = fw_rules(lb(
        json!(["192.0.2.77/24", "fd00::/8", "not-a-cidr", "198.51.100.0/25"]),
        vip.clone(),
    ));
    let sources: Vec<&str> = got
        .iter()
        .filter_map(|r| {
            r.split_once(" -s ")
                .map(|(_, rest)| rest.split(' ').next().unwrap())
        })
        .collect();
    assert_eq!(sources, ["192.0.2.0/24", "198.51.100.0/25"], "{got:#?}");
    assert!(fw_rules(lb(json!(["192.0.2.0/24", "0.0.0.0/0"]), vip.clone())).is_empty());
    assert!(fw_rules(lb(json!(["fd00::/8"]), vip)).is_empty());
    let proxied = lb(
        json!(["192.0.2.0/24"]),
        json!([{"ip": "198.51.100.10", "ipMode": "Proxy"}]),
    );
    let rules = all_rules(&build(&[proxied], std::slice::from_ref(&sl), &config()));
    assert!(
        !rules.iter().any(|r| r.contains("198.51.100.10")),
        "{rules:#?}"
    );
}

#[test]
fn cluster_ip_balances_with_statistic_probabilities() {
    let svc = service("web", "10.96.0.20", json!({}));
    let sl = slice(
        "web",
        &[
            ready("10.244.0.5", NODE),
            ready("10.244.1.7", "node-b"),
            ready("10.244.2.9", "node-c"),
        ],
    );
    let rs = build(&[svc], &[sl], &config());
    let svc_chain = chain(&rs, "nat", "KUBE-SERVICES");
    assert_eq!(svc_chain.len(), 2, "{svc_chain:?}");
    let to_svc = &svc_chain[0];
    assert!(
        to_svc.starts_with(
            "-A KUBE-SERVICES -m comment --comment \"ns/web:http cluster IP\" -m tcp -p tcp -d 10.96.0.20 --dport 80 -j KUBE-SVC-"
        ),
        "{to_svc}"
    );
    let name = to_svc.rsplit(' ').next().unwrap();
    let rules = chain(&rs, "nat", name);
    let probabilities: Vec<Option<&str>> = rules[1..]
        .iter()
        .map(|r| {
            r.split_once("--probability ")
                .map(|(_, p)| p.split(' ').next().unwrap())
        })
        .collect();
    // 1/3 of all, then 1/2 of the rest, then the last always: uniform.
    assert_eq!(
        probabilities,
        [Some("0.3333333333"), Some("0.5000000000"), None]
    );
    assert_eq!(
        rules[0],
        format!(
            "-A {name} -m comment --comment \"ns/web:http cluster IP\" -m tcp -p tcp -d 10.96.0.20 --dport 80 ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ"
        )
    );
    for (rule, ep) in rules[1..]
        .iter()
        .zip(["10.244.0.5", "10.244.1.7", "10.244.2.9"])
    {
        assert!(
            rule.contains(&format!("\"ns/web:http -> {ep}:8080\"")),
            "{rule}"
        );
        let sep = rule.rsplit(' ').next().unwrap();
        // Each endpoint chain masquerades hairpin traffic, then DNATs.
        assert_eq!(
            chain(&rs, "nat", sep),
            [
                format!("-A {sep} -m comment --comment ns/web:http -s {ep} -j KUBE-MARK-MASQ"),
                format!(
                    "-A {sep} -m comment --comment ns/web:http -m tcp -p tcp -j DNAT --to-destination {ep}:8080"
                ),
            ]
        );
    }
    assert!(chain(&rs, "filter", "KUBE-SERVICES").is_empty());
}

#[test]
fn service_without_endpoints_is_rejected_in_filter() {
    let svc = service(
        "web",
        "10.96.0.20",
        json!({"type": "LoadBalancer", "externalIPs": ["203.0.113.9"],
               "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}),
    );
    let mut svc = svc;
    svc.status = Some(
        serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}}))
            .unwrap(),
    );
    // An unready endpoint is no endpoint.
    let sl = slice("web", &[("10.244.0.5", NODE, false, false, false)]);
    let rs = build(&[svc], &[sl], &config());
    assert_eq!(
        chain(&rs, "filter", "KUBE-SERVICES"),
        [
            "-A KUBE-SERVICES -m comment --comment \"ns/web:http has no endpoints\" -m tcp -p tcp -d 10.96.0.20 --dport 80 -j REJECT"
        ]
    );
    assert_eq!(
        chain(&rs, "filter", "KUBE-EXTERNAL-SERVICES"),
        [
            "-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns/web:http has no endpoints\" -m tcp -p tcp -d 203.0.113.9 --dport 80 -j REJECT",
            "-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns/web:http has no endpoints\" -m tcp -p tcp -d 198.51.100.7 --dport 80 -j REJECT",
            "-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns/web:http has no endpoints\" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30080 -j REJECT",
        ]
    );
    // No nat rules or chains at all for it.
    assert!(rs.service_chains().is_empty());
    assert_eq!(
        chain(&rs, "nat", "KUBE-SERVICES").len(),
        1,
        "only the NodePorts jump"
    );
    assert!(chain(&rs, "nat", "KUBE-NODEPORTS").is_empty());
}

#[test]
fn node_port_goes_through_the_external_chain() {
    let svc = service(
        "web",
        "10.96.0.20",
        json!({"type": "NodePort",
               "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}),
    );
    let sl = slice("web", &[ready("10.244.0.5", NODE)]);
    let rs = build(&[svc], &[sl], &config());
    let nodeports = chain(&rs, "nat", "KUBE-NODEPORTS");
    assert_eq!(nodeports.len(), 1);
    assert!(
        nodeports[0].starts_with(
            "-A KUBE-NODEPORTS -m comment --comment ns/web:http -m tcp -p tcp --dport 30080 -j KUBE-EXT-"
        ),
        "{nodeports:?}"
    );
    let ext = nodeports[0].rsplit(' ').next().unwrap();
    let svc_chain = ext.replace("KUBE-EXT-", "KUBE-SVC-");
    assert_eq!(
        chain(&rs, "nat", ext),
        [
            format!(
                "-A {ext} -m comment --comment \"masquerade traffic for ns/web:http external destinations\" -j KUBE-MARK-MASQ"
            ),
            format!("-A {ext} -j {svc_chain}"),
        ]
    );
    // Upstream's default: NodePorts on every local address, localhost included.
    assert_eq!(
        chain(&rs, "nat", "KUBE-SERVICES").last().unwrap(),
        "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"
    );
}

#[test]
fn session_affinity_uses_recent() {
    let svc = service(
        "web",
        "10.96.0.20",
        json!({"sessionAffinity": "ClientIP",
               "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}}),
    );
    let sl = slice(
        "web",
        &[ready("10.244.0.5", NODE), ready("10.244.1.7", "node-b")],
    );
    let rs = build(&[svc], &[sl], &config());
    let to_svc = chain(&rs, "nat", "KUBE-SERVICES")[0].clone();
    let name = to_svc.rsplit(' ').next().unwrap().to_string();
    let rules = chain(&rs, "nat", &name);
    // masquerade, 2 affinity checks, 2 balancing rules.
    assert_eq!(rules.len(), 5, "{rules:#?}");
    for (i, ep) in ["10.244.0.5", "10.244.1.7"].iter().enumerate() {
        let check = &rules[1 + i];
        let sep = check.rsplit(' ').next().unwrap();
        assert_eq!(
            *check,
            format!(
                "-A {name} -m comment --comment \"ns/web:http -> {ep}:8080\" -m recent --name {sep} --rcheck --seconds 60 --reap -j {sep}"
            )
        );
        assert_eq!(
            chain(&rs, "nat", sep)[1],
            format!(
                "-A {sep} -m comment --comment ns/web:http -m recent --name {sep} --set -m tcp -p tcp -j DNAT --to-destination {ep}:8080"
            )
        );
    }
}

#[test]
fn external_traffic_policy_local() {
    let svc = service(
        "web",
        "10.96.0.20",
        json!({"type": "NodePort", "externalTrafficPolicy": "Local",
               "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}),
    );
    let sl = slice(
        "web",
        &[ready("10.244.0.5", NODE), ready("10.244.1.7", "node-b")],
    );
    let rs = build(&[svc], &[sl], &config());
    let chains = rs.service_chains();
    let svc_chain = chains.iter().find(|c| c.starts_with("KUBE-SVC-")).unwrap();
    let svl = chains.iter().find(|c| c.starts_with("KUBE-SVL-")).unwrap();
    let ext = chains.iter().find(|c| c.starts_with("KUBE-EXT-")).unwrap();
    assert_eq!(
        chain(&rs, "nat", ext),
        [
            format!(
                "-A {ext} -m comment --comment \"pod traffic for ns/web:http external destinations\" -s 10.244.0.0/16 -j {svc_chain}"
            ),
            format!(
                "-A {ext} -m comment --comment \"masquerade LOCAL traffic for ns/web:http external destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ"
            ),
            format!(
                "-A {ext} -m comment --comment \"route LOCAL traffic for ns/web:http external destinations\" -m addrtype --src-type LOCAL -j {svc_chain}"
            ),
            format!("-A {ext} -j {svl}"),
        ]
    );
    // The local chain has only this node's endpoint, without masquerade (the client
    // IP is kept); the cluster chain balances over both.
    let local = chain(&rs, "nat", svl);
    assert_eq!(local.len(), 1, "{local:?}");
    assert!(local[0].contains("\"ns/web:http -> 10.244.0.5:8080\" -j KUBE-SEP-"));
    assert_eq!(chain(&rs, "nat", svc_chain).len(), 3);

    // Without a local endpoint: external traffic that was not short-circuited is
    // dropped (not rejected), the EXT chain still short-circuits pods and the host.
    let remote = slice("web", &[ready("10.244.1.7", "node-b")]);
    let svc2 = service(
        "web",
        "10.96.0.20",
        json!({"type": "NodePort", "externalTrafficPolicy": "Local",
               "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}),
    );
    let rs = build(&[svc2], &[remote], &config());
    assert_eq!(
        chain(&rs, "filter", "KUBE-EXTERNAL-SERVICES"),
        [
            "-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns/web:http has no local endpoints\" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30080 -j DROP"
        ]
    );
    assert!(
        !rs.service_chains()
            .iter()
            .any(|c| c.starts_with("KUBE-SVL-"))
    );
    let ext = rs
        .service_chains()
        .into_iter()
        .find(|c| c.starts_with("KUBE-EXT-"))
        .unwrap()
        .to_string();
    assert_eq!(chain(&rs, "nat", &ext).len(), 3, "no jump to a local chain");
}

#[test]
fn both_traffic_policies_local_still_build_the_cluster_chain() {
    // The EXT chain short-circuits pod and host traffic to KUBE-SVC-, so it must exist
    // even with internalTrafficPolicy Local (upstream's UsesClusterEndpoints).
    let svc = service(
        "web",
        "10.96.0.20",
        json!({"type": "NodePort", "externalTrafficPolicy": "Local", "internalTrafficPolicy": "Local",
               "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}),
    );
    let sl = slice(
        "web",
        &[ready("10.244.0.5", NODE), ready("10.244.1.7", "node-b")],
    );
    let rs = build(&[svc], &[sl], &config());
    let dump = dump(&rs);
    for c in rs.service_chains() {
        assert!(dump.contains(&format!(":{c} - [0:0]")));
    }
    for rule in all_rules(&rs) {
        if let Some(target) = rule.split(" -j ").nth(1) {
            let target = target.split(' ').next().unwrap();
            if target.starts_with("KUBE-SVC-")
                || target.starts_with("KUBE-SVL-")
                || target.starts_with("KUBE-SEP-")
            {
                assert!(
                    rs.service_chains().contains(target),
                    "{rule} jumps to a missing chain"
                );
            }
        }
    }
    // The ClusterIP goes to the local chain.
    assert!(chain(&rs, "nat", "KUBE-SERVICES")[0].contains("-j KUBE-SVL-"));
}

#[test]
fn internal_traffic_policy_local_without_local_endpoints_drops() {
    let svc = service(
        "web",
        "10.96.0.20",
        json!({"internalTrafficPolicy": "Local"}),
    );
    let sl = slice("web", &[ready("10.244.1.7", "node-b")]);
    let rs = build(&[svc], &[sl], &config());
    assert_eq!(
        chain(&rs, "filter", "KUBE-SERVICES"),
        [
            "-A KUBE-SERVICES -m comment --comment \"ns/web:http has no local endpoints\" -m tcp -p tcp -d 10.96.0.20 --dport 80 -j DROP"
        ]
    );
    assert!(rs.service_chains().is_empty());
}

#[test]
fn masquerade_all_and_without_cluster_cidr() {
    let svc = service("web", "10.96.0.20", json!({}));
    let sl = slice("web", &[ready("10.244.0.5", NODE)]);
    let mut cfg = config();
    cfg.masquerade_all = true;
    let rs = build(std::slice::from_ref(&svc), std::slice::from_ref(&sl), &cfg);
    let name = chain(&rs, "nat", "KUBE-SERVICES")[0]
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        chain(&rs, "nat", &name)[0],
        format!(
            "-A {name} -m comment --comment \"ns/web:http cluster IP\" -m tcp -p tcp -d 10.96.0.20 --dport 80 -j KUBE-MARK-MASQ"
        )
    );
    // No cluster CIDR and no masqueradeAll: no off-cluster masquerade rule.
    let mut cfg = config();
    cfg.cluster_cidrs.clear();
    let rs = build(&[svc], &[sl], &cfg);
    let rules = chain(&rs, "nat", &name);
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert!(rules[0].contains("-> 10.244.0.5:8080"));
}

#[test]
fn masquerade_bit_and_conntrack_liberal() {
    let mut cfg = config();
    cfg.masquerade_bit = 13;
    cfg.conntrack_tcp_liberal = true;
    let rs = build(&[], &[], &cfg);
    assert_eq!(
        chain(&rs, "nat", "KUBE-POSTROUTING"),
        [
            "-A KUBE-POSTROUTING -m mark ! --mark 0x2000/0x2000 -j RETURN",
            "-A KUBE-POSTROUTING -j MARK --xor-mark 0x2000",
            "-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully",
        ]
    );
    assert_eq!(
        chain(&rs, "nat", "KUBE-MARK-MASQ"),
        ["-A KUBE-MARK-MASQ -j MARK --or-mark 0x2000"]
    );
    // nf_conntrack_tcp_be_liberal set: no DROP of INVALID packets.
    assert_eq!(
        chain(&rs, "filter", "KUBE-FORWARD"),
        [
            "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x2000/0x2000 -j ACCEPT",
            "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        ]
    );
}

#[test]
fn node_port_addresses_and_localhost() {
    let tail = |rs: &IptablesRuleset| {
        chain(rs, "nat", "KUBE-SERVICES")
            .into_iter()
            .map(|r| {
                r.split_once("this chain\" ")
                    .map(|(_, rest)| rest.to_string())
                    .unwrap_or(r)
            })
            .collect::<Vec<_>>()
    };
    // localhost NodePorts off: loopback excluded, and no KUBE-FIREWALL.
    let mut cfg = config();
    cfg.localhost_nodeports = false;
    let rs = build(&[], &[], &cfg);
    assert_eq!(
        tail(&rs),
        ["-m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j KUBE-NODEPORTS"]
    );
    assert!(!dump(&rs).contains("KUBE-FIREWALL"));
    assert_eq!(rs.base.jumps, JUMP_RULES);
    // On: the CVE-2020-8558 rule and its jumps.
    let rs = build(&[], &[], &config());
    assert!(dump(&rs).contains(":KUBE-FIREWALL - [0:0]"));
    assert_eq!(rs.base.jumps.len(), JUMP_RULES.len() + 2);
    assert_eq!(&rs.base.jumps[JUMP_RULES.len()..], KUBE_FIREWALL_JUMPS);
    // primary: the node's addresses, loopback only with localhost NodePorts.
    let mut cfg = config();
    cfg.node_port_addresses = NodePortAddresses::Primary;
    let rs = desired_ruleset(
        &[],
        &[],
        Some(&node(&["192.168.1.10", "127.0.0.1"])),
        &[],
        &cfg,
    );
    assert_eq!(
        tail(&rs),
        [
            "-d 127.0.0.1 -j KUBE-NODEPORTS",
            "-d 192.168.1.10 -j KUBE-NODEPORTS"
        ]
    );
    cfg.localhost_nodeports = false;
    let rs = desired_ruleset(
        &[],
        &[],
        Some(&node(&["192.168.1.10", "127.0.0.1"])),
        &[],
        &cfg,
    );
    assert_eq!(tail(&rs), ["-d 192.168.1.10 -j KUBE-NODEPORTS"]);
    assert!(!dump(&rs).contains("KUBE-FIREWALL"));
    // CIDRs: the host addresses inside them.
    let mut cfg = config();
    cfg.node_port_addresses = NodePortAddresses::Cidrs(parse_cidrs("192.168.0.0/16").unwrap());
    let rs = desired_ruleset(
        &[],
        &[],
        None,
        &["192.168.5.5".parse().unwrap(), "10.0.0.1".parse().unwrap()],
        &cfg,
    );
    assert_eq!(tail(&rs), ["-d 192.168.5.5 -j KUBE-NODEPORTS"]);
}

#[test]
fn ipv6_family() {
    let mut cfg = ProxyConfig::new(IpFamily::V6, NODE);
    cfg.cluster_cidrs = parse_cidrs("10.244.0.0/16,fd00:10::/64").unwrap();
    cfg.node_port_addresses = NodePortAddresses::MatchAll;
    let svc = serde_json::from_value::<Service>(json!({
        "metadata": {"namespace": "ns", "name": "web"},
        "spec": {"clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20", "fd00:96::20"],
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    }))
    .unwrap();
    let slices = [
        slice("web", &[ready("10.244.0.5", NODE)]),
        slice_family("web", "IPv6", &[ready("fd00:10::5", NODE)]),
    ];
    let rs = desired_ruleset(&[svc], &slices, None, &[], &cfg);
    let rules = all_rules(&rs);
    assert!(
        rules
            .iter()
            .any(|r| r.ends_with("-j DNAT --to-destination [fd00:10::5]:8080"))
    );
    assert!(
        rules
            .iter()
            .any(|r| r.contains("-d fd00:96::20 --dport 80 ! -s fd00:10::/64 -j KUBE-MARK-MASQ"))
    );
    assert!(!rules.iter().any(|r| r.contains("10.244.0.5")));
    // No localhost NodePorts on IPv6, and no KUBE-FIREWALL.
    assert!(
        rules
            .iter()
            .any(|r| r.ends_with("-m addrtype --dst-type LOCAL ! -d ::1/128 -j KUBE-NODEPORTS"))
    );
    assert!(!dump(&rs).contains("KUBE-FIREWALL"));
}

#[test]
fn terminating_endpoints_are_a_fallback() {
    let svc = service("web", "10.96.0.20", json!({}));
    let sl = slice(
        "web",
        &[
            ("10.244.0.6", NODE, false, true, true),
            ("10.244.0.7", NODE, false, false, true),
        ],
    );
    let rs = build(&[svc], &[sl], &config());
    let rules = all_rules(&rs);
    assert!(
        rules
            .iter()
            .any(|r| r.ends_with("--to-destination 10.244.0.6:8080"))
    );
    assert!(!rules.iter().any(|r| r.contains("10.244.0.7")));
    assert!(chain(&rs, "filter", "KUBE-SERVICES").is_empty());
}

#[test]
fn partial_restore_rewrites_only_the_named_services_chains() {
    let a = service("a", "10.96.0.1", json!({}));
    let b = service("b", "10.96.0.2", json!({}));
    let slices = [
        slice("a", &[ready("10.244.0.5", NODE)]),
        slice("b", &[ready("10.244.0.6", NODE)]),
    ];
    let rs = build(&[a, b], &slices, &config());
    let only_b: BTreeSet<String> = ["ns/b".to_string()].into();
    let stale: BTreeSet<String> = ["KUBE-SEP-GONEGONEGONEGONE".to_string()].into();
    let r = restore_input(
        &rs,
        RestoreScope {
            services: Some(&only_b),
            stale: &stale,
            canary: false,
        },
    );
    let t = tables(&r.text);
    let (nat_chains, nat_rules) = &t["nat"];
    let a_chains: Vec<&str> = rs.services["ns/a"].chain_names().collect();
    let b_chains: Vec<&str> = rs.services["ns/b"].chain_names().collect();
    for c in &a_chains {
        assert!(
            !nat_chains.contains(*c) && !nat_rules.contains_key(*c),
            "{c}"
        );
    }
    for c in &b_chains {
        assert!(nat_chains.contains(*c) && nat_rules.contains_key(*c), "{c}");
    }
    // KUBE-SERVICES is always complete: a's rule jumps into its untouched chain.
    assert_eq!(nat_rules["KUBE-SERVICES"].len(), 3);
    assert!(r.text.contains(":KUBE-SEP-GONEGONEGONEGONE - [0:0]\n"));
    assert!(r.text.contains("\n-X KUBE-SEP-GONEGONEGONEGONE\n"));
    // The NodePorts jump stays last, after the deletions.
    assert!(r.text.trim_end().ends_with("-j KUBE-NODEPORTS\nCOMMIT"));
    assert!(!r.text.contains("KUBE-PROXY-CANARY"));
    assert_eq!(
        r.nat_rules,
        4 + 3
            + nat_rules
                .iter()
                .filter(|(c, _)| b_chains.contains(&c.as_str()))
                .map(|(_, r)| r.len())
                .sum::<usize>()
    );
}

#[test]
fn jump_rules_are_upstreams() {
    let args: Vec<(String, String, String)> = JUMP_RULES
        .iter()
        .map(|j| (j.table.to_string(), j.chain.to_string(), j.args().join(" ")))
        .collect();
    let want = [
        ("filter", "INPUT", "-m conntrack --ctstate NEW -m comment --comment kubernetes externally-visible service portals -j KUBE-EXTERNAL-SERVICES"),
        ("filter", "FORWARD", "-m conntrack --ctstate NEW -m comment --comment kubernetes externally-visible service portals -j KUBE-EXTERNAL-SERVICES"),
        ("filter", "INPUT", "-m comment --comment kubernetes health check service ports -j KUBE-NODEPORTS"),
        ("filter", "FORWARD", "-m conntrack --ctstate NEW -m comment --comment kubernetes service portals -j KUBE-SERVICES"),
        ("filter", "OUTPUT", "-m conntrack --ctstate NEW -m comment --comment kubernetes service portals -j KUBE-SERVICES"),
        ("filter", "FORWARD", "-m comment --comment kubernetes forwarding rules -j KUBE-FORWARD"),
        ("filter", "INPUT", "-m conntrack --ctstate NEW -m comment --comment kubernetes load balancer firewall -j KUBE-PROXY-FIREWALL"),
        ("filter", "OUTPUT", "-m conntrack --ctstate NEW -m comment --comment kubernetes load balancer firewall -j KUBE-PROXY-FIREWALL"),
        ("filter", "FORWARD", "-m conntrack --ctstate NEW -m comment --comment kubernetes load balancer firewall -j KUBE-PROXY-FIREWALL"),
        ("nat", "OUTPUT", "-m comment --comment kubernetes service portals -j KUBE-SERVICES"),
        ("nat", "PREROUTING", "-m comment --comment kubernetes service portals -j KUBE-SERVICES"),
        ("nat", "POSTROUTING", "-m comment --comment kubernetes postrouting rules -j KUBE-POSTROUTING"),
    ]
    .map(|(t, c, a)| (t.to_string(), c.to_string(), a.to_string()));
    assert_eq!(args, want);
    // The comment is one argument (no shell in between).
    assert_eq!(
        JUMP_RULES[9].args(),
        [
            "-m",
            "comment",
            "--comment",
            "kubernetes service portals",
            "-j",
            "KUBE-SERVICES"
        ]
    );
    assert_eq!(KUBE_FIREWALL_JUMPS[0].args(), ["-j", "KUBE-FIREWALL"]);
}
