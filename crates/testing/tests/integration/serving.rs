//! How the apiserver's port serves. Graceful termination as upstream's:
//! `--shutdown-delay-duration` keeps serving while `/readyz` fails;
//! `--shutdown-send-retry-after` answers new requests 429 while those in flight drain;
//! without it the listener stops after the delay and requests in flight still finish.
//! `--strict-transport-security-directives` sets the header;
//! `--http2-max-streams-per-connection` the HTTP/2 stream limit;
//! `--cors-allowed-origins` answers browsers' cross-origin requests;
//! `--tls-sni-cert-key` serves another certificate to clients that ask for its name;
//! `--goaway-chance` sends HTTP/2 connections a GOAWAY after some requests.
//! JSON answers are indented for `?pretty=true` and for people's tools (curl, Wget,
//! browsers), as upstream's `isPrettyPrint`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokube_apiserver::ShutdownOptions;
use ferrokube_testing::{TestApiServer, webhook_server::WebhookServer};
use serde_json::{Value, json};

/// How long the webhook holds a ConfigMap create in flight.
const WEBHOOK_DELAY: Duration = Duration::from_secs(5);

/// A ConfigMap create, sent at once and answered after the webhook's delay.
fn create_in_flight(c: &kube::Client) -> tokio::task::JoinHandle<u16> {
    let c = c.clone();
    tokio::spawn(async move {
        let cm =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "in-flight"}});
        let (code, _, _) =
            TestApiServer::send_json(&c, "POST", "/api/v1/namespaces/default/configmaps", &cm)
                .await
                .unwrap();
        code
    })
}

