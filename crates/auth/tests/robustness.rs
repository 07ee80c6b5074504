//! Malformed credentials never panic and never authenticate: a bounded,
//! deterministic random loop (xorshift PRNG, fixed seed) over headers, tokens,
//! certificate bytes and request paths, plus hand-picked nasty cases.

use ferrokube_auth::{
    AnonymousAuthenticator, AuthRequest, Authenticator, TokenFileAuthenticator, UnionAuthenticator,
    X509Authenticator, request_attributes, request_info,
};
use ferrokube_pki::{CertificateAuthority, Validity};
use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderValue};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let len = self.below(max + 1);
        (0..len).map(|_| self.next() as u8).collect()
    }
}

const TOKEN: &str = "s3cr3t-token";

fn authenticators(ca_pem: &str) -> Vec<(&'static str, Box<dyn Authenticator>)> {
    let tokens = || TokenFileAuthenticator::from_csv(&format!("{TOKEN},alice,1,dev")).unwrap();
    vec![
        ("token", Box::new(tokens())),
        ("x509", Box::new(X509Authenticator::new(ca_pem).unwrap())),
        (
            "union",
            Box::new(
                UnionAuthenticator::new(vec![
                    Box::new(X509Authenticator::new(ca_pem).unwrap()),
                    Box::new(tokens()),
                ])
                .with_anonymous(AnonymousAuthenticator::everywhere()),
            ),
        ),
    ]
}

/// The only acceptable success for a malformed request is the anonymous user, and
/// only when no credential was recognized.
fn assert_not_authenticated(
    auths: &[(&str, Box<dyn Authenticator>)],
    headers: &HeaderMap,
    certs: &[CertificateDer<'static>],
    what: &str,
) {
    for (name, auth) in auths {
        let result = auth.authenticate(&AuthRequest {
            headers,
            peer_certificates: certs,
            path: "",
        });
        if let Ok(Some(user)) = result {
            assert_eq!(user.name, "system:anonymous", "{name} authenticated {what}");
        }
    }
}

#[test]
fn random_authorization_headers_never_authenticate() {
    let ca = CertificateAuthority::generate("ca").unwrap();
    let auths = authenticators(ca.cert_pem());
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let prefixes: [&[u8]; 6] = [
        b"",
        b"Bearer ",
        b"bearer ",
        b"BEARER  ",
        b"Basic ",
        b"Bearer s3cr3t",
    ];
    for i in 0..3000 {
        let mut value = prefixes[rng.below(prefixes.len())].to_vec();
        value.extend(rng.bytes(if i % 100 == 0 { 16 * 1024 } else { 64 }));
        if value.as_slice().trim_ascii() == format!("Bearer {TOKEN}").as_bytes()
            || value.starts_with(format!("Bearer {TOKEN} ").as_bytes())
        {
            continue;
        }
        let Ok(hv) = HeaderValue::from_bytes(&value) else {
            continue;
        };
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, hv);
        assert_not_authenticated(&auths, &headers, &[], &format!("header {value:?}"));
    }
}

#[test]
fn nasty_headers_never_authenticate() {
    let ca = CertificateAuthority::generate("ca").unwrap();
    let auths = authenticators(ca.cert_pem());
    let huge = format!("Bearer {}", "A".repeat(1 << 20));
    let cases: Vec<Vec<u8>> = vec![
        b"Bearer".to_vec(),
        b"Bearer ".to_vec(),
        b"Bearer  s3cr3t-token".to_vec(),
        b"Bearer\ts3cr3t-token".to_vec(),
        b"Bearers3cr3t-token".to_vec(),
        b"Bearer s3cr3t-toke".to_vec(),
        b"Bearer s3cr3t-token\xff".to_vec(),
        b"Bearer \xff\xfe\xfd".to_vec(),
        b"Bearer \xc3\x28".to_vec(),
        b"Basic s3cr3t-token".to_vec(),
        b"s3cr3t-token".to_vec(),
        huge.into_bytes(),
    ];
    for value in cases {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_bytes(&value).unwrap());
        assert_not_authenticated(
            &auths,
            &headers,
            &[],
            &format!("{:?}", String::from_utf8_lossy(&value)),
        );
    }
    // Several Authorization headers: only the first counts (Go's Header.Get).
    let mut headers = HeaderMap::new();
    headers.append(AUTHORIZATION, HeaderValue::from_static("Bearer wrong"));
    headers.append(
        AUTHORIZATION,
        HeaderValue::from_static("Bearer s3cr3t-token"),
    );
    assert_not_authenticated(&auths, &headers, &[], "second header");

    // Sanity: the real token does authenticate, so the checks above can fail.
    let mut headers = HeaderMap::new();
    headers.insert(
        AUTHORIZATION,
        HeaderValue::from_static("Bearer s3cr3t-token"),
    );
    let user = auths[2]
        .1
        .authenticate(&AuthRequest {
            headers: &headers,
            peer_certificates: &[],
            path: "",
        })
        .unwrap()
        .unwrap();
    assert_eq!(user.name, "alice");
}

