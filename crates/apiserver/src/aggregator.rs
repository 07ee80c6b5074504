//! The aggregation layer (upstream kube-aggregator): `apiregistration.k8s.io/v1`
//! APIServices name which server serves a group-version. Local ones are this server;
//! a remote one is an extension apiserver behind a Service (metrics-server, for
//! `kubectl top`), and requests for its group-version are proxied to it with the
//! caller's identity in front-proxy headers.
//!
//! As upstream:
//! - a local APIService exists for every built-in group-version (labelled
//!   `kube-aggregator.kubernetes.io/automanaged: onstart`) and for every served
//!   custom resource version (`automanaged: true`, removed with it), and is always
//!   `Available` (reason `Local`);
//! - a remote one is `Available` once its Service exists, listens on the port, has a
//!   ready endpoint, and answers `GET /apis/<group>/<version>` with a 2xx (the
//!   reasons and messages of upstream's remote availability controller otherwise);
//! - requests for a remote group-version are authenticated and authorized here, then
//!   sent on to the Service's cluster IP (or, with `--enable-aggregator-routing`, to
//!   an endpoint) over TLS verified against `caBundle` for the name
//!   `<service>.<namespace>.svc`, with `--proxy-client-cert-file` as client
//!   certificate, `X-Remote-User`/`X-Remote-Group`/`X-Remote-Extra-*` for the user,
//!   and without the caller's credentials; connection upgrades are passed on and
//!   spliced as `pods/proxy` does. An unavailable one answers 503 `service
//!   unavailable`;
//! - `/apis` and aggregated discovery list the remote groups (their resources as the
//!   extension apiserver's discovery document names them);
//! - the OpenAPI v3 document of an available remote APIService's group-version is
//!   the extension apiserver's (upstream's v3 aggregation controller): its
//!   `/openapi/v3` index is read, then the document the index's entry for
//!   `apis/<group>/<version>` names (not again while that entry, and so the
//!   extension's hash, is unchanged; with `If-None-Match` otherwise). [`crate::openapi`]
//!   serves it at `/openapi/v3/apis/<group>/<version>` as the built-in documents (its
//!   hash in the index, `ETag`, 301 for a stale `?hash=`);
//! - the extension apiserver's `/openapi/v2` (with `If-None-Match`) is merged into the
//!   served `/openapi/v2`, JSON and protobuf (upstream's v2 aggregation controller):
//!   its paths under `/apis/` and the definitions they reach, in APIService priority
//!   order, a path or definition already there kept (see `ferrokube_openapi::merge_v2`);
//! - both are downloaded as `system:aggregator` over the connection requests are
//!   proxied on, when the APIService appears or changes and every minute after; a
//!   failed download keeps the document there was; they go when the APIService is
//!   deleted or becomes unavailable.
//!
//! Deviations: an extension apiserver that serves no `/openapi/v3` (404) is not
//! listed in the v3 index (upstream converts its v2 document to v3), and only the
//! APIService's own group-version is taken from an extension's v3 index (upstream
//! lists every path the extension's index has); a v2 definition name both have keeps
//! the local definition (upstream renames the extension's when they differ); a failed
//! OpenAPI download is retried after a minute, not with upstream's growing backoff.
//! Availability is checked when an APIService changes and every few seconds while
//! remote ones exist, not on Service and EndpointSlice events.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use ferrokube_api::resources::{self, ResourceInfo, SubresourceInfo};
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_component_base::metrics::{CounterVec, GaugeVec};
use ferrokube_openapi::Served;
use ferrokube_registry::custom::version_priority;
use ferrokube_registry::store::{
    ListParams, Part, PatchType, UpdateInput, WatchParams, WriteOptions,
};
use ferrokube_registry::{Registry, Store};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::discovery::Group;
use crate::handler::Body;
use crate::https_pool::{HttpsPool, HttpsPools, address, empty_body, streamed_body};
use crate::openapi::RemoteDocuments;

/// How the apiserver reaches extension apiservers.
#[derive(Clone, Debug, Default)]
pub struct AggregatorConfig {
    /// `--proxy-client-cert-file` / `--proxy-client-key-file` (PEM): the client
    /// certificate extension apiservers authenticate this server by.
    pub proxy_client: Option<(String, String)>,
    /// `--enable-aggregator-routing`: dial the Service's endpoints instead of its
    /// cluster IP.
    pub route_to_endpoints: bool,
    /// `--runtime-config`: the built-in group-versions that get a local APIService.
    pub enablement: Arc<crate::ApiEnablement>,
}

pub const GROUP: &str = "apiregistration.k8s.io";
const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";
/// The identity availability checks use (upstream's, with `system:masters`).
const CHECK_USER: &str = "system:kube-aggregator";
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// How often remote APIServices are checked again while some exist.
const RECHECK: Duration = Duration::from_secs(5);
/// Largest discovery document read from an extension apiserver.
const MAX_DISCOVERY: usize = 4 * 1024 * 1024;
/// The identity OpenAPI documents are downloaded as (upstream's `aggregatorUser`).
const OPENAPI_USER: &str = "system:aggregator";
/// Upstream's `specDownloadTimeout`.
const OPENAPI_TIMEOUT: Duration = Duration::from_secs(60);
/// How often an extension apiserver's OpenAPI documents are downloaded again
/// (upstream's `successfulUpdateDelay`); also the wait after a failed download.
const OPENAPI_REFRESH: Duration = Duration::from_secs(60);
/// Largest OpenAPI document read from an extension apiserver.
const MAX_OPENAPI: usize = 64 * 1024 * 1024;

/// Upstream's `DefaultGenericAPIServicePriorities`/`apiVersionPriorities` for the
/// group-versions this server has: (groupPriorityMinimum, versionPriority).
pub(crate) fn builtin_priority(group: &str, version: &str) -> (i32, i32) {
    match (group, version) {
        ("", _) => (18000, 1),
        (GROUP, _) => (18000, 15),
        ("apps", _) => (17800, 15),
        ("events.k8s.io", _) => (17750, 15),
        ("authentication.k8s.io", _) => (17700, 15),
        ("authorization.k8s.io", _) => (17600, 15),
        ("autoscaling", "v2") => (17500, 30),
        ("autoscaling", _) => (17500, 15),
        ("batch", _) => (17400, 15),
        ("certificates.k8s.io", _) => (17300, 15),
        ("networking.k8s.io", _) => (17200, 15),
        ("policy", _) => (17100, 15),
        ("rbac.authorization.k8s.io", _) => (17000, 15),
        ("storage.k8s.io", _) => (16800, 15),
        ("admissionregistration.k8s.io", _) => (16700, 15),
        ("apiextensions.k8s.io", _) => (16700, 15),
        ("scheduling.k8s.io", _) => (16600, 15),
        ("coordination.k8s.io", _) => (16500, 15),
        ("node.k8s.io", _) => (16300, 15),
        ("discovery.k8s.io", _) => (16200, 15),
        ("flowcontrol.apiserver.k8s.io", _) => (16100, 21),
        ("resource.k8s.io", _) => (15900, 15),
        _ => (15000, 15),
    }
}

