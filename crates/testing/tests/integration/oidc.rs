//! `--oidc-*` end to end: a fake OpenID Connect issuer served by the test over HTTPS
//! on loopback (discovery document and JWKS, its serving certificate from a test CA
//! given as `--oidc-ca-file`), ID tokens signed here with ES256, seen through
//! SelfSubjectReviews: a valid token is the issuer-prefixed user with the prefixed
//! groups; a token failing a check is a 401; a token signed with a key the issuer
//! rotated in after the apiserver fetched the keys passes once the apiserver has
//! fetched them again. Also: the apiserver starts while the issuer is down (tokens
//! of the issuer are refused meanwhile), and an issuer URL without a client id stops
//! the start, as upstream. `--authentication-config`: two issuers, each with its CA
//! and audiences, their claims validated and mapped by CEL expressions and claims.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ferrokube_apiserver::Options;
use ferrokube_testing::{TestApiServer, WebhookServer};
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};

const WHOAMI: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
const CLIENT_ID: &str = "kubernetes";
/// Longest wait for the apiserver to have (re-)fetched the issuer's keys.
const KEYS_DEADLINE: Duration = Duration::from_secs(30);

/// The fake issuer's URL and its CA file. The options hook is a plain `fn`, so the
/// issuer, started first, is published here.
static ISSUER: OnceLock<(String, PathBuf)> = OnceLock::new();

fn with_issuer(o: &mut Options) {
    let Some((url, ca)) = ISSUER.get() else {
        return;
    };
    o.oidc.issuer_url = url.clone();
    o.oidc.client_id = CLIENT_ID.into();
    o.oidc.groups_claim = "groups".into();
    o.oidc.groups_prefix = "oidc:".into();
    o.oidc.signing_algs = vec!["ES256".into()];
    o.oidc_ca_file = Some(ca.clone());
}

/// An ES256 signing key of the fake issuer and its JWK.
struct IssuerKey {
    kid: String,
    key: Arc<dyn rustls::sign::SigningKey>,
    jwk: Value,
}

impl IssuerKey {
    fn generate(kid: &str) -> IssuerKey {
        let (private_pem, _) = ferrokube_pki::generate_signing_key_pair().unwrap();
        let der = PrivateKeyDer::from_pem_slice(private_pem.as_bytes()).unwrap();
        let key = rustls::crypto::ring::sign::any_ecdsa_type(&der).unwrap();
        let spki = key.public_key().unwrap();
        // A P-256 SubjectPublicKeyInfo ends with the uncompressed point's X and Y.
        let point = &spki.as_ref()[spki.as_ref().len() - 64..];
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
            "x": URL_SAFE_NO_PAD.encode(&point[..32]),
            "y": URL_SAFE_NO_PAD.encode(&point[32..]),
        });
        IssuerKey {
            kid: kid.into(),
            key,
            jwk,
        }
    }

    fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": "ES256", "kid": self.kid, "typ": "JWT"});
        let message = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signer = self
            .key
            .choose_scheme(&[rustls::SignatureScheme::ECDSA_NISTP256_SHA256])
            .unwrap();
        let der = signer.sign(message.as_bytes()).unwrap();
        format!("{message}.{}", URL_SAFE_NO_PAD.encode(jws_signature(&der)))
    }
}

