//! The aggregation layer on the test apiserver against a small extension apiserver in
//! the test (HTTPS with a test CA, reached through a Service's EndpointSlice with
//! `--enable-aggregator-routing`): local APIServices for the built-in groups, the
//! availability conditions of a remote one as its Service appears, requests proxied
//! with the caller's identity in front-proxy headers, the remote group in
//! discovery, and the extension's OpenAPI v3 document served in `/openapi/v3`.

use std::convert::Infallible;
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

use base64::Engine;
use bytes::Bytes;
use ferrokube_testing::{TestApiServer, eventually};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::support::websocket;
use websocket::{websocket_echo, websocket_round_trip};

const GROUP_VERSION: &str = "metrics.k8s.io/v1beta1";
const APISERVICE: &str = "v1beta1.metrics.k8s.io";

/// What the extension apiserver saw of the last proxied request.
#[derive(Default, Clone, Debug)]
struct Seen {
    user: Option<String>,
    groups: Vec<String>,
    authorization: bool,
    client_certificate: bool,
    /// Who asked for the OpenAPI documents.
    openapi_user: Option<String>,
}

/// The extension's `/openapi/v3` index: its group-version, under its own hash.
fn openapi_index() -> Value {
    json!({"paths": {
        "apis/metrics.k8s.io/v1beta1": {
            "serverRelativeURL": "/openapi/v3/apis/metrics.k8s.io/v1beta1?hash=EXTENSIONHASH"
        },
        "version": {"serverRelativeURL": "/openapi/v3/version?hash=X"},
    }})
}

/// The extension's `/openapi/v2`: a path of its group-version with its definitions
/// (one a shared parameter and one a definition the apiserver has too), and paths
/// outside `/apis/` with a definition only they use.
fn openapi_v2() -> Value {
    json!({"swagger": "2.0", "info": {"title": "Test metrics server", "version": "v0.7.2"},
    "paths": {
        "/apis/metrics.k8s.io/v1beta1/nodes": {
            "parameters": [{"$ref": "#/parameters/pretty-nN7o5FEq"}],
            "get": {"operationId": "listMetricsV1beta1NodeMetrics",
                "produces": ["application/json"],
                "responses": {"200": {"description": "OK",
                    "schema": {"$ref": "#/definitions/io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetricsList"}}}},
        },
        "/extension-only/": {"get": {"operationId": "getExtensionOnly",
            "responses": {"200": {"description": "OK",
                "schema": {"$ref": "#/definitions/io.k8s.example.ExtensionOnly"}}}}},
    },
    "parameters": {"pretty-nN7o5FEq": {"name": "pretty", "in": "query", "type": "string", "uniqueItems": true}},
    "definitions": {
        "io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetricsList": {"type": "object",
            "properties": {
                "items": {"type": "array", "items": {"$ref": "#/definitions/io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics"}},
                "metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"}}},
        "io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics": {"type": "object",
            "x-kubernetes-group-version-kind": [{"group": "metrics.k8s.io", "kind": "NodeMetrics", "version": "v1beta1"}]},
        "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta": {"type": "object", "description": "the extension's"},
        "io.k8s.example.ExtensionOnly": {"type": "object"},
    }})
}

/// The extension's OpenAPI v3 document of metrics.k8s.io/v1beta1.
fn openapi_document() -> Value {
    json!({"openapi": "3.0.0", "info": {"title": "Test metrics server", "version": "v0.7.2"},
    "paths": {"/apis/metrics.k8s.io/v1beta1/nodes": {"get": {"operationId": "listNodeMetrics"}}},
    "components": {"schemas": {"io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics": {
        "type": "object",
        "x-kubernetes-group-version-kind": [{"group": "metrics.k8s.io", "kind": "NodeMetrics", "version": "v1beta1"}],
    }}}})
}

fn discovery() -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
    "resources": [
        {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": ["get", "list"]},
        {"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]},
    ]})
}

