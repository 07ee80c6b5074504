//! Running one probe (upstream `prober.go` and `pkg/probe/{exec,http,tcp,grpc}`): exec through
//! CRI ExecSync, httpGet with hyper (HTTPS without certificate verification, as upstream),
//! tcpSocket by connecting, grpc through `grpc.health.v1.Health/Check` (tonic-health). Every
//! probe is bounded by the probe's timeout. Targets come from the pure [`crate::probe`].

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Container, Probe};

use crate::cri::CriClient;
use crate::probe::{HttpTarget, ProbeResult, http_target, resolve_port, tcp_target};

/// How much of a probe's output is kept for events (upstream `maxReadLength`).
const MAX_OUTPUT: usize = 10 * 1024;

/// A probe's outcome and what it said (for the `Unhealthy` event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeOutcome {
    pub result: ProbeResult,
    pub output: String,
}

fn success(output: impl Into<String>) -> ProbeOutcome {
    ProbeOutcome {
        result: ProbeResult::Success,
        output: output.into(),
    }
}

fn failure(output: impl Into<String>) -> ProbeOutcome {
    ProbeOutcome {
        result: ProbeResult::Failure,
        output: output.into(),
    }
}

fn truncate(mut s: String) -> String {
    if s.len() > MAX_OUTPUT {
        let mut end = MAX_OUTPUT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// Runs `probe` once against the container `container_id` of a pod at `pod_ip`; `None`
/// when the probe has no handler (validation prevents it).
pub async fn run_probe(
    cri: &CriClient,
    probe: &Probe,
    c: &Container,
    container_id: &str,
    pod_ip: Option<&str>,
    env: &[(String, String)],
    timeout: Duration,
) -> Option<ProbeOutcome> {
    if let Some(exec) = &probe.exec {
        // Only static environment values are expanded in probe commands (upstream
        // `ExpandContainerCommandOnlyStatic`).
        let cmd: Vec<String> = exec
            .command
            .iter()
            .flatten()
            .map(|a| {
                crate::env::expand(a, |k| {
                    env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
                })
            })
            .collect();
        return Some(exec_probe(cri, container_id, cmd, timeout).await);
    }
    if let Some(h) = &probe.http_get {
        return Some(match http_target(h, c, pod_ip) {
            Ok(t) => http_probe(&t, timeout).await,
            Err(e) => failure(e.to_string()),
        });
    }
    if let Some(t) = &probe.tcp_socket {
        return Some(match tcp_target(t, c, pod_ip) {
            Ok((host, port)) => tcp_probe(&host, port, timeout).await,
            Err(e) => failure(e.to_string()),
        });
    }
    if let Some(g) = &probe.grpc {
        let Some(ip) = pod_ip else {
            return Some(failure("no pod IP to probe"));
        };
        let port = match resolve_port(
            &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(g.port),
            c,
        ) {
            Ok(p) => p,
            Err(e) => return Some(failure(e.to_string())),
        };
        return Some(grpc_probe(ip, port, g.service.clone().unwrap_or_default(), timeout).await);
    }
    None
}

/// Exec: exit code 0 is success; the output (stdout then stderr) is the message.
pub async fn exec_probe(
    cri: &CriClient,
    container_id: &str,
    cmd: Vec<String>,
    timeout: Duration,
) -> ProbeOutcome {
    let secs = timeout.as_secs().max(1) as i64;
    // The runtime enforces the timeout; ours is a backstop a little later.
    let call = cri.exec_sync(container_id, cmd.clone(), secs);
    match tokio::time::timeout(timeout + Duration::from_secs(2), call).await {
        Err(_) => failure(format!("command {cmd:?} timed out")),
        Ok(Err(e)) => {
            let msg = e.to_string();
            if msg.contains("DeadlineExceeded") || msg.contains("timeout") {
                failure(format!("command {cmd:?} timed out"))
            } else {
                failure(msg)
            }
        }
        Ok(Ok(r)) => {
            let mut out = r.stdout;
            out.extend_from_slice(&r.stderr);
            let out = truncate(String::from_utf8_lossy(&out).into_owned());
            if r.exit_code == 0 {
                success(out)
            } else {
                failure(out)
            }
        }
    }
}

/// tcpSocket: a connection that opens in time is success.
pub async fn tcp_probe(host: &str, port: u16, timeout: Duration) -> ProbeOutcome {
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await {
        Ok(Ok(_)) => success(""),
        Ok(Err(e)) => failure(format!("dial tcp {addr}: connect: {e}")),
        Err(_) => failure(format!("dial tcp {addr}: i/o timeout")),
    }
}

/// httpGet: a status in [200, 400) is success (redirects are not followed, so a 3xx counts
/// as success, as upstream does for a redirect to another host).
pub async fn http_probe(t: &HttpTarget, timeout: Duration) -> ProbeOutcome {
    let url = t.url();
    match tokio::time::timeout(timeout, http_get(t)).await {
        Err(_) => failure(format!(
            "Get \"{url}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        )),
        Ok(Err(e)) => failure(format!("Get \"{url}\": {e}")),
        Ok(Ok((code, body))) => {
            if (200..400).contains(&code) {
                success(body)
            } else {
                failure(format!("HTTP probe failed with statuscode: {code}"))
            }
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub async fn http_get(t: &HttpTarget) -> Result<(u16, String), BoxError> {
    let addr = if t.host.contains(':') {
        format!("[{}]:{}", t.host, t.port)
    } else {
        format!("{}:{}", t.host, t.port)
    };
    let tcp = tokio::net::TcpStream::connect(&addr).await?;
    let host_header = t
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("Host"))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| addr.clone());
    let mut req = hyper::Request::get(&t.path).header(hyper::header::HOST, &host_header);
    for (k, v) in t
        .headers
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("Host"))
    {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req.body(Empty::<Bytes>::new())?;
    if t.https {
        let server_name =
            rustls_pki_types::ServerName::try_from(t.host.clone()).unwrap_or_else(|_| {
                rustls_pki_types::ServerName::try_from("localhost").expect("static name")
            });
        let tls = tokio_rustls::TlsConnector::from(insecure_tls_config())
            .connect(server_name, tcp)
            .await?;
        send(TokioIo::new(tls), req).await
    } else {
        send(TokioIo::new(tcp), req).await
    }
}

async fn send<I>(io: I, req: hyper::Request<Empty<Bytes>>) -> Result<(u16, String), BoxError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    let driver = tokio::spawn(conn);
    let resp = sender.send_request(req).await?;
    let code = resp.status().as_u16();
    // Read at most MAX_OUTPUT bytes of the body (upstream's limit).
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    while buf.len() < MAX_OUTPUT {
        match body.frame().await {
            Some(Ok(f)) => {
                if let Some(d) = f.data_ref() {
                    buf.extend_from_slice(d);
                }
            }
            _ => break,
        }
    }
    driver.abort();
    Ok((code, truncate(String::from_utf8_lossy(&buf).into_owned())))
}

/// Upstream probes HTTPS with `InsecureSkipVerify`: the certificate is not checked, the
/// handshake signatures are.
fn insecure_tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            Arc::new(ferrokube_pki::insecure::client_config_builder().with_no_client_auth())
        })
        .clone()
}

/// grpc: `grpc.health.v1.Health/Check` answering SERVING is success.
pub async fn grpc_probe(ip: &str, port: u16, service: String, timeout: Duration) -> ProbeOutcome {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let host = if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    };
    let endpoint = match tonic::transport::Endpoint::from_shared(format!("http://{host}")) {
        Ok(e) => e.connect_timeout(timeout).timeout(timeout),
        Err(e) => return failure(e.to_string()),
    };
    let call = async {
        let channel = endpoint.connect().await.map_err(|e| {
            format!("timeout: failed to connect service {host:?} within {timeout:?}: {e}")
        })?;
        HealthClient::new(channel)
            .check(HealthCheckRequest { service })
            .await
            .map_err(|s| format!("error: health rpc probe failed: {}", s.message()))
    };
    match tokio::time::timeout(timeout + Duration::from_millis(500), call).await {
        Err(_) => failure(format!(
            "timeout: health rpc did not complete within {timeout:?}"
        )),
        Ok(Err(e)) => failure(e),
        Ok(Ok(resp)) => {
            let status = resp.into_inner().status();
            if status == ServingStatus::Serving {
                success("")
            } else {
                failure(format!(
                    "service unhealthy (responded with {:?})",
                    status.as_str_name()
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-shot HTTP server answering `status`; returns its port and what it received.
    async fn serve_once(status: &'static str) -> (u16, tokio::task::JoinHandle<String>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).await.unwrap();
            let resp = format!("HTTP/1.1 {status}\r\nContent-Length: 2\r\n\r\nok");
            s.write_all(resp.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        });
        (port, task)
    }

    fn target(port: u16, path: &str) -> HttpTarget {
        HttpTarget {
            https: false,
            host: "127.0.0.1".into(),
            port,
            path: path.into(),
            headers: vec![
                ("X-Probe".into(), "1".into()),
                ("User-Agent".into(), crate::probe::PROBE_USER_AGENT.into()),
            ],
        }
    }

    #[tokio::test]
    async fn http_status_codes_and_request() {
        for (status, want) in [
            ("200 OK", ProbeResult::Success),
            ("302 Found", ProbeResult::Success),
            ("500 Internal Server Error", ProbeResult::Failure),
            ("404 Not Found", ProbeResult::Failure),
        ] {
            let (port, seen) = serve_once(status).await;
            let out = http_probe(&target(port, "/healthz?a=b"), Duration::from_secs(2)).await;
            assert_eq!(out.result, want, "{status}: {}", out.output);
            let req = seen.await.unwrap();
            assert!(req.starts_with("GET /healthz?a=b HTTP/1.1\r\n"), "{req}");
            assert!(req.contains("x-probe: 1\r\n"), "{req}");
            assert!(req.contains("user-agent: kube-probe/1.33\r\n"), "{req}");
        }
        let (port, _seen) = serve_once("500 Internal Server Error").await;
        let out = http_probe(&target(port, "/"), Duration::from_secs(2)).await;
        assert_eq!(out.output, "HTTP probe failed with statuscode: 500");
    }

    #[tokio::test]
    async fn tcp_and_http_refused() {
        // A port that was just free is (very likely) closed.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let out = tcp_probe("127.0.0.1", port, Duration::from_secs(1)).await;
        assert_eq!(out.result, ProbeResult::Failure);
        assert!(out.output.contains("connect"), "{}", out.output);
        let out = http_probe(&target(port, "/"), Duration::from_secs(1)).await;
        assert_eq!(out.result, ProbeResult::Failure);
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = l.local_addr().unwrap().port();
        assert_eq!(
            tcp_probe("127.0.0.1", open, Duration::from_secs(1))
                .await
                .result,
            ProbeResult::Success
        );
    }

    #[tokio::test]
    async fn grpc_health() {
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("up", tonic_health::ServingStatus::Serving)
            .await;
        reporter
            .set_service_status("down", tonic_health::ServingStatus::NotServing)
            .await;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l)),
        );
        let t = Duration::from_secs(3);
        assert_eq!(
            grpc_probe("127.0.0.1", port, "up".into(), t).await.result,
            ProbeResult::Success
        );
        let down = grpc_probe("127.0.0.1", port, "down".into(), t).await;
        assert_eq!(down.result, ProbeResult::Failure);
        assert!(down.output.contains("NOT_SERVING"), "{}", down.output);
        server.abort();
    }
}
