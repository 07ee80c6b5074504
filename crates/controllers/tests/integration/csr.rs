//! The CSR controllers on the test apiserver, writing as their own ServiceAccount
//! (`kube-system/certificate-controller`, bound by the bootstrap policy) and signing
//! with the test PKI's cluster CA (the CA the server trusts for client
//! certificates): an approved client request is signed with its subject, usages
//! and requested lifetime, and the certificate logs in; requests breaking their
//! signer's rules fail with upstream's reason and message; a node's own client
//! request is auto-approved and signed, another user's is left pending; the cleaner
//! deletes a request whose certificate has expired. Every wait is bounded.

use crate::support;

use std::time::{Duration, SystemTime};

use ferrokube_controllers::csrsigning::{CsrSigningConfig, SIGNERS, SignerCa};
use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_pki::{CertInfo, CertificateAuthority, Validity};
use ferrokube_testing::TestApiServer;
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, PostParams};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};
use serde_json::json;
use support::wait_for;
use tokio_util::sync::CancellationToken;

/// A PKCS#10 request (P-256) and its key, both PEM.
fn request(cn: &str, org: Option<&str>, dns: &[&str]) -> anyhow::Result<(String, String)> {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    if let Some(o) = org {
        params.distinguished_name.push(DnType::OrganizationName, o);
    }
    params.distinguished_name.push(DnType::CommonName, cn);
    for d in dns {
        params
            .subject_alt_names
            .push(SanType::DnsName(d.to_string().try_into()?));
    }
    Ok((params.serialize_request(&key)?.pem()?, key.serialize_pem()))
}

fn csr(
    name: &str,
    signer: &str,
    request_pem: &str,
    usages: &[&str],
    expiration_seconds: Option<i32>,
) -> anyhow::Result<CertificateSigningRequest> {
    let mut csr: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"signerName": signer, "request": "", "usages": usages,
                 "expirationSeconds": expiration_seconds}
    }))?;
    csr.spec.request = ByteString(request_pem.as_bytes().to_vec());
    Ok(csr)
}

/// `kubectl certificate approve`: an Approved condition through `/approval`.
async fn approve(csrs: &Api<CertificateSigningRequest>, name: &str) -> anyhow::Result<()> {
    let mut current = csrs.get(name).await?;
    current
        .status
        .get_or_insert_with(Default::default)
        .conditions = Some(vec![serde_json::from_value(
        json!({"type": "Approved", "status": "True",
            "reason": "KubectlApprove", "message": "This CSR was approved by kubectl certificate approve."}),
    )?]);
    csrs.replace_subresource("approval", name, &PostParams::default(), &current)
        .await?;
    Ok(())
}

async fn certificate(csrs: &Api<CertificateSigningRequest>, name: &str) -> anyhow::Result<String> {
    wait_for(30, &format!("a certificate for {name}"), || async {
        let c = csrs.get(name).await?;
        let cert = c.status.and_then(|s| s.certificate).map(|b| b.0);
        Ok(cert
            .filter(|b| !b.is_empty())
            .map(|b| String::from_utf8_lossy(&b).into_owned()))
    })
    .await
}

/// The (reason, message) of the condition `type_` once it is there.
async fn condition(
    csrs: &Api<CertificateSigningRequest>,
    name: &str,
    type_: &str,
) -> anyhow::Result<(String, String)> {
    wait_for(30, &format!("{type_} on {name}"), || async {
        let c = csrs.get(name).await?;
        let found = c
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == type_);
        Ok(found.map(|c| (c.reason.unwrap_or_default(), c.message.unwrap_or_default())))
    })
    .await
}

/// The manager with the CSR controllers, every signer on the test cluster CA.
async fn start_manager(
    srv: &TestApiServer,
    cancel: &CancellationToken,
) -> anyhow::Result<(Manager, String)> {
    let pki = srv.dir().join("pki");
    let ca = SignerCa {
        cert_pem: std::fs::read_to_string(pki.join("ca.crt"))?,
        key_pem: std::fs::read_to_string(pki.join("ca.key"))?,
    };
    let cfg = ManagerConfig {
        controllers: vec![
            "csrsigning".into(),
            "csrapproving".into(),
            "csrcleaner".into(),
        ],
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        csr_signing: CsrSigningConfig {
            signers: SIGNERS
                .iter()
                .map(|s| (s.to_string(), ca.clone()))
                .collect(),
            ..Default::default()
        },
        ..Default::default()
    };
    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    let manager = Manager::start(manager_client, &cfg, cancel.clone()).await?;
    Ok((manager, ca.cert_pem))
}

