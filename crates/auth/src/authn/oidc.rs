//! OpenID Connect ID tokens: kube-apiserver's `--oidc-*` flags.
//!
//! Follows upstream `k8s.io/apiserver/plugin/pkg/authenticator/token/oidc` (the JWT
//! authenticator built from the flags), the ID token checks of
//! `github.com/coreos/go-oidc` v2 it delegates to (`verify.go`, `jwks.go`), and the
//! flag handling of `pkg/kubeapiserver/options/authentication.go` (default username
//! prefix, the validation of the issuer URL against the service account issuers).
//!
//! This module verifies; it does not fetch. The apiserver fetches the issuer's
//! discovery document and JWKS (see [`jwks_uri_from_discovery`], [`KeySet::from_json`])
//! and hands the keys over with [`OidcAuthenticator::set_keys`]; until the first key
//! set arrives every token of the issuer is refused ("authenticator not initialized",
//! as upstream). A token no current key verifies asks, through the hook given to
//! [`OidcAuthenticator::with_refresh_hook`], for the key set to be fetched again:
//! go-oidc re-fetches inside the request, but [`Authenticator::authenticate`] is
//! synchronous here, so that one request fails and the ones after the re-fetch pass.
//!
//! A token is ours when it is a compact JWT whose (unverified) `iss` is the issuer
//! URL; anything else is `Ok(None)` so the other token authenticators may try. Ours
//! and failing any check is an error (401), never anonymous.
//!
//! `--authentication-config`'s JWT authenticators ([`OidcAuthenticator::structured`])
//! verify tokens the same way, against any of several audiences, and leave the
//! claims to a [`ClaimMapper`] (the apiserver's, which evaluates CEL; this crate
//! stays below the CEL crate).
//!
//! Left out: distributed claims (`_claim_names` / `_claim_sources`), the token cache
//! in front of the authenticator, the health check and metrics, and ES512 (P-521 is
//! not in `ring`; the flag accepts it as upstream does, tokens signed with it are
//! refused).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::{Map, Value};

use super::token::{Bearer, bearer_token};
use super::{AuthError, AuthRequest, Authenticator};
use crate::user::{CREDENTIAL_ID_KEY, UserInfo};

/// Upstream's allow-list of `--oidc-signing-algs` values (`oidc.AllValidSigningAlgorithms`).
pub const ALLOWED_SIGNING_ALGS: [&str; 9] = [
    "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "RS256", "RS384", "RS512",
];

/// The default of `--oidc-signing-algs`: the algorithm every OpenID provider must
/// implement.
pub const DEFAULT_SIGNING_ALG: &str = "RS256";

/// Where an issuer serves its discovery document, below its URL.
pub const WELL_KNOWN_PATH: &str = "/.well-known/openid-configuration";

/// go-oidc v2 accepts an `nbf` up to a minute ahead, for clock skew.
const NBF_LEEWAY_SECONDS: f64 = 60.0;

/// Google issued tokens with `iss` lacking the scheme; upstream and go-oidc accept
/// that spelling for this one issuer.
const GOOGLE_ISSUER: &str = "https://accounts.google.com";
const GOOGLE_ISSUER_NO_SCHEME: &str = "accounts.google.com";

/// The `--oidc-*` flag values (without `--oidc-ca-file`, which concerns fetching).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcConfig {
    /// `--oidc-issuer-url`: empty turns the authenticator off.
    pub issuer_url: String,
    /// `--oidc-client-id`: the audience a token must carry.
    pub client_id: String,
    /// `--oidc-username-claim` (default `sub`).
    pub username_claim: String,
    /// `--oidc-username-prefix` as given; see [`OidcConfig::effective_username_prefix`].
    pub username_prefix: String,
    /// `--oidc-groups-claim` (empty: no groups).
    pub groups_claim: String,
    /// `--oidc-groups-prefix`.
    pub groups_prefix: String,
    /// `--oidc-required-claim` pairs.
    pub required_claims: BTreeMap<String, String>,
    /// `--oidc-signing-algs` (default `RS256`).
    pub signing_algs: Vec<String>,
}

impl Default for OidcConfig {
    fn default() -> Self {
        OidcConfig {
            issuer_url: String::new(),
            client_id: String::new(),
            username_claim: "sub".into(),
            username_prefix: String::new(),
            groups_claim: String::new(),
            groups_prefix: String::new(),
            required_claims: BTreeMap::new(),
            signing_algs: vec![DEFAULT_SIGNING_ALG.into()],
        }
    }
}

impl OidcConfig {
    /// Upstream's legacy flag rule: without a prefix, usernames from any claim but
    /// `email` get `<issuer>#` so they cannot collide with other authenticators'
    /// users; `-` means no prefix at all.
    pub fn effective_username_prefix(&self) -> String {
        match self.username_prefix.as_str() {
            "-" => String::new(),
            "" if self.username_claim != "email" => format!("{}#", self.issuer_url),
            prefix => prefix.to_string(),
        }
    }

    /// Whether any flag differs from its default, which upstream counts as "oidc
    /// flags set" (it tracks explicit flags; an explicit default is not seen here).
    pub fn any_set(&self) -> bool {
        *self != OidcConfig::default()
    }
}

/// The issuer's public keys, as parsed from its JWKS.
pub struct KeySet {
    keys: Vec<Jwk>,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySet")
            .field("key_ids", &self.key_ids())
            .finish()
    }
}

