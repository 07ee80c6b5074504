//! Test support: an in-process apiserver with the production wiring.
//!
//! [`TestApiServer::start`] generates a PKI, opens the embedded SQLite store in a
//! temporary directory, and runs the same Options -> Config -> Server path as
//! `cmd/kube-apiserver` on a free loopback port over real HTTPS. Dev-only: no
//! production crate may depend on it (only as a dev-dependency).

use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ferrokube_apiserver::{Options, Server};
use ferrokube_storage_sqlite::{SqliteOptions, SqliteStorage};

pub mod webhook_server;
pub use webhook_server::{RecordingWebhook, WebhookServer};

/// The service account token issuer of test servers.
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

#[derive(Debug, thiserror::Error)]
pub enum TestServerError {
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("pki: {0}")]
    Pki(String),
    #[error("storage: {0}")]
    Storage(String),
    #[error("config: {0}")]
    Config(#[from] ferrokube_apiserver::ConfigError),
    #[error("server: {0}")]
    Server(#[from] ferrokube_apiserver::ServerError),
    #[error("client: {0}")]
    Client(String),
}

/// A running test apiserver; stopped when dropped (or with [`TestApiServer::stop`]).
pub struct TestApiServer {
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    pub url: String,
    server: Option<Server>,
    storage: Arc<SqliteStorage>,
    boot: Boot,
    dir: tempfile::TempDir,
}

/// What a (re)start needs: the port and the serving PKI.
#[derive(Clone)]
struct Boot {
    port: u16,
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    /// Changes to the default options (e.g. `anonymous_auth`).
    configure: fn(&mut Options),
}

impl std::fmt::Debug for TestApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestApiServer")
            .field("url", &self.url)
            .finish()
    }
}

/// Opens the store under `dir` and starts a server over it.
async fn serve(
    boot: &Boot,
    dir: &std::path::Path,
) -> Result<(Server, Arc<SqliteStorage>), TestServerError> {
    let storage = Arc::new(
        SqliteStorage::open(&dir.join("data/state.db"), SqliteOptions::default())
            .map_err(|e| TestServerError::Storage(e.to_string()))?,
    );
    let mut opts = Options::new(boot.cert.clone(), boot.key.clone());
    opts.bind_address = IpAddr::V4(Ipv4Addr::LOCALHOST);
    opts.secure_port = boot.port;
    opts.client_ca_file = Some(boot.ca.clone());
    let pki = boot.ca.parent().unwrap_or(std::path::Path::new("."));
    opts.service_account_issuers = vec![SERVICE_ACCOUNT_ISSUER.to_string()];
    opts.service_account_key_files = vec![pki.join("sa.pub")];
    opts.service_account_signing_key_file = Some(pki.join("sa.key"));
    // No controllers run here to create `default` ServiceAccounts, so, as upstream's
    // integration test server, ServiceAccount admission is off unless a test turns it on.
    opts.admission_plugins
        .set("ServiceAccount", false)
        .map_err(|e| TestServerError::Config(ferrokube_apiserver::ConfigError::Admission(e)))?;
    // As kubeadm starts kube-apiserver (and our cluster scripts do).
    opts.allow_privileged = true;
    opts.kubelet_preferred_address_types = ["InternalIP", "ExternalIP", "Hostname"]
        .map(String::from)
        .to_vec();
    (boot.configure)(&mut opts);
    let config = opts.into_config(storage.clone()).await?;
    let server = Server::start(config).await?;
    Ok((server, storage))
}

/// Options for tests of the aggregation layer: APIServices are reached at their
/// Service's endpoints (no kube-proxy in tests), and proxied requests carry the test
/// PKI's front-proxy client certificate. Pass to [`TestApiServer::start_with`].
pub fn with_aggregator(opts: &mut Options) {
    opts.enable_aggregator_routing = true;
    let dir = opts
        .client_ca_file
        .as_ref()
        .and_then(|ca| ca.parent())
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let (cert, key) = (
        dir.join("front-proxy-client.crt"),
        dir.join("front-proxy-client.key"),
    );
    if cert.exists() && key.exists() {
        opts.proxy_client_cert_file = Some(cert);
        opts.proxy_client_key_file = Some(key);
    }
}

