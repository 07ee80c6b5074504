//! The EndpointSlice mirroring controller on the test apiserver, running under its
//! own ServiceAccount (so its bootstrap role is exercised too). Every wait is bounded.

use crate::support;

use std::time::Duration;

use ferrokube_controllers::endpointslicemirroring::CONTROLLER_NAME;
use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::wait_for;
use tokio_util::sync::CancellationToken;

/// The mirrored slices of `service`: their endpoints' (ip, ready), sorted.
async fn mirrored(c: &kube::Client, service: &str) -> anyhow::Result<Vec<(String, bool)>> {
    let api: Api<EndpointSlice> = Api::namespaced(c.clone(), "default");
    let selector = format!(
        "endpointslice.kubernetes.io/managed-by={CONTROLLER_NAME},kubernetes.io/service-name={service}"
    );
    let mut out: Vec<(String, bool)> = api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .iter()
        .flat_map(|s| s.endpoints.clone())
        .map(|e| {
            let ready = e.conditions.and_then(|c| c.ready).unwrap_or(false);
            (e.addresses[0].clone(), ready)
        })
        .collect();
    out.sort();
    Ok(out)
}

fn endpoints(
    name: &str,
    ready: &[&str],
    not_ready: &[&str],
    skip: bool,
) -> anyhow::Result<Endpoints> {
    let addrs = |ips: &[&str]| ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>();
    let labels = if skip {
        json!({"endpointslice.kubernetes.io/skip-mirror": "true"})
    } else {
        json!({})
    };
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "subsets": [{"addresses": addrs(ready), "notReadyAddresses": addrs(not_ready),
                     "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]
    }))?)
}

fn service(name: &str, selector: bool) -> anyhow::Result<Service> {
    let mut spec = json!({"ports": [{"name": "http", "port": 80, "targetPort": 8080}]});
    if selector {
        spec["selector"] = json!({"app": name});
    }
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name}, "spec": spec}),
    )?)
}

#[tokio::test]
async fn custom_endpoints_are_mirrored_into_slices() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let cfg = ManagerConfig {
        controllers: vec!["endpointslicemirroring".into()],
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        ..Default::default()
    };
    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    let manager = Manager::start(manager_client, &cfg, cancel.clone()).await?;
    let svcs: Api<Service> = Api::namespaced(c.clone(), "default");
    let eps: Api<Endpoints> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();

    // Not mirrored: a Service with a selector, and Endpoints labelled skip-mirror.
    svcs.create(&pp, &service("sel", true)?).await?;
    eps.create(&pp, &endpoints("sel", &["10.0.0.9"], &[], false)?)
        .await?;
    svcs.create(&pp, &service("skip", false)?).await?;
    eps.create(&pp, &endpoints("skip", &["10.0.0.8"], &[], true)?)
        .await?;

    // Mirrored: a Service without a selector and its custom Endpoints.
    svcs.create(&pp, &service("ext", false)?).await?;
    eps.create(&pp, &endpoints("ext", &["10.0.0.1"], &["10.0.0.2"], false)?)
        .await?;
    let want = vec![
        ("10.0.0.1".to_string(), true),
        ("10.0.0.2".to_string(), false),
    ];
    wait_for(30, "ext mirrored", || async {
        Ok((mirrored(&c, "ext").await? == want).then_some(()))
    })
    .await?;
    let slice = Api::<EndpointSlice>::namespaced(c.clone(), "default")
        .list(&ListParams::default().labels("kubernetes.io/service-name=ext"))
        .await?
        .items
        .remove(0);
    let port = &slice.ports.clone().unwrap_or_default()[0];
    assert_eq!(
        (port.name.as_deref(), port.port),
        (Some("http"), Some(8080))
    );
    assert_eq!(slice.address_type, "IPv4");

    // Changes follow.
    eps.replace("ext", &pp, &{
        let mut e = eps.get("ext").await?;
        e.subsets = endpoints("ext", &["10.0.0.1", "10.0.0.2", "10.0.0.3"], &[], false)?.subsets;
        e
    })
    .await?;
    let want: Vec<(String, bool)> = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
        .iter()
        .map(|ip| (ip.to_string(), true))
        .collect();
    wait_for(30, "ext updated", || async {
        Ok((mirrored(&c, "ext").await? == want).then_some(()))
    })
    .await?;
    // Another port: the slice of the old port set is rewritten for the new one
    // (upstream's finalize reuses it), not deleted for a new slice.
    eps.replace("ext", &pp, &{
        let mut e = eps.get("ext").await?;
        let subsets = e.subsets.as_mut().unwrap();
        subsets[0].ports.as_mut().unwrap()[0].port = 9090;
        e
    })
    .await?;
    let slices: Api<EndpointSlice> = Api::namespaced(c.clone(), "default");
    let renamed = wait_for(30, "ext on port 9090", || async {
        let items = slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=ext"))
            .await?
            .items;
        let on_9090 = items.len() == 1
            && items[0]
                .ports
                .as_ref()
                .is_some_and(|p| p[0].port == Some(9090));
        Ok(on_9090.then(|| items[0].metadata.name.clone()))
    })
    .await?;
    assert_eq!(renamed, slice.metadata.name);

    // The others were seen before ext's update was handled; none was mirrored.
    assert!(mirrored(&c, "sel").await?.is_empty());
    assert!(mirrored(&c, "skip").await?.is_empty());
    assert!(mirrored(&c, "kubernetes").await?.is_empty());

    // The Endpoints go: so do the slices. Back, then the Service goes: gone again.
    eps.delete("ext", &DeleteParams::default()).await?;
    wait_for(30, "ext slices deleted with the Endpoints", || async {
        Ok(mirrored(&c, "ext").await?.is_empty().then_some(()))
    })
    .await?;
    eps.create(&pp, &endpoints("ext", &["10.0.0.5"], &[], false)?)
        .await?;
    wait_for(30, "ext mirrored again", || async {
        Ok((mirrored(&c, "ext").await? == vec![("10.0.0.5".to_string(), true)]).then_some(()))
    })
    .await?;
    svcs.delete("ext", &DeleteParams::default()).await?;
    wait_for(30, "ext slices deleted with the Service", || async {
        Ok(mirrored(&c, "ext").await?.is_empty().then_some(()))
    })
    .await?;

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}