struct Jwk {
    kid: Option<String>,
    kind: KeyKind,
    key: DecodingKey,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyKind {
    Rsa,
    P256,
    P384,
}

impl KeyKind {
    fn verifies(self, alg: Algorithm) -> bool {
        match self {
            KeyKind::Rsa => matches!(
                alg,
                Algorithm::RS256
                    | Algorithm::RS384
                    | Algorithm::RS512
                    | Algorithm::PS256
                    | Algorithm::PS384
                    | Algorithm::PS512
            ),
            KeyKind::P256 => alg == Algorithm::ES256,
            KeyKind::P384 => alg == Algorithm::ES384,
        }
    }
}

impl KeySet {
    /// Parses a JWKS (`{"keys": [...]}`). Keys this server cannot use (encryption
    /// keys, symmetric keys, curves `ring` lacks) are skipped rather than failing the
    /// set, so an issuer publishing one exotic key still works; a set with no usable
    /// key is an error.
    pub fn from_json(body: &[u8]) -> Result<KeySet, String> {
        let doc: Value =
            serde_json::from_slice(body).map_err(|e| format!("decoding the key set: {e}"))?;
        let Some(entries) = doc.get("keys").and_then(Value::as_array) else {
            return Err("the key set has no \"keys\" array".into());
        };
        let mut keys = Vec::new();
        let mut skipped = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            match parse_jwk(entry) {
                Ok(key) => keys.push(key),
                Err(why) => skipped.push(format!("keys[{i}]: {why}")),
            }
        }
        if keys.is_empty() {
            return Err(if skipped.is_empty() {
                "the key set is empty".into()
            } else {
                format!("no usable signing key: {}", skipped.join("; "))
            });
        }
        Ok(KeySet { keys })
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The `kid`s of the keys (keys without one are left out).
    pub fn key_ids(&self) -> Vec<&str> {
        self.keys.iter().filter_map(|k| k.kid.as_deref()).collect()
    }
}

fn parse_jwk(v: &Value) -> Result<Jwk, String> {
    let field = |name: &str| v.get(name).and_then(Value::as_str);
    if field("use").is_some_and(|u| u != "sig") {
        return Err(format!("use {:?} is not a signature key", field("use")));
    }
    let kid = field("kid").map(str::to_string);
    let (kind, key) = match field("kty") {
        Some("RSA") => {
            let (Some(n), Some(e)) = (field("n"), field("e")) else {
                return Err("RSA key without n or e".into());
            };
            let key = DecodingKey::from_rsa_components(n, e).map_err(|e| e.to_string())?;
            (KeyKind::Rsa, key)
        }
        Some("EC") => {
            let (kind, len) = match field("crv") {
                Some("P-256") => (KeyKind::P256, 32),
                Some("P-384") => (KeyKind::P384, 48),
                other => return Err(format!("unsupported curve {other:?}")),
            };
            let (Some(x), Some(y)) = (field("x"), field("y")) else {
                return Err("EC key without x or y".into());
            };
            // The point is assembled from x and y as given, so a coordinate of the
            // wrong size would make a point of another curve: refuse it here.
            for (name, coord) in [("x", x), ("y", y)] {
                let bytes = URL_SAFE_NO_PAD
                    .decode(coord)
                    .map_err(|e| format!("{name}: {e}"))?;
                if bytes.len() != len {
                    return Err(format!("{name} is not {len} bytes long"));
                }
            }
            let key = DecodingKey::from_ec_components(x, y).map_err(|e| e.to_string())?;
            (kind, key)
        }
        other => return Err(format!("unsupported key type {other:?}")),
    };
    Ok(Jwk { kid, kind, key })
}

/// The `jwks_uri` of the issuer's discovery document, after checking that the
/// document is the issuer's (go-oidc's `NewProvider`).
pub fn jwks_uri_from_discovery(issuer_url: &str, body: &[u8]) -> Result<String, String> {
    let doc: Value = serde_json::from_slice(body)
        .map_err(|e| format!("oidc: failed to decode provider discovery object: {e}"))?;
    let issuer = doc.get("issuer").and_then(Value::as_str).unwrap_or("");
    if issuer != issuer_url {
        return Err(format!(
            "oidc: issuer did not match the issuer returned by provider, expected {issuer_url:?} got {issuer:?}"
        ));
    }
    match doc.get("jwks_uri").and_then(Value::as_str) {
        Some(uri) if !uri.is_empty() => Ok(uri.to_string()),
        _ => Err("oidc: the provider discovery object has no jwks_uri".into()),
    }
}

/// How a structured configuration's JWT authenticator (`--authentication-config`)
/// turns verified claims into a user: its claim validation rules, claim mappings
/// and user validation rules, which may be CEL expressions the caller evaluates.
/// The error is the reason the token is refused.
pub trait ClaimMapper: Send + Sync {
    fn user(&self, claims: &Map<String, Value>) -> Result<UserInfo, String>;
}

/// How verified claims become the user.
enum Mapping {
    /// The `--oidc-*` flags' claims and prefixes.
    Flags {
        username_claim: String,
        username_prefix: String,
        groups_claim: Option<String>,
        groups_prefix: String,
        required_claims: BTreeMap<String, String>,
    },
    Structured(Box<dyn ClaimMapper>),
}

/// Authenticates ID tokens of one issuer.
pub struct OidcAuthenticator {
    issuer: String,
    /// A token must carry one of these.
    audiences: Vec<String>,
    mapping: Mapping,
    signing_algs: Vec<String>,
    /// `None` until the first key set arrives. Read on every token of the issuer, so
    /// readers only clone the `Arc` under the lock.
    keys: RwLock<Option<Arc<KeySet>>>,
    refresh: Option<Box<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for OidcAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcAuthenticator")
            .field("issuer", &self.issuer)
            .field("audiences", &self.audiences)
            .finish()
    }
}

fn oidc_error(message: impl Into<String>) -> AuthError {
    AuthError::Oidc(message.into())
}

/// Go's `%q` of a string slice: `["a" "b"]`.
fn quoted_list<S: AsRef<str>>(items: &[S]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{:?}", s.as_ref())).collect();
    format!("[{}]", quoted.join(" "))
}

