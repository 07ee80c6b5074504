//! `pods/proxy` and `services/proxy` (upstream `pkg/registry/core/pod/rest` and
//! `service/proxy.go` with their `ResourceLocation`s): an HTTP request to
//! `/api/v1/namespaces/{ns}/pods/{[scheme:]name[:port]}/proxy/{path}` goes to `{path}`
//! on the pod's IP, one to `.../services/{[scheme:]name[:port]}/proxy/{path}` to a
//! ready endpoint of the Service; the answer (status, headers, body) comes back as it
//! is, streamed. This is what `kubectl proxy` users and `kubectl cluster-info`'s links
//! reach.
//!
//! As upstream:
//! - a pod without a port in the name is reached on its first declared container port
//!   (else the scheme's default); `https` is spoken without verifying the pod's
//!   certificate;
//! - a Service port is named by its name or number; an endpoint address counts only
//!   when it refers to an existing pod that has that IP (upstream `isValidAddress`, so a
//!   hand-written Endpoints object cannot point the apiserver anywhere else); no
//!   endpoint is a 503;
//! - a GET of `.../proxy` without the trailing slash is redirected to `.../proxy/`;
//! - the user's credentials (`Authorization`, impersonation headers) are not passed on.
//!
//! - connection upgrades (WebSockets, ...) are passed to the target and, once it
//!   answered 101, the two connections are spliced.
//!
//! Deviation: no rewriting of links in HTML answers or of `Location` headers into the
//! proxy path.

use std::sync::Arc;

use ferrokube_apimachinery::errors::ApiError;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::handler::{Body, State};
use crate::proxy::{connect_tcp, connect_tls, insecure_tls, is_upgrade, splice_upgraded, streamed};

/// What a proxy path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyTarget {
    /// The path's segment as given (`https:web:`), which upstream's errors name.
    pub id: String,
    pub scheme: &'static str,
    pub name: String,
    pub port: Option<String>,
    /// The path on the target: what follows `/proxy` (empty when nothing does).
    pub path: String,
}

/// Upstream `SplitSchemeNamePort`: `name`, `name:port` or `scheme:name:port` (scheme
/// `http`, `https` or empty).
pub fn split_scheme_name_port(id: &str) -> Option<(&'static str, &str, Option<&str>)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, None),
        [name, port] => ("", *name, Some(*port)),
        [scheme, name, port] => (*scheme, *name, Some(*port)),
        _ => return None,
    };
    let scheme = match scheme {
        "" | "http" => "http",
        "https" => "https",
        _ => return None,
    };
    if name.is_empty() {
        return None;
    }
    Some((scheme, name, port.filter(|p| !p.is_empty())))
}

/// The target of a `pods/proxy` or `services/proxy` request path (`plural` is `pods`
/// or `services`).
pub fn proxy_target(path: &str, plural: &str) -> Option<(String, ProxyTarget)> {
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let (ns, rest) = rest.split_once('/')?;
    let rest = rest.strip_prefix(plural)?.strip_prefix('/')?;
    let (id, rest) = rest.split_once('/')?;
    let tail = rest.strip_prefix("proxy")?;
    if !(tail.is_empty() || tail.starts_with('/')) {
        return None;
    }
    let (scheme, name, port) = split_scheme_name_port(id)?;
    Some((
        ns.to_string(),
        ProxyTarget {
            id: id.to_string(),
            scheme,
            name: name.to_string(),
            port: port.map(str::to_string),
            path: tail.to_string(),
        },
    ))
}

/// The pod's address for `port` (or its first declared container port).
pub fn pod_location(pod: &Value, port: Option<&str>) -> Result<(String, Option<u16>), ApiError> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
    if ip.is_empty() {
        return Err(ApiError::service_unavailable(format!(
            "pod {name} has no IP address yet"
        )));
    }
    let port = match port {
        Some(p) => Some(p.parse::<u16>().map_err(|_| {
            ApiError::bad_request(format!("invalid port {p:?} for pod {name}: not a number"))
        })?),
        None => pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|c| c["ports"][0]["containerPort"].as_u64())
            .and_then(|p| u16::try_from(p).ok()),
    };
    Ok((ip.to_string(), port))
}

