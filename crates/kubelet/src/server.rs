//! The kubelet's HTTP endpoints (upstream `pkg/kubelet/server`):
//! - `--healthz-port` (plain HTTP): `/healthz`;
//! - `--read-only-port` (plain HTTP, no authentication): `/healthz`, `/pods`,
//!   `/metrics`, `/metrics/cadvisor`, `/metrics/probes`, `/metrics/resource` (see
//!   [`crate::resource_metrics`]) and `/stats/summary`;
//! - `--port` (HTTPS, 10250): the read-only paths, `/containerLogs/{ns}/{pod}/{container}`
//!   (see [`crate::logs`]), `/exec/...`, `/attach/...` and `/portForward/...` (see
//!   [`crate::streaming`]), and upstream's debugging handlers: `/configz` (the effective
//!   `KubeletConfiguration`, see [`crate::kubeletconfig::effective_configuration`]),
//!   `/runningpods/` (a PodList of what the runtime runs, see [`running_pod_list`]) and
//!   `/logs/` (the node's `/var/log`, see [`crate::system_logs`]); every request authenticated and authorized by
//!   [`crate::auth::KubeletAuth`] (client certificates verified against
//!   `--client-ca-file` when a client sends one; bearer tokens; anonymous).
//!
//! The apiserver reaches the HTTPS port for `pods/log`, `pods/exec`, `pods/attach` and
//! `pods/portforward` with its `--kubelet-client-certificate`, and for
//! `nodes/<node>/proxy/...` (`kubectl get --raw /api/v1/nodes/<node>/proxy/configz`).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use tokio_util::sync::CancellationToken;

use crate::auth::KubeletAuth;
use crate::kubelet::Kubelet;
use crate::logs::{LogOptions, stream_log_file};
use ferrokube_component_base::metrics::held_body::HeldBody;

use crate::metrics::{HttpRequestInFlight, HttpRequestLabels, HttpServer};
use crate::rotating_transport::CertifiedPair;
use crate::sandbox::{name, namespace, pod_log_dir, spec, uid};
use crate::status::{RuntimeContainer, RuntimePod, RuntimeState};
use crate::streaming::{
    Body, CHANNEL_V4, CHANNEL_V5, is_upgrade, is_websocket, offered_subprotocols, proxy_to_runtime,
    text,
};

/// Which paths a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoints {
    /// `/healthz` only.
    Healthz,
    /// `/healthz`, `/pods` (a PodList of the pods bound to this node), `/metrics`,
    /// `/metrics/cadvisor`, `/metrics/resource` and `/stats/summary`.
    ReadOnly,
    /// The kubelet API: read-only paths plus container logs, exec, attach and
    /// port-forward, and the debugging handlers `/configz`, `/runningpods/` and `/logs/`.
    Api,
}

/// Errors setting up the HTTPS server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("TLS configuration: {0}")]
    Tls(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("self-signed serving certificate: {0}")]
    SelfSigned(String),
}

/// The rustls configuration of the HTTPS port: serving cert (PEM, chain allowed) and
/// key; with a client CA, a client certificate is verified against it when a client
/// sends one (clients without one go on to tokens or anonymous authentication).
/// HTTP/1.1 only (upgrades for exec/attach/port-forward are HTTP/1.1).
pub fn tls_config(
    cert_pem: &str,
    key_pem: &str,
    client_ca_pem: Option<&str>,
) -> Result<Arc<rustls::ServerConfig>, ServerError> {
    let verifier = client_ca_pem
        .map(ferrokube_client::delegated::optional_client_verifier)
        .transpose()
        .map_err(ServerError::Tls)?;
    let certificate = ferrokube_pki::serving::ServingCertificate::new(cert_pem, key_pem)
        .map_err(|e| ServerError::Tls(e.to_string()))?;
    tls_config_resolving(certificate, verifier, &Default::default())
}

/// Where the HTTPS port finds its certificate at each handshake.
pub type CertificateResolver = Arc<dyn rustls::server::ResolvesServerCert>;

/// [`tls_config`] whose certificate is resolved at each handshake (a pair followed in
/// its files, or `serverTLSBootstrap`'s [`ServingCertSlot`]) and whose client
/// certificates are checked by `client_verifier` (the client CA followed in its file),
/// so either can change while the port serves; `tls`: `tlsMinVersion` and
/// `tlsCipherSuites`.
pub fn tls_config_resolving(
    certificate: CertificateResolver,
    client_verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    tls: &ferrokube_pki::tls_options::TlsOptions,
) -> Result<Arc<rustls::ServerConfig>, ServerError> {
    ferrokube_pki::serving::server_config_with_resolver(
        certificate,
        client_verifier,
        ferrokube_pki::serving::ALPN_HTTP1,
        tls,
    )
    .map_err(|e| ServerError::Tls(e.to_string()))
}

