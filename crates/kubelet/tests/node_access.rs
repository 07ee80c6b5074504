//! The kubelet's HTTPS API against a real in-process apiserver (TestApiServer) and the
//! real containerd of this machine: authentication (client certificates; no credentials
//! is a 401) and Webhook authorization (an unprivileged user's 403), container logs,
//! exec over WebSocket (v5, translated to the runtime's v4, and v4 relayed as is) and the
//! error answers. Fails, never skips, when containerd is not reachable; the pod it makes
//! is removed even when a check fails. Run under `flock /run/ferrokube-e2e.lock` next to
//! other tests that use the shared containerd.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use ferrokube_kubelet::cri::{CriClient, DEFAULT_ENDPOINT};
use ferrokube_kubelet::{Kubelet, KubeletConfig, NodeConfig, RuntimeManager};
use ferrokube_pki::{CertificateAuthority, Validity};
use ferrokube_testing::TestApiServer;
use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_util::sync::CancellationToken;

fn endpoint() -> String {
    std::env::var("FERROKUBE_CRI_ENDPOINT").unwrap_or_else(|_| DEFAULT_ENDPOINT.to_owned())
}

/// The kubelet's server identity and a client the client CA signed.
struct Pki {
    server_cert: String,
    server_key: String,
    client_ca: String,
    client: Arc<rustls::ClientConfig>,
    unprivileged: Arc<rustls::ClientConfig>,
    anonymous: Arc<rustls::ClientConfig>,
}

fn pki() -> Result<Pki> {
    let ca = CertificateAuthority::generate("node-access-test-ca")?;
    let server = ca.issue_serving_cert(
        "kubelet",
        &["localhost".to_string()],
        &[IpAddr::from([127, 0, 0, 1])],
        Validity::leaf_default(),
    )?;
    let client_ca = CertificateAuthority::generate("node-access-client-ca")?;
    let client = client_ca.issue_client_cert(
        "kube-apiserver",
        &["system:masters".to_string()],
        Validity::leaf_default(),
    )?;
    let alice = client_ca.issue_client_cert("alice", &[], Validity::leaf_default())?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes())?)?;
    let roots = Arc::new(roots);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = || {
        rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map(|b| b.with_root_certificates(roots.clone()))
    };
    let with_cert = builder()?.with_client_auth_cert(
        vec![CertificateDer::from_pem_slice(client.cert_pem.as_bytes())?],
        PrivateKeyDer::from_pem_slice(client.key_pem.as_bytes())?,
    )?;
    let alice = builder()?.with_client_auth_cert(
        vec![CertificateDer::from_pem_slice(alice.cert_pem.as_bytes())?],
        PrivateKeyDer::from_pem_slice(alice.key_pem.as_bytes())?,
    )?;
    Ok(Pki {
        server_cert: server.cert_pem,
        server_key: server.key_pem,
        client_ca: client_ca.cert_pem().to_owned(),
        client: Arc::new(with_cert),
        unprivileged: Arc::new(alice),
        anonymous: Arc::new(builder()?.with_no_client_auth()),
    })
}

async fn tls_connect(
    addr: SocketAddr,
    cfg: &Arc<rustls::ClientConfig>,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from("127.0.0.1")?;
    Ok(tokio_rustls::TlsConnector::from(cfg.clone())
        .connect(name, tcp)
        .await?)
}

/// A GET over a fresh TLS connection: status and whole body.
async fn get(
    addr: SocketAddr,
    cfg: &Arc<rustls::ClientConfig>,
    path: &str,
) -> Result<(u16, String)> {
    let tls = tls_connect(addr, cfg).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(conn);
    let req = hyper::Request::get(path)
        .header("host", addr.to_string())
        .body(Empty::<Bytes>::new())?;
    let resp = tokio::time::timeout(Duration::from_secs(20), sender.send_request(req)).await??;
    let code = resp.status().as_u16();
    let body = tokio::time::timeout(Duration::from_secs(20), resp.into_body().collect())
        .await??
        .to_bytes();
    Ok((code, String::from_utf8_lossy(&body).into_owned()))
}

