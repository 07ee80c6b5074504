//! kube-proxy: upstream's flags over `ferrokube-proxy` (nftables mode, the default, or
//! iptables mode).
//!
//! A `--config` file (KubeProxyConfiguration) is read first; flags given on the
//! command line override it.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{CommandFactory, FromArgMatches, Parser};
use ferrokube_client::config::ClientOptions;
use ferrokube_proxy::backend::{Backend, Cleaned, cleanup_all, cleanup_other_mode};
use ferrokube_proxy::config::{KubeProxyConfiguration, ProxyMode, parse_proxy_mode};
use ferrokube_proxy::iptables::Iptables;
use ferrokube_proxy::net::{IpFamily, parse_cidrs};
use ferrokube_proxy::nft::Nft;
use ferrokube_proxy::rules::{NodePortAddresses, ProxyConfig};
use ferrokube_proxy::run::{RunConfig, run};

#[derive(Debug, Parser)]
#[command(
    name = "kube-proxy",
    about = "The Kubernetes network proxy: programs Service rules with nftables (default) or iptables on each node."
)]
struct Opts {
    /// The path to the configuration file (KubeProxyConfiguration).
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(flatten)]
    client: ClientOptions,
    /// Which proxy mode to use: 'nftables' (the default) or 'iptables'; 'ipvs' is
    /// refused (this kernel has no IPVS). Starting in one mode removes the other
    /// mode's rules.
    #[arg(long = "proxy-mode")]
    proxy_mode: Option<String>,
    /// The CIDR range of the pods in the cluster (comma-separated for dual-stack);
    /// traffic to a Service IP from outside it is masqueraded.
    #[arg(long = "cluster-cidr")]
    cluster_cidr: Option<String>,
    /// If non-empty, use this string as the node name instead of the hostname.
    #[arg(long = "hostname-override")]
    hostname_override: Option<String>,
    /// ip:port for the health check server (/healthz, /livez); empty to disable.
    /// Default 0.0.0.0:10256.
    #[arg(long = "healthz-bind-address")]
    healthz_bind_address: Option<String>,
    /// ip:port for the metrics server (/metrics); empty to disable. Default
    /// 127.0.0.1:10249.
    #[arg(long = "metrics-bind-address")]
    metrics_bind_address: Option<String>,
    /// Addresses that accept NodePort traffic: 'primary' (the node's IPs) or a
    /// comma-separated list of CIDRs of local addresses. Default: 'primary' in
    /// nftables mode, every local address in iptables mode (as upstream).
    #[arg(long = "nodeport-addresses")]
    nodeport_addresses: Option<String>,
    /// SNAT all traffic sent via Service cluster IPs (the mode's masqueradeAll).
    #[arg(long = "masquerade-all", num_args = 0..=1, default_missing_value = "true")]
    masquerade_all: Option<bool>,
    /// Serve NodePorts on the node's loopback addresses too (sets route_localnet).
    #[arg(long = "iptables-localhost-nodeports", num_args = 0..=1, default_missing_value = "true")]
    localhost_nodeports: Option<bool>,
    /// The maximum interval between rule checks (e.g. '30s'), in the selected mode.
    #[arg(long = "sync-period")]
    sync_period: Option<String>,
    /// The minimum interval between rule syncs (e.g. '1s'), in the selected mode.
    #[arg(long = "min-sync-period")]
    min_sync_period: Option<String>,
    /// iptables mode: the maximum interval between rule checks (default 30s).
    #[arg(long = "iptables-sync-period")]
    iptables_sync_period: Option<String>,
    /// iptables mode: the minimum interval between rule syncs (default 1s).
    #[arg(long = "iptables-min-sync-period")]
    iptables_min_sync_period: Option<String>,
    /// iptables mode: the fwmark bit (0-31) of packets to masquerade (default 14).
    #[arg(long = "iptables-masquerade-bit")]
    iptables_masquerade_bit: Option<u8>,
    /// Delete kube-proxy's rules of both modes (nftables tables, iptables chains and
    /// jumps) and exit.
    #[arg(long)]
    cleanup: bool,
    #[command(flatten)]
    component: ferrokube_component_base::ComponentFlags,
    #[command(flatten)]
    content_type: ferrokube_component_base::ClientContentTypeFlag,
}

