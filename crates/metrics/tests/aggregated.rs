//! The metrics server end to end on the test apiserver: it scrapes a stand-in kubelet
//! (a local HTTPS server writing `/metrics/resource` pages whose counters grow at
//! known rates), is registered as the `v1beta1.metrics.k8s.io` APIService, and serves
//! NodeMetrics and PodMetrics through the aggregator with the rates and memory of the
//! pages. Its own authentication (the aggregator's front-proxy certificate and
//! `X-Remote-*` headers, from the `extension-apiserver-authentication` ConfigMap) and
//! authorization (SubjectAccessReview) are checked by calling it directly. Every wait is
//! bounded in time.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferrokube_metrics_server::api::{MetricsList, NodeMetrics, PodMetrics};
use ferrokube_metrics_server::run::{RunConfig, start};
use ferrokube_metrics_server::scraper::{KubeletClient, KubeletOptions};
use ferrokube_testing::TestApiServer;
use http_body_util::BodyExt;
use hyper::body::Bytes;
use kube::Client;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Polls `f` every 200 ms for up to `secs` seconds.
async fn wait_for<T, F, Fut>(secs: u64, what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut last_err = None;
    while Instant::now() < deadline {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!("timed out after {secs}s waiting for {what} (last error: {last_err:?})")
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// A stand-in kubelet: the n-th page is stamped `base + n` seconds, with node cpu
/// `n × 0.5` s (500m), web-1/c `n × 0.1` s (100m), web-1/d `n × 0.02` s (20m),
/// kube-system/dns/dns `n × 0.05` s (50m); memory fixed.
async fn fake_kubelet(cancel: CancellationToken) -> anyhow::Result<u16> {
    let port = free_port()?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let tls = ferrokube_client::serving::SecureServingOptions::default().tls_config(
        "kubelet",
        addr.ip(),
        None,
    )?;
    let pages = Arc::new(AtomicU64::new(1));
    let base_ms: i64 = 1_700_000_000_000;
    let respond: ferrokube_client::serving::Respond = Arc::new(move |path| {
        if path != "/metrics/resource" {
            return (404, "404 page not found".into());
        }
        let n = pages.fetch_add(1, Ordering::SeqCst) as f64;
        let ts = base_ms + (n as i64) * 1000;
        let c = |pod: &str, ns: &str, name: &str| {
            format!("{{container=\"{name}\",namespace=\"{ns}\",pod=\"{pod}\"}}")
        };
        let page = format!(
            "# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds\n\
             # TYPE container_cpu_usage_seconds_total counter\n\
             container_cpu_usage_seconds_total{} {} {ts}\n\
             container_cpu_usage_seconds_total{} {} {ts}\n\
             container_cpu_usage_seconds_total{} {} {ts}\n\
             # TYPE container_memory_working_set_bytes gauge\n\
             container_memory_working_set_bytes{} 1.048576e+07 {ts}\n\
             container_memory_working_set_bytes{} 2.097152e+06 {ts}\n\
             container_memory_working_set_bytes{} 5.24288e+06 {ts}\n\
             # TYPE container_start_time_seconds gauge\n\
             container_start_time_seconds{} 1.6e+09\n\
             # TYPE node_cpu_usage_seconds_total counter\n\
             node_cpu_usage_seconds_total {} {ts}\n\
             # TYPE node_memory_working_set_bytes gauge\n\
             node_memory_working_set_bytes 1.073741824e+09 {ts}\n\
             # TYPE resource_scrape_error gauge\n\
             resource_scrape_error 0\n",
            c("web-1", "default", "c"),
            n * 0.1,
            c("web-1", "default", "d"),
            n * 0.02,
            c("dns", "kube-system", "dns"),
            n * 0.05,
            c("web-1", "default", "c"),
            c("web-1", "default", "d"),
            c("dns", "kube-system", "dns"),
            c("web-1", "default", "c"),
            n * 0.5,
        );
        (200, page)
    });
    tokio::spawn(ferrokube_client::serving::serve(
        addr, tls, respond, None, cancel,
    ));
    Ok(port)
}

async fn post(c: &Client, path: &str, body: Value) -> anyhow::Result<Value> {
    let (code, _, answer) = TestApiServer::send_json(c, "POST", path, &body).await?;
    anyhow::ensure!(code == 201, "POST {path}: {code} {answer}");
    Ok(answer)
}

/// The node (InternalIP 127.0.0.1) and the pods the fake kubelet reports, plus one it
/// does not.
async fn create_objects(c: &Client) -> anyhow::Result<()> {
    post(
        c,
        "/api/v1/nodes",
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node-a", "labels": {"role": "worker"}}}),
    )
    .await?;
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(c.clone());
    nodes
        .patch_status(
            "node-a",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": "node-a"}]}})),
        )
        .await?;
    for (ns, name, labels, containers) in [
        ("default", "web-1", json!({"app": "web"}), vec!["c", "d"]),
        ("default", "quiet", json!({"app": "web"}), vec!["c"]),
        ("kube-system", "dns", json!({"k8s-app": "dns"}), vec!["dns"]),
    ] {
        let containers: Vec<Value> = containers
            .iter()
            .map(|c| json!({"name": c, "image": "img"}))
            .collect();
        post(
            c,
            &format!("/api/v1/namespaces/{ns}/pods"),
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": labels},
                "spec": {"nodeName": "node-a", "containers": containers}}),
        )
        .await?;
    }
    Ok(())
}

