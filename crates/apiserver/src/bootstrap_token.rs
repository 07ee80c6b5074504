//! `--enable-bootstrap-token-auth`: bearer tokens `<id>.<secret>` backed by
//! `bootstrap.kubernetes.io/token` Secrets `bootstrap-token-<id>` in `kube-system`
//! authenticate as `system:bootstrap:<id>` in `system:bootstrappers` (plus the
//! Secret's `auth-extra-groups`). Kubelets use them for TLS bootstrapping (`kubeadm
//! join`).
//!
//! Follows upstream `plugin/pkg/auth/authenticator/token/bootstrap/bootstrap.go` and
//! the helpers of `k8s.io/cluster-bootstrap` (`token/api`, `util/tokens`,
//! `util/secrets`, `token/util`). The Secret is read from the registry's watch cache,
//! as upstream reads it from an informer's lister.
//!
//! As upstream, a token that is not in bootstrap form is not ours (`Ok(None)`), and a
//! token in that form whose Secret is missing or does not accept it is "not
//! authenticated" (`Ok(None)` too, never an error): the union then answers 401,
//! because a presented bearer token that nobody accepts is never anonymous.

use std::collections::BTreeSet;
use std::sync::Arc;

use base64::Engine as _;
use ferrokube_auth::authn::Bearer;
use ferrokube_auth::{AuthError, AuthRequest, Authenticator, UserInfo};
use ferrokube_registry::{Registry, Store};
use serde_json::Value;

/// Upstream `api.BootstrapTokenSecretPrefix`.
const SECRET_PREFIX: &str = "bootstrap-token-";
/// Upstream `api.SecretTypeBootstrapToken`.
pub(crate) const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// Where the Secrets live (upstream's lister is for `kube-system`).
const NAMESPACE: &str = "kube-system";
const TOKEN_ID_KEY: &str = "token-id";
const TOKEN_SECRET_KEY: &str = "token-secret";
const EXPIRATION_KEY: &str = "expiration";
const EXTRA_GROUPS_KEY: &str = "auth-extra-groups";
const USAGE_AUTHENTICATION_KEY: &str = "usage-bootstrap-authentication";
/// Upstream `api.BootstrapUserPrefix`.
const USER_PREFIX: &str = "system:bootstrap:";
/// Upstream `api.BootstrapDefaultGroup`.
const DEFAULT_GROUP: &str = "system:bootstrappers";
/// The fixed part of upstream's `api.BootstrapGroupPattern`.
const GROUP_PREFIX: &str = "system:bootstrappers:";

/// The bootstrap token authenticator over the `secrets` store's watch cache.
pub(crate) struct BootstrapTokenAuthenticator {
    secrets: Arc<Store>,
}

impl BootstrapTokenAuthenticator {
    /// `None` when the registry serves no Secrets (it always does; the caller turns
    /// this into a configuration error rather than a panic).
    pub(crate) fn new(registry: &Registry) -> Option<Self> {
        registry
            .store("", "v1", "secrets")
            .cloned()
            .map(|secrets| BootstrapTokenAuthenticator { secrets })
    }

    fn secret(&self, name: &str) -> Option<Arc<Value>> {
        self.secrets
            .cache()
            .get(&self.secrets.key(Some(NAMESPACE), name))
            .map(|o| o.value().clone())
    }

    /// Upstream `TokenAuthenticator.AuthenticateToken`.
    fn authenticate_token(&self, token: &str) -> Option<UserInfo> {
        let (id, secret) = parse_token(token)?;
        let name = format!("{SECRET_PREFIX}{id}");
        let Some(object) = self.secret(&name) else {
            tracing::debug!(secret = %name, "no secret to match the bootstrap bearer token");
            return None;
        };
        match validate(&object, id, secret, jiff::Timestamp::now()) {
            Ok(user) => Some(user),
            Err(reason) => {
                // Upstream logs these at V(3); the token's secret part is never logged.
                tracing::debug!(
                    secret = %format!("{NAMESPACE}/{name}"),
                    "bootstrap secret matching the bearer token {reason}"
                );
                None
            }
        }
    }
}

impl Authenticator for BootstrapTokenAuthenticator {
    fn authenticate(&self, request: &AuthRequest<'_>) -> Result<Option<UserInfo>, AuthError> {
        // A token that is not UTF-8 cannot be in bootstrap form, so it is not ours.
        match ferrokube_auth::authn::bearer_token(request.headers) {
            Bearer::Token(t) => Ok(self.authenticate_token(t)),
            Bearer::None | Bearer::Invalid => Ok(None),
        }
    }
}

