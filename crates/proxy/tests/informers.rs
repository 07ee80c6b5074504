//! The running proxy (`run::run`: informers -> proxier -> nft, or iptables) against a
//! real apiserver (TestApiServer), programming a table in a throwaway network namespace:
//! a Service and its EndpointSlice become rules; deleting the slice turns them into a
//! reject; a Service another proxy implements is ignored; the node gets upstream's
//! start-up events; iptables mode does the same through iptables-restore. Needs root
//! for the namespace; without root it says so and checks nothing (the failed start
//! needs no namespace and always runs).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Netns, not_root};
use ferrokube_proxy::backend::Backend;
use ferrokube_proxy::iptables::Iptables;
use ferrokube_proxy::net::{IpFamily, parse_cidrs};
use ferrokube_proxy::nft::Nft;
use ferrokube_proxy::rules::{NodePortAddresses, ProxyConfig};
use ferrokube_proxy::run::{RunConfig, run};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Polls the `default` namespace's events.k8s.io Events until one about node `node`
/// has `reason` (at most 30 s; the recorder writes from a queue).
async fn node_event(client: &kube::Client, node: &str, reason: &str) -> Event {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = events.list(&Default::default()).await.ok().and_then(|l| {
            l.items.into_iter().find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node)
            })
        });
        if let Some(event) = found {
            return event;
        }
        assert!(
            Instant::now() < deadline,
            "no {reason} event about node {node}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls the table listing until `pred` holds (at most 30 s).
async fn wait_for(nft: &Nft, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    while Instant::now() < deadline {
        last = nft.list(IpFamily::V4).await.unwrap_or_default();
        if pred(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}; table:\n{last}");
}

/// A throwaway network namespace for the proxy's rules.
fn netns(name: &str) -> anyhow::Result<Netns> {
    let ns = Netns(format!("{name}-{}", std::process::id()));
    anyhow::ensure!(
        Command::new("ip")
            .args(["netns", "add", &ns.0])
            .status()?
            .success(),
        "ip netns add {}",
        ns.0
    );
    Ok(ns)
}

/// The proxy of node `node-a` (pods in 10.244.0.0/16) on `server`'s objects, with
/// `backend`; its task and the token that stops it.
fn spawn_proxy(
    server: &TestApiServer,
    backend: Backend,
    node_port_addresses: NodePortAddresses,
) -> anyhow::Result<(
    tokio::task::JoinHandle<Result<(), ferrokube_proxy::run::RunError>>,
    CancellationToken,
)> {
    let mut cfg = ProxyConfig::new(IpFamily::V4, "node-a");
    cfg.cluster_cidrs = parse_cidrs("10.244.0.0/16").map_err(anyhow::Error::msg)?;
    cfg.node_port_addresses = node_port_addresses;
    let cancel = CancellationToken::new();
    let proxy = tokio::spawn(run(
        server.client.clone(),
        RunConfig {
            proxies: vec![cfg],
            sync_period: Duration::from_secs(30),
            min_sync_period: Duration::from_millis(100),
            healthz_addr: None,
            metrics_addr: None,
            backend,
        },
        cancel.clone(),
    ));
    Ok((proxy, cancel))
}

/// Creates `default/<name>` through the API (port `http` 80 -> 8080, `labels`); its
/// allocated cluster IP.
async fn create_service(
    services: &Api<Service>,
    name: &str,
    labels: serde_json::Value,
) -> anyhow::Result<String> {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }))?;
    let svc = services.create(&PostParams::default(), &svc).await?;
    Ok(svc
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("allocated ClusterIP"))
}

