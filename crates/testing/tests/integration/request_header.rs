//! Front-proxy (request-header) authentication end to end, with kubeadm's flags over
//! the generated PKI's front-proxy CA: a `front-proxy-client` certificate names the user
//! in `X-Remote-*` headers; the same certificate without them is a 401; a client-CA
//! certificate's headers are ignored; and `kube-system/extension-apiserver-authentication`
//! tells extension apiservers all of it.

use ferrokube_testing::TestApiServer;
use serde_json::{Value, json};

use crate::support::front_proxy;
use front_proxy::{front_proxy, published_data};

const WHOAMI: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

fn read(server: &TestApiServer, file: &str) -> String {
    std::fs::read_to_string(server.dir().join("pki").join(file)).unwrap()
}

/// A client presenting `cert`/`key` and trusting the cluster CA.
async fn client_with_cert(server: &TestApiServer, cert: &str, key: &str) -> kube::Client {
    let yaml = ferrokube_pki::kubeconfig_yaml(
        "test",
        &server.url,
        &read(server, "ca.crt"),
        "proxy",
        cert,
        key,
    );
    let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

async fn whoami(client: &kube::Client, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut h = vec![("content-type", "application/json")];
    h.extend_from_slice(headers);
    let (code, _, body) = TestApiServer::raw(client, "POST", WHOAMI, &h, b"{}".to_vec())
        .await
        .unwrap();
    (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_front_proxy_names_the_user_in_headers() {
    let server = TestApiServer::start_with(front_proxy).await.unwrap();
    let proxy = client_with_cert(
        &server,
        &read(&server, "front-proxy-client.crt"),
        &read(&server, "front-proxy-client.key"),
    )
    .await;

    let (code, v) = whoami(
        &proxy,
        &[
            ("X-Remote-User", "alice"),
            ("X-Remote-Uid", "uid-1"),
            ("X-Remote-Group", "devs"),
            ("X-Remote-Group", "ops"),
            ("X-Remote-Extra-Scopes", "read"),
            ("X-Remote-Extra-Example.com%2Fteam", "blue"),
        ],
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let user = &v["status"]["userInfo"];
    assert_eq!(user["username"], "alice");
    assert_eq!(user["uid"], "uid-1");
    assert_eq!(
        user["groups"],
        json!(["devs", "ops", "system:authenticated"])
    );
    assert_eq!(
        user["extra"],
        json!({"scopes": ["read"], "example.com/team": ["blue"]})
    );

    // Authorization is the named user's: alice may not list pods, a proxied
    // system:masters member may.
    let (code, _, _) = TestApiServer::raw(
        &proxy,
        "GET",
        "/api/v1/namespaces/default/pods",
        &[("X-Remote-User", "alice")],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(code, 403);
    let (code, _, _) = TestApiServer::raw(
        &proxy,
        "GET",
        "/api/v1/namespaces/default/pods",
        &[
            ("X-Remote-User", "root"),
            ("X-Remote-Group", "system:masters"),
        ],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(code, 200);

    // Without a username header the proxy's certificate is nobody: x509 does not
    // accept the front-proxy CA, so it is a 401 (not anonymous, not
    // `front-proxy-client`).
    let (code, _) = whoami(&proxy, &[]).await;
    assert_eq!(code, 401);
    let (code, _) = whoami(&proxy, &[("X-Remote-Group", "system:masters")]).await;
    assert_eq!(code, 401);

    // A client-CA certificate's headers name nobody: it is its own CN.
    let bob = server.client_as("bob", &[]).await.unwrap();
    let (code, v) = whoami(
        &bob,
        &[
            ("X-Remote-User", "alice"),
            ("X-Remote-Group", "system:masters"),
        ],
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(v["status"]["userInfo"]["username"], "bob");
    assert_eq!(
        v["status"]["userInfo"]["groups"],
        json!(["system:authenticated"])
    );

    // A certificate of the front-proxy CA with a CN not in --requestheader-allowed-names
    // is refused.
    let front_proxy_ca = ferrokube_pki::CertificateAuthority::load(
        &read(&server, "front-proxy-ca.crt"),
        &read(&server, "front-proxy-ca.key"),
    )
    .unwrap();
    let intruder = front_proxy_ca
        .issue_client_cert("intruder", &[], ferrokube_pki::Validity::leaf_default())
        .unwrap();
    let intruder = client_with_cert(&server, &intruder.cert_pem, &intruder.key_pem).await;
    let (code, _) = whoami(&intruder, &[("X-Remote-User", "alice")]).await;
    assert_eq!(code, 401);

    // What extension apiservers are told.
    let data = published_data(&server.client).await;
    assert_eq!(data["client-ca-file"], read(&server, "ca.crt"));
    assert_eq!(
        data["requestheader-client-ca-file"],
        read(&server, "front-proxy-ca.crt")
    );
    assert_eq!(
        data["requestheader-allowed-names"],
        r#"["front-proxy-client"]"#
    );
    assert_eq!(
        data["requestheader-username-headers"],
        r#"["X-Remote-User"]"#
    );
    assert_eq!(data["requestheader-uid-headers"], r#"["X-Remote-Uid"]"#);
    assert_eq!(data["requestheader-group-headers"], r#"["X-Remote-Group"]"#);
    assert_eq!(
        data["requestheader-extra-headers-prefix"],
        r#"["X-Remote-Extra-"]"#
    );
    assert_eq!(data.len(), 7);
    server.stop().await;
}

#[tokio::test]
async fn the_configmap_is_kept_across_restarts_and_readable_by_its_role() {
    let mut server = TestApiServer::start_with(front_proxy).await.unwrap();
    let before = published_data(&server.client).await;
    server.restart().await.unwrap();
    assert_eq!(published_data(&server.client).await, before);

    // kube-controller-manager and kube-scheduler read it through
    // extension-apiserver-authentication-reader; others may not.
    let get = |client: kube::Client| async move {
        TestApiServer::raw(
            &client,
            "GET",
            "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication",
            &[],
            vec![],
        )
        .await
        .unwrap()
        .0
    };
    let scheduler = server
        .client_as("system:kube-scheduler", &[])
        .await
        .unwrap();
    assert_eq!(get(scheduler).await, 200);
    let nobody = server.client_as("nobody", &[]).await.unwrap();
    assert_eq!(get(nobody).await, 403);
    server.stop().await;
}

#[tokio::test]
async fn without_request_header_flags_only_the_client_ca_is_published() {
    let server = TestApiServer::start().await.unwrap();
    let data = published_data(&server.client).await;
    assert_eq!(
        data.keys().map(String::as_str).collect::<Vec<_>>(),
        vec!["client-ca-file"]
    );
    assert_eq!(data["client-ca-file"], read(&server, "ca.crt"));
    // The front-proxy certificate is not accepted at all then (the TLS handshake
    // refuses it).
    let proxy = client_with_cert(
        &server,
        &read(&server, "front-proxy-client.crt"),
        &read(&server, "front-proxy-client.key"),
    )
    .await;
    let result = TestApiServer::raw(
        &proxy,
        "POST",
        WHOAMI,
        &[
            ("content-type", "application/json"),
            ("X-Remote-User", "alice"),
        ],
        b"{}".to_vec(),
    )
    .await;
    assert!(
        !matches!(result, Ok((code, _, _)) if code != 401),
        "{result:?}"
    );
    server.stop().await;
}

/// An HTTP server standing in for a pod: answers with the names of the identity
/// headers that reached it (`x-remote-*`, `authorization`), comma-separated.
async fn header_echo() -> u16 {
    use http_body_util::Full;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    |req: hyper::Request<hyper::body::Incoming>| async move {
                        let mut seen: Vec<String> = req
                            .headers()
                            .keys()
                            .map(|k| k.as_str().to_string())
                            .filter(|k| k.starts_with("x-remote-") || k == "authorization")
                            .collect();
                        seen.sort();
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            bytes::Bytes::from(seen.join(",")),
                        )))
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    port
}

#[tokio::test]
async fn identity_headers_do_not_reach_a_proxied_pod() {
    let port = header_echo().await;
    let server = TestApiServer::start_with(front_proxy).await.unwrap();
    let (code, _, body) = TestApiServer::raw(
        &server.client,
        "POST",
        "/api/v1/namespaces/default/pods",
        &[("content-type", "application/json")],
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "echo"}, "spec": {"containers": [
                {"name": "c", "image": "busybox", "ports": [{"containerPort": port}]}]}}))
        .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    let (code, _, body) = TestApiServer::raw(
        &server.client,
        "PATCH",
        "/api/v1/namespaces/default/pods/echo/status",
        &[("content-type", "application/merge-patch+json")],
        serde_json::to_vec(&json!({"status": {"phase": "Running", "podIP": "127.0.0.1",
                                               "podIPs": [{"ip": "127.0.0.1"}]}}))
        .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));

    let path = "/api/v1/namespaces/default/pods/echo/proxy/";
    // Through the front proxy: the headers named the user and stop here.
    let proxy = client_with_cert(
        &server,
        &read(&server, "front-proxy-client.crt"),
        &read(&server, "front-proxy-client.key"),
    )
    .await;
    let headers = [
        ("X-Remote-User", "root"),
        ("X-Remote-Group", "system:masters"),
        ("X-Remote-Extra-Scopes", "all"),
    ];
    let (code, _, body) = TestApiServer::raw(&proxy, "GET", path, &headers, vec![])
        .await
        .unwrap();
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(String::from_utf8_lossy(&body), "");
    // A client-CA user's look-alike headers are not passed on as if vouched for.
    let (code, _, body) = TestApiServer::raw(&server.client, "GET", path, &headers, vec![])
        .await
        .unwrap();
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(String::from_utf8_lossy(&body), "");
    server.stop().await;
}