/// The endpoint port name a Service port given by number or name stands for.
pub fn service_port_name(service: &Value, port: Option<&str>) -> Result<String, ApiError> {
    let name = service["metadata"]["name"].as_str().unwrap_or_default();
    let Some(port) = port else {
        return Ok(String::new());
    };
    let Ok(number) = port.parse::<u64>() else {
        return Ok(port.to_string());
    };
    service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_u64() == Some(number))
        .map(|p| p["name"].as_str().unwrap_or_default().to_string())
        .ok_or_else(|| {
            ApiError::service_unavailable(format!(
                "no service port {number} found for service {name:?}"
            ))
        })
}

/// The number of the port named `port_name` in an Endpoints subset's or an
/// EndpointSlice's `ports`.
pub(crate) fn named_port(ports: &Value, port_name: &str) -> Option<u16> {
    ports
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"].as_str().unwrap_or_default() == port_name)
        .and_then(|p| p["port"].as_u64())
        .and_then(|p| u16::try_from(p).ok())
}

/// The (pod name, IP, port) candidates of an Endpoints object for the endpoint port
/// named `port_name`, in the object's order.
pub fn endpoint_candidates(endpoints: &Value, port_name: &str) -> Vec<(String, String, u16)> {
    let mut out = Vec::new();
    for subset in endpoints["subsets"].as_array().into_iter().flatten() {
        let Some(port) = named_port(&subset["ports"], port_name) else {
            continue;
        };
        for addr in subset["addresses"].as_array().into_iter().flatten() {
            let target = &addr["targetRef"];
            // Upstream `isValidAddress`: only addresses of pods.
            if target["kind"].as_str() != Some("Pod") {
                continue;
            }
            if let (Some(pod), Some(ip)) = (target["name"].as_str(), addr["ip"].as_str()) {
                out.push((pod.to_string(), ip.to_string(), port));
            }
        }
    }
    out
}

fn store(state: &State, plural: &str) -> Result<Arc<ferrokube_registry::Store>, ApiError> {
    ferrokube_api::resources::lookup("", "v1", plural)
        .and_then(|i| state.registry.store_for(i))
        .cloned()
        .ok_or_else(|| ApiError::internal(format!("no store for {plural}")))
}

/// Serves a `pods/proxy` (`service == false`) or `services/proxy` request, already
/// authorized and admitted.
pub(crate) async fn serve(
    state: &State,
    req: Request<Incoming>,
    service: bool,
) -> Result<Response<Body>, ApiError> {
    let plural = if service { "services" } else { "pods" };
    let (ns, target) = proxy_target(req.uri().path(), plural)
        .ok_or_else(|| ApiError::bad_request(format!("invalid {plural}/proxy path")))?;
    if target.path.is_empty() && matches!(*req.method(), Method::GET | Method::HEAD) {
        // Upstream redirects so that relative links in the answer resolve under /proxy/.
        let mut location = format!("{}/", req.uri().path());
        if let Some(q) = req.uri().query().filter(|q| !q.is_empty()) {
            location = format!("{location}?{q}");
        }
        let mut r = Response::new(empty());
        *r.status_mut() = StatusCode::MOVED_PERMANENTLY;
        if let Ok(v) = HeaderValue::from_str(&location) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        return Ok(r);
    }
    let pods = store(state, "pods")?;
    let (host, port) = if service {
        let svc = store(state, "services")?
            .get(Some(&ns), &target.name)
            .await?;
        let port_name = service_port_name(&svc, target.port.as_deref())?;
        let endpoints = store(state, "endpoints")?
            .get(Some(&ns), &target.name)
            .await
            .ok();
        let candidates = endpoints
            .as_ref()
            .map(|e| endpoint_candidates(e, &port_name))
            .unwrap_or_default();
        let mut chosen = None;
        // Start at a random candidate, as upstream spreads requests.
        let start = if candidates.is_empty() {
            0
        } else {
            rand_index(candidates.len())
        };
        for i in 0..candidates.len() {
            let (pod_name, ip, port) = &candidates[(start + i) % candidates.len()];
            let Ok(pod) = pods.get(Some(&ns), pod_name).await else {
                continue;
            };
            // Upstream `isValidAddress`: the address is one of the pod's IPs.
            let pod_ips = pod["status"]["podIPs"].as_array();
            let has_ip = pod["status"]["podIP"].as_str() == Some(ip.as_str())
                || pod_ips
                    .into_iter()
                    .flatten()
                    .any(|p| p["ip"].as_str() == Some(ip.as_str()));
            if has_ip {
                chosen = Some((ip.clone(), Some(*port)));
                break;
            }
        }
        chosen.ok_or_else(|| {
            ApiError::service_unavailable(format!(
                "no endpoints available for service {:?}",
                target.id
            ))
        })?
    } else {
        let pod = pods.get(Some(&ns), &target.name).await?;
        pod_location(&pod, target.port.as_deref())?
    };
    let port = port.unwrap_or(if target.scheme == "https" { 443 } else { 80 });
    forward(req, target.scheme, &host, port, &target.path).await
}

