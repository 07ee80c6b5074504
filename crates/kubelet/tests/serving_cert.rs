//! The kubelet's serving certificate from the certificates API (`serverTLSBootstrap`)
//! against the test apiserver and kube-controller-manager's csrsigning and
//! csrapproving controllers signing with the test cluster CA.
//!
//! The node asks for a `kubernetes.io/kubelet-serving` certificate for its addresses.
//! Nobody approves it automatically (csrapproving runs and leaves it alone), and until
//! an administrator does, the HTTPS server has no certificate and every handshake
//! fails. Once approved and signed, the pair lands in the cert dir as
//! `kubelet-server-current.pem` and the running server presents it to a client that
//! trusts the cluster CA, without a restart. Its metrics follow: the TTL of what it
//! serves, each rotation's replaced certificate, each failed renewal. Every wait is
//! bounded.

mod csr;
mod tls_answer;

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use csr::start_csr_controllers;
use ferrokube_kubelet::bootstrap::{KUBELET_SERVING_SIGNER, NODES_GROUP, SERVING_USAGES};
use ferrokube_kubelet::cert_rotation::ServingCertManager;
use ferrokube_kubelet::metrics::CertificateMetrics;
use ferrokube_kubelet::server::tls_config_resolving;
use ferrokube_pki::CertInfo;
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::NodeAddress;
use kube::api::{Api, ListParams, PostParams};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NODE: &str = "serving-node-1";

/// The value of the unlabelled sample `name` on `metrics`' page now.
fn sample(metrics: &CertificateMetrics, name: &str) -> Option<String> {
    let mut page = String::new();
    metrics.render(&mut page, std::time::SystemTime::now());
    page.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")).map(str::to_owned))
}

/// Metrics of the test's own, apart from the process's.
fn own_metrics() -> &'static CertificateMetrics {
    Box::leak(Box::default())
}

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

fn address(type_: &str, a: &str) -> NodeAddress {
    NodeAddress {
        type_: type_.into(),
        address: a.into(),
    }
}

/// A TLS handshake with `addr` as 127.0.0.1, trusting only `ca_pem`: the leaf the
/// server presented.
async fn handshake(addr: std::net::SocketAddr, ca_pem: &str) -> anyhow::Result<Vec<u8>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
    let tls = tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp))
        .await
        .context("the handshake timed out")??;
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .context("the server presented no certificate")?;
    Ok(leaf.to_vec())
}

fn approved(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Approved"))
}

