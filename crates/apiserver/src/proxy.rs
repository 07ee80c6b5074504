//! The subresources the apiserver serves by calling the pod's kubelet (upstream
//! `pkg/registry/core/pod/rest/subresources.go`, `LocationStreamer`,
//! `UpgradeAwareHandler` and `util/proxy`'s stream tunnel): `pods/log`, `pods/exec`,
//! `pods/attach`, `pods/portforward`, and `nodes/proxy` (upstream
//! `pkg/registry/core/node/rest/proxy.go`: `/api/v1/nodes/{node}/proxy/{path}` is
//! `{path}` on the node's kubelet, e.g. `/stats/summary` or `/metrics`).
//!
//! - `pods/log` is a GET whose kubelet response body is streamed through frame by frame
//!   (`kubectl logs -f` must see lines as they come).
//! - `exec`/`attach`/`portforward` are connection upgrades. The request goes to the
//!   kubelet with its upgrade headers and, once the kubelet answered 101, the two
//!   connections are spliced: kubectl's WebSocket (`v5.channel.k8s.io`, which the
//!   kubelet speaks) or SPDY/3.1 passes through unchanged.
//! - A WebSocket offering `SPDY/3.1+portforward.k8s.io` (kubectl 1.31+ port-forward)
//!   tunnels SPDY in binary messages: the kubelet gets a plain SPDY/3.1 upgrade, and
//!   each message's payload goes to it as raw bytes (and its bytes come back as binary
//!   messages), as upstream's `TunnelingHandler`.
//!
//! The kubelet is reached over TLS at the node's first address of the types
//! `--kubelet-preferred-address-types` lists (upstream's default puts Hostname first;
//! kubeadm passes `InternalIP,ExternalIP,Hostname`) and
//! `status.daemonEndpoints.kubeletEndpoint.Port`, with
//! `--kubelet-client-certificate/-key` and `--kubelet-certificate-authority`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferrokube_apimachinery::errors::{ApiError, reason};
use ferrokube_apimachinery::resource_version::query_bool;
use ferrokube_pki::insecure::AcceptAnyServerCert;
use futures::{SinkExt, StreamExt};
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::handler::{Body, State};

/// The prefix kubectl puts on SPDY protocols it tunnels through a WebSocket.
pub const SPDY_TUNNEL_PREFIX: &str = "SPDY/3.1+";
/// Upstream's limit on how much of a kubelet error body is read into the Status.
const MAX_ERROR_BODY: usize = 50 * 1024;
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// How the apiserver connects to kubelets.
pub struct KubeletClient {
    tls: Arc<rustls::ClientConfig>,
    /// `--kubelet-preferred-address-types`, in order.
    preferred_address_types: Vec<String>,
}

impl std::fmt::Debug for KubeletClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletClient").finish_non_exhaustive()
    }
}

/// A bad `--kubelet-*` file.
#[derive(Debug, thiserror::Error)]
#[error("kubelet client TLS: {0}")]
pub struct KubeletClientError(String);

impl KubeletClient {
    /// From PEM: the client certificate and key the kubelet authenticates us by, and the
    /// CA its serving certificate must chain to. Without a CA the kubelet's certificate
    /// is not verified (upstream does the same, for kubelets with self-signed
    /// certificates).
    pub fn new(
        client_cert_key: Option<(&str, &str)>,
        ca_pem: Option<&str>,
    ) -> Result<Self, KubeletClientError> {
        let roots = match ca_pem {
            Some(ca) => ServerRoots::Pem(ca.to_string()),
            None => ServerRoots::Any,
        };
        let tls = client_tls(client_cert_key, &roots).map_err(KubeletClientError)?;
        Ok(KubeletClient {
            tls,
            preferred_address_types: crate::DEFAULT_KUBELET_PREFERRED_ADDRESS_TYPES
                .map(String::from)
                .to_vec(),
        })
    }

    /// Tries the Node address types in this order (`--kubelet-preferred-address-types`).
    pub fn with_preferred_address_types(mut self, types: Vec<String>) -> Self {
        self.preferred_address_types = types;
        self
    }

    /// The kubelet's `host:port` on `node`, or a 503 naming the addresses it has.
    fn address_of(&self, node_name: &str, node: &Value) -> Result<(String, u16), ApiError> {
        kubelet_address(node, &self.preferred_address_types).ok_or_else(|| {
            let known: Vec<String> = node["status"]["addresses"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| {
                    Some(format!(
                        "{}: {}",
                        a["type"].as_str()?,
                        a["address"].as_str()?
                    ))
                })
                .collect();
            ApiError::service_unavailable(format!(
                "node {node_name}: no preferred addresses found; known addresses: [{}]",
                known.join(" ")
            ))
        })
    }
}

/// What a TLS client trusts a server's certificate by.
pub(crate) enum ServerRoots {
    /// Anything (the server is not verified).
    Any,
    /// The CA certificates of this PEM (none: nothing is trusted).
    Pem(String),
}

