//! Property tests: malformed tokens, JWT look-alikes (including ones naming our
//! issuer), certificate bytes and headers thrown at the apiserver's authentication
//! chain (x509, token file, service account JWTs; no anonymous) never panic and never
//! authenticate: the result is always "401" (`Err` or `Ok(None)`).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ferrokube_auth::authn::serviceaccount::BoundObjects;
use ferrokube_auth::{
    AuthRequest, Authenticator, ServiceAccountTokenAuthenticator, TokenFileAuthenticator,
    UnionAuthenticator, X509Authenticator,
};
use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use rustls::pki_types::CertificateDer;

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Every object exists with the uid a forged token would claim, so only the
/// signature and claims checks stand between a forgery and a user.
struct EverythingExists;

impl BoundObjects for EverythingExists {
    fn service_account_uid(&self, _: &str, _: &str) -> Option<String> {
        Some("uid".into())
    }
    fn pod(&self, _: &str, _: &str) -> Option<(String, bool)> {
        Some(("uid".into(), false))
    }
    fn secret_uid(&self, _: &str, _: &str) -> Option<String> {
        Some("uid".into())
    }
}

fn chain() -> UnionAuthenticator {
    let ca = ferrokube_pki::CertificateAuthority::generate("ca").unwrap();
    let (_, public) = ferrokube_pki::generate_signing_key_pair().unwrap();
    UnionAuthenticator::new(vec![
        Box::new(X509Authenticator::new(ca.cert_pem()).unwrap()),
        Box::new(TokenFileAuthenticator::from_csv("the-one-token,alice,1,dev").unwrap()),
        Box::new(
            ServiceAccountTokenAuthenticator::new(
                &public,
                vec![ISSUER.into()],
                vec![ISSUER.into()],
                EverythingExists,
            )
            .unwrap(),
        ),
    ])
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// JWT look-alikes: random segments, or a real-looking header and claims (our
/// issuer, a service account subject) with a random or missing signature.
fn jwt_like() -> impl Strategy<Value = String> {
    let claims = (any::<i64>(), prop::sample::select(vec!["ES256", "RS256", "none", "HS256"]), any::<bool>())
        .prop_map(|(exp, alg, kid)| {
            let header = if kid {
                format!(r#"{{"alg":"{alg}","kid":"k"}}"#)
            } else {
                format!(r#"{{"alg":"{alg}"}}"#)
            };
            let payload = format!(
                r#"{{"aud":["{ISSUER}"],"exp":{exp},"iat":0,"nbf":0,"iss":"{ISSUER}","jti":"j","sub":"system:serviceaccount:default:default","kubernetes.io":{{"namespace":"default","serviceaccount":{{"name":"default","uid":"uid"}}}}}}"#
            );
            (header, payload)
        });
    prop_oneof![
        (any::<Vec<u8>>(), any::<Vec<u8>>(), any::<Vec<u8>>()).prop_map(|(a, b, c)| format!(
            "{}.{}.{}",
            b64(&a),
            b64(&b),
            b64(&c)
        )),
        (claims, prop::collection::vec(any::<u8>(), 0..80)).prop_map(|((h, p), sig)| {
            format!("{}.{}.{}", b64(h.as_bytes()), b64(p.as_bytes()), b64(&sig))
        }),
        "[A-Za-z0-9_.=-]{0,200}",
    ]
}

fn authorization_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        jwt_like().prop_map(|t| format!("Bearer {t}").into_bytes()),
        prop::collection::vec(any::<u8>(), 0..300),
        (
            prop::sample::select(vec!["Bearer ", "bearer  ", "Basic ", "Bearer\t", ""]),
            "\\PC{0,100}"
        )
            .prop_map(|(p, s)| format!("{p}{s}").into_bytes()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn malformed_credentials_are_always_401(
        auth in authorization_value(),
        certs in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..600), 0..3),
        extra in prop::collection::vec(("[a-z-]{1,20}", prop::collection::vec(any::<u8>(), 0..50)), 0..4),
    ) {
        let chain = chain();
        let mut headers = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_bytes(&auth) {
            headers.insert(AUTHORIZATION, v);
        }
        for (name, value) in &extra {
            if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(value)) {
                headers.append(n, v);
            }
        }
        let certs: Vec<CertificateDer<'static>> = certs.into_iter().map(CertificateDer::from).collect();
        let result = chain.authenticate(&AuthRequest { headers: &headers, peer_certificates: &certs, path: "" });
        prop_assert!(!matches!(result, Ok(Some(_))), "authenticated: {:?}", result);
    }
}