async fn get(c: &kube::Client, path: &str) -> (u16, http::HeaderMap, String) {
    let (code, headers, body) = TestApiServer::raw(c, "GET", path, &[], Vec::new())
        .await
        .unwrap();
    (code, headers, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn retry_after_while_requests_in_flight_drain() {
    let server = TestApiServer::start_with(|o| {
        o.shutdown = ShutdownOptions {
            delay: Duration::from_secs(2),
            send_retry_after: true,
            watch_termination_grace_period: Duration::ZERO,
        };
        o.strict_transport_security_directives =
            vec!["max-age=31536000".into(), "includeSubDomains".into()];
    })
    .await
    .unwrap();
    let c = server.client_without_retries().await.unwrap();
    let (code, headers, _) = get(&c, "/api/v1/namespaces/default").await;
    assert_eq!(code, 200);
    assert_eq!(
        headers["strict-transport-security"],
        "max-age=31536000; includeSubDomains"
    );
    let _hook = WebhookServer::holding_configmap_creates(&c, WEBHOOK_DELAY)
        .await
        .unwrap();

    let initiated = Instant::now();
    let stopping = tokio::spawn(server.stop());
    let in_flight = create_in_flight(&c);
    // ShutdownInitiated: not ready, but serving.
    let (code, _, body) = get(&c, "/readyz?verbose").await;
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("[-]shutdown failed"), "{body}");
    assert!(body.contains("[+]etcd ok"), "{body}");
    let (code, _, _) = get(&c, "/api/v1/namespaces/default").await;
    assert_eq!(code, 200, "served during the shutdown delay");
    assert!(
        initiated.elapsed() < Duration::from_secs(2),
        "the checks above must run inside the delay"
    );

    // After the delay, while the create is in flight: new requests are refused.
    tokio::time::sleep_until((initiated + Duration::from_millis(2500)).into()).await;
    let (code, headers, body) = get(&c, "/api/v1/namespaces/default").await;
    assert_eq!(code, 429, "{body}");
    assert_eq!(headers["retry-after"], "5");
    assert_eq!(
        body,
        "The apiserver is shutting down, please try again later.\n"
    );
    assert_eq!(
        headers["strict-transport-security"],
        "max-age=31536000; includeSubDomains"
    );
    // Health probes are still answered.
    let (code, _, body) = get(&c, "/readyz").await;
    assert_eq!(code, 500, "{body}");
    let (code, _, _) = get(&c, "/livez").await;
    assert_eq!(code, 200);
    assert!(
        !in_flight.is_finished(),
        "the checks above must run while the create is in flight"
    );

    // The request in flight finishes; then the listener stops.
    assert_eq!(in_flight.await.unwrap(), 201);
    tokio::time::timeout(Duration::from_secs(20), stopping)
        .await
        .expect("the server stops once the requests in flight are done")
        .unwrap();
    assert!(
        TestApiServer::raw(&c, "GET", "/livez", &[], Vec::new())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn without_retry_after_the_listener_stops_after_the_delay() {
    let server = TestApiServer::start_with(|o| {
        o.shutdown = ShutdownOptions {
            delay: Duration::from_secs(1),
            ..Default::default()
        };
    })
    .await
    .unwrap();
    let c = server.client_without_retries().await.unwrap();
    let (_, headers, _) = get(&c, "/api/v1/namespaces/default").await;
    assert!(!headers.contains_key("strict-transport-security"));
    let _hook = WebhookServer::holding_configmap_creates(&c, WEBHOOK_DELAY)
        .await
        .unwrap();
    let config = server.kube_config().await.unwrap();

    let initiated = Instant::now();
    let stopping = tokio::spawn(server.stop());
    let in_flight = create_in_flight(&c);
    let (code, _, _) = get(&c, "/readyz").await;
    assert_eq!(code, 500);
    assert!(initiated.elapsed() < Duration::from_secs(1));

    // After the delay a new connection is refused, while the create in flight is
    // still answered.
    tokio::time::sleep_until((initiated + Duration::from_millis(1500)).into()).await;
    let fresh = kube::Client::try_from(config).unwrap();
    let refused = TestApiServer::raw(&fresh, "GET", "/livez", &[], Vec::new()).await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(!in_flight.is_finished());
    assert_eq!(in_flight.await.unwrap(), 201);
    tokio::time::timeout(Duration::from_secs(20), stopping)
        .await
        .expect("the server stops once the request in flight is done")
        .unwrap();
}

/// An HTTP/2 connection to the server (TLS, ALPN h2, any server certificate).
async fn h2_connection(
    server: &TestApiServer,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    h2::client::Connection<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, bytes::Bytes>,
) {
    let mut config = ferrokube_pki::insecure::client_config_builder().with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(server.url.trim_start_matches("https://"))
        .await
        .unwrap();
    let name = rustls_pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    h2::client::handshake(tls).await.unwrap()
}

/// The SETTINGS_MAX_CONCURRENT_STREAMS an HTTP/2 client is given.
async fn http2_stream_limit(server: &TestApiServer) -> usize {
    let (mut send, mut connection) = h2_connection(server).await;
    // `/version` reads no storage: a loaded machine's slow storage check (a 500 from
    // /livez) is not what this measures.
    let request = http::Request::get(format!("{}/version", server.url))
        .body(())
        .unwrap();
    let (response, _) = send.send_request(request, true).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::select! {
            r = response => r.unwrap(),
            r = &mut connection => panic!("the connection ended: {r:?}"),
        }
    })
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    connection.max_concurrent_send_streams()
}

/// `--goaway-chance=0.02`: on one HTTP/2 connection, some request is followed by the
/// connection's GOAWAY (the chance that 2,000 requests all miss it is below 1e-17);
/// the request that drew it, and every one before, is answered.
#[tokio::test]
async fn goaway_chance_ends_http2_connections_after_a_request() {
    let server = TestApiServer::start_with(|o| o.goaway_chance = 0.02)
        .await
        .unwrap();
    let (mut send, connection) = h2_connection(&server).await;
    let mut connection = tokio::spawn(connection);
    let mut answered = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    let goaway = loop {
        assert!(
            answered < 2000 && Instant::now() < deadline,
            "no GOAWAY after {answered} requests"
        );
        let Ok(ready) = send.clone().ready().await else {
            break true;
        };
        send = ready;
        let request = http::Request::get(format!("{}/livez", server.url))
            .body(())
            .unwrap();
        let Ok((response, _)) = send.send_request(request, true) else {
            break true;
        };
        let response = tokio::time::timeout(Duration::from_secs(10), response)
            .await
            .expect("a request in flight is answered");
        match response {
            Ok(response) => {
                assert_eq!(response.status(), 200);
                answered += 1;
            }
            // A stream refused after the GOAWAY's last stream id.
            Err(e) if e.is_go_away() || e.is_remote() => break true,
            Err(e) => panic!("request {answered}: {e}"),
        }
        if connection.is_finished() {
            break true;
        }
    };
    assert!(goaway);
    assert!(answered >= 1);
    // The connection closes once its streams are done.
    tokio::time::timeout(Duration::from_secs(10), &mut connection)
        .await
        .expect("the connection ends after its GOAWAY")
        .unwrap()
        .ok();
    // A new connection is served as usual.
    let (code, _, _) = get(&server.client, "/livez").await;
    assert_eq!(code, 200);
    server.stop().await;
}

/// A HEAD request over HTTP/2 is answered with the headers alone (the stream was reset
/// as a protocol error: the answer carried its body); over HTTP/1 too.
#[tokio::test]
async fn head_requests_are_answered_without_a_body() {
    let server = TestApiServer::start().await.unwrap();
    let (mut send, connection) = h2_connection(&server).await;
    tokio::spawn(connection);
    // Refusals with bodies: a HEAD of a non-resource path is the verb `head`, which the
    // public-info role does not grant (as upstream's), and the anonymous user may not
    // list namespaces.
    for (path, want) in [("/livez", 403), ("/api/v1/namespaces", 403)] {
        send = send.ready().await.unwrap();
        let request = http::Request::head(format!("{}{path}", server.url))
            .body(())
            .unwrap();
        let (response, _) = send.send_request(request, true).unwrap();
        let response = tokio::time::timeout(Duration::from_secs(10), response)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("HEAD {path}: {e}"));
        assert_eq!(response.status(), want, "{path}");
        let mut body = response.into_body();
        assert!(body.data().await.is_none(), "HEAD {path} has no body");
    }
    let (code, _, body) =
        TestApiServer::raw(&server.client, "HEAD", "/api/v1/namespaces", &[], vec![])
            .await
            .unwrap();
    assert_eq!(code, 405);
    assert!(body.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn http2_stream_limit_as_upstream() {
    let server = TestApiServer::start().await.unwrap();
    assert_eq!(http2_stream_limit(&server).await, 100);
    server.stop().await;
    let server = TestApiServer::start_with(|o| o.http2_max_streams_per_connection = 1000)
        .await
        .unwrap();
    assert_eq!(http2_stream_limit(&server).await, 1000);
    server.stop().await;
}

/// `--cors-allowed-origins`: an allowed origin's preflight is answered 204 without
/// credentials, its requests carry the CORS headers; other origins get none.
#[tokio::test]
async fn cors_for_allowed_origins_only() {
    let server = TestApiServer::start_with(|o| {
        o.cors_allowed_origins = vec![r"//dashboard\.example(:|$)".into()];
        o.external_hostname = Some("api.example".into());
    })
    .await
    .unwrap();
    let anonymous = server.anonymous_client().await.unwrap();
    let origin = [("Origin", "https://dashboard.example")];
    let (code, headers, _) = TestApiServer::raw(
        &anonymous,
        "OPTIONS",
        "/api/v1/namespaces",
        &origin,
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(code, 204);
    assert_eq!(
        headers["access-control-allow-origin"],
        "https://dashboard.example"
    );
    assert_eq!(headers["access-control-allow-credentials"], "true");
    assert!(
        headers["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("PATCH")
    );
    let (code, headers, _) = TestApiServer::raw(
        &server.client,
        "GET",
        "/api/v1/namespaces",
        &origin,
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(code, 200);
    assert_eq!(
        headers["access-control-allow-origin"],
        "https://dashboard.example"
    );
    let other = [("Origin", "https://dashboard.example.evil.test")];
    let (code, headers, _) = TestApiServer::raw(
        &server.client,
        "GET",
        "/api/v1/namespaces",
        &other,
        Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(code, 200);
    assert!(!headers.contains_key("access-control-allow-origin"));
    // --external-hostname names the issuer's key set.
    let (code, _, body) = get(&server.client, "/.well-known/openid-configuration").await;
    assert_eq!(code, 200, "{body}");
    let discovery: Value = serde_json::from_str(&body).unwrap();
    let port = server.url.rsplit(':').next().unwrap();
    assert_eq!(
        discovery["jwks_uri"],
        format!("https://api.example:{port}/openid/v1/jwks")
    );
    server.stop().await;
}

/// The `--tls-sni-cert-key` pair of [`sni_chooses_the_certificate_by_server_name`]:
/// written before the server starts, read by its (non-capturing) configure function.
static SNI_PAIR: std::sync::OnceLock<(std::path::PathBuf, std::path::PathBuf)> =
    std::sync::OnceLock::new();

/// The leaf certificate the server presents to a client asking for `name`.
async fn served_certificate(
    server: &TestApiServer,
    name: rustls_pki_types::ServerName<'static>,
) -> Vec<u8> {
    let config = ferrokube_pki::insecure::client_config_builder().with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(server.url.trim_start_matches("https://"))
        .await
        .unwrap();
    let tls = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .unwrap()
    .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0]
        .as_ref()
        .to_vec()
}

/// A serving pair of a fresh CA for `common_name`, `dns` and `ips`, written to
/// `<name>.crt` and `<name>.key` in `dir`: the two files and the leaf's DER.
fn write_serving_pair(
    dir: &std::path::Path,
    name: &str,
    common_name: &str,
    dns: &[String],
    ips: &[std::net::IpAddr],
) -> (std::path::PathBuf, std::path::PathBuf, Vec<u8>) {
    let pair = ferrokube_pki::CertificateAuthority::generate(&format!("{name}-ca"))
        .unwrap()
        .issue_serving_cert(
            common_name,
            dns,
            ips,
            ferrokube_pki::Validity::leaf_default(),
        )
        .unwrap();
    let (cert, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&cert, &pair.cert_pem).unwrap();
    std::fs::write(&key, &pair.key_pem).unwrap();
    let leaf = ferrokube_pki::pem::parse_cert_pem(&pair.cert_pem)
        .unwrap()
        .to_vec();
    (cert, key, leaf)
}

#[tokio::test]
async fn sni_chooses_the_certificate_by_server_name() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, sni_leaf) = write_serving_pair(
        dir.path(),
        "sni",
        "api.sni.test",
        &["kubernetes.sni.test".into()],
        &[],
    );
    SNI_PAIR.set((cert, key)).unwrap();
    let server = TestApiServer::start_with(|o| {
        let (cert, key) = SNI_PAIR.get().unwrap().clone();
        o.tls_sni_cert_keys = vec![ferrokube_pki::serving::NamedCertKey {
            cert_file: cert,
            key_file: key,
            names: Vec::new(),
        }];
    })
    .await
    .unwrap();
    let dns = |name: &str| rustls_pki_types::ServerName::try_from(name.to_string()).unwrap();
    // The names in the certificate: its common name and its DNS names.
    assert_eq!(
        served_certificate(&server, dns("api.sni.test")).await,
        sni_leaf
    );
    assert_eq!(
        served_certificate(&server, dns("KUBERNETES.sni.test")).await,
        sni_leaf
    );
    // Any other name, and a client that sends none (an address), get the default pair.
    let default = served_certificate(&server, dns("localhost")).await;
    assert_ne!(default, sni_leaf);
    let by_address = served_certificate(
        &server,
        rustls_pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()),
    )
    .await;
    assert_eq!(by_address, default);
    // The API itself answers on either certificate.
    let (code, _, _) = get(&server.client, "/livez").await;
    assert_eq!(code, 200);
    server.stop().await;
}

/// The `--tls-sni-cert-key` pair of
/// [`a_pair_named_by_an_address_serves_clients_that_send_no_name_there`].
static IP_PAIR: std::sync::OnceLock<(std::path::PathBuf, std::path::PathBuf)> =
    std::sync::OnceLock::new();

#[tokio::test]
async fn a_pair_named_by_an_address_serves_clients_that_send_no_name_there() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, ip_leaf) = write_serving_pair(
        dir.path(),
        "ip",
        "loopback",
        &[],
        &[std::net::Ipv4Addr::LOCALHOST.into()],
    );
    IP_PAIR.set((cert, key)).unwrap();
    let server = TestApiServer::start_with(|o| {
        let (cert, key) = IP_PAIR.get().unwrap().clone();
        // `--tls-sni-cert-key=ip.crt,ip.key:127.0.0.1`
        o.tls_sni_cert_keys = vec![ferrokube_pki::serving::NamedCertKey {
            cert_file: cert,
            key_file: key,
            names: vec!["127.0.0.1".into()],
        }];
    })
    .await
    .unwrap();
    // The test server listens on 127.0.0.1; a client dialling the address sends no
    // server name.
    let by_address = served_certificate(
        &server,
        rustls_pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()),
    )
    .await;
    assert_eq!(by_address, ip_leaf);
    // A client that names a server gets the name's pair (here the default one).
    let named = served_certificate(
        &server,
        rustls_pki_types::ServerName::try_from("localhost").unwrap(),
    )
    .await;
    assert_ne!(named, ip_leaf);
    // (The test's own clients dial 127.0.0.1 too, and now meet a certificate of
    // another CA: no API request here.)
    server.stop().await;
}