/// A TLS client over HTTP/1.1 (upgrades exist only there) that trusts `roots` and,
/// when given, presents a client certificate and key (PEM).
pub(crate) fn client_tls(
    client_cert_key: Option<(&str, &str)>,
    roots: &ServerRoots,
) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let err = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| err("protocol versions", &e))?;
    let builder = match roots {
        ServerRoots::Pem(ca) => {
            let mut store = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                store
                    .add(c.map_err(|e| err("certificate authority", &e))?)
                    .map_err(|e| err("certificate authority", &e))?;
            }
            builder.with_root_certificates(store)
        }
        ServerRoots::Any => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert(provider))),
    };
    let mut cfg = match client_cert_key {
        Some((cert, key)) => {
            let certs: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<_, _>>()
                    .map_err(|e| err("client certificate", &e))?;
            let key =
                PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| err("client key", &e))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| err("client certificate", &e))?
        }
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The pod subresources served through the kubelet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodProxy {
    Log,
    Exec,
    Attach,
    PortForward,
    /// `nodes/proxy`: any kubelet path (routed here so the handler has one entry point
    /// for everything the apiserver sends to a kubelet).
    Node,
    /// `pods/proxy` and `services/proxy`: HTTP to the workload itself, not its kubelet
    /// (see [`crate::workload_proxy`]).
    PodHttp,
    ServiceHttp,
}

impl PodProxy {
    pub fn from_subresource(sub: &str) -> Option<PodProxy> {
        match sub {
            "log" => Some(PodProxy::Log),
            "exec" => Some(PodProxy::Exec),
            "attach" => Some(PodProxy::Attach),
            "portforward" => Some(PodProxy::PortForward),
            _ => None,
        }
    }
}

/// The raw query as ordered pairs (`command` repeats).
pub fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The container a request names, or the pod's only container (upstream
/// `validateContainer`).
pub fn resolve_container(
    pod: &Value,
    pod_name: &str,
    given: Option<&str>,
) -> Result<String, ApiError> {
    let names = |key: &str| -> Vec<String> {
        pod["spec"][key]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let containers = names("containers");
    let init = names("initContainers");
    let ephemeral = names("ephemeralContainers");
    match given.filter(|c| !c.is_empty()) {
        Some(c) => {
            if containers
                .iter()
                .chain(&init)
                .chain(&ephemeral)
                .any(|n| n == c)
            {
                Ok(c.to_owned())
            } else {
                Err(ApiError::bad_request(format!(
                    "container {c} is not valid for pod {pod_name}"
                )))
            }
        }
        None if containers.len() == 1 => Ok(containers[0].clone()),
        None => {
            let mut msg = format!(
                "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                containers.join(" ")
            );
            if !init.is_empty() {
                msg.push_str(&format!(
                    " or one of the init containers: [{}]",
                    init.join(" ")
                ));
            }
            if !ephemeral.is_empty() {
                msg.push_str(&format!(
                    " or one of the ephemeral containers: [{}]",
                    ephemeral.join(" ")
                ));
            }
            Err(ApiError::bad_request(msg))
        }
    }
}

fn encode(pairs: &[(String, String)]) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    s.finish()
}

/// The kubelet path and query for a pod subresource request (upstream
/// `LogLocation`/`streamLocation` + `streamParams`: booleans become `1`).
pub fn kubelet_path(
    kind: PodProxy,
    ns: &str,
    pod: &str,
    container: &str,
    query: &[(String, String)],
) -> String {
    let mut out: Vec<(String, String)> = Vec::new();
    match kind {
        PodProxy::Log => {
            for (k, v) in query {
                match k.as_str() {
                    "follow" | "previous" | "timestamps" | "insecureSkipTLSVerifyBackend"
                        if query_bool(v) =>
                    {
                        out.push((k.clone(), "true".into()))
                    }
                    "sinceSeconds" | "sinceTime" | "tailLines" | "limitBytes" | "stream" => {
                        out.push((k.clone(), v.clone()))
                    }
                    _ => {}
                }
            }
        }
        PodProxy::Exec | PodProxy::Attach => {
            for (k, v) in query {
                match k.as_str() {
                    "stdin" | "stdout" | "stderr" | "tty" if query_bool(v) => {
                        out.push((k.clone(), "1".into()))
                    }
                    "command" if kind == PodProxy::Exec => out.push((k.clone(), v.clone())),
                    _ => {}
                }
            }
        }
        PodProxy::PortForward => {
            for (k, v) in query {
                if k == "ports" || k == "port" {
                    out.push(("port".into(), v.clone()));
                }
            }
        }
        PodProxy::Node | PodProxy::PodHttp | PodProxy::ServiceHttp => {
            out.extend(query.iter().cloned())
        }
    }
    let base = match kind {
        PodProxy::Log => format!("/containerLogs/{ns}/{pod}/{container}"),
        PodProxy::Exec => format!("/exec/{ns}/{pod}/{container}"),
        PodProxy::Attach => format!("/attach/{ns}/{pod}/{container}"),
        PodProxy::PortForward => format!("/portForward/{ns}/{pod}"),
        // nodes/proxy: `pod` carries the kubelet path (the workload proxies never ask).
        PodProxy::Node | PodProxy::PodHttp | PodProxy::ServiceHttp => pod.to_owned(),
    };
    if out.is_empty() {
        base
    } else {
        format!("{base}?{}", encode(&out))
    }
}

