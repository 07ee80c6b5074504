//! Kubelet client certificate rotation against the test apiserver, set up as kubeadm
//! leaves a cluster: the `kubeadm:node-autoapprove-certificate-rotation` binding of
//! `system:nodes` to the selfnodeclient ClusterRole, and kube-controller-manager's
//! csrapproving and csrsigning controllers signing with the test cluster CA.
//!
//! The node starts with a certificate already past its rotation deadline and close to
//! expiring. It must ask for a new one with a new key (a `csr-` request made as the
//! node, auto-approved as a renewal), store it and switch the current symlink, present
//! it at once (the old certificate carries an extra group, so SelfSubjectReview tells
//! the two apart), close the watch dialed with the old one, and keep working, watch
//! included, after the old certificate has expired. A kubeconfig with inline data is
//! stored and rotated at once; a renewal nobody approves yet is retried. Every wait is
//! bounded.

mod csr;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail, ensure};
use base64::Engine as _;
use csr::start_csr_controllers;
use ferrokube_kubelet::bootstrap::{
    BootstrapCluster, CLIENT_USAGES, KUBELET_CLIENT_SIGNER, NODES_GROUP, current_file_name,
    kubeconfig_yaml, pair_pem,
};
use ferrokube_kubelet::cert_rotation::{ClientCertManager, InitialSource, RotationOptions};
use ferrokube_kubelet::metrics::CertificateMetrics;
use ferrokube_pki::{CertInfo, CertificateAuthority, Validity};
use ferrokube_testing::TestApiServer;
use futures::StreamExt as _;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NODE: &str = "rot-node-1";
/// A group only the first certificate has.
const MARKER: &str = "ferrokube:first-certificate";

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

/// kubeadm's binding that lets nodes' renewals be auto-approved.
async fn allow_renewals(srv: &TestApiServer) -> anyhow::Result<()> {
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "kubeadm:node-autoapprove-certificate-rotation"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": NODES_GROUP}]
    }))?;
    Api::<ClusterRoleBinding>::all(srv.client.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}

fn test_ca(srv: &TestApiServer) -> anyhow::Result<CertificateAuthority> {
    let pki = srv.dir().join("pki");
    Ok(CertificateAuthority::load(
        &std::fs::read_to_string(pki.join("ca.crt"))?,
        &std::fs::read_to_string(pki.join("ca.key"))?,
    )?)
}

/// The node's first certificate: CN and O as the bootstrap asks, plus [`MARKER`].
fn first_certificate(
    srv: &TestApiServer,
    validity: Validity,
) -> anyhow::Result<ferrokube_pki::Issued> {
    Ok(test_ca(srv)?.issue_client_cert(
        &format!("system:node:{NODE}"),
        &[NODES_GROUP.into(), MARKER.into()],
        validity,
    )?)
}

fn cluster(srv: &TestApiServer) -> BootstrapCluster {
    BootstrapCluster {
        server: srv.url.clone(),
        ca_file: Some(srv.dir().join("pki/ca.crt")),
        ca_data: None,
        insecure_skip_tls_verify: false,
    }
}

/// The layout a bootstrapped node has: the pair in the store, the current symlink to
/// it, the kubeconfig naming the symlink.
fn bootstrapped_node(
    srv: &TestApiServer,
    dir: &Path,
    first: &ferrokube_pki::Issued,
) -> anyhow::Result<(PathBuf, PathBuf)> {
    let cert_dir = dir.join("pki");
    std::fs::create_dir_all(&cert_dir)?;
    let pem_file = cert_dir.join("kubelet-client-2020-01-01-00-00-00.pem");
    std::fs::write(
        &pem_file,
        pair_pem(first.cert_pem.as_bytes(), &first.key_pem)?,
    )?;
    let current = cert_dir.join(current_file_name());
    std::os::unix::fs::symlink(&pem_file, &current)?;
    let kubeconfig = dir.join("kubelet.conf");
    std::fs::write(&kubeconfig, kubeconfig_yaml(&cluster(srv), &current))?;
    Ok((kubeconfig, pem_file))
}

async fn load_config(kubeconfig: &Path) -> anyhow::Result<kube::Config> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    Ok(
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?,
    )
}

/// Who the apiserver says `client` is: user name and groups.
async fn whoami(client: &kube::Client) -> anyhow::Result<(String, Vec<String>)> {
    let review: SelfSubjectReview = serde_json::from_value(json!({}))?;
    let me = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    let user = me.status.and_then(|s| s.user_info).unwrap_or_default();
    Ok((
        user.username.unwrap_or_default(),
        user.groups.unwrap_or_default(),
    ))
}

