//! The tokens controller on the test apiserver, signing with the test PKI's `sa.key`
//! (the key the server verifies with): a `kubernetes.io/service-account-token`
//! Secret gets its legacy token, which authenticates as the ServiceAccount until the
//! Secret is deleted, and then leaves its account's `secrets`; token Secrets of
//! missing or deleted accounts are deleted.
//! Every wait is bounded.

use crate::support;

use std::time::Duration;

use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::wait_for;
use tokio_util::sync::CancellationToken;

fn token_secret(name: &str, account: &str) -> anyhow::Result<Secret> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name,
                     "annotations": {"kubernetes.io/service-account.name": account}},
        "type": "kubernetes.io/service-account-token"
    }))?)
}

fn account(name: &str) -> anyhow::Result<ServiceAccount> {
    Ok(serde_json::from_value(json!({"metadata": {"name": name}}))?)
}

/// The Secret once the controller filled its token.
async fn filled(secrets: &Api<Secret>, name: &str) -> anyhow::Result<Secret> {
    wait_for(30, "the token filled in", || async {
        let s = secrets.get(name).await?;
        let has_token = s
            .data
            .as_ref()
            .is_some_and(|d| d.get("token").is_some_and(|t| !t.0.is_empty()));
        Ok(has_token.then_some(s))
    })
    .await
}

fn utc_date() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%d")
        .to_string()
}

fn data(secret: &Secret, key: &str) -> String {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone());
    String::from_utf8(bytes.unwrap_or_default()).unwrap_or_default()
}

#[tokio::test]
async fn token_secrets_get_legacy_tokens_that_authenticate() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let pki = srv.dir().join("pki");
    let ca = std::fs::read_to_string(pki.join("ca.crt"))?;
    let cfg = ManagerConfig {
        controllers: vec!["serviceaccount-token".into()],
        service_account_private_key: Some(std::fs::read_to_string(pki.join("sa.key"))?),
        root_ca: Some(ca.clone()),
        ..Default::default()
    };
    let cancel = CancellationToken::new();
    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    let manager = Manager::start(manager_client, &cfg, cancel.clone()).await?;

    let accounts: Api<ServiceAccount> = Api::namespaced(c.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();
    let builder = accounts.create(&pp, &account("builder")?).await?;
    secrets
        .create(&pp, &token_secret("builder-token", "builder")?)
        .await?;
    let secret = filled(&secrets, "builder-token").await?;
    assert_eq!(data(&secret, "namespace"), "default");
    assert_eq!(data(&secret, "ca.crt"), ca);
    assert_eq!(
        secret.metadata.annotations.as_ref().unwrap()["kubernetes.io/service-account.uid"],
        builder.metadata.uid.clone().unwrap()
    );

    // The token authenticates as the account (kubectl auth whoami's request).
    let day_before = utc_date();
    let token = data(&secret, "token");
    let as_builder = srv.client_with_token(&token).await?;
    let review: SelfSubjectReview = serde_json::from_value(json!({}))?;
    let me = Api::<SelfSubjectReview>::all(as_builder.clone())
        .create(&pp, &review)
        .await?;
    let user = me.status.unwrap().user_info.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:default:builder")
    );
    assert_eq!(user.uid, builder.metadata.uid);
    assert_eq!(
        user.groups.unwrap(),
        [
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ]
    );

    // The apiserver notes the day the legacy token was used (upstream's label).
    let day_after = utc_date();
    wait_for(30, "the last-used label on the Secret", || async {
        let s = secrets.get("builder-token").await?;
        let label = s
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/legacy-token-last-used").cloned());
        // The request's day: the one before it or, across midnight, the one after.
        Ok(label
            .filter(|d| *d == day_before || *d == day_after)
            .map(|_| ()))
    })
    .await?;

    // A token Secret for an account that does not exist is deleted.
    secrets
        .create(&pp, &token_secret("ghost-token", "ghost")?)
        .await?;
    wait_for(30, "the ghost's token Secret deleted", || async {
        Ok(secrets
            .get_opt("ghost-token")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;

    // The account lists its token Secret (as older clusters did) and another one.
    let listed = json!({"secrets": [{"name": "builder-token"}, {"name": "pull-secret"}]});
    accounts
        .patch("builder", &PatchParams::default(), &Patch::Merge(&listed))
        .await?;

    // Deleting the Secret revokes the token: 401 once the server's cache has it gone.
    secrets
        .delete("builder-token", &DeleteParams::default())
        .await?;
    // And its reference goes from the account; the other stays.
    wait_for(30, "the deleted Secret's reference pruned", || async {
        let sa = accounts.get("builder").await?;
        let names: Vec<String> = sa
            .secrets
            .unwrap_or_default()
            .into_iter()
            .filter_map(|r| r.name)
            .collect();
        Ok((names == ["pull-secret"]).then_some(()))
    })
    .await?;
    let reviews = Api::<SelfSubjectReview>::all(as_builder);
    wait_for(30, "the token refused after its Secret went", || async {
        match reviews.create(&pp, &review).await {
            Err(kube::Error::Api(s)) if s.code == 401 => Ok(Some(())),
            _ => Ok(None),
        }
    })
    .await?;

    // Deleting an account deletes its token Secrets.
    accounts.create(&pp, &account("temp")?).await?;
    secrets
        .create(&pp, &token_secret("temp-token", "temp")?)
        .await?;
    filled(&secrets, "temp-token").await?;
    accounts.delete("temp", &DeleteParams::default()).await?;
    wait_for(30, "the deleted account's token Secret deleted", || async {
        Ok(secrets.get_opt("temp-token").await?.is_none().then_some(()))
    })
    .await?;

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}
