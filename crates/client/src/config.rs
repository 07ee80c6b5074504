//! Client configuration: kubeconfig / in-cluster loading (a thin wrapper over
//! `kube::Config`) and client-side QPS/burst limiting as a tower layer on the
//! `kube::Client` service stack, with client-go's defaults and the components'
//! `--kubeconfig`, `--master`, `--kube-api-qps`, `--kube-api-burst` flags.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use kube::Client;
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tower::{Layer, Service};

use crate::metrics::{RequestMetricsLayer, ThrottleWait, host_label, rest_client_metrics};
use crate::{Error, Result};
use ferrokube_component_base::ratelimit::TokenBucket;

/// client-go's default QPS (`rest.DefaultQPS`).
pub const DEFAULT_QPS: f32 = 5.0;
/// client-go's default burst (`rest.DefaultBurst`).
pub const DEFAULT_BURST: u32 = 10;

/// The flags components take to reach the apiserver.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct ClientOptions {
    /// Path to kubeconfig file with authorization and master location information.
    /// Empty: in-cluster configuration when running in a pod, else `KUBECONFIG` /
    /// `~/.kube/config`.
    #[arg(long = "kubeconfig")]
    pub kubeconfig: Option<PathBuf>,
    /// The address of the Kubernetes API server (overrides any value in kubeconfig).
    #[arg(long = "master")]
    pub master: Option<String>,
    /// QPS to use while talking with kubernetes apiserver (0: client-go's default 5;
    /// negative: no limit).
    #[arg(long = "kube-api-qps", default_value_t = DEFAULT_QPS, allow_negative_numbers = true)]
    pub qps: f32,
    /// Burst to use while talking with kubernetes apiserver.
    #[arg(long = "kube-api-burst", default_value_t = DEFAULT_BURST)]
    pub burst: u32,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            kubeconfig: None,
            master: None,
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
        }
    }
}

impl ClientOptions {
    /// Loads the configuration as upstream's `BuildConfigFromFlags`: the kubeconfig
    /// file if given; otherwise in-cluster when `KUBERNETES_SERVICE_HOST` is set,
    /// else kube-rs' inference (`KUBECONFIG`, `~/.kube/config`). `--master`
    /// overrides the server URL.
    pub async fn load_config(&self) -> Result<kube::Config> {
        let mut config = match &self.kubeconfig {
            Some(path) => {
                let kc = Kubeconfig::read_from(path)
                    .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
                kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                    .await
                    .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?
            }
            None if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
                kube::Config::incluster().map_err(|e| Error::Config(e.to_string()))?
            }
            None => kube::Config::infer()
                .await
                .map_err(|e| Error::Config(e.to_string()))?,
        };
        if let Some(master) = self.master.as_deref().filter(|m| !m.is_empty()) {
            config.cluster_url = master
                .parse()
                .map_err(|e| Error::Config(format!("--master {master:?}: {e}")))?;
        }
        Ok(config)
    }

    /// A client from [`ClientOptions::load_config`] with the QPS/burst limit.
    pub async fn client(&self) -> Result<Client> {
        client_with_limits(self.load_config().await?, self.qps, self.burst)
    }
}

/// A `kube::Client` over `config` whose requests (watches included, as in client-go)
/// pass a token bucket of `qps`/`burst`. `qps == 0` means client-go's default 5 (and
/// burst 0 its 10); a negative `qps` disables the limit.
pub fn client_with_limits(mut config: kube::Config, qps: f32, burst: u32) -> Result<Client> {
    add_default_user_agent(&mut config);
    let limit = RateLimitLayer::for_config(&config, qps, burst);
    let metrics = RequestMetricsLayer::for_config(&config);
    let builder = ClientBuilder::try_from(config)?;
    // The limit outside the metrics, which add the wait it hands them to the
    // request's latency, as client-go counts its throttling in that latency.
    Ok(builder.with_layer(&metrics).with_layer(&limit).build())
}

/// A `kube::Client` over `config` without a rate limit, its requests recorded in the
/// process's `rest_client_*` metrics as every client's are.
pub fn build_client(mut config: kube::Config) -> Result<Client> {
    add_default_user_agent(&mut config);
    let metrics = RequestMetricsLayer::for_config(&config);
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&metrics)
        .build())
}