/// JWS wants ECDSA signatures as R || S, 32 bytes each; rustls gives the DER
/// `SEQUENCE { INTEGER r, INTEGER s }` (short lengths for P-256).
fn jws_signature(der: &[u8]) -> Vec<u8> {
    assert_eq!(der[0], 0x30, "not a DER sequence");
    let mut at = 2;
    let mut out = Vec::with_capacity(64);
    for _ in 0..2 {
        assert_eq!(der[at], 0x02, "not a DER integer");
        let len = der[at + 1] as usize;
        let int = &der[at + 2..at + 2 + len];
        let int = &int[int.iter().take_while(|b| **b == 0).count()..];
        out.extend(std::iter::repeat_n(0u8, 32 - int.len()));
        out.extend_from_slice(int);
        at += 2 + len;
    }
    out
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn id_token_claims(issuer: &str, sub: &str) -> Value {
    json!({
        "iss": issuer, "aud": CLIENT_ID, "sub": sub,
        "groups": ["dev", "ops"],
        "iat": now(), "exp": now() + 600,
    })
}

/// The fake issuer: its discovery document and, at `/keys`, the current key set
/// (which the test replaces), counting the key set fetches.
struct FakeIssuer {
    server: WebhookServer,
    url: String,
    jwks: Arc<Mutex<Value>>,
    key_fetches: Arc<AtomicUsize>,
}

impl FakeIssuer {
    async fn start(keys: &[&IssuerKey]) -> FakeIssuer {
        let url_cell: Arc<OnceLock<String>> = Arc::new(OnceLock::new());
        let jwks = Arc::new(Mutex::new(Value::Null));
        let key_fetches = Arc::new(AtomicUsize::new(0));
        let (cell, set, fetches) = (url_cell.clone(), jwks.clone(), key_fetches.clone());
        let server = WebhookServer::start(move |path: String, _body: Value| {
            let issuer = cell.get().cloned().unwrap_or_default();
            let answer = match path.as_str() {
                "/.well-known/openid-configuration" => json!({
                    "issuer": issuer,
                    "jwks_uri": format!("{issuer}/keys"),
                    "id_token_signing_alg_values_supported": ["ES256"],
                }),
                "/keys" => {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    set.lock().map(|v| v.clone()).unwrap_or(Value::Null)
                }
                _ => json!({}),
            };
            async move { answer }
        })
        .await
        .unwrap();
        let url = server.url("");
        url_cell.set(url.clone()).unwrap();
        let issuer = FakeIssuer {
            server,
            url,
            jwks,
            key_fetches,
        };
        issuer.publish(keys);
        issuer
    }

    fn publish(&self, keys: &[&IssuerKey]) {
        *self.jwks.lock().unwrap() =
            json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()});
    }
}

/// A SelfSubjectReview with `token`: the status code and the body.
async fn whoami(server: &TestApiServer, token: &str) -> (u16, Value) {
    server.review_self_with_token(token).await.unwrap()
}