/// Runs an exec over WebSocket with `protocol`; returns (stdout, stderr, error channel).
async fn ws_exec(
    addr: SocketAddr,
    cfg: &Arc<rustls::ClientConfig>,
    path_and_query: &str,
    protocol: &str,
) -> Result<(String, String, String)> {
    let tls = tls_connect(addr, cfg).await?;
    let mut req = format!("wss://{addr}{path_and_query}").into_client_request()?;
    req.headers_mut()
        .insert("Sec-WebSocket-Protocol", protocol.parse()?);
    let (mut ws, resp) = tokio_tungstenite::client_async(req, tls).await?;
    ensure!(
        resp.headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok())
            == Some(protocol),
        "negotiated {:?}",
        resp.headers().get("sec-websocket-protocol")
    );
    let (mut out, mut err, mut status) = (String::new(), String::new(), String::new());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = match tokio::time::timeout(left, ws.next()).await {
            Err(_) => bail!("exec did not finish in 20 s (stdout {out:?}, stderr {err:?})"),
            Ok(None) | Ok(Some(Err(_))) => break,
            Ok(Some(Ok(m))) => m,
        };
        match msg {
            Message::Binary(b) if !b.is_empty() => {
                let text = String::from_utf8_lossy(&b[1..]).into_owned();
                match b[0] {
                    1 => out.push_str(&text),
                    2 => err.push_str(&text),
                    3 => status.push_str(&text),
                    _ => {}
                }
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
    let _ = ws.close(None).await;
    Ok((out, err, status))
}

/// Attaches over WebSocket v4 (relayed to the runtime as is), writes `input` to stdin and
/// returns stdout once it holds `want`.
async fn ws_attach(
    addr: SocketAddr,
    cfg: &Arc<rustls::ClientConfig>,
    path_and_query: &str,
    input: &str,
    want: &str,
) -> Result<String> {
    let tls = tls_connect(addr, cfg).await?;
    let mut req = format!("wss://{addr}{path_and_query}").into_client_request()?;
    req.headers_mut()
        .insert("Sec-WebSocket-Protocol", "v4.channel.k8s.io".parse()?);
    let (mut ws, _) = tokio_tungstenite::client_async(req, tls).await?;
    let mut msg = vec![0u8];
    msg.extend_from_slice(input.as_bytes());
    ws.send(Message::Binary(msg.into())).await?;
    let mut out = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !out.contains(want) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, ws.next()).await {
            Err(_) => bail!("attach: no {want:?} in 20 s (stdout {out:?})"),
            Ok(Some(Ok(Message::Binary(b)))) if b.first() == Some(&1) => {
                out.push_str(&String::from_utf8_lossy(&b[1..]))
            }
            Ok(Some(Ok(_))) => {}
            Ok(None) | Ok(Some(Err(_))) => bail!("attach ended early (stdout {out:?})"),
        }
    }
    let _ = ws.close(None).await;
    Ok(out)
}

