//! Kept-alive HTTPS connections to the apiserver's backends: webhooks (admission,
//! conversion, token authentication, authorization, audit) and extension apiservers.
//!
//! Upstream's REST clients keep their connections open between calls (Go's
//! `http.Transport`, idle connections closed after 90 s), so a webhook consulted on
//! every create costs one TLS handshake, not one per create. An [`HttpsPool`] is one
//! such client: one TLS configuration and one name the servers' certificates must
//! carry, its idle HTTP/1.1 connections kept per dialled address. [`HttpsPools`]
//! finds the pool for a configuration that is rebuilt from its source at every use
//! (a webhook's `caBundle`, an APIService's spec) by a digest of that source.

use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use parking_lot::Mutex;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The request body every pool sends: a whole JSON document, nothing, or a proxied
/// request's body streamed through.
pub(crate) type PoolBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

/// How long an unused connection stays open (Go's `http.DefaultTransport`).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections kept per address: enough for the calls a busy apiserver makes
/// at once, bounded so that a burst does not leave hundreds of sockets open.
const MAX_IDLE_PER_ADDRESS: usize = 32;

/// An HTTPS client keeping its connections: servers are verified with one TLS
/// configuration against one name, whatever address is dialled.
#[derive(Clone)]
pub(crate) struct HttpsPool {
    client: Client<Dialer, PoolBody>,
}

impl HttpsPool {
    /// A pool whose servers must present a certificate for `server_name`.
    pub(crate) fn new(tls: Arc<rustls::ClientConfig>, server_name: &str) -> HttpsPool {
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(IDLE_TIMEOUT)
            .pool_timer(TokioTimer::new())
            .pool_max_idle_per_host(MAX_IDLE_PER_ADDRESS)
            .build(Dialer {
                tls,
                server_name: server_name.into(),
            });
        HttpsPool { client }
    }

    /// Sends `req` (its URI a path and query) to `host:port` over an idle connection
    /// to that address, or a new one. The request's `Host` header is left as given
    /// (`host:port` when it has none). `Err`: why no answer came, worded as the
    /// connection's own errors are (`dial tcp 10.0.0.1:443: connect: connection
    /// refused`).
    pub(crate) async fn send(
        &self,
        host: &str,
        port: u16,
        mut req: Request<PoolBody>,
    ) -> Result<Response<Incoming>, String> {
        let authority = address(host, port);
        let path_and_query = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let uri: Uri = format!("https://{authority}{path_and_query}")
            .parse()
            .map_err(|e| format!("address {authority:?}: {e}"))?;
        *req.uri_mut() = uri;
        self.client.request(req).await.map_err(|e| describe(&e))
    }
}

/// `host:port`, an IPv6 address in brackets.
pub(crate) fn address(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// What a failed exchange's errors say, innermost cause last; a failed dial is its
/// own message, as the dialler worded it.
fn describe(e: &hyper_util::client::legacy::Error) -> String {
    let mut causes = Vec::new();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(dial) = c.downcast_ref::<DialError>() {
            return dial.0.clone();
        }
        causes.push(c.to_string());
        cause = c.source();
    }
    if causes.is_empty() {
        e.to_string()
    } else {
        causes.join(": ")
    }
}

/// Pools by a digest of what their TLS configuration is built from, the least
/// recently used dropped (closing its idle connections) past the capacity.
pub(crate) struct HttpsPools {
    pools: Mutex<lru::LruCache<[u8; 32], HttpsPool>>,
}

impl HttpsPools {
    pub(crate) fn new(capacity: NonZeroUsize) -> HttpsPools {
        HttpsPools {
            pools: Mutex::new(lru::LruCache::new(capacity)),
        }
    }

    /// The pool for the configuration `source` describes (every input of its TLS
    /// configuration and its server name), built by `build` when there is none.
    pub(crate) fn get_or_build(
        &self,
        source: &[&[u8]],
        build: impl FnOnce() -> Result<HttpsPool, String>,
    ) -> Result<HttpsPool, String> {
        let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
        for part in source {
            // Length-prefixed, so that ("ab", "c") and ("a", "bc") differ.
            digest.update(&(part.len() as u64).to_le_bytes());
            digest.update(part);
        }
        let mut key = [0u8; 32];
        key.copy_from_slice(digest.finish().as_ref());
        if let Some(pool) = self.pools.lock().get(&key) {
            return Ok(pool.clone());
        }
        let pool = build()?;
        self.pools.lock().put(key, pool.clone());
        Ok(pool)
    }
}

/// Dials a TLS connection to the URI's address, verifying the server against the
/// pool's name.
#[derive(Clone)]
struct Dialer {
    tls: Arc<rustls::ClientConfig>,
    server_name: Arc<str>,
}

/// A failed dial, worded for the caller as is.
#[derive(Debug)]
struct DialError(String);

impl std::fmt::Display for DialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DialError {}

impl tower::Service<Uri> for Dialer {
    type Response = TlsConnection;
    type Error = DialError;
    type Future = Pin<Box<dyn Future<Output = Result<TlsConnection, DialError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), DialError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let (tls, server_name) = (self.tls.clone(), self.server_name.clone());
        Box::pin(async move {
            let host = uri
                .host()
                .unwrap_or_default()
                .trim_start_matches('[')
                .trim_end_matches(']');
            let port = uri.port_u16().unwrap_or(443);
            let (tcp, addr) = crate::proxy::connect_tcp(host, port)
                .await
                .map_err(DialError)?;
            let stream = crate::proxy::connect_tls(tls, &server_name, &addr, tcp)
                .await
                .map_err(DialError)?;
            Ok(TlsConnection(TokioIo::new(stream)))
        })
    }
}

/// A dialled TLS connection as the pool keeps it.
struct TlsConnection(TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>);

impl Connection for TlsConnection {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for TlsConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for TlsConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }
}

/// A whole body for [`HttpsPool::send`].
pub(crate) fn full_body(bytes: impl Into<Bytes>) -> PoolBody {
    use http_body_util::BodyExt;
    http_body_util::Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// No body, for [`HttpsPool::send`].
pub(crate) fn empty_body() -> PoolBody {
    use http_body_util::BodyExt;
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A proxied request's body, streamed through [`HttpsPool::send`].
pub(crate) fn streamed_body(body: Incoming) -> PoolBody {
    use http_body_util::BodyExt;
    body.map_err(BoxError::from).boxed_unsync()
}