/// The kubelet's `host:port` from the Node: the first address of the first type in
/// `preferred` the node has (upstream's `GetPreferredNodeAddress`: for Hostname, the
/// `kubernetes.io/hostname` label when no such address is reported), port from
/// `daemonEndpoints` (10250 when unset).
pub fn kubelet_address(node: &Value, preferred: &[String]) -> Option<(String, u16)> {
    let addrs = node["status"]["addresses"].as_array();
    let host = preferred.iter().find_map(|t| {
        addrs
            .into_iter()
            .flatten()
            .find(|a| a["type"] == t.as_str())
            .and_then(|a| a["address"].as_str())
            .or_else(|| {
                (t == "Hostname")
                    .then(|| node["metadata"]["labels"]["kubernetes.io/hostname"].as_str())
                    .flatten()
            })
            .filter(|a| !a.is_empty())
    })?;
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
        .unwrap_or(10250);
    Some((host.to_owned(), port))
}

/// A kubelet error response as the Status upstream's `GenericHttpResponseChecker` makes
/// of it: the kubelet's code, a reason for it, its body as the message.
pub fn status_from_kubelet(code: u16, body: &[u8]) -> ApiError {
    let text = String::from_utf8_lossy(body).trim().to_owned();
    let (reason, fallback) = match code {
        400 => (
            reason::BAD_REQUEST,
            "the server rejected our request for an unknown reason",
        ),
        401 => (
            reason::UNAUTHORIZED,
            "the server has asked for the client to provide credentials",
        ),
        403 => (
            reason::FORBIDDEN,
            "the server does not allow access to the requested resource",
        ),
        404 => (
            reason::NOT_FOUND,
            "the server could not find the requested resource",
        ),
        409 => (reason::CONFLICT, "the server reported a conflict"),
        422 => (
            reason::INVALID,
            "the server rejected our request due to an error in our request",
        ),
        503 => (
            reason::SERVICE_UNAVAILABLE,
            "the server is currently unable to handle the request",
        ),
        _ if code >= 500 => (
            reason::INTERNAL_ERROR,
            "an error on the server has prevented the request from succeeding",
        ),
        _ => (
            reason::UNKNOWN,
            "the server responded with an unexpected status",
        ),
    };
    ApiError {
        code,
        reason: reason.into(),
        message: if text.is_empty() {
            fallback.to_owned()
        } else {
            text
        },
        details: None,
    }
}

fn ws_subprotocols(headers: &http::HeaderMap) -> Vec<String> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

/// The SPDY protocols a WebSocket tunnel offers (`SPDY/3.1+portforward.k8s.io` ->
/// `portforward.k8s.io`; only Kubernetes ones).
pub fn tunneled_spdy_protocols(offered: &[String]) -> Vec<String> {
    offered
        .iter()
        .filter_map(|p| p.strip_prefix(SPDY_TUNNEL_PREFIX))
        .filter(|p| p.ends_with(".k8s.io"))
        .map(str::to_owned)
        .collect()
}

pub(crate) fn is_upgrade(headers: &http::HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

fn is_websocket(headers: &http::HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
}

type KubeletSender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// A TCP connection to `host:port` (bounded by the dial timeout), and the address as
/// the error texts name it.
pub(crate) async fn connect_tcp(
    host: &str,
    port: u16,
) -> Result<(tokio::net::TcpStream, String), String> {
    let addr = crate::https_pool::address(host, port);
    let tcp = tokio::time::timeout(DIAL_TIMEOUT, tokio::net::TcpStream::connect(&addr))
        .await
        .map_err(|_| format!("dial tcp {addr}: i/o timeout"))?
        .map_err(|e| format!("dial tcp {addr}: {}", go_connect_error(&e)))?;
    let _ = tcp.set_nodelay(true);
    Ok((tcp, addr))
}

/// TLS over `tcp` to `host` with `tls` (bounded by the dial timeout).
pub(crate) async fn connect_tls(
    tls: Arc<rustls::ClientConfig>,
    host: &str,
    addr: &str,
    tcp: tokio::net::TcpStream,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let name = rustls_pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| format!("address {host:?}: {e}"))?;
    tokio::time::timeout(
        DIAL_TIMEOUT,
        tokio_rustls::TlsConnector::from(tls).connect(name, tcp),
    )
    .await
    .map_err(|_| format!("TLS handshake with {addr}: timed out"))?
    .map_err(|e| format!("TLS handshake with {addr}: {e}"))
}

/// A TLS client that does not verify the server and presents no certificate: for
/// `componentstatuses` probes and `https:` pod and Service proxying, as upstream.
pub(crate) fn insecure_tls() -> Result<Arc<rustls::ClientConfig>, String> {
    static INSECURE: std::sync::LazyLock<Result<KubeletClient, KubeletClientError>> =
        std::sync::LazyLock::new(|| KubeletClient::new(None, None));
    INSECURE
        .as_ref()
        .map(|c| c.tls.clone())
        .map_err(|e| e.to_string())
}

