//! Cluster DNS benchmark driver (dnsperf-like): C concurrent UDP clients, each with
//! one outstanding query at a time, for D seconds; reports queries/s and latency
//! percentiles.
//!
//!   bench-dns [--services 1000] [--clients 32] [--duration 10]
//!       in-process: a DNS index with N ClusterIP Services (and N/10 headless ones
//!       with 10 ready endpoints each) served by ferrokube-dns's server on loopback
//!   bench-dns --server 127.0.0.1:53 --name kubernetes.default.svc.cluster.local.
//!       against a running server, asking the given names (repeatable)
//!
//! The in-process query mix: 70 % A of a ClusterIP Service, 10 % A of a headless
//! Service, 10 % SRV of a named port, 5 % PTR of a cluster IP, 5 % NXDOMAIN.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use ferrokube_dns::index::{DnsConfig, DnsIndex};
use ferrokube_dns::model::{
    EndpointModel, PortModel, ServiceKey, ServiceKind, ServiceModel, SliceModel,
};
use ferrokube_dns::server::{ClusterDnsHandler, DnsMetrics, SharedIndex, bind};
use ferrokube_dns::stub::query_message;
use hdrhistogram::Histogram;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;

#[derive(Debug, Parser)]
struct Opts {
    /// A running server to measure instead of an in-process one.
    #[arg(long)]
    server: Option<SocketAddr>,
    /// Names to ask the --server for (A queries), round robin.
    #[arg(long = "name")]
    names: Vec<String>,
    /// ClusterIP Services in the in-process index.
    #[arg(long, default_value_t = 1000)]
    services: usize,
    /// Concurrent clients (outstanding queries).
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Seconds to measure.
    #[arg(long, default_value_t = 10)]
    duration: u64,
}

fn cluster_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        10,
        96,
        100 + (i / 250) as u8,
        (i % 250 + 1) as u8,
    ))
}

/// An index with `n` ClusterIP Services and `n / 10` headless ones.
fn populated(n: usize) -> anyhow::Result<DnsIndex> {
    let mut idx = DnsIndex::new(DnsConfig::new("cluster.local")?);
    let http = PortModel {
        name: "http".into(),
        protocol: "tcp".into(),
        port: 80,
    };
    for i in 0..n {
        idx.set_service(
            &format!("ns{}", i % 20),
            &format!("svc{i}"),
            Some(ServiceModel {
                kind: ServiceKind::ClusterIp(vec![cluster_ip(i)]),
                ports: vec![http.clone()],
            }),
        );
    }
    for h in 0..(n / 10).max(1) {
        let ns = format!("ns{}", h % 20);
        let name = format!("headless{h}");
        idx.set_service(
            &ns,
            &name,
            Some(ServiceModel {
                kind: ServiceKind::Headless,
                ports: vec![http.clone()],
            }),
        );
        idx.set_slice(
            &ns,
            &format!("{name}-x"),
            Some(SliceModel {
                service: ServiceKey::new(&ns, &name),
                ports: vec![http.clone()],
                endpoints: (0..10)
                    .map(|e| EndpointModel {
                        addresses: vec![IpAddr::V4(Ipv4Addr::new(
                            10,
                            244,
                            (h % 250) as u8,
                            (e + 1) as u8,
                        ))],
                        ready: true,
                        hostname: None,
                    })
                    .collect(),
            }),
        );
    }
    Ok(idx)
}

/// The in-process query mix, deterministic per (client, sequence number).
fn mixed_query(n: usize, client: usize, seq: usize) -> (String, RecordType) {
    let x = (client.wrapping_mul(7919) + seq.wrapping_mul(104_729)) % 1_000_003;
    let i = x % n;
    let h = x % (n / 10).max(1);
    match seq % 20 {
        0..=13 => (
            format!("svc{i}.ns{}.svc.cluster.local.", i % 20),
            RecordType::A,
        ),
        14 | 15 => (
            format!("headless{h}.ns{}.svc.cluster.local.", h % 20),
            RecordType::A,
        ),
        16 | 17 => (
            format!("_http._tcp.svc{i}.ns{}.svc.cluster.local.", i % 20),
            RecordType::SRV,
        ),
        18 => {
            let IpAddr::V4(v4) = cluster_ip(i) else {
                unreachable!("cluster IPs here are IPv4")
            };
            let o = v4.octets();
            (
                format!("{}.{}.{}.{}.in-addr.arpa.", o[3], o[2], o[1], o[0]),
                RecordType::PTR,
            )
        }
        _ => (format!("missing{i}.ns0.svc.cluster.local."), RecordType::A),
    }
}

