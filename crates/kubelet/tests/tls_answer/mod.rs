//! A server on the kubelet's TLS configuration that answers each completed handshake
//! with one byte, so a client sees whether the server took it (a refused client
//! certificate ends the connection with an alert instead). For the tests of the HTTPS
//! port's certificates.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt as _;
use tokio_util::sync::CancellationToken;

/// The byte a completed handshake is answered with.
pub const ANSWER: u8 = b'k';

/// Serves `tls` on a loopback port until `cancel`.
pub async fn serve(
    tls: Arc<rustls::ServerConfig>,
    cancel: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    tokio::spawn(async move {
        loop {
            let stream = tokio::select! {
                _ = cancel.cancelled() => return,
                s = listener.accept() => match s {
                    Ok((s, _)) => s,
                    Err(_) => continue,
                },
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let accepted =
                    tokio::time::timeout(Duration::from_secs(5), acceptor.accept(stream)).await;
                if let Ok(Ok(mut tls)) = accepted {
                    let _ = tls.write_all(&[ANSWER]).await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    Ok(addr)
}