async fn dial(client: &KubeletClient, host: &str, port: u16) -> Result<KubeletSender, String> {
    let (tcp, addr) = connect_tcp(host, port).await?;
    let tls = connect_tls(client.tls.clone(), host, &addr, tcp).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| format!("HTTP to {addr}: {e}"))?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "kubelet connection ended");
        }
    });
    Ok(sender)
}

/// A failed connect as Go's net package words it (`connect: connection refused`), so
/// errors read as upstream's do.
fn go_connect_error(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connect: connection refused".into(),
        std::io::ErrorKind::TimedOut => "i/o timeout".into(),
        _ => format!("connect: {e}"),
    }
}

/// `GET https://host:port/path` without verifying the server's certificate and
/// without a client certificate, as upstream probes the scheduler and the controller
/// manager for `componentstatuses`: the status code and the body (up to upstream's
/// limit on an error body).
pub(crate) async fn insecure_get(
    host: &str,
    port: u16,
    path: &str,
) -> Result<(u16, Vec<u8>), String> {
    // Dialled by host: the address types are never consulted.
    let client = KubeletClient {
        tls: insecure_tls()?,
        preferred_address_types: Vec::new(),
    };
    let mut sender = dial(&client, host, port).await?;
    let req = Request::get(path)
        .header(http::header::HOST, format!("{host}:{port}"))
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let code = resp.status().as_u16();
    Ok((code, read_limited(resp.into_body()).await))
}

async fn read_limited(body: Incoming) -> Vec<u8> {
    let mut out = Vec::new();
    let mut body = body;
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            out.extend_from_slice(&data);
            if out.len() >= MAX_ERROR_BODY {
                out.truncate(MAX_ERROR_BODY);
                break;
            }
        }
    }
    out
}

fn empty_body() -> Body {
    http_body_util::Empty::new().boxed_unsync()
}

/// `GET|POST /api/v1/namespaces/{ns}/pods/{name}/{log,exec,attach,portforward}`.
pub(crate) async fn pod_subresource(
    state: &State,
    req: Request<Incoming>,
    ns: &str,
    name: &str,
    kind: PodProxy,
) -> Result<Response<Body>, ApiError> {
    admit_connect(state, &req, ns, name, kind).await?;
    match kind {
        PodProxy::Node => return node_proxy(state, req, name).await,
        PodProxy::PodHttp | PodProxy::ServiceHttp => {
            return crate::workload_proxy::serve(state, req, kind == PodProxy::ServiceHttp).await;
        }
        _ => {}
    }
    let method_ok = match kind {
        PodProxy::Log => req.method() == Method::GET,
        _ => req.method() == Method::GET || req.method() == Method::POST,
    };
    if !method_ok {
        return Err(ApiError {
            code: 405,
            reason: reason::METHOD_NOT_ALLOWED.into(),
            message: "the server does not allow this method on the requested resource".into(),
            details: None,
        });
    }
    let pods = ferrokube_api::resources::lookup("", "v1", "pods")
        .and_then(|i| state.registry.store_for(i))
        .ok_or_else(|| ApiError::internal("no store for pods"))?;
    let pod = pods.get(Some(ns), name).await?;
    let query = query_pairs(req.uri().query());
    let container = match kind {
        PodProxy::PortForward => String::new(),
        _ => {
            let given = query
                .iter()
                .find(|(k, _)| k == "container")
                .map(|(_, v)| v.as_str());
            resolve_container(&pod, name, given)?
        }
    };
    let node_name = pod["spec"]["nodeName"].as_str().unwrap_or("");
    if node_name.is_empty() {
        if kind == PodProxy::Log {
            // Upstream: no host yet, so no logs (an empty answer, not an error).
            let mut r = Response::new(empty_body());
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            return Ok(r);
        }
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    if matches!(kind, PodProxy::Exec | PodProxy::Attach) {
        let phase = pod["status"]["phase"].as_str().unwrap_or("");
        if phase == "Succeeded" || phase == "Failed" {
            let verb = if kind == PodProxy::Exec {
                "exec into"
            } else {
                "attach"
            };
            return Err(ApiError::bad_request(format!(
                "cannot {verb} a container in a completed pod; current phase is {phase}"
            )));
        }
    }
    let nodes = ferrokube_api::resources::lookup("", "v1", "nodes")
        .and_then(|i| state.registry.store_for(i))
        .ok_or_else(|| ApiError::internal("no store for nodes"))?;
    let node = nodes.get(None, node_name).await.map_err(|e| {
        if e.code == 404 {
            ApiError::service_unavailable(format!(
                "the node {node_name} of pod {name} does not exist"
            ))
        } else {
            e
        }
    })?;
    let (host, port) = state.kubelet.address_of(node_name, &node)?;
    let path = kubelet_path(kind, ns, name, &container, &query);
    let url = format!("https://{host}:{port}{path}");
    let unreachable = |e: String| {
        ApiError::service_unavailable(format!(
            "error dialing the kubelet of node {node_name} at {url}: {e}"
        ))
    };
    match kind {
        PodProxy::Log => {
            let mut sender = dial(&state.kubelet, &host, port)
                .await
                .map_err(unreachable)?;
            let out = Request::get(&path)
                .header(header::HOST, format!("{host}:{port}"))
                .body(Empty::new())
                .map_err(|e| ApiError::internal(e.to_string()))?;
            let resp = sender
                .send_request(out)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            if !resp.status().is_success() {
                let code = resp.status().as_u16();
                return Err(status_from_kubelet(
                    code,
                    &read_limited(resp.into_body()).await,
                ));
            }
            Ok(stream_through(resp))
        }
        _ => {
            if !is_upgrade(req.headers()) {
                return Err(ApiError::bad_request("Upgrade request required"));
            }
            let offered = ws_subprotocols(req.headers());
            let tunneled = tunneled_spdy_protocols(&offered);
            let sender = dial(&state.kubelet, &host, port)
                .await
                .map_err(unreachable)?;
            if kind == PodProxy::PortForward && is_websocket(req.headers()) && !tunneled.is_empty()
            {
                tunnel_spdy(req, sender, &host, port, &path, &tunneled).await
            } else {
                splice(req, sender, &host, port, &path).await
            }
        }
    }
}

/// A received body passed on frame by frame as it arrives (a failed read ends it).
pub(crate) fn streamed(body: Incoming) -> Body {
    let frames = futures::stream::unfold(Some(body), |body| async move {
        let mut body = body?;
        match body.frame().await {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => Some((Ok::<_, Infallible>(Frame::data(data)), Some(body))),
                Err(_) => Some((Ok(Frame::data(Bytes::new())), Some(body))),
            },
            _ => None,
        }
    });
    StreamBody::new(frames).boxed_unsync()
}

