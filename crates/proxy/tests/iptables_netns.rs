//! iptables mode applied for real, in throwaway network namespaces (the helpers of
//! netns.rs, in common/): the sync path kube-proxy runs (`FamilyProxier::sync`:
//! iptables-save, iptables-restore --noflush, the jumps from the built-in chains)
//! programs the "host" namespace; traffic to the ClusterIP and the NodePorts (node
//! address and localhost) reaches the pod; with no endpoints the ClusterIP is refused
//! at once by the filter table's REJECT; partial syncs keep it right; a deleted
//! Service's chains go; a flushed iptables is noticed through the canary; switching
//! the namespace to nftables mode and back leaves only the active mode's rules;
//! loadBalancerSourceRanges let one source through and drop another. Needs root, `ip`, `iptables`, `nft`, busybox and curl; without root it says so
//! and checks nothing.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::objects::{lb_service, lb_slice, web_service, web_slice};
use common::{
    add_load_balancer_clients, curl, curl_from, in_netns, not_root, ns_output, setup, sh,
    start_server,
};
use ferrokube_proxy::backend::{Backend, FamilyProxier, cleanup_all, cleanup_other_mode};
use ferrokube_proxy::config::ProxyMode;
use ferrokube_proxy::iptables::Iptables;
use ferrokube_proxy::net::{IpFamily, parse_cidrs};
use ferrokube_proxy::nft::Nft;
use ferrokube_proxy::rules::{NodePortAddresses, ProxyConfig};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

/// As kube-proxy configures iptables mode by default: NodePorts on every local
/// address, localhost included.
fn proxier(ipt: &Iptables) -> FamilyProxier {
    let mut cfg = ProxyConfig::new(IpFamily::V4, "node-a");
    cfg.cluster_cidrs = parse_cidrs("10.244.0.0/16").unwrap();
    cfg.node_port_addresses = NodePortAddresses::MatchAll;
    let p = Backend::Iptables(ipt.clone()).proxier(cfg);
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "node-a"},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.244.0.1"}]},
    }))
    .unwrap();
    p.objects(|o| o.node_updated(Some(Arc::new(node))));
    p
}

/// One sync that must succeed; returns whether it was full.
async fn sync(p: &FamilyProxier, canary_interval: Duration) -> bool {
    let done = p.sync(canary_interval).await;
    assert!(done.ok, "sync failed: {done:?}");
    done.full
}

fn save(ns: &str, table: &str) -> String {
    ns_output(ns, &["iptables-save", "-t", table])
}

const HELLO: &str = "hello from the pod\n";

