//! The CertificateSigningRequest plugins (upstream `plugin/pkg/admission/
//! certificates/{approval,signing,subjectrestriction}`), all validating:
//! - CertificateApproval: writing `certificatesigningrequests/approval` needs the
//!   `approve` verb on the `signers` resource named by the CSR's signerName (or on
//!   `<domain>/*`);
//! - CertificateSigning: changing `status.certificate` or the status conditions
//!   needs the `sign` verb on that signer;
//! - CertificateSubjectRestriction: a CSR for the `kubernetes.io/kube-apiserver-client`
//!   signer may not ask for the `system:masters` group (organization).

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_auth::{Attributes as AuthzAttributes, UserInfo};

use crate::authz_webhook::Authorization;
use serde_json::Value;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::prelude::FromDer as _;

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const APPROVAL: &str = "CertificateApproval";
pub(crate) const SIGNING: &str = "CertificateSigning";
pub(crate) const SUBJECT_RESTRICTION: &str = "CertificateSubjectRestriction";
const GROUP: &str = "certificates.k8s.io";
const API_SERVER_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
const MASTERS_GROUP: &str = "system:masters";

/// Upstream `certauthorization.IsAuthorizedForSignerName`: `verb` on the signer by
/// name, else on the wildcard of its domain (`example.com/*`).
pub(crate) async fn authorized_for_signer(
    authorizer: &Authorization,
    user: &UserInfo,
    verb: &str,
    signer: &str,
) -> bool {
    let domain = signer.split('/').next().unwrap_or("");
    for name in [signer.to_string(), format!("{domain}/*")] {
        let decision = authorizer
            .decide(&AuthzAttributes {
                user: user.clone(),
                verb: verb.into(),
                api_group: GROUP.into(),
                api_version: "*".into(),
                resource: "signers".into(),
                name,
                resource_request: true,
                ..AuthzAttributes::default()
            })
            .await;
        if decision.is_allowed() {
            return true;
        }
    }
    false
}

fn signer_of(csr: &Value) -> &str {
    csr["spec"]["signerName"].as_str().unwrap_or("")
}

fn handles_csr(a: &Attributes, operation: Operation, subresource: &str) -> bool {
    a.is(GROUP, "certificatesigningrequests")
        && a.operation == operation
        && a.subresource == subresource
}

pub(crate) struct CertificateApproval(Arc<Authorization>);

pub(crate) fn new_approval(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(CertificateApproval(init.authorizer.clone())))
}

#[async_trait]
impl Plugin for CertificateApproval {
    fn name(&self) -> &'static str {
        APPROVAL
    }

    fn handles(&self, a: &Attributes) -> bool {
        handles_csr(a, Operation::Update, "approval")
    }

    async fn validate(
        &self,
        a: &Attributes,
        csr: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(csr) = csr else { return Ok(()) };
        let signer = signer_of(csr);
        if !authorized_for_signer(&self.0, &a.user, "approve", signer).await {
            return Err(a.forbidden(format!(
                "user not permitted to approve requests with signerName {signer:?}"
            )));
        }
        Ok(())
    }
}

pub(crate) struct CertificateSigning(Arc<Authorization>);

pub(crate) fn new_signing(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(CertificateSigning(init.authorizer.clone())))
}

#[async_trait]
impl Plugin for CertificateSigning {
    fn name(&self) -> &'static str {
        SIGNING
    }

    fn handles(&self, a: &Attributes) -> bool {
        handles_csr(a, Operation::Update, "status")
    }

    async fn validate(
        &self,
        a: &Attributes,
        csr: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let (Some(csr), Some(old)) = (csr, old) else {
            return Ok(());
        };
        let field = |v: &Value, f: &str| v["status"].get(f).cloned().unwrap_or(Value::Null);
        let unchanged = |f: &str| {
            let (new, old) = (field(csr, f), field(old, f));
            // An empty list and no list are the same (upstream's semantic equality).
            new == old
                || (new.as_array().is_some_and(Vec::is_empty) && old.is_null())
                || (old.as_array().is_some_and(Vec::is_empty) && new.is_null())
        };
        if unchanged("certificate") && unchanged("conditions") {
            return Ok(());
        }
        let signer = signer_of(old);
        if !authorized_for_signer(&self.0, &a.user, "sign", signer).await {
            return Err(a.forbidden(format!(
                "user not permitted to sign requests with signerName {signer:?}"
            )));
        }
        Ok(())
    }
}

