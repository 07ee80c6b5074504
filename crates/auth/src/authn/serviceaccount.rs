//! Service account tokens (`pkg/serviceaccount` upstream): bound JWTs issued for
//! the TokenRequest API, their authenticator, and the issuer's public keys as a
//! JWKS. JWTs are signed and verified with `jsonwebtoken`; the keys are the
//! cluster's ECDSA P-256 pair, so tokens are ES256 (the PKI cannot make RSA keys).
//!
//! A token is "ours" when it is a JWT whose `iss` is one of the configured issuers;
//! anything else is left to the other authenticators (`Ok(None)`). An own token
//! that fails any check is an error (401), never anonymous.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::legacy::{LEGACY_ISSUER, LegacyClaims, LegacySecret};
use super::token::{Bearer, bearer_token};
use super::{AuthError, AuthRequest, Authenticator};
use crate::rbac::service_account_user;
use crate::user::UserInfo;

/// Seconds since the epoch.
pub fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// `{name, uid}` inside the `kubernetes.io` claim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ref {
    pub name: String,
    pub uid: String,
}

/// The private `kubernetes.io` claim of a bound token.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesClaim {
    pub namespace: String,
    pub serviceaccount: Ref,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Ref>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<Ref>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<Ref>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnafter: Option<i64>,
}

/// The claims of a bound service account token, as upstream issues them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub aud: Vec<String>,
    pub exp: i64,
    pub iat: i64,
    pub iss: String,
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaim,
    pub nbf: i64,
    pub sub: String,
}

/// A random token id in UUID v4 form (`jti`).
pub fn new_jti() -> String {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 16];
    // SystemRandom only fails when the OS has no randomness; a zero id is then
    // still unique enough for its one use (logging and credential-id).
    let _ = ring::rand::SystemRandom::new().fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Errors of key loading and signing.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("service account key: {0}")]
    Key(String),
    #[error("signing the token: {0}")]
    Sign(String),
}

/// The key id upstream derives from a public key: base64url(SHA-256(DER SPKI)).
pub(crate) fn key_id(spki_der: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, spki_der))
}

/// One verification key: the `jsonwebtoken` key, its kid and its JWK.
struct PublicKey {
    kid: String,
    key: DecodingKey,
    jwk: Value,
}

fn parse_public_keys(pem_text: &str) -> Result<Vec<PublicKey>, TokenError> {
    use rustls_pki_types::pem::{PemObject, SectionKind};
    let mut out = Vec::new();
    for item in <(SectionKind, Vec<u8>)>::pem_slice_iter(pem_text.as_bytes()) {
        let (kind, der) = item.map_err(|e| TokenError::Key(e.to_string()))?;
        if kind != SectionKind::PublicKey {
            continue;
        }
        use x509_parser::prelude::FromDer;
        let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(&der)
            .map_err(|e| TokenError::Key(format!("public key: {e}")))?;
        let point = spki.subject_public_key.data.as_ref();
        // An uncompressed P-256 point: 0x04 || X (32) || Y (32).
        if point.len() != 65 || point[0] != 4 {
            return Err(TokenError::Key(
                "only ECDSA P-256 public keys are supported".into(),
            ));
        }
        let (x, y) = (
            URL_SAFE_NO_PAD.encode(&point[1..33]),
            URL_SAFE_NO_PAD.encode(&point[33..]),
        );
        let key =
            DecodingKey::from_ec_components(&x, &y).map_err(|e| TokenError::Key(e.to_string()))?;
        let kid = key_id(&der);
        let jwk = json!({"use": "sig", "kty": "EC", "kid": kid, "crv": "P-256", "alg": "ES256", "x": x, "y": y});
        out.push(PublicKey { kid, key, jwk });
    }
    if out.is_empty() {
        return Err(TokenError::Key("no PUBLIC KEY block found".into()));
    }
    Ok(out)
}