/// Upstream's `validateURL` of an issuer URL (`field`, e.g. `jwt[0].issuer.url`),
/// error messages included. `disallowed`: the service account issuers.
pub fn issuer_url_errors(field: &str, url: &str, disallowed: &[String]) -> Vec<String> {
    let invalid = |why: &str| format!("{field}: Invalid value: {url:?}: {why}");
    if url.is_empty() {
        return vec![format!("{field}: Required value")];
    }
    let mut errors = Vec::new();
    if disallowed.iter().any(|d| d == url) {
        let mut list = disallowed.to_vec();
        list.sort();
        errors.push(invalid(&format!(
            "URL must not overlap with disallowed issuers: [{}]",
            list.join(" ")
        )));
    }
    let (without_fragment, fragment) = match url.split_once('#') {
        Some((before, after)) => (before, after),
        None => (url, ""),
    };
    let uri = match without_fragment.parse::<http::Uri>() {
        Ok(uri) => uri,
        Err(e) => {
            errors.push(invalid(&e.to_string()));
            return errors;
        }
    };
    if uri.scheme_str() != Some("https") {
        errors.push(invalid("URL scheme must be https"));
    }
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        errors.push(invalid("URL must not contain a username or password"));
    }
    if uri.query().is_some_and(|q| !q.is_empty()) {
        errors.push(invalid("URL must not contain a query"));
    }
    if !fragment.is_empty() {
        errors.push(invalid("URL must not contain a fragment"));
    }
    errors
}

/// The issuer a token claims, unverified: `None` when it is not a compact JWT with
/// a string (or absent) `iss` (upstream's `untrustedIssuer`).
fn untrusted_issuer(token: &str) -> Option<String> {
    if token.trim_start().starts_with('{') {
        return None;
    }
    let mut parts = token.split('.');
    let (Some(_), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let bytes = URL_SAFE_NO_PAD.decode(payload).ok()?;
    let claims: Map<String, Value> = serde_json::from_slice(&bytes).ok()?;
    let iss = match claims.get("iss") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return None,
    };
    Some(if iss == GOOGLE_ISSUER_NO_SCHEME {
        GOOGLE_ISSUER.to_string()
    } else {
        iss.to_string()
    })
}

/// A claim go-oidc decodes into a number (`exp`, `iat`, `nbf`): absent or null is
/// `None`, any other non-number is a decoding error.
fn time_claim(claims: &Map<String, Value>, name: &str) -> Result<Option<f64>, String> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(other) => Err(format!(
            "oidc: failed to unmarshal claims: {name}: {other} is not a number"
        )),
    }
}

/// `aud`: one string or an array of strings.
fn audience(claims: &Map<String, Value>) -> Result<Vec<String>, String> {
    let bad = || {
        "oidc: failed to unmarshal claims: aud is neither a string nor an array of strings"
            .to_string()
    };
    match claims.get("aud") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(bad))
            .collect(),
        Some(_) => Err(bad()),
    }
}

fn decode_json_part(part: &str, what: &str) -> Result<Map<String, Value>, String> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|e| format!("oidc: malformed jwt: {what}: {e}"))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("oidc: malformed jwt: {what}: {e}"))
}

/// The signing algorithm named by a JOSE `alg` this server can verify.
fn algorithm(alg: &str) -> Option<Algorithm> {
    Some(match alg {
        "RS256" => Algorithm::RS256,
        "RS384" => Algorithm::RS384,
        "RS512" => Algorithm::RS512,
        "PS256" => Algorithm::PS256,
        "PS384" => Algorithm::PS384,
        "PS512" => Algorithm::PS512,
        "ES256" => Algorithm::ES256,
        "ES384" => Algorithm::ES384,
        _ => return None,
    })
}