pub(crate) struct CertificateSubjectRestriction;

pub(crate) fn new_subject_restriction(_: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(CertificateSubjectRestriction))
}

/// The subject of a PEM-encoded PKCS#10 request (`spec.request`, base64 in JSON):
/// its common name and organizations. The error is upstream's `ParseCSR` text.
pub(crate) fn request_subject(request_b64: &str) -> Result<(String, Vec<String>), String> {
    use base64::Engine as _;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(request_b64)
        .map_err(|e| e.to_string())?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem)
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_string())?;
    if pem.label != "CERTIFICATE REQUEST" {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    }
    let (_, csr) = X509CertificationRequest::from_der(&pem.contents).map_err(|e| e.to_string())?;
    let subject = &csr.certification_request_info.subject;
    let common_name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or("")
        .to_string();
    let organizations = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Ok((common_name, organizations))
}

#[async_trait]
impl Plugin for CertificateSubjectRestriction {
    fn name(&self) -> &'static str {
        SUBJECT_RESTRICTION
    }

    fn handles(&self, a: &Attributes) -> bool {
        handles_csr(a, Operation::Create, "")
    }

    async fn validate(
        &self,
        a: &Attributes,
        csr: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(csr) = csr else { return Ok(()) };
        if signer_of(csr) != API_SERVER_CLIENT_SIGNER {
            return Ok(());
        }
        let request = csr["spec"]["request"].as_str().unwrap_or("");
        let (_, organizations) = request_subject(request).map_err(|e| a.forbidden(e))?;
        if organizations.iter().any(|o| o == MASTERS_GROUP) {
            return Err(a.forbidden(format!(
                "use of {API_SERVER_CLIENT_SIGNER} signer with {MASTERS_GROUP} group is not allowed"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use base64::Engine as _;

    /// `openssl req -new -subj "/O=system:masters/O=dev/CN=alice"` (P-256).
    pub(crate) const MASTERS_CSR: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIHyMIGZAgEAMDcxFzAVBgNVBAoMDnN5c3RlbTptYXN0ZXJzMQwwCgYDVQQKDANk
ZXYxDjAMBgNVBAMMBWFsaWNlMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEfv0V
wTTjpLjNyJX/EURUIJXr8rZmf/osMZRC5pt0e30W5wbLw3sOS4edW4YUQkstI5hj
7gJpz5zU+CaHFJIo3aAAMAoGCCqGSM49BAMCA0gAMEUCIDtCcOCvZ1YkaQGPDXi7
2G48E/IuylrRyTceFjbKN60RAiEA1tWv3RgFRag0+9OkKfWqvqthyDXPa4elnL6s
oQ0UNz4=
-----END CERTIFICATE REQUEST-----
";
    /// `openssl req -new -subj "/O=dev/CN=bob"` (P-256).
    /// CN=system:node:a, O=system:nodes.
    pub(crate) const NODE_A_CSR: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIHrMIGRAgEAMC8xFTATBgNVBAoMDHN5c3RlbTpub2RlczEWMBQGA1UEAwwNc3lz
dGVtOm5vZGU6YTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABEMgMHTj4cNUFcpZ
/1WnVJ3OGH3sVO9/qBNc+pZNPx6KiAiPjsMqE+zE7f0ByOIUUu7UNW5nUI0qLi2C
b4X/kYWgADAKBggqhkjOPQQDAgNJADBGAiEA765YnLtXHDvZZ7dgzfVwVCYL28I3
jYHshTxRUoMnL7wCIQCmybzV6uCx8NaWZP/U2as9wYp2m35zp/ICdjih6haoLQ==
-----END CERTIFICATE REQUEST-----";
    pub(crate) const DEV_CSR: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIHVMH4CAQAwHDEMMAoGA1UECgwDZGV2MQwwCgYDVQQDDANib2IwWTATBgcqhkjO
PQIBBggqhkjOPQMBBwNCAARdFkTUlB8iREf5AZXcwK4FY9OWhjC9QlGark3KvLfO
tYQ5kBTcH3W8rhFqaD0IZdcVzhhQTS1qQSDXtRm4b0zQoAAwCgYIKoZIzj0EAwID
RwAwRAIgYu2h9ZkGVoNUS/Px5EI+SYk3dyXDlFuDRWeG3Fc+TBUCIDrIVhNesjr6
stIZMi6+/XELTMt0Cmj7NCheMWmGlKK1
-----END CERTIFICATE REQUEST-----
";

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    /// Allows `verb` on the signers named in the list, nothing else.
    struct SignerGrants(Vec<(&'static str, &'static str)>);

    impl ferrokube_auth::Authorizer for SignerGrants {
        fn authorize(&self, attrs: &AuthzAttributes) -> ferrokube_auth::Decision {
            let granted = attrs.resource == "signers"
                && attrs.api_group == GROUP
                && self
                    .0
                    .iter()
                    .any(|(verb, name)| attrs.verb == *verb && attrs.name == *name);
            if granted {
                ferrokube_auth::Decision::allow()
            } else {
                ferrokube_auth::Decision::no_opinion()
            }
        }
    }

    #[tokio::test]
    async fn approving_and_signing_need_the_signer_verbs() {
        let info =
            ferrokube_api::resources::lookup(GROUP, "v1", "certificatesigningrequests").unwrap();
        let mut a =
            Attributes::new(UserInfo::new("bob", ["dev"]), Operation::Update, info).named("c");
        a.subresource = "approval".into();
        let csr = serde_json::json!({"spec": {"signerName": "example.com/issuer"}});
        let none = CertificateApproval(Arc::new(Authorization::of(SignerGrants(vec![]))));
        let e = none.validate(&a, Some(&csr), Some(&csr)).await.unwrap_err();
        assert_eq!(
            e.message,
            "certificatesigningrequests.certificates.k8s.io \"c\" is forbidden: user not \
             permitted to approve requests with signerName \"example.com/issuer\""
        );
        for grant in ["example.com/issuer", "example.com/*"] {
            CertificateApproval(Arc::new(Authorization::of(SignerGrants(vec![(
                "approve", grant,
            )]))))
            .validate(&a, Some(&csr), Some(&csr))
            .await
            .unwrap();
        }
        // Signing: only a changed certificate or conditions need `sign`.
        a.subresource = "status".into();
        let signer = CertificateSigning(Arc::new(Authorization::of(SignerGrants(vec![(
            "approve",
            "example.com/*",
        )]))));
        signer.validate(&a, Some(&csr), Some(&csr)).await.unwrap();
        let mut signed = csr.clone();
        signed["status"]["certificate"] = serde_json::json!("Y2VydA==");
        let e = signer
            .validate(&a, Some(&signed), Some(&csr))
            .await
            .unwrap_err();
        assert!(
            e.message.ends_with(
                "user not permitted to sign requests with signerName \"example.com/issuer\""
            ),
            "{}",
            e.message
        );
        CertificateSigning(Arc::new(Authorization::of(SignerGrants(vec![(
            "sign",
            "example.com/issuer",
        )]))))
        .validate(&a, Some(&signed), Some(&csr))
        .await
        .unwrap();
    }

    #[test]
    fn subjects_of_requests() {
        assert_eq!(
            request_subject(&b64(MASTERS_CSR)).unwrap().1,
            ["system:masters", "dev"]
        );
        assert_eq!(
            request_subject(&b64(DEV_CSR)).unwrap(),
            ("bob".to_string(), vec!["dev".to_string()])
        );
        assert!(request_subject(&b64("not pem")).is_err());
        assert!(request_subject("%%%").is_err());
    }

    #[tokio::test]
    async fn masters_refused_only_for_the_apiserver_client_signer() {
        let info =
            ferrokube_api::resources::lookup(GROUP, "v1", "certificatesigningrequests").unwrap();
        let a =
            Attributes::new(UserInfo::new("alice", ["dev"]), Operation::Create, info).named("c");
        let csr = |signer: &str, request: &str| serde_json::json!({"spec": {"signerName": signer, "request": b64(request)}});
        let plugin = CertificateSubjectRestriction;
        let e = plugin
            .validate(&a, Some(&csr(API_SERVER_CLIENT_SIGNER, MASTERS_CSR)), None)
            .await
            .unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "certificatesigningrequests.certificates.k8s.io \"c\" is forbidden: use of \
             kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"
        );
        plugin
            .validate(&a, Some(&csr(API_SERVER_CLIENT_SIGNER, DEV_CSR)), None)
            .await
            .unwrap();
        plugin
            .validate(&a, Some(&csr("example.com/x", MASTERS_CSR)), None)
            .await
            .unwrap();
    }
}
