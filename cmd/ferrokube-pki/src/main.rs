//! `ferrokube-pki`: writes a cluster's CA, certificates, kubeconfigs and
//! service-account keys into one directory (see `ferrokube_pki::cluster`), reusing
//! whatever is already there and still valid. A thin clap wrapper over
//! `ferrokube_pki::write_cluster_pki`.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use ferrokube_pki::{ClusterPkiOptions, write_cluster_pki};

#[derive(Debug, Parser)]
#[command(name = "ferrokube-pki", version, about = "Ferrokube cluster PKI tool")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create (or complete) the cluster PKI in a directory; prints the paths.
    Init(InitArgs),
}

#[derive(Debug, clap::Args)]
struct InitArgs {
    /// Directory to write into (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// apiserver URL written into the kubeconfigs.
    #[arg(long, default_value = "https://127.0.0.1:6443")]
    server: String,
    /// The apiserver's advertise address (added as an IP SAN).
    #[arg(long)]
    advertise_address: Option<IpAddr>,
    /// Service CIDR; its first IP is added as an IP SAN.
    #[arg(long, default_value = "10.96.0.0/12")]
    service_cluster_ip_range: String,
    /// Node name for the kubelet's client certificate (default: hostname).
    #[arg(long)]
    node_name: Option<String>,
    /// The node's IPs (comma-separated or repeated): IP SANs of the kubelet serving
    /// certificate (127.0.0.1 is always included).
    #[arg(long, value_delimiter = ',')]
    node_ip: Vec<IpAddr>,
    /// Cluster name used in the kubeconfigs.
    #[arg(long, default_value = "ferrokube")]
    cluster_name: String,
    /// Extra apiserver SANs (DNS names or IPs), comma-separated or repeated.
    #[arg(long, value_delimiter = ',')]
    extra_sans: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Init(args) => init(args),
    }
}

fn init(args: InitArgs) -> anyhow::Result<()> {
    let mut options = ClusterPkiOptions::new(args.server);
    options.cluster_name = args.cluster_name;
    options.service_cluster_ip_range = args.service_cluster_ip_range;
    options.advertise_address = args.advertise_address;
    if let Some(node) = args.node_name {
        options.node_name = node;
    }
    options.extra_sans = args.extra_sans;
    if !args.node_ip.is_empty() {
        options.node_ips = args.node_ip;
    }
    let paths = write_cluster_pki(&args.dir, &options)
        .with_context(|| format!("writing cluster PKI into {}", args.dir.display()))?;
    for (role, path) in paths.files() {
        let state = if paths.written.iter().any(|w| w == path) {
            "written"
        } else {
            "reused"
        };
        println!("{role}\t{}\t{state}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_parses_upstream_style_flags() {
        let cli = Cli::try_parse_from([
            "ferrokube-pki",
            "init",
            "--dir",
            "/tmp/x",
            "--server",
            "https://10.0.0.5:6443",
            "--advertise-address",
            "10.0.0.5",
            "--service-cluster-ip-range",
            "10.0.0.0/24",
            "--node-name",
            "n1",
            "--extra-sans",
            "a.example,192.0.2.1",
        ])
        .unwrap();
        let Command::Init(args) = cli.command;
        assert_eq!(args.dir, PathBuf::from("/tmp/x"));
        assert_eq!(args.advertise_address, Some("10.0.0.5".parse().unwrap()));
        assert_eq!(args.node_name.as_deref(), Some("n1"));
        assert_eq!(args.extra_sans, vec!["a.example", "192.0.2.1"]);
        assert!(Cli::try_parse_from(["ferrokube-pki", "init"]).is_err());
        assert!(
            Cli::try_parse_from([
                "ferrokube-pki",
                "init",
                "--dir",
                "d",
                "--advertise-address",
                "x"
            ])
            .is_err()
        );
    }

    #[test]
    fn init_writes_the_layout() {
        let dir = tempfile::tempdir().unwrap();
        let cli = Cli::try_parse_from([
            "ferrokube-pki",
            "init",
            "--dir",
            dir.path().to_str().unwrap(),
            "--node-name",
            "n1",
        ])
        .unwrap();
        let Command::Init(args) = cli.command;
        init(args).unwrap();
        assert!(dir.path().join("admin.kubeconfig").exists());
        assert!(dir.path().join("sa.pub").exists());
        assert!(dir.path().join("kubelet.crt").exists());
        assert!(dir.path().join("front-proxy-ca.crt").exists());
        assert!(dir.path().join("front-proxy-client.key").exists());
    }
}