/// The APIService name of a group-version (`v1.` for the core group).
fn service_name(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

/// Where a remote APIService's Service is.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ServiceRef {
    namespace: String,
    name: String,
    port: u16,
}

/// A remote APIService as requests and discovery need it.
pub(crate) struct Remote {
    group: String,
    version: String,
    group_priority: i64,
    version_priority: i64,
    service: ServiceRef,
    available: bool,
    /// The connections to this APIService's server (its CA bundle, the proxy client
    /// certificate), or why no TLS client could be built.
    client: Result<HttpsPool, String>,
    /// The resources its discovery document listed at the last check.
    resources: Vec<&'static ResourceInfo>,
    /// Its APIService's spec (serialized): OpenAPI documents are downloaded again
    /// when it changes.
    spec: String,
}

/// Remote APIServices by (group, version).
type Remotes = HashMap<(String, String), Arc<Remote>>;

/// The aggregator's view: remote APIServices by group-version.
pub(crate) struct Aggregator {
    config: AggregatorConfig,
    remotes: RwLock<Arc<Remotes>>,
    /// Whether any remote APIService exists: the one check every request pays.
    any_remote: AtomicBool,
    /// Woken at every publication of the remotes (the OpenAPI downloads follow them).
    published: tokio::sync::Notify,
    /// The extension apiservers' OpenAPI documents, for [`crate::openapi::OpenApi`].
    openapi: watch::Sender<Arc<RemoteDocuments>>,
    /// The connections to extension apiservers, kept across the passes that rebuild
    /// the remotes.
    pools: HttpsPools,
    /// `aggregator_unavailable_apiservice`: 1 for each APIService whose Available
    /// condition is not True, 0 for the others.
    unavailable: GaugeVec<1>,
    /// `aggregator_unavailable_apiservice_total`: each time one became unavailable, by
    /// the reason it was given.
    became_unavailable: CounterVec<2>,
}

/// Remote APIService configurations whose connections are kept at once.
const REMOTE_POOLS: NonZeroUsize = NonZeroUsize::new(64).unwrap();

impl Aggregator {
    pub fn new(config: AggregatorConfig) -> Self {
        Aggregator {
            config,
            remotes: RwLock::new(Arc::default()),
            any_remote: AtomicBool::new(false),
            published: tokio::sync::Notify::new(),
            openapi: watch::Sender::new(Arc::default()),
            pools: HttpsPools::new(REMOTE_POOLS),
            unavailable: GaugeVec::new(
                "aggregator_unavailable_apiservice",
                "[ALPHA] Gauge of APIServices which are marked as unavailable broken down by APIService name.",
                ["name"],
            ),
            became_unavailable: CounterVec::new(
                "aggregator_unavailable_apiservice_total",
                "[ALPHA] Counter of APIServices which are marked as unavailable broken down by APIService name and reason.",
                ["name", "reason"],
            ),
        }
    }

    /// The availability metrics (upstream's kube-aggregator status controller's).
    pub fn render_metrics(&self, out: &mut String) {
        self.unavailable.render(out);
        self.became_unavailable.render(out);
    }

    /// Upstream's `autoregister-completion` check: the APIService of every served
    /// built-in group-version is registered and Available (read from the cache).
    pub(crate) async fn autoregistered(&self, registry: &Registry) -> bool {
        let Some(store) = registry.store(GROUP, "v1", "apiservices") else {
            return true;
        };
        let params = ListParams {
            resource_version: Some("0".into()),
            ..Default::default()
        };
        let Ok(listed) = store.list(None, &params).await else {
            return false;
        };
        let available: HashSet<&str> = listed
            .items
            .iter()
            .filter(|o| available_condition(o).is_some_and(|c| c["status"] == "True"))
            .map(|o| ferrokube_registry::meta::name(o))
            .collect();
        resources::groups()
            .into_iter()
            .filter(|(g, v)| self.config.enablement.serves_group_version(g, v))
            .all(|(g, v)| available.contains(service_name(g, v).as_str()))
    }

    /// The extension apiservers' OpenAPI documents, replaced whenever they change.
    pub fn openapi_documents(&self) -> watch::Receiver<Arc<RemoteDocuments>> {
        self.openapi.subscribe()
    }

    /// The remote APIService serving `group/version`, if one does.
    pub fn remote(&self, group: &str, version: &str) -> Option<Arc<Remote>> {
        if !self.any_remote.load(Ordering::Acquire) {
            return None;
        }
        let remotes = self.snapshot();
        remotes
            .get(&(group.to_string(), version.to_string()))
            .cloned()
    }