/// Retries the review until it is a 201 or [`KEYS_DEADLINE`] passes.
async fn whoami_eventually(server: &TestApiServer, token: &str) -> (u16, Value) {
    let deadline = tokio::time::Instant::now() + KEYS_DEADLINE;
    loop {
        let (code, body) = whoami(server, token).await;
        if code == 201 || tokio::time::Instant::now() >= deadline {
            return (code, body);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn id_tokens_of_the_issuer_authenticate_and_key_rotation_is_followed() {
    let first = IssuerKey::generate("key-1");
    let issuer = FakeIssuer::start(&[&first]).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("oidc-ca.crt");
    std::fs::write(&ca, &issuer.server.ca_pem).unwrap();
    ISSUER.set((issuer.url.clone(), ca)).unwrap();
    let server = TestApiServer::start_with(with_issuer).await.unwrap();

    // The keys are fetched in the background after the start.
    let token = first.sign(&id_token_claims(&issuer.url, "alice"));
    let (code, review) = whoami_eventually(&server, &token).await;
    assert_eq!(code, 201, "{review}");
    let user = &review["status"]["userInfo"];
    // No --oidc-username-prefix and a claim other than email: the issuer URL and '#'.
    assert_eq!(user["username"], format!("{}#alice", issuer.url));
    assert_eq!(
        user["groups"],
        json!(["oidc:dev", "oidc:ops", "system:authenticated"])
    );
    assert!(user.get("uid").is_none_or(Value::is_null), "{user}");

    // Tokens of the issuer failing a check, and a token of nobody's issuer.
    let mut wrong_audience = id_token_claims(&issuer.url, "alice");
    wrong_audience["aud"] = json!(["someone-else"]);
    let mut expired = id_token_claims(&issuer.url, "alice");
    expired["exp"] = json!(now() - 60);
    let stranger = IssuerKey::generate("key-1");
    let other_issuer = id_token_claims("https://other.example", "alice");
    for (token, why) in [
        (first.sign(&wrong_audience), "wrong audience"),
        (first.sign(&expired), "expired"),
        (
            stranger.sign(&id_token_claims(&issuer.url, "mallory")),
            "signed by another key under the issuer's key id",
        ),
        (first.sign(&other_issuer), "another issuer"),
        (format!("{token}x"), "signature changed"),
    ] {
        let (code, body) = whoami(&server, &token).await;
        assert_eq!(code, 401, "{why}: {body}");
        assert_eq!(body["reason"], "Unauthorized", "{why}");
    }

    // The issuer rotates: only a new key is published. A token with the new key id
    // makes the apiserver fetch the keys again, after which it passes.
    let fetches_before = issuer.key_fetches.load(Ordering::SeqCst);
    let second = IssuerKey::generate("key-2");
    issuer.publish(&[&second]);
    let rotated = second.sign(&id_token_claims(&issuer.url, "bob"));
    let (code, review) = whoami_eventually(&server, &rotated).await;
    assert_eq!(code, 201, "{review}");
    assert_eq!(
        review["status"]["userInfo"]["username"],
        format!("{}#bob", issuer.url)
    );
    assert!(issuer.key_fetches.load(Ordering::SeqCst) > fetches_before);
    // The dropped key no longer verifies.
    let (code, body) = whoami(&server, &token).await;
    assert_eq!(code, 401, "{body}");

    server.stop().await;
}

#[tokio::test]
async fn an_unreachable_issuer_does_not_stop_the_start_but_its_tokens_fail() {
    let server = TestApiServer::start_with(|o| {
        // Nothing listens on the discard port of loopback.
        o.oidc.issuer_url = "https://127.0.0.1:9".into();
        o.oidc.client_id = CLIENT_ID.into();
    })
    .await
    .unwrap();
    let key = IssuerKey::generate("k");
    let (code, body) = whoami(
        &server,
        &key.sign(&id_token_claims("https://127.0.0.1:9", "alice")),
    )
    .await;
    assert_eq!(code, 401, "{body}");
    // Everything else authenticates as before.
    let (code, _, _) = TestApiServer::send_json(
        &server.client,
        "POST",
        WHOAMI,
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
    )
    .await
    .unwrap();
    assert_eq!(code, 201);
    server.stop().await;
}

#[tokio::test]
async fn an_issuer_without_a_client_id_stops_the_start() {
    let err = TestApiServer::start_with(|o| o.oidc.issuer_url = "https://issuer.example".into())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("oidc-issuer-url and oidc-client-id must be specified together"),
        "{err}"
    );
    let err = TestApiServer::start_with(|o| {
        o.oidc.issuer_url = "http://issuer.example".into();
        o.oidc.client_id = CLIENT_ID.into();
    })
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("URL scheme must be https"),
        "{err}"
    );
}

/// The `--authentication-config` file of the structured test.
static AUTHENTICATION_CONFIG: OnceLock<PathBuf> = OnceLock::new();

fn with_authentication_config(o: &mut Options) {
    if let Some(path) = AUTHENTICATION_CONFIG.get() {
        o.authentication_config_file = Some(path.clone());
    }
}

#[tokio::test]
async fn an_authentication_config_maps_the_claims_of_several_issuers() {
    let first_key = IssuerKey::generate("first-key");
    let first = FakeIssuer::start(&[&first_key]).await;
    let second_key = IssuerKey::generate("second-key");
    let second = FakeIssuer::start(&[&second_key]).await;
    let config = json!({
    "apiVersion": "apiserver.config.k8s.io/v1beta1", "kind": "AuthenticationConfiguration",
    "jwt": [
        {"issuer": {"url": first.url, "certificateAuthority": first.server.ca_pem,
                "audiences": [CLIENT_ID, "other"], "audienceMatchPolicy": "MatchAny"},
         "claimValidationRules": [
            {"expression": "claims.sub != 'mallory'", "message": "mallory is banned"}],
         "claimMappings": {
            "username": {"expression": "'first:' + claims.sub"},
            "groups": {"claim": "groups", "prefix": "first:"},
            "uid": {"claim": "sub"},
            "extra": [{"key": "example.com/tenant", "valueExpression": "claims.tenant"}]}},
        {"issuer": {"url": second.url, "certificateAuthority": second.server.ca_pem,
                "discoveryURL": format!("{}/.well-known/openid-configuration", second.url),
                "audiences": ["second"]},
         "claimMappings": {"username": {"claim": "email", "prefix": ""}}},
    ]});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("authn.yaml");
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    AUTHENTICATION_CONFIG.set(path).unwrap();
    let server = TestApiServer::start_with(with_authentication_config)
        .await
        .unwrap();

    // The first issuer: any of its audiences, the user mapped by the expressions.
    let mut claims = id_token_claims(&first.url, "alice");
    claims["aud"] = json!("other");
    claims["groups"] = json!(["dev"]);
    claims["tenant"] = json!("acme");
    let (code, review) = whoami_eventually(&server, &first_key.sign(&claims)).await;
    assert_eq!(code, 201, "{review}");
    let user = &review["status"]["userInfo"];
    assert_eq!(user["username"], "first:alice");
    assert_eq!(user["uid"], "alice");
    assert_eq!(user["groups"], json!(["first:dev", "system:authenticated"]));
    assert_eq!(user["extra"]["example.com/tenant"], json!(["acme"]));
    // A claim validation rule refuses mallory.
    let mut mallory = claims.clone();
    mallory["sub"] = json!("mallory");
    let (code, body) = whoami(&server, &first_key.sign(&mallory)).await;
    assert_eq!(code, 401, "{body}");

    // The second issuer: the verified email is the username, no prefix.
    let mut claims = id_token_claims(&second.url, "x");
    claims["aud"] = json!("second");
    claims["email"] = json!("bob@example.com");
    claims["email_verified"] = json!(true);
    let (code, review) = whoami_eventually(&server, &second_key.sign(&claims)).await;
    assert_eq!(code, 201, "{review}");
    assert_eq!(review["status"]["userInfo"]["username"], "bob@example.com");
    claims["email_verified"] = json!(false);
    let (code, body) = whoami(&server, &second_key.sign(&claims)).await;
    assert_eq!(code, 401, "{body}");
    // A token of the first issuer for the second's audience only: refused.
    let mut wrong = id_token_claims(&first.url, "alice");
    wrong["aud"] = json!("second");
    let (code, body) = whoami(&server, &first_key.sign(&wrong)).await;
    assert_eq!(code, 401, "{body}");

    server.stop().await;
}

#[tokio::test]
async fn the_authentication_config_and_the_oidc_flags_exclude_each_other() {
    let err = TestApiServer::start_with(|o| {
        o.oidc.issuer_url = "https://issuer.example".into();
        o.oidc.client_id = CLIENT_ID.into();
        o.authentication_config_file = Some("/nonexistent/authn.yaml".into());
    })
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("authentication-config file and oidc-* flags are mutually exclusive"),
        "{err}"
    );
}

