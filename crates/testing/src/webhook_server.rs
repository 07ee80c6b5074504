//! A small HTTPS webhook server for tests (admission and conversion webhooks): a
//! serving certificate from a fresh test CA for `127.0.0.1` and `webhook.default.svc`,
//! each POSTed JSON body answered by the test's handler with the request path.
//! Stopped (its connections closed, new ones refused) by [`WebhookServer::stop`] or
//! on drop. It counts the connections it accepted: callers that keep theirs open
//! make fewer than they make calls.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::TestServerError;

type Answer = Pin<Box<dyn Future<Output = Value> + Send>>;
type Handler = Arc<dyn Fn(String, http::HeaderMap, Value) -> Answer + Send + Sync>;

/// A running webhook server.
pub struct WebhookServer {
    pub port: u16,
    /// The test CA's certificate (PEM) the serving certificate chains to.
    pub ca_pem: String,
    /// The TLS connections accepted so far.
    connections: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for WebhookServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookServer")
            .field("port", &self.port)
            .finish()
    }
}

impl WebhookServer {
    /// Starts the server on a free loopback port; `handler(path, body)` answers every
    /// request (a body that is not JSON arrives as `Null`).
    pub async fn start<F, Fut>(handler: F) -> Result<WebhookServer, TestServerError>
    where
        F: Fn(String, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Value> + Send + 'static,
    {
        WebhookServer::start_with_headers(move |path, _headers, body| handler(path, body)).await
    }

    /// As [`WebhookServer::start`], the handler also seeing the request's headers
    /// (the credentials a caller presents).
    pub async fn start_with_headers<F, Fut>(handler: F) -> Result<WebhookServer, TestServerError>
    where
        F: Fn(String, http::HeaderMap, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Value> + Send + 'static,
    {
        use rustls_pki_types::pem::PemObject;
        let pki = |e: String| TestServerError::Pki(e);
        let ca = ferrokube_pki::CertificateAuthority::generate("webhook-ca")
            .map_err(|e| pki(e.to_string()))?;
        let issued = ca
            .issue_serving_cert(
                "webhook",
                &["webhook.default.svc".to_string()],
                &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
                ferrokube_pki::Validity::leaf_default(),
            )
            .map_err(|e| pki(e.to_string()))?;
        let certs = rustls_pki_types::CertificateDer::pem_slice_iter(issued.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pki(e.to_string()))?;
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes())
            .map_err(|e| pki(e.to_string()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| pki(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| pki(e.to_string()))?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = listener.local_addr()?.port();
        let handler: Handler =
            Arc::new(move |path, headers, body| Box::pin(handler(path, headers, body)));
        let connections: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let accepted = connections.clone();
        let task = tokio::spawn(async move {
            // Owned by the accepting task, so that stopping it ends every connection.
            let mut open = tokio::task::JoinSet::new();
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, handler) = (acceptor.clone(), handler.clone());
                let accepted = accepted.clone();
                while open.try_join_next().is_some() {}
                open.spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let service =
                        hyper::service::service_fn(move |req| serve(req, handler.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Ok(WebhookServer {
            port,
            ca_pem: ca.cert_pem().to_string(),
            connections,
            task,
        })
    }

    /// The CA bundle as a webhook's `clientConfig.caBundle` carries it (base64).
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// A validating webhook that allows every ConfigMap create after `delay`,
    /// registered through `client`: it holds such a create in flight for that long
    /// (request timeouts, graceful shutdown). It answers while the server lives.
    pub async fn holding_configmap_creates(
        client: &kube::Client,
        delay: std::time::Duration,
    ) -> Result<WebhookServer, TestServerError> {
        let hook = WebhookServer::start(move |_path: String, review: Value| async move {
            tokio::time::sleep(delay).await;
            serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": true}})
        })
        .await?;
        let config = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "hold-configmap-creates"},
        "webhooks": [{
            "name": "hold.example.com",
            "clientConfig": {"url": hook.url("/hold"), "caBundle": hook.ca_bundle()},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                "resources": ["configmaps"]}],
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 30,
        }]});
        let (code, _, v) = crate::TestApiServer::send_json(
            client,
            "POST",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            &config,
        )
        .await?;
        if code != 201 {
            return Err(TestServerError::Client(format!(
                "registering the webhook: {code} {v}"
            )));
        }
        Ok(hook)
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// How many TLS connections the server has accepted.
    pub fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Stops: its connections are closed and new calls fail with "connection
    /// refused" once this returns (the listener is closed).
    pub async fn stop(&mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

/// A webhook server that records what it is sent: each request's `Authorization`
/// header and JSON body, answered by the test's function of the body. For the
/// webhooks the apiserver reaches through a kubeconfig (token authentication,
/// authorization, audit).
pub struct RecordingWebhook {
    pub server: WebhookServer,
    requests: Arc<std::sync::Mutex<Vec<(String, Value)>>>,
}

impl RecordingWebhook {
    pub async fn start<F>(answer: F) -> Result<RecordingWebhook, TestServerError>
    where
        F: Fn(&Value) -> Value + Send + Sync + 'static,
    {
        let requests: Arc<std::sync::Mutex<Vec<(String, Value)>>> = Arc::default();
        let seen = requests.clone();
        let server = WebhookServer::start_with_headers(move |_path, headers, body| {
            let caller = headers
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let reply = answer(&body);
            if let Ok(mut seen) = seen.lock() {
                seen.push((caller, body));
            }
            async move { reply }
        })
        .await?;
        Ok(RecordingWebhook { server, requests })
    }

    /// The requests so far: the caller's `Authorization` header and the body.
    pub fn requests(&self) -> Vec<(String, Value)> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// How many requests arrived.
    pub fn calls(&self) -> usize {
        self.requests.lock().map(|r| r.len()).unwrap_or_default()
    }

    /// Writes a kubeconfig naming the server at `path` (its CA, and `token` as the
    /// bearer token the apiserver presents) into `dir`; returns the file.
    pub fn write_kubeconfig(
        &self,
        dir: &std::path::Path,
        path: &str,
        token: &str,
    ) -> Result<std::path::PathBuf, TestServerError> {
        let file = dir.join("webhook.kubeconfig");
        std::fs::write(
            &file,
            ferrokube_pki::kubeconfig_token_yaml(
                "webhook",
                &self.server.url(path),
                &self.server.ca_pem,
                "kube-apiserver",
                token,
            ),
        )?;
        Ok(file)
    }
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    req: hyper::Request<Incoming>,
    handler: Handler,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    let headers = req.headers().clone();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let answer = handler(path, headers, body).await;
    let out = serde_json::to_vec(&answer).unwrap_or_default();
    Ok(hyper::Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(out)))
        .unwrap_or_default())
}