/// `--admission-control-config-file` with `yaml` as the file: written to a temporary
/// file (named after this process and `name`), read into `opts`, removed again. Panics
/// on a configuration the reader refuses, so a test states only valid ones here.
pub fn with_admission_config(opts: &mut Options, name: &str, yaml: &str) {
    let file = std::env::temp_dir().join(format!(
        "ferrokube-admission-{}-{name}.yaml",
        std::process::id()
    ));
    std::fs::write(&file, yaml).expect("writing the AdmissionConfiguration");
    let read = opts.admission_plugins.read_config_file(&file);
    let _ = std::fs::remove_file(&file);
    read.expect("reading the AdmissionConfiguration");
}

/// [`with_aggregator`] plus request-header authentication with hack/up.sh's (kubeadm's)
/// flags: the test PKI's front-proxy CA, allowed name `front-proxy-client`,
/// `X-Remote-User`/`X-Remote-Group`/`X-Remote-Extra-`. The apiserver then publishes
/// them in the `kube-system/extension-apiserver-authentication` ConfigMap, where
/// extension apiservers (metrics-server) read how to authenticate the aggregator.
pub fn with_aggregator_and_request_header(opts: &mut Options) {
    with_aggregator(opts);
    let ca = opts
        .client_ca_file
        .as_ref()
        .and_then(|ca| ca.parent())
        .map(|dir| dir.join("front-proxy-ca.crt"));
    if let Some(ca) = ca.filter(|ca| ca.exists()) {
        opts.requestheader_client_ca_file = Some(ca);
        opts.requestheader_allowed_names = vec!["front-proxy-client".into()];
        opts.requestheader_username_headers = vec!["X-Remote-User".into()];
        opts.requestheader_group_headers = vec!["X-Remote-Group".into()];
        opts.requestheader_extra_headers_prefix = vec!["X-Remote-Extra-".into()];
    }
}

impl TestApiServer {
    /// Starts a server on a free loopback port. The port is chosen before the server
    /// binds it, so a test running in parallel can take it in between; then the start is
    /// retried on another port.
    pub async fn start() -> Result<TestApiServer, TestServerError> {
        Self::start_with(|_| {}).await
    }

