//! metrics-server: Ferrokube's resource metrics add-on (`kubectl top`, the
//! HorizontalPodAutoscaler), with upstream kubernetes-sigs/metrics-server's flags where
//! they apply. Serves `metrics.k8s.io/v1beta1` over HTTPS for the apiserver's
//! aggregation layer; see `ferrokube-metrics-server`.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use ferrokube_client::config::ClientOptions;
use ferrokube_metrics_server::run::{RunConfig, run};
use ferrokube_metrics_server::scraper::{DEFAULT_ADDRESS_TYPES, KubeletClient, KubeletOptions};

#[derive(Debug, Parser)]
#[command(
    name = "metrics-server",
    about = "Scrapes kubelets' /metrics/resource and serves metrics.k8s.io/v1beta1 (kubectl top, HPA)."
)]
struct Opts {
    #[command(flatten)]
    client: ClientOptions,
    /// The IP address on which to listen for the --secure-port port.
    #[arg(long = "bind-address", default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// The port on which to serve HTTPS with authentication and authorization.
    #[arg(long = "secure-port", default_value_t = 10250)]
    secure_port: u16,
    /// The directory where the self-signed serving certificate is kept (apiserver.crt,
    /// apiserver.key) when --tls-cert-file is not given. Unset: kept in memory.
    #[arg(long = "cert-dir")]
    cert_dir: Option<PathBuf>,
    /// File containing the default x509 certificate for HTTPS (CA cert, if any,
    /// concatenated after server cert).
    #[arg(long = "tls-cert-file")]
    tls_cert_file: Option<PathBuf>,
    /// File containing the default x509 private key matching --tls-cert-file.
    #[arg(long = "tls-private-key-file")]
    tls_private_key_file: Option<PathBuf>,
    #[command(flatten)]
    tls: ferrokube_pki::tls_options::TlsFlags,
    /// The resolution at which metrics-server will retain metrics (Go duration: 15s,
    /// 1m, 500ms).
    #[arg(long = "metric-resolution", default_value = "15s", value_parser = ferrokube_client::leaderelection::parse_go_duration)]
    metric_resolution: Duration,
    /// The port to use to connect to Kubelets.
    #[arg(long = "kubelet-port", default_value_t = 10250)]
    kubelet_port: u16,
    /// Use the port in the node status (daemonEndpoints) instead of --kubelet-port.
    #[arg(long = "kubelet-use-node-status-port")]
    kubelet_use_node_status_port: bool,
    /// The priority of node address types to use when determining which address to
    /// use to connect to a particular node.
    #[arg(long = "kubelet-preferred-address-types", default_value = DEFAULT_ADDRESS_TYPES)]
    kubelet_preferred_address_types: String,
    /// Do not verify CA of serving certificates presented by Kubelets. For testing
    /// purposes only.
    #[arg(long = "kubelet-insecure-tls")]
    kubelet_insecure_tls: bool,
    /// Path to the CA to use to validate the Kubelet's serving certificates (default:
    /// the API server's CA).
    #[arg(long = "kubelet-certificate-authority")]
    kubelet_certificate_authority: Option<PathBuf>,
    /// The length of time to wait before giving up on a single request to Kubelet.
    #[arg(long = "kubelet-request-timeout", default_value = "10s", value_parser = ferrokube_client::leaderelection::parse_go_duration)]
    kubelet_request_timeout: Duration,
    #[command(flatten)]
    logging: ferrokube_component_base::logs::LoggingFlags,
}

/// The serving pair: the given files, else the one kept in `cert_dir`, else a fresh
/// self-signed one (written to `cert_dir` when there is one), as upstream's
/// `MaybeDefaultWithSelfSignedCerts`.
fn serving_pair(opts: &Opts) -> anyhow::Result<(String, String)> {
    let read =
        |p: &Path| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()));
    match (&opts.tls_cert_file, &opts.tls_private_key_file) {
        (Some(c), Some(k)) => return Ok((read(c)?, read(k)?)),
        (None, None) => {}
        _ => anyhow::bail!("--tls-cert-file and --tls-private-key-file go together"),
    }
    let dir = opts.cert_dir.as_deref();
    if let Some(dir) = dir {
        let (c, k) = (dir.join("apiserver.crt"), dir.join("apiserver.key"));
        if c.exists() && k.exists() {
            return Ok((read(&c)?, read(&k)?));
        }
    }
    let issued = ferrokube_pki::serving::self_signed_serving(
        "localhost",
        "metrics-server",
        &["localhost".to_string()],
        &[IpAddr::from([127, 0, 0, 1])],
    )
    .context("self-signed serving certificate")?;
    if let Some(dir) = dir {
        let written = std::fs::create_dir_all(dir)
            .and_then(|_| std::fs::write(dir.join("apiserver.crt"), &issued.cert_pem))
            .and_then(|_| std::fs::write(dir.join("apiserver.key"), &issued.key_pem));
        if let Err(e) = written {
            tracing::warn!(dir = %dir.display(), error = %e, "keeping the self-signed certificate in memory");
        }
    }
    Ok((issued.cert_pem, issued.key_pem))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let opts = Opts::parse();
    opts.logging
        .init_with_default_gates()
        .map_err(anyhow::Error::msg)?;
    anyhow::ensure!(
        !opts.metric_resolution.is_zero(),
        "--metric-resolution must be positive"
    );

    let config = opts.client.load_config().await.context("API client")?;
    let kubelet_ca = opts
        .kubelet_certificate_authority
        .as_ref()
        .map(|p| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())))
        .transpose()?;
    let kubelet = KubeletClient::new(
        KubeletOptions {
            port: opts.kubelet_port,
            use_node_status_port: opts.kubelet_use_node_status_port,
            address_types: opts
                .kubelet_preferred_address_types
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            insecure_tls: opts.kubelet_insecure_tls,
            ca_pem: kubelet_ca,
            timeout: opts.kubelet_request_timeout,
        },
        &config,
    )
    .map_err(|e| anyhow::anyhow!("kubelet client: {e}"))?;
    let client =
        ferrokube_client::config::client_with_limits(config, opts.client.qps, opts.client.burst)
            .context("API client")?;
    let cfg = RunConfig {
        addr: SocketAddr::new(opts.bind_address, opts.secure_port),
        serving_cert: serving_pair(&opts)?,
        tls: opts.tls.options_logged()?,
        resolution: opts.metric_resolution,
        kubelet,
    };

    let cancel = ferrokube_client::process::cancel_on_termination("shutting down");
    run(client, cfg, cancel).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_default_as_upstream() {
        let o = Opts::parse_from(["metrics-server"]);
        assert_eq!(o.secure_port, 10250);
        assert_eq!(o.kubelet_port, 10250);
        assert_eq!(o.metric_resolution, Duration::from_secs(15));
        assert_eq!(
            o.kubelet_preferred_address_types,
            "Hostname,InternalDNS,InternalIP,ExternalDNS,ExternalIP"
        );
        assert!(!o.kubelet_insecure_tls);
    }
}