struct ClientResult {
    histogram: Histogram<u64>,
    errors: u64,
    unexpected: u64,
}

async fn client(
    server: SocketAddr,
    id: usize,
    n: usize,
    names: Arc<Vec<String>>,
    until: Instant,
) -> anyhow::Result<ClientResult> {
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
    sock.connect(server).await?;
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 10_000_000, 3)?;
    let (mut errors, mut unexpected) = (0, 0);
    let mut buf = vec![0u8; 4096];
    let mut seq = 0usize;
    while Instant::now() < until {
        let (name, qtype) = if names.is_empty() {
            mixed_query(n, id, seq)
        } else {
            (names[seq % names.len()].clone(), RecordType::A)
        };
        let qid = (seq % 65_536) as u16;
        seq += 1;
        let bytes = query_message(qid, &name, qtype)?.to_vec()?;
        let t0 = Instant::now();
        sock.send(&bytes).await?;
        // Bounded: a lost datagram costs one second, then the next query goes.
        match tokio::time::timeout(Duration::from_secs(1), sock.recv(&mut buf)).await {
            Ok(Ok(len)) => {
                let us = t0.elapsed().as_micros() as u64;
                histogram.record(us.max(1))?;
                match Message::from_vec(&buf[..len]) {
                    Ok(m)
                        if m.metadata.id == qid
                            && matches!(
                                m.metadata.response_code,
                                ResponseCode::NoError | ResponseCode::NXDomain
                            ) => {}
                    _ => unexpected += 1,
                }
            }
            _ => errors += 1,
        }
    }
    Ok(ClientResult {
        histogram,
        errors,
        unexpected,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let opts = Opts::parse();
    if opts.clients == 0 {
        bail!("--clients must be at least 1");
    }
    let mut _server = None;
    let (addr, what) = match opts.server {
        Some(a) => {
            if opts.names.is_empty() {
                bail!("--server needs at least one --name");
            }
            (a, format!("server {a}, names {:?}", opts.names))
        }
        None => {
            let t0 = Instant::now();
            let idx = populated(opts.services)?;
            let build = t0.elapsed();
            let handler = ClusterDnsHandler {
                index: Arc::new(SharedIndex::new(idx)),
                metrics: Arc::new(DnsMetrics::default()),
                ready: Arc::new(AtomicBool::new(true)),
            };
            let (server, bound) = bind(handler, &["127.0.0.1:0".parse()?]).await?;
            _server = Some(server);
            (
                bound[0],
                format!(
                    "in-process server, {} ClusterIP + {} headless Services (index built in {:.1} ms)",
                    opts.services,
                    (opts.services / 10).max(1),
                    build.as_secs_f64() * 1000.0
                ),
            )
        }
    };
    let names = Arc::new(opts.names.clone());
    let start = Instant::now();
    let until = start + Duration::from_secs(opts.duration);
    let tasks: Vec<_> = (0..opts.clients)
        .map(|id| tokio::spawn(client(addr, id, opts.services, names.clone(), until)))
        .collect();
    let mut total = Histogram::<u64>::new_with_bounds(1, 10_000_000, 3)?;
    let (mut errors, mut unexpected) = (0, 0);
    for t in tasks {
        let r = t.await.context("client task")??;
        total.add(&r.histogram)?;
        errors += r.errors;
        unexpected += r.unexpected;
    }
    let secs = start.elapsed().as_secs_f64();
    println!("bench-dns: {what}");
    println!(
        "  {} clients x {} s: {} answers, {:.0} queries/s; {} timeouts, {} unexpected answers",
        opts.clients,
        opts.duration,
        total.len(),
        total.len() as f64 / secs,
        errors,
        unexpected
    );
    println!(
        "  latency us: p50 {} p90 {} p99 {} p99.9 {} max {}",
        total.value_at_quantile(0.50),
        total.value_at_quantile(0.90),
        total.value_at_quantile(0.99),
        total.value_at_quantile(0.999),
        total.max()
    );
    Ok(())
}