    /// [`TestApiServer::start`] with `configure` applied to the apiserver's options.
    pub async fn start_with(configure: fn(&mut Options)) -> Result<TestApiServer, TestServerError> {
        const ATTEMPTS: usize = 5;
        let mut attempt = 1;
        loop {
            match Self::start_on_free_port(configure).await {
                Err(TestServerError::Server(ferrokube_apiserver::ServerError::Bind { .. }))
                    if attempt < ATTEMPTS =>
                {
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    async fn start_on_free_port(
        configure: fn(&mut Options),
    ) -> Result<TestApiServer, TestServerError> {
        let dir = tempfile::tempdir()?;
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let url = format!("https://127.0.0.1:{port}");
        let mut pki_opts = ferrokube_pki::ClusterPkiOptions::new(url.clone());
        pki_opts.advertise_address = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
        pki_opts.node_name = "test-node".into();
        let pki = ferrokube_pki::write_cluster_pki(&dir.path().join("pki"), &pki_opts)
            .map_err(|e| TestServerError::Pki(e.to_string()))?;
        let boot = Boot {
            port,
            cert: pki.apiserver_cert.clone(),
            key: pki.apiserver_key.clone(),
            ca: pki.ca_cert.clone(),
            configure,
        };
        let (server, storage) = serve(&boot, dir.path()).await?;
        let kubeconfig = pki.admin_kubeconfig.clone();
        let kc = kube::config::Kubeconfig::read_from(&kubeconfig)
            .map_err(|e| TestServerError::Client(e.to_string()))?;
        let cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| TestServerError::Client(e.to_string()))?;
        let client =
            kube::Client::try_from(cfg).map_err(|e| TestServerError::Client(e.to_string()))?;
        Ok(TestApiServer {
            client,
            kubeconfig,
            url,
            server: Some(server),
            storage,
            boot,
            dir,
        })
    }

    /// Stops the server and starts a new one over the same store, PKI and port (the
    /// watch cache starts over at the store's current revision). `client` keeps
    /// working.
    pub async fn restart(&mut self) -> Result<(), TestServerError> {
        if let Some(s) = self.server.take() {
            s.shutdown(Duration::from_secs(5)).await;
        }
        let (server, storage) = serve(&self.boot, self.dir.path()).await?;
        self.server = Some(server);
        self.storage = storage;
        Ok(())
    }

    /// Compacts the store's history up to its current revision (what the
    /// apiserver's compactor does periodically); returns that revision.
    pub async fn compact_storage(&self) -> Result<i64, TestServerError> {
        use ferrokube_storage::Storage;
        let rev = self
            .storage
            .current_revision()
            .await
            .map_err(|e| TestServerError::Storage(e.to_string()))?;
        self.storage
            .compact(rev)
            .await
            .map_err(|e| TestServerError::Storage(e.to_string()))?;
        Ok(rev)
    }

    /// The admin client's configuration (to build clients with other settings, e.g.
    /// `disable_compression`).
    pub async fn kube_config(&self) -> Result<kube::Config, TestServerError> {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .map_err(|e| TestServerError::Client(e.to_string()))?;
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| TestServerError::Client(e.to_string()))
    }

    /// An admin client that sees every answer as it is: kube-rs retries 429, 503 and
    /// 504 answers by default.
    pub async fn client_without_retries(&self) -> Result<kube::Client, TestServerError> {
        let mut config = self.kube_config().await?;
        config.default_retry = false;
        kube::Client::try_from(config).map_err(|e| TestServerError::Client(e.to_string()))
    }

    /// One request through `client` with the response's status, headers and raw
    /// (not decompressed unless the client does it) body.
    pub async fn raw(
        client: &kube::Client,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<(u16, http::HeaderMap, Vec<u8>), TestServerError> {
        use http_body_util::BodyExt;
        let mut req = http::Request::builder().method(method).uri(path);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(kube::client::Body::from(body))
            .map_err(|e| TestServerError::Client(e.to_string()))?;
        let resp = client
            .send(req)
            .await
            .map_err(|e| TestServerError::Client(e.to_string()))?;
        let (parts, body) = resp.into_parts();
        let bytes = body
            .collect()
            .await
            .map_err(|e| TestServerError::Client(e.to_string()))?
            .to_bytes();
        Ok((parts.status.as_u16(), parts.headers, bytes.to_vec()))
    }

    /// A request through [`Self::raw`] whose answer is read by its `Content-Type`
    /// (Kubernetes protobuf or JSON): the status code, that type and the body.
    pub async fn send_decoded(
        client: &kube::Client,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<(u16, String, serde_json::Value), TestServerError> {
        let (code, headers, bytes) = Self::raw(client, method, path, headers, body).await?;
        let content_type = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body = if content_type.starts_with(ferrokube_protobuf::MEDIA_TYPE) {
            ferrokube_protobuf::decode(&bytes)
                .map_err(|e| TestServerError::Client(e.to_string()))?
                .1
        } else {
            serde_json::from_slice(&bytes).map_err(|e| TestServerError::Client(e.to_string()))?
        };
        Ok((code, content_type, body))
    }

    /// A JSON request through [`Self::raw`]: the status code, the `Warning` headers
    /// (admission warnings) and the decoded body (`Null` when it is not JSON).
    pub async fn send_json(
        client: &kube::Client,
        method: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<(u16, Vec<String>, serde_json::Value), TestServerError> {
        let body = serde_json::to_vec(body).map_err(|e| TestServerError::Client(e.to_string()))?;
        let (code, headers, bytes) = Self::raw(
            client,
            method,
            path,
            &[("content-type", "application/json")],
            body,
        )
        .await?;
        let warnings = headers
            .get_all("warning")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect();
        let decoded = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        Ok((code, warnings, decoded))
    }

    /// A client authenticating as `user` in `groups` with a client certificate from
    /// the cluster CA (for authorization tests).
    pub async fn client_as(
        &self,
        user: &str,
        groups: &[&str],
    ) -> Result<kube::Client, TestServerError> {
        let cfg = self.config_as(user, groups).await?;
        kube::Client::try_from(cfg).map_err(|e| TestServerError::Client(e.to_string()))
    }

    /// The client configuration [`Self::client_as`] uses (to build clients with other
    /// settings, e.g. without kube-rs's retries of 429 answers).
    pub async fn config_as(
        &self,
        user: &str,
        groups: &[&str],
    ) -> Result<kube::Config, TestServerError> {
        let pki = self.dir.path().join("pki");
        let read = |f: &str| std::fs::read_to_string(pki.join(f));
        let ca_pem = read("ca.crt")?;
        let ca = ferrokube_pki::CertificateAuthority::load(&ca_pem, &read("ca.key")?)
            .map_err(|e| TestServerError::Pki(e.to_string()))?;
        let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        let issued = ca
            .issue_client_cert(user, &groups, ferrokube_pki::Validity::leaf_default())
            .map_err(|e| TestServerError::Pki(e.to_string()))?;
        let yaml = ferrokube_pki::kubeconfig_yaml(
            "test",
            &self.url,
            &ca_pem,
            user,
            &issued.cert_pem,
            &issued.key_pem,
        );
        Self::config_from_kubeconfig(&yaml).await
    }

    /// A client with no credentials at all (the anonymous user, if allowed).
    pub async fn anonymous_client(&self) -> Result<kube::Client, TestServerError> {
        let ca_pem = std::fs::read_to_string(self.dir.path().join("pki/ca.crt"))?;
        let mut kc = ferrokube_pki::Kubeconfig::from_yaml(&ferrokube_pki::kubeconfig_token_yaml(
            "test",
            &self.url,
            &ca_pem,
            "anonymous",
            "unused",
        ))
        .map_err(|e| TestServerError::Client(e.to_string()))?;
        for u in &mut kc.users {
            u.user.token = None;
        }
        self.client_from_kubeconfig(&kc.to_yaml()).await
    }

    /// A client sending `token` as its bearer token.
    pub async fn client_with_token(&self, token: &str) -> Result<kube::Client, TestServerError> {
        let ca_pem = std::fs::read_to_string(self.dir.path().join("pki/ca.crt"))?;
        let yaml = ferrokube_pki::kubeconfig_token_yaml("test", &self.url, &ca_pem, "token", token);
        self.client_from_kubeconfig(&yaml).await
    }

    /// A SelfSubjectReview sent with `token` as the bearer token: the status code and
    /// the body (who the apiserver takes the token for, or the 401's Status).
    pub async fn review_self_with_token(
        &self,
        token: &str,
    ) -> Result<(u16, serde_json::Value), TestServerError> {
        let client = self.client_with_token(token).await?;
        let (code, _, body) = Self::send_json(
            &client,
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
        )
        .await?;
        Ok((code, body))
    }

    async fn client_from_kubeconfig(&self, yaml: &str) -> Result<kube::Client, TestServerError> {
        let cfg = Self::config_from_kubeconfig(yaml).await?;
        kube::Client::try_from(cfg).map_err(|e| TestServerError::Client(e.to_string()))
    }

    async fn config_from_kubeconfig(yaml: &str) -> Result<kube::Config, TestServerError> {
        let kc = kube::config::Kubeconfig::from_yaml(yaml)
            .map_err(|e| TestServerError::Client(e.to_string()))?;
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| TestServerError::Client(e.to_string()))
    }

    /// The directory holding the PKI and the store.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub async fn stop(mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown(Duration::from_secs(5)).await;
        }
    }
}

/// Polls `done` every 50 ms, at most 100 times (5 s): whether it came true.
pub async fn eventually<F, Fut>(mut done: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..100 {
        if done().await {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    false
}

/// Whether the CustomResourceDefinition `name` is Established (its resource served).
pub async fn crd_established(client: &kube::Client, name: &str) -> bool {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    let Ok(crd) = crds.get(name).await else {
        return false;
    };
    crd.status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True")
}

/// The core v1 Events in `default` about the object named `name` (what kubelets and the
/// controller-manager write, and where cluster-scoped objects' events go).
pub async fn core_events_about(
    client: &kube::Client,
    name: &str,
) -> Result<Vec<k8s_openapi::api::core::v1::Event>, kube::Error> {
    let events: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(client.clone(), "default");
    let fields = format!("involvedObject.name={name}");
    Ok(events
        .list(&kube::api::ListParams::default().fields(&fields))
        .await?
        .items)
}