/// The kubelet's log response, frame by frame (a failed read ends the body).
fn stream_through(resp: Response<Incoming>) -> Response<Body> {
    let (parts, body) = resp.into_parts();
    let mut r = Response::new(streamed(body));
    r.extensions_mut().insert(crate::handler::Relayed);
    let ct = parts
        .headers
        .get(header::CONTENT_TYPE)
        .cloned()
        .unwrap_or(HeaderValue::from_static("text/plain"));
    r.headers_mut().insert(header::CONTENT_TYPE, ct);
    r
}

fn forward_request(
    req: &Request<Incoming>,
    host: &str,
    port: u16,
    path: &str,
) -> Result<Request<Empty<Bytes>>, ApiError> {
    let mut out = Request::builder()
        .method(req.method().clone())
        .uri(path)
        .body(Empty::new())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    for (k, v) in req.headers() {
        // The kubelet authenticates the apiserver, not the user.
        if k != header::HOST
            && k != header::AUTHORIZATION
            && k != header::CONTENT_LENGTH
            && k != header::TRANSFER_ENCODING
            && !k.as_str().starts_with("impersonate-")
        {
            out.headers_mut().append(k.clone(), v.clone());
        }
    }
    if let Ok(h) = HeaderValue::from_str(&format!("{host}:{port}")) {
        out.headers_mut().insert(header::HOST, h);
    }
    Ok(out)
}

/// Passes the upgrade to the kubelet and splices the connections after its 101.
async fn splice(
    mut req: Request<Incoming>,
    mut sender: KubeletSender,
    host: &str,
    port: u16,
    path: &str,
) -> Result<Response<Body>, ApiError> {
    let client_upgrade = hyper::upgrade::on(&mut req);
    let out = forward_request(&req, host, port, path)?;
    let mut resp = sender
        .send_request(out)
        .await
        .map_err(|e| ApiError::service_unavailable(format!("the kubelet at {host}:{port}: {e}")))?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let code = resp.status().as_u16();
        return Err(status_from_kubelet(
            code,
            &read_limited(resp.into_body()).await,
        ));
    }
    tokio::spawn(splice_upgraded(
        client_upgrade,
        hyper::upgrade::on(&mut resp),
    ));
    let mut r = Response::new(empty_body());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *r.headers_mut() = resp.headers().clone();
    Ok(r)
}

/// Copies bytes both ways between an upgraded client connection and an upgraded
/// connection to the target, once both upgrades completed, until either side ends.
pub(crate) async fn splice_upgraded(client: OnUpgrade, target: OnUpgrade) {
    match tokio::join!(client, target) {
        (Ok(client), Ok(target)) => {
            let mut client = TokioIo::new(client);
            let mut target = TokioIo::new(target);
            let _ = tokio::io::copy_bidirectional(&mut client, &mut target).await;
        }
        (c, t) => tracing::debug!(client = ?c.err(), target = ?t.err(), "upgrade failed"),
    }
}