/// A GET with these headers: status, content type and body.
async fn get_with(c: &kube::Client, path: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let (code, h, body) = TestApiServer::raw(c, "GET", path, headers, Vec::new())
        .await
        .unwrap();
    let ct = h
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (code, ct, String::from_utf8(body).unwrap())
}

#[tokio::test]
async fn json_is_indented_for_people_and_for_pretty() {
    let server = TestApiServer::start().await.unwrap();
    let c = &server.client;
    let curl = [("user-agent", "curl/8.5.0")];
    let path = "/api/v1/namespaces/default";
    let (code, _, compact) = get_with(c, path, &[]).await;
    assert_eq!(code, 200);
    assert!(compact.starts_with("{\""), "{compact}");
    let object: Value = serde_json::from_str(&compact).unwrap();

    // Indented as Go's json.MarshalIndent(obj, "", "  "): the same members in the same
    // order, two spaces a level, no newline at the end.
    let (code, ct, pretty) = get_with(c, path, &curl).await;
    assert_eq!((code, ct.as_str()), (200, "application/json"));
    assert!(pretty.starts_with("{\n  \""), "{pretty}");
    assert!(pretty.ends_with("\n}"), "{pretty}");
    assert!(
        pretty.contains("\n  \"kind\": \"Namespace\",\n"),
        "{pretty}"
    );
    assert!(pretty.contains("\n    \"labels\": {\n      \""), "{pretty}");
    assert_eq!(serde_json::from_str::<Value>(&pretty).unwrap(), object);
    let squeezed: String = {
        let mut in_string = false;
        let mut escaped = false;
        pretty
            .chars()
            .filter(|&ch| {
                if in_string {
                    in_string = escaped || ch != '"';
                    escaped = !escaped && ch == '\\';
                    true
                } else {
                    in_string = ch == '"';
                    !ch.is_whitespace()
                }
            })
            .collect()
    };
    assert_eq!(squeezed, compact.trim_end());

    for (query, ua, indented) in [
        ("?pretty=true", None, true),
        ("?pretty=1", None, true),
        ("?pretty=false", Some("curl/8.5.0"), false),
        // Not a Go bool: not pretty, whoever asks.
        ("?pretty=yes", Some("curl/8.5.0"), false),
        // Empty: the User-Agent decides.
        ("?pretty=", Some("Wget/1.21"), true),
        ("", Some("Mozilla/5.0 (X11; Linux x86_64)"), true),
        (
            "",
            Some("kubectl/v1.33.1 (linux/amd64) kubernetes/abcdef"),
            false,
        ),
    ] {
        let headers: Vec<(&str, &str)> = ua.map(|ua| ("user-agent", ua)).into_iter().collect();
        let (code, _, body) = get_with(c, &format!("{path}{query}"), &headers).await;
        assert_eq!(code, 200);
        assert_eq!(
            body.starts_with("{\n  "),
            indented,
            "{query} {ua:?}: {body}"
        );
    }

    // Lists, tables and errors too.
    let (_, _, list) = get_with(c, "/api/v1/namespaces", &curl).await;
    assert!(
        list.starts_with("{\n  \"kind\": \"NamespaceList\""),
        "{list}"
    );
    let table = [
        curl[0],
        ("accept", "application/json;as=Table;v=v1;g=meta.k8s.io"),
    ];
    let (_, ct, rows) = get_with(c, "/api/v1/namespaces", &table).await;
    // The media type is the encoding's, as upstream's serializer writes it.
    assert_eq!(ct, "application/json");
    assert!(rows.starts_with("{\n  \""), "{rows}");
    let (code, _, missing) = get_with(c, "/api/v1/namespaces/nowhere", &curl).await;
    assert_eq!(code, 404);
    assert!(missing.starts_with("{\n  \""), "{missing}");
    assert_eq!(
        serde_json::from_str::<Value>(&missing).unwrap()["reason"],
        "NotFound"
    );
    // YAML is YAML.
    let yaml = [curl[0], ("accept", "application/yaml")];
    let (_, _, as_yaml) = get_with(c, path, &yaml).await;
    assert!(as_yaml.starts_with("apiVersion: v1\n"), "{as_yaml}");

    // A watch's events stay one per line.
    let (code, _, events) = get_with(
        c,
        "/api/v1/namespaces?watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3Ddefault",
        &curl,
    )
    .await;
    assert_eq!(code, 200);
    let lines: Vec<&str> = events.lines().collect();
    assert_eq!(lines.len(), 1, "{events}");
    let event: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(event["type"], "ADDED");

    // Documents served as stored are left so, as upstream does.
    let (code, _, openapi) = get_with(c, "/openapi/v3", &curl).await;
    assert_eq!(code, 200);
    let (_, _, openapi_plain) = get_with(c, "/openapi/v3", &[]).await;
    assert_eq!(openapi, openapi_plain);
}

