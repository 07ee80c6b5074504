//! Exec, attach and port-forward: the kubelet asks the runtime (CRI `Exec`, `Attach`,
//! `PortForward`) for a URL on the runtime's streaming server and hands the client's
//! upgraded connection to it, as upstream's kubelet does in proxy mode
//! (`UpgradeAwareHandler`).
//!
//! Two ways across:
//! - relay: the client's upgrade request (SPDY/3.1 or a WebSocket subprotocol the runtime
//!   speaks) goes to the runtime unchanged; after both sides answered 101 the bytes are
//!   copied both ways;
//! - WebSocket `v5.channel.k8s.io` (what kubectl 1.30+ offers, and only that): containerd
//!   1.6 speaks channel protocols up to v4, so the kubelet ends the client's WebSocket
//!   itself, opens a `v4.channel.k8s.io` WebSocket to the runtime and copies messages.
//!   v5 only adds the CLOSE signal (channel 255, "this stream is done"), which v4 cannot
//!   carry. So v5 is served only without stdin (the server refuses v5 with stdin, and
//!   kubectl falls back to SPDY); a CLOSE that still arrives is dropped.

use std::convert::Infallible;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::Role;

/// The response body of the kubelet's server.
pub type Body = BoxBody<Bytes, Infallible>;

/// `v5.channel.k8s.io`: v4 plus the CLOSE signal on channel 255.
pub const CHANNEL_V5: &str = "v5.channel.k8s.io";
/// `v4.channel.k8s.io`: channels 0-4 (stdin, stdout, stderr, error status, resize).
pub const CHANNEL_V4: &str = "v4.channel.k8s.io";
/// The first byte of a v5 CLOSE signal message (`[255, stream id]`).
pub const CLOSE_SIGNAL: u8 = 255;

pub(crate) fn text(code: StatusCode, msg: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(msg.into())).boxed());
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Whether the request asks for a connection upgrade (`Connection: Upgrade` and an
/// `Upgrade` header).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    let connection_upgrade = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    connection_upgrade && headers.contains_key(header::UPGRADE)
}

/// Whether the upgrade is to WebSocket.
pub fn is_websocket(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
}

/// The WebSocket subprotocols the client offers, in its order.
pub fn offered_subprotocols(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

/// A v5 message as it goes on to a v4 peer: unchanged, except the CLOSE signal, which
/// v4 has no way to say (`None`: drop it).
pub fn v5_to_v4(msg: &[u8]) -> Option<&[u8]> {
    (msg.first() != Some(&CLOSE_SIGNAL)).then_some(msg)
}

fn authority_of(uri: &Uri) -> Option<String> {
    if uri.scheme_str() != Some("http") {
        return None;
    }
    let host = uri.host()?;
    Some(format!("{host}:{}", uri.port_u16().unwrap_or(80)))
}

/// The runtime's URL with the client's query (upstream copies the request's query onto
/// the location: the port of a WebSocket port forward travels there).
fn target_uri(runtime_url: &str, client_query: Option<&str>) -> Result<Uri, String> {
    let base: Uri = runtime_url
        .parse()
        .map_err(|e| format!("the runtime returned a bad streaming URL {runtime_url:?}: {e}"))?;
    let path = base.path();
    let query = match (base.query(), client_query) {
        (Some(a), Some(b)) if !b.is_empty() => format!("?{a}&{b}"),
        (Some(a), _) => format!("?{a}"),
        (None, Some(b)) if !b.is_empty() => format!("?{b}"),
        _ => String::new(),
    };
    let authority = authority_of(&base)
        .ok_or_else(|| format!("unsupported streaming URL {runtime_url:?} (want http://)"))?;
    format!("http://{authority}{path}{query}")
        .parse()
        .map_err(|e| format!("streaming URL: {e}"))
}

/// Hands the client's upgrade request to the runtime's streaming server at
/// `runtime_url` and returns what the client gets (a 101 with the relay running, or the
/// runtime's error response).
pub async fn proxy_to_runtime(mut req: Request<Incoming>, runtime_url: &str) -> Response<Body> {
    let target = match target_uri(runtime_url, req.uri().query()) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    if is_websocket(req.headers())
        && offered_subprotocols(req.headers())
            .iter()
            .any(|p| p == CHANNEL_V5)
    {
        return translate_v5(req, target).await;
    }
    let client_upgrade = hyper::upgrade::on(&mut req);
    let authority = authority_of(&target).unwrap_or_default();
    let tcp = match tokio::net::TcpStream::connect(&authority).await {
        Ok(t) => t,
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("connecting to the runtime's streaming server at {authority}: {e}"),
            );
        }
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await {
        Ok(x) => x,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "streaming server connection ended");
        }
    });
    let mut out = Request::builder()
        .method(req.method().clone())
        .uri(
            target
                .path_and_query()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_else(|| "/".into()),
        )
        .body(Empty::<Bytes>::new())
        .unwrap_or_default();
    for (k, v) in req.headers() {
        if k != header::HOST && k != header::AUTHORIZATION && k != header::CONTENT_LENGTH {
            out.headers_mut().append(k.clone(), v.clone());
        }
    }
    if let Ok(h) = HeaderValue::from_str(&authority) {
        out.headers_mut().insert(header::HOST, h);
    }
    let mut resp = match sender.send_request(out).await {
        Ok(r) => r,
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the runtime's streaming server: {e}"),
            );
        }
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        return Response::from_parts(parts, Full::new(body).boxed());
    }
    let runtime_upgrade = hyper::upgrade::on(&mut resp);
    tokio::spawn(async move {
        let (client, runtime) = match tokio::join!(client_upgrade, runtime_upgrade) {
            (Ok(c), Ok(r)) => (c, r),
            (c, r) => {
                tracing::debug!(client = ?c.err(), runtime = ?r.err(), "upgrade failed");
                return;
            }
        };
        let mut client = TokioIo::new(client);
        let mut runtime = TokioIo::new(runtime);
        let _ = tokio::io::copy_bidirectional(&mut client, &mut runtime).await;
    });
    let mut to_client = Response::new(Empty::new().boxed());
    *to_client.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *to_client.headers_mut() = resp.headers().clone();
    to_client
}

