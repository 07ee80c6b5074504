//! kube-dns: Ferrokube's cluster DNS server (the `kube-dns` addon), answering for the
//! cluster domain like CoreDNS's kubernetes plugin. Names outside the cluster domain
//! and its reverse zones get SERVFAIL: nothing is forwarded.

use std::net::{IpAddr, SocketAddr};

use anyhow::{Context, bail};
use clap::Parser;
use ferrokube_client::config::ClientOptions;
use ferrokube_dns::index::{DEFAULT_TTL, DnsConfig};
use ferrokube_dns::run::{RunConfig, run};

#[derive(Debug, Parser)]
#[command(
    name = "kube-dns",
    about = "Cluster DNS: serves <svc>.<ns>.svc.<domain>, pod, SRV and PTR records from the API."
)]
struct Opts {
    #[command(flatten)]
    client: ClientOptions,
    /// The cluster domain served.
    #[arg(long = "cluster-domain", default_value = "cluster.local")]
    cluster_domain: String,
    /// Comma-separated ip:port list to serve DNS on (UDP and TCP each).
    #[arg(long = "dns-bind-address", default_value = "0.0.0.0:53")]
    dns_bind_address: String,
    /// IP the health, ready and metrics servers listen on.
    #[arg(long = "health-bind-address", default_value = "0.0.0.0")]
    health_bind_address: IpAddr,
    /// Port of /health (0 disables), as CoreDNS's health plugin.
    #[arg(long = "health-port", default_value_t = 8080)]
    health_port: u16,
    /// Port of /ready (0 disables), as CoreDNS's ready plugin: 200 once Services
    /// and EndpointSlices are listed.
    #[arg(long = "ready-port", default_value_t = 8181)]
    ready_port: u16,
    /// Port of /metrics (0 disables), as CoreDNS's prometheus plugin.
    #[arg(long = "metrics-port", default_value_t = 9153)]
    metrics_port: u16,
    /// TTL of every record, in seconds.
    #[arg(long, default_value_t = DEFAULT_TTL)]
    ttl: u32,
    /// This server's own IPs (comma-separated; the addon sets POD_IP from
    /// status.podIP): ns.dns.<domain> answers the Service that selects them.
    #[arg(long = "pod-ip", env = "POD_IP", default_value = "")]
    pod_ip: String,
    #[command(flatten)]
    logging: ferrokube_component_base::logs::LoggingFlags,
}

fn parse_list<T: std::str::FromStr>(flag: &str, s: &str) -> anyhow::Result<Vec<T>>
where
    T::Err: std::fmt::Display,
{
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse::<T>()
                .map_err(|e| anyhow::anyhow!("--{flag}: invalid value {p:?}: {e}"))
        })
        .collect()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let opts = Opts::parse();
    opts.logging
        .init_with_default_gates()
        .map_err(anyhow::Error::msg)?;

    let dns_addrs: Vec<SocketAddr> = parse_list("dns-bind-address", &opts.dns_bind_address)?;
    if dns_addrs.is_empty() {
        bail!("--dns-bind-address: at least one address is needed");
    }
    let mut dns = DnsConfig::new(&opts.cluster_domain)
        .map_err(|e| anyhow::anyhow!("--cluster-domain {:?}: {e}", opts.cluster_domain))?;
    dns.ttl = opts.ttl;
    dns.own_ips = parse_list("pod-ip", &opts.pod_ip)?;
    dns.serial = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(1);
    let http = |port: u16| (port != 0).then(|| SocketAddr::new(opts.health_bind_address, port));
    let cfg = RunConfig {
        dns,
        dns_addrs,
        health_addr: http(opts.health_port),
        ready_addr: http(opts.ready_port),
        metrics_addr: http(opts.metrics_port),
    };
    let client = opts.client.client().await.context("API client")?;

    let cancel = ferrokube_client::process::cancel_on_termination("shutting down");
    run(client, cfg, cancel).await?;
    Ok(())
}