#[tokio::test]
async fn the_root_lists_the_served_paths() {
    let server = TestApiServer::start().await.unwrap();
    let (code, ct, body) = get_with(&server.client, "/", &[]).await;
    assert_eq!((code, ct.as_str()), (200, "application/json"));
    // Upstream writes the index indented, whoever asks.
    assert!(body.starts_with("{\n  \"paths\": [\n    \"/"), "{body}");
    let listed: Value = serde_json::from_str(&body).unwrap();
    let paths: Vec<&str> = listed["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    let mut sorted = paths.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(paths, sorted);
    for want in [
        "/api",
        "/api/v1",
        "/apis",
        "/apis/",
        "/apis/apps",
        "/apis/apps/v1",
        "/apis/rbac.authorization.k8s.io/v1",
        "/healthz",
        "/healthz/etcd",
        "/livez/ping",
        "/readyz/shutdown",
        "/metrics",
        "/openapi/v2",
        "/openapi/v3",
        "/version",
    ] {
        assert!(paths.contains(&want), "{want} not in {paths:?}");
    }
    // Every listed path answers.
    for path in &paths {
        let (code, _, _) = get_with(&server.client, path, &[]).await;
        assert_eq!(code, 200, "{path}");
    }
    let (code, _, same) = get_with(&server.client, "/index.html", &[]).await;
    assert_eq!((code, same.as_str()), (200, body.as_str()));
    // No default role grants it.
    let nobody = server.client_as("nobody", &[]).await.unwrap();
    let (code, _, _) = get_with(&nobody, "/", &[]).await;
    assert_eq!(code, 403);
}