/// The `--authentication-config` file of the reload test.
static RELOADED_AUTHENTICATION_CONFIG: OnceLock<PathBuf> = OnceLock::new();

fn with_reloaded_authentication_config(o: &mut Options) {
    o.authentication_config_file = RELOADED_AUTHENTICATION_CONFIG.get().cloned();
}

#[tokio::test]
async fn a_changed_authentication_config_replaces_the_issuers_while_the_server_runs() {
    let first_key = IssuerKey::generate("first-key");
    let first = FakeIssuer::start(&[&first_key]).await;
    let second_key = IssuerKey::generate("second-key");
    let second = FakeIssuer::start(&[&second_key]).await;
    let config = |issuer: &FakeIssuer, prefix: &str| {
        json!({
        "apiVersion": "apiserver.config.k8s.io/v1beta1", "kind": "AuthenticationConfiguration",
        "jwt": [{"issuer": {"url": issuer.url, "certificateAuthority": issuer.server.ca_pem,
                    "audiences": [CLIENT_ID]},
                 "claimMappings": {"username": {"claim": "sub", "prefix": prefix}}}]})
        .to_string()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("authn.yaml");
    std::fs::write(&path, config(&first, "first:")).unwrap();
    RELOADED_AUTHENTICATION_CONFIG.set(path.clone()).unwrap();
    let server = TestApiServer::start_with(with_reloaded_authentication_config)
        .await
        .unwrap();
    let first_token = first_key.sign(&id_token_claims(&first.url, "alice"));
    let second_token = second_key.sign(&id_token_claims(&second.url, "bob"));
    let (code, review) = whoami_eventually(&server, &first_token).await;
    assert_eq!(code, 201, "{review}");
    assert_eq!(review["status"]["userInfo"]["username"], "first:alice");
    assert_eq!(whoami(&server, &second_token).await.0, 401);

    // The second issuer in place of the first, once the file is read again (every
    // 5 s) and the second issuer's keys are fetched.
    std::fs::write(&path, config(&second, "second:")).unwrap();
    let (code, review) = whoami_eventually(&server, &second_token).await;
    assert_eq!(code, 201, "{review}");
    assert_eq!(review["status"]["userInfo"]["username"], "second:bob");
    assert_eq!(whoami(&server, &first_token).await.0, 401);

    // A file that does not validate leaves the second issuer in use.
    std::fs::write(
        &path,
        "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: Nonsense\n",
    )
    .unwrap();
    let deadline = tokio::time::Instant::now() + KEYS_DEADLINE;
    loop {
        let (code, _, body) = TestApiServer::raw(&server.client, "GET", "/metrics", &[], vec![])
            .await
            .unwrap();
        assert_eq!(code, 200);
        let metrics = String::from_utf8(body).unwrap();
        let count = |status: &str| {
            metrics.lines().find_map(|l| {
                (l.starts_with(
                    "apiserver_authentication_config_controller_automatic_reloads_total{",
                ) && l.contains(&format!("status=\"{status}\"")))
                .then(|| l.rsplit(' ').next().unwrap_or_default().to_string())
            })
        };
        if count("failure").is_some() {
            assert_eq!(count("success").as_deref(), Some("1"));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bad file was not tried"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(whoami(&server, &second_token).await.0, 201);
    server.stop().await;
}