/// Registers the server as `v1beta1.metrics.k8s.io` (as deploy/addons/metrics-server.yaml
/// does, insecureSkipTLSVerify) behind a Service and EndpointSlice, and waits for the
/// APIService to be available.
async fn register(c: &Client, port: u16) -> anyhow::Result<()> {
    post(
        c,
        "/apis/apiregistration.k8s.io/v1/apiservices",
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1beta1.metrics.k8s.io"},
            "spec": {"group": "metrics.k8s.io", "version": "v1beta1",
                "service": {"namespace": "kube-system", "name": "metrics-server", "port": 443},
                "insecureSkipTLSVerify": true,
                "groupPriorityMinimum": 100, "versionPriority": 100}}),
    )
    .await?;
    post(
        c,
        "/api/v1/namespaces/kube-system/services",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "metrics-server"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}}),
    )
    .await?;
    post(
        c,
        "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices",
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "metrics-server-abc",
                "labels": {"kubernetes.io/service-name": "metrics-server"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}),
    )
    .await?;
    wait_for(30, "the metrics APIService available", || async {
        let (code, _, svc) = TestApiServer::send_json(
            c,
            "GET",
            "/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.metrics.k8s.io",
            &Value::Null,
        )
        .await?;
        let available = code == 200
            && svc["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Available" && c["status"] == "True");
        Ok(available.then_some(()))
    })
    .await
}

async fn get(c: &Client, path: &str) -> anyhow::Result<(u16, Value)> {
    let (code, _, body) = TestApiServer::send_json(c, "GET", path, &Value::Null).await?;
    Ok((code, body))
}