    fn snapshot(&self) -> Arc<Remotes> {
        self.remotes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn publish(&self, remotes: Remotes) {
        self.any_remote
            .store(!remotes.is_empty(), Ordering::Release);
        *self.remotes.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(remotes);
        self.published.notify_one();
    }

    /// The remote groups for discovery, each with its versions in upstream's order
    /// (version priority, then Kubernetes version order) and their priority.
    /// `with_unavailable`: also list versions whose server is not available (the
    /// group documents do; aggregated discovery lists resources only).
    pub fn discovery_groups(&self, with_unavailable: bool) -> Vec<(i64, Group)> {
        if !self.any_remote.load(Ordering::Acquire) {
            return Vec::new();
        }
        let snapshot = self.snapshot();
        let mut by_group: BTreeMap<&str, Vec<&Remote>> = BTreeMap::new();
        for r in snapshot.values() {
            if with_unavailable || r.available {
                by_group.entry(r.group.as_str()).or_default().push(r);
            }
        }
        by_group
            .into_iter()
            .map(|(g, mut versions)| {
                versions.sort_by(|a, b| {
                    b.version_priority
                        .cmp(&a.version_priority)
                        .then_with(|| {
                            version_priority(&b.version).cmp(&version_priority(&a.version))
                        })
                        .then_with(|| a.version.cmp(&b.version))
                });
                let priority = versions.iter().map(|r| r.group_priority).max().unwrap_or(0);
                let group = Group {
                    name: g.to_string(),
                    versions: versions
                        .iter()
                        .map(|r| (r.version.clone(), r.resources.clone()))
                        .collect(),
                };
                (priority, group)
            })
            .collect()
    }

    /// Proxies an authenticated, authorized request to the remote APIService.
    pub async fn proxy(
        &self,
        registry: &Registry,
        remote: &Remote,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, ApiError> {
        if !remote.available {
            return Ok(plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "service unavailable\n",
            ));
        }
        let client = match &remote.client {
            Ok(client) => client.clone(),
            Err(e) => return Ok(plain(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n"))),
        };
        let user = req
            .extensions()
            .get::<ferrokube_auth::UserInfo>()
            .cloned()
            .ok_or_else(|| ApiError::internal("missing user"))?;
        let Ok((host, port)) = self.resolve(registry, &remote.service).await else {
            return Ok(plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "service unavailable\n",
            ));
        };
        let (mut parts, body) = req.into_parts();
        let upgrade = crate::workload_proxy::take_upgrade(&mut parts);
        let uri = match parts.uri.query() {
            Some(q) if !q.is_empty() => format!("{}?{q}", parts.uri.path()),
            _ => parts.uri.path().to_string(),
        };
        let mut out = Request::builder()
            .method(parts.method.clone())
            .uri(&uri)
            .body(body)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        for (k, v) in &parts.headers {
            if crate::workload_proxy::passed_on(k) && !is_remote_header(k) {
                out.headers_mut().append(k.clone(), v.clone());
            }
        }
        set_identity(out.headers_mut(), &user);
        if let Ok(h) = HeaderValue::from_str(&address(&host, port)) {
            out.headers_mut().insert(header::HOST, h);
        }
        let send = |out: Request<Incoming>| client.send(&host, port, out.map(streamed_body));
        crate::workload_proxy::exchange(out, upgrade, send)
            .await
            .map_err(|e| {
                ApiError::service_unavailable(format!("error trying to reach service: {e}"))
            })
    }

    /// Where a Service is dialled: its cluster IP and port (an ExternalName's name),
    /// or with endpoint routing a ready endpoint of the matching port.
    async fn resolve(
        &self,
        registry: &Registry,
        svc: &ServiceRef,
    ) -> Result<(String, u16), String> {
        let service = get(registry, "services", Some(&svc.namespace), &svc.name)
            .await
            .ok_or_else(|| format!("service/{} in {:?} is not present", svc.name, svc.namespace))?;
        let slices = if self.config.route_to_endpoints {
            endpoint_slices(registry, svc).await
        } else {
            Vec::new()
        };
        self.address(svc, &service, &slices)
    }

    /// [`Aggregator::resolve`] over a Service and its EndpointSlices already read.
    fn address(
        &self,
        svc: &ServiceRef,
        service: &Value,
        slices: &[Value],
    ) -> Result<(String, u16), String> {
        let spec = &service["spec"];
        if spec["type"].as_str() == Some("ExternalName") {
            let host = spec["externalName"].as_str().unwrap_or_default();
            return Ok((host.to_string(), svc.port));
        }
        let port = spec["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["port"].as_u64() == Some(u64::from(svc.port)))
            .ok_or_else(|| format!("no service port {}", svc.port))?;
        if !self.config.route_to_endpoints {
            let ip = spec["clusterIP"].as_str().unwrap_or_default();
            if ip.is_empty() || ip == "None" {
                return Err(format!("service/{} has no cluster IP", svc.name));
            }
            return Ok((ip.to_string(), svc.port));
        }
        let port_name = port["name"].as_str().unwrap_or_default();
        ready_endpoints(slices, port_name)
            .into_iter()
            .next()
            .ok_or_else(|| format!("no endpoints available for service {:?}", svc.name))
    }
}

/// A plain-text answer, as upstream's proxy writes its own errors (`http.Error`).
fn plain(code: StatusCode, text: &str) -> Response<Body> {
    let mut r =
        Response::new(http_body_util::Full::new(Bytes::from(text.to_string())).boxed_unsync());
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut().insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    r
}

fn server_name(svc: &ServiceRef) -> String {
    format!("{}.{}.svc", svc.name, svc.namespace)
}

/// The front-proxy headers a caller may not set itself.
fn is_remote_header(name: &HeaderName) -> bool {
    let n = name.as_str();
    n == "x-remote-user"
        || n == "x-remote-uid"
        || n == "x-remote-group"
        || n.starts_with("x-remote-extra-")
}

/// Upstream `transport.SetAuthProxyHeaders`: the user, each group, and each extra
/// value under its path-escaped key.
fn set_identity(headers: &mut http::HeaderMap, user: &ferrokube_auth::UserInfo) {
    if let Ok(v) = HeaderValue::from_str(&user.name) {
        headers.insert(HeaderName::from_static("x-remote-user"), v);
    }
    for g in &user.groups {
        if let Ok(v) = HeaderValue::from_str(g) {
            headers.append(HeaderName::from_static("x-remote-group"), v);
        }
    }
    for (key, values) in &user.extra {
        let Ok(name) =
            HeaderName::from_bytes(format!("x-remote-extra-{}", escape_extra_key(key)).as_bytes())
        else {
            continue;
        };
        for value in values {
            if let Ok(v) = HeaderValue::from_str(value) {
                headers.append(name.clone(), v);
            }
        }
    }
}

/// Go's `url.PathEscape` of an extra's key (what the receiving side unescapes).
fn escape_extra_key(key: &str) -> String {
    let mut out = String::new();
    for b in key.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'$'
                    | b'&'
                    | b'+'
                    | b'='
                    | b':'
                    | b'@'
                    | b'!'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b','
                    | b';'
            )
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

async fn get(registry: &Registry, plural: &str, ns: Option<&str>, name: &str) -> Option<Value> {
    let store = registry.store("", "v1", plural)?;
    store.get(ns, name).await.ok()
}

async fn endpoint_slices(registry: &Registry, svc: &ServiceRef) -> Vec<Value> {
    let Some(store) = registry.store("discovery.k8s.io", "v1", "endpointslices") else {
        return Vec::new();
    };
    let params = ListParams {
        label_selector: Some(format!("kubernetes.io/service-name={}", svc.name)),
        resource_version: Some("0".into()),
        ..Default::default()
    };
    match store.list(Some(&svc.namespace), &params).await {
        Ok(l) => l.items.iter().map(|o| (**o).clone()).collect(),
        Err(_) => Vec::new(),
    }
}

/// The ready (ip, port) pairs of the slices that have the port named `port_name`
/// (upstream `hasAvailableEndpoint`: a slice counts when it has a ready endpoint and
/// that port).
fn ready_endpoints(slices: &[Value], port_name: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for s in slices {
        let Some(port) = crate::workload_proxy::named_port(&s["ports"], port_name) else {
            continue;
        };
        for e in s["endpoints"].as_array().into_iter().flatten() {
            if e["conditions"]["ready"].as_bool() == Some(false) {
                continue;
            }
            if let Some(ip) = e["addresses"]
                .as_array()
                .and_then(|a| a.first())
                .and_then(Value::as_str)
            {
                out.push((ip.to_string(), port));
            }
        }
    }
    out
}

/// The connections to an APIService's server: verified against its CA bundle (none:
/// nothing is trusted; with `insecureSkipTLSVerify` nothing is checked) for the name
/// `<service>.<namespace>.svc`, presenting the proxy client certificate.
fn remote_client(
    aggregator: &Aggregator,
    spec: &Value,
    svc: &ServiceRef,
) -> Result<HttpsPool, String> {
    let insecure = spec["insecureSkipTLSVerify"].as_bool() == Some(true);
    let ca_bundle = spec["caBundle"].as_str().unwrap_or_default();
    let proxy_client = aggregator.config.proxy_client.as_ref();
    let (cert, key) = proxy_client
        .map(|(c, k)| (c.as_str(), k.as_str()))
        .unwrap_or_default();
    let server_name = server_name(svc);
    let source: [&[u8]; 5] = [
        &[u8::from(insecure)],
        ca_bundle.as_bytes(),
        cert.as_bytes(),
        key.as_bytes(),
        server_name.as_bytes(),
    ];
    aggregator.pools.get_or_build(&source, || {
        let roots = if insecure {
            crate::proxy::ServerRoots::Any
        } else {
            use base64::Engine;
            let pem = base64::engine::general_purpose::STANDARD
                .decode(ca_bundle)
                .map_err(|e| format!("caBundle: {e}"))?;
            crate::proxy::ServerRoots::Pem(String::from_utf8_lossy(&pem).into_owned())
        };
        let tls = crate::proxy::client_tls(proxy_client.map(|_| (cert, key)), &roots)?;
        Ok(HttpsPool::new(tls, &server_name))
    })
}

/// The Available condition an APIService should have: (status, reason, message).
type Availability = (&'static str, &'static str, String);

fn local_availability() -> Availability {
    (
        "True",
        "Local",
        "Local APIServices are always available".into(),
    )
}

/// Upstream's remote availability checks; on success also the resources the
/// extension apiserver's discovery document lists.
async fn check_remote(
    aggregator: &Aggregator,
    registry: &Registry,
    group: &str,
    version: &str,
    svc: &ServiceRef,
    client: &Result<HttpsPool, String>,
) -> (Availability, Vec<&'static ResourceInfo>) {
    let false_ = |reason, message| (("False", reason, message), Vec::new());
    let Some(service) = get(registry, "services", Some(&svc.namespace), &svc.name).await else {
        return false_(
            "ServiceNotFound",
            format!("service/{} in {:?} is not present", svc.name, svc.namespace),
        );
    };
    let cluster_ip_type = matches!(service["spec"]["type"].as_str(), None | Some("ClusterIP"));
    // Read once for the checks and for the address.
    let slices = if cluster_ip_type || aggregator.config.route_to_endpoints {
        endpoint_slices(registry, svc).await
    } else {
        Vec::new()
    };
    if cluster_ip_type {
        let port = service["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["port"].as_u64() == Some(u64::from(svc.port)));
        let Some(port) = port else {
            return false_(
                "ServicePortError",
                format!(
                    "service/{} in {:?} is not listening on port {}",
                    svc.name, svc.namespace, svc.port
                ),
            );
        };
        let port_name = port["name"].as_str().unwrap_or_default();
        if slices.is_empty() {
            return false_(
                "EndpointsNotFound",
                format!(
                    "cannot find endpointslices for service/{} in {:?}",
                    svc.name, svc.namespace
                ),
            );
        }
        if ready_endpoints(&slices, port_name).is_empty() {
            return false_(
                "MissingEndpoints",
                format!(
                    "endpointslices for service/{} in {:?} have no addresses with port name {port_name:?}",
                    svc.name, svc.namespace
                ),
            );
        }
    }
    let path = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let fetched = match aggregator.address(svc, &service, &slices) {
        Ok((host, port)) => match client {
            Ok(client) => discovery_get(client.clone(), &host, port, &path).await,
            Err(e) => Err(e.clone()),
        },
        Err(e) => Err(e),
    };
    match fetched {
        Ok(doc) => (
            ("True", "Passed", "all checks passed".into()),
            remote_resources(group, version, &doc),
        ),
        Err(e) => false_("FailedDiscoveryCheck", e),
    }
}

/// `GET path` on an extension apiserver as `system:kube-aggregator`, bounded in
/// time and size: its discovery document.
async fn discovery_get(
    client: HttpsPool,
    host: &str,
    port: u16,
    path: &str,
) -> Result<Value, String> {
    let user = ferrokube_auth::UserInfo {
        name: CHECK_USER.into(),
        groups: vec![ferrokube_auth::user::SYSTEM_PRIVILEGED_GROUP.into()],
        ..Default::default()
    };
    let target = RemoteTarget { client, host, port };
    let got = remote_get(&target, path, &user, None, MAX_DISCOVERY, CHECK_TIMEOUT).await?;
    let code = got.status;
    if !(code.is_success() || code.is_redirection()) {
        return Err(format!(
            "failing or missing response from https://{}{path}: bad status from https://{}{path}: {}",
            got.addr,
            got.addr,
            code.as_u16()
        ));
    }
    Ok(serde_json::from_slice(&got.body).unwrap_or(Value::Null))
}

/// Where an extension apiserver is reached: the APIService's connections and the
/// address dialled.
struct RemoteTarget<'a> {
    client: HttpsPool,
    host: &'a str,
    port: u16,
}

/// An extension apiserver's answer to a [`remote_get`].
struct RemoteResponse {
    /// The address dialled (`host:port`).
    addr: String,
    status: StatusCode,
    etag: Option<String>,
    body: Bytes,
}

/// `GET path` on an extension apiserver as `user` (front-proxy headers, over the
/// connections requests are proxied on), with `If-None-Match: if_none_match`; the
/// body read up to `limit` bytes, the whole exchange bounded by `timeout`.
async fn remote_get(
    target: &RemoteTarget<'_>,
    path: &str,
    user: &ferrokube_auth::UserInfo,
    if_none_match: Option<&str>,
    limit: usize,
    timeout: Duration,
) -> Result<RemoteResponse, String> {
    let (host, port) = (target.host, target.port);
    let attempt = async {
        let addr = address(host, port);
        let url = format!("https://{addr}{path}");
        let failing = |e: String| format!("failing or missing response from {url}: {e}");
        let mut req = Request::get(path)
            .header(header::HOST, &addr)
            .header(header::ACCEPT, "application/json")
            .body(empty_body())
            .map_err(|e| failing(e.to_string()))?;
        if let Some(tag) = if_none_match.and_then(|t| HeaderValue::from_str(t).ok()) {
            req.headers_mut().insert(header::IF_NONE_MATCH, tag);
        }
        set_identity(req.headers_mut(), user);
        let resp = target.client.send(host, port, req).await.map_err(failing)?;
        let status = resp.status();
        let etag = resp
            .headers()
            .get(header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = http_body_util::Limited::new(resp.into_body(), limit)
            .collect()
            .await
            .map_err(|e| failing(e.to_string()))?
            .to_bytes();
        Ok(RemoteResponse {
            addr,
            status,
            etag,
            body,
        })
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("timed out waiting for https://{host}:{port}{path}")))
}

/// The resources an `APIResourceList` names, as discovery serves them.
fn remote_resources(group: &str, version: &str, doc: &Value) -> Vec<&'static ResourceInfo> {
    let entries = doc["resources"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    let mut out = Vec::new();
    for e in entries {
        let Some(plural) = e["name"].as_str().filter(|n| !n.contains('/')) else {
            continue;
        };
        let subresources: Vec<SubresourceInfo> = entries
            .iter()
            .filter_map(|s| {
                let name = s["name"]
                    .as_str()?
                    .strip_prefix(plural)?
                    .strip_prefix('/')?;
                Some(SubresourceInfo {
                    name: resources::intern_str(name),
                    kind: resources::intern_str(s["kind"].as_str().unwrap_or_default()),
                    group: s["group"].as_str().map(resources::intern_str),
                    version: s["version"].as_str().map(resources::intern_str),
                    verbs: resources::intern_strs(&strs(&s["verbs"])),
                })
            })
            .collect();
        let kind = e["kind"].as_str().unwrap_or_default();
        let singular = e["singularName"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| kind.to_lowercase());
        out.push(resources::intern(ResourceInfo {
            group: resources::intern_str(group),
            version: resources::intern_str(version),
            kind: resources::intern_str(kind),
            plural: resources::intern_str(plural),
            singular: resources::intern_str(&singular),
            short_names: resources::intern_strs(&strs(&e["shortNames"])),
            categories: resources::intern_strs(&strs(&e["categories"])),
            namespaced: e["namespaced"].as_bool().unwrap_or(false),
            verbs: resources::intern_strs(&strs(&e["verbs"])),
            subresources: resources::intern_subresources(subresources),
            storage_prefix: "",
        }));
    }
    out
}

/// The local APIServices that should exist: every built-in group-version and every
/// served custom resource version, with their `automanaged` label.
fn desired_local(enabled: &crate::ApiEnablement, registry: &Registry) -> HashMap<String, Value> {
    let mut out = HashMap::new();
    for (g, v) in resources::groups()
        .into_iter()
        .filter(|(g, v)| enabled.serves_group_version(g, v))
    {
        let (gp, vp) = builtin_priority(g, v);
        out.insert(service_name(g, v), local_service(g, v, gp, vp, "onstart"));
    }
    for (g, versions) in registry.custom().served().group_versions() {
        for v in versions {
            // Upstream `crdregistration`: group priority 1000, version priority 100.
            out.entry(service_name(g, v))
                .or_insert_with(|| local_service(g, v, 1000, 100, "true"));
        }
    }
    out
}

fn local_service(group: &str, version: &str, gp: i32, vp: i32, managed: &str) -> Value {
    json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {
            "name": service_name(group, version),
            "labels": {AUTOMANAGED: managed},
        },
        "spec": {
            "group": group,
            "version": version,
            "groupPriorityMinimum": gp,
            "versionPriority": vp,
        },
    })
}

/// The aggregator's controller: local APIServices kept as what is served, every
/// APIService's Available condition, and the remote ones published for requests and
/// discovery. Runs until `shutdown`.
pub(crate) async fn run(
    aggregator: Arc<Aggregator>,
    registry: Arc<Registry>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(store) = registry.store(GROUP, "v1", "apiservices").cloned() else {
        return;
    };
    // A remote APIService's availability follows its Service and EndpointSlices.
    let followed: Vec<Arc<Store>> = [
        registry.store("", "v1", "services"),
        registry.store("discovery.k8s.io", "v1", "endpointslices"),
    ]
    .into_iter()
    .flatten()
    .cloned()
    .collect();
    tokio::spawn(run_openapi(
        aggregator.clone(),
        registry.clone(),
        shutdown.clone(),
    ));
    let mut served = registry.custom().subscribe();
    'watching: loop {
        let mut watches = Vec::new();
        for s in std::iter::once(&store).chain(&followed) {
            match s.watch(None, &WatchParams::default()).await {
                Ok(rx) => watches.push(rx),
                Err(e) => {
                    tracing::warn!(error = %e, "watching for the aggregator failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(500)) => continue 'watching,
                        _ = shutdown.changed() => return,
                    }
                }
            }
        }
        let (apiservices, others) = watches.split_at_mut(1);
        let apiservices = &mut apiservices[0];
        let mut remote = sync(&aggregator, &registry, &store).await;
        loop {
            let wait = if remote {
                RECHECK
            } else {
                Duration::from_secs(300)
            };
            let others_changed = async {
                let mut changes = futures::stream::select_all(
                    others
                        .iter_mut()
                        .map(|rx| futures::stream::poll_fn(move |cx| rx.poll_recv(cx))),
                );
                futures::StreamExt::next(&mut changes).await
            };
            tokio::select! {
                e = apiservices.recv() => match e {
                    Some(_) => while apiservices.try_recv().is_ok() {},
                    None => continue 'watching,
                },
                e = others_changed => {
                    if e.is_none() {
                        continue 'watching;
                    }
                    if !remote {
                        continue;
                    }
                    // Services and slices change often in a busy cluster: at most one
                    // check a second for them.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    for rx in others.iter_mut() {
                        while rx.try_recv().is_ok() {}
                    }
                }
                _ = served.changed() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => return,
            }
            remote = sync(&aggregator, &registry, &store).await;
        }
    }
}