/// A string claim the way Go's `json.Unmarshal` into a `string` sees it: null is
/// the empty string, a non-string is an error.
fn string_claim(value: &Value) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        other => Err(format!(
            "json: cannot unmarshal {} into Go value of type string",
            json_kind(other)
        )),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl OidcAuthenticator {
    /// Validates the flags as upstream does (the issuer URL, which must not be one
    /// of `disallowed_issuers`, the service account issuers; the client id; the
    /// username claim; the signing algorithms) and builds an authenticator without
    /// keys.
    pub fn new(config: &OidcConfig, disallowed_issuers: &[String]) -> Result<Self, AuthError> {
        let mut errors =
            issuer_url_errors("jwt[0].issuer.url", &config.issuer_url, disallowed_issuers);
        if config.client_id.is_empty() {
            errors.push("jwt[0].issuer.audiences[0]: Required value".into());
        }
        if config.username_claim.is_empty() {
            errors.push(
                "jwt[0].claimMappings.username: Required value: claim or expression is required"
                    .into(),
            );
        }
        for (i, claim) in config.required_claims.keys().enumerate() {
            if claim.is_empty() {
                errors.push(format!(
                    "jwt[0].claimValidationRules[{i}]: Required value: claim or expression is required"
                ));
            }
        }
        if !errors.is_empty() {
            let joined = if errors.len() == 1 {
                errors.remove(0)
            } else {
                format!("[{}]", errors.join(", "))
            };
            return Err(AuthError::Config(format!(
                "invalid authentication configuration: {joined}"
            )));
        }
        let signing_algs = if config.signing_algs.is_empty() {
            vec![DEFAULT_SIGNING_ALG.to_string()]
        } else {
            config.signing_algs.clone()
        };
        if let Some(bad) = signing_algs
            .iter()
            .find(|a| !ALLOWED_SIGNING_ALGS.contains(&a.as_str()))
        {
            return Err(AuthError::Config(format!(
                "oidc: unsupported signing alg: {bad:?}"
            )));
        }
        Ok(OidcAuthenticator {
            issuer: config.issuer_url.clone(),
            audiences: vec![config.client_id.clone()],
            mapping: Mapping::Flags {
                username_claim: config.username_claim.clone(),
                username_prefix: config.effective_username_prefix(),
                groups_claim: (!config.groups_claim.is_empty())
                    .then(|| config.groups_claim.clone()),
                groups_prefix: config.groups_prefix.clone(),
                required_claims: config.required_claims.clone(),
            },
            signing_algs,
            keys: RwLock::new(None),
            refresh: None,
        })
    }

    /// A structured configuration's JWT authenticator: tokens of `issuer` for any of
    /// `audiences`, signed with any algorithm upstream accepts, their claims turned
    /// into the user by `mapper`. The caller has validated the configuration.
    pub fn structured(
        issuer: &str,
        audiences: Vec<String>,
        mapper: Box<dyn ClaimMapper>,
    ) -> OidcAuthenticator {
        OidcAuthenticator {
            issuer: issuer.to_string(),
            audiences,
            mapping: Mapping::Structured(mapper),
            signing_algs: ALLOWED_SIGNING_ALGS.iter().map(|a| a.to_string()).collect(),
            keys: RwLock::new(None),
            refresh: None,
        }
    }

    /// `hook` is called (from the request path, so it must not block) whenever a
    /// token of the issuer verifies with none of the current keys: the issuer may
    /// have rotated its keys. The caller rate-limits the fetches.
    pub fn with_refresh_hook(mut self, hook: impl Fn() + Send + Sync + 'static) -> Self {
        self.refresh = Some(Box::new(hook));
        self
    }

    pub fn issuer_url(&self) -> &str {
        &self.issuer
    }

    /// The signing algorithms accepted (the flag's, or the default).
    pub fn signing_algs(&self) -> &[String] {
        &self.signing_algs
    }

    /// Replaces the key set (the first call initializes the authenticator).
    pub fn set_keys(&self, keys: KeySet) {
        let keys = Some(Arc::new(keys));
        match self.keys.write() {
            Ok(mut guard) => *guard = keys,
            Err(poisoned) => *poisoned.into_inner() = keys,
        }
    }

    fn current_keys(&self) -> Option<Arc<KeySet>> {
        match self.keys.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Whether a key set has arrived.
    pub fn is_initialized(&self) -> bool {
        self.current_keys().is_some()
    }

    /// Upstream's `AuthenticateToken`.
    pub fn authenticate_token(&self, token: &str) -> Result<Option<UserInfo>, AuthError> {
        self.authenticate_token_at(token, now_seconds())
    }

    fn authenticate_token_at(&self, token: &str, now: f64) -> Result<Option<UserInfo>, AuthError> {
        if untrusted_issuer(token).as_deref() != Some(self.issuer.as_str()) {
            return Ok(None);
        }
        let Some(keys) = self.current_keys() else {
            return Err(oidc_error("oidc: authenticator not initialized"));
        };
        let claims = self
            .verify(token, &keys, now)
            .map_err(|e| oidc_error(format!("oidc: verify token: {e}")))?;
        self.user(&claims).map(Some)
    }

    /// go-oidc v2's `IDTokenVerifier.Verify`: the cheap claim checks first, then the
    /// signature. Returns the claims.
    fn verify(&self, token: &str, keys: &KeySet, now: f64) -> Result<Map<String, Value>, String> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("oidc: malformed jwt: not three parts".into());
        };
        let header = decode_json_part(header, "header")?;
        let claims = decode_json_part(payload, "payload")?;

        let iss = match claims.get("iss") {
            Some(Value::String(s)) => s.as_str(),
            _ => "",
        };
        if iss != self.issuer && !(self.issuer == GOOGLE_ISSUER && iss == GOOGLE_ISSUER_NO_SCHEME) {
            return Err(format!(
                "oidc: id token issued by a different provider, expected {:?} got {iss:?}",
                self.issuer
            ));
        }
        if let Some(sub) = claims.get("sub").filter(|v| !v.is_null() && !v.is_string()) {
            return Err(format!(
                "oidc: failed to unmarshal claims: sub: {sub} is not a string"
            ));
        }
        let aud = audience(&claims)?;
        if !self.audiences.iter().any(|a| aud.contains(a)) {
            return Err(match self.audiences.as_slice() {
                [one] => format!("oidc: expected audience {one:?} got {}", quoted_list(&aud)),
                all => format!(
                    "oidc: expected audience in {} got {}",
                    quoted_list(all),
                    quoted_list(&aud)
                ),
            });
        }
        time_claim(&claims, "iat")?;
        // A token without `exp` has Go's zero expiry: expired.
        match time_claim(&claims, "exp")? {
            Some(exp) if exp >= now => {}
            Some(exp) => return Err(format!("oidc: token is expired (Token Expiry: {exp})")),
            None => {
                return Err(
                    "oidc: token is expired (Token Expiry: 0001-01-01 00:00:00 +0000 UTC)".into(),
                );
            }
        }
        if let Some(nbf) = time_claim(&claims, "nbf")?
            && now + NBF_LEEWAY_SECONDS < nbf
        {
            return Err(format!(
                "oidc: current time {now} before the nbf (not before) time: {nbf}"
            ));
        }

        let alg = header.get("alg").and_then(Value::as_str).unwrap_or("");
        if !self.signing_algs.iter().any(|a| a == alg) {
            return Err(format!(
                "oidc: id token signed with unsupported algorithm, expected {} got {alg:?}",
                quoted_list(&self.signing_algs)
            ));
        }
        let Some(algorithm) = algorithm(alg) else {
            return Err(format!(
                "failed to verify signature: {alg} is not supported by this server"
            ));
        };
        let kid = header
            .get("kid")
            .and_then(Value::as_str)
            .filter(|k| !k.is_empty());
        let message = &token[..token.len() - signature.len() - 1];
        let mut known_kid = kid.is_none();
        for key in &keys.keys {
            if kid.is_some_and(|id| key.kid.as_deref() != Some(id)) {
                continue;
            }
            known_kid = true;
            if key.kind.verifies(algorithm)
                && jsonwebtoken::crypto::verify(signature, message.as_bytes(), &key.key, algorithm)
                    .unwrap_or(false)
            {
                return Ok(claims);
            }
        }
        // As go-oidc: no current key verifies, so the issuer may have new ones.
        if let Some(refresh) = &self.refresh {
            refresh();
        }
        Err(match kid {
            Some(id) if !known_kid => format!(
                "failed to verify signature: no key with id {id:?} in the issuer's key set (fetching it again)"
            ),
            _ => "failed to verify signature: failed to verify id token signature".into(),
        })
    }

    /// The user of verified claims, with the token's id as its credential id.
    fn user(&self, claims: &Map<String, Value>) -> Result<UserInfo, AuthError> {
        let mut user = match &self.mapping {
            Mapping::Flags {
                username_claim,
                username_prefix,
                groups_claim,
                groups_prefix,
                required_claims,
            } => flags_user(
                claims,
                username_claim,
                username_prefix,
                groups_claim.as_deref(),
                groups_prefix,
                required_claims,
            )?,
            Mapping::Structured(mapper) => mapper.user(claims).map_err(oidc_error)?,
        };
        if let Some(Value::String(jti)) = claims.get("jti") {
            user.extra
                .insert(CREDENTIAL_ID_KEY.into(), vec![format!("JTI={jti}")]);
        }
        Ok(user)
    }
}