/// The HTTPS port's certificate from `--tls-cert-file` and `--tls-private-key-file`,
/// read again every [`ferrokube_pki::reload::CHECK_INTERVAL`] until `cancel`, as
/// upstream's `ReloadKubeletServerCertificateFile` (beta, on since 1.31): a pair
/// rewritten in its files is served from the next handshake on.
pub fn followed_serving_certificate(
    cert: &Path,
    key: &Path,
    cancel: CancellationToken,
) -> Result<CertificateResolver, ServerError> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| ServerError::Io {
            path: path.to_path_buf(),
            source,
        })
    };
    let (cert_pem, key_pem) = (read(cert)?, read(key)?);
    let certificate = ferrokube_pki::serving::ServingCertificate::new(&cert_pem, &key_pem)
        .map_err(|e| ServerError::Tls(format!("{}: {e}", cert.display())))?;
    let mut files = ferrokube_pki::reload::ServingFiles::new(
        (cert.to_path_buf(), &cert_pem),
        (key.to_path_buf(), &key_pem),
        certificate.clone(),
    );
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(ferrokube_pki::reload::CHECK_INTERVAL) => {}
                _ = cancel.cancelled() => return,
            }
            files.check();
        }
    });
    Ok(certificate)
}

/// The serving pair of `serverTLSBootstrap`, shared by the certificate manager that
/// installs each issued certificate and the HTTPS server that resolves it at every
/// handshake, so a new certificate is served without a restart.
pub struct ServingCertSlot {
    current: parking_lot::RwLock<Option<CertifiedPair>>,
}

impl std::fmt::Debug for ServingCertSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCertSlot")
            .field("current", &*self.current.read())
            .finish()
    }
}

impl ServingCertSlot {
    pub fn new(pair: Option<CertifiedPair>) -> Arc<Self> {
        Arc::new(ServingCertSlot {
            current: parking_lot::RwLock::new(pair),
        })
    }

    /// The pair as installed, expired or not.
    pub fn get(&self) -> Option<CertifiedPair> {
        self.current.read().clone()
    }

    /// Upstream's manager `Current()`: the pair unless it has expired at `now`.
    pub fn current(&self, now: std::time::SystemTime) -> Option<CertifiedPair> {
        self.get().filter(|p| !p.expired(now))
    }

    pub fn set(&self, pair: CertifiedPair) {
        *self.current.write() = Some(pair);
    }
}

impl rustls::server::ResolvesServerCert for ServingCertSlot {
    /// Upstream's `GetCertificate`: without a valid certificate the handshake fails
    /// ("no serving certificate available for the kubelet").
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        let pair = self.current(std::time::SystemTime::now());
        if pair.is_none() {
            tracing::debug!("no serving certificate available for the kubelet");
        }
        pair.map(|p| p.certified)
    }
}