/// A GET straight to the metrics server (not through the aggregator), with an optional
/// client certificate and headers: the status code and body.
async fn direct_get(
    port: u16,
    path: &str,
    identity: Option<(&str, &str)>,
    headers: &[(&str, &str)],
) -> anyhow::Result<(u16, Value)> {
    let builder = ferrokube_pki::insecure::client_config_builder();
    let cfg = match identity {
        Some((cert, key)) => builder.with_client_auth_cert(
            CertificateDer::pem_slice_iter(cert.as_bytes()).collect::<Result<_, _>>()?,
            PrivateKeyDer::from_pem_slice(key.as_bytes())?,
        )?,
        None => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from("localhost")?, tcp)
        .await?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await?;
    tokio::spawn(conn);
    let mut req = hyper::Request::get(path).header("host", "localhost");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = send
        .send_request(req.body(http_body_util::Empty::<Bytes>::new())?)
        .await?;
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((code, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_and_pod_metrics_through_the_aggregator() -> anyhow::Result<()> {
    let srv =
        TestApiServer::start_with(ferrokube_testing::with_aggregator_and_request_header).await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let kubelet_port = fake_kubelet(cancel.clone()).await?;
    create_objects(&c).await?;

    let config = srv.kube_config().await?;
    let kubelet = KubeletClient::new(
        KubeletOptions {
            port: kubelet_port,
            address_types: vec!["InternalIP".into(), "Hostname".into()],
            insecure_tls: true,
            ..Default::default()
        },
        &config,
    )
    .map_err(anyhow::Error::msg)?;
    let serving = ferrokube_pki::serving::self_signed_serving(
        "localhost",
        "metrics-server",
        &["localhost".into()],
        &[Ipv4Addr::LOCALHOST.into()],
    )?;
    let running = start(
        c.clone(),
        RunConfig {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            serving_cert: (serving.cert_pem, serving.key_pem),
            tls: Default::default(),
            resolution: Duration::from_millis(500),
            kubelet,
        },
        cancel.clone(),
    )
    .await?;
    let port = running.addr.port();
    register(&c, port).await?;

    // Nodes: 0.5 s of cpu per second of the pages' clock, 1 GiB.
    let nodes: MetricsList<NodeMetrics> = wait_for(30, "node metrics", || async {
        let (code, body) = get(&c, "/apis/metrics.k8s.io/v1beta1/nodes").await?;
        anyhow::ensure!(code == 200, "{code} {body}");
        let list: MetricsList<NodeMetrics> = serde_json::from_value(body)?;
        Ok((!list.items.is_empty()).then_some(list))
    })
    .await?;
    assert_eq!(nodes.kind, "NodeMetricsList");
    assert_eq!(nodes.api_version, "metrics.k8s.io/v1beta1");
    assert_eq!(nodes.items.len(), 1);
    let node = &nodes.items[0];
    assert_eq!(node.metadata.name.as_deref(), Some("node-a"));
    assert_eq!(node.usage["cpu"].0, "500m");
    assert_eq!(node.usage["memory"].0, "1Gi");
    // Consecutive pages are one second apart on their clock.
    assert_eq!(node.window, "1s");
    let (code, one) = get(&c, "/apis/metrics.k8s.io/v1beta1/nodes/node-a").await?;
    assert_eq!(code, 200, "{one}");
    assert_eq!(one["kind"], "NodeMetrics");
    assert_eq!(one["metadata"]["labels"]["role"], "worker");
    let (code, none) = get(
        &c,
        "/apis/metrics.k8s.io/v1beta1/nodes?labelSelector=role%3Dcontrol-plane",
    )
    .await?;
    assert_eq!((code, &none["items"]), (200, &json!([])));

    // Pods: per container rates; the pod the kubelet does not report is left out.
    let (code, body) = get(
        &c,
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb",
    )
    .await?;
    assert_eq!(code, 200, "{body}");
    let pods: MetricsList<PodMetrics> = serde_json::from_value(body)?;
    assert_eq!(pods.kind, "PodMetricsList");
    assert_eq!(pods.items.len(), 1);
    let web = &pods.items[0];
    assert_eq!(web.metadata.name.as_deref(), Some("web-1"));
    assert_eq!(web.metadata.namespace.as_deref(), Some("default"));
    let usage: Vec<(&str, &str, &str)> = web
        .containers
        .iter()
        .map(|c| {
            (
                c.name.as_str(),
                c.usage["cpu"].0.as_str(),
                c.usage["memory"].0.as_str(),
            )
        })
        .collect();
    assert_eq!(usage, vec![("c", "100m", "10Mi"), ("d", "20m", "2Mi")]);

    let (code, all) = get(&c, "/apis/metrics.k8s.io/v1beta1/pods").await?;
    assert_eq!(code, 200, "{all}");
    let names: Vec<String> = all["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            format!(
                "{}/{}",
                p["metadata"]["namespace"].as_str().unwrap_or_default(),
                p["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(names, vec!["default/web-1", "kube-system/dns"]);
    let (code, dns) = get(
        &c,
        "/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods/dns",
    )
    .await?;
    assert_eq!(code, 200, "{dns}");
    assert_eq!(dns["kind"], "PodMetrics");
    assert_eq!(
        dns["containers"][0]["usage"],
        json!({"cpu": "50m", "memory": "5Mi"})
    );
    let (code, by_field) = get(
        &c,
        "/apis/metrics.k8s.io/v1beta1/pods?fieldSelector=metadata.namespace%3Dkube-system",
    )
    .await?;
    assert_eq!(code, 200);
    assert_eq!(by_field["items"].as_array().map(Vec::len), Some(1));
    let (code, missing) = get(
        &c,
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/quiet",
    )
    .await?;
    assert_eq!(code, 404, "{missing}");
    assert_eq!(missing["kind"], "Status");
    assert_eq!(
        missing["message"],
        "pods.metrics.k8s.io \"quiet\" not found"
    );
    let (code, discovery) = get(&c, "/apis/metrics.k8s.io/v1beta1").await?;
    assert_eq!(code, 200);
    let resources: Vec<&str> = discovery["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(resources, vec!["nodes", "pods"]);

    // Called directly: no credentials is anonymous, which RBAC denies (403 Status).
    let nodes_path = "/apis/metrics.k8s.io/v1beta1/nodes";
    let (code, body) = direct_get(port, nodes_path, None, &[]).await?;
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["reason"], "Forbidden");
    // X-Remote-User without the front-proxy certificate names nobody.
    let (code, _) = direct_get(
        port,
        nodes_path,
        None,
        &[
            ("X-Remote-User", "admin"),
            ("X-Remote-Group", "system:masters"),
        ],
    )
    .await?;
    assert_eq!(code, 403);
    // The front-proxy certificate and headers: the headers' user, authorized by a
    // SubjectAccessReview (alice has no role: denied; system:masters: allowed).
    let pki = srv.dir().join("pki");
    let cert = std::fs::read_to_string(pki.join("front-proxy-client.crt"))?;
    let key = std::fs::read_to_string(pki.join("front-proxy-client.key"))?;
    let (code, body) = direct_get(
        port,
        nodes_path,
        Some((&cert, &key)),
        &[("X-Remote-User", "alice")],
    )
    .await?;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        "nodes.metrics.k8s.io is forbidden: User \"alice\" cannot list resource \"nodes\" in API group \"metrics.k8s.io\" at the cluster scope"
    );
    let (code, body) = direct_get(
        port,
        nodes_path,
        Some((&cert, &key)),
        &[
            ("X-Remote-User", "bob"),
            ("X-Remote-Group", "system:masters"),
        ],
    )
    .await?;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["items"][0]["metadata"]["name"], "node-a");
    // A certificate of another CA is refused.
    let other = ferrokube_pki::CertificateAuthority::generate("other")?;
    let stranger = other.issue_client_cert(
        "front-proxy-client",
        &[],
        ferrokube_pki::Validity::leaf_default(),
    )?;
    let (code, body) = direct_get(
        port,
        nodes_path,
        Some((&stranger.cert_pem, &stranger.key_pem)),
        &[
            ("X-Remote-User", "bob"),
            ("X-Remote-Group", "system:masters"),
        ],
    )
    .await
    // The handshake itself may fail on an unknown CA.
    .unwrap_or((401, Value::Null));
    assert_eq!(code, 401, "{body}");
    // Health needs nothing.
    let (code, _) = direct_get(port, "/readyz", None, &[])
        .await
        .map(|(c, _)| (c, ()))?;
    assert_eq!(code, 200);

    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(10), running.wait()).await?;
    Ok(())
}
