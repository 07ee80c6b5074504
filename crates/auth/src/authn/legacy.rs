//! Legacy secret-based service account tokens (upstream `pkg/serviceaccount/legacy.go`):
//! the JWTs the controller manager's tokens controller writes into Secrets of type
//! `kubernetes.io/service-account-token`. They have issuer `kubernetes/serviceaccount`,
//! no audience and no expiry; they stay valid exactly as long as their Secret holds
//! the same token and the ServiceAccount they name (with the same uid) exists.
//!
//! [`LegacyTokenSigner`] signs them (the controller manager's
//! `--service-account-private-key-file`); [`validate`] is upstream's legacy validator,
//! run by [`super::ServiceAccountTokenAuthenticator`] once the signature verified.
//!
//! A successful authentication calls [`BoundObjects::legacy_token_used`], where the
//! apiserver sets upstream's [`LAST_USED_LABEL`] on the Secret.

use jsonwebtoken::EncodingKey;
use serde::{Deserialize, Serialize};

use super::AuthError;
use super::serviceaccount::{BoundObjects, TokenError, key_id};
use crate::rbac::service_account_user;
use crate::user::UserInfo;

/// Upstream `serviceaccount.LegacyIssuer`.
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";

/// Upstream `LegacyTokenInvalidatedLabelKey`: set by the legacy token cleaner on
/// tokens it has invalidated.
pub const INVALIDATED_LABEL: &str = "kubernetes.io/legacy-token-invalid-since";

/// Upstream `LastUsedLabelKey`: the day (UTC, `YYYY-MM-DD`) a legacy token was last
/// used, set by the apiserver at most once a day.
pub const LAST_USED_LABEL: &str = "kubernetes.io/legacy-token-last-used";

/// The day (UTC) the legacy token labels and the tracking ConfigMap's `since` name for
/// the instant `t`.
pub fn utc_day(t: k8s_openapi::jiff::Timestamp) -> k8s_openapi::jiff::civil::Date {
    t.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC).date()
}

/// A day as those labels and that ConfigMap hold it: upstream's `dateFormat`
/// (`2006-01-02`), exactly ten characters naming a valid day.
pub fn parse_day(s: &str) -> Option<k8s_openapi::jiff::civil::Date> {
    (s.len() == 10).then(|| s.parse().ok()).flatten()
}

/// The claims of a legacy token (upstream `legacyPrivateClaims` plus `iss`/`sub`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegacyClaims {
    pub iss: String,
    pub sub: String,
    #[serde(rename = "kubernetes.io/serviceaccount/namespace", default)]
    pub namespace: String,
    #[serde(rename = "kubernetes.io/serviceaccount/secret.name", default)]
    pub secret_name: String,
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.name", default)]
    pub service_account_name: String,
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.uid", default)]
    pub service_account_uid: String,
}

impl LegacyClaims {
    /// The claims of a token for the ServiceAccount `name` (uid `uid`) in `namespace`,
    /// stored in the Secret `secret`.
    pub fn new(namespace: &str, name: &str, uid: &str, secret: &str) -> Self {
        LegacyClaims {
            iss: LEGACY_ISSUER.to_string(),
            sub: service_account_user(namespace, name),
            namespace: namespace.to_string(),
            secret_name: secret.to_string(),
            service_account_name: name.to_string(),
            service_account_uid: uid.to_string(),
        }
    }
}

/// The state of a legacy token's Secret that validation needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LegacySecret {
    /// `data.token`, decoded.
    pub token: Vec<u8>,
    /// The Secret has a deletionTimestamp.
    pub deleting: bool,
    /// The Secret carries [`INVALIDATED_LABEL`].
    pub invalidated: bool,
}

/// Signs legacy tokens with an ECDSA P-256 private key (PKCS#8 PEM, the PKI's
/// `sa.key`). The key id is the one the apiserver derives from the public key, so
/// the verifier picks the matching `--service-account-key-file` key.
pub struct LegacyTokenSigner {
    key: EncodingKey,
    kid: String,
}

impl std::fmt::Debug for LegacyTokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacyTokenSigner")
            .field("kid", &self.kid)
            .finish()
    }
}

/// DER prefix of a P-256 SubjectPublicKeyInfo (id-ecPublicKey, prime256v1, BIT
/// STRING of 66 bytes); the 65-byte uncompressed point follows it.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

