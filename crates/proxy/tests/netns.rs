//! The rules applied for real, in throwaway network namespaces: a "host" namespace
//! where the proxier programs its table, and a "pod" namespace behind a veth pair
//! serving HTTP with busybox. Traffic to the ClusterIP and the NodePorts (node address
//! and localhost) reaches the pod; with no endpoints it is refused at once; the
//! incremental transactions keep it right; loadBalancerSourceRanges let one source
//! through to a load-balancer IP and drop another. Needs root, `ip`, `nft`, busybox and curl
//! (all on the project's machines); without root it says so and checks nothing.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::objects::{lb_service, lb_slice, web_service, web_slice};
use common::{add_load_balancer_clients, curl, curl_from, in_netns, not_root, setup, start_server};
use ferrokube_proxy::net::{IpFamily, parse_cidrs};
use ferrokube_proxy::nft::Nft;
use ferrokube_proxy::proxier::Proxier;
use ferrokube_proxy::rules::ProxyConfig;
use k8s_openapi::api::core::v1::Node;
use serde_json::json;

async fn sync(p: &mut Proxier, nft: &Nft) -> bool {
    let existing = if p.next_is_full() {
        Some(nft.existing(IpFamily::V4).await.unwrap())
    } else {
        None
    };
    let plan = p.plan(existing.as_ref());
    if !plan.transaction.is_empty() {
        nft.apply(&plan.transaction)
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", plan.transaction));
    }
    p.applied(&plan);
    plan.full
}

#[tokio::test]
async fn cluster_ip_and_node_ports_reach_a_pod_in_a_namespace() {
    if not_root() {
        eprintln!("not root: network namespaces unavailable, nothing checked");
        return;
    }
    let mut ns = setup('n');
    start_server(&mut ns);
    let mut argv = in_netns(&ns.host);
    argv.push("nft".into());
    let nft = Nft::with_command(argv);
    let mut cfg = ProxyConfig::new(IpFamily::V4, "node-a");
    cfg.cluster_cidrs = parse_cidrs("10.244.0.0/16").unwrap();
    let mut p = Proxier::new(cfg);
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "node-a"},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.244.0.1"},
                                 {"type": "InternalIP", "address": "127.0.0.1"}]},
    }))
    .unwrap();
    p.node_updated(Some(Arc::new(node)));
    p.service_updated(web_service());
    p.slice_updated(web_slice(true));

    // Before any rule: the Service IP dies in kube-svc0 (curl times out or fails,
    // nothing answers).
    assert_ne!(curl(&ns.host, "http://10.96.0.20/").0, 0);

    assert!(sync(&mut p, &nft).await, "first sync is full");
    let listing = nft.list(IpFamily::V4).await.unwrap();
    assert!(
        listing.contains("10.96.0.20 . tcp . 80 : goto service-"),
        "{listing}"
    );
    for url in [
        "http://10.96.0.20/",
        "http://10.244.0.1:30080/",
        "http://127.0.0.1:30080/",
    ] {
        let (code, body) = curl(&ns.host, url);
        assert_eq!((code, body.as_str()), (0, "hello from the pod\n"), "{url}");
    }

    // The endpoint turns unready: an incremental sync, and the ClusterIP and the
    // NodePort refuse at once (ICMP port unreachable -> curl exit 7) instead of hanging.
    p.slice_updated(web_slice(false));
    assert!(!sync(&mut p, &nft).await, "incremental");
    let listing = nft.list(IpFamily::V4).await.unwrap();
    assert!(
        !listing.contains("chain service-"),
        "service chains deleted:\n{listing}"
    );
    for url in [
        "http://10.96.0.20/",
        "http://10.244.0.1:30080/",
        "http://127.0.0.1:30080/",
    ] {
        let started = std::time::Instant::now();
        assert_eq!(curl(&ns.host, url).0, 7, "{url} refused");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{url}: refused, not timed out"
        );
    }
    // An IP in the Service CIDR no Service has still dies locally.
    assert_eq!(
        curl(&ns.host, "http://10.96.0.99/").0,
        28,
        "timed out in kube-svc0"
    );

    // Ready again, incrementally.
    p.slice_updated(web_slice(true));
    assert!(!sync(&mut p, &nft).await);
    assert_eq!(
        curl(&ns.host, "http://10.96.0.20/").1,
        "hello from the pod\n"
    );

    // A restarted proxier (new model, same kernel table) converges with a full sync.
    let mut cfg = ProxyConfig::new(IpFamily::V4, "node-a");
    cfg.cluster_cidrs = parse_cidrs("10.244.0.0/16").unwrap();
    let mut restarted = Proxier::new(cfg);
    restarted.service_updated(web_service());
    restarted.slice_updated(web_slice(true));
    assert!(sync(&mut restarted, &nft).await);
    assert_eq!(
        curl(&ns.host, "http://10.96.0.20/").1,
        "hello from the pod\n"
    );

    // --cleanup: the table is gone.
    assert_eq!(nft.cleanup().await.unwrap(), [IpFamily::V4]);
    assert!(!nft.existing(IpFamily::V4).await.unwrap().table);
    drop(ns);
}