fn is_token_char(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// Upstream `tokens.ParseToken`: `^([a-z0-9]{6})\.([a-z0-9]{16})$` into (id, secret).
pub(crate) fn parse_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let ok = |part: &str, len: usize| part.len() == len && part.bytes().all(is_token_char);
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

/// Upstream `token/util.ValidateBootstrapGroupName`:
/// `^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$`.
pub(crate) fn valid_group(group: &str) -> bool {
    let Some(rest) = group.strip_prefix(GROUP_PREFIX) else {
        return false;
    };
    let Some((&last, middle)) = rest.as_bytes().split_last() else {
        return false;
    };
    middle.len() <= 255
        && middle
            .iter()
            .all(|&b| is_token_char(b) || b == b':' || b == b'-')
        && is_token_char(last)
}

/// Upstream `secrets.GetData` over the stored JSON: the decoded `data` value, `""`
/// when absent. A value that does not decode (the apiserver never stores one) or is
/// not UTF-8 reads as absent, which no check accepts.
pub(crate) fn data(secret: &Value, key: &str) -> String {
    secret["data"][key]
        .as_str()
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_default()
}

/// Upstream `secrets.GetExpiration`: `Ok(None)` without an expiration, `Ok(Some(t))`
/// while it lies ahead, `Err` once past (or unparseable, which upstream treats as
/// expired).
pub(crate) fn expiration(
    secret: &Value,
    now: jiff::Timestamp,
) -> Result<Option<jiff::Timestamp>, String> {
    let raw = data(secret, EXPIRATION_KEY);
    if raw.is_empty() {
        return Ok(None);
    }
    match raw.parse::<jiff::Timestamp>() {
        Ok(t) if t > now => Ok(Some(t)),
        Ok(_) => Err(format!("has expired at {raw}")),
        Err(e) => Err(format!(
            "has an unparseable expiration time ({raw}): {e}; treating it as expired"
        )),
    }
}

/// Upstream `subtle.ConstantTimeCompare`: different lengths differ at once (lengths
/// are not secret); equal lengths take the same time wherever they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && std::hint::black_box(a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}

/// Upstream `secrets.GetGroups`: `system:bootstrappers` and the valid extra groups,
/// deduplicated and sorted; any invalid extra group rejects the token.
pub(crate) fn groups(secret: &Value) -> Result<Vec<String>, String> {
    let mut groups = BTreeSet::from([DEFAULT_GROUP.to_string()]);
    let extra = data(secret, EXTRA_GROUPS_KEY);
    if !extra.is_empty() {
        for group in extra.split(',') {
            if !valid_group(group) {
                return Err(format!(
                    "has invalid value for key {EXTRA_GROUPS_KEY}: {group:?} does not match {GROUP_PREFIX}[a-z0-9:-]{{0,255}}[a-z0-9]"
                ));
            }
            groups.insert(group.to_string());
        }
    }
    Ok(groups.into_iter().collect())
}

/// The checks of upstream's `AuthenticateToken` once the Secret of token `id` is
/// found, in its order; `Err` says why the Secret does not accept the token.
pub(crate) fn validate(
    secret: &Value,
    id: &str,
    token_secret: &str,
    now: jiff::Timestamp,
) -> Result<UserInfo, String> {
    if !secret["metadata"]["deletionTimestamp"].is_null() {
        return Err("is deleted and awaiting removal".into());
    }
    if secret["type"].as_str() != Some(SECRET_TYPE) || !secret["data"].is_object() {
        return Err(format!("has invalid type, expected {SECRET_TYPE}"));
    }
    if !constant_time_eq(
        data(secret, TOKEN_SECRET_KEY).as_bytes(),
        token_secret.as_bytes(),
    ) {
        return Err(format!("has invalid value for key {TOKEN_SECRET_KEY}"));
    }
    if data(secret, TOKEN_ID_KEY) != id {
        return Err(format!(
            "has invalid value for key {TOKEN_ID_KEY}, expected {id}"
        ));
    }
    expiration(secret, now)?;
    if data(secret, USAGE_AUTHENTICATION_KEY) != "true" {
        return Err(format!("is not marked {USAGE_AUTHENTICATION_KEY}=true"));
    }
    Ok(UserInfo::new(format!("{USER_PREFIX}{id}"), groups(secret)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn now() -> jiff::Timestamp {
        "2030-01-01T00:00:00Z".parse().unwrap()
    }

    fn secret(data: &[(&str, &str)]) -> Value {
        let data: serde_json::Map<String, Value> = data
            .iter()
            .map(|(k, v)| (k.to_string(), json!(b64(v))))
            .collect();
        json!({
            "metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
            "type": SECRET_TYPE,
            "data": data,
        })
    }

    const GOOD: &[(&str, &str)] = &[
        ("token-id", "abcdef"),
        ("token-secret", "0123456789abcdef"),
        ("usage-bootstrap-authentication", "true"),
    ];

    fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut v: Vec<_> = GOOD
            .iter()
            .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
            .copied()
            .collect();
        v.extend_from_slice(extra);
        v
    }

    #[test]
    fn parses_only_the_bootstrap_form() {
        assert_eq!(
            parse_token("abcdef.0123456789abcdef"),
            Some(("abcdef", "0123456789abcdef"))
        );
        for bad in [
            "",
            "abcdef",
            "abcdef.",
            "abcdef0123456789abcdef",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdefg.0123456789abcdef",
            "abcdef.0123456789abcde",
            "abcdef.0123456789abcdef0",
            "abcdef.0123456789abcdeF",
            "abcdef.0123456789abcde_",
            "abcdef.0123456789.abcdef",
            "abcdef.0123456789abcdef\n",
            "eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJ4In0.sig",
        ] {
            assert_eq!(parse_token(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn group_names_as_upstreams_pattern() {
        for good in [
            "system:bootstrappers:a",
            "system:bootstrappers:kubeadm:default-node-token",
            "system:bootstrappers:a-b:c9",
        ] {
            assert!(valid_group(good), "{good:?}");
        }
        let longest = format!("system:bootstrappers:{}", "a".repeat(256));
        assert!(valid_group(&longest));
        for bad in [
            "",
            "system:bootstrappers",
            "system:bootstrappers:",
            "system:bootstrappers:a-",
            "system:bootstrappers:a:",
            "system:bootstrappers:A",
            "system:bootstrappers:a b",
            "system:masters",
            "xsystem:bootstrappers:a",
            &format!("system:bootstrappers:{}", "a".repeat(257)),
        ] {
            assert!(!valid_group(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_valid_token_is_its_bootstrap_user() {
        let s = secret(&with(&[(
            "auth-extra-groups",
            "system:bootstrappers:kubeadm:default-node-token,system:bootstrappers:a,system:bootstrappers:a",
        )]));
        let user = validate(&s, "abcdef", "0123456789abcdef", now()).unwrap();
        assert_eq!(user.name, "system:bootstrap:abcdef");
        // Deduplicated and sorted, as upstream's string set.
        assert_eq!(
            user.groups,
            vec![
                "system:bootstrappers",
                "system:bootstrappers:a",
                "system:bootstrappers:kubeadm:default-node-token",
            ]
        );
        assert!(user.uid.is_empty() && user.extra.is_empty());
        let plain = validate(&secret(GOOD), "abcdef", "0123456789abcdef", now()).unwrap();
        assert_eq!(plain.groups, vec!["system:bootstrappers"]);
        // An expiration still ahead.
        let later = secret(&with(&[("expiration", "2030-01-01T00:00:01Z")]));
        assert!(validate(&later, "abcdef", "0123456789abcdef", now()).is_ok());
    }

    #[test]
    fn rejections() {
        let check = |s: &Value, secret: &str| validate(s, "abcdef", secret, now());
        assert!(check(&secret(GOOD), "0123456789abcdee").is_err());
        let cases: Vec<(Value, &str)> = vec![
            (
                secret(&with(&[("token-secret", "0123456789abcdee")])),
                "token-secret",
            ),
            (secret(&with(&[("token-id", "abcdeg")])), "token-id"),
            (secret(&GOOD[..2]), "usage-bootstrap-authentication"),
            (
                secret(&with(&[("usage-bootstrap-authentication", "yes")])),
                "usage-bootstrap-authentication",
            ),
            (
                secret(&with(&[("expiration", "2029-12-31T23:59:59Z")])),
                "expired",
            ),
            (
                secret(&with(&[("expiration", "2030-01-01T00:00:00Z")])),
                "expired",
            ),
            (secret(&with(&[("expiration", "tomorrow")])), "unparseable"),
            (
                secret(&with(&[(
                    "auth-extra-groups",
                    "system:bootstrappers:ok,system:masters",
                )])),
                "auth-extra-groups",
            ),
            (
                secret(&with(&[("auth-extra-groups", "system:bootstrappers:ok,")])),
                "auth-extra-groups",
            ),
        ];
        for (s, why) in cases {
            let err = check(&s, "0123456789abcdef").unwrap_err();
            assert!(err.contains(why), "{err:?} should say {why:?}");
        }
        let mut wrong_type = secret(GOOD);
        wrong_type["type"] = json!("Opaque");
        assert!(
            check(&wrong_type, "0123456789abcdef")
                .unwrap_err()
                .contains("type")
        );
        let mut no_data = secret(GOOD);
        no_data["data"] = Value::Null;
        assert!(check(&no_data, "0123456789abcdef").is_err());
        let mut deleting = secret(GOOD);
        deleting["metadata"]["deletionTimestamp"] = json!("2029-12-31T00:00:00Z");
        assert!(
            check(&deleting, "0123456789abcdef")
                .unwrap_err()
                .contains("deleted")
        );
        // A value that is not base64 reads as absent.
        let mut garbled = secret(GOOD);
        garbled["data"]["token-secret"] = json!("not base64!");
        assert!(check(&garbled, "0123456789abcdef").is_err());
    }

    #[test]
    fn constant_time_compare() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn expiration_times() {
        assert_eq!(expiration(&secret(GOOD), now()), Ok(None));
        let s = secret(&with(&[("expiration", "2030-01-02T00:00:00+01:00")]));
        assert_eq!(
            expiration(&s, now()),
            Ok(Some("2030-01-01T23:00:00Z".parse().unwrap()))
        );
    }
}
