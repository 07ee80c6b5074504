//! The DNS server end to end: a real apiserver (TestApiServer), Services and
//! EndpointSlices created through the API, the server started on loopback ports, and
//! real DNS messages over UDP and TCP. Every wait is bounded.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ferrokube_dns::index::DnsConfig;
use ferrokube_dns::run::{RunConfig, start};
use ferrokube_dns::stub::{query_tcp, query_udp};
use ferrokube_testing::TestApiServer;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const TIMEOUT: Duration = Duration::from_secs(2);

fn show(m: &Message) -> Vec<String> {
    let mut v: Vec<String> = m
        .answers
        .iter()
        .map(|r| format!("{} {}", r.record_type(), r.data))
        .collect();
    v.sort();
    v
}

/// Asks until the answer satisfies `ok` (at most 15 s, 100 ms apart).
async fn eventually(
    server: SocketAddr,
    name: &str,
    qtype: RecordType,
    ok: impl Fn(&Message) -> bool,
) -> anyhow::Result<Message> {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut last = None;
    for _ in 0..150 {
        match query_udp(server, name, qtype, TIMEOUT).await {
            Ok(m) if ok(&m) => return Ok(m),
            Ok(m) => last = Some(format!("{:?} {:?}", m.metadata.response_code, show(&m))),
            Err(e) => last = Some(e.to_string()),
        }
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{name} {qtype}: last answer {last:?}")
}

async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut s = tokio::time::timeout(TIMEOUT, tokio::net::TcpStream::connect(addr)).await??;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    tokio::time::timeout(TIMEOUT, s.read_to_string(&mut out)).await??;
    Ok(out)
}

