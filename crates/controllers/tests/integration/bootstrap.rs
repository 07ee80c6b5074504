//! The bootstrap token controllers (upstream `pkg/controller/bootstrap`) on the test
//! apiserver, each under its own ServiceAccount (so under the namespaced roles of the
//! bootstrap policy): the token cleaner deletes expired token Secrets and keeps the
//! others; the bootstrap signer keeps `kube-public/cluster-info` signed, with
//! signatures checked here independently of the controller's code. Every wait is
//! bounded.

use crate::support;

use std::time::Duration;

use base64::Engine as _;
use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::wait_for;
use tokio_util::sync::CancellationToken;

const B64URL: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

fn at(offset: SignedDuration) -> String {
    (Timestamp::now() + offset)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A Secret `name` in `ns` of `type_` with `string_data`.
async fn create_secret(
    c: &kube::Client,
    ns: &str,
    name: &str,
    type_: &str,
    string_data: Value,
) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(c.clone(), ns);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "type": type_,
        "stringData": string_data,
    }))?;
    secrets.create(&PostParams::default(), &secret).await?;
    Ok(())
}

async fn token_secret(c: &kube::Client, id: &str, extra: Value) -> anyhow::Result<()> {
    let mut data = json!({"token-id": id, "token-secret": format!("{id}0123456789")});
    if let (Some(d), Some(e)) = (data.as_object_mut(), extra.as_object()) {
        d.extend(e.clone());
    }
    create_secret(
        c,
        "kube-system",
        &format!("bootstrap-token-{id}"),
        "bootstrap.kubernetes.io/token",
        data,
    )
    .await
}

/// The manager running `controllers` as the controller-manager, each controller
/// writing with its own ServiceAccount, and what stops it.
async fn start(
    srv: &TestApiServer,
    controllers: &[&str],
) -> anyhow::Result<(Manager, CancellationToken)> {
    let cfg = ManagerConfig {
        controllers: controllers.iter().map(|c| c.to_string()).collect(),
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        ..Default::default()
    };
    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    let cancel = CancellationToken::new();
    let manager = Manager::start(manager_client, &cfg, cancel.clone()).await?;
    Ok((manager, cancel))
}

async fn stop(srv: TestApiServer, manager: Manager, cancel: CancellationToken) {
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
}

#[tokio::test]
async fn the_token_cleaner_deletes_expired_tokens_only() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let (manager, cancel) = start(&srv, &["tokencleaner"]).await?;
    assert_eq!(manager.enabled, vec!["token-cleaner-controller"]);

    let past = at(SignedDuration::from_hours(-1));
    token_secret(&c, "expird", json!({"expiration": past})).await?;
    token_secret(
        &c,
        "future",
        json!({"expiration": at(SignedDuration::from_hours(1))}),
    )
    .await?;
    token_secret(&c, "noexpr", json!({})).await?;
    // Due in a few seconds: deleted when it expires, with no other event.
    token_secret(
        &c,
        "soon00",
        json!({"expiration": at(SignedDuration::from_secs(3))}),
    )
    .await?;
    // Not bootstrap tokens (another type, another namespace): never touched.
    create_secret(
        &c,
        "kube-system",
        "bootstrap-token-opaque",
        "Opaque",
        json!({"expiration": past}),
    )
    .await?;
    create_secret(
        &c,
        "default",
        "bootstrap-token-elsewh",
        "bootstrap.kubernetes.io/token",
        json!({"expiration": past}),
    )
    .await?;

    let system: Api<Secret> = Api::namespaced(c.clone(), "kube-system");
    for name in ["bootstrap-token-expird", "bootstrap-token-soon00"] {
        wait_for(30, &format!("{name} deleted"), || {
            let system = system.clone();
            async move { Ok(system.get_opt(name).await?.is_none().then_some(())) }
        })
        .await?;
    }
    for name in [
        "bootstrap-token-future",
        "bootstrap-token-noexpr",
        "bootstrap-token-opaque",
    ] {
        assert!(system.get_opt(name).await?.is_some(), "{name} was deleted");
    }
    let default: Api<Secret> = Api::namespaced(c.clone(), "default");
    assert!(default.get_opt("bootstrap-token-elsewh").await?.is_some());
    stop(srv, manager, cancel).await;
    Ok(())
}

/// Checks `sig` as a verifier such as `kubeadm join` does, from the JWS spec rather
/// than the controller's code: `header..signature`, header `{"alg":"HS256","kid":id}`,
/// HMAC-SHA256 with the token secret over `base64url(header).base64url(content)`.
fn verify(sig: &str, content: &str, id: &str, token_secret: &str) -> anyhow::Result<()> {
    let parts: Vec<&str> = sig.split('.').collect();
    anyhow::ensure!(
        parts.len() == 3 && parts[1].is_empty(),
        "not a detached JWS: {sig}"
    );
    let header: Value = serde_json::from_slice(&B64URL.decode(parts[0])?)?;
    anyhow::ensure!(
        header == json!({"alg": "HS256", "kid": id}),
        "header {header}"
    );
    let input = format!("{}.{}", parts[0], B64URL.encode(content));
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, token_secret.as_bytes());
    ring::hmac::verify(&key, input.as_bytes(), &B64URL.decode(parts[2])?)
        .map_err(|_| anyhow::anyhow!("signature {sig} does not verify for {id}"))
}