/// client-go's default `User-Agent` for this program (`kubelet/v1.33.0 (linux/amd64)
/// kubernetes/...`) unless `config` sets one: the apiserver records a write without a
/// field manager under the agent's program name, and kube-rs sends none of its own.
pub fn add_default_user_agent(config: &mut kube::Config) {
    let user_agent = http::header::USER_AGENT;
    if config.headers.iter().any(|(name, _)| *name == user_agent) {
        return;
    }
    set_user_agent(config, program_user_agent());
}

/// client-go's `rest.AddUserAgent`: this program's default agent followed by `/name`,
/// replacing the agent `config` had. A controller manager's clients are told apart by
/// it in audit records (`kube-controller-manager/v1.33.0 (linux/amd64)
/// kubernetes/abcdef0/deployment-controller`); the field manager, the agent's first
/// segment, stays the program's name.
pub fn add_user_agent(config: &mut kube::Config, name: &str) {
    set_user_agent(config, format!("{}/{name}", program_user_agent()));
}

fn program_user_agent() -> String {
    let program = std::env::args_os()
        .next()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    ferrokube_component_base::version::default_user_agent(&program)
}

fn set_user_agent(config: &mut kube::Config, agent: String) {
    let user_agent = http::header::USER_AGENT;
    config.headers.retain(|(name, _)| *name != user_agent);
    if let Ok(value) = http::HeaderValue::from_str(&agent) {
        config.headers.push((user_agent, value));
    }
}

/// A client's QPS and burst, as client-go's `rest.Config` carries them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientLimits {
    pub qps: f32,
    pub burst: u32,
}

impl ClientLimits {
    /// A layer with a bucket of its own for a client of `config`.
    pub fn layer(&self, config: &kube::Config) -> RateLimitLayer {
        RateLimitLayer::for_config(config, self.qps, self.burst)
    }
}

/// client-go's QPS and burst defaulting: 0 means 5 and 10.
pub fn defaulted_limits(qps: f32, burst: u32) -> (f32, u32) {
    let qps = if qps == 0.0 { DEFAULT_QPS } else { qps };
    let burst = if burst == 0 { DEFAULT_BURST } else { burst };
    (qps, burst)
}

/// A throttle wait client-go logs at its default verbosity.
const LONG_THROTTLE: Duration = Duration::from_secs(1);

/// A tower layer limiting requests with a token bucket; clones share the bucket.
/// Each request's wait is recorded in `rest_client_rate_limiter_duration_seconds`.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    bucket: Arc<TokenBucket>,
    host: Arc<str>,
}

impl RateLimitLayer {
    /// `qps` and `burst` as given (see [`defaulted_limits`]); `host` labels the wait.
    pub fn new(qps: f32, burst: u32, host: &str) -> Self {
        RateLimitLayer {
            bucket: Arc::new(TokenBucket::new(f64::from(qps), burst)),
            host: host.into(),
        }
    }

    /// For a client of `config`, with client-go's defaulting of `qps` and `burst`.
    pub fn for_config(config: &kube::Config, qps: f32, burst: u32) -> Self {
        let (qps, burst) = defaulted_limits(qps, burst);
        Self::new(qps, burst, &host_label(config))
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
            host: self.host.clone(),
            sleep: None,
            permit: None,
        }
    }
}

/// The service of [`RateLimitLayer`]: not ready until a token is available, so
/// callers queue in order (kube's client buffers requests in front of it).
pub struct RateLimit<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    host: Arc<str>,
    sleep: Option<(Pin<Box<tokio::time::Sleep>>, Duration)>,
    /// A token is held for the next call; how long it was waited for.
    permit: Option<Duration>,
}

impl<S> std::fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("bucket", &self.bucket)
            .finish()
    }
}

