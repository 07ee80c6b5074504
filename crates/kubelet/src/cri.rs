//! The CRI v1 client: the runtime and image services of one endpoint (containerd's unix
//! socket), over tonic with a unix-socket connector. Thin: every call maps to one RPC;
//! NOT_FOUND from status and stop calls is surfaced as [`CriError::NotFound`] so callers
//! can treat it as "already gone".

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::metrics::KubeletMetrics;

/// Errors of CRI calls.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("connecting to the CRI endpoint {endpoint}: {source}")]
    Connect {
        endpoint: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("invalid CRI endpoint {0:?}: only unix sockets (unix:///path or /path) are supported")]
    Endpoint(String),
    #[error("CRI {call}: not found: {message}")]
    NotFound { call: &'static str, message: String },
    #[error("CRI {call}: {code:?}: {message}")]
    Rpc {
        call: &'static str,
        code: tonic::Code,
        message: String,
    },
    #[error("CRI {call}: the runtime answered without {what}")]
    Incomplete {
        call: &'static str,
        what: &'static str,
    },
    /// Every attempt of a pull with several credentials failed: the errors in the order of
    /// the attempts, shown like upstream's `utilerrors.NewAggregate` (distinct texts joined
    /// by `, ` in brackets; one distinct text alone). Never holds fewer than two errors.
    #[error("{}", aggregate_text(.0, |e| e.to_string()))]
    Aggregate(Vec<CriError>),
}

/// The text of an aggregate of errors, each shown by `text`, as Go's aggregate `Error()`.
fn aggregate_text(errors: &[CriError], text: impl Fn(&CriError) -> String) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errors {
        let t = text(e);
        if !seen.contains(&t) {
            seen.push(t);
        }
    }
    match &seen[..] {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

impl CriError {
    fn from_status(call: &'static str, s: tonic::Status) -> Self {
        match s.code() {
            tonic::Code::NotFound => CriError::NotFound {
                call,
                message: s.message().to_owned(),
            },
            code => CriError::Rpc {
                call,
                code,
                message: s.message().to_owned(),
            },
        }
    }

    /// The error as upstream's kubelet quotes a gRPC error in a status or an event
    /// (Go's `status.Error` text): `rpc error: code = NotFound desc = ...`.
    pub fn rpc_error_text(&self) -> String {
        let (code, message) = match self {
            CriError::NotFound { message, .. } => ("NotFound".to_owned(), message),
            // Go spells this one code with one l.
            CriError::Rpc {
                code: tonic::Code::Cancelled,
                message,
                ..
            } => ("Canceled".to_owned(), message),
            CriError::Rpc { code, message, .. } => (format!("{code:?}"), message),
            CriError::Aggregate(errors) => return aggregate_text(errors, Self::rpc_error_text),
            other => return other.to_string(),
        };
        format!("rpc error: code = {code} desc = {message}")
    }

    /// What the runtime said, without the call and code (upstream's `status.Message()`).
    pub fn runtime_message(&self) -> String {
        match self {
            CriError::NotFound { message, .. } | CriError::Rpc { message, .. } => message.clone(),
            CriError::Aggregate(errors) => aggregate_text(errors, Self::runtime_message),
            other => other.to_string(),
        }
    }

    /// The runtime does not know the object (it is gone).
    pub fn is_not_found(&self) -> bool {
        matches!(self, CriError::NotFound { .. })
    }

    /// The runtime does not implement the call.
    pub fn is_unimplemented(&self) -> bool {
        matches!(
            self,
            CriError::Rpc {
                code: tonic::Code::Unimplemented,
                ..
            }
        )
    }
}

pub type Result<T, E = CriError> = std::result::Result<T, E>;

/// The default containerd socket.
pub const DEFAULT_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// `unix:///run/x.sock` or `/run/x.sock` → the socket path.
pub fn socket_path(endpoint: &str) -> Result<PathBuf> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.starts_with('/') {
        Ok(PathBuf::from(path))
    } else {
        Err(CriError::Endpoint(endpoint.to_owned()))
    }
}