/// loadBalancerSourceRanges in nftables mode, for real: a LoadBalancer Service whose
/// load-balancer IP (198.51.100.10) is routed into the host namespace, with ranges
/// allowing the host's 192.0.2.10 and the pod's 10.244.0.5. Those reach the pod (the
/// output and the prerouting firewall-check hooks let them on to DNAT); 192.0.2.20
/// (host) and 10.244.0.6 (pod namespace) are dropped before DNAT (the bounded curl
/// times out). The ranges removed incrementally, everyone gets through.
#[tokio::test]
async fn load_balancer_source_ranges_in_a_namespace() {
    if not_root() {
        eprintln!("not root: network namespaces unavailable, nothing checked");
        return;
    }
    let mut ns = setup('l');
    start_server(&mut ns);
    add_load_balancer_clients(&ns);
    let (host, pod) = (ns.host.clone(), ns.pod.clone());
    let mut argv = in_netns(&host);
    argv.push("nft".into());
    let nft = Nft::with_command(argv);
    let mut cfg = ProxyConfig::new(IpFamily::V4, "node-a");
    cfg.cluster_cidrs = parse_cidrs("10.244.0.0/16").unwrap();
    let mut p = Proxier::new(cfg);
    p.service_updated(lb_service(&["192.0.2.10/32", "10.244.0.5/32"]));
    p.slice_updated(lb_slice());
    let url = "http://198.51.100.10/";

    assert!(sync(&mut p, &nft).await);
    let listing = nft.list(IpFamily::V4).await.unwrap();
    assert!(
        listing.contains("198.51.100.10 . tcp . 80 : goto firewall-"),
        "{listing}"
    );
    for (client, source) in [(&host, "192.0.2.10"), (&pod, "10.244.0.5")] {
        assert_eq!(
            curl_from(client, source, url, 3),
            (0, "hello from the pod\n".to_string()),
            "{source} is allowed"
        );
    }
    for (client, source) in [(&host, "192.0.2.20"), (&pod, "10.244.0.6")] {
        let started = std::time::Instant::now();
        assert_eq!(
            curl_from(client, source, url, 2).0,
            28,
            "{source} is dropped"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    // The ranges go, incrementally: every source gets through, the chain is gone.
    p.service_updated(lb_service(&[]));
    assert!(!sync(&mut p, &nft).await, "incremental");
    let listing = nft.list(IpFamily::V4).await.unwrap();
    assert_eq!(
        listing.matches("chain firewall-").count(),
        1,
        "only firewall-check is left:\n{listing}"
    );
    assert!(!listing.contains("goto firewall-"), "{listing}");
    for (client, source) in [(&host, "192.0.2.20"), (&pod, "10.244.0.6")] {
        assert_eq!(
            curl_from(client, source, url, 3),
            (0, "hello from the pod\n".to_string()),
            "{source} without ranges"
        );
    }
    assert_eq!(nft.cleanup().await.unwrap(), [IpFamily::V4]);
    drop(ns);
}
