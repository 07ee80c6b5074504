//! kube-scheduler: upstream's flags over `ferrokube-scheduler`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use ferrokube_client::leaderelection::{LeaderElectionOptions, default_identity};
use ferrokube_scheduler::KubeSchedulerConfiguration;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
#[command(
    name = "kube-scheduler",
    about = "The Kubernetes scheduler: assigns pods to nodes."
)]
struct Opts {
    /// The path to the configuration file (KubeSchedulerConfiguration).
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Path to kubeconfig file with authorization and master location information.
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
    /// The port on which to serve /healthz, /readyz and /metrics over HTTPS; 0 serves
    /// nothing.
    #[arg(long = "secure-port", default_value_t = 10259)]
    secure_port: u16,
    /// The IP address on which to listen for the --secure-port port.
    #[arg(long = "bind-address", default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// DEPRECATED: QPS to use while talking with kubernetes apiserver. This parameter
    /// is ignored if a config file is specified in --config.
    #[arg(long = "kube-api-qps", allow_negative_numbers = true)]
    kube_api_qps: Option<f32>,
    /// DEPRECATED: burst to use while talking with kubernetes apiserver. This
    /// parameter is ignored if a config file is specified in --config.
    #[arg(long = "kube-api-burst", allow_negative_numbers = true)]
    kube_api_burst: Option<i32>,
    #[command(flatten)]
    component: ferrokube_component_base::ComponentFlags,
    #[command(flatten)]
    content_type: ferrokube_component_base::ClientContentTypeFlag,
    #[command(flatten)]
    leader_election: LeaderElectionOptions,
    #[command(flatten)]
    serving: ferrokube_client::serving::SecureServingOptions,
    #[command(flatten)]
    auth: ferrokube_client::delegated::DelegatedAuthOptions,
}

