//! The CSR signing controller (upstream `pkg/controller/certificates/signer`, the
//! `certificatesigningrequest-signing-controller`): a CertificateSigningRequest
//! that is approved, not denied, not failed and has no certificate yet, for one of
//! the `kubernetes.io` signers this manager has a CA for, gets its certificate in
//! `status.certificate` (PEM, through `/status`) or, when it breaks its signer's
//! rules, a `Failed` condition with reason `SignerValidationFailure` and upstream's
//! message.
//!
//! Signers and their rules (upstream's): `kube-apiserver-client` (usages only
//! digital signature, key encipherment and client auth, with client auth),
//! `kube-apiserver-client-kubelet` and `kubelet-serving` (see [`crate::csr`]), and
//! `legacy-unknown` (no rules). The CAs come from `--cluster-signing-cert-file` /
//! `--cluster-signing-key-file` (every signer) or the per-signer flags.
//!
//! Validity: `--cluster-signing-duration` (default 8760h), or `spec.expirationSeconds`
//! when shorter (at least 10 minutes); not before now - 5 min; a certificate of 8 h
//! or more ends 5 min earlier to keep its lifetime; never after the CA's end.
//!
//! Pure part: [`check_request`], [`duration`], [`validity`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ferrokube_pki::CertificateAuthority;
use ferrokube_pki::csr::{CertificateRequest, parse_request_pem};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};

use ferrokube_client::informer::{SharedInformerFactory, Store};
use ferrokube_client::workqueue::WorkQueue;

use crate::csr::{
    FAILED, KUBE_APISERVER_CLIENT, KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING, LEGACY_UNKNOWN,
    condition, has_true_condition, is_approved, is_issued, usage_set,
    validate_apiserver_client_usages, validate_kubelet_client, validate_kubelet_serving,
};
use crate::{Action, Controller, Error, Result, done_unless_failed, enqueue_live};

/// Upstream's `--cluster-signing-duration` default (8760h).
pub const DEFAULT_DURATION: Duration = Duration::from_secs(8760 * 3600);
/// How far back `notBefore` goes (upstream's signer: 5 minutes).
pub const BACKDATE: Duration = Duration::from_secs(5 * 60);
/// Below this a certificate is short-lived and its end is not backdated (8 hours).
pub const SHORT: Duration = Duration::from_secs(8 * 3600);
/// The shortest certificate the signer issues (twice the backdate).
pub const MIN_DURATION: Duration = Duration::from_secs(10 * 60);
/// Upstream's Failed reason for a request its signer's rules refuse.
pub const SIGNER_VALIDATION_FAILURE: &str = "SignerValidationFailure";

/// The four signers this controller knows, in upstream's order.
pub const SIGNERS: [&str; 4] = [
    KUBELET_SERVING,
    KUBE_APISERVER_CLIENT_KUBELET,
    KUBE_APISERVER_CLIENT,
    LEGACY_UNKNOWN,
];

/// One signer's CA, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct SignerCa {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for SignerCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignerCa")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"[elided]")
            .finish()
    }
}

/// The signing controller's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsrSigningConfig {
    /// The CA of each signer name (one of [`SIGNERS`]); a signer without one is
    /// left to others. Empty: the controller does not run.
    pub signers: BTreeMap<String, SignerCa>,
    /// `--cluster-signing-duration`: the longest certificate issued.
    pub duration: Duration,
}

impl Default for CsrSigningConfig {
    fn default() -> Self {
        CsrSigningConfig {
            signers: BTreeMap::new(),
            duration: DEFAULT_DURATION,
        }
    }
}

impl CsrSigningConfig {
    /// Whether every CA loads (for the command line's early check).
    pub fn check(&self) -> Result<()> {
        for (name, ca) in &self.signers {
            CertificateAuthority::load(&ca.cert_pem, &ca.key_pem)
                .map_err(|e| Error::Invalid(format!("the CA of signer {name}: {e}")))?;
        }
        Ok(())
    }
}

/// Upstream's per-signer rules (`isKubeletServing`, `isKubeletClient`,
/// `isKubeAPIServerClient`, `isLegacyUnknown`): `Err` with the Failed message when
/// the request breaks its signer's rules.
pub fn check_request(
    signer: &str,
    req: &CertificateRequest,
    csr: &CertificateSigningRequest,
) -> Result<(), String> {
    match signer {
        KUBELET_SERVING => validate_kubelet_serving(req, &usage_set(csr)),
        KUBE_APISERVER_CLIENT_KUBELET => validate_kubelet_client(req, &usage_set(csr)),
        KUBE_APISERVER_CLIENT => {
            validate_apiserver_client_usages(csr.spec.usages.as_deref().unwrap_or_default())
        }
        _ => Ok(()),
    }
}

/// Upstream `signer.duration`: the configured duration, or the requested one when
/// shorter, but at least [`MIN_DURATION`].
pub fn duration(configured: Duration, expiration_seconds: Option<i32>) -> Duration {
    let Some(secs) = expiration_seconds else {
        return configured;
    };
    let requested = Duration::from_secs(u64::try_from(secs).unwrap_or(0));
    if requested > configured {
        configured
    } else {
        requested.max(MIN_DURATION)
    }
}