fn bind_address(s: &str, default_port: u16) -> anyhow::Result<Option<SocketAddr>> {
    if s.is_empty() {
        return Ok(None);
    }
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(Some(a));
    }
    // Upstream also takes a bare IP (default port).
    let ip: std::net::IpAddr = s
        .parse()
        .with_context(|| format!("invalid bind address {s:?}"))?;
    Ok(Some(SocketAddr::new(ip, default_port)))
}

fn log_cleaned(cleaned: &Cleaned) {
    if !cleaned.nftables.is_empty() {
        tracing::info!(tables = ?cleaned.nftables.iter().map(|f| f.nft()).collect::<Vec<_>>(), "deleted kube-proxy's nftables tables");
    }
    if !cleaned.iptables.is_empty() {
        tracing::info!(families = ?cleaned.iptables.iter().map(|f| f.k8s()).collect::<Vec<_>>(), "deleted kube-proxy's iptables chains and jumps");
    }
}

fn node_name(overridden: &str) -> anyhow::Result<String> {
    let name = if overridden.trim().is_empty() {
        std::fs::read_to_string("/proc/sys/kernel/hostname").context("reading the hostname")?
    } else {
        overridden.to_string()
    };
    Ok(name.trim().to_lowercase())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let matches = Opts::command().get_matches();
    let mut opts = Opts::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let mut file = match &opts.config {
        Some(p) => KubeProxyConfiguration::from_yaml(
            &std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
        )
        .with_context(|| format!("{}", p.display()))?,
        None => KubeProxyConfiguration::default(),
    };
    // The file's featureGates and logging, with the flags over them, as upstream
    // merges them.
    let _feature_gates = opts
        .component
        .init_with_config(&matches, &file.logging, &file.feature_gates, &[])
        .map_err(|e| anyhow::anyhow!("logging, featureGates, flags: {e}"))?;
    if let Some(note) = opts.content_type.note() {
        tracing::info!("{note}");
    }

    let nft = Nft::default();
    let ipt = Iptables::default();
    if opts.cleanup {
        let cleaned = cleanup_all(&nft, &ipt).await.context("--cleanup")?;
        log_cleaned(&cleaned);
        return Ok(());
    }
    // Flags given on the command line win over the file.
    if let Some(v) = &opts.proxy_mode {
        file.mode = v.clone();
    }
    let mode = parse_proxy_mode(&file.mode)?;
    if let Some(v) = &opts.cluster_cidr {
        file.cluster_cidr = v.clone();
    }
    if let Some(v) = &opts.hostname_override {
        file.hostname_override = v.clone();
    }
    if let Some(v) = &opts.healthz_bind_address {
        file.healthz_bind_address = v.clone();
    }
    if let Some(v) = &opts.metrics_bind_address {
        file.metrics_bind_address = v.clone();
    }
    if let Some(v) = &opts.nodeport_addresses {
        file.node_port_addresses = v
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
    }
    if let Some(v) = opts.localhost_nodeports {
        file.iptables.localhost_node_ports = v;
    }
    if let Some(v) = &opts.iptables_sync_period {
        file.iptables.sync_period = Some(v.clone());
    }
    if let Some(v) = &opts.iptables_min_sync_period {
        file.iptables.min_sync_period = Some(v.clone());
    }
    if let Some(v) = opts.iptables_masquerade_bit {
        file.iptables.masquerade_bit = v;
    }
    // The mode-neutral flags set the selected mode's section.
    match mode {
        ProxyMode::Nftables => {
            if let Some(v) = opts.masquerade_all {
                file.nftables.masquerade_all = v;
            }
            if let Some(v) = &opts.sync_period {
                file.nftables.sync_period = Some(v.clone());
            }
            if let Some(v) = &opts.min_sync_period {
                file.nftables.min_sync_period = Some(v.clone());
            }
        }
        ProxyMode::Iptables => {
            if let Some(v) = opts.masquerade_all {
                file.iptables.masquerade_all = v;
            }
            if let Some(v) = &opts.sync_period {
                file.iptables.sync_period = Some(v.clone());
            }
            if let Some(v) = &opts.min_sync_period {
                file.iptables.min_sync_period = Some(v.clone());
            }
        }
    }
    let settings = file.mode_settings(mode);

    let cluster_cidrs = parse_cidrs(&file.cluster_cidr)
        .map_err(anyhow::Error::msg)
        .context("--cluster-cidr")?;
    let node_port_addresses = match file.node_port_addresses.as_slice() {
        // Upstream's defaults: nftables mode serves NodePorts on the node's IPs,
        // iptables mode on every local address.
        [] if mode == ProxyMode::Iptables => NodePortAddresses::MatchAll,
        [] => NodePortAddresses::Primary,
        [p] if p == "primary" => NodePortAddresses::Primary,
        list => {
            let cidrs = parse_cidrs(&list.join(","))
                .map_err(anyhow::Error::msg)
                .context("--nodeport-addresses")?;
            if cidrs.iter().any(|c| c.is_match_all()) {
                NodePortAddresses::MatchAll
            } else {
                NodePortAddresses::Cidrs(cidrs)
            }
        }
    };
    if settings.masquerade_bit > 31 {
        bail!("masqueradeBit must be within 0..=31");
    }
    // As upstream's iptables proxier: without the DROP of conntrack-INVALID packets
    // when the kernel is told to be liberal about TCP windows.
    let conntrack_tcp_liberal =
        std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal")
            .is_ok_and(|v| v.trim() != "0");
    let hostname = node_name(&file.hostname_override)?;
    let mut families = vec![IpFamily::V4];
    if cluster_cidrs.iter().any(|c| c.family() == IpFamily::V6) {
        families.push(IpFamily::V6);
    }
    let proxies = families
        .into_iter()
        .map(|family| {
            let mut c = ProxyConfig::new(family, hostname.clone());
            c.cluster_cidrs = cluster_cidrs.clone();
            c.masquerade_all = settings.masquerade_all;
            c.masquerade_bit = settings.masquerade_bit;
            c.conntrack_tcp_liberal = conntrack_tcp_liberal;
            c.node_port_addresses = node_port_addresses.clone();
            c.localhost_nodeports = file.iptables.localhost_node_ports;
            c
        })
        .collect();
    if file.iptables.localhost_node_ports {
        // Localhost NodePorts (both modes): DNAT from 127.0.0.1 to a pod needs loopback
        // sources to be routable off the loopback device.
        if let Err(e) = std::fs::write("/proc/sys/net/ipv4/conf/all/route_localnet", "1") {
            tracing::warn!(error = %e, "cannot set net.ipv4.conf.all.route_localnet=1; localhost NodePorts will not work");
        }
    }
    let sync_period = file.sync_period(mode)?;
    let min_sync_period = file.min_sync_period(mode)?;
    if sync_period.is_zero() {
        bail!("syncPeriod must be greater than 0");
    }
    let run_config = RunConfig {
        proxies,
        sync_period,
        min_sync_period,
        healthz_addr: bind_address(&file.healthz_bind_address, 10256)
            .context("--healthz-bind-address")?,
        metrics_addr: bind_address(&file.metrics_bind_address, 10249)
            .context("--metrics-bind-address")?,
        backend: match mode {
            ProxyMode::Nftables => Backend::Nftables(nft.clone()),
            ProxyMode::Iptables => Backend::Iptables(ipt.clone()),
        },
    };
    // Switching modes: the other mode's rules go first (upstream's platformCleanup).
    let cleaned = cleanup_other_mode(mode, &nft, &ipt)
        .await
        .with_context(|| {
            format!(
                "removing the rules of the mode other than {}",
                mode.as_str()
            )
        })?;
    log_cleaned(&cleaned);

    let mut client_opts = opts.client.clone();
    if client_opts.kubeconfig.is_none() && !file.client_connection.kubeconfig.is_empty() {
        client_opts.kubeconfig = Some(file.client_connection.kubeconfig.clone().into());
    }
    if let Some(q) = file
        .client_connection
        .qps
        .filter(|_| opts.client.qps == ferrokube_client::config::DEFAULT_QPS)
    {
        client_opts.qps = q;
    }
    if let Some(b) = file
        .client_connection
        .burst
        .filter(|_| opts.client.burst == ferrokube_client::config::DEFAULT_BURST)
    {
        client_opts.burst = b;
    }
    let client = client_opts
        .client()
        .await
        .context("building the API client")?;

    let cancel = ferrokube_client::process::cancel_on_termination("shutting down");
    tracing::info!(node = %hostname, mode = mode.as_str(), sync_period = ?sync_period, min_sync_period = ?min_sync_period, "starting kube-proxy");
    run(client, run_config, cancel).await?;
    Ok(())
}