/// Signs tokens (`--service-account-signing-key-file`, `--service-account-issuer`).
pub struct TokenIssuer {
    key: EncodingKey,
    kid: String,
    issuer: String,
}

impl std::fmt::Debug for TokenIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenIssuer")
            .field("kid", &self.kid)
            .field("issuer", &self.issuer)
            .finish()
    }
}

impl TokenIssuer {
    /// From a PKCS#8 ECDSA P-256 private key PEM and its public key PEM.
    pub fn new(
        private_key_pem: &str,
        public_key_pem: &str,
        issuer: &str,
    ) -> Result<Self, TokenError> {
        let key = EncodingKey::from_ec_pem(private_key_pem.as_bytes())
            .map_err(|e| TokenError::Key(e.to_string()))?;
        let public = parse_public_keys(public_key_pem)?;
        Ok(TokenIssuer {
            key,
            kid: public[0].kid.clone(),
            issuer: issuer.to_string(),
        })
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Signs `claims` (their `iss` is set to this issuer).
    pub fn sign(&self, mut claims: Claims) -> Result<String, TokenError> {
        claims.iss = self.issuer.clone();
        jsonwebtoken::encode(&signing_header(&self.kid), &claims, &self.key)
            .map_err(|e| TokenError::Sign(e.to_string()))
    }
}

/// The JOSE header of the tokens this apiserver signs: `alg` and `kid` only, as
/// upstream's (go-jose adds no `typ`; jsonwebtoken would add `"typ": "JWT"`).
pub(crate) fn signing_header(kid: &str) -> Header {
    let mut header = Header::new(Algorithm::ES256);
    header.typ = None;
    header.kid = Some(kid.to_owned());
    header
}

/// The current state of the objects a token names, looked up at authentication.
pub trait BoundObjects: Send + Sync {
    /// The uid of a service account, if it exists.
    fn service_account_uid(&self, namespace: &str, name: &str) -> Option<String>;
    /// The uid of a pod and whether its deletion grace period has already ended.
    fn pod(&self, namespace: &str, name: &str) -> Option<(String, bool)>;
    /// The uid of a secret.
    fn secret_uid(&self, namespace: &str, name: &str) -> Option<String>;
    /// The Secret of a legacy token (see [`super::legacy`]); `None` (the default)
    /// when it does not exist, which rejects every legacy token.
    fn legacy_token_secret(&self, _namespace: &str, _name: &str) -> Option<LegacySecret> {
        None
    }
    /// Called after a legacy token of the Secret authenticated: upstream labels the
    /// Secret `kubernetes.io/legacy-token-last-used: <date>` (at most once a day).
    /// The default records nothing.
    fn legacy_token_used(&self, _namespace: &str, _name: &str) {}
}

/// Extra keys upstream puts on service account users.
pub const POD_NAME_KEY: &str = "authentication.kubernetes.io/pod-name";
pub const POD_UID_KEY: &str = "authentication.kubernetes.io/pod-uid";
pub const NODE_NAME_KEY: &str = "authentication.kubernetes.io/node-name";
pub const NODE_UID_KEY: &str = "authentication.kubernetes.io/node-uid";

/// Authenticates bound service account JWTs.
pub struct ServiceAccountTokenAuthenticator<B> {
    keys: Vec<PublicKey>,
    issuers: Vec<String>,
    /// `--api-audiences` (default: the issuers): a token must name one of them.
    audiences: Vec<String>,
    objects: B,
    /// `--service-account-lookup`: legacy tokens are checked against their Secret and
    /// ServiceAccount (bound tokens always are, as upstream).
    legacy_lookup: bool,
}

impl<B> std::fmt::Debug for ServiceAccountTokenAuthenticator<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountTokenAuthenticator")
            .field("issuers", &self.issuers)
            .finish()
    }
}

fn invalid(msg: impl Into<String>) -> AuthError {
    AuthError::InvalidServiceAccountToken(msg.into())
}

