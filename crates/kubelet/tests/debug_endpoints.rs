//! The kubelet API's debugging handlers over HTTPS, end to end: `/configz`, `/logs/` and
//! `/runningpods/`.
//!
//! `configz_and_system_logs_over_https` needs no container runtime and no apiserver: the
//! kubelet is built on a CRI socket that accepts connections and never answers (these
//! paths never call the runtime) and a client for an apiserver that is not there
//! (anonymous requests under AlwaysAllow need no reviews).
//!
//! `running_pods_on_real_containerd` runs a pod on this machine's containerd through a
//! whole kubelet and a real in-process apiserver; it fails, never skips, when containerd
//! is not reachable, and its pod is removed even when a check fails. Run it under
//! `flock /run/ferrokube-e2e.lock` next to other tests that use the shared containerd.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, ensure};
use bytes::Bytes;
use ferrokube_kubelet::auth::{AuthSettings, KubeletAuth};
use ferrokube_kubelet::cri::CriClient;
use ferrokube_kubelet::kubeletconfig::{KubeletConfiguration, effective_configuration};
use ferrokube_kubelet::{Kubelet, KubeletConfig, NodeConfig, RuntimeManager};
use ferrokube_pki::{CertificateAuthority, Validity};
use ferrokube_testing::TestApiServer;
use http_body_util::{BodyExt, Empty};
use hyper::header::HeaderMap;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio_util::sync::CancellationToken;

/// The kubelet API of `kubelet` on a loopback port (anonymous requests, AlwaysAllow), and
/// a TLS client configuration that trusts it.
async fn serve_api(
    kubelet: Arc<Kubelet>,
    node_name: &str,
    client: kube::Client,
    cancel: CancellationToken,
) -> (SocketAddr, Arc<rustls::ClientConfig>) {
    let ca = CertificateAuthority::generate("debug-endpoints-test-ca").expect("CA");
    let server = ca
        .issue_serving_cert(
            "kubelet",
            &["localhost".to_string()],
            &[IpAddr::from([127, 0, 0, 1])],
            Validity::leaf_default(),
        )
        .expect("serving cert");
    let tls = ferrokube_kubelet::server::tls_config(&server.cert_pem, &server.key_pem, None)
        .expect("kubelet TLS config");
    let auth = Arc::new(KubeletAuth::new(
        node_name,
        &AuthSettings::defaults(false),
        client,
    ));
    let (addr, _serve) = ferrokube_kubelet::server::bind_tls(
        "127.0.0.1:0".parse().unwrap(),
        kubelet,
        tls,
        auth,
        cancel,
    )
    .await
    .expect("bind the kubelet API");
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap())
        .unwrap();
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    (addr, Arc::new(client))
}

/// One request over a fresh TLS connection: status, headers and whole body.
async fn request(
    addr: SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
    method: &str,
    path: &str,
) -> Result<(u16, HeaderMap, String)> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let stream = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(ServerName::try_from("127.0.0.1")?, tcp)
        .await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .body(Empty::<Bytes>::new())?;
    let resp = tokio::time::timeout(Duration::from_secs(20), sender.send_request(req)).await??;
    let (parts, body) = resp.into_parts();
    let body = tokio::time::timeout(Duration::from_secs(20), body.collect())
        .await??
        .to_bytes();
    Ok((
        parts.status.as_u16(),
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    ))
}

