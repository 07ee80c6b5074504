//! The bootstrap token controllers (upstream `pkg/controller/bootstrap`), both off
//! unless named in `--controllers` (kubeadm passes `*,bootstrapsigner,tokencleaner`):
//!
//! * [`TokenCleanerController`] (`token-cleaner-controller`, upstream
//!   `tokencleaner.go`): deletes `bootstrap.kubernetes.io/token` Secrets in
//!   `kube-system` once their `expiration` has passed, with a UID precondition, and
//!   looks again at the moment a token expires.
//! * [`BootstrapSignerController`] (`bootstrap-signer-controller`, upstream
//!   `bootstrapsigner.go`): keeps the ConfigMap `kube-public/cluster-info` signed: one
//!   `jws-kubeconfig-<token id>` key per valid token Secret marked
//!   `usage-bootstrap-signing: "true"`, holding the detached JWS of the ConfigMap's
//!   `kubeconfig` ([`detached_signature`], upstream `k8s.io/cluster-bootstrap/token/jws`).
//!   `kubeadm join` checks the cluster it discovers with that signature.
//!
//! Pure parts, as upstream's helpers in `k8s.io/cluster-bootstrap/util/secrets` and
//! `pkg/controller/bootstrap/util.go`: [`expiration`], [`parse_secret_name`],
//! [`signing_token`], [`detached_signature`], [`sign`].
//!
//! One addition: the signer also looks again when the first signing token expires,
//! so an expired token's signature goes even without the token cleaner (upstream
//! waits for the Secret's deletion).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, key_of};
use ferrokube_client::workqueue::WorkQueue;

use crate::replicaset::{delete_exactly, is_conflict, is_not_found};
use crate::{Action, Controller, Error, Result, enqueue_live, split_key};

/// Upstream `api.SecretTypeBootstrapToken`.
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// Where the token Secrets live (upstream `TokenSecretNamespace` default).
pub const TOKEN_NAMESPACE: &str = "kube-system";
/// Upstream `api.BootstrapTokenSecretPrefix`.
pub const SECRET_PREFIX: &str = "bootstrap-token-";
/// Upstream `api.BootstrapTokenIDKey`.
pub const TOKEN_ID_KEY: &str = "token-id";
/// Upstream `api.BootstrapTokenSecretKey`.
pub const TOKEN_SECRET_KEY: &str = "token-secret";
/// Upstream `api.BootstrapTokenExpirationKey`.
pub const EXPIRATION_KEY: &str = "expiration";
/// Upstream `api.BootstrapTokenUsageSigningKey`.
pub const USAGE_SIGNING_KEY: &str = "usage-bootstrap-signing";
/// The signed ConfigMap's namespace and name (upstream `DefaultSignerOptions`).
pub const CLUSTER_INFO_NAMESPACE: &str = "kube-public";
pub const CLUSTER_INFO: &str = "cluster-info";
/// Upstream `api.KubeConfigKey`: the signed content.
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// Upstream `api.JWSSignatureKeyPrefix`.
pub const JWS_PREFIX: &str = "jws-kubeconfig-";

/// Upstream `secrets.GetData`: the value of `key`, `""` when absent.
fn data(secret: &Secret, key: &str) -> String {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        .unwrap_or_default()
}

fn is_token_secret(secret: &Secret) -> bool {
    secret.type_.as_deref() == Some(SECRET_TYPE)
        && secret.metadata.namespace.as_deref() == Some(TOKEN_NAMESPACE)
}

/// A token Secret's expiry (upstream `secrets.GetExpiration`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// No `expiration`: the token never expires.
    Never,
    /// Expires after this long.
    In(Duration),
    /// Expired, or an `expiration` that does not parse (upstream treats it so).
    Expired,
}

/// Upstream `secrets.GetExpiration` at `now`.
pub fn expiration(secret: &Secret, now: Timestamp) -> Expiry {
    let raw = data(secret, EXPIRATION_KEY);
    if raw.is_empty() {
        return Expiry::Never;
    }
    let Ok(at) = raw.parse::<Timestamp>() else {
        tracing::debug!(secret = ?secret.metadata.name, expiration = %raw,
            "unparseable expiration time in a bootstrap token secret; treating it as expired");
        return Expiry::Expired;
    };
    match Duration::try_from(at.duration_since(now)) {
        Ok(left) if !left.is_zero() => Expiry::In(left),
        _ => Expiry::Expired,
    }
}

