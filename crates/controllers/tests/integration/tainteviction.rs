//! The taint eviction controller on the test apiserver, alone (no node lifecycle
//! controller): a NoExecute taint put on a node as `kubectl taint` puts it (no
//! `timeAdded`) evicts the node's pods that do not tolerate it at once, those that
//! tolerate it for a while once that while has passed, and never those that tolerate
//! it for ever. Every wait is bounded in time.

use crate::support;

use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::wait_for;
use tokio_util::sync::CancellationToken;

fn evicted(p: &Pod) -> bool {
    let marked = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "DisruptionTarget"
                    && c.status == "True"
                    && c.reason.as_deref() == Some("DeletionByTaintManager")
            })
        });
    marked && p.metadata.deletion_timestamp.is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_execute_taint_evicts_the_pods_that_do_not_tolerate_it() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let cfg = ManagerConfig {
        controllers: vec!["taint-eviction-controller".into()],
        ..Default::default()
    };
    let manager = Manager::start(c.clone(), &cfg, cancel.clone()).await?;
    assert_eq!(manager.enabled, vec!["taint-eviction-controller"]);

    let nodes: Api<Node> = Api::all(c.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "n1"}}))?,
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let toleration = |seconds: Option<i64>| -> Value {
        let mut t =
            json!({"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoExecute"});
        if let Some(s) = seconds {
            t["tolerationSeconds"] = json!(s);
        }
        t
    };
    for (name, tolerations) in [
        ("plain", json!([])),
        ("short", json!([toleration(Some(2))])),
        ("forever", json!([toleration(None)])),
    ] {
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "img"}],
                         "tolerations": tolerations},
            }))?,
        )
        .await?;
    }
    // As `kubectl taint nodes n1 dedicated=db:NoExecute`.
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [
                {"key": "dedicated", "value": "db", "effect": "NoExecute"}]}})),
        )
        .await?;

    wait_for(30, "plain evicted", || async {
        Ok(pods
            .get_opt("plain")
            .await?
            .is_none_or(|p| evicted(&p))
            .then_some(()))
    })
    .await?;
    wait_for(30, "short evicted once its 2 s passed", || async {
        Ok(pods
            .get_opt("short")
            .await?
            .is_none_or(|p| evicted(&p))
            .then_some(()))
    })
    .await?;
    let forever = pods.get("forever").await?;
    assert!(forever.metadata.deletion_timestamp.is_none());
    wait_for(20, "the TaintManagerEviction event about plain", || async {
        let events = ferrokube_testing::core_events_about(&c, "plain").await?;
        let found = events.iter().any(|e| {
            e.reason.as_deref() == Some("TaintManagerEviction")
                && e.message.as_deref() == Some("Marking for deletion Pod default/plain")
                && e.source.as_ref().and_then(|s| s.component.as_deref())
                    == Some("taint-eviction-controller")
                // Upstream's controllers record with a component and no host.
                && e.source.as_ref().is_some_and(|s| s.host.is_none())
                && e.reporting_instance.as_deref().unwrap_or_default().is_empty()
        });
        Ok(found.then_some(()))
    })
    .await?;
    cancel.cancel();
    manager.wait().await;
    Ok(())
}