async fn get(
    addr: SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
    path: &str,
) -> Result<(u16, HeaderMap, String)> {
    request(addr, tls, "GET", path).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configz_and_system_logs_over_https() {
    let dir = tempfile::tempdir().expect("temp dir");
    let logs = dir.path().join("log");
    std::fs::create_dir_all(logs.join("pods")).unwrap();
    std::fs::write(logs.join("syslog"), "booted\n").unwrap();
    std::fs::write(logs.join("pods/0.log"), "a pod's line\n").unwrap();
    std::fs::write(dir.path().join("secret"), "not for clients\n").unwrap();
    std::os::unix::fs::symlink(dir.path(), logs.join("escape")).unwrap();

    // A CRI socket that takes connections and never answers.
    let sock = dir.path().join("cri.sock");
    let listener = tokio::net::UnixListener::bind(&sock).expect("bind the CRI socket");
    tokio::spawn(async move {
        let mut held = vec![];
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let cri = CriClient::connect(
        &format!("unix://{}", sock.display()),
        Duration::from_secs(3),
    )
    .await
    .expect("connect to the silent CRI socket");
    let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
        .expect("client");

    let node_name = "fk-debug-endpoints";
    let node = NodeConfig::new(node_name);
    let mut cfg = KubeletConfig::new(node_name);
    cfg.root_dir = dir.path().join("root");
    cfg.system_log_dir = Some(logs.clone());
    cfg.max_pods = 42;
    cfg.configz = effective_configuration(
        &KubeletConfiguration::default(),
        &cfg,
        &node,
        &AuthSettings::defaults(false),
    )
    .to_value();
    let kubelet = Kubelet::new(client.clone(), RuntimeManager::new(cri, node), cfg);
    let cancel = CancellationToken::new();
    let (addr, tls) = serve_api(kubelet, node_name, client, cancel.clone()).await;

    let result = async {
        // ---- /configz
        let (code, headers, body) = get(addr, &tls, "/configz").await?;
        ensure!(code == 200, "{code} {body}");
        ensure!(headers["content-type"] == "application/json", "{headers:?}");
        ensure!(
            headers["x-content-type-options"] == "nosniff",
            "{headers:?}"
        );
        let v: serde_json::Value = serde_json::from_str(&body)?;
        let kc = &v["kubeletconfig"];
        ensure!(v.as_object().map(|o| o.len()) == Some(1), "{body}");
        ensure!(
            kc["maxPods"] == 42
                && kc["port"] == 10250
                && kc["syncFrequency"] == "1m0s"
                && kc["enableSystemLogHandler"] == true
                && kc["authentication"]["anonymous"]["enabled"] == true
                && kc["authorization"]["mode"] == "AlwaysAllow"
                && kc.get("apiVersion").is_none()
                && kc.get("kind").is_none(),
            "{body}"
        );
        let (code, _, _) = get(addr, &tls, "/configz/").await?;
        ensure!(code == 404, "/configz/: {code}");

        // ---- /logs/: listing, redirects, files, and nothing outside the directory
        let (code, headers, body) = get(addr, &tls, "/logs/").await?;
        ensure!(code == 200, "{code} {body}");
        ensure!(
            headers["content-type"] == "text/html; charset=utf-8",
            "{headers:?}"
        );
        ensure!(
            body.ends_with(
                "<pre>\n<a href=\"escape\">escape</a>\n<a href=\"pods/\">pods/</a>\n\
                 <a href=\"syslog\">syslog</a>\n</pre>\n"
            ),
            "{body}"
        );
        for (path, location) in [("/logs", "logs/"), ("/logs/pods", "pods/")] {
            let (code, headers, _) = get(addr, &tls, path).await?;
            ensure!(
                code == 301 && headers["location"] == location,
                "{path}: {code} {headers:?}"
            );
        }
        let (code, headers, body) = get(addr, &tls, "/logs/pods/0.log").await?;
        ensure!(code == 200 && body == "a pod's line\n", "{code} {body}");
        ensure!(headers["content-length"] == "13", "{headers:?}");
        // The node log query is not implemented: the query changes nothing.
        let (code, _, body) = get(addr, &tls, "/logs/syslog?query=kubelet").await?;
        ensure!(code == 200 && body == "booted\n", "{code} {body}");
        let (code, _, body) = get(addr, &tls, "/logs/%2e%2e/secret").await?;
        ensure!(code == 400, "{code} {body}");
        let (code, _, body) = get(addr, &tls, "/logs/escape/secret").await?;
        ensure!(
            code == 404 && body == "404 page not found\n",
            "{code} {body}"
        );
        let (code, headers, _) = request(addr, &tls, "POST", "/logs/syslog").await?;
        ensure!(
            code == 405 && headers["allow"] == "GET",
            "{code} {headers:?}"
        );
        Ok::<_, anyhow::Error>(())
    }
    .await;
    cancel.cancel();
    result.expect("debug endpoints");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_pods_on_real_containerd() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-rp-{}", std::process::id());
    let root = tempfile::tempdir().expect("root dir");
    let running = common::start_kubelet_with(client.clone(), &node_name, root.path(), |_| {}).await;
    let kubelet = running.kubelet.clone();
    let cancel = CancellationToken::new();
    let (addr, tls) = serve_api(kubelet.clone(), &node_name, client.clone(), cancel.clone()).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("runner".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node_name.clone()),
            termination_grace_period_seconds: Some(2),
            containers: vec![Container {
                name: "sleeper".into(),
                image: Some("docker.io/library/busybox:latest".into()),
                image_pull_policy: Some("IfNotPresent".into()),
                command: Some(vec!["sleep".into(), "3600".into()]),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    let uid = created.metadata.uid.clone().unwrap_or_default();

    let result = async {
        let item = common::wait_for("the pod on /runningpods/", Duration::from_secs(90), || {
            let uid = uid.clone();
            let tls = tls.clone();
            async move {
                let (code, _, body) = get(addr, &tls, "/runningpods/").await?;
                ensure!(code == 200, "{code} {body}");
                let list: serde_json::Value = serde_json::from_str(&body)?;
                ensure!(
                    list["kind"] == "PodList" && list["apiVersion"] == "v1",
                    "{body}"
                );
                Ok(list["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|i| {
                        i["metadata"]["uid"] == uid.as_str()
                            && i["spec"]["containers"]
                                .as_array()
                                .is_some_and(|c| !c.is_empty())
                    })
                    .cloned())
            }
        })
        .await?;
        ensure!(
            item["metadata"]
                == serde_json::json!({"name": "runner", "namespace": "default", "uid": uid}),
            "{item}"
        );
        let containers = item["spec"]["containers"].as_array().unwrap();
        ensure!(containers.len() == 1, "{item}");
        ensure!(
            containers[0]["name"] == "sleeper"
                && containers[0]["image"]
                    .as_str()
                    .is_some_and(|i| i.contains("busybox"))
                && containers[0]["resources"] == serde_json::json!({})
                && item["status"] == serde_json::json!({})
                && item.get("kind").is_none(),
            "{item}"
        );
        // Without a trailing slash too.
        let (code, _, body) = get(addr, &tls, "/runningpods").await?;
        ensure!(code == 200 && body.contains(&uid), "{code} {body}");
        Ok::<_, anyhow::Error>(())
    }
    .await;

    let _ = pods
        .delete(
            "runner",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await;
    let gone = common::wait_for(
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
    common::stop_kubelet(running).await;
    result.expect("running pods");
    gone.expect("cleanup");
}