/// Upstream `secrets.ParseName`: the token id of a Secret named
/// `bootstrap-token-<[a-z0-9]{6}>`.
pub fn parse_secret_name(name: &str) -> Option<&str> {
    let id = name.strip_prefix(SECRET_PREFIX)?;
    (id.len() == 6
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
    .then_some(id)
}

/// Upstream `validateSecretForSigning`: the (token id, token secret) of a Secret that
/// may sign at `now`.
pub fn signing_token(secret: &Secret, now: Timestamp) -> Option<(String, String)> {
    let name_id = parse_secret_name(secret.metadata.name.as_deref().unwrap_or_default())?;
    let id = data(secret, TOKEN_ID_KEY);
    if id.is_empty() || id != name_id {
        return None;
    }
    let token_secret = data(secret, TOKEN_SECRET_KEY);
    if token_secret.is_empty()
        || expiration(secret, now) == Expiry::Expired
        || data(secret, USAGE_SIGNING_KEY) != "true"
    {
        return None;
    }
    Some((id, token_secret))
}

/// Upstream `jws.ComputeDetachedSignature` (RFC 7515 appendix F): the compact HS256
/// JWS of `content` with protected header `{"alg":"HS256","kid":<token id>}`, keyed
/// with the token secret, its payload part left out (`header..signature`).
///
/// Upstream zero-pads a secret shorter than 32 bytes to 32 for go-jose's key length
/// check; HMAC zero-pads its key to the 64-byte SHA-256 block anyway, so the
/// unpadded key gives the same signature.
pub fn detached_signature(content: &str, token_id: &str, token_secret: &str) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    // Written out rather than serialized: the member order must be go-jose's (sorted).
    let kid = serde_json::Value::String(token_id.to_string());
    let header = b64.encode(format!(r#"{{"alg":"HS256","kid":{kid}}}"#));
    let signing_input = format!("{header}.{}", b64.encode(content));
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, token_secret.as_bytes());
    let tag = ring::hmac::sign(&key, signing_input.as_bytes());
    format!("{header}..{}", b64.encode(tag.as_ref()))
}

/// Upstream `Signer.signConfigMap` as a pure function: `cm` with one signature per
/// token of `tokens` (id → secret) and no other `jws-kubeconfig-*` key, or `None`
/// when that is what it already holds (nothing to write) or it has no `kubeconfig`.
pub fn sign(cm: &ConfigMap, tokens: &BTreeMap<String, String>) -> Option<ConfigMap> {
    let data = cm.data.as_ref()?;
    let content = data.get(KUBECONFIG_KEY)?;
    let mut new_data: BTreeMap<String, String> = data
        .iter()
        .filter(|(k, _)| !k.starts_with(JWS_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (id, secret) in tokens {
        new_data.insert(
            format!("{JWS_PREFIX}{id}"),
            detached_signature(content, id, secret),
        );
    }
    if &new_data == data {
        return None;
    }
    let mut signed = cm.clone();
    signed.data = Some(new_data);
    Some(signed)
}

/// The token cleaner.
pub struct TokenCleanerController {
    client: kube::Client,
    secrets: Store<Secret>,
}

impl TokenCleanerController {
    pub fn new(factory: &SharedInformerFactory, client: kube::Client) -> Arc<Self> {
        Arc::new(TokenCleanerController {
            client,
            secrets: factory.informer::<Secret>().store(),
        })
    }
}

#[async_trait::async_trait]
impl Controller for TokenCleanerController {
    fn name(&self) -> &'static str {
        "token_cleaner"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        enqueue_live(factory, queue, is_token_secret);
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (ns, name) = split_key(key);
        let ns = ns.ok_or_else(|| Error::Invalid(format!("key {key:?} has no namespace")))?;
        let Some(secret) = self.secrets.get(key) else {
            return Ok(Action::Done);
        };
        if !is_token_secret(&secret) {
            return Ok(Action::Done);
        }
        match expiration(&secret, Timestamp::now()) {
            Expiry::Never => Ok(Action::Done),
            Expiry::In(left) => Ok(Action::RequeueAfter(left)),
            Expiry::Expired => {
                tracing::info!(secret = key, "deleting an expired bootstrap token secret");
                let api: Api<Secret> = Api::namespaced(self.client.clone(), ns);
                // Only the Secret judged expired: one recreated under its name stays.
                delete_exactly(&api, name, secret.metadata.uid.clone()).await?;
                Ok(Action::Done)
            }
        }
    }
}

/// The bootstrap signer. Its only key is `kube-public/cluster-info`: every relevant
/// event maps to it, so the queue collapses bursts into one signing pass.
pub struct BootstrapSignerController {
    client: kube::Client,
    secrets: Store<Secret>,
    configmaps: Store<ConfigMap>,
}

impl BootstrapSignerController {
    pub fn new(factory: &SharedInformerFactory, client: kube::Client) -> Arc<Self> {
        Arc::new(BootstrapSignerController {
            client,
            secrets: factory.informer::<Secret>().store(),
            configmaps: factory.informer::<ConfigMap>().store(),
        })
    }

    /// Upstream `getTokens`: the signing tokens by id, and when the first of them
    /// expires.
    fn tokens(&self, now: Timestamp) -> (BTreeMap<String, String>, Option<Duration>) {
        let mut tokens = BTreeMap::new();
        let mut first_expiry: Option<Duration> = None;
        for secret in self.secrets.list_namespace(TOKEN_NAMESPACE) {
            if !is_token_secret(&secret) {
                continue;
            }
            let Some((id, token_secret)) = signing_token(&secret, now) else {
                continue;
            };
            if let Expiry::In(left) = expiration(&secret, now) {
                first_expiry = Some(first_expiry.map_or(left, |f| f.min(left)));
            }
            // One Secret name per id makes duplicates impossible; first wins, as upstream.
            tokens.entry(id).or_insert(token_secret);
        }
        (tokens, first_expiry)
    }
}

#[async_trait::async_trait]
impl Controller for BootstrapSignerController {
    fn name(&self) -> &'static str {
        "bootstrap_signer_queue"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let cluster_info = key_of(Some(CLUSTER_INFO_NAMESPACE), CLUSTER_INFO);
        let q = queue.clone();
        let key = cluster_info.clone();
        factory.informer::<ConfigMap>().add_event_handler(
            move |n: Notification<ConfigMap>| {
                if !matches!(n, Notification::Deleted { .. }) {
                    let cm = n.object();
                    if cm.metadata.namespace.as_deref() == Some(CLUSTER_INFO_NAMESPACE)
                        && cm.metadata.name.as_deref() == Some(CLUSTER_INFO)
                    {
                        q.add(key.clone());
                    }
                }
            },
            None,
        );
        // Deletions too: a token's signature goes with its Secret.
        let q = queue.clone();
        factory.informer::<Secret>().add_event_handler(
            move |n: Notification<Secret>| {
                if is_token_secret(n.object()) {
                    q.add(cluster_info.clone());
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(cm) = self.configmaps.get(key) else {
            return Ok(Action::Done);
        };
        let (tokens, first_expiry) = self.tokens(Timestamp::now());
        let requeue = first_expiry.map_or(Action::Done, Action::RequeueAfter);
        let Some(signed) = sign(&cm, &tokens) else {
            return Ok(requeue);
        };
        let (ns, name) = split_key(key);
        let api: Api<ConfigMap> =
            Api::namespaced(self.client.clone(), ns.unwrap_or(CLUSTER_INFO_NAMESPACE));
        // `update` (not patch): what the bootstrap-signer role grants on cluster-info.
        match api.replace(name, &PostParams::default(), &signed).await {
            Ok(_) => Ok(requeue),
            // A stale cache: the event of the newer ConfigMap requeues it; gone: nothing
            // to sign.
            Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(requeue),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2030-01-01T00:00:00Z".parse().unwrap()
    }

    fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
        let data: serde_json::Map<String, serde_json::Value> = data
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    json!(base64::engine::general_purpose::STANDARD.encode(v)),
                )
            })
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": TOKEN_NAMESPACE},
            "type": SECRET_TYPE,
            "data": data,
        }))
        .unwrap()
    }

    fn signing(extra: &[(&'static str, &'static str)]) -> Secret {
        let mut data = vec![
            ("token-id", "abcdef"),
            ("token-secret", "0123456789abcdef"),
            ("usage-bootstrap-signing", "true"),
        ];
        data.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
        data.extend_from_slice(extra);
        secret("bootstrap-token-abcdef", &data)
    }

    #[test]
    fn signatures_match_upstreams_vectors() {
        // k8s.io/cluster-bootstrap/token/jws/jws_test.go.
        let content = "Hello from the other side. I must have called a thousand times.";
        assert_eq!(
            detached_signature(content, "joshua", "my voice is my passcode"),
            "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8"
        );
        assert_eq!(
            detached_signature("", "joshua", "my voice is my passcode"),
            "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..7Ui1ALizW4jXphVUB7xUqC9vLYLL9RZeOFfVLoB7Tgk"
        );
        assert_eq!(
            detached_signature(content, "joshua", ""),
            "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..UfkqvDGiIFxrMnFseDj9LYJOLNrvjW8aHhF71mvvAs8"
        );
    }

    #[test]
    fn expirations() {
        assert_eq!(expiration(&signing(&[]), now()), Expiry::Never);
        let s = signing(&[("expiration", "2030-01-01T00:01:00Z")]);
        assert_eq!(expiration(&s, now()), Expiry::In(Duration::from_secs(60)));
        for past in ["2030-01-01T00:00:00Z", "2029-01-01T00:00:00Z", "soon"] {
            let s = signing(&[("expiration", past)]);
            assert_eq!(expiration(&s, now()), Expiry::Expired, "{past}");
        }
    }

    #[test]
    fn secret_names() {
        assert_eq!(parse_secret_name("bootstrap-token-abc123"), Some("abc123"));
        for bad in [
            "bootstrap-token-",
            "bootstrap-token-abc12",
            "bootstrap-token-abc1234",
            "bootstrap-token-ABC123",
            "bootstrap-abc123",
            "xbootstrap-token-abc123",
        ] {
            assert_eq!(parse_secret_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn tokens_that_may_sign() {
        assert_eq!(
            signing_token(&signing(&[]), now()),
            Some(("abcdef".into(), "0123456789abcdef".into()))
        );
        let later = signing(&[("expiration", "2030-02-01T00:00:00Z")]);
        assert!(signing_token(&later, now()).is_some());
        for (why, s) in [
            (
                "expired",
                signing(&[("expiration", "2029-02-01T00:00:00Z")]),
            ),
            (
                "not for signing",
                signing(&[("usage-bootstrap-signing", "1")]),
            ),
            (
                "id differs from the name",
                signing(&[("token-id", "abcdeg")]),
            ),
            ("no id", signing(&[("token-id", "")])),
            ("no secret", signing(&[("token-secret", "")])),
            (
                "bad name",
                secret(
                    "bootstrap-token-abcdefg",
                    &[
                        ("token-id", "abcdefg"),
                        ("token-secret", "0123456789abcdef"),
                        ("usage-bootstrap-signing", "true"),
                    ],
                ),
            ),
        ] {
            assert_eq!(signing_token(&s, now()), None, "{why}");
        }
    }

    fn cm(data: serde_json::Value) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": CLUSTER_INFO, "namespace": CLUSTER_INFO_NAMESPACE,
                         "resourceVersion": "5"},
            "data": data,
        }))
        .unwrap()
    }

    #[test]
    fn signing_adds_replaces_and_removes_signatures() {
        let tokens = BTreeMap::from([
            ("abcdef".to_string(), "0123456789abcdef".to_string()),
            ("ghijkl".to_string(), "fedcba9876543210".to_string()),
        ]);
        let original = cm(json!({"kubeconfig": "kc", "other": "kept",
                                 "jws-kubeconfig-gone00": "stale",
                                 "jws-kubeconfig-abcdef": "wrong"}));
        let signed = sign(&original, &tokens).expect("a change");
        let data = signed.data.as_ref().unwrap();
        assert_eq!(
            data.keys().collect::<Vec<_>>(),
            vec![
                "jws-kubeconfig-abcdef",
                "jws-kubeconfig-ghijkl",
                "kubeconfig",
                "other"
            ]
        );
        assert_eq!(
            data["jws-kubeconfig-abcdef"],
            detached_signature("kc", "abcdef", "0123456789abcdef")
        );
        assert_eq!(signed.metadata.resource_version.as_deref(), Some("5"));
        // Current: nothing to write.
        assert_eq!(sign(&signed, &tokens), None);
        // No tokens left: the signatures go.
        let unsigned = sign(&signed, &BTreeMap::new()).expect("a change");
        assert_eq!(
            unsigned.data.unwrap().keys().collect::<Vec<_>>(),
            vec!["kubeconfig", "other"]
        );
        // Nothing to sign without a kubeconfig.
        assert_eq!(sign(&cm(json!({"x": "y"})), &tokens), None);
        assert_eq!(sign(&cm(json!(null)), &tokens), None);
    }
}