/// `web-1`, the slice of `web`: the ready pod 10.244.0.5:8080 on `node-a`.
fn web_slice() -> anyhow::Result<EndpointSlice> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "web-1", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.244.0.5"], "nodeName": "node-a", "conditions": {"ready": true}}],
    }))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_and_slices_from_the_api_become_rules() -> anyhow::Result<()> {
    if not_root() {
        eprintln!("not root: network namespaces unavailable, nothing checked");
        return Ok(());
    }
    let server = TestApiServer::start().await?;
    let ns = netns("fkp-informers")?;
    let nft = Nft::with_command(
        ["ip", "netns", "exec", &ns.0, "nft"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
    );
    let (proxy, cancel) = spawn_proxy(
        &server,
        Backend::Nftables(nft.clone()),
        NodePortAddresses::Primary,
    )?;

    let services: Api<Service> = Api::namespaced(server.client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(server.client.clone(), "default");
    let ip = create_service(&services, "web", json!({})).await?;
    let other_ip = create_service(
        &services,
        "other",
        json!({"service.kubernetes.io/service-proxy-name": "x"}),
    )
    .await?;

    // Upstream's birth cry, once the informers run.
    let started = node_event(&server.client, "node-a", "Starting").await;
    assert_eq!(started.type_.as_deref(), Some("Normal"));
    assert_eq!(started.action.as_deref(), Some("StartKubeProxy"));
    assert_eq!(started.reporting_controller.as_deref(), Some("kube-proxy"));
    let regarding = started.regarding.unwrap_or_default();
    assert_eq!(regarding.kind.as_deref(), Some("Node"));
    assert_eq!(regarding.uid.as_deref(), Some("node-a"));

    // No endpoints yet: rejected.
    let reject = format!("{ip} . tcp . 80 comment \"default/web:http\" : goto reject-chain");
    wait_for(&nft, "the reject element", |t| t.contains(&reject)).await;

    slices.create(&PostParams::default(), &web_slice()?).await?;
    let table = wait_for(&nft, "the service element", |t| {
        t.contains(&format!("{ip} . tcp . 80 : goto service-"))
    })
    .await;
    assert!(table.contains("dnat to 10.244.0.5:8080"), "{table}");
    assert!(
        !table.contains(&other_ip),
        "another proxy's Service is ignored:\n{table}"
    );

    slices.delete("web-1", &DeleteParams::default()).await?;
    wait_for(&nft, "the reject element again", |t| {
        t.contains(&reject) && !t.contains("dnat to 10.244.0.5")
    })
    .await;

    services.delete("web", &DeleteParams::default()).await?;
    wait_for(&nft, "the Service's rules to go", |t| !t.contains(&ip)).await;

    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(30), proxy).await???;
    nft.cleanup().await?;
    drop(ns);
    server.stop().await;
    Ok(())
}

/// Polls `iptables-save -t <table>` in the namespace until `pred` holds (at most 30 s).
async fn wait_for_iptables(
    ns: &str,
    table: &str,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    while Instant::now() < deadline {
        last = common::ns_output(ns, &["iptables-save", "-t", table]);
        if pred(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}; {table} table:\n{last}");
}

/// The same runner in iptables mode: a Service without endpoints is rejected in the
/// filter table, its endpoints become KUBE-SVC-/KUBE-SEP- chains, and its deletion
/// removes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iptables_mode_from_the_api() -> anyhow::Result<()> {
    if not_root() {
        eprintln!("not root: network namespaces unavailable, nothing checked");
        return Ok(());
    }
    let server = TestApiServer::start().await?;
    let ns = netns("fkp-informers-ipt")?;
    let ipt = Iptables::with_prefix(common::in_netns(&ns.0));
    let (proxy, cancel) = spawn_proxy(
        &server,
        Backend::Iptables(ipt.clone()),
        NodePortAddresses::MatchAll,
    )?;

    let services: Api<Service> = Api::namespaced(server.client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(server.client.clone(), "default");
    let ip = create_service(&services, "web", json!({})).await?;

    // No endpoints yet: rejected by the filter table.
    let reject = format!(
        "-A KUBE-SERVICES -d {ip}/32 -p tcp -m comment --comment \"default/web:http has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable"
    );
    wait_for_iptables(&ns.0, "filter", "the REJECT rule", |t| t.contains(&reject)).await;

    slices.create(&PostParams::default(), &web_slice()?).await?;
    let nat = wait_for_iptables(&ns.0, "nat", "the service chain", |t| {
        t.contains(&format!("-d {ip}/32 -p tcp -m comment --comment \"default/web:http cluster IP\" -m tcp --dport 80 -j KUBE-SVC-"))
    })
    .await;
    assert!(
        nat.contains("-j DNAT --to-destination 10.244.0.5:8080"),
        "{nat}"
    );
    assert!(
        !common::ns_output(&ns.0, &["iptables-save", "-t", "filter"]).contains(&reject),
        "no REJECT with an endpoint"
    );

    services.delete("web", &DeleteParams::default()).await?;
    // (The apiserver's own default/kubernetes Service keeps its chains.)
    let web_chains: std::collections::BTreeSet<String> = nat
        .lines()
        .filter(|l| l.contains("default/web:http"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|c| c.starts_with("KUBE-SVC-") || c.starts_with("KUBE-SEP-"))
        .map(str::to_string)
        .collect();
    assert_eq!(web_chains.len(), 2, "{nat}");
    wait_for_iptables(&ns.0, "nat", "the Service's chains to go", |t| {
        !t.contains(&ip)
            && !t.contains("default/web")
            && web_chains.iter().all(|c| !t.contains(c.as_str()))
    })
    .await;

    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(30), proxy).await???;
    ipt.cleanup().await?;
    drop(ns);
    server.stop().await;
    Ok(())
}

/// A healthz port that cannot be bound stops the proxy, and the node says why with
/// upstream's warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_it_cannot_bind_is_reported_on_the_node() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        run(
            server.client.clone(),
            RunConfig {
                proxies: vec![ProxyConfig::new(IpFamily::V4, "node-b")],
                sync_period: Duration::from_secs(30),
                min_sync_period: Duration::from_millis(100),
                healthz_addr: Some(taken.local_addr()?),
                metrics_addr: None,
                backend: Backend::Nftables(Nft::with_command(vec!["false".into()])),
            },
            CancellationToken::new(),
        ),
    )
    .await?;
    let err = result.expect_err("the healthz address is in use");
    let event = node_event(&server.client, "node-b", "FailedToStartProxierHealthcheck").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.action.as_deref(), Some("StartKubeProxy"));
    assert_eq!(event.note.as_deref(), Some(err.to_string().as_str()));
    Ok(())
}