impl LegacyTokenSigner {
    /// From the PKCS#8 PEM of an ECDSA P-256 private key.
    pub fn new(private_key_pem: &str) -> Result<Self, TokenError> {
        use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
        use rustls_pki_types::pem::PemObject;
        let der = rustls_pki_types::PrivatePkcs8KeyDer::from_pem_slice(private_key_pem.as_bytes())
            .map_err(|e| TokenError::Key(format!("private key: {e}")))?;
        let pair = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            der.secret_pkcs8_der(),
            &ring::rand::SystemRandom::new(),
        )
        .map_err(|e| TokenError::Key(format!("only ECDSA P-256 PKCS#8 keys are supported: {e}")))?;
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(pair.public_key().as_ref());
        let key = EncodingKey::from_ec_pem(private_key_pem.as_bytes())
            .map_err(|e| TokenError::Key(e.to_string()))?;
        Ok(LegacyTokenSigner {
            key,
            kid: key_id(&spki),
        })
    }

    /// Signs `claims` (upstream `JWTTokenGenerator(LegacyIssuer, key).GenerateToken`).
    pub fn sign(&self, claims: &LegacyClaims) -> Result<String, TokenError> {
        jsonwebtoken::encode(
            &super::serviceaccount::signing_header(&self.kid),
            claims,
            &self.key,
        )
        .map_err(|e| TokenError::Sign(e.to_string()))
    }
}

fn invalid(msg: impl Into<String>) -> AuthError {
    AuthError::InvalidServiceAccountToken(msg.into())
}

