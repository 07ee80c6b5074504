//! Upstream's `--tls-min-version` and `--tls-cipher-suites` (component-base's
//! `TLSVersion` and `TLSCipherSuites`), which every serving component takes, on rustls.
//!
//! The names are Go's (IANA's, plus the two legacy ChaCha20 names component-base keeps).
//! A name Go does not know stops the start, as upstream does. Go knows suites rustls does
//! not implement (CBC, RC4, 3DES, static RSA key exchange); naming one of those is
//! accepted with a warning and the suite is never offered, so the server still offers
//! only suites from the list. As in Go, the list governs TLS 1.2: TLS 1.3's suites are
//! not configurable, and TLS 1.0 and 1.1 are never served (rustls has neither).

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::crypto::ring::cipher_suite as ring_suites;
use rustls::version::{TLS12, TLS13};
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};

use crate::{PkiError, Result};

/// Upstream's two flags, as every serving binary declares them.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFlags {
    /// Minimum TLS version supported. Possible values: VersionTLS10, VersionTLS11,
    /// VersionTLS12, VersionTLS13 (TLS 1.0 and 1.1 are never served).
    #[arg(long = "tls-min-version", default_value = "")]
    pub tls_min_version: String,
    /// Comma-separated list of cipher suites for the server (Go's names). If omitted,
    /// rustls's default suites are used.
    #[arg(long = "tls-cipher-suites", value_delimiter = ',')]
    pub tls_cipher_suites: Vec<String>,
}

impl TlsFlags {
    /// The options the flags ask for, and warnings to log (see [`TlsOptions::parse`]).
    pub fn options(&self) -> Result<(TlsOptions, Vec<String>)> {
        TlsOptions::parse(&self.tls_min_version, &self.tls_cipher_suites)
    }

    /// [`TlsFlags::options`], its warnings logged: what a binary calls at start.
    pub fn options_logged(&self) -> Result<TlsOptions> {
        let (options, warnings) = self.options()?;
        for warning in warnings {
            tracing::warn!("{warning}");
        }
        Ok(options)
    }
}

/// What a serving port's TLS may negotiate. The default is rustls's: TLS 1.2 and 1.3
/// with all their suites.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    tls13_only: bool,
    /// `None`: every TLS 1.2 suite rustls has.
    tls12_suites: Option<Vec<SupportedCipherSuite>>,
}

/// What a Go cipher suite name is here.
enum Suite {
    /// A TLS 1.2 suite rustls implements.
    Tls12(SupportedCipherSuite),
    /// A TLS 1.3 suite: accepted, and (as in Go) without effect.
    Tls13,
    /// A suite Go implements and rustls does not.
    NotImplemented,
}

fn suite(name: &str) -> Option<Suite> {
    use ring_suites as s;
    Some(match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => {
            Suite::Tls12(s::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)
        }
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => {
            Suite::Tls12(s::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384)
        }
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" => {
            Suite::Tls12(s::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256)
        }
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => {
            Suite::Tls12(s::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)
        }
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => {
            Suite::Tls12(s::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384)
        }
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" => {
            Suite::Tls12(s::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256)
        }
        "TLS_AES_128_GCM_SHA256" | "TLS_AES_256_GCM_SHA384" | "TLS_CHACHA20_POLY1305_SHA256" => {
            Suite::Tls13
        }
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA"
        | "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA"
        | "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"
        | "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA"
        | "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256"
        | "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256"
        | "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA"
        | "TLS_ECDHE_RSA_WITH_RC4_128_SHA"
        | "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA"
        | "TLS_RSA_WITH_RC4_128_SHA"
        | "TLS_RSA_WITH_3DES_EDE_CBC_SHA"
        | "TLS_RSA_WITH_AES_128_CBC_SHA"
        | "TLS_RSA_WITH_AES_256_CBC_SHA"
        | "TLS_RSA_WITH_AES_128_CBC_SHA256"
        | "TLS_RSA_WITH_AES_128_GCM_SHA256"
        | "TLS_RSA_WITH_AES_256_GCM_SHA384" => Suite::NotImplemented,
        _ => return None,
    })
}