/// Starts the extension apiserver for `metrics.kube-system.svc`; returns its port and
/// its CA (PEM).
async fn extension_server(seen: Arc<Mutex<Seen>>) -> (u16, String) {
    use rustls_pki_types::pem::PemObject;
    let ca = ferrokube_pki::CertificateAuthority::generate("extension-ca").unwrap();
    let issued = ca
        .issue_serving_cert(
            "metrics",
            &["metrics.kube-system.svc".to_string()],
            &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
            ferrokube_pki::Validity::leaf_default(),
        )
        .unwrap();
    let certs = rustls_pki_types::CertificateDer::pem_slice_iter(issued.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // Any client certificate is accepted (and noted): the test checks one is presented.
    let config = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(Arc::new(AnyClientCert(provider)))
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let client_certificate = tls.get_ref().1.peer_certificates().is_some();
                let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                    let seen = seen.clone();
                    async move {
                        if req
                            .uri()
                            .path()
                            .starts_with("/apis/metrics.k8s.io/v1beta1/ws")
                        {
                            return Ok::<_, Infallible>(websocket_echo(req));
                        }
                        let header = |n: &str| {
                            req.headers()
                                .get_all(n)
                                .iter()
                                .filter_map(|v| v.to_str().ok().map(str::to_string))
                                .collect::<Vec<_>>()
                        };
                        let body = match req.uri().path() {
                            "/apis/metrics.k8s.io/v1beta1" => discovery(),
                            "/openapi/v3" => openapi_index(),
                            "/openapi/v2" => openapi_v2(),
                            "/openapi/v3/apis/metrics.k8s.io/v1beta1" => {
                                seen.lock().unwrap().openapi_user =
                                    header("x-remote-user").first().cloned();
                                openapi_document()
                            }
                            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods" => {
                                let mut seen = seen.lock().unwrap();
                                seen.user = header("x-remote-user").first().cloned();
                                seen.groups = header("x-remote-group");
                                seen.authorization = req.headers().contains_key("authorization");
                                seen.client_certificate = client_certificate;
                                json!({"kind": "PodMetricsList", "apiVersion": GROUP_VERSION,
                                    "metadata": {}, "items": [{"metadata": {"name": "p", "namespace": "default"},
                                    "timestamp": "2026-01-01T00:00:00Z", "window": "10s",
                                    "containers": [{"name": "c", "usage": {"cpu": "1m", "memory": "1Mi"}}]}]})
                            }
                            _ => {
                                return Ok::<_, Infallible>(
                                    hyper::Response::builder()
                                        .status(404)
                                        .body(Full::new(Bytes::from_static(b"not found")))
                                        .unwrap(),
                                );
                            }
                        };
                        Ok(hyper::Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(body.to_string())))
                            .unwrap())
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .with_upgrades()
                    .await;
            });
        }
    });
    (port, ca.cert_pem().to_string())
}

/// Accepts any client certificate without checking it (the extension server only
/// notes whether one came).
#[derive(Debug)]
struct AnyClientCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::server::danger::ClientCertVerifier for AnyClientCert {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }
    fn client_auth_mandatory(&self) -> bool {
        false
    }
    fn verify_client_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

async fn send(client: &kube::Client, method: &str, path: &str, body: Value) -> (u16, Value) {
    let (code, _, v) = TestApiServer::send_json(client, method, path, &body)
        .await
        .unwrap();
    (code, v)
}

/// An OpenAPI document: the status, the `ETag` and `Cache-Control` headers and the
/// JSON body (gzip undone; `Null` when there is none), or the `Location` of a redirect
/// in the body's place.
async fn openapi_get(
    client: &kube::Client,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String, String, Value) {
    let (code, h, body) = TestApiServer::raw(client, "GET", path, headers, Vec::new())
        .await
        .unwrap();
    let header = |n: &str| {
        h.get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    if code == 301 {
        return (
            code,
            header("etag"),
            header("cache-control"),
            json!(header("location")),
        );
    }
    let body = if body.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    } else {
        body
    };
    let doc = serde_json::from_slice(&body).unwrap_or(Value::Null);
    (code, header("etag"), header("cache-control"), doc)
}