/// Upstream `PermissiveSigningPolicy.apply`'s window: (notBefore, notAfter), or the
/// error when the CA has expired.
pub fn validity(
    now: SystemTime,
    ttl: Duration,
    ca_not_after: SystemTime,
) -> Result<(SystemTime, SystemTime), String> {
    let not_before = now.checked_sub(BACKDATE).unwrap_or(now);
    let mut not_after = if ttl < SHORT {
        now + ttl
    } else {
        now + ttl.saturating_sub(BACKDATE)
    };
    if not_after >= ca_not_after {
        not_after = ca_not_after;
    }
    let rfc3339 = |t: SystemTime| {
        k8s_openapi::jiff::Timestamp::try_from(t)
            .map(|t| t.to_string())
            .unwrap_or_default()
    };
    if not_before >= ca_not_after {
        return Err(format!(
            "the signer has expired: NotAfter={}",
            rfc3339(ca_not_after)
        ));
    }
    if now >= ca_not_after {
        return Err(format!(
            "refusing to sign a certificate that expired in the past: NotAfter={}",
            rfc3339(ca_not_after)
        ));
    }
    Ok((not_before, not_after))
}

/// The CSR signing controller.
pub struct CsrSigningController {
    client: kube::Client,
    signers: BTreeMap<String, CertificateAuthority>,
    duration: Duration,
    csrs: Store<CertificateSigningRequest>,
}

impl CsrSigningController {
    /// Loads every configured CA; a CA that does not load is an error.
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        cfg: &CsrSigningConfig,
    ) -> Result<Arc<Self>> {
        let mut signers = BTreeMap::new();
        for (name, ca) in &cfg.signers {
            if !SIGNERS.contains(&name.as_str()) {
                return Err(Error::Invalid(format!("unrecognized signerName: {name:?}")));
            }
            let loaded = CertificateAuthority::load(&ca.cert_pem, &ca.key_pem)
                .map_err(|e| Error::Invalid(format!("CA of signer {name}: {e}")))?;
            signers.insert(name.clone(), loaded);
        }
        Ok(Arc::new(CsrSigningController {
            client,
            signers,
            duration: cfg.duration,
            csrs: factory.informer::<CertificateSigningRequest>().store(),
        }))
    }

    async fn write_status(&self, name: &str, csr: &CertificateSigningRequest) -> Result<Action> {
        let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        // A stale cache gives a 409 (resourceVersion): the retry sees the fresh CSR.
        done_unless_failed(api.replace_status(name, &PostParams::default(), csr).await)
    }
}

#[async_trait::async_trait]
impl Controller for CsrSigningController {
    fn name(&self) -> &'static str {
        "csrsigning"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        enqueue_live(factory, queue, |csr: &CertificateSigningRequest| {
            is_approved(csr) && !is_issued(csr)
        });
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(csr) = self.csrs.get(key) else {
            return Ok(Action::Done);
        };
        if is_issued(&csr) || !is_approved(&csr) || has_true_condition(&csr, FAILED) {
            return Ok(Action::Done);
        }
        let signer = csr.spec.signer_name.as_str();
        let Some(ca) = self.signers.get(signer) else {
            return Ok(Action::Done);
        };
        let req = parse_request_pem(&csr.spec.request.0)
            .map_err(|e| Error::Invalid(format!("unable to parse csr {key:?}: {e}")))?;
        let now = SystemTime::now();
        let mut updated = (*csr).clone();
        let status = updated.status.get_or_insert_with(Default::default);
        if let Err(message) = check_request(signer, &req, &csr) {
            tracing::info!(csr = key, %signer, %message, "request breaks its signer's rules: Failed");
            let stamp = Time(k8s_openapi::jiff::Timestamp::now());
            status
                .conditions
                .get_or_insert_with(Vec::new)
                .push(condition(
                    FAILED,
                    SIGNER_VALIDATION_FAILURE,
                    &message,
                    stamp,
                ));
            return self.write_status(key, &updated).await;
        }
        let ca_not_after = ca.not_after().map_err(|e| Error::Invalid(e.to_string()))?;
        let ttl = duration(self.duration, csr.spec.expiration_seconds);
        let (not_before, not_after) = validity(now, ttl, ca_not_after).map_err(Error::Invalid)?;
        let usages = csr.spec.usages.clone().unwrap_or_default();
        let cert = ca
            .sign_request(&req, &usages, not_before, not_after)
            .map_err(|e| Error::Invalid(format!("error auto signing csr: {e}")))?;
        status.certificate = Some(ByteString(cert.into_bytes()));
        tracing::info!(csr = key, %signer, "signed");
        self.write_status(key, &updated).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn duration_as_upstream() {
        assert_eq!(duration(DEFAULT_DURATION, None), DEFAULT_DURATION);
        assert_eq!(duration(HOUR, Some(7200)), HOUR);
        assert_eq!(duration(DEFAULT_DURATION, Some(3600)), HOUR);
        assert_eq!(duration(DEFAULT_DURATION, Some(600)), MIN_DURATION);
        assert_eq!(duration(DEFAULT_DURATION, Some(60)), MIN_DURATION);
        assert_eq!(duration(DEFAULT_DURATION, Some(-5)), MIN_DURATION);
    }

    #[test]
    fn validity_as_upstream() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let far = now + 100_000 * HOUR;
        // Short-lived: notAfter = now + ttl.
        assert_eq!(validity(now, HOUR, far), Ok((now - BACKDATE, now + HOUR)));
        // Long-lived: the backdate comes off the end too.
        assert_eq!(
            validity(now, 24 * HOUR, far),
            Ok((now - BACKDATE, now + 24 * HOUR - BACKDATE))
        );
        // Never past the CA.
        let ca_end = now + 2 * HOUR;
        assert_eq!(
            validity(now, 24 * HOUR, ca_end),
            Ok((now - BACKDATE, ca_end))
        );
        // A CA that has expired.
        let e = validity(now, HOUR, now - HOUR).unwrap_err();
        assert!(e.starts_with("the signer has expired: NotAfter="), "{e}");
        let e = validity(now, HOUR, now - Duration::from_secs(1)).unwrap_err();
        assert!(
            e.starts_with("refusing to sign a certificate that expired in the past"),
            "{e}"
        );
    }
}