#[tokio::test]
async fn iptables_mode_in_a_namespace() {
    if not_root() {
        eprintln!("not root: network namespaces unavailable, nothing checked");
        return;
    }
    let mut ns = setup('i');
    start_server(&mut ns);
    let host = ns.host.clone();
    let ipt = Iptables::with_prefix(in_netns(&host));
    let mut nft_argv = in_netns(&host);
    nft_argv.push("nft".into());
    let nft = Nft::with_command(nft_argv);
    let period = Duration::from_secs(3600);

    let p = proxier(&ipt);
    p.objects(|o| {
        o.service_updated(web_service());
        o.slice_updated(web_slice(true));
    });
    // Before any rule the Service IP dies in kube-svc0.
    assert_ne!(curl(&host, "http://10.96.0.20/").0, 0);

    assert!(sync(&p, period).await, "first sync is full");
    let nat = save(&host, "nat");
    assert!(nat.contains(":KUBE-SVC-"), "{nat}");
    assert!(nat.contains(":KUBE-SEP-"), "{nat}");
    assert!(
        nat.contains(
            "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
        ),
        "{nat}"
    );
    assert!(
        nat.contains(
            "-A KUBE-SERVICES -d 10.96.0.20/32 -p tcp -m comment --comment \"default/web cluster IP\" -m tcp --dport 80 -j KUBE-SVC-"
        ),
        "{nat}"
    );
    assert!(nat.contains("-j MASQUERADE --random-fully"), "{nat}");
    for url in [
        "http://10.96.0.20/",
        "http://10.244.0.1:30080/",
        "http://127.0.0.1:30080/",
    ] {
        let (code, body) = curl(&host, url);
        assert_eq!((code, body.as_str()), (0, HELLO), "{url}");
    }

    // The endpoint turns unready: a partial sync; the filter table rejects at once
    // (ICMP port unreachable -> curl exit 7) instead of the packet dying in kube-svc0.
    p.objects(|o| o.slice_updated(web_slice(false)));
    assert!(!sync(&p, period).await, "partial");
    let filter = save(&host, "filter");
    assert!(
        filter.contains(
            "-A KUBE-SERVICES -d 10.96.0.20/32 -p tcp -m comment --comment \"default/web has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable"
        ),
        "{filter}"
    );
    assert!(!save(&host, "nat").contains("KUBE-SVC-"), "chains deleted");
    for url in [
        "http://10.96.0.20/",
        "http://10.244.0.1:30080/",
        "http://127.0.0.1:30080/",
    ] {
        let started = Instant::now();
        assert_eq!(curl(&host, url).0, 7, "{url} refused");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{url}: refused, not timed out"
        );
    }

    // Ready again, partially.
    p.objects(|o| o.slice_updated(web_slice(true)));
    assert!(!sync(&p, period).await);
    assert_eq!(curl(&host, "http://10.96.0.20/").1, HELLO);
    assert!(!save(&host, "filter").contains("has no endpoints"));

    // A second full sync does not duplicate the jumps.
    p.invalidate();
    assert!(sync(&p, period).await);
    let nat = save(&host, "nat");
    assert_eq!(
        nat.matches(
            "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
        )
        .count(),
        1,
        "{nat}"
    );

    // Someone flushes iptables (as a firewall reload does): the canary is gone, the
    // next sync is full and puts everything back.
    for table in ["mangle", "nat", "filter"] {
        sh(&["ip", "netns", "exec", &host, "iptables", "-t", table, "-F"]);
        sh(&["ip", "netns", "exec", &host, "iptables", "-t", table, "-X"]);
    }
    assert_ne!(curl(&host, "http://10.96.0.20/").0, 0);
    assert!(sync(&p, Duration::ZERO).await, "canary gone: full resync");
    assert_eq!(curl(&host, "http://10.96.0.20/").1, HELLO);
    assert!(!sync(&p, Duration::ZERO).await, "canary back: partial");

    // The Service is deleted: its chains and rules go.
    p.objects(|o| o.service_deleted(&web_service()));
    assert!(!sync(&p, period).await);
    let nat = save(&host, "nat");
    assert!(
        !nat.contains("KUBE-SVC-") && !nat.contains("KUBE-SEP-"),
        "{nat}"
    );
    assert!(!nat.contains("10.96.0.20"), "{nat}");

    // A restarted proxy (fresh state) removes the chains a previous run left.
    let old = proxier(&ipt);
    old.objects(|o| {
        o.service_updated(web_service());
        o.slice_updated(web_slice(true));
    });
    assert!(sync(&old, period).await);
    assert!(save(&host, "nat").contains(":KUBE-SEP-"));
    let restarted = proxier(&ipt);
    assert!(sync(&restarted, period).await);
    let nat = save(&host, "nat");
    assert!(
        !nat.contains("KUBE-SVC-") && !nat.contains("KUBE-SEP-"),
        "{nat}"
    );
    assert!(nat.contains(":KUBE-SERVICES"), "{nat}");

    // Switch to nftables mode: iptables mode's rules all go, nftables takes over.
    let p = proxier(&ipt);
    p.objects(|o| {
        o.service_updated(web_service());
        o.slice_updated(web_slice(true));
    });
    assert!(sync(&p, period).await);
    let cleaned = cleanup_other_mode(ProxyMode::Nftables, &nft, &ipt)
        .await
        .unwrap();
    assert_eq!(cleaned.iptables, [IpFamily::V4]);
    let everything = ns_output(&host, &["iptables-save"]);
    assert!(!everything.contains("KUBE-"), "{everything}");
    let mut cfg = ProxyConfig::new(IpFamily::V4, "node-a");
    cfg.cluster_cidrs = parse_cidrs("10.244.0.0/16").unwrap();
    let n = Backend::Nftables(nft.clone()).proxier(cfg);
    n.objects(|o| {
        o.service_updated(web_service());
        o.slice_updated(web_slice(true));
    });
    assert!(sync(&n, period).await);
    assert_eq!(curl(&host, "http://10.96.0.20/").1, HELLO);
    assert!(nft.existing(IpFamily::V4).await.unwrap().table);

    // And back to iptables mode: the nftables table goes.
    let cleaned = cleanup_other_mode(ProxyMode::Iptables, &nft, &ipt)
        .await
        .unwrap();
    assert_eq!(cleaned.nftables, [IpFamily::V4]);
    assert!(!nft.existing(IpFamily::V4).await.unwrap().table);
    let p = proxier(&ipt);
    p.objects(|o| {
        o.service_updated(web_service());
        o.slice_updated(web_slice(true));
    });
    assert!(sync(&p, period).await);
    assert_eq!(curl(&host, "http://10.96.0.20/").1, HELLO);
    assert!(save(&host, "nat").contains(":KUBE-SVC-"));
    assert!(!ns_output(&host, &["nft", "list", "tables"]).contains("kube-proxy"));

    // --cleanup: nothing of either mode is left; a second one finds nothing.
    let cleaned = cleanup_all(&nft, &ipt).await.unwrap();
    assert_eq!(cleaned.iptables, [IpFamily::V4]);
    assert!(!ns_output(&host, &["iptables-save"]).contains("KUBE-"));
    let again = cleanup_all(&nft, &ipt).await.unwrap();
    assert!(again.iptables.is_empty() && again.nftables.is_empty());
    drop(ns);
}

