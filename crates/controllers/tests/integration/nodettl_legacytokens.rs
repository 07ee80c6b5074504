//! The TTL controller and the legacy token cleaner against a real in-process
//! apiserver (which keeps the legacy token tracking ConfigMap the cleaner reads).
//! The cleaner runs under its own ServiceAccount, so its bootstrap role is checked
//! too; its clock is moved a year and more ahead, since a token must be unused for
//! a clean-up period. Every wait is bounded in time.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use ferrokube_client::informer::SharedInformerFactory;
use ferrokube_client::workqueue::WorkQueue;
use ferrokube_controllers::Controller;
use ferrokube_controllers::clientbuilder::ServiceAccountClients;
use ferrokube_controllers::legacytokencleaner::{
    DEFAULT_CLEAN_UP_PERIOD, LegacyTokenCleanerController, TRACKING_CONFIGMAP, TRACKING_SINCE_KEY,
};
use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_controllers::ttl::TTL_ANNOTATION;
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, ServiceAccount};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::wait_for;
use tokio_util::sync::CancellationToken;

const INVALID_SINCE: &str = "kubernetes.io/legacy-token-invalid-since";

fn ttl_of(node: &Node) -> Option<String> {
    node.metadata
        .annotations
        .as_ref()?
        .get(TTL_ANNOTATION)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_get_the_ttl_of_a_small_cluster_and_keep_it() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let cfg = ManagerConfig {
        controllers: vec!["ttl".into()],
        ..Default::default()
    };
    let manager = Manager::start(c.clone(), &cfg, cancel.clone()).await?;
    assert_eq!(manager.enabled, vec!["ttl-controller"]);
    let nodes: Api<Node> = Api::all(c.clone());
    for name in ["n1", "n2"] {
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}}))?,
            )
            .await?;
    }
    for name in ["n1", "n2"] {
        wait_for(30, &format!("{name}'s ttl annotation"), || async {
            Ok(ttl_of(&nodes.get(name).await?).filter(|t| t == "0"))
        })
        .await?;
    }
    // A value that is not a number is put right.
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {TTL_ANNOTATION: "zero"}}})),
        )
        .await?;
    wait_for(30, "n1's ttl restored", || async {
        Ok(ttl_of(&nodes.get("n1").await?).filter(|t| t == "0"))
    })
    .await?;
    cancel.cancel();
    manager.wait().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_legacy_tokens_are_invalidated_then_deleted() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();

    // The apiserver has started tracking today.
    let today = Timestamp::now()
        .to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC)
        .date()
        .to_string();
    let system_cms: Api<ConfigMap> = Api::namespaced(c.clone(), "kube-system");
    let since = wait_for(30, "the tracking ConfigMap", || async {
        Ok(system_cms
            .get_opt(TRACKING_CONFIGMAP)
            .await?
            .and_then(|cm| cm.data?.get(TRACKING_SINCE_KEY).cloned()))
    })
    .await?;
    assert_eq!(since, today);

    let sas: Api<ServiceAccount> = Api::namespaced(c.clone(), "default");
    let sa = sas
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "builder"}}))?,
        )
        .await?;
    let sa_uid = sa.metadata.uid.clone().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(c.clone(), "default");
    for name in ["unused", "mounted", "by-hand"] {
        secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": name, "annotations": {
                        "kubernetes.io/service-account.name": "builder",
                        "kubernetes.io/service-account.uid": sa_uid,
                    }},
                    "type": "kubernetes.io/service-account-token",
                }))?,
            )
            .await?;
    }
    // Auto-generated tokens are the ones their ServiceAccount lists.
    sas.patch(
        "builder",
        &PatchParams::default(),
        &Patch::Merge(json!({"secrets": [{"name": "unused"}, {"name": "mounted"}]})),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "user"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "volumes": [{"name": "t", "secret": {"secretName": "mounted"}}]},
        }))?,
    )
    .await?;

    let manager = srv.client_as("system:kube-controller-manager", &[]).await?;
    let accounts = ServiceAccountClients::new(srv.kube_config().await?, manager.clone(), None);
    let factory = SharedInformerFactory::new(manager);
    let days_ahead = Arc::new(AtomicI64::new(400));
    let clock_days = days_ahead.clone();
    let cleaner = LegacyTokenCleanerController::with_clock(
        &factory,
        accounts
            .client("legacy-service-account-token-cleaner")
            .await?,
        DEFAULT_CLEAN_UP_PERIOD,
        Box::new(move || {
            let ahead = SignedDuration::from_hours(24 * clock_days.load(Ordering::SeqCst));
            Timestamp::now() + ahead
        }),
    );
    cleaner.clone().watch(&factory, &WorkQueue::new("cleaner"));
    factory.start();
    factory.wait_for_cache_sync(Duration::from_secs(30)).await?;
    // Wait until the informers hold what was written above.
    let listed = factory.informer::<ServiceAccount>().store();
    let pod_store = factory.informer::<Pod>().store();
    wait_for(30, "the informers' view", || async {
        let sa = listed.get_by_name(Some("default"), "builder");
        let ready = sa.is_some_and(|sa| sa.secrets.as_ref().is_some_and(|s| s.len() == 2))
            && pod_store.get_by_name(Some("default"), "user").is_some();
        Ok(ready.then_some(()))
    })
    .await?;

    // 400 days on: the unused listed token is invalidated, the others are not.
    cleaner.reconcile("legacy-tokens").await?;
    let in_400_days = (Timestamp::now() + SignedDuration::from_hours(24 * 400))
        .to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC)
        .date()
        .to_string();
    let labels = |s: Secret| s.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels(secrets.get("unused").await?).get(INVALID_SINCE),
        Some(&in_400_days)
    );
    assert_eq!(
        labels(secrets.get("mounted").await?).get(INVALID_SINCE),
        None
    );
    assert_eq!(
        labels(secrets.get("by-hand").await?).get(INVALID_SINCE),
        None
    );

    // 800 days on, once the cleaner has seen its label: deleted.
    let secret_store = factory.informer::<Secret>().store();
    wait_for(30, "the label in the cleaner's view", || async {
        let seen = secret_store
            .get_by_name(Some("default"), "unused")
            .is_some_and(|s| labels((*s).clone()).contains_key(INVALID_SINCE));
        Ok(seen.then_some(()))
    })
    .await?;
    days_ahead.store(800, Ordering::SeqCst);
    cleaner.reconcile("legacy-tokens").await?;
    assert!(secrets.get_opt("unused").await?.is_none());
    assert!(secrets.get_opt("mounted").await?.is_some());
    assert!(secrets.get_opt("by-hand").await?.is_some());
    factory.shutdown().await;
    Ok(())
}