/// Upstream's `email_verified` rule for a username taken from the `email` claim: an
/// address the provider has not verified must not name a user (OpenID Connect
/// Core's standard claims).
pub fn check_email_verified(claims: &Map<String, Value>) -> Result<(), String> {
    match claims.get("email_verified") {
        None | Some(Value::Bool(true)) => Ok(()),
        Some(Value::Bool(false) | Value::Null) => Err("oidc: email not verified".into()),
        Some(other) => Err(format!(
            "oidc: parse 'email_verified' claim: json: cannot unmarshal {} into Go value of type bool",
            json_kind(other)
        )),
    }
}

/// The flags' user of verified claims: username, groups, then the required claims,
/// in upstream's order.
fn flags_user(
    claims: &Map<String, Value>,
    username_claim: &str,
    username_prefix: &str,
    groups_claim: Option<&str>,
    groups_prefix: &str,
    required_claims: &BTreeMap<String, String>,
) -> Result<UserInfo, AuthError> {
    {
        let claim = username_claim;
        let username = match claims.get(claim) {
            None => {
                return Err(oidc_error(format!(
                    "oidc: parse username claims {claim:?}: claim not present"
                )));
            }
            Some(v) => string_claim(v)
                .map_err(|e| oidc_error(format!("oidc: parse username claims {claim:?}: {e}")))?,
        };
        if claim == "email" {
            check_email_verified(claims).map_err(oidc_error)?;
        }
        let mut user = UserInfo {
            name: format!("{username_prefix}{username}"),
            ..UserInfo::default()
        };
        if let Some(groups_claim) = groups_claim
            && let Some(value) = claims.get(groups_claim)
        {
            // A single string is accepted as one group (kubernetes#33290).
            let bad = |what: &str| {
                oidc_error(format!(
                    "oidc: parse groups claim {groups_claim:?}: json: cannot unmarshal {what} into Go value of type string"
                ))
            };
            let groups: Vec<String> = match value {
                Value::Null => Vec::new(),
                Value::String(s) => vec![s.clone()],
                Value::Array(items) => items
                    .iter()
                    .map(|v| string_claim(v).map_err(|_| bad(json_kind(v))))
                    .collect::<Result<_, _>>()?,
                other => return Err(bad(json_kind(other))),
            };
            user.groups = groups
                .into_iter()
                .map(|g| format!("{groups_prefix}{g}"))
                .collect();
        }
        for (name, want) in required_claims {
            let Some(value) = claims.get(name) else {
                return Err(oidc_error(format!(
                    "oidc: required claim {name} not present in ID token"
                )));
            };
            let got = string_claim(value)
                .map_err(|e| oidc_error(format!("oidc: parse claim {name}: {e}")))?;
            if got != *want {
                return Err(oidc_error(format!(
                    "oidc: required claim {name} value does not match. Got = {got}, want = {want}"
                )));
            }
        }
        Ok(user)
    }
}

impl Authenticator for OidcAuthenticator {
    fn authenticate(&self, request: &AuthRequest<'_>) -> Result<Option<UserInfo>, AuthError> {
        match bearer_token(request.headers) {
            Bearer::Token(token) => self.authenticate_token(token),
            Bearer::None | Bearer::Invalid => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use jsonwebtoken::{EncodingKey, Header};
    use ring::rand::SystemRandom;
    use ring::signature::{
        ECDSA_P256_SHA256_FIXED_SIGNING, ECDSA_P384_SHA384_FIXED_SIGNING, EcdsaKeyPair,
        KeyPair as _,
    };
    use serde_json::json;

    use super::*;

    const ISS: &str = "https://issuer.example";
    const NOW: f64 = 1_700_000_000.0;

    /// An ECDSA key made for the test, with its JWK.
    struct TestKey {
        kid: String,
        alg: Algorithm,
        encoding: EncodingKey,
        jwk: Value,
    }

    impl TestKey {
        fn new(kid: &str, alg: Algorithm) -> TestKey {
            let (signing, crv, len) = match alg {
                Algorithm::ES384 => (&ECDSA_P384_SHA384_FIXED_SIGNING, "P-384", 48),
                _ => (&ECDSA_P256_SHA256_FIXED_SIGNING, "P-256", 32),
            };
            let rng = SystemRandom::new();
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(signing, &rng).unwrap();
            let pair = EcdsaKeyPair::from_pkcs8(signing, pkcs8.as_ref(), &rng).unwrap();
            let point = pair.public_key().as_ref();
            let jwk = json!({
                "kty": "EC", "crv": crv, "kid": kid, "use": "sig",
                "x": URL_SAFE_NO_PAD.encode(&point[1..1 + len]),
                "y": URL_SAFE_NO_PAD.encode(&point[1 + len..]),
            });
            TestKey {
                kid: kid.into(),
                alg,
                encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
                jwk,
            }
        }

        fn sign(&self, claims: &Value) -> String {
            let mut header = Header::new(self.alg);
            header.kid = Some(self.kid.clone());
            jsonwebtoken::encode(&header, claims, &self.encoding).unwrap()
        }
    }

    fn key_set(keys: &[&TestKey]) -> KeySet {
        let jwks = json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()});
        KeySet::from_json(jwks.to_string().as_bytes()).unwrap()
    }

    fn config() -> OidcConfig {
        OidcConfig {
            issuer_url: ISS.into(),
            client_id: "kubernetes".into(),
            signing_algs: vec!["ES256".into()],
            ..OidcConfig::default()
        }
    }

