//! The CSR cleaner (upstream `pkg/controller/certificates/cleaner`, the
//! `certificatesigningrequest-cleaner-controller`): deletes requests that are done
//! with, at upstream's ages: approved and issued 1 h after approval, denied or
//! failed 1 h after that condition (its `lastUpdateTime`), pending 24 h after
//! creation, and issued ones whose certificate has expired.
//!
//! Upstream polls every CSR hourly; here each CSR is reconciled on its events and
//! requeued for the moment it becomes due ([`due_in`]), which deletes at the same
//! ages without the hourly lag.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ferrokube_pki::CertInfo;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;

use ferrokube_client::informer::{SharedInformerFactory, Store};
use ferrokube_client::workqueue::WorkQueue;

use crate::csr::{APPROVED, DENIED, FAILED, is_issued};
use crate::replicaset::delete_exactly;
use crate::{Action, Controller, Result, enqueue_live};

/// Upstream `approvedExpiration`.
pub const APPROVED_EXPIRATION: Duration = Duration::from_secs(3600);
/// Upstream `deniedExpiration`.
pub const DENIED_EXPIRATION: Duration = Duration::from_secs(3600);
/// Upstream `failedExpiration`.
pub const FAILED_EXPIRATION: Duration = Duration::from_secs(3600);
/// Upstream `pendingExpiration`.
pub const PENDING_EXPIRATION: Duration = Duration::from_secs(24 * 3600);

fn system_time(t: &Time) -> SystemTime {
    SystemTime::from(t.0)
}

/// When the request becomes due for deletion (upstream's `isIssuedExpired`,
/// `isPendingPastDeadline`, `isDeniedPastDeadline`, `isFailedPastDeadline`,
/// `isIssuedPastDeadline`); `None`: never on its current state. A certificate that
/// does not parse counts as not expired, as upstream (which logs it).
pub fn due_at(csr: &CertificateSigningRequest) -> Option<SystemTime> {
    let conditions = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let issued = is_issued(csr);
    let mut due: Vec<SystemTime> = Vec::new();
    if conditions.is_empty()
        && let Some(created) = &csr.metadata.creation_timestamp
    {
        due.push(system_time(created) + PENDING_EXPIRATION);
    }
    for c in conditions {
        let Some(updated) = c.last_update_time.as_ref().map(system_time) else {
            continue;
        };
        match c.type_.as_str() {
            DENIED => due.push(updated + DENIED_EXPIRATION),
            FAILED => due.push(updated + FAILED_EXPIRATION),
            APPROVED if issued => due.push(updated + APPROVED_EXPIRATION),
            _ => {}
        }
    }
    if issued && conditions.iter().any(|c| c.type_ == APPROVED) {
        let cert = csr.status.as_ref().and_then(|s| s.certificate.as_ref());
        let pem = cert.map(|c| String::from_utf8_lossy(&c.0).into_owned());
        if let Some(info) = pem.and_then(|p| CertInfo::from_pem(&p).ok()) {
            due.push(info.not_after);
        }
    }
    due.into_iter().min()
}

/// How long until `csr` is due at `now` (zero when it is), `None` when never.
pub fn due_in(csr: &CertificateSigningRequest, now: SystemTime) -> Option<Duration> {
    due_at(csr).map(|at| at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The CSR cleaner.
pub struct CsrCleanerController {
    client: kube::Client,
    csrs: Store<CertificateSigningRequest>,
}

impl CsrCleanerController {
    pub fn new(factory: &SharedInformerFactory, client: kube::Client) -> Arc<Self> {
        Arc::new(CsrCleanerController {
            client,
            csrs: factory.informer::<CertificateSigningRequest>().store(),
        })
    }
}

#[async_trait::async_trait]
impl Controller for CsrCleanerController {
    fn name(&self) -> &'static str {
        "csrcleaner"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        enqueue_live(factory, queue, |_: &CertificateSigningRequest| true);
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(csr) = self.csrs.get(key) else {
            return Ok(Action::Done);
        };
        match due_in(&csr, SystemTime::now()) {
            None => Ok(Action::Done),
            Some(wait) if !wait.is_zero() => Ok(Action::RequeueAfter(wait)),
            Some(_) => {
                tracing::info!(csr = key, "cleaning up a finished, expired or stale CSR");
                let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
                delete_exactly(&api, key, csr.metadata.uid.clone()).await?;
                Ok(Action::Done)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HOUR: Duration = Duration::from_secs(3600);

    fn at(t: SystemTime) -> String {
        k8s_openapi::jiff::Timestamp::try_from(t)
            .unwrap()
            .to_string()
    }

    fn csr(
        created: SystemTime,
        conditions: serde_json::Value,
        cert: Option<&str>,
    ) -> CertificateSigningRequest {
        let v = json!({
            "metadata": {"name": "c", "creationTimestamp": at(created)},
            "spec": {"request": "", "signerName": "example.com/x"},
            "status": {"conditions": conditions}
        });
        let mut csr: CertificateSigningRequest = serde_json::from_value(v).unwrap();
        if let Some(c) = cert {
            csr.status.as_mut().unwrap().certificate =
                Some(k8s_openapi::ByteString(c.as_bytes().to_vec()));
        }
        csr
    }

    #[test]
    fn ages_as_upstream() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let created = now - 2 * HOUR;
        // Pending: 24 h after creation.
        let pending = csr(created, json!([]), None);
        assert_eq!(due_in(&pending, now), Some(22 * HOUR));
        assert_eq!(due_in(&pending, now + 30 * HOUR), Some(Duration::ZERO));
        // Denied and failed: 1 h after the condition.
        for t in ["Denied", "Failed"] {
            let c = csr(
                created,
                json!([{"type": t, "status": "True",
                "lastUpdateTime": at(now - 30 * 60 * Duration::from_secs(1))}]),
                None,
            );
            assert_eq!(due_in(&c, now), Some(HOUR / 2), "{t}");
        }
        // Approved but not issued: never (the signer may still come).
        let approved = csr(
            created,
            json!([{"type": "Approved", "status": "True",
            "lastUpdateTime": at(now - 3 * HOUR)}]),
            None,
        );
        assert_eq!(due_in(&approved, now), None);
        // A condition without its time does not count, as upstream's zero time.
        let untimed = csr(created, json!([{"type": "Denied", "status": "True"}]), None);
        assert_eq!(due_in(&untimed, now), None);

        // Issued: 1 h after approval, or when the certificate expires if sooner.
        let ca = ferrokube_pki::CertificateAuthority::generate("ca").unwrap();
        let cert = |end: SystemTime| {
            let validity = ferrokube_pki::Validity {
                not_before: created,
                not_after: end,
            };
            ca.issue_client_cert("u", &[], validity).unwrap().cert_pem
        };
        let approved_now = json!([{"type": "Approved", "status": "True",
            "lastUpdateTime": at(now)}]);
        let long = cert(now + 100 * HOUR);
        assert_eq!(
            due_in(&csr(created, approved_now.clone(), Some(&long)), now),
            Some(HOUR)
        );
        let expiring = cert(now + 10 * 60 * Duration::from_secs(1));
        assert_eq!(
            due_in(&csr(created, approved_now, Some(&expiring)), now),
            Some(10 * 60 * Duration::from_secs(1))
        );
    }
}