/// The node's renewal requests (`csr-…`, made by the node).
async fn renewals(srv: &TestApiServer) -> anyhow::Result<Vec<CertificateSigningRequest>> {
    let csrs: Api<CertificateSigningRequest> = Api::all(srv.client.clone());
    Ok(csrs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("csr-"))
        })
        .collect())
}

/// Whether the watcher reports the node's `phase` label as `want` within 30 s.
async fn seen(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>, want: &str) -> bool {
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(p) = rx.recv().await {
            if p == want {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false)
}

/// Waits (60 s at most) until the manager's client presents another certificate than
/// `first`.
async fn wait_for_new_certificate(
    manager: &ClientCertManager,
    first: &ferrokube_pki::Issued,
) -> anyhow::Result<()> {
    let first_der = CertInfo::from_pem(&first.cert_pem)?.der;
    wait_for(60, "a new certificate to be installed", || async {
        let installed = manager.slot().get().context("no pair installed")?;
        Ok((installed.info.der != first_der).then_some(()))
    })
    .await
}

fn options(dir: &Path, kubeconfig: &Path, wait: Duration) -> RotationOptions {
    let mut o = RotationOptions::new(kubeconfig, dir.join("pki"), NODE);
    o.certificate_wait = wait;
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expiring_certificate_is_renewed_and_used_without_a_restart() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    allow_renewals(&srv).await?;
    let cancel = CancellationToken::new();
    let controllers = start_csr_controllers(&srv, &cancel).await?;
    let node: Node = serde_json::from_value(json!({"metadata": {"name": NODE}}))?;
    let admin_nodes: Api<Node> = Api::all(srv.client.clone());
    admin_nodes.create(&PostParams::default(), &node).await?;

    // Issued an hour ago, expiring in 45 s: long past 70–90 % of its lifetime.
    let dir = tempfile::tempdir()?;
    let now = SystemTime::now();
    let old_expiry = now + Duration::from_secs(45);
    let first = first_certificate(
        &srv,
        Validity {
            not_before: now - Duration::from_secs(3600),
            not_after: old_expiry,
        },
    )?;
    let (kubeconfig, first_file) = bootstrapped_node(&srv, dir.path(), &first)?;
    let config = load_config(&kubeconfig).await?;
    let manager = ClientCertManager::new(
        &config,
        options(dir.path(), &kubeconfig, Duration::from_secs(30)),
    )?;
    assert_eq!(manager.initial_source(), InitialSource::Store);
    let deadline = manager.next_rotation_deadline(SystemTime::now());
    ensure!(
        deadline <= SystemTime::now(),
        "the first certificate is past its deadline ({deadline:?})"
    );
    let client = manager.client();

    // The first certificate is the one presented.
    let (user, groups) = whoami(&client).await?;
    assert_eq!(user, format!("system:node:{NODE}"));
    assert!(groups.iter().any(|g| g == MARKER), "{groups:?}");

    // A plain watch and a reconnecting watcher, both dialed with the first certificate.
    let nodes: Api<Node> = Api::all(client.clone());
    let mut raw = nodes
        .watch(
            &WatchParams::default()
                .fields(&format!("metadata.name={NODE}"))
                .timeout(290),
            "0",
        )
        .await?
        .boxed();
    let (raw_done_tx, raw_done_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        loop {
            match raw.next().await {
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    let _ = raw_done_tx.send(format!("error: {e}"));
                    return;
                }
                None => {
                    let _ = raw_done_tx.send("ended".to_string());
                    return;
                }
            }
        }
    });
    let (labels_tx, mut labels_rx) = tokio::sync::mpsc::unbounded_channel();
    let watched = nodes.clone();
    let watcher_task = tokio::spawn(async move {
        let cfg = watcher::Config::default().fields(&format!("metadata.name={NODE}"));
        let mut stream = watcher(watched, cfg).default_backoff().boxed();
        while let Some(event) = stream.next().await {
            if let Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = event {
                let phase = n
                    .metadata
                    .labels
                    .and_then(|l| l.get("phase").cloned())
                    .unwrap_or_default();
                let _ = labels_tx.send(phase);
            }
        }
    });
    let set_phase = |phase: &'static str| {
        let api = admin_nodes.clone();
        async move {
            api.patch(
                NODE,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"phase": phase}}})),
            )
            .await
        }
    };
    set_phase("before").await?;
    ensure!(
        seen(&mut labels_rx, "before").await,
        "the watcher saw the first change"
    );

    // The rotation runs at once; the new pair is installed after it is stored.
    tokio::spawn(manager.clone().run(cancel.clone()));
    wait_for_new_certificate(&manager, &first).await?;
    let current = dir.path().join("pki").join(current_file_name());
    let new_file = std::fs::read_link(&current)?;
    assert_ne!(new_file, first_file, "the current symlink switched");

    // The request: generated name, made by the node, the kubelet's signer and usages,
    // approved as a node renewing itself.
    let reqs = renewals(&srv).await?;
    assert_eq!(reqs.len(), 1, "one renewal request");
    let req = &reqs[0];
    assert_eq!(
        req.spec.username.as_deref(),
        Some(format!("system:node:{NODE}").as_str())
    );
    assert!(
        req.spec
            .groups
            .clone()
            .unwrap_or_default()
            .iter()
            .any(|g| g == MARKER),
        "made with the first certificate"
    );
    assert_eq!(req.spec.signer_name, KUBELET_CLIENT_SIGNER);
    assert_eq!(req.spec.usages.clone().unwrap_or_default(), CLIENT_USAGES);
    let conditions = req
        .status
        .clone()
        .and_then(|s| s.conditions)
        .unwrap_or_default();
    assert!(
        conditions.iter().any(|c| c.type_ == "Approved"
            && c.reason.as_deref() == Some("AutoApproved")
            && c.message
                .as_deref()
                .is_some_and(|m| m.contains("self kubelet"))),
        "{conditions:?}"
    );

    // The store: a new pair with a new key, the old one left.
    let pair = std::fs::read_to_string(&new_file)?;
    let info = CertInfo::from_pem(&pair)?;
    let key_at = pair
        .find("-----BEGIN PRIVATE KEY-----")
        .context("the pair has no key")?;
    assert!(info.matches_key(&pair[key_at..]));
    assert!(!info.matches_key(&first.key_pem), "a new key");
    assert_eq!(
        info.common_name.as_deref(),
        Some(format!("system:node:{NODE}").as_str())
    );
    assert_eq!(info.organizations, [NODES_GROUP]);
    assert!(info.not_after > old_expiry + Duration::from_secs(3600));
    assert!(first_file.exists());
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&new_file)?.permissions().mode() & 0o777,
        0o600
    );
    let installed = manager.slot().get().context("a pair is installed")?;
    assert_eq!(installed.info.der, info.der);

    // The watch dialed with the first certificate was closed.
    let how = tokio::time::timeout(Duration::from_secs(10), raw_done_rx)
        .await
        .context("the old watch connection stayed open")??;
    tracing::info!("the old watch {how}");

    // The next request handshakes with the new certificate.
    let (user, groups) = whoami(&client).await?;
    assert_eq!(user, format!("system:node:{NODE}"));
    assert!(!groups.iter().any(|g| g == MARKER), "{groups:?}");
    assert!(groups.iter().any(|g| g == NODES_GROUP), "{groups:?}");

    // Past the first certificate's expiry requests and the watcher still work.
    let left = old_expiry
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    tokio::time::sleep(left + Duration::from_secs(1)).await;
    let (_, groups) = whoami(&client).await?;
    assert!(!groups.iter().any(|g| g == MARKER), "{groups:?}");
    set_phase("after-expiry").await?;
    ensure!(
        seen(&mut labels_rx, "after-expiry").await,
        "the watcher came back with the new certificate"
    );
    // No second renewal: the new certificate's deadline is months away.
    assert_eq!(renewals(&srv).await?.len(), 1);

    cancel.cancel();
    watcher_task.abort();
    let _ = tokio::time::timeout(Duration::from_secs(10), controllers.wait()).await;
    srv.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_kubeconfig_data_is_stored_and_rotated_at_once() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    allow_renewals(&srv).await?;
    let cancel = CancellationToken::new();
    let controllers = start_csr_controllers(&srv, &cancel).await?;

    // kubeadm's kubelet.conf on a control-plane node: a long-lived pair inline.
    let dir = tempfile::tempdir()?;
    let first = first_certificate(&srv, Validity::leaf_default())?;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let ca = std::fs::read_to_string(srv.dir().join("pki/ca.crt"))?;
    let kubeconfig = dir.path().join("kubelet.conf");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\n\
             users:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n\
             contexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\ncurrent-context: ctx\n",
            srv.url,
            b64(&ca),
            b64(&first.cert_pem),
            b64(&first.key_pem)
        ),
    )?;
    let before = std::fs::read_to_string(&kubeconfig)?;
    let config = load_config(&kubeconfig).await?;
    let manager = ClientCertManager::new(
        &config,
        options(dir.path(), &kubeconfig, Duration::from_secs(30)),
    )?;
    assert_eq!(manager.initial_source(), InitialSource::KubeconfigData);
    let current = dir.path().join("pki").join(current_file_name());
    let stored = CertInfo::from_pem(&std::fs::read_to_string(&current)?)?;
    assert_eq!(
        stored.der,
        CertInfo::from_pem(&first.cert_pem)?.der,
        "the data was stored"
    );
    let client = manager.client();
    let (_, groups) = whoami(&client).await?;
    assert!(groups.iter().any(|g| g == MARKER), "{groups:?}");

    // Valid for a year, and still rotated at once.
    tokio::spawn(manager.clone().run(cancel.clone()));
    wait_for_new_certificate(&manager, &first).await?;
    // Compared by content: within the same second the store's timestamped name is the
    // same (upstream's second-resolution names), and the new pair replaces the file.
    let now_current = CertInfo::from_pem(&std::fs::read_to_string(&current)?)?;
    assert_ne!(now_current.der, stored.der);
    assert_eq!(
        manager.slot().get().context("installed")?.info.der,
        now_current.der
    );
    let (_, groups) = whoami(&client).await?;
    assert!(!groups.iter().any(|g| g == MARKER), "{groups:?}");
    assert_eq!(renewals(&srv).await?.len(), 1);
    assert_eq!(
        std::fs::read_to_string(&kubeconfig)?,
        before,
        "the kubeconfig is left alone"
    );

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), controllers.wait()).await;
    srv.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_nobody_approves_is_retried() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let cancel = CancellationToken::new();
    let controllers = start_csr_controllers(&srv, &cancel).await?;
    let dir = tempfile::tempdir()?;
    // Issued an hour ago, expiring in 3 min: its rotation deadline (70-90 % of the
    // lifetime, at most 56.7 min in) has passed whatever the jitter. With 10 min left,
    // the deadline could still be up to 3 min away and no attempt came in time.
    let now = SystemTime::now();
    let first = first_certificate(
        &srv,
        Validity {
            not_before: now - Duration::from_secs(3600),
            not_after: now + Duration::from_secs(180),
        },
    )?;
    let (kubeconfig, first_file) = bootstrapped_node(&srv, dir.path(), &first)?;
    let config = load_config(&kubeconfig).await?;
    // Each attempt waits 2 s for its request; without the binding none is approved.
    let mut opts = options(dir.path(), &kubeconfig, Duration::from_secs(2));
    let metrics: &'static CertificateMetrics = Box::leak(Box::default());
    opts.metrics = metrics;
    let manager = ClientCertManager::new(&config, opts)?;
    let ttl = || -> anyhow::Result<f64> {
        let mut page = String::new();
        metrics.render(&mut page, SystemTime::now());
        Ok(page
            .lines()
            .find_map(|l| l.strip_prefix("kubelet_certificate_manager_client_ttl_seconds "))
            .context("no client TTL")?
            .parse()?)
    };
    let first_ttl = ttl()?;
    ensure!(
        (170.0..=180.0).contains(&first_ttl),
        "the first certificate's TTL: {first_ttl}"
    );
    assert_eq!(metrics.client_renew_errors(), 0);
    tokio::spawn(manager.clone().run(cancel.clone()));
    wait_for(20, "a second attempt", || async {
        Ok((renewals(&srv).await?.len() >= 2).then_some(()))
    })
    .await?;
    let current = dir.path().join("pki").join(current_file_name());
    assert_eq!(std::fs::read_link(&current)?, first_file, "nothing issued");
    // The first attempt's request was never approved: a renewal error.
    ensure!(
        metrics.client_renew_errors() >= 1,
        "renewal errors: {}",
        metrics.client_renew_errors()
    );

    // Once renewals may be approved, a later attempt gets its certificate.
    allow_renewals(&srv).await?;
    wait_for_new_certificate(&manager, &first).await?;
    assert_ne!(std::fs::read_link(&current)?, first_file);
    let (_, groups) = whoami(&manager.client()).await?;
    assert!(!groups.iter().any(|g| g == MARKER), "{groups:?}");
    // The TTL is the new certificate's.
    let renewed = manager.slot().get().context("a certificate")?;
    let left = renewed
        .info
        .not_after
        .duration_since(SystemTime::now())?
        .as_secs_f64();
    let new_ttl = ttl()?;
    ensure!(
        new_ttl > 180.0 && (new_ttl - left).abs() <= 2.0,
        "TTL {new_ttl}, {left} s left"
    );

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), controllers.wait()).await;
    srv.stop().await;
    Ok(())
}
