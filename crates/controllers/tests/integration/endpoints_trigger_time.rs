//! `endpoints.kubernetes.io/last-change-trigger-time` on the Endpoints and the
//! EndpointSlices that the endpoint and endpointslice controllers write, on the test
//! apiserver, under their own ServiceAccounts. The pod's status is written by the
//! test (no kubelet), with chosen Ready transition times. Every wait is bounded.

use crate::support;

use ferrokube_controllers::endpointslice::trigger_time::{
    LAST_CHANGE_TRIGGER_TIME, format_rfc3339_nano,
};
use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::wait_for;
use tokio_util::sync::CancellationToken;

/// The annotation on the Endpoints `web` and on each of its managed slices (sorted),
/// with the slices' ready endpoint count.
async fn annotations(
    c: &kube::Client,
) -> anyhow::Result<(Option<String>, Vec<(Option<String>, usize)>)> {
    let eps: Api<Endpoints> = Api::namespaced(c.clone(), "default");
    let ep = eps.get_opt("web").await?.and_then(|e| {
        e.metadata
            .annotations
            .and_then(|a| a.get(LAST_CHANGE_TRIGGER_TIME).cloned())
    });
    let slices: Api<EndpointSlice> = Api::namespaced(c.clone(), "default");
    let mut s: Vec<(Option<String>, usize)> = slices
        .list(&ListParams::default().labels(
            "kubernetes.io/service-name=web,endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io",
        ))
        .await?
        .items
        .into_iter()
        .map(|s| {
            let ready = s
                .endpoints
                .iter()
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .count();
            let a = s
                .metadata
                .annotations
                .and_then(|a| a.get(LAST_CHANGE_TRIGGER_TIME).cloned());
            (a, ready)
        })
        .collect();
    s.sort();
    Ok((ep, s))
}

async fn set_ready(pods: &Api<Pod>, ready: bool, at: Timestamp) -> anyhow::Result<()> {
    let status = json!({"status": {
        "phase": "Running",
        "podIP": "10.88.0.7",
        "podIPs": [{"ip": "10.88.0.7"}],
        "conditions": [{
            "type": "Ready",
            "status": if ready { "True" } else { "False" },
            "lastTransitionTime": at.to_string(),
        }],
    }});
    pods.patch_status("web-0", &PatchParams::default(), &Patch::Merge(status))
        .await?;
    Ok(())
}

#[tokio::test]
async fn the_annotation_follows_the_latest_trigger() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let cfg = ManagerConfig {
        controllers: vec!["endpoint".into(), "endpointslice".into()],
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        ..Default::default()
    };
    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    let manager = Manager::start(manager_client, &cfg, cancel.clone()).await?;
    let pp = PostParams::default();

    // The Service's creation triggers the first write of both.
    let svcs: Api<Service> = Api::namespaced(c.clone(), "default");
    let svc = svcs
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"},
                         "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
            }))?,
        )
        .await?;
    let created = format_rfc3339_nano(svc.metadata.creation_timestamp.clone().unwrap().0);
    wait_for(30, "the Service's creation on both", || async {
        let (ep, slices) = annotations(&c).await?;
        Ok(
            (ep.as_deref() == Some(created.as_str()) && slices == vec![(Some(created.clone()), 0)])
                .then_some(()),
        )
    })
    .await?;

    // A pod turns ready at t1: both move to t1.
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    pods.create(
        &pp,
        &serde_json::from_value(json!({
            "metadata": {"name": "web-0", "labels": {"app": "web"}},
            "spec": {"nodeName": "node-a", "automountServiceAccountToken": false,
                     "containers": [{"name": "c", "image": "img",
                                     "ports": [{"containerPort": 8080}]}]}
        }))?,
    )
    .await?;
    let now = Timestamp::from_second(Timestamp::now().as_second())?;
    let t1 = now + k8s_openapi::jiff::SignedDuration::from_secs(1);
    set_ready(&pods, true, t1).await?;
    let want1 = format_rfc3339_nano(t1);
    assert_ne!(want1, created);
    wait_for(30, "the pod's ready transition on both", || async {
        let (ep, slices) = annotations(&c).await?;
        Ok(
            (ep.as_deref() == Some(want1.as_str()) && slices == vec![(Some(want1.clone()), 1)])
                .then_some(()),
        )
    })
    .await?;

    // It turns unready at t2: both move forward to t2.
    let t2 = now + k8s_openapi::jiff::SignedDuration::from_secs(3);
    set_ready(&pods, false, t2).await?;
    let want2 = format_rfc3339_nano(t2);
    wait_for(30, "the pod's unready transition on both", || async {
        let (ep, slices) = annotations(&c).await?;
        Ok(
            (ep.as_deref() == Some(want2.as_str()) && slices == vec![(Some(want2.clone()), 0)])
                .then_some(()),
        )
    })
    .await?;
    let ep: Endpoints = Api::namespaced(c.clone(), "default").get("web").await?;
    let subset = &ep.subsets.unwrap_or_default()[0];
    assert_eq!(
        subset
            .not_ready_addresses
            .as_ref()
            .map(|a| a[0].ip.as_str()),
        Some("10.88.0.7")
    );

    cancel.cancel();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}