/// Upstream's legacy validator over verified `claims`: every claim present and, with
/// `lookup` (`--service-account-lookup`), the Secret still there, not being deleted
/// or invalidated and holding this very `token`, and the ServiceAccount there with
/// the claimed uid. The user is the ServiceAccount's, as for bound tokens
/// (`system:authenticated` is added by the union).
pub fn validate(
    claims: &LegacyClaims,
    token: &str,
    objects: &dyn BoundObjects,
    lookup: bool,
) -> Result<UserInfo, AuthError> {
    for (value, claim) in [
        (&claims.service_account_name, "serviceAccountName"),
        (&claims.service_account_uid, "serviceAccountUID"),
        (&claims.secret_name, "secretName"),
        (&claims.namespace, "namespace"),
    ] {
        if value.is_empty() {
            return Err(invalid(format!("{claim} claim is missing")));
        }
    }
    let ns = &claims.namespace;
    let name = &claims.service_account_name;
    if claims.sub != service_account_user(ns, name) {
        return Err(invalid("subject does not match the service account"));
    }
    let user = |uid: String| UserInfo {
        name: claims.sub.clone(),
        uid,
        groups: vec![
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{ns}"),
        ],
        ..UserInfo::default()
    };
    if !lookup {
        return Ok(user(claims.service_account_uid.clone()));
    }
    let Some(secret) = objects.legacy_token_secret(ns, &claims.secret_name) else {
        return Err(invalid("Token has been invalidated"));
    };
    if secret.deleting || secret.invalidated {
        return Err(invalid("Token has been invalidated"));
    }
    if secret.token != token.as_bytes() {
        return Err(invalid("Token does not match server's copy"));
    }
    match objects.service_account_uid(ns, name) {
        None => Err(invalid(format!("serviceaccounts \"{name}\" not found"))),
        Some(uid) if uid != claims.service_account_uid => Err(invalid(format!(
            "ServiceAccount UID ({uid}) does not match claim ({})",
            claims.service_account_uid
        ))),
        Some(uid) => {
            objects.legacy_token_used(ns, &claims.secret_name);
            Ok(user(uid))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::ServiceAccountTokenAuthenticator;
    use std::collections::HashMap;

    const ISS: &str = "https://kubernetes.default.svc.cluster.local";

    #[derive(Default)]
    struct Objects {
        sas: HashMap<String, String>,
        secrets: HashMap<String, LegacySecret>,
    }

    impl BoundObjects for Objects {
        fn service_account_uid(&self, ns: &str, name: &str) -> Option<String> {
            self.sas.get(&format!("{ns}/{name}")).cloned()
        }
        fn pod(&self, _: &str, _: &str) -> Option<(String, bool)> {
            None
        }
        fn secret_uid(&self, _: &str, _: &str) -> Option<String> {
            None
        }
        fn legacy_token_secret(&self, ns: &str, name: &str) -> Option<LegacySecret> {
            self.secrets.get(&format!("{ns}/{name}")).cloned()
        }
    }

    fn authenticator(public: &str, objects: Objects) -> ServiceAccountTokenAuthenticator<Objects> {
        ServiceAccountTokenAuthenticator::new(public, vec![ISS.into()], vec![ISS.into()], objects)
            .unwrap()
    }

    /// A signing key, its signer and a token of `ci/builder` held by Secret
    /// `builder-token`.
    fn builder_token() -> (rcgen::KeyPair, LegacyTokenSigner, String) {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let signer = LegacyTokenSigner::new(&key.serialize_pem()).unwrap();
        let token = signer
            .sign(&LegacyClaims::new(
                "ci",
                "builder",
                "sa-uid",
                "builder-token",
            ))
            .unwrap();
        (key, signer, token)
    }

    #[test]
    fn legacy_tokens_live_as_long_as_their_secret_and_account() {
        let (key, signer, token) = builder_token();
        let secret = LegacySecret {
            token: token.clone().into_bytes(),
            ..LegacySecret::default()
        };
        let objects = |secret: Option<LegacySecret>, sa_uid: Option<&str>| {
            let mut o = Objects::default();
            if let Some(uid) = sa_uid {
                o.sas.insert("ci/builder".into(), uid.into());
            }
            if let Some(s) = secret {
                o.secrets.insert("ci/builder-token".into(), s);
            }
            o
        };
        let public = key.public_key_pem();
        let user = authenticator(&public, objects(Some(secret.clone()), Some("sa-uid")))
            .authenticate_token(&token)
            .unwrap()
            .unwrap();
        assert_eq!(user.name, "system:serviceaccount:ci:builder");
        assert_eq!(user.uid, "sa-uid");
        assert_eq!(
            user.groups,
            ["system:serviceaccounts", "system:serviceaccounts:ci"]
        );

        let rejected = |o: Objects| {
            authenticator(&public, o)
                .authenticate_token(&token)
                .unwrap_err()
                .to_string()
        };
        assert!(rejected(objects(None, Some("sa-uid"))).contains("Token has been invalidated"));
        let other = LegacySecret {
            token: b"another".to_vec(),
            ..LegacySecret::default()
        };
        assert!(
            rejected(objects(Some(other), Some("sa-uid")))
                .contains("Token does not match server's copy")
        );
        let deleting = LegacySecret {
            deleting: true,
            ..secret.clone()
        };
        assert!(rejected(objects(Some(deleting), Some("sa-uid"))).contains("invalidated"));
        assert!(
            rejected(objects(Some(secret.clone()), None))
                .contains("serviceaccounts \"builder\" not found")
        );
        assert!(
            rejected(objects(Some(secret.clone()), Some("new-uid")))
                .contains("ServiceAccount UID (new-uid) does not match claim (sa-uid)")
        );
        // Another key's signature is refused before any lookup.
        let other_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let forged = LegacyTokenSigner::new(&other_key.serialize_pem())
            .unwrap()
            .sign(&LegacyClaims::new(
                "ci",
                "builder",
                "sa-uid",
                "builder-token",
            ))
            .unwrap();
        let authn = authenticator(&public, objects(Some(secret), Some("sa-uid")));
        assert!(authn.authenticate_token(&forged).is_err());
        // Missing claims are named.
        let mut partial = LegacyClaims::new("ci", "builder", "sa-uid", "builder-token");
        partial.secret_name.clear();
        let e = authn
            .authenticate_token(&signer.sign(&partial).unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("secretName claim is missing"), "{e}");
    }

    #[test]
    fn without_lookup_a_legacy_token_stands_on_its_claims() {
        let (key, signer, token) = builder_token();
        // Neither the Secret nor the ServiceAccount exists.
        let no_lookup =
            authenticator(&key.public_key_pem(), Objects::default()).with_legacy_lookup(false);
        let user = no_lookup.authenticate_token(&token).unwrap().unwrap();
        assert_eq!(user.name, "system:serviceaccount:ci:builder");
        assert_eq!(user.uid, "sa-uid");
        // The claims are still checked.
        let mut partial = LegacyClaims::new("ci", "builder", "sa-uid", "builder-token");
        partial.namespace.clear();
        let e = no_lookup
            .authenticate_token(&signer.sign(&partial).unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("namespace claim is missing"), "{e}");
        // With lookup (the default) the same token is refused.
        assert!(
            authenticator(&key.public_key_pem(), Objects::default())
                .authenticate_token(&token)
                .is_err()
        );
    }

    #[test]
    fn signer_refuses_keys_it_cannot_use() {
        assert!(LegacyTokenSigner::new("not a key").is_err());
        let rsa_like = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        assert!(LegacyTokenSigner::new(rsa_like).is_err());
    }
}
