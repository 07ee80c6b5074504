//! Kubelet TLS bootstrapping against the test apiserver, set up as `kubeadm join`
//! expects: a bootstrap token Secret, kubeadm's `kubeadm:kubelet-bootstrap` and
//! `kubeadm:node-autoapprove-bootstrap` ClusterRoleBindings for the token's group, and
//! kube-controller-manager's csrapproving and csrsigning controllers (signing with the
//! test cluster CA). The kubelet's request waits while nobody answers, is found again
//! (not duplicated) when asked a second time, and once approved and signed the written
//! kubeconfig logs in as `system:node:<name>` in `system:nodes`; a valid kubeconfig
//! asks for nothing; a Denied request is an error with its reason. Every wait is
//! bounded.

mod csr;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use csr::start_csr_controllers;
use ferrokube_kubelet::bootstrap::{
    BootstrapOptions, CLIENT_USAGES, KUBELET_CLIENT_SIGNER, Outcome, TMP_PRIVATE_KEY_FILE,
    load_client_cert,
};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const TOKEN_ID: &str = "abcdef";
const TOKEN: &str = "abcdef.0123456789abcdef";
const KUBEADM_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
const NODE: &str = "tls-node-1";

/// Polls `probe` every 100 ms for at most `secs` seconds until it yields a value.
async fn wait_for<T, F, Fut>(secs: u64, what: &str, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut last = String::new();
    loop {
        match probe().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = e.to_string(),
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("timed out after {secs}s waiting for {what} (last error: {last})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// kubeadm's bootstrap token Secret, then the two ClusterRoleBindings `kubeadm init`
/// creates for its group (the auto-approval one only when `auto_approve`).
async fn kubeadm_setup(srv: &TestApiServer, auto_approve: bool) -> anyhow::Result<()> {
    let admin = srv.client.clone();
    let pp = PostParams::default();
    let expiration = (k8s_openapi::jiff::Timestamp::now()
        + k8s_openapi::jiff::SignedDuration::from_hours(1))
    .strftime("%Y-%m-%dT%H:%M:%SZ")
    .to_string();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("bootstrap-token-{TOKEN_ID}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {"token-id": TOKEN_ID, "token-secret": "0123456789abcdef",
                       "usage-bootstrap-authentication": "true",
                       "usage-bootstrap-signing": "true",
                       "expiration": expiration,
                       "auth-extra-groups": KUBEADM_GROUP},
    }))?;
    Api::<Secret>::namespaced(admin.clone(), "kube-system")
        .create(&pp, &secret)
        .await?;
    let mut bindings = vec![("kubeadm:kubelet-bootstrap", "system:node-bootstrapper")];
    if auto_approve {
        bindings.push((
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        ));
    }
    for (name, role) in bindings {
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                          "name": KUBEADM_GROUP}]
        }))?;
        Api::<ClusterRoleBinding>::all(admin.clone())
            .create(&pp, &binding)
            .await?;
    }
    // The token authenticates and the binding authorizes once both reach the
    // apiserver's caches.
    let as_token = srv.client_with_token(TOKEN).await?;
    let csrs: Api<CertificateSigningRequest> = Api::all(as_token);
    wait_for(30, "the bootstrap token to list CSRs", || async {
        Ok(csrs.list(&ListParams::default()).await.ok().map(|_| ()))
    })
    .await
}

/// The bootstrap kubeconfig `kubeadm join` writes: the server, the cluster CA inline,
/// the token.
fn write_bootstrap_kubeconfig(srv: &TestApiServer, dir: &Path) -> anyhow::Result<PathBuf> {
    let ca = std::fs::read_to_string(srv.dir().join("pki/ca.crt"))?;
    let yaml = ferrokube_pki::kubeconfig_token_yaml(
        "kubernetes",
        &srv.url,
        &ca,
        "tls-bootstrap-token-user",
        TOKEN,
    );
    let path = dir.join("bootstrap-kubelet.conf");
    std::fs::write(&path, yaml)?;
    Ok(path)
}