/// Upstream's fallback when no `--tls-cert-file` is given: a self-signed CA and a
/// serving certificate for the hostname and node IPs, kept in `<root-dir>/pki`
/// (`kubelet.crt` holds the serving cert and its CA). Reused when present.
pub fn ensure_self_signed(
    root_dir: &Path,
    hostname: &str,
    ips: &[IpAddr],
) -> Result<(PathBuf, PathBuf), ServerError> {
    let dir = root_dir.join("pki");
    let cert = dir.join("kubelet.crt");
    let key = dir.join("kubelet.key");
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ServerError::Io { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let mut dns = vec![hostname.to_owned()];
    if hostname != "localhost" {
        dns.push("localhost".into());
    }
    let issued = ferrokube_pki::serving::self_signed_serving(hostname, hostname, &dns, ips)
        .map_err(|e| ServerError::SelfSigned(e.to_string()))?;
    write_private(&key, &issued.key_pem).map_err(io(&key))?;
    std::fs::write(&cert, &issued.cert_pem).map_err(io(&cert))?;
    Ok((cert, key))
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(contents.as_bytes())
}

fn json(code: StatusCode, v: &serde_json::Value) -> Response<Body> {
    let mut r = text(code, v.to_string());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub(crate) fn not_found() -> Response<Body> {
    text(StatusCode::NOT_FOUND, "404 page not found\n")
}

/// One request, routed by path.
async fn handle(kubelet: Arc<Kubelet>, which: Endpoints, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let api = which == Endpoints::Api;
    match segs.as_slice() {
        ["healthz"] => text(StatusCode::OK, "ok"),
        ["pods"] if which != Endpoints::Healthz => json(
            StatusCode::OK,
            &serde_json::json!({
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {},
                "items": kubelet.pods(),
            }),
        ),
        ["metrics"] if which != Endpoints::Healthz => prometheus(
            kubelet
                .runtime()
                .cri()
                .metrics()
                .render(&gauges(&kubelet).await),
        ),
        ["metrics", "cadvisor"] if which != Endpoints::Healthz => {
            let samples = crate::stats::container_samples(&kubelet).await;
            let machine =
                crate::machine::read_machine_info(&kubelet.config().root_dir).unwrap_or_default();
            prometheus(crate::metrics::render_cadvisor(
                &samples,
                machine.num_cpus,
                machine.memory_bytes,
            ))
        }
        ["metrics", "probes"] if which != Endpoints::Healthz => {
            prometheus(kubelet.probe_metrics().render())
        }
        ["metrics", "resource"] if which != Endpoints::Healthz => {
            let stats = crate::stats::cpu_and_memory(&kubelet, kubelet.cpu_rate()).await;
            if let Err(e) = &stats {
                tracing::error!(error = %e, "getting stats for /metrics/resource");
            }
            prometheus(crate::resource_metrics::render(stats.as_ref().ok()))
        }
        ["stats", "summary"] if which != Endpoints::Healthz => {
            let summary = crate::stats::summary(&kubelet, kubelet.cpu_rate()).await;
            json(
                StatusCode::OK,
                &serde_json::to_value(&summary).unwrap_or_default(),
            )
        }
        ["containerLogs", ns, pod, container] if api => {
            let q = req.uri().query().map(str::to_owned);
            container_logs(&kubelet, ns, pod, container, q.as_deref()).await
        }
        ["exec", ns, pod, container] | ["exec", ns, pod, _, container] if api => {
            let (ns, pod, container) = (ns.to_string(), pod.to_string(), container.to_string());
            exec_or_attach(&kubelet, req, &ns, &pod, &container, Stream::Exec).await
        }
        ["attach", ns, pod, container] | ["attach", ns, pod, _, container] if api => {
            let (ns, pod, container) = (ns.to_string(), pod.to_string(), container.to_string());
            exec_or_attach(&kubelet, req, &ns, &pod, &container, Stream::Attach).await
        }
        ["portForward", ns, pod] | ["portForward", ns, pod, _] if api => {
            let (ns, pod) = (ns.to_string(), pod.to_string());
            port_forward(&kubelet, req, &ns, &pod).await
        }
        // Upstream's `configz.InstallHandler`: exactly `/configz`, any method.
        ["configz"] if api && path == "/configz" => configz(&kubelet),
        ["runningpods"] if api => {
            if req.method() != Method::GET {
                return method_not_allowed();
            }
            match kubelet.runtime().runtime_pods().await {
                Ok(pods) => json(StatusCode::OK, &running_pod_list(&pods)),
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            }
        }
        ["logs", ..] if api => {
            let dir = kubelet.config().system_log_dir.clone();
            crate::system_logs::system_logs(dir, req.method(), &path, req.uri().query()).await
        }
        _ => not_found(),
    }
}

/// A Prometheus text page.
fn prometheus(body: String) -> Response<Body> {
    let mut r = text(StatusCode::OK, body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

/// The gauges of `/metrics`, read from the runtime at scrape time.
async fn gauges(kubelet: &Kubelet) -> crate::metrics::KubeletGauges {
    let now = crate::stats::StatsTime(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    let claims = kubelet.runtime().volumes().all_local_claims();
    let mut g = crate::metrics::KubeletGauges {
        node_name: kubelet.config().node_name.clone(),
        volume_stats: crate::stats::local_claim_stats(&claims, &now)
            .into_iter()
            .filter_map(|v| {
                let claim = v.pvc_ref?;
                Some(((claim.namespace, claim.name), v.fs))
            })
            .collect(),
        volumes: kubelet
            .runtime()
            .volumes()
            .volume_counts()
            .into_iter()
            .map(|((plugin, state), n)| ((plugin.to_owned(), state.to_owned()), n))
            .collect(),
        ..Default::default()
    };
    let Ok(pods) = kubelet.runtime().runtime_pods().await else {
        return g;
    };
    for rp in pods.values() {
        if rp.sandboxes.iter().any(|s| s.ready) {
            g.running_pods += 1;
        }
        for c in &rp.containers {
            let state = match c.state {
                crate::status::RuntimeState::Created => "created",
                crate::status::RuntimeState::Running => "running",
                crate::status::RuntimeState::Exited => "exited",
                crate::status::RuntimeState::Unknown => "unknown",
            };
            *g.containers_by_state.entry(state.to_owned()).or_default() += 1;
        }
    }
    g
}

/// 405 for a method other than GET on a read-only debugging handler (upstream's
/// `GETOnlyRestfulFilter`).
pub(crate) fn method_not_allowed() -> Response<Body> {
    let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET"));
    r
}

/// `/configz`: `{"kubeletconfig": <the effective KubeletConfiguration>}` (upstream
/// `component-base/configz`).
fn configz(kubelet: &Kubelet) -> Response<Body> {
    let body = serde_json::json!({ "kubeletconfig": kubelet.config().configz });
    let mut r = json(StatusCode::OK, &body);
    r.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// `/runningpods/`: the pods the runtime runs, as upstream's `GetRunningPods` gives them
/// (the runtime cache's pods, i.e. ready sandboxes and running containers, each through
/// `kubecontainer.Pod.ToAPIPod`): a `v1` PodList whose items have only name, namespace,
/// UID and their running containers' names and images. A pod is listed while it has a
/// ready sandbox or a running container; pods with the newest ready sandbox come first
/// (upstream sorts by the sandboxes' creation time). Like upstream's items, they carry
/// no `apiVersion`/`kind`.
pub fn running_pod_list(pods: &BTreeMap<String, RuntimePod>) -> serde_json::Value {
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let mut running: Vec<(i64, Pod)> = vec![];
    for rp in pods.values() {
        let containers: Vec<Container> = rp
            .containers
            .iter()
            .filter(|c| c.state == RuntimeState::Running)
            .map(|c| Container {
                name: c.name.clone(),
                image: non_empty(&c.image),
                // Go writes the empty struct.
                resources: Some(ResourceRequirements::default()),
                ..Default::default()
            })
            .collect();
        let newest_ready = rp
            .sandboxes
            .iter()
            .filter(|s| s.ready)
            .map(|s| s.created_at)
            .max();
        if newest_ready.is_none() && containers.is_empty() {
            continue;
        }
        let pod = Pod {
            metadata: ObjectMeta {
                name: non_empty(&rp.name),
                namespace: non_empty(&rp.namespace),
                uid: non_empty(&rp.uid),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers,
                ..Default::default()
            }),
            status: Some(PodStatus::default()),
        };
        running.push((newest_ready.unwrap_or(0), pod));
    }
    running.sort_by_key(|(created, _)| std::cmp::Reverse(*created));
    let list = k8s_openapi::List::<Pod> {
        metadata: ListMeta::default(),
        items: running.into_iter().map(|(_, p)| p).collect(),
    };
    let mut v = serde_json::to_value(&list).unwrap_or_default();
    if let Some(items) = v.get_mut("items").and_then(|i| i.as_array_mut()) {
        for item in items.iter_mut().filter_map(|i| i.as_object_mut()) {
            item.remove("apiVersion");
            item.remove("kind");
        }
    }
    v
}

fn find_pod(kubelet: &Kubelet, ns: &str, pod_name: &str) -> Option<Pod> {
    kubelet
        .pods()
        .into_iter()
        .find(|p| namespace(p) == ns && name(p) == pod_name)
}

fn pod_not_found(ns: &str, pod: &str) -> Response<Body> {
    text(
        StatusCode::NOT_FOUND,
        format!("pod \"{ns}/{pod}\" does not exist on this node"),
    )
}

fn has_container(pod: &Pod, container: &str) -> bool {
    let s = spec(pod);
    s.containers.iter().any(|c| c.name == container)
        || s.init_containers
            .iter()
            .flatten()
            .any(|c| c.name == container)
        || s.ephemeral_containers
            .iter()
            .flatten()
            .any(|c| c.name == container)
}

/// The runtime's instances of one container of the pod, newest first.
async fn instances(
    kubelet: &Kubelet,
    pod: &Pod,
    container: &str,
) -> Result<Vec<RuntimeContainer>, Response<Body>> {
    let rt = kubelet
        .runtime()
        .runtime_pod(uid(pod))
        .await
        .map_err(|e| text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(rt
        .containers
        .into_iter()
        .filter(|c| c.name == container)
        .collect())
}

async fn container_logs(
    kubelet: &Arc<Kubelet>,
    ns: &str,
    pod_name: &str,
    container: &str,
    query: Option<&str>,
) -> Response<Body> {
    let opts = match LogOptions::from_query(query, jiff::Timestamp::now()) {
        Ok(o) => o,
        Err(e) => {
            return text(
                StatusCode::from_u16(e.code()).unwrap_or(StatusCode::BAD_REQUEST),
                e.to_string(),
            );
        }
    };
    let Some(pod) = find_pod(kubelet, ns, pod_name) else {
        return pod_not_found(ns, pod_name);
    };
    if !has_container(&pod, container) {
        return text(
            StatusCode::NOT_FOUND,
            format!("container \"{container}\" not found in pod \"{ns}/{pod_name}\""),
        );
    }
    let found = match instances(kubelet, &pod, container).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    // Which instance: chosen from the pod's status as upstream does, so a container in
    // CrashLoopBackOff shows the run that just failed, with or without `previous`.
    let id = match crate::logs::log_container_id(
        pod.status.as_ref(),
        pod_name,
        container,
        opts.previous,
    ) {
        Ok(id) => id,
        Err(msg) => return text(StatusCode::BAD_REQUEST, msg),
    };
    let Some(instance) = found.iter().find(|i| i.id == id) else {
        return text(
            StatusCode::BAD_REQUEST,
            format!("failed to get container status {id:?}: not found"),
        );
    };
    let cri_client = kubelet.runtime().cri().clone();
    let path = match cri_client.container_status(&instance.id).await {
        Ok(s) if !s.log_path.is_empty() => PathBuf::from(s.log_path),
        _ => pod_log_dir(kubelet.runtime().node(), &pod)
            .join(container)
            .join(format!("{}.log", instance.restart_count)),
    };
    if !path.exists() {
        // The runtime was asked for no log file, or it is gone: nothing to show.
        return text(StatusCode::OK, "");
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let id = instance.id.clone();
    tokio::spawn(async move {
        let running = move || {
            let cri_client = cri_client.clone();
            let id = id.clone();
            async move {
                matches!(
                    cri_client
                        .container_status(&id)
                        .await
                        .map(|s| RuntimeState::from(s.state)),
                    Ok(RuntimeState::Running)
                )
            }
        };
        if let Err(e) = stream_log_file(path.clone(), opts, tx, running).await {
            tracing::debug!(path = %path.display(), error = %e, "reading container log");
        }
    });
    let body = StreamBody::new(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    }));
    let mut r = Response::new(body.boxed());
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Exec,
    Attach,
}

/// `stdin`, `stdout`, `stderr`, `tty` and `command` of an exec/attach URL (the
/// apiserver writes `1`; `true` is accepted too).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamOptions {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
    pub command: Vec<String>,
}

impl StreamOptions {
    pub fn from_query(query: Option<&str>) -> StreamOptions {
        let mut o = StreamOptions::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = crate::logs::percent_decode(v);
            let on = matches!(v.as_str(), "1" | "true" | "True" | "TRUE");
            match crate::logs::percent_decode(k).as_str() {
                "stdin" | "input" => o.stdin = on,
                "stdout" | "output" => o.stdout = on,
                "stderr" | "error" => o.stderr = on,
                "tty" => o.tty = on,
                "command" => o.command.push(v),
                _ => {}
            }
        }
        o
    }
}

/// A WebSocket upgrade whose only channel protocol on offer is v5 (kubectl 1.30+).
fn v5_only(headers: &hyper::HeaderMap) -> bool {
    let offered = offered_subprotocols(headers);
    is_websocket(headers)
        && offered.iter().any(|p| p == CHANNEL_V5)
        && !offered
            .iter()
            .any(|p| p.contains("channel.k8s.io") && p != CHANNEL_V5)
}

async fn exec_or_attach(
    kubelet: &Arc<Kubelet>,
    req: Request<Incoming>,
    ns: &str,
    pod_name: &str,
    container: &str,
    kind: Stream,
) -> Response<Body> {
    if !is_upgrade(req.headers()) {
        return text(StatusCode::BAD_REQUEST, "Upgrade request required");
    }
    let o = StreamOptions::from_query(req.uri().query());
    if kind == Stream::Exec && o.command.is_empty() {
        return text(StatusCode::BAD_REQUEST, "you must specify a command");
    }
    if !(o.stdin || o.stdout || o.stderr) {
        return text(
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 of stdin, stdout, stderr",
        );
    }
    if o.stdin && v5_only(req.headers()) {
        // The runtime's v4 WebSocket cannot end stdin (v5's CLOSE signal), so a piped
        // `kubectl exec -i` would never see EOF. Refusing the upgrade makes kubectl fall
        // back to SPDY, whose streams half-close; both reach the runtime unchanged.
        return text(
            StatusCode::BAD_REQUEST,
            format!(
                "stdin over {CHANNEL_V5} is not supported by this node's runtime; \
                 use SPDY/3.1 or {CHANNEL_V4}"
            ),
        );
    }
    let Some(pod) = find_pod(kubelet, ns, pod_name) else {
        return pod_not_found(ns, pod_name);
    };
    if !has_container(&pod, container) {
        return text(
            StatusCode::NOT_FOUND,
            format!("container \"{container}\" not found in pod \"{ns}/{pod_name}\""),
        );
    }
    let found = match instances(kubelet, &pod, container).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    let Some(running) = found.iter().find(|c| c.state == RuntimeState::Running) else {
        return text(
            StatusCode::BAD_REQUEST,
            format!("container \"{container}\" in pod \"{ns}/{pod_name}\" is not running"),
        );
    };
    // A TTY merges stderr into stdout; the runtime refuses both.
    let stderr = o.stderr && !o.tty;
    let cri_client = kubelet.runtime().cri();
    let url = match kind {
        Stream::Exec => {
            cri_client
                .exec(cri::ExecRequest {
                    container_id: running.id.clone(),
                    cmd: o.command,
                    tty: o.tty,
                    stdin: o.stdin,
                    stdout: o.stdout,
                    stderr,
                })
                .await
        }
        Stream::Attach => {
            cri_client
                .attach(cri::AttachRequest {
                    container_id: running.id.clone(),
                    stdin: o.stdin,
                    tty: o.tty,
                    stdout: o.stdout,
                    stderr,
                })
                .await
        }
    };
    match url {
        Ok(url) => proxy_to_runtime(req, &url).await,
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn port_forward(
    kubelet: &Arc<Kubelet>,
    req: Request<Incoming>,
    ns: &str,
    pod_name: &str,
) -> Response<Body> {
    if !is_upgrade(req.headers()) {
        return text(StatusCode::BAD_REQUEST, "Upgrade request required");
    }
    let Some(pod) = find_pod(kubelet, ns, pod_name) else {
        return pod_not_found(ns, pod_name);
    };
    let rt = match kubelet.runtime().runtime_pod(uid(&pod)).await {
        Ok(rt) => rt,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let Some(sandbox) = rt.sandboxes.iter().find(|s| s.ready) else {
        return text(
            StatusCode::BAD_REQUEST,
            format!("pod \"{ns}/{pod_name}\" has no running sandbox"),
        );
    };
    let ports: Vec<i32> = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|p| p.strip_prefix("port="))
        .filter_map(|p| p.parse().ok())
        .collect();
    match kubelet
        .runtime()
        .cri()
        .port_forward(&sandbox.id, ports)
        .await
    {
        Ok(url) => proxy_to_runtime(req, &url).await,
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// Who may use the kubelet API, and the verified client certificate's user of one
/// connection.
#[derive(Clone)]
struct Guard {
    auth: Arc<KubeletAuth>,
    certificate_user: Option<ferrokube_client::delegated::User>,
}

impl Guard {
    async fn check(&self, req: &Request<Incoming>) -> Result<(), Response<Body>> {
        let bearer = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        self.auth
            .check(
                req.method().as_str(),
                req.uri().path(),
                bearer,
                self.certificate_user.clone(),
            )
            .await
            .map(|_| ())
            .map_err(|r| {
                text(
                    StatusCode::from_u16(r.code).unwrap_or(StatusCode::FORBIDDEN),
                    r.message,
                )
            })
    }
}

/// The response with `in_flight` kept until its body is written or dropped, so that a
/// streamed body (a followed container log) counts as in flight while it streams, as
/// upstream's handler runs until it has written it.
fn until_body_done(response: Response<Body>, in_flight: HttpRequestInFlight) -> Response<Body> {
    response.map(|body| HeldBody::new(body, in_flight).boxed())
}

async fn serve_one<S>(stream: S, kubelet: Arc<Kubelet>, which: Endpoints, guard: Option<Guard>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // Upstream's read-only and authenticated servers are measured; the healthz port is
    // a bare mux without metrics.
    let server_type = match which {
        Endpoints::Healthz => None,
        Endpoints::ReadOnly => Some(HttpServer::ReadOnly),
        Endpoints::Api => Some(HttpServer::ReadWrite),
    };
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let (k, guard) = (kubelet.clone(), guard.clone());
        // Refused requests count too: upstream authenticates inside the measured handler.
        let in_flight = server_type.map(|server| {
            let labels = HttpRequestLabels::of(server, req.method().as_str(), req.uri().path());
            k.runtime().cri().metrics().http_request(labels)
        });
        async move {
            let response = match guard {
                Some(guard) if let Err(refusal) = guard.check(&req).await => refusal,
                _ => handle(k, which, req).await,
            };
            Ok::<_, Infallible>(match in_flight {
                Some(in_flight) => until_body_done(response, in_flight),
                None => response,
            })
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
        .with_upgrades()
        .await;
}

/// Binds `addr` and serves plain HTTP until `cancel`; the bound address is returned
/// once listening.
pub async fn bind(
    addr: SocketAddr,
    kubelet: Arc<Kubelet>,
    which: Endpoints,
    cancel: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    serve(addr, kubelet, which, None, cancel).await
}

/// Binds `addr` and serves the kubelet API over TLS until `cancel`, each request
/// authenticated and authorized by `auth`.
pub async fn bind_tls(
    addr: SocketAddr,
    kubelet: Arc<Kubelet>,
    tls: Arc<rustls::ServerConfig>,
    auth: Arc<KubeletAuth>,
    cancel: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    serve(addr, kubelet, Endpoints::Api, Some((tls, auth)), cancel).await
}

async fn serve(
    addr: SocketAddr,
    kubelet: Arc<Kubelet>,
    which: Endpoints,
    tls: Option<(Arc<rustls::ServerConfig>, Arc<KubeletAuth>)>,
    cancel: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let acceptor = tls.map(|(tls, auth)| (tokio_rustls::TlsAcceptor::from(tls), auth));
    let task = tokio::spawn(async move {
        loop {
            let (stream, peer) = tokio::select! {
                _ = cancel.cancelled() => return,
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(_) => {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let _ = stream.set_nodelay(true);
            let k = kubelet.clone();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                match acceptor {
                    None => serve_one(stream, k, which, None).await,
                    Some((a, auth)) => {
                        let handshake = tokio::time::timeout(
                            std::time::Duration::from_secs(10),
                            a.accept(stream),
                        )
                        .await;
                        match handshake {
                            Ok(Ok(tls)) => {
                                // The handshake verified it against the client CA.
                                let certificate_user = tls
                                    .get_ref()
                                    .1
                                    .peer_certificates()
                                    .and_then(|chain| chain.first())
                                    .and_then(|leaf| {
                                        ferrokube_client::delegated::certificate_user(leaf)
                                    });
                                let guard = Guard {
                                    auth,
                                    certificate_user,
                                };
                                serve_one(tls, k, which, Some(guard)).await
                            }
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed")
                            }
                            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                        }
                    }
                }
            });
        }
    });
    Ok((local, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_in_flight_until_its_response_body_goes() {
        let metrics = Arc::new(crate::metrics::KubeletMetrics::default());
        let labels = HttpRequestLabels::of(HttpServer::ReadWrite, "GET", "/containerLogs/a/b/c");
        let in_flight = |m: &crate::metrics::KubeletMetrics| {
            m.render(&Default::default())
                .lines()
                .find_map(|l| {
                    l.strip_prefix("kubelet_http_inflight_requests{long_running=\"false\",method=\"GET\",path=\"containerLogs\",server_type=\"readwrite\"} ")
                        .map(str::to_owned)
                })
                .unwrap_or_default()
        };
        let response = until_body_done(
            text(StatusCode::OK, "a log line\n"),
            metrics.http_request(labels),
        );
        assert_eq!(
            in_flight(&metrics),
            "1",
            "the response is handed back, its body not yet written"
        );
        assert_eq!(response.status(), StatusCode::OK);
        // Its length stays known, so that it goes out with Content-Length, not chunked.
        assert_eq!(
            hyper::body::Body::size_hint(response.body()).exact(),
            Some(11)
        );
        drop(response);
        assert_eq!(in_flight(&metrics), "0");
    }

    #[test]
    fn stream_options_from_query() {
        let o = StreamOptions::from_query(Some(
            "command=cat&command=%2Fetc%2Fhostname&stdout=1&stderr=true&tty=0",
        ));
        assert_eq!(
            o,
            StreamOptions {
                stdin: false,
                stdout: true,
                stderr: true,
                tty: false,
                command: vec!["cat".into(), "/etc/hostname".into()],
            }
        );
        assert_eq!(StreamOptions::from_query(None), StreamOptions::default());
        let o = StreamOptions::from_query(Some("input=1&output=1&tty=1&command=sh+-c"));
        assert!(o.stdin && o.stdout && o.tty && !o.stderr);
        assert_eq!(o.command, ["sh -c"]);
    }

    #[test]
    fn tls_config_needs_a_certificate() {
        assert!(matches!(tls_config("", "", None), Err(ServerError::Tls(_))));
    }

    #[test]
    fn self_signed_is_made_once() {
        let dir = tempfile::tempdir().unwrap();
        let ips = [IpAddr::from([127, 0, 0, 1])];
        let (cert, key) = ensure_self_signed(dir.path(), "node-a", &ips).unwrap();
        let cert_pem = std::fs::read_to_string(&cert).unwrap();
        let key_pem = std::fs::read_to_string(&key).unwrap();
        assert_eq!(cert_pem.matches("BEGIN CERTIFICATE").count(), 2);
        tls_config(&cert_pem, &key_pem, None).expect("usable for TLS");
        ensure_self_signed(dir.path(), "node-a", &ips).unwrap();
        assert_eq!(std::fs::read_to_string(&cert).unwrap(), cert_pem, "reused");
        let info = ferrokube_pki::CertInfo::from_pem(&cert_pem).unwrap();
        assert!(info.dns_sans.contains(&"node-a".to_string()));
        assert!(info.ip_sans.contains(&ips[0]));
    }

    fn container(name: &str, image: &str, state: RuntimeState) -> RuntimeContainer {
        RuntimeContainer {
            id: format!("id-{name}"),
            name: name.into(),
            state,
            created_at: 0,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            image: image.into(),
            image_ref: format!("sha256:{name}"),
            restart_count: 0,
            hash: String::new(),
            kind: crate::container::ContainerType::Regular,
            sandbox_id: String::new(),
        }
    }

    fn sandbox(ready: bool, created_at: i64) -> crate::status::RuntimeSandbox {
        crate::status::RuntimeSandbox {
            id: format!("sb-{created_at}"),
            ready,
            created_at,
            attempt: 0,
            ips: vec![],
            host_network: false,
        }
    }

    #[test]
    fn running_pods_as_upstream_lists_them() {
        let pod = |uid: &str, sandboxes, containers| RuntimePod {
            uid: uid.into(),
            name: format!("pod-{uid}"),
            namespace: "default".into(),
            sandboxes,
            containers,
        };
        let pods = BTreeMap::from([
            (
                "u1".to_string(),
                pod(
                    "u1",
                    vec![sandbox(true, 100), sandbox(false, 50)],
                    vec![
                        container("web", "nginx:1.27", RuntimeState::Running),
                        container("init", "busybox", RuntimeState::Exited),
                        container("side", "envoy", RuntimeState::Created),
                    ],
                ),
            ),
            // Only a ready sandbox: listed, without containers.
            (
                "u2".to_string(),
                pod("u2", vec![sandbox(true, 300)], vec![]),
            ),
            // Nothing running: not listed.
            (
                "u3".to_string(),
                pod(
                    "u3",
                    vec![sandbox(false, 400)],
                    vec![container("done", "busybox", RuntimeState::Exited)],
                ),
            ),
            // A running container whose sandbox is not ready: listed, last.
            (
                "u4".to_string(),
                pod(
                    "u4",
                    vec![sandbox(false, 500)],
                    vec![container("c", "img", RuntimeState::Running)],
                ),
            ),
        ]);
        assert_eq!(
            running_pod_list(&pods),
            serde_json::json!({
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {},
                "items": [
                    {
                        "metadata": {"name": "pod-u2", "namespace": "default", "uid": "u2"},
                        "spec": {"containers": []},
                        "status": {},
                    },
                    {
                        "metadata": {"name": "pod-u1", "namespace": "default", "uid": "u1"},
                        "spec": {"containers": [
                            {"name": "web", "image": "nginx:1.27", "resources": {}},
                        ]},
                        "status": {},
                    },
                    {
                        "metadata": {"name": "pod-u4", "namespace": "default", "uid": "u4"},
                        "spec": {"containers": [
                            {"name": "c", "image": "img", "resources": {}},
                        ]},
                        "status": {},
                    },
                ],
            })
        );
        assert_eq!(
            running_pod_list(&BTreeMap::new()),
            serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []})
        );
    }
}