    fn authenticator(config: &OidcConfig, keys: &[&TestKey]) -> OidcAuthenticator {
        let a = OidcAuthenticator::new(config, &[]).unwrap();
        a.set_keys(key_set(keys));
        a
    }

    fn claims(extra: Value) -> Value {
        let mut c = json!({
            "iss": ISS, "aud": "kubernetes", "sub": "alice",
            "iat": NOW - 10.0, "exp": NOW + 600.0,
        });
        if let (Some(c), Value::Object(extra)) = (c.as_object_mut(), extra) {
            c.extend(extra);
        }
        c
    }

    fn check(a: &OidcAuthenticator, token: &str) -> Result<Option<UserInfo>, String> {
        a.authenticate_token_at(token, NOW)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn username_prefix_rules() {
        let key = TestKey::new("k1", Algorithm::ES256);
        let token = key.sign(&claims(json!({"email": "a@example.com"})));
        let name = |claim: &str, prefix: &str| {
            let c = OidcConfig {
                username_claim: claim.into(),
                username_prefix: prefix.into(),
                ..config()
            };
            check(&authenticator(&c, &[&key]), &token)
                .unwrap()
                .unwrap()
                .name
        };
        // No prefix given: the issuer URL and '#' unless the claim is email.
        assert_eq!(name("sub", ""), "https://issuer.example#alice");
        assert_eq!(name("email", ""), "a@example.com");
        assert_eq!(name("sub", "-"), "alice");
        assert_eq!(name("email", "-"), "a@example.com");
        assert_eq!(name("sub", "oidc:"), "oidc:alice");
        assert_eq!(name("email", "oidc:"), "oidc:a@example.com");
    }

    #[test]
    fn groups_from_a_string_or_an_array_with_the_prefix() {
        let key = TestKey::new("k1", Algorithm::ES256);
        let c = OidcConfig {
            groups_claim: "groups".into(),
            groups_prefix: "oidc:".into(),
            username_prefix: "-".into(),
            ..config()
        };
        let a = authenticator(&c, &[&key]);
        let groups = |extra: Value| {
            check(&a, &key.sign(&claims(extra))).map(|u| u.map(|u| u.groups).unwrap_or_default())
        };
        assert_eq!(
            groups(json!({"groups": ["dev", "ops"]})).unwrap(),
            ["oidc:dev", "oidc:ops"]
        );
        assert_eq!(
            groups(json!({"groups": "admins"})).unwrap(),
            ["oidc:admins"]
        );
        assert!(groups(json!({})).unwrap().is_empty());
        assert!(groups(json!({"groups": null})).unwrap().is_empty());
        let err = groups(json!({"groups": [1]})).unwrap_err();
        assert!(
            err.starts_with("oidc: parse groups claim \"groups\""),
            "{err}"
        );
        // No prefix: the groups as they are.
        let plain = authenticator(
            &OidcConfig {
                groups_claim: "roles".into(),
                ..config()
            },
            &[&key],
        );
        let user = check(&plain, &key.sign(&claims(json!({"roles": ["r1"]}))))
            .unwrap()
            .unwrap();
        assert_eq!(user.groups, ["r1"]);
        assert!(user.uid.is_empty());
    }

    #[test]
    fn required_claims_must_match_as_strings() {
        let key = TestKey::new("k1", Algorithm::ES256);
        let c = OidcConfig {
            required_claims: BTreeMap::from([
                ("hd".to_string(), "example.com".to_string()),
                ("tier".to_string(), "gold".to_string()),
            ]),
            ..config()
        };
        let a = authenticator(&c, &[&key]);
        let run = |extra: Value| check(&a, &key.sign(&claims(extra)));
        assert!(
            run(json!({"hd": "example.com", "tier": "gold"}))
                .unwrap()
                .is_some()
        );
        assert_eq!(
            run(json!({"hd": "example.com"})).unwrap_err(),
            "oidc: required claim tier not present in ID token"
        );
        assert_eq!(
            run(json!({"hd": "evil.com", "tier": "gold"})).unwrap_err(),
            "oidc: required claim hd value does not match. Got = evil.com, want = example.com"
        );
        assert!(
            run(json!({"hd": "example.com", "tier": 1}))
                .unwrap_err()
                .starts_with("oidc: parse claim tier:")
        );
    }

    #[test]
    fn email_needs_email_verified_when_present() {
        let key = TestKey::new("k1", Algorithm::ES256);
        let c = OidcConfig {
            username_claim: "email".into(),
            ..config()
        };
        let a = authenticator(&c, &[&key]);
        let run = |extra: Value| check(&a, &key.sign(&claims(extra)));
        assert!(run(json!({"email": "a@x.io"})).unwrap().is_some());
        assert!(
            run(json!({"email": "a@x.io", "email_verified": true}))
                .unwrap()
                .is_some()
        );
        assert_eq!(
            run(json!({"email": "a@x.io", "email_verified": false})).unwrap_err(),
            "oidc: email not verified"
        );
        assert!(
            run(json!({"email": "a@x.io", "email_verified": "true"}))
                .unwrap_err()
                .starts_with("oidc: parse 'email_verified' claim")
        );
        assert_eq!(
            run(json!({})).unwrap_err(),
            "oidc: parse username claims \"email\": claim not present"
        );
    }

    #[test]
    fn claim_checks_audience_expiry_and_not_before() {
        let key = TestKey::new("k1", Algorithm::ES256);
        let a = authenticator(&config(), &[&key]);
        let run = |extra: Value| check(&a, &key.sign(&claims(extra)));
        // aud may be a list containing the client id.
        assert!(
            run(json!({"aud": ["other", "kubernetes"]}))
                .unwrap()
                .is_some()
        );
        assert_eq!(
            run(json!({"aud": ["other", "x"]})).unwrap_err(),
            "oidc: verify token: oidc: expected audience \"kubernetes\" got [\"other\" \"x\"]"
        );
        assert!(
            run(json!({"exp": NOW - 1.0}))
                .unwrap_err()
                .starts_with("oidc: verify token: oidc: token is expired")
        );
        let mut no_exp = claims(json!({}));
        no_exp.as_object_mut().unwrap().remove("exp");
        assert!(
            check(&a, &key.sign(&no_exp))
                .unwrap_err()
                .contains("token is expired")
        );
        // Fractional times are numbers too; nbf has a minute of leeway.
        assert!(
            run(json!({"exp": NOW + 0.5, "nbf": NOW + 30.0}))
                .unwrap()
                .is_some()
        );
        assert!(
            run(json!({"nbf": NOW + 120.0}))
                .unwrap_err()
                .contains("before the nbf (not before) time")
        );
        assert!(
            run(json!({"iat": "yesterday"}))
                .unwrap_err()
                .contains("failed to unmarshal claims")
        );
        let user = run(json!({"jti": "abc"})).unwrap().unwrap();
        assert_eq!(user.extra[CREDENTIAL_ID_KEY], ["JTI=abc"]);
        assert!(run(json!({})).unwrap().unwrap().extra.is_empty());
    }

    #[test]
    fn only_allowed_algorithms_and_only_the_issuers_keys() {
        let key = TestKey::new("k1", Algorithm::ES256);
        let p384 = TestKey::new("k384", Algorithm::ES384);
        let a = authenticator(&config(), &[&key, &p384]);
        // ES384 is not in --oidc-signing-algs here.
        assert_eq!(
            check(&a, &p384.sign(&claims(json!({})))).unwrap_err(),
            "oidc: verify token: oidc: id token signed with unsupported algorithm, expected [\"ES256\"] got \"ES384\""
        );
        let both = authenticator(
            &OidcConfig {
                signing_algs: vec!["ES256".into(), "ES384".into()],
                ..config()
            },
            &[&key, &p384],
        );
        assert!(
            check(&both, &p384.sign(&claims(json!({}))))
                .unwrap()
                .is_some()
        );
        // A forged signature: a key of another party under the issuer's key id.
        let forger = TestKey::new("k1", Algorithm::ES256);
        assert_eq!(
            check(&a, &forger.sign(&claims(json!({})))).unwrap_err(),
            "oidc: verify token: failed to verify signature: failed to verify id token signature"
        );
        // The default is RS256, as upstream.
        let default = OidcAuthenticator::new(
            &OidcConfig {
                signing_algs: Vec::new(),
                ..config()
            },
            &[],
        )
        .unwrap();
        assert_eq!(default.signing_algs(), ["RS256"]);
        assert_eq!(
            OidcAuthenticator::new(
                &OidcConfig {
                    signing_algs: vec!["HS256".into()],
                    ..config()
                },
                &[]
            )
            .unwrap_err()
            .to_string(),
            "authentication configuration: oidc: unsupported signing alg: \"HS256\""
        );
        // `none` is not an algorithm anyone may allow.
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#);
        let payload = URL_SAFE_NO_PAD.encode(claims(json!({})).to_string());
        assert!(
            check(&a, &format!("{header}.{payload}."))
                .unwrap_err()
                .contains("unsupported algorithm")
        );
    }

    /// An RS256 token and its issuer's public key, made with openssl for this test
    /// (the private key was thrown away): `sub` `rsa-user`, expiring in 2100.
    const RSA_TOKEN: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6InJzYS0xIiwidHlwIjoiSldUIn0.eyJpc3MiOiJodHRwczovL2lzc3Vlci5leGFtcGxlIiwiYXVkIjoia3ViZXJuZXRlcyIsInN1YiI6InJzYS11c2VyIiwiZXhwIjo0MTAyNDQ0ODAwLCJpYXQiOjE3MDAwMDAwMDB9.KXZMA9eXlqIWR556ImSQaH_aZZe244tpQe5CTJo4s4Sp2B0kYdm6V_ZHG5RtDy3OXJ6PGj39edPcWubemCYPDtkQ70E6PUCXhgmHU7tbPspJ-WxTUmJMT8yRu4s1RRhkeD9rrp4ZGl8FSdkolPsSqwSh8go0eHdh6YOAjzVnqTJ60ZLaKqV9xpPbjMaK-vcn2BiVNoNCSQf5qh6tJvFAumnbnY1IElQ3jT21r0sXbgLWx_Udob9AVIMXA1_gHeB-w3VIDey6cxSF7VDSbomfsABQnOi_4uAFOF83vS_lNySy9zpKtXDkI1atqaIude4q532GNdLtF6hdENbHt6lmkg";
    const RSA_N: &str = "1dSNwdnzoWYWa3u81e4kyJIb0dF1tWjdlOt9KI679rxyPOkt6E3yPrp2NgnAb_em786XD_Yk4awbwLyGzSZJM0c8OZzLhgjFb5FfedW7Sp3uEO7E6eFwsqAD2wWw7ugQwL0spHXmTPQ9bK7n84Z4fzo7tiNjEONDeep3-2Z0_Jmy_GHKkzNi4osRauIICsvK5dWEYJzo_4AJR5CWbAjhuQA0FUP5mSK0wRc_AJ9r-GJqO81bpMFwhecNAvQ_yoiQLmu_twONg3GHef-IODI_QwB24XLWlTtmoLXQkS4kv_75YdWIuqPYzpDf9L30URcCIDaGyR9_MoQpAvA0_r9vFQ";

    #[test]
    fn rs256_with_an_rsa_jwk() {
        let a = OidcAuthenticator::new(
            &OidcConfig {
                username_prefix: "-".into(),
                ..OidcConfig {
                    signing_algs: Vec::new(),
                    ..config()
                }
            },
            &[],
        )
        .unwrap();
        let jwks = json!({"keys": [
            {"kty": "RSA", "kid": "rsa-1", "use": "sig", "alg": "RS256", "n": RSA_N, "e": "AQAB"},
            // Skipped, not fatal: an encryption key and a symmetric key.
            {"kty": "RSA", "kid": "enc-1", "use": "enc", "n": RSA_N, "e": "AQAB"},
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
        ]});
        let set = KeySet::from_json(jwks.to_string().as_bytes()).unwrap();
        assert_eq!(set.key_ids(), ["rsa-1"]);
        a.set_keys(set);
        let user = a.authenticate_token(RSA_TOKEN).unwrap().unwrap();
        assert_eq!(user.name, "rsa-user");
        // The same token with a byte of the signature changed.
        let mut forged = RSA_TOKEN.to_string();
        let last = if forged.ends_with('g') { "h" } else { "g" };
        forged.replace_range(forged.len() - 1.., last);
        assert!(a.authenticate_token(&forged).is_err());
    }

    #[test]
    fn unknown_key_ids_ask_for_the_keys_again() {
        let key = TestKey::new("k1", Algorithm::ES256);
        let rotated = TestKey::new("k2", Algorithm::ES256);
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = asked.clone();
        let a = OidcAuthenticator::new(&config(), &[])
            .unwrap()
            .with_refresh_hook(move || {
                counter.fetch_add(1, Ordering::SeqCst);
            });
        a.set_keys(key_set(&[&key]));
        let token = rotated.sign(&claims(json!({})));
        assert_eq!(
            check(&a, &token).unwrap_err(),
            "oidc: verify token: failed to verify signature: no key with id \"k2\" in the issuer's key set (fetching it again)"
        );
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        // Valid tokens do not ask.
        check(&a, &key.sign(&claims(json!({})))).unwrap().unwrap();
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        // The fetch brought the new key: the token passes.
        a.set_keys(key_set(&[&key, &rotated]));
        assert!(check(&a, &token).unwrap().is_some());
    }

    #[test]
    fn other_issuers_and_non_jwts_are_not_ours() {
        let key = TestKey::new("k1", Algorithm::ES256);
        let a = authenticator(&config(), &[&key]);
        let other = key.sign(&claims(json!({"iss": "https://other.example"})));
        assert!(check(&a, &other).unwrap().is_none());
        assert!(
            check(&a, &key.sign(&claims(json!({"iss": 5}))))
                .unwrap()
                .is_none()
        );
        for token in [
            "abcdef.0123456789abcdef",
            "a.b.c",
            "{\"iss\":\"x\"}",
            "a.b.c.d",
            "",
        ] {
            assert!(check(&a, token).unwrap().is_none(), "{token}");
        }
        // Ours, before the keys arrived.
        let fresh = OidcAuthenticator::new(&config(), &[]).unwrap();
        assert!(!fresh.is_initialized());
        assert_eq!(
            check(&fresh, &key.sign(&claims(json!({})))).unwrap_err(),
            "oidc: authenticator not initialized"
        );
        // Through the Authenticator trait: the bearer token of the request.
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            format!(
                "Bearer {}",
                key.sign(&claims(json!({"exp": now_seconds() + 600.0})))
            )
            .parse()
            .unwrap(),
        );
        let req = AuthRequest {
            headers: &headers,
            peer_certificates: &[],
            path: "",
        };
        assert_eq!(
            a.authenticate(&req).unwrap().unwrap().name,
            "https://issuer.example#alice"
        );
        assert!(
            OidcAuthenticator::new(&config(), &[])
                .unwrap()
                .authenticate(&AuthRequest {
                    headers: &http::HeaderMap::new(),
                    peer_certificates: &[],
                    path: "",
                })
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn configuration_is_validated_as_upstream() {
        let err = |c: OidcConfig, disallowed: &[String]| {
            OidcAuthenticator::new(&c, disallowed)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(
                OidcConfig {
                    issuer_url: "http://issuer.example".into(),
                    ..config()
                },
                &[]
            ),
            "authentication configuration: invalid authentication configuration: jwt[0].issuer.url: Invalid value: \"http://issuer.example\": URL scheme must be https"
        );
        assert!(
            err(
                OidcConfig {
                    issuer_url: "https://u:p@issuer.example/x?y=1#z".into(),
                    ..config()
                },
                &[]
            )
            .contains("username or password")
        );
        assert!(
            err(config(), &[ISS.to_string()])
                .contains("URL must not overlap with disallowed issuers: [https://issuer.example]")
        );
        assert!(
            err(
                OidcConfig {
                    client_id: String::new(),
                    ..config()
                },
                &[]
            )
            .contains("jwt[0].issuer.audiences[0]: Required value")
        );
        assert!(
            err(
                OidcConfig {
                    username_claim: String::new(),
                    ..config()
                },
                &[]
            )
            .contains("claim or expression is required")
        );
        assert!(
            OidcAuthenticator::new(&config(), &["https://kubernetes.default.svc".into()]).is_ok()
        );
        assert!(!OidcConfig::default().any_set());
        assert!(
            OidcConfig {
                groups_claim: "g".into(),
                ..OidcConfig::default()
            }
            .any_set()
        );
    }

    #[test]
    fn discovery_and_key_set_documents() {
        let doc = json!({"issuer": ISS, "jwks_uri": "https://issuer.example/keys"});
        assert_eq!(
            jwks_uri_from_discovery(ISS, doc.to_string().as_bytes()).unwrap(),
            "https://issuer.example/keys"
        );
        assert_eq!(
            jwks_uri_from_discovery("https://issuer.example/", doc.to_string().as_bytes())
                .unwrap_err(),
            "oidc: issuer did not match the issuer returned by provider, expected \"https://issuer.example/\" got \"https://issuer.example\""
        );
        assert!(
            jwks_uri_from_discovery(ISS, json!({"issuer": ISS}).to_string().as_bytes()).is_err()
        );
        assert!(jwks_uri_from_discovery(ISS, b"<html>").is_err());
        assert!(KeySet::from_json(b"{\"keys\": []}").is_err());
        assert!(KeySet::from_json(b"{}").is_err());
        // A P-256 key whose coordinates are too short is refused.
        let short = json!({"keys": [{"kty": "EC", "crv": "P-256", "x": "AAAA", "y": "AAAA"}]});
        assert!(
            KeySet::from_json(short.to_string().as_bytes())
                .unwrap_err()
                .contains("not 32 bytes long")
        );
        let p521 = json!({"keys": [{"kty": "EC", "crv": "P-521", "x": "AAAA", "y": "AAAA"}]});
        assert!(KeySet::from_json(p521.to_string().as_bytes()).is_err());
    }
}