impl TlsOptions {
    /// From the two flags' values (`min_version` empty: the default, TLS 1.2). Errors
    /// carry upstream's messages; the warnings say what is served other than asked.
    pub fn parse(min_version: &str, cipher_suites: &[String]) -> Result<(TlsOptions, Vec<String>)> {
        let mut warnings = Vec::new();
        let tls13_only = match min_version {
            "" | "VersionTLS12" => false,
            "VersionTLS10" | "VersionTLS11" => {
                warnings.push(format!(
                    "--tls-min-version={min_version}: TLS 1.0 and 1.1 are not implemented; clients need TLS 1.2 or later"
                ));
                false
            }
            "VersionTLS13" => true,
            other => {
                return Err(PkiError::InvalidOption(format!(
                    "unknown tls version {other:?}"
                )));
            }
        };
        let names: Vec<&str> = cipher_suites
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .collect();
        if names.is_empty() {
            return Ok((
                TlsOptions {
                    tls13_only,
                    tls12_suites: None,
                },
                warnings,
            ));
        }
        let mut tls12 = Vec::new();
        for name in names {
            match suite(name) {
                Some(Suite::Tls12(s)) => {
                    if !tls12.contains(&s) {
                        tls12.push(s)
                    }
                }
                Some(Suite::Tls13) => {}
                Some(Suite::NotImplemented) => warnings.push(format!(
                    "cipher suite {name} is not implemented by this server's TLS (rustls) and is never offered"
                )),
                None => {
                    return Err(PkiError::InvalidOption(format!(
                        "cipher suite {name} not supported or doesn't exist"
                    )));
                }
            }
        }
        let mut tls13_only = tls13_only;
        if tls12.is_empty() && !tls13_only {
            warnings.push(
                "--tls-cipher-suites names no TLS 1.2 suite this server implements: only TLS 1.3 is served"
                    .into(),
            );
            tls13_only = true;
        } else if tls13_only && !tls12.is_empty() {
            warnings.push(
                "--tls-cipher-suites has no effect with --tls-min-version=VersionTLS13 (TLS 1.3's suites are not configurable)"
                    .into(),
            );
        }
        Ok((
            TlsOptions {
                tls13_only,
                tls12_suites: Some(tls12),
            },
            warnings,
        ))
    }

    /// The crypto provider (its suites restricted as asked) and the protocol versions a
    /// rustls configuration is built with.
    pub(crate) fn provider_and_versions(
        &self,
    ) -> (
        Arc<CryptoProvider>,
        &'static [&'static SupportedProtocolVersion],
    ) {
        let mut provider = rustls::crypto::ring::default_provider();
        if let Some(allowed) = &self.tls12_suites {
            provider.cipher_suites.retain(|s| match s {
                SupportedCipherSuite::Tls12(_) => allowed.contains(s),
                SupportedCipherSuite::Tls13(_) => true,
            });
        }
        static TLS13_ONLY: [&SupportedProtocolVersion; 1] = [&TLS13];
        static TLS13_AND_12: [&SupportedProtocolVersion; 2] = [&TLS13, &TLS12];
        let versions: &'static [&'static SupportedProtocolVersion] = if self.tls13_only {
            &TLS13_ONLY
        } else {
            &TLS13_AND_12
        };
        (Arc::new(provider), versions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn versions_follow_upstream_names() {
        let (o, w) = TlsOptions::parse("", &[]).unwrap();
        assert!(!o.tls13_only && o.tls12_suites.is_none() && w.is_empty());
        let (o, w) = TlsOptions::parse("VersionTLS12", &[]).unwrap();
        assert!(!o.tls13_only && w.is_empty());
        let (o, _) = TlsOptions::parse("VersionTLS13", &[]).unwrap();
        assert!(o.tls13_only);
        let (o, w) = TlsOptions::parse("VersionTLS10", &[]).unwrap();
        assert!(!o.tls13_only);
        assert!(
            w[0].contains("TLS 1.0 and 1.1 are not implemented"),
            "{w:?}"
        );
        let err = TlsOptions::parse("TLS1.2", &[]).unwrap_err().to_string();
        assert!(err.contains("unknown tls version \"TLS1.2\""), "{err}");
    }

    #[test]
    fn suites_restrict_tls12_and_unknown_names_are_refused() {
        // The CIS benchmark's list, with the legacy ChaCha20 names.
        let cis = strings(&[
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        ]);
        let (o, w) = TlsOptions::parse("", &cis).unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(o.tls12_suites.as_ref().unwrap().len(), 6);
        let (provider, versions) = o.provider_and_versions();
        assert_eq!(versions.len(), 2);
        assert_eq!(provider.cipher_suites.len(), 6 + 3);

        let one = strings(&[
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            "TLS_RSA_WITH_AES_128_CBC_SHA",
        ]);
        let (o, w) = TlsOptions::parse("", &one).unwrap();
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("TLS_RSA_WITH_AES_128_CBC_SHA is not implemented"),
            "{w:?}"
        );
        let (provider, _) = o.provider_and_versions();
        let tls12: Vec<_> = provider
            .cipher_suites
            .iter()
            .filter(|s| matches!(s, SupportedCipherSuite::Tls12(_)))
            .map(|s| s.suite())
            .collect();
        assert_eq!(
            tls12,
            [rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]
        );

        let err = TlsOptions::parse("", &strings(&["TLS_NOPE"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cipher suite TLS_NOPE not supported or doesn't exist"),
            "{err}"
        );
    }

    #[test]
    fn a_list_without_a_tls12_suite_serves_tls13_only() {
        let (o, w) = TlsOptions::parse("", &strings(&["TLS_AES_128_GCM_SHA256"])).unwrap();
        assert!(o.tls13_only);
        assert!(w[0].contains("only TLS 1.3 is served"), "{w:?}");
        let (o, w) = TlsOptions::parse(
            "VersionTLS13",
            &strings(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]),
        )
        .unwrap();
        assert!(o.tls13_only);
        assert!(w[0].contains("has no effect"), "{w:?}");
    }
}