/// kubectl's WebSocket-tunnelled SPDY port-forward: a SPDY/3.1 upgrade to the kubelet,
/// the WebSocket's binary payloads as its byte stream.
async fn tunnel_spdy(
    mut req: Request<Incoming>,
    mut sender: KubeletSender,
    host: &str,
    port: u16,
    path: &str,
    spdy_protocols: &[String],
) -> Result<Response<Body>, ApiError> {
    let key = req
        .headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .cloned()
        .ok_or_else(|| ApiError::bad_request("missing Sec-WebSocket-Key"))?;
    let client_upgrade = hyper::upgrade::on(&mut req);
    let mut out = Request::post(path)
        .header(header::HOST, format!("{host}:{port}"))
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "SPDY/3.1")
        .body(Empty::new())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    for p in spdy_protocols {
        if let Ok(v) = HeaderValue::from_str(p) {
            out.headers_mut().append("X-Stream-Protocol-Version", v);
        }
    }
    let mut resp = sender
        .send_request(out)
        .await
        .map_err(|e| ApiError::service_unavailable(format!("the kubelet at {host}:{port}: {e}")))?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let code = resp.status().as_u16();
        return Err(status_from_kubelet(
            code,
            &read_limited(resp.into_body()).await,
        ));
    }
    let chosen = resp
        .headers()
        .get("X-Stream-Protocol-Version")
        .and_then(|v| v.to_str().ok())
        .map(|v| format!("{SPDY_TUNNEL_PREFIX}{}", v.trim()));
    let kubelet_upgrade = hyper::upgrade::on(&mut resp);
    tokio::spawn(async move {
        let (client, kubelet) = match tokio::join!(client_upgrade, kubelet_upgrade) {
            (Ok(c), Ok(k)) => (c, k),
            (c, k) => {
                tracing::debug!(client = ?c.err(), kubelet = ?k.err(), "upgrade failed");
                return;
            }
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(client), Role::Server, None).await;
        relay_tunnel(ws, TokioIo::new(kubelet)).await;
    });
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let mut r = Response::new(empty_body());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    if let Some(v) = chosen.and_then(|c| HeaderValue::from_str(&c).ok()) {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, v);
    }
    Ok(r)
}

/// WebSocket binary messages <-> a raw byte stream, until either side ends.
async fn relay_tunnel<W, K>(ws: WebSocketStream<W>, kubelet: K)
where
    W: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    K: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut ws_tx, mut ws_rx) = ws.split();
    let (mut k_rx, mut k_tx) = tokio::io::split(kubelet);
    let to_kubelet = async {
        while let Some(Ok(msg)) = ws_rx.next().await {
            match msg {
                Message::Binary(b) if k_tx.write_all(&b).await.is_err() => break,
                Message::Close(_) => break,
                // Pings are answered by the WebSocket layer.
                _ => {}
            }
        }
        let _ = k_tx.shutdown().await;
    };
    let to_client = async {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match k_rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if ws_tx
                        .send(Message::Binary(Bytes::copy_from_slice(&buf[..n])))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
        let _ = ws_tx.close().await;
    };
    tokio::select! {
        _ = to_client => {}
        _ = to_kubelet => {}
    }
}

/// Routes `.../pods/{name}/{sub}` to [`pod_subresource`] when `sub` is one of ours, and
/// `/api/v1/nodes/{node}/proxy[/...]` (namespace empty, name the node's).
pub(crate) fn proxied_pod_subresource<'a>(
    segs: &[&'a str],
) -> Option<(&'a str, &'a str, PodProxy)> {
    match segs {
        ["api", "v1", "namespaces", ns, "pods", name, "proxy", ..] => {
            Some((*ns, *name, PodProxy::PodHttp))
        }
        ["api", "v1", "namespaces", ns, "services", name, "proxy", ..] => {
            Some((*ns, *name, PodProxy::ServiceHttp))
        }
        ["api", "v1", "namespaces", ns, "pods", name, sub] => {
            PodProxy::from_subresource(sub).map(|k| (*ns, *name, k))
        }
        ["api", "v1", "nodes", node, "proxy", ..] => Some(("", *node, PodProxy::Node)),
        _ => None,
    }
}

/// The kubelet path of a `nodes/proxy` request path: what follows `/proxy` (`/` when
/// nothing does). A `{node}:{port}` name is the node.
pub fn node_proxy_target(path: &str) -> Option<(&str, String)> {
    let rest = path.strip_prefix("/api/v1/nodes/")?;
    let (node, rest) = rest.split_once('/')?;
    let tail = rest.strip_prefix("proxy")?;
    if !(tail.is_empty() || tail.starts_with('/')) {
        return None;
    }
    let node = node.split(':').next().unwrap_or(node);
    Some((
        node,
        if tail.is_empty() {
            "/".into()
        } else {
            tail.to_owned()
        },
    ))
}