/// Ends the client's v5 WebSocket here and speaks v4 to the runtime.
async fn translate_v5(mut req: Request<Incoming>, target: Uri) -> Response<Body> {
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
        return text(StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Key");
    };
    let client_upgrade = hyper::upgrade::on(&mut req);
    let authority = authority_of(&target).unwrap_or_default();
    let ws_url = format!(
        "ws://{authority}{}",
        target.path_and_query().map(|p| p.as_str()).unwrap_or("/")
    );
    let mut runtime_req = match ws_url.into_client_request() {
        Ok(r) => r,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    runtime_req.headers_mut().insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static(CHANNEL_V4),
    );
    let tcp = match tokio::net::TcpStream::connect(&authority).await {
        Ok(t) => t,
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("connecting to the runtime's streaming server at {authority}: {e}"),
            );
        }
    };
    let runtime = match tokio_tungstenite::client_async(runtime_req, tcp).await {
        Ok((ws, _)) => ws,
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            let code = resp.status();
            let body = resp.into_body().unwrap_or_default();
            return text(code, String::from_utf8_lossy(&body).into_owned());
        }
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("WebSocket to the runtime's streaming server: {e}"),
            );
        }
    };
    tokio::spawn(async move {
        let client = match client_upgrade.await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "client upgrade failed");
                return;
            }
        };
        let client =
            WebSocketStream::from_raw_socket(TokioIo::new(client), Role::Server, None).await;
        relay_v5_v4(client, runtime).await;
    });
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let mut resp = Response::new(Empty::new().boxed());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    h.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static(CHANNEL_V5),
    );
    resp
}

/// A channel message with its channel byte and nothing after it.
fn is_empty_channel_message(msg: &[u8]) -> bool {
    msg.len() <= 1
}

