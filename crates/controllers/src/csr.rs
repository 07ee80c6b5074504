//! What the CertificateSigningRequest controllers ([`crate::csrsigning`],
//! [`crate::csrapproving`], [`crate::csrcleaner`]) share (upstream
//! `pkg/controller/certificates/certificate_controller_utils.go` and
//! `pkg/apis/certificates/helpers.go`): the well-known signer names, the condition
//! checks, and upstream's checks of kubelet client and serving requests.

use std::collections::BTreeSet;

use ferrokube_pki::csr::CertificateRequest;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Upstream `capi.KubeAPIServerClientSignerName`.
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// Upstream `capi.KubeAPIServerClientKubeletSignerName`.
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Upstream `capi.KubeletServingSignerName`.
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
/// Upstream `capiv1beta1.LegacyUnknownSignerName`.
pub const LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";

pub const APPROVED: &str = "Approved";
pub const DENIED: &str = "Denied";
pub const FAILED: &str = "Failed";

fn conditions(csr: &CertificateSigningRequest) -> &[CertificateSigningRequestCondition] {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

/// Upstream `GetCertApprovalCondition`: (approved, denied), whatever the order.
pub fn approval(csr: &CertificateSigningRequest) -> (bool, bool) {
    let has = |t: &str| conditions(csr).iter().any(|c| c.type_ == t);
    (has(APPROVED), has(DENIED))
}

/// Upstream `IsCertificateRequestApproved`: approved and not denied.
pub fn is_approved(csr: &CertificateSigningRequest) -> bool {
    approval(csr) == (true, false)
}

/// Upstream `HasTrueCondition`: a condition of `type_` whose status is True (or
/// empty, which the API defaults to True).
pub fn has_true_condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    conditions(csr)
        .iter()
        .any(|c| c.type_ == type_ && (c.status.is_empty() || c.status == "True"))
}

/// Whether a certificate was issued (`status.certificate` is not empty).
pub fn is_issued(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
}