fn rand_index(len: usize) -> usize {
    use std::hash::{BuildHasher, Hasher};
    // Spreading load needs no cryptographic randomness: a fresh RandomState is seeded
    // differently each time.
    let n = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (n % len as u64) as usize
}

fn empty() -> Body {
    http_body_util::Empty::new().boxed_unsync()
}

/// Hop-by-hop headers (RFC 9110 7.6.1) and what must not reach the workload.
pub(crate) fn passed_on(name: &header::HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "authorization"
    ) && !name.as_str().starts_with("impersonate-")
}

async fn forward(
    req: Request<Incoming>,
    scheme: &str,
    host: &str,
    port: u16,
    path: &str,
) -> Result<Response<Body>, ApiError> {
    let (tcp, addr) = connect_tcp(host, port)
        .await
        .map_err(|e| ApiError::service_unavailable(format!("error trying to reach {host}: {e}")))?;
    let unavailable =
        |e: String| ApiError::service_unavailable(format!("error trying to reach {addr}: {e}"));
    let uri = match req.uri().query() {
        Some(q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path.to_string(),
    };
    let (mut parts, body) = req.into_parts();
    let upgrade = take_upgrade(&mut parts);
    let mut out = Request::builder()
        .method(parts.method.clone())
        .uri(&uri)
        .body(body)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    for (k, v) in &parts.headers {
        if passed_on(k) {
            out.headers_mut().append(k.clone(), v.clone());
        }
    }
    if let Ok(h) = HeaderValue::from_str(&addr) {
        out.headers_mut().insert(header::HOST, h);
    }
    if scheme == "https" {
        let tls = connect_tls(insecure_tls().map_err(&unavailable)?, host, &addr, tcp)
            .await
            .map_err(&unavailable)?;
        exchange(out, upgrade, |out| send(TokioIo::new(tls), out)).await
    } else {
        exchange(out, upgrade, |out| send(TokioIo::new(tcp), out)).await
    }
    .map_err(unavailable)
}

/// The client's side of a connection upgrade (WebSocket, SPDY, ...) being proxied.
pub(crate) struct ClientUpgrade {
    pending: OnUpgrade,
    protocol: HeaderValue,
}

/// Takes the client's pending upgrade off a request that asks for one (`Connection:
/// Upgrade` with an `Upgrade` protocol).
pub(crate) fn take_upgrade(parts: &mut http::request::Parts) -> Option<ClientUpgrade> {
    if !is_upgrade(&parts.headers) {
        return None;
    }
    let protocol = parts.headers.get(header::UPGRADE)?.clone();
    let pending = parts.extensions.remove::<OnUpgrade>()?;
    Some(ClientUpgrade { pending, protocol })
}

/// Sends a proxied request with `send` and hands back the answer. For an upgrade,
/// the target is asked for the client's protocol and, when it answers 101, the two
/// connections are spliced until either side ends (upstream's
/// `UpgradeAwareHandler`); any other answer comes back as it is.
pub(crate) async fn exchange<F, Fut>(
    mut out: Request<Incoming>,
    upgrade: Option<ClientUpgrade>,
    send: F,
) -> Result<Response<Body>, String>
where
    F: FnOnce(Request<Incoming>) -> Fut,
    Fut: std::future::Future<Output = Result<Response<Incoming>, String>>,
{
    if let Some(upgrade) = &upgrade {
        let h = out.headers_mut();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(header::UPGRADE, upgrade.protocol.clone());
    }
    let mut resp = send(out).await?;
    match upgrade {
        Some(client) if resp.status() == StatusCode::SWITCHING_PROTOCOLS => {
            let target = hyper::upgrade::on(&mut resp);
            tokio::spawn(splice_upgraded(client.pending, target));
            // The target's handshake headers (Upgrade, Sec-WebSocket-Accept, ...) are
            // the client's answer, hop-by-hop ones included.
            let mut r = Response::new(empty());
            *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            *r.headers_mut() = resp.headers().clone();
            Ok(r)
        }
        _ => Ok(passed_back(resp)),
    }
}

/// A proxied answer handed back: its status, its end-to-end headers, and its body
/// streamed as it comes.
pub(crate) fn passed_back(resp: Response<Incoming>) -> Response<Body> {
    let (parts, body) = resp.into_parts();
    let mut r = Response::new(streamed(body));
    r.extensions_mut().insert(crate::handler::Relayed);
    *r.status_mut() = parts.status;
    for (k, v) in &parts.headers {
        if passed_on(k) && k != header::CONTENT_LENGTH {
            r.headers_mut().append(k.clone(), v.clone());
        }
    }
    r
}

pub(crate) async fn send<T>(io: T, req: Request<Incoming>) -> Result<Response<Incoming>, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "proxied connection ended");
        }
    });
    sender.send_request(req).await.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_with_scheme_and_port() {
        assert_eq!(split_scheme_name_port("web"), Some(("http", "web", None)));
        assert_eq!(
            split_scheme_name_port("web:80"),
            Some(("http", "web", Some("80")))
        );
        assert_eq!(
            split_scheme_name_port("https:web:443"),
            Some(("https", "web", Some("443")))
        );
        assert_eq!(split_scheme_name_port("web:"), Some(("http", "web", None)));
        assert_eq!(split_scheme_name_port("ftp:web:21"), None);
        assert_eq!(split_scheme_name_port(":80"), None);
        assert_eq!(split_scheme_name_port("a:b:c:d"), None);
    }

    #[test]
    fn proxy_paths() {
        let (ns, t) = proxy_target(
            "/api/v1/namespaces/default/services/web:http/proxy/a/b",
            "services",
        )
        .unwrap();
        assert_eq!(ns, "default");
        assert_eq!(
            t,
            ProxyTarget {
                id: "web:http".into(),
                scheme: "http",
                name: "web".into(),
                port: Some("http".into()),
                path: "/a/b".into()
            }
        );
        let (_, t) = proxy_target("/api/v1/namespaces/ns/pods/p/proxy", "pods").unwrap();
        assert_eq!(t.path, "");
        assert_eq!(
            proxy_target("/api/v1/namespaces/ns/pods/p/proxyx", "pods"),
            None
        );
        assert_eq!(
            proxy_target("/api/v1/namespaces/ns/pods/p/proxy/", "services"),
            None
        );
    }

    #[test]
    fn pods_are_reached_on_their_first_port() {
        let pod = json!({"metadata": {"name": "p"}, "status": {"podIP": "10.244.0.5"},
            "spec": {"containers": [{"name": "a"}, {"name": "b", "ports": [{"containerPort": 8080}]}]}});
        assert_eq!(
            pod_location(&pod, None).unwrap(),
            ("10.244.0.5".into(), Some(8080))
        );
        assert_eq!(pod_location(&pod, Some("9000")).unwrap().1, Some(9000));
        assert_eq!(pod_location(&pod, Some("http")).unwrap_err().code, 400);
        let pending = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        assert_eq!(pod_location(&pending, None).unwrap_err().code, 503);
    }

    #[test]
    fn service_ports_and_endpoints() {
        let svc = json!({"metadata": {"name": "web"}, "spec": {"ports": [
            {"name": "http", "port": 80}, {"name": "metrics", "port": 9090}]}});
        assert_eq!(service_port_name(&svc, Some("80")).unwrap(), "http");
        assert_eq!(service_port_name(&svc, Some("metrics")).unwrap(), "metrics");
        assert_eq!(service_port_name(&svc, None).unwrap(), "");
        assert_eq!(service_port_name(&svc, Some("81")).unwrap_err().code, 503);
        let eps = json!({"subsets": [{
            "addresses": [
                {"ip": "10.244.0.5", "targetRef": {"kind": "Pod", "name": "web-1"}},
                {"ip": "192.0.2.1"},
                {"ip": "10.244.0.6", "targetRef": {"kind": "Node", "name": "n"}}],
            "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}]}]});
        assert_eq!(
            endpoint_candidates(&eps, "http"),
            vec![("web-1".into(), "10.244.0.5".into(), 8080)]
        );
        assert!(endpoint_candidates(&eps, "other").is_empty());
    }
}
