//! A WebSocket echo for tests of proxied connection upgrades (`pods/proxy`,
//! `services/proxy`, the aggregator), and a client round trip through the apiserver.

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

/// Accepts a WebSocket upgrade (with the first subprotocol offered) and echoes each
/// message as `<path>: <message>`; anything else is a 400. The connection must be
/// served `with_upgrades`.
pub fn websocket_echo(mut req: hyper::Request<Incoming>) -> hyper::Response<Full<Bytes>> {
    let key = req.headers().get("sec-websocket-key").cloned();
    let protocol = req
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .map(|p| p.trim().to_string())
        .unwrap_or_default();
    let (Some(key), true) = (key, req.headers().contains_key("upgrade")) else {
        return hyper::Response::builder()
            .status(400)
            .body(Full::new(Bytes::from_static(b"not an upgrade")))
            .unwrap();
    };
    let path = req.uri().path().to_string();
    let pending = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = pending.await else { return };
        let mut ws =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        while let Some(Ok(msg)) = ws.next().await {
            let reply = match msg {
                Message::Binary(b) => format!("{path}: {}", String::from_utf8_lossy(&b)),
                Message::Text(t) => format!("{path}: {t}"),
                Message::Close(_) => break,
                _ => continue,
            };
            if ws.send(Message::Text(reply.into())).await.is_err() {
                break;
            }
        }
    });
    hyper::Response::builder()
        .status(101)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-accept", derive_accept_key(key.as_bytes()))
        .header("sec-websocket-protocol", protocol)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// One message through a WebSocket opened at `path` on the apiserver, and the answer.
pub async fn websocket_round_trip(
    c: &kube::Client,
    path: &str,
    message: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let conn = c.connect(http::Request::get(path).body(vec![])?).await?;
    let mut ws = conn.into_stream();
    ws.send(Message::Binary(message.as_bytes().to_vec().into()))
        .await?;
    let answer = tokio::time::timeout(std::time::Duration::from_secs(10), ws.next())
        .await?
        .ok_or("the WebSocket ended without an answer")??;
    let _ = ws.close(None).await;
    Ok(answer.into_text()?.to_string())
}
