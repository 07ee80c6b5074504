//! The kubelet's plain-HTTP endpoints: `--healthz-port` (`/healthz`) and, when
//! `--read-only-port` is set, the read-only server (`/healthz`, `/pods`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use tokio_util::sync::CancellationToken;

use crate::kubelet::Kubelet;

/// Which paths a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoints {
    /// `/healthz` only.
    Healthz,
    /// `/healthz` and `/pods` (a PodList of the pods bound to this node).
    ReadOnly,
}

fn respond(kubelet: &Kubelet, which: Endpoints, path: &str) -> (u16, &'static str, String) {
    match path {
        "/healthz" => (200, "text/plain; charset=utf-8", "ok".into()),
        "/pods" | "/pods/" if which == Endpoints::ReadOnly => {
            let list = serde_json::json!({
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {},
                "items": kubelet.pods(),
            });
            (200, "application/json", list.to_string())
        }
        _ => (
            404,
            "text/plain; charset=utf-8",
            "404 page not found\n".into(),
        ),
    }
}

/// Binds `addr` and serves until `cancel`; the bound address is returned once listening.
pub async fn bind(
    addr: SocketAddr,
    kubelet: Arc<Kubelet>,
    which: Endpoints,
    cancel: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                _ = cancel.cancelled() => return,
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(_) => continue,
                },
            };
            let k = kubelet.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (code, ct, body) = respond(&k, which, req.uri().path());
                        async move {
                            Ok::<_, Infallible>(
                                hyper::Response::builder()
                                    .status(code)
                                    .header("content-type", ct)
                                    .body(Full::new(Bytes::from(body)))
                                    .unwrap_or_default(),
                            )
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok((local, task))
}