/// Copies messages between a v5 client and a v4 runtime until either side closes.
async fn relay_v5_v4<C, R>(client: WebSocketStream<C>, runtime: WebSocketStream<R>)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    R: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut client_tx, mut client_rx) = client.split();
    let (mut runtime_tx, mut runtime_rx) = runtime.split();
    let upstream = async {
        while let Some(Ok(msg)) = client_rx.next().await {
            let out = match msg {
                Message::Binary(ref b) if v5_to_v4(b).is_none() => continue,
                // Text frames carry channel data too (the Python client writes a str as
                // one), as upstream's stream server reads either.
                Message::Text(ref t) if v5_to_v4(t.as_bytes()).is_none() => continue,
                Message::Binary(_) | Message::Text(_) => msg,
                Message::Close(_) => break,
                // Pings are answered by the WebSocket layer; nothing else is relayed.
                _ => continue,
            };
            if runtime_tx.send(out).await.is_err() {
                break;
            }
        }
        let _ = runtime_tx.close().await;
    };
    let downstream = async {
        while let Some(Ok(msg)) = runtime_rx.next().await {
            let out = match msg {
                // The runtime opens every session with an empty message on the lowest
                // writable channel. kubectl 1.32/1.33 start reading before they have
                // registered their streams (fixed upstream by kubernetes#131203), and
                // log "Unknown stream id" to stderr when that message wins the race; it
                // carries no data, so v5 clients are better off without it.
                Message::Binary(ref b) if is_empty_channel_message(b) => continue,
                Message::Binary(_) | Message::Text(_) => msg,
                Message::Close(frame) => {
                    let _ = client_tx.send(Message::Close(frame)).await;
                    break;
                }
                _ => continue,
            };
            if client_tx.send(out).await.is_err() {
                break;
            }
        }
        let _ = client_tx.close().await;
    };
    // The runtime closing ends the session (the command exited); the client going
    // away ends it too.
    tokio::select! {
        _ = downstream => {}
        _ = upstream => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v5 client's channel data reaches the v4 runtime whether it came in a binary
    /// or a text frame (the Python client writes a str as text); CLOSE signals do not.
    #[tokio::test]
    async fn the_relay_passes_binary_and_text_frames_to_the_runtime() {
        let (client_io, client_end) = tokio::io::duplex(4096);
        let (runtime_io, runtime_end) = tokio::io::duplex(4096);
        let relay = tokio::spawn(relay_v5_v4(
            WebSocketStream::from_raw_socket(client_io, Role::Server, None).await,
            WebSocketStream::from_raw_socket(runtime_io, Role::Client, None).await,
        ));
        let mut client = WebSocketStream::from_raw_socket(client_end, Role::Client, None).await;
        let mut runtime = WebSocketStream::from_raw_socket(runtime_end, Role::Server, None).await;
        client
            .send(Message::Text("\u{0}ping\n".into()))
            .await
            .unwrap();
        client
            .send(Message::Binary(vec![CLOSE_SIGNAL, 0].into()))
            .await
            .unwrap();
        client
            .send(Message::Binary(vec![0, b'x'].into()))
            .await
            .unwrap();
        let first = runtime.next().await.unwrap().unwrap();
        assert_eq!(first.into_data().as_ref(), b"\0ping\n");
        let second = runtime.next().await.unwrap().unwrap();
        assert_eq!(second.into_data().as_ref(), &[0, b'x']);
        client.close(None).await.unwrap();
        drop(runtime);
        tokio::time::timeout(std::time::Duration::from_secs(5), relay)
            .await
            .expect("the relay ends with both sides")
            .unwrap();
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn upgrade_detection() {
        let ws = headers(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket"),
        ]);
        assert!(is_upgrade(&ws) && is_websocket(&ws));
        let spdy = headers(&[("connection", "Upgrade"), ("upgrade", "SPDY/3.1")]);
        assert!(is_upgrade(&spdy) && !is_websocket(&spdy));
        assert!(!is_upgrade(&headers(&[("upgrade", "websocket")])));
        assert!(!is_upgrade(&headers(&[("connection", "upgrade")])));
    }

    #[test]
    fn subprotocols_in_order() {
        let h = headers(&[
            (
                "sec-websocket-protocol",
                "v5.channel.k8s.io, v4.channel.k8s.io",
            ),
            ("sec-websocket-protocol", "base64.channel.k8s.io"),
        ]);
        assert_eq!(
            offered_subprotocols(&h),
            [
                "v5.channel.k8s.io",
                "v4.channel.k8s.io",
                "base64.channel.k8s.io"
            ]
        );
        assert!(offered_subprotocols(&HeaderMap::new()).is_empty());
    }

    #[test]
    fn v5_messages_for_a_v4_peer() {
        assert_eq!(v5_to_v4(&[0, b'h', b'i']), Some(&[0, b'h', b'i'][..]));
        assert_eq!(v5_to_v4(&[4, b'{']), Some(&[4, b'{'][..]));
        assert_eq!(v5_to_v4(&[CLOSE_SIGNAL, 0]), None);
        assert_eq!(v5_to_v4(&[]), Some(&[][..]));
    }

    #[test]
    fn only_data_less_runtime_messages_are_dropped() {
        assert!(is_empty_channel_message(&[1]));
        assert!(is_empty_channel_message(&[]));
        assert!(!is_empty_channel_message(&[1, b'x']));
        assert!(!is_empty_channel_message(&[3, b'{']));
    }

    #[test]
    fn target_keeps_the_client_query() {
        let t = |u: &str, q: Option<&str>| target_uri(u, q).map(|u| u.to_string());
        assert_eq!(
            t("http://127.0.0.1:4321/portforward/abc", Some("port=80")).unwrap(),
            "http://127.0.0.1:4321/portforward/abc?port=80"
        );
        assert_eq!(
            t("http://127.0.0.1:4321/exec/abc?x=1", Some("")).unwrap(),
            "http://127.0.0.1:4321/exec/abc?x=1"
        );
        assert_eq!(
            t("http://[::1]/exec/abc", None).unwrap(),
            "http://[::1]:80/exec/abc"
        );
        assert!(t("https://127.0.0.1:1/exec/x", None).is_err());
        assert!(t("not a url", None).is_err());
    }
}