impl<B: BoundObjects> ServiceAccountTokenAuthenticator<B> {
    /// `public_keys_pem`: every `--service-account-key-file`, concatenated.
    pub fn new(
        public_keys_pem: &str,
        issuers: Vec<String>,
        audiences: Vec<String>,
        objects: B,
    ) -> Result<Self, TokenError> {
        Ok(ServiceAccountTokenAuthenticator {
            keys: parse_public_keys(public_keys_pem)?,
            issuers,
            audiences,
            objects,
            legacy_lookup: true,
        })
    }

    /// `--service-account-lookup=false`: a legacy token is valid on its signature and
    /// claims alone, without its Secret or ServiceAccount (upstream's default is true).
    pub fn with_legacy_lookup(mut self, lookup: bool) -> Self {
        self.legacy_lookup = lookup;
        self
    }

    /// The JWKS of the verification keys (`/openid/v1/jwks`).
    pub fn jwks(&self) -> Value {
        json!({"keys": self.keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()})
    }

    /// The issuer of `token` when it is a JWT from one of our issuers or a legacy
    /// token (without verifying it).
    fn our_issuer(&self, token: &str) -> Option<String> {
        let mut parts = token.split('.');
        let (Some(_), Some(payload), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let bytes = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
        let v = serde_json::from_slice::<Value>(&bytes).ok()?;
        let iss = v["iss"].as_str()?;
        (iss == LEGACY_ISSUER || self.issuers.iter().any(|i| i == iss)).then(|| iss.to_string())
    }

    /// Verifies the signature of `token` with the key its header names (or any key
    /// without one) under `validation`.
    fn verify<C: serde::de::DeserializeOwned>(
        &self,
        token: &str,
        validation: &Validation,
    ) -> Result<C, AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| invalid(e.to_string()))?;
        if header.alg != Algorithm::ES256 {
            return Err(invalid(format!(
                "unexpected signing algorithm {:?}",
                header.alg
            )));
        }
        let candidates = self
            .keys
            .iter()
            .filter(|k| header.kid.as_deref().is_none_or(|kid| kid == k.kid));
        let mut last = invalid("no verification key matches the token's key id");
        for k in candidates {
            match jsonwebtoken::decode::<C>(token, &k.key, validation) {
                Ok(data) => return Ok(data.claims),
                Err(e) => last = invalid(e.to_string()),
            }
        }
        Err(last)
    }

    /// A legacy secret-based token: no audience, no expiry; its Secret and
    /// ServiceAccount decide (upstream's legacy validator).
    fn authenticate_legacy(&self, token: &str) -> Result<Option<UserInfo>, AuthError> {
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_issuer(&[LEGACY_ISSUER]);
        validation.set_required_spec_claims(&["iss", "sub"]);
        validation.validate_exp = false;
        validation.validate_aud = false;
        let claims: LegacyClaims = self.verify(token, &validation)?;
        super::legacy::validate(&claims, token, &self.objects, self.legacy_lookup).map(Some)
    }

    /// Verifies `token` and returns its user, as upstream's JWT authenticator and
    /// the bound-object validator.
    pub fn authenticate_token(&self, token: &str) -> Result<Option<UserInfo>, AuthError> {
        match self.our_issuer(token) {
            None => return Ok(None),
            Some(iss) if iss == LEGACY_ISSUER => return self.authenticate_legacy(token),
            Some(_) => {}
        }
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_issuer(&self.issuers);
        validation.set_audience(&self.audiences);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        let claims: Claims = self.verify(token, &validation)?;
        let k = &claims.kubernetes;
        let ns = &k.namespace;
        let sa = &k.serviceaccount;
        if claims.sub != service_account_user(ns, &sa.name) {
            return Err(invalid("subject does not match the service account"));
        }
        match self.objects.service_account_uid(ns, &sa.name) {
            None => {
                return Err(invalid(format!(
                    "service account {ns}/{} has been deleted",
                    sa.name
                )));
            }
            Some(uid) if uid != sa.uid => {
                return Err(invalid(format!(
                    "service account UID ({}) does not match claim ({})",
                    uid, sa.uid
                )));
            }
            Some(_) => {}
        }
        let mut user = UserInfo {
            name: claims.sub.clone(),
            uid: sa.uid.clone(),
            groups: vec![
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{ns}"),
            ],
            ..UserInfo::default()
        };
        if let Some(pod) = &k.pod {
            match self.objects.pod(ns, &pod.name) {
                None => return Err(invalid(format!("pod {ns}/{} has been deleted", pod.name))),
                Some((uid, _)) if uid != pod.uid => {
                    return Err(invalid(format!(
                        "pod UID ({uid}) does not match claim ({})",
                        pod.uid
                    )));
                }
                Some((_, true)) => {
                    return Err(invalid(format!("pod {ns}/{} is being deleted", pod.name)));
                }
                Some(_) => {}
            }
            user.extra
                .insert(POD_NAME_KEY.into(), vec![pod.name.clone()]);
            user.extra.insert(POD_UID_KEY.into(), vec![pod.uid.clone()]);
        }
        if let Some(secret) = &k.secret {
            match self.objects.secret_uid(ns, &secret.name) {
                None => {
                    return Err(invalid(format!(
                        "secret {ns}/{} has been deleted",
                        secret.name
                    )));
                }
                Some(uid) if uid != secret.uid => {
                    return Err(invalid(format!(
                        "secret UID ({uid}) does not match claim ({})",
                        secret.uid
                    )));
                }
                Some(_) => {}
            }
        }
        if let Some(node) = &k.node {
            user.extra
                .insert(NODE_NAME_KEY.into(), vec![node.name.clone()]);
            user.extra
                .insert(NODE_UID_KEY.into(), vec![node.uid.clone()]);
        }
        user.extra.insert(
            crate::user::CREDENTIAL_ID_KEY.into(),
            vec![format!("JTI={}", claims.jti)],
        );
        Ok(Some(user))
    }
}