/// An extension apiserver's OpenAPI v3 document of its group-version, as last
/// downloaded.
#[derive(Clone)]
struct V3Download {
    /// Its `serverRelativeURL` in the extension apiserver's `/openapi/v3` index (with
    /// the extension's own `?hash=`): unchanged, the document is not downloaded again.
    url: String,
    /// The extension apiserver's `ETag` for it (`If-None-Match` next time).
    etag: Option<String>,
    doc: Served,
}

/// An extension apiserver's `/openapi/v2` document, as last downloaded.
#[derive(Clone)]
struct V2Download {
    /// The extension apiserver's `ETag` for it (`If-None-Match` next time).
    etag: Option<String>,
    doc: Served,
}

/// What is known of one remote APIService's OpenAPI documents.
struct OpenApiState {
    /// The APIService spec they were downloaded for.
    spec: String,
    /// When they were last downloaded (or tried).
    at: tokio::time::Instant,
    v3: Option<V3Download>,
    v2: Option<V2Download>,
}

/// Upstream's OpenAPI aggregation controllers (v3 and v2): the v3 document of every
/// available remote APIService's group-version and its server's v2 document,
/// downloaded from the extension apiserver when the APIService appears or changes
/// and every [`OPENAPI_REFRESH`] after, dropped when it goes or becomes unavailable,
/// and published to the OpenAPI handler.
async fn run_openapi(
    aggregator: Arc<Aggregator>,
    registry: Arc<Registry>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut known: HashMap<(String, String), OpenApiState> = HashMap::new();
    loop {
        let remotes = aggregator.snapshot();
        let before = known.len();
        known.retain(|k, _| remotes.get(k).is_some_and(|r| r.available));
        let mut changed = known.len() != before;
        for (key, remote) in remotes.iter().filter(|(_, r)| r.available) {
            let previous = known.get(key);
            if previous.is_some_and(|p| p.spec == remote.spec && p.at.elapsed() < OPENAPI_REFRESH) {
                continue;
            }
            // A changed APIService may point elsewhere: nothing of before is reused.
            let reusable = previous.filter(|p| p.spec == remote.spec);
            let (v3, v2) = download(&aggregator, &registry, remote, reusable).await;
            let failed = |what: &str, e: &str| {
                tracing::warn!(
                    apiservice = service_name(&remote.group, &remote.version),
                    error = %e,
                    "downloading the OpenAPI {what} document of an APIService failed"
                );
            };
            // A failed download keeps what there was (upstream keeps the last
            // document it had).
            let v3 = v3.unwrap_or_else(|e| {
                failed("v3", &e);
                previous.and_then(|p| p.v3.clone())
            });
            let v2 = v2.unwrap_or_else(|e| {
                failed("v2", &e);
                previous.and_then(|p| p.v2.clone())
            });
            let hash = |d: Option<&Served>| d.map(|d| d.hash.clone());
            changed |= hash(v3.as_ref().map(|d| &d.doc))
                != hash(previous.and_then(|p| p.v3.as_ref()).map(|d| &d.doc));
            changed |= hash(v2.as_ref().map(|d| &d.doc))
                != hash(previous.and_then(|p| p.v2.as_ref()).map(|d| &d.doc));
            known.insert(
                key.clone(),
                OpenApiState {
                    spec: remote.spec.clone(),
                    at: tokio::time::Instant::now(),
                    v3,
                    v2,
                },
            );
        }
        if changed {
            aggregator
                .openapi
                .send_replace(Arc::new(remote_documents(&remotes, &known)));
        }
        let next = known
            .values()
            .map(|s| s.at + OPENAPI_REFRESH)
            .min()
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            _ = aggregator.published.notified() => {}
            _ = tokio::time::sleep_until(next) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// The documents the OpenAPI handler serves: the v3 ones by group-version, the v2
/// ones in upstream's APIService priority order (group priority, then version
/// priority, highest first; then by name), which decides whose path or definition
/// is kept when two extensions name the same one.
fn remote_documents(
    remotes: &Remotes,
    known: &HashMap<(String, String), OpenApiState>,
) -> RemoteDocuments {
    let v3 = known
        .iter()
        .filter_map(|((g, v), s)| {
            let d = s.v3.as_ref()?;
            Some((ferrokube_openapi::gv_path(g, v), d.doc.clone()))
        })
        .collect();
    let mut v2: Vec<(&Remote, &Served)> = known
        .iter()
        .filter_map(|(k, s)| Some((remotes.get(k)?.as_ref(), &s.v2.as_ref()?.doc)))
        .collect();
    v2.sort_by(|(a, _), (b, _)| {
        b.group_priority
            .cmp(&a.group_priority)
            .then(b.version_priority.cmp(&a.version_priority))
            .then_with(|| {
                service_name(&a.group, &a.version).cmp(&service_name(&b.group, &b.version))
            })
    });
    RemoteDocuments {
        v3,
        v2: v2.into_iter().map(|(_, d)| d.clone()).collect(),
    }
}

/// Downloads a remote APIService's OpenAPI documents ([`download_v3`],
/// [`download_v2`]) over the connection requests for it are proxied on.
async fn download(
    aggregator: &Aggregator,
    registry: &Registry,
    remote: &Remote,
    previous: Option<&OpenApiState>,
) -> (
    Result<Option<V3Download>, String>,
    Result<Option<V2Download>, String>,
) {
    let client = match remote.client.clone() {
        Ok(client) => client,
        Err(e) => return (Err(e.clone()), Err(e)),
    };
    let (host, port) = match aggregator.resolve(registry, &remote.service).await {
        Ok(a) => a,
        Err(e) => return (Err(e.clone()), Err(e)),
    };
    let target = RemoteTarget {
        client,
        host: &host,
        port,
    };
    let v3 = download_v3(&target, remote, previous.and_then(|p| p.v3.as_ref())).await;
    let v2 = download_v2(&target, previous.and_then(|p| p.v2.as_ref())).await;
    (v3, v2)
}

/// `GET path` for an OpenAPI document, as upstream's downloaders ask.
async fn openapi_get(
    target: &RemoteTarget<'_>,
    path: &str,
    if_none_match: Option<&str>,
) -> Result<RemoteResponse, String> {
    let user = ferrokube_auth::UserInfo {
        name: OPENAPI_USER.into(),
        ..Default::default()
    };
    remote_get(
        target,
        path,
        &user,
        if_none_match,
        MAX_OPENAPI,
        OPENAPI_TIMEOUT,
    )
    .await
}

/// Upstream's v3 downloader for one APIService: the extension apiserver's
/// `/openapi/v3` index, then the document its entry for the APIService's
/// group-version names (not again when the entry and so its hash did not change; with
/// `If-None-Match` otherwise). `None` when the extension serves no v3 document for it.
async fn download_v3(
    target: &RemoteTarget<'_>,
    remote: &Remote,
    previous: Option<&V3Download>,
) -> Result<Option<V3Download>, String> {
    let index = openapi_get(target, "/openapi/v3", None).await?;
    if index.status == StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !index.status.is_success() {
        return Err(format!(
            "GET https://{}/openapi/v3: status {}",
            index.addr,
            index.status.as_u16()
        ));
    }
    let index: Value = serde_json::from_slice(&index.body)
        .map_err(|e| format!("the /openapi/v3 index is not JSON: {e}"))?;
    let gv = ferrokube_openapi::gv_path(&remote.group, &remote.version);
    let Some(url) = remote_v3_url(&index, &gv) else {
        return Ok(None);
    };
    if let Some(p) = previous
        && p.url == url
    {
        return Ok(Some(p.clone()));
    }
    let got = openapi_get(target, &url, previous.and_then(|p| p.etag.as_deref())).await?;
    match got.status {
        StatusCode::NOT_FOUND => Ok(None),
        StatusCode::NOT_MODIFIED => match previous {
            Some(p) => Ok(Some(V3Download { url, ..p.clone() })),
            None => Err(format!(
                "GET https://{}{url}: 304 without a document",
                got.addr
            )),
        },
        s if s.is_success() => Ok(Some(V3Download {
            url,
            etag: got.etag,
            doc: json_document(got.body, &gv)?,
        })),
        s => Err(format!(
            "GET https://{}{url}: status {}",
            got.addr,
            s.as_u16()
        )),
    }
}

/// Upstream's v2 downloader: the extension apiserver's `/openapi/v2` (JSON), with
/// `If-None-Match`; `None` when it serves none (404).
async fn download_v2(
    target: &RemoteTarget<'_>,
    previous: Option<&V2Download>,
) -> Result<Option<V2Download>, String> {
    let got = openapi_get(
        target,
        "/openapi/v2",
        previous.and_then(|p| p.etag.as_deref()),
    )
    .await?;
    match got.status {
        StatusCode::NOT_FOUND => Ok(None),
        StatusCode::NOT_MODIFIED => match previous {
            Some(p) => Ok(Some(p.clone())),
            None => Err(format!(
                "GET https://{}/openapi/v2: 304 without a document",
                got.addr
            )),
        },
        s if s.is_success() => Ok(Some(V2Download {
            etag: got.etag,
            doc: json_document(got.body, "/openapi/v2")?,
        })),
        s => Err(format!(
            "GET https://{}/openapi/v2: status {}",
            got.addr,
            s.as_u16()
        )),
    }
}

/// A downloaded OpenAPI document, checked to be a JSON object, held as served.
fn json_document(body: Bytes, what: &str) -> Result<Served, String> {
    let doc: Value = serde_json::from_slice(&body)
        .map_err(|e| format!("the OpenAPI document of {what} is not JSON: {e}"))?;
    if !doc.is_object() {
        return Err(format!("the OpenAPI document of {what} is not an object"));
    }
    Ok(Served::new(body.to_vec()))
}

/// Where an extension apiserver's `/openapi/v3` index says the document of `gv`
/// (`apis/<group>/<version>`) is: its `serverRelativeURL`, or `/openapi/v3/<gv>`
/// when that names no path under `/openapi/v3/`.
fn remote_v3_url(index: &Value, gv: &str) -> Option<String> {
    let entry = index["paths"].get(gv)?;
    let url = entry["serverRelativeURL"]
        .as_str()
        .filter(|u| u.starts_with("/openapi/v3/"))
        .map(str::to_string)
        .unwrap_or_else(|| format!("/openapi/v3/{gv}"));
    Some(url)
}

/// One pass; `true` when remote APIServices exist (to be checked again soon).
async fn sync(aggregator: &Aggregator, registry: &Registry, store: &Store) -> bool {
    let listed = match store.list(None, &ListParams::default()).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "listing APIServices failed");
            return true;
        }
    };
    let existing: HashSet<String> = listed
        .items
        .iter()
        .map(|o| ferrokube_registry::meta::name(o).to_string())
        .collect();
    aggregator
        .unavailable
        .retain(|[name]| existing.contains(&**name));
    let desired = desired_local(&aggregator.config.enablement, registry);
    // Concurrent, so that a fresh store commits them together: readiness waits for
    // them (`autoregister-completion`).
    let missing = desired.iter().filter(|(name, _)| !existing.contains(*name));
    futures::future::join_all(missing.map(|(name, obj)| async move {
        if let Err(e) = store
            .create(None, obj.clone(), &WriteOptions::default())
            .await
            && !e.is_already_exists()
        {
            tracing::warn!(apiservice = name, error = %e, "registering a local APIService failed");
        }
    }))
    .await;
    let mut remotes = HashMap::new();
    for o in &listed.items {
        let name = ferrokube_registry::meta::name(o);
        let managed = o["metadata"]["labels"][AUTOMANAGED].as_str().is_some();
        if managed && !desired.contains_key(name) {
            if let Err(e) = store.delete(None, name, &Default::default()).await
                && !e.is_not_found()
            {
                tracing::warn!(apiservice = name, error = %e, "removing an APIService failed");
            }
            continue;
        }
        let spec = &o["spec"];
        let group = spec["group"].as_str().unwrap_or_default().to_string();
        let version = spec["version"].as_str().unwrap_or_default().to_string();
        let availability = match service_ref(spec) {
            None => local_availability(),
            Some(svc) => {
                let client = remote_client(aggregator, spec, &svc);
                let (availability, resources) =
                    check_remote(aggregator, registry, &group, &version, &svc, &client).await;
                let remote = Remote {
                    group: group.clone(),
                    version: version.clone(),
                    group_priority: spec["groupPriorityMinimum"].as_i64().unwrap_or(0),
                    version_priority: spec["versionPriority"].as_i64().unwrap_or(0),
                    service: svc,
                    available: availability.0 == "True",
                    client,
                    resources,
                    spec: spec.to_string(),
                };
                remotes.insert((group, version), Arc::new(remote));
                availability
            }
        };
        let name = ferrokube_registry::meta::name(o);
        let is_available = availability.0 == "True";
        aggregator
            .unavailable
            .set([name], if is_available { 0.0 } else { 1.0 });
        let reason = availability.1;
        let was_available = available_condition(o).is_some_and(|c| c["status"] == "True");
        if set_available(store, o, availability).await && was_available && !is_available {
            aggregator.became_unavailable.inc([name, reason]);
        }
    }
    let any = !remotes.is_empty();
    aggregator.publish(remotes);
    any
}