/// A connection to a CRI runtime (clone it freely: the channel multiplexes).
#[derive(Debug, Clone)]
pub struct CriClient {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    /// Counts and durations of every call, for `kubelet_runtime_operations_*`.
    metrics: Arc<KubeletMetrics>,
}

macro_rules! rpc {
    ($self:ident . $svc:ident . $method:ident ( $req:expr )) => {{
        let started = std::time::Instant::now();
        let result = $self.$svc.clone().$method($req).await;
        $self
            .metrics
            .observe_operation(stringify!($method), started.elapsed(), result.is_err());
        result
            .map(|r| r.into_inner())
            .map_err(|s| CriError::from_status(stringify!($method), s))
    }};
}

impl CriClient {
    /// Connects to the runtime endpoint (and uses it for images too), failing fast when the
    /// socket does not answer within `timeout`.
    pub async fn connect(endpoint: &str, timeout: Duration) -> Result<Self> {
        let path = socket_path(endpoint)?;
        let channel = unix_channel(&path, timeout)
            .await
            .map_err(|source| CriError::Connect {
                endpoint: endpoint.to_owned(),
                source,
            })?;
        Ok(CriClient {
            runtime: RuntimeServiceClient::new(channel.clone()).max_decoding_message_size(64 << 20),
            images: ImageServiceClient::new(channel).max_decoding_message_size(64 << 20),
            metrics: Arc::new(KubeletMetrics::default()),
        })
    }

    /// The kubelet's metrics, recorded here for every CRI call and shared with the
    /// kubelet's other parts through this client.
    pub fn metrics(&self) -> &Arc<KubeletMetrics> {
        &self.metrics
    }

    /// Resource usage of every container (CRI `ListContainerStats`).
    pub async fn list_container_stats(&self) -> Result<Vec<cri::ContainerStats>> {
        Ok(rpc!(
            self.runtime
                .list_container_stats(cri::ListContainerStatsRequest { filter: None })
        )?
        .stats)
    }

    /// The image filesystem's usage (CRI `ImageFsInfo`).
    pub async fn image_fs_info(&self) -> Result<cri::ImageFsInfoResponse> {
        rpc!(self.images.image_fs_info(cri::ImageFsInfoRequest {}))
    }

    pub async fn version(&self) -> Result<cri::VersionResponse> {
        rpc!(self.runtime.version(cri::VersionRequest {
            version: "v1".into()
        }))
    }

    pub async fn status(&self) -> Result<cri::StatusResponse> {
        rpc!(self.runtime.status(cri::StatusRequest { verbose: false }))
    }