fn json<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_from_the_api() -> anyhow::Result<()> {
    let api = TestApiServer::start().await?;
    let services: Api<Service> = Api::namespaced(api.client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(api.client.clone(), "default");
    let pp = PostParams::default();
    let web = services
        .create(
            &pp,
            &json(serde_json::json!({
                "metadata": {"name": "web"},
                "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}],
                         "selector": {"app": "web"}}
            })),
        )
        .await
        .context("create web")?;
    let web_ip = web
        .spec
        .and_then(|s| s.cluster_ip)
        .context("web has a cluster IP")?;
    services
        .create(
            &pp,
            &json(serde_json::json!({
                "metadata": {"name": "db"},
                "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}],
                         "selector": {"app": "db"}}
            })),
        )
        .await
        .context("create db")?;
    slices
        .create(
            &pp,
            &json(serde_json::json!({
                "metadata": {"name": "db-abc", "labels": {"kubernetes.io/service-name": "db"}},
                "addressType": "IPv4",
                "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
                "endpoints": [
                    {"addresses": ["10.244.0.5"], "hostname": "db-0", "conditions": {"ready": true}},
                    {"addresses": ["10.244.0.6"], "conditions": {"ready": true}},
                    {"addresses": ["10.244.0.7"], "conditions": {"ready": false}}
                ]
            })),
        )
        .await
        .context("create db slice")?;

    let loopback = |port: u16| Some(SocketAddr::from(([127, 0, 0, 1], port)));
    let cancel = CancellationToken::new();
    let running = start(
        api.client.clone(),
        RunConfig {
            dns: DnsConfig::new("cluster.local")?,
            dns_addrs: vec!["127.0.0.1:0".parse()?],
            health_addr: loopback(0),
            ready_addr: loopback(0),
            metrics_addr: loopback(0),
        },
        cancel.clone(),
    )
    .await?;
    let dns = running.dns_addrs[0];
    let (health, ready, metrics) = (
        running.http_addrs[0],
        running.http_addrs[1],
        running.http_addrs[2],
    );
    assert!(
        http_get(health, "/health")
            .await?
            .starts_with("HTTP/1.0 200")
    );

    // Ready once listed; from then on the existing objects answer.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !running.ready.load(Ordering::Acquire) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(running.ready.load(Ordering::Acquire), "synced within 15 s");
    assert!(http_get(ready, "/ready").await?.starts_with("HTTP/1.0 200"));

    let m = query_udp(
        dns,
        "web.default.svc.cluster.local.",
        RecordType::A,
        TIMEOUT,
    )
    .await?;
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(m.metadata.authoritative);
    assert_eq!(show(&m), vec![format!("A {web_ip}")]);
    // The same over TCP.
    let m = query_tcp(
        dns,
        "web.default.svc.cluster.local.",
        RecordType::A,
        TIMEOUT,
    )
    .await?;
    assert_eq!(show(&m), vec![format!("A {web_ip}")]);
    // The kubernetes Service the apiserver creates itself.
    let m = query_udp(
        dns,
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
        TIMEOUT,
    )
    .await?;
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert_eq!(m.answers.len(), 1, "{:?}", show(&m));

    let m = query_udp(dns, "db.default.svc.cluster.local.", RecordType::A, TIMEOUT).await?;
    assert_eq!(show(&m), vec!["A 10.244.0.5", "A 10.244.0.6"]);
    let m = query_udp(
        dns,
        "db-0.db.default.svc.cluster.local.",
        RecordType::A,
        TIMEOUT,
    )
    .await?;
    assert_eq!(show(&m), vec!["A 10.244.0.5"]);
    let m = query_udp(
        dns,
        "_pg._tcp.db.default.svc.cluster.local.",
        RecordType::SRV,
        TIMEOUT,
    )
    .await?;
    assert_eq!(
        show(&m),
        vec![
            "SRV 0 50 5432 10-244-0-6.db.default.svc.cluster.local.",
            "SRV 0 50 5432 db-0.db.default.svc.cluster.local."
        ]
    );
    assert_eq!(
        m.additionals.len(),
        2,
        "targets' addresses in the additional section"
    );
    let m = query_udp(
        dns,
        "_http._tcp.web.default.svc.cluster.local.",
        RecordType::SRV,
        TIMEOUT,
    )
    .await?;
    assert_eq!(
        show(&m),
        vec!["SRV 0 100 80 web.default.svc.cluster.local."]
    );
    let reverse = {
        let o: Vec<&str> = web_ip.split('.').rev().collect();
        format!("{}.in-addr.arpa.", o.join("."))
    };
    let m = query_udp(dns, &reverse, RecordType::PTR, TIMEOUT).await?;
    assert_eq!(show(&m), vec!["PTR web.default.svc.cluster.local."]);
    let m = query_udp(
        dns,
        "10-244-0-9.default.pod.cluster.local.",
        RecordType::A,
        TIMEOUT,
    )
    .await?;
    assert_eq!(show(&m), vec!["A 10.244.0.9"]);
    let m = query_udp(
        dns,
        "nope.default.svc.cluster.local.",
        RecordType::A,
        TIMEOUT,
    )
    .await?;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(m.authorities.len(), 1, "SOA with NXDOMAIN");
    let m = query_udp(dns, "example.com.", RecordType::A, TIMEOUT).await?;
    assert_eq!(
        m.metadata.response_code,
        ResponseCode::ServFail,
        "nothing is forwarded"
    );

    // Changes through the API show up: a new Service, an ExternalName, a deleted slice.
    services
        .create(
            &pp,
            &json(serde_json::json!({
                "metadata": {"name": "ext"},
                "spec": {"type": "ExternalName", "externalName": "db.default.svc.cluster.local"}
            })),
        )
        .await?;
    let m = eventually(dns, "ext.default.svc.cluster.local.", RecordType::A, |m| {
        !m.answers.is_empty()
    })
    .await?;
    assert_eq!(
        show(&m),
        vec![
            "A 10.244.0.5",
            "A 10.244.0.6",
            "CNAME db.default.svc.cluster.local."
        ]
    );
    slices.delete("db-abc", &DeleteParams::default()).await?;
    let m = eventually(dns, "db.default.svc.cluster.local.", RecordType::A, |m| {
        m.answers.is_empty()
    })
    .await?;
    assert_eq!(
        m.metadata.response_code,
        ResponseCode::NoError,
        "headless name stays"
    );
    services.delete("web", &DeleteParams::default()).await?;
    eventually(dns, "web.default.svc.cluster.local.", RecordType::A, |m| {
        m.metadata.response_code == ResponseCode::NXDomain
    })
    .await?;

    let text = http_get(metrics, "/metrics").await?;
    assert!(
        text.contains("coredns_dns_requests_total{proto=\"tcp\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE process_resident_memory_bytes gauge\n"),
        "{text}"
    );

    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(10), running.wait())
        .await
        .context("server stops within 10 s")?;
    api.stop().await;
    Ok(())
}