#[test]
fn random_and_mutated_certificates_never_authenticate() {
    let ca = CertificateAuthority::generate("ca").unwrap();
    let other = CertificateAuthority::generate("ca").unwrap();
    let auths = authenticators(ca.cert_pem());
    let good = ca
        .issue_client_cert(
            "alice",
            &["system:masters".into()],
            Validity::leaf_default(),
        )
        .unwrap();
    let good_der = CertificateDer::from_pem_slice(good.cert_pem.as_bytes()).unwrap();
    let foreign = other
        .issue_client_cert(
            "alice",
            &["system:masters".into()],
            Validity::leaf_default(),
        )
        .unwrap();
    let foreign_der = CertificateDer::from_pem_slice(foreign.cert_pem.as_bytes()).unwrap();
    let headers = HeaderMap::new();

    // Sanity: the untouched certificate authenticates.
    let ok = auths[1].1.authenticate(&AuthRequest {
        headers: &headers,
        peer_certificates: std::slice::from_ref(&good_der),
        path: "",
    });
    assert_eq!(ok.unwrap().unwrap().name, "alice");

    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    for i in 0..1500 {
        let cert = match i % 3 {
            0 => CertificateDer::from(rng.bytes(2048)),
            1 => {
                // Flip 1-4 bytes of a valid certificate: the signature no longer holds
                // (or the DER no longer parses).
                let mut bytes = good_der.as_ref().to_vec();
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(bytes.len());
                    let flip = 1 + rng.below(255) as u8;
                    bytes[at] ^= flip;
                }
                CertificateDer::from(bytes)
            }
            _ => {
                let mut bytes = good_der.as_ref().to_vec();
                bytes.truncate(rng.below(bytes.len()));
                CertificateDer::from(bytes)
            }
        };
        // A valid foreign leaf, or garbage, followed by the good certificate as a
        // fake "intermediate", must not help either.
        let chains = [
            vec![cert.clone()],
            vec![cert.clone(), good_der.clone()],
            vec![foreign_der.clone(), cert],
        ];
        for chain in &chains {
            assert_not_authenticated(&auths, &headers, chain, &format!("iteration {i}"));
        }
    }
}

#[test]
fn random_paths_and_queries_never_panic() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let alphabet: &[u8] = b"/apis/v1/namespaces/pods/watch/proxy/status/%2F%zz?&=,!\\.+ \xc3\xa9";
    let methods = [
        "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "", "get",
    ];
    for _ in 0..5000 {
        let len = rng.below(80);
        let raw: Vec<u8> = (0..len)
            .map(|_| alphabet[rng.below(alphabet.len())])
            .collect();
        let s = String::from_utf8_lossy(&raw).into_owned();
        let (path, query) = match s.split_once('?') {
            Some((p, q)) => (p.to_string(), Some(q.to_string())),
            None => (s, None),
        };
        let method = methods[rng.below(methods.len())];
        let attrs = request_attributes(method, &path, query.as_deref());
        if let Ok(info) = request_info(method, &path, query.as_deref()) {
            assert_eq!(info.is_resource_request, attrs.resource_request);
            if !info.is_resource_request {
                assert_eq!(info.verb, method.to_lowercase());
            }
        }
    }
}