fn first_cert_der(path: &Path) -> anyhow::Result<Vec<u8>> {
    let pem = std::fs::read(path)?;
    let first = CertificateDer::pem_slice_iter(&pem)
        .next()
        .context("no certificate in the pair file")??;
    Ok(first.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serving_certificate_is_served_once_an_administrator_approves_it() -> anyhow::Result<()>
{
    let srv = TestApiServer::start().await?;
    let cancel = CancellationToken::new();
    let _kcm = start_csr_controllers(&srv, &cancel).await?;
    let ca_pem = std::fs::read_to_string(srv.dir().join("pki/ca.crt"))?;
    let dir = tempfile::tempdir()?;
    let cert_dir = dir.path().join("pki");

    let node = srv
        .client_as(&format!("system:node:{NODE}"), &[NODES_GROUP])
        .await?;
    let addresses = vec![
        address("InternalIP", "127.0.0.1"),
        address("InternalIP", "10.1.2.3"),
        address("ExternalDNS", "serving-node-1.example.com"),
        address("Hostname", NODE),
        address("InternalIP", "127.0.0.1"),
    ];
    let mut manager =
        ServingCertManager::new(node, &cert_dir, NODE, Arc::new(move || addresses.clone()))?;
    manager.set_certificate_wait(Duration::from_secs(120));
    let metrics = own_metrics();
    manager.set_metrics(metrics);
    let manager = Arc::new(manager);
    let slot = manager.slot().clone();
    assert!(slot.get().is_none(), "nothing is stored yet");
    const TTL: &str = "kubelet_certificate_manager_server_ttl_seconds";
    const ROTATIONS: &str = "kubelet_certificate_manager_server_rotation_seconds_count";
    assert_eq!(
        sample(metrics, TTL).as_deref(),
        Some("+Inf"),
        "no certificate yet"
    );
    assert_eq!(sample(metrics, ROTATIONS).as_deref(), Some("0"));
    let addr = tls_answer::serve(
        tls_config_resolving(slot.clone(), None, &Default::default())?,
        cancel.clone(),
    )
    .await?;
    tokio::spawn(manager.clone().run(cancel.clone()));

    // The request: the node's subject, the serving signer and usages, its addresses.
    let csrs: Api<CertificateSigningRequest> = Api::all(srv.client.clone());
    let csr = wait_for(30, "the kubelet-serving request", || async {
        Ok(csrs
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|c| c.spec.signer_name == KUBELET_SERVING_SIGNER))
    })
    .await?;
    let name = csr.metadata.name.clone().context("a name")?;
    ensure!(name.starts_with("csr-"), "generated name, got {name}");
    assert_eq!(
        csr.spec.usages.clone().unwrap_or_default(),
        SERVING_USAGES.map(String::from).to_vec()
    );
    assert_eq!(
        csr.spec.username.as_deref(),
        Some(format!("system:node:{NODE}").as_str())
    );
    let req = ferrokube_pki::csr::parse_request_pem(&csr.spec.request.0)?;
    assert_eq!(req.common_name, format!("system:node:{NODE}"));
    assert_eq!(req.organizations, vec![NODES_GROUP.to_string()]);
    assert_eq!(
        req.dns_names,
        vec![NODE.to_string(), "serving-node-1.example.com".to_string()]
    );
    assert_eq!(
        req.ip_addresses,
        vec![
            "10.1.2.3".parse::<IpAddr>()?,
            "127.0.0.1".parse::<IpAddr>()?
        ]
    );

    // Not approved by kube-controller-manager, so nothing is served meanwhile.
    ensure!(
        handshake(addr, &ca_pem).await.is_err(),
        "a handshake succeeded before any certificate was issued"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = csrs.get(&name).await?;
    ensure!(!approved(&now), "the serving request was auto-approved");
    ensure!(
        now.status
            .as_ref()
            .and_then(|s| s.certificate.as_ref())
            .is_none(),
        "an unapproved request was signed"
    );
    let current = cert_dir.join("kubelet-server-current.pem");
    ensure!(!current.exists(), "a pair was stored before approval");
    ensure!(handshake(addr, &ca_pem).await.is_err());

    // `kubectl certificate approve`: an Approved condition through /approval.
    let mut approve = now;
    approve
        .status
        .get_or_insert_with(Default::default)
        .conditions = Some(vec![serde_json::from_value(json!({
        "type": "Approved", "status": "True", "reason": "KubectlApprove",
        "message": "This CSR was approved by kubectl certificate approve."
    }))?]);
    csrs.replace_subresource("approval", &name, &PostParams::default(), &approve)
        .await?;

    // Signed, stored, then presented by the running server.
    wait_for(30, "kubelet-server-current.pem", || async {
        Ok(current.exists().then_some(()))
    })
    .await?;
    let stored = first_cert_der(&current)?;
    let issued = csrs
        .get(&name)
        .await?
        .status
        .and_then(|s| s.certificate)
        .context("the approved request has no certificate")?;
    let issued_first = CertificateDer::pem_slice_iter(&issued.0)
        .next()
        .context("no certificate issued")??;
    assert_eq!(
        stored,
        issued_first.to_vec(),
        "the store holds the issued certificate"
    );
    let leaf = wait_for(
        30,
        "a handshake presenting the issued certificate",
        || async { Ok(handshake(addr, &ca_pem).await.ok()) },
    )
    .await?;
    assert_eq!(
        leaf, stored,
        "the served leaf is the issued one (same serial)"
    );
    let info = CertInfo::from_der(&leaf)?;
    assert_eq!(
        info.common_name.as_deref(),
        Some(format!("system:node:{NODE}").as_str())
    );
    assert_eq!(info.organizations, vec![NODES_GROUP.to_string()]);
    let mut dns = info.dns_sans.clone();
    dns.sort();
    assert_eq!(
        dns,
        vec![NODE.to_string(), "serving-node-1.example.com".to_string()]
    );
    let mut ips = info.ip_sans.clone();
    ips.sort();
    assert_eq!(
        ips,
        vec![
            "10.1.2.3".parse::<IpAddr>()?,
            "127.0.0.1".parse::<IpAddr>()?
        ]
    );
    assert!(
        info.server_auth && !info.client_auth,
        "a serving certificate"
    );
    let file_mode = {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(&current)?.permissions().mode() & 0o777
    };
    assert_eq!(file_mode, 0o600);

    // Its TTL is the served certificate's; the first one replaced nothing, and the
    // attempt waited for approval rather than failing.
    let ttl: f64 = sample(metrics, TTL).context("a TTL")?.parse()?;
    let left = info
        .not_after
        .duration_since(std::time::SystemTime::now())?
        .as_secs_f64();
    ensure!(
        ttl > 0.0 && (ttl - left).abs() <= 2.0,
        "TTL {ttl}, {left} s left"
    );
    assert_eq!(sample(metrics, ROTATIONS).as_deref(), Some("0"));
    assert_eq!(metrics.server_renew_errors(), 0);

    // A renewal replaces it: its age at replacement is observed once it is issued.
    let renewal = tokio::spawn({
        let manager = manager.clone();
        async move { manager.rotate().await }
    });
    let second = wait_for(30, "a second kubelet-serving request", || async {
        Ok(csrs
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|c| {
                c.spec.signer_name == KUBELET_SERVING_SIGNER
                    && c.metadata.name != Some(name.clone())
            }))
    })
    .await?;
    let mut approve = second;
    approve
        .status
        .get_or_insert_with(Default::default)
        .conditions = Some(vec![serde_json::from_value(json!({
        "type": "Approved", "status": "True", "reason": "KubectlApprove",
        "message": "This CSR was approved by kubectl certificate approve."
    }))?]);
    let second_name = approve.metadata.name.clone().context("a name")?;
    csrs.replace_subresource("approval", &second_name, &PostParams::default(), &approve)
        .await?;
    tokio::time::timeout(Duration::from_secs(60), renewal).await???;
    assert_eq!(sample(metrics, ROTATIONS).as_deref(), Some("1"));
    assert_eq!(metrics.server_renew_errors(), 0);
    let stored = first_cert_der(&current)?;

    // A second manager on the same cert dir serves the stored pair at once.
    let node = srv
        .client_as(&format!("system:node:{NODE}"), &[NODES_GROUP])
        .await?;
    let mut again = ServingCertManager::new(node, &cert_dir, NODE, Arc::new(Vec::new))?;
    let again_metrics = own_metrics();
    again.set_metrics(again_metrics);
    let again_leaf = again.slot().get().context("the stored pair is loaded")?;
    assert_eq!(again_leaf.info.der, stored);
    // Without an address there is nothing to ask for: a failed renewal.
    ensure!(
        again.rotate().await.is_err(),
        "a request without a template"
    );
    assert_eq!(again_metrics.server_renew_errors(), 1);
    assert_eq!(
        sample(again_metrics, "kubelet_server_expiration_renew_errors").as_deref(),
        Some("1")
    );

    cancel.cancel();
    srv.stop().await;
    Ok(())
}