async fn csr_names(srv: &TestApiServer) -> anyhow::Result<Vec<String>> {
    let csrs: Api<CertificateSigningRequest> = Api::all(srv.client.clone());
    Ok(csrs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect())
}

fn options(dir: &Path, bootstrap: &Path, wait: Duration) -> BootstrapOptions {
    let mut o = BootstrapOptions::new(dir.join("kubelet.conf"), bootstrap, dir.join("pki"), NODE);
    o.certificate_wait = wait;
    o.server_wait = Duration::from_secs(5);
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_bootstraps_its_client_certificate() -> anyhow::Result<()> {
    let srv = TestApiServer::start_with(|o| o.enable_bootstrap_token_auth = true).await?;
    kubeadm_setup(&srv, true).await?;
    let dir = tempfile::tempdir()?;
    let bootstrap = write_bootstrap_kubeconfig(&srv, dir.path())?;
    let cert_dir = dir.path().join("pki");

    // Nobody answers yet: the wait ends with a timeout, the request and the key stay.
    let e = load_client_cert(&options(dir.path(), &bootstrap, Duration::from_secs(2)))
        .await
        .expect_err("no controller runs, nothing can be issued");
    assert!(e.to_string().contains("timed out"), "{e}");
    assert!(cert_dir.join(TMP_PRIVATE_KEY_FILE).exists());
    let names = csr_names(&srv).await?;
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("node-csr-"), "{names:?}");
    let csrs: Api<CertificateSigningRequest> = Api::all(srv.client.clone());
    let pending = csrs.get(&names[0]).await?;
    assert_eq!(pending.spec.signer_name, KUBELET_CLIENT_SIGNER);
    assert_eq!(
        pending.spec.usages.clone().unwrap_or_default(),
        CLIENT_USAGES
    );
    assert_eq!(pending.spec.expiration_seconds, None);
    // The apiserver records who asked: the bootstrap token's user and groups.
    assert_eq!(
        pending.spec.username.as_deref(),
        Some("system:bootstrap:abcdef")
    );
    let groups = pending.spec.groups.clone().unwrap_or_default();
    assert!(groups.iter().any(|g| g == KUBEADM_GROUP), "{groups:?}");

    // With the controllers running, asking again finds the same request, which gets
    // approved and signed.
    let cancel = CancellationToken::new();
    let manager = start_csr_controllers(&srv, &cancel).await?;
    let outcome = tokio::time::timeout(
        Duration::from_secs(90),
        load_client_cert(&options(dir.path(), &bootstrap, Duration::from_secs(60))),
    )
    .await
    .context("the bootstrap did not finish")??;
    let Outcome::Bootstrapped { csr_name, pem_file } = outcome else {
        bail!("expected a bootstrap, got {outcome:?}");
    };
    assert_eq!(csr_name, names[0]);
    assert_eq!(csr_names(&srv).await?, names, "no second request");
    let approved = csrs.get(&csr_name).await?;
    let conditions = approved
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Approved" && c.reason.as_deref() == Some("AutoApproved")),
        "{conditions:?}"
    );

    // The store: a timestamped pair, the current symlink to it, the temporary key gone.
    let file_name = pem_file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let ts = file_name
        .strip_prefix("kubelet-client-")
        .and_then(|s| s.strip_suffix(".pem"))
        .unwrap_or_default();
    assert_eq!(ts.len(), "2006-01-02-15-04-05".len(), "{file_name}");
    assert!(ts.chars().all(|c| c.is_ascii_digit() || c == '-'), "{ts}");
    let current = cert_dir.join("kubelet-client-current.pem");
    assert_eq!(std::fs::read_link(&current)?, pem_file);
    assert!(!cert_dir.join(TMP_PRIVATE_KEY_FILE).exists());
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&pem_file)?.permissions().mode() & 0o777,
        0o600
    );
    let pair = std::fs::read_to_string(&pem_file)?;
    let info = ferrokube_pki::CertInfo::from_pem(&pair)?;
    let key_at = pair
        .find("-----BEGIN PRIVATE KEY-----")
        .context("the pair has no key")?;
    assert!(
        info.matches_key(&pair[key_at..]),
        "the key is the certificate's"
    );
    assert_eq!(info.common_name.as_deref(), Some("system:node:tls-node-1"));
    assert_eq!(info.organizations, ["system:nodes"]);
    assert!(info.client_auth && !info.server_auth);

    // The kubeconfig: the bootstrap's server and CA, the current pair for both files.
    let kubeconfig = dir.path().join("kubelet.conf");
    assert_eq!(
        std::fs::metadata(&kubeconfig)?.permissions().mode() & 0o777,
        0o600
    );
    let written: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&kubeconfig)?)?;
    assert_eq!(
        written["clusters"][0]["cluster"]["server"].as_str(),
        Some(srv.url.as_str())
    );
    assert!(
        written["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .is_some()
    );
    let current_str = current.display().to_string();
    assert_eq!(
        written["users"][0]["user"]["client-certificate"].as_str(),
        Some(current_str.as_str())
    );
    assert_eq!(
        written["users"][0]["user"]["client-key"].as_str(),
        Some(current_str.as_str())
    );

    // It logs in as the node, the way the kubelet binary loads --kubeconfig.
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await?;
    let as_node = kube::Client::try_from(cfg)?;
    let review: SelfSubjectReview = serde_json::from_value(json!({}))?;
    let me = Api::<SelfSubjectReview>::all(as_node)
        .create(&PostParams::default(), &review)
        .await?;
    let user = me.status.and_then(|s| s.user_info).unwrap_or_default();
    assert_eq!(user.username.as_deref(), Some("system:node:tls-node-1"));
    let groups = user.groups.unwrap_or_default();
    assert!(groups.iter().any(|g| g == "system:nodes"), "{groups:?}");

    // Restarted with a valid kubeconfig: nothing is requested, nothing rewritten.
    let before = std::fs::read_to_string(&kubeconfig)?;
    let again = load_client_cert(&options(dir.path(), &bootstrap, Duration::from_secs(2))).await?;
    assert_eq!(again, Outcome::KubeconfigValid);
    assert_eq!(csr_names(&srv).await?, names);
    assert_eq!(std::fs::read_to_string(&kubeconfig)?, before);

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_request_fails_with_its_reason() -> anyhow::Result<()> {
    let srv = TestApiServer::start_with(|o| o.enable_bootstrap_token_auth = true).await?;
    // No auto-approval and no controllers: an administrator decides.
    kubeadm_setup(&srv, false).await?;
    let dir = tempfile::tempdir()?;
    let bootstrap = write_bootstrap_kubeconfig(&srv, dir.path())?;
    let opts = options(dir.path(), &bootstrap, Duration::from_secs(60));
    let kubelet = tokio::spawn(async move { load_client_cert(&opts).await });

    let csrs: Api<CertificateSigningRequest> = Api::all(srv.client.clone());
    let name = wait_for(30, "the kubelet's request", || async {
        Ok(csr_names(&srv).await?.into_iter().next())
    })
    .await?;
    // `kubectl certificate deny`: a Denied condition through /approval.
    let mut current = csrs.get(&name).await?;
    current
        .status
        .get_or_insert_with(Default::default)
        .conditions = Some(vec![serde_json::from_value(json!({
        "type": "Denied", "status": "True", "reason": "NotAKnownNode",
        "message": "this node is not expected to join"
    }))?]);
    csrs.replace_subresource("approval", &name, &PostParams::default(), &current)
        .await?;

    let result = tokio::time::timeout(Duration::from_secs(30), kubelet)
        .await
        .context("the kubelet kept waiting on a denied request")??;
    let e = result.expect_err("a denied request must fail the bootstrap");
    assert_eq!(
        e.to_string(),
        "certificate signing request is denied, reason: NotAKnownNode, message: this node is not expected to join"
    );
    assert!(!dir.path().join("kubelet.conf").exists());
    assert!(!dir.path().join("pki/kubelet-client-current.pem").exists());
    srv.stop().await;
    Ok(())
}