async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let start = Instant::now();
    let mut last_err = None;
    while start.elapsed() < timeout {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("timed out after {timeout:?} waiting for {what} (last error: {last_err:?})")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_and_exec_through_the_kubelet_api_on_real_containerd() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-na-{}", std::process::id());
    let root = tempfile::tempdir().expect("root dir");
    let ep = endpoint();
    let cri = CriClient::connect(&ep, Duration::from_secs(3))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "containerd is not reachable at {ep}: {e}\n\
                 start it with: sudo bash -c 'source hack/lib/runtime.sh && rt::ensure'"
            )
        });
    let mut node = NodeConfig::new(&node_name);
    node.node_ips = vec!["127.0.0.1".into()];
    let mut cfg = KubeletConfig::new(&node_name);
    cfg.node_ips = node.node_ips.clone();
    cfg.root_dir = root.path().to_owned();
    let kubelet = Kubelet::new(client.clone(), RuntimeManager::new(cri, node), cfg);
    let cancel = CancellationToken::new();
    let run = {
        let (k, c) = (kubelet.clone(), cancel.clone());
        tokio::spawn(async move { k.run(c).await.expect("kubelet run") })
    };
    let pki = pki().expect("test PKI");
    let tls = ferrokube_kubelet::server::tls_config(
        &pki.server_cert,
        &pki.server_key,
        Some(&pki.client_ca),
    )
    .expect("kubelet TLS config");
    let auth = Arc::new(ferrokube_kubelet::auth::KubeletAuth::new(
        &node_name,
        &ferrokube_kubelet::auth::AuthSettings::defaults(true),
        client.clone(),
    ));
    let (addr, serve) = ferrokube_kubelet::server::bind_tls(
        "127.0.0.1:0".parse().unwrap(),
        kubelet.clone(),
        tls,
        auth,
        cancel.clone(),
    )
    .await
    .expect("bind the kubelet API");

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("talker".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node_name.clone()),
            termination_grace_period_seconds: Some(2),
            containers: vec![
                Container {
                    name: "talk".into(),
                    image: Some("docker.io/library/busybox:latest".into()),
                    image_pull_policy: Some("IfNotPresent".into()),
                    command: Some(vec![
                        "sh".into(),
                        "-c".into(),
                        "echo line-one; echo line-two; echo to-stderr >&2; exec sleep 3600".into(),
                    ]),
                    ..Default::default()
                },
                Container {
                    name: "echo".into(),
                    image: Some("docker.io/library/busybox:latest".into()),
                    image_pull_policy: Some("IfNotPresent".into()),
                    command: Some(vec![
                        "sh".into(),
                        "-c".into(),
                        "while read line; do echo got:$line; done".into(),
                    ]),
                    stdin: Some(true),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }),
        status: None,
    };
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");

    let result = async {
        // ---- authentication and authorization
        let anon = get(addr, &pki.anonymous, "/healthz").await?;
        ensure!(anon == (401, "Unauthorized".into()), "no credentials: {anon:?}");
        let alice = get(addr, &pki.unprivileged, "/pods").await?;
        let forbidden = "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])";
        ensure!(alice == (403, forbidden.into()), "unprivileged: {alice:?}");
        let (code, body) = get(addr, &pki.client, "/healthz").await?;
        ensure!((code, body.as_str()) == (200, "ok"), "{code} {body}");
        // /metrics/resource (metrics-server's) is behind the same gate as /metrics.
        for path in ["/metrics", "/metrics/resource"] {
            let anon = get(addr, &pki.anonymous, path).await?;
            ensure!(anon == (401, "Unauthorized".into()), "{path}: {anon:?}");
            let alice = get(addr, &pki.unprivileged, path).await?;
            let forbidden = "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[metrics])";
            ensure!(alice == (403, forbidden.into()), "{path}: {alice:?}");
        }
        let (code, body) = get(addr, &pki.client, "/metrics/resource").await?;
        ensure!(
            code == 200
                && body.lines().any(|l| l == "resource_scrape_error 0")
                && body.lines().any(|l| l.starts_with("node_cpu_usage_seconds_total ")),
            "{code} {body}"
        );

        // ---- logs once the container wrote them
        let logs = wait_for("the container's log", Duration::from_secs(90), || async {
            let (code, body) = get(addr, &pki.client, "/containerLogs/default/talker/talk").await?;
            Ok((code == 200 && body.contains("to-stderr") && body.contains("line-two"))
                .then_some(body))
        })
        .await?;
        let stdout: Vec<&str> = logs.lines().filter(|l| *l != "to-stderr").collect();
        ensure!(stdout == ["line-one", "line-two"], "{logs:?}");
        let (code, body) =
            get(addr, &pki.client, "/containerLogs/default/talker/talk?tailLines=1&stream=Stdout")
                .await?;
        ensure!(code == 422, "tailLines with a stream filter: {code} {body}");
        let (code, body) =
            get(addr, &pki.client, "/containerLogs/default/talker/talk?stream=Stdout&timestamps=true")
                .await?;
        ensure!(code == 200, "{code} {body}");
        let lines: Vec<&str> = body.lines().collect();
        ensure!(lines.len() == 2 && lines[1].ends_with("Z line-two"), "{body:?}");
        let (code, body) =
            get(addr, &pki.client, "/containerLogs/default/talker/talk?previous=true").await?;
        ensure!(
            code == 400
                && body == "previous terminated container \"talk\" in pod \"talker\" not found",
            "{code} {body}"
        );
        let (code, _) = get(addr, &pki.client, "/containerLogs/default/nobody/talk").await?;
        ensure!(code == 404);
        let (code, _) = get(addr, &pki.client, "/containerLogs/default/talker/nope").await?;
        ensure!(code == 404);

        // ---- exec: a plain GET is refused, WebSocket v5 and v4 both work
        let (code, body) = get(addr, &pki.client, "/exec/default/talker/talk?command=true&stdout=1").await?;
        ensure!(code == 400 && body == "Upgrade request required", "{code} {body}");
        let exec = "/exec/default/talker/talk?command=sh&command=-c&command=echo%20out%3B%20echo%20err%20%3E%262%3B%20exit%203&stdout=1&stderr=1";
        for protocol in ["v5.channel.k8s.io", "v4.channel.k8s.io"] {
            let (out, err, status) = ws_exec(addr, &pki.client, exec, protocol).await?;
            ensure!(out == "out\n" && err == "err\n", "{protocol}: {out:?} {err:?}");
            let status: serde_json::Value =
                serde_json::from_str(&status).context("error channel status")?;
            ensure!(
                status["status"] == "Failure"
                    && status["reason"] == "NonZeroExitCode"
                    && status["details"]["causes"][0]["message"] == "3",
                "{protocol}: {status}"
            );
        }
        let (out, _, status) = ws_exec(
            addr,
            &pki.client,
            "/exec/default/talker/talk?command=hostname&stdout=1",
            "v5.channel.k8s.io",
        )
        .await?;
        ensure!(out == "talker\n", "{out:?}");
        ensure!(status.contains("\"Success\""), "{status}");
        // v5 with stdin is refused (the runtime's v4 cannot end stdin; kubectl falls back).
        let refused = ws_exec(
            addr,
            &pki.client,
            "/exec/default/talker/talk?command=cat&stdin=1&stdout=1",
            "v5.channel.k8s.io",
        )
        .await;
        ensure!(refused.is_err(), "v5 with stdin: {refused:?}");

        // ---- attach: stdin in, stdout out (v4, relayed to the runtime unchanged)
        let out = ws_attach(
            addr,
            &pki.client,
            "/attach/default/talker/echo?stdin=1&stdout=1",
            "hello\n",
            "got:hello\n",
        )
        .await?;
        ensure!(out == "got:hello\n", "{out:?}");
        Ok::<_, anyhow::Error>(())
    }
    .await;

    let _ = pods
        .delete(
            "talker",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await;
    let uid = created.metadata.uid.clone().unwrap_or_default();
    let gone = wait_for(
        "the pod's containers removed",
        Duration::from_secs(60),
        || {
            let k = kubelet.clone();
            let uid = uid.clone();
            async move {
                let rt = k.runtime().runtime_pod(&uid).await?;
                Ok(rt.containers.is_empty().then_some(()))
            }
        },
    )
    .await;
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(20), run).await;
    let _ = serve.await;
    result.expect("node access checks");
    gone.expect("cleanup");
}
