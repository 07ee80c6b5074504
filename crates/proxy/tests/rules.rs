//! Table tests of the pure rule generation and the transactions rendered from it.

use std::net::IpAddr;

mod common;

use common::objects::{Ep, NODE, node, ready, service, slice_family};
use ferrokube_proxy::net::{IpFamily, parse_cidrs};
use ferrokube_proxy::render::{self, ExistingObjects};
use ferrokube_proxy::rules::{NodePortAddresses, ProxyConfig, Ruleset, desired_ruleset};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

fn config() -> ProxyConfig {
    let mut c = ProxyConfig::new(IpFamily::V4, NODE);
    c.cluster_cidrs = parse_cidrs("10.244.0.0/16").unwrap();
    c
}

fn slice(service: &str, name: &str, eps: &[Ep<'_>]) -> EndpointSlice {
    slice_family(service, name, "IPv4", eps)
}

fn build(services: &[Service], slices: &[EndpointSlice], cfg: &ProxyConfig) -> Ruleset {
    desired_ruleset(services, slices, Some(&node(&["192.168.1.10"])), &[], cfg)
}

/// The dump without the base (table, chains, maps, static rules, nodeport-ips).
fn service_part(rs: &Ruleset) -> String {
    let mut only = rs.clone();
    only.base.commands.clear();
    only.base.nodeport_ips.clear();
    render::dump(&only)
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

#[test]
fn base_ruleset_matches_upstream_shape() {
    let rs = build(&[], &[], &config());
    let expected = "\
add table ip kube-proxy { comment \"rules for kube-proxy\" ; }
add chain ip kube-proxy filter-prerouting { type filter hook prerouting priority -110 ; }
add chain ip kube-proxy filter-input { type filter hook input priority -110 ; }
add chain ip kube-proxy filter-forward { type filter hook forward priority -110 ; }
add chain ip kube-proxy filter-output { type filter hook output priority -110 ; }
add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip kube-proxy nat-output { type nat hook output priority -100 ; }
add chain ip kube-proxy nat-postrouting { type nat hook postrouting priority 100 ; }
add chain ip kube-proxy endpoints-check
add chain ip kube-proxy firewall-check
add chain ip kube-proxy services
add chain ip kube-proxy masquerading
add chain ip kube-proxy mark-for-masquerade
add chain ip kube-proxy reject-chain
add set ip kube-proxy nodeport-ips { type ipv4_addr ; comment \"IPs that accept NodePort traffic\" ; }
add map ip kube-proxy no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; comment \"vmap to drop or reject packets to services with no endpoints\" ; }
add map ip kube-proxy no-endpoint-nodeports { type inet_proto . inet_service : verdict ; comment \"vmap to drop or reject packets to service nodeports with no endpoints\" ; }
add map ip kube-proxy firewall-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment \"destinations that are subject to LoadBalancerSourceRanges\" ; }
add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\" ; }
add map ip kube-proxy service-nodeports { type inet_proto . inet_service : verdict ; comment \"NodePort traffic\" ; }
add rule ip kube-proxy filter-prerouting ct state new jump firewall-check
add rule ip kube-proxy filter-output ct state new jump firewall-check
add rule ip kube-proxy filter-input ct state new jump endpoints-check
add rule ip kube-proxy filter-forward ct state new jump endpoints-check
add rule ip kube-proxy filter-output ct state new jump endpoints-check
add rule ip kube-proxy nat-output jump services
add rule ip kube-proxy nat-prerouting jump services
add rule ip kube-proxy nat-postrouting jump masquerading
add rule ip kube-proxy mark-for-masquerade mark set mark or 0x00004000
add rule ip kube-proxy masquerading mark and 0x00004000 == 0 return
add rule ip kube-proxy masquerading mark set mark xor 0x00004000
add rule ip kube-proxy masquerading masquerade fully-random
add rule ip kube-proxy reject-chain reject
add rule ip kube-proxy endpoints-check ip daddr . meta l4proto . th dport vmap @no-endpoint-services
add rule ip kube-proxy endpoints-check ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports
add rule ip kube-proxy firewall-check ip daddr . meta l4proto . th dport vmap @firewall-ips
add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kube-proxy services ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports
add element ip kube-proxy nodeport-ips { 192.168.1.10 }
";
    assert_eq!(render::dump(&rs), expected);
}

#[test]
fn cluster_ip_with_two_endpoints() {
    let svc = service("web", "10.96.0.20", json!({}));
    let sl = slice(
        "web",
        "web-abc",
        &[ready("10.244.0.5", NODE), ready("10.244.1.7", "node-b")],
    );
    let rs = build(&[svc], &[sl], &config());
    let expected = "\
add chain ip kube-proxy endpoint-56LWUB6P-ns/web/tcp/http__10.244.0.5/8080
add chain ip kube-proxy endpoint-I6FOTFNI-ns/web/tcp/http__10.244.1.7/8080
add chain ip kube-proxy service-Y6QD5CCT-ns/web/tcp/http
add rule ip kube-proxy endpoint-56LWUB6P-ns/web/tcp/http__10.244.0.5/8080 ip saddr 10.244.0.5 jump mark-for-masquerade
add rule ip kube-proxy endpoint-56LWUB6P-ns/web/tcp/http__10.244.0.5/8080 meta l4proto tcp dnat to 10.244.0.5:8080
add rule ip kube-proxy endpoint-I6FOTFNI-ns/web/tcp/http__10.244.1.7/8080 ip saddr 10.244.1.7 jump mark-for-masquerade
add rule ip kube-proxy endpoint-I6FOTFNI-ns/web/tcp/http__10.244.1.7/8080 meta l4proto tcp dnat to 10.244.1.7:8080
add rule ip kube-proxy service-Y6QD5CCT-ns/web/tcp/http ip daddr 10.96.0.20 tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade
add rule ip kube-proxy service-Y6QD5CCT-ns/web/tcp/http numgen random mod 2 vmap { 0 : goto endpoint-56LWUB6P-ns/web/tcp/http__10.244.0.5/8080, 1 : goto endpoint-I6FOTFNI-ns/web/tcp/http__10.244.1.7/8080 }
add element ip kube-proxy service-ips { 10.96.0.20 . tcp . 80 : goto service-Y6QD5CCT-ns/web/tcp/http }
";
    assert_eq!(service_part(&rs), expected);
}

#[test]
fn service_without_endpoints_is_rejected() {
    let svc = service("web", "10.96.0.20", json!({}));
    // Only an unready endpoint: nothing usable.
    let sl = slice(
        "web",
        "web-abc",
        &[("10.244.0.5", NODE, false, false, false)],
    );
    let rs = build(&[svc], &[sl], &config());
    assert_eq!(
        service_part(&rs),
        "add element ip kube-proxy no-endpoint-services { 10.96.0.20 . tcp . 80 comment \"ns/web:http\" : goto reject-chain }\n"
    );
}

#[test]
fn node_port_and_external_ips_with_cluster_policy() {
    let svc = service(
        "web",
        "10.96.0.20",
        json!({"type": "NodePort", "externalIPs": ["203.0.113.9"],
               "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}),
    );
    let sl = slice("web", "web-abc", &[ready("10.244.0.5", NODE)]);
    let rs = build(&[svc], &[sl], &config());
    let got = service_part(&rs);
    let ext = "external-Y6QD5CCT-ns/web/tcp/http";
    for want in [
        format!("add chain ip kube-proxy {ext}"),
        format!("add rule ip kube-proxy {ext} jump mark-for-masquerade"),
        format!("add rule ip kube-proxy {ext} goto service-Y6QD5CCT-ns/web/tcp/http"),
        format!("add element ip kube-proxy service-ips {{ 203.0.113.9 . tcp . 80 : goto {ext} }}"),
        format!("add element ip kube-proxy service-nodeports {{ tcp . 30080 : goto {ext} }}"),
        "add element ip kube-proxy service-ips { 10.96.0.20 . tcp . 80 : goto service-Y6QD5CCT-ns/web/tcp/http }".to_string(),
    ] {
        assert!(lines(&got).contains(&want.as_str()), "missing {want:?} in\n{got}");
    }
    assert!(!got.contains("no-endpoint"), "{got}");
}

#[test]
fn node_port_without_endpoints_rejects_on_node_ports_too() {
    let svc = service(
        "web",
        "10.96.0.20",
        json!({"type": "NodePort",
               "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}),
    );
    let rs = build(&[svc], &[], &config());
    assert_eq!(
        service_part(&rs),
        "add element ip kube-proxy no-endpoint-nodeports { tcp . 30080 comment \"ns/web:http\" : goto reject-chain }\n\
         add element ip kube-proxy no-endpoint-services { 10.96.0.20 . tcp . 80 comment \"ns/web:http\" : goto reject-chain }\n"
    );
}

#[test]
fn external_traffic_policy_local_without_local_endpoints_drops_external_traffic() {
    let svc = service(
        "web",
        "10.96.0.20",
        json!({"type": "NodePort", "externalTrafficPolicy": "Local",
               "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}),
    );
    let sl = slice("web", "web-abc", &[ready("10.244.1.7", "node-b")]);
    let rs = build(&[svc], &[sl], &config());
    let got = service_part(&rs);
    let ext = "external-Y6QD5CCT-ns/web/tcp/http";
    let expected_ext = [
        format!(
            "add rule ip kube-proxy {ext} ip saddr 10.244.0.0/16 goto service-Y6QD5CCT-ns/web/tcp/http comment \"short-circuit pod traffic\""
        ),
        format!(
            "add rule ip kube-proxy {ext} fib saddr type local jump mark-for-masquerade comment \"masquerade local traffic\""
        ),
        format!(
            "add rule ip kube-proxy {ext} fib saddr type local goto service-Y6QD5CCT-ns/web/tcp/http comment \"short-circuit local traffic\""
        ),
    ];
    let ext_rules: Vec<&str> = lines(&got)
        .into_iter()
        .filter(|l| l.starts_with(&format!("add rule ip kube-proxy {ext} ")))
        .collect();
    assert_eq!(
        ext_rules,
        expected_ext.iter().map(String::as_str).collect::<Vec<_>>()
    );
    // Pods and the host still reach it; external traffic that was not short-circuited
    // is dropped, not rejected.
    assert!(lines(&got).contains(
        &"add element ip kube-proxy no-endpoint-nodeports { tcp . 30080 comment \"ns/web:http\" : drop }"
    ));
    assert!(
        !got.contains("local-Y6QD5CCT"),
        "no local chain without local endpoints:\n{got}"
    );
}

#[test]
fn external_traffic_policy_local_uses_only_local_endpoints() {
    let svc = service(
        "web",
        "10.96.0.20",
        json!({"type": "NodePort", "externalTrafficPolicy": "Local",
               "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}),
    );
    let sl = slice(
        "web",
        "web-abc",
        &[ready("10.244.0.5", NODE), ready("10.244.1.7", "node-b")],
    );
    let got = service_part(&build(&[svc], &[sl], &config()));
    let local = "local-Y6QD5CCT-ns/web/tcp/http";
    assert!(lines(&got).contains(&format!(
        "add rule ip kube-proxy {local} numgen random mod 1 vmap {{ 0 : goto endpoint-56LWUB6P-ns/web/tcp/http__10.244.0.5/8080 }}"
    ).as_str()), "{got}");
    assert!(lines(&got).contains(
        &"add rule ip kube-proxy external-Y6QD5CCT-ns/web/tcp/http goto local-Y6QD5CCT-ns/web/tcp/http"
    ));
    // The ClusterIP still balances over every endpoint.
    assert!(
        got.contains("service-Y6QD5CCT-ns/web/tcp/http numgen random mod 2"),
        "{got}"
    );
}

#[test]
fn both_traffic_policies_local_keep_the_service_chain() {
    // The external chain short-circuits pod and host traffic to the service chain, so
    // that chain must exist even with internalTrafficPolicy Local too (upstream's
    // UsesClusterEndpoints); it used to be missing, which failed the transaction.
    let svc = service(
        "web",
        "10.96.0.20",
        json!({"type": "NodePort", "externalTrafficPolicy": "Local", "internalTrafficPolicy": "Local",
               "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}),
    );
    let sl = slice(
        "web",
        "web-abc",
        &[ready("10.244.0.5", NODE), ready("10.244.1.7", "node-b")],
    );
    let got = service_part(&build(&[svc], &[sl], &config()));
    assert!(
        lines(&got).contains(&"add chain ip kube-proxy service-Y6QD5CCT-ns/web/tcp/http"),
        "{got}"
    );
    assert!(
        got.contains("service-Y6QD5CCT-ns/web/tcp/http numgen random mod 2"),
        "{got}"
    );
    // The ClusterIP still uses only the local endpoint.
    assert!(lines(&got).contains(
        &"add element ip kube-proxy service-ips { 10.96.0.20 . tcp . 80 : goto local-Y6QD5CCT-ns/web/tcp/http }"
    ));
}

#[test]
fn internal_traffic_policy_local() {
    let svc = service(
        "web",
        "10.96.0.20",
        json!({"internalTrafficPolicy": "Local"}),
    );
    let remote_only = slice("web", "web-abc", &[ready("10.244.1.7", "node-b")]);
    let got = service_part(&build(
        std::slice::from_ref(&svc),
        &[remote_only],
        &config(),
    ));
    // Endpoints exist elsewhere: drop (not reject), and no chains at all.
    assert_eq!(
        got,
        "add element ip kube-proxy no-endpoint-services { 10.96.0.20 . tcp . 80 comment \"ns/web:http\" : drop }\n"
    );
    let both = slice(
        "web",
        "web-abc",
        &[ready("10.244.0.5", NODE), ready("10.244.1.7", "node-b")],
    );
    let got = service_part(&build(&[svc], &[both], &config()));
    assert!(lines(&got).contains(
        &"add element ip kube-proxy service-ips { 10.96.0.20 . tcp . 80 : goto local-Y6QD5CCT-ns/web/tcp/http }"
    ), "{got}");
    assert!(got.contains(
        "local-Y6QD5CCT-ns/web/tcp/http numgen random mod 1 vmap { 0 : goto endpoint-56LWUB6P"
    ));
    assert!(
        !got.contains("10.244.1.7"),
        "remote endpoint unused:\n{got}"
    );
}

#[test]
fn terminating_endpoints_are_a_fallback_only() {
    let svc = service("web", "10.96.0.20", json!({}));
    // One ready and one serving-terminating: only the ready one is used.
    let mixed = slice(
        "web",
        "web-abc",
        &[
            ready("10.244.0.5", NODE),
            ("10.244.0.6", NODE, false, true, true),
        ],
    );
    let got = service_part(&build(std::slice::from_ref(&svc), &[mixed], &config()));
    assert!(got.contains("numgen random mod 1 "), "{got}");
    assert!(!got.contains("10.244.0.6"), "{got}");
    // None ready: the serving terminating ones take the traffic; a terminating endpoint
    // that no longer serves never does.
    let terminating = slice(
        "web",
        "web-abc",
        &[
            ("10.244.0.6", NODE, false, true, true),
            ("10.244.0.7", NODE, false, false, true),
        ],
    );
    let got = service_part(&build(&[svc], &[terminating], &config()));
    assert!(
        got.contains("numgen random mod 1 vmap { 0 : goto endpoint-"),
        "{got}"
    );
    assert!(got.contains("dnat to 10.244.0.6:8080"), "{got}");
    assert!(!got.contains("10.244.0.7"), "{got}");
    assert!(!got.contains("no-endpoint"), "{got}");
}

#[test]
fn session_affinity_client_ip_uses_timed_sets() {
    let svc = service(
        "web",
        "10.96.0.20",
        json!({"sessionAffinity": "ClientIP",
               "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}}),
    );
    let sl = slice("web", "web-abc", &[ready("10.244.0.5", NODE)]);
    let got = service_part(&build(&[svc], &[sl], &config()));
    let ep = "endpoint-56LWUB6P-ns/web/tcp/http__10.244.0.5/8080";
    let aff = "affinity-56LWUB6P-ns/web/tcp/http__10.244.0.5/8080";
    for want in [
        format!(
            "add set ip kube-proxy {aff} {{ type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; }}"
        ),
        format!(
            "add rule ip kube-proxy service-Y6QD5CCT-ns/web/tcp/http ip saddr @{aff} goto {ep}"
        ),
        format!("add rule ip kube-proxy {ep} update @{aff} {{ ip saddr }}"),
    ] {
        assert!(
            lines(&got).contains(&want.as_str()),
            "missing {want:?} in\n{got}"
        );
    }
    // Affinity lookup comes before the random pick.
    let svc_rules: Vec<&str> = lines(&got)
        .into_iter()
        .filter(|l| l.starts_with("add rule ip kube-proxy service-"))
        .collect();
    assert!(
        svc_rules[1].contains("@affinity-") && svc_rules[2].contains("numgen"),
        "{svc_rules:?}"
    );
}

#[test]
fn skipped_services_get_no_rules() {
    let headless = service("headless", "None", json!({}));
    let external_name = service(
        "ext",
        "",
        json!({"type": "ExternalName", "externalName": "example.com"}),
    );
    let mut other_proxy = service("other", "10.96.0.30", json!({}));
    other_proxy.metadata.labels = Some(
        [(
            "service.kubernetes.io/service-proxy-name".to_string(),
            "x".to_string(),
        )]
        .into(),
    );
    let rs = build(&[headless, external_name, other_proxy], &[], &config());
    assert!(rs.services.is_empty(), "{:?}", rs.services.keys());
}

#[test]
fn masquerade_all_and_no_cluster_cidr() {
    let svc = service("web", "10.96.0.20", json!({}));
    let sl = slice("web", "web-abc", &[ready("10.244.0.5", NODE)]);
    let mut cfg = config();
    cfg.cluster_cidrs.clear();
    let got = service_part(&build(
        std::slice::from_ref(&svc),
        std::slice::from_ref(&sl),
        &cfg,
    ));
    assert!(
        !got.contains("tcp dport 80"),
        "no off-cluster rule without a cluster CIDR:\n{got}"
    );
    cfg.masquerade_all = true;
    let got = service_part(&build(&[svc], &[sl], &cfg));
    assert!(lines(&got).contains(
        &"add rule ip kube-proxy service-Y6QD5CCT-ns/web/tcp/http ip daddr 10.96.0.20 tcp dport 80 jump mark-for-masquerade"
    ), "{got}");
}

#[test]
fn ports_match_endpoint_slice_ports_by_name_and_protocol() {
    let svc = service(
        "dns",
        "10.96.0.10",
        json!({"ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                         {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}),
    );
    let sl: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"namespace": "ns", "name": "dns-1", "labels": {"kubernetes.io/service-name": "dns"}},
        "addressType": "IPv4",
        "ports": [{"name": "dns", "port": 5353, "protocol": "UDP"}],
        "endpoints": [{"addresses": ["10.244.0.9"], "conditions": {"ready": true}}],
    }))
    .unwrap();
    let got = service_part(&build(&[svc], &[sl], &config()));
    assert!(
        got.contains("meta l4proto udp dnat to 10.244.0.9:5353"),
        "{got}"
    );
    assert!(lines(&got).contains(
        &"add element ip kube-proxy no-endpoint-services { 10.96.0.10 . tcp . 53 comment \"ns/dns:dns-tcp\" : goto reject-chain }"
    ), "{got}");
}

#[test]
fn ipv6_family() {
    let svc = service("web", "fd00:10:96::20", json!({"ipFamilies": ["IPv6"]}));
    let sl = slice_family(
        "web",
        "web-abc",
        "IPv6",
        &[("fd00:10:244::5", NODE, true, true, false)],
    );
    let mut cfg = ProxyConfig::new(IpFamily::V6, NODE);
    cfg.cluster_cidrs = parse_cidrs("10.244.0.0/16,fd00:10:244::/56").unwrap();
    let rs = desired_ruleset(
        std::slice::from_ref(&svc),
        &[sl],
        Some(&node(&["192.168.1.10", "fd00::10"])),
        &[],
        &cfg,
    );
    let all = render::dump(&rs);
    assert!(all.starts_with("add table ip6 kube-proxy"), "{all}");
    assert!(
        all.contains("add element ip6 kube-proxy nodeport-ips { fd00::10 }"),
        "{all}"
    );
    assert!(
        all.contains("meta l4proto tcp dnat to [fd00:10:244::5]:8080"),
        "{all}"
    );
    assert!(all.contains("ip6 daddr fd00:10:96::20 tcp dport 80 ip6 saddr != fd00:10:244::/56 jump mark-for-masquerade"), "{all}");
    assert!(
        all.contains("endpoint-") && all.contains("__fd00.10.244..5/8080"),
        "{all}"
    );
    // An IPv4-only Service has nothing in the IPv6 table.
    let v4 = service("v4", "10.96.0.21", json!({}));
    let rs = desired_ruleset(&[v4], &[], None, &[], &cfg);
    assert!(rs.services.is_empty());
}

#[test]
fn localhost_node_ports() {
    let cfg = config();
    let rs = desired_ruleset(&[], &[], Some(&node(&["127.0.0.1"])), &[], &cfg);
    let all = render::dump(&rs);
    assert!(
        !all.contains("add element ip kube-proxy nodeport-ips"),
        "loopback is not in the set:\n{all}"
    );
    assert!(all.contains("add rule ip kube-proxy nat-output ip daddr 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports"), "{all}");
    assert!(all.contains("add rule ip kube-proxy filter-output ct state new ip daddr 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports"), "{all}");
    let mut off = cfg.clone();
    off.localhost_nodeports = false;
    let all = render::dump(&desired_ruleset(
        &[],
        &[],
        Some(&node(&["127.0.0.1"])),
        &[],
        &off,
    ));
    assert!(!all.contains("127.0.0.0/8"), "{all}");
}

#[test]
fn node_port_addresses_match_all_and_cidrs() {
    let mut cfg = config();
    cfg.node_port_addresses = NodePortAddresses::MatchAll;
    let all = render::dump(&build(&[], &[], &cfg));
    assert!(!all.contains("nodeport-ips"), "{all}");
    assert!(all.contains("add rule ip kube-proxy services fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports"), "{all}");
    cfg.node_port_addresses = NodePortAddresses::Cidrs(parse_cidrs("172.16.0.0/12").unwrap());
    let host: Vec<IpAddr> = ["172.17.0.4", "10.0.0.1"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    let all = render::dump(&desired_ruleset(&[], &[], None, &host, &cfg));
    assert!(
        all.contains("add element ip kube-proxy nodeport-ips { 172.17.0.4 }"),
        "{all}"
    );
    assert!(!all.contains("{ 10.0.0.1 }"), "{all}");
}

#[test]
fn incremental_touches_only_the_changed_service() {
    let cfg = config();
    let a = service("a", "10.96.0.20", json!({}));
    let b = service("b", "10.96.0.21", json!({}));
    let a1 = slice("a", "a-1", &[ready("10.244.0.5", NODE)]);
    let b1 = slice("b", "b-1", &[ready("10.244.0.8", NODE)]);
    let before = build(&[a.clone(), b.clone()], &[a1.clone(), b1.clone()], &cfg);
    // b gains an endpoint.
    let b2 = slice(
        "b",
        "b-1",
        &[ready("10.244.0.8", NODE), ready("10.244.0.9", NODE)],
    );
    let after = build(&[a.clone(), b.clone()], &[a1.clone(), b2], &cfg);
    assert!(!render::base_changed(&before, &after));
    let keys: Vec<String> = after.services.keys().cloned().collect();
    let tx = render::incremental(&before, &after, &keys);
    assert!(!tx.contains("/a/"), "service a untouched:\n{tx}");
    let tx_lines = lines(&tx);
    assert!(
        tx_lines[0].starts_with("flush chain ip kube-proxy "),
        "{tx}"
    );
    assert_eq!(
        tx_lines
            .iter()
            .filter(|l| l.starts_with("flush chain"))
            .count(),
        2,
        "{tx}"
    );
    assert_eq!(
        tx_lines
            .iter()
            .filter(|l| l.starts_with("add chain"))
            .count(),
        1,
        "{tx}"
    );
    assert!(tx.contains("numgen random mod 2"), "{tx}");
    assert!(
        !tx.contains("element"),
        "the ClusterIP element stays:\n{tx}"
    );
    // Unchanged: nothing to do.
    assert_eq!(render::incremental(&after, &after, &keys), "");

    // b loses every endpoint: its chains go, the element moves to the reject map.
    let empty = build(&[a.clone(), b.clone()], std::slice::from_ref(&a1), &cfg);
    let tx = render::incremental(&after, &empty, &keys);
    let verbs: Vec<String> = lines(&tx)
        .iter()
        .map(|l| l.split(' ').take(2).collect::<Vec<_>>().join(" "))
        .collect();
    let first_delete_chain = verbs.iter().position(|l| l == "delete chain").unwrap();
    let delete_element = verbs.iter().position(|l| l == "delete element").unwrap();
    assert!(
        delete_element < first_delete_chain,
        "elements pointing at a chain go first:\n{tx}"
    );
    assert!(
        tx.contains("delete element ip kube-proxy service-ips { 10.96.0.21 . tcp . 80 }"),
        "{tx}"
    );
    assert!(tx.contains("add element ip kube-proxy no-endpoint-services { 10.96.0.21 . tcp . 80 comment \"ns/b:http\" : goto reject-chain }"), "{tx}");
    assert_eq!(
        lines(&tx)
            .iter()
            .filter(|l| l.starts_with("delete chain"))
            .count(),
        3,
        "{tx}"
    );

    // b deleted altogether.
    let gone = build(&[a], &[a1], &cfg);
    let tx = render::incremental(&after, &gone, &keys);
    assert!(
        tx.contains("delete element ip kube-proxy service-ips { 10.96.0.21 . tcp . 80 }"),
        "{tx}"
    );
    assert!(!tx.contains("add "), "{tx}");
}

/// A LoadBalancer Service of upstream's nftables proxier tests (`ns/name`, port p80,
/// NodePort 3001, cluster policy) with these ingress IPs and source ranges.
fn upstream_lb(ns: &str, name: &str, ips: &[&str], ranges: &[&str]) -> Service {
    serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": name},
        "spec": {"type": "LoadBalancer", "clusterIP": "172.30.0.41",
                 "ports": [{"name": "p80", "port": 80, "protocol": "TCP", "nodePort": 3001}],
                 "loadBalancerSourceRanges": ranges},
        "status": {"loadBalancer": {"ingress": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>()}},
    }))
    .unwrap()
}

fn upstream_slice(ns: &str, name: &str, ip: &str) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": format!("{name}-1"),
                     "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "ports": [{"name": "p80", "port": 80, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip]}],
    }))
    .unwrap()
}

/// Upstream's TestOverallNFTablesRules, svc5's firewall (pkg/proxy/nftables/
/// proxier_test.go): its load-balancer IP goes through `firewall-ips` to a chain that
/// drops the sources outside " 203.0.113.0/25" (whitespace and all), before DNAT; the
/// node's IP (192.168.0.2) is not in the range.
#[test]
fn load_balancer_source_ranges_firewall_chain() {
    let mut cfg = ProxyConfig::new(IpFamily::V4, "test-node");
    cfg.cluster_cidrs = parse_cidrs("10.0.0.0/8").unwrap();
    cfg.node_ip = Some("192.168.0.2".parse().unwrap());
    let svc = upstream_lb("ns5", "svc5", &["5.6.7.8"], &[" 203.0.113.0/25"]);
    let sl = upstream_slice("ns5", "svc5", "10.180.0.3");
    let rs = build(std::slice::from_ref(&svc), std::slice::from_ref(&sl), &cfg);
    let got = service_part(&rs);
    let fw = "firewall-HVFWP5L3-ns5/svc5/tcp/p80";
    let ext = "external-HVFWP5L3-ns5/svc5/tcp/p80";
    for want in [
        format!("add chain ip kube-proxy {fw}"),
        format!("add rule ip kube-proxy {fw} ip saddr != {{ 203.0.113.0/25 }} drop"),
        format!("add element ip kube-proxy firewall-ips {{ 5.6.7.8 . tcp . 80 : goto {fw} }}"),
        format!("add element ip kube-proxy service-ips {{ 5.6.7.8 . tcp . 80 : goto {ext} }}"),
        format!("add element ip kube-proxy service-nodeports {{ tcp . 3001 : goto {ext} }}"),
    ] {
        assert!(
            lines(&got).contains(&want.as_str()),
            "missing {want:?} in\n{got}"
        );
    }
    assert_eq!(got.matches("firewall-").count(), 4, "{got}");

    // Upstream's TestLoadBalancer: a range holding the node's IP lets the node's
    // connections from the load-balancer IPs through as well; each IP is firewalled.
    let two = upstream_lb(
        "ns1",
        "svc1",
        &["1.2.3.4", "5.6.7.8"],
        &["192.168.0.0/24", " 203.0.113.0/25"],
    );
    let rs = build(&[two], &[upstream_slice("ns1", "svc1", "10.180.0.1")], &cfg);
    let got = service_part(&rs);
    let fw = "firewall-ULMVA6XW-ns1/svc1/tcp/p80";
    for want in [
        format!(
            "add rule ip kube-proxy {fw} ip saddr != {{ 192.168.0.0/24, 203.0.113.0/25, 1.2.3.4, 5.6.7.8 }} drop"
        ),
        format!("add element ip kube-proxy firewall-ips {{ 1.2.3.4 . tcp . 80 : goto {fw} }}"),
        format!("add element ip kube-proxy firewall-ips {{ 5.6.7.8 . tcp . 80 : goto {fw} }}"),
    ] {
        assert!(
            lines(&got).contains(&want.as_str()),
            "missing {want:?} in\n{got}"
        );
    }

    // Without endpoints the firewall still applies (nftables mode's usesFWChain needs
    // none): a blocked source is dropped, an allowed one rejected for want of endpoints.
    let rs = build(std::slice::from_ref(&svc), &[], &cfg);
    let got = service_part(&rs);
    let fw = "firewall-HVFWP5L3-ns5/svc5/tcp/p80";
    for want in [
        format!("add rule ip kube-proxy {fw} ip saddr != {{ 203.0.113.0/25 }} drop"),
        format!("add element ip kube-proxy firewall-ips {{ 5.6.7.8 . tcp . 80 : goto {fw} }}"),
        "add element ip kube-proxy no-endpoint-services { 5.6.7.8 . tcp . 80 comment \"ns5/svc5:p80\" : goto reject-chain }".to_string(),
    ] {
        assert!(lines(&got).contains(&want.as_str()), "missing {want:?} in\n{got}");
    }

    // No ranges, or one allowing everyone: no firewall.
    for ranges in [&[][..], &["203.0.113.0/25", "0.0.0.0/0"][..]] {
        let open = upstream_lb("ns5", "svc5", &["5.6.7.8"], ranges);
        let got = service_part(&build(&[open], std::slice::from_ref(&sl), &cfg));
        assert!(!got.contains("firewall"), "{ranges:?}:\n{got}");
    }

    // The ranges removed: the element goes before its chain, incrementally.
    let before = build(std::slice::from_ref(&svc), std::slice::from_ref(&sl), &cfg);
    let open = upstream_lb("ns5", "svc5", &["5.6.7.8"], &[]);
    let after = build(&[open], std::slice::from_ref(&sl), &cfg);
    let keys: Vec<String> = after.services.keys().cloned().collect();
    let tx = render::incremental(&before, &after, &keys);
    let pos = |l: &str| {
        lines(&tx)
            .iter()
            .position(|x| *x == l)
            .unwrap_or_else(|| panic!("missing {l:?} in\n{tx}"))
    };
    assert!(
        pos("delete element ip kube-proxy firewall-ips { 5.6.7.8 . tcp . 80 }")
            < pos(&format!("delete chain ip kube-proxy {fw}")),
        "{tx}"
    );
}

#[test]
fn incremental_updates_node_port_ips() {
    let cfg = config();
    let before = desired_ruleset(&[], &[], Some(&node(&["192.168.1.10"])), &[], &cfg);
    let after = desired_ruleset(&[], &[], Some(&node(&["192.168.1.11"])), &[], &cfg);
    assert_eq!(
        render::incremental(&before, &after, &Vec::new()),
        "delete element ip kube-proxy nodeport-ips { 192.168.1.10 }\nadd element ip kube-proxy nodeport-ips { 192.168.1.11 }\n"
    );
}

#[test]
fn full_sync_flushes_existing_and_deletes_stale_objects() {
    let cfg = config();
    let svc = service("web", "10.96.0.20", json!({"sessionAffinity": "ClientIP"}));
    let sl = slice("web", "web-abc", &[ready("10.244.0.5", NODE)]);
    let rs = build(&[svc], &[sl], &cfg);
    // Nothing there: the full sync is the dump.
    assert_eq!(
        render::full_sync(&rs, &ExistingObjects::default()),
        render::dump(&rs)
    );
    let aff = "affinity-56LWUB6P-ns/web/tcp/http__10.244.0.5/8080";
    let existing = ExistingObjects {
        table: true,
        chains: ["services", "service-OLD-ns/old/tcp/"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        sets: [
            (aff.to_string(), Some(10800)),
            ("affinity-OLD".to_string(), Some(10800)),
            ("nodeport-ips".to_string(), None),
        ]
        .into_iter()
        .collect(),
        maps: ["service-ips".to_string()].into_iter().collect(),
    };
    let tx = render::full_sync(&rs, &existing);
    let head: Vec<&str> = lines(&tx).into_iter().take(6).collect();
    assert_eq!(
        head,
        [
            "flush chain ip kube-proxy service-OLD-ns/old/tcp/",
            "flush chain ip kube-proxy services",
            "delete map ip kube-proxy service-ips",
            "delete set ip kube-proxy affinity-OLD",
            "delete set ip kube-proxy nodeport-ips",
            "delete chain ip kube-proxy service-OLD-ns/old/tcp/",
        ]
    );
    assert!(
        !tx.contains(&format!("delete set ip kube-proxy {aff}")),
        "a live affinity set keeps its entries:\n{tx}"
    );
    assert!(tx.ends_with(&render::dump(&rs)));
}