    pub async fn run_pod_sandbox(
        &self,
        config: cri::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        let r = rpc!(self.runtime.run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: runtime_handler.to_owned(),
        }))?;
        Ok(r.pod_sandbox_id)
    }

    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        rpc!(self.runtime.stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: id.to_owned()
        }))
        .map(drop)
    }

    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        rpc!(
            self.runtime
                .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                    pod_sandbox_id: id.to_owned()
                })
        )
        .map(drop)
    }

    pub async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus> {
        rpc!(
            self.runtime
                .pod_sandbox_status(cri::PodSandboxStatusRequest {
                    pod_sandbox_id: id.to_owned(),
                    verbose: false,
                })
        )?
        .status
        .ok_or(CriError::Incomplete {
            call: "pod_sandbox_status",
            what: "a status",
        })
    }

    pub async fn list_pod_sandboxes(
        &self,
        filter: Option<cri::PodSandboxFilter>,
    ) -> Result<Vec<cri::PodSandbox>> {
        Ok(rpc!(
            self.runtime
                .list_pod_sandbox(cri::ListPodSandboxRequest { filter })
        )?
        .items)
    }

    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> Result<String> {
        let r = rpc!(self.runtime.create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_owned(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        }))?;
        Ok(r.container_id)
    }

    pub async fn start_container(&self, id: &str) -> Result<()> {
        rpc!(self.runtime.start_container(cri::StartContainerRequest {
            container_id: id.to_owned()
        }))
        .map(drop)
    }

    /// Stops with the given grace in seconds (then SIGKILL, done by the runtime).
    pub async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<()> {
        rpc!(self.runtime.stop_container(cri::StopContainerRequest {
            container_id: id.to_owned(),
            timeout: timeout_secs,
        }))
        .map(drop)
    }

    /// Changes a running container's cgroup resources (in-place pod resize).
    pub async fn update_container_resources(
        &self,
        id: &str,
        linux: cri::LinuxContainerResources,
    ) -> Result<()> {
        rpc!(
            self.runtime
                .update_container_resources(cri::UpdateContainerResourcesRequest {
                    container_id: id.to_owned(),
                    linux: Some(linux),
                    ..Default::default()
                })
        )
        .map(drop)
    }

    /// Asks the runtime to reopen the container's log file (after log rotation renamed it).
    pub async fn reopen_container_log(&self, id: &str) -> Result<()> {
        rpc!(
            self.runtime
                .reopen_container_log(cri::ReopenContainerLogRequest {
                    container_id: id.to_owned()
                })
        )
        .map(drop)
    }

    pub async fn remove_container(&self, id: &str) -> Result<()> {
        rpc!(self.runtime.remove_container(cri::RemoveContainerRequest {
            container_id: id.to_owned()
        }))
        .map(drop)
    }

    pub async fn list_containers(
        &self,
        filter: Option<cri::ContainerFilter>,
    ) -> Result<Vec<cri::Container>> {
        Ok(rpc!(
            self.runtime
                .list_containers(cri::ListContainersRequest { filter })
        )?
        .containers)
    }

    pub async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus> {
        rpc!(self.runtime.container_status(cri::ContainerStatusRequest {
            container_id: id.to_owned(),
            verbose: false,
        }))?
        .status
        .ok_or(CriError::Incomplete {
            call: "container_status",
            what: "a status",
        })
    }

    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_secs: i64,
    ) -> Result<cri::ExecSyncResponse> {
        rpc!(self.runtime.exec_sync(cri::ExecSyncRequest {
            container_id: id.to_owned(),
            cmd,
            timeout: timeout_secs,
        }))
    }

    /// Prepares a streaming exec; the runtime answers with the URL of its streaming server
    /// that serves it (the kubelet proxies the client's upgrade there).
    pub async fn exec(&self, req: cri::ExecRequest) -> Result<String> {
        Ok(rpc!(self.runtime.exec(req))?.url)
    }

    /// Prepares a streaming attach; returns the streaming server's URL.
    pub async fn attach(&self, req: cri::AttachRequest) -> Result<String> {
        Ok(rpc!(self.runtime.attach(req))?.url)
    }

    /// Prepares a port forward into the sandbox's network namespace; returns the URL.
    pub async fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String> {
        Ok(rpc!(self.runtime.port_forward(cri::PortForwardRequest {
            pod_sandbox_id: sandbox_id.to_owned(),
            port: ports,
        }))?
        .url)
    }

    /// The image's status; `None` when the runtime does not have it.
    pub async fn image_status(&self, image: &str) -> Result<Option<cri::Image>> {
        let r = rpc!(self.images.image_status(cri::ImageStatusRequest {
            image: Some(cri::ImageSpec {
                image: image.to_owned(),
                ..Default::default()
            }),
            verbose: false,
        }))?;
        Ok(r.image.filter(|i| !i.id.is_empty()))
    }

    /// Pulls the image without credentials; returns its reference (the image ID) as the
    /// runtime names it.
    pub async fn pull_image(
        &self,
        image: &str,
        sandbox_config: Option<cri::PodSandboxConfig>,
    ) -> Result<String> {
        self.pull_image_with_auth(image, sandbox_config, &[]).await
    }

    /// Pulls the image as upstream's `kuberuntime_image.go` `PullImage` does: with no
    /// credentials, one pull without auth; otherwise one pull per credential, in order
    /// ([`crate::credentials::pull_credentials`]), until one succeeds. When every attempt
    /// fails: the one error, or [`CriError::Aggregate`] of all of them.
    pub async fn pull_image_with_auth(
        &self,
        image: &str,
        sandbox_config: Option<cri::PodSandboxConfig>,
        creds: &[cri::AuthConfig],
    ) -> Result<String> {
        if creds.is_empty() {
            return self.pull_once(image, sandbox_config, None).await;
        }
        let mut errors = Vec::new();
        for auth in creds {
            match self
                .pull_once(image, sandbox_config.clone(), Some(auth.clone()))
                .await
            {
                Ok(image_ref) => return Ok(image_ref),
                Err(e) => errors.push(e),
            }
        }
        Err(if errors.len() == 1 {
            errors.remove(0)
        } else {
            CriError::Aggregate(errors)
        })
    }

    async fn pull_once(
        &self,
        image: &str,
        sandbox_config: Option<cri::PodSandboxConfig>,
        auth: Option<cri::AuthConfig>,
    ) -> Result<String> {
        let r = rpc!(self.images.pull_image(cri::PullImageRequest {
            image: Some(cri::ImageSpec {
                image: image.to_owned(),
                ..Default::default()
            }),
            auth,
            sandbox_config,
        }))?;
        Ok(r.image_ref)
    }

    pub async fn list_images(&self) -> Result<Vec<cri::Image>> {
        Ok(rpc!(
            self.images
                .list_images(cri::ListImagesRequest { filter: None })
        )?
        .images)
    }

    pub async fn remove_image(&self, image: &str) -> Result<()> {
        rpc!(self.images.remove_image(cri::RemoveImageRequest {
            image: Some(cri::ImageSpec {
                image: image.to_owned(),
                ..Default::default()
            }),
        }))
        .map(drop)
    }
}