/// CONNECT admission (upstream's connect handler) of everything but logs, which are a
/// GET: the options object comes from the query (and the kubelet path for
/// `nodes/proxy`).
async fn admit_connect(
    state: &State,
    req: &Request<Incoming>,
    ns: &str,
    name: &str,
    kind: PodProxy,
) -> Result<(), ApiError> {
    let (plural, subresource) = match kind {
        PodProxy::Log => return Ok(()),
        PodProxy::Exec => ("pods", "exec"),
        PodProxy::Attach => ("pods", "attach"),
        PodProxy::PortForward => ("pods", "portforward"),
        PodProxy::Node => ("nodes", "proxy"),
        PodProxy::PodHttp => ("pods", "proxy"),
        PodProxy::ServiceHttp => ("services", "proxy"),
    };
    let info = ferrokube_api::resources::lookup("", "v1", plural)
        .ok_or_else(|| ApiError::internal(format!("no resource {plural}")))?;
    let user = req
        .extensions()
        .get::<ferrokube_auth::UserInfo>()
        .cloned()
        .unwrap_or_default();
    let mut a = crate::admission::Attributes::new(user, crate::admission::Operation::Connect, info)
        .in_namespace((!ns.is_empty()).then_some(ns))
        .named(name);
    a.subresource = subresource.into();
    let mut query = query_pairs(req.uri().query());
    if let Some((_, path)) = node_proxy_target(req.uri().path()).filter(|_| kind == PodProxy::Node)
    {
        query.push(("path".into(), path));
    }
    if let Some((_, target)) = crate::workload_proxy::proxy_target(req.uri().path(), plural)
        .filter(|_| matches!(kind, PodProxy::PodHttp | PodProxy::ServiceHttp))
    {
        query.push(("path".into(), target.path));
    }
    state.admission.admit_connect(a, &query).await
}