fn jws_keys(cm: &ConfigMap) -> Vec<String> {
    cm.data
        .iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("jws-kubeconfig-"))
        .map(|(k, _)| k.clone())
        .collect()
}

/// Waits until cluster-info holds signatures for exactly `ids` (sorted).
async fn wait_signed(cms: &Api<ConfigMap>, ids: &[&str]) -> anyhow::Result<ConfigMap> {
    let want: Vec<String> = ids.iter().map(|i| format!("jws-kubeconfig-{i}")).collect();
    wait_for(30, &format!("cluster-info signed by {ids:?}"), || {
        let (cms, want) = (cms.clone(), want.clone());
        async move {
            let cm = cms.get("cluster-info").await?;
            Ok((jws_keys(&cm) == want).then_some(cm))
        }
    })
    .await
}

#[tokio::test]
async fn the_bootstrap_signer_keeps_cluster_info_signed() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let (manager, cancel) = start(&srv, &["bootstrapsigner"]).await?;
    assert_eq!(manager.enabled, vec!["bootstrap-signer-controller"]);

    let kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: ''\n  cluster:\n    server: https://10.0.0.1:6443\n";
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "kube-public");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "cluster-info", "namespace": "kube-public"},
            "data": {"kubeconfig": kubeconfig, "jws-kubeconfig-old000": "stale"},
        }))?,
    )
    .await?;
    token_secret(
        &c,
        "abcdef",
        json!({"usage-bootstrap-signing": "true", "expiration": at(SignedDuration::from_hours(1))}),
    )
    .await?;
    // Not for signing, or expired: no signature.
    token_secret(
        &c,
        "authon",
        json!({"usage-bootstrap-authentication": "true"}),
    )
    .await?;
    token_secret(
        &c,
        "expird",
        json!({"usage-bootstrap-signing": "true", "expiration": at(SignedDuration::from_hours(-1))}),
    )
    .await?;

    let cm = wait_signed(&cms, &["abcdef"]).await?;
    let data = cm.data.clone().unwrap_or_default();
    verify(
        &data["jws-kubeconfig-abcdef"],
        kubeconfig,
        "abcdef",
        "abcdef0123456789",
    )?;
    assert_eq!(data["kubeconfig"], kubeconfig);

    // Nothing changes: nothing is written.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let again = cms.get("cluster-info").await?;
    assert_eq!(
        again.metadata.resource_version,
        cm.metadata.resource_version
    );

    // A second token, and one that expires in a few seconds (its signature goes when
    // it expires, without the token cleaner).
    token_secret(&c, "second", json!({"usage-bootstrap-signing": "true"})).await?;
    token_secret(
        &c,
        "short0",
        json!({"usage-bootstrap-signing": "true", "expiration": at(SignedDuration::from_secs(3))}),
    )
    .await?;
    wait_signed(&cms, &["abcdef", "second", "short0"]).await?;
    let cm = wait_signed(&cms, &["abcdef", "second"]).await?;
    let data = cm.data.clone().unwrap_or_default();
    verify(
        &data["jws-kubeconfig-second"],
        kubeconfig,
        "second",
        "second0123456789",
    )?;

    // New content: signed again.
    let changed = format!("{kubeconfig}# changed\n");
    cms.patch(
        "cluster-info",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"kubeconfig": changed}})),
    )
    .await?;
    let changed_ref = changed.clone();
    let cm = wait_for(30, "cluster-info signed again", || {
        let (cms, changed) = (cms.clone(), changed_ref.clone());
        async move {
            let cm = cms.get("cluster-info").await?;
            let data = cm.data.clone().unwrap_or_default();
            let ok = data
                .get("jws-kubeconfig-abcdef")
                .is_some_and(|s| verify(s, &changed, "abcdef", "abcdef0123456789").is_ok());
            Ok(ok.then_some(cm))
        }
    })
    .await?;
    let data = cm.data.clone().unwrap_or_default();
    verify(
        &data["jws-kubeconfig-second"],
        &changed,
        "second",
        "second0123456789",
    )?;

    // A deleted token's signature goes.
    let system: Api<Secret> = Api::namespaced(c.clone(), "kube-system");
    system
        .delete("bootstrap-token-abcdef", &DeleteParams::default())
        .await?;
    wait_signed(&cms, &["second"]).await?;
    stop(srv, manager, cancel).await;
    Ok(())
}