async fn unix_channel(path: &Path, timeout: Duration) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_owned();
    // The URI is a placeholder: the connector ignores it and dials the socket.
    Endpoint::from_static("http://cri.local")
        .connect_timeout(timeout)
        .timeout(Duration::from_secs(300))
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            socket_path("unix:///run/c.sock").unwrap(),
            PathBuf::from("/run/c.sock")
        );
        assert_eq!(
            socket_path("/run/c.sock").unwrap(),
            PathBuf::from("/run/c.sock")
        );
        assert!(matches!(
            socket_path("tcp://1.2.3.4:1"),
            Err(CriError::Endpoint(_))
        ));
        assert!(matches!(
            socket_path("relative.sock"),
            Err(CriError::Endpoint(_))
        ));
    }

    /// An image service that lets only `u`/`p` pull, and records every attempt's auth.
    #[derive(Default)]
    struct FakeImages {
        attempts: std::sync::Mutex<Vec<Option<cri::AuthConfig>>>,
    }

    #[tonic::async_trait]
    impl k8s_cri::v1::image_service_server::ImageService for FakeImages {
        async fn list_images(
            &self,
            _: tonic::Request<cri::ListImagesRequest>,
        ) -> Result<tonic::Response<cri::ListImagesResponse>, tonic::Status> {
            Err(tonic::Status::unimplemented("list"))
        }
        async fn image_status(
            &self,
            _: tonic::Request<cri::ImageStatusRequest>,
        ) -> Result<tonic::Response<cri::ImageStatusResponse>, tonic::Status> {
            Err(tonic::Status::unimplemented("status"))
        }
        async fn pull_image(
            &self,
            r: tonic::Request<cri::PullImageRequest>,
        ) -> Result<tonic::Response<cri::PullImageResponse>, tonic::Status> {
            let auth = r.into_inner().auth;
            self.attempts.lock().unwrap().push(auth.clone());
            match auth {
                Some(a) if a.username == "u" && a.password == "p" => {
                    Ok(tonic::Response::new(cri::PullImageResponse {
                        image_ref: "sha256:abc".into(),
                    }))
                }
                Some(a) => Err(tonic::Status::unknown(format!(
                    "401 Unauthorized ({})",
                    a.username
                ))),
                None => Err(tonic::Status::unknown("401 Unauthorized (anonymous)")),
            }
        }
        async fn remove_image(
            &self,
            _: tonic::Request<cri::RemoveImageRequest>,
        ) -> Result<tonic::Response<cri::RemoveImageResponse>, tonic::Status> {
            Err(tonic::Status::unimplemented("remove"))
        }
        async fn image_fs_info(
            &self,
            _: tonic::Request<cri::ImageFsInfoRequest>,
        ) -> Result<tonic::Response<cri::ImageFsInfoResponse>, tonic::Status> {
            Err(tonic::Status::unimplemented("fs"))
        }
    }

    #[tokio::test]
    async fn pulls_try_each_credential_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("cri.sock");
        let listener = tokio::net::UnixListener::bind(&sock).unwrap();
        let fake = Arc::new(FakeImages::default());
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(
                    k8s_cri::v1::image_service_server::ImageServiceServer::from_arc(fake.clone()),
                )
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
        );
        let client = CriClient::connect(sock.to_str().unwrap(), Duration::from_secs(5))
            .await
            .unwrap();
        let cred = |u: &str, p: &str| cri::AuthConfig {
            username: u.into(),
            password: p.into(),
            ..Default::default()
        };
        let image = "127.0.0.1:5001/private/busybox:latest";

        // No credentials: one pull without auth (pull_image is that).
        let e = client.pull_image(image, None).await.unwrap_err();
        assert_eq!(e.runtime_message(), "401 Unauthorized (anonymous)");
        // Each credential in turn until one works; the rest are not tried.
        let got = client
            .pull_image_with_auth(
                image,
                None,
                &[cred("bad", "x"), cred("u", "p"), cred("never", "x")],
            )
            .await
            .unwrap();
        assert_eq!(got, "sha256:abc");
        // One credential that fails: its own error.
        let e = client
            .pull_image_with_auth(image, None, &[cred("a", "x")])
            .await
            .unwrap_err();
        assert_eq!(
            e.rpc_error_text(),
            "rpc error: code = Unknown desc = 401 Unauthorized (a)"
        );
        // All fail: every error, in order.
        let e = client
            .pull_image_with_auth(image, None, &[cred("a", "x"), cred("b", "x")])
            .await
            .unwrap_err();
        assert!(
            matches!(&e, CriError::Aggregate(v) if v.len() == 2),
            "{e:?}"
        );
        assert_eq!(
            e.runtime_message(),
            "[401 Unauthorized (a), 401 Unauthorized (b)]"
        );

        let attempts: Vec<Option<String>> = fake
            .attempts
            .lock()
            .unwrap()
            .iter()
            .map(|a| a.as_ref().map(|a| a.username.clone()))
            .collect();
        let want = [
            None,
            Some("bad"),
            Some("u"),
            Some("a"),
            Some("a"),
            Some("b"),
        ];
        assert_eq!(attempts, want.map(|w| w.map(str::to_owned)));
        server.abort();
    }

    #[test]
    fn aggregate_errors_read_like_upstream() {
        let rpc = |m: &str| CriError::from_status("pull_image", tonic::Status::unknown(m));
        let two = CriError::Aggregate(vec![rpc("401 Unauthorized"), rpc("403 Forbidden")]);
        assert_eq!(
            two.rpc_error_text(),
            "[rpc error: code = Unknown desc = 401 Unauthorized, rpc error: code = Unknown desc = 403 Forbidden]"
        );
        assert_eq!(two.runtime_message(), "[401 Unauthorized, 403 Forbidden]");
        assert_eq!(
            two.to_string(),
            "[CRI pull_image: Unknown: 401 Unauthorized, CRI pull_image: Unknown: 403 Forbidden]"
        );
        // The same text twice reads as one error, as Go's aggregate dedupes.
        let same = CriError::Aggregate(vec![rpc("401 Unauthorized"), rpc("401 Unauthorized")]);
        assert_eq!(
            same.rpc_error_text(),
            "rpc error: code = Unknown desc = 401 Unauthorized"
        );
        assert!(!same.is_not_found());
    }

    #[test]
    fn status_codes() {
        let e = CriError::from_status("x", tonic::Status::not_found("gone"));
        assert!(e.is_not_found());
        let e = CriError::from_status("x", tonic::Status::unimplemented("no"));
        assert!(e.is_unimplemented() && !e.is_not_found());
    }
}