/// `nodes/proxy`: the request goes to the node's kubelet at the path after `/proxy`; the
/// kubelet's answer (status, content type, body) comes back as it is, upgrades spliced.
async fn node_proxy(
    state: &State,
    req: Request<Incoming>,
    node_name: &str,
) -> Result<Response<Body>, ApiError> {
    let (_, kubelet_path) = node_proxy_target(req.uri().path())
        .ok_or_else(|| ApiError::bad_request("invalid nodes/proxy path"))?;
    let path = match req.uri().query() {
        Some(q) if !q.is_empty() => format!("{kubelet_path}?{q}"),
        _ => kubelet_path,
    };
    let upgrade = is_upgrade(req.headers());
    if !upgrade && req.method() != Method::GET && req.method() != Method::HEAD {
        return Err(ApiError {
            code: 405,
            reason: reason::METHOD_NOT_ALLOWED.into(),
            message: format!(
                "the server does not allow this method on the requested resource: {} on nodes/proxy (only GET, HEAD and upgrades are proxied)",
                req.method()
            ),
            details: None,
        });
    }
    let nodes = ferrokube_api::resources::lookup("", "v1", "nodes")
        .and_then(|i| state.registry.store_for(i))
        .ok_or_else(|| ApiError::internal("no store for nodes"))?;
    let node = nodes.get(None, node_name).await?;
    let (host, port) = state.kubelet.address_of(node_name, &node)?;
    let unreachable = |e: String| {
        ApiError::service_unavailable(format!(
            "error dialing the kubelet of node {node_name} at https://{host}:{port}: {e}"
        ))
    };
    let mut sender = dial(&state.kubelet, &host, port)
        .await
        .map_err(&unreachable)?;
    if upgrade {
        return splice(req, sender, &host, port, &path).await;
    }
    let out = Request::builder()
        .method(req.method().clone())
        .uri(&path)
        .header(header::HOST, format!("{host}:{port}"))
        .body(Empty::new())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let resp = sender
        .send_request(out)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let status = resp.status();
    let mut r = stream_through(resp);
    *r.status_mut() = status;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({"spec": {
            "containers": [{"name": "web"}, {"name": "sidecar"}],
            "initContainers": [{"name": "setup"}],
        }})
    }

    #[test]
    fn node_proxy_paths() {
        assert_eq!(
            node_proxy_target("/api/v1/nodes/n1/proxy/stats/summary"),
            Some(("n1", "/stats/summary".to_owned()))
        );
        assert_eq!(
            node_proxy_target("/api/v1/nodes/n1:10250/proxy"),
            Some(("n1", "/".to_owned()))
        );
        assert_eq!(node_proxy_target("/api/v1/nodes/n1/proxyx"), None);
        assert_eq!(node_proxy_target("/api/v1/nodes/n1/status"), None);
        assert_eq!(
            proxied_pod_subresource(&["api", "v1", "nodes", "n1", "proxy", "metrics"]),
            Some(("", "n1", PodProxy::Node))
        );
        assert_eq!(
            kubelet_path(PodProxy::Node, "", "/metrics/cadvisor", "", &[]),
            "/metrics/cadvisor"
        );
    }

    #[test]
    fn container_resolution() {
        assert_eq!(resolve_container(&pod(), "p", Some("web")).unwrap(), "web");
        assert_eq!(
            resolve_container(&pod(), "p", Some("setup")).unwrap(),
            "setup"
        );
        let e = resolve_container(&pod(), "p", Some("nope")).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "container nope is not valid for pod p")
        );
        let e = resolve_container(&pod(), "p", None).unwrap_err();
        assert_eq!(
            e.message,
            "a container name must be specified for pod p, choose one of: [web sidecar] or one of the init containers: [setup]"
        );
        let one = json!({"spec": {"containers": [{"name": "only"}]}});
        assert_eq!(resolve_container(&one, "p", None).unwrap(), "only");
        assert_eq!(resolve_container(&one, "p", Some("")).unwrap(), "only");
    }

    #[test]
    fn kubelet_paths() {
        let q = query_pairs(Some(
            "container=web&follow=true&tailLines=10&timestamps=false&sinceSeconds=5&pretty=1",
        ));
        assert_eq!(
            kubelet_path(PodProxy::Log, "ns", "p", "web", &q),
            "/containerLogs/ns/p/web?follow=true&tailLines=10&sinceSeconds=5"
        );
        let q = query_pairs(Some(
            "command=cat&command=%2Fetc%2Fhostname&container=web&stdin=false&stdout=true&stderr=true&tty=false",
        ));
        assert_eq!(
            kubelet_path(PodProxy::Exec, "ns", "p", "web", &q),
            "/exec/ns/p/web?command=cat&command=%2Fetc%2Fhostname&stdout=1&stderr=1"
        );
        let q = query_pairs(Some("container=web&stdin=true&tty=true&command=x"));
        assert_eq!(
            kubelet_path(PodProxy::Attach, "ns", "p", "web", &q),
            "/attach/ns/p/web?stdin=1&tty=1"
        );
        let q = query_pairs(Some("ports=8080&ports=9090"));
        assert_eq!(
            kubelet_path(PodProxy::PortForward, "ns", "p", "", &q),
            "/portForward/ns/p?port=8080&port=9090"
        );
        assert_eq!(
            kubelet_path(PodProxy::PortForward, "ns", "p", "", &[]),
            "/portForward/ns/p"
        );
    }

    #[test]
    fn kubelet_addresses() {
        let node = json!({"status": {
            "addresses": [{"type": "Hostname", "address": "node-a"}, {"type": "InternalIP", "address": "10.0.0.5"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10251}},
        }});
        let kubeadm: Vec<String> = ["InternalIP", "ExternalIP", "Hostname"]
            .map(String::from)
            .to_vec();
        let upstream_default = crate::DEFAULT_KUBELET_PREFERRED_ADDRESS_TYPES
            .map(String::from)
            .to_vec();
        assert_eq!(
            kubelet_address(&node, &kubeadm),
            Some(("10.0.0.5".into(), 10251))
        );
        assert_eq!(
            kubelet_address(&node, &upstream_default),
            Some(("node-a".into(), 10251))
        );
        let node = json!({"status": {"addresses": [{"type": "Hostname", "address": "node-a"}]}});
        assert_eq!(
            kubelet_address(&node, &kubeadm),
            Some(("node-a".into(), 10250))
        );
        assert_eq!(kubelet_address(&node, &["InternalIP".to_string()]), None);
        // No Hostname address: the hostname label stands in, as upstream.
        let node = json!({
            "metadata": {"labels": {"kubernetes.io/hostname": "host-b"}},
            "status": {"addresses": [{"type": "ExternalIP", "address": "192.0.2.7"}]},
        });
        assert_eq!(
            kubelet_address(&node, &upstream_default),
            Some(("host-b".into(), 10250))
        );
        assert_eq!(kubelet_address(&json!({"status": {}}), &kubeadm), None);
    }

    #[test]
    fn kubelet_errors_become_statuses() {
        let e = status_from_kubelet(
            400,
            b"previous terminated container \"c\" in pod \"p\" not found\n",
        );
        assert_eq!(e.code, 400);
        assert_eq!(e.reason, "BadRequest");
        assert_eq!(
            e.message,
            "previous terminated container \"c\" in pod \"p\" not found"
        );
        let e = status_from_kubelet(404, b"");
        assert_eq!(
            (e.reason.as_str(), e.message.as_str()),
            (
                "NotFound",
                "the server could not find the requested resource"
            )
        );
        assert_eq!(status_from_kubelet(500, b"boom").reason, "InternalError");
        assert_eq!(status_from_kubelet(422, b"bad").reason, "Invalid");
    }

    #[test]
    fn spdy_tunnel_protocols() {
        let offered = vec![
            "SPDY/3.1+portforward.k8s.io".to_string(),
            "SPDY/3.1+other.example.com".to_string(),
            "v4.channel.k8s.io".to_string(),
        ];
        assert_eq!(tunneled_spdy_protocols(&offered), ["portforward.k8s.io"]);
        assert!(tunneled_spdy_protocols(&[]).is_empty());
    }

    #[test]
    fn routing_of_pod_subresources() {
        let r = proxied_pod_subresource(&["api", "v1", "namespaces", "ns", "pods", "p", "log"]);
        assert_eq!(r, Some(("ns", "p", PodProxy::Log)));
        assert_eq!(
            proxied_pod_subresource(&["api", "v1", "namespaces", "ns", "pods", "p", "status"]),
            None
        );
        assert_eq!(proxied_pod_subresource(&["api", "v1", "pods"]), None);
    }

    #[test]
    fn kubelet_client_from_pem() {
        assert!(KubeletClient::new(None, None).is_ok());
        assert!(KubeletClient::new(Some(("junk", "junk")), None).is_err());
        assert!(
            KubeletClient::new(
                None,
                Some("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
            )
            .is_err()
        );
    }
}