/// A True condition stamped `now`.
pub fn condition(
    type_: &str,
    reason: &str,
    message: &str,
    now: Time,
) -> CertificateSigningRequestCondition {
    CertificateSigningRequestCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

/// `spec.usages` as a set (upstream `usagesToSet`).
pub fn usage_set(csr: &CertificateSigningRequest) -> BTreeSet<&str> {
    csr.spec
        .usages
        .iter()
        .flatten()
        .map(String::as_str)
        .collect()
}

const NODES_GROUP: &str = "system:nodes";
const NODE_PREFIX: &str = "system:node:";

fn usages_match(usages: &BTreeSet<&str>, with_rsa: &[&str], without_rsa: &[&str]) -> bool {
    let same = |v: &[&str]| usages.len() == v.len() && v.iter().all(|u| usages.contains(u));
    same(with_rsa) || same(without_rsa)
}

/// Go's `fmt` of a sorted `[]string`: `[a b c]`.
fn go_list(items: &[&str]) -> String {
    let mut sorted = items.to_vec();
    sorted.sort_unstable();
    format!("[{}]", sorted.join(" "))
}

/// Upstream `ValidateKubeletClientCSR`: O exactly `system:nodes`, no SANs, CN
/// `system:node:*`, usages {digital signature, client auth} with or without key
/// encipherment. The error texts are upstream's.
pub fn validate_kubelet_client(
    req: &CertificateRequest,
    usages: &BTreeSet<&str>,
) -> Result<(), String> {
    if req.organizations != [NODES_GROUP] {
        return Err("subject organization is not system:nodes".into());
    }
    if !req.dns_names.is_empty() {
        return Err("DNS subjectAltNames are not allowed".into());
    }
    if !req.email_addresses.is_empty() {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !req.ip_addresses.is_empty() {
        return Err("IP subjectAltNames are not allowed".into());
    }
    if !req.uris.is_empty() {
        return Err("URI subjectAltNames are not allowed".into());
    }
    if !req.common_name.starts_with(NODE_PREFIX) {
        return Err("subject common name does not begin with system:node:".into());
    }
    const WITH_RSA: &[&str] = &["digital signature", "key encipherment", "client auth"];
    if !usages_match(usages, WITH_RSA, &["digital signature", "client auth"]) {
        return Err(format!("usages did not match {}", go_list(WITH_RSA)));
    }
    Ok(())
}

/// Upstream `ValidateKubeletServingCSR`: O exactly `system:nodes`, a DNS or IP SAN
/// and no email or URI SAN, usages {digital signature, server auth} with or without
/// key encipherment, CN `system:node:*`. The error texts are upstream's.
pub fn validate_kubelet_serving(
    req: &CertificateRequest,
    usages: &BTreeSet<&str>,
) -> Result<(), String> {
    if req.organizations != [NODES_GROUP] {
        return Err("subject organization is not system:nodes".into());
    }
    if req.dns_names.is_empty() && req.ip_addresses.is_empty() {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if !req.email_addresses.is_empty() {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !req.uris.is_empty() {
        return Err("URI subjectAltNames are not allowed".into());
    }
    const WITH_RSA: &[&str] = &["digital signature", "key encipherment", "server auth"];
    if !usages_match(usages, WITH_RSA, &["digital signature", "server auth"]) {
        return Err(format!("usages did not match {}", go_list(WITH_RSA)));
    }
    if !req.common_name.starts_with(NODE_PREFIX) {
        return Err("subject common name does not begin with system:node:".into());
    }
    Ok(())
}

/// Upstream `validAPIServerClientUsages`: only digital signature, key
/// encipherment and client auth, and client auth present. `usages` in the CSR's
/// order (the first bad one is named).
pub fn validate_apiserver_client_usages(usages: &[String]) -> Result<(), String> {
    let mut client_auth = false;
    for u in usages {
        match u.as_str() {
            "digital signature" | "key encipherment" => {}
            "client auth" => client_auth = true,
            other => return Err(format!("invalid usage for client certificate: {other}")),
        }
    }
    if !client_auth {
        return Err("missing required usage for client certificate: client auth".into());
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ferrokube_pki::csr::parse_request_pem;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

    /// A freshly signed request with this subject and these SANs, parsed.
    pub(crate) fn request(cn: &str, org: Option<&str>, sans: Vec<SanType>) -> CertificateRequest {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        if let Some(o) = org {
            params.distinguished_name.push(DnType::OrganizationName, o);
        }
        params.distinguished_name.push(DnType::CommonName, cn);
        params.subject_alt_names = sans;
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        parse_request_pem(pem.as_bytes()).unwrap()
    }

    fn set<'a>(usages: &[&'a str]) -> BTreeSet<&'a str> {
        usages.iter().copied().collect()
    }

    fn dns(name: &str) -> SanType {
        SanType::DnsName(name.to_string().try_into().unwrap())
    }

    #[test]
    fn kubelet_client_requests_as_upstream() {
        let node = request("system:node:n1", Some("system:nodes"), vec![]);
        let usages = set(&["digital signature", "client auth"]);
        assert_eq!(validate_kubelet_client(&node, &usages), Ok(()));
        let rsa = set(&["digital signature", "key encipherment", "client auth"]);
        assert_eq!(validate_kubelet_client(&node, &rsa), Ok(()));
        assert_eq!(
            validate_kubelet_client(&node, &set(&["client auth"])),
            Err("usages did not match [client auth digital signature key encipherment]".into())
        );
        let other_org = request("system:node:n1", Some("dev"), vec![]);
        assert_eq!(
            validate_kubelet_client(&other_org, &usages),
            Err("subject organization is not system:nodes".into())
        );
        let named = request("system:node:n1", Some("system:nodes"), vec![dns("n1")]);
        assert_eq!(
            validate_kubelet_client(&named, &usages),
            Err("DNS subjectAltNames are not allowed".into())
        );
        let ip = SanType::IpAddress("10.0.0.1".parse().unwrap());
        let with_ip = request("system:node:n1", Some("system:nodes"), vec![ip]);
        assert_eq!(
            validate_kubelet_client(&with_ip, &usages),
            Err("IP subjectAltNames are not allowed".into())
        );
        let alice = request("alice", Some("system:nodes"), vec![]);
        assert_eq!(
            validate_kubelet_client(&alice, &usages),
            Err("subject common name does not begin with system:node:".into())
        );
    }

    #[test]
    fn kubelet_serving_requests_as_upstream() {
        let usages = set(&["digital signature", "server auth"]);
        let serving = request("system:node:n1", Some("system:nodes"), vec![dns("n1")]);
        assert_eq!(validate_kubelet_serving(&serving, &usages), Ok(()));
        let bare = request("system:node:n1", Some("system:nodes"), vec![]);
        assert_eq!(
            validate_kubelet_serving(&bare, &usages),
            Err("DNS or IP subjectAltName is required".into())
        );
        let mail = SanType::Rfc822Name("a@b.c".to_string().try_into().unwrap());
        let with_mail = request(
            "system:node:n1",
            Some("system:nodes"),
            vec![dns("n1"), mail],
        );
        assert_eq!(
            validate_kubelet_serving(&with_mail, &usages),
            Err("Email subjectAltNames are not allowed".into())
        );
        assert_eq!(
            validate_kubelet_serving(&serving, &set(&["server auth", "client auth"])),
            Err("usages did not match [digital signature key encipherment server auth]".into())
        );
    }

    #[test]
    fn apiserver_client_usages_as_upstream() {
        let v = |u: &[&str]| u.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            validate_apiserver_client_usages(&v(&["client auth"])),
            Ok(())
        );
        assert_eq!(
            validate_apiserver_client_usages(&v(&["key encipherment", "digital signature"])),
            Err("missing required usage for client certificate: client auth".into())
        );
        assert_eq!(
            validate_apiserver_client_usages(&v(&["client auth", "cert sign"])),
            Err("invalid usage for client certificate: cert sign".into())
        );
    }
}
