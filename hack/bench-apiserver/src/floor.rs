//! The transport floor: what pod creates over HTTPS cost on this machine when the
//! server does nothing but store the body. A separate process (this binary again, with
//! `--floor-serve`), with the apiserver's own TLS setup (client certificates verified
//! against the cluster CA) and hyper's connection handling, answers each POST by
//! `Storage::create` of the body (padded to the size the apiserver stores for the pod)
//! under a fresh key and 201 with the body echoed. No
//! decoding, defaulting, validation, admission, watch cache or metrics.
//!
//! The same pre-encoded client as the API phase drives it, so the floor's rate is the
//! best any apiserver could reach with these clients on these cores: the share of the
//! raw baseline it reaches bounds the share the real apiserver can.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};
use bytes::Bytes;
use ferrokube_storage::Storage;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;

use crate::Backend;

/// Where the floor server listens, with what identity, on which store.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct FloorArgs {
    /// Run as the floor server on this port (the driver starts it; not for users).
    #[arg(long, hide = true)]
    pub floor_serve: Option<u16>,
    #[arg(long, hide = true)]
    pub floor_cert: Option<PathBuf>,
    #[arg(long, hide = true)]
    pub floor_key: Option<PathBuf>,
    #[arg(long, hide = true)]
    pub floor_client_ca: Option<PathBuf>,
    /// SQLite file to store into (unless `--floor-etcd` is given).
    #[arg(long, hide = true)]
    pub floor_sqlite: Option<PathBuf>,
    #[arg(long, hide = true)]
    pub floor_etcd: Option<String>,
    /// Stored value size: the body padded with spaces (still valid JSON) to the size
    /// the apiserver stores for the same pod, so the store does the raw baseline's work.
    #[arg(long, hide = true, default_value_t = 0)]
    pub floor_value_bytes: usize,
}

/// Serves until killed.
pub async fn serve(port: u16, args: &FloorArgs) -> Result<()> {
    let read = |p: &Option<PathBuf>, what: &str| -> Result<String> {
        let p = p
            .as_ref()
            .with_context(|| format!("--floor-{what} is required"))?;
        std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
    };
    let tls = ferrokube_apiserver::tls_config(
        &read(&args.floor_cert, "cert")?,
        &read(&args.floor_key, "key")?,
        Some(&read(&args.floor_client_ca, "client-ca")?),
    )
    .map_err(|e| anyhow::anyhow!("tls: {e}"))?;
    let (backend, sqlite_path) = match (&args.floor_etcd, &args.floor_sqlite) {
        (Some(endpoint), _) => (Backend::Etcd(endpoint.clone()), PathBuf::new()),
        (None, Some(path)) => (Backend::Sqlite, path.clone()),
        (None, None) => anyhow::bail!("--floor-sqlite or --floor-etcd is required"),
    };
    let store = crate::open_store(&backend, &sqlite_path, "/bench-floor").await?;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await?;
    let next_key = Arc::new(AtomicU64::new(0));
    let value_bytes = args.floor_value_bytes;
    loop {
        let (tcp, _) = listener.accept().await?;
        let _ = tcp.set_nodelay(true);
        let (acceptor, store, next_key) = (acceptor.clone(), store.clone(), next_key.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper::service::service_fn(move |req| {
                store_body(store.clone(), next_key.clone(), value_bytes, req)
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

async fn store_body(
    store: Arc<dyn Storage>,
    next_key: Arc<AtomicU64>,
    value_bytes: usize,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>> {
    if req.method() != hyper::Method::POST {
        // The driver's readiness probe: answered without touching the store.
        return Ok(Response::new(Full::new(Bytes::new())));
    }
    let body = req.into_body().collect().await?.to_bytes();
    let key = format!(
        "/registry/pods/floor/{}",
        next_key.fetch_add(1, Ordering::Relaxed)
    );
    let mut value = Vec::with_capacity(value_bytes.max(body.len()));
    value.extend_from_slice(&body);
    value.resize(value_bytes.max(body.len()), b' ');
    let (status, body) = match store.create(&key, value.into()).await {
        Ok(_) => (StatusCode::CREATED, body),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Bytes::from(e.to_string()),
        ),
    };
    Ok(Response::builder()
        .status(status)
        .header("Content-Type", "application/json")
        .body(Full::new(body))?)
}