/// A client logging in with `cert_pem` and `key_pem`.
async fn client_with_certificate(
    srv: &TestApiServer,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> anyhow::Result<kube::Client> {
    let url = srv.kube_config().await?.cluster_url.to_string();
    let yaml = ferrokube_pki::kubeconfig_yaml("test", &url, ca_pem, "cert", cert_pem, key_pem);
    let kc = kube::config::Kubeconfig::from_yaml(&yaml)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await?;
    Ok(kube::Client::try_from(cfg)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approved_requests_are_signed_and_bad_ones_fail() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let cancel = CancellationToken::new();
    let (manager, ca_pem) = start_manager(&srv, &cancel).await?;
    let csrs: Api<CertificateSigningRequest> = Api::all(srv.client.clone());
    let pp = PostParams::default();

    // A client certificate for alice in dev, asked for one hour.
    let (alice_request, alice_key) = request("alice", Some("dev"), &[])?;
    let created = csrs
        .create(
            &pp,
            &csr(
                "alice",
                "kubernetes.io/kube-apiserver-client",
                &alice_request,
                &["digital signature", "client auth"],
                Some(3600),
            )?,
        )
        .await?;
    // The apiserver names the requester (the admin), whatever the client sent.
    assert!(created.spec.username.is_some_and(|u| !u.is_empty()));
    approve(&csrs, "alice").await?;
    let cert_pem = certificate(&csrs, "alice").await?;
    let info = CertInfo::from_pem(&cert_pem)?;
    assert!(info.is_signed_by(&ca_pem)?);
    assert!(info.matches_key(&alice_key));
    assert_eq!(info.common_name.as_deref(), Some("alice"));
    assert_eq!(info.organizations, ["dev"]);
    assert!(info.client_auth && !info.server_auth && !info.is_ca);
    // Short-lived: 5 minutes backdated, ending one requested hour after signing.
    let lifetime = info.not_after.duration_since(info.not_before)?;
    assert_eq!(lifetime, Duration::from_secs(3600 + 300));
    assert!(info.not_before <= SystemTime::now());

    // The certificate logs in as alice.
    let as_alice = client_with_certificate(&srv, &ca_pem, &cert_pem, &alice_key).await?;
    let review: SelfSubjectReview = serde_json::from_value(json!({}))?;
    let me = Api::<SelfSubjectReview>::all(as_alice)
        .create(&pp, &review)
        .await?;
    let user = me.status.and_then(|s| s.user_info).unwrap_or_default();
    assert_eq!(user.username.as_deref(), Some("alice"));
    assert_eq!(
        user.groups.unwrap_or_default(),
        ["dev", "system:authenticated"]
    );

    // A client certificate asking to serve: Failed, never signed.
    let (bad_request, _) = request("bob", None, &[])?;
    csrs.create(
        &pp,
        &csr(
            "bob",
            "kubernetes.io/kube-apiserver-client",
            &bad_request,
            &["digital signature", "server auth"],
            None,
        )?,
    )
    .await?;
    approve(&csrs, "bob").await?;
    assert_eq!(
        condition(&csrs, "bob", "Failed").await?,
        (
            "SignerValidationFailure".to_string(),
            "invalid usage for client certificate: server auth".to_string()
        )
    );

    // A kubelet serving request without a DNS or IP name: Failed.
    let (serving_request, _) = request("system:node:n1", Some("system:nodes"), &[])?;
    csrs.create(
        &pp,
        &csr(
            "serving",
            "kubernetes.io/kubelet-serving",
            &serving_request,
            &["digital signature", "server auth"],
            None,
        )?,
    )
    .await?;
    approve(&csrs, "serving").await?;
    assert_eq!(
        condition(&csrs, "serving", "Failed").await?.1,
        "DNS or IP subjectAltName is required"
    );
    // The Failed condition is stamped (the cleaner ages it by that).
    let failed = csrs.get("serving").await?;
    let stamps = failed.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(stamps.iter().all(|c| c.last_update_time.is_some()));
    assert!(
        csrs.get("bob")
            .await?
            .status
            .and_then(|s| s.certificate)
            .is_none()
    );

    // The cleaner deletes an issued request whose certificate has expired.
    let (old_request, _) = request("carol", None, &[])?;
    csrs.create(
        &pp,
        &csr(
            "expired",
            "example.com/elsewhere",
            &old_request,
            &["client auth"],
            None,
        )?,
    )
    .await?;
    approve(&csrs, "expired").await?;
    let ca = CertificateAuthority::load(
        &ca_pem,
        &std::fs::read_to_string(srv.dir().join("pki/ca.key"))?,
    )?;
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    let expired = ca.issue_client_cert(
        "carol",
        &[],
        Validity {
            not_before: now - 2 * hour,
            not_after: now - hour,
        },
    )?;
    let mut issued = csrs.get("expired").await?;
    issued
        .status
        .get_or_insert_with(Default::default)
        .certificate = Some(ByteString(expired.cert_pem.into_bytes()));
    csrs.replace_status("expired", &pp, &issued).await?;
    wait_for(30, "the expired request deleted", || async {
        Ok(csrs.get_opt("expired").await?.is_none().then_some(()))
    })
    .await?;
    // The others are not due yet.
    assert!(csrs.get_opt("alice").await?.is_some());

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_client_requests_are_auto_approved_when_allowed() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let admin = srv.client.clone();
    let pp = PostParams::default();
    // As kubeadm: nodes may renew their own client certificates.
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "auto-approve-renewals-for-nodes"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": "system:nodes"}]
    }))?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&pp, &binding)
        .await?;
    // mallory may create requests, nothing more.
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "csr-creator"},
        "rules": [{"apiGroups": ["certificates.k8s.io"],
                   "resources": ["certificatesigningrequests"], "verbs": ["create", "get"]}]
    }))?;
    Api::<ClusterRole>::all(admin.clone())
        .create(&pp, &role)
        .await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "csr-creator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "csr-creator"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}]
    }))?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&pp, &binding)
        .await?;

    let cancel = CancellationToken::new();
    let (manager, ca_pem) = start_manager(&srv, &cancel).await?;
    let kubelet_usages = ["digital signature", "key encipherment", "client auth"];

    // mallory asks for a node's identity: recognized, but no review allows it.
    let as_mallory = srv.client_as("mallory", &[]).await?;
    let (forged, _) = request("system:node:n9", Some("system:nodes"), &[])?;
    let mallory_csrs: Api<CertificateSigningRequest> = Api::all(as_mallory);
    let spec = csr(
        "forged",
        "kubernetes.io/kube-apiserver-client-kubelet",
        &forged,
        &kubelet_usages,
        None,
    )?;
    // Until the binding reaches the authorizer the create is refused.
    wait_for(30, "mallory allowed to create CSRs", || async {
        Ok(mallory_csrs.create(&pp, &spec).await.ok().map(|_| ()))
    })
    .await?;
    wait_for(30, "the approver to try mallory's request", || async {
        let retries = manager.retries();
        Ok((retries.get("csrapproving").copied().unwrap_or(0) > 0).then_some(()))
    })
    .await?;

    // Node n1 renews its own certificate: approved, then signed.
    let as_node = srv.client_as("system:node:n1", &["system:nodes"]).await?;
    let node_csrs: Api<CertificateSigningRequest> = Api::all(as_node);
    let (own, node_key) = request("system:node:n1", Some("system:nodes"), &[])?;
    let spec = csr(
        "node-n1",
        "kubernetes.io/kube-apiserver-client-kubelet",
        &own,
        &kubelet_usages,
        None,
    )?;
    wait_for(30, "the node allowed to create CSRs", || async {
        Ok(node_csrs.create(&pp, &spec).await.ok().map(|_| ()))
    })
    .await?;
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let (reason, message) = condition(&csrs, "node-n1", "Approved").await?;
    assert_eq!(reason, "AutoApproved");
    assert_eq!(
        message,
        "Auto approving self kubelet client certificate after SubjectAccessReview."
    );
    let cert = CertInfo::from_pem(&certificate(&csrs, "node-n1").await?)?;
    assert!(cert.is_signed_by(&ca_pem)? && cert.matches_key(&node_key));
    assert_eq!(cert.common_name.as_deref(), Some("system:node:n1"));
    assert_eq!(cert.organizations, ["system:nodes"]);

    // mallory's is still pending: no condition, no certificate.
    let forged = csrs.get("forged").await?;
    assert_eq!(forged.spec.username.as_deref(), Some("mallory"));
    let status = forged.status.unwrap_or_default();
    assert!(status.conditions.unwrap_or_default().is_empty());
    assert!(status.certificate.is_none());

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}