/// Services of every shape (UDP, ClientIP affinity, external and internal traffic
/// policy Local, externalIPs and load-balancer IPs, a health check node port, no
/// endpoints, several endpoints) in both families: everything the rules generate is
/// accepted by iptables-restore and ip6tables-restore, and the jumps are in place.
#[tokio::test]
async fn every_rule_form_is_accepted_in_both_families() {
    if not_root() {
        eprintln!("not root: network namespaces unavailable, nothing checked");
        return;
    }
    let ns = common::Netns(format!("fkp-forms-{}", std::process::id()));
    sh(&["ip", "netns", "add", &ns.0]);
    let ipt = Iptables::with_prefix(in_netns(&ns.0));
    let spec = |name: &str, v4: &str, v6: &str, extra: serde_json::Value| -> Arc<Service> {
        let mut s = json!({
            "metadata": {"namespace": "default", "name": name},
            "spec": {"clusterIP": v4, "clusterIPs": [v4, v6], "ipFamilies": ["IPv4", "IPv6"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30081},
                               {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053}]},
        });
        for (k, v) in extra.as_object().unwrap() {
            s["spec"][k] = v.clone();
        }
        if name == "lb" {
            s["status"] = json!({"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}, {"ip": "2001:db8::7"}]}});
        }
        Arc::new(serde_json::from_value(s).unwrap())
    };
    let services = [
        spec(
            "lb",
            "10.96.0.30",
            "fd00:96::30",
            json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 32000,
                   "externalIPs": ["203.0.113.9", "2001:db8::9"], "sessionAffinity": "ClientIP",
                   "loadBalancerSourceRanges": ["192.0.2.0/24", "2001:db8:1::/64"]}),
        ),
        spec(
            "local",
            "10.96.0.31",
            "fd00:96::31",
            json!({"type": "NodePort", "internalTrafficPolicy": "Local", "externalTrafficPolicy": "Local"}),
        ),
        spec(
            "empty",
            "10.96.0.32",
            "fd00:96::32",
            json!({"type": "NodePort"}),
        ),
    ];
    let slices = |name: &str| -> Vec<Arc<EndpointSlice>> {
        [
            ("IPv4", ["10.244.0.5", "10.244.1.6"]),
            ("IPv6", ["fd00:10::5", "fd00:10:1::6"]),
        ]
        .into_iter()
        .map(|(family, ips)| {
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"namespace": "default", "name": format!("{name}-{family}"),
                                 "labels": {"kubernetes.io/service-name": name}},
                    "addressType": family,
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                              {"name": "dns", "port": 5353, "protocol": "UDP"}],
                    "endpoints": [{"addresses": [ips[0]], "nodeName": "node-a"},
                                  {"addresses": [ips[1]], "nodeName": "node-b"}],
                }))
                .unwrap(),
            )
        })
        .collect()
    };
    for family in [IpFamily::V4, IpFamily::V6] {
        let mut cfg = ProxyConfig::new(family, "node-a");
        cfg.cluster_cidrs = parse_cidrs("10.244.0.0/16,fd00:10::/48").unwrap();
        cfg.node_port_addresses = NodePortAddresses::MatchAll;
        let p = Backend::Iptables(ipt.clone()).proxier(cfg);
        p.objects(|o| {
            for s in &services {
                o.service_updated(s.clone());
            }
            for name in ["lb", "local"] {
                for s in slices(name) {
                    o.slice_updated(s);
                }
            }
        });
        assert!(sync(&p, Duration::from_secs(3600)).await, "{family:?}");
        let save_cmd = match family {
            IpFamily::V4 => "iptables-save",
            IpFamily::V6 => "ip6tables-save",
        };
        let all = ns_output(&ns.0, &[save_cmd]);
        for want in [
            "-j KUBE-SVL-",
            "-m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-",
            "-p udp -m comment --comment \"default/lb:dns\" -m udp --dport 30053 -j KUBE-EXT-",
            "\"default/empty:http has no endpoints\"",
            "\"default/lb:http health check node port\" -m tcp --dport 32000 -j ACCEPT",
            "-m statistic --mode random --probability 0.50000000000",
            "-A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
            "-m comment --comment \"default/lb:http loadbalancer IP\" -m tcp --dport 80 -j KUBE-FW-",
            "-m comment --comment \"other traffic to default/lb:http will be dropped by KUBE-PROXY-FIREWALL\"",
            "-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL",
        ] {
            assert!(all.contains(want), "{family:?}: missing {want:?} in\n{all}");
        }
        let (range, lb_ip) = match family {
            IpFamily::V4 => ("192.0.2.0/24", "198.51.100.7/32"),
            IpFamily::V6 => ("2001:db8:1::/64", "2001:db8::7/128"),
        };
        assert!(
            all.contains(&format!(
                "-s {range} -m comment --comment \"default/lb:http loadbalancer IP\" -j KUBE-EXT-"
            )),
            "{family:?}: {all}"
        );
        assert!(
            all.contains(&format!("-A KUBE-PROXY-FIREWALL -d {lb_ip} -p tcp -m comment --comment \"default/lb:http traffic not accepted by KUBE-FW-")),
            "{family:?}: {all}"
        );
        match family {
            IpFamily::V4 => {
                assert!(all.contains("-A INPUT -j KUBE-FIREWALL"), "{all}");
                assert!(all.contains("--to-destination 10.244.0.5:8080"), "{all}");
            }
            IpFamily::V6 => {
                assert!(!all.contains("KUBE-FIREWALL"), "{all}");
                assert!(all.contains("--to-destination [fd00:10::5]:8080"), "{all}");
                assert!(all.contains("! -d ::1/128"), "{all}");
            }
        }
    }
    assert_eq!(
        cleanup_all(&Nft::with_command(vec!["true".into()]), &ipt)
            .await
            .unwrap()
            .iptables,
        [IpFamily::V4, IpFamily::V6]
    );
    assert!(!ns_output(&ns.0, &["iptables-save"]).contains("KUBE-"));
    assert!(!ns_output(&ns.0, &["ip6tables-save"]).contains("KUBE-"));
}