impl<B: BoundObjects> Authenticator for ServiceAccountTokenAuthenticator<B> {
    fn authenticate(&self, request: &AuthRequest<'_>) -> Result<Option<UserInfo>, AuthError> {
        match bearer_token(request.headers) {
            Bearer::Token(token) => self.authenticate_token(token),
            Bearer::None | Bearer::Invalid => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const ISS: &str = "https://kubernetes.default.svc.cluster.local";

    #[derive(Default)]
    struct Objects {
        sas: HashMap<String, String>,
        pods: HashMap<String, (String, bool)>,
    }

    impl BoundObjects for Objects {
        fn service_account_uid(&self, ns: &str, name: &str) -> Option<String> {
            self.sas.get(&format!("{ns}/{name}")).cloned()
        }
        fn pod(&self, ns: &str, name: &str) -> Option<(String, bool)> {
            self.pods.get(&format!("{ns}/{name}")).cloned()
        }
        fn secret_uid(&self, _: &str, _: &str) -> Option<String> {
            None
        }
    }

    fn keys() -> (String, String) {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        (key.serialize_pem(), key.public_key_pem())
    }

    fn claims(exp_in: i64, pod: Option<Ref>) -> Claims {
        let now = now_unix();
        Claims {
            aud: vec![ISS.into()],
            exp: now + exp_in,
            iat: now,
            iss: String::new(),
            jti: "j".into(),
            kubernetes: KubernetesClaim {
                namespace: "default".into(),
                serviceaccount: Ref {
                    name: "default".into(),
                    uid: "sa-uid".into(),
                },
                pod,
                ..KubernetesClaim::default()
            },
            nbf: now,
            sub: "system:serviceaccount:default:default".into(),
        }
    }

    #[test]
    fn token_headers_carry_alg_and_kid_only() {
        use base64::Engine as _;
        let (private, public) = keys();
        let issuer = TokenIssuer::new(&private, &public, ISS).unwrap();
        let token = issuer.sign(claims(3600, None)).unwrap();
        let header = token.split('.').next().unwrap();
        let header: serde_json::Value = serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(header)
                .unwrap(),
        )
        .unwrap();
        let mut keys: Vec<&str> = header
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort();
        assert_eq!(keys, ["alg", "kid"]);
        assert_eq!(header["alg"], "ES256");
    }

    #[test]
    fn issued_tokens_authenticate_until_their_objects_go() {
        let (private, public) = keys();
        let issuer = TokenIssuer::new(&private, &public, ISS).unwrap();
        let mut objects = Objects::default();
        objects
            .sas
            .insert("default/default".into(), "sa-uid".into());
        objects
            .pods
            .insert("default/p".into(), ("pod-uid".into(), false));
        let authn = ServiceAccountTokenAuthenticator::new(
            &public,
            vec![ISS.into()],
            vec![ISS.into()],
            objects,
        )
        .unwrap();
        let pod = Some(Ref {
            name: "p".into(),
            uid: "pod-uid".into(),
        });
        let token = issuer.sign(claims(3600, pod.clone())).unwrap();
        let user = authn.authenticate_token(&token).unwrap().unwrap();
        assert_eq!(user.name, "system:serviceaccount:default:default");
        assert_eq!(
            user.groups,
            vec!["system:serviceaccounts", "system:serviceaccounts:default"]
        );
        assert_eq!(user.extra[POD_NAME_KEY], vec!["p"]);
        // Expired (beyond the leeway), wrong audience, other pod uid, deleted SA.
        assert!(
            authn
                .authenticate_token(&issuer.sign(claims(-3600, None)).unwrap())
                .is_err()
        );
        let mut other_aud = claims(3600, None);
        other_aud.aud = vec!["vault".into()];
        assert!(
            authn
                .authenticate_token(&issuer.sign(other_aud).unwrap())
                .is_err()
        );
        let stale = Some(Ref {
            name: "p".into(),
            uid: "old".into(),
        });
        assert!(
            authn
                .authenticate_token(&issuer.sign(claims(3600, stale)).unwrap())
                .is_err()
        );
        let gone = Some(Ref {
            name: "gone".into(),
            uid: "x".into(),
        });
        assert!(
            authn
                .authenticate_token(&issuer.sign(claims(3600, gone)).unwrap())
                .is_err()
        );
        // Another issuer's key: ours by iss, bad signature.
        let (p2, pub2) = keys();
        let forged = TokenIssuer::new(&p2, &pub2, ISS)
            .unwrap()
            .sign(claims(3600, None))
            .unwrap();
        assert!(authn.authenticate_token(&forged).is_err());
        // Not ours at all.
        assert!(authn.authenticate_token("abc").unwrap().is_none());
        let other_iss = TokenIssuer::new(&private, &public, "https://elsewhere")
            .unwrap()
            .sign(claims(3600, None))
            .unwrap();
        assert!(authn.authenticate_token(&other_iss).unwrap().is_none());
        let jwks = authn.jwks();
        assert_eq!(jwks["keys"][0]["alg"], "ES256");
        assert_eq!(jwks["keys"][0]["kid"], json!(issuer.kid));
    }

    #[test]
    fn jti_is_a_uuid() {
        let j = new_jti();
        assert_eq!(j.len(), 36);
        assert_eq!(&j[14..15], "4");
        assert_ne!(j, new_jti());
    }

    #[test]
    fn bad_keys_are_errors() {
        assert!(parse_public_keys("nothing").is_err());
        assert!(
            TokenIssuer::new(
                "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
                "",
                ISS
            )
            .is_err()
        );
    }
}