impl Opts {
    /// The configuration without --config: upstream's defaults and the deprecated
    /// flags that stand in for its fields.
    fn flag_config(&self) -> anyhow::Result<KubeSchedulerConfiguration> {
        let mut config = KubeSchedulerConfiguration::default_config();
        if let Some(qps) = self.kube_api_qps {
            config.client_connection.qps = Some(qps);
        }
        if let Some(burst) = self.kube_api_burst {
            config.client_connection.burst = Some(burst);
        }
        config.set_defaults();
        config.validate()?;
        Ok(config)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let opts = Opts::parse();
    let _feature_gates = opts
        .component
        .init(&Default::default(), &[])
        .map_err(anyhow::Error::msg)?;
    if let Some(note) = opts.content_type.note() {
        tracing::info!("{note}");
    }
    let config = match &opts.config {
        Some(p) => KubeSchedulerConfiguration::from_yaml(
            &std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
        )?,
        None => opts.flag_config()?,
    };
    let kubeconfig = opts.kubeconfig.clone().or_else(|| {
        (!config.client_connection.kubeconfig.is_empty())
            .then(|| config.client_connection.kubeconfig.clone().into())
    });
    let kcfg = match kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(&p)
                .with_context(|| format!("reading {}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    // As upstream: the scheduling client, the events client and the leader
    // election client each have a bucket of clientConnection's qps and burst, so
    // neither events nor lease renewals wait behind bindings.
    let (qps, burst) = config.client_limits();
    let limited = |cfg: kube::Config| {
        ferrokube_client::config::client_with_limits(cfg, qps, burst)
            .context("building a client of --kubeconfig")
    };
    // Upstream names the scheduling and the leader election clients in their
    // User-Agent; the events client keeps the program's.
    let named = |name: &str| {
        let mut cfg = kcfg.clone();
        ferrokube_client::config::add_user_agent(&mut cfg, name);
        limited(cfg)
    };
    let client = named("scheduler")?;
    let running =
        ferrokube_scheduler::run::build_with_event_client(client, limited(kcfg.clone())?, &config)?;
    let cancel = CancellationToken::new();
    // As upstream, --secure-port=0 serves nothing.
    let health = if opts.secure_port != 0 {
        let addr = SocketAddr::new(opts.bind_address, opts.secure_port);
        let (tls, gate) = ferrokube_client::serving::endpoint(
            &opts.serving,
            &opts.auth,
            "kube-scheduler",
            opts.bind_address,
            // Upstream's TolerateInClusterLookupFailure for this component.
            ferrokube_client::extension_authentication::LookupFailure::Tolerate,
        )
        .await?;
        let responder = ferrokube_scheduler::run::health_responder(
            running.scheduler.clone(),
            running.ready.clone(),
        );
        let serving =
            ferrokube_client::serving::serve(addr, tls, responder, Some(gate), cancel.clone());
        Some(tokio::spawn(async move {
            if let Err(e) = serving.await {
                tracing::error!(error = %e, "health server failed");
            }
        }))
    } else {
        None
    };
    {
        let c = cancel.clone();
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            c.cancel();
        });
    }
    if opts.leader_election.leader_elect {
        let elector = Arc::new(opts.leader_election.build(
            named("leader-election")?,
            "kube-scheduler",
            default_identity(),
        )?);
        elector
            .run(cancel.clone(), move |leading| async move {
                if let Err(e) = running.run(leading).await {
                    tracing::error!(error = %e, "scheduler stopped");
                }
            })
            .await?;
    } else {
        running.run(cancel.clone()).await?;
    }
    cancel.cancel();
    if let Some(health) = health {
        let _ = health.await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_are_well_formed() {
        // clap's own checks (unique names, valid defaults) of the flattened groups.
        Opts::command().debug_assert();
        let opts = Opts::try_parse_from([
            "kube-scheduler",
            "--authentication-kubeconfig=/a",
            "--authorization-kubeconfig=/b",
            "--authorization-always-allow-paths=/healthz,/metrics",
        ])
        .unwrap();
        assert_eq!(opts.auth.always_allow_paths, ["/healthz", "/metrics"]);
    }

    #[test]
    fn deprecated_client_flags_stand_in_without_a_config_file() {
        let opts = Opts::try_parse_from(["kube-scheduler"]).unwrap();
        assert_eq!(opts.flag_config().unwrap().client_limits(), (50.0, 100));
        let opts = Opts::try_parse_from([
            "kube-scheduler",
            "--kube-api-qps=500",
            "--kube-api-burst=1000",
        ])
        .unwrap();
        assert_eq!(opts.flag_config().unwrap().client_limits(), (500.0, 1000));
        let opts = Opts::try_parse_from(["kube-scheduler", "--kube-api-burst=-3"]).unwrap();
        assert!(opts.flag_config().is_err());
    }

    /// kubeadm 1.33's static pod command line, with the hard way's `--v=2`.
    #[test]
    fn kubeadm_command_line_parses() {
        let opts = Opts::try_parse_from([
            "kube-scheduler",
            "--authentication-kubeconfig=/etc/kubernetes/scheduler.conf",
            "--authorization-kubeconfig=/etc/kubernetes/scheduler.conf",
            "--bind-address=127.0.0.1",
            "--kubeconfig=/etc/kubernetes/scheduler.conf",
            "--leader-elect=true",
            "--v=2",
        ])
        .unwrap();
        assert_eq!(opts.bind_address, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(opts.secure_port, 10259);
        assert_eq!(opts.component.logging.verbosity, 2);
        assert!(opts.leader_election.leader_elect);
        assert_eq!(
            opts.kubeconfig.as_deref(),
            Some(std::path::Path::new("/etc/kubernetes/scheduler.conf"))
        );
        assert_eq!(
            opts.auth.authentication_kubeconfig,
            opts.auth.authorization_kubeconfig
        );
        // No front proxy without its CA; the delegating header defaults are there.
        assert!(opts.auth.request_header.client_ca_file.is_none());
        assert_eq!(opts.auth.request_header.username_headers, ["x-remote-user"]);
        let opts = Opts::try_parse_from([
            "kube-scheduler",
            "--requestheader-client-ca-file=/etc/kubernetes/pki/front-proxy-ca.crt",
            "--requestheader-allowed-names=front-proxy-client",
        ])
        .unwrap();
        assert_eq!(
            opts.auth.request_header.allowed_names,
            ["front-proxy-client"]
        );
    }
}