impl<S, B> Service<http::Request<B>> for RateLimit<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if self.permit.is_none() {
            if self.sleep.is_none() {
                let wait = self.bucket.reserve();
                if wait.is_zero() {
                    self.permit = Some(wait);
                } else {
                    self.sleep = Some((Box::pin(tokio::time::sleep(wait)), wait));
                }
            }
            if let Some((sleep, wait)) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.permit = Some(*wait);
                self.sleep = None;
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> S::Future {
        // The limiter is outside the request: the verb is known only here, so the
        // wait that won this call's token is recorded now.
        let waited = self.permit.take().unwrap_or_default();
        req.extensions_mut().insert(ThrottleWait(waited));
        let verb = req.method().as_str();
        rest_client_metrics()
            .rate_limiter_duration
            .observe([&self.host, verb], waited.as_secs_f64());
        if waited >= LONG_THROTTLE {
            tracing::info!(
                "Waited for {:.3}s due to client-side throttling, not priority and fairness, request: {verb}:{}",
                waited.as_secs_f64(),
                req.uri()
            );
        }
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cmd {
        #[command(flatten)]
        client: ClientOptions,
    }

    #[test]
    fn flags() {
        let c = Cmd::try_parse_from(["x"]).unwrap();
        assert_eq!(c.client, ClientOptions::default());
        assert_eq!((c.client.qps, c.client.burst), (5.0, 10));
        let c = Cmd::try_parse_from([
            "x",
            "--kubeconfig=/k",
            "--master",
            "https://h:6443",
            "--kube-api-qps=50",
            "--kube-api-burst=100",
        ])
        .unwrap();
        assert_eq!(c.client.kubeconfig, Some(PathBuf::from("/k")));
        assert_eq!(c.client.master.as_deref(), Some("https://h:6443"));
        assert_eq!((c.client.qps, c.client.burst), (50.0, 100));
        let c = Cmd::try_parse_from(["x", "--kube-api-qps=-1"]).unwrap();
        assert_eq!(c.client.qps, -1.0);
    }

    #[tokio::test]
    async fn missing_kubeconfig_is_a_config_error() {
        let o = ClientOptions {
            kubeconfig: Some("/nonexistent/kubeconfig".into()),
            ..Default::default()
        };
        assert!(matches!(o.load_config().await, Err(Error::Config(_))));
    }

    #[tokio::test]
    async fn layer_spaces_calls_by_qps() {
        use tower::ServiceExt;
        let svc = tower::service_fn(|r: http::Request<u32>| async move {
            Ok::<_, std::convert::Infallible>(*r.body())
        });
        let mut svc = RateLimitLayer::new(20.0, 2, "limited.test:6443").layer(svc);
        let t = tokio::time::Instant::now();
        for i in 0..6 {
            let req = http::Request::builder().method("PATCH").body(i).unwrap();
            assert_eq!(svc.ready().await.unwrap().call(req).await.unwrap(), i);
        }
        // Two from the burst, four at 50 ms each.
        let e = t.elapsed();
        assert!(e >= std::time::Duration::from_millis(190), "{e:?}");
        assert!(e < std::time::Duration::from_secs(2), "{e:?}");
        // Every call's wait is recorded under its verb, the burst's as zero.
        let waits = rest_client_metrics()
            .rate_limiter_duration
            .get(["limited.test:6443", "PATCH"])
            .expect("the waits are recorded");
        assert_eq!(waits.count(), 6);
        assert!(waits.sum() >= 0.19 && waits.sum() < 2.0, "{}", waits.sum());
        assert_eq!(waits.cumulative().next(), Some((0.005, 2)));
    }

    #[test]
    fn a_named_agent_replaces_the_configured_one_and_ends_with_the_name() {
        let mut config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static("my-operator/v2"),
        ));
        add_user_agent(&mut config, "deployment-controller");
        let agents: Vec<&str> = config
            .headers
            .iter()
            .filter(|(name, _)| *name == http::header::USER_AGENT)
            .filter_map(|(_, value)| value.to_str().ok())
            .collect();
        assert_eq!(
            agents,
            [format!("{}/deployment-controller", program_user_agent())]
        );
        assert!(agents[0].contains(" kubernetes/"), "{}", agents[0]);

        // The default agent does not replace one the configuration has.
        add_default_user_agent(&mut config);
        assert_eq!(config.headers.len(), 1);
        assert!(
            config.headers[0]
                .1
                .to_str()
                .unwrap()
                .ends_with("/deployment-controller")
        );
    }
}