/// The served `/openapi/v2` as protobuf (gzip undone).
async fn v2_protobuf(client: &kube::Client) -> Vec<u8> {
    let (code, _, body) = TestApiServer::raw(
        client,
        "GET",
        "/openapi/v2",
        &[(
            "accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )],
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(code, 200);
    if body.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    } else {
        body
    }
}

/// The `serverRelativeURL` of `gv` in the `/openapi/v3` index, if it is listed.
async fn v3_entry(client: &kube::Client, gv: &str) -> Option<String> {
    let (code, _, _, index) = openapi_get(client, "/openapi/v3", &[]).await;
    assert_eq!(code, 200, "{index}");
    index["paths"][gv]["serverRelativeURL"]
        .as_str()
        .map(str::to_string)
}

/// The Available condition of an APIService: (status, reason, message).
async fn available(client: &kube::Client, name: &str) -> Option<(String, String, String)> {
    let (code, svc) = send(
        client,
        "GET",
        &format!("/apis/apiregistration.k8s.io/v1/apiservices/{name}"),
        Value::Null,
    )
    .await;
    if code != 200 {
        return None;
    }
    let c = svc["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Available")?
        .clone();
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

async fn becomes(client: &kube::Client, name: &str, status: &str, reason: &str) -> bool {
    eventually(|| async {
        available(client, name)
            .await
            .is_some_and(|(s, r, _)| s == status && r == reason)
    })
    .await
}

#[tokio::test]
async fn remote_apiservices_are_checked_proxied_and_discovered() {
    let server = TestApiServer::start_with(ferrokube_testing::with_aggregator)
        .await
        .unwrap();
    let client = server.client.clone();

    // Every built-in group-version has a local APIService.
    assert!(becomes(&client, "v1.apps", "True", "Local").await);
    assert!(becomes(&client, "v1.", "True", "Local").await);
    let (_, local) = send(
        &client,
        "GET",
        "/apis/apiregistration.k8s.io/v1/apiservices/v1.apps",
        Value::Null,
    )
    .await;
    assert_eq!(
        local["metadata"]["labels"]["kube-aggregator.kubernetes.io/automanaged"],
        "onstart"
    );
    assert_eq!(local["spec"]["groupPriorityMinimum"], 17800);
    assert_eq!(
        available(&client, "v1.apps").await.unwrap().2,
        "Local APIServices are always available"
    );

    let seen = Arc::new(Mutex::new(Seen::default()));
    let (port, ca) = extension_server(seen.clone()).await;
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca);
    let (code, created) = send(
        &client,
        "POST",
        "/apis/apiregistration.k8s.io/v1/apiservices",
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": APISERVICE},
            "spec": {"group": "metrics.k8s.io", "version": "v1beta1",
                "service": {"namespace": "kube-system", "name": "metrics", "port": 443},
                "caBundle": ca_bundle, "groupPriorityMinimum": 100, "versionPriority": 100}}),
    )
    .await;
    assert_eq!(code, 201, "{created}");

    // No Service yet: unavailable, and requests get upstream's plain 503.
    assert!(becomes(&client, APISERVICE, "False", "ServiceNotFound").await);
    assert_eq!(
        available(&client, APISERVICE).await.unwrap().2,
        "service/metrics in \"kube-system\" is not present"
    );
    let pods_path = "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods";
    // kube-rs retries a 503 for minutes by default; this client takes the first answer.
    let mut config = server.kube_config().await.unwrap();
    config.default_retry = false;
    let no_retry = kube::Client::try_from(config).unwrap();
    let (code, _, body) = TestApiServer::raw(&no_retry, "GET", pods_path, &[], Vec::new())
        .await
        .unwrap();
    assert_eq!(code, 503);
    assert_eq!(String::from_utf8_lossy(&body), "service unavailable\n");

    // A Service listening on another port.
    let (code, svc) = send(
        &client,
        "POST",
        "/api/v1/namespaces/kube-system/services",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "metrics"},
            "spec": {"ports": [{"name": "https", "port": 8443, "targetPort": port}]}}),
    )
    .await;
    assert_eq!(code, 201, "{svc}");
    assert!(becomes(&client, APISERVICE, "False", "ServicePortError").await);
    let patch = json!({"spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}});
    let (code, _, svc) = TestApiServer::raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/kube-system/services/metrics",
        &[("content-type", "application/merge-patch+json")],
        patch.to_string().into_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&svc));
    assert!(becomes(&client, APISERVICE, "False", "EndpointsNotFound").await);

    let (code, slice) = send(
        &client,
        "POST",
        "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices",
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "metrics-abc", "labels": {"kubernetes.io/service-name": "metrics"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}),
    )
    .await;
    assert_eq!(code, 201, "{slice}");
    assert!(becomes(&client, APISERVICE, "True", "Passed").await);
    assert_eq!(
        available(&client, APISERVICE).await.unwrap().2,
        "all checks passed"
    );

    // The OpenAPI v3 index lists the extension's group-version under a hash of this
    // server's, next to the built-in ones, and serves the extension's document for it,
    // downloaded as upstream's aggregator user.
    const V3_GV: &str = "apis/metrics.k8s.io/v1beta1";
    assert!(
        eventually(|| async { v3_entry(&client, V3_GV).await.is_some() }).await,
        "{V3_GV} never listed in /openapi/v3"
    );
    assert!(v3_entry(&client, "api/v1").await.is_some());
    assert!(v3_entry(&client, "version").await.is_none());
    let url = v3_entry(&client, V3_GV).await.unwrap();
    let hash = url
        .strip_prefix(&format!("/openapi/v3/{V3_GV}?hash="))
        .unwrap_or_else(|| panic!("{url}"))
        .to_string();
    assert!(!hash.is_empty() && hash != "EXTENSIONHASH", "{url}");
    let (code, etag, cache, doc) = openapi_get(&client, &url, &[]).await;
    assert_eq!(code, 200, "{doc}");
    assert_eq!(doc, openapi_document());
    assert_eq!(etag, format!("\"{hash}\""));
    assert_eq!(cache, "public, immutable");
    assert_eq!(
        seen.lock().unwrap().openapi_user.as_deref(),
        Some("system:aggregator")
    );
    // Served as the built-in documents are: 304 for the same ETag, a stale hash
    // redirected to the current one.
    let (code, _, _, _) = openapi_get(
        &client,
        &format!("/openapi/v3/{V3_GV}"),
        &[("if-none-match", &etag)],
    )
    .await;
    assert_eq!(code, 304);
    let (code, _, _, location) =
        openapi_get(&client, &format!("/openapi/v3/{V3_GV}?hash=0BAD"), &[]).await;
    assert_eq!(code, 301);
    assert_eq!(location, json!(url));

    // /openapi/v2 has the extension's paths under /apis/ and the definitions they
    // reach (shared parameters written into the path), the apiserver's own where both
    // have one; nothing outside /apis/.
    const NODES: &str = "/apis/metrics.k8s.io/v1beta1/nodes";
    const NODE_METRICS: &str = "io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics";
    assert!(
        eventually(|| async {
            let (_, _, _, v2) = openapi_get(&client, "/openapi/v2", &[]).await;
            v2["paths"].get(NODES).is_some()
        })
        .await,
        "{NODES} never in /openapi/v2"
    );
    let (code, _, _, v2) = openapi_get(&client, "/openapi/v2", &[]).await;
    assert_eq!(code, 200);
    assert_eq!(
        v2["paths"][NODES]["get"]["operationId"],
        "listMetricsV1beta1NodeMetrics"
    );
    assert_eq!(v2["paths"][NODES]["parameters"][0]["name"], "pretty");
    assert_eq!(
        v2["definitions"][NODE_METRICS]["x-kubernetes-group-version-kind"][0]["kind"],
        "NodeMetrics"
    );
    assert!(v2["definitions"][format!("{NODE_METRICS}List")].is_object());
    assert_ne!(
        v2["definitions"]["io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"]["description"],
        "the extension's"
    );
    assert!(v2["paths"].get("/extension-only/").is_none());
    assert!(
        v2["definitions"]
            .get("io.k8s.example.ExtensionOnly")
            .is_none()
    );
    assert!(
        v2["paths"]
            .get("/api/v1/namespaces/{namespace}/pods")
            .is_some()
    );
    // The protobuf form (kubectl's) has it too.
    let proto = v2_protobuf(&client).await;
    let has = |needle: &str| proto.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(has("listMetricsV1beta1NodeMetrics"));

    // Unavailable (no endpoints), the extension's documents are not served; available
    // again, they are.
    let slice_path = "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices/metrics-abc";
    let (code, _) = send(&client, "DELETE", slice_path, Value::Null).await;
    assert_eq!(code, 200);
    assert!(becomes(&client, APISERVICE, "False", "EndpointsNotFound").await);
    // Upstream's availability metrics: this one unavailable, once since it was
    // available, for that reason; the local ones available.
    let metric = |series: String| {
        let client = client.clone();
        async move {
            let page = client
                .request_text(http::Request::get("/metrics").body(vec![]).unwrap())
                .await
                .unwrap();
            page.lines()
                .find_map(|l| l.strip_prefix(&series)?.trim().parse::<f64>().ok())
        }
    };
    assert!(
        eventually(|| async {
            metric(format!(
                r#"aggregator_unavailable_apiservice_total{{name="{APISERVICE}",reason="EndpointsNotFound"}}"#
            ))
            .await
                == Some(1.0)
        })
        .await
    );
    assert_eq!(
        metric(format!(
            r#"aggregator_unavailable_apiservice{{name="{APISERVICE}"}}"#
        ))
        .await,
        Some(1.0)
    );
    assert_eq!(
        metric(r#"aggregator_unavailable_apiservice{name="v1.apps"}"#.to_string()).await,
        Some(0.0)
    );
    assert!(
        eventually(|| async { v3_entry(&client, V3_GV).await.is_none() }).await,
        "{V3_GV} still listed in /openapi/v3 while unavailable"
    );
    let (_, _, _, v2) = openapi_get(&client, "/openapi/v2", &[]).await;
    assert!(v2["paths"].get(NODES).is_none());
    let (code, slice) = send(
        &client,
        "POST",
        "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices",
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "metrics-abc", "labels": {"kubernetes.io/service-name": "metrics"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}),
    )
    .await;
    assert_eq!(code, 201, "{slice}");
    assert!(becomes(&client, APISERVICE, "True", "Passed").await);
    assert_eq!(
        metric(format!(
            r#"aggregator_unavailable_apiservice{{name="{APISERVICE}"}}"#
        ))
        .await,
        Some(0.0)
    );
    assert!(
        eventually(|| async { v3_entry(&client, V3_GV).await.as_deref() == Some(url.as_str()) })
            .await,
        "{V3_GV} not listed again once available"
    );

    // A connection upgrade reaches the extension apiserver and is spliced.
    let out = websocket_round_trip(&client, "/apis/metrics.k8s.io/v1beta1/ws/x", "hi")
        .await
        .unwrap();
    assert_eq!(out, "/apis/metrics.k8s.io/v1beta1/ws/x: hi");

    // Proxied as the caller, without the caller's credentials; a caller's own
    // front-proxy headers are replaced.
    let (code, _, body) = TestApiServer::raw(
        &client,
        "GET",
        pods_path,
        &[
            ("x-remote-user", "mallory"),
            ("x-remote-group", "system:masters"),
        ],
        Vec::new(),
    )
    .await
    .unwrap();
    let listed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    assert_eq!(code, 200, "{listed}");
    assert_eq!(listed["kind"], "PodMetricsList");
    // The extension's answer is passed on as it came, also to a person's tool that
    // gets this server's own JSON indented.
    let (code, _, for_curl) = TestApiServer::raw(
        &client,
        "GET",
        pods_path,
        &[("user-agent", "curl/8.5.0")],
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(code, 200);
    assert_eq!(
        String::from_utf8_lossy(&for_curl),
        String::from_utf8_lossy(&body)
    );
    let seen_now = seen.lock().unwrap().clone();
    let user = seen_now.user.clone().unwrap_or_default();
    assert!(!user.is_empty() && user != "mallory", "{seen_now:?}");
    assert!(
        seen_now.groups.iter().any(|g| g == "system:authenticated"),
        "{seen_now:?}"
    );
    assert!(!seen_now.authorization, "{seen_now:?}");
    if server.dir().join("pki/front-proxy-client.crt").exists() {
        assert!(seen_now.client_certificate, "{seen_now:?}");
    }

    // A user the authorizer denies never reaches the extension apiserver.
    let nobody = server.client_as("nobody", &[]).await.unwrap();
    let (code, _) = send(&nobody, "GET", pods_path, Value::Null).await;
    assert_eq!(code, 403);

    // Discovery lists the remote group, its resources from the extension server.
    let (_, groups) = send(&client, "GET", "/apis", Value::Null).await;
    let metrics = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "metrics.k8s.io")
        .cloned()
        .unwrap_or_else(|| panic!("metrics.k8s.io not in /apis: {groups}"));
    assert_eq!(metrics["preferredVersion"]["groupVersion"], GROUP_VERSION);
    let (code, group) = send(&client, "GET", "/apis/metrics.k8s.io", Value::Null).await;
    assert_eq!(code, 200);
    assert_eq!(group["kind"], "APIGroup");
    let (_, _, agg) = TestApiServer::raw(
        &client,
        "GET",
        "/apis",
        &[(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )],
        Vec::new(),
    )
    .await
    .unwrap();
    let agg: Value = serde_json::from_slice(&agg).unwrap();
    let item = agg["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "metrics.k8s.io")
        .cloned()
        .unwrap_or_else(|| panic!("metrics.k8s.io not in aggregated discovery"));
    let resources: Vec<&str> = item["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["resource"].as_str())
        .collect();
    assert_eq!(resources, ["pods", "nodes"]);
    assert_eq!(
        item["versions"][0]["resources"][0]["responseKind"]["kind"],
        "PodMetrics"
    );
    // The group-version's own discovery document comes from the extension server.
    let (code, list) = send(&client, "GET", "/apis/metrics.k8s.io/v1beta1", Value::Null).await;
    assert_eq!(code, 200);
    assert_eq!(list["groupVersion"], GROUP_VERSION);

    // Without the APIService the group-version is gone.
    let (code, _) = send(
        &client,
        "DELETE",
        &format!("/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}"),
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        eventually(|| async { send(&client, "GET", pods_path, Value::Null).await.0 == 404 }).await
    );
    // ... and so is its OpenAPI document.
    assert!(
        eventually(|| async { v3_entry(&client, V3_GV).await.is_none() }).await,
        "{V3_GV} still listed in /openapi/v3"
    );
    let (code, _, _, _) = openapi_get(&client, &format!("/openapi/v3/{V3_GV}"), &[]).await;
    assert_eq!(code, 404);
    assert!(
        eventually(|| async {
            let (_, _, _, v2) = openapi_get(&client, "/openapi/v2", &[]).await;
            v2["paths"].get(NODES).is_none() && v2["definitions"].get(NODE_METRICS).is_none()
        })
        .await,
        "{NODES} still in /openapi/v2"
    );
    let proto = v2_protobuf(&client).await;
    assert!(
        !proto
            .windows(NODE_METRICS.len())
            .any(|w| w == NODE_METRICS.as_bytes())
    );
    server.stop().await;
}

#[tokio::test]
async fn custom_resource_versions_get_local_apiservices() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client.clone();
    let (code, crd) = send(
        &client,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object"}}}]}}),
    )
    .await;
    assert_eq!(code, 201, "{crd}");
    assert!(becomes(&client, "v1.example.com", "True", "Local").await);
    let (_, svc) = send(
        &client,
        "GET",
        "/apis/apiregistration.k8s.io/v1/apiservices/v1.example.com",
        Value::Null,
    )
    .await;
    assert_eq!(
        svc["metadata"]["labels"]["kube-aggregator.kubernetes.io/automanaged"],
        "true"
    );
    assert_eq!(svc["spec"]["groupPriorityMinimum"], 1000);
    assert_eq!(svc["spec"]["versionPriority"], 100);
    let (code, _) = send(
        &client,
        "DELETE",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        eventually(|| async {
            send(
                &client,
                "GET",
                "/apis/apiregistration.k8s.io/v1/apiservices/v1.example.com",
                Value::Null,
            )
            .await
            .0 == 404
        })
        .await
    );
    server.stop().await;
}