/// loadBalancerSourceRanges in iptables mode, for real: a LoadBalancer Service whose
/// load-balancer IP (198.51.100.10) is routed into the host namespace, with ranges
/// allowing the host's 192.0.2.10 and the pod's 10.244.0.5. Those reach the pod
/// (through KUBE-FW- to KUBE-EXT-: from the host, and from the pod back to itself
/// through the host); 192.0.2.20 (host) and 10.244.0.6 (pod namespace) are not DNATed,
/// and KUBE-PROXY-FIREWALL drops their packets (the bounded curl times out). Without
/// the ranges, everyone gets through.
#[tokio::test]
async fn load_balancer_source_ranges_in_a_namespace() {
    if not_root() {
        eprintln!("not root: network namespaces unavailable, nothing checked");
        return;
    }
    let mut ns = setup('f');
    start_server(&mut ns);
    add_load_balancer_clients(&ns);
    let (host, pod) = (ns.host.clone(), ns.pod.clone());
    let ipt = Iptables::with_prefix(in_netns(&host));
    let period = Duration::from_secs(3600);
    let url = "http://198.51.100.10/";

    let p = proxier(&ipt);
    p.objects(|o| {
        o.service_updated(lb_service(&["192.0.2.10/32", "10.244.0.5/32"]));
        o.slice_updated(lb_slice());
    });
    assert!(sync(&p, period).await);
    let nat = save(&host, "nat");
    assert!(nat.contains(":KUBE-FW-"), "{nat}");
    assert!(
        save(&host, "filter").contains("-A KUBE-PROXY-FIREWALL -d 198.51.100.10/32 -p tcp"),
        "{}",
        save(&host, "filter")
    );
    for (client, source) in [(&host, "192.0.2.10"), (&pod, "10.244.0.5")] {
        assert_eq!(
            curl_from(client, source, url, 3),
            (0, HELLO.to_string()),
            "{source} is allowed"
        );
    }
    for (client, source) in [(&host, "192.0.2.20"), (&pod, "10.244.0.6")] {
        let started = Instant::now();
        assert_eq!(
            curl_from(client, source, url, 2).0,
            28,
            "{source} is dropped"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    // The ranges go (a partial sync): every source gets through, the chain is gone.
    p.objects(|o| o.service_updated(lb_service(&[])));
    assert!(!sync(&p, period).await, "partial");
    assert!(!save(&host, "nat").contains("KUBE-FW-"));
    assert!(!save(&host, "filter").contains("198.51.100.10"));
    for (client, source) in [(&host, "192.0.2.20"), (&pod, "10.244.0.6")] {
        assert_eq!(
            curl_from(client, source, url, 3),
            (0, HELLO.to_string()),
            "{source} without ranges"
        );
    }
    cleanup_all(&Nft::with_command(vec!["true".into()]), &ipt)
        .await
        .unwrap();
    drop(ns);
}