fn service_ref(spec: &Value) -> Option<ServiceRef> {
    let s = spec.get("service").filter(|s| s.is_object())?;
    Some(ServiceRef {
        namespace: s["namespace"].as_str().unwrap_or_default().to_string(),
        name: s["name"].as_str().unwrap_or_default().to_string(),
        port: s["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(443),
    })
}

/// The APIService's Available condition.
fn available_condition(obj: &Value) -> Option<&Value> {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Available")
}

/// Writes the Available condition when it differs (the transition time moves only
/// when the status does), as upstream's `updateAPIServiceStatus`; whether it wrote it.
async fn set_available(
    store: &Store,
    obj: &Value,
    (status, reason, message): Availability,
) -> bool {
    let current = available_condition(obj);
    if let Some(c) = current
        && c["status"] == status
        && c["reason"] == reason
        && c["message"] == message.as_str()
    {
        return false;
    }
    let transition = match current {
        Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
        _ => json!(now()),
    };
    let mut conditions: Vec<Value> = obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"] != "Available")
        .cloned()
        .collect();
    conditions.push(json!({
        "type": "Available",
        "status": status,
        "lastTransitionTime": transition,
        "reason": reason,
        "message": message,
    }));
    let name = ferrokube_registry::meta::name(obj);
    let patch = json!({"status": {"conditions": conditions}});
    match store
        .update(
            None,
            name,
            UpdateInput::Patch(PatchType::Merge, patch),
            Part::Status,
            &WriteOptions {
                field_manager: Some("kube-apiserver".into()),
                ..Default::default()
            },
        )
        .await
    {
        Ok(_) => true,
        Err(e) => {
            if !e.is_not_found() {
                tracing::warn!(apiservice = name, error = %e, "updating an APIService's status failed");
            }
            false
        }
    }
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_keys_are_path_escaped() {
        assert_eq!(escape_extra_key("scopes"), "scopes");
        assert_eq!(escape_extra_key("example.com/key"), "example.com%2Fkey");
        assert_eq!(escape_extra_key("a b"), "a%20b");
    }

    #[test]
    fn identity_headers_replace_what_the_caller_sent() {
        let mut h = http::HeaderMap::new();
        let user = ferrokube_auth::UserInfo {
            name: "alice".into(),
            groups: vec!["dev".into(), "system:authenticated".into()],
            extra: BTreeMap::from([("example.com/team".to_string(), vec!["a".to_string()])]),
            ..Default::default()
        };
        set_identity(&mut h, &user);
        assert_eq!(h["x-remote-user"], "alice");
        let groups: Vec<_> = h.get_all("x-remote-group").iter().collect();
        assert_eq!(groups, ["dev", "system:authenticated"]);
        assert_eq!(h["x-remote-extra-example.com%2Fteam"], "a");
        assert!(is_remote_header(&HeaderName::from_static(
            "x-remote-extra-x"
        )));
        assert!(!is_remote_header(&HeaderName::from_static("x-remotes")));
    }

    #[test]
    fn ready_endpoints_of_the_named_port() {
        let slices = vec![json!({
            "ports": [{"name": "https", "port": 4443}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": false}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.3"]},
            ],
        })];
        assert_eq!(
            ready_endpoints(&slices, "https"),
            vec![
                ("10.0.0.2".to_string(), 4443),
                ("10.0.0.3".to_string(), 4443)
            ]
        );
        assert!(ready_endpoints(&slices, "").is_empty());
    }

    #[test]
    fn discovery_documents_become_resources() {
        let doc = json!({"kind": "APIResourceList", "groupVersion": "metrics.k8s.io/v1beta1",
        "resources": [
            {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": ["get", "list"]},
            {"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]},
            {"name": "nodes/status", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get"]},
        ]});
        let rs = remote_resources("metrics.k8s.io", "v1beta1", &doc);
        assert_eq!(rs.len(), 2);
        assert_eq!(rs[0].plural, "pods");
        assert_eq!(rs[0].singular, "podmetrics");
        assert!(rs[0].namespaced);
        assert_eq!(rs[1].subresources.len(), 1);
        assert_eq!(rs[1].subresources[0].name, "status");
        assert_eq!(rs[1].group, "metrics.k8s.io");
    }

    #[test]
    fn v3_documents_are_found_through_the_extensions_index() {
        let index = json!({"paths": {
            "apis/metrics.k8s.io/v1beta1": {
                "serverRelativeURL": "/openapi/v3/apis/metrics.k8s.io/v1beta1?hash=AB"
            },
            "apis/other.io/v1": {"serverRelativeURL": "https://elsewhere/x"},
            "apis/bare.io/v1": {},
        }});
        assert_eq!(
            remote_v3_url(&index, "apis/metrics.k8s.io/v1beta1").as_deref(),
            Some("/openapi/v3/apis/metrics.k8s.io/v1beta1?hash=AB")
        );
        // Only paths under /openapi/v3/ are followed.
        assert_eq!(
            remote_v3_url(&index, "apis/other.io/v1").as_deref(),
            Some("/openapi/v3/apis/other.io/v1")
        );
        assert_eq!(
            remote_v3_url(&index, "apis/bare.io/v1").as_deref(),
            Some("/openapi/v3/apis/bare.io/v1")
        );
        assert_eq!(remote_v3_url(&index, "apis/missing.io/v1"), None);
        assert_eq!(
            remote_v3_url(&json!({}), "apis/metrics.k8s.io/v1beta1"),
            None
        );
    }

    #[test]
    fn built_in_group_versions_are_local_and_automanaged() {
        let s = local_service("apps", "v1", 17800, 15, "onstart");
        assert_eq!(s["metadata"]["name"], "v1.apps");
        assert_eq!(s["metadata"]["labels"][AUTOMANAGED], "onstart");
        assert_eq!(service_name("", "v1"), "v1.");
        assert_eq!(builtin_priority("autoscaling", "v2"), (17500, 30));
    }
}
